// cublas_check.h: SOL_CUBLAS(call), the cuBLAS twin of SOL_CUDA (abi_util.h): a failed call throws
// AbiFailure (NIBBLE_ERR_OUT_OF_MEMORY for CUBLAS_STATUS_ALLOC_FAILED, NIBBLE_ERR_CUDA otherwise)
// with the file, line, the call as written and cuBLAS's status name, for abi_guard() to report.
// Used by the GEMM reference and the cuBLAS bf16 comparison solution.
#pragma once

#include <cublas_v2.h>

#include <string>

#include "solutions/common/abi_util.h"

namespace nibble::sol {

[[noreturn]] inline void throw_cublas(cublasStatus_t st, const char* call, const char* file, int line) {
  throw AbiFailure(st == CUBLAS_STATUS_ALLOC_FAILED ? NIBBLE_ERR_OUT_OF_MEMORY : NIBBLE_ERR_CUDA,
                   std::string(file) + ":" + std::to_string(line) + ": " + call + ": " + cublasGetStatusName(st) +
                       " (" + cublasGetStatusString(st) + ")");
}

}  // namespace nibble::sol

#define SOL_CUBLAS(call)                                                                              \
  do {                                                                                                \
    const cublasStatus_t sol_st_ = (call);                                                            \
    if (sol_st_ != CUBLAS_STATUS_SUCCESS) ::nibble::sol::throw_cublas(sol_st_, #call, __FILE__, __LINE__); \
  } while (0)

namespace nibble::sol {

/** A cuBLAS handle owned once: destroyed by release() (checked) or, after a failure, by the
 *  destructor (unchecked: the process is reporting another error). */
struct CublasHandle {
  cublasHandle_t h = nullptr;
  CublasHandle() = default;
  CublasHandle(const CublasHandle&) = delete;
  CublasHandle& operator=(const CublasHandle&) = delete;
  ~CublasHandle() {
    if (h) cublasDestroy(h);
  }
  /** Create it on `stream` with math mode `math`. */
  void create(cudaStream_t stream, cublasMath_t math = CUBLAS_DEFAULT_MATH) {
    SOL_CUBLAS(cublasCreate(&h));
    SOL_CUBLAS(cublasSetMathMode(h, math));
    SOL_CUBLAS(cublasSetStream(h, stream));
  }
  void release() {
    const cublasStatus_t st = h ? cublasDestroy(h) : CUBLAS_STATUS_SUCCESS;
    h = nullptr;
    SOL_CUBLAS(st);
  }
};

}  // namespace nibble::sol
