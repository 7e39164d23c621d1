// decode_kernel.cu: the whole decode step as one persistent cooperative kernel.
//
// Spec (nibble.h, the seed): h = dequant(embed)[token]; per layer a = RMSNorm(h) * in_norm;
// q,k,v = a W^T; RoPE on q, k; k, v appended at slot pos; attention over slots 0..pos (GQA);
// h += o-proj; a = RMSNorm(h) * post_norm; h += down(silu(gate a) * up a);
// logits = (RMSNorm(h) * final_norm) dequant(embed)^T.
// Shapes (full): 28 layers, d 3072, ffn 8192, 24 q / 8 kv heads of 128, vocab 128256.
// Bytes per step: 1.476 GB of layer codes + 92 MB of metadata + 205 MB (+13 MB) for the LM head +
// 8.4 MB of KV per layer at pos 2048: ~1.93 GB (the repacked metadata is 4 bytes per row-group
// where the fixture's is 3: +0.4%).
//
// One block per SM, 16 warps. Five stages per layer, a grid barrier after each (grid_sync.cuh):
//   1 qkv   every block: h -> RMSNorm -> x fragments in smem; qkv += W_qkv x (atomics)
//   2 attn  RoPE, KV append, split attention, last-block combine -> attn (attention.cuh)
//   3 o     h += W_o attn (the residual add is the atomic accumulation into h)
//   4 gu    gu += W_gu RMSNorm(h) * post_norm (gate and up rows interleaved per tile)
//   5 down  h += W_down (silu(g) * u), silu applied while the vector is loaded
// then the LM head into the (zeroed) logits. Each warp's weight ring (int4_mma_gemv.cuh) goes on
// with the next GEMV stage's first weights as soon as the current stage's are all issued (they do
// not depend on the activations), so they are in flight during the barrier, the input build and,
// for o-proj, the attention stage. Measured (NOTES.md): 1677 us/token on the H200.
// Buffers zeroed for the next atomics: logits in stage 1 of layer 0, gu in stage 1 of every layer,
// qkv in stage 3 (so qkv is zero again when the kernel returns; build_model zeroes it first).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <string>

#include "activation.cuh"
#include "attention.cuh"
#include "grid_sync.cuh"
#include "int4_mma_gemv.cuh"
#include "megakernel.h"

namespace nibble::megakernel {
namespace {

/** Shared memory carve-up; max_k = the longest GEMV input. */
struct SmemLayout {
  size_t xs, xf, red, bars, ring, att, total;
  __host__ __device__ SmemLayout(int max_k, int hd) {
    xs = 0;                                       // max_k fp32: the GEMV input vector
    xf = xs + size_t(max_k) * 4;                  // max_k/16 k-steps x 8 uint2: its B fragments
    red = xf + size_t(max_k) * 4;                 // kWarps fp32: block reductions
    bars = red + 32 * 4;                          // the rings' mbarriers
    ring = bars + kRingBarrierBytes;              // the weight rings (16-byte aligned)
    att = ring + kRingBytes;                      // attention scratch: apart from the rings, which
                                                  // stream o-proj weights during the attention
    const size_t att_bytes = (hd == 64 ? attention_smem_floats<64>() : attention_smem_floats<128>()) * size_t(4);
    total = att + att_bytes;
  }
};

__device__ __forceinline__ void zero_grid_stride(float* p, int n) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) p[i] = 0.f;
}

/** Tracing (DecodeParams::trace): this block's clock at mark k. */
__device__ __forceinline__ void mark(const DecodeParams& p, int k) {
  if (p.trace && threadIdx.x == 0) p.trace[size_t(blockIdx.x) * trace_marks(p.n_layers) + k] = clock64();
}

/** The barrier after stage `stage` (0-based over the whole step), traced. */
__device__ __forceinline__ void stage_barrier(const DecodeParams& p, int stage) {
  if (p.trace) {
    __syncthreads();
    mark(p, 1 + 2 * stage);
  }
  if (p.barrier_mode == 1)
    grid_sync_counter(p.barrier, unsigned(stage + 1) * gridDim.x);
  else
    grid_sync(p.barrier);
  mark(p, 2 + 2 * stage);
}

template <int HD>
__global__ void __launch_bounds__(kThreads, 1) decode_kernel(const DecodeParams p) {
  extern __shared__ __align__(16) unsigned char smem[];
  const int qdim = p.n_q * HD;
  const int max_k = max(max(p.d, p.ffn), qdim);
  const SmemLayout lay(max_k, HD);
  float* xs = reinterpret_cast<float*>(smem + lay.xs);
  uint2* xf = reinterpret_cast<uint2*>(smem + lay.xf);
  float* red = reinterpret_cast<float*>(smem + lay.red);
  float* att = reinterpret_cast<float*>(smem + lay.att);
  Ring ring = ring_init(smem + lay.ring, reinterpret_cast<unsigned long long*>(smem + lay.bars));

  const int gw = blockIdx.x * kWarps + (threadIdx.x >> 5), nw = gridDim.x * kWarps;
  mark(p, 0);
  ring_prefetch(p.layers[0].qkv, gw, nw, ring);

  for (int li = 0; li < p.n_layers; ++li) {
    // Fields are read where used (a copy of the struct would hold ~40 registers across the layer).
    const LayerDev* L = p.layers + li;

    // 1. qkv = W_qkv RMSNorm(h) * in_norm.
    float* gs = reinterpret_cast<float*>(xf);  // the gain as fp32 until the fragments are built
    if (li == 0) {
      load_embed_row(p.embed, p.vocab, p.d, p.token, xs, blockIdx.x == 0 ? p.h : nullptr);
      zero_grid_stride(p.logits, p.vocab);
    } else {
      load_vector(p.h, p.d, xs);
    }
    load_gain(L->in_norm, p.d, gs);
    zero_grid_stride(p.gu, 2 * p.ffn);
    __syncthreads();
    rmsnorm_inplace(xs, gs, p.d, p.eps, red);
    __syncthreads();
    build_x_fragments(xs, p.d, xf);
    __syncthreads();
    gemv_run(L->qkv, p.qkv, xf, gw, nw, ring, L->o, true);
    stage_barrier(p, 5 * li + 0);

    // 2. RoPE, KV append, attention -> attn.
    attention_stage<HD>(p.qkv, p.rope, L->k_cache, L->v_cache, p.n_q, p.n_kv, p.max_seq, p.pos, p.part, p.max_chunks,
                        p.attn_count, p.attn, att);
    ring_prefetch(L->o, gw, nw, ring);
    stage_barrier(p, 5 * li + 1);

    // 3. h += W_o attn.
    load_vector(p.attn, qdim, xs);
    zero_grid_stride(p.qkv, qdim + 2 * p.n_kv * HD);
    __syncthreads();
    build_x_fragments(xs, qdim, xf);
    __syncthreads();
    gemv_run(L->o, p.h, xf, gw, nw, ring, L->gu, true);
    ring_prefetch(L->gu, gw, nw, ring);
    stage_barrier(p, 5 * li + 2);

    // 4. gu = [W_gate | W_up] RMSNorm(h) * post_norm.
    load_vector(p.h, p.d, xs);
    load_gain(L->post_norm, p.d, gs);
    __syncthreads();
    rmsnorm_inplace(xs, gs, p.d, p.eps, red);
    __syncthreads();
    build_x_fragments(xs, p.d, xf);
    __syncthreads();
    gemv_run(L->gu, p.gu, xf, gw, nw, ring, L->down, true);
    ring_prefetch(L->down, gw, nw, ring);
    stage_barrier(p, 5 * li + 3);

    // 5. h += W_down (silu(g) * u).
    load_swiglu(p.gu, p.ffn, xs);
    __syncthreads();
    build_x_fragments(xs, p.ffn, xf);
    __syncthreads();
    const PackedMatrix& after = li + 1 < p.n_layers ? p.layers[li + 1].qkv : p.head;
    gemv_run(L->down, p.h, xf, gw, nw, ring, after, true);
    ring_prefetch(after, gw, nw, ring);
    stage_barrier(p, 5 * li + 4);
  }

  // LM head: logits = W_embed RMSNorm(h) * final_norm.
  float* gs = reinterpret_cast<float*>(xf);
  load_vector(p.h, p.d, xs);
  load_gain(p.final_norm, p.d, gs);
  __syncthreads();
  rmsnorm_inplace(xs, gs, p.d, p.eps, red);
  __syncthreads();
  build_x_fragments(xs, p.d, xf);
  __syncthreads();
  gemv_run(p.head, p.logits, xf, gw, nw, ring, p.head, false);
  if (p.barrier_mode == 1) grid_sync_counter_done(p.barrier);
  if (p.trace) {
    __syncthreads();
    mark(p, 1 + 10 * p.n_layers);
  }
}

const void* kernel_for(int hd) {
  return hd == 64 ? reinterpret_cast<const void*>(&decode_kernel<64>) : reinterpret_cast<const void*>(&decode_kernel<128>);
}

}  // namespace

size_t decode_smem_bytes(int max_k, int hd) { return SmemLayout(max_k, hd).total; }

cudaError_t decode_grid_blocks(int hd, size_t smem, int* blocks) {
  if (!blocks || (hd != 64 && hd != 128)) return cudaErrorInvalidValue;
  *blocks = 0;
  int dev = 0, sms = 0, per_sm = 0;
  cudaError_t e = cudaGetDevice(&dev);
  if (e == cudaSuccess) e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
  if (e == cudaSuccess) e = cudaFuncSetAttribute(kernel_for(hd), cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem));
  if (e == cudaSuccess) e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel_for(hd), kThreads, smem);
  if (e != cudaSuccess) return e;
  *blocks = sms * std::min(per_sm, 1);  // one block per SM: the work split assumes 16 warps per SM
  return cudaSuccess;
}

std::string unsupported_reason(int d, int ffn, int n_q, int n_kv, int hd, int group) {
  if (group != kGroup)
    return "cfg.group = " + std::to_string(group) +
           ": the repacked layout maps one 128-input group onto 8 mma k-steps; only group 128 is supported";
  if (hd != 64 && hd != 128)
    return "cfg.hd = " + std::to_string(hd) + ": the attention stage supports head dims 64 and 128 (hd/32 per lane)";
  if (n_kv < 1 || n_q % n_kv != 0 || n_q / n_kv > kMaxRep)
    return "n_q / n_kv = " + std::to_string(n_q) + " / " + std::to_string(n_kv) +
           ": the attention stage supports 1.." + std::to_string(kMaxRep) + " query heads per KV head";
  if (d % kGroup || ffn % kGroup)
    return "d and ffn must be multiples of 128 (the GEMV inputs are whole groups)";
  // Shared memory: the longest GEMV input as fp32 plus its fragments (8 bytes per input).
  const long long max_k = std::max({(long long)d, (long long)ffn, (long long)n_q * hd});
  if (max_k * 8 > 160 * 1024)
    return "the longest GEMV input (" + std::to_string(max_k) + ") does not fit in shared memory (at most 20480)";
  return "";
}

cudaError_t launch_decode(const DecodeParams& p, int blocks, size_t smem, cudaStream_t stream) {
  if (blocks < 1 || !p.layers || p.n_layers < 1 || (p.hd != 64 && p.hd != 128) || p.n_q / p.n_kv > kMaxRep ||
      p.max_chunks != attn_max_chunks(blocks, p.n_kv) || p.pos < 0 || p.pos >= p.max_seq)
    return cudaErrorInvalidValue;
  DecodeParams args = p;
  void* kargs[] = {&args};
  return cudaLaunchCooperativeKernel(kernel_for(p.hd), dim3(unsigned(blocks)), dim3(kThreads), kargs, smem, stream);
}

}  // namespace nibble::megakernel
