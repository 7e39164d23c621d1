// test_int4_gemm_sm90_emulation.cpp: the tuned int4 solution whole (solutions/int4_gemm/sm90/
// int4_gemm_sm90.cu compiled as C++ against the shims: its C ABI, prepare's plan and repack, run's
// dispatch to the small-M mma.sync kernel or the wgmma kernel) on the CPU emulation of a 4-SM sm_90,
// on the task's fixtures (plain layout, as the harness hands it over), against the fp64 oracle: every
// M <= 16 exactly (fp32 sums of exact products: below 1e-5), larger M within the format's two
// roundings (int4_wg_layout.h: below 5e-3, the GPU test's bound), every element written, twice in a
// row (prepare once, run twice, as the grader does). M covers NT 1 and 2, each wgmma tile width and,
// through NIBBLE_INT4SM90_SPLIT / _GRID, split-K clusters and persistent blocks as prepare reads them.
#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include <cuda_runtime.h>  // first: the shim headers set up the emulation

#include "fixtures/int4_gemm/int4_gemm_fixture.h"
#include "device_tensor.h"
#include "gemm_abi_run.h"
#include "test_env.h"
#include "nibble/nibble_gemm.h"
#include "reference/int4_gemm/int4_gemm_oracle.h"

namespace nibble {
namespace {

struct Case {
  const char* config;
  const char* split;  // NIBBLE_INT4SM90_SPLIT ("": prepare's choice)
  const char* grid;   // NIBBLE_INT4SM90_GRID
};

void PrintTo(const Case& c, std::ostream* os) { *os << c.config << " split " << c.split << " grid " << c.grid; }

class Int4GemmSm90Emulation : public ::testing::TestWithParam<Case> {};

TEST_P(Int4GemmSm90Emulation, MatchesTheOracle) {
  const Case c = GetParam();
  ASSERT_TRUE(test::set_or_unset_env("NIBBLE_INT4SM90_SPLIT", c.split));
  ASSERT_TRUE(test::set_or_unset_env("NIBBLE_INT4SM90_GRID", c.grid));
  emu::unreg_all();
  emu::fiber_stack_bytes = 128 * 1024;
  const Int4GemmConfig cfg = int4_gemm_config(c.config);
  const Int4GemmData d = generate_int4_gemm_fixture(cfg, 1, 2);
  const int64_t M = cfg.M, N = cfg.N, K = cfg.K, G = K / 128;
  test::DeviceTensor packed(d.W.packed.data(), d.W.packed.size(), {N, K / 2}, {NIBBLE_DTYPE_UINT, 8, 1});
  test::DeviceTensor scale(d.W.scale.data(), d.W.scale.size() * 2, {N, G}, {NIBBLE_DTYPE_FLOAT, 16, 1});
  test::DeviceTensor zero(d.W.zero.data(), d.W.zero.size(), {N, G}, {NIBBLE_DTYPE_UINT, 8, 1});
  test::DeviceTensor a(d.A.data(), d.A.size() * 2, {M, K}, {NIBBLE_DTYPE_BFLOAT, 16, 1});
  const nibble_named_tensor named[] = {{"W.packed", packed.t}, {"W.scale", scale.t}, {"W.zero", zero.t}};
  nibble_gemm_problem p{};
  p.struct_size = sizeof p;
  p.task = "gemm-w4a16-int4";
  p.config_name = c.config;
  p.M = M, p.N = N, p.K = K, p.block = 128, p.scale_format = NIBBLE_GEMM_SCALE_F16, p.global_scale = 1.0f;
  p.c_dtype = NIBBLE_GEMM_OUTPUT_F32;
  p.tensors = named;
  p.num_tensors = 3;
  void* h = nullptr;
  nibble_error err{};
  ASSERT_EQ(nibble_gemm_prepare(&p, nullptr, &h, &err), NIBBLE_OK) << err.message;
  const std::vector<double> ref = oracle::int4_gemm(d.A.data(), M, d.W, {}, 2);
  test::run_twice_and_check(h, a.t, M, N, ref, M <= 16 ? 1e-5 : 5e-3);
  ASSERT_EQ(nibble_gemm_teardown(h, nullptr, &err), NIBBLE_OK) << err.message;
  test::set_or_unset_env("NIBBLE_INT4SM90_SPLIT", "");
  test::set_or_unset_env("NIBBLE_INT4SM90_GRID", "");
}

INSTANTIATE_TEST_SUITE_P(Paths, Int4GemmSm90Emulation,
                         ::testing::Values(Case{"tiny", "", ""}, Case{"m16-n200-k256", "", ""}, Case{"m17-n200-k256", "", ""},
                                           Case{"m70-n136-k384", "2", ""}, Case{"m150-n72-k256", "1", "2"},
                                           Case{"m260-n136-k256", "", ""}),
                         [](const ::testing::TestParamInfo<Case>& i) {
                           std::string s = std::string(i.param.config) + "_split" + (*i.param.split ? i.param.split : "auto") +
                                           "_grid" + (*i.param.grid ? i.param.grid : "auto");
                           for (char& ch : s)
                             if (ch == '-') ch = '_';
                           return s;
                         });

}  // namespace
}  // namespace nibble
