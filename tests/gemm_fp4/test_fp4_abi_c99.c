/* test_fp4_abi_c99.c: include/nibble/nibble_gemm.h compiled as strict C99 (-Wpedantic -Werror); the
 * sizes and offsets the C compiler sees, for test_fp4_abi.cpp to compare with C++'s. */
#include <stddef.h>

#include "nibble/nibble_gemm.h"

size_t nibble_test_c_gemm_problem_size(void) { return sizeof(nibble_gemm_problem); }
size_t nibble_test_c_gemm_problem_offset_tensors(void) { return offsetof(nibble_gemm_problem, tensors); }
size_t nibble_test_c_gemm_problem_offset_global(void) { return offsetof(nibble_gemm_problem, global_scale); }

/* The helper must be usable from C. */
const nibble_tensor* nibble_test_c_find(const nibble_gemm_problem* p, const char* name) {
  return nibble_gemm_find_tensor(p, name);
}
