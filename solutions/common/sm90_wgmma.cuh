// sm90_wgmma.cuh: the sm_90a warpgroup instructions the dequantising wgmma GEMM uses (the TMA tile
// load, wgmma's fence / commit / wait and shared-memory descriptor, setmaxnreg, named barriers),
// named here so that the CPU emulation (tests/emulation) can stand in for them. wgmma itself:
// wgmma_rs.cuh.
#pragma once

#include <cuda.h>  // CUtensorMap

#include <cstdint>

#include "solutions/common/sm90_async.cuh"
#include "solutions/common/wgmma_rs.cuh"

namespace nibble::sol {
namespace {

/** TMA: the (64 k x rows) box at (k, m) of the tensor map into dst, completing on bar. */
__device__ __forceinline__ void tma_load_2d(void* dst, const CUtensorMap* map, uint64_t* bar, int k, int m) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];" ::"r"(
          smem_addr(dst)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(k), "r"(m), "r"(smem_addr(bar))
      : "memory");
}

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
}

/** Keeps the compiler from moving accumulator reads/writes across the asynchronous wgmma. */
template <int R>
__device__ __forceinline__ void fence_acc(float (&d)[R]) {
#pragma unroll
  for (int i = 0; i < R; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

/** Shared-memory descriptor of a K-major bf16 tile with 128-byte rows, 128B swizzle (8-row groups of
 *  1024 bytes), starting at byte address `addr` (a k16 step adds 32 bytes). */
__device__ __forceinline__ uint64_t desc_sw128(uint32_t addr) {
  return uint64_t((addr & 0x3FFFFu) >> 4) | (uint64_t(1) << 16) | (uint64_t(1024 >> 4) << 32) | (uint64_t(1) << 62);
}

/** setmaxnreg: this warpgroup's register budget down to / up to R per thread. */
template <int R>
__device__ __forceinline__ void setmaxnreg_dec() {
  asm volatile("setmaxnreg.dec.sync.aligned.u32 %0;" ::"n"(R));
}
template <int R>
__device__ __forceinline__ void setmaxnreg_inc() {
  asm volatile("setmaxnreg.inc.sync.aligned.u32 %0;" ::"n"(R));
}

/** bar.sync kId, kThreads: the named barrier of kThreads threads (a multiple of 32). */
template <int kId, int kThreads>
__device__ __forceinline__ void named_barrier_sync() {
  asm volatile("bar.sync %0, %1;" ::"n"(kId), "n"(kThreads) : "memory");
}

/** Bring a tensor map (a __grid_constant__ kernel parameter) into the TMA unit's cache. */
__device__ __forceinline__ void prefetch_tensormap(const void* map) {
  asm volatile("prefetch.tensormap [%0];" ::"l"(reinterpret_cast<uint64_t>(map)) : "memory");
}

}  // namespace
}  // namespace nibble::sol
