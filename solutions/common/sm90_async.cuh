// sm90_async.cuh: the Hopper asynchronous-copy primitives the sm_90a solutions share: mbarriers
// (init, arrive, expect_tx, the parity wait) and bulk copies global -> shared on the copy engine
// (cp.async.bulk, completing on an mbarrier's transaction count), with L2 cache policies; and the
// few other instructions they share (the vector float reduction, the streamed load, %globaltimer);
// and stores into another block of a thread-block cluster completing on its mbarrier (st.async).
//
// Source: PTX ISA 8.x, "Parallel synchronization and communication instructions: mbarrier" and
// "Data movement: cp.async.bulk", "st.async" and "mapa" (sm_90). Every function takes shared-memory addresses as the
// 32-bit shared-window address (smem_addr) or as a generic pointer into shared memory.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace nibble::sol {

/** The GPU's global nanosecond timer (%globaltimer, PTX ISA "Special registers"; any sm_70+): the
 *  solutions' timeline traces and the megakernel's delay probe read it. */
__device__ __forceinline__ unsigned long long globaltimer_ns() {
  unsigned long long t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  return t;
}

/** out[0..3] += v with one vector reduction (red.global.add.v4.f32, sm_90; out 16-byte aligned). */
__device__ __forceinline__ void red_add_v4(float* out, float4 v) {
  asm volatile("red.global.add.v4.f32 [%0], {%1, %2, %3, %4};" ::"l"(out), "f"(v.x), "f"(v.y), "f"(v.z), "f"(v.w)
               : "memory");
}

/** 16 bytes global -> shared on the thread's cp.async queue (cp.async.cg, L2 only, sm_80+);
 *  cp_async_commit closes a group, cp_async_wait_all waits for every group of the thread. */
__device__ __forceinline__ void cp_async_16(void* smem_dst, const void* src) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(static_cast<uint32_t>(__cvta_generic_to_shared(smem_dst))),
               "l"(src)
               : "memory");
}
__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
__device__ __forceinline__ void cp_async_wait_all() { asm volatile("cp.async.wait_all;" ::: "memory"); }

/** 16 bytes, streamed (ld.global.cs, any sm_70+): weights read once per call leave L2 to the
 *  activations. */
__device__ __forceinline__ uint4 ld_stream(const uint4* p) { return __ldcs(p); }

/** Declares `name` as the block's dynamic shared memory (`align`-byte aligned), in a kernel's body.
 *  A macro, not a function returning the pointer (that changed the decode kernel's code): the CPU
 *  emulation (tests/emulation) defines it to hand each block its own buffer. */
#define NIBBLE_DYNAMIC_SMEM(name, align) extern __shared__ __align__(align) unsigned char name[]

/** The 32-bit shared-window address of a generic pointer into shared memory. */
__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

/** One thread: an mbarrier expecting `count` arrivals per phase. Make it visible to the copy engine
 *  with fence.mbarrier_init (mbar_init_fence) and to the block with a barrier before use. */
__device__ __forceinline__ void mbar_init(uint32_t bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(bar), "r"(count) : "memory");
}
__device__ __forceinline__ void mbar_init(uint64_t* bar, uint32_t count) { mbar_init(smem_addr(bar), count); }
__device__ __forceinline__ void mbar_init_fence() { asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory"); }

/** Spin until the phase of parity `parity` of the mbarrier at shared address `bar` has completed. */
__device__ __forceinline__ void mbar_wait(uint32_t bar, uint32_t parity) {
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "WAIT_%=:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n"
      "@!p bra WAIT_%=;\n"
      "}\n" ::"r"(bar),
      "r"(parity)
      : "memory");
}
__device__ __forceinline__ void mbar_wait(uint64_t* bar, uint32_t parity) { mbar_wait(smem_addr(bar), parity); }

__device__ __forceinline__ void mbar_arrive(uint32_t bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(bar) : "memory");
}
__device__ __forceinline__ void mbar_arrive(uint64_t* bar) { mbar_arrive(smem_addr(bar)); }

/** Arrive and add `bytes` to the phase's expected transaction count (the copies' complete_tx). */
__device__ __forceinline__ void mbar_expect_tx(uint32_t bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(bar), "r"(bytes) : "memory");
}
__device__ __forceinline__ void mbar_expect_tx(uint64_t* bar, uint32_t bytes) { mbar_expect_tx(smem_addr(bar), bytes); }

/** Bulk copy on the copy engine: `bytes` (a multiple of 16, both addresses 16-byte aligned) from
 *  global src to shared address dst, completing on the mbarrier at shared address bar, with the L2
 *  cache policy `policy` (policy_evict_first / policy_evict_last). */
__device__ __forceinline__ void bulk_load(uint32_t dst, const void* src, uint32_t bytes, uint32_t bar, uint64_t policy) {
  asm volatile(
      "cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1], %2, [%3], %4;" ::"r"(
          dst),
      "l"(reinterpret_cast<uint64_t>(src)), "r"(bytes), "r"(bar), "l"(policy)
      : "memory");
}
__device__ __forceinline__ void bulk_load(void* dst, const void* src, uint32_t bytes, uint64_t* bar, uint64_t policy) {
  bulk_load(smem_addr(dst), src, bytes, smem_addr(bar), policy);
}

/** mapa.shared::cluster: the shared::cluster address of shared address `a` (a variable of this
 *  block's shared memory) in the block of cluster rank `rank` (the same variable there). */
__device__ __forceinline__ uint32_t cluster_smem_addr(uint32_t a, uint32_t rank) {
  uint32_t r;
  asm volatile("mapa.shared::cluster.u32 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(rank));
  return r;
}

/** 16 bytes stored into another block of the cluster (st.async, sm_90): `remote` and `remote_bar`
 *  are shared::cluster addresses (cluster_smem_addr) of one block; the store completes 16 bytes of
 *  the transaction count of that block's mbarrier at remote_bar, whose owner arms it with
 *  mbar_expect_tx and waits with mbar_wait_cluster. The completion is a release at cluster scope:
 *  the waiter sees every byte of a completed phase. */
__device__ __forceinline__ void st_async_v4(uint32_t remote, uint4 v, uint32_t remote_bar) {
  asm volatile("st.async.shared::cluster.mbarrier::complete_tx::bytes.v4.b32 [%0], {%1, %2, %3, %4}, [%5];" ::"r"(
                   remote),
               "r"(v.x), "r"(v.y), "r"(v.z), "r"(v.w), "r"(remote_bar)
               : "memory");
}

/** mbar_wait with acquire at cluster scope: what another block of the cluster stored with st_async
 *  before the phase completed is visible after it (PTX ISA, mbarrier.try_wait ".acquire.cluster"). */
__device__ __forceinline__ void mbar_wait_cluster(uint32_t bar, uint32_t parity) {
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "WAIT_%=:\n"
      "mbarrier.try_wait.parity.acquire.cluster.shared::cta.b64 p, [%0], %1;\n"
      "@!p bra WAIT_%=;\n"
      "}\n" ::"r"(bar),
      "r"(parity)
      : "memory");
}

/** Start pulling `bytes` (a multiple of 16, src 16-byte aligned) of global memory into L2 on the copy
 *  engine: no registers, no shared memory, no completion to wait for. */
__device__ __forceinline__ void bulk_prefetch_l2(const void* src, uint32_t bytes) {
  asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(reinterpret_cast<uint64_t>(src)), "r"(bytes) : "memory");
}

/** Order this thread's (and, after a barrier, the block's) generic-proxy accesses to shared memory
 *  before the copy engine's next writes there (a buffer read with LDS, then refilled). */
__device__ __forceinline__ void fence_proxy_async_smem() { asm volatile("fence.proxy.async.shared::cta;" ::: "memory"); }

/** L2 policies for bulk copies: evict-first for data read once (weights, the KV cache), evict-last
 *  for data read again. */
__device__ __forceinline__ uint64_t policy_evict_first() {
  uint64_t p;
  asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(p));
  return p;
}
__device__ __forceinline__ uint64_t policy_evict_last() {
  uint64_t p;
  asm volatile("createpolicy.fractional.L2::evict_last.b64 %0, 1.0;" : "=l"(p));
  return p;
}

}  // namespace nibble::sol
