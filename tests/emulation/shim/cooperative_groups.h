// shim/cooperative_groups.h: the thread-block cluster API the wgmma kernel's split-K path uses, over
// emu_core.h's clusters (emu::launch_cooperative with cluster_z > 1).
#pragma once

#include "emu_core.h"

namespace cooperative_groups {
struct cluster_group {
  /** barrier.cluster arrive + wait: every thread of every block of the cluster. */
  void sync() { ::emu::bar_wait(*::emu::cur_block->cluster_bar); }
  unsigned block_rank() { return ::emu::cur_block->cluster_rank; }
  /** The same offset in block `rank`'s shared memory (distributed shared memory). */
  template <class T>
  T* map_shared_rank(T* p, unsigned rank) {
    const auto* mine = ::emu::cur_block->smem;
    const auto off = reinterpret_cast<const unsigned char*>(p) - mine;
    if (off < 0 || size_t(off) >= ::emu::cur_block->smem_bytes) ::emu::die("map_shared_rank: not a shared-memory address");
    return reinterpret_cast<T*>(::emu::cur_block->cluster.at(rank)->smem + off);
  }
};
inline cluster_group this_cluster() {
  if (!::emu::cur_block->cluster_bar) ::emu::die("this_cluster() outside a cluster launch");
  return cluster_group{};
}
}  // namespace cooperative_groups
