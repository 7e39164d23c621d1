// hash.h: the 64-bit mixes the harness computes on both sides of the GPU, so that the host can
// recompute what a kernel did: the order-independent checksum of device_checksum (gpu_checks.h),
// which also commits a timed call's outputs to the call ledger, and the sign masks of the GEMM
// grader's replay guard (gemm_call_a).
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>

#include "fixtures/host_device.h"

namespace nibble {

inline constexpr uint64_t kHashGolden = 0x9e3779b97f4a7c15ull;

/** splitmix64's finaliser (Steele, Lea & Flood 2014; a bijection on uint64). */
NIBBLE_HD uint64_t mix64_finalise(uint64_t x) {
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
  return x ^ (x >> 31);
}

/** What the 8-byte word of index `w` (in the checksummed range) with value `v` adds, mod 2^64, to
 *  device_checksum: splitmix64 (its increment, then its finaliser) of v ^ (w * golden ratio). */
NIBBLE_HD uint64_t checksum_term(uint64_t v, uint64_t w) {
  return mix64_finalise((v ^ (w * kHashGolden)) + kHashGolden);
}

/** The sign mask of elements 64w .. 64w + 63 of the GEMM replay guard's A for (seed, call): bit
 *  e % 64 set flips element e's sign (gemm_call_a). */
NIBBLE_HD uint64_t sign_mask_word(uint64_t seed, int64_t call, int64_t w) {
  return mix64_finalise(seed * kHashGolden + uint64_t(call) * 0xbf58476d1ce4e5b9ull + uint64_t(w) * 0x94d049bb133111ebull);
}

/** The fold of a range's last bytes % 8 bytes into its checksum (device_checksum_bytes folds them
 *  on the host the same way). */
inline uint64_t checksum_fold_tail(uint64_t h, const uint8_t* tail, size_t n) {
  for (size_t i = 0; i < n; ++i) h = h * 1099511628211ull + tail[i] + 1;  // FNV-style
  return h;
}

/** device_checksum_bytes computed on the host, bit for bit: the bytes at p as little-endian 8-byte
 *  words (any alignment), then the tail folded. */
inline uint64_t host_checksum_bytes(const void* p, size_t bytes) {
  const auto* b = static_cast<const uint8_t*>(p);
  uint64_t h = 0;
  const size_t words = bytes / 8;
  for (size_t w = 0; w < words; ++w) {
    uint64_t v = 0;
    std::memcpy(&v, b + w * 8, 8);
    h += checksum_term(v, w);
  }
  return checksum_fold_tail(h, b + words * 8, bytes - words * 8);
}

}  // namespace nibble
