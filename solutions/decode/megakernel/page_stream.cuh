// page_stream.cuh: the weight stream of the dataflow megakernel (issue 21 step 3; NOTES.md "v2").
// One producer lane copies its CTA's segments' weight units into a pool of shared-memory pages, in
// the plan's order, across segment and layer boundaries, waiting only for a free page (weights
// never depend on activations); consumer warps take the pages in the same order, page n by consumer
// warp n mod W. Both sides enumerate the pages with for_each_page, so they cannot disagree; the consumers
// go segment by segment (consume_segment), so that they can wait for a segment's inputs between. W must
// divide the pool's P pages: then every use of a slot goes to the same warp, which has consumed
// its previous use before it waits for the next, so a parity wait cannot mistake a phase two
// behind for the one it waits for (with W = 3, P = 2 the warp of page 3 would pass on page 1's
// phase; the emulation deadlocks on it).
//
// Per page p two mbarriers: full[p] (one arrival, the producer's expect_tx, plus the copy's bytes)
// and empty[p] (one arrival, the consuming warp's lane 0 after its __syncwarp). Page n uses pool slot
// n mod P for the (n / P)-th time: full's phase n / P, and before the copy the producer waits for
// empty's phase n / P - 1 (the slot's previous page consumed). sm_90 (cp.async.bulk, mbarrier).
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

/** Calls f(a, b, n) for each page of segment sg in stream order. Weights: every tile's run of
 *  groups [g0, g1) cut into pages of at most kPageUnits units: a = tile, b = first group, n = units.
 *  K/V: positions [tile0, tile1) in pages of kv_page_rows: a = first position, b = 0, n = rows. */
template <class F>
__device__ __forceinline__ void for_each_page(const StreamSegment& sg, F&& f) {
  if (sg.kind == kStreamKv) {
    const uint32_t per = kv_page_rows(sg.row_bytes);
    for (uint32_t p = sg.tile0; p < sg.tile1; p += per) f(p, 0u, sg.tile1 - p < per ? sg.tile1 - p : per);
    return;
  }
  for (uint32_t t = sg.tile0; t < sg.tile1; ++t)
    for (uint32_t g = sg.g0; g < sg.g1; g += kPageUnits) f(t, g, sg.g1 - g < kPageUnits ? sg.g1 - g : kPageUnits);
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

/** The producer (one lane): every page of segment sg into the pool, in order, each as soon as its
 *  slot is free; k: the stream's page count before sg, advanced past it. policy: the copies' L2
 *  cache hint (sol::policy_evict_first: each weight byte is read once per step). With `stalled`
 *  set, the clock64 cycles spent waiting for free slots are added to it (a trace). kCopy false (a
 *  bench's consumer-only mode): each page is completed without a copy, holding what it held. */
template <bool kCopy = true>
__device__ __forceinline__ void produce_segment(const PagePool& pool, const StreamSegment& sg, uint32_t& k, uint64_t policy,
                                                long long* stalled = nullptr) {
  for_each_page(sg, [&](uint32_t t, uint32_t g, uint32_t units) {
    const uint32_t p = k % pool.n_pages, use = k / pool.n_pages;
    if (use > 0) {
      const long long t0 = stalled ? clock64() : 0;
      sol::mbar_wait(pool.empty + 8 * p, (use - 1) & 1);
      if (stalled) *stalled += clock64() - t0;
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
    ++k;
  });
}

/** The producer (one lane): every page of segs[0, n) into the pool, in order (produce_segment). */
__device__ __forceinline__ void produce_pages(const PagePool& pool, const StreamSegment* segs, int n) {
  const uint64_t policy = sol::policy_evict_first();
  uint32_t k = 0;
  for (int s = 0; s < n; ++s) produce_segment(pool, segs[s], k, policy);
}

/** Consumer warp w (of pool.consumers), all lanes, for the next segment sg of the stream (every
 *  consumer warp calls it for every segment, in order; k: the stream's page count before sg, advanced
 *  past it): f(a, b, n, page) (for_each_page's a, b, n) for sg's pages k, k + 1, ... that are w's (k mod W == w), each
 *  once its bytes have landed; the slot is released after f (and a __syncwarp). */
template <class F>
__device__ __forceinline__ void consume_segment(const PagePool& pool, const StreamSegment& sg, uint32_t& k, uint32_t w,
                                                F&& f) {
  for_each_page(sg, [&](uint32_t t, uint32_t g, uint32_t units) {
    if (k % pool.consumers == w) {
      const uint32_t p = k % pool.n_pages;
      sol::mbar_wait(pool.full + 8 * p, (k / pool.n_pages) & 1);
      f(t, g, units, pool.pages + size_t(p) * kPageBytes);
      __syncwarp();
      if ((threadIdx.x & 31) == 0) sol::mbar_arrive(pool.empty + 8 * p);
    }
    ++k;
  });
}

}  // namespace nibble::megakernel::v2
