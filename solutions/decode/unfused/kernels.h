// kernels.h: the launchers of the unfused solution, one per op (one .cu file each).
//
// Every launcher takes the stream, validates what the kernel assumes (returning
// cudaErrorInvalidValue instead of launching on a bad shape or alignment), launches, and returns
// cudaGetLastError(): the caller (unfused.cu, the tests) decides what an error means.
//
// All kernels work on ONE sequence; unfused.cu loops over the batch with offset pointers.
// Activations are fp32 device vectors; bf16 values travel as their uint16_t bit patterns.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace nibble::unfused {

/** Quantisation group along the input dimension this solution supports (the seed's group). */
inline constexpr int kGroup = 128;

/** One int4 matrix of a GEMV launch (AWQ/GPTQ asymmetric layout, logical shape (rows, in)):
 *    y[r] = (residual ? residual[r] : 0) + sum_i (code[r,i] - zero[r,i/128]) * scale[r,i/128] * x[i]  */
struct Int4Matrix {
  const uint8_t* packed = nullptr;   ///< (rows, in/2) uint8, LOW nibble = even input index; 16-byte aligned
  const uint16_t* scale = nullptr;   ///< (rows, in/128) bf16 bits
  const uint8_t* zero = nullptr;     ///< (rows, in/128) uint8, 0..15
  int rows = 0;                      ///< output rows (>= 1)
  float* y = nullptr;                ///< (rows) fp32 output; every element is written
  const float* residual = nullptr;   ///< (rows) fp32 or nullptr; may alias y (in-place h += W x)
};

/** Most matrices one GEMV launch takes (q, k, v share their input). */
inline constexpr int kMaxGemvMatrices = 3;

/**
 * int4_gemv.cu: y_m = W_m x (+ residual_m) for up to kMaxGemvMatrices matrices sharing x, one launch.
 * @param mats    n_mats matrices, each (rows_m, in)
 * @param x       (in) fp32, 16-byte aligned
 * @param in      input length, a positive multiple of kGroup (128)
 * @return cudaErrorInvalidValue on a bad argument (nothing launched), else the launch status.
 */
cudaError_t launch_int4_gemv(const Int4Matrix* mats, int n_mats, const float* x, int in, cudaStream_t stream);
/** Same, with a bf16 activation x (bits, 16-byte aligned). */
cudaError_t launch_int4_gemv_bf16x(const Int4Matrix* mats, int n_mats, const uint16_t* x, int in,
                                   cudaStream_t stream);

/**
 * embed.cu: h = dequant(embed)[token] as fp32 (d). The token id is read on the device; an id
 * outside [0, vocab) writes NaN into h (so the step's logits fail the gate) instead of reading
 * out of bounds.
 * @param token   one int64 on the GPU
 * @param embed   the (vocab, d) int4 triple (rows = vocab; y/residual unused)
 * @param d       model width, a multiple of 128
 */
cudaError_t launch_embed(const int64_t* token, const Int4Matrix& embed, int d, float* h, cudaStream_t stream);

/**
 * rmsnorm.cu: out = x / sqrt(mean(x^2) + eps) * gain; x, out fp32 (d); gain bf16 bits (d).
 * fp32 sum of squares. out must not alias x.
 */
cudaError_t launch_rmsnorm(const float* x, const uint16_t* gain, float eps, int d, float* out, cudaStream_t stream);

/**
 * rope_kv_append.cu: RoPE (rotate-half, pairs (i, i + hd/2)) on q and k at position pos, then
 * k and v rounded to bf16 (nearest-even) into cache slot pos.
 * @param qkv      fp32 [q (n_q*hd) | k (n_kv*hd) | v (n_kv*hd)]; q is rotated in place
 * @param rope     (max_seq, hd/2) float2 {cos, sin} of pos * theta^(-2i/hd), computed in double
 * @param k_cache  this sequence's (n_kv, max_seq, hd) bf16 bits, written at slot pos
 * @param v_cache  same for V
 */
cudaError_t launch_rope_kv_append(float* qkv, const float2* rope, int n_q, int n_kv, int hd, int max_seq,
                                  int pos, uint16_t* k_cache, uint16_t* v_cache, cudaStream_t stream);

/** Cache slots per attention block (flash-decoding chunk). */
inline constexpr int kAttnChunk = 64;
/** Most query heads per KV head the attention kernel supports. */
inline constexpr int kAttnMaxRep = 8;
/** Chunks the partial buffers must hold for a cache of max_seq slots. */
inline int attn_max_chunks(int max_seq) { return (max_seq + kAttnChunk - 1) / kAttnChunk; }

/**
 * attention.cu, pass 1: for every (kv head, chunk of kAttnChunk slots of 0..pos), the chunk's
 * max score m, sum of exp(score - m) l and unnormalised sum of exp(score - m) v, for the n_q/n_kv
 * query heads of that kv head. Scores = q.k / sqrt(hd) in fp32 over the bf16 cache.
 * @param q        (n_q*hd) fp32, already rotated
 * @param k_cache  (n_kv, max_seq, hd) bf16 bits, slots 0..pos valid
 * @param part_o   (n_q, attn_max_chunks(max_seq), hd) fp32 scratch
 * @param part_ml  (n_q, attn_max_chunks(max_seq), 2) fp32 scratch {m, l}
 * hd must be 64 or 128 and n_q / n_kv at most kAttnMaxRep.
 */
cudaError_t launch_attention_partial(const float* q, const uint16_t* k_cache, const uint16_t* v_cache, int n_q,
                                     int n_kv, int hd, int max_seq, int pos, float* part_o, float* part_ml,
                                     cudaStream_t stream);
/** attention.cu, pass 2: out (n_q*hd) fp32 = the softmax-weighted combination of the chunks. */
cudaError_t launch_attention_combine(const float* part_o, const float* part_ml, int n_q, int hd, int max_seq,
                                     int pos, float* out, cudaStream_t stream);

/** swiglu.cu: out[i] = silu(gate[i]) * up[i] = gate / (1 + exp(-gate)) * up, fp32 (n). */
cudaError_t launch_swiglu(const float* gate, const float* up, int n, float* out, cudaStream_t stream);

}  // namespace nibble::unfused
