// segment_gemv.cuh: the GEMV of one matrix segment of the dataflow megakernel (issue 21 step 3;
// NOTES.md "v2"): the cluster's rows of y = W x, each CTA multiplying its K half from the page
// stream (page_stream.cuh), the two halves summed through distributed shared memory. The unit math
// is the v1 GEMV's (int4_mma_gemv.cuh: gemv_unit, gemv_row_sums).
//
// Per segment, in the consumer warps (never the producer):
//   1. every page (a tile's run of up to 4 groups) multiplied by the warp it goes to, its 16 row sums
//      stored into the page's own slot (shared memory, 16 floats per page of the segment, indexed by
//      the page's number within it): no wait, no atomic;
//   2. after the consumers' barrier, each tile's rows summed over its pages' slots in page order, so
//      that every sum is formed in one order and the logits are bitwise the same run to run, whichever
//      warp got there first. (v2.0-v2.2 added each page into the tile's sums in place, the warp of a
//      tile's page j waiting until page j - 1 was added: ~150 us of the step on an H100, NOTES.md
//      "v2.3"; fp32 atomics before that were in the order the warps arrived);
//   3. rank r finishes the tiles [t0 + n r / 2, t0 + n (r + 1) / 2) of the cluster's n: it sends the
//      partner's half of the sums with st.async into the partner's `peer` buffer, completing on the
//      partner's mbarrier, waits for its own, and writes y = sums + peer for its rows. Both halves
//      sum one row per thread (v2.10; the send summed four rows per thread before, a chain of 4 ppt
//      page loads on 4 threads a tile, and was 55-82% of the finish on an H100: NOTES.md "The
//      finish split measured"); the send's four-row float4s gathered by shuffles.
// `peer` and its mbarrier are double-buffered by the segment's parity: a rank sends segment s + 2
// into the buffer of s only after receiving the partner's s + 1, which the partner sends after
// reading s (program order, the consumers' barrier, st.async's release / the wait's acquire at
// cluster scope), so no send overwrites what the partner has not read. Every send carries a 16-byte
// token besides the tiles, so that "receiving s + 1" holds also where a rank finishes no tile of
// s + 1 (a segment of one tile, or none): without it, its phase would complete on the expect_tx
// alone and the ordering would rest on the plan's grid-wide waits.
#pragma once

#include <cstdint>

#include "int4_mma_gemv.cuh"
#include "page_stream.cuh"
#include "solutions/common/gpu_sync.cuh"
#include "solutions/common/sm90_wgmma.cuh"

namespace nibble::megakernel::v2 {

/** What segment_gemv runs of a page (the bench's consumer modes, DataflowMode): everything; the wait
 *  and release alone; the unit math without the row sums and their store (outputs
 *  meaningless but for kGemvPartAll). */
enum GemvPart : int { kGemvPartAll = 0, kGemvPartNoMath = 1, kGemvPartNoFlush = 2 };

/** The consumer warps' barrier (named barrier 1; the producer warp never joins it). */
template <int W>
__device__ __forceinline__ void consumers_sync() {
  sol::named_barrier_sync<1, 32 * W>();
}

/** Tiles of a rank's half of a segment of at most max_tiles tiles (finished_tiles: n / 2 rounded up). */
NIBBLE_MK_HD inline uint32_t half_tiles(uint32_t max_tiles) { return (max_tiles + 1) / 2; }

/** Page-sum slots of the cluster sum for segments of at most max_pages pages: one at least. */
NIBBLE_MK_HD inline uint32_t sum_slots(uint32_t max_pages) { return max_pages > 1 ? max_pages : 1; }

/** Shared memory of the cluster sum for matrix segments of at most max_tiles tiles and max_pages
 *  pages (segment_pages): the page sums (16 floats per page, at least one page), two peer buffers (16
 *  floats per tile of a rank's half and a 16-byte token each), two mbarriers. */
NIBBLE_MK_HD inline size_t cluster_sum_bytes(uint32_t max_tiles, uint32_t max_pages) {
  return size_t(sum_slots(max_pages)) * 64 + 2 * (size_t(half_tiles(max_tiles)) * 64 + 16) + 16;
}

/** The cluster sum's shared memory (cluster_sum_bytes(max_tiles, max_pages) bytes at smem, 16-byte aligned). */
struct ClusterSum {
  float* sums = nullptr;  ///< page i of the segment's row sums at sums + 16 i (NIBBLE_DF_ORDER=0: tile tt's at 16 tt ppt)
  float* peer[2] = {nullptr, nullptr};
  uint32_t rx = 0;        ///< mbarrier of peer[b] at rx + 8 b
  uint32_t half = 0;      ///< half_tiles(max_tiles): the token's offset in a peer buffer, in tiles
};

/** Carve the cluster sum from smem and initialise its mbarriers (thread 0; the caller synchronises
 *  the cluster before either CTA sends). */
__device__ __forceinline__ ClusterSum cluster_sum_init(unsigned char* smem, uint32_t max_tiles, uint32_t max_pages) {
  ClusterSum cs;
  cs.half = half_tiles(max_tiles);
  cs.sums = reinterpret_cast<float*>(smem);
  cs.peer[0] = cs.sums + 16 * sum_slots(max_pages);
  cs.peer[1] = cs.peer[0] + 16 * cs.half + 4;  // + the token
  cs.rx = sol::smem_addr(cs.peer[1] + 16 * cs.half + 4);
  if (threadIdx.x == 0) {
    sol::mbar_init(cs.rx, 1);
    sol::mbar_init(cs.rx + 8, 1);
    sol::mbar_init_fence();
  }
  return cs;
}

/** Row r (0..15) of tile tt (relative to the segment's first) summed over its `pages` page sums
 *  (slots tt ppt .. tt ppt + pages - 1) in page order; 0 with no page. */
__device__ __forceinline__ float tile_row_sum(const ClusterSum& cs, uint32_t tt, uint32_t r, uint32_t ppt, uint32_t pages) {
  const float* s = cs.sums + size_t(tt) * ppt * 16 + r;
  float a = pages ? s[0] : 0.f;
  for (uint32_t j = 1; j < pages; ++j) a += s[16 * j];
  return a;
}

/** The tiles [*f0, *f1) (relative to the segment's first) that rank `rank` of the cluster finishes. */
__device__ __forceinline__ void finished_tiles(uint32_t n, uint32_t rank, uint32_t* f0, uint32_t* f1) {
  *f0 = n * rank / 2;
  *f1 = n * (rank + 1) / 2;
}

/**
 * Consumer warp w of W (W = pool.consumers), all lanes: segment sg (the stream's next; k as
 * consume_segment's), the seg_no-th matrix segment this CTA runs (the peer buffers' parity: it
 * counts matrix segments only, the same sequence on both ranks, never attention items), with xq the XQuant of x
 * (records by absolute group; this CTA's groups [sg.g0, sg.g1) built), rank the CTA's rank in its
 * 2-CTA cluster: y[16 t + i] (t of the tiles this rank finishes, rows below `rows`) = the row's
 * sum over all K, plus resid[16 t + i] when resid is set (the residual stream: y = h + W x; read
 * coherently, it may be another buffer this CTA wrote earlier). With `marks` (a trace; nullptr: none)
 * writes clock64 at marks[0] when every warp has consumed its pages, marks[1] when this warp has
 * summed the first rows it sends (before their st.async), marks[2] when it has sent its share of the
 * partner's sums, marks[3] when the partner's half has landed and marks[4] when the rows are
 * written; with `done` (a trace, every warp; nullptr: none) writes clock64 at done[w] when this warp
 * is past its pages; returns this warp's page wait (consume_segment's) when `marks` or `done`, else 0.
 * PART: what it runs of a page (GemvPart; the bench's modes). Ends with the consumers' barrier.
 */
template <int W, int PART = kGemvPartAll>
__device__ __forceinline__ long long segment_gemv(const PagePool& pool, const StreamSegment& sg, uint32_t& k, uint32_t w,
                                             const unsigned char* xq, const ClusterSum& cs, uint32_t seg_no,
                                             uint32_t rank, float* y, int rows, const float* resid = nullptr,
                                             bool ordered = true, long long* marks = nullptr, long long* done = nullptr) {
  const int lane = int(threadIdx.x & 31), ct = int(w) * 32 + lane;
  const uint32_t n = sg.tile1 - sg.tile0, ppt = tile_pages(sg.g0, sg.g1);
  if (!ordered) {  // NIBBLE_DF_ORDER=0: every page added into its tile's first slot by atomics
    for (uint32_t i = uint32_t(ct); i < 16 * n * (ppt ? 1u : 0u); i += 32 * W) cs.sums[(i >> 4) * ppt * 16 + (i & 15u)] = 0.f;
    consumers_sync<W>();
  }
  // (ordered: every slot is written by its page before the barrier below; the previous segment's
  // reads of them ended at its last barrier)
  const float2 wl = limb_weights(lane);
  const long long waited = consume_segment(pool, sg, k, w, [&](uint32_t t, uint32_t g, uint32_t units, uint32_t i,
                                                                const unsigned char* page) {
    if constexpr (PART == kGemvPartNoMath) return;
    float acc[2][2] = {{0.f, 0.f}, {0.f, 0.f}};
    for (uint32_t u = 0; u < units; ++u) {
      const unsigned char* unit = page + u * kUnitStride;
      const uint4 wv[2] = {reinterpret_cast<const uint4*>(unit)[lane], reinterpret_cast<const uint4*>(unit)[32 + lane]};
      const uint2 meta = reinterpret_cast<const uint2*>(unit + kUnitCodeBytes)[lane >> 2];
      gemv_unit(wv, meta, xq + size_t(g + u) * kXqGroupBytes, lane, acc);
    }
    if constexpr (PART == kGemvPartNoFlush) {  // kept live: one plain store of lane 28's sum
      if (lane == 28) cs.sums[16 * i] = acc[0][0] + acc[0][1] + acc[1][0] + acc[1][1];
      return;
    }
    gemv_row_sums(lane, acc, wl, [&](const float (&v)[4], int) {
      if (lane < 28) return;
      if (ordered) {
        reinterpret_cast<float4*>(cs.sums + 16 * i)[lane - 28] = make_float4(v[0], v[1], v[2], v[3]);
      } else {  // no order, not bitwise run to run
        float* dst = cs.sums + (t - sg.tile0) * ppt * 16 + 4 * (lane - 28);
        for (int r = 0; r < 4; ++r) atomicAdd(dst + r, v[r]);
      }
    });
  }, done || marks);
  if (done && lane == 0) done[w] = clock64();
  consumers_sync<W>();
  if (marks) marks[0] = clock64();
  // The cluster sum: send the partner's tiles, wait for this rank's, finish them.
  const uint32_t b = seg_no & 1u, partner = rank ^ 1u, pages = ordered ? ppt : (ppt ? 1u : 0u);
  uint32_t m0, m1, p0, p1;
  finished_tiles(n, rank, &m0, &m1);
  finished_tiles(n, partner, &p0, &p1);
  if (ct == 0) sol::mbar_expect_tx(cs.rx + 8 * b, (m1 - m0) * 64 + 16);  // the tiles and the token
  const uint32_t remote = sol::cluster_smem_addr(sol::smem_addr(cs.peer[b]), partner);
  const uint32_t remote_bar = sol::cluster_smem_addr(cs.rx + 8 * b, partner);
  // Row i of the partner's tiles per lane (warp-uniform trips: the shuffles), lanes 4 j sending
  // rows 4 j .. 4 j + 3 as one float4 (16-byte aligned: the peer buffer's row i is at 4 i bytes).
  const uint32_t send_rows = 16 * (p1 - p0);
  if (marks && send_rows <= 32 * w) marks[1] = clock64();  // this warp sends nothing
  for (uint32_t base = 32 * w; base < send_rows; base += 32 * W) {
    const uint32_t i = base + uint32_t(lane);
    const float rs = i < send_rows ? tile_row_sum(cs, p0 + i / 16, i % 16, ppt, pages) : 0.f;
    float v[4];
#pragma unroll
    for (int r = 0; r < 4; ++r) v[r] = __shfl_sync(0xffffffffu, rs, (lane & ~3) + r);
    if (marks && base == 32 * w) marks[1] = clock64();
    if ((lane & 3) == 0 && i < send_rows)
      sol::st_async_v4(remote + 4 * i, make_uint4(__float_as_uint(v[0]), __float_as_uint(v[1]), __float_as_uint(v[2]),
                                                  __float_as_uint(v[3])), remote_bar);
  }
  if (ct == 0) sol::st_async_v4(remote + 64 * cs.half, make_uint4(0u, 0u, 0u, 0u), remote_bar);
  if (marks) marks[2] = clock64();
  sol::mbar_wait_cluster(cs.rx + 8 * b, (seg_no >> 1) & 1u);
  if (marks) marks[3] = clock64();
  for (uint32_t i = uint32_t(ct); i < 16 * (m1 - m0); i += 32 * W) {
    const int row = int(16 * (sg.tile0 + m0) + i);
    if (row < rows)
      y[row] = (resid ? __ldcg(resid + row) : 0.f) + (tile_row_sum(cs, m0 + i / 16, i % 16, ppt, pages) + cs.peer[b][i]);
  }
  consumers_sync<W>();  // the sums are read before the next segment's pages store theirs
  if (marks) marks[4] = clock64();
  return waited;
}

}  // namespace nibble::megakernel::v2
