// reference_kernels.cuh: the fp32 reference's device functions and kernel launchers.
//
// Each feature of the task lives in exactly one named device function below (dequant_element,
// rope_pair + rope_cos_sin, kv_write_slot, gqa_kv_head), and that function is where the
// ReferenceOptions switch for the feature is read; the kernels only call them. The bf16 rounding
// points of the precision variants are flags of the launchers (round_bf16_out) and
// launch_round_bf16, chosen by the step in reference_abi.cu. The math is the
// task's (include/nibble/nibble.h; seed megakernel_int4_weight_decode_spec.txt), the same as the
// fp64 oracle's (reference/decode/oracle_fp64.h), in fp32.
//
// Launchers take the stream, launch, and check the launch with SOL_CHECK_LAUNCH() (they throw
// nibble::sol::AbiFailure, which the ABI entry points' abi_guard turns into a status).
// Layouts are row-major; "(batch, n)" buffers hold one length-n row per sequence.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "fixtures/bf16.h"
#include "reference/decode/reference_options.h"

namespace nibble::ref {

/** An int4 weight triple in device memory (borrowed), logical shape (out, in), AWQ/GPTQ layout:
 *  packed (out, in/2) uint8, scale (out, in/group) bf16 bits, zero (out, in/group) uint8. */
struct QuantTripleDev {
  const uint8_t* packed;
  const uint16_t* scale;
  const uint8_t* zero;
  int64_t out, in, group;
};

/** The 4-bit code of input index i from its byte packed[o, i/2]. Task: low nibble = even i. */
__host__ __device__ inline int unpack_code(uint8_t byte, int64_t i, NibbleOrder order) {
  const bool even = (i & 1) == 0;
  const bool low = (order == NibbleOrder::LowFirst) ? even : !even;
  return low ? (byte & 0xF) : (byte >> 4);
}

/** W[o, i] = (code - zero[o, i/group]) * scale[o, i/group], in fp32. Exact: code - zero is an
 *  integer of magnitude <= 15 (4 bits) and the scale has an 8-bit significand, so the product
 *  needs at most 12 significand bits (the mutants' code and code - zero - 1, magnitude <= 16, too).
 *  Variants: PerRow uses group (o, 0) for the whole row; ZeroPoint::Ignore drops the zero,
 *  SubtractPlusOne subtracts zero + 1; bf16_dequant rounds the (exact) value to bf16. */
__device__ inline float dequant_element(const QuantTripleDev& w, int64_t o, int64_t i, const ReferenceOptions& opt) {
  const int64_t groups = w.in / w.group;
  const int64_t g = o * groups + (opt.grouping == ScaleGrouping::PerGroup ? i / w.group : 0);
  const int code = unpack_code(w.packed[o * (w.in / 2) + i / 2], i, opt.nibble_order);
  const int zero = opt.zero_point == ZeroPoint::Subtract ? int(w.zero[g])
                   : opt.zero_point == ZeroPoint::Ignore ? 0
                                                         : int(w.zero[g]) + 1;
  const float value = float(code - zero) * bf16_to_f32(w.scale[g]);
  return opt.bf16_dequant ? round_bf16(value) : value;
}

/** The two elements of a head vector that RoPE pair i (0 <= i < hd/2) rotates together.
 *  Task (rotate-half): (i, i + hd/2). */
__host__ __device__ inline void rope_pair(int i, int hd, RopeStyle style, int* first, int* second) {
  if (style == RopeStyle::RotateHalf) {
    *first = i;
    *second = i + hd / 2;
  } else {
    *first = 2 * i;
    *second = 2 * i + 1;
  }
}

/** cos and sin of pair i's angle pos * theta^(-2i/hd). The angle and its cos/sin are computed in
 *  fp64 and only then rounded to fp32: an fp32 angle near pos 2048 is off by ~1e-4 rad, which
 *  alone would exceed the 1e-5 agreement the reference keeps with the fp64 oracle. */
__device__ inline void rope_cos_sin(int i, int hd, int pos, double theta, float* c, float* s) {
  const double inv_freq = pow(theta, -2.0 * double(i) / double(hd));
  const double angle = double(pos) * inv_freq;
  *c = float(cos(angle));
  *s = float(sin(angle));
}

/** The cache slot a step at position pos writes its K and V to. Task: pos. Mutant AtPosPlusOne:
 *  pos + 1, or -1 (no write) when that is not below max_seq, so the cache is never overrun. */
__host__ __device__ inline int kv_write_slot(int pos, int max_seq, KvSlot mode) {
  const int slot = mode == KvSlot::AtPos ? pos : pos + 1;
  return slot < max_seq ? slot : -1;
}

/** The KV head query head j reads. Task (GQA): j / (n_q / n_kv). */
__host__ __device__ inline int gqa_kv_head(int j, int n_q, int n_kv, GqaMap map) {
  return map == GqaMap::Block ? j / (n_q / n_kv) : j % n_kv;
}

// ---- Launchers (all on `stream`; each checks its launch) ---------------------------------------

/** out (w.out, w.in) fp32 = dequant_element over the whole weight. */
void launch_dequant(const QuantTripleDev& w, const ReferenceOptions& opt, float* out, cudaStream_t stream);

/** h (batch, d) = embed[tokens[b], :], embed (vocab, d) fp32; a token outside [0, vocab) gives a row of
 *  NaN (so the logits fail the gate loudly rather than reading out of bounds). */
void launch_embed_rows(const float* embed, int64_t vocab, int d, const int64_t* tokens, int batch, float* h,
                       cudaStream_t stream);

/** y (batch, d) = x * gain / sqrt(mean(x^2) + eps), fp32 (the mean's reciprocal root in fp64);
 *  gain (d,) bf16. round_bf16_out rounds y to bf16 values (the bf16-GEMV-input variant). */
void launch_rmsnorm(const float* x, const uint16_t* gain, int d, int batch, double eps, bool round_bf16_out, float* y,
                    cudaStream_t stream);

/** RoPE in place on x (batch, heads, hd) at position pos, pairs from rope_pair, angles from rope_cos_sin. */
void launch_rope(float* x, int batch, int heads, int hd, int pos, double theta, RopeStyle style, cudaStream_t stream);

/** k, v (batch, n_kv, hd) fp32 -> cache[b, h, slot, :] of the (batch, n_kv, max_seq, hd) bf16 caches,
 *  rounded to nearest even. 0 <= slot < max_seq (the caller checks). */
void launch_kv_append(const float* k, const float* v, uint16_t* k_cache, uint16_t* v_cache, int batch, int n_kv,
                      int hd, int max_seq, int slot, cudaStream_t stream);

/** Cache slots per attention split (flash-decoding): 8 KV heads x 2048 slots is too little
 *  parallelism for one block per head, so every (split, query head, sequence) gets a block. */
inline constexpr int kAttnChunk = 64;
/** Number of splits for `slots` slots. */
inline int attn_num_splits(int slots) { return (slots + kAttnChunk - 1) / kAttnChunk; }

/** Scratch of the split attention, sized for attn_num_splits(max_seq). */
struct AttnWorkspace {
  float* m = nullptr;    // (batch, n_q, max_splits) running max of each split's scores
  float* l = nullptr;    // (batch, n_q, max_splits) sum of exp(score - m)
  float* acc = nullptr;  // (batch, n_q, max_splits, hd) sum of exp(score - m) * v
  int max_splits = 0;
};

/**
 * out (batch, n_q, hd) = softmax(q k^T / sqrt(hd)) v over cache slots [0, slots), fp32, K and V read
 * from the bf16 caches (batch, n_kv, max_seq, hd), query head j reading KV head gqa_kv_head(j).
 * Two kernels: per-split partial (max, sum, weighted V) and a combine. round_bf16_out: see rmsnorm.
 */
void launch_attention(const float* q, const uint16_t* k_cache, const uint16_t* v_cache, int batch, int n_q, int n_kv,
                      int hd, int max_seq, int slots, GqaMap gqa, const AttnWorkspace& ws, bool round_bf16_out,
                      float* out, cudaStream_t stream);

/** x[e] = bf16 rounding (nearest even) of x[e] for e < n, in place: the bf16-residual variant's
 *  residual stream after each write. */
void launch_round_bf16(float* x, int64_t n, cudaStream_t stream);

/** out[e] = silu(gate[e]) * up[e] for e < n, silu(x) = x / (1 + exp(-x)), fp32. */
void launch_silu_mul(const float* gate, const float* up, int64_t n, bool round_bf16_out, float* out,
                     cudaStream_t stream);

}  // namespace nibble::ref
