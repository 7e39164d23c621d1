// grid_sync.cuh: the barrier between the persistent kernel's stages.
//
// Shapes: none. Bytes: two words in L2 (count, generation), one atomic per block per barrier.
// Spec: the issue asks for synchronisation between the fused stages without a kernel boundary; a
// stage's inputs (h, q/k/v, attention, gate/up) are written by every block with atomics, so every
// consumer waits for every producer here.
//
// Self-resetting, no host state: the last block to arrive zeroes the count and then bumps the
// generation, which the others spin on. A block reads the generation before it arrives, so the
// generation cannot move past the value it waits on. The pattern (fence, relaxed atomic, spin,
// fence) is cooperative groups' grid.sync(); all blocks are co-resident because the kernel is
// launched with cudaLaunchCooperativeKernel at no more blocks than the occupancy calculator allows.
#pragma once

#include <cstdint>

#include "solutions/common/gpu_sync.cuh"

namespace nibble::megakernel {

using sol::ld_acquire_gpu;  // solutions/common/gpu_sync.cuh
using sol::st_release_gpu;

/** barrier[0] = arrivals of the current generation (0 between barriers), barrier[1] = generation. */
__device__ __forceinline__ void grid_sync(unsigned* barrier) {
  __syncthreads();
  if (threadIdx.x == 0) {
    const unsigned gen = ld_acquire_gpu(barrier + 1);
    __threadfence();  // this block's writes (ordered before by __syncthreads) before the arrival
    const unsigned arrived = atomicAdd(barrier, 1u) + 1u;
    if (arrived == gridDim.x) {
      atomicExch(barrier, 0u);
      __threadfence();
      st_release_gpu(barrier + 1, gen + 1u);
    } else {
      while (ld_acquire_gpu(barrier + 1) == gen) {
      }
    }
    __threadfence();
  }
  __syncthreads();
}

/**
 * The release/acquire barrier (CUTLASS's generic-barrier pattern) in two halves, so that a caller
 * may work in between (split phase): barrier k of a launch waits for barrier[0] >= (k + 1) *
 * gridDim.x. One red.release per block and a polling ld.acquire, no fence.sc and no reset on the
 * critical path: the count only grows during a launch and is zeroed by the last block to finish
 * (kernel_done), after every block has left its last barrier. The block's use:
 *   __syncthreads(); grid_arrive(...); [work]; grid_wait(...); __syncthreads();
 * grid_arrive: thread sync_tid arrives (release: the block's writes, ordered before it by the block
 * barrier, before the arrival; the fence also waits for every bulk copy the SM has in flight).
 */
__device__ __forceinline__ void grid_arrive(unsigned* barrier, unsigned sync_tid) {
  if (threadIdx.x == sync_tid) sol::red_release_gpu_inc(barrier);
}
/** grid_wait: thread sync_tid waits until every block has arrived at barrier k (target = (k + 1)
 *  x gridDim.x; acquire); the caller's __syncthreads then lets the block go on. */
__device__ __forceinline__ void grid_wait(unsigned* barrier, unsigned target, unsigned sync_tid) {
  if (threadIdx.x == sync_tid)
    while (ld_acquire_gpu(barrier) < target) {
    }
}

/** End of a launch: the last block to get here (every other block has left its last barrier and
 *  its last wait) zeroes the barrier count and the n_flags flags that must start the next launch at
 *  zero. */
__device__ __forceinline__ void kernel_done(unsigned* barrier, unsigned* flags, int n_flags) {
  if (threadIdx.x == 0) {
    if (atomicAdd(barrier + 2, 1u) == gridDim.x - 1) {
      atomicExch(barrier, 0u);
      atomicExch(barrier + 2, 0u);
      for (int i = 0; i < n_flags; ++i) atomicExch(flags + i, 0u);
    }
  }
}

/** Thread sync_tid waits until *flag >= target (acquire); the caller's block barrier then lets the
 *  block go on. */
__device__ __forceinline__ void wait_flag(const unsigned* flag, unsigned target, unsigned sync_tid = 0) {
  if (threadIdx.x == sync_tid)
    while (ld_acquire_gpu(flag) < target) {
    }
}

}  // namespace nibble::megakernel
