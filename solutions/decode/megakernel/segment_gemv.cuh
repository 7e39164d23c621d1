// segment_gemv.cuh: the GEMV of one matrix segment of the dataflow megakernel (issue 21 step 3;
// NOTES.md "v2"): the cluster's rows of y = W x, each CTA multiplying its K half from the page
// stream (page_stream.cuh), the two halves summed through distributed shared memory. The unit math
// is the v1 GEMV's (int4_mma_gemv.cuh: gemv_unit, gemv_row_sums).
//
// Per segment, in the consumer warps (never the producer):
//   1. every page (a tile's run of up to 4 groups) multiplied by the warp it goes to, its 16 row sums
//      added into `part` (shared memory, 16 floats per tile of the cluster's range) in the pages'
//      order: the warp of a tile's page j waits until the page j - 1 of that tile is added (a
//      counter per tile, cta-scope release / acquire), so that every sum is formed in one order and
//      the logits are bitwise the same run to run, whichever warp gets there first (fp32 atomics
//      added the three to eight pages of a tile in the order the warps arrived). The wait cannot
//      deadlock: page j - 1 is an earlier page of the stream, whose warp waits only for earlier ones;
//   2. rank r finishes the tiles [t0 + n r / 2, t0 + n (r + 1) / 2) of the cluster's n: it sends the
//      partner's half of `part` with st.async into the partner's `peer` buffer, completing on the
//      partner's mbarrier, waits for its own, and writes y = part + peer for its rows.
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
 *  and release alone; the unit math without the row sums and their ordered add (outputs
 *  meaningless but for kGemvPartAll). */
enum GemvPart : int { kGemvPartAll = 0, kGemvPartNoMath = 1, kGemvPartNoFlush = 2 };

/** The consumer warps' barrier (named barrier 1; the producer warp never joins it). */
template <int W>
__device__ __forceinline__ void consumers_sync() {
  sol::named_barrier_sync<1, 32 * W>();
}

/** Shared memory of the cluster sum for segments of at most max_tiles tiles: part (16 floats per
 *  tile), two peer buffers (16 floats per tile and a 16-byte token each), two mbarriers, then the
 *  pages' order counters (one u32 per tile, rounded up to 16 bytes). */
NIBBLE_MK_HD inline size_t cluster_sum_bytes(uint32_t max_tiles) {
  return size_t(max_tiles) * 64 * 3 + 2 * 16 + 16 + (size_t(max_tiles) * 4 + 15) / 16 * 16;
}

/** The cluster sum's shared memory (cluster_sum_bytes(max_tiles) bytes at smem, 16-byte aligned). */
struct ClusterSum {
  float* part = nullptr;
  float* peer[2] = {nullptr, nullptr};
  uint32_t rx = 0;     ///< mbarrier of peer[b] at rx + 8 b
  uint32_t order = 0;  ///< the tiles' page counters: tile t's (relative to the segment's first) at order + 4 t
  uint32_t max_tiles = 0;
};

/** Carve the cluster sum from smem and initialise its mbarriers (thread 0; the caller synchronises
 *  the cluster before either CTA sends). */
__device__ __forceinline__ ClusterSum cluster_sum_init(unsigned char* smem, uint32_t max_tiles) {
  ClusterSum cs;
  cs.part = reinterpret_cast<float*>(smem);
  cs.peer[0] = cs.part + 16 * max_tiles;
  cs.peer[1] = cs.peer[0] + 16 * max_tiles + 4;  // + the token
  cs.rx = sol::smem_addr(cs.peer[1] + 16 * max_tiles + 4);
  cs.order = cs.rx + 16;
  cs.max_tiles = max_tiles;
  if (threadIdx.x == 0) {
    sol::mbar_init(cs.rx, 1);
    sol::mbar_init(cs.rx + 8, 1);
    sol::mbar_init_fence();
  }
  return cs;
}

/** Consumer warp, all lanes: part[16 tile + 0..15] += this page's row sums (gemv_row_sums' v: lane
 *  28 + t holds rows 4t..4t+3), after the tile's pages before j (the page's number within the
 *  segment's K half) and before its page j + 1. */
__device__ __forceinline__ void add_in_page_order(const ClusterSum& cs, uint32_t tile, uint32_t j, int lane,
                                                  const float (&v)[4]) {
  const uint32_t counter = cs.order + 4 * tile;
  if (lane == 28)
    while (sol::ld_acquire_cta_shared(counter) != j) {
    }
  __syncwarp();  // orders lanes 29..31 after lane 28's acquire
  if (lane >= 28) {
    float4* dst = reinterpret_cast<float4*>(cs.part + 16 * tile) + (lane - 28);
    const float4 p = *dst;
    *dst = make_float4(p.x + v[0], p.y + v[1], p.z + v[2], p.w + v[3]);
  }
  __syncwarp();  // lanes 29..31's adds before lane 28's release
  if (lane == 28) sol::st_release_cta_shared(counter, j + 1);
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
 * coherently, it may be another buffer this CTA wrote earlier). Returns consume_segment's page wait
 * when `timed` (a trace). PART: what it runs of a page (GemvPart; the bench's modes). Ends with the
 * consumers' barrier.
 */
template <int W, int PART = kGemvPartAll>
__device__ __forceinline__ long long segment_gemv(const PagePool& pool, const StreamSegment& sg, uint32_t& k, uint32_t w,
                                             const unsigned char* xq, const ClusterSum& cs, uint32_t seg_no,
                                             uint32_t rank, float* y, int rows, const float* resid = nullptr,
                                             bool ordered = true, bool timed = false) {
  const int lane = int(threadIdx.x & 31), ct = int(w) * 32 + lane;
  const uint32_t n = sg.tile1 - sg.tile0;
  for (uint32_t i = uint32_t(ct); i < 16 * n; i += 32 * W) cs.part[i] = 0.f;
  for (uint32_t i = uint32_t(ct); i < n; i += 32 * W) sol::st_release_cta_shared(cs.order + 4 * i, 0u);
  consumers_sync<W>();
  const float2 wl = limb_weights(lane);
  const long long waited = consume_segment(pool, sg, k, w, [&](uint32_t t, uint32_t g, uint32_t units, const unsigned char* page) {
    if constexpr (PART == kGemvPartNoMath) return;
    float acc[2][2] = {{0.f, 0.f}, {0.f, 0.f}};
    for (uint32_t u = 0; u < units; ++u) {
      const unsigned char* unit = page + u * kUnitStride;
      const uint4 wv[2] = {reinterpret_cast<const uint4*>(unit)[lane], reinterpret_cast<const uint4*>(unit)[32 + lane]};
      const uint2 meta = reinterpret_cast<const uint2*>(unit + kUnitCodeBytes)[lane >> 2];
      gemv_unit(wv, meta, xq + size_t(g + u) * kXqGroupBytes, lane, acc);
    }
    if constexpr (PART == kGemvPartNoFlush) {  // kept live: one plain store of lane 28's sum
      if (lane == 28) cs.part[16 * (t - sg.tile0)] = acc[0][0] + acc[0][1] + acc[1][0] + acc[1][1];
      return;
    }
    gemv_row_sums(lane, acc, wl, [&](const float (&v)[4], int) {
      if (ordered) {
        add_in_page_order(cs, t - sg.tile0, (g - sg.g0) / kPageUnits, lane, v);
      } else if (lane >= 28) {  // NIBBLE_DF_ORDER=0: no order, no wait (not bitwise run to run)
        float* dst = cs.part + 16 * (t - sg.tile0) + 4 * (lane - 28);
        for (int r = 0; r < 4; ++r) atomicAdd(dst + r, v[r]);
      }
    });
  }, timed);
  consumers_sync<W>();
  // The cluster sum: send the partner's tiles, wait for this rank's, finish them.
  const uint32_t b = seg_no & 1u, partner = rank ^ 1u;
  uint32_t m0, m1, p0, p1;
  finished_tiles(n, rank, &m0, &m1);
  finished_tiles(n, partner, &p0, &p1);
  if (ct == 0) sol::mbar_expect_tx(cs.rx + 8 * b, (m1 - m0) * 64 + 16);  // the tiles and the token
  const uint32_t remote = sol::cluster_smem_addr(sol::smem_addr(cs.peer[b]), partner);
  const uint32_t remote_bar = sol::cluster_smem_addr(cs.rx + 8 * b, partner);
  for (uint32_t q = uint32_t(ct); q < 4 * (p1 - p0); q += 32 * W)
    sol::st_async_v4(remote + 16 * q, reinterpret_cast<const uint4*>(cs.part + 16 * p0)[q], remote_bar);
  if (ct == 0) sol::st_async_v4(remote + 64 * cs.max_tiles, make_uint4(0u, 0u, 0u, 0u), remote_bar);
  sol::mbar_wait_cluster(cs.rx + 8 * b, (seg_no >> 1) & 1u);
  for (uint32_t i = uint32_t(ct); i < 16 * (m1 - m0); i += 32 * W) {
    const int row = int(16 * (sg.tile0 + m0) + i);
    if (row < rows) y[row] = (resid ? __ldcg(resid + row) : 0.f) + (cs.part[16 * m0 + i] + cs.peer[b][i]);
  }
  consumers_sync<W>();  // part is read before the next segment zeroes it
  return waited;
}

}  // namespace nibble::megakernel::v2
