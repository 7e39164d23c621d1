// test_wgmma_gemm_emulation.cpp: the dequantising wgmma GEMM kernel (sol::wgmma_kernel,
// solutions/common/wgmma_dequant_gemm.cuh: the producer warp's TMA tiles and bulk copies into the
// mbarrier ring, the consumers' register decode and wgmma, the persistent tile loop, the epilogue)
// run from its source on the CPU (emu_core.h, emu_wgmma.h: TMA with the 128-byte swizzle, wgmma from
// the descriptor, both from the PTX ISA), through its own host launch (sol::launch_wgmma: the tensor
// map, the grid), for the int4 format of int4_gemm_sm90 and the NVFP4 / MXFP4 formats of
// gemm_fp4_sm90, against fp64 references: int4 against W = bf16((q - z) x bf16(scale)) (the format's
// definition, int4_wg_layout.h), FP4 against the exact oracle (its decode is exact). Plans: the three
// tile widths (64 x 64, 64 x 128, 128 x 256 with two consumer warpgroups and setmaxnreg), one block
// per tile, a persistent grid of 2 blocks (the ring's phases carried across tiles), and K split over
// clusters of 2 and 4 blocks summed through distributed shared memory. Shapes with partial tiles in
// M and N and a partial last chunk of K.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "solutions/common/wgmma_dequant_gemm.cuh"  // first: the shim headers set up the emulation
#include "solutions/gemm_fp4/sm90/fp4_frag.h"
#include "solutions/gemm_fp4/sm90/wgmma_format.cuh"
#include "solutions/int4_gemm/sm90/int4_wg_format.cuh"
#include "fixtures/bf16.h"
#include "fixtures/fp16.h"
#include "fixtures/gemm_fp4/gemm_fixture.h"
#include "fixtures/int4_gemm/int4_gemm_fixture.h"
#include "guarded_output.h"
#include "reference/gemm_fp4/gemm_oracle.h"

namespace nibble {
namespace {

struct Plan {
  int bn, grid_cap, split;
  bool rows128 = false;  // 128 x 128 tiles of two consumer warpgroups (bn 128)
  int group() const { return bn == 256 || rows128 ? 8 : 4; }
};

/** Copy `v` into registered emulated device memory. */
template <class T>
T* device_copy(const std::vector<T>& v, std::vector<void*>* owned) {
  void* p = nullptr;
  cudaMalloc(&p, v.size() * sizeof(T));
  std::memcpy(p, v.data(), v.size() * sizeof(T));
  owned->push_back(p);
  return static_cast<T*>(p);
}

/** C = A W^T by the kernel with format F and the repacked weights (words, records, colmul). */
template <class F, bool kPerLane>
double run_gemm(const Plan& pl, int64_t M, int64_t N, int64_t K, int64_t n_pad, const std::vector<uint16_t>& a,
                const std::vector<uint32_t>& words, const std::vector<uint8_t>& records, const std::vector<float>& colmul,
                const std::vector<double>& ref, int* unwritten) {
  emu::unreg_all();
  std::vector<void*> owned;
  sol::WgmmaWeights w;
  w.M = M, w.N = N, w.K = K, w.n_pad = n_pad, w.nch = (K + 63) / 64;  // a partial last chunk: zero codes, A zero-filled
  w.wq = reinterpret_cast<const uint4*>(device_copy(words, &owned));
  w.sc = device_copy(records, &owned);
  w.colmul = colmul.empty() ? nullptr : device_copy(colmul, &owned);
  const uint16_t* A = device_copy(a, &owned);
  sol::WgmmaPlan p;
  p.bn = pl.bn, p.split = pl.split, p.wtma = true, p.grid_cap = pl.grid_cap, p.rows128 = pl.rows128;
  sol::ATensorMap amap;
  test::GuardedOutput out(size_t(M * N));
  sol::launch_wgmma<F, kPerLane>(p, w, amap, A, out.data(), nullptr);
  // The launch took the plan's split: a cluster of that many blocks along z (every split sums to the
  // same C, so only the launch can show a switch case that launched another split's kernel).
  EXPECT_EQ(emu::g_last_ex_cluster, unsigned(pl.split)) << "split " << pl.split;
  if (pl.split > 1) {
    EXPECT_EQ(emu::g_last_ex_grid.z, unsigned(pl.split));
  }
  for (void* q : owned) cudaFree(q);
  const test::GuardedOutput::Check c = out.check(ref);
  *unwritten = c.unwritten + c.guard_written;
  return c.rel_err;
}

/** One block per tile, 2 persistent blocks, and split-K clusters of 2 (and 4 below 128 x 256, and
 *  the odd splits 3, 5 and 6 with one consumer warpgroup: at K = 256, 4 chunks, splits 5 and 6 leave
 *  blocks without a chunk); at 64 x 128 also the 128 x 128 tiles of two warpgroups, the same ways
 *  up to split 4. */
std::vector<Plan> plans_for(int64_t M) {
  const int bn = sol::wgmma_bn_for(M);
  std::vector<Plan> p{Plan{bn, 0, 1}, Plan{bn, 2, 1}, Plan{bn, 0, 2}};
  if (bn <= 128)
    for (const int s : {4, 3, 5, 6}) p.push_back(Plan{bn, 0, s});
  if (bn == 128)
    for (const Plan& q : {Plan{128, 0, 1, true}, Plan{128, 2, 1, true}, Plan{128, 0, 2, true}, Plan{128, 0, 3, true},
                          Plan{128, 0, 4, true}})
      p.push_back(q);
  return p;
}

class Int4WgmmaEmulation : public ::testing::TestWithParam<std::string> {};

TEST_P(Int4WgmmaEmulation, MatchesTheFormatsDefinition) {
  const Int4GemmConfig cfg = int4_gemm_config(GetParam());
  const Int4GemmData d = generate_int4_gemm_fixture(cfg, 1, 2);
  const int64_t M = cfg.M, N = cfg.N, K = cfg.K, G = K / 128;
  // fp64 C from W = bf16((q - z) x bf16(scale)): the format's weights (int4_wg_layout.h).
  std::vector<double> w2(size_t(N * K)), ref(size_t(M * N), 0.0);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t k = 0; k < K; ++k) {
      const uint8_t b = d.W.packed[size_t(n * (K / 2) + k / 2)];
      const int q = (k & 1) ? (b >> 4) : (b & 0xF), z = d.W.zero[size_t(n * G + k / 128)];
      const float s = round_bf16(f16_to_f32(d.W.scale[size_t(n * G + k / 128)]));
      w2[size_t(n * K + k)] = round_bf16(float(q - z) * s);
    }
  for (int64_t m = 0; m < M; ++m)
    for (int64_t n = 0; n < N; ++n) {
      double acc = 0;
      for (int64_t k = 0; k < K; ++k) acc += double(bf16_to_f32(d.A[size_t(m * K + k)])) * w2[size_t(n * K + k)];
      ref[size_t(m * N + n)] = acc;
    }
  for (const Plan& pl : plans_for(M)) {
    const int4_sm90::Repacked r = int4_sm90::repack(d.W.packed.data(), d.W.scale.data(), d.W.zero.data(), N, K, pl.group());
    int unwritten = 0;
    const double e = run_gemm<int4_sm90::Int4WgFormat, false>(pl, M, N, K, r.n_pad, d.A, r.words, r.records, {}, ref,
                                                             &unwritten);
    EXPECT_LT(e, 1e-5) << "bn " << pl.bn << (pl.rows128 ? " x2" : "") << " grid " << pl.grid_cap << " split " << pl.split;
    EXPECT_EQ(unwritten, 0) << "bn " << pl.bn << (pl.rows128 ? " x2" : "") << " grid " << pl.grid_cap << " split " << pl.split;
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, Int4WgmmaEmulation,
                         ::testing::Values("m17-n200-k256", "m64-n136-k384", "m70-n136-k384", "m150-n72-k256", "m260-n136-k256"),
                         [](const ::testing::TestParamInfo<std::string>& i) {
                           std::string s = i.param;
                           for (char& c : s)
                             if (c == '-') c = '_';
                           return s;
                         });

class Fp4WgmmaEmulation : public ::testing::TestWithParam<std::tuple<const char*, const char*>> {};

TEST_P(Fp4WgmmaEmulation, MatchesTheOracle) {
  const std::string task = std::get<0>(GetParam());
  const bool nv = task == kGemmNvfp4Task;
  const GemmConfig cfg = gemm_config(task, std::get<1>(GetParam()));
  const GemmFixtureData d = generate_gemm_fixture(cfg, 1, 2);
  oracle::Fp4WeightView wv;
  wv.format = nv ? Fp4Format::Nvfp4 : Fp4Format::Mxfp4;
  wv.packed = d.packed.data(), wv.scale = d.scale.data(), wv.global_scale = d.global_scale, wv.N = cfg.N, wv.K = cfg.K;
  const std::vector<double> ref = oracle::gemm(d.A.data(), cfg.M, wv, 2);
  for (const Plan& pl : plans_for(cfg.M)) {
    gemm_fp4_sm90::Repacked r;
    ASSERT_EQ(gemm_fp4_sm90::repack(nv, cfg.N, cfg.K, d.packed.data(), d.scale.data(), d.global_scale, sol::KOrder::kStd,
                                    pl.group(), &r),
              "");
    std::vector<uint8_t> records(r.s.begin(), r.s.end());
    int unwritten = 0;
    const double e = nv ? run_gemm<gemm_fp4_sm90::Fp4Format<true>, true>(pl, cfg.M, cfg.N, cfg.K, r.n_pad, d.A, r.w,
                                                                        records, r.colmul, ref, &unwritten)
                        : run_gemm<gemm_fp4_sm90::Fp4Format<false>, true>(pl, cfg.M, cfg.N, cfg.K, r.n_pad, d.A, r.w,
                                                                         records, r.colmul, ref, &unwritten);
    EXPECT_LT(e, 1e-5) << "bn " << pl.bn << (pl.rows128 ? " x2" : "") << " grid " << pl.grid_cap << " split " << pl.split;
    EXPECT_EQ(unwritten, 0) << "bn " << pl.bn << (pl.rows128 ? " x2" : "") << " grid " << pl.grid_cap << " split " << pl.split;
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, Fp4WgmmaEmulation,
                         ::testing::Combine(::testing::Values(kGemmNvfp4Task, kGemmMxfp4Task),
                                            ::testing::Values("m64-n72-k200", "m70-n136-k200", "m260-n72-k256")),
                         [](const ::testing::TestParamInfo<std::tuple<const char*, const char*>>& i) {
                           std::string s = std::string(std::get<0>(i.param)) + "_" + std::get<1>(i.param);
                           for (char& c : s)
                             if (c == '-') c = '_';
                           return s;
                         });

/** The plan splits K only while the split blocks still fit wgmma_split_wave (two blocks per SM at
 *  64 x 64 tiles, 3/2 at 64 x 128, one at 128 x 256), on every tile width, over the task shapes and their neighbours (132 SMs, the H100's and H200's),
 *  and splits where a wave has room: by hand, m4096-n1024-k3072 at 128 x 256 tiles is 8 x 16 = 128
 *  tiles, one wave of one block per SM, so no split (it split into two waves before); m128-n4096-
 *  k4096 at 64 x 64 is 64 x 2 = 128 tiles of 64 chunks, 264 blocks a wave: split 2 (4 would need 512). */
TEST(WgmmaPlan, SplitsOnlyWithinOneWave) {
  constexpr int kSms = 132;
  const auto nch = [](int64_t K) { return K / sol::kChunkK; };
  EXPECT_EQ(sol::plan_wgmma(256, 4096, 1024, nch(3072), kSms).split, 1);
  EXPECT_EQ(sol::plan_wgmma(64, 128, 4096, nch(4096), kSms).split, 2);
  EXPECT_EQ(sol::plan_wgmma(256, 4096, 8192, nch(3072), kSms).split, 1);
  EXPECT_EQ(sol::plan_wgmma(256, 512, 1024, nch(3072), kSms).split, 2);  // 8 x 2 = 16 tiles: 32 blocks
  // 64 x 128 tiles at M = 128, at most 198 split blocks: n8192 is 128 tiles, no split (256 blocks);
  // n4096 64 tiles, split 2 (128; 4 would be 256); n3072 48 tiles, split 4 (192); n1024 16 tiles,
  // split 8 (128).
  EXPECT_EQ(sol::wgmma_bn_for(128), 128);
  EXPECT_EQ(sol::wgmma_bn_for(64), 64);
  EXPECT_EQ(sol::plan_wgmma(128, 128, 8192, nch(3072), kSms).split, 1);
  EXPECT_EQ(sol::plan_wgmma(128, 128, 4096, nch(4096), kSms).split, 2);
  EXPECT_EQ(sol::plan_wgmma(128, 128, 3072, nch(3072), kSms).split, 4);
  EXPECT_EQ(sol::plan_wgmma(128, 128, 1024, nch(3072), kSms).split, 8);
  for (int bn : {64, 128, 256})
    for (const bool rows128 : {false, true})
    for (int64_t M : {17, 127, 128, 200, 256, 1000, 4096, 4097})
      for (int64_t N : {64, 1000, 1024, 3000, 3072, 8192, 14336})
        for (int64_t K : {256, 3072, 4096, 14336}) {
          const sol::WgmmaPlan p = sol::plan_wgmma(bn, M, N, nch(K), kSms, rows128);
          const bool two = bn == 256 || (rows128 && bn == 128);  // two consumer warpgroups, 128 W rows
          EXPECT_EQ(p.ncons(), two ? 2 : 1) << bn << " " << rows128;
          // the launch's count: W's rows padded to 128 (kRowAlign), by hand
          const int64_t tiles = ((N + 127) / 128 * 128 / (two ? 128 : 64)) * ((M + bn - 1) / bn);
          EXPECT_EQ(sol::wgmma_tiles(p, M, N), tiles);
          if (p.split > 1) {
            EXPECT_LE(tiles * p.split, two ? kSms : (bn == 64 ? 2 * kSms : 3 * kSms / 2)) << bn << " " << M << " " << N << " " << K;
            EXPECT_LE(p.split, two ? (bn == 128 ? 4 : 2) : 8);
            EXPECT_GE(nch(K) / p.split, 4) << bn << " " << M << " " << N << " " << K;
          }
          EXPECT_EQ(p.grid_cap, kSms * (two ? 1 : 2));
        }
}

/** The splits an override may name are those the kernels are built for, by hand from the launch's
 *  switch: 1 to 8 but 7 with one consumer warpgroup (3, 5, 6 only with bulk-copied weights), 1 to 4
 *  at 128 x 128, 1 and 2 at 128 x 256; anything else is INVALID_ARGUMENT with what is built. */
TEST(WgmmaPlan, AnOverrideNamesOnlyABuiltSplit) {
  const auto with = [](int bn, bool rows128, const char* split, const char* wtma, bool per_lane_built = true) {
    sol::WgmmaPlan p = sol::plan_wgmma(bn, 128, 3072, 48, 132, rows128);
    setenv("NIBBLE_TEST_WG_SPLIT", split, 1);
    if (wtma) setenv("NIBBLE_TEST_WG_WTMA", wtma, 1);
    std::string err;
    try {
      sol::override_wgmma_plan(p, "NIBBLE_TEST_WG_", per_lane_built);
    } catch (const sol::AbiFailure& e) {
      EXPECT_EQ(e.status, NIBBLE_ERR_INVALID_ARGUMENT);
      err = e.what();
    }
    unsetenv("NIBBLE_TEST_WG_SPLIT");
    unsetenv("NIBBLE_TEST_WG_WTMA");
    return err.empty() ? std::to_string(p.split) : err;
  };
  for (const char* s : {"1", "2", "3", "4", "5", "6", "8"}) {
    EXPECT_EQ(with(64, false, s, nullptr), s);
    EXPECT_EQ(with(128, false, s, nullptr), s);
  }
  for (const char* s : {"1", "2", "4", "8"}) EXPECT_EQ(with(128, false, s, "0"), s) << "per-lane loads";
  for (const char* s : {"3", "5", "6"})
    EXPECT_NE(with(128, false, s, "0").find("64 x 128 tiles with per-lane loaded weights: 1, 2, 4, 8 (with "
                                            "NIBBLE_TEST_WG_WTMA=1: 1, 2, 3, 4, 5, 6, 8)"),
              std::string::npos)
        << s;
  for (const char* s : {"1", "2", "3", "4"}) EXPECT_EQ(with(128, true, s, nullptr), s) << "128 x 128";
  for (const char* s : {"5", "6", "8"})
    EXPECT_NE(with(128, true, s, nullptr).find("128 x 128 tiles with bulk-copied weights: 1, 2, 3, 4"), std::string::npos) << s;
  for (const char* s : {"1", "2"}) EXPECT_EQ(with(256, false, s, nullptr), s);
  for (const char* s : {"3", "4"})
    EXPECT_NE(with(256, false, s, nullptr).find("128 x 256 tiles with bulk-copied weights: 1, 2"), std::string::npos) << s;
  for (const char* s : {"0", "7", "9"}) EXPECT_NE(with(64, false, s, nullptr).find("SPLIT=" + std::string(s) + " is not built"), std::string::npos) << s;
  for (const char* s : {"x", "3abc", "-1", " 2", "2.0"})
    EXPECT_NE(with(64, false, s, nullptr).find("SPLIT=" + std::string(s) + ": a split from 1 to 8"), std::string::npos) << s;
  // Empty is unset, as for every switch (abi_util.h's env_whole): the plan's own split.
  EXPECT_EQ(with(64, false, "", nullptr), std::to_string(sol::plan_wgmma(64, 128, 3072, 48, 132).split));
  // A solution without the per-lane path (int4_gemm_sm90): WTMA=0 is refused whatever the split.
  EXPECT_NE(with(128, false, "2", "0", false).find("WTMA=0: the per-lane weight path is not built here"), std::string::npos);
  EXPECT_EQ(with(128, false, "5", "1", false), "5");
}

}  // namespace
}  // namespace nibble
