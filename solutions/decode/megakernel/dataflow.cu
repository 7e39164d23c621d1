// dataflow.cu: the C ABI entry points of the "megakernel-dataflow" solution of
// megakernel-int4-weight-decode: the megakernel v2 (issue 21 step 3; NOTES.md "v2: the dataflow
// design"), a solution of its own beside v1 (megakernel.cu) until it is measured faster.
//
// build_model (untimed) checks every tensor (model_host.h), repacks every int4 triple tile-major
// (repack.cu: a tile's K half is one contiguous run, one bulk copy per page), sizes the grid (the
// clusters of 2 that can be resident at once), makes the schedule (dataflow_plan.h) and writes it in
// device form: each CTA's segment list with its waits. decode_step is one launch per sequence
// (dataflow_kernel.h); the publish counters are zeroed once and only grow, so a step resets nothing.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdlib>
#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "attention_item.cuh"  // partial_floats
#include "dataflow_kernel.h"
#include "dataflow_plan.h"
#include "megakernel.h"
#include "model_host.h"
#include "nibble/nibble.h"
#include "page_stream.cuh"
#include "solutions/common/abi_util.h"
#include "solutions/common/export.h"

namespace nibble::megakernel::v2 {

namespace {

namespace df = dataflow;
using host::DeviceAlloc;
using sol::AbiFailure;
using sol::env_switch;

[[noreturn]] void fail(nibble_status s, const std::string& msg) { throw AbiFailure(s, msg); }

struct Model {
  nibble_decode_config cfg{};
  DeviceAlloc weights;  // every repacked matrix
  DeviceAlloc scratch;  // activations, partials, counters, RoPE table, layers, segment lists
  DataflowParams params{};
  size_t smem = 0;
  unsigned launches = 0;  // launches on the counters so far (DataflowParams::launch)
  bool cooperative = true;  // until the driver refuses cooperative cluster launches (launch_dataflow)
  // NIBBLE_DF_TRACE=<file>: the last launch's marks, summarised at teardown (write_trace)
  DeviceAlloc trace;
  std::string trace_path;
  std::vector<DevSegment> segs;
  std::vector<DevCta> ctas;
};

/** NIBBLE_DF_PRODUCERS's value into lanes (per dataflow::SegKind): comma-separated items applied in
 *  order, "n" setting every kind and "kind=n" one (kind as the trace names it: qkv, attention, o,
 *  gate|up, down, head), each n 1..min(32, pages) (producer_lanes_fit). Returns what is wrong, or ""
 *  (lanes then written). */
std::string parse_producer_lanes(const std::string& value, uint32_t pages, uint32_t (&lanes)[df::kSegKinds]) {
  uint32_t out[df::kSegKinds];
  std::copy(std::begin(lanes), std::end(lanes), std::begin(out));
  std::string range = "1 to " + std::to_string(std::min(32u, pages)) + " producer lanes (this pool has " +
                      std::to_string(pages) + " pages), as n or kind=n items separated by commas, kind one of ";
  for (int i = 0; i < df::kSegKinds; ++i) range += (i ? ", " : "") + std::string(df::seg_kind_name(df::SegKind(i)));
  size_t at = 0;
  while (at <= value.size()) {
    const size_t end = std::min(value.find(',', at), value.size());
    const std::string item = value.substr(at, end - at);
    const size_t eq = item.find('=');
    const std::string kind = eq == std::string::npos ? "" : item.substr(0, eq);
    const std::string num = eq == std::string::npos ? item : item.substr(eq + 1);
    const auto n = sol::parse_whole(num, 1, 32);
    if (!n || !producer_lanes_fit(uint32_t(*n), pages)) return range;
    const long v = *n;
    int k = -1;
    for (int i = 0; i < df::kSegKinds && eq != std::string::npos; ++i)
      if (kind == df::seg_kind_name(df::SegKind(i))) k = i;
    if (eq != std::string::npos && k < 0) return "no segment kind '" + kind + "': " + range;
    for (int i = 0; i < df::kSegKinds; ++i)
      if (k < 0 || i == k) out[i] = uint32_t(v);
    at = end + 1;
  }
  std::copy(std::begin(out), std::end(out), std::begin(lanes));
  return "";
}

/** NIBBLE_DF_TRACE's summary of the last launch: per segment kind, the mean over its segments (every
 *  CTA and layer) of the consumers' wait for the rows it reads, its input build (an attention item's:
 *  q rotated, this step's k and v appended) and its GEMV or
 *  attention with the publish, that run split into its pages, the send of the partner's half of the
 *  sums, the wait for the partner's half (the cluster sum; an attention item has neither), the
 *  write (the rows, or the attention merge's partial) and the publish (TraceMark); per CTA, those summed over its step (mean and max over CTAs), its
 *  consumers' span, and its producer's span and the share of it spent waiting for a free page (a
 *  producer that waits is a stream the consumers hold back). SM cycles; us at 1.98 GHz. */
void write_trace(const Model& m) {
  const size_t n = m.segs.size(), ctas = m.ctas.size();
  std::vector<long long> t(dataflow_trace_values(n, ctas));
  SOL_CUDA(cudaMemcpy(t.data(), m.trace.get(), t.size() * 8, cudaMemcpyDeviceToHost));
  FILE* f = host::open_trace(m.trace_path, "NIBBLE_DF_TRACE");
  if (!f) return;
  const double us = 1.0 / 1980.0;
  // Per kind, mean cycles of: wait, build, run (built -> published), and the run's consume, sum,
  // send, partner, write and publish (its six parts), the first consumer warp's page wait, the
  // longest of every consumer warp's, and from "built" to the last warp past its pages.
  constexpr int kCols = 12;
  constexpr int kMarkCols = kCols - 3;
  const int from[kMarkCols] = {kMarkStart,    kMarkWaited, kMarkBuilt,     kMarkBuilt,    kMarkConsumed,
                               kMarkSummed,   kMarkSent,   kMarkExchanged, kMarkFinished};
  const int to[kMarkCols] = {kMarkWaited,   kMarkBuilt,     kMarkPublished, kMarkConsumed, kMarkSummed,
                             kMarkSent,     kMarkExchanged, kMarkFinished,  kMarkPublished};
  double sum[df::kSegKinds][kCols] = {}, count[df::kSegKinds] = {};
  double cta_sum[3] = {}, cta_max[3] = {}, span_mean = 0, span_max = 0, stall_mean = 0, prod_mean = 0;
  for (size_t c = 0; c < ctas; ++c) {
    const DevCta& me = m.ctas[c];
    double mine[3] = {};
    for (int i = me.first; i < me.first + me.count; ++i) {
      const long long* tr = t.data() + size_t(i) * kTraceMarks;
      const int k = m.segs[size_t(i)].kind;
      for (int j = 0; j < kMarkCols; ++j) sum[k][j] += double(tr[to[j]] - tr[from[j]]);
      for (int j = 0; j < 3; ++j) mine[j] += double(tr[to[j]] - tr[from[j]]);
      const auto warps_max = [&](int first) { return *std::max_element(tr + first, tr + first + m.params.consumer_warps); };
      sum[k][kMarkCols] += double(tr[kMarkPageWaits]);
      sum[k][kMarkCols + 1] += double(warps_max(kMarkPageWaits));
      sum[k][kMarkCols + 2] += double(warps_max(kMarkPagesDone) - tr[kMarkBuilt]);
      count[k] += 1;
    }
    for (int j = 0; j < 3; ++j) {
      cta_sum[j] += mine[j] / double(ctas);
      cta_max[j] = std::max(cta_max[j], mine[j]);
    }
    if (me.count > 0) {
      const double span = double(t[size_t(me.first + me.count - 1) * kTraceMarks + kMarkPublished] -
                                 t[size_t(me.first) * kTraceMarks + kMarkStart]);
      span_mean += span / double(ctas);
      span_max = std::max(span_max, span);
    }
    const long long* pr = t.data() + n * kTraceMarks + c * kTraceCtaMarks;
    prod_mean += double(pr[1] - pr[0]) / double(ctas);
    stall_mean += double(pr[2]) / double(ctas);
  }
  std::string lanes;  // "1/1/1/1/1/8": no kind's name, which the rows below start with
  for (int k = 0; k < df::kSegKinds; ++k) lanes += (k ? "/" : "") + std::to_string(m.params.lanes[k]);
  std::fprintf(f, "megakernel-dataflow trace: %zu CTAs, %d consumer warps, producer lanes %s by segment kind, %u pages; the last launch\n",
               ctas, m.params.consumer_warps, lanes.c_str(), m.params.n_pages);
  // run = consume (every warp past its pages) + sum (warp 0's first rows of the partner's sums) +
  // send (the rest of warp 0's share summed, and all of it issued with st.async) +
  // partner (the partner's half landed: its lag behind this CTA, and the exchange) + write (the rows
  // or the attention merge, and the barrier after) + publish (warp 0's release); "pages": of
  // consume, the first consumer warp's wait for its pages to land (the stream behind), "pagesmax"
  // the longest such wait of any consumer warp (near consume: the segment waited on its pages),
  // "lastwarp" from the input built to the last warp past its pages (of consume, the rest is the
  // barrier after them and, in an attention item, the warps' states written).
  std::fprintf(f, "per segment (mean over CTAs and layers), us: %-10s %8s %8s %8s %8s %8s %8s %8s %8s %8s %8s %8s %8s %6s\n",
               "kind", "wait", "build", "run", "consume", "sum", "send", "partner", "write", "publish", "pages", "pagesmax",
               "lastwarp", "n");
  for (int k = 0; k < df::kSegKinds; ++k)
    if (count[k] > 0) {
      std::fprintf(f, "%44s %-10s", "", df::seg_kind_name(df::SegKind(k)));
      for (int j = 0; j < kCols; ++j) std::fprintf(f, " %8.2f", sum[k][j] / count[k] * us);
      std::fprintf(f, " %6.0f\n", count[k]);
    }
  std::fprintf(f, "per CTA over the step, us (mean / max over CTAs): wait %.1f / %.1f, build %.1f / %.1f, run %.1f / %.1f\n",
               cta_sum[0] * us, cta_max[0] * us, cta_sum[1] * us, cta_max[1] * us, cta_sum[2] * us, cta_max[2] * us);
  std::fprintf(f, "consumers' span %.1f us mean, %.1f max; producer's span %.1f us mean, waiting for a free page %.1f us (%.0f%%)\n",
               span_mean * us, span_max * us, prod_mean * us, stall_mean * us, prod_mean > 0 ? 100.0 * stall_mean / prod_mean : 0.0);
  std::fclose(f);
}

/** The repacked matrices of one layer, tile-major. */
struct LayerMats {
  PackedMatrix m[df::kSegKinds];
};

/** Segment g of the plan in device form, its matrix from mats (kind, layer). */
DevSegment device_segment(const df::Segment& g, const std::vector<LayerMats>& mats, const PackedMatrix& head) {
  DevSegment d;
  d.kind = uint16_t(g.kind);
  d.layer = uint16_t(g.layer);
  if (g.kind == df::kAttn) {
    d.kv_head = uint16_t(g.kv_head);
    d.chunk = uint16_t(g.chunk);
  } else {
    const PackedMatrix& M = g.kind == df::kHead ? head : mats[size_t(g.layer)].m[g.kind];
    d.w = M.w;
    d.tile0 = uint32_t(g.tile0);
    d.tile1 = uint32_t(g.tile1);
    d.g0 = uint16_t(g.g0);
    d.g1 = uint16_t(g.g1);
    d.groups = uint16_t(M.groups);
  }
  if (g.waits.size() > size_t(kMaxWaits))
    fail(NIBBLE_ERR_INTERNAL, std::string("megakernel-dataflow: a ") + df::seg_kind_name(g.kind) + " segment waits for " +
                                  std::to_string(g.waits.size()) + " ranges, more than the kernel's " +
                                  std::to_string(kMaxWaits) + " (a bug in the plan)");
  d.n_waits = uint16_t(g.waits.size());
  for (size_t j = 0; j < g.waits.size(); ++j)
    d.waits[j] = DevWait{uint16_t(g.waits[j].source), uint16_t(g.waits[j].layer), uint16_t(g.waits[j].lo),
                         uint16_t(g.waits[j].hi)};
  return d;
}

/** What the kernel supports before the grid is known (plan_unsupported checks the rest with it). */
std::string unsupported(const nibble_decode_config& c) {
  if (c.group != kGroup)
    return "cfg.group = " + std::to_string(c.group) + ": the repacked layout maps one 128-input group onto 4 mma k-blocks";
  if (c.hd != 64 && c.hd != 128)
    return "cfg.hd = " + std::to_string(c.hd) + ": the attention items support head dims 64 and 128 (hd/32 per lane)";
  if (c.n_q / c.n_kv > kMaxRep)
    return "n_q / n_kv = " + std::to_string(c.n_q / c.n_kv) + ": the attention items support at most " +
           std::to_string(kMaxRep) + " query heads per KV head";
  if (c.layers > 65535 || c.max_seq > (1 << 24)) return "more layers or positions than the segment lists' fields hold";
  return "";
}

std::unique_ptr<Model> build(const nibble_decode_model* model, cudaStream_t stream) {
  const host::ModelSources srcs = host::model_sources(model, unsupported);
  const nibble_decode_config& c = model->cfg;
  host::require_sm90();
  auto mdl = std::make_unique<Model>();
  mdl->cfg = c;
  const int qdim = c.n_q * c.hd, max_k = std::max({c.d, c.ffn, qdim});
  const df::ModelShape shape{c.layers, c.d, c.ffn, c.n_q, c.n_kv, c.hd, c.vocab};

  // The grid: as many clusters as can be resident at once with the most shared memory a block may
  // have (the pool takes what the rest leaves, so the kernel never asks for more).
  // NIBBLE_DF_WARPS=8|15: the consumer warps per CTA (dataflow_kernel.h; an A/B switch).
  int warps = kConsumerWarps;
  if (const auto e = sol::env_whole("NIBBLE_DF_WARPS", 1, 32, "the kernel is built for 8 or 15 consumer warps")) {
    warps = int(*e);
    if (!dataflow_warps_supported(warps))
      fail(NIBBLE_ERR_INVALID_ARGUMENT, "NIBBLE_DF_WARPS=" + std::to_string(warps) + ": the kernel is built for 8 or 15 consumer warps");
  }
  // NIBBLE_DF_ORDER=0: a tile's pages summed with atomics, in no fixed order (DataflowParams; A/B).
  const bool ordered = env_switch("NIBBLE_DF_ORDER", true, "the pages' order, the default", "none");
  // NIBBLE_DF_SEGPF=0: no L2 prefetch of the CTA's segment descriptors at the start (A/B).
  const bool prefetch_segments = env_switch("NIBBLE_DF_SEGPF", true, "prefetched, the default", "each read where it starts");
  // NIBBLE_DF_MODE=gemv|consumer|...: a bench's launch, not a decode step (DataflowMode; bench_dataflow).
  int mode = kModeDecode;
  if (const char* e = std::getenv("NIBBLE_DF_MODE"); e && *e) {
    const std::string m = e;
    mode = -1;
    for (int k = kModeDecode; k <= kModeConsumerNoFlush; ++k)
      if (m == dataflow_mode_name(k)) mode = k;
    if (mode < 0)
      fail(NIBBLE_ERR_INVALID_ARGUMENT, "NIBBLE_DF_MODE=" + m +
                                            ": not a mode (decode, or a bench's gemv, consumer, consumer-nomath or consumer-noflush)");
    if (!dataflow_mode_supported(mode, c.hd))
      fail(NIBBLE_ERR_INVALID_ARGUMENT, "NIBBLE_DF_MODE=" + m + ": a bench's mode, built for hd 128 only (this config has hd " +
                                            std::to_string(c.hd) + "); unset it to grade");
    if (mode != kModeDecode)  // the grader's log then says why the logits are NaN
      std::fprintf(stderr, "megakernel-dataflow: NIBBLE_DF_MODE=%s: a bench's launch, no decode step: the logits are not written\n",
                   m.c_str());
  }
  int dev = 0, optin = 0, clusters = 0;
  SOL_CUDA(cudaGetDevice(&dev));
  SOL_CUDA(cudaDeviceGetAttribute(&optin, cudaDevAttrMaxSharedMemoryPerBlockOptin, dev));
  size_t static_smem = 0;  // sm_90 reserves 1 KB of a cluster kernel's shared memory (its cubin says so)
  SOL_CUDA(dataflow_static_smem(c.hd, warps, &static_smem));
  optin -= int(static_smem);
  SOL_CUDA(dataflow_max_clusters(c.hd, warps, size_t(optin), &clusters));
  if (clusters < 1)
    fail(NIBBLE_ERR_NOT_SUPPORTED, "no cluster of 2 blocks of " + std::to_string(32 * (1 + warps)) + " threads and " +
                                       std::to_string(optin) + " bytes of shared memory can be resident on this device");
  if (const std::string why = df::plan_unsupported(shape, clusters); !why.empty())
    fail(NIBBLE_ERR_NOT_SUPPORTED, "megakernel-dataflow on " + std::to_string(clusters) + " clusters: " + why);
  const df::Plan plan = df::make_plan(shape, clusters);
  uint32_t max_tiles = 1, max_pages = 1;
  for (const auto& list : plan.segments)
    for (const df::Segment& g : list)
      if (g.kind != df::kAttn) {
        max_tiles = std::max(max_tiles, uint32_t(g.tile1 - g.tile0));
        max_pages = std::max(max_pages, uint32_t(g.tile1 - g.tile0) * tile_pages(uint32_t(g.g0), uint32_t(g.g1)));
      }
  const size_t fixed = dataflow_fixed_smem(c.hd, warps, max_k, max_tiles, max_pages, c.n_q * plan.attn_chunks);
  const size_t per_page = page_pool_bytes(1);
  const uint32_t pages = fixed < size_t(optin) ? uint32_t((size_t(optin) - fixed) / per_page) / warps * warps : 0;
  if (pages < uint32_t(warps))
    fail(NIBBLE_ERR_NOT_SUPPORTED, "megakernel-dataflow: the input, cluster-sum and RoPE-row buffers (" + std::to_string(fixed) +
                                       " bytes) leave no room for a page per consumer warp in " + std::to_string(optin) +
                                       " bytes of shared memory");
  // NIBBLE_DF_PRODUCERS: the producer warp's lanes issuing pages at once, per segment kind (A/B).
  uint32_t lanes[df::kSegKinds];
  for (int i = 0; i < df::kSegKinds; ++i) lanes[i] = std::min(DataflowParams{}.lanes[i], pages);
  if (const char* e = std::getenv("NIBBLE_DF_PRODUCERS"); e && *e)
    if (const std::string why = parse_producer_lanes(e, pages, lanes); !why.empty())
      fail(NIBBLE_ERR_INVALID_ARGUMENT, std::string("NIBBLE_DF_PRODUCERS=") + e + ": " + why);
  mdl->smem = page_pool_bytes(pages) + fixed;
  if (mode != kModeDecode) SOL_CUDA(dataflow_set_smem(c.hd, warps, mode, false, mdl->smem));

  // Repacked weights, tile-major: one allocation, each matrix 256-byte aligned.
  std::vector<LayerMats> mats(size_t(c.layers));
  PackedMatrix head;
  std::vector<host::RepackJob> jobs;
  for (int i = 0; i < c.layers; ++i) {
    const host::LayerSources& s = srcs.layers[size_t(i)];
    PackedMatrix* m = mats[size_t(i)].m;
    jobs.push_back({{s.q, s.k, s.v}, RowMap::Concat, c.d, &m[df::kQkv]});
    jobs.push_back({{s.o}, RowMap::Concat, qdim, &m[df::kO]});
    jobs.push_back({{s.gate, s.up}, RowMap::Interleave8, c.d, &m[df::kGu]});
    jobs.push_back({{s.down}, RowMap::Concat, c.ffn, &m[df::kDown]});
  }
  jobs.push_back({{srcs.embed}, RowMap::Concat, c.d, &head});
  host::repack_all(jobs, mdl->weights, stream);

  // The schedule in device form.
  std::vector<DevSegment> segs;
  std::vector<DevCta> ctas(plan.segments.size());
  for (size_t cta = 0; cta < plan.segments.size(); ++cta) {
    DevCta& me = ctas[cta];
    me.first = int(segs.size());
    for (const df::Segment& g : plan.segments[cta]) {
      segs.push_back(device_segment(g, mats, head));
      if (g.kind == df::kO && g.layer == 0) {  // the d rows this CTA finishes (o's and down's alike)
        const int n = g.tile1 - g.tile0, rank = int(cta % df::kClusterSize);
        me.resid0 = std::min(c.d, kTileRows * (g.tile0 + n * rank / df::kClusterSize));
        me.resid1 = std::min(c.d, kTileRows * (g.tile0 + n * (rank + 1) / df::kClusterSize));
      }
    }
    me.count = int(segs.size()) - me.first;
  }

  // Scratch: activations, partials, counters, the RoPE table, the layers, the segment lists.
  const int stride = std::max(clusters, c.n_kv);
  const std::vector<float2> rope = host::rope_table(c);
  std::vector<DataflowLayer> layers(size_t(c.layers));
  for (int i = 0; i < c.layers; ++i) {
    const host::LayerSources& s = srcs.layers[size_t(i)];
    layers[size_t(i)] = DataflowLayer{s.in_norm, s.post_norm, s.k_cache, s.v_cache};
  }
  const std::vector<size_t> sizes = {
      size_t(c.d) * 4,                                  // h0
      size_t(c.d) * 4,                                  // h1
      size_t(qdim + 2 * c.n_kv * c.hd) * 4,             // qkv
      size_t(2) * c.ffn * 4,                            // gu
      size_t(c.n_q) * plan.attn_chunks * partial_floats(c.hd) * 4,  // partials
      size_t(df::kSegKinds) * stride * 4,               // counters
      rope.size() * sizeof(float2),                     // RoPE table
      layers.size() * sizeof(DataflowLayer),            // layers
      segs.size() * sizeof(DevSegment),                 // segment lists
      ctas.size() * sizeof(DevCta),                     // each CTA's list
  };
  const std::vector<char*> piece = host::carve(mdl->scratch, sizes);
  DataflowParams& P = mdl->params;
  P.h0 = reinterpret_cast<float*>(piece[0]);
  P.h1 = reinterpret_cast<float*>(piece[1]);
  P.qkv = reinterpret_cast<float*>(piece[2]);
  P.gu = reinterpret_cast<float*>(piece[3]);
  P.part = reinterpret_cast<float*>(piece[4]);
  P.counters = reinterpret_cast<unsigned*>(piece[5]);
  auto* rope_dev = reinterpret_cast<float2*>(piece[6]);
  auto* layers_dev = reinterpret_cast<DataflowLayer*>(piece[7]);
  auto* segs_dev = reinterpret_cast<DevSegment*>(piece[8]);
  auto* ctas_dev = reinterpret_cast<DevCta*>(piece[9]);
  SOL_CUDA(cudaMemsetAsync(mdl->scratch.get(), 0, mdl->scratch.size(), stream));  // the counters start at zero
  SOL_CUDA(cudaMemcpyAsync(rope_dev, rope.data(), sizes[6], cudaMemcpyHostToDevice, stream));
  SOL_CUDA(cudaMemcpyAsync(layers_dev, layers.data(), sizes[7], cudaMemcpyHostToDevice, stream));
  SOL_CUDA(cudaMemcpyAsync(segs_dev, segs.data(), sizes[8], cudaMemcpyHostToDevice, stream));
  SOL_CUDA(cudaMemcpyAsync(ctas_dev, ctas.data(), sizes[9], cudaMemcpyHostToDevice, stream));
  SOL_CUDA(cudaStreamSynchronize(stream));  // the host tables go out of scope

  P.segs = segs_dev;
  P.ctas = ctas_dev;
  P.layers = layers_dev;
  P.n_layers = c.layers;
  P.d = c.d;
  P.ffn = c.ffn;
  P.n_q = c.n_q;
  P.n_kv = c.n_kv;
  P.hd = c.hd;
  P.vocab = c.vocab;
  P.max_seq = c.max_seq;
  P.clusters = clusters;
  P.consumer_warps = warps;
  P.ordered_sums = ordered;
  P.prefetch_segments = prefetch_segments;
  P.mode = mode;
  P.chunks = plan.attn_chunks;
  P.n_pages = pages;
  std::copy(std::begin(lanes), std::end(lanes), std::begin(P.lanes));
  P.max_tiles = max_tiles;
  P.max_pages = max_pages;
  P.max_k = max_k;
  P.eps = float(c.eps);
  P.embed = srcs.embed;
  P.final_norm = srcs.final_norm;
  P.rope = rope_dev;
  P.counter_stride = stride;
  const char* tp = std::getenv("NIBBLE_DF_TRACE");
  if (tp && *tp && mode != kModeDecode) {  // a bench's launch sets no segment marks: nothing to read
    std::fprintf(stderr, "megakernel-dataflow: NIBBLE_DF_TRACE ignored: NIBBLE_DF_MODE runs a bench's launch, which is not traced\n");
  } else if (tp && *tp) {
    mdl->trace_path = tp;
    const size_t bytes = dataflow_trace_values(segs.size(), ctas.size()) * 8;
    mdl->trace.allocate(bytes);
    SOL_CUDA(cudaMemsetAsync(mdl->trace.get(), 0, bytes, stream));
    P.trace = reinterpret_cast<long long*>(mdl->trace.get());
    SOL_CUDA(dataflow_set_smem(c.hd, warps, mode, true, mdl->smem));  // the traced kernel is its own
    P.trace_cta0 = segs.size() * kTraceMarks;
    mdl->segs = segs;
    mdl->ctas = ctas;
  }
  return mdl;
}

void step(Model& m, const nibble_tensor* token_ids, int32_t pos, nibble_tensor* logits, cudaStream_t stream) {
  const nibble_decode_config& c = m.cfg;
  const host::StepIo io = host::step_io(c, token_ids, pos, logits);
  for (int b = 0; b < c.batch; ++b) {  // one launch per sequence (batch is 1 in both configs)
    DataflowParams p = m.params;
    p.token = io.tokens + b;
    p.pos = pos;
    p.logits = io.logits + size_t(b) * c.vocab;
    p.launch = m.launches;
    p.kv_seq_off = size_t(b) * c.n_kv * c.max_seq * c.hd;
    SOL_CUDA(launch_dataflow(p, m.smem, stream, &m.cooperative));
    ++m.launches;
  }
}

/** After the stream is drained (export.h): write the trace if one was asked for, free every buffer,
 *  checked. */
void teardown(Model& m, cudaStream_t) {
  if (m.trace.get()) write_trace(m);
  m.trace.release();
  m.weights.release();
  m.scratch.release();
}

}  // namespace
}  // namespace nibble::megakernel::v2

NIBBLE_DECODE_SOLUTION("megakernel-dataflow", nibble::megakernel::v2::build, nibble::megakernel::v2::step,
                       nibble::megakernel::v2::teardown);
