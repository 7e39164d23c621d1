// test_megakernel_stages.cpp: the megakernel's stages alone (solutions/decode/megakernel/blocks.cu) against
// fp64 CPU references, at the shapes that break them, and the configs it declines.
//
// GEMV stage (repack.cu + int4_mma_gemv.cuh): rows in {1, 3, 17, 733} (one row of a 16-row tile, a
// partial tile, a partial last tile) x K in {128, 384, 3072} (one group, an odd number of groups),
// on 1, 3 and all SMs' blocks (a warp's range may start and end anywhere inside a tile, so tiles
// are split between warps and summed with atomics); three sources stacked (q | k | v) and two
// interleaved per 8 rows (gate | up); several matrices in one launch with different K.
// Random codes, zero points and signed scales over several binades; x random in [-1, 1].
// Per element: |y - ref| <= 3e-5 * sum_i |W[o,i] x[i]| (x enters the mma as bf16 hi + lo, ~2^-17
// relative, plus the tensor cores' fp32 accumulation), every element written (y starts at 0 and
// the untouched padding rows past `rows` must stay NaN in a guard zone).
// Attention stage (attention.cuh): hd 64 / 128, 1..4 query heads per KV head, pos in
// {0, 15, 16, 17, 200, 2080} (one slot, a partial chunk, chunk edges), 1, 5 and all SMs' blocks,
// against fp64 with the appended K/V checked bit-exactly against the bf16 rounding of fp32 RoPE
// and no other cache slot touched.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "decode/megakernel_attention_case.h"
#include "decode/int4_test_matrix.h"
#include "gpu_test_util.h"
#include "megakernel.h"

namespace {

namespace mk = nibble::megakernel;

#define CUDA_OK(call) ASSERT_EQ((call), cudaSuccess) << #call << ": " << cudaGetErrorString(cudaGetLastError())

using nibble::test::Rng;

using nibble::test::DeviceMatrix;  // tests/decode/int4_test_matrix.h
using nibble::test::DevBuf;
using nibble::test::HostMatrix;

/** The megakernel's source triple of a DeviceMatrix of `rows` rows. */
mk::SourceTriple source(const DeviceMatrix& d, int rows) {
  mk::SourceTriple s;
  s.packed = d.packed.as<uint8_t>();
  s.scale = d.scale.as<uint16_t>();
  s.zero = d.zero.as<uint8_t>();
  s.rows = rows;
  return s;
}

/** A repacked virtual matrix in device memory. */
struct Packed {
  DevBuf w;
  mk::PackedMatrix m;
  Packed(const std::vector<mk::SourceTriple>& src, int k, int chunk = 0)
      : w(mk::packed_weight_bytes(total_rows(src), k)) {
    m.chunk = chunk;
    m.w = w.as<uint4>();
    m.rows = total_rows(src);
    m.tiles = (m.rows + 15) / 16;
    m.groups = k / 128;
  }
  static int total_rows(const std::vector<mk::SourceTriple>& src) {
    int r = 0;
    for (const auto& s : src) r += s.rows;
    return r;
  }
};

constexpr int kGuard = 32;  // NaN-filled floats past each output's end

/** Runs the GEMV stage on `mats` (all sharing x of length kmax) and compares with ref. */
void run_and_check(const std::vector<mk::PackedMatrix>& mats, const std::vector<std::vector<double>>& ref,
                   const std::vector<std::vector<double>>& bound, const std::vector<float>& x, int blocks,
                   const std::string& what) {
  const int n = int(mats.size());
  std::vector<DevBuf*> ys;
  std::vector<float*> yptr;
  for (int i = 0; i < n; ++i) {
    const size_t len = ref[size_t(i)].size();
    ys.push_back(new DevBuf((len + kGuard) * 4));
    std::vector<float> init(len + kGuard, NAN);
    std::fill(init.begin(), init.begin() + long(len), 0.f);
    ASSERT_EQ(cudaMemcpy(ys.back()->p, init.data(), init.size() * 4, cudaMemcpyHostToDevice), cudaSuccess);
    yptr.push_back(ys.back()->as<float>());
  }
  DevBuf dm(sizeof(mk::PackedMatrix) * size_t(n)), dy(sizeof(float*) * size_t(n)), dx(x.size() * 4);
  CUDA_OK(cudaMemcpy(dm.p, mats.data(), sizeof(mk::PackedMatrix) * size_t(n), cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(dy.p, yptr.data(), sizeof(float*) * size_t(n), cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(dx.p, x.data(), x.size() * 4, cudaMemcpyHostToDevice));
  const int nw = mk::gemv_blocks_grid(blocks) * mk::kWarps;
  std::vector<mk::GemvPlan> plans(size_t(n) * nw);
  for (int i = 0; i < n; ++i)
    for (int gw = 0; gw < nw; ++gw) plans[size_t(i) * nw + gw] = mk::gemv_plan(mats[size_t(i)], gw, nw);
  DevBuf dp(sizeof(mk::GemvPlan) * plans.size());
  CUDA_OK(cudaMemcpy(dp.p, plans.data(), sizeof(mk::GemvPlan) * plans.size(), cudaMemcpyHostToDevice));
  CUDA_OK(mk::launch_gemv_blocks(dm.as<mk::PackedMatrix>(), dp.as<mk::GemvPlan>(), dy.as<float*>(), n, dx.as<float>(),
                                 int(x.size()), blocks, nullptr));
  CUDA_OK(cudaDeviceSynchronize());
  for (int i = 0; i < n; ++i) {
    const size_t len = ref[size_t(i)].size();
    std::vector<float> y(len + kGuard);
    ASSERT_EQ(cudaMemcpy(y.data(), yptr[size_t(i)], y.size() * 4, cudaMemcpyDeviceToHost), cudaSuccess);
    int bad = 0;
    double num = 0, den = 0;
    for (size_t o = 0; o < len; ++o) {
      const double e = std::fabs(double(y[o]) - ref[size_t(i)][o]);
      num += e * e;
      den += ref[size_t(i)][o] * ref[size_t(i)][o];
      if (!(e <= 3e-5 * bound[size_t(i)][o] + 1e-30) && bad++ < 5)
        ADD_FAILURE() << what << " matrix " << i << ": y[" << o << "] = " << y[o] << ", fp64 " << ref[size_t(i)][o]
                      << ", bound " << bound[size_t(i)][o];
    }
    for (size_t o = len; o < len + kGuard; ++o)
      if (!std::isnan(y[o]) && bad++ < 5) ADD_FAILURE() << what << ": wrote past the end at " << o;
    // Over many rows the relative error is far below the per-element bound; one or three rows may
    // cancel to a small |ref|, so the vector check applies from one full tile up.
    if (len >= 16) {
      EXPECT_LT(std::sqrt(num / (den > 0 ? den : 1)), 1e-5) << what << " matrix " << i;
    }
    EXPECT_EQ(bad, 0) << what << " matrix " << i;
    delete ys[size_t(i)];
  }
}

std::vector<float> random_x(int k, Rng& rng) {
  std::vector<float> x(static_cast<size_t>(k));
  for (auto& v : x) v = 2.f * rng.uniform() - 1.f;
  return x;
}

void reference(const std::vector<const HostMatrix*>& rows_of, const std::vector<int>& row_idx, const std::vector<float>& x,
               std::vector<double>* ref, std::vector<double>* bound) {
  ref->assign(rows_of.size(), 0.0);
  bound->assign(rows_of.size(), 0.0);
  for (size_t v = 0; v < rows_of.size(); ++v) {
    const HostMatrix& h = *rows_of[v];
    for (int i = 0; i < h.in; ++i) {
      const double t = h.at(row_idx[v], i) * double(x[size_t(i)]);
      (*ref)[v] += t;
      (*bound)[v] += std::fabs(t);
    }
  }
}

TEST(MegakernelGemv, OddShapesAndGrids) {
  NIBBLE_REQUIRE_GPU();
  Rng rng(7);
  // Every unit order (PackedMatrix::chunk): tile-major (0: a warp's range covers whole tiles),
  // group-major (1: a warp's consecutive units are different tiles of one group) and chunks of 2,
  // 4 and 8 groups (o-proj and down use 2 and 4), where a tile's sums run over the chunk's groups;
  // K = 512 has a power-of-two group count, so chunk 4 there is tile-major spelled as a chunk.
  for (int k : {128, 384, 512, 3072})
    for (int rows : {1, 3, 17, 733})
      for (int chunk : {0, 1, 2, 4, 8}) {
      if (chunk > 0 && !mk::valid_chunk(chunk, k / 128)) continue;
      HostMatrix h(rows, k, rng);
      DeviceMatrix d(h);
      const mk::SourceTriple s = source(d, rows);
      Packed p({s}, k, chunk);
      CUDA_OK(mk::launch_repack(&s, 1, mk::RowMap::Concat, k, p.w.as<uint4>(), nullptr, chunk));
      const std::vector<float> x = random_x(k, rng);
      std::vector<const HostMatrix*> of(size_t(rows), &h);
      std::vector<int> idx(static_cast<size_t>(rows));
      for (int r = 0; r < rows; ++r) idx[size_t(r)] = r;
      std::vector<double> ref, bound;
      reference(of, idx, x, &ref, &bound);
      for (int blocks : {1, 3, 0})
        run_and_check({p.m}, {ref}, {bound}, x, blocks,
                      "rows " + std::to_string(rows) + " K " + std::to_string(k) + " chunk " + std::to_string(chunk) +
                          " blocks " + std::to_string(blocks));
      }
}

TEST(MegakernelGemv, StackedInterleavedAndSeveralMatrices) {
  NIBBLE_REQUIRE_GPU();
  Rng rng(11);
  const int k = 384;
  // q | k | v with row counts that are not multiples of 16.
  HostMatrix a(5, k, rng), b(16, k, rng), c(7, k, rng);
  DeviceMatrix da(a), db(b), dc(c);
  const std::vector<mk::SourceTriple> qkv = {source(da, 5), source(db, 16), source(dc, 7)};
  Packed pq(qkv, k);
  CUDA_OK(mk::launch_repack(qkv.data(), 3, mk::RowMap::Concat, k, pq.w.as<uint4>(), nullptr));
  std::vector<const HostMatrix*> of;
  std::vector<int> idx;
  for (int r = 0; r < 5; ++r) of.push_back(&a), idx.push_back(r);
  for (int r = 0; r < 16; ++r) of.push_back(&b), idx.push_back(r);
  for (int r = 0; r < 7; ++r) of.push_back(&c), idx.push_back(r);
  // gate | up, 24 rows each, interleaved per 8 rows: virtual row 16t + i is gate 8t + i (i < 8),
  // up 8t + i - 8 otherwise.
  HostMatrix g(24, k, rng), u(24, k, rng);
  DeviceMatrix dg(g), du(u);
  const std::vector<mk::SourceTriple> gu = {source(dg, 24), source(du, 24)};
  Packed pg(gu, k);
  CUDA_OK(mk::launch_repack(gu.data(), 2, mk::RowMap::Interleave8, k, pg.w.as<uint4>(), nullptr));
  std::vector<const HostMatrix*> of_g;
  std::vector<int> idx_g;
  for (int v = 0; v < 48; ++v) {
    const int t = v / 16, i = v % 16;
    of_g.push_back(i < 8 ? &g : &u);
    idx_g.push_back(8 * t + (i & 7));
  }
  // A third matrix with a shorter K (it uses the prefix of x).
  HostMatrix s(40, 128, rng);
  DeviceMatrix ds(s);
  const mk::SourceTriple ss = source(ds, 40);
  Packed ps({ss}, 128, 1);  // group-major between two tile-major matrices
  CUDA_OK(mk::launch_repack(&ss, 1, mk::RowMap::Concat, 128, ps.w.as<uint4>(), nullptr, 1));
  std::vector<const HostMatrix*> of_s(40, &s);
  std::vector<int> idx_s(40);
  for (int r = 0; r < 40; ++r) idx_s[size_t(r)] = r;

  const std::vector<float> x = random_x(k, rng);
  std::vector<double> r1, b1, r2, b2, r3, b3;
  reference(of, idx, x, &r1, &b1);
  reference(of_g, idx_g, x, &r2, &b2);
  reference(of_s, idx_s, x, &r3, &b3);
  for (int blocks : {1, 2, 0}) run_and_check({pq.m, pg.m, ps.m}, {r1, r2, r3}, {b1, b2, b3}, x, blocks,
                                             "stacked/interleaved blocks " + std::to_string(blocks));
}

// x is scaled per 128-input group by a power of two and split into int8 limbs (build_x_limbs): a
// group of zeros, groups 10^6 apart in magnitude, denormals and exact powers of two (where the
// rounded |X| reaches 2^20) must all keep the per-element bound.
TEST(MegakernelGemv, InputDynamicRangePerGroup) {
  NIBBLE_REQUIRE_GPU();
  Rng rng(13);
  const int k = 896, rows = 37;
  HostMatrix h(rows, k, rng);
  DeviceMatrix d(h);
  const mk::SourceTriple s = source(d, rows);
  Packed p({s}, k);
  CUDA_OK(mk::launch_repack(&s, 1, mk::RowMap::Concat, k, p.w.as<uint4>(), nullptr));
  std::vector<float> x = random_x(k, rng);
  const float mag[7] = {0.f, 1e3f, 1e-3f, 1.f, 1e-40f, 3e4f, 1.f};
  for (int g = 0; g < 7; ++g)
    for (int i = 0; i < 128; ++i) x[size_t(g * 128 + i)] *= mag[g];
  x[128 * 6] = 1.f;   // group 6: the maximum an exact power of two
  x[128 * 6 + 5] = -1.f;
  std::vector<const HostMatrix*> of(size_t(rows), &h);
  std::vector<int> idx(static_cast<size_t>(rows));
  for (int r = 0; r < rows; ++r) idx[size_t(r)] = r;
  std::vector<double> ref, bound;
  reference(of, idx, x, &ref, &bound);
  run_and_check({p.m}, {ref}, {bound}, x, 0, "dynamic range");
}

TEST(MegakernelGemv, RejectsBadArguments) {
  NIBBLE_REQUIRE_GPU();
  mk::SourceTriple s;
  EXPECT_EQ(mk::launch_repack(&s, 1, mk::RowMap::Concat, 128, nullptr, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(mk::launch_gemv_blocks(nullptr, nullptr, nullptr, 1, nullptr, 128, 0, nullptr), cudaErrorInvalidValue);
}

// ---- attention ----------------------------------------------------------------------------------

using nibble::test::AttnCase;

void run_attention(const AttnCase& t) {
  const nibble::test::AttnInputs in = nibble::test::attention_inputs(t);
  const int hd = t.hd;
  const size_t cache_n = in.kc.size();
  const int qkv_n = int(in.qkv.size());
  int sms = 0;
  cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0);
  const int blocks = t.blocks ? t.blocks : sms;
  const int max_chunks = mk::attn_max_chunks(blocks, t.n_kv);

  DevBuf dk(cache_n * 2), dv(cache_n * 2), dq(size_t(qkv_n) * 4), dr(in.rope.size() * 8),
      dpart(size_t(t.n_q) * max_chunks * (hd + 2) * 4), dcnt(size_t(t.n_kv) * 4), dout(size_t(t.n_q) * hd * 4);
  CUDA_OK(cudaMemcpy(dk.p, in.kc.data(), cache_n * 2, cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(dv.p, in.vc.data(), cache_n * 2, cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(dq.p, in.qkv.data(), size_t(qkv_n) * 4, cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(dr.p, in.rope.data(), in.rope.size() * 8, cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemset(dcnt.p, 0, size_t(t.n_kv) * 4));
  CUDA_OK(cudaMemset(dout.p, 0xFF, size_t(t.n_q) * hd * 4));  // NaN
  CUDA_OK(mk::launch_attention_blocks(dq.as<float>(), dr.as<float2>(), dk.as<uint16_t>(), dv.as<uint16_t>(), t.n_q,
                                      t.n_kv, hd, t.max_seq, t.pos, dpart.as<float>(), max_chunks, dcnt.as<unsigned>(),
                                      dout.as<float>(), t.blocks, nullptr));
  CUDA_OK(cudaDeviceSynchronize());
  std::vector<uint16_t> kc2(cache_n), vc2(cache_n);
  std::vector<float> out(size_t(t.n_q) * hd);
  std::vector<unsigned> cnt(static_cast<size_t>(t.n_kv));
  CUDA_OK(cudaMemcpy(kc2.data(), dk.p, cache_n * 2, cudaMemcpyDeviceToHost));
  CUDA_OK(cudaMemcpy(vc2.data(), dv.p, cache_n * 2, cudaMemcpyDeviceToHost));
  CUDA_OK(cudaMemcpy(out.data(), dout.p, out.size() * 4, cudaMemcpyDeviceToHost));
  CUDA_OK(cudaMemcpy(cnt.data(), dcnt.p, cnt.size() * 4, cudaMemcpyDeviceToHost));
  nibble::test::check_attention(t, in, kc2, vc2, out, cnt);
}

TEST(MegakernelAttention, ChunkEdgesHeadsAndGrids) {
  NIBBLE_REQUIRE_GPU();
  for (int hd : {64, 128})
    for (int nq_nkv : {1, 2, 3, 4})
      for (int pos : {0, 15, 16, 17, 200, 2080})
        for (int blocks : {1, 5, 0}) {
          if (blocks == 1 && pos > 200) continue;  // slow on one block; covered by 5 and all
          run_attention({hd, 2 * nq_nkv, 2, 2304, pos, blocks});
        }
  run_attention({128, 24, 8, 4096, 2048, 0});  // the full config's shape
}

TEST(MegakernelConfig, DeclinesWhatItCannotRun) {
  EXPECT_EQ(mk::unsupported_reason(3072, 8192, 24, 8, 128, 128), "");
  EXPECT_EQ(mk::unsupported_reason(256, 512, 4, 2, 64, 128), "");
  EXPECT_NE(mk::unsupported_reason(3072, 8192, 24, 8, 128, 64), "");   // group 64
  EXPECT_NE(mk::unsupported_reason(3072, 8192, 24, 8, 96, 128), "");   // hd 96
  EXPECT_NE(mk::unsupported_reason(3072, 8192, 40, 8, 128, 128), "");  // 5 query heads per KV head
  EXPECT_NE(mk::unsupported_reason(3072, 32768, 24, 8, 128, 128), ""); // ffn too long for shared memory
  // The longest input that fits sm_90's 227 KB per block, by hand from the layout (decode_kernel.cu
  // SmemLayout, hd 128, d 3072): max(8 k, 73728) + 6144 (the gain, 2 d) + 128 + 16 + 1280 (5 x 16
  // warps' GEMV plans) + 384 (ring mbarriers) + 104448 (rings) + 3088 (attention scratch: q 2048,
  // the warps' max and sum 512, a flag 16, this step's K and V rows 512) <= 232448 gives
  // 8 k <= 116960, k <= 14620, so 14592 fits and 14720 does not.
  EXPECT_EQ(mk::unsupported_reason(3072, 14592, 24, 8, 128, 128), "");
  const std::string why = mk::unsupported_reason(3072, 14720, 24, 8, 128, 128);
  EXPECT_NE(why.find("at most 14592 at hd 128"), std::string::npos) << why;
}

}  // namespace
