// page_stream.cuh: the weight stream of the dataflow megakernel (issue 21 step 3; NOTES.md "v2").
// The producer warp's lanes copy their CTA's segments' weight units into a pool of shared-memory
// pages, in the plan's order, across segment and layer boundaries, waiting only for a free page
// (weights never depend on activations); consumer warps take the pages in the same order, page n by
// consumer warp n mod W. Both sides enumerate the pages with PageWalk, so they cannot disagree; the
// consumers go segment by segment (consume_segment), so that they can wait for a segment's inputs
// between. W must divide the pool's P pages: then every use of a slot goes to the same warp, which
// has consumed its previous use before it waits for the next, so a parity wait cannot mistake a
// phase two behind for the one it waits for (with W = 3, P = 2 the warp of page 3 would pass on
// page 1's phase; the emulation deadlocks on it).
//
// Per page p two mbarriers: full[p] (one arrival, the producer's expect_tx, plus the copy's bytes)
// and empty[p] (one arrival, the consuming warp's lane 0 after its __syncwarp). Page n uses pool slot
// n mod P for the (n / P)-th time: full's phase n / P, and before the copy the producer waits for
// empty's phase n / P - 1 (the slot's previous page consumed). sm_90 (cp.async.bulk, mbarrier).
//
// The producer issues L pages at once, L lanes of its warp (L <= P; DataflowParams::lanes, per
// segment kind, 1 by default: more lanes lift the handshake's rate but slowed the decode step,
// NOTES.md "v2.1"; the LM head's 8. L may change between segments, since every batch of an earlier
// segment has converged before the next segment's first):
// lane l takes page b + l of each batch [b, b + L) of a segment, and the warp converges after each
// batch. A batch's lanes wait on L different
// slots, and the wait of a page's slot for its previous use (page n - P, in an earlier batch since
// L <= P) comes after that earlier batch's own wait on it (the warp converged between): the slot's
// empty barrier is never two phases behind the one a lane waits for.
#pragma once

#include <cstdint>

#include "megakernel.h"
#include "solutions/common/sm90_async.cuh"

namespace nibble::megakernel::v2 {

/** Units per page: 4 x 1088 = 4352 bytes, one bulk copy (a tile's run of its K half is contiguous). */
inline constexpr uint32_t kPageUnits = 4;
inline constexpr uint32_t kPageBytes = kPageUnits * kUnitStride;

/** What a stream segment carries. */
enum StreamKind : uint16_t {
  kStreamWeights = 0,  ///< a matrix segment's units
  kStreamKv = 1,       ///< an attention item's cached K and V rows
};

/** One segment as a CTA streams it. kStreamWeights (dataflow::Segment's matrix part, with the matrix
 *  of its layer): the tiles [tile0, tile1) x groups [g0, g1) of the tile-major repacked matrix at w,
 *  which has `groups` groups per tile. kStreamKv: the K rows at w and the V rows at v of positions
 *  [tile0, tile1) (one KV head's rows of the cache, position 0 at w and v; row_bytes per row, a
 *  multiple of 16). */
struct StreamSegment {
  const uint4* w = nullptr;
  const uint4* v = nullptr;
  uint32_t tile0 = 0, tile1 = 0;
  uint16_t g0 = 0, g1 = 0, groups = 0, kind = kStreamWeights;
  uint32_t row_bytes = 0;
};

/** Positions per K/V page: its K rows in the first half of the page, its V rows after them. */
NIBBLE_MK_HD inline uint32_t kv_page_rows(uint32_t row_bytes) { return kPageBytes / (2 * row_bytes); }

/** Pages of each tile of a weights segment over groups [g0, g1): its run in pages of at most
 *  kPageUnits units (0 when g1 <= g0: a K half with no group). */
NIBBLE_MK_HD inline uint32_t tile_pages(uint32_t g0, uint32_t g1) {
  return g1 > g0 ? (g1 - g0 + kPageUnits - 1) / kPageUnits : 0u;
}

/** Pages of segment sg: every tile's run of groups [g0, g1) in tile_pages pages (weights), or
 *  positions [tile0, tile1) in pages of kv_page_rows (K/V). */
NIBBLE_MK_HD inline uint32_t segment_pages(const StreamSegment& sg) {
  if (sg.tile1 <= sg.tile0) return 0;
  if (sg.kind == kStreamKv) {
    const uint32_t per = kv_page_rows(sg.row_bytes);
    return (sg.tile1 - sg.tile0 + per - 1) / per;
  }
  return (sg.tile1 - sg.tile0) * tile_pages(sg.g0, sg.g1);
}

/** A walk over the pages i = first, first + stride, ... of segment sg (i: the page's number within
 *  sg, in stream order; stride >= 1): at(a, b, n) gives page i's a, b, n. Weights: a = tile, b =
 *  first group, n = units (tile-major: a tile's run of groups, then the next tile's). K/V: a = first
 *  position, b = 0, n = rows. One division where it starts, none per page: the consumers walk their
 *  own pages only (a warp that stepped over every page of a segment to find its own spent ~14 loop
 *  trips per page), and the producer's lanes theirs. */
struct PageWalk {
  uint32_t i = 0, n = 0, stride = 1;
  uint32_t a = 0, j = 0;    // weights: tile, page within the tile's run; K/V: first position
  uint32_t da = 0, dj = 0;  // the step: weights stride / ppt tiles and stride % ppt pages; K/V stride * per positions
  uint32_t ppt = 1, per = 0, g0 = 0, g1 = 0, end = 0;  // per: K/V rows a page (0: weights); end: tile1

  __device__ __forceinline__ PageWalk(const StreamSegment& sg, uint32_t first, uint32_t step)
      : i(first), n(segment_pages(sg)), stride(step), g0(sg.g0), g1(sg.g1), end(sg.tile1) {
    if (sg.kind == kStreamKv) {
      per = kv_page_rows(sg.row_bytes);
      a = sg.tile0 + first * per;
      da = step * per;
    } else {
      ppt = g1 > g0 ? tile_pages(g0, g1) : 1u;  // no groups: no pages (n = 0)
      a = sg.tile0 + first / ppt;
      j = first % ppt;
      da = step / ppt;
      dj = step % ppt;
    }
  }
  __device__ __forceinline__ bool valid() const { return i < n; }
  __device__ __forceinline__ void at(uint32_t* pa, uint32_t* pb, uint32_t* pn) const {
    *pa = a;
    if (per) {
      *pb = 0;
      *pn = end - a < per ? end - a : per;
    } else {
      const uint32_t g = g0 + j * kPageUnits;
      *pb = g;
      *pn = g1 - g < kPageUnits ? g1 - g : kPageUnits;
    }
  }
  __device__ __forceinline__ void next() {
    i += stride;
    a += da;
    j += dj;
    if (j >= ppt) j -= ppt, ++a;  // K/V: j stays 0 < ppt = 1
  }
};

/** Calls f(a, b, n, i) for the pages of PageWalk(sg, first, stride), in order. */
template <class F>
__device__ __forceinline__ void for_pages(const StreamSegment& sg, uint32_t first, uint32_t stride, F&& f) {
  for (PageWalk pw(sg, first, stride); pw.valid(); pw.next()) {
    uint32_t a, b, n;
    pw.at(&a, &b, &n);
    f(a, b, n, pw.i);
  }
}

/** Pool slot of a stream page and the parity of its use (page n: slot n mod P, use n / P), stepped
 *  by at most P pages without division. */
struct PageSlot {
  uint32_t p = 0, parity = 0;
};

NIBBLE_MK_HD inline PageSlot page_slot(uint32_t n, uint32_t n_pages) { return {n % n_pages, (n / n_pages) & 1u}; }

NIBBLE_MK_HD inline void page_slot_step(PageSlot& s, uint32_t stride, uint32_t n_pages) {
  s.p += stride;
  if (s.p >= n_pages) s.p -= n_pages, s.parity ^= 1u;
}

/** The pool: n_pages pages of kPageBytes (16-byte aligned) and their 2 x n_pages mbarriers (shared
 *  addresses; full[p] at full + 8 p, empty[p] at empty + 8 p), consumed by `consumers` warps, which
 *  divide n_pages (page_pool_fits). */
struct PagePool {
  unsigned char* pages = nullptr;
  uint32_t full = 0, empty = 0;
  uint32_t n_pages = 0;
  uint32_t consumers = 0;
};

/** Whether n pages can be shared by `consumers` warps (at least one page each, a multiple of them). */
NIBBLE_MK_HD inline bool page_pool_fits(uint32_t n, uint32_t consumers) {
  return consumers > 0 && n >= consumers && n % consumers == 0;
}

/** Whether `lanes` producer lanes can stream into a pool of n pages (1..32 lanes, no more than n:
 *  a batch must not use a slot twice). */
NIBBLE_MK_HD inline bool producer_lanes_fit(uint32_t lanes, uint32_t n) { return lanes >= 1 && lanes <= 32 && lanes <= n; }

/** Shared-memory bytes of a pool of n pages: the pages, then the mbarriers. */
NIBBLE_MK_HD inline size_t page_pool_bytes(uint32_t n) { return size_t(n) * kPageBytes + size_t(n) * 16; }

/** Block-wide: carve the pool from smem (page_pool_bytes(n) bytes, 16-byte aligned) and initialise
 *  its mbarriers (thread 0); the caller synchronises the block before use. */
__device__ __forceinline__ PagePool page_pool_init(unsigned char* smem, uint32_t n, uint32_t consumers) {
  PagePool pool;
  pool.pages = smem;
  pool.full = sol::smem_addr(smem + size_t(n) * kPageBytes);
  pool.empty = pool.full + 8 * n;
  pool.n_pages = n;
  pool.consumers = consumers;
  if (threadIdx.x == 0) {
    for (uint32_t p = 0; p < n; ++p) {
      sol::mbar_init(pool.full + 8 * p, 1);
      sol::mbar_init(pool.empty + 8 * p, 1);
    }
    sol::mbar_init_fence();
  }
  return pool;
}

/** The producer warp, all lanes: every page of segment sg into the pool, in order, in batches of
 *  `lanes` consecutive pages (producer_lanes_fit; more are clamped to it: the header says why a
 *  batch must not outgrow the pool), each page as soon as its slot is free, a batch after the
 *  previous one's slowest (and with fewer lanes where the segment has fewer pages); k: the stream's
 *  page count before sg, advanced past it. policy: the copies' L2 cache hint
 *  (sol::policy_evict_first: each weight byte is read once per step). Returns, when `timed` (a
 *  trace), the clock64 cycles the warp was held by waits for free slots (per batch its slowest
 *  lane's wait), else 0; the same in every lane. kCopy false (a bench's consumer-only mode): each
 *  page is completed without a copy, holding what it held. */
template <bool kCopy = true>
__device__ __forceinline__ long long produce_segment(const PagePool& pool, const StreamSegment& sg, uint32_t& k,
                                                     uint64_t policy, uint32_t lanes, bool timed = false) {
  const uint32_t lane = threadIdx.x & 31;
  lanes = lanes < 1 ? 1u : lanes > 32 ? 32u : lanes > pool.n_pages ? pool.n_pages : lanes;
  PageWalk pw(sg, lane, lanes);
  PageSlot slot = page_slot(k + lane, pool.n_pages);
  long long stalled = 0;
  // Every lane runs every batch (a __syncwarp of the whole warp after each): lanes past `lanes`
  // or past the segment's last page only converge.
  for (uint32_t b = 0; b < pw.n; b += lanes) {
    unsigned waited = 0;  // this lane's wait in this batch (timed)
    if (lane < lanes && pw.valid()) {
      uint32_t t, g, units;
      pw.at(&t, &g, &units);
      const uint32_t p = slot.p;
      if (k + pw.i >= pool.n_pages) {  // the slot's previous page (k + i - P) consumed
        const long long t0 = timed ? clock64() : 0;
        sol::mbar_wait(pool.empty + 8 * p, slot.parity ^ 1u);
        if (timed) waited = unsigned(clock64() - t0);
        sol::fence_proxy_async_smem();  // the consumers' reads of the slot before the copy engine's writes
      }
      const uint32_t dst = sol::smem_addr(pool.pages + size_t(p) * kPageBytes);
      if constexpr (!kCopy) {
        sol::mbar_arrive(pool.full + 8 * p);
      } else if (sg.kind == kStreamKv) {  // t: the first position, units: the rows
        const uint32_t bytes = units * sg.row_bytes;
        const size_t off = size_t(t) * sg.row_bytes;
        sol::mbar_expect_tx(pool.full + 8 * p, 2 * bytes);
        sol::bulk_load(dst, reinterpret_cast<const unsigned char*>(sg.w) + off, bytes, pool.full + 8 * p, policy);
        sol::bulk_load(dst + kv_page_rows(sg.row_bytes) * sg.row_bytes, reinterpret_cast<const unsigned char*>(sg.v) + off,
                       bytes, pool.full + 8 * p, policy);
      } else {
        const uint32_t bytes = units * kUnitStride;
        const unsigned char* src = reinterpret_cast<const unsigned char*>(sg.w) + (size_t(t) * sg.groups + g) * kUnitStride;
        sol::mbar_expect_tx(pool.full + 8 * p, bytes);
        sol::bulk_load(dst, src, bytes, pool.full + 8 * p, policy);
      }
      pw.next();
      page_slot_step(slot, lanes, pool.n_pages);
    }
    __syncwarp();  // this batch's waits before the next batch's (the header: no wait two phases behind)
    if (timed) stalled += __reduce_max_sync(0xFFFFFFFFu, waited);
  }
  k += pw.n;
  return stalled;
}

/** The producer warp, all lanes: every page of segs[0, n) into the pool, in order (produce_segment). */
__device__ __forceinline__ void produce_pages(const PagePool& pool, const StreamSegment* segs, int n, uint32_t lanes) {
  const uint64_t policy = sol::policy_evict_first();
  uint32_t k = 0;
  for (int s = 0; s < n; ++s) produce_segment(pool, segs[s], k, policy, lanes);
}

/** Consumer warp w (of pool.consumers), all lanes, for the next segment sg of the stream (every
 *  consumer warp calls it for every segment, in order; k: the stream's page count before sg, advanced
 *  past it): f(a, b, n, i, page) (for_pages' a, b, n, i) for sg's pages k + i that are w's ((k + i)
 *  mod W == w), each once its bytes have landed; the slot is released after f (and a __syncwarp). Returns,
 *  when `timed` (a trace), the clock64 cycles this lane waited for its pages to land, else 0. */
template <class F>
__device__ __forceinline__ long long consume_segment(const PagePool& pool, const StreamSegment& sg, uint32_t& k, uint32_t w,
                                                     F&& f, bool timed = false) {
  const uint32_t W = pool.consumers;
  const uint32_t first = (w + W - k % W) % W;  // k + first is w's first page at or after k
  PageSlot slot = page_slot(k + first, pool.n_pages);
  long long waited = 0;
  for_pages(sg, first, W, [&](uint32_t t, uint32_t g, uint32_t units, uint32_t i) {
    const long long t0 = timed ? clock64() : 0;
    sol::mbar_wait(pool.full + 8 * slot.p, slot.parity);
    if (timed) waited += clock64() - t0;
    f(t, g, units, i, pool.pages + size_t(slot.p) * kPageBytes);
    __syncwarp();
    if ((threadIdx.x & 31) == 0) sol::mbar_arrive(pool.empty + 8 * slot.p);
    page_slot_step(slot, W, pool.n_pages);
  });
  k += segment_pages(sg);
  return waited;
}

}  // namespace nibble::megakernel::v2
