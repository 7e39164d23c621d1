// emu_async.h: the sm_90 asynchronous machinery for emu_core.h: the 32-bit shared-window addresses
// of a block's dynamic shared memory, mbarriers (arrival count, transaction bytes, phase parity), the
// bulk copy global -> shared (copied at issue, completing its bytes on the mbarrier at once: the
// earliest a copy can land, so a slot refilled before its readers finish shows as wrong data), and
// the warp collectives (shuffles, reductions, __syncwarp) as exchanges at the warp's barrier.
#pragma once

#include <cstdint>
#include <cstring>
#include <map>
#include <vector>

#include "emu_core.h"

namespace emu {

inline uint32_t smem_address(const void* p) {
  const auto* b = smem_base();
  const auto* c = static_cast<const unsigned char*>(p);
  if (c < b || c >= b + smem_size()) die("a shared-memory address outside the block's dynamic shared memory");
  return kSmemWindow + uint32_t(c - b);
}
inline unsigned char* smem_pointer(uint32_t a, size_t bytes) {
  if (a < kSmemWindow || a - kSmemWindow + bytes > smem_size()) die("a shared-memory access outside the window");
  return smem_base() + (a - kSmemWindow);
}

// ---- mbarriers, by shared address (emu_core.h's MBar table, cleared for each block)
inline MBar& mbar(uint32_t a) {
  auto it = mbars().find(a);
  if (it == mbars().end()) die("an mbarrier used before mbarrier.init");
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
  std::memcpy(smem_pointer(dst, bytes), src, bytes);
  MBar& b = mbar(bar);
  b.tx -= bytes;
  ++events;
  mbar_try_complete(b);
}

// ---- warp collectives: each lane deposits, the warp meets, each lane reads
template <class T>
T warp_shuffle(T x, int src_lane) {
  static_assert(sizeof(T) <= 8, "a shuffled value fits 64 bits");
  const int w = int(g_threadIdx.x) / 32, lane = int(g_threadIdx.x) % 32;
  uint64_t bits = 0;
  std::memcpy(&bits, &x, sizeof(T));
  cur_block->xchg[w].v[lane] = bits;
  bar_wait(warp_bar(w));
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
