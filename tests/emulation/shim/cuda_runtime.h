// shim/cuda_runtime.h: the CUDA runtime as the CPU emulation (tests/emulation/emu_core.h) needs it:
// the kernel-language keywords as plain C++, the vector types, __ldg / __ldcs checked against the
// registered allocations, cudaMalloc as an exact-size registered host allocation, copies as memcpy,
// cudaLaunchKernelEx running the kernel on fibers. Only what the emulated headers use.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <type_traits>
#include <utility>

#include <cmath>

#include "cuda.h"
#include "emu_async.h"
#include "emu_core.h"
#include "emu_wgmma.h"

#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __shared__ static
#define __launch_bounds__(...)
#define __align__(n) alignas(n)
#define __grid_constant__

struct uint2 {
  uint32_t x, y;
};
struct alignas(16) uint4 {
  uint32_t x, y, z, w;
};
struct float2 {
  float x, y;
};
struct alignas(16) float4 {
  float x, y, z, w;
};
struct alignas(8) int2 {
  int x, y;
};
struct alignas(16) int4 {
  int x, y, z, w;
};
inline uint4 make_uint4(uint32_t x, uint32_t y, uint32_t z, uint32_t w) { return uint4{x, y, z, w}; }
inline uint2 make_uint2(uint32_t x, uint32_t y) { return uint2{x, y}; }
inline float2 make_float2(float x, float y) { return float2{x, y}; }
inline float4 make_float4(float x, float y, float z, float w) { return float4{x, y, z, w}; }
inline int2 make_int2(int x, int y) { return int2{x, y}; }
inline int4 make_int4(int x, int y, int z, int w) { return int4{x, y, z, w}; }

// Bit casts and conversions.
inline float __uint_as_float(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
inline float __int_as_float(int i) { return __uint_as_float(uint32_t(i)); }
inline uint32_t __float_as_uint(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}
inline int __float_as_int(float f) { return int(__float_as_uint(f)); }
inline int __float2int_rn(float f) { return int(std::nearbyint(f)); }  // the default rounding: to nearest even
// CUDA's min / max overloads (the device library's, for the integer types the kernels use).
inline int min(int a, int b) { return a < b ? a : b; }
inline int max(int a, int b) { return a > b ? a : b; }
inline unsigned min(unsigned a, unsigned b) { return a < b ? a : b; }
inline unsigned max(unsigned a, unsigned b) { return a > b ? a : b; }
inline long long min(long long a, long long b) { return a < b ? a : b; }
inline long long max(long long a, long long b) { return a > b ? a : b; }
inline unsigned long min(unsigned long a, unsigned long b) { return a < b ? a : b; }
inline unsigned long max(unsigned long a, unsigned long b) { return a > b ? a : b; }
inline long long clock64() { return ++::emu::events; }

/** PRMT's default mode: byte i of the result is byte s[i] (selector nibble i, 0..7) of {y, x}. */
inline uint32_t __byte_perm(uint32_t x, uint32_t y, uint32_t s) {
  const uint64_t src = (uint64_t(y) << 32) | x;
  uint32_t r = 0;
  for (int i = 0; i < 4; ++i) r |= uint32_t((src >> (8 * ((s >> (4 * i)) & 7u))) & 0xFFu) << (8 * i);
  return r;
}
inline void __threadfence() {}  // the emulation is sequentially consistent

// Atomics: fibers switch only at barriers and waits, so a plain update is atomic here.
inline float atomicAdd(float* p, float v) {
  const float old = *p;
  *p = old + v;
  return old;
}
inline unsigned atomicAdd(unsigned* p, unsigned v) {
  const unsigned old = *p;
  *p = old + v;
  return old;
}
inline unsigned atomicExch(unsigned* p, unsigned v) {
  const unsigned old = *p;
  *p = v;
  return old;
}
inline unsigned long long atomicAdd(unsigned long long* p, unsigned long long v) {
  const unsigned long long old = *p;
  *p = old + v;
  return old;
}
template <class T>
inline T __ldg(const T* p) {
  ::emu::check_load(p, sizeof(T), sizeof(T) >= 16 ? 16 : sizeof(T), "__ldg");
  return *p;
}
template <class T>
inline T __ldcg(const T* p) {
  ::emu::check_load(p, sizeof(T), sizeof(T) >= 16 ? 16 : sizeof(T), "__ldcg");
  return *p;
}
template <class T>
inline T __ldcs(const T* p) {
  ::emu::check_load(p, sizeof(T), sizeof(T) >= 16 ? 16 : sizeof(T), "__ldcs");
  return *p;
}

typedef struct CUstream_st* cudaStream_t;
enum cudaError_t {
  cudaSuccess = 0,
  cudaErrorInvalidValue = 1,
  cudaErrorMemoryAllocation = 2,
  cudaErrorCooperativeLaunchTooLarge = 720,
  cudaErrorNotSupported = 801
};
using cudaError = cudaError_t;
enum cudaMemcpyKind { cudaMemcpyHostToDevice = 1, cudaMemcpyDeviceToHost = 2, cudaMemcpyDeviceToDevice = 3 };
inline cudaError_t cudaMemcpyAsync(void* d, const void* s, size_t n, cudaMemcpyKind, cudaStream_t) {
  std::memcpy(d, s, n);
  return cudaSuccess;
}
inline cudaError_t cudaMemcpy(void* d, const void* s, size_t n, cudaMemcpyKind) {
  std::memcpy(d, s, n);
  return cudaSuccess;
}
inline cudaError_t cudaMemsetAsync(void* d, int v, size_t n, cudaStream_t = nullptr) {
  std::memset(d, v, n);
  return cudaSuccess;
}
inline cudaError_t cudaMemset(void* d, int v, size_t n) { return cudaMemsetAsync(d, v, n); }
inline cudaError_t cudaStreamSynchronize(cudaStream_t) { return cudaSuccess; }
inline cudaError_t cudaDeviceSynchronize() { return cudaSuccess; }

// The emulated device: an sm_90 with emu::sm_count SMs (a few: every block is a fiber group).
enum cudaDeviceAttr {
  cudaDevAttrMultiProcessorCount = 16,
  cudaDevAttrComputeCapabilityMajor = 75,
  cudaDevAttrComputeCapabilityMinor = 76,
  cudaDevAttrMaxSharedMemoryPerBlockOptin = 97
};
namespace emu {
inline int sm_count = 4;
}
inline cudaError_t cudaGetDevice(int* d) {
  *d = 0;
  return cudaSuccess;
}
inline cudaError_t cudaDeviceGetAttribute(int* v, cudaDeviceAttr a, int) {
  *v = a == cudaDevAttrMultiProcessorCount         ? ::emu::sm_count
       : a == cudaDevAttrComputeCapabilityMajor     ? 9
       : a == cudaDevAttrComputeCapabilityMinor     ? 0
       : a == cudaDevAttrMaxSharedMemoryPerBlockOptin ? 227 * 1024
                                                     : 0;
  return cudaSuccess;
}
/** The properties the solutions read: an sm_90 with emu::sm_count SMs. */
struct cudaDeviceProp {
  int major = 9, minor = 0, multiProcessorCount = 4;
  size_t sharedMemPerBlockOptin = 227 * 1024;
};
inline cudaError_t cudaGetDeviceProperties(cudaDeviceProp* p, int) {
  *p = cudaDeviceProp{};
  p->multiProcessorCount = ::emu::sm_count;
  return cudaSuccess;
}
enum cudaFuncAttribute { cudaFuncAttributeMaxDynamicSharedMemorySize = 8 };
template <class F>
cudaError_t cudaFuncSetAttribute(F, cudaFuncAttribute, int) {
  return cudaSuccess;
}
/** A kernel's attributes: the emulated kernels declare no static shared memory. */
struct cudaFuncAttributes {
  size_t sharedSizeBytes = 0;
};
template <class F>
cudaError_t cudaFuncGetAttributes(cudaFuncAttributes* a, F) {
  *a = cudaFuncAttributes{};
  return cudaSuccess;
}
template <class F>
cudaError_t cudaOccupancyMaxActiveBlocksPerMultiprocessor(int* n, F, int, size_t) {
  *n = 1;
  return cudaSuccess;
}
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

enum cudaLaunchAttributeID { cudaLaunchAttributeCooperative = 2, cudaLaunchAttributeClusterDimension = 4 };
struct cudaLaunchAttribute {
  cudaLaunchAttributeID id;
  struct {
    struct {
      unsigned x, y, z;
    } clusterDim;
    int cooperative;  // a cluster launch here is cooperative anyway: every block resident at once
  } val;
};
struct cudaLaunchConfig_t {
  dim3 gridDim, blockDim;
  size_t dynamicSmemBytes = 0;
  cudaStream_t stream = nullptr;
  cudaLaunchAttribute* attrs = nullptr;
  unsigned numAttrs = 0;
};

/** Clusters of cfg's cluster size resident at once: the emulated SMs hold one block each. */
template <class F>
cudaError_t cudaOccupancyMaxActiveClusters(int* n, F, const cudaLaunchConfig_t* cfg) {
  unsigned size = 1;
  for (unsigned i = 0; i < cfg->numAttrs; ++i)
    if (cfg->attrs[i].id == cudaLaunchAttributeClusterDimension)
      size = cfg->attrs[i].val.clusterDim.x * cfg->attrs[i].val.clusterDim.y * cfg->attrs[i].val.clusterDim.z;
  *n = ::emu::sm_count / int(size);
  return cudaSuccess;
}

// The driver entry point the TMA path asks for: cuTensorMapEncodeTiled, recording the map.
enum cudaGetDriverEntryPointFlags { cudaEnableDefault = 0 };
enum cudaDriverEntryPointQueryResult { cudaDriverEntryPointSuccess = 0, cudaDriverEntryPointSymbolNotFound = 1 };
namespace emu {
inline CUresult encode_tiled(CUtensorMap* map, CUtensorMapDataType, cuuint32_t rank, void* base, const cuuint64_t* dims,
                             const cuuint64_t* strides, const cuuint32_t* box, const cuuint32_t*, CUtensorMapInterleave,
                             CUtensorMapSwizzle swizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill) {
  if (rank != 2) return CUDA_ERROR_INVALID_VALUE;
  TensorMap2D t{static_cast<const unsigned char*>(base), {dims[0], dims[1]}, strides[0], {box[0], box[1]}, 2,
                swizzle == CU_TENSOR_MAP_SWIZZLE_128B};
  static_assert(sizeof(TensorMap2D) <= sizeof(CUtensorMap), "the recorded map fits a CUtensorMap");
  std::memset(map, 0, sizeof *map);
  std::memcpy(map, &t, sizeof t);
  return CUDA_SUCCESS;
}
}  // namespace emu
inline cudaError_t cudaGetDriverEntryPointByVersion(const char* name, void** fn, unsigned, cudaGetDriverEntryPointFlags,
                                                    cudaDriverEntryPointQueryResult* q) {
  if (std::strcmp(name, "cuTensorMapEncodeTiled") != 0) {
    *q = cudaDriverEntryPointSymbolNotFound;
    return cudaSuccess;
  }
  *fn = reinterpret_cast<void*>(&::emu::encode_tiled);
  *q = cudaDriverEntryPointSuccess;
  return cudaSuccess;
}
namespace emu {
template <class... P, size_t... I>
void launch_cooperative_args(void (*kernel)(P...), dim3 grid, dim3 block, size_t smem, void** args,
                             std::index_sequence<I...>) {
  launch_cooperative(kernel, grid, block, smem, 1u, *static_cast<std::remove_cv_t<std::remove_reference_t<P>>*>(args[I])...);
}
}  // namespace emu
/** Every block resident at once (emu::launch_cooperative); args[i] points at the kernel's i-th parameter. */
template <class... P>
cudaError_t cudaLaunchCooperativeKernel(void (*kernel)(P...), dim3 grid, dim3 block, void** args, size_t smem,
                                        cudaStream_t) {
  // co-residency: at most one block per emulated SM (cudaOccupancyMaxActiveBlocksPerMultiprocessor says 1)
  if (grid.x * grid.y * grid.z > unsigned(::emu::sm_count)) return cudaErrorInvalidValue;
  ::emu::launch_cooperative_args(kernel, grid, block, smem, args, std::index_sequence_for<P...>{});
  return cudaSuccess;
}
namespace emu {
/** The grid and cluster size (along z; 1 without a cluster) of the last cudaLaunchKernelEx: what a
 *  test checks a host launch chose, which a correct sum cannot show (any split gives the same C). */
inline dim3 g_last_ex_grid;
inline unsigned g_last_ex_cluster = 1;
}  // namespace emu
template <class... P, class... Args>
cudaError_t cudaLaunchKernelEx(const cudaLaunchConfig_t* cfg, void (*kernel)(P...), Args&&... args) {
  ::emu::g_last_ex_grid = cfg->gridDim;
  ::emu::g_last_ex_cluster = 1;
  for (unsigned i = 0; i < cfg->numAttrs; ++i)
    if (cfg->attrs[i].id == cudaLaunchAttributeClusterDimension) ::emu::g_last_ex_cluster = cfg->attrs[i].val.clusterDim.z;
  for (unsigned i = 0; i < cfg->numAttrs; ++i)
    if (cfg->attrs[i].id == cudaLaunchAttributeClusterDimension) {
      const auto& cd = cfg->attrs[i].val.clusterDim;
      if (cd.x != 1 || cd.y != 1) ::emu::die("emu: clusters along z only");
      if (cd.z > 1) {
        ::emu::launch_cooperative(kernel, cfg->gridDim, cfg->blockDim, cfg->dynamicSmemBytes, cd.z, static_cast<P>(args)...);
        return cudaSuccess;
      }
    }
  ::emu::launch(kernel, cfg->gridDim, cfg->blockDim, cfg->dynamicSmemBytes, static_cast<P>(args)...);
  return cudaSuccess;
}

// Warp collectives (full-warp masks only: what the emulated kernels use).
inline void __syncwarp(unsigned = 0xFFFFFFFFu) { ::emu::warp_collective(::emu::kOpSyncwarp); }
template <class T>
inline T __shfl_sync(unsigned, T v, int src) {
  return ::emu::warp_shuffle(v, src);
}
template <class T>
inline T __shfl_xor_sync(unsigned, T v, int mask) {
  return ::emu::warp_shuffle(v, int(::emu::g_threadIdx.x % 32) ^ mask);
}
inline unsigned __reduce_add_sync(unsigned, unsigned v) {
  return ::emu::warp_reduce(v, [](unsigned a, unsigned b) { return a + b; });
}
inline unsigned __reduce_max_sync(unsigned, unsigned v) {
  return ::emu::warp_reduce(v, [](unsigned a, unsigned b) { return a > b ? a : b; });
}
inline int __reduce_add_sync(unsigned, int v) {
  return ::emu::warp_reduce(v, [](int a, int b) { return a + b; });
}
inline int __reduce_max_sync(unsigned, int v) {
  return ::emu::warp_reduce(v, [](int a, int b) { return a > b ? a : b; });
}
inline size_t __cvta_generic_to_shared(const void* p) { return ::emu::smem_address(p); }
