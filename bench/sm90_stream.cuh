// sm90_stream.cuh: what the sm_90 bench programs (bench_fence_latency, bench_publish) share: the
// bulk-copy weight stream that stands in for the megakernel's ring (one cp.async.bulk global ->
// shared per stage, completing on the stage's mbarrier transaction count, L2 evict-first, from
// fresh DRAM addresses), and an mbarrier wait that can give up.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "solutions/common/sm90_async.cuh"

namespace nibble::bench {

/** Byte offset of stream piece `piece` (consecutive pieces are consecutive `piece_bytes` of the
 *  source, wrapped inside its `src_bytes`; 16-byte aligned). Interleave the SMs' pieces (piece =
 *  n * gridDim.x + blockIdx.x) so that the grid sweeps the source together, as the GEMVs do. */
__host__ __device__ __forceinline__ size_t stream_offset(size_t piece, uint32_t piece_bytes, size_t src_bytes) {
  return (piece * piece_bytes) % (src_bytes - piece_bytes) / 16 * 16;
}

/** One thread: stream piece `piece` into the shared address dst with one bulk copy completing on
 *  the mbarrier at shared address bar (arrive + expect_tx of piece_bytes, then the copy). */
__device__ __forceinline__ void stream_issue(uint32_t dst, uint32_t bar, const unsigned char* src, size_t piece,
                                             uint32_t piece_bytes, size_t src_bytes, uint64_t policy) {
  sol::mbar_expect_tx(bar, piece_bytes);
  sol::bulk_load(dst, src + stream_offset(piece, piece_bytes, src_bytes), piece_bytes, bar, policy);
}

/** One probe of the mbarrier at shared address bar: true once the phase of parity `parity` has
 *  completed, with acquire semantics at CTA scope (PTX's default: the copy engine's bytes of the
 *  thread's own block) or, kCluster, at cluster scope (bytes another CTA of the cluster stored with
 *  st.async). Loop on it with a time limit instead of sol::mbar_wait where a lost completion must
 *  not hang the GPU. */
template <bool kCluster = false>
__device__ __forceinline__ bool mbar_try_wait(uint32_t bar, uint32_t parity) {
  uint32_t ok;
  if constexpr (kCluster)
    asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
                 : "=r"(ok) : "r"(bar), "r"(parity) : "memory");
  else
    asm volatile("{ .reg .pred p; mbarrier.try_wait.parity.shared::cta.b64 p, [%1], %2; selp.u32 %0, 1, 0, p; }"
                 : "=r"(ok) : "r"(bar), "r"(parity) : "memory");
  return ok != 0;
}

}  // namespace nibble::bench
