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
// grid barrier, attention_prefetch, NIBBLE_MK_KVPF=1: measured slower since v15, the barrier's
// release fence waits for those copies).
// v3-v7 loaded the rows with 8-byte LDGs per lane, 72 KB per SM through the L1's miss queue, which
// arrived at ~10 GB/s per SM (trace: 7.4 us from the barrier to the scores; NOTES.md).
// Warp w takes slots a + w, a + w + 16, ... of a sub-chunk from shared memory, scored with an online
// softmax per warp in log2 units (q pre-scaled by log2(e)/sqrt(hd): one exp2 per score); the 16
// warps merge in shared memory and the block writes one partial (max, sum, weighted V) per query
// head. The block whose chunk holds pos writes the rotated k and the v of this step into slot pos
// (bf16, nearest even) and uses exactly those bf16 values for slot pos (its copy may hold the old
// row), as the reference reads its cache. A counter per KV head (release: fence + atomic) elects
// the last block, which combines the chunks (acquire: fence; every chunk's (m, l, o) loaded in one
// batch, one L2 round trip) into out and resets the counter, so no extra grid barrier is needed.

#pragma once

#include <cuda_bf16.h>

#include <cmath>
#include <cstdint>

#include "megakernel.h"
#include "solutions/common/sm90_async.cuh"

namespace nibble::megakernel {

constexpr int kAttnBatch = 9;  // cache rows per warp and batch: 144 slots / 16 warps
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
 * before the qkv grid barrier (NIBBLE_MK_KVPF=1; off by default since v15). Precondition: every thread is past its last use of kv.buf (a block
 * barrier since).
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

__device__ __forceinline__ float warp_sum_all(float v) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xFFFFFFFFu, v, off);
  return v;
}

__device__ __forceinline__ uint16_t to_bf16_rn(float f) { return __bfloat16_as_ushort(__float2bfloat16_rn(f)); }

/** EPL = hd/32 bf16 of one cache row for one lane, kept as raw bits until used. */
template <int EPL>
struct RowBits {
  uint32_t b[EPL / 2];
};

template <int EPL>
__device__ __forceinline__ RowBits<EPL> load_row_bits(const uint32_t* p) {
  RowBits<EPL> r;
  if constexpr (EPL == 4) {
    const uint2 v = *reinterpret_cast<const uint2*>(p);
    r.b[0] = v.x;
    r.b[1] = v.y;
  } else {
    static_assert(EPL == 2, "hd 64 or 128");
    r.b[0] = *p;
  }
  return r;
}

/** Element e of a row slice as fp32 (the lower address is the low half of each word). */
template <int EPL>
__device__ __forceinline__ float row_elem(const RowBits<EPL>& r, int e) {
  const uint32_t w = r.b[e >> 1];
  return (e & 1) ? __uint_as_float(w & 0xFFFF0000u) : __uint_as_float(w << 16);
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
 */
template <int HD>
__device__ void attention_stage(const float* qkv, const float2* __restrict__ rope, uint16_t* k_cache,
                                uint16_t* v_cache, int n_q, int n_kv, int max_seq, int pos, float* part,
                                int max_chunks, unsigned* count, float* out, float* smem, AttnKv& kv,
                                unsigned* done = nullptr, long long* tr = nullptr, unsigned sync_tid = 0) {
  constexpr int EPL = HD / 32, HALF = HD / 2, WPL = EPL / 2;  // elements / words per lane
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

  for (int item = blockIdx.x; item < items; item += gridDim.x) {
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

    float qr[kMaxRep][EPL];
#pragma unroll
    for (int j = 0; j < kMaxRep; ++j)
#pragma unroll
      for (int e = 0; e < EPL; ++e) qr[j][e] = j < rep ? q_s[j * HD + lane * EPL + e] : 0.f;
    float m[kMaxRep], l[kMaxRep], o[kMaxRep][EPL];
#pragma unroll
    for (int j = 0; j < kMaxRep; ++j) {
      m[j] = -INFINITY;
      l[j] = 0.f;
#pragma unroll
      for (int e = 0; e < EPL; ++e) o[j][e] = 0.f;
    }

    for (int a = s0; a < s1; a += S) {
      const int b = min(s1, a + S);
      if (a != s0) {
        __syncthreads();  // every warp is done with the previous sub-chunk
        if (threadIdx.x == 0) attn_kv_issue<HD>(kv, k_cache, v_cache, kvh, max_seq, a, b);
      }
      attn_kv_wait(kv);
      for (int base = a + warp; base < b; base += kWarps * kAttnBatch) {
        RowBits<EPL> kr[kAttnBatch], vr[kAttnBatch];
#pragma unroll
        for (int i = 0; i < kAttnBatch; ++i) {
          const int sl = base + kWarps * i;
          if (sl < b) {  // (a row past b must be zeros, not knew_s: 0 x NaN in the weighted V is NaN)
            const bool fresh = sl == pos;
            kr[i] = load_row_bits<EPL>(fresh ? knew_s + lane * WPL : kbuf + (sl - a) * (HD / 2) + lane * WPL);
            vr[i] = load_row_bits<EPL>(fresh ? vnew_s + lane * WPL : vbuf + (sl - a) * (HD / 2) + lane * WPL);
          } else {
#pragma unroll
            for (int w = 0; w < WPL; ++w) kr[i].b[w] = vr[i].b[w] = 0u;
          }
        }
#pragma unroll
        for (int j = 0; j < kMaxRep; ++j) {
          if (j < rep) {
            float sc[kAttnBatch];
            float mx = m[j];
#pragma unroll
            for (int i = 0; i < kAttnBatch; ++i) {
              float dot = 0.f;
#pragma unroll
              for (int e = 0; e < EPL; ++e) dot = fmaf(qr[j][e], row_elem<EPL>(kr[i], e), dot);
              dot = warp_sum_all(dot);
              sc[i] = (base + kWarps * i < b) ? dot : -INFINITY;
              mx = fmaxf(mx, sc[i]);
            }
            const float corr = exp2f(m[j] - mx);  // 0 on the first batch (m = -inf, mx finite)
            l[j] *= corr;
#pragma unroll
            for (int e = 0; e < EPL; ++e) o[j][e] *= corr;
#pragma unroll
            for (int i = 0; i < kAttnBatch; ++i) {
              const float pr = exp2f(sc[i] - mx);
              l[j] += pr;
#pragma unroll
              for (int e = 0; e < EPL; ++e) o[j][e] = fmaf(pr, row_elem<EPL>(vr[i], e), o[j][e]);
            }
            m[j] = mx;
          }
        }
      }
    }
    __syncthreads();  // every warp done with the K/V buffer before o_s is written over it
    trace_mark(item, 1, clock64());

    // 4. Merge the warps' partials; a warp without slots has m = -inf, l = 0, o = 0.
#pragma unroll
    for (int j = 0; j < kMaxRep; ++j) {
      if (j < rep) {
#pragma unroll
        for (int e = 0; e < EPL; ++e) o_s[(warp * kMaxRep + j) * HD + lane * EPL + e] = o[j][e];
        if (lane == 0) {
          ml_s[(warp * kMaxRep + j) * 2] = m[j];
          ml_s[(warp * kMaxRep + j) * 2 + 1] = l[j];
        }
      }
    }
    __syncthreads();
    for (int idx = threadIdx.x; idx < rep * HD; idx += blockDim.x) {
      const int j = idx / HD, e = idx % HD;
      float M = -INFINITY;
      for (int w = 0; w < kWarps; ++w) M = fmaxf(M, ml_s[(w * kMaxRep + j) * 2]);
      float L = 0.f, O = 0.f;
      for (int w = 0; w < kWarps; ++w) {
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
      // 5. Combine the chunks: each output element loads every chunk's (m, l, o) at once
      //    (kCombineBatch chunks per round trip of L2; one at 15 chunks) and merges them online.
      for (int idx = threadIdx.x; idx < rep * HD; idx += blockDim.x) {
        const int j = idx / HD, e = idx % HD;
        const float* pj = part + size_t(kvh * rep + j) * max_chunks * (HD + 2);
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
        out[size_t(kvh * rep + j) * HD + e] = O / L;
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
