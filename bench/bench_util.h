// bench_util.h: what the bench/ programs share: a checked CUDA call that throws (each benchmark
// catches it and reports it with SkipWithError, so a failure is a line in the output, not a crash),
// and a device allocation that frees itself.
#pragma once

#include <cuda_runtime.h>

#include <stdexcept>
#include <string>

#define BENCH_CUDA(call)                                                                          \
  do {                                                                                            \
    const cudaError_t e_ = (call);                                                                \
    if (e_ != cudaSuccess)                                                                        \
      throw std::runtime_error(std::string(#call) + ": " + cudaGetErrorName(e_) + " at " + __FILE__ + \
                               ":" + std::to_string(__LINE__));                                   \
  } while (0)

/** cudaMalloc'd bytes, freed on destruction. */
struct Device {
  void* p = nullptr;
  explicit Device(size_t bytes) { BENCH_CUDA(cudaMalloc(&p, bytes)); }
  ~Device() { cudaFree(p); }
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;
};
