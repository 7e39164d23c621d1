// megakernel.cu: the C ABI entry points of the "megakernel" solution of megakernel-int4-weight-decode.
//
// build_model (untimed) checks every tensor, repacks every int4 triple into the mma-fragment layout
// (repack.cu; the codes are moved, never dequantised), precomputes the RoPE table in double,
// allocates the fp32 scratch and the counters (zeroed) and sizes the persistent grid. decode_step
// is one cooperative launch of decode_kernel.cu per sequence (batch 1 in both configs: one launch
// per token). NOTES.md has the design, the predictions and the measurements.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "megakernel.h"
#include "model_host.h"
#include "nibble/nibble.h"
#include "solutions/common/abi_util.h"
#include "solutions/common/export.h"

namespace nibble::megakernel {

namespace {

using sol::AbiFailure;

[[noreturn]] void fail(nibble_status s, const std::string& msg) { throw AbiFailure(s, msg); }

/** A two-number switch `name`=a:b from the environment (a in [alo, ahi], b in [blo, bhi]): nullopt
 *  when unset or empty; INVALID_ARGUMENT naming `meaning` for anything else. */
std::optional<std::pair<long, long>> env_pair(const char* name, long alo, long ahi, long blo, long bhi,
                                              const std::string& meaning) {
  const char* e = std::getenv(name);
  if (!e || !*e) return std::nullopt;
  const std::string v = e;
  const size_t colon = v.find(':');
  if (colon != std::string::npos)
    if (const auto a = sol::parse_whole(v.substr(0, colon), alo, ahi))
      if (const auto b = sol::parse_whole(v.substr(colon + 1), blo, bhi)) return std::make_pair(*a, *b);
  fail(NIBBLE_ERR_INVALID_ARGUMENT, std::string(name) + "=" + v + ": " + meaning);
}

using host::DeviceAlloc;

struct Model {
  nibble_decode_config cfg{};
  DeviceAlloc weights;  // every repacked matrix
  DeviceAlloc scratch;  // activations, partials, counters, RoPE table, the layer array
  std::vector<LayerDev> layers;        // host copy; device copy in scratch
  std::vector<uint16_t*> k_cache, v_cache;  // (batch, n_kv, max_seq, hd) per layer
  DecodeParams params{};               // per-step fields filled by step()
  int blocks = 0;
  size_t smem = 0;
  DeviceAlloc trace;                   // NIBBLE_MK_TRACE: per-block stage clocks of the last step
  DeviceAlloc trace_gemv;              // and the GEMV counters summed over every step
  std::string trace_path;
};

/** NIBBLE_MK_TRACE=<file>: at teardown, write where the last step's time went, per stage kind:
 *  work = a block's time from the previous barrier's release to its arrival (max and mean over
 *  blocks), split into build (release to "ready": the input vector built; for the attention, its
 *  whole work), gemv (ready to "done": the GEMV and its flushes, to the block's slowest warp) and
 *  tail (done to arrival: the gains and, with NIBBLE_MK_SPLIT=0, the next stage's copies issued),
 *  all means; wait = arrival to release (min over blocks: the barrier's latency seen by the last
 *  block to arrive, and with the split phase, the default, the next stage's copies issued). Clocks are SM cycles (per-block differences only); us at 1.98 GHz. */
void write_trace(const Model& m) {
  // the compute blocks only: NIBBLE_MK_PFSM's prefetch blocks (the last ones) write no mark
  const int L = m.cfg.layers, K = trace_marks(L), B = m.blocks - m.params.pf_blocks;
  std::vector<long long> t(size_t(B) * K);
  SOL_CUDA(cudaMemcpy(t.data(), m.trace.get(), t.size() * 8, cudaMemcpyDeviceToHost));
  const char* names[5] = {"qkv", "attn", "o", "gate/up", "down"};
  double work_max[5] = {}, work_mean[5] = {}, build_mean[5] = {}, tail_mean[5] = {}, wait_min[5] = {},
         wait_mean[5] = {}, fence_mean[5] = {}, fence_max[5] = {};
  for (int s = 0; s < 5 * L; ++s) {
    double wmax = 0, wsum = 0, bsum = 0, tsum = 0, amin = 1e30, asum = 0, fsum = 0, fmax = 0;
    for (int b = 0; b < B; ++b) {
      const long long* tb = t.data() + size_t(b) * K;
      const double prev = double(tb[s == 0 ? 0 : 2 * s]), arr = double(tb[1 + 2 * s]), rel = double(tb[2 + 2 * s]);
      const double ready = double(tb[trace_ready(L, s)]);
      const long long done = tb[trace_done(L, s)];  // 0 for the attention (no GEMV)
      wmax = std::max(wmax, arr - prev);
      wsum += arr - prev;
      bsum += ready - prev;
      tsum += done ? arr - double(done) : 0.0;
      amin = std::min(amin, rel - arr);
      asum += rel - arr;
      const long long fenced = tb[trace_fenced(L, s)];  // 0 without a grid barrier
      if (fenced) {
        fsum += double(fenced) - arr;
        fmax = std::max(fmax, double(fenced) - arr);
      }
    }
    fence_mean[s % 5] += fsum / B / L;
    fence_max[s % 5] += fmax / L;
    work_max[s % 5] += wmax / L;
    work_mean[s % 5] += wsum / B / L;
    build_mean[s % 5] += bsum / B / L;
    tail_mean[s % 5] += tsum / B / L;
    wait_min[s % 5] += amin / L;
    wait_mean[s % 5] += asum / B / L;
  }
  const int end = 1 + 10 * L;  // the end mark; end - 1 is the last barrier's release
  double head_max = 0, total_max = 0;
  for (int b = 0; b < B; ++b) {
    const long long* tb = t.data() + size_t(b) * K;
    head_max = std::max(head_max, double(tb[end] - tb[end - 1]));
    total_max = std::max(total_max, double(tb[end] - tb[0]));
  }
  FILE* f = host::open_trace(m.trace_path, "NIBBLE_MK_TRACE");
  if (!f) return;
  const double us = 1.0 / 1980.0;
  std::fprintf(f, "megakernel trace: %d blocks, %d layers; cycles per layer (us at 1.98 GHz)\n", B, L);
  std::fprintf(f, "%-8s %12s %12s %12s %12s %12s %12s %12s\n", "stage", "work max", "work mean", "build mean",
               "gemv mean", "tail mean", "wait min", "wait mean");
  for (int k = 0; k < 5; ++k) {
    const double g = work_mean[k] - build_mean[k] - tail_mean[k];
    std::fprintf(f, "%-8s %6.0f %5.2f %6.0f %5.2f %6.0f %5.2f %6.0f %5.2f %6.0f %5.2f %6.0f %5.2f %6.0f %5.2f\n",
                 names[k], work_max[k], work_max[k] * us, work_mean[k], work_mean[k] * us, build_mean[k],
                 build_mean[k] * us, g, g * us, tail_mean[k], tail_mean[k] * us, wait_min[k], wait_min[k] * us,
                 wait_mean[k], wait_mean[k] * us);
  }
  std::fprintf(f, "head     %6.0f %5.2f\ntotal    %8.0f cycles %8.2f us\n", head_max, head_max * us, total_max,
               total_max * us);
  // The arrival's own latency (release fence + atomic round trip), mean and max over blocks.
  std::fprintf(f, "barrier arrival complete after (us, mean / max over blocks):");
  for (int k = 0; k < 5; ++k)
    if (k != 1) std::fprintf(f, " %s %.2f / %.2f", names[k], fence_mean[k] * us, fence_max[k] * us);
  std::fprintf(f, "\n");
  // The attention's phases (attention_stage's marks), from the release of the qkv barrier: per
  // phase the mean over the blocks with an item, then the combining (last) blocks' combine and
  // their end, and o-proj's release (its wait for the heads it reads), all means over layers.
  {
    double ph[5] = {}, comb_mean = 0, comb_max = 0, last_end = 0, o_rel = 0;
    long long n_items = 0, n_last = 0;
    for (int li = 0; li < L; ++li) {
      double lmax = 0, emax = 0;
      for (int b = 0; b < B; ++b) {
        const long long* tb = t.data() + size_t(b) * K;
        const long long* a = tb + trace_attn(L, li);
        const double start = double(tb[2 + 2 * (5 * li)]);
        o_rel += (double(tb[2 + 2 * (5 * li + 1)]) - start) / B / L;
        if (a[0] == 0) continue;
        ++n_items;
        ph[0] += double(a[0]) - start;
        for (int k = 1; k < 4; ++k) ph[k] += double(a[k] - a[k - 1]);
        if (a[5]) {
          ++n_last;
          comb_mean += double(a[4] - a[3]);
          lmax = std::max(lmax, double(a[4] - a[3]));
          emax = std::max(emax, double(a[4]) - start);
        }
      }
      comb_max += lmax / L;
      last_end += emax / L;
    }
    if (n_items > 0) {
      const char* pn[4] = {"rope+append", "scores+V", "merge+partial", "count"};
      std::fprintf(f, "attention phases (us, mean over %lld item blocks x layers, from the qkv barrier's release):", n_items / L);
      for (int k = 0; k < 4; ++k) std::fprintf(f, " %s %.2f", pn[k], ph[k] / double(n_items) * us);
      std::fprintf(f, "\n  combine (last blocks) mean %.2f max %.2f; last combine ends at %.2f; o-proj released at %.2f (mean)\n",
                   n_last ? comb_mean / double(n_last) * us : 0.0, comb_max * us, last_end * us, o_rel * us);
    }
  }
  // The GEMV counters: summed over all warps, layers and steps, so shown per warp and per call.
  constexpr int S = kGemvStats;
  std::vector<unsigned long long> g(5 * S);
  SOL_CUDA(cudaMemcpy(g.data(), m.trace_gemv.get(), g.size() * 8, cudaMemcpyDeviceToHost));
  const char* gnames[5] = {"qkv", "o", "gate/up", "down", "head"};
  const unsigned long long head_units = (unsigned long long)m.params.head.tiles * m.params.head.groups;
  const unsigned long long steps = head_units ? g[4 * S + 4] / head_units : 0;
  std::fprintf(f, "gemv per warp per call (us): ring wait, flush, refill, all; units per warp (%llu steps)\n", steps);
  for (int k = 0; k < 5; ++k) {
    const double per = double(B) * kWarps * double(steps) * (k == 4 ? 1 : L);
    if (per <= 0) continue;
    std::fprintf(f, "%-8s %6.2f %6.2f %6.2f %6.2f  %6.2f\n", gnames[k], g[k * S] / per * us, g[k * S + 1] / per * us,
                 g[k * S + 2] / per * us, g[k * S + 3] / per * us, g[k * S + 4] / per);
  }
  std::fclose(f);
}

std::unique_ptr<Model> build(const nibble_decode_model* model, cudaStream_t stream) {
  const host::ModelSources srcs = host::model_sources(model, [](const nibble_decode_config& cfg) {
    return unsupported_reason(cfg.d, cfg.ffn, cfg.n_q, cfg.n_kv, cfg.hd, cfg.group);
  });
  const nibble_decode_config& c = model->cfg;
  auto mdl = std::make_unique<Model>();
  mdl->cfg = c;
  const int qdim = c.n_q * c.hd, kvdim = c.n_kv * c.hd;
  const SourceTriple embed = srcs.embed;
  const uint16_t* final_norm = srcs.final_norm;
  mdl->layers.resize(size_t(c.layers));
  mdl->k_cache.resize(size_t(c.layers));
  mdl->v_cache.resize(size_t(c.layers));
  for (int i = 0; i < c.layers; ++i) {
    const host::LayerSources& s = srcs.layers[size_t(i)];
    mdl->layers[size_t(i)].in_norm = s.in_norm;
    mdl->layers[size_t(i)].post_norm = s.post_norm;
    mdl->k_cache[size_t(i)] = s.k_cache;
    mdl->v_cache[size_t(i)] = s.v_cache;
  }
  host::require_sm90();
  // The persistent grid, and the shared memory it needs.
  const int max_k = std::max({c.d, c.ffn, qdim});
  mdl->smem = decode_smem_bytes(max_k, c.d, c.hd);
  SOL_CUDA(decode_grid_blocks(c.hd, mdl->smem, &mdl->blocks));
  if (mdl->blocks < 1)
    fail(NIBBLE_ERR_NOT_SUPPORTED, "the persistent kernel cannot be resident on this device (" +
                                       std::to_string(mdl->smem) + " bytes of shared memory, " +
                                       std::to_string(kThreads) + " threads per block)");

  // Repacked weights: one allocation, each matrix 256-byte aligned.
  std::vector<host::RepackJob> jobs;
  // o and down in chunks of a few groups (v12; PackedMatrix::chunk): a block's range then reads only
  // those groups of the input (v6: group-major builds 256 inputs instead of 8192 for down) while a
  // warp still sums a tile over the chunk's groups before it flushes (group-major flushed every
  // unit: a third of down's GEMV time, traced). o takes 2 (its blocks wait for the attention heads
  // of their groups: few groups per block keep that wait short), down 4. NIBBLE_MK_FLUSH=0 (an A/B
  // switch for the trace, NOTES.md) flushes with one atomic per row.
  const auto chunk_of = [](int k, int want) {
    int g = want;
    while (g > 1 && !valid_chunk(g, k / kGroup)) g /= 2;
    return g;
  };
  // NIBBLE_MK_CHUNK=o:down (powers of two; an A/B switch, NOTES.md) overrides 2:4.
  int want_o = 2, want_down = 4;
  if (const auto ch = env_pair("NIBBLE_MK_CHUNK", 1, 1024, 1, 1024, "o:down, groups per chunk from 1 to 1024 (powers of two)"))
    want_o = int(ch->first), want_down = int(ch->second);
  const int o_chunk = chunk_of(qdim, want_o), down_chunk = chunk_of(c.ffn, want_down);
  const int vec_flush = sol::env_switch("NIBBLE_MK_FLUSH", true, "vector flushes, the default", "one atomic per row") ? 1 : 0;
  for (int i = 0; i < c.layers; ++i) {
    const host::LayerSources& s = srcs.layers[size_t(i)];
    LayerDev& L = mdl->layers[size_t(i)];
    jobs.push_back({{s.q, s.k, s.v}, RowMap::Concat, c.d, &L.qkv});
    jobs.push_back({{s.o}, RowMap::Concat, qdim, &L.o, o_chunk});
    jobs.push_back({{s.gate, s.up}, RowMap::Interleave8, c.d, &L.gu});
    jobs.push_back({{s.down}, RowMap::Concat, c.ffn, &L.down, down_chunk});
  }
  PackedMatrix head;
  jobs.push_back({{embed}, RowMap::Concat, c.d, &head});
  host::repack_all(jobs, mdl->weights, stream);
  for (host::RepackJob& job : jobs) job.dst->vec_flush = vec_flush;

  // Every warp's share of each GEMV kind (the layers' shapes are equal; the device never divides).
  const bool sync_warp = sol::env_switch("NIBBLE_MK_SYNCWARP", false, "the last warp arrives and polls, with no GEMV units",
                                         "thread 0 does, the default");
  // NIBBLE_MK_PFSM=n (an experiment, DecodeParams::pf_blocks): the last n blocks only prefetch, so
  // the step's work is planned over the others.
  const std::string pf_range = "give 0 to 16 prefetch blocks, fewer than the grid's " + std::to_string(mdl->blocks);
  const int pf_blocks = int(sol::env_whole("NIBBLE_MK_PFSM", 0, 16, pf_range).value_or(0));
  if (pf_blocks >= mdl->blocks)
    fail(NIBBLE_ERR_INVALID_ARGUMENT, "NIBBLE_MK_PFSM=" + std::to_string(pf_blocks) + ": " + pf_range);
  const int compute_blocks = mdl->blocks - pf_blocks;
  const int nw = compute_blocks * kWarps;
  const PackedMatrix* kinds[kPlanKinds] = {&mdl->layers[0].qkv, &mdl->layers[0].o, &mdl->layers[0].gu,
                                           &mdl->layers[0].down, &head};
  std::vector<GemvPlan> plans(size_t(kPlanKinds) * nw);
  for (int kind = 0; kind < kPlanKinds; ++kind) {
    for (int gw = 0; gw < nw; ++gw) plans[size_t(kind) * nw + gw] = gemv_plan_decode(*kinds[kind], gw, nw, sync_warp);
  }

  // Scratch: activations, attention partials, counters, the RoPE table, the layer array, the plans.
  const int max_chunks = attn_max_chunks(compute_blocks, c.n_kv);
  const size_t n_rope = size_t(c.max_seq) * (c.hd / 2);
  const size_t sizes[] = {
      size_t(c.d) * 4,                                   // h
      size_t(qdim + 2 * kvdim) * 4,                      // qkv
      size_t(qdim) * 4,                                  // attn
      size_t(2) * c.ffn * 4,                             // gu
      size_t(c.n_q) * max_chunks * (c.hd + 2) * 4,       // partials
      size_t(c.n_kv) * 8,                                // attention counters and done flags
      64,                                                // barrier
      n_rope * sizeof(float2),                           // RoPE table
      size_t(c.layers) * sizeof(LayerDev),               // layers
      size_t(kPlanKinds) * nw * sizeof(GemvPlan),        // every warp's GEMV plans
  };
  const std::vector<char*> piece = host::carve(mdl->scratch, {std::begin(sizes), std::end(sizes)});
  DecodeParams& P = mdl->params;
  P.h = reinterpret_cast<float*>(piece[0]);
  P.qkv = reinterpret_cast<float*>(piece[1]);
  P.attn = reinterpret_cast<float*>(piece[2]);
  P.gu = reinterpret_cast<float*>(piece[3]);
  P.part = reinterpret_cast<float*>(piece[4]);
  P.attn_count = reinterpret_cast<unsigned*>(piece[5]);
  P.attn_done = P.attn_count + c.n_kv;
  P.barrier = reinterpret_cast<unsigned*>(piece[6]);
  auto* rope_dev = reinterpret_cast<float2*>(piece[7]);
  auto* layers_dev = reinterpret_cast<LayerDev*>(piece[8]);
  auto* plans_dev = reinterpret_cast<GemvPlan*>(piece[9]);
  SOL_CUDA(cudaMemsetAsync(mdl->scratch.get(), 0, mdl->scratch.size(), stream));  // qkv, counters and barrier must start at zero

  const std::vector<float2> rope = host::rope_table(c);
  SOL_CUDA(cudaMemcpyAsync(rope_dev, rope.data(), n_rope * sizeof(float2), cudaMemcpyHostToDevice, stream));
  // The layer array of sequence 0; step() rewrites the cache pointers for other sequences.
  for (int i = 0; i < c.layers; ++i) {
    mdl->layers[size_t(i)].k_cache = mdl->k_cache[size_t(i)];
    mdl->layers[size_t(i)].v_cache = mdl->v_cache[size_t(i)];
  }
  SOL_CUDA(cudaMemcpyAsync(layers_dev, mdl->layers.data(), sizes[8], cudaMemcpyHostToDevice, stream));
  SOL_CUDA(cudaMemcpyAsync(plans_dev, plans.data(), sizes[9], cudaMemcpyHostToDevice, stream));
  SOL_CUDA(cudaStreamSynchronize(stream));  // the host tables go out of scope

  P.layers = layers_dev;
  P.plans = plans_dev;
  // The kernel finds layer li's matrices at layer 0's plus li strides (the jobs above allocated the
  // layers in order, each the same sizes): checked here, as the kernel relies on it.
  P.mat0[kPlanQkv] = mdl->layers[0].qkv;
  P.mat0[kPlanO] = mdl->layers[0].o;
  P.mat0[kPlanGu] = mdl->layers[0].gu;
  P.mat0[kPlanDown] = mdl->layers[0].down;
  P.layer_stride = c.layers > 1 ? reinterpret_cast<const char*>(mdl->layers[1].qkv.w) -
                                      reinterpret_cast<const char*>(mdl->layers[0].qkv.w)
                                : 0;
  for (int i = 0; i < c.layers; ++i) {
    const LayerDev& L = mdl->layers[size_t(i)];
    const PackedMatrix* got[4] = {&L.qkv, &L.o, &L.gu, &L.down};
    for (int kind = 0; kind < 4; ++kind) {
      const long long off = P.layer_stride * i;
      if (reinterpret_cast<const char*>(got[kind]->w) != reinterpret_cast<const char*>(P.mat0[kind].w) + off)
        fail(NIBBLE_ERR_INTERNAL, "megakernel: layer " + std::to_string(i) +
                                      "'s repacked matrices are not at a fixed stride from layer 0's (a bug in build_model)");
    }
  }
  P.n_layers = c.layers;
  P.d = c.d;
  P.ffn = c.ffn;
  P.n_q = c.n_q;
  P.n_kv = c.n_kv;
  P.hd = c.hd;
  P.vocab = c.vocab;
  P.max_seq = c.max_seq;
  P.eps = float(c.eps);
  P.embed = embed;
  P.head = head;
  P.final_norm = final_norm;
  P.rope = rope_dev;
  P.max_chunks = max_chunks;
  // The A/B switches (DecodeParams says what each value means).
  P.barrier_mode = sol::env_switch("NIBBLE_MK_BARRIER", P.barrier_mode == 1, "the release/acquire counter barrier",
                                   "the generation barrier") ? 1 : 0;
  P.proxy_fence = sol::env_switch("NIBBLE_MK_PFENCE", P.proxy_fence == 1, "a proxy fence before each ring refill", "none") ? 1 : 0;
  P.l2_prefetch = int(sol::env_whole("NIBBLE_MK_L2PF", 0, 7, "a mask from 0 to 7 (o 1, gate|up 2, down 4)").value_or(P.l2_prefetch));
  P.kv_prefetch = sol::env_switch("NIBBLE_MK_KVPF", P.kv_prefetch == 1, "K/V rows copied in the qkv barrier's split phase",
                                  "by the attention") ? 1 : 0;
  P.split_barrier = int(sol::env_whole("NIBBLE_MK_SPLIT", 0, 2, "0, 1 or 2 (where the next GEMV's first stages are issued)")
                            .value_or(P.split_barrier));
  P.sync_warp = sync_warp ? 1 : 0;
  P.o_combine = sol::env_switch("NIBBLE_MK_OCOMB", P.o_combine == 1, "o-proj merges the attention's chunks",
                                "one block per KV head combines them") ? 1 : 0;
  P.pf_blocks = pf_blocks;
  // The generation barrier counts every block (the prefetch blocks never arrive: a hang), and
  // without split 2's block barrier the split-phase copies go out while the arrival's fence runs,
  // which then waits for them (v18): what PFSM exists to avoid.
  if (pf_blocks > 0 && (P.barrier_mode != 1 || P.split_barrier != 2))
    fail(NIBBLE_ERR_INVALID_ARGUMENT, "NIBBLE_MK_PFSM needs the counter barrier and split 2 (unset "
                                      "NIBBLE_MK_BARRIER=0 and NIBBLE_MK_SPLIT)");
  if (const auto dl = env_pair("NIBBLE_MK_DELAY", 1, 4, 1, 1000000, "where:ns, where 1 to 4 and ns 1 to 1000000")) {
    P.delay_where = int(dl->first);
    P.delay_ns = int(dl->second);
  }
  if (const char* tp = std::getenv("NIBBLE_MK_TRACE"); tp && *tp) {
    mdl->trace_path = tp;
    mdl->trace.allocate(size_t(mdl->blocks) * trace_marks(c.layers) * 8);
    // zeroed: write_trace reads a mark the kernel never writes (the attention's "done" and
    // "fenced", every "fenced" under the generation barrier) as 0
    SOL_CUDA(cudaMemsetAsync(mdl->trace.get(), 0, size_t(mdl->blocks) * trace_marks(c.layers) * 8, stream));
    P.trace = reinterpret_cast<long long*>(mdl->trace.get());
    mdl->trace_gemv.allocate(5 * kGemvStats * 8);
    SOL_CUDA(cudaMemsetAsync(mdl->trace_gemv.get(), 0, 5 * kGemvStats * 8, stream));
    P.trace_gemv = reinterpret_cast<unsigned long long*>(mdl->trace_gemv.get());
  }
  return mdl;
}

void step(Model& m, const nibble_tensor* token_ids, int32_t pos, nibble_tensor* logits, cudaStream_t stream) {
  const nibble_decode_config& c = m.cfg;
  const host::StepIo io = host::step_io(c, token_ids, pos, logits);
  const int64_t* tokens = io.tokens;
  float* out = io.logits;
  const size_t cache_per_seq = size_t(c.n_kv) * c.max_seq * c.hd;

  for (int b = 0; b < c.batch; ++b) {
    if (b > 0) {  // other sequences: their own cache rows (batch is 1 in both configs)
      for (int i = 0; i < c.layers; ++i) {
        m.layers[size_t(i)].k_cache = m.k_cache[size_t(i)] + size_t(b) * cache_per_seq;
        m.layers[size_t(i)].v_cache = m.v_cache[size_t(i)] + size_t(b) * cache_per_seq;
      }
      SOL_CUDA(cudaMemcpyAsync(const_cast<LayerDev*>(m.params.layers), m.layers.data(),
                               m.layers.size() * sizeof(LayerDev), cudaMemcpyHostToDevice, stream));
      SOL_CUDA(cudaStreamSynchronize(stream));  // the host array is rewritten for the next sequence
    }
    DecodeParams p = m.params;
    p.token = tokens + b;
    p.pos = pos;
    p.logits = out + size_t(b) * c.vocab;
    SOL_CUDA(launch_decode(p, m.blocks, m.smem, stream));
  }
  if (c.batch > 1) {  // restore sequence 0's cache pointers for the next step
    for (int i = 0; i < c.layers; ++i) {
      m.layers[size_t(i)].k_cache = m.k_cache[size_t(i)];
      m.layers[size_t(i)].v_cache = m.v_cache[size_t(i)];
    }
    SOL_CUDA(cudaMemcpyAsync(const_cast<LayerDev*>(m.params.layers), m.layers.data(),
                             m.layers.size() * sizeof(LayerDev), cudaMemcpyHostToDevice, stream));
    SOL_CUDA(cudaStreamSynchronize(stream));
  }
}

/** After the stream is drained (export.h): write the trace if one was asked for, free every
 *  buffer, checked. */
void teardown(Model& m, cudaStream_t) {
  if (m.trace.get()) write_trace(m);
  m.trace.release();
  m.trace_gemv.release();
  m.weights.release();
  m.scratch.release();
}

}  // namespace
}  // namespace nibble::megakernel

NIBBLE_DECODE_SOLUTION("megakernel", nibble::megakernel::build, nibble::megakernel::step,
                       nibble::megakernel::teardown);
