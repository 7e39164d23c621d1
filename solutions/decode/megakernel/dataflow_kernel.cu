// dataflow_kernel.cu: the dataflow megakernel's kernel and launcher (dataflow_kernel.h; NOTES.md
// "v2: the dataflow design"). sm_90a: clusters, st.async, bulk copies.
//
// Shared memory, in order: the page pool (n_pages pages and their mbarriers), the XQuant records of
// the longest input, the scratch (the input builds' fp32 vector and sums, or an attention item's q,
// k, v and per-warp states: never both at once, the consumers run one segment at a time), the
// cluster sum, the RoPE table's row of this step's pos (rope_row_bytes).
#include <cooperative_groups.h>

#include <type_traits>

#include "attention_item.cuh"
#include "dataflow_inputs.cuh"
#include "dataflow_kernel.h"
#include "dataflow_sync.cuh"
#include "page_stream.cuh"
#include "segment_gemv.cuh"

namespace nibble::megakernel::v2 {

namespace {

namespace df = dataflow;

/** Scratch bytes for head dim HD and W consumer warps, the longest input max_k and the attention
 *  merge's attn_weights weights (16-byte multiple). */
template <int HD, int W>
NIBBLE_MK_HD size_t scratch_bytes(int max_k, int attn_weights) {
  const size_t attn = size_t(attention_item_floats<HD, W>()) * 4;
  const size_t in = input_scratch_bytes(max_k, W, attn_weights);
  return ((in > attn ? in : attn) + 15) / 16 * 16;
}

/** Shared bytes of the RoPE row of one position ({cos, sin} for hd/2 pairs). Every layer's attention
 *  items rotate by the same row; read from global memory in each item it may be a DRAM miss per layer
 *  (the weight stream can evict it from L2 between layers) on the item's critical path: NOTES.md
 *  v2.12 has the prediction and its measurement (in another call than its base's). */
NIBBLE_MK_HD inline size_t rope_row_bytes(int hd) { return size_t(hd / 2) * sizeof(float2); }

/** Chunk c of `chunks` of the positions [0, pos]: [*s0, *s1), the counts differing by one at most. */
__device__ __forceinline__ void chunk_positions(int pos, int c, int chunks, int* s0, int* s1) {
  *s0 = int((long long)(pos + 1) * c / chunks);
  *s1 = int((long long)(pos + 1) * (c + 1) / chunks);
}

/** What the producer streams for segment s and the consumers take: a matrix segment's units, or an
 *  attention item's cached K/V rows below pos (the row at pos is this launch's: never streamed). */
__device__ __forceinline__ StreamSegment stream_of(const DevSegment& s, const DataflowParams& p) {
  StreamSegment sg;
  if (s.kind == df::kAttn) {
    int s0 = 0, s1 = 0;
    chunk_positions(p.pos, s.chunk, p.chunks, &s0, &s1);
    const DataflowLayer& L = p.layers[s.layer];
    const size_t head = p.kv_seq_off + size_t(s.kv_head) * size_t(p.max_seq) * size_t(p.hd);
    sg.w = reinterpret_cast<const uint4*>(L.k_cache + head);
    sg.v = reinterpret_cast<const uint4*>(L.v_cache + head);
    sg.tile0 = uint32_t(s0);
    sg.tile1 = uint32_t(s1 < p.pos ? s1 : p.pos);
    sg.kind = kStreamKv;
    sg.row_bytes = uint32_t(2 * p.hd);
  } else {
    sg.w = s.w;
    sg.tile0 = s.tile0;
    sg.tile1 = s.tile1;
    sg.g0 = s.g0;
    sg.g1 = s.g1;
    sg.groups = s.groups;
    sg.kind = kStreamWeights;
  }
  return sg;
}

/** Publishers per counter of kind k: both CTAs of a cluster, or a KV head's chunks. */
__device__ __forceinline__ unsigned publishers(int k, const DataflowParams& p) {
  return k == df::kAttn ? unsigned(p.chunks) : unsigned(df::kClusterSize);
}

// segment_gemv writes its five marks at tr + kMarkConsumed, attention_item its six at tr + kMarkBuilt.
static_assert(kMarkConsumed == kMarkBuilt + 1 && kMarkSummed == kMarkConsumed + 1 && kMarkSent == kMarkConsumed + 2 && kMarkExchanged == kMarkConsumed + 3 &&
                  kMarkFinished == kMarkConsumed + 4,
              "the segment's inner marks are consecutive");

/** p.trace in the traced kernel (TRACE: its own instantiation, so that the decode kernel graded
 *  untraced holds no mark, no clock read and no test of the pointer), nullptr in every other. */
template <bool TRACE>
__device__ __forceinline__ long long* trace_of(const DataflowParams& p) {
  if constexpr (TRACE) return p.trace;
  return nullptr;
}

/** Consumer warp w of W, all lanes: the CTA's segments in order (MODE: DataflowMode; outside
 *  kModeDecode no waits, input builds, publications or attention items; TRACE: trace_of). In
 *  kModeDecode first the RoPE row of pos into rope_s and a consumers' barrier: one load from DRAM a
 *  step (the grader flushes L2), before the first segment's trace mark. */
template <int HD, int W, int MODE, bool TRACE>
__device__ __forceinline__ void consume(const DataflowParams& p, const DevCta& me, const PagePool& pool,
                                        unsigned char* xq, float* xs, float* red, const ClusterSum& cs, float2* rope_s,
                                        uint32_t rank, int cluster, uint32_t w) {
  static_assert(W <= kTraceWarps, "a trace keeps one page-wait slot per consumer warp");
  uint32_t k = 0, seg_no = 0;
  const int rep = p.n_q / p.n_kv;
  if constexpr (MODE == kModeDecode) {
    const float2* row = p.rope + size_t(p.pos) * (HD / 2);
    for (int i = int(w * 32 + (threadIdx.x & 31)); i < HD / 2; i += 32 * W) rope_s[i] = row[i];
    consumers_sync<W>();  // rope_s whole before any item reads it
  }
  long long* const trace = trace_of<TRACE>(p);
  for (int i = 0; i < me.count; ++i) {
    long long* const seg = trace ? trace + size_t(me.first + i) * kTraceMarks : nullptr;  // this segment's marks
    long long* const tr = seg && w == 0 && (threadIdx.x & 31) == 0 ? seg : nullptr;  // warp 0's view
    long long* const done = seg ? seg + kMarkPagesDone : nullptr;                     // every warp's
    // After the publish: warp 0's mark, and every warp's page wait.
    auto published = [&](long long waited) {
      if (tr) tr[kMarkPublished] = clock64();
      if (seg && (threadIdx.x & 31) == 0) seg[kMarkPageWaits + w] = waited;
    };
    if (tr) tr[kMarkStart] = clock64();
    const DevSegment* sp = p.segs + me.first + i;
    const DevSegment s = *sp;
    if constexpr (MODE != kModeDecode) {
      constexpr int kPart = MODE == kModeConsumerNoMath ? kGemvPartNoMath : MODE == kModeConsumerNoFlush ? kGemvPartNoFlush : kGemvPartAll;
      if (s.kind != df::kAttn)
        segment_gemv<W, kPart>(pool, stream_of(s, p), k, w, xq, cs, seg_no++, rank, p.qkv, 0, nullptr, p.ordered_sums);
      continue;
    }
    const StreamSegment sg = stream_of(s, p);
    for (int j = 0; j < s.n_waits; ++j) {
      const DevWait wt = sp->waits[j];  // from global memory: a runtime index into the copy would put it on the stack
      wait_published<W>(p.counters + size_t(wt.source) * p.counter_stride, wt.lo, wt.hi,
                        publishers(wt.source, p) * publication(p.launch, unsigned(p.n_layers), wt.layer), w);
    }
    if (tr) tr[kMarkWaited] = clock64();
    const DataflowLayer& L = p.layers[s.layer];
    if (s.kind == df::kAttn) {
      AttnItem it;
      const int h = s.kv_head;
      it.q = p.qkv + size_t(h) * rep * HD;
      it.k_new = p.qkv + size_t(p.n_q) * HD + size_t(h) * HD;
      it.v_new = p.qkv + size_t(p.n_q + p.n_kv) * HD + size_t(h) * HD;
      it.rope = rope_s;
      const size_t row = p.kv_seq_off + (size_t(h) * p.max_seq + size_t(p.pos)) * HD;
      it.k_slot = L.k_cache + row;
      it.v_slot = L.v_cache + row;
      it.part = p.part + (size_t(h) * rep * p.chunks + s.chunk) * partial_floats(HD);
      it.part_stride = p.chunks * partial_floats(HD);
      it.rep = rep;
      it.pos = p.pos;
      chunk_positions(p.pos, s.chunk, p.chunks, &it.s0, &it.s1);
      const long long waited = attention_item<HD, W>(pool, sg, k, w, it, xs, tr ? tr + kMarkBuilt : nullptr, done);
      publish<W>(p.counters + size_t(df::kAttn) * p.counter_stride + h, w, /*synced=*/true);
      published(waited);
      continue;
    }
    float* y = nullptr;
    const float* resid = nullptr;
    int rows = 0;
    switch (s.kind) {
      case df::kQkv:
        if (s.layer == 0)
          embed_norm_input<W>(p.embed, p.vocab, p.token, p.d, L.in_norm, p.eps, s.g0, s.g1, xs, red, xq, p.h0, me.resid0,
                              me.resid1, w);
        else
          norm_input<W>(p.h0, p.d, L.in_norm, p.eps, s.g0, s.g1, xs, red, xq, w);
        y = p.qkv;
        rows = (p.n_q + 2 * p.n_kv) * HD;
        break;
      case df::kO:
        attn_input<HD, W>(p.part, p.chunks, p.n_q, s.g0, s.g1, xs, red + W, xq, w);
        y = p.h1;
        resid = p.h0;
        rows = p.d;
        break;
      case df::kGu:
        norm_input<W>(p.h1, p.d, L.post_norm, p.eps, s.g0, s.g1, xs, red, xq, w);
        y = p.gu;
        rows = 2 * p.ffn;
        break;
      case df::kDown:
        swiglu_input<W>(p.gu, p.ffn, s.g0, s.g1, xs, xq, w);
        y = p.h0;
        resid = p.h1;
        rows = p.d;
        break;
      default:  // kHead: logits = W_embed RMSNorm(h) * final_norm
        norm_input<W>(p.h0, p.d, p.final_norm, p.eps, s.g0, s.g1, xs, red, xq, w);
        y = p.logits;
        rows = p.vocab;
        break;
    }
    if (tr) tr[kMarkBuilt] = clock64();
    const long long waited =
        segment_gemv<W>(pool, sg, k, w, xq, cs, seg_no++, rank, y, rows, resid, p.ordered_sums, tr ? tr + kMarkConsumed : nullptr,
                        done);
    if (s.kind != df::kHead) publish<W>(p.counters + size_t(s.kind) * p.counter_stride + cluster, w, /*synced=*/true);
    published(waited);
  }
}

/** Start pulling segments [s, s + n) into L2 (DataflowParams::prefetch_segments): the 16-byte aligned
 *  whole lines inside them (cp.async.bulk.prefetch.L2 takes 16-byte multiples), no wait. */
__device__ __forceinline__ void prefetch_segments_l2(const DevSegment* s, int n) {
  const uintptr_t lo = (reinterpret_cast<uintptr_t>(s) + 15) & ~uintptr_t(15);
  const uintptr_t hi = reinterpret_cast<uintptr_t>(s + n) & ~uintptr_t(15);
  if (hi > lo) sol::bulk_prefetch_l2(reinterpret_cast<const void*>(lo), uint32_t(hi - lo));
}

template <int HD, int W, int MODE, bool TRACE>
__global__ void __launch_bounds__(32 * (1 + W), 1) dataflow_kernel(const DataflowParams p) {
  NIBBLE_DYNAMIC_SMEM(smem, 16);
  cooperative_groups::cluster_group cluster = cooperative_groups::this_cluster();
  const PagePool pool = page_pool_init(smem, p.n_pages, W);
  unsigned char* xq = smem + page_pool_bytes(p.n_pages);
  float* xs = reinterpret_cast<float*>(xq + xquant_bytes(p.max_k));
  float* red = xs + p.max_k;
  unsigned char* const cs_smem = reinterpret_cast<unsigned char*>(xs) + scratch_bytes<HD, W>(p.max_k, p.n_q * p.chunks);
  const ClusterSum cs = cluster_sum_init(cs_smem, p.max_tiles, p.max_pages);
  float2* const rope_s = reinterpret_cast<float2*>(cs_smem + cluster_sum_bytes(p.max_tiles, p.max_pages));
  cluster.sync();  // both CTAs' mbarriers initialised before either copies or sends
  const int cta = int(blockIdx.z);
  const DevCta me = p.ctas[cta];
  const int warp = int(threadIdx.x >> 5);
  if (p.prefetch_segments && threadIdx.x == 0 && me.count > 0) prefetch_segments_l2(p.segs + me.first, me.count);
  if (warp == 0) {  // the producer warp, every lane (produce_segment)
    const uint64_t policy = sol::policy_evict_first();
    uint32_t k = 0;
    long long stalled = 0;
    long long* const trace = trace_of<TRACE>(p);
    long long* tr = trace ? trace + p.trace_cta0 + size_t(cta) * kTraceCtaMarks : nullptr;
    if (tr && threadIdx.x == 0) tr[0] = clock64();
    for (int i = 0; i < me.count; ++i) {
      const DevSegment& s = p.segs[me.first + i];
      const uint32_t lanes = p.lanes[s.kind];
      if constexpr (MODE == kModeDecode)
        stalled += produce_segment(pool, stream_of(s, p), k, policy, lanes, tr != nullptr);
      else if (s.kind != df::kAttn)
        stalled += produce_segment<MODE == kModeGemv>(pool, stream_of(s, p), k, policy, lanes, tr != nullptr);
    }
    if (tr && threadIdx.x == 0) tr[1] = clock64(), tr[2] = stalled;  // the warp's, the same in every lane
  } else {
    consume<HD, W, MODE, TRACE>(p, me, pool, xq, xs, red, cs, rope_s, cluster.block_rank(), cta / df::kClusterSize,
                                uint32_t(warp - 1));
  }
  cluster.sync();  // no CTA leaves while its partner may still store into it
}

template <int HD, int W, int MODE, bool TRACE>
cudaError_t set_smem(size_t smem) {
  return cudaFuncSetAttribute(dataflow_kernel<HD, W, MODE, TRACE>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem));
}

cudaLaunchConfig_t cluster_config(int clusters, int w, size_t smem, cudaStream_t stream, cudaLaunchAttribute* attrs,
                                  bool cooperative) {
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(1, 1, unsigned(clusters * df::kClusterSize));
  cfg.blockDim = dim3(unsigned(32 * (1 + w)));
  cfg.dynamicSmemBytes = smem;
  cfg.stream = stream;
  attrs[0].id = cudaLaunchAttributeClusterDimension;
  attrs[0].val.clusterDim.x = 1;
  attrs[0].val.clusterDim.y = 1;
  attrs[0].val.clusterDim.z = unsigned(df::kClusterSize);
  attrs[1].id = cudaLaunchAttributeCooperative;
  attrs[1].val.cooperative = 1;
  cfg.attrs = attrs;
  cfg.numAttrs = cooperative ? 2 : 1;
  return cfg;
}

template <int HD, int W, int MODE, bool TRACE>
cudaError_t launch_hd(const DataflowParams& p, size_t smem, cudaStream_t stream, bool* cooperative) {
  cudaLaunchAttribute attrs[2];
  if (*cooperative) {
    const cudaLaunchConfig_t cfg = cluster_config(p.clusters, W, smem, stream, attrs, true);
    const cudaError_t e = cudaLaunchKernelEx(&cfg, dataflow_kernel<HD, W, MODE, TRACE>, p);
    // Refused as a configuration (NotSupported, or InvalidValue from a driver that takes no
    // cooperative clusters; a configuration wrong in another way fails the plain launch too).
    // Never on CooperativeLaunchTooLarge: the grid could not be co-resident, and a plain launch
    // of it could hang.
    if (e != cudaErrorNotSupported && e != cudaErrorInvalidValue) return e;
    (void)cudaGetLastError();  // a refused configuration, not a sticky error
    *cooperative = false;
  }
  const cudaLaunchConfig_t cfg = cluster_config(p.clusters, W, smem, stream, attrs, false);
  return cudaLaunchKernelEx(&cfg, dataflow_kernel<HD, W, MODE, TRACE>, p);
}

template <int HD, int W, int MODE, bool TRACE>
cudaError_t static_smem_hd(size_t* bytes) {
  cudaFuncAttributes a{};
  const cudaError_t e = cudaFuncGetAttributes(&a, dataflow_kernel<HD, W, MODE, TRACE>);
  *bytes = a.sharedSizeBytes;
  return e;
}

template <int HD, int W, int MODE, bool TRACE>
cudaError_t max_clusters_hd(size_t smem, int* clusters) {
  if (const cudaError_t e = set_smem<HD, W, MODE, TRACE>(smem); e != cudaSuccess) return e;
  cudaLaunchAttribute attrs[2];
  const cudaLaunchConfig_t cfg = cluster_config(1, W, smem, nullptr, attrs, false);
  return cudaOccupancyMaxActiveClusters(clusters, dataflow_kernel<HD, W, MODE, TRACE>, &cfg);
}

}  // namespace

/** f(HD, W, MODE, TRACE) (std::integral_constant) for the kernel built for head dim hd, w consumer
 *  warps, `mode` and, in kModeDecode, `traced` (trace_of; the bench's modes are never traced), or
 *  `otherwise` when none is (dataflow_warps_supported, hd 64 or 128, dataflow_mode_supported): the
 *  one place the run-time choice meets the template arguments. */
template <class R, class F>
R with_kernel(int hd, int w, int mode, bool traced, R otherwise, F&& f) {
  using std::integral_constant;
  const std::false_type untraced;
  const auto at_mode = [&](auto HD, auto W) -> R {
    if (mode == kModeDecode)
      return traced ? f(HD, W, integral_constant<int, kModeDecode>{}, std::true_type{})
                    : f(HD, W, integral_constant<int, kModeDecode>{}, untraced);
    if constexpr (HD() == 128) {
      if (mode == kModeGemv) return f(HD, W, integral_constant<int, kModeGemv>{}, untraced);
      if (mode == kModeConsumer) return f(HD, W, integral_constant<int, kModeConsumer>{}, untraced);
      if (mode == kModeConsumerNoMath) return f(HD, W, integral_constant<int, kModeConsumerNoMath>{}, untraced);
      if (mode == kModeConsumerNoFlush) return f(HD, W, integral_constant<int, kModeConsumerNoFlush>{}, untraced);
    }
    return otherwise;
  };
  if (hd == 64 && w == 8) return at_mode(integral_constant<int, 64>{}, integral_constant<int, 8>{});
  if (hd == 64 && w == 15) return at_mode(integral_constant<int, 64>{}, integral_constant<int, 15>{});
  if (hd == 128 && w == 8) return at_mode(integral_constant<int, 128>{}, integral_constant<int, 8>{});
  if (hd == 128 && w == 15) return at_mode(integral_constant<int, 128>{}, integral_constant<int, 15>{});
  return otherwise;
}

size_t dataflow_fixed_smem(int hd, int w, int max_k, uint32_t max_tiles, uint32_t max_pages, int attn_weights) {
  const size_t scratch = with_kernel(hd, w, kModeDecode, false, size_t(0),
                                     [&](auto HD, auto W, auto, auto) { return scratch_bytes<HD(), W()>(max_k, attn_weights); });
  return xquant_bytes(max_k) + scratch + cluster_sum_bytes(max_tiles, max_pages) + rope_row_bytes(hd);
}

cudaError_t dataflow_max_clusters(int hd, int w, size_t smem, int* clusters) {
  *clusters = 0;
  return with_kernel(hd, w, kModeDecode, false, cudaErrorInvalidValue,
                     [&](auto HD, auto W, auto M, auto T) { return max_clusters_hd<HD(), W(), M(), T()>(smem, clusters); });
}

cudaError_t dataflow_static_smem(int hd, int w, size_t* bytes) {
  *bytes = 0;
  return with_kernel(hd, w, kModeDecode, false, cudaErrorInvalidValue,
                     [&](auto HD, auto W, auto M, auto T) { return static_smem_hd<HD(), W(), M(), T()>(bytes); });
}

cudaError_t launch_dataflow(const DataflowParams& p, size_t smem, cudaStream_t stream, bool* cooperative) {
  return with_kernel(p.hd, p.consumer_warps, p.mode, p.trace != nullptr, cudaErrorInvalidValue, [&](auto HD, auto W, auto M, auto T) {
    return launch_hd<HD(), W(), M(), T()>(p, smem, stream, cooperative);
  });
}

cudaError_t dataflow_set_smem(int hd, int w, int mode, bool traced, size_t smem) {
  return with_kernel(hd, w, mode, traced, cudaErrorInvalidValue,
                     [&](auto HD, auto W, auto M, auto T) { return set_smem<HD(), W(), M(), T()>(smem); });
}

}  // namespace nibble::megakernel::v2
