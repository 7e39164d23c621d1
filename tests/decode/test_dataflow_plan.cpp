// test_dataflow_plan.cpp: the dataflow megakernel's per-CTA schedule (solutions/decode/megakernel/
// dataflow_plan.h), checked against what it must guarantee, each recomputed here independently:
//   - every unit (tile, group) of every matrix of every layer is streamed by exactly one CTA, whole
//     rows by one cluster, and the CTAs' bytes are balanced;
//   - each segment waits for exactly the published blocks whose rows it reads (found by walking its
//     inputs one element at a time);
//   - the waits and the program order form no cycle (so the step cannot deadlock: a CTA's producer
//     only runs ahead of its own consumers), and every buffer is rewritten only after every read of
//     its previous content happens-before the write (vector clocks over the happens-before graph):
//     the residual stream's two buffers, q|k|v, the attention partials, gate|up.
#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "dataflow_plan.h"

namespace nibble::megakernel::dataflow {
namespace {

constexpr ModelShape kFull{28, 3072, 8192, 24, 8, 128, 128256};  // Llama-3.2-3B (the full config)
constexpr ModelShape kTiny{2, 256, 512, 4, 2, 64, 1000};         // the tiny config's shape
constexpr ModelShape kOdd{3, 384, 640, 8, 2, 48, 333};           // hd 48: heads straddle groups

int tiles_of(const Plan& p, SegKind k) { return (p.rows(k) + 15) / 16; }

/** Cluster of tile t by search over cluster_tiles (not Plan::owner). */
int owner_by_search(const Plan& p, SegKind k, int t) {
  for (int c = 0; c < p.clusters; ++c) {
    int t0 = 0, t1 = 0;
    cluster_tiles(tiles_of(p, k), p.clusters, c, &t0, &t1);
    if (t >= t0 && t < t1) return c;
  }
  return -1;
}

const std::vector<SegKind> kMatrices{kQkv, kO, kGu, kDown, kHead};

TEST(DataflowPlan, EveryUnitStreamedOnceAndRowsOwnedByOneCluster) {
  for (const ModelShape& s : {kTiny, kOdd, kFull})
    for (int clusters : {1, 3, 66}) {
      if (!plan_unsupported(s, clusters).empty()) continue;
      const Plan p = make_plan(s, clusters);
      for (SegKind k : kMatrices)
        for (int l = 0; l < (k == kHead ? 1 : s.n_layers); ++l) {
          const int layer = k == kHead ? s.n_layers - 1 : l, T = tiles_of(p, k), G = p.inputs(k) / 128;
          std::vector<int> seen(size_t(T) * G, 0), row_cluster(size_t(T), -1);
          for (size_t cta = 0; cta < p.segments.size(); ++cta)
            for (const Segment& g : p.segments[cta]) {
              if (g.kind != k || g.layer != layer) continue;
              for (int t = g.tile0; t < g.tile1; ++t) {
                const int c = int(cta) / kClusterSize;
                EXPECT_TRUE(row_cluster[size_t(t)] == -1 || row_cluster[size_t(t)] == c) << seg_kind_name(k) << " tile " << t;
                row_cluster[size_t(t)] = c;
                for (int j = g.g0; j < g.g1; ++j) ++seen[size_t(t) * G + j];
              }
            }
          for (size_t u = 0; u < seen.size(); ++u)
            ASSERT_EQ(seen[u], 1) << seg_kind_name(k) << " layer " << layer << " unit " << u << ", " << clusters << " clusters";
          for (int t = 0; t < T; ++t) EXPECT_EQ(p.owner(k, t), owner_by_search(p, k, t)) << seg_kind_name(k) << " tile " << t;
        }
    }
}

TEST(DataflowPlan, TheFullConfigsBytesAreBalancedOverTheCtas) {
  const Plan p = make_plan(kFull, 66);
  long long most = 0, total = 0;
  for (const auto& segs : p.segments) {
    long long b = 0;
    for (const Segment& g : segs) b += g.weight_bytes();
    most = std::max(most, b);
    total += b;
  }
  // Every weight byte of the model once: 28 layers of (qkv, o, gate|up, down) and the head.
  const auto bytes = [](long long rows, long long k) { return (rows + 15) / 16 * (k / 128) * 1088; };
  const long long layer = bytes(5120, 3072) + bytes(3072, 3072) + bytes(16384, 3072) + bytes(3072, 8192);
  EXPECT_EQ(total, 28 * layer + bytes(128256, 3072));
  const double mean = double(total) / double(p.segments.size());
  EXPECT_LT(double(most) / mean, 1.03) << "most " << most << " B, mean " << mean << " B per CTA";
  // Attention: one item per CTA at most, every KV head split into the same number of chunks.
  EXPECT_EQ(p.attn_chunks, 16);
}

/** The published blocks segment g reads, walked element by element: "kind layer index". */
std::set<std::string> reads_by_walk(const Plan& p, const Segment& g) {
  const ModelShape& s = p.shape;
  const int rep = s.n_q / s.n_kv;
  std::set<std::string> out;
  const auto row_of = [&](SegKind k, int layer, int row) {
    out.insert(std::string(seg_kind_name(k)) + " " + std::to_string(layer) + " " + std::to_string(owner_by_search(p, k, row / 16)));
  };
  const auto all_of = [&](SegKind k, int layer) {
    for (int r = 0; r < p.rows(k); ++r) row_of(k, layer, r);
  };
  switch (g.kind) {
    case kQkv:
      if (g.layer > 0) all_of(kDown, g.layer - 1);
      break;
    case kAttn:
      for (int j = 0; j < rep; ++j)
        for (int e = 0; e < s.hd; ++e) row_of(kQkv, g.layer, (g.kv_head * rep + j) * s.hd + e);
      for (int e = 0; e < s.hd; ++e) {
        row_of(kQkv, g.layer, s.n_q * s.hd + g.kv_head * s.hd + e);
        row_of(kQkv, g.layer, (s.n_q + s.n_kv) * s.hd + g.kv_head * s.hd + e);
      }
      break;
    case kO:
      for (int i = 128 * g.g0; i < 128 * g.g1; ++i)
        out.insert("attention " + std::to_string(g.layer) + " " + std::to_string(i / s.hd / rep));
      break;
    case kGu: all_of(kO, g.layer); break;
    case kDown:
      for (int f = 128 * g.g0; f < 128 * g.g1; ++f) {  // Interleave8: gate row f and up row f in tile f / 8
        row_of(kGu, g.layer, 16 * (f / 8) + f % 8);
        row_of(kGu, g.layer, 16 * (f / 8) + 8 + f % 8);
      }
      break;
    case kHead: all_of(kDown, g.layer); break;
    default: break;
  }
  return out;
}

/** The blocks g's waits name, without the clusters that own no tile of the matrix (a matrix with
 *  fewer tiles than clusters: the kernel waits for their empty segments too, but they hold no row
 *  g reads). */
std::set<std::string> reads_by_waits(const Plan& p, const Segment& g) {
  std::set<std::string> out;
  for (const Wait& w : g.waits)
    for (int i = w.lo; i < w.hi; ++i) {
      int t0 = 0, t1 = 0;
      if (w.source != kAttn) cluster_tiles(tiles_of(p, w.source), p.clusters, i, &t0, &t1);
      if (w.source == kAttn || t1 > t0)
        out.insert(std::string(seg_kind_name(w.source)) + " " + std::to_string(w.layer) + " " + std::to_string(i));
    }
  return out;
}

TEST(DataflowPlan, EachSegmentWaitsForExactlyTheBlocksItReads) {
  for (const ModelShape& s : {kTiny, kOdd, kFull})
    for (int clusters : {1, 3, 66}) {
      if (!plan_unsupported(s, clusters).empty()) continue;
      const Plan p = make_plan(s, clusters);
      for (size_t cta = 0; cta < p.segments.size(); ++cta)
        for (const Segment& g : p.segments[cta]) {
          if (s.n_layers == kFull.n_layers && g.layer > 1 && g.layer < s.n_layers - 1) continue;  // layers alike: 3 suffice
          ASSERT_EQ(reads_by_waits(p, g), reads_by_walk(p, g))
              << seg_kind_name(g.kind) << " layer " << g.layer << " cta " << cta << ", " << clusters << " clusters";
        }
    }
}

/** Every block a segment's waits name, whether or not it owns rows it reads: what the kernel waits
 *  for (it polls every counter of a range). */
std::set<std::string> waited_blocks(const Plan& p, const Segment& g) {
  (void)p;
  std::set<std::string> out;
  for (const Wait& w : g.waits)
    for (int i = w.lo; i < w.hi; ++i) out.insert(std::string(seg_kind_name(w.source)) + " " + std::to_string(w.layer) + " " + std::to_string(i));
  return out;
}

/** Vector clocks of every segment over the happens-before graph (program order; a wait on a block
 *  after every segment that publishes it: both CTAs of a cluster, every chunk of a KV head), the
 *  blocks a segment waits for given by `waits` (default: only those it reads, the weaker graph).
 *  vc[cta][i][x] = how many of CTA x's segments happen before or are segment i of cta. Fails the
 *  test if the graph has a cycle. */
std::vector<std::vector<std::vector<int>>> vector_clocks(const Plan& p,
                                                         std::set<std::string> (*waits)(const Plan&, const Segment&) = reads_by_waits) {
  const size_t n = p.segments.size();
  std::map<std::string, std::vector<std::pair<size_t, size_t>>> publishers;  // "kind layer index" -> segments
  for (size_t cta = 0; cta < n; ++cta)
    for (size_t i = 0; i < p.segments[cta].size(); ++i) {
      const Segment& g = p.segments[cta][i];
      const int idx = g.kind == kAttn ? g.kv_head : int(cta) / kClusterSize;
      publishers[std::string(seg_kind_name(g.kind)) + " " + std::to_string(g.layer) + " " + std::to_string(idx)].push_back({cta, i});
    }
  std::vector<std::vector<std::vector<int>>> vc(n);
  for (size_t cta = 0; cta < n; ++cta) vc[cta].assign(p.segments[cta].size(), std::vector<int>(n, 0));
  std::vector<size_t> next(n, 0);  // each CTA's first segment without a clock yet
  for (bool progress = true; progress;) {
    progress = false;
    for (size_t cta = 0; cta < n; ++cta)
      while (next[cta] < p.segments[cta].size()) {
        const size_t i = next[cta];
        std::vector<int> c(n, 0);
        if (i > 0) c = vc[cta][i - 1];
        bool ready = true;
        for (const std::string& key : waits(p, p.segments[cta][i]))
          for (auto [x, j] : publishers[key]) {
            if (next[x] <= j) {
              ready = false;
              break;
            }
            for (size_t y = 0; y < n; ++y) c[y] = std::max(c[y], vc[x][j][y]);
          }
        if (!ready) break;
        c[cta] = int(i) + 1;
        vc[cta][i] = std::move(c);
        ++next[cta];
        progress = true;
      }
  }
  for (size_t cta = 0; cta < n; ++cta)
    EXPECT_EQ(next[cta], p.segments[cta].size()) << "cta " << cta << " blocked at segment " << next[cta] << ": a cycle of waits";
  return vc;
}

TEST(DataflowPlan, NoCycleAndEveryBufferRewrittenOnlyAfterItsReads) {
  for (const ModelShape& s : {kTiny, kOdd, ModelShape{4, 3072, 8192, 24, 8, 128, 128256}})
    for (int clusters : {1, 3, 66}) {
      if (!plan_unsupported(s, clusters).empty()) continue;
      const Plan p = make_plan(s, clusters);
      const auto vc = vector_clocks(p);
      if (HasFailure()) return;
      // (reader kind, writer kind, the writer's layer minus the reader's): the write replaces what
      // the reader read. h before o (written by down of l - 1, read by qkv of l) is rewritten by
      // down of l; h after o (o of l; gate|up's RMSNorm of l) by o of l + 1; q|k|v (attention of l)
      // by qkv of l + 1; the partials (o of l merges them) by attention of l + 1; gate|up (down of l)
      // by gate|up of l + 1; and the residual reads: o of l adds its rows to h before o (rewritten by
      // down of l), down of l to h after o (rewritten by o of l + 1).
      const struct {
        SegKind reader, writer;
        int dl;
      } kBuffers[] = {{kQkv, kDown, 0}, {kGu, kO, 1}, {kAttn, kQkv, 1}, {kO, kAttn, 1},
                      {kDown, kGu, 1},  {kO, kDown, 0}, {kDown, kO, 1}};
      for (const auto& b : kBuffers)
        for (size_t rc = 0; rc < p.segments.size(); ++rc)
          for (size_t ri = 0; ri < p.segments[rc].size(); ++ri) {
            const Segment& r = p.segments[rc][ri];
            // A matrix segment without tiles or groups (more clusters than tiles) reads nothing.
            if (r.kind != b.reader || (r.kind != kAttn && (r.tile0 == r.tile1 || r.g0 == r.g1))) continue;
            for (size_t wc = 0; wc < p.segments.size(); ++wc)
              for (size_t wi = 0; wi < p.segments[wc].size(); ++wi) {
                const Segment& w = p.segments[wc][wi];
                if (w.kind != b.writer || w.layer != r.layer + b.dl) continue;
                ASSERT_GT(vc[wc][wi][rc], int(ri)) << seg_kind_name(r.kind) << " of layer " << r.layer << " (cta " << rc
                                                   << ") does not happen before " << seg_kind_name(w.kind) << " of layer "
                                                   << w.layer << " (cta " << wc << "), " << clusters << " clusters";
              }
          }
    }
}

// A wait sums its publishers' counts (dataflow_sync.cuh): reaching per x n proves each published n
// only if none can publish n + 1 before another has published n. So every publication of layer
// l + 1 on a counter must happen after every publication of layer l on it, over the waits the kernel
// makes (every counter of a range, tiles or not).
TEST(DataflowPlan, NoPublisherRunsTwoPublicationsAheadOnACounter) {
  for (const ModelShape& s : {kTiny, kOdd, ModelShape{4, 3072, 8192, 24, 8, 128, 128256}})
    for (int clusters : {1, 3, 66}) {
      if (!plan_unsupported(s, clusters).empty()) continue;
      const Plan p = make_plan(s, clusters);
      const auto vc = vector_clocks(p, waited_blocks);
      if (HasFailure()) return;
      // (kind, counter) -> layer -> the segments that publish it
      std::map<std::pair<int, int>, std::map<int, std::vector<std::pair<size_t, size_t>>>> pubs;
      for (size_t cta = 0; cta < p.segments.size(); ++cta)
        for (size_t i = 0; i < p.segments[cta].size(); ++i) {
          const Segment& g = p.segments[cta][i];
          if (g.kind == kHead) continue;  // never waited for
          pubs[{g.kind, g.kind == kAttn ? g.kv_head : int(cta) / kClusterSize}][g.layer].push_back({cta, i});
        }
      for (const auto& [counter, layers] : pubs)
        for (const auto& [layer, segs] : layers) {
          const auto next = layers.find(layer + 1);
          if (next == layers.end()) continue;
          for (auto [a, ia] : next->second)
            for (auto [b, ib] : segs)
              ASSERT_GT(vc[a][ia][b], int(ib)) << seg_kind_name(SegKind(counter.first)) << " counter " << counter.second << ": cta "
                                              << a << "'s layer " << layer + 1 << " is not after cta " << b << "'s layer " << layer
                                              << ", " << clusters << " clusters";
        }
    }
}

TEST(DataflowPlan, ShapesItCannotPlanAreRefusedWithTheReason) {
  EXPECT_NE(plan_unsupported({2, 200, 512, 4, 2, 64, 10}, 2).find("multiples of the group"), std::string::npos);
  EXPECT_NE(plan_unsupported({2, 256, 512, 4, 3, 64, 10}, 2).find("GQA"), std::string::npos);
  EXPECT_NE(plan_unsupported({2, 256, 512, 16, 8, 40, 10}, 8).find("multiple of 16"), std::string::npos);
  EXPECT_NE(plan_unsupported(kTiny, 0).find("at least one cluster"), std::string::npos);
  EXPECT_NE(plan_unsupported({2, 256, 512, 8, 8, 64, 10}, 3).find("more KV heads than CTAs"), std::string::npos);
  EXPECT_THROW(make_plan(kTiny, 0), std::invalid_argument);
  EXPECT_EQ(plan_unsupported(kFull, 66), "");
}

}  // namespace
}  // namespace nibble::megakernel::dataflow
