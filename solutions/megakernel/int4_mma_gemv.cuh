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
// warp of the grid, balanced to one unit; a tile split between warps is summed with fp32 atomics
// into out (which the caller zeroes, or which holds the residual: h += W x is the epilogue for free).
// Loads: each warp owns a ring of kRingStages shared-memory stages of kStageUnits units (codes and
// metadata); lane 0 fills a stage with two bulk copies (cp.async.bulk, the copy engine, L2
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

namespace nibble::megakernel {

/** The per-warp ring: stages in flight and units per stage. */
constexpr int kRingStages = 3;
constexpr int kStageUnits = 2;
constexpr int kUnitBytes = 1024, kUnitMetaBytes = 64;
constexpr int kStageBytes = kStageUnits * (kUnitBytes + kUnitMetaBytes);
/** Shared memory of one block's rings (16 warps) and of their mbarriers. */
constexpr size_t kRingBytes = size_t(kWarps) * kRingStages * kStageBytes;
constexpr size_t kRingBarrierBytes = size_t(kWarps) * kRingStages * 8;

/** A warp's range of units of a matrix: [u0, u1). */
struct UnitRange {
  long long u0, u1;
};

__device__ __forceinline__ UnitRange unit_range(const PackedMatrix& M, int gw, int nw) {
  const long long total = (long long)M.tiles * M.groups;
  return {total * gw / nw, total * (gw + 1) / nw};
}

/** This warp's ring; every lane holds the same values. */
struct Ring {
  unsigned char* buf;     // kRingStages stages of kStageBytes
  uint32_t bar;           // shared address of the first of kRingStages mbarriers
  uint32_t base;          // global stage number of the current matrix's first stage
  uint32_t issued;        // stages of the current matrix issued so far
  uint32_t next_issued;   // stages of the next matrix issued while the current one finished
};

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

/** Block-wide, once per kernel: carve the rings and initialise every mbarrier (count 1). */
__device__ __forceinline__ Ring ring_init(unsigned char* ring_smem, unsigned long long* bars) {
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  Ring r;
  r.buf = ring_smem + size_t(warp) * kRingStages * kStageBytes;
  r.bar = smem_addr(bars + warp * kRingStages);
  r.base = 0;
  r.issued = 0;
  r.next_issued = 0;
  if (lane == 0) {
    for (int s = 0; s < kRingStages; ++s)
      asm volatile("mbarrier.init.shared::cta.b64 [%0], 1;" ::"r"(r.bar + 8 * s) : "memory");
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncwarp();
  return r;
}

/** Lane 0: stage k of M's range [u0, u1), global stage number n, into ring slot n % kRingStages
 *  (whose previous stage, n - kRingStages, has been consumed). */
__device__ __forceinline__ void ring_issue(const PackedMatrix& M, const UnitRange& rg, const Ring& r, uint32_t k,
                                           uint32_t gn) {
  const long long u = rg.u0 + (long long)k * kStageUnits;
  const int n = int(min((long long)kStageUnits, rg.u1 - u));
  const uint32_t slot = gn % kRingStages;
  unsigned char* dst = r.buf + slot * kStageBytes;
  const uint32_t bar = r.bar + 8 * slot;
  uint64_t policy;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(policy));
  // The slot was last read through the generic proxy (LDS); the copy engine writes it next.
  asm volatile("fence.proxy.async.shared::cta;" ::: "memory");
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(n * (kUnitBytes + kUnitMetaBytes))
               : "memory");
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1], %2, [%3], %4;" ::"r"(
          smem_addr(dst)),
      "l"(M.w + u * 64), "r"(n * kUnitBytes), "r"(bar), "l"(policy)
      : "memory");
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1], %2, [%3], %4;" ::"r"(
          smem_addr(dst + kStageUnits * kUnitBytes)),
      "l"(M.meta + u * 8), "r"(n * kUnitMetaBytes), "r"(bar), "l"(policy)
      : "memory");
}

__device__ __forceinline__ uint32_t ring_stages(const UnitRange& rg) {
  return rg.u1 > rg.u0 ? uint32_t((rg.u1 - rg.u0 + kStageUnits - 1) / kStageUnits) : 0u;
}

/** Fill the ring with the first stages of this warp's range of M, counting those the previous
 *  gemv_run already issued as its `next` (the weights do not depend on M's input, so this may run
 *  before the barrier that makes the input ready). Every lane calls it. */
__device__ __forceinline__ void ring_prefetch(const PackedMatrix& M, int gw, int nw, Ring& r) {
  const UnitRange rg = unit_range(M, gw, nw);
  const uint32_t T = ring_stages(rg);
  const uint32_t want = min(T, uint32_t(kRingStages));
  if ((threadIdx.x & 31) == 0)
    for (uint32_t k = r.next_issued; k < want; ++k) ring_issue(M, rg, r, k, r.base + k);
  r.issued = max(want, r.next_issued);
  r.next_issued = 0;
  __syncwarp();
}

__device__ __forceinline__ void ring_wait(const Ring& r, uint32_t n) {
  const uint32_t bar = r.bar + 8 * (n % kRingStages), parity = (n / kRingStages) & 1u;
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "WAIT_%=:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n"
      "@!p bra WAIT_%=;\n"
      "}\n" ::"r"(bar),
      "r"(parity)
      : "memory");
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
 * This warp's share of out += M x. ring_prefetch(M, gw, nw, r) must have been called with the same
 * gw, nw; xf holds x's B fragments for all K (build_x_fragments). Every lane of the warp calls this.
 * As slots free up after M's last stages are issued, the ring goes on with the first stages of
 * `next` (when has_next): the warp's weight stream does not drain at the end of a matrix, and the
 * next stage's first loads are in flight during the barrier, the input build and the attention.
 */
__device__ __forceinline__ void gemv_run(const PackedMatrix& M, float* out, const uint2* xf, int gw, int nw, Ring& r,
                                         const PackedMatrix& next, bool has_next) {
  const int lane = threadIdx.x & 31;
  const UnitRange rg = unit_range(M, gw, nw);
  const uint32_t T = ring_stages(rg);
  const UnitRange rn = has_next ? unit_range(next, gw, nw) : UnitRange{0, 0};
  const uint32_t Tn = ring_stages(rn);
  if (T > 0) {
    const int G = M.groups;
    long long tile = rg.u0 / G;
    int j = int(rg.u0 % G);
    float acc0 = 0.f, acc1 = 0.f;
    for (uint32_t k = 0; k < T; ++k) {
      ring_wait(r, r.base + k);
      const unsigned char* st = r.buf + ((r.base + k) % kRingStages) * kStageBytes;
      const long long u = rg.u0 + (long long)k * kStageUnits;
#pragma unroll
      for (int i = 0; i < kStageUnits; ++i) {
        if (u + i < rg.u1) {
          const uint4* wp = reinterpret_cast<const uint4*>(st + i * kUnitBytes) + lane;
          const uint4 w[2] = {wp[0], wp[32]};
          const uint2 meta =
              *reinterpret_cast<const uint2*>(st + kStageUnits * kUnitBytes + i * kUnitMetaBytes + (lane >> 2) * 8);
          gemv_unit(w, meta, xf + j * 64, lane, acc0, acc1);
          if (++j == G) {
            gemv_flush(M, out, tile, lane, acc0, acc1);
            acc0 = acc1 = 0.f;
            j = 0;
            ++tile;
          }
        }
      }
      __syncwarp();  // every lane has read the slot before lane 0 refills it
      if (r.issued < T) {
        if (lane == 0) ring_issue(M, rg, r, r.issued, r.base + r.issued);
        ++r.issued;
      } else if (r.next_issued < Tn) {
        if (lane == 0) ring_issue(next, rn, r, r.next_issued, r.base + T + r.next_issued);
        ++r.next_issued;
      }
    }
    if (j != 0) gemv_flush(M, out, tile, lane, acc0, acc1);
  }
  r.base += T;
  r.issued = 0;
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
