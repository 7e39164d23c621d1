// test_int4_mma_emulation.cpp: the small-M GEMM kernel (solutions/common/mma_dequant_gemm.cuh) with
// the int4 format (solutions/int4_gemm/mma/int4_mma_kernel.cuh), run from its own source on the CPU
// (emu_core.h: a fiber per CUDA thread, mma.sync from the PTX fragment tables, every load bounds- and
// alignment-checked) through the solution's own host path (upload_mma_weights: the repack and the
// copies; launch_mma: the grid, NT and the kPerm launch), against the fp64 oracle. No GPU needed: CI
// checks the kernel's indexing, its batching and split-K, the records, the decode and the epilogue
// on every change. Shapes: NT = 1 and 2 (M <= 8, M > 8), partial last slabs (N % 16 != 0), chunk
// counts that do not fill the 8 warps' batches (K = 128, 640, 3200), symmetric weights.
// Checks: relative error ~1e-7 (fp32 sums of exact products; bound 1e-6), every element of C written
// (C starts as a NaN sentinel) and nothing outside it (guard bands), one mma per (slab, chunk, step,
// n8 tile), and a corrupted code word is seen (the check can fail).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "solutions/int4_gemm/mma/int4_mma_kernel.cuh"  // first: the shim headers set up the emulation
#include "fixtures/int4_gemm/int4_gemm_fixture.h"
#include "reference/int4_gemm/int4_gemm_oracle.h"
#include "guarded_output.h"

namespace nibble {
namespace {

struct Outcome {
  double rel_err = 0;
  int unwritten = 0, guard_written = 0;
  long long mmas = 0, expected_mmas = 0;
};

/** Grade config `name` (seed 1) through the emulated solution; corrupt: flip a code nibble first. */
Outcome run(const std::string& name, bool corrupt = false) {
  const Int4GemmConfig cfg = int4_gemm_config(name);
  const Int4GemmData data = generate_int4_gemm_fixture(cfg, 1, 2);
  const int64_t M = cfg.M, N = cfg.N, K = cfg.K;
  emu::unreg_all();
  sol::Int4Problem g;
  g.M = M, g.N = N, g.K = K, g.groups = K / 128;
  g.packed = data.W.packed.data(), g.scale = data.W.scale.data(), g.zero = data.W.zero.data();
  sol::DeviceAllocs mem;
  const int4_mma::MmaWeights w = int4_mma::upload_mma_weights(g, nullptr, mem);
  if (corrupt) const_cast<uint4*>(w.words)[7].y ^= 0x00F00000u;  // lane 7, step 1, register 1's second code
  void* a_mem = nullptr;
  cudaMalloc(&a_mem, size_t(M * K * 2));
  auto* A = static_cast<uint16_t*>(a_mem);
  std::memcpy(A, data.A.data(), size_t(M * K * 2));
  test::GuardedOutput out(size_t(M * N));
  float* C = out.data();
  emu::mma_count = 0;
  int4_mma::launch_mma(w, A, C, M, N, K, nullptr);
  Outcome r;
  r.mmas = emu::mma_count;
  r.expected_mmas = w.slabs * w.chunks * 4 * (M <= 8 ? 1 : 2) * ((M + (M <= 8 ? 8 : 16) - 1) / (M <= 8 ? 8 : 16));
  const std::vector<double> ref = oracle::int4_gemm(data.A.data(), M, data.W, {}, 2);
  const test::GuardedOutput::Check c = out.check(ref);
  r.rel_err = c.rel_err, r.unwritten = c.unwritten, r.guard_written = c.guard_written;
  cudaFree(a_mem);
  return r;
}

class Int4MmaEmulation : public ::testing::TestWithParam<std::string> {};

TEST_P(Int4MmaEmulation, MatchesTheOracleAndWritesEveryElementOnce) {
  const Outcome r = run(GetParam());
  EXPECT_LT(r.rel_err, 1e-6);
  EXPECT_EQ(r.unwritten, 0);
  EXPECT_EQ(r.guard_written, 0);
  EXPECT_EQ(r.mmas, r.expected_mmas);
}

INSTANTIATE_TEST_SUITE_P(Shapes, Int4MmaEmulation,
                         ::testing::Values("tiny", "tiny-sym", "m1-n40-k3200", "m3-n8-k128", "m8-n24-k384",
                                           "m9-n3000-k128", "m16-n56-k640", "m12-n40-k256-sym"),
                         [](const ::testing::TestParamInfo<std::string>& i) {
                           std::string s = i.param;
                           for (char& c : s)
                             if (c == '-') c = '_';
                           return s;
                         });

TEST(Int4MmaEmulationCheck, ACorruptedCodeIsSeen) {
  const Outcome r = run("m3-n40-k256", true);
  EXPECT_GT(r.rel_err, 1e-4) << "one code off by up to 15 steps must show in C";
  EXPECT_EQ(r.unwritten, 0);
}

}  // namespace
}  // namespace nibble
