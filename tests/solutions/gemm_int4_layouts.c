/* gemm_int4_layouts.c: GEMM-ABI libraries whose only content is the int4 layout they ask for
 * (nibble_gemm_int4_layout returns INT4_LAYOUT), for the loader's tests (test_solution_library.cpp):
 * a known value is read, an unknown one makes the library NotLoadable. The entry points decline. */
#include "nibble/nibble_gemm.h"

int32_t nibble_abi_version(void) { return NIBBLE_ABI_VERSION; }
int32_t nibble_gemm_abi_version(void) { return NIBBLE_GEMM_ABI_VERSION; }
int32_t nibble_gemm_int4_layout(void) { return INT4_LAYOUT; }
nibble_status nibble_gemm_prepare(const nibble_gemm_problem* p, void* s, void** h, nibble_error* e) {
  (void)p, (void)s, (void)h, (void)e;
  return NIBBLE_ERR_NOT_SUPPORTED;
}
nibble_status nibble_gemm_run(void* h, const nibble_tensor* a, nibble_tensor* c, void* s, nibble_error* e) {
  (void)h, (void)a, (void)c, (void)s, (void)e;
  return NIBBLE_ERR_NOT_SUPPORTED;
}
nibble_status nibble_gemm_teardown(void* h, void* s, nibble_error* e) {
  (void)h, (void)s, (void)e;
  return NIBBLE_OK;
}
