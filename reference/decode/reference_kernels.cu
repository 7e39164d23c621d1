// reference_kernels.cu: the fp32 reference's kernels (clarity first; see reference_kernels.cuh).
//
// Everything accumulates in fp32 except where a comment says fp64. No kernel is tuned: the
// reference only has to be right and run the full config in well under a second per step.
#include "reference/decode/reference_kernels.cuh"

#include <cmath>

#include "solutions/common/abi_util.h"

namespace nibble::ref {
namespace {

constexpr int kThreads = 256;      // elementwise / row kernels
constexpr int kAttnThreads = 128;  // attention partial and combine: 4 warps

__device__ __forceinline__ float quiet_nan() { return __int_as_float(0x7fc00000); }

template <bool kMax>
__device__ __forceinline__ float warp_reduce(float v) {
  for (int off = 16; off > 0; off >>= 1) {
    const float other = __shfl_xor_sync(0xffffffffu, v, off);
    v = kMax ? fmaxf(v, other) : v + other;
  }
  return v;
}

/** Sum (or max) over the block; every thread gets the result. blockDim.x must be a multiple of 32.
 *  Safe to call repeatedly: the leading barrier keeps a previous call's readers ahead of the writes. */
template <bool kMax>
__device__ float block_reduce(float v) {
  __shared__ float red[33];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warps = blockDim.x >> 5;
  v = warp_reduce<kMax>(v);
  __syncthreads();
  if (lane == 0) red[warp] = v;
  __syncthreads();
  if (warp == 0) {
    float r = lane < n_warps ? red[lane] : (kMax ? -INFINITY : 0.0f);
    r = warp_reduce<kMax>(r);
    if (lane == 0) red[32] = r;
  }
  __syncthreads();
  return red[32];
}

__device__ __forceinline__ float maybe_round_bf16(float v, bool round) { return round ? round_bf16(v) : v; }

__device__ __forceinline__ int64_t global_thread() { return int64_t(blockIdx.x) * blockDim.x + threadIdx.x; }
__device__ __forceinline__ int64_t global_stride() { return int64_t(gridDim.x) * blockDim.x; }

int grid_for(int64_t n) {
  const int64_t blocks = (n + kThreads - 1) / kThreads;
  return int(blocks < 1 ? 1 : (blocks > (1 << 20) ? (1 << 20) : blocks));  // grid-stride loops cover the rest
}

// ---- Kernels ----------------------------------------------------------------------------------

__global__ void dequant_kernel(QuantTripleDev w, ReferenceOptions opt, float* out) {
  const int64_t n = w.out * w.in;
  for (int64_t e = global_thread(); e < n; e += global_stride()) {
    const int64_t o = e / w.in, i = e - o * w.in;
    out[e] = dequant_element(w, o, i, opt);
  }
}

__global__ void embed_rows_kernel(const float* embed, int64_t vocab, int d, const int64_t* tokens, float* h) {
  const int b = blockIdx.x;
  const int64_t t = tokens[b];
  const bool valid = t >= 0 && t < vocab;
  for (int i = threadIdx.x; i < d; i += blockDim.x)
    h[int64_t(b) * d + i] = valid ? embed[t * d + i] : quiet_nan();
}

__global__ void rmsnorm_kernel(const float* x, const uint16_t* gain, int d, double eps, bool round_out, float* y) {
  const float* xr = x + int64_t(blockIdx.x) * d;
  float* yr = y + int64_t(blockIdx.x) * d;
  float ss = 0.0f;
  for (int i = threadIdx.x; i < d; i += blockDim.x) ss += xr[i] * xr[i];
  ss = block_reduce<false>(ss);
  const float inv_rms = float(1.0 / sqrt(double(ss) / double(d) + eps));
  for (int i = threadIdx.x; i < d; i += blockDim.x)
    yr[i] = maybe_round_bf16(xr[i] * bf16_to_f32(gain[i]) * inv_rms, round_out);
}

// One block per (sequence, head); x is (batch * heads, hd).
__global__ void rope_kernel(float* x, int hd, int pos, double theta, RopeStyle style) {
  float* xh = x + int64_t(blockIdx.x) * hd;
  for (int i = threadIdx.x; i < hd / 2; i += blockDim.x) {
    int a, b;
    rope_pair(i, hd, style, &a, &b);
    float c, s;
    rope_cos_sin(i, hd, pos, theta, &c, &s);
    const float xa = xh[a], xb = xh[b];
    xh[a] = xa * c - xb * s;
    xh[b] = xb * c + xa * s;
  }
}

__global__ void kv_append_kernel(const float* k, const float* v, uint16_t* k_cache, uint16_t* v_cache, int64_t n,
                                 int hd, int max_seq, int slot) {
  for (int64_t e = global_thread(); e < n; e += global_stride()) {
    const int64_t bh = e / hd, d = e - bh * hd;  // bh = b * n_kv + kv head
    const int64_t dst = (bh * max_seq + slot) * hd + d;
    k_cache[dst] = f32_to_bf16(k[e]);
    v_cache[dst] = f32_to_bf16(v[e]);
  }
}

// Grid (splits, n_q, batch). Block: split s of query head j of sequence b covers slots
// [s * chunk, min((s + 1) * chunk, slots)). Writes the split's max score m, sum of exp(score - m)
// and the exp-weighted sum of V rows. Dynamic shared memory: q (hd) + scores (chunk) floats.
__global__ void attn_partial_kernel(const float* q, const uint16_t* k_cache, const uint16_t* v_cache, int n_q,
                                    int n_kv, int hd, int max_seq, int slots, int chunk, float scale, GqaMap gqa,
                                    float* part_m, float* part_l, float* part_acc) {
  extern __shared__ float smem[];
  float* qs = smem;
  float* sc = smem + hd;
  const int split = blockIdx.x, j = blockIdx.y, b = blockIdx.z, n_splits = gridDim.x;
  const int kvh = gqa_kv_head(j, n_q, n_kv, gqa);
  const int t0 = split * chunk;
  const int n = min(chunk, slots - t0);  // >= 1: the launcher sizes the grid from slots
  const float* qv = q + (int64_t(b) * n_q + j) * hd;
  for (int d = threadIdx.x; d < hd; d += blockDim.x) qs[d] = qv[d];
  __syncthreads();

  const int64_t row0 = (int64_t(b) * n_kv + kvh) * max_seq + t0;  // cache row of slot t0
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, n_warps = blockDim.x >> 5;
  for (int t = warp; t < n; t += n_warps) {  // one warp per slot: q . k_t
    const uint16_t* kr = k_cache + (row0 + t) * hd;
    float s = 0.0f;
    for (int d = lane; d < hd; d += 32) s += qs[d] * bf16_to_f32(kr[d]);
    s = warp_reduce<false>(s);
    if (lane == 0) sc[t] = s * scale;
  }
  __syncthreads();

  float m = -INFINITY;
  for (int t = threadIdx.x; t < n; t += blockDim.x) m = fmaxf(m, sc[t]);
  m = block_reduce<true>(m);
  float l = 0.0f;
  for (int t = threadIdx.x; t < n; t += blockDim.x) {
    const float p = expf(sc[t] - m);
    sc[t] = p;
    l += p;
  }
  l = block_reduce<false>(l);  // its barriers also publish the sc[t] = p writes

  const int64_t part = (int64_t(b) * n_q + j) * n_splits + split;
  for (int d = threadIdx.x; d < hd; d += blockDim.x) {
    float acc = 0.0f;
    for (int t = 0; t < n; ++t) acc += sc[t] * bf16_to_f32(v_cache[(row0 + t) * hd + d]);
    part_acc[part * hd + d] = acc;
  }
  if (threadIdx.x == 0) {
    part_m[part] = m;
    part_l[part] = l;
  }
}

// Grid (n_q, batch): out = sum_s acc_s exp(m_s - M) / sum_s l_s exp(m_s - M), M = max_s m_s.
__global__ void attn_combine_kernel(const float* part_m, const float* part_l, const float* part_acc, int n_q, int hd,
                                    int n_splits, bool round_out, float* out) {
  const int j = blockIdx.x, b = blockIdx.y;
  const int64_t base = (int64_t(b) * n_q + j) * n_splits;
  float M = -INFINITY;
  for (int s = 0; s < n_splits; ++s) M = fmaxf(M, part_m[base + s]);
  float L = 0.0f;
  for (int s = 0; s < n_splits; ++s) L += part_l[base + s] * expf(part_m[base + s] - M);
  for (int d = threadIdx.x; d < hd; d += blockDim.x) {
    float acc = 0.0f;
    for (int s = 0; s < n_splits; ++s) acc += part_acc[(base + s) * hd + d] * expf(part_m[base + s] - M);
    out[(int64_t(b) * n_q + j) * hd + d] = maybe_round_bf16(acc / L, round_out);
  }
}

__global__ void round_bf16_kernel(float* x, int64_t n) {
  for (int64_t e = global_thread(); e < n; e += global_stride()) x[e] = round_bf16(x[e]);
}

__global__ void silu_mul_kernel(const float* gate, const float* up, int64_t n, bool round_out, float* out) {
  for (int64_t e = global_thread(); e < n; e += global_stride()) {
    const float g = gate[e];
    const float silu = g / (1.0f + expf(-g));  // expf(-g) = inf for g << 0 gives -0, not NaN
    out[e] = maybe_round_bf16(silu * up[e], round_out);
  }
}

}  // namespace

// ---- Launchers --------------------------------------------------------------------------------

void launch_dequant(const QuantTripleDev& w, const ReferenceOptions& opt, float* out, cudaStream_t stream) {
  dequant_kernel<<<grid_for(w.out * w.in), kThreads, 0, stream>>>(w, opt, out);
  SOL_CHECK_LAUNCH();
}

void launch_embed_rows(const float* embed, int64_t vocab, int d, const int64_t* tokens, int batch, float* h,
                       cudaStream_t stream) {
  embed_rows_kernel<<<batch, kThreads, 0, stream>>>(embed, vocab, d, tokens, h);
  SOL_CHECK_LAUNCH();
}

void launch_rmsnorm(const float* x, const uint16_t* gain, int d, int batch, double eps, bool round_bf16_out, float* y,
                    cudaStream_t stream) {
  rmsnorm_kernel<<<batch, kThreads, 0, stream>>>(x, gain, d, eps, round_bf16_out, y);
  SOL_CHECK_LAUNCH();
}

void launch_rope(float* x, int batch, int heads, int hd, int pos, double theta, RopeStyle style, cudaStream_t stream) {
  const int threads = hd / 2 < 32 ? 32 : (hd / 2 > 1024 ? 1024 : hd / 2);
  rope_kernel<<<batch * heads, threads, 0, stream>>>(x, hd, pos, theta, style);
  SOL_CHECK_LAUNCH();
}

void launch_kv_append(const float* k, const float* v, uint16_t* k_cache, uint16_t* v_cache, int batch, int n_kv,
                      int hd, int max_seq, int slot, cudaStream_t stream) {
  const int64_t n = int64_t(batch) * n_kv * hd;
  kv_append_kernel<<<grid_for(n), kThreads, 0, stream>>>(k, v, k_cache, v_cache, n, hd, max_seq, slot);
  SOL_CHECK_LAUNCH();
}

void launch_attention(const float* q, const uint16_t* k_cache, const uint16_t* v_cache, int batch, int n_q, int n_kv,
                      int hd, int max_seq, int slots, GqaMap gqa, const AttnWorkspace& ws, bool round_bf16_out,
                      float* out, cudaStream_t stream) {
  const int n_splits = attn_num_splits(slots);
  if (slots < 1 || slots > max_seq || n_splits > ws.max_splits)
    throw sol::AbiFailure(NIBBLE_ERR_INTERNAL, "attention over " + std::to_string(slots) + " slots: outside [1, " +
                                                   std::to_string(max_seq) + "] or more splits than the workspace");
  // 1/sqrt(hd) rounded once from fp64.
  const float scale = float(1.0 / std::sqrt(double(hd)));
  const size_t smem = size_t(hd + kAttnChunk) * sizeof(float);
  attn_partial_kernel<<<dim3(n_splits, n_q, batch), kAttnThreads, smem, stream>>>(
      q, k_cache, v_cache, n_q, n_kv, hd, max_seq, slots, kAttnChunk, scale, gqa, ws.m, ws.l, ws.acc);
  SOL_CHECK_LAUNCH();
  attn_combine_kernel<<<dim3(n_q, batch), kAttnThreads, 0, stream>>>(ws.m, ws.l, ws.acc, n_q, hd, n_splits,
                                                                     round_bf16_out, out);
  SOL_CHECK_LAUNCH();
}

void launch_round_bf16(float* x, int64_t n, cudaStream_t stream) {
  round_bf16_kernel<<<grid_for(n), kThreads, 0, stream>>>(x, n);
  SOL_CHECK_LAUNCH();
}

void launch_silu_mul(const float* gate, const float* up, int64_t n, bool round_bf16_out, float* out,
                     cudaStream_t stream) {
  silu_mul_kernel<<<grid_for(n), kThreads, 0, stream>>>(gate, up, n, round_bf16_out, out);
  SOL_CHECK_LAUNCH();
}

}  // namespace nibble::ref
