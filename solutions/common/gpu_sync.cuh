// gpu_sync.cuh: the gpu-scope release/acquire operations the persistent kernels synchronise their
// blocks with (PTX ISA, "Memory Consistency Model": .release / .acquire at .gpu scope; sm_70+).
// Named here, not inline in each kernel, so that the CPU emulation (tests/emulation) can stand in.
#pragma once

#include <cstdint>

namespace nibble::sol {

/** *p, acquire at gpu scope: later accesses are ordered after it and see what the releasing side
 *  published before its release. */
__device__ __forceinline__ unsigned ld_acquire_gpu(const unsigned* p) {
  unsigned v;
  asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(p) : "memory");
  return v;
}

/** *p = v, release at gpu scope. */
__device__ __forceinline__ void st_release_gpu(unsigned* p, unsigned v) {
  asm volatile("st.release.gpu.global.u32 [%0], %1;" ::"l"(p), "r"(v) : "memory");
}

/** *p += 1, a release reduction at gpu scope (no value returned). */
__device__ __forceinline__ void red_release_gpu_inc(unsigned* p) {
  asm volatile("red.release.gpu.global.add.u32 [%0], 1;" ::"l"(p) : "memory");
}

/** *p += 1, a release atomic at gpu scope; returns the old value. */
__device__ __forceinline__ unsigned atom_release_gpu_inc(unsigned* p) {
  unsigned old;
  asm volatile("atom.release.gpu.global.add.u32 %0, [%1], 1;" : "=r"(old) : "l"(p) : "memory");
  return old;
}

}  // namespace nibble::sol
