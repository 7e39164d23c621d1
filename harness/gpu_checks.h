// gpu_checks.h: checksums and scans computed on the GPU, so the grader can prove that a candidate
// left its inputs alone (weights, the KV prefix, the token ids) and wrote nothing where it must not;
// BLAKE3, with which a timed call commits its outputs to the call ledger; the GEMM replay guard's A,
// staged on the GPU inside the call's window; and the read-only stream that measures the GEMM
// tasks' weight-read floor.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "harness/hash.h"

namespace nibble {

/**
 * Order-independent 64-bit checksum of `blocks` byte ranges: range b starts at
 * base + b * block_stride_bytes and is `bytes_per_block` long (a multiple of 8, 8-byte aligned).
 * Each 8-byte word contributes splitmix64(word ^ (its global word index * golden ratio)), summed
 * mod 2^64 (checksum_term, harness/hash.h), so any changed, moved or swapped word changes the sum
 * with probability ~1 - 2^-64.
 * Synchronises `stream`. Throws CudaError.
 */
uint64_t device_checksum(const void* base, size_t blocks, size_t block_stride_bytes, size_t bytes_per_block,
                         cudaStream_t stream);

/** The same over one contiguous range. */
inline uint64_t device_checksum(const void* p, size_t bytes, cudaStream_t stream) {
  return device_checksum(p, 1, bytes, bytes, stream);
}

/** The checksum of all `bytes` bytes at p (8-byte aligned), any length: the whole 8-byte words on
 *  the GPU, then the last bytes % 8 folded in on the host, so a change in a tensor's tail counts
 *  too; host_checksum_bytes (harness/hash.h) is the same function on the host. Synchronises
 *  `stream`. Throws CudaError. */
uint64_t device_checksum_bytes(const void* p, size_t bytes, cudaStream_t stream);

/** Number of non-zero 8-byte words in the same strided ranges. Synchronises `stream`. */
uint64_t device_count_nonzero(const void* base, size_t blocks, size_t block_stride_bytes, size_t bytes_per_block,
                              cudaStream_t stream);

/** BLAKE3 of the `bytes` bytes at p (device memory, any alignment; 16-byte aligned reads faster):
 *  chunk CVs and whole 64-leaf subtrees on the GPU, the last levels and the root on the host, bit for
 *  bit host_blake3 (harness/hash.h). A timed call's commitment of its outputs: binding where a sum of
 *  per-word terms is not (a generalised birthday search finds other outputs with the same sum).
 *  Synchronises `stream`. Throws CudaError. */
Digest device_blake3(const void* p, size_t bytes, cudaStream_t stream);

/** gemm_call_a on the GPU, bit for bit: writes n bf16 bit patterns to `a` (device), `a0` (device)
 *  with each element's sign flipped where its bit of sign_mask_word(seed, call, e / 64) is set; call
 *  0 copies a0. Launch-checked on `stream`; does not synchronise. Throws CudaError. */
void launch_sign_mask(const uint16_t* a0, uint16_t* a, int64_t n, uint64_t seed, int64_t call, cudaStream_t stream);

/**
 * Reads the first bytes / 16 * 16 bytes at p (16-byte aligned) once with 16-byte loads (L1 not
 * allocated) and does nothing else: the fastest kernel that must read that many bytes, whose GPU
 * span after an L2 flush is the GEMM grader's weight-read floor (`nibble __probe
 * --read-floor-bytes`, bench_stream_floor). Grid: `blocks_per_sm` blocks of 512 threads per SM
 * (4: the SM's 2048 threads), each thread up to 4 loads in flight. Launch-checked on `stream`; does
 * not synchronise. Throws CudaError.
 */
void launch_read_stream(const void* p, size_t bytes, cudaStream_t stream, int blocks_per_sm = 4);

/** Launches of an empty kernel per batch of host_launch_us, and its batches. */
inline constexpr int kHostLaunchBatch = 256, kHostLaunchBatches = 7;
/** The host's time per kernel launch, us: the median over kHostLaunchBatches batches of the mean
 *  host time (steady_clock) of kHostLaunchBatch back-to-back launches of an empty 1-thread kernel on
 *  `stream`, after one batch to warm up, each batch synchronised before the next. What a launch-bound
 *  path's time off the GPU scales with (the hidden-time allowance, verdict.h): 2.6-5.9 us on the
 *  H100 and H200 hosts of 2026-11 and 12 with no CUPTI subscriber (bench/probe_cupti_launches.cu,
 *  "bare", which also prints this function's figure). A median, not a minimum, on purpose: it
 *  holds the host's load during the grade (4.83 us under the test command's 16 jobs on a host whose
 *  idle probe read 3.39, 2026-12-07), which an honest launch-bound call pays too. The grader's
 *  child calls it with nothing subscribed to CUPTI (under --graph-records graphs CUPTI's library
 *  is loaded, its device-graph switch set, nothing enabled). Launch-checked; throws CudaError. */
double host_launch_us(cudaStream_t stream);

}  // namespace nibble
