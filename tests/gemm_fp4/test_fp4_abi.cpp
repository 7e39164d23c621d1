// test_fp4_abi.cpp: the GEMM ABI header (include/nibble/nibble_gemm.h): the same layout from C99 and
// C++, the tensor lookup helper, and agreement with the task configs (block, scale format).
#include <gtest/gtest.h>

#include <cstddef>

#include "fixtures/gemm_fp4/gemm_config.h"
#include "nibble/nibble_gemm.h"

extern "C" size_t nibble_test_c_gemm_problem_size(void);
extern "C" size_t nibble_test_c_gemm_problem_offset_tensors(void);
extern "C" size_t nibble_test_c_gemm_problem_offset_global(void);
extern "C" const nibble_tensor* nibble_test_c_find(const nibble_gemm_problem* p, const char* name);

namespace nibble {
namespace {

TEST(GemmAbi, SameLayoutInCAndCpp) {
  EXPECT_EQ(nibble_test_c_gemm_problem_size(), sizeof(nibble_gemm_problem));
  EXPECT_EQ(nibble_test_c_gemm_problem_offset_tensors(), offsetof(nibble_gemm_problem, tensors));
  EXPECT_EQ(nibble_test_c_gemm_problem_offset_global(), offsetof(nibble_gemm_problem, global_scale));
  EXPECT_EQ(NIBBLE_GEMM_ABI_VERSION, 1);
}

TEST(GemmAbi, FindTensorByFixtureName) {
  nibble_named_tensor t[3] = {};
  t[0].name = "W.packed";
  t[1].name = "W.scale";
  t[2].name = "W.global_scale";
  nibble_gemm_problem p = {};
  p.struct_size = sizeof(p);
  p.tensors = t;
  p.num_tensors = 3;
  EXPECT_EQ(nibble_gemm_find_tensor(&p, "W.scale"), &t[1].tensor);
  EXPECT_EQ(nibble_test_c_find(&p, "W.global_scale"), &t[2].tensor);
  EXPECT_EQ(nibble_gemm_find_tensor(&p, "W.scal"), nullptr);
  EXPECT_EQ(nibble_gemm_find_tensor(&p, "A"), nullptr);  // A is a run() argument, not a weight
}

// The ABI's weight tensors are the fixture's, minus A (passed to run).
TEST(GemmAbi, WeightTensorsMatchTheConfigs) {
  const GemmConfig nv = gemm_config(kGemmNvfp4Task, "tiny");
  const GemmConfig mx = gemm_config(kGemmMxfp4Task, "tiny");
  EXPECT_EQ(nv.block, 16);
  EXPECT_EQ(mx.block, 32);
  ASSERT_EQ(nv.tensors().size(), 4u);
  ASSERT_EQ(mx.tensors().size(), 3u);
  EXPECT_EQ(nv.tensors()[0].name, "A");
  EXPECT_EQ(nv.tensors()[3].name, "W.global_scale");
}

}  // namespace
}  // namespace nibble
