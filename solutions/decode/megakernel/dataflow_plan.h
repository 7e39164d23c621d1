// dataflow_plan.h: the per-CTA schedule of the dataflow megakernel (issue 21 step 3, NOTES.md
// "v2: the dataflow design"), computed once on the host at build_model.
//
// The grid is clusters of two CTAs. A cluster owns whole output rows of every matrix (a contiguous
// range of 16-row tiles, balanced to one tile: no split-K atomics, no zeroing passes); CTA rank r
// of the cluster takes the K half r of those rows' groups, and the two halves are summed through
// distributed shared memory (st.async on the partner's mbarrier), then the rows are published
// grid-wide: each CTA releases the rows it finished (one release per CTA and segment, two per
// cluster; a CTA writes its rows only after its own exchange wait, so its partner's release cannot
// cover them), and every CTA publishes every matrix segment, empty or not. Each CTA's producer warp streams
// its segments' weights (and its attention items' K/V rows) in the order of its segment list,
// across stage and layer boundaries, into a page pool: weights never depend on activations, so the
// stream stops only when the pool is full. A segment's consumers wait, before computing, only for
// the published row blocks it reads (`Wait`): the clusters that own the rows of its input, or the
// KV heads whose attention it merges.
//
// Every CTA runs the same kinds in the same order (per layer qkv, attention, o, gate|up, down, then
// the LM head), and every wait names rows of an earlier kind (of this layer or the one before), so
// the waits form no cycle (tests/decode/test_dataflow_plan.cpp checks it): the step cannot deadlock
// given a page pool the consumer warps divide (page_stream.cuh), every CTA of the grid resident at
// once (a cooperative launch of at most cudaOccupancyMaxActiveClusters clusters) and both ranks of a
// cluster running the same sequence of matrix segments (their exchange pairs them up).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace nibble::megakernel::dataflow {

/** CTAs per cluster: the two K halves. */
inline constexpr int kClusterSize = 2;
/** Output rows per tile (the mma's M) and inputs per group (the quantisation group). */
inline constexpr int kTileRows = 16, kGroupK = 128;
/** Bytes per unit (16 rows x 128 inputs of codes and metadata: megakernel.h's kUnitStride). */
inline constexpr int kUnitBytes = 1088;

/** What a segment computes, in the order every CTA runs them. */
enum SegKind : int { kQkv = 0, kAttn, kO, kGu, kDown, kHead, kSegKinds };
const char* seg_kind_name(SegKind k);

/** The decoder's shape (the decode task's config fields). */
struct ModelShape {
  int n_layers = 0, d = 0, ffn = 0, n_q = 0, n_kv = 0, hd = 0, vocab = 0;
};

/** A range of published blocks a segment waits for before it computes: of kind `source` of layer
 *  `layer`, the clusters [lo, hi) that own the rows it reads (matrix kinds; a cluster in the range
 *  may own no tile of the matrix, possible only when it has fewer tiles than there are clusters: it
 *  publishes its empty segment all the same, so a range is waited for whole), or the KV heads
 *  [lo, hi) whose attention items have all published (kAttn: Plan::attn_chunks items per head). */
struct Wait {
  SegKind source = kQkv;
  int layer = 0;
  int lo = 0, hi = 0;
};

/** One CTA's share of one stage of one layer. Matrix kinds: the owning cluster's tiles
 *  [tile0, tile1) of the matrix, the CTA's groups [g0, g1), tile-major (a tile's half-K run is
 *  contiguous in the repacked matrix: one bulk copy per page). kAttn: KV head `kv_head`, sequence
 *  chunk `chunk` of `chunks` (its positions depend on the step's pos: the kernel computes them). */
struct Segment {
  SegKind kind = kQkv;
  int layer = 0;
  int tile0 = 0, tile1 = 0, g0 = 0, g1 = 0;
  int kv_head = -1, chunk = 0, chunks = 0;
  std::vector<Wait> waits;
  /** Weight bytes the producer streams for it (0 for kAttn: the K/V rows depend on pos). */
  long long weight_bytes() const;
};

/** The whole schedule: segments[cta] in stream order, cta = cluster * kClusterSize + rank. */
struct Plan {
  ModelShape shape;
  int clusters = 0;
  int attn_chunks = 0;  ///< sequence chunks per KV head (items = n_kv x attn_chunks, one per CTA at most)
  std::vector<std::vector<Segment>> segments;
  /** Rows of matrix kind k: q|k|v stacked, o and down d, gate|up 2 ffn (Interleave8), head vocab. */
  int rows(SegKind k) const;
  /** K of matrix kind k. */
  int inputs(SegKind k) const;
  /** The cluster that owns tile t of matrix kind k (the inverse of cluster_tiles). */
  int owner(SegKind k, int tile) const;
};

/** Cluster c's tiles [*t0, *t1) of a matrix of `tiles` tiles over `clusters` clusters: tiles c T / C
 *  to (c + 1) T / C, so the counts differ by at most one. */
void cluster_tiles(int tiles, int clusters, int c, int* t0, int* t1);

/** An empty string when the plan can be made for `shape` on `clusters` clusters, else why not
 *  (group 128 divides d and ffn, hd a multiple of 16 dividing 128 or a multiple of 128, ...). */
std::string plan_unsupported(const ModelShape& shape, int clusters);

/** The schedule of `shape` over `clusters` clusters of kClusterSize CTAs. Throws
 *  std::invalid_argument with plan_unsupported's reason. */
Plan make_plan(const ModelShape& shape, int clusters);

}  // namespace nibble::megakernel::dataflow
