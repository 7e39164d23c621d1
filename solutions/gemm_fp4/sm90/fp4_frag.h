// fp4_frag.h: the repacked weight layout of gemm_fp4_sm90 (both FP4 GEMM tasks, issue 7) and the
// register decode that turns it into bf16 tensor-core A fragments. Host and device: the repack
// runs on the host in prepare, the decode in the kernels, and the CPU test
// (tests/gemm_fp4/test_gemm_fp4_sm90_layout.cpp) runs this same decode on the host against the oracle's
// definition of every weight.
//
// The GEMM is computed as C^T = W A^T: W's rows are the MMA's M side (16 rows per warp, a "slab"),
// A's rows the MMA's N side. A warp's A fragment of one k16 step (mma.sync m16n8k16 and wgmma
// m64nNk16 with A from registers use the same per-warp layout) is 4 registers of bf16x2:
//   reg r (0..3): row g + 8 (r & 1), logical k 2t + 8 (r >> 1) + {0, 1}     (g = lane / 4, t = lane % 4)
// Repacked weights: per slab and per chunk of 64 k, 512 bytes = 32 lanes x 16 bytes, lane-major,
// so one 16-byte load per lane fetches its 4 k16 steps; word j of a lane is step j, and within it
// reg r's low element is nibble 3 - r and its high element nibble 7 - r (the decode's shifts).
// Units are ordered by groups of G slabs (the rows one block owns): unit (slab, c) is number
// unit_index() = ((slab / G) nch + c) G + slab % G, so the G slabs' chunk c, and a block's run of
// chunks, are one contiguous range: one bulk copy (the scale records follow the same order).
// Two orders of k inside a chunk (prepare picks one per kernel):
//   kStd   step j = physical k 16j .. 16j+15, logical k = physical: wgmma reads B (activations)
//          from shared memory in plain k order.
//   kPerm  step j of lane (g, t): physical k 16t + 4j + {0..3} (logical 2t, 2t+1 -> +0, +1;
//          2t+8, 2t+9 -> +2, +3). The MMA sums over k, so any permutation applied to both operands
//          gives the same C; this one lets a lane fetch its activations as two 16-byte loads per
//          chunk (k 16t .. 16t+15 of its row) and keeps a lane on one scale block per chunk.
// Block scales are re-encoded as one byte per (row, block) whose expansion to bf16 is one PRMT and
// one IMAD; the weight of a lane's element is (code as a bf16 bit pattern) x (expanded scale), one
// bf16x2 multiply, exact (e2m1 has 2 significant bits, an e4m3 scale 4, bf16 8):
//   code bits   sign -> bit 15, the 3 magnitude bits e1 e0 m -> bits 8..6: the bf16 value e2m1 x 2^-126
//               (code 1, 0.5, is the bf16 subnormal 2^-127: bf16 arithmetic keeps subnormals)
//   NVFP4       scale byte q -> bf16 bits (q << 4) + 0x7600 = |e4m3| x 2^118, so the product is
//               e2m1 x |e4m3| x 2^-8; the epilogue multiplies by global x 2^8. A negative scale flips
//               the block's code signs; a zero scale zeroes its codes (0 x anything finite is 0).
//   MXFP4       scale byte q -> bf16 bits q << 7 = 2^(q - 127), q = e + 126 - sh(n), sh(n) = the row's
//               largest e - 127, so the product is e2m1 x 2^(e - 127 - sh(n)) <= 6 and the epilogue
//               multiplies row n by 2^sh(n) (fp32). A block 2^-252 or more below its row's largest
//               is zeroed (its contribution is far below fp32 rounding of the sum).
// Scale bytes per slab and chunk (h = 0 row g, h = 1 row g + 8; b = the block's index in the chunk,
// 4 blocks of 16 (NVFP4) or 2 of 32 (MXFP4)):
//   kPerm  byte b * 16 + 2g + h: lane (g, t) reads 2 bytes at block t (NVFP4) or t / 2 (MXFP4)
//   kStd   byte g * 2B + 2b + h (B blocks): lane reads 8 (NVFP4) or 4 (MXFP4) bytes at g * 2B
// Padding: N to a multiple of kRowAlign, K to a multiple of 64, with code 0.
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "fixtures/bf16.h"
#include "solutions/common/bf16x2.h"
#include "solutions/common/frag_units.h"
#include "solutions/common/fp4_device.cuh"

namespace nibble::gemm_fp4_sm90 {

using sol::KOrder;  // kStd, kPerm (solutions/common/frag_units.h)

// The unit geometry (solutions/common/frag_units.h, shared with int4_gemm_sm90).
using sol::kChunkK;
using sol::kRowAlign;
using sol::kSlabRows;
using sol::kWordsPerLaneChunk;
using sol::unit_index;

/** Scale bytes per slab and chunk: 16 rows x (64 / block) blocks. */
__host__ __device__ constexpr int scale_bytes_per_chunk(bool nvfp4) { return nvfp4 ? 64 : 32; }

/** NVFP4: bf16 bits of an expanded scale byte q are (q << 4) + kNvScaleBias (|e4m3| x 2^118). */
inline constexpr uint32_t kNvScaleBias = 0x7600u;
/** NVFP4: the epilogue's factor besides the global scale (w = e2m1 x e4m3 x 2^-8 in bf16). */
inline constexpr float kNvEpilogue = 256.0f;

// ---- decode (host and device) -------------------------------------------------------------------

#if defined(__CUDA_ARCH__)
#define FRAG_HD __device__ __forceinline__
#else
#define FRAG_HD inline
#endif

using sol::bf16x2_mul;  // exact for the operands here (see the header)

/** Byte `i` (0..3) of `w` in both bf16 halves' low bytes: 0x00BB00BB. */
FRAG_HD uint32_t byte_pair(uint32_t w, int i) {
#if defined(__CUDA_ARCH__)
  uint32_t d;
  asm("prmt.b32 %0, %1, 0, %2;" : "=r"(d) : "r"(w), "r"(0x4040u | uint32_t(i) | (uint32_t(i) << 8)));
  return d;
#else
  const uint32_t b = (w >> (8 * i)) & 0xFFu;
  return b | (b << 16);
#endif
}

/** The bf16x2 {S, S} of scale byte `i` of `w`. */
template <bool NV>
FRAG_HD uint32_t expand_scale(uint32_t w, int i) {
  const uint32_t p = byte_pair(w, i);
  if constexpr (NV)
    return (p << 4) + (kNvScaleBias | (kNvScaleBias << 16));
  else
    return p << 7;
}

/** Register r (0..3) of a k16 step from its 32-bit word q, times the broadcast scale s2. */
FRAG_HD uint32_t decode_reg(uint32_t q, int r, uint32_t s2) {
  const uint32_t x = q << (4 * r);
  const uint32_t bits = (x & 0x80008000u) | ((x >> 6) & 0x01C001C0u);
  return bf16x2_mul(bits, s2);
}

#undef FRAG_HD

// ---- repack (host) ------------------------------------------------------------------------------

/** The repacked weights of one problem, on the host. */
struct Repacked {
  int64_t n_pad = 0, nch = 0;
  std::vector<uint32_t> w;    // (n_pad / 16) slabs x nch chunks x 32 lanes x 4 words
  std::vector<uint8_t> s;     // (n_pad / 16) x nch x scale_bytes_per_chunk
  std::vector<float> colmul;  // n_pad: the epilogue's factor of each W row
  int group = 1;              // G
};

using sol::chunk_k;

/** Byte offset, in a slab-chunk's scale record, of (block b of the chunk, row half h, g). */
inline int scale_offset(KOrder order, bool nvfp4, int b, int g, int h) {
  const int blocks = nvfp4 ? 4 : 2;
  return order == KOrder::kPerm ? b * 16 + 2 * g + h : g * 2 * blocks + 2 * b + h;
}

/**
 * Repack W (N, K/2) codes and (N, ceil(K/block)) scales into the layout above, groups of `group`
 * slabs (1, 2, 4 or 8: a divisor of kRowAlign / 16).
 * @return an empty string, or why the weights cannot be repacked (a NaN scale).
 */
inline std::string repack(bool nvfp4, int64_t N, int64_t K, const uint8_t* packed, const uint8_t* scale,
                          float global, KOrder order, int group, Repacked* out) {
  const int block = nvfp4 ? 16 : 32;
  const int64_t scols = (K + block - 1) / block;
  const int64_t n_pad = (N + kRowAlign - 1) / kRowAlign * kRowAlign;
  const int64_t nch = (K + kChunkK - 1) / kChunkK;
  const int sbpc = scale_bytes_per_chunk(nvfp4);
  Repacked& r = *out;
  r.n_pad = n_pad;
  r.nch = nch;
  r.w.assign(size_t(n_pad / kSlabRows * nch * 32 * kWordsPerLaneChunk), 0u);
  r.s.assign(size_t(n_pad / kSlabRows * nch * sbpc), 0u);
  r.colmul.assign(size_t(n_pad), 0.0f);
  r.group = group;
  // Per (row, block): the re-encoded scale byte and what to do with the block's codes.
  const size_t nb = size_t(scols);
  std::vector<uint8_t> q(nb), flip(nb), zero(nb);
  for (int64_t n = 0; n < N; ++n) {
    const uint8_t* srow = scale + n * scols;
    if (nvfp4) {
      for (int64_t b = 0; b < scols; ++b) {
        const float v = sol::e4m3_to_f32(srow[b]);
        if (std::isnan(v)) return "row " + std::to_string(n) + " has a NaN e4m3 scale";
        flip[size_t(b)] = std::signbit(v) ? 1 : 0;
        zero[size_t(b)] = v == 0.0f ? 1 : 0;
        const float s = std::fabs(v) * std::ldexp(1.0f, 118);  // exact: a normal fp32 with <= 4 significant bits
        const uint32_t bits = f32_bits(s) >> 16;
        q[size_t(b)] = zero[size_t(b)] ? 0 : uint8_t((bits - kNvScaleBias) >> 4);
      }
      r.colmul[size_t(n)] = global * kNvEpilogue;
    } else {
      int emax = 0;
      for (int64_t b = 0; b < scols; ++b) {
        if (srow[b] == 0xFF) return "row " + std::to_string(n) + " has the e8m0 NaN scale 0xFF";
        emax = srow[b] > emax ? srow[b] : emax;
      }
      const int sh = emax - 127;
      for (int64_t b = 0; b < scols; ++b) {
        const int code = int(srow[b]) + 126 - sh;
        flip[size_t(b)] = 0;
        zero[size_t(b)] = code < 1 ? 1 : 0;
        q[size_t(b)] = code < 1 ? 0 : uint8_t(code);
      }
      r.colmul[size_t(n)] = std::ldexp(1.0f, sh);
    }
    const int64_t slab = n / kSlabRows;
    const int rin = int(n % kSlabRows), g = rin % 8, h = rin / 8;
    for (int64_t c = 0; c < nch; ++c) {
      const int64_t u = unit_index(slab, c, nch, group);
      uint32_t* wchunk = &r.w[size_t(u * 32 * kWordsPerLaneChunk)];
      uint8_t* schunk = &r.s[size_t(u * sbpc)];
      for (int b = 0; b < kChunkK / block; ++b) {
        const int64_t gb = c * (kChunkK / block) + b;
        if (gb < scols) schunk[scale_offset(order, nvfp4, b, g, h)] = q[size_t(gb)];
      }
      for (int t = 0; t < 4; ++t)
        for (int j = 0; j < 4; ++j)
          for (int rr = 0; rr < 4; ++rr) {
            if ((rr & 1) != h) continue;  // this row's registers
            for (int hh = 0; hh < 2; ++hh) {
              const int64_t k = c * kChunkK + chunk_k(order, t, j, rr, hh);
              if (k >= K) continue;
              const int64_t b = k / block;
              uint32_t code = (packed[n * (K / 2) + k / 2] >> (4 * (k & 1))) & 0xFu;
              if (zero[size_t(b)]) code = 0;
              if (flip[size_t(b)]) code ^= 8u;
              const int pos = hh ? 7 - rr : 3 - rr;
              const int lane = g * 4 + t;
              wchunk[lane * kWordsPerLaneChunk + j] |= code << (4 * pos);
            }
          }
    }
  }
  return {};
}

}  // namespace nibble::gemm_fp4_sm90
