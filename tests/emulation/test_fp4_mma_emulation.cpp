// test_fp4_mma_emulation.cpp: the small-M GEMM kernel (solutions/common/mma_dequant_gemm.cuh) with
// gemm_fp4_sm90's NVFP4 and MXFP4 formats (solutions/gemm_fp4/sm90/mma_format.cuh) run from its own
// source on the CPU (emu_core.h), on the repack gemm_fp4_sm90's prepare does for M <= 16 (fp4_frag.h:
// the kPerm order when K % 8 == 0, else kStd, groups of one slab), against the fp64 oracle. Shapes:
// NT = 1 and 2, partial slabs (N % 16 != 0), partial last scale blocks (K = 200, 3080), the kStd
// fallback (K % 8 != 0: K = 202). Checks: relative error below 1e-5 (exact weights, fp32 sums: ~1e-7),
// every element of C written once and nothing outside it, a corrupted code seen, and the traced
// kernel (NIBBLE_FP4SM90_TRACE) marking every block in order.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <tuple>
#include <vector>

#include "solutions/gemm_fp4/sm90/mma_format.cuh"  // first: the shim headers set up the emulation
#include "fixtures/gemm_fp4/gemm_fixture.h"
#include "reference/gemm_fp4/gemm_oracle.h"
#include "guarded_output.h"

namespace nibble {
namespace {

struct Outcome {
  double rel_err = 0;
  int unwritten = 0, guard_written = 0;
};

template <bool NV>
Outcome run(const std::string& task, const std::string& config, bool corrupt, std::vector<unsigned long long>* trace) {
  const GemmConfig cfg = gemm_config(task, config);
  const GemmFixtureData d = generate_gemm_fixture(cfg, 1, 2);
  const int64_t M = cfg.M, N = cfg.N, K = cfg.K;
  const bool perm = K % 8 == 0;  // gemm_fp4_sm90's choose_kernel at M <= 16
  gemm_fp4_sm90::Repacked r;
  const std::string why = gemm_fp4_sm90::repack(NV, N, K, d.packed.data(), d.scale.data(), d.global_scale,
                                                perm ? sol::KOrder::kPerm : sol::KOrder::kStd, 1, &r);
  EXPECT_EQ(why, "");
  emu::unreg_all();
  if (corrupt) r.w[4 * 9 + 2] ^= 0x0F000000u;  // lane 9, step 2: one code
  emu::reg("W", r.w.data(), r.w.size() * 4);
  emu::reg("scales", r.s.data(), r.s.size());
  emu::reg("colmul", r.colmul.data(), r.colmul.size() * 4);
  std::vector<uint16_t> a(d.A);  // 16-byte aligned (std::vector of uint16_t from operator new: 16)
  emu::reg("A", a.data(), a.size() * 2);
  test::GuardedOutput out(size_t(M * N));
  float* C = out.data();
  if (trace) trace->assign(size_t(r.n_pad / sol::kSlabRows * ((M + 15) / 16) * sol::kMmaMarks), 0);  // NT = 2 at M > 8
  sol::launch_mma_dequant<gemm_fp4_sm90::Fp4MmaFormat<NV>>(perm, r.n_pad / sol::kSlabRows,
                                                          reinterpret_cast<const uint4*>(r.w.data()), r.s.data(),
                                                          r.colmul.data(), a.data(), C, M, N, K, r.nch,
                                                          trace ? trace->data() : nullptr, nullptr);
  oracle::Fp4WeightView w;
  w.format = NV ? Fp4Format::Nvfp4 : Fp4Format::Mxfp4;
  w.packed = d.packed.data(), w.scale = d.scale.data(), w.global_scale = d.global_scale, w.N = N, w.K = K;
  const std::vector<double> ref = oracle::gemm(d.A.data(), M, w, 2);
  Outcome o;
  const test::GuardedOutput::Check c = out.check(ref);
  o.rel_err = c.rel_err, o.unwritten = c.unwritten, o.guard_written = c.guard_written;
  return o;
}

Outcome run_any(const std::string& task, const std::string& config, bool corrupt = false,
               std::vector<unsigned long long>* trace = nullptr) {
  return task == kGemmNvfp4Task ? run<true>(task, config, corrupt, trace) : run<false>(task, config, corrupt, trace);
}

class Fp4MmaEmulation : public ::testing::TestWithParam<std::tuple<const char*, const char*>> {};

TEST_P(Fp4MmaEmulation, MatchesTheOracleAndWritesEveryElementOnce) {
  const Outcome o = run_any(std::get<0>(GetParam()), std::get<1>(GetParam()));
  EXPECT_LT(o.rel_err, 1e-5);
  EXPECT_EQ(o.unwritten, 0);
  EXPECT_EQ(o.guard_written, 0);
}

INSTANTIATE_TEST_SUITE_P(Shapes, Fp4MmaEmulation,
                         ::testing::Combine(::testing::Values(kGemmNvfp4Task, kGemmMxfp4Task),
                                            ::testing::Values("tiny", "m1-n40-k3080", "m16-n24-k200", "m9-n300-k128",
                                                              "m3-n40-k202")),
                         [](const ::testing::TestParamInfo<std::tuple<const char*, const char*>>& i) {
                           std::string s = std::string(std::get<0>(i.param)) + "_" + std::get<1>(i.param);
                           for (char& c : s)
                             if (c == '-') c = '_';
                           return s;
                         });

// NIBBLE_FP4SM90_TRACE's path: with a trace buffer every block sets its kMmaMarks marks in order
// (the extra __syncthreads before the last one is reached by the whole block) and C is unchanged.
TEST(Fp4MmaEmulationCheck, TheTracedKernelMarksEveryBlockInOrder) {
  std::vector<unsigned long long> trace;
  const Outcome o = run_any(kGemmNvfp4Task, "m16-n40-k256", false, &trace);
  EXPECT_LT(o.rel_err, 1e-5);
  EXPECT_EQ(o.unwritten, 0);
  ASSERT_FALSE(trace.empty());
  for (size_t b = 0; b < trace.size() / sol::kMmaMarks; ++b)
    for (int k = 0; k < sol::kMmaMarks; ++k) {
      EXPECT_NE(trace[b * sol::kMmaMarks + k], 0u) << "block " << b << " mark " << k;
      if (k > 0) {
        EXPECT_GT(trace[b * sol::kMmaMarks + k], trace[b * sol::kMmaMarks + k - 1]) << "block " << b;
      }
    }
}

TEST(Fp4MmaEmulationCheck, ACorruptedCodeIsSeen) {
  EXPECT_GT(run_any(kGemmNvfp4Task, "m3-n40-k256", true).rel_err, 1e-4);
  EXPECT_GT(run_any(kGemmMxfp4Task, "m3-n40-k256", true).rel_err, 1e-4);
}

}  // namespace
}  // namespace nibble
