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
// grid (15 chunks of 144 slots per head at pos 2048 on 132 blocks: 120 items). In an item, warp w
// takes slots s0 + w, s0 + w + 16, ...: all 9 of its K and V rows (8 bytes per lane per row for
// hd 128) are loaded first, before the RoPE of q and the append, then scored with an online
// softmax per warp in log2 units (q pre-scaled by log2(e)/sqrt(hd): one exp2 per score); the 16
// warps merge in shared memory and the block writes one partial (max, sum, weighted V) per query
// head. The block whose chunk holds pos writes the rotated k and the v of this step into slot pos
// (bf16, nearest even) and uses exactly those bf16 values for slot pos, as the reference reads its
// cache. A counter per KV head (release: fence + atomic) elects the last block, which combines the
// chunks (acquire: fence; the (m, l) of all chunks loaded at once, then the weighted V with the
// loads unrolled) into out and resets the counter, so no extra grid barrier is needed.
// Measured (NOTES.md): 13-15 us per layer at pos 2048 on the H200 (0.56 TB/s) -- latency-bound,
// the largest non-streaming cost of the step.
// The cache is read with plain (coherent) loads: slot pos is written during this kernel.
#pragma once

#include <cuda_bf16.h>

#include <cmath>
#include <cstdint>

#include "megakernel.h"

namespace nibble::megakernel {

constexpr int kAttnBatch = 9;  // cache rows per warp in flight: a 144-slot chunk (pos 2048, 132 blocks) in one batch

/** Shared memory (floats) of attention_stage<HD>. */
template <int HD>
__host__ __device__ constexpr int attention_smem_floats() {
  return kMaxRep * HD + kWarps * kMaxRep * HD + kWarps * kMaxRep * 2 + 4;
}

__device__ __forceinline__ float warp_sum_all(float v) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xFFFFFFFFu, v, off);
  return v;
}

__device__ __forceinline__ uint16_t to_bf16_rn(float f) { return __bfloat16_as_ushort(__float2bfloat16_rn(f)); }

/** EPL = hd/32 bf16 of one cache row for one lane, kept as raw bits until used (half the
 *  registers of fp32: 8 rows of K and V stay in flight without spilling). */
template <int EPL>
struct RowBits {
  uint32_t b[EPL / 2];
};

template <int EPL>
__device__ __forceinline__ RowBits<EPL> load_row_bits(const uint16_t* p) {
  RowBits<EPL> r;
  if constexpr (EPL == 4) {
    asm volatile("ld.global.cs.v2.u32 {%0,%1}, [%2];" : "=r"(r.b[0]), "=r"(r.b[1]) : "l"(p));
  } else {
    static_assert(EPL == 2, "hd 64 or 128");
    asm volatile("ld.global.cs.u32 %0, [%1];" : "=r"(r.b[0]) : "l"(p));
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
 * zeroed (left zeroed). smem: attention_smem_floats<HD>() floats. done (optional, n_kv): the
 * combining block adds 1 to done[kv head] once that head's query heads are in out (release), so a
 * consumer may wait for the heads it reads instead of a grid barrier.
 * tr (optional, tracing): kAttnMarks clock64() values of this block's first item (megakernel.h).
 */
template <int HD>
__device__ void attention_stage(const float* qkv, const float2* __restrict__ rope, uint16_t* k_cache,
                                uint16_t* v_cache, int n_q, int n_kv, int max_seq, int pos, float* part,
                                int max_chunks, unsigned* count, float* out, float* smem, unsigned* done = nullptr,
                                long long* tr = nullptr) {
  constexpr int EPL = HD / 32, HALF = HD / 2, WPL = EPL / 2;  // elements / words per lane
  const int rep = n_q / n_kv;
  const int slots = pos + 1;
  int chunk = (slots + max_chunks - 1) / max_chunks;
  chunk = (chunk + kWarps - 1) / kWarps * kWarps;
  const int n_chunks = (slots + chunk - 1) / chunk;  // <= max_chunks
  const int items = n_kv * n_chunks;
  // Scores in log2 units: q is pre-multiplied by log2(e)/sqrt(hd), so every exponential is one
  // exp2 (MUFU.EX2) instead of expf's range reduction; the softmax is unchanged.
  const float qscale = float(1.4426950408889634 / sqrt(double(HD)));
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;

  float* q_s = smem;                          // (kMaxRep, HD) rotated q
  float* o_s = q_s + kMaxRep * HD;            // (kWarps, kMaxRep, HD) per-warp weighted V; combine scratch
  float* ml_s = o_s + kWarps * kMaxRep * HD;  // (kWarps, kMaxRep, 2) per-warp max, sum
  unsigned* last_s = reinterpret_cast<unsigned*>(ml_s + kWarps * kMaxRep * 2);
  // This step's K and V rows as bf16 words (HD/2 each), for the warp that owns slot pos: it loaded
  // the slot before the block wrote it. Kept in the tail of o_s, which is written only later.
  uint32_t* knew_s = reinterpret_cast<uint32_t*>(o_s + kWarps * kMaxRep * HD - HD);
  uint32_t* vnew_s = knew_s + HD / 2;
  // Tracing: thread 0's clock after the block-wide barriers below (they already exist: no extra
  // synchronisation), for the first item only.
  const auto trace_mark = [&](int item, int k, long long v) {
    if (tr && threadIdx.x == 0 && item == int(blockIdx.x)) tr[k] = v;
  };
  if (tr && threadIdx.x == 0)
    for (int k = 0; k < kAttnMarks; ++k) tr[k] = 0;

  for (int item = blockIdx.x; item < items; item += gridDim.x) {
    const int kvh = item / n_chunks, c = item % n_chunks;
    const int s0 = c * chunk, s1 = min(slots, s0 + chunk);
    __syncthreads();  // shared memory of the previous item

    // 1. This warp's first batch of K and V rows, issued before anything else (the cache does not
    //    depend on this step, except slot pos, patched below).
    const uint16_t* kbase = k_cache + size_t(kvh) * max_seq * HD + lane * EPL;
    const uint16_t* vbase = v_cache + size_t(kvh) * max_seq * HD + lane * EPL;
    RowBits<EPL> kr[kAttnBatch], vr[kAttnBatch];
    const auto load_batch = [&](int base) {
#pragma unroll
      for (int i = 0; i < kAttnBatch; ++i) {
        const int sl = base + kWarps * i;
        if (sl < s1) {
          kr[i] = load_row_bits<EPL>(kbase + size_t(sl) * HD);
          vr[i] = load_row_bits<EPL>(vbase + size_t(sl) * HD);
        } else {
#pragma unroll
          for (int w = 0; w < WPL; ++w) kr[i].b[w] = vr[i].b[w] = 0u;
        }
      }
    };
    load_batch(s0 + warp);

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
    //    shared memory for the warp whose batch holds slot pos.
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

    for (int base = s0 + warp; base < s1; base += kWarps * kAttnBatch) {
      if (base != s0 + warp) load_batch(base);
      if (has_pos) {
#pragma unroll
        for (int i = 0; i < kAttnBatch; ++i)
          if (base + kWarps * i == pos) {
#pragma unroll
            for (int w = 0; w < WPL; ++w) {
              kr[i].b[w] = knew_s[lane * WPL + w];
              vr[i].b[w] = vnew_s[lane * WPL + w];
            }
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
            sc[i] = (base + kWarps * i < s1) ? dot : -INFINITY;
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
    __syncthreads();  // knew_s / vnew_s (in o_s) read by every warp before o_s is written
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
    if (threadIdx.x == 0) {
      __threadfence();  // release the block's partials (ordered before by the barrier) before the count
      const bool last = atomicAdd(count + kvh, 1u) == unsigned(n_chunks - 1);
      if (last) __threadfence();  // acquire the other blocks' partials (the barrier below passes it on)
      *last_s = last ? 1u : 0u;
    }
    __syncthreads();
    trace_mark(item, 3, clock64());
    trace_mark(item, 5, *last_s);
    if (*last_s) {
      // 5. Combine the chunks: weights w[j][c] = e^(m_c - M_j) / L_j into shared memory first (all
      //    the (m, l) loads in flight at once), then each output element sums its chunks' o with
      //    the loads unrolled, instead of a chain of dependent L2 round trips.
      float* w_s = o_s;  // (rep, n_chunks)
      for (int idx = threadIdx.x; idx < rep * n_chunks; idx += blockDim.x) {
        const int j = idx / n_chunks, cc = idx % n_chunks;
        const float* pp = part + (size_t(kvh * rep + j) * max_chunks + cc) * (HD + 2);
        w_s[idx] = __ldcg(pp);
        w_s[rep * n_chunks + idx] = __ldcg(pp + 1);
      }
      __syncthreads();
      float wv = 0.f;
      if (threadIdx.x < rep * n_chunks) {
        const int j = threadIdx.x / n_chunks, cc = threadIdx.x % n_chunks;
        float M = -INFINITY;
        for (int k = 0; k < n_chunks; ++k) M = fmaxf(M, w_s[j * n_chunks + k]);
        float L = 0.f;
        for (int k = 0; k < n_chunks; ++k) L = fmaf(w_s[rep * n_chunks + j * n_chunks + k], exp2f(w_s[j * n_chunks + k] - M), L);
        wv = exp2f(w_s[j * n_chunks + cc] - M) / L;
      }
      __syncthreads();
      if (threadIdx.x < rep * n_chunks) w_s[threadIdx.x] = wv;
      __syncthreads();
      for (int idx = threadIdx.x; idx < rep * HD; idx += blockDim.x) {
        const int j = idx / HD, e = idx % HD;
        const float* pp = part + size_t(kvh * rep + j) * max_chunks * (HD + 2) + 2 + e;
        float O = 0.f;
#pragma unroll 8
        for (int cc = 0; cc < n_chunks; ++cc) O = fmaf(__ldcg(pp + size_t(cc) * (HD + 2)), w_s[j * n_chunks + cc], O);
        out[size_t(kvh * rep + j) * HD + e] = O;
      }
      if (threadIdx.x == 0) atomicExch(count + kvh, 0u);
      if (done) {
        __syncthreads();  // every thread's out before the release
        if (threadIdx.x == 0) {
          __threadfence();
          atomicAdd(done + kvh, 1u);
        }
      }
    }
    trace_mark(item, 4, clock64());
  }
}

}  // namespace nibble::megakernel
