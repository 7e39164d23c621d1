// test_gemm_fp4_sm90_emulation.cpp: the tuned FP4 solution whole (solutions/gemm_fp4/sm90/
// gemm_fp4_sm90.cu compiled as C++ against the shims: its C ABI, choose_kernel, the repack, every
// kernel family) on the CPU emulation of a 4-SM sm_90, on the tasks' fixtures, against the fp64
// oracle (exact weights, fp32 sums: below 1e-5), every element written, two runs: M = 1 and 16
// (mma.sync, kPerm), K % 8 != 0 (the kStd fallback), the wgmma tile widths with the plan's split-K
// and persistence, M = 1025 (4 rows of 256-row tiles on the 4 SMs, the last row by the small-M
// kernel as a tail: tail_rows), and through NIBBLE_FP4SM90_KIND=mmatma the bulk-copy mma kernel
// (clusters).
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>
#include <tuple>
#include <vector>

#include <cuda_runtime.h>  // first: the shim headers set up the emulation

#include "device_tensor.h"
#include "fixtures/gemm_fp4/gemm_fixture.h"
#include "gemm_abi_run.h"
#include "test_env.h"
#include "nibble/nibble_gemm.h"
#include "reference/gemm_fp4/gemm_oracle.h"

namespace nibble {
namespace {

struct Case {
  const char* config;
  const char* kind;  // NIBBLE_FP4SM90_KIND ("": prepare's choice)
};

class GemmFp4Sm90Emulation : public ::testing::TestWithParam<std::tuple<const char*, Case>> {};

TEST_P(GemmFp4Sm90Emulation, MatchesTheOracle) {
  const std::string task = std::get<0>(GetParam());
  const Case c = std::get<1>(GetParam());
  ASSERT_TRUE(test::set_or_unset_env("NIBBLE_FP4SM90_KIND", c.kind));
  emu::unreg_all();
  emu::fiber_stack_bytes = 128 * 1024;
  const bool nv = task == kGemmNvfp4Task;
  const GemmConfig cfg = gemm_config(task, c.config);
  const GemmFixtureData d = generate_gemm_fixture(cfg, 1, 2);
  const int64_t M = cfg.M, N = cfg.N, K = cfg.K, S = (K + cfg.block - 1) / cfg.block;
  test::DeviceTensor packed(d.packed.data(), d.packed.size(), {N, K / 2}, {NIBBLE_DTYPE_UINT, 8, 1});
  test::DeviceTensor scale(d.scale.data(), d.scale.size(), {N, S}, {NIBBLE_DTYPE_UINT, 8, 1});
  test::DeviceTensor global(&d.global_scale, 4, {1}, {NIBBLE_DTYPE_FLOAT, 32, 1});
  test::DeviceTensor a(d.A.data(), d.A.size() * 2, {M, K}, {NIBBLE_DTYPE_BFLOAT, 16, 1});
  std::vector<nibble_named_tensor> named{{"W.packed", packed.t}, {"W.scale", scale.t}};
  if (nv) named.push_back({"W.global_scale", global.t});
  nibble_gemm_problem p{};
  p.struct_size = sizeof p;
  p.task = task.c_str();
  p.config_name = c.config;
  p.M = M, p.N = N, p.K = K, p.block = cfg.block;
  p.scale_format = nv ? NIBBLE_GEMM_SCALE_E4M3FN : NIBBLE_GEMM_SCALE_E8M0;
  p.global_scale = d.global_scale;
  p.c_dtype = NIBBLE_GEMM_OUTPUT_F32;
  p.tensors = named.data();
  p.num_tensors = int32_t(named.size());
  void* h = nullptr;
  nibble_error err{};
  ASSERT_EQ(nibble_gemm_prepare(&p, nullptr, &h, &err), NIBBLE_OK) << err.message;
  oracle::Fp4WeightView wv;
  wv.format = nv ? Fp4Format::Nvfp4 : Fp4Format::Mxfp4;
  wv.packed = d.packed.data(), wv.scale = d.scale.data(), wv.global_scale = d.global_scale, wv.N = N, wv.K = K;
  const std::vector<double> ref = oracle::gemm(d.A.data(), M, wv, 2);
  test::run_twice_and_check(h, a.t, M, N, ref, 1e-5);
  ASSERT_EQ(nibble_gemm_teardown(h, nullptr, &err), NIBBLE_OK) << err.message;
  test::set_or_unset_env("NIBBLE_FP4SM90_KIND", "");
}

INSTANTIATE_TEST_SUITE_P(
    Paths, GemmFp4Sm90Emulation,
    ::testing::Combine(::testing::Values(kGemmNvfp4Task, kGemmMxfp4Task),
                       ::testing::Values(Case{"tiny", ""}, Case{"m16-n72-k256", ""}, Case{"m3-n40-k202", ""},
                                         Case{"m70-n136-k200", ""}, Case{"m260-n72-k256", ""},
                                         Case{"m1025-n72-k256", ""},
                                         Case{"m16-n72-k256", "mmatma"})),
    [](const ::testing::TestParamInfo<std::tuple<const char*, Case>>& i) {
      std::string s = std::string(std::get<0>(i.param)) + "_" + std::get<1>(i.param).config + "_" +
                      (*std::get<1>(i.param).kind ? std::get<1>(i.param).kind : "auto");
      for (char& ch : s)
        if (ch == '-') ch = '_';
      return s;
    });

}  // namespace
}  // namespace nibble
