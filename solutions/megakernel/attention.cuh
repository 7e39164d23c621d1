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
// takes slots s0 + w, s0 + w + 16, ..., 8 rows of K and V in flight per lane (8 bytes per lane
// per row for hd 128), an online softmax per warp, then the 16 warps merge in shared memory and
// the block writes one partial (max, sum, weighted V) per query head. The block whose chunk holds
// pos first writes the rotated k and the v of this step into slot pos (bf16, nearest even) and
// reads them back like every other slot, as the reference does. A counter per KV head (release:
// fence + atomic) elects the last block, which combines the chunks (acquire: fence) into out and
// resets the counter, so no extra grid barrier is needed for the combine.
// The cache is read with plain (coherent) loads: slot pos is written during this kernel.
#pragma once

#include <cuda_bf16.h>

#include <cmath>
#include <cstdint>

#include "megakernel.h"

namespace nibble::megakernel {

constexpr int kAttnBatch = 6;  // cache rows per warp in flight (8 spills the decode kernel at 128 registers)

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
 * zeroed (left zeroed). smem: attention_smem_floats<HD>() floats.
 */
template <int HD>
__device__ void attention_stage(const float* qkv, const float2* __restrict__ rope, uint16_t* k_cache,
                                uint16_t* v_cache, int n_q, int n_kv, int max_seq, int pos, float* part,
                                int max_chunks, unsigned* count, float* out, float* smem) {
  constexpr int EPL = HD / 32, HALF = HD / 2;
  const int rep = n_q / n_kv;
  const int slots = pos + 1;
  int chunk = (slots + max_chunks - 1) / max_chunks;
  chunk = (chunk + kWarps - 1) / kWarps * kWarps;
  const int n_chunks = (slots + chunk - 1) / chunk;  // <= max_chunks
  const int items = n_kv * n_chunks;
  const float scale = float(1.0 / sqrt(double(HD)));
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;

  float* q_s = smem;                          // (kMaxRep, HD) rotated q
  float* o_s = q_s + kMaxRep * HD;            // (kWarps, kMaxRep, HD) per-warp weighted V
  float* ml_s = o_s + kWarps * kMaxRep * HD;  // (kWarps, kMaxRep, 2) per-warp max, sum
  unsigned* last_s = reinterpret_cast<unsigned*>(ml_s + kWarps * kMaxRep * 2);

  for (int item = blockIdx.x; item < items; item += gridDim.x) {
    const int kvh = item / n_chunks, c = item % n_chunks;
    const int s0 = c * chunk, s1 = min(slots, s0 + chunk);
    __syncthreads();  // shared memory of the previous item

    // RoPE on this KV head's query heads; the pair (i, i + hd/2) at angle pos * theta^(-2i/hd).
    for (int idx = threadIdx.x; idx < rep * HALF; idx += blockDim.x) {
      const int j = idx / HALF, i = idx % HALF;
      const float* qh = qkv + size_t(kvh * rep + j) * HD;
      const float x1 = __ldcg(qh + i), x2 = __ldcg(qh + i + HALF);
      const float2 cs = __ldg(rope + size_t(pos) * HALF + i);
      q_s[j * HD + i] = x1 * cs.x - x2 * cs.y;
      q_s[j * HD + i + HALF] = x2 * cs.x + x1 * cs.y;
    }
    // The append: this step's k (rotated) and v into slot pos, rounded to bf16.
    if (pos >= s0 && pos < s1) {
      const size_t dst = (size_t(kvh) * max_seq + pos) * HD;
      const float* kh = qkv + size_t(n_q) * HD + size_t(kvh) * HD;
      const float* vh = qkv + size_t(n_q + n_kv) * HD + size_t(kvh) * HD;
      for (int i = threadIdx.x; i < HALF; i += blockDim.x) {
        const float x1 = __ldcg(kh + i), x2 = __ldcg(kh + i + HALF);
        const float2 cs = __ldg(rope + size_t(pos) * HALF + i);
        k_cache[dst + i] = to_bf16_rn(x1 * cs.x - x2 * cs.y);
        k_cache[dst + i + HALF] = to_bf16_rn(x2 * cs.x + x1 * cs.y);
        v_cache[dst + i] = to_bf16_rn(__ldcg(vh + i));
        v_cache[dst + i + HALF] = to_bf16_rn(__ldcg(vh + i + HALF));
      }
    }
    __syncthreads();  // q_s and slot pos visible to the block

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

    const uint16_t* kbase = k_cache + size_t(kvh) * max_seq * HD + lane * EPL;
    const uint16_t* vbase = v_cache + size_t(kvh) * max_seq * HD + lane * EPL;
    for (int base = s0 + warp; base < s1; base += kWarps * kAttnBatch) {
      RowBits<EPL> kr[kAttnBatch], vr[kAttnBatch];
#pragma unroll
      for (int i = 0; i < kAttnBatch; ++i) {
        const int sl = base + kWarps * i;
        if (sl < s1) {
          kr[i] = load_row_bits<EPL>(kbase + size_t(sl) * HD);
          vr[i] = load_row_bits<EPL>(vbase + size_t(sl) * HD);
        } else {
#pragma unroll
          for (int e = 0; e < EPL / 2; ++e) kr[i].b[e] = vr[i].b[e] = 0u;
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
            dot = warp_sum_all(dot) * scale;
            sc[i] = (base + kWarps * i < s1) ? dot : -INFINITY;
            mx = fmaxf(mx, sc[i]);
          }
          const float corr = expf(m[j] - mx);  // 0 on the first batch (m = -inf, mx finite)
          l[j] *= corr;
#pragma unroll
          for (int e = 0; e < EPL; ++e) o[j][e] *= corr;
#pragma unroll
          for (int i = 0; i < kAttnBatch; ++i) {
            const float pr = expf(sc[i] - mx);
            l[j] += pr;
#pragma unroll
            for (int e = 0; e < EPL; ++e) o[j][e] = fmaf(pr, row_elem<EPL>(vr[i], e), o[j][e]);
          }
          m[j] = mx;
        }
      }
    }

    // Merge the warps' partials; a warp without slots has m = -inf, l = 0, o = 0.
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
        const float f = mw == -INFINITY ? 0.f : expf(mw - M);
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
    if (threadIdx.x == 0) {
      __threadfence();  // release the block's partials (ordered before by the barrier) before the count
      const bool last = atomicAdd(count + kvh, 1u) == unsigned(n_chunks - 1);
      if (last) __threadfence();  // acquire the other blocks' partials (the barrier below passes it on)
      *last_s = last ? 1u : 0u;
    }
    __syncthreads();
    if (*last_s) {
      for (int idx = threadIdx.x; idx < rep * HD; idx += blockDim.x) {
        const int j = idx / HD, e = idx % HD;
        const float* pp = part + size_t(kvh * rep + j) * max_chunks * (HD + 2);
        float M = -INFINITY;
        for (int cc = 0; cc < n_chunks; ++cc) M = fmaxf(M, __ldcg(pp + size_t(cc) * (HD + 2)));
        float L = 0.f, O = 0.f;
        for (int cc = 0; cc < n_chunks; ++cc) {
          const float f = expf(__ldcg(pp + size_t(cc) * (HD + 2)) - M);
          L = fmaf(__ldcg(pp + size_t(cc) * (HD + 2) + 1), f, L);
          O = fmaf(__ldcg(pp + size_t(cc) * (HD + 2) + 2 + e), f, O);
        }
        out[size_t(kvh * rep + j) * HD + e] = O / L;
      }
      if (threadIdx.x == 0) atomicExch(count + kvh, 0u);
    }
  }
}

}  // namespace nibble::megakernel
