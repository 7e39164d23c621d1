// attention.cu: decode attention of one query token over cache slots 0..pos, flash-decoding style.
//
// Spec (seed / nibble.h): "attention over slots 0..pos with GQA (query head j reads kv head
// j / (n_q/n_kv)), softmax(q k^T / sqrt(hd))"; the KV cache is bf16, "the attention softmax"
// accumulates in fp32.
// Shapes: q (n_q*hd) fp32 (rotated); k_cache, v_cache (n_kv, max_seq, hd) bf16; out (n_q*hd) fp32.
// Bytes moved: 2 * n_kv * (pos+1) * hd * 2 of cache (8.4 MB per layer at pos 2048 in the full
// config), each K and V row read once for all n_q/n_kv query heads that share it, plus the
// partials (n_q * chunks * (hd+2) * 4 written and read back, 0.4 MB).
//
// Pass 1 (attention_partial_kernel): block (chunk of kAttnChunk slots, kv head); each of its 4
// warps owns every 4th slot of the chunk, a lane holding hd/32 elements of a row (coalesced 8-byte
// loads for hd 128). K and V rows are all loaded before the first use. The block writes, for each
// of the kv head's query heads, m = max score, l = sum exp(score - m), o = sum exp(score - m) v.
// Pass 2 (attention_combine_kernel): per query head, M = max m_c, out = sum_c e^(m_c - M) o_c /
// sum_c e^(m_c - M) l_c.
// Splitting the sequence gives (pos+1)/64 * n_kv blocks (264 at pos 2048) instead of n_kv = 8.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <type_traits>

#include "kernels.h"

namespace nibble::unfused {
namespace {

constexpr int kThreads = 128;
constexpr int kWarps = kThreads / 32;
constexpr int kSlotsPerWarp = kAttnChunk / kWarps;
static_assert(kAttnChunk % kWarps == 0 && kAttnChunk % 32 == 0, "chunk must split evenly");

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) v += __shfl_xor_sync(0xFFFFFFFFu, v, off);
  return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
  for (int off = 16; off > 0; off >>= 1) v = fmaxf(v, __shfl_xor_sync(0xFFFFFFFFu, v, off));
  return v;
}

/** A lane's EPL bf16 of one cache row: 2 (hd 64) as one 32-bit word, 4 (hd 128) as a uint2. */
template <int EPL>
using LaneVec = std::conditional_t<EPL == 2, uint32_t, uint2>;

template <int EPL>
__device__ __forceinline__ void unpack_bf16(const LaneVec<EPL>& v, float (&f)[EPL]) {
  if constexpr (EPL == 2) {
    f[0] = __uint_as_float(v << 16);  // lower address in the low half (little-endian)
    f[1] = __uint_as_float(v & 0xFFFF0000u);
  } else {
    f[0] = __uint_as_float(v.x << 16);
    f[1] = __uint_as_float(v.x & 0xFFFF0000u);
    f[2] = __uint_as_float(v.y << 16);
    f[3] = __uint_as_float(v.y & 0xFFFF0000u);
  }
}

template <int HD, int MAXREP>
__global__ void __launch_bounds__(kThreads)
    attention_partial_kernel(const float* __restrict__ q, const uint16_t* __restrict__ k_cache,
                             const uint16_t* __restrict__ v_cache, int n_rep, int max_seq, int n_slots, float scale,
                             int max_chunks, float* __restrict__ part_o, float* __restrict__ part_ml) {
  constexpr int EPL = HD / 32;
  using Vec = LaneVec<EPL>;
  static_assert(EPL == 2 || EPL == 4, "hd 64 or 128");

  const int chunk = blockIdx.x, kvh = blockIdx.y;
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  const int s0 = chunk * kAttnChunk;
  const int ns = min(kAttnChunk, n_slots - s0);  // >= 1: the grid has exactly the needed chunks

  __shared__ float p_sm[MAXREP][kAttnChunk];      // scores, then probabilities
  __shared__ float o_sm[kWarps][MAXREP * HD];     // per-warp weighted V, summed at the end

  // 1. Every K and V row of this warp's slots in flight at once.
  const size_t head_base = (size_t(kvh) * max_seq + s0) * HD + size_t(lane) * EPL;
  const Vec* kp = reinterpret_cast<const Vec*>(k_cache + head_base);
  const Vec* vp = reinterpret_cast<const Vec*>(v_cache + head_base);
  constexpr int kRowVecs = HD / EPL;  // Vec elements per cache row (32)
  Vec kr[kSlotsPerWarp], vr[kSlotsPerWarp];
#pragma unroll
  for (int i = 0; i < kSlotsPerWarp; ++i) {
    const int sl = warp + kWarps * i;
    if (sl < ns) {
      kr[i] = __ldg(kp + size_t(sl) * kRowVecs);
      vr[i] = __ldg(vp + size_t(sl) * kRowVecs);
    } else {
      kr[i] = Vec{};
      vr[i] = Vec{};
    }
  }

  // 2. The lane's slice of the query heads that read this kv head.
  float qr[MAXREP][EPL];
#pragma unroll
  for (int j = 0; j < MAXREP; ++j)
#pragma unroll
    for (int e = 0; e < EPL; ++e)
      qr[j][e] = j < n_rep ? q[(size_t(kvh) * n_rep + j) * HD + lane * EPL + e] : 0.f;

  // 3. Scores q.k / sqrt(hd).
#pragma unroll
  for (int i = 0; i < kSlotsPerWarp; ++i) {
    const int sl = warp + kWarps * i;
    if (sl < ns) {  // warp-uniform
      float kf[EPL];
      unpack_bf16<EPL>(kr[i], kf);
#pragma unroll
      for (int j = 0; j < MAXREP; ++j) {
        if (j < n_rep) {
          float d = 0.f;
#pragma unroll
          for (int e = 0; e < EPL; ++e) d = fmaf(qr[j][e], kf[e], d);
          d = warp_sum(d);
          if (lane == 0) p_sm[j][sl] = d * scale;
        }
      }
    }
  }
  __syncthreads();

  // 4. Chunk-local softmax statistics, one warp per query head.
  for (int j = warp; j < n_rep; j += kWarps) {
    float m = -INFINITY;
    for (int sl = lane; sl < ns; sl += 32) m = fmaxf(m, p_sm[j][sl]);
    m = warp_max(m);
    float l = 0.f;
    for (int sl = lane; sl < kAttnChunk; sl += 32) {
      const float p = sl < ns ? expf(p_sm[j][sl] - m) : 0.f;
      p_sm[j][sl] = p;
      l += p;
    }
    l = warp_sum(l);
    if (lane == 0) {
      const size_t idx = ((size_t(kvh) * n_rep + j) * max_chunks + chunk) * 2;
      part_ml[idx] = m;
      part_ml[idx + 1] = l;
    }
  }
  __syncthreads();

  // 5. Unnormalised weighted V, reduced over the block's warps.
  float o[MAXREP][EPL];
#pragma unroll
  for (int j = 0; j < MAXREP; ++j)
#pragma unroll
    for (int e = 0; e < EPL; ++e) o[j][e] = 0.f;
#pragma unroll
  for (int i = 0; i < kSlotsPerWarp; ++i) {
    const int sl = warp + kWarps * i;
    if (sl < ns) {
      float vf[EPL];
      unpack_bf16<EPL>(vr[i], vf);
#pragma unroll
      for (int j = 0; j < MAXREP; ++j) {
        if (j < n_rep) {
          const float p = p_sm[j][sl];
#pragma unroll
          for (int e = 0; e < EPL; ++e) o[j][e] = fmaf(p, vf[e], o[j][e]);
        }
      }
    }
  }
#pragma unroll
  for (int j = 0; j < MAXREP; ++j)
    if (j < n_rep)
#pragma unroll
      for (int e = 0; e < EPL; ++e) o_sm[warp][j * HD + lane * EPL + e] = o[j][e];
  __syncthreads();
  for (int idx = threadIdx.x; idx < n_rep * HD; idx += kThreads) {
    float t = 0.f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) t += o_sm[w][idx];
    const int j = idx / HD, e = idx % HD;
    part_o[((size_t(kvh) * n_rep + j) * max_chunks + chunk) * HD + e] = t;
  }
}

// One block per query head; thread e owns output element e (loops when hd > blockDim).
__global__ void attention_combine_kernel(const float* __restrict__ part_o, const float* __restrict__ part_ml,
                                         int hd, int max_chunks, int n_chunks, float* __restrict__ out) {
  const int head = blockIdx.x;
  const float* ml = part_ml + size_t(head) * max_chunks * 2;
  float M = -INFINITY;
  for (int c = 0; c < n_chunks; ++c) M = fmaxf(M, ml[2 * c]);
  float L = 0.f;
  for (int c = 0; c < n_chunks; ++c) L += ml[2 * c + 1] * expf(ml[2 * c] - M);
  const float inv_l = 1.0f / L;
  for (int e = threadIdx.x; e < hd; e += blockDim.x) {
    float acc = 0.f;
    for (int c = 0; c < n_chunks; ++c)
      acc = fmaf(part_o[(size_t(head) * max_chunks + c) * hd + e], expf(ml[2 * c] - M), acc);
    out[size_t(head) * hd + e] = acc * inv_l;
  }
}

template <int HD>
cudaError_t launch_partial_hd(dim3 grid, int max_rep, const float* q, const uint16_t* k, const uint16_t* v, int n_rep,
                              int max_seq, int n_slots, float scale, int max_chunks, float* part_o, float* part_ml,
                              cudaStream_t stream) {
  switch (max_rep) {
    case 1:
      attention_partial_kernel<HD, 1><<<grid, kThreads, 0, stream>>>(q, k, v, n_rep, max_seq, n_slots, scale,
                                                                     max_chunks, part_o, part_ml);
      break;
    case 2:
      attention_partial_kernel<HD, 2><<<grid, kThreads, 0, stream>>>(q, k, v, n_rep, max_seq, n_slots, scale,
                                                                     max_chunks, part_o, part_ml);
      break;
    case 4:
      attention_partial_kernel<HD, 4><<<grid, kThreads, 0, stream>>>(q, k, v, n_rep, max_seq, n_slots, scale,
                                                                     max_chunks, part_o, part_ml);
      break;
    default:
      attention_partial_kernel<HD, 8><<<grid, kThreads, 0, stream>>>(q, k, v, n_rep, max_seq, n_slots, scale,
                                                                     max_chunks, part_o, part_ml);
      break;
  }
  return cudaGetLastError();
}

}  // namespace

cudaError_t launch_attention_partial(const float* q, const uint16_t* k_cache, const uint16_t* v_cache, int n_q,
                                     int n_kv, int hd, int max_seq, int pos, float* part_o, float* part_ml,
                                     cudaStream_t stream) {
  if (!q || !k_cache || !v_cache || !part_o || !part_ml || n_kv < 1 || n_q < n_kv || n_q % n_kv != 0 ||
      n_q / n_kv > kAttnMaxRep || (hd != 64 && hd != 128) || pos < 0 || pos >= max_seq)
    return cudaErrorInvalidValue;
  const int n_rep = n_q / n_kv;
  const int max_rep = n_rep <= 1 ? 1 : n_rep <= 2 ? 2 : n_rep <= 4 ? 4 : 8;
  const int n_slots = pos + 1;
  const dim3 grid(unsigned((n_slots + kAttnChunk - 1) / kAttnChunk), unsigned(n_kv));
  const float scale = float(1.0 / std::sqrt(double(hd)));
  const int max_chunks = attn_max_chunks(max_seq);
  return hd == 64 ? launch_partial_hd<64>(grid, max_rep, q, k_cache, v_cache, n_rep, max_seq, n_slots, scale,
                                          max_chunks, part_o, part_ml, stream)
                  : launch_partial_hd<128>(grid, max_rep, q, k_cache, v_cache, n_rep, max_seq, n_slots, scale,
                                           max_chunks, part_o, part_ml, stream);
}

cudaError_t launch_attention_combine(const float* part_o, const float* part_ml, int n_q, int hd, int max_seq, int pos,
                                     float* out, cudaStream_t stream) {
  if (!part_o || !part_ml || !out || n_q < 1 || hd < 1 || pos < 0 || pos >= max_seq) return cudaErrorInvalidValue;
  const int n_chunks = (pos + 1 + kAttnChunk - 1) / kAttnChunk;
  const int threads = hd < 128 ? 64 : 128;
  attention_combine_kernel<<<n_q, threads, 0, stream>>>(part_o, part_ml, hd, attn_max_chunks(max_seq), n_chunks, out);
  return cudaGetLastError();
}

}  // namespace nibble::unfused
