// gpu_test_util.h: skip a GPU test, with the reason, on a machine without a usable GPU.
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <string>

namespace nibble::test {

/** True when a CUDA device is usable; otherwise *why says what the runtime answered. */
inline bool gpu_available(std::string* why) {
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess) {
    *why = std::string("no usable CUDA device: ") + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")";
    cudaGetLastError();
    return false;
  }
  if (n == 0) {
    *why = "no CUDA device present";
    return false;
  }
  return true;
}

}  // namespace nibble::test

/** First statement of every GPU test. */
#define NIBBLE_REQUIRE_GPU()                                        \
  do {                                                              \
    std::string nibble_why_;                                        \
    if (!::nibble::test::gpu_available(&nibble_why_))               \
      GTEST_SKIP() << "GPU test skipped: " << nibble_why_;          \
  } while (0)
