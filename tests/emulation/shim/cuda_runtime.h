// shim/cuda_runtime.h: the CUDA runtime as the CPU emulation (tests/emulation/emu_core.h) needs it:
// the kernel-language keywords as plain C++, the vector types, __ldg / __ldcs checked against the
// registered allocations, cudaMalloc as an exact-size registered host allocation, copies as memcpy,
// cudaLaunchKernelEx running the kernel on fibers. Only what the emulated headers use.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <cstring>

#include "emu_core.h"

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __shared__ static
#define __launch_bounds__(...)

struct uint2 {
  uint32_t x, y;
};
struct alignas(16) uint4 {
  uint32_t x, y, z, w;
};
struct float2 {
  float x, y;
};
inline uint4 make_uint4(uint32_t x, uint32_t y, uint32_t z, uint32_t w) { return uint4{x, y, z, w}; }
template <class T>
inline T __ldg(const T* p) {
  ::emu::check_load(p, sizeof(T), sizeof(T) >= 16 ? 16 : sizeof(T), "__ldg");
  return *p;
}
template <class T>
inline T __ldcs(const T* p) {
  ::emu::check_load(p, sizeof(T), sizeof(T) >= 16 ? 16 : sizeof(T), "__ldcs");
  return *p;
}

typedef struct CUstream_st* cudaStream_t;
enum cudaError_t { cudaSuccess = 0, cudaErrorMemoryAllocation = 2 };
using cudaError = cudaError_t;
enum cudaMemcpyKind { cudaMemcpyHostToDevice = 1, cudaMemcpyDeviceToHost = 2 };
inline cudaError_t cudaMemcpyAsync(void* d, const void* s, size_t n, cudaMemcpyKind, cudaStream_t) {
  std::memcpy(d, s, n);
  return cudaSuccess;
}
inline cudaError_t cudaStreamSynchronize(cudaStream_t) { return cudaSuccess; }
inline cudaError_t cudaGetLastError() { return cudaSuccess; }
inline const char* cudaGetErrorName(cudaError_t) { return "cudaEmulated"; }
inline const char* cudaGetErrorString(cudaError_t) { return "emulated"; }
/** Exact-size, 256-byte aligned like cudaMalloc, filled with 0xCD, registered for the load checks. */
inline cudaError_t cudaMalloc(void** p, size_t n) {
  const size_t padded = (n + 255) / 256 * 256;
  *p = std::aligned_alloc(256, padded ? padded : 256);
  if (!*p) return cudaErrorMemoryAllocation;
  std::memset(*p, 0xCD, padded);
  ::emu::reg("cudaMalloc", *p, n);
  return cudaSuccess;
}
inline cudaError_t cudaFree(void* p) {
  ::emu::unreg(p);
  std::free(p);
  return cudaSuccess;
}

struct cudaLaunchConfig_t {
  dim3 gridDim, blockDim;
  size_t dynamicSmemBytes = 0;
  cudaStream_t stream = nullptr;
  void* attrs = nullptr;
  unsigned numAttrs = 0;
};
template <class... P, class... Args>
cudaError_t cudaLaunchKernelEx(const cudaLaunchConfig_t* cfg, void (*kernel)(P...), Args&&... args) {
  ::emu::launch(kernel, cfg->gridDim, cfg->blockDim, static_cast<P>(args)...);
  return cudaSuccess;
}
