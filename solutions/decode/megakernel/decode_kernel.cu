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
// One block per SM, 16 warps. Five stages per layer, a grid barrier after each but the attention
// (grid_sync.cuh):
//   1 qkv   every block: h -> RMSNorm * gain -> x as int8 limbs in smem; qkv += W_qkv x (atomics)
//   2 attn  RoPE, KV append, split attention, last-block combine -> attn (attention.cuh), which
//           releases a flag per KV head: o-proj waits for the heads it reads, not for the grid
//   3 o     h += W_o attn (the residual add is the atomic accumulation into h); o's units come in
//           chunks of 2 groups (PackedMatrix::chunk), so a block reads only a few heads of attn
//   4 gu    gu += W_gu RMSNorm(h) * post_norm (gate and up rows interleaved per tile)
//   5 down  h += W_down (silu(g) * u); down's units come in chunks of 4 groups, so a block computes
//           silu(g) * u for only the chunk or two of 128-input groups its units read
// then the LM head into the (zeroed) logits. Each warp's weight ring (int4_mma_gemv.cuh) goes on
// with the next GEMV stage's first weights as soon as the current stage's are all issued (they do
// not depend on the activations), so they are in flight during the barrier, the input build and,
// for o-proj, the attention stage; the RMSNorm gains are copied a stage early (cp.async).
// Measured: NOTES.md (every version, its prediction and its time). Experiments not yet measured
// are template variants of the kernel (DecodeVariant: NIBBLE_MK_OCOMB, NIBBLE_MK_PFSM), so that
// the default kernel keeps its registers.
// Buffers zeroed for the next atomics: logits in stage 1 of layer 0, qkv in stage 4 (every block is
// past its attention), gu after the down barrier, so both are zero when the kernel returns
// (build_model zeroes them first).
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

/** Shared memory carve-up; max_k = the longest GEMV input, d = the model width (the gains' length). */
struct SmemLayout {
  size_t xs, xf, kv, gn, red, kvbar, plan, bars, ring, att, total;
  __host__ __device__ SmemLayout(int max_k, int d, int hd) {
    xs = 0;                                       // max_k fp32: the GEMV input vector
    xf = xs + size_t(max_k) * 4;                  // its int8 limbs (XQuant), xquant_bytes(max_k) <= 4 max_k
    kv = 0;                                       // the attention's K/V sub-chunk, over xs and xf:
                                                  // they are free from the qkv GEMV's end to o's build
    const size_t low = size_t(max_k) * 8 > size_t(kAttnKvBytes) ? size_t(max_k) * 8 : size_t(kAttnKvBytes);
    gn = low;                                     // the next RMSNorm's gain, d bf16
    red = gn + (size_t(d) * 2 + 15) / 16 * 16;    // kWarps fp32: block reductions
    kvbar = red + 32 * 4;                         // the K/V buffer's mbarrier (8 of 16 bytes)
    plan = kvbar + 16;                            // (kPlanKinds, kWarps) GemvPlan: this block's warps'
    bars = plan + size_t(kPlanKinds) * kWarps * sizeof(GemvPlan);  // the rings' mbarriers
    ring = bars + kRingBarrierBytes;              // the weight rings (16-byte aligned)
    att = ring + kRingBytes;                      // attention scratch: apart from the rings, which
                                                  // stream o-proj weights during the attention
    const size_t att_bytes = (hd == 64 ? attention_smem_floats<64>() : attention_smem_floats<128>()) * size_t(4);
    total = att + att_bytes;
  }
};

/** p[0, n) = 0 by blocks [0, nblk) (the blocks that run the step). */
__device__ __forceinline__ void zero_grid_stride(float* p, int n, unsigned nblk) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += nblk * blockDim.x) p[i] = 0.f;
}

/** Tracing (DecodeParams::trace): this block's clock at mark k. */
__device__ __forceinline__ void mark(const DecodeParams& p, int k) {
  if (p.trace && threadIdx.x == 0) p.trace[size_t(blockIdx.x) * trace_marks(p.n_layers) + k] = clock64();
}

/** Tracing: the gemv_run counters of GEMV kind k (qkv, o, gate/up, down, head), or nullptr. */
__device__ __forceinline__ unsigned long long* gemv_stats(const DecodeParams& p, int k) {
  return p.trace_gemv ? p.trace_gemv + kGemvStats * k : nullptr;
}

/** Tracing: stage `stage`'s input is built (or, for the attention, its work is done). */
__device__ __forceinline__ void mark_ready(const DecodeParams& p, int stage) {
  mark(p, trace_ready(p.n_layers, stage));
}

/** The thread that arrives at the grid barriers, polls the heads' flags and takes the attention's
 *  counts (DecodeParams::sync_warp). */
__device__ __forceinline__ unsigned sync_thread(const DecodeParams& p) { return p.sync_warp ? kThreads - 32 : 0; }

/** Tracing: every warp of the block is out of stage `stage`'s GEMV (an extra block barrier, traced
 *  runs only), so the trace splits the GEMV (its slowest warp) from what follows it. */
__device__ __forceinline__ void mark_done(const DecodeParams& p, int stage) {
  if (!p.trace) return;
  __syncthreads();
  mark(p, trace_done(p.n_layers, stage));
}

/** The grid barrier after stage `stage` (0-based over the whole step, traced), the `index`-th grid
 *  barrier of the step (the counter barrier's target) among the nblk blocks that run the step.
 *  `between` runs on every thread after the block's arrival and before its wait (split phase). */
template <class F>
__device__ __forceinline__ void stage_barrier(const DecodeParams& p, int stage, int index, unsigned nblk, F&& between) {
  if (p.trace) {
    __syncthreads();
    mark(p, 1 + 2 * stage);
  }
  const unsigned sync_tid = sync_thread(p);
  if (p.barrier_mode == 1) {
    __syncthreads();
    if (p.trace) {
      // The arrival's completion traced: an atomic that returns (its release fence, then the L2
      // round trip) instead of the reduction.
      if (threadIdx.x == sync_tid) {
        const unsigned old = sol::atom_release_gpu_inc(p.barrier);
        if (old != 0xFFFFFFFFu)
          p.trace[size_t(blockIdx.x) * trace_marks(p.n_layers) + trace_fenced(p.n_layers, stage)] = clock64();
      }
    } else {
      grid_arrive(p.barrier, sync_tid);
    }
    // split 2: the other warps issue after the arrival's fence has completed, so that the fence
    // does not also wait for those copies
    if (p.split_barrier == 2) __syncthreads();
    between();
    grid_wait(p.barrier, unsigned(index + 1) * nblk, sync_tid);
    __syncthreads();
  } else {
    between();
    grid_sync(p.barrier);
  }
  mark(p, 2 + 2 * stage);
}

/** Instead of a grid barrier after the attention (stage `stage` of layer li): wait until the KV
 *  heads whose query heads are o-proj inputs [128 g0, 128 g1) are combined (attention.cuh's done)
 *  or, with OCOMB (DecodeParams::o_combine), until every chunk's partial of them is released,
 *  traced as that stage's arrival and release. */
template <bool OCOMB>
__device__ __forceinline__ void wait_heads(const DecodeParams& p, int stage, int li, int g0, int g1) {
  if (p.trace) {
    __syncthreads();
    mark(p, 1 + 2 * stage);
  }
  if (g1 > g0) {
    const int rep = p.n_q / p.n_kv;
    const int h0 = g0 * kGroup / p.hd / rep, h1 = ((g1 * kGroup - 1) / p.hd) / rep;
    // o_combine: every chunk's partial of the head released (the counts grow by n_chunks a layer)
    const unsigned* flags = OCOMB ? p.attn_count : p.attn_done;
    const unsigned target = OCOMB ? unsigned(li + 1) * unsigned(attn_geom(p.pos, p.max_chunks, p.n_kv).n_chunks)
                                  : unsigned(li + 1);
    for (int h = h0; h <= h1; ++h) wait_flag(flags + h, target, sync_thread(p));
  }
  __syncthreads();
  mark(p, 2 + 2 * stage);
}

/** The critical-path probe (DecodeParams::delay_where): spin delay_ns of GPU time at point `where`. */
__device__ __forceinline__ void probe_delay(const DecodeParams& p, int where) {
  if (p.delay_where != where) return;
  const unsigned long long t0 = sol::globaltimer_ns();
  while (sol::globaltimer_ns() - t0 < (unsigned long long)p.delay_ns) {
  }
}

/** Layer li's matrix of kind `kind` (kPlanQkv .. kPlanDown), from the parameters alone. */
__device__ __forceinline__ PackedMatrix layer_mat(const DecodeParams& p, int kind, int li) {
  PackedMatrix m = p.mat0[kind];
  const long long off = p.layer_stride * li;
  m.w = reinterpret_cast<const uint4*>(reinterpret_cast<const char*>(m.w) + off);
  return m;
}

/** The prefetch blocks' whole step (DecodeParams::pf_blocks, blocks [nblk, gridDim.x)): follow the
 *  compute blocks' grid barrier count and, once a GEMV has started, pull the next one's codes and
 *  metadata into L2 (in 32 KB pieces spread over every prefetch warp, so that the DRAM channels
 *  share them): o when qkv starts, gate|up at the qkv barrier (the attention moves only the
 *  K/V rows), down at the o barrier, the next layer's qkv at the gate|up barrier. At most two
 *  GEMVs' weights (gate|up and down, ~38 MB full config) are in L2 ahead of need; the LM head
 *  (206 MB, larger than L2) is left to the rings. Nothing here delays a compute block's fence:
 *  a fence waits only for its own SM's copies. */
__device__ __forceinline__ void prefetch_blocks_run(const DecodeParams& p, unsigned nblk) {
  constexpr size_t kPiece = 32768;  // a multiple of 16, as the prefetch needs (kUnitStride is too)
  const size_t slot = size_t(blockIdx.x - nblk) * kWarps + (threadIdx.x >> 5);
  const size_t slots = size_t(gridDim.x - nblk) * kWarps;
  const auto until = [&](int k) {  // the compute blocks have passed grid barrier k (k < 0: now)
    if (k >= 0 && threadIdx.x == 0)
      while (ld_acquire_gpu(p.barrier) < unsigned(k + 1) * nblk) {
      }
    __syncthreads();
  };
  const auto pull = [&](const PackedMatrix& m) {
    if ((threadIdx.x & 31) != 0) return;
    const auto* base = reinterpret_cast<const unsigned char*>(m.w);
    const size_t bytes = size_t(m.tiles) * size_t(m.groups) * kUnitStride;
    for (size_t a = slot * kPiece; a < bytes; a += slots * kPiece)
      sol::bulk_prefetch_l2(base + a, uint32_t(min(kPiece, bytes - a)));
  };
  for (int li = 0; li < p.n_layers; ++li) {
    until(4 * li - 1);  // qkv of layer li runs
    pull(layer_mat(p, kPlanO, li));
    until(4 * li);  // the attention, then o
    pull(layer_mat(p, kPlanGu, li));
    until(4 * li + 1);  // gate|up
    pull(layer_mat(p, kPlanDown, li));
    until(4 * li + 2);  // down
    if (li + 1 < p.n_layers) pull(layer_mat(p, kPlanQkv, li + 1));
  }
}

/** Template variants, so that the default kernel (0) carries none of an experiment's code: as run-
 *  time branches they spilled into the hd-128 kernel, which is at 128 registers (o_combine: 16 / 32
 *  bytes). */
enum DecodeVariant : int { kVarOcomb = 1, kVarPfsm = 2 };

// V: DecodeVariant bits (kVarOcomb: p.o_combine, kVarPfsm: p.pf_blocks > 0).
template <int HD, int V>
__global__ void __launch_bounds__(kThreads, 1) decode_kernel(const DecodeParams p) {
  constexpr bool OCOMB = (V & kVarOcomb) != 0, PFSM = (V & kVarPfsm) != 0;
  // PFSM: no ring goes on into the next GEMV during a GEMV (its first stages are issued in the
  // barrier's split phase, after the arrival's fence), so nothing of the block's is in flight at a
  // release fence; the prefetch blocks have put those weights in L2.
  constexpr bool kChain = !PFSM;
  const unsigned nblk = PFSM ? gridDim.x - unsigned(p.pf_blocks) : gridDim.x;  // the blocks that run the step
  if constexpr (PFSM) {
    if (blockIdx.x >= nblk) {  // a prefetch block: none of the step's shared memory or state
      prefetch_blocks_run(p, nblk);
      kernel_done(p.barrier, p.attn_count, 2 * p.n_kv);
      return;
    }
  }
  NIBBLE_DYNAMIC_SMEM(smem, 16);
  const int qdim = p.n_q * HD;
  const int max_k = max(max(p.d, p.ffn), qdim);
  const SmemLayout lay(max_k, p.d, HD);
  float* xs = reinterpret_cast<float*>(smem + lay.xs);
  unsigned char* xf = smem + lay.xf;
  uint16_t* gn = reinterpret_cast<uint16_t*>(smem + lay.gn);
  float* red = reinterpret_cast<float*>(smem + lay.red);
  float* att = reinterpret_cast<float*>(smem + lay.att);
  Ring ring = ring_init(smem + lay.ring, reinterpret_cast<unsigned long long*>(smem + lay.bars), p.proxy_fence);
  AttnKv kv = attn_kv_init(smem + lay.kv, reinterpret_cast<uint64_t*>(smem + lay.kvbar));

  // This block's warps' plans of the five GEMV kinds (every layer has the same shapes), copied once.
  GemvPlan* plan = reinterpret_cast<GemvPlan*>(smem + lay.plan);
  const int warp = threadIdx.x >> 5, nw = int(nblk) * kWarps;
  load_block_plans(plan, p.plans, kPlanKinds, nw);
  __syncthreads();
  const GemvPlan& pl_qkv = plan[kPlanQkv * kWarps + warp];
  const GemvPlan& pl_o = plan[kPlanO * kWarps + warp];
  const GemvPlan& pl_gu = plan[kPlanGu * kWarps + warp];
  const GemvPlan& pl_down = plan[kPlanDown * kWarps + warp];
  const GemvPlan& pl_head = plan[kPlanHead * kWarps + warp];
  mark(p, 0);
  ring_prefetch(layer_mat(p, kPlanQkv, 0), pl_qkv, ring);
  gain_prefetch(p.layers[0].in_norm, p.d, gn);

  // The gains are copied into gn a stage before their RMSNorm (cp.async, waited for before the
  // barrier in between): in_norm during the previous layer's down stage, post_norm during qkv.
  // Four grid barriers per layer: o-proj waits only for the attention heads it reads.
  for (int li = 0; li < p.n_layers; ++li) {
    // Fields are read where used (a copy of the struct would hold ~40 registers across the layer).
    const LayerDev* L = p.layers + li;
    int g0, g1;

    // 1. qkv = W_qkv RMSNorm(h) * in_norm.
    if (li == 0) {
      load_embed_row(p.embed, p.vocab, p.d, p.token, xs, blockIdx.x == 0 ? p.h : nullptr);
      zero_grid_stride(p.logits, p.vocab, nblk);
      gain_wait();
    } else {
      load_vector(p.h, p.d, xs);
    }
    __syncthreads();
    float rs = rms_scale(xs, p.d, p.eps, red);
    build_x_limbs(xs, p.d, xf, gn, rs);
    __syncthreads();
    mark_ready(p, 5 * li + 0);
    gain_prefetch(L->post_norm, p.d, gn);
    const bool split = p.split_barrier;
    gemv_run(layer_mat(p, kPlanQkv, li), pl_qkv, p.qkv, xquant_view(xf, p.d), ring, layer_mat(p, kPlanO, li),
                    pl_o, kChain, gemv_stats(p, 0));
    mark_done(p, 5 * li + 0);
    probe_delay(p, 2);
    __syncthreads();
    // (NIBBLE_MK_L2PF) the later stages' weights into L2
    if (p.l2_prefetch & 1) gemv_prefetch_l2(layer_mat(p, kPlanO, li), pl_o);
    if (p.l2_prefetch & 2) gemv_prefetch_l2(layer_mat(p, kPlanGu, li), pl_gu);
    if (p.l2_prefetch & 4) gemv_prefetch_l2(layer_mat(p, kPlanDown, li), pl_down);
    gain_wait();
    // (NIBBLE_MK_KVPF=1, not yet measured) the block's first K/V rows of the attention, copied
    // after the arrival's fence has completed, while the block waits for the grid (over xs and
    // xf: every warp is past the GEMV that reads them). v8-v14 issued them before the arrival;
    // measured slower since v15, as the release fence waited for them, and removed (a second call
    // site spilled 4 bytes into the default hd-128 kernel).
    stage_barrier(p, 5 * li + 0, 4 * li + 0, nblk, [&] {
      if (p.kv_prefetch) attention_prefetch<HD>(kv, L->k_cache, L->v_cache, p.n_kv, p.max_seq, p.pos, p.max_chunks);
    });

    // 2. RoPE, KV append, attention -> attn; the last block of each KV head releases attn_done.
    attention_stage<HD, OCOMB>(p.qkv, p.rope, L->k_cache, L->v_cache, p.n_q, p.n_kv, p.max_seq, p.pos, p.part, p.max_chunks,
                        p.attn_count, p.attn, att, kv, p.attn_done,
                        p.trace ? p.trace + size_t(blockIdx.x) * trace_marks(p.n_layers) + trace_attn(p.n_layers, li)
                                : nullptr,
                        sync_thread(p), PFSM ? nblk : 0u);
    probe_delay(p, 1);
    mark_ready(p, 5 * li + 1);
    ring_prefetch(layer_mat(p, kPlanO, li), pl_o, ring);
    // o's units come in chunks of groups: a group is 128 / hd query heads
    block_groups(p.mat0[kPlanO], plan[kPlanO * kWarps], plan[kPlanO * kWarps + kWarps - 1], &g0, &g1);
    wait_heads<OCOMB>(p, 5 * li + 1, li, g0, g1);

    // 3. h += W_o attn, from this block's heads of attn only (o_combine: merged here from the
    //    attention's partials, one L2 round trip, instead of loaded after a combining block's flag).
    if constexpr (OCOMB) {
      const int n_chunks = attn_geom(p.pos, p.max_chunks, p.n_kv).n_chunks;
      for (int i = g0 * kGroup + int(threadIdx.x); i < g1 * kGroup; i += kThreads)
        xs[i] = combine_chunks<HD>(p.part, p.max_chunks, n_chunks, i / HD, i % HD);
    } else {
      load_vector(p.attn + g0 * kGroup, (g1 - g0) * kGroup, xs + g0 * kGroup);
    }
    __syncthreads();
    build_x_limbs(xs, qdim, xf, nullptr, 1.f, g0, g1);
    __syncthreads();
    mark_ready(p, 5 * li + 2);
    gemv_run(layer_mat(p, kPlanO, li), pl_o, p.h, xquant_view(xf, qdim), ring, layer_mat(p, kPlanGu, li), pl_gu,
                   kChain, gemv_stats(p, 1));
    mark_done(p, 5 * li + 2);
    // The next GEMV's first ring stages not yet issued: after the arrival (split phase), so that
    // their issue overlaps the barrier's wait (-3 to -19 us per token, NOTES.md v15), and (v18) once
    // the arrival's release fence has completed: it waits for every copy the SM has in flight,
    // including those issued while it runs (-8 us).
    if (!split) ring_prefetch(layer_mat(p, kPlanGu, li), pl_gu, ring);
    stage_barrier(p, 5 * li + 2, 4 * li + 1, nblk, [&] {
      if (split) ring_prefetch(layer_mat(p, kPlanGu, li), pl_gu, ring);
    });

    // 4. gu = [W_gate | W_up] RMSNorm(h) * post_norm. (Every block is past its attention: q|k|v
    //    can be zeroed for the next layer's atomics, gate|up for this stage's were zeroed before.)
    load_vector(p.h, p.d, xs);
    zero_grid_stride(p.qkv, qdim + 2 * p.n_kv * HD, nblk);
    __syncthreads();
    rs = rms_scale(xs, p.d, p.eps, red);
    build_x_limbs(xs, p.d, xf, gn, rs);
    __syncthreads();
    probe_delay(p, 3);
    mark_ready(p, 5 * li + 3);
    gemv_run(layer_mat(p, kPlanGu, li), pl_gu, p.gu, xquant_view(xf, p.d), ring, layer_mat(p, kPlanDown, li),
                    pl_down, kChain, gemv_stats(p, 2));
    mark_done(p, 5 * li + 3);
    if (!split) ring_prefetch(layer_mat(p, kPlanDown, li), pl_down, ring);
    stage_barrier(p, 5 * li + 3, 4 * li + 2, nblk, [&] {
      if (split) ring_prefetch(layer_mat(p, kPlanDown, li), pl_down, ring);
    });

    // 5. h += W_down (silu(g) * u), from this block's groups of gate|up only (down is chunked).
    gain_prefetch(li + 1 < p.n_layers ? p.layers[li + 1].in_norm : p.final_norm, p.d, gn);
    block_groups(p.mat0[kPlanDown], plan[kPlanDown * kWarps], plan[kPlanDown * kWarps + kWarps - 1], &g0, &g1);
    load_swiglu(p.gu, g0, g1, xs);
    __syncthreads();
    build_x_limbs(xs, p.ffn, xf, nullptr, 1.f, g0, g1);
    __syncthreads();
    mark_ready(p, 5 * li + 4);
    const bool last = li + 1 == p.n_layers;
    const PackedMatrix after = last ? p.head : layer_mat(p, kPlanQkv, li + 1);
    const GemvPlan& pl_after = last ? pl_head : pl_qkv;
    gemv_run(layer_mat(p, kPlanDown, li), pl_down, p.h, xquant_view(xf, p.ffn), ring, after, pl_after, kChain, gemv_stats(p, 3));
    mark_done(p, 5 * li + 4);
    if (!split) ring_prefetch(after, pl_after, ring);
    probe_delay(p, 4);
    gain_wait();
    // gate|up is read by every block before this barrier: zeroed for the next layer after it
    stage_barrier(p, 5 * li + 4, 4 * li + 3, nblk, [&] {
      if (split) ring_prefetch(after, pl_after, ring);
    });
    zero_grid_stride(p.gu, 2 * p.ffn, nblk);
  }

  // LM head: logits = W_embed RMSNorm(h) * final_norm.
  load_vector(p.h, p.d, xs);
  __syncthreads();
  const float rs = rms_scale(xs, p.d, p.eps, red);
  build_x_limbs(xs, p.d, xf, gn, rs);
  __syncthreads();
  gemv_run(p.head, pl_head, p.logits, xquant_view(xf, p.d), ring, p.head, pl_head, false, gemv_stats(p, 4));
  kernel_done(p.barrier, p.attn_count, 2 * p.n_kv);  // attn_count, then attn_done (o_combine's counts grow)
  if (p.trace) {
    __syncthreads();
    mark(p, 1 + 10 * p.n_layers);  // the end
  }
}

/** The decode kernel of (hd, variant), typed: the CPU emulation (tests/emulation) launches it too. */
using DecodeKernel = void (*)(const DecodeParams);
template <int HD>
DecodeKernel kernel_for(int variant) {
  switch (variant) {
    case kVarOcomb: return &decode_kernel<HD, kVarOcomb>;
    case kVarPfsm: return &decode_kernel<HD, kVarPfsm>;
    case kVarOcomb | kVarPfsm: return &decode_kernel<HD, kVarOcomb | kVarPfsm>;
    default: return &decode_kernel<HD, 0>;
  }
}
DecodeKernel kernel_for(int hd, int variant) { return hd == 64 ? kernel_for<64>(variant) : kernel_for<128>(variant); }
int variant_of(const DecodeParams& p) { return (p.o_combine ? kVarOcomb : 0) | (p.pf_blocks > 0 ? kVarPfsm : 0); }

}  // namespace

size_t decode_smem_bytes(int max_k, int d, int hd) { return SmemLayout(max_k, d, hd).total; }

cudaError_t decode_grid_blocks(int hd, size_t smem, int* blocks) {
  if (!blocks || (hd != 64 && hd != 128)) return cudaErrorInvalidValue;
  *blocks = 0;
  int dev = 0, sms = 0, per_sm = 0;
  cudaError_t e = cudaGetDevice(&dev);
  if (e == cudaSuccess) e = cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev);
  for (int v = 0; v <= (kVarOcomb | kVarPfsm); ++v)
    if (e == cudaSuccess) e = cudaFuncSetAttribute(kernel_for(hd, v), cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem));
  // every variant takes the same shared memory and registers (__launch_bounds__(kThreads, 1))
  if (e == cudaSuccess) e = cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel_for(hd, 0), kThreads, smem);
  if (e != cudaSuccess) return e;
  *blocks = sms * std::min(per_sm, 1);  // one block per SM: the work split assumes 16 warps per SM
  return cudaSuccess;
}

std::string unsupported_reason(int d, int ffn, int n_q, int n_kv, int hd, int group) {
  if (group != kGroup)
    return "cfg.group = " + std::to_string(group) +
           ": the repacked layout maps one 128-input group onto 4 mma k-blocks of 32; only group 128 is supported";
  if (hd != 64 && hd != 128)
    return "cfg.hd = " + std::to_string(hd) + ": the attention stage supports head dims 64 and 128 (hd/32 per lane)";
  if (n_kv < 1 || n_q % n_kv != 0 || n_q / n_kv > kMaxRep)
    return "n_q / n_kv = " + std::to_string(n_q) + " / " + std::to_string(n_kv) +
           ": the attention stage supports 1.." + std::to_string(kMaxRep) + " query heads per KV head";
  if (d % kGroup || ffn % kGroup || (n_q * hd) % kGroup)
    return "d, ffn and n_q * hd must be multiples of 128 (the GEMV inputs are whole groups)";
  // Shared memory: the longest GEMV input as fp32, its limbs (at most 4 bytes per input) and a
  // gain (2 bytes per input) beside the rings and the attention scratch, within sm_90's 227 KB per
  // block (opt-in).
  const long long max_k = std::max({(long long)d, (long long)ffn, (long long)n_q * hd});
  constexpr size_t kSm90SmemPerBlock = 227 * 1024;
  if (max_k > (1 << 20) || decode_smem_bytes(int(max_k), d, hd) > kSm90SmemPerBlock) {
    long long fit = 0;  // the longest input (a multiple of 128) that fits, d as given (or as long)
    for (long long k = kGroup;
         k <= (1 << 20) && decode_smem_bytes(int(k), int(std::min<long long>(d, k)), hd) <= kSm90SmemPerBlock;
         k += kGroup)
      fit = k;
    return "the longest GEMV input (" + std::to_string(max_k) + ") does not fit in shared memory (at most " +
           std::to_string(fit) + " at hd " + std::to_string(hd) + ": 227 KB per block)";
  }
  return "";
}

cudaError_t launch_decode(const DecodeParams& p, int blocks, size_t smem, cudaStream_t stream) {
  if (blocks < 1 || !p.layers || !p.plans || p.n_layers < 1 || (p.hd != 64 && p.hd != 128) || p.n_q / p.n_kv > kMaxRep ||
      p.pf_blocks < 0 || p.pf_blocks >= blocks || (p.pf_blocks > 0 && (p.barrier_mode != 1 || p.split_barrier != 2)) ||
      p.max_chunks != attn_max_chunks(blocks - p.pf_blocks, p.n_kv) ||
      p.pos < 0 || p.pos >= p.max_seq)
    return cudaErrorInvalidValue;
  DecodeParams args = p;
  void* kargs[] = {&args};
  return cudaLaunchCooperativeKernel(kernel_for(p.hd, variant_of(p)), dim3(unsigned(blocks)), dim3(kThreads), kargs, smem, stream);
}

}  // namespace nibble::megakernel
