// dataflow_kernel.h: the dataflow megakernel (v2, issue 21 step 3; NOTES.md "v2: the dataflow
// design") as its host code sees it: the per-CTA segment lists (dataflow_plan.h's schedule in device
// form), the kernel's parameters and its launcher. The kernel (dataflow_kernel.cu) runs one decode
// step for one sequence on clusters of 2 CTAs, each CTA a producer warp streaming its segments'
// weights and K/V rows into a page pool (page_stream.cuh) and kConsumerWarps consumer warps that
// wait for the published rows a segment reads (dataflow_sync.cuh), build its input
// (dataflow_inputs.cuh), multiply their K half and sum it with the partner's (segment_gemv.cuh), or
// run an attention item (attention_item.cuh), then publish.
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>

#include "dataflow_plan.h"
#include "megakernel.h"

namespace nibble::megakernel::v2 {

/** Consumer warps per CTA (warp 0 is the producer; the page pool's page count is a multiple): 15,
 *  the default (16 warps in all, as v1's GEMV, whose consumer rate the design's prediction assumes;
 *  128 registers, 40 bytes of spills), or 8 (156 registers, none): DataflowParams::consumer_warps,
 *  NIBBLE_DF_WARPS at build_model for an A/B. */
inline constexpr int kConsumerWarps = 15;
/** Producer lanes of the layers' segments by default (DataflowParams::lanes): one. More lanes lift the page
 *  handshake's rate (bench, consumer-nomath: 3.6 -> 10.5 TB/s at 8) but slow the decode step
 *  (H100, 2026-12-05: 1599.5 us at 1 lane, 1635.8 at 2, 1653.6 at 4, 1661.6 at 8; NOTES.md "v2.1"; again
 *  at v2.3, 2026-12-06: 1440.0, 1481.5, 1499.4, 1521.5). */
inline constexpr uint32_t kProducerLanes = 1;
/** Producer lanes of the LM head's segment by default (DataflowParams::lanes[kHead]): the head is the
 *  step's last segment, no release and no wait follows it, and at one lane its stream ran at the
 *  lane's issue rate (H100, v2.3's trace: 82 us, 64 of them waiting for pages; NOTES.md "v2.5"). */
inline constexpr uint32_t kHeadProducerLanes = 8;
/** Producer lanes of gate|up's segments by default (DataflowParams::lanes[kGu]): the widest layer
 *  matrix, whose pages waited 1.99 us of its 8.33 us run at one lane (H200, v2.7's trace), where more
 *  lanes for every kind slow the step (above): H200, 2026-12-06, same call: 1319.6 us at 1 lane,
 *  1272.4 at 2, 1266.5 at 4 (reports/h200/session10-f1b6328/). */
inline constexpr uint32_t kGateUpProducerLanes = 4;
/** Whether the kernel is built for w consumer warps. */
inline bool dataflow_warps_supported(int w) { return w == 8 || w == 15; }
/** What a launch runs (DataflowParams::mode; NIBBLE_DF_MODE at build_model). kModeDecode: the decode
 *  step. For the bench only (bench/bench_dataflow.cu; the logits are meaningless): kModeGemv, every
 *  matrix segment's stream and GEMV, without waits, input builds, publications or attention items
 *  (the weight stream with the consumers: the GEMV's TB/s over all layers); kModeConsumer, the same
 *  with the producer completing each page without copying into it (the consumers from shared memory
 *  alone); and two parts of that consumer, as v1's GEMV experiments split its unit loop (NOTES.md
 *  "v9"): kModeConsumerNoMath, each page waited for and released with nothing read (the pool's
 *  handshake alone), and kModeConsumerNoFlush, the unit math without a page's row sums and their
 *  store (what the per-page flush costs). Modes other than kModeDecode are built for hd 128
 *  only. */
enum DataflowMode : int { kModeDecode, kModeGemv, kModeConsumer, kModeConsumerNoMath, kModeConsumerNoFlush };
/** Whether the kernel is built for mode m at head dim hd. */
inline bool dataflow_mode_supported(int m, int hd) { return m == kModeDecode || (m >= kModeGemv && m <= kModeConsumerNoFlush && hd == 128); }
/** NIBBLE_DF_MODE's name of mode m ("decode", "gemv", "consumer", "consumer-nomath", "consumer-noflush"). */
inline const char* dataflow_mode_name(int m) {
  static const char* const names[] = {"decode", "gemv", "consumer", "consumer-nomath", "consumer-noflush"};
  return m >= 0 && m <= kModeConsumerNoFlush ? names[m] : "?";
}

/** Most waits of one segment (an attention item's q, k and v rows: three ranges at most). */
inline constexpr int kMaxWaits = 3;

/** dataflow::Wait in device form: counters [lo, hi) of kind `source` (a SegKind), publication of
 *  layer `layer`. */
struct DevWait {
  uint16_t source = 0, layer = 0, lo = 0, hi = 0;
};

/** One segment of a CTA's list (dataflow::Segment in device form). Matrix kinds: units of tiles
 *  [tile0, tile1) x groups [g0, g1) of the layer's tile-major repacked matrix at w (`groups` per
 *  tile). kAttn: KV head kv_head, sequence chunk `chunk` of DataflowParams::chunks (positions from
 *  the step's pos), w unused. */
struct DevSegment {
  const uint4* w = nullptr;
  uint32_t tile0 = 0, tile1 = 0;
  uint16_t g0 = 0, g1 = 0, groups = 0;
  uint16_t kind = 0, layer = 0, kv_head = 0, chunk = 0, n_waits = 0;
  DevWait waits[kMaxWaits];
};

/** A CTA's list: segments [first, first + count) of DataflowParams::segs, and the rows
 *  [resid0, resid1) of the d-row outputs (o, down) it finishes: layer 0's residual it writes from
 *  the embedding. */
struct DevCta {
  int first = 0, count = 0, resid0 = 0, resid1 = 0;
};

/** What a layer's segments read besides their weights. */
struct DataflowLayer {
  const uint16_t* in_norm = nullptr;    ///< (d) bf16
  const uint16_t* post_norm = nullptr;  ///< (d) bf16
  uint16_t* k_cache = nullptr;          ///< sequence 0's (n_kv, max_seq, hd) bf16
  uint16_t* v_cache = nullptr;
};

/** Everything the kernel reads. Activations fp32. Counters: SegKind k's block b at
 *  counters[k * counter_stride + b] (matrix kinds: one per cluster, released by both its CTAs once a
 *  layer; kAttn: one per KV head, released by each of its `chunks` items once a layer), zeroed once
 *  at build and never reset: launch n waits for publication(n, n_layers, layer) (dataflow_sync.cuh). */
struct DataflowParams {
  const DevSegment* segs = nullptr;
  const DevCta* ctas = nullptr;          ///< (2 x clusters)
  const DataflowLayer* layers = nullptr; ///< (n_layers)
  int n_layers = 0, d = 0, ffn = 0, n_q = 0, n_kv = 0, hd = 0, vocab = 0, max_seq = 0;
  int clusters = 0;
  int consumer_warps = kConsumerWarps;  ///< 8 or 15 (dataflow_warps_supported): picks the kernel
  /** A tile's page sums added in page order after the segment (bitwise the same run to run), or with
   *  shared-memory fp32 atomics in the order the warps get there (NIBBLE_DF_ORDER=0: an A/B switch). */
  bool ordered_sums = true;
  /** The CTA's segment descriptors pulled into L2 at the start (one bulk prefetch): each is read where
   *  its segment starts, by the producer and the consumers, and the grader flushes L2 before a step
   *  (PC sampling, H100 2026-12-07: 2.7% of the warps' samples waited on those loads). NIBBLE_DF_SEGPF=0
   *  turns it off (A/B). */
  bool prefetch_segments = true;
  int chunks = 0;              ///< attention chunks per KV head (dataflow::Plan::attn_chunks)
  uint32_t n_pages = 0;        ///< the page pool's pages (a multiple of kConsumerWarps)
  uint32_t max_tiles = 0;      ///< most tiles of one cluster's matrix segment (the cluster sum's peer buffers)
  uint32_t max_pages = 0;      ///< most pages of one CTA's matrix segment (the cluster sum's page sums)
  int max_k = 0;               ///< the longest GEMV input (d, ffn, n_q hd)
  float eps = 0.f;
  SourceTriple embed;          ///< the token's row (layer 0's input); the LM head's weights are repacked
  const uint16_t* final_norm = nullptr;
  const float2* rope = nullptr;  ///< (max_seq, hd/2) {cos, sin}
  float* h0 = nullptr;         ///< (d) the residual before o-proj (after the previous layer's down)
  float* h1 = nullptr;         ///< (d) the residual after o-proj
  float* qkv = nullptr;        ///< (n_q + 2 n_kv) hd
  float* gu = nullptr;         ///< (2 ffn) Interleave8
  float* part = nullptr;       ///< (n_q, chunks, partial_floats(hd)) the attention items' partials
  unsigned* counters = nullptr;
  int counter_stride = 0;      ///< max(clusters, n_kv)
  // this launch
  const int64_t* token = nullptr;
  int pos = 0;
  float* logits = nullptr;     ///< (vocab)
  unsigned launch = 0;         ///< earlier launches on these counters
  size_t kv_seq_off = 0;       ///< elements from sequence 0's cache rows to this sequence's
  /** Optional (NIBBLE_DF_TRACE): clock64 marks of the last launch, kTraceMarks per segment (indexed as
   *  segs) then kTraceCtaMarks per CTA (dataflow_trace_*). nullptr: no tracing. */
  long long* trace = nullptr;
  size_t trace_cta0 = 0;       ///< where the CTAs' marks start: segments x kTraceMarks
  int mode = kModeDecode;      ///< DataflowMode (dataflow_mode_supported): picks the kernel too (last: the
                               ///< decode kernel's parameter offsets stay those it was tuned with)
  /** The producer warp's lanes issuing pages at once per segment kind (dataflow::SegKind; 1..32, at
   *  most n_pages; page_stream.cuh; NIBBLE_DF_PRODUCERS at build_model for an A/B): kProducerLanes,
   *  gate|up's kGateUpProducerLanes and the head's kHeadProducerLanes by default. */
  uint32_t lanes[dataflow::kSegKinds] = {kProducerLanes, kProducerLanes,       kProducerLanes,
                                         kGateUpProducerLanes, kProducerLanes, kHeadProducerLanes};
};

/** A segment's trace values (NIBBLE_DF_TRACE), kTraceMarks per segment: clock64 marks where its
 *  consumers start it, its waits are met, its input is built (an attention item's: q rotated and this
 *  step's k and v appended), its pages are consumed (every consumer
 *  warp past the barrier after its last page), the first rows of its partner's half of the sums are
 *  summed (before their st.async), that half is sent and the partner's half has landed (the cluster
 *  sum's st.async and mbarrier wait; an attention item has no partner: all three at "consumed"), its outputs are written (the rows, or the attention merge's
 *  partial, and the barrier after), it is published (the release issued: what the run costs warp 0
 *  before its next segment): warp 0's (lane 0's) view; then the cycles each consumer warp w waited for
 *  its pages to land, at kMarkPageWaits + w (a wait of warp 0's alone hid a stream behind for the
 *  others: page j goes to warp (k + j) % W), and the clock64 at which warp w was done with its pages
 *  (an attention item's: and position pos), at kMarkPagesDone + w, before the barrier that ends
 *  "consumed". */
inline constexpr int kTraceWarps = 16;  ///< per-warp slots per segment: at least any consumer_warps
enum TraceMark : int {
  kMarkStart, kMarkWaited, kMarkBuilt, kMarkConsumed, kMarkSummed, kMarkSent, kMarkExchanged, kMarkFinished, kMarkPublished,
  kMarkPageWaits, kMarkPagesDone = kMarkPageWaits + kTraceWarps, kTraceMarks = kMarkPagesDone + kTraceWarps
};
/** Per CTA, after the segments' marks: the producer's start, its end (every copy issued), and its
 *  cycles held by waits for a free page (per batch of pages, its slowest lane's wait). */
inline constexpr int kTraceCtaMarks = 3;
/** Values of DataflowParams::trace for n_segs segments over n_ctas CTAs. */
inline size_t dataflow_trace_values(size_t n_segs, size_t n_ctas) { return n_segs * kTraceMarks + n_ctas * kTraceCtaMarks; }

/** Shared-memory bytes besides the page pool for head dim hd and w consumer warps: XQuant records,
 *  the input / attention scratch (attn_weights: n_q x chunks, the attention merge's), the
 *  cluster sum and the RoPE row of pos (hd / 2 float2). */
size_t dataflow_fixed_smem(int hd, int w, int max_k, uint32_t max_tiles, uint32_t max_pages, int attn_weights);

/** Clusters of 2 CTAs of 32 (1 + w) threads and `smem` bytes that can be resident at once on this
 *  device (cudaOccupancyMaxActiveClusters); hd (64 or 128) and w (dataflow_warps_supported) pick
 *  the kernel. */
cudaError_t dataflow_max_clusters(int hd, int w, size_t smem, int* clusters);

/** The kernel's static shared memory (sm_90 reserves 1 KB of each cluster block's), which the
 *  dynamic shared memory must leave room for. */
cudaError_t dataflow_static_smem(int hd, int w, size_t* bytes);

/** One decode step: 2 x p.clusters CTAs in clusters of 2 along z, every CTA resident at once, smem
 *  bytes of dynamic shared memory (dataflow_fixed_smem + the pool's; dataflow_max_clusters has set
 *  the kernel's limit to at least that). While *cooperative, a cooperative launch; if the driver
 *  answers cudaErrorNotSupported or cudaErrorInvalidValue (no cooperative clusters), *cooperative
 *  becomes false and this and
 *  later launches are plain cluster launches (the grid is at most dataflow_max_clusters: resident on
 *  a GPU nothing else uses). Any other error is returned as it is: cudaErrorCooperativeLaunchTooLarge
 *  says the grid cannot be co-resident, where a plain launch could hang. cudaErrorInvalidValue
 *  without a launch when p.hd is not 64 or 128 or p.consumer_warps is not supported. With p.trace
 *  set, the traced decode kernel (its own instantiation; dataflow_set_smem(..., traced = true)). */
cudaError_t launch_dataflow(const DataflowParams& p, size_t smem, cudaStream_t stream, bool* cooperative);

/** The kernel's function of (hd, w, mode, traced), for cudaFuncSetAttribute at build (each kernel
 *  of a mode, and the traced decode kernel, needs its own dynamic shared-memory limit;
 *  dataflow_max_clusters sets the untraced decode kernel's); cudaErrorInvalidValue when it is not
 *  built. */
cudaError_t dataflow_set_smem(int hd, int w, int mode, bool traced, size_t smem);

}  // namespace nibble::megakernel::v2
