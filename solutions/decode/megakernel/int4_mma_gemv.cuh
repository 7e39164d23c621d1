// int4_mma_gemv.cuh: the int4 GEMV stage, out (rows) += W x, W repacked (megakernel.h, PackedMatrix).
//
// Spec (seed, "The weight format"; issue 6 "What it must be"): value = (code - zero) * scale with
// one (scale, zero) per 128 inputs; 128-bit evict-first weight loads; the codes converted in
// registers; the zero subtracted on small integers (exact) and the scale applied once per group in
// fp32; fp32 accumulation.
// Shapes (full config): qkv 5120 x 3072, o 3072 x 3072, gate|up 16384 x 3072, down 3072 x 8192,
// LM head 128256 x 3072. Bytes: rows*K/2 codes + rows*K/128*4 metadata (6.25% of the codes) once,
// plus x from shared memory; 52.7 MB of codes per layer + 3.3 MB of metadata, 209 MB for the head.
//
// v5: integer tensor cores. x is written once per stage as three int8 limbs per input, exactly
// scaled by a power of two per group (build_x_limbs: 20 bits of x relative to its group's maximum),
// the limbs being three columns of the mma's B. Then per 32-bit word of codes (8 weights):
//   lo = word & 0x0F0F0F0F    A register of an even k-block, 4 codes as u8            (LOP3)
//   hi = word & 0xF0F0F0F0    A register of an odd k-block, 16 x 4 codes as u8        (LOP3)
//   mma.m16n8k32 u8 x s8 -> s32, two chains (lo, hi) of 2 per unit
// i.e. 0.25 instructions per weight (v4's bf16 path: LOP3 + shift + HFMA2 per 2 weights, ~1.6 in
// all) and half the mma issue slots; the integer products and sums are exact, the zero is
// subtracted exactly as zero * (sum of the limbs) in int32, and the scale is applied once per group
// in fp32 (gemv_unit). The other B columns (3..7) are zero: the tensor cores have throughput to
// spare.
//
// Work split: the units (tile-groups, 1 KB each) of a matrix are cut into one contiguous range per
// warp of the grid, balanced to one unit; a tile split between warps is summed with fp32 atomics
// into out (which the caller zeroes, or which holds the residual: h += W x is the epilogue for free).
// Loads: each warp owns a ring of kRingStages shared-memory stages of kStageUnits units (codes and
// metadata, contiguous per unit); lane 0 fills a stage with one bulk copy (cp.async.bulk, the copy engine, L2
// evict-first policy) completing on the stage's mbarrier, and the warp reads it back with 16-byte
// LDS. The ring keeps 6 KB per warp (96 KB per SM) in flight without holding registers, and goes on
// with the next matrix's first stages as soon as the current one's are all issued (gemv_run's
// `next`), so the stream does not drain at stage boundaries: the next stage's first weights are in
// flight during the grid barrier, the input build and the attention.
// sm_90 (cp.async.bulk, mbarrier expect_tx).
#pragma once

#include <cuda_bf16.h>

#include <cstdint>

#include "megakernel.h"
#include "solutions/common/mma_int8.cuh"
#include "solutions/common/sm90_async.cuh"

namespace nibble::megakernel {

/** The per-warp ring: stages in flight and units per stage. */
#ifndef NIBBLE_MK_RING_STAGES
#define NIBBLE_MK_RING_STAGES 3  // a bench build may override it (NOTES.md, v9)
#endif
constexpr int kRingStages = NIBBLE_MK_RING_STAGES;
constexpr int kStageUnits = 2;
constexpr int kStageBytes = kStageUnits * kUnitStride;
/** Shared memory of one block's rings (16 warps) and of their mbarriers. */
constexpr size_t kRingBytes = size_t(kWarps) * kRingStages * kStageBytes;
constexpr size_t kRingBarrierBytes = size_t(kWarps) * kRingStages * 8;

/** This warp's ring; every lane holds the same values. */
struct Ring {
  unsigned char* buf;     // kRingStages stages of kStageBytes
  uint32_t bar;           // shared address of the first of kRingStages mbarriers
  uint32_t base;          // global stage number of the current matrix's first stage
  uint32_t issued;        // stages of the current matrix issued so far
  uint32_t next_issued;   // stages of the next matrix issued while the current one finished
  uint64_t policy;        // L2 evict-first cache policy of the weight copies
  int proxy_fence;        // 1: fence.proxy.async before each refill (NIBBLE_MK_PFENCE, NOTES.md)
};

using sol::smem_addr;

/** Block-wide, once per kernel: carve the rings and initialise every mbarrier (count 1). */
__device__ __forceinline__ Ring ring_init(unsigned char* ring_smem, unsigned long long* bars, int proxy_fence = 1) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  Ring r;
  r.buf = ring_smem + size_t(warp) * kRingStages * kStageBytes;
  r.bar = smem_addr(bars + warp * kRingStages);
  r.base = 0;
  r.issued = 0;
  r.next_issued = 0;
  r.proxy_fence = proxy_fence;
  r.policy = sol::policy_evict_first();
  if (lane == 0) {
    for (int s = 0; s < kRingStages; ++s) sol::mbar_init(r.bar + 8 * s, 1);
    sol::mbar_init_fence();
  }
  __syncwarp();
  return r;
}

/** Block-wide: this block's warps' plans of n matrices, plans[i * kWarps + warp] = src[i * nw + gw]
 *  (src: (n, nw) GemvPlan in global memory, gemv_plan of every warp of the grid), copied once per
 *  launch into shared memory. The caller synchronises before reading them. */
__device__ __forceinline__ void load_block_plans(GemvPlan* plans, const GemvPlan* src, int n, int nw) {
  for (int t = threadIdx.x; t < n * kWarps; t += blockDim.x)
    plans[t] = src[size_t(t / kWarps) * nw + blockIdx.x * kWarps + t % kWarps];
}

/** Lane 0: stage k of the plan's range [u0, u1), global stage number gn, into ring slot
 *  gn % kRingStages (whose previous stage, gn - kRingStages, has been consumed). */
__device__ __forceinline__ void ring_issue(const uint4* w, uint32_t u0, uint32_t u1, const Ring& r, uint32_t k,
                                           uint32_t gn) {
  const uint32_t u = u0 + k * kStageUnits;
  const uint32_t n = min(uint32_t(kStageUnits), u1 - u);
  const uint32_t slot = gn % kRingStages;
  unsigned char* dst = r.buf + slot * kStageBytes;
  const uint32_t bar = r.bar + 8 * slot;
  const uint64_t policy = r.policy;
  // The slot was last read through the generic proxy (LDS); the copy engine writes it next. Those
  // reads have completed (their values fed the mma before the __syncwarp that precedes this).
  if (r.proxy_fence) sol::fence_proxy_async_smem();
  sol::mbar_expect_tx(bar, n * kUnitStride);
  sol::bulk_load(smem_addr(dst), reinterpret_cast<const unsigned char*>(w) + size_t(u) * kUnitStride, n * kUnitStride, bar,
                 policy);
}

__device__ __forceinline__ uint32_t ring_stages(uint32_t u0, uint32_t u1) {
  return u1 > u0 ? (u1 - u0 + kStageUnits - 1) / kStageUnits : 0u;
}

/** Fill the ring with the first stages of this warp's range of M (its plan pl), counting those the
 *  previous gemv_run already issued as its `next` (the weights do not depend on M's input, so this
 *  may run before the barrier that makes the input ready). Every lane calls it. */
__device__ __forceinline__ void ring_prefetch(const PackedMatrix& M, const GemvPlan& pl, Ring& r) {
  const uint32_t u0 = pl.u0, u1 = pl.u1;
  const uint32_t T = ring_stages(u0, u1);
  const uint32_t want = min(T, uint32_t(kRingStages));
  if ((threadIdx.x & 31) == 0)
    for (uint32_t k = r.next_issued; k < want; ++k) ring_issue(M.w, u0, u1, r, k, r.base + k);
  r.issued = max(want, r.next_issued);
  r.next_issued = 0;
  __syncwarp();
}

/** Lane 0: prefetch this warp's whole range of M (one contiguous byte range of codes and metadata)
 *  into L2 (cp.async.bulk.prefetch.L2: no registers, no shared memory, no completion to wait for),
 *  so that a later gemv_run's bulk copies hit L2. The decode kernel issues it for the stages after
 *  the attention while the attention, which streams little, leaves DRAM idle (NIBBLE_MK_L2PF). */
__device__ __forceinline__ void gemv_prefetch_l2(const PackedMatrix& M, const GemvPlan& pl) {
  if ((threadIdx.x & 31) != 0) return;
  const uint32_t u0 = pl.u0, u1 = pl.u1;
  if (u1 <= u0) return;
  sol::bulk_prefetch_l2(reinterpret_cast<const unsigned char*>(M.w) + size_t(u0) * kUnitStride, (u1 - u0) * kUnitStride);
}

/** x prepared for the integer GEMV (build_x_limbs): one kXqGroupBytes record per 128-input group gr,
 * so that a unit finds everything of its group from one pointer (v10):
 *   +0    24 uint4: lane l's (< 12) B fragments of k-blocks 2c and 2c+1 at [12 c + l] (c = 0, 1):
 *         {b0, b1} of block 2c, then {b0, b1} of block 2c+1 (mma m16n8k32, int8; B column n = l / 4
 *         = limb n, t = l % 4). Lanes 12..31 hold zero B columns (3..7): not stored.
 *   +384  int4 {16 S_0, 16 S_1, 16 S_2, 0}, S_n = the sum of limb n over the group
 *   +400  float 2^-e: x = 2^-e (2^14 q_0 + 2^7 q_1 + q_2), NaN if x is not finite
 *   +404  12 bytes of padding (16-byte aligned records) */
constexpr int kXqGroupBytes = 24 * 16 + 16 + 16;
constexpr int kXqSums = 24 * 16, kXqInv = kXqSums + 16;
struct XQuant {
  const unsigned char* base;
};

/** Shared-memory bytes of an XQuant for k inputs (k a multiple of 128): 3.25 bytes per input. */
__host__ __device__ constexpr size_t xquant_bytes(int k) { return size_t(k / kGroup) * kXqGroupBytes; }

/** The XQuant view of a 16-byte-aligned region of xquant_bytes(k). */
__device__ __forceinline__ XQuant xquant_view(const unsigned char* base, int) { return {base}; }

/**
 * xq (xquant_bytes(k) of shared memory) = x (k fp32 in shared memory) as 3 balanced base-128 int8
 * limbs per 128-input group: X = round(x 2^e) with e chosen so |X| < 2^20 (a power of two: the
 * scaling is exact), X = 2^14 q_0 + 2^7 q_1 + q_2, q_1, q_2 in [-64, 63], |q_0| <= 65. So x keeps
 * 20 bits relative to its group's largest element (the bf16 hi + lo pair it replaces kept ~16).
 * With `gain` (k bf16 in shared memory), x = xs * mul * gain (RMSNorm applied on the way: mul =
 * rms_scale), else x = xs; only groups [g_begin, g_end) (default: all). By warps `warp` of
 * `nwarps` (build_x_limbs: the whole block), one warp per group (lane l: inputs 4l..4l+3 = bytes
 * 0..3 of one B register of k-block l/8); the caller synchronises them before and after.
 */
__device__ __forceinline__ void build_x_limbs_warps(int warp, int nwarps, const float* xs, int k, unsigned char* xq,
                                                    const uint16_t* gain = nullptr, float mul = 1.f, int g_begin = 0,
                                                    int g_end = -1) {
  const int lane = threadIdx.x & 31;
  const int groups = k / kGroup;
  const int kb = lane >> 3, t = (lane & 7) & 3, half = (lane & 7) >> 2;
  if (g_end < 0) g_end = groups;
  for (int gr = g_begin + warp; gr < g_end; gr += nwarps) {
    float4 v = reinterpret_cast<const float4*>(xs + size_t(gr) * kGroup)[lane];
    if (gain) {
      const uint2 gb = reinterpret_cast<const uint2*>(gain + size_t(gr) * kGroup)[lane];
      v = make_float4(v.x * mul * __uint_as_float(gb.x << 16), v.y * mul * __uint_as_float(gb.x & 0xFFFF0000u),
                      v.z * mul * __uint_as_float(gb.y << 16), v.w * mul * __uint_as_float(gb.y & 0xFFFF0000u));
    }
    const uint32_t a = max(max(__float_as_uint(v.x) & 0x7FFFFFFFu, __float_as_uint(v.y) & 0x7FFFFFFFu),
                           max(__float_as_uint(v.z) & 0x7FFFFFFFu, __float_as_uint(v.w) & 0x7FFFFFFFu));
    const uint32_t m = __reduce_max_sync(0xFFFFFFFFu, a);  // positive floats order as their bits
    // max|x| < 2^(eb - 126) (eb its biased exponent), so x 2^(146 - eb) < 2^20; clamped so that both
    // 2^e and 2^-e are normal floats (a group of zeros or denormals just keeps fewer bits).
    const int e = min(max(146 - int(m >> 23), -126), 126);
    const float scale = __int_as_float((127 + e) << 23);
    const float r = m >= 0x7F800000u ? __int_as_float(0x7FC00000) : __int_as_float((127 - e) << 23);
    const float xv[4] = {v.x, v.y, v.z, v.w};
    uint32_t q[3] = {0u, 0u, 0u};
    int s[3] = {0, 0, 0};
#pragma unroll
    for (int i = 0; i < 4; ++i) {
      int X = __float2int_rn(xv[i] * scale);
      const int d2 = ((X + 64) & 127) - 64;
      X = (X - d2) >> 7;  // exact: X - d2 is a multiple of 128
      const int d1 = ((X + 64) & 127) - 64;
      const int d0 = (X - d1) >> 7;
      q[0] |= uint32_t(d0 & 0xFF) << (8 * i);
      q[1] |= uint32_t(d1 & 0xFF) << (8 * i);
      q[2] |= uint32_t(d2 & 0xFF) << (8 * i);
      s[0] += d0;
      s[1] += d1;
      s[2] += d2;
    }
    unsigned char* rec = xq + size_t(gr) * kXqGroupBytes;
#pragma unroll
    for (int n = 0; n < 3; ++n) {
      // limb n's four bytes are register b[half] of k-block kb for B lane 4n + t
      reinterpret_cast<uint32_t*>(rec)[(12 * (kb >> 1) + 4 * n + t) * 4 + 2 * (kb & 1) + half] = q[n];
      s[n] = __reduce_add_sync(0xFFFFFFFFu, s[n]);
    }
    if (lane == 0) {
      *reinterpret_cast<int4*>(rec + kXqSums) = make_int4(16 * s[0], 16 * s[1], 16 * s[2], 0);
      *reinterpret_cast<float*>(rec + kXqInv) = r;
    }
  }
}

/** build_x_limbs_warps by every warp of the block. */
__device__ __forceinline__ void build_x_limbs(const float* xs, int k, unsigned char* xq, const uint16_t* gain = nullptr,
                                              float mul = 1.f, int g_begin = 0, int g_end = -1) {
  build_x_limbs_warps(threadIdx.x >> 5, blockDim.x >> 5, xs, k, xq, gain, mul, g_begin, g_end);
}

using sol::imma_16832;  // solutions/common/mma_int8.cuh

/**
 * One unit (16 rows x 128 inputs = one group) of this lane. Lane (g = lane/4, t = lane%4) holds C
 * rows g and g + 8, columns 2t and 2t + 1 = limbs 2t, 2t + 1 (columns 3..7 are zero or weighted 0
 * by gemv_flush): acc[r][j] += scale_r 2^-e (16 sum (c - zero) q) for that row and limb. xg: the
 * group's XQuant record. Per word of codes: lo = word & 0x0F0F0F0F is one A register of the even k-block (4 codes as u8),
 * hi = word & 0xF0F0F0F0 the same register of the odd k-block as 16 x code: one LOP3 per 4 weights,
 * no conversion. Then 16 C_lo + C_hi - 16 zero S is 16 sum (c - zero) q exactly in int32 (at most
 * 16 * 15 * 65 * 128 < 2^24, so also exact as fp32), and the scale is applied once per group.
 */
__device__ __forceinline__ void gemv_unit(const uint4 (&w)[2], uint2 meta, const unsigned char* xg, int lane,
                                          float (&acc)[2][2]) {
  uint4 b[2] = {make_uint4(0u, 0u, 0u, 0u), make_uint4(0u, 0u, 0u, 0u)};
  if (lane < 12) {
    b[0] = reinterpret_cast<const uint4*>(xg)[lane];
    b[1] = reinterpret_cast<const uint4*>(xg)[12 + lane];
  }
  int clo[4] = {0, 0, 0, 0}, chi[4] = {0, 0, 0, 0};
#pragma unroll
  for (int c = 0; c < 2; ++c) {
    imma_16832(clo, w[c].x & 0x0F0F0F0Fu, w[c].y & 0x0F0F0F0Fu, w[c].z & 0x0F0F0F0Fu, w[c].w & 0x0F0F0F0Fu, b[c].x,
               b[c].y);
    imma_16832(chi, w[c].x & 0xF0F0F0F0u, w[c].y & 0xF0F0F0F0u, w[c].z & 0xF0F0F0F0u, w[c].w & 0xF0F0F0F0u, b[c].z,
               b[c].w);
  }
  const int2 S = reinterpret_cast<const int2*>(xg + kXqSums)[lane & 1];  // limbs 2t, 2t + 1 (t even: 0, 1)
  const float r = *reinterpret_cast<const float*>(xg + kXqInv);
  const int z0 = int(meta.x & 0xFu), z1 = int(meta.y & 0xFu);
  const float s0 = __uint_as_float(meta.x & 0xFFFF0000u) * r, s1 = __uint_as_float(meta.y & 0xFFFF0000u) * r;
  acc[0][0] = fmaf(s0, float(16 * clo[0] + chi[0] - z0 * S.x), acc[0][0]);
  acc[0][1] = fmaf(s0, float(16 * clo[1] + chi[1] - z0 * S.y), acc[0][1]);
  acc[1][0] = fmaf(s1, float(16 * clo[2] + chi[2] - z1 * S.x), acc[1][0]);
  acc[1][1] = fmaf(s1, float(16 * clo[3] + chi[3] - z1 * S.y), acc[1][1]);
}

/** Limb weights of this lane's two C columns, with the 1/16 of gemv_unit: column 0 = q_0 (2^14),
 *  1 = q_1 (2^7), 2 = q_2 (1), 3..7 = 0 (zero B columns; their acc is finite but meaningless). */
__device__ __forceinline__ float2 limb_weights(int lane) {
  const int t = lane & 3;
  return make_float2(t == 0 ? 1024.f : (t == 1 ? 0.0625f : 0.f), t == 0 ? 8.f : 0.f);
}

using sol::red_add_v4;  // solutions/common/sm90_async.cuh

/** This unit-run's 16 row sums: the limbs weighted and summed over the 4 lanes of a row (t = 0, 1
 *  hold limbs 0, 1 and 2), then gathered so that lane 28 + t holds rows 4t..4t+3; then add(v, t)
 *  on every lane (v: the lane's four sums, meaningful on lanes 28..31 only, t = lane & 3). Every
 *  lane of the warp calls it (shuffles). */
template <class Add>
__device__ __forceinline__ void gemv_row_sums(int lane, const float (&acc)[2][2], float2 wl, Add&& add) {
  float r0 = fmaf(acc[0][0], wl.x, acc[0][1] * wl.y), r1 = fmaf(acc[1][0], wl.x, acc[1][1] * wl.y);
  r0 += __shfl_xor_sync(0xFFFFFFFFu, r0, 1);
  r1 += __shfl_xor_sync(0xFFFFFFFFu, r1, 1);
  r0 += __shfl_xor_sync(0xFFFFFFFFu, r0, 2);
  r1 += __shfl_xor_sync(0xFFFFFFFFu, r1, 2);
  // Row 4t + i is row g = 4 (t & 1) + i of the quads: r0 of lane 4g for t < 2, r1 of lane 4g for t >= 2.
  const int t = lane & 3;
  float v[4];
#pragma unroll
  for (int i = 0; i < 4; ++i) {
    const int src = 4 * (4 * (t & 1) + i);
    const float a = __shfl_sync(0xFFFFFFFFu, r0, src), b = __shfl_sync(0xFFFFFFFFu, r1, src);
    v[i] = t < 2 ? a : b;
  }
  add(v, t);
}

/** out[16 tile + 0..15] += this unit-run's row sums (gemv_row_sums), lane 28 + t adding rows
 *  4t..4t+3 with one 16-byte reduction (4 atomics per tile instead of 16; a partial last tile or an
 *  unaligned out takes scalar atomics). Every lane of the warp calls it. */
__device__ __forceinline__ void gemv_flush(const PackedMatrix& M, float* out, uint32_t tile, int lane,
                                          const float (&acc)[2][2], float2 wl) {
  gemv_row_sums(lane, acc, wl, [&](const float (&v)[4], int t) {
    // Lanes 28..31 (t = 0..3) write: lane 0 issues the ring's bulk copies, whose proxy fence would
    // otherwise wait for these reductions to reach L2 (~1 us per flush, measured v6).
    if (lane >= 28) {
      const int r = int(tile) * kTileRows + 4 * t;
      float* dst = out + r;
      if (M.vec_flush && r + 3 < M.rows && (reinterpret_cast<uintptr_t>(dst) & 15u) == 0) {
        red_add_v4(dst, make_float4(v[0], v[1], v[2], v[3]));
      } else {
#pragma unroll
        for (int i = 0; i < 4; ++i)
          if (r + i < M.rows) atomicAdd(dst + i, v[i]);
      }
    }
  });
}

/** This block's groups of M, [*g0, *g1): the whole chunks its warps' ranges touch (a tile-major M:
 *  every group); first / last: the plans of the block's first and last warps (the decode kernel
 *  numbers warps gw = blockIdx.x * kWarps + warp). Empty when the block has no unit. */
__device__ __forceinline__ void block_groups(const PackedMatrix& M, const GemvPlan& first, const GemvPlan& last, int* g0,
                                             int* g1) {
  if (last.u1 <= first.u0) {
    *g0 = *g1 = 0;
    return;
  }
  const int G = unit_chunk(M);  // all groups, or a power of two
  *g0 = first.j0 / G * G;
  *g1 = min(M.groups, (int(last.j_last) / G + 1) * G);
}

/** Consumer experiments (bench_megakernel_blocks only, NIBBLE_MK_GEMV_EXP; NOTES.md "v9"): the decode kernel
 *  runs kGemvReal. Each removes one part of the unit loop so that the bench's TB/s says what it costs; the
 *  outputs are meaningless for every mode but kGemvReal. */
enum GemvExp : int {
  kGemvReal = 0,
  kGemvNoMath = 1,     // wait, refill; no LDS of the slot, no mma, no flush
  kGemvLdsOnly = 2,    // the unit's LDS (codes, metadata, B fragments, sums, 2^-e) folded with XOR; no mma
  kGemvMathOnly = 3,   // codes and metadata synthesised in registers (no LDS of the slot); the rest real
  kGemvFlushLast = 4,  // real, but only the range's last tile is flushed
  kGemvNoRefill = 5,   // the ring's first kRingStages stages only, then the same slots re-read: the consumer alone
  kGemvL2Ahead3 = 6,   // real, and each refill also prefetches into L2 the stage 3 further on (rolling window)
  kGemvL2Ahead6 = 7,   // the same, 6 stages further on
};

/**
 * This warp's share of out += M x: the units of its plan pl (gemv_plan(M, gw, nw) of this warp; in
 * shared memory). ring_prefetch(M, pl, r) must have been called; xq holds x for every group the
 * range reads (build_x_limbs). Every lane of the warp calls this. The sums of consecutive units of
 * one tile stay in registers; a tile change flushes them. As slots free up after M's last stages
 * are issued, the ring goes on with the first stages of `next` (its plan pn; when has_next): the
 * warp's weight stream does not drain at the end of a matrix, and the next stage's first loads are
 * in flight during the barrier, the input build and the attention.
 */
template <int kExp = kGemvReal>
__device__ __forceinline__ void gemv_run(const PackedMatrix& Mg, const GemvPlan& pl, float* out, const XQuant& xq,
                                         Ring& r, const PackedMatrix& next, const GemvPlan& pn, bool has_next,
                                         unsigned long long* stats = nullptr) {
  const int lane = threadIdx.x & 31;
  // Mg and next may live in global memory (the layer table): read once into registers, or every
  // use after an asm "memory" clobber is an L2 round trip in the unit loop (v6 lost ~1 us per
  // unit that way).
  const PackedMatrix M = Mg;
  const uint4* next_w = next.w;
  // Tracing (stats: kGemvStats counters): this warp's cycles in ring_wait, in flushes, in refills
  // (lane 0's bulk-copy issue, the warp waiting for it), in all, and its units.
  long long t_wait = 0, t_flush = 0, t_issue = 0;
  const long long t_begin = stats ? clock64() : 0;
  const uint32_t u0 = pl.u0, u1 = pl.u1;
  const uint32_t T = ring_stages(u0, u1);
  const uint32_t nu0 = has_next ? pn.u0 : 0u, nu1 = has_next ? pn.u1 : 0u;
  const uint32_t Tn = ring_stages(nu0, nu1);
  if (T > 0) {
    const float2 wl = limb_weights(lane);
    // Where the walk is: the current tile, its group's x record, and the units left in the tile's
    // part of the chunk (G groups; megakernel.h, PackedMatrix::chunk). Stepped per unit: v9's
    // per-unit tile/group arithmetic and address recomputation were ~40% of the loop.
    const uint32_t G = uint32_t(unit_chunk(M));
    const uint32_t jj0 = G == uint32_t(M.groups) ? pl.j0 : (pl.j0 & (G - 1u));  // a power of two
    uint32_t tile = pl.tile0;
    const unsigned char* xg = xq.base + size_t(pl.j0) * kXqGroupBytes;
    uint32_t run = G - jj0;
    const uint32_t tiles = uint32_t(M.tiles);
    // The stage consumed next: its slot and mbarrier phase, stepped instead of recomputed.
    uint32_t slot = r.base % kRingStages, phase = (r.base / kRingStages) & 1u;
    const unsigned char* st = r.buf + slot * kStageBytes;
    float acc[2][2] = {{0.f, 0.f}, {0.f, 0.f}};
    const uint32_t n_units = u1 - u0;
    for (uint32_t k = 0; k < T; ++k) {
      const uint32_t bar = r.bar + 8 * slot;
      if (kExp == kGemvNoRefill && k >= kRingStages) {
        // the slots keep the data of the first kRingStages stages
      } else if (stats) {
        const long long t0 = clock64();
        sol::mbar_wait(bar, phase);
        t_wait += clock64() - t0;
      } else {
        sol::mbar_wait(bar, phase);
      }
      const unsigned char* cur = st;
      if (++slot == kRingStages) {
        slot = 0;
        phase ^= 1u;
        st = r.buf;
      } else {
        st += kStageBytes;
      }
      // units in this stage: kStageUnits but in the last one
      const uint32_t here = min(uint32_t(kStageUnits), n_units - k * kStageUnits);
      const bool last_stage = k + 1 == T;
#pragma unroll
      for (int i = 0; i < kStageUnits; ++i) {
        if (i == 0 || uint32_t(i) < here) {
          const uint4* wp = reinterpret_cast<const uint4*>(cur + i * kUnitStride) + lane;
          const uint2* mp = reinterpret_cast<const uint2*>(cur + i * kUnitStride + kUnitCodeBytes) + (lane >> 2);
          if (kExp == kGemvMathOnly) {
            const uint32_t a = (u0 + k * kStageUnits + i) * 0x9E3779B1u ^ lane;
            const uint4 w[2] = {make_uint4(a, a ^ 1u, a ^ 2u, a ^ 3u), make_uint4(a ^ 4u, a ^ 5u, a ^ 6u, a ^ 7u)};
            gemv_unit(w, make_uint2(0x3B800000u | (a & 15u), 0x3B800000u | (a >> 28)), xg, lane, acc);
          } else if (kExp == kGemvLdsOnly) {
            const uint4 w0 = wp[0], w1 = wp[32];
            const uint2 meta = *mp;
            uint4 b0 = make_uint4(0u, 0u, 0u, 0u), b1 = b0;
            if (lane < 12) {
              b0 = reinterpret_cast<const uint4*>(xg)[lane];
              b1 = reinterpret_cast<const uint4*>(xg)[12 + lane];
            }
            const int2 S = reinterpret_cast<const int2*>(xg + kXqSums)[lane & 1];
            const uint32_t f = w0.x ^ w0.y ^ w0.z ^ w0.w ^ w1.x ^ w1.y ^ w1.z ^ w1.w ^ meta.x ^ meta.y ^ b0.x ^ b0.y ^
                               b0.z ^ b0.w ^ b1.x ^ b1.y ^ b1.z ^ b1.w ^ uint32_t(S.x) ^ uint32_t(S.y) ^
                               __float_as_uint(*reinterpret_cast<const float*>(xg + kXqInv));
            acc[0][0] += __uint_as_float(f & 0x007FFFFFu);
          } else if (kExp != kGemvNoMath) {
            const uint4 w[2] = {wp[0], wp[32]};
            gemv_unit(w, *mp, xg, lane, acc);
          }
          const bool last = last_stage && uint32_t(i) + 1 == here;
          const bool wrap = --run == 0;  // the tile's last group of this chunk: the tile changes
          const bool flush = kExp == kGemvNoMath ? false : kExp == kGemvFlushLast ? last : (wrap || last);
          if (flush) {
            const long long t0 = stats ? clock64() : 0;
            gemv_flush(M, out, tile, lane, acc, wl);
            if (stats) t_flush += clock64() - t0;
            acc[0][0] = acc[0][1] = acc[1][0] = acc[1][1] = 0.f;
          }
          if (wrap) {  // the next tile, back at the chunk's first group; after the last tile, the next chunk
            run = G;
            xg -= size_t(G - 1u) * kXqGroupBytes;
            if (++tile == tiles) tile = 0, xg += size_t(G) * kXqGroupBytes;
          } else {
            xg += kXqGroupBytes;
          }
        }
      }
      __syncwarp();  // every lane has read the slot before lane 0 refills it
      const long long t0 = stats ? clock64() : 0;
      if (kExp == kGemvNoRefill) {
        // no refill: the slots keep their data
      } else if (r.issued < T) {
        if (lane == 0) ring_issue(M.w, u0, u1, r, r.issued, r.base + r.issued);
        constexpr uint32_t ahead = kExp == kGemvL2Ahead3 ? 3u : kExp == kGemvL2Ahead6 ? 6u : 0u;
        if (ahead > 0 && lane == 0 && r.issued + ahead < T) {
          const uint32_t ua = u0 + (r.issued + ahead) * kStageUnits;
          const uint32_t na = min(uint32_t(kStageUnits), u1 - ua);
          sol::bulk_prefetch_l2(reinterpret_cast<const unsigned char*>(M.w) + size_t(ua) * kUnitStride, na * kUnitStride);
        }
        ++r.issued;
      } else if (r.next_issued < Tn) {
        if (lane == 0) ring_issue(next_w, nu0, nu1, r, r.next_issued, r.base + T + r.next_issued);
        ++r.next_issued;
      }
      if (stats) {
        __syncwarp();
        t_issue += clock64() - t0;
      }
    }
  }
  // kGemvNoRefill issued only the first min(T, kRingStages) stages: the global stage numbers (and so
  // the mbarriers' phases) go on from there.
  r.base += kExp == kGemvNoRefill ? min(T, uint32_t(kRingStages)) : T;
  r.issued = 0;
  if (stats && lane == 0) {
    atomicAdd(stats + 0, (unsigned long long)t_wait);
    atomicAdd(stats + 1, (unsigned long long)t_flush);
    atomicAdd(stats + 2, (unsigned long long)t_issue);
    atomicAdd(stats + 3, (unsigned long long)(clock64() - t_begin));
    atomicAdd(stats + 4, (unsigned long long)(u1 - u0));
  }
}

}  // namespace nibble::megakernel
