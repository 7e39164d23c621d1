// test_megakernel_gemv_emulation.cpp: the megakernel's int4 GEMV stage (gemv_blocks_body:
// solutions/decode/megakernel/stage_blocks.cuh over int4_mma_gemv.cuh and activation.cuh, the decode
// kernel's own code) run from its source on the CPU (emu_core.h, emu_async.h: the weight ring's bulk
// copies and mbarriers, the warps' shuffles, mma.sync m16n8k32 u8 x s8 from the PTX fragment table),
// on weights packed here from megakernel.h's description of the unit layout (an independent packer),
// against an fp64 W x. Shapes: rows not a multiple of 16 (the partial last tile), K from one group to
// 24, 1 to 3 blocks (every warp's range: units split inside a tile, tiles summed by several warps),
// two matrices in one launch (the ring chained into the next), both unit orders (tile-major and
// chunks of 2 groups) and both flushes (vector and scalar). Bound: the stage test's, |y - W x| <=
// 3e-5 sum |w x| per row (x as three int8 limbs: 20 bits relative to its group's largest).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "stage_blocks.cuh"  // first: the shim headers set up the emulation
#include "fixtures/bf16.h"
#include "decode/megakernel_matrix.h"

namespace nibble {
namespace {

namespace mk = megakernel;
using test::Matrix;
using test::make_matrix;

struct Case {
  int blocks;
  std::vector<int> rows;  // one matrix per entry, all with the same K
  int k;
  int chunk;  // 0: tile-major
  int vec_flush;
};

void PrintTo(const Case& c, std::ostream* os) {
  *os << c.blocks << " blocks, K " << c.k << ", chunk " << c.chunk << ", vec_flush " << c.vec_flush << ", rows";
  for (int r : c.rows) *os << " " << r;
}

/** Rows over the bound (and the worst |y - W x| / sum |w x|) of case c; corrupt: one code of matrix
 *  0's second unit flipped after packing; padded_written: padded rows that were written. */
int run_case(const Case& c, bool corrupt, double* worst, int* padded_written) {
  emu::unreg_all();
  const int n = int(c.rows.size()), nw = c.blocks * mk::kWarps;
  std::vector<Matrix> ms;
  std::vector<mk::PackedMatrix> pms;
  std::vector<mk::GemvPlan> plans;
  std::vector<std::vector<float>> ys;
  for (int i = 0; i < n; ++i) {
    ms.push_back(make_matrix(c.rows[size_t(i)], c.k, c.chunk, 7u + uint32_t(i)));
    // Unit 1 (tile 0, group 1: x's first group is 10^4 smaller), lane 5's word 0, nibble 1: row 1.
    if (corrupt && i == 0) ms.back().units[mk::kUnitStride / 16 + 5].x ^= 0x000000F0u;
    ys.emplace_back(size_t(ms.back().tiles) * 16, 0.0f);
  }
  std::vector<float*> yp;
  for (int i = 0; i < n; ++i) {
    mk::PackedMatrix pm;
    pm.w = ms[size_t(i)].units.data(), pm.tiles = ms[size_t(i)].tiles, pm.groups = ms[size_t(i)].groups;
    pm.rows = ms[size_t(i)].rows, pm.chunk = c.chunk, pm.vec_flush = c.vec_flush;
    if (!mk::gemv_plan_fits(pm)) return -1;
    pms.push_back(pm);
    emu::reg("W", ms[size_t(i)].units.data(), ms[size_t(i)].units.size() * 16);
    yp.push_back(ys[size_t(i)].data());
  }
  for (int i = 0; i < n; ++i)
    for (int gw = 0; gw < nw; ++gw) plans.push_back(mk::gemv_plan(pms[size_t(i)], gw, nw));
  std::mt19937 rng(3);
  std::normal_distribution<float> nd(0.0f, 1.0f);
  std::vector<float> x(size_t(c.k));
  for (auto& v : x) v = nd(rng);
  x[0] = 0.0f;  // a zero, and a group 10^4 smaller than the others
  for (int kk = 0; kk < std::min(c.k, mk::kGroup); ++kk) x[size_t(kk)] *= 1e-4f;
  emu::reg("x", x.data(), x.size() * 4);
  emu::reg("plans", plans.data(), plans.size() * sizeof(mk::GemvPlan));
  const size_t smem = mk::gemv_blocks_smem(c.k, n);
  const mk::PackedMatrix* mats = pms.data();
  const mk::GemvPlan* pl = plans.data();
  float* const* ysp = yp.data();
  const float* xp = x.data();
  const int k = c.k;
  emu::launch(
      +[](const mk::PackedMatrix* a, const mk::GemvPlan* b, float* const* y, int nn, const float* xx, int kk) {
        mk::gemv_blocks_body<mk::kGemvReal>(emu::smem_base(), a, b, y, nn, xx, kk);
      },
      dim3(unsigned(c.blocks)), dim3(mk::kThreads), smem, mats, pl, ysp, n, xp, k);
  int bad = 0;
  *worst = 0;
  *padded_written = 0;
  for (int i = 0; i < n; ++i) {
    const Matrix& m = ms[size_t(i)];
    for (int r = 0; r < m.rows; ++r) {
      double ref = 0, mag = 0;
      for (int kk = 0; kk < m.k; ++kk) {
        ref += m.w(r, kk) * x[size_t(kk)];
        mag += std::fabs(m.w(r, kk) * x[size_t(kk)]);
      }
      const double e = std::fabs(double(ys[size_t(i)][size_t(r)]) - ref) / mag;
      *worst = std::max(*worst, e);
      bad += !(e <= 3e-5);
    }
    for (size_t r = size_t(m.rows); r < ys[size_t(i)].size(); ++r) *padded_written += ys[size_t(i)][r] != 0.0f;
  }
  return bad;
}

class MegakernelGemvEmulation : public ::testing::TestWithParam<Case> {};

TEST_P(MegakernelGemvEmulation, MatchesFp64) {
  double worst = 0;
  int padded = 0;
  EXPECT_EQ(run_case(GetParam(), false, &worst, &padded), 0) << "worst |y - Wx| / sum|wx| " << worst;
  EXPECT_EQ(padded, 0) << "padded rows written";
  std::printf("worst |y - Wx| / sum|wx|: %.2e\n", worst);
}

TEST(MegakernelGemvEmulationCheck, ACorruptedCodeIsSeen) {
  double worst = 0;
  int padded = 0;
  EXPECT_GT(run_case(Case{2, {100}, 512, 0, 1}, true, &worst, &padded), 0) << "worst " << worst;
}

INSTANTIATE_TEST_SUITE_P(Shapes, MegakernelGemvEmulation,
                         ::testing::Values(Case{1, {17}, 128, 0, 1}, Case{1, {733}, 384, 0, 1},
                                           Case{3, {733}, 384, 0, 1}, Case{2, {100, 40}, 512, 0, 1},
                                           Case{3, {64}, 3072, 2, 1}, Case{2, {48}, 1024, 2, 0},
                                           Case{1, {3}, 256, 0, 0}));

}  // namespace
}  // namespace nibble
