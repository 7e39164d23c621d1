// int4_mma_gemv.cuh: the int4 GEMV stage, out (rows) += W x, W repacked (megakernel.h, PackedMatrix).
//
// Spec (seed, "The weight format"; issue 6 "What it must be"): value = (code - zero) * scale with
// one (scale, zero) per 128 inputs; 128-bit evict-first weight loads; the codes converted in
// registers (magic-number LOP3); the zero subtracted on small integers (exact) and the scale
// applied once per group in fp32; fp32 accumulation.
// Shapes (full config): qkv 5120 x 3072, o 3072 x 3072, gate|up 16384 x 3072, down 3072 x 8192,
// LM head 128256 x 3072. Bytes: rows*K/2 codes + rows*K/128*4 metadata (6.25% of the codes) once,
// plus x from shared memory; 52.7 MB of codes per layer + 3.3 MB of metadata, 209 MB for the head.
//
// Per 32-bit word (8 codes of one lane's A fragment of one k-step):
//   a_i = (word >> 4i) & 0x000F000F | 0x43004300        bf16x2 {128 + c, 128 + c'}   (LOP3)
//   a_i = fma.bf16x2(a_i, 1.0, -(128 + zero))           {c - zero, c' - zero}, exact  (HFMA2)
//   mma.m16n8k16 bf16 x bf16 -> fp32
// so about 1.6 instructions per weight instead of the 4 of a CUDA-core FMA loop (which is at the
// SM's issue limit at HBM speed: 128 lane-instructions per cycle vs ~32 weights per cycle per SM).
// x enters as two bf16 columns of B, x_hi = bf16(x) and x_lo = bf16(x - x_hi): the product keeps
// ~16 bits of x (the seed's "do not quantise the activations"), and C column 0 + column 1 is the
// fp32 dot product. The other 6 columns are zero: the tensor cores have throughput to spare.
// A group (8 k-steps) accumulates into a fresh C, then acc += scale * C: the scale is applied once
// per group and the integer products are exact in the mma.
//
// Work split: the units (tile-groups, 1 KB each) of a matrix are cut into one contiguous range per
// warp of the grid, balanced to one unit, so every warp streams its range as consecutive 512-byte
// warp loads; a tile split between warps is summed with fp32 atomics into out (which the caller
// zeroes, or which holds the residual: h += W x is the epilogue for free).
// Loads in flight: a stage is kUnits units = 6 uint4 per lane; the next stage is issued before the
// current one is computed (up to 12 x 16 B per lane, 96 KB per 16-warp SM), and the first stage of
// the next matrix can be issued before the grid barrier that precedes it (gemv_prefetch).
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "megakernel.h"

namespace nibble::megakernel {

/** Units per pipeline stage. */
constexpr int kUnits = 3;

struct GemvStage {
  uint4 w[kUnits][2];
  uint2 m[kUnits];
};

/** A warp's range of units of a matrix: [u0, u1). */
struct UnitRange {
  long long u0, u1;
};

__device__ __forceinline__ UnitRange unit_range(const PackedMatrix& M, int gw, int nw) {
  const long long total = (long long)M.tiles * M.groups;
  return {total * gw / nw, total * (gw + 1) / nw};
}

__device__ __forceinline__ uint4 ld_stream_u4(const uint4* p) {
  uint4 v;
  asm volatile("ld.global.cs.v4.u32 {%0,%1,%2,%3}, [%4];" : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w) : "l"(p));
  return v;
}
__device__ __forceinline__ uint2 ld_stream_u2(const uint2* p) {
  uint2 v;
  asm volatile("ld.global.cs.v2.u32 {%0,%1}, [%2];" : "=r"(v.x), "=r"(v.y) : "l"(p));
  return v;
}

/** Issue the loads of units [u, u + kUnits) that lie below u1. */
__device__ __forceinline__ void gemv_load(const PackedMatrix& M, long long u, long long u1, int lane, GemvStage& st) {
#pragma unroll
  for (int i = 0; i < kUnits; ++i) {
    if (u + i < u1) {
      const uint4* p = M.w + (u + i) * 64 + lane;
      st.w[i][0] = ld_stream_u4(p);
      st.w[i][1] = ld_stream_u4(p + 32);
      st.m[i] = ld_stream_u2(M.meta + (u + i) * 8 + (lane >> 2));
    }
  }
}

/** The first stage of this warp's range of M: may be issued before M's input exists. */
__device__ __forceinline__ void gemv_prefetch(const PackedMatrix& M, int gw, int nw, GemvStage& st) {
  const UnitRange r = unit_range(M, gw, nw);
  gemv_load(M, r.u0, r.u1, threadIdx.x & 31, st);
}

__device__ __forceinline__ void mma_bf16_16816(float (&c)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3,
                                               uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
      "{%0,%1,%2,%3};"
      : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
      : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

/** bf16x2 (128 + c) - (128 + zero), exact: fma(a, 1.0, nz) with nz = -(128 + zero) in both halves. */
__device__ __forceinline__ uint32_t sub_zero(uint32_t magic_codes, uint32_t nz) {
  uint32_t r;
  asm("fma.rn.bf16x2 %0, %1, %2, %3;" : "=r"(r) : "r"(magic_codes), "r"(0x3F803F80u), "r"(nz));
  return r;
}

/** -(128 + zero) as bf16x2 from a metadata word ((scale << 16) | zero). */
__device__ __forceinline__ uint32_t neg_magic_zero(uint32_t meta) { return 0xC300C300u | ((meta & 0xFu) * 0x00010001u); }

/** One unit (16 rows x 128 inputs) of this lane: acc0 += row g's dot, acc1 += row g+8's (the
 *  sums are complete in lanes with lane % 4 == 0; the other lanes' C columns are zero).
 *  xf: this group's 8 k-steps of B fragments in shared memory, 8 uint2 per k-step (lanes 0..7). */
__device__ __forceinline__ void gemv_unit(const uint4 (&w)[2], uint2 meta, const uint2* xf, int lane, float& acc0,
                                          float& acc1) {
  const uint32_t nz0 = neg_magic_zero(meta.x), nz1 = neg_magic_zero(meta.y);
  float ca[4] = {0.f, 0.f, 0.f, 0.f}, cb[4] = {0.f, 0.f, 0.f, 0.f};  // two chains: even / odd k-steps
  const bool has_b = lane < 8;
#pragma unroll
  for (int c = 0; c < 2; ++c) {
    const uint32_t ws[4] = {w[c].x, w[c].y, w[c].z, w[c].w};
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      const int s = 4 * c + q;
      uint2 b = make_uint2(0u, 0u);
      if (has_b) b = xf[s * 8 + lane];
      const uint32_t word = ws[q];
      const uint32_t a0 = sub_zero((word & 0x000F000Fu) | 0x43004300u, nz0);
      const uint32_t a1 = sub_zero(((word >> 4) & 0x000F000Fu) | 0x43004300u, nz1);
      const uint32_t a2 = sub_zero(((word >> 8) & 0x000F000Fu) | 0x43004300u, nz0);
      const uint32_t a3 = sub_zero(((word >> 12) & 0x000F000Fu) | 0x43004300u, nz1);
      if (s & 1)
        mma_bf16_16816(cb, a0, a1, a2, a3, b.x, b.y);
      else
        mma_bf16_16816(ca, a0, a1, a2, a3, b.x, b.y);
    }
  }
  const float s0 = __uint_as_float(meta.x & 0xFFFF0000u), s1 = __uint_as_float(meta.y & 0xFFFF0000u);
  acc0 = fmaf(s0, (ca[0] + ca[1]) + (cb[0] + cb[1]), acc0);
  acc1 = fmaf(s1, (ca[2] + ca[3]) + (cb[2] + cb[3]), acc1);
}

/** out[16 tile + g] += acc0, out[16 tile + g + 8] += acc1 from the lanes that hold the sums. */
__device__ __forceinline__ void gemv_flush(const PackedMatrix& M, float* out, long long tile, int lane, float acc0,
                                           float acc1) {
  if ((lane & 3) == 0) {
    const long long r = tile * kTileRows + (lane >> 2);
    if (r < M.rows) atomicAdd(out + r, acc0);
    if (r + 8 < M.rows) atomicAdd(out + r + 8, acc1);
  }
}

/**
 * This warp's share of out += M x. `st` holds the first stage (gemv_prefetch with the same gw, nw)
 * and is used as a pipeline register afterwards; xf holds x's B fragments for all K
 * (build_x_fragments). Every lane of the warp calls this.
 */
__device__ __forceinline__ void gemv_run(const PackedMatrix& M, float* out, const uint2* xf, int gw, int nw,
                                         GemvStage& st) {
  const int lane = threadIdx.x & 31;
  const UnitRange r = unit_range(M, gw, nw);
  if (r.u0 >= r.u1) return;
  const int G = M.groups;
  long long tile = r.u0 / G;
  int j = int(r.u0 % G);
  float acc0 = 0.f, acc1 = 0.f;
  const auto compute = [&](const GemvStage& cur, long long u) {
#pragma unroll
    for (int i = 0; i < kUnits; ++i) {
      if (u + i < r.u1) {
        gemv_unit(cur.w[i], cur.m[i], xf + j * 64, lane, acc0, acc1);
        if (++j == G) {
          gemv_flush(M, out, tile, lane, acc0, acc1);
          acc0 = acc1 = 0.f;
          j = 0;
          ++tile;
        }
      }
    }
  };
  // Two named stages, unrolled by hand: a copy `cur = next` of registers that loads are still
  // filling would make the copy wait for them, leaving one stage in flight instead of two.
  GemvStage b;
  for (long long u = r.u0; u < r.u1; u += 2 * kUnits) {
    gemv_load(M, u + kUnits, r.u1, lane, b);
    compute(st, u);
    if (u + kUnits >= r.u1) break;
    gemv_load(M, u + 2 * kUnits, r.u1, lane, st);
    compute(b, u + kUnits);
  }
  if (j != 0) gemv_flush(M, out, tile, lane, acc0, acc1);
}

/** bf16 bits of f, round to nearest even (finite f; NaN stays NaN). */
__device__ __forceinline__ uint32_t bf16_rn_bits(float f) { return __bfloat16_as_ushort(__float2bfloat16_rn(f)); }

/**
 * xf (k/16 k-steps x 8 uint2) = the B fragments of x (k fp32 in shared memory): for k-step s and
 * lane l < 8 (column n = l/4: 0 = x_hi, 1 = x_lo; t = l%4): {x[16s+2t], x[16s+2t+1]} and
 * {x[16s+2t+8], x[16s+2t+9]} as bf16x2 (lower input in the low half). Block-wide; the caller
 * synchronises before and after.
 */
__device__ __forceinline__ void build_x_fragments(const float* xs, int k, uint2* xf) {
  const int n = (k / 16) * 8;
  for (int idx = threadIdx.x; idx < n; idx += blockDim.x) {
    const int s = idx >> 3, l = idx & 7, t = l & 3;
    const int e = 16 * s + 2 * t;
    const float v[4] = {xs[e], xs[e + 1], xs[e + 8], xs[e + 9]};
    uint32_t b[4];
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      const uint32_t hi = bf16_rn_bits(v[i]);
      b[i] = (l < 4) ? hi : bf16_rn_bits(v[i] - __uint_as_float(hi << 16));
    }
    xf[idx] = make_uint2(b[0] | (b[1] << 16), b[2] | (b[3] << 16));
  }
}

}  // namespace nibble::megakernel
