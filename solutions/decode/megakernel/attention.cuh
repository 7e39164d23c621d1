// attention.cuh: RoPE, the KV append and decode attention over slots 0..pos, split across the
// sequence, with the combine done by the last block to finish each KV head.
//
// Spec (nibble.h / seed): "RoPE rotate-half (pairs i, i+hd/2) at position pos on q and k; k,v
// appended at cache slot pos; attention over slots 0..pos with GQA (query head j reads kv head
// j / (n_q/n_kv)), softmax(q k^T / sqrt(hd))"; the cache is bf16 and updated in place; the
// softmax accumulates in fp32.
// Shapes: qkv fp32 [q (n_q hd) | k (n_kv hd) | v (n_kv hd)] straight from the GEMV (not rotated);
// caches (n_kv, max_seq, hd) bf16; out (n_q hd) fp32.
// Bytes: 2 n_kv (pos+1) hd 2 of cache (8.4 MB per layer at pos 2048, full config), each row read
// once for the n_q/n_kv query heads that share it; partials n_q chunks (hd+2) 4 (0.2 MB).
//
// Work: item = (kv head, chunk of slots); the chunk is sized so that n_kv x chunks is at most the
// grid (15 chunks of 144 slots per head at pos 2048 on 132 blocks: 120 items). (v8) An item's K and
// V rows are contiguous in the cache, so they come into shared memory as two bulk copies
// (cp.async.bulk on an mbarrier) of at most kAttnKvBytes, a "sub-chunk" (144 slots at hd 128: the
// whole chunk at pos 2048); attention_stage issues the first one (v8-v14 issued it before the qkv
// grid barrier's arrival, measured slower since v15: the barrier's release fence waits for those
// copies; NIBBLE_MK_KVPF=1 issues it after the arrival's fence, attention_prefetch).
// v3-v7 loaded the rows with 8-byte LDGs per lane, 72 KB per SM through the L1's miss queue, which
// arrived at ~10 GB/s per SM (trace: 7.4 us from the barrier to the scores; NOTES.md).
// (v19) Warp w takes the 16-slot tiles a + 16 w, a + 16 (w + 16), ... of a sub-chunk from shared
// memory: scores S^T = K Q^T and the weighted V O^T = V^T P^T on the tensor cores (mma.m16n8k16
// bf16, q and P each split into bf16 hi + lo, fp32 accumulation), an online softmax per warp in
// log2 units (q pre-scaled by log2(e)/sqrt(hd): one exp2 per score); v3-v18 scored one slot per
// warp with a 5-shuffle reduction per slot and query head. The warps merge in shared memory and the
// block writes one partial (max, sum, weighted V) per query head. The block whose chunk holds pos writes the rotated k and the v of this step into slot pos
// (bf16, nearest even) and uses exactly those bf16 values for slot pos (its copy may hold the old
// row), as the reference reads its cache. A counter per KV head (release: fence + atomic) elects
// the last block, which combines the chunks (acquire: fence; every chunk's (m, l, o) loaded in one
// batch, one L2 round trip) into out and resets the counter, so no extra grid barrier is needed.

#pragma once

#include <cuda_bf16.h>

#include <cmath>
#include <cstdint>

#include "megakernel.h"
#include "solutions/common/gpu_sync.cuh"
#include "solutions/common/mma_bf16.cuh"
#include "solutions/common/sm90_async.cuh"

namespace nibble::megakernel {

/** Shared memory of one sub-chunk of K and V rows (K rows, then V rows): 144 slots at hd 128, 288
 *  at hd 64. The decode kernel lays it over its GEMV input vectors, free during the attention. */
constexpr int kAttnKvBytes = 144 * 128 * 2 * 2;
template <int HD>
__host__ __device__ constexpr int attn_kv_slots() { return kAttnKvBytes / (4 * HD); }
constexpr int kCombineBatch = 16;  // chunks whose (m, l, o) the combine loads at once

/** Shared memory (floats) of attention_stage<HD>'s scratch besides the K/V sub-chunk: the rotated
 *  q, the warps' (max, sum), a flag, this step's K and V rows (bf16). The warps' weighted V for the
 *  merge (kWarps x kMaxRep x HD fp32) lives in the K/V buffer, free by then (v16: 32 KB less, so
 *  the decode kernel's ring fits a fourth stage). */
template <int HD>
__host__ __device__ constexpr int attention_smem_floats() {
  return kMaxRep * HD + kWarps * kMaxRep * 2 + 4 + HD;
}
static_assert(kWarps * kMaxRep * 128 * 4 <= kAttnKvBytes, "the merge's weighted V fits in the K/V buffer");

/** How the sequence is cut: chunk slots per item (a multiple of kWarps), chunks per KV head, items. */
struct AttnGeom {
  int chunk, n_chunks, items;
};
__device__ __forceinline__ AttnGeom attn_geom(int pos, int max_chunks, int n_kv) {
  const int slots = pos + 1;
  int chunk = (slots + max_chunks - 1) / max_chunks;
  chunk = (chunk + kWarps - 1) / kWarps * kWarps;
  const int n_chunks = (slots + chunk - 1) / chunk;  // <= max_chunks
  return {chunk, n_chunks, n_kv * n_chunks};
}

/** The block's K/V sub-chunk buffer: kAttnKvBytes of shared memory, its mbarrier, and the state
 *  (bit 0: the parity of the next completion; bit 1: the block's first sub-chunk is in flight, issued
 *  by attention_prefetch). Every thread holds the same values. */
struct AttnKv {
  unsigned char* buf;
  uint64_t* bar;
  uint32_t state;
};

/** Block-wide, once per kernel: the mbarrier initialised (count 1), visible to the block. */
__device__ __forceinline__ AttnKv attn_kv_init(unsigned char* buf, uint64_t* bar) {
  if (threadIdx.x == 0) {
    sol::mbar_init(bar, 1);
    sol::mbar_init_fence();
  }
  __syncthreads();
  return {buf, bar, 0u};
}

/** Thread 0: K and V rows [a, b) of KV head kvh into the buffer (K at 0, V at attn_kv_slots x hd
 *  bf16), completing on its mbarrier. The caller has made every thread's use of the buffer (LDS,
 *  STS) happen before, by a block barrier. Rows are hd x 2 bytes: 16-byte multiples, as the copy needs. */
template <int HD>
__device__ __forceinline__ void attn_kv_issue(const AttnKv& kv, const uint16_t* k_cache, const uint16_t* v_cache,
                                              int kvh, int max_seq, int a, int b) {
  const uint32_t bytes = uint32_t(b - a) * HD * 2;
  const size_t src = (size_t(kvh) * max_seq + a) * HD;
  const uint32_t dst = sol::smem_addr(kv.buf), bar = sol::smem_addr(kv.bar);
  // The cache is read once per step and is larger than L2: do not keep it. The buffer was last
  // accessed through the generic proxy; the copy engine writes it next.
  const uint64_t policy = sol::policy_evict_first();
  sol::fence_proxy_async_smem();
  sol::mbar_expect_tx(bar, 2 * bytes);
  sol::bulk_load(dst, k_cache + src, bytes, bar, policy);
  sol::bulk_load(dst + uint32_t(attn_kv_slots<HD>()) * HD * 2, v_cache + src, bytes, bar, policy);
}

/** Every thread: wait for the sub-chunk in flight. */
__device__ __forceinline__ void attn_kv_wait(AttnKv& kv) {
  sol::mbar_wait(kv.bar, kv.state & 1u);
  kv.state = (kv.state ^ 1u) & 1u;  // next parity; nothing pending
}

/**
 * Block-wide: issue the copy of this block's first sub-chunk for the coming attention_stage (same
 * pos, max_chunks, caches), which then waits for it instead of issuing it. The cache rows do not
 * depend on this step (slot pos is patched from shared memory), so the decode kernel may call this
 * during the qkv grid barrier (NIBBLE_MK_KVPF=1, after the arrival; off by default). Precondition:
 * every thread is past its last use of kv.buf (a block barrier since).
 */
template <int HD>
__device__ __forceinline__ void attention_prefetch(AttnKv& kv, const uint16_t* k_cache, const uint16_t* v_cache,
                                                   int n_kv, int max_seq, int pos, int max_chunks) {
  const AttnGeom g = attn_geom(pos, max_chunks, n_kv);
  const int item = blockIdx.x;
  if (item >= g.items) return;
  const int kvh = item / g.n_chunks, c = item % g.n_chunks;
  const int s0 = c * g.chunk, s1 = min(pos + 1, s0 + g.chunk);
  if (threadIdx.x == 0) attn_kv_issue<HD>(kv, k_cache, v_cache, kvh, max_seq, s0, min(s1, s0 + attn_kv_slots<HD>()));
  kv.state |= 2u;
}

__device__ __forceinline__ uint16_t to_bf16_rn(float f) { return __bfloat16_as_ushort(__float2bfloat16_rn(f)); }

/** x0, x1 as bf16x2 hi + lo (x0 in the low halves): hi = bf16(x), lo = bf16(x - hi), so that
 *  hi + lo holds ~16 significant bits of x (x - hi is exact in fp32). */
__device__ __forceinline__ void split_bf16x2(float x0, float x1, uint32_t& hi, uint32_t& lo) {
  const __nv_bfloat162 h = __floats2bfloat162_rn(x0, x1);
  const float2 hf = __bfloat1622float2(h);
  const __nv_bfloat162 l = __floats2bfloat162_rn(x0 - hf.x, x1 - hf.y);
  memcpy(&hi, &h, 4);  // not a pointer cast: the emulation's host compiler warns of aliasing there
  memcpy(&lo, &l, 4);
}

using sol::mma_bf16_16816;  // solutions/common/mma_bf16.cuh

/**
 * Element e of query head j of the attention output, from the n_chunks partials (m, l, o[hd]) of
 * part (n_q, max_chunks, hd + 2) fp32 (log2-domain max, sum, weighted V; written by
 * attention_stage and released by its count): every chunk's (m, l, o) loaded at once
 * (kCombineBatch chunks per L2 round trip) and merged online, o / l returned. The caller has
 * acquired the partials (the count, a fence or a flag, then a block barrier).
 */
template <int HD>
__device__ __forceinline__ float combine_chunks(const float* part, int max_chunks, int n_chunks, int j, int e) {
  const float* pj = part + size_t(j) * max_chunks * (HD + 2);
  float M = -INFINITY, L = 0.f, O = 0.f;
  for (int c0 = 0; c0 < n_chunks; c0 += kCombineBatch) {
    float mc[kCombineBatch], lc[kCombineBatch], oc[kCombineBatch];
#pragma unroll
    for (int i = 0; i < kCombineBatch; ++i) {
      const float* pc = pj + size_t(c0 + i) * (HD + 2);
      const bool in = c0 + i < n_chunks;
      mc[i] = in ? __ldcg(pc) : -INFINITY;
      lc[i] = in ? __ldcg(pc + 1) : 0.f;
      oc[i] = in ? __ldcg(pc + 2 + e) : 0.f;
    }
    float mx = M;
#pragma unroll
    for (int i = 0; i < kCombineBatch; ++i) mx = fmaxf(mx, mc[i]);
    const float corr = M == -INFINITY ? 0.f : exp2f(M - mx);
    L *= corr;
    O *= corr;
#pragma unroll
    for (int i = 0; i < kCombineBatch; ++i) {
      const float f = mc[i] == -INFINITY ? 0.f : exp2f(mc[i] - mx);
      L = fmaf(lc[i], f, L);
      O = fmaf(oc[i], f, O);
    }
    M = mx;
  }
  return O / L;
}

/**
 * The attention of one layer for every query head, written to out. Block-wide, all blocks of the
 * grid call it; out is complete once every block has returned and passed a grid barrier.
 * part: (n_q, max_chunks, hd + 2) with max_chunks = attn_max_chunks(gridDim.x, n_kv); count: (n_kv)
 * zeroed (left zeroed). smem: attention_smem_floats<HD>() floats. kv: the K/V buffer, with the
 * block's first sub-chunk in flight if attention_prefetch issued it. done (optional, n_kv): the
 * combining block adds 1 to done[kv head] once that head's query heads are in out (release), so a
 * consumer may wait for the heads it reads instead of a grid barrier.
 * tr (optional, tracing): kAttnMarks clock64() values of this block's first item (megakernel.h).
 * sync_tid: the thread that takes the count and releases done (a fence waits for every bulk copy
 * the SM has in flight, whichever warp issued it: bench_fence_latency).
 * grid_blocks: the blocks that run the step (blocks [0, grid_blocks) call it; 0: gridDim.x; the
 * decode kernel's NIBBLE_MK_PFSM leaves the last blocks out), max_chunks planned for as many.
 * CONSUMER_COMBINE (after v19, NIBBLE_MK_OCOMB=1; not yet measured): no block combines; every
 * block releases its partials by adding 1 to count[kv head], which then only grows (n_chunks per
 * layer; the caller zeroes it at the end of the launch), and the consumer waits for its heads'
 * counts and merges the partials itself (combine_chunks). out and done are not written.
 */
template <int HD, bool CONSUMER_COMBINE = false>
__device__ void attention_stage(const float* qkv, const float2* __restrict__ rope, uint16_t* k_cache,
                                uint16_t* v_cache, int n_q, int n_kv, int max_seq, int pos, float* part,
                                int max_chunks, unsigned* count, float* out, float* smem, AttnKv& kv,
                                unsigned* done = nullptr, long long* tr = nullptr, unsigned sync_tid = 0,
                                unsigned grid_blocks = 0) {
  constexpr int HALF = HD / 2;
  constexpr int S = attn_kv_slots<HD>();
  const int rep = n_q / n_kv;
  const AttnGeom geo = attn_geom(pos, max_chunks, n_kv);
  const int chunk = geo.chunk, n_chunks = geo.n_chunks, items = geo.items;
  // Scores in log2 units: q is pre-multiplied by log2(e)/sqrt(hd), so every exponential is one
  // exp2 (MUFU.EX2) instead of expf's range reduction; the softmax is unchanged.
  const float qscale = float(1.4426950408889634 / sqrt(double(HD)));
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;

  float* q_s = smem;                   // (kMaxRep, HD) rotated q
  float* ml_s = q_s + kMaxRep * HD;    // (kWarps, kMaxRep, 2) per-warp max, sum
  unsigned* last_s = reinterpret_cast<unsigned*>(ml_s + kWarps * kMaxRep * 2);
  // This step's K and V rows as bf16 words (HD/2 each), read by the warp that owns slot pos
  // instead of the buffer's copy (issued before the append).
  uint32_t* knew_s = reinterpret_cast<uint32_t*>(last_s + 4);
  uint32_t* vnew_s = knew_s + HD / 2;
  // (kWarps, kMaxRep, HD) per-warp weighted V, written only after every warp is done with the
  // last sub-chunk: over the K/V buffer.
  float* o_s = reinterpret_cast<float*>(kv.buf);
  const uint32_t* kbuf = reinterpret_cast<const uint32_t*>(kv.buf);
  const uint32_t* vbuf = kbuf + S * HD / 2;
  // Tracing: thread 0's clock after the block-wide barriers below (they already exist: no extra
  // synchronisation), for the first item only.
  const auto trace_mark = [&](int item, int k, long long v) {
    if (tr && threadIdx.x == 0 && item == int(blockIdx.x)) tr[k] = v;
  };
  if (tr && threadIdx.x == 0)
    for (int k = 0; k < kAttnMarks; ++k) tr[k] = 0;

  const int stride = int(grid_blocks ? grid_blocks : gridDim.x);
  for (int item = blockIdx.x; item < items; item += stride) {
    const int kvh = item / n_chunks, c = item % n_chunks;
    const int s0 = c * chunk, s1 = min(pos + 1, s0 + chunk);
    __syncthreads();  // shared memory (scratch and K/V buffer) of the previous item
    // 1. The first sub-chunk's copy, unless attention_prefetch issued it.
    if (kv.state & 2u) {
      kv.state &= 1u;
    } else if (threadIdx.x == 0) {
      attn_kv_issue<HD>(kv, k_cache, v_cache, kvh, max_seq, s0, min(s1, s0 + S));
    }

    // 2. RoPE on this KV head's query heads; the pair (i, i + hd/2) at angle pos * theta^(-2i/hd).
    for (int idx = threadIdx.x; idx < rep * HALF; idx += blockDim.x) {
      const int j = idx / HALF, i = idx % HALF;
      const float* qh = qkv + size_t(kvh * rep + j) * HD;
      const float x1 = __ldcg(qh + i), x2 = __ldcg(qh + i + HALF);
      const float2 cs = __ldg(rope + size_t(pos) * HALF + i);
      q_s[j * HD + i] = (x1 * cs.x - x2 * cs.y) * qscale;
      q_s[j * HD + i + HALF] = (x2 * cs.x + x1 * cs.y) * qscale;
    }
    // 3. The append: this step's k (rotated) and v into slot pos, rounded to bf16, also kept in
    //    shared memory for the warp that scores slot pos.
    const bool has_pos = pos >= s0 && pos < s1;
    if (has_pos) {
      const size_t dst = (size_t(kvh) * max_seq + pos) * HD;
      const float* kh = qkv + size_t(n_q) * HD + size_t(kvh) * HD;
      const float* vh = qkv + size_t(n_q + n_kv) * HD + size_t(kvh) * HD;
      uint16_t* kn = reinterpret_cast<uint16_t*>(knew_s);
      uint16_t* vn = reinterpret_cast<uint16_t*>(vnew_s);
      for (int i = threadIdx.x; i < HALF; i += blockDim.x) {
        const float x1 = __ldcg(kh + i), x2 = __ldcg(kh + i + HALF);
        const float2 cs = __ldg(rope + size_t(pos) * HALF + i);
        const uint16_t k1 = to_bf16_rn(x1 * cs.x - x2 * cs.y), k2 = to_bf16_rn(x2 * cs.x + x1 * cs.y);
        const uint16_t v1 = to_bf16_rn(__ldcg(vh + i)), v2 = to_bf16_rn(__ldcg(vh + i + HALF));
        k_cache[dst + i] = k1;
        k_cache[dst + i + HALF] = k2;
        v_cache[dst + i] = v1;
        v_cache[dst + i + HALF] = v2;
        kn[i] = k1;
        kn[i + HALF] = k2;
        vn[i] = v1;
        vn[i + HALF] = v2;
      }
    }
    __syncthreads();  // q_s, knew_s / vnew_s visible to the block
    trace_mark(item, 0, clock64());

    // 3b. Scores and weighted V on the tensor cores (v19), one 16-slot tile per warp at a time.
    //     Lane (g, t) = (lane / 4, lane % 4) of mma.m16n8k16 holds the scores of the tile's slots g
    //     and g + 8 for query heads 2t and 2t + 1 (C of S^T = K Q^T: 16 slots x 8 heads, heads past
    //     rep are zero columns), and the rows of O^T = V^T P^T (HD dims x 8 heads) of its g for the
    //     same two heads, so the online softmax's rescale never leaves the lane.
    const int g = lane >> 2, t = lane & 3;
    constexpr int MT = HD / 16;  // O^T's 16-dim tiles; also the scores' k16 steps
    float mh[2] = {-INFINITY, -INFINITY}, lh[2] = {0.f, 0.f};  // heads 2t, 2t + 1 (lh: this lane's slots)
    float oacc[MT][4];
#pragma unroll
    for (int i = 0; i < MT; ++i) oacc[i][0] = oacc[i][1] = oacc[i][2] = oacc[i][3] = 0.f;
    const float* qg = q_s + (g < rep ? g : 0) * HD;

    for (int a = s0; a < s1; a += S) {
      const int b = min(s1, a + S);
      if (a != s0) {
        __syncthreads();  // every warp is done with the previous sub-chunk
        if (threadIdx.x == 0) attn_kv_issue<HD>(kv, k_cache, v_cache, kvh, max_seq, a, b);
      }
      attn_kv_wait(kv);
      for (int tile = a + 16 * warp; tile < b; tile += 16 * kWarps) {
        // Scores. The dot product's order is free, so logical k = 2t + e (+ 8) of step (j, h) is dim
        // 8t + 32j + 4h + e (+ 2): every A register of K comes from 16-byte row loads, no ldmatrix,
        // and q's B registers use the same map. q = hi + lo in bf16 (two chains): ~16 bits of q as
        // the fp32 path had 24, K is bf16 in the cache, products and sums fp32.
        const int r0 = tile + g, r1 = r0 + 8;
        const uint32_t* k0 = r0 == pos ? knew_s : kbuf + (r0 - a) * (HD / 2);
        const uint32_t* k1 = r1 == pos ? knew_s : kbuf + (r1 - a) * (HD / 2);
        float shi[4] = {0.f, 0.f, 0.f, 0.f}, slo[4] = {0.f, 0.f, 0.f, 0.f};
#pragma unroll
        for (int j = 0; j < HD / 32; ++j) {
          const uint4 ka = *reinterpret_cast<const uint4*>(k0 + 4 * t + 16 * j);
          const uint4 kb = *reinterpret_cast<const uint4*>(k1 + 4 * t + 16 * j);
          float4 q0 = make_float4(0.f, 0.f, 0.f, 0.f), q1 = q0;
          if (g < rep) {
            q0 = *reinterpret_cast<const float4*>(qg + 8 * t + 32 * j);
            q1 = *reinterpret_cast<const float4*>(qg + 8 * t + 32 * j + 4);
          }
          uint32_t bh0, bl0, bh1, bl1;
          split_bf16x2(q0.x, q0.y, bh0, bl0);
          split_bf16x2(q0.z, q0.w, bh1, bl1);
          mma_bf16_16816(shi, ka.x, kb.x, ka.y, kb.y, bh0, bh1);
          mma_bf16_16816(slo, ka.x, kb.x, ka.y, kb.y, bl0, bl1);
          split_bf16x2(q1.x, q1.y, bh0, bl0);
          split_bf16x2(q1.z, q1.w, bh1, bl1);
          mma_bf16_16816(shi, ka.z, kb.z, ka.w, kb.w, bh0, bh1);
          mma_bf16_16816(slo, ka.z, kb.z, ka.w, kb.w, bl0, bl1);
        }
        // Online softmax over the tile: slots past b score -inf (their K rows are stale bytes).
        float sc[4];
        sc[0] = r0 < b ? shi[0] + slo[0] : -INFINITY;
        sc[1] = r0 < b ? shi[1] + slo[1] : -INFINITY;
        sc[2] = r1 < b ? shi[2] + slo[2] : -INFINITY;
        sc[3] = r1 < b ? shi[3] + slo[3] : -INFINITY;
        float mx0 = fmaxf(sc[0], sc[2]), mx1 = fmaxf(sc[1], sc[3]);
#pragma unroll
        for (int off = 4; off < 32; off <<= 1) {  // over g: the lanes that share t
          mx0 = fmaxf(mx0, __shfl_xor_sync(0xFFFFFFFFu, mx0, off));
          mx1 = fmaxf(mx1, __shfl_xor_sync(0xFFFFFFFFu, mx1, off));
        }
        mx0 = fmaxf(mh[0], mx0);  // finite: slot `tile` < b
        mx1 = fmaxf(mh[1], mx1);
        const float c0 = exp2f(mh[0] - mx0), c1 = exp2f(mh[1] - mx1);  // 0 on the first tile
        mh[0] = mx0;
        mh[1] = mx1;
        const float p0 = exp2f(sc[0] - mx0), p1 = exp2f(sc[1] - mx1), p2 = exp2f(sc[2] - mx0),
                    p3 = exp2f(sc[3] - mx1);
        lh[0] = fmaf(lh[0], c0, p0 + p2);
        lh[1] = fmaf(lh[1], c1, p1 + p3);
#pragma unroll
        for (int i = 0; i < MT; ++i) {
          oacc[i][0] *= c0;
          oacc[i][1] *= c1;
          oacc[i][2] *= c0;
          oacc[i][3] *= c1;
        }
        // P^T's B registers: lane (g, t) needs P[slot 2t, 2t + 1][head g] and P[2t + 8, 2t + 9][g],
        // held by lanes 8t + g / 2 and 8t + 4 + g / 2 (slot g' = 2t, 2t + 1, heads 2(g / 2) + {0, 1}).
        // P = hi + lo in bf16 as q.
        uint32_t w0h, w0l, w1h, w1l;  // (slot g, heads 2t | 2t + 1), (slot g + 8, same heads)
        split_bf16x2(p0, p1, w0h, w0l);
        split_bf16x2(p2, p3, w1h, w1l);
        const int src0 = 8 * t + (g >> 1), src1 = src0 + 4;
        const uint32_t sel = (g & 1) ? 0x7632u : 0x5410u;
        const uint32_t pb0h = __byte_perm(__shfl_sync(0xFFFFFFFFu, w0h, src0), __shfl_sync(0xFFFFFFFFu, w0h, src1), sel);
        const uint32_t pb0l = __byte_perm(__shfl_sync(0xFFFFFFFFu, w0l, src0), __shfl_sync(0xFFFFFFFFu, w0l, src1), sel);
        const uint32_t pb1h = __byte_perm(__shfl_sync(0xFFFFFFFFu, w1h, src0), __shfl_sync(0xFFFFFFFFu, w1h, src1), sel);
        const uint32_t pb1l = __byte_perm(__shfl_sync(0xFFFFFFFFu, w1l, src0), __shfl_sync(0xFFFFFFFFu, w1l, src1), sel);
        // O^T += V^T P^T: row g of m-tile i is dim (HD / 8) g + 2i, row g + 8 the next dim, so a
        // lane reads HD / 8 contiguous dims of each of its 4 slots (2t, 2t + 1, 2t + 8, 2t + 9) and
        // pairs two slots' halves with one PRMT per A register. Rows past b are zeros (P is 0 there,
        // but 0 x a stale NaN is NaN).
        const uint32_t* vrow[4];
#pragma unroll
        for (int u = 0; u < 4; ++u) {
          const int v = tile + 2 * t + (u & 1) + 8 * (u >> 1);
          vrow[u] = v == pos ? vnew_s : (v < b ? vbuf + (v - a) * (HD / 2) : nullptr);
        }
#pragma unroll
        for (int hq = 0; hq < HD / 64; ++hq) {  // 16-byte quarters of the lane's HD / 8 dims
          uint4 w[4];
#pragma unroll
          for (int u = 0; u < 4; ++u)
            w[u] = vrow[u] ? *reinterpret_cast<const uint4*>(vrow[u] + (HD / 16) * g + 4 * hq) : make_uint4(0u, 0u, 0u, 0u);
          const uint32_t* w0 = &w[0].x;
          const uint32_t* w1 = &w[1].x;
          const uint32_t* w2 = &w[2].x;
          const uint32_t* w3 = &w[3].x;
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int i = 4 * hq + e;
            const uint32_t a0 = __byte_perm(w0[e], w1[e], 0x5410u), a1 = __byte_perm(w0[e], w1[e], 0x7632u);
            const uint32_t a2 = __byte_perm(w2[e], w3[e], 0x5410u), a3 = __byte_perm(w2[e], w3[e], 0x7632u);
            mma_bf16_16816(oacc[i], a0, a1, a2, a3, pb0h, pb1h);
            mma_bf16_16816(oacc[i], a0, a1, a2, a3, pb0l, pb1l);
          }
        }
      }
    }
#pragma unroll
    for (int off = 4; off < 32; off <<= 1) {
      lh[0] += __shfl_xor_sync(0xFFFFFFFFu, lh[0], off);
      lh[1] += __shfl_xor_sync(0xFFFFFFFFu, lh[1], off);
    }
    __syncthreads();  // every warp done with the K/V buffer before o_s is written over it
    trace_mark(item, 1, clock64());

    // 4. Merge the warps' partials (a warp without slots writes m = -inf, l = 0, o = 0).
#pragma unroll
    for (int hh = 0; hh < 2; ++hh) {
      const int j = 2 * t + hh;
      if (j < rep) {
#pragma unroll
        for (int i = 0; i < MT; ++i) {
          float* oj = o_s + (warp * kMaxRep + j) * HD + (HD / 8) * g + 2 * i;
          oj[0] = oacc[i][hh];
          oj[1] = oacc[i][2 + hh];
        }
        if (g == 0) {
          ml_s[(warp * kMaxRep + j) * 2] = mh[hh];
          ml_s[(warp * kMaxRep + j) * 2 + 1] = lh[hh];
        }
      }
    }
    __syncthreads();
    // Only the first nw warps had a tile (a sub-chunk is at most S slots, the first the longest).
    const int nw = min(kWarps, (min(s1 - s0, S) + 15) / 16);
    for (int idx = threadIdx.x; idx < rep * HD; idx += blockDim.x) {
      const int j = idx / HD, e = idx % HD;
      float M = -INFINITY;
      for (int w = 0; w < nw; ++w) M = fmaxf(M, ml_s[(w * kMaxRep + j) * 2]);
      float L = 0.f, O = 0.f;
      for (int w = 0; w < nw; ++w) {
        const float mw = ml_s[(w * kMaxRep + j) * 2];
        const float f = mw == -INFINITY ? 0.f : exp2f(mw - M);
        L = fmaf(ml_s[(w * kMaxRep + j) * 2 + 1], f, L);
        O = fmaf(o_s[(w * kMaxRep + j) * HD + e], f, O);
      }
      float* pp = part + (size_t(kvh * rep + j) * max_chunks + c) * (HD + 2);
      pp[2 + e] = O;
      if (e == 0) {
        pp[0] = M;
        pp[1] = L;
      }
    }
    __syncthreads();
    trace_mark(item, 2, clock64());
    if constexpr (CONSUMER_COMBINE) {
      // release the block's partials (ordered before by the barrier) with the count
      if (threadIdx.x == sync_tid) sol::red_release_gpu_inc(count + kvh);
      trace_mark(item, 3, clock64());
      continue;
    }
    if (threadIdx.x == sync_tid) {
      __threadfence();  // release the block's partials (ordered before by the barrier) before the count
      const bool last = atomicAdd(count + kvh, 1u) == unsigned(n_chunks - 1);
      if (last) __threadfence();  // acquire the other blocks' partials (the barrier below passes it on)
      *last_s = last ? 1u : 0u;
    }
    __syncthreads();
    trace_mark(item, 3, clock64());
    trace_mark(item, 5, *last_s);
    if (*last_s) {
      // 5. Combine the chunks (combine_chunks: one L2 round trip at 15 chunks).
      for (int idx = threadIdx.x; idx < rep * HD; idx += blockDim.x) {
        const int j = kvh * rep + idx / HD, e = idx % HD;
        out[size_t(j) * HD + e] = combine_chunks<HD>(part, max_chunks, n_chunks, j, e);
      }
      if (threadIdx.x == sync_tid) atomicExch(count + kvh, 0u);
      if (done) {
        __syncthreads();  // every thread's out before the release
        if (threadIdx.x == sync_tid) {
          __threadfence();
          atomicAdd(done + kvh, 1u);
        }
      }
    }
    trace_mark(item, 4, clock64());
  }
}

}  // namespace nibble::megakernel
