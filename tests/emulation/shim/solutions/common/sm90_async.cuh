// shim of solutions/common/sm90_async.cuh for the CPU emulation: the same functions over emu_async.h
// (mbarriers, bulk copies completing at issue, the shared window) and plain accesses.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>

#include "emu_async.h"

/** The block's own dynamic shared memory (emu_core.h's BlockState). */
#define NIBBLE_DYNAMIC_SMEM(name, align) unsigned char* const name = ::emu::smem_base()

namespace nibble::sol {

inline unsigned long long globaltimer_ns() { return ++::emu::events; }
inline void red_add_v4(float* out, float4 v) {
  out[0] += v.x, out[1] += v.y, out[2] += v.z, out[3] += v.w;
}
inline uint4 ld_stream(const uint4* p) { return __ldcs(p); }
inline uint32_t smem_addr(const void* p) { return ::emu::smem_address(p); }
inline void mbar_init(uint32_t bar, uint32_t count) { ::emu::mbar_init(bar, count); }
inline void mbar_init(uint64_t* bar, uint32_t count) { mbar_init(smem_addr(bar), count); }
inline void mbar_init_fence() {}
inline void mbar_wait(uint32_t bar, uint32_t parity) { ::emu::mbar_wait(bar, parity); }
inline void mbar_wait(uint64_t* bar, uint32_t parity) { mbar_wait(smem_addr(bar), parity); }
inline void mbar_arrive(uint32_t bar) { ::emu::mbar_arrive(bar); }
inline void mbar_arrive(uint64_t* bar) { mbar_arrive(smem_addr(bar)); }
inline void mbar_expect_tx(uint32_t bar, uint32_t bytes) { ::emu::mbar_expect_tx(bar, bytes); }
inline void mbar_expect_tx(uint64_t* bar, uint32_t bytes) { mbar_expect_tx(smem_addr(bar), bytes); }
inline void bulk_load(uint32_t dst, const void* src, uint32_t bytes, uint32_t bar, uint64_t) {
  ::emu::bulk_copy(dst, src, bytes, bar);
}
inline void bulk_load(void* dst, const void* src, uint32_t bytes, uint64_t* bar, uint64_t policy) {
  bulk_load(smem_addr(dst), src, bytes, smem_addr(bar), policy);
}
inline uint32_t cluster_smem_addr(uint32_t a, uint32_t rank) { return ::emu::cluster_address(a, rank); }
inline void st_async_v4(uint32_t remote, uint4 v, uint32_t remote_bar) { ::emu::st_async(remote, &v, 16, remote_bar); }
inline void mbar_wait_cluster(uint32_t bar, uint32_t parity) { ::emu::mbar_wait(bar, parity); }
/** No cache to fill here; what is checked is the PTX's rule (a multiple of 16 bytes, 16-byte aligned)
 *  and that the range is memory the kernel may read. */
inline void bulk_prefetch_l2(const void* src, uint32_t bytes) {
  if (bytes % 16 != 0) ::emu::die("cp.async.bulk.prefetch.L2: the size is not a multiple of 16");
  ::emu::check_range(src, bytes, 16, "cp.async.bulk.prefetch.L2");
}
/** cp.async: copied at issue (the earliest it can land). */
inline void cp_async_16(void* smem_dst, const void* src) {
  ::emu::check_load(src, 16, 16, "cp.async");
  std::memcpy(::emu::smem_pointer(::emu::smem_address(smem_dst), 16), src, 16);
}
inline void cp_async_commit() {}
inline void cp_async_wait_all() {}
inline void fence_proxy_async_smem() {}
inline uint64_t policy_evict_first() { return 0; }
inline uint64_t policy_evict_last() { return 0; }

}  // namespace nibble::sol
