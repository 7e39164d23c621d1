// emu_async.h: the sm_90 asynchronous machinery for emu_core.h: the 32-bit shared-window addresses
// of a block's dynamic shared memory, mbarriers (arrival count, transaction bytes, phase parity), the
// bulk copy global -> shared (copied at issue, completing its bytes on the mbarrier at once: the
// earliest a copy can land, so a slot refilled before its readers finish shows as wrong data), and
// the warp collectives (shuffles, reductions, __syncwarp) as exchanges at the warp's barrier.
#pragma once

#include <cstdint>
#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "emu_core.h"

namespace emu {

/** The shared-window address of a generic pointer into this block's dynamic shared memory. */
inline uint32_t smem_address(const void* p) {
  const auto* c = static_cast<const unsigned char*>(p);
  if (c < smem_base() || c >= smem_base() + smem_size()) die("a shared-memory address outside the block's dynamic shared memory");
  return kSmemWindow + uint32_t(c - cur_block->window);
}
/** Where [a, a + bytes) of block b's shared window is (the running block's by default). */
inline unsigned char* smem_pointer(uint32_t a, size_t bytes, BlockState& b = *cur_block) {
  const size_t lo = kSmemOffset, hi = kSmemOffset + b.smem_bytes;
  if (a < kSmemWindow + lo || a - kSmemWindow + bytes > hi) die("a shared-memory access outside the dynamic shared memory");
  return b.window + (a - kSmemWindow);
}
/** Die when [a, a + bytes) of block b overlaps a live mbarrier (PTX ISA, mbarrier "Lifecycle": its
 *  memory is not for other uses until it is invalidated). */
inline void check_not_mbarrier(uint32_t a, size_t bytes, const char* what, BlockState& b = *cur_block) {
  auto it = b.mbars.lower_bound(a >= 7 ? a - 7 : 0);
  if (it != b.mbars.end() && it->first < a + bytes) die(std::string(what) + " writes over a live mbarrier");
}

// ---- shared::cluster addresses (mapa): a shared-window address with its block's cluster rank + 1
// in bits 24..27 (0: the running block's own, as a shared::cta address is for the executing CTA)
inline constexpr int kClusterRankShift = 24;
/** mapa.shared::cluster: the shared::cluster address of shared address a in cluster block `rank`. */
inline uint32_t cluster_address(uint32_t a, uint32_t rank) {
  if (a >> kClusterRankShift) die("mapa: the address is already a shared::cluster address");
  if (rank >= cur_block->cluster.size()) die("mapa: rank " + std::to_string(rank) + " outside the cluster");
  smem_pointer(a, 1, *cur_block->cluster[rank]);
  return a | ((rank + 1) << kClusterRankShift);
}
/** The block a shared::cluster address is in, and its shared-window address there. */
inline BlockState& cluster_block(uint32_t a, uint32_t* local) {
  const uint32_t r = a >> kClusterRankShift;
  *local = a & ((1u << kClusterRankShift) - 1);
  if (r == 0) return *cur_block;
  if (r - 1 >= cur_block->cluster.size()) die("a shared::cluster address outside the cluster");
  return *cur_block->cluster[r - 1];
}

// ---- mbarriers, by shared address (emu_core.h's MBar table, cleared for each block)
inline MBar& mbar(uint32_t a, BlockState& blk = *cur_block) {
  auto it = blk.mbars.find(a);
  if (it == blk.mbars.end()) die("an mbarrier used before mbarrier.init");
  return it->second;
}
inline void mbar_try_complete(MBar& b) {
  if (b.pending == 0 && b.tx == 0) {
    ++b.phases;
    b.pending = b.count;
  }
}
inline void mbar_init(uint32_t a, uint32_t count) {
  smem_pointer(a, 8);
  if (a % 8 != 0) die("mbarrier.init: the object must be 8-byte aligned");
  if (count < 1 || count > (1u << 20) - 1) die("mbarrier.init: the expected arrival count must be 1 .. 2^20 - 1");
  mbars()[a] = MBar{int(count), int(count), 0, 0};
}
inline void mbar_arrive(uint32_t a) {
  MBar& b = mbar(a);
  if (b.pending <= 0) die("more arrivals on an mbarrier than its count in one phase");
  --b.pending;
  ++events;
  mbar_try_complete(b);
}
inline void mbar_expect_tx(uint32_t a, uint32_t bytes) {
  mbar(a).tx += bytes;
  mbar_arrive(a);
}
/** Spin (yielding) until the phase of parity `parity` has completed. */
inline void mbar_wait(uint32_t a, uint32_t parity) {
  while ((mbar(a).phases & 1u) == (parity & 1u)) yield();
}
inline void bulk_copy(uint32_t dst, const void* src, uint32_t bytes, uint32_t bar) {
  if (bytes % 16 != 0 || dst % 16 != 0 || uintptr_t(src) % 16 != 0) die("cp.async.bulk: size and addresses must be 16-byte multiples");
  check_load(src, bytes, 16, "cp.async.bulk");
  check_not_mbarrier(dst, bytes, "cp.async.bulk");
  std::memcpy(smem_pointer(dst, bytes), src, bytes);
  MBar& b = mbar(bar);
  b.tx -= bytes;
  ++events;
  mbar_try_complete(b);
}

/** st.async.shared::cluster.mbarrier::complete_tx::bytes: `bytes` (4, 8 or 16, aligned) stored into
 *  another block of the cluster at shared::cluster address `remote`, completing that many bytes on
 *  the mbarrier at `remote_bar`, which must be in the same block (PTX ISA, st.async). Stored and
 *  completed at issue, as bulk_copy. */
inline void st_async(uint32_t remote, const void* v, uint32_t bytes, uint32_t remote_bar) {
  if ((bytes != 4 && bytes != 8 && bytes != 16) || remote % bytes != 0) die("st.async: 4, 8 or 16 bytes at an aligned address");
  uint32_t at = 0, bar_at = 0;
  BlockState& b = cluster_block(remote, &at);
  if (&cluster_block(remote_bar, &bar_at) != &b) die("st.async: the mbarrier is not in the block written to");
  check_not_mbarrier(at, bytes, "st.async", b);
  std::memcpy(smem_pointer(at, bytes, b), v, bytes);
  MBar& m = mbar(bar_at, b);
  m.tx -= bytes;
  ++events;
  mbar_try_complete(m);
}

// ---- warp collectives: each lane deposits, the warp meets, each lane reads
template <class T>
T warp_shuffle(T x, int src_lane) {
  static_assert(sizeof(T) <= 8, "a shuffled value fits 64 bits");
  const int w = int(g_threadIdx.x) / 32, lane = int(g_threadIdx.x) % 32;
  uint64_t bits = 0;
  std::memcpy(&bits, &x, sizeof(T));
  cur_block->xchg[w].v[lane] = bits;
  warp_collective(kOpShuffle);
  T r;
  const uint64_t got = cur_block->xchg[w].v[src_lane & 31];
  std::memcpy(&r, &got, sizeof(T));
  bar_wait(warp_bar(w));
  return r;
}
template <class T, class Op>
T warp_reduce(T x, Op op) {
  T r = x;
  for (int i = 0; i < 32; ++i) {
    const T other = warp_shuffle(x, i);
    r = i == 0 ? other : op(r, other);
  }
  return r;
}

}  // namespace emu
