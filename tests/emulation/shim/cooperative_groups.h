// shim/cooperative_groups.h: the cluster API the wgmma kernel's split-K path names. Clusters are not
// emulated (yet): the launch refuses a cluster dimension above 1, so these are never reached.
#pragma once

#include "emu_core.h"

namespace cooperative_groups {
struct cluster_group {
  void sync() { ::emu::die("clusters are not emulated"); }
  unsigned block_rank() { ::emu::die("clusters are not emulated"); }
  template <class T>
  T* map_shared_rank(T*, unsigned) {
    ::emu::die("clusters are not emulated");
  }
};
inline cluster_group this_cluster() { return cluster_group{}; }
}  // namespace cooperative_groups
