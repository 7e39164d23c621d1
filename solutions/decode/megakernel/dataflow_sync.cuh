// dataflow_sync.cuh: how the dataflow megakernel's segments publish their rows and wait for the rows
// they read (issue 21 step 3; NOTES.md "v2": scheme (a) of step 2, a release reduction on a counter
// and acquire polls, the consumers' barrier making it cumulative for the CTA).
//
// Counters only grow, so nothing is reset between layers or steps: a publisher adds 1 per (step,
// layer) to its counter, and the n-th publication of a counter that `per` publishers share is
// complete when it reads >= per x n. With seq = step x n_layers + layer + 1 (the decode step's
// publications numbered from 1 over the model's life) a wait for layer `layer` of step `step` is a
// wait for >= per x seq, compared modulo 2^32 (serial-number arithmetic: a counter that wraps past
// 2^32 still compares right while it is less than 2^31 behind its target). This assumes counters
// zeroed once, `step` the number of earlier launches on them, one counter per (kind, block) and
// `per` fixed; a kind published once per step (the LM head) waits for per x (step + 1) instead.
// A sum of `per` publishers' counts reaching per x n proves each has published n only if none can be
// two publications ahead of another (n + 1 and n - 1 would pass too): the dataflow plan keeps that,
// since every CTA's next publication of a kind follows a grid-wide wait on the previous layer
// (qkv(l + 1) waits for every down(l), which waits behind every o(l) through gate|up; a wait polls
// every counter of its range, a cluster without tiles included: tests/decode/test_dataflow_plan.cpp
// checks the invariant over exactly those waits). A plan without such a wait needs one counter per
// publisher.
// The wait covers the consumer warps' ordinary loads only: not the producer warp (not in the
// consumers' barrier), not __ldg / const __restrict__ loads (the non-coherent path), and not bulk
// copies (the async proxy): the producer never streams what the launch itself writes (the K/V row
// at pos).
#pragma once

#include <cstdint>

#include "segment_gemv.cuh"
#include "solutions/common/gpu_sync.cuh"

namespace nibble::megakernel::v2 {

/** The publication number of layer `layer` of decode step `step` (from 1). */
__host__ __device__ __forceinline__ unsigned publication(unsigned step, unsigned n_layers, unsigned layer) {
  return step * n_layers + layer + 1;
}

/** Consumer warp w of W, after writing this CTA's share of a publication: the consumers' barrier
 *  (every row written; `synced`: the caller has just passed one, e.g. segment_gemv's last, and
 *  nothing was written since), then one release reduction on the counter. */
template <int W>
__device__ __forceinline__ void publish(unsigned* counter, uint32_t w, bool synced = false) {
  if (!synced) consumers_sync<W>();
  if (w == 0 && (threadIdx.x & 31) == 0) sol::red_release_gpu_inc(counter);
}

/** Consumer warp w of W: wait until counters[lo, hi) all read >= target (acquire at gpu scope,
 *  polled by the consumer threads, each its own counters), then the consumers' barrier: whatever
 *  the publishers wrote before their release is visible to every consumer thread after it. */
template <int W>
__device__ __forceinline__ void wait_published(const unsigned* counters, int lo, int hi, unsigned target, uint32_t w) {
  for (int i = lo + int(w) * 32 + int(threadIdx.x & 31); i < hi; i += 32 * W)
    while (int(sol::ld_acquire_gpu(counters + i) - target) < 0) {
    }
  consumers_sync<W>();
}

}  // namespace nibble::megakernel::v2
