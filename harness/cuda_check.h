// cuda_check.h: checked CUDA calls (after nvbench's NVBENCH_CUDA_CALL).
//
// NIBBLE_CUDA_CALL throws nibble::CudaError with the file, line, error name and the call as
// written; NIBBLE_CUDA_CALL_NOEXCEPT logs instead, for destructors. NIBBLE_CHECK_LAUNCH follows
// every kernel launch.
#pragma once

#include <cuda_runtime.h>

#include <cstdio>
#include <stdexcept>
#include <string>

namespace nibble {

struct CudaError : std::runtime_error {
  cudaError_t code;
  CudaError(cudaError_t c, const std::string& what) : std::runtime_error(what), code(c) {}
};

[[noreturn]] inline void throw_cuda_error(cudaError_t e, const char* call, const char* file, int line) {
  throw CudaError(e, std::string(file) + ":" + std::to_string(line) + ": " + call + " failed: " +
                         cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")");
}

}  // namespace nibble

#define NIBBLE_CUDA_CALL(call)                                                      \
  do {                                                                              \
    const cudaError_t nibble_e_ = (call);                                           \
    if (nibble_e_ != cudaSuccess) ::nibble::throw_cuda_error(nibble_e_, #call, __FILE__, __LINE__); \
  } while (0)

#define NIBBLE_CUDA_CALL_NOEXCEPT(call)                                             \
  do {                                                                              \
    const cudaError_t nibble_e_ = (call);                                           \
    if (nibble_e_ != cudaSuccess)                                                   \
      std::fprintf(stderr, "%s:%d: %s failed: %s\n", __FILE__, __LINE__, #call,     \
                   cudaGetErrorName(nibble_e_));                                    \
  } while (0)

#define NIBBLE_CHECK_LAUNCH() NIBBLE_CUDA_CALL(cudaGetLastError())
