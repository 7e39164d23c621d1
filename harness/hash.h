// hash.h: the hashes the harness computes on both sides of the GPU, so that the host can recompute
// what a kernel did: the order-independent checksum of device_checksum (gpu_checks.h), the sign
// masks of the GEMM grader's replay guard (gemm_call_a), and BLAKE3, the digest with which a timed
// call's "done" commits its outputs to the call ledger (device_blake3).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

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

// BLAKE3 (O'Connor, Aumasson, Neves, Wilcox-O'Hearn, "BLAKE3: one function, fast everywhere",
// 2020; the reference implementation's layout): 1024-byte chunks of 64-byte blocks, each chunk's
// chaining value (CV) from its blocks, CVs merged pairwise into a binary tree whose left subtree
// is always the largest power of two of chunks, the root's first 32 bytes the hash. Unkeyed.

/** A 32-byte digest. */
using Digest = std::array<uint8_t, 32>;

inline constexpr size_t kBlake3ChunkBytes = 1024;
inline constexpr uint32_t kBlake3ChunkStart = 1, kBlake3ChunkEnd = 2, kBlake3Parent = 4, kBlake3Root = 8;

/** BLAKE3's IV (SHA-256's). */
NIBBLE_HD uint32_t blake3_iv(int i) {
  const uint32_t iv[8] = {0x6A09E667u, 0xBB67AE85u, 0x3C6EF372u, 0xA54FF53Au,
                          0x510E527Fu, 0x9B05688Cu, 0x1F83D9ABu, 0x5BE0CD19u};
  return iv[i];
}

NIBBLE_HD uint32_t blake3_rotr(uint32_t x, int n) { return (x >> n) | (x << (32 - n)); }

NIBBLE_HD void blake3_g(uint32_t* v, int a, int b, int c, int d, uint32_t x, uint32_t y) {
  v[a] = v[a] + v[b] + x;
  v[d] = blake3_rotr(v[d] ^ v[a], 16);
  v[c] = v[c] + v[d];
  v[b] = blake3_rotr(v[b] ^ v[c], 12);
  v[a] = v[a] + v[b] + y;
  v[d] = blake3_rotr(v[d] ^ v[a], 8);
  v[c] = v[c] + v[d];
  v[b] = blake3_rotr(v[b] ^ v[c], 7);
}

/** BLAKE3's compression function, truncated to the new chaining value: `cv` (8 words) becomes the
 *  first 8 words of compress(cv, m, counter, block_len, flags). */
NIBBLE_HD void blake3_compress(uint32_t* cv, const uint32_t* m_in, uint64_t counter, uint32_t block_len, uint32_t flags) {
  uint32_t v[16] = {cv[0], cv[1], cv[2], cv[3], cv[4], cv[5], cv[6], cv[7],
                    blake3_iv(0), blake3_iv(1), blake3_iv(2), blake3_iv(3),
                    uint32_t(counter), uint32_t(counter >> 32), block_len, flags};
  uint32_t m[16], t[16];
  for (int i = 0; i < 16; ++i) m[i] = m_in[i];
  const int perm[16] = {2, 6, 3, 10, 7, 0, 4, 13, 1, 11, 12, 5, 9, 14, 15, 8};
  for (int r = 0; r < 7; ++r) {
    blake3_g(v, 0, 4, 8, 12, m[0], m[1]);
    blake3_g(v, 1, 5, 9, 13, m[2], m[3]);
    blake3_g(v, 2, 6, 10, 14, m[4], m[5]);
    blake3_g(v, 3, 7, 11, 15, m[6], m[7]);
    blake3_g(v, 0, 5, 10, 15, m[8], m[9]);
    blake3_g(v, 1, 6, 11, 12, m[10], m[11]);
    blake3_g(v, 2, 7, 8, 13, m[12], m[13]);
    blake3_g(v, 3, 4, 9, 14, m[14], m[15]);
    for (int i = 0; i < 16; ++i) t[i] = m[perm[i]];
    for (int i = 0; i < 16; ++i) m[i] = t[i];
  }
  for (int i = 0; i < 8; ++i) cv[i] = v[i] ^ v[i + 8];
}

/** The CV of chunk number `index`, whose `n` bytes (at most 1024, little-endian words) are at p;
 *  `root` when the whole input is this one chunk. */
NIBBLE_HD void blake3_chunk_cv(const uint8_t* p, size_t n, uint64_t index, bool root, uint32_t* cv) {
  for (int i = 0; i < 8; ++i) cv[i] = blake3_iv(i);
  const size_t blocks = n == 0 ? 1 : (n + 63) / 64;
  for (size_t b = 0; b < blocks; ++b) {
    uint32_t m[16];
    const size_t off = b * 64, len = n - off < 64 ? n - off : 64;
    if (len == 64) {
      for (int i = 0; i < 16; ++i)
        m[i] = uint32_t(p[off + 4 * i]) | uint32_t(p[off + 4 * i + 1]) << 8 | uint32_t(p[off + 4 * i + 2]) << 16 |
               uint32_t(p[off + 4 * i + 3]) << 24;
    } else {
      for (int i = 0; i < 16; ++i) m[i] = 0;
      for (size_t i = 0; i < len; ++i) m[i / 4] |= uint32_t(p[off + i]) << (8 * (i % 4));
    }
    const uint32_t flags = (b == 0 ? kBlake3ChunkStart : 0) | (b + 1 == blocks ? kBlake3ChunkEnd | (root ? kBlake3Root : 0) : 0);
    blake3_compress(cv, m, index, uint32_t(len), flags);
  }
}

/** The CV of the parent of `left` and `right` (8 words each), into `out`. */
NIBBLE_HD void blake3_parent_cv(const uint32_t* left, const uint32_t* right, bool root, uint32_t* out) {
  uint32_t m[16];
  for (int i = 0; i < 8; ++i) m[i] = left[i], m[i + 8] = right[i];
  for (int i = 0; i < 8; ++i) out[i] = blake3_iv(i);
  blake3_compress(out, m, 0, 64, kBlake3Parent | (root ? kBlake3Root : 0));
}

/** The hash from the CVs of every chunk of an input of more than one chunk (`cvs`: 8 words each,
 *  in order; consumed): merged pairwise, level by level, an odd last one carried up, which is the
 *  tree BLAKE3 defines (left subtrees of a power of two of chunks); the last merge is the root. */
inline Digest blake3_finish(std::vector<uint32_t> cvs) {
  size_t n = cvs.size() / 8;
  while (n > 2) {
    size_t k = 0;
    for (size_t i = 0; i + 1 < n; i += 2, ++k) blake3_parent_cv(&cvs[8 * i], &cvs[8 * i + 8], false, &cvs[8 * k]);
    if (n % 2) std::memmove(&cvs[8 * k++], &cvs[8 * (n - 1)], 32);
    n = k;
  }
  uint32_t root[8];
  blake3_parent_cv(&cvs[0], &cvs[8], true, root);
  Digest d{};
  for (int i = 0; i < 32; ++i) d[size_t(i)] = uint8_t(root[i / 4] >> (8 * (i % 4)));
  return d;
}

/** BLAKE3 of the `bytes` bytes at p, on the host (device_blake3's twin). */
inline Digest host_blake3(const void* p, size_t bytes) {
  const auto* b = static_cast<const uint8_t*>(p);
  const size_t chunks = bytes <= kBlake3ChunkBytes ? 1 : (bytes + kBlake3ChunkBytes - 1) / kBlake3ChunkBytes;
  if (chunks == 1) {
    uint32_t cv[8];
    blake3_chunk_cv(b, bytes, 0, true, cv);
    Digest d{};
    for (int i = 0; i < 32; ++i) d[size_t(i)] = uint8_t(cv[i / 4] >> (8 * (i % 4)));
    return d;
  }
  std::vector<uint32_t> cvs(chunks * 8);
  for (size_t c = 0; c < chunks; ++c) {
    const size_t off = c * kBlake3ChunkBytes;
    blake3_chunk_cv(b + off, bytes - off < kBlake3ChunkBytes ? bytes - off : kBlake3ChunkBytes, c, false, &cvs[8 * c]);
  }
  return blake3_finish(std::move(cvs));
}

/** Lower-case hex of a digest. */
inline std::string digest_hex(const Digest& d) {
  static const char* x = "0123456789abcdef";
  std::string s;
  for (uint8_t v : d) s += x[v >> 4], s += x[v & 15];
  return s;
}

}  // namespace nibble
