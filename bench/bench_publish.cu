// bench_publish.cu: the one-way latency of publishing a 3072-float vector (12 KB, one layer's
// activation row of the Llama-3.2-3B decode step) from one SM to another while the grid streams
// weights with bulk copies, for each candidate publishing scheme of the megakernel's dataflow design
// (issue 21 step 2; solutions/decode/megakernel/NOTES.md), and what the publishing does to the stream.
//
// Shape. One block of 160 threads per SM (a co-resident grid: 1 block per SM by its shared memory,
// checked with the occupancy calculator, launched cooperatively, or as 2-CTA clusters for (e)).
// Warp 4 of every block is the streamer: its lane 0 keeps `inflight` bytes of cp.async.bulk
// global -> shared copies in flight (a ring of `inflight / stage_bytes` stages, each re-issued as
// soon as it lands, from fresh DRAM addresses, L2 evict-first: the megakernel's weight ring), and
// counts the bytes that land. Warps 0-3 (128 threads, "the group") of two blocks, ping and pong,
// play ping-pong with the vector: ping publishes epoch e, pong waits for it, reads the whole vector
// and checks every word against the epoch, then publishes epoch e back the same way, which ping
// waits for, reads and checks. Every other block only streams. Main configuration: the ping and
// pong SMs stream too ("pair streams"); the "pair quiet" configuration leaves their streamer idle
// (scheme (f) is (a) in that configuration: the release issued from SMs that stream nothing).
// Group thread t writes words {4(128k + t) .. +3} (k < 6; the 8-byte-element schemes: words 128k + t,
// k < 24) and reads the same words of the other direction's vector; every reading thread waits for
// the signal itself (no single poller + __syncthreads, unlike the megakernel's grid_wait), and a
// round trip ends only when the whole group has read and checked its share (a group barrier), so
// a direction's time is the whole vector's.
//
// Timing. Ping's thread 0 reads clock64() before publishing and after its group has read and
// checked the answer: a round trip begins and ends on one SM, so one SM's clock measures it
// exactly (clock64 is per SM and is not comparable across SMs); one-way = round trip / 2 (both
// directions use the same scheme, and each direction is a full publish + wait + read + check +
// the group's barrier). %globaltimer ticks too coarsely (it is not cycle-resolution) for one
// iteration, so it serves only to convert: the SM clock of the run is (clock64 delta) / (globaltimer
// delta) over the whole timed loop (milliseconds: its coarseness vanishes), and ns = cycles / that
// clock. Median and p90 over `iters` round trips (after `warmup`). The stream's rate per SM is
// bytes landed / globaltimer time between its first full ring landing and the stop (set by ping at
// the end of its loop); the same kernel with no publishing ("stream only", all SMs streaming, the
// same in-flight bytes) gives the rate without publishing.
//
// Schemes (S below; the memory-model argument of each is at its code, search "MODEL"):
//   (a)  a_relacq            weak stores, the group's bar.sync, red.release.gpu on a counter by one
//                            thread; every reader polls ld.acquire.gpu, then weak loads (today's)
//   (b)  b_bulk_fence        the group writes the vector to shared memory, fence.proxy.async, bar.sync;
//                            one thread cp.async.bulk.global.shared::cta + wait_group 0 +
//                            fence.acq_rel.gpu + red.relaxed.gpu on a counter; readers as (a)
//        b_bulk_nofence      the same without fence.acq_rel.gpu: UNSAFE by the PTX model (measured
//                            only to price the fence)
//   (c)  c_ll8               NCCL's LL protocol in the model-guaranteed form: each word stored as one
//                            8-byte {value, epoch} st.relaxed.gpu.b64, polled by ld.relaxed.gpu.b64
//        c_ll16              NCCL's actual LL form: 16-byte {v0, epoch, v1, epoch} st/ld.volatile.v4:
//                            UNSAFE by the PTX model (a vector access is modelled as separate scalar
//                            accesses), correct on the hardware as NCCL uses it
//   (d)  d_count             "count arrivals": every group thread stores its part and does its own
//                            red.release.gpu.add of 1 (no bar.sync); readers ld.acquire until 128 x e
//        d_selfcount         self-counting 64-bit reductions: each word is a u64 accumulated by two
//                            contributors (two warps, as a split-K), each red.relaxed.gpu.add.u64 of
//                            (1 << 48) + its signed part; a reader polls each word with ld.relaxed
//                            until its count field says both arrived; no counter, no fence
//   (e)  e_cluster           ping and pong are the two CTAs of a 2-CTA cluster: st.async.v4 into the
//                            partner's shared memory completing on its mbarrier (complete_tx), the
//                            partner waits on the mbarrier (try_wait.acquire.cluster) and reads
//   (f)  a_relacq with the pair quiet (see above)
//
// Checks that can fail: every word read is compared with the value its epoch must carry (word_value
// of epoch, index, direction), so a stale, torn or misplaced word counts a mismatch; every wait is bounded (a
// globaltimer limit, then the run is flagged and aborts instead of hanging the GPU); --selftest
// (run by default, at 0 bytes in flight) makes the producers corrupt one word every 64th epoch and
// requires exactly that many mismatches from every scheme.
//
// Run: build-hopper/bin/bench_publish [--json FILE] [--iters N] [--warmup N] [--stage-bytes B]
//      [--pong BLOCK] [--only a_relacq,c_ll8,...] [--window-us US] [--no-selftest]
// Exit status 0 only when every run passed its checks.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

#include "harness/cuda_check.h"
#include "solutions/decode/megakernel/grid_sync.cuh"
#include "sm90_stream.cuh"

namespace {

namespace sol = nibble::sol;
namespace bench = nibble::bench;

constexpr int kWords = 3072;                  // the vector: 3072 32-bit words
constexpr uint32_t kVecBytes = kWords * 4;    // 12 KB
constexpr int kGroup = 128;                   // the publishing/reading threads of a block (warps 0-3)
constexpr int kStreamWarp = 4;                // warp 4 streams
constexpr int kThreads = kGroup + 32;
constexpr int kQuads = kWords / 4 / kGroup;   // 6 16-byte pieces per thread (a, b, d_count, e)
constexpr int kElems = kWords / kGroup;       // 24 8-byte words per thread (c_ll8, d_selfcount)
constexpr int kPairs = kWords / 2 / kGroup;   // 12 16-byte LL pairs per thread (c_ll16)
constexpr int kMaxStages = 96;
constexpr uint32_t kRingBytes = 192 * 1024;   // the most bytes in flight per SM
constexpr size_t kSrcBytes = size_t(1) << 30; // 1 GiB: far beyond the 60 MB L2, so the stream reads DRAM
constexpr uint32_t kInjectEvery = 64;         // --selftest: one corrupt word every 64th epoch
constexpr unsigned long long kCountOne = 1ull << 48;  // d_selfcount: the count field's unit

enum Scheme : int {
  kStreamOnly = 0,
  kRelAcq,
  kBulkFence,
  kBulkNoFence,
  kLL8,
  kLL16,
  kCountArrivals,
  kSelfCount,
  kCluster,
  kNumSchemes
};
const char* const kSchemeName[kNumSchemes] = {"stream_only", "a_relacq", "b_bulk_fence", "b_bulk_nofence",
                                              "c_ll8",       "c_ll16",   "d_count",      "d_selfcount",
                                              "e_cluster"};
// false: correct on the hardware as far as known, but not guaranteed by the PTX memory model
const bool kModelSafe[kNumSchemes] = {true, true, true, false, true, false, true, true, true};

/** One vector's mailbox per direction (0: ping -> pong, 1: pong -> ping); zeroed before each run. */
struct alignas(128) Mailbox {
  unsigned long long d64[kWords];  // c_ll8 (one word each), c_ll16 (16-byte pairs), d_selfcount
  uint32_t d32[kWords];            // a, b, d_count
  alignas(128) unsigned counter;   // a, b, d_count: on a line of its own
  unsigned pad[31];
};

struct alignas(128) Control {
  unsigned stop;   // ping's loop is over (or a wait gave up): the streamers drain and leave
  unsigned abort;  // a wait gave up: every other wait gives up too
  unsigned pad[30];
};

struct BlockOut {
  unsigned long long stream_bytes, stream_t0, stream_t1;  // bytes landed between t0 and t1 (ns)
  unsigned smid, streamed, timeouts, mismatches;
  unsigned bad_epoch, bad_index, bad_got, bad_want;  // the first mismatch seen (diagnosis)
};

struct PingOut {
  long long clk0, clk1;            // clock64 at the first and after the last timed round trip
  unsigned long long ns0, ns1;     // globaltimer at the same points
  int iters_done, pad;
};

struct Params {
  const unsigned char* src;
  Mailbox* box;         // [2]
  Control* ctl;
  BlockOut* out;        // [gridDim.x]
  PingOut* ping_out;
  long long* rtt;       // [iters]: round trips in ping's SM cycles
  int ping, pong;       // the two blocks
  int iters, warmup;
  int stages;           // ring stages in flight per streaming SM (0: no stream)
  uint32_t stage_bytes;
  int pair_streams;     // the ping and pong SMs stream too
  int inject;           // --selftest: corrupt one word every kInjectEvery-th epoch
  unsigned long long window_ns;   // stream_only: how long to stream
  unsigned long long timeout_ns;  // one wait's limit
  unsigned long long budget_ns;   // the whole kernel's limit
};

// ---------------------------------------------------------------------------------------------
// PTX wrappers: each a single access of the named form (ld_acquire_gpu: grid_sync.cuh's, the
// megakernel's own poll)

using nibble::megakernel::ld_acquire_gpu;

#define PUB_LD(name, T, C, INSN)                                                        \
  __device__ __forceinline__ T name(const void* p) {                                    \
    T v;                                                                                \
    asm volatile(INSN " %0, [%1];" : "=" C(v) : "l"(p) : "memory");                     \
    return v;                                                                           \
  }
#define PUB_ST(name, T, C, INSN)                                                        \
  __device__ __forceinline__ void name(void* p, T v) {                                  \
    asm volatile(INSN " [%0], %1;" ::"l"(p), C(v) : "memory");                          \
  }
#define PUB_LD4(name, A, AC, INSN)                                                      \
  __device__ __forceinline__ uint4 name(A a) {                                          \
    uint4 v;                                                                            \
    asm volatile(INSN " {%0, %1, %2, %3}, [%4];"                                        \
                 : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)                           \
                 : AC(a)                                                                \
                 : "memory");                                                           \
    return v;                                                                           \
  }
#define PUB_ST4(name, A, AC, INSN)                                                      \
  __device__ __forceinline__ void name(A a, uint4 v) {                                  \
    asm volatile(INSN " [%0], {%1, %2, %3, %4};" ::AC(a), "r"(v.x), "r"(v.y), "r"(v.z), \
                 "r"(v.w)                                                               \
                 : "memory");                                                           \
  }
PUB_LD(ld_relaxed_u32, unsigned, "r", "ld.relaxed.gpu.global.u32")
PUB_ST(st_relaxed_u32, unsigned, "r", "st.relaxed.gpu.global.u32")
PUB_ST(red_release_add, unsigned, "r", "red.release.gpu.global.add.u32")
PUB_ST(red_relaxed_add, unsigned, "r", "red.relaxed.gpu.global.add.u32")
PUB_LD(ld_relaxed_u64, unsigned long long, "l", "ld.relaxed.gpu.global.b64")
PUB_ST(st_relaxed_u64, unsigned long long, "l", "st.relaxed.gpu.global.b64")
PUB_ST(red_relaxed_add_u64, unsigned long long, "l", "red.relaxed.gpu.global.add.u64")
PUB_LD4(ld_volatile_v4, const void*, "l", "ld.volatile.global.v4.u32")
PUB_ST4(st_volatile_v4, void*, "l", "st.volatile.global.v4.u32")
PUB_LD4(ld_cg_v4, const void*, "l", "ld.global.cg.v4.u32")  // weak, L2 only: the megakernel's input-build load
PUB_ST4(st_weak_v4, void*, "l", "st.global.v4.u32")
PUB_LD4(ld_shared_v4, uint32_t, "r", "ld.shared.v4.u32")
PUB_ST4(st_shared_v4, uint32_t, "r", "st.shared.v4.u32")
#undef PUB_LD
#undef PUB_ST
#undef PUB_LD4
#undef PUB_ST4
/** The group's barrier (named barrier 1, warps 0-3 only: the streamer warp is not held). */
__device__ __forceinline__ void group_sync() { asm volatile("bar.sync 1, %0;" ::"n"(kGroup) : "memory"); }
/** The group's barrier, returning whether every thread of the group passed ok (so that a loop left
 *  on a timeout is left by the whole group: a named barrier that some threads skip would hang). */
__device__ __forceinline__ bool group_all(bool ok) {
  uint32_t r;
  asm volatile(
      "{\n"
      ".reg .pred q, a;\n"
      "setp.ne.u32 q, %1, 0;\n"
      "bar.red.and.pred a, 1, %2, q;\n"
      "selp.u32 %0, 1, 0, a;\n"
      "}\n"
      : "=r"(r)
      : "r"(uint32_t(ok)), "n"(kGroup)
      : "memory");
  return r != 0;
}
#define PUB_SREG(name, REG)                           \
  __device__ __forceinline__ uint32_t name() {        \
    uint32_t r;                                       \
    asm volatile("mov.u32 %0, " REG ";" : "=r"(r));   \
    return r;                                         \
  }
PUB_SREG(smid, "%%smid")
PUB_SREG(cluster_rank, "%%cluster_ctarank")
#undef PUB_SREG
/** Every thread of every CTA of the cluster (release / acquire at cluster scope). */
__device__ __forceinline__ void cluster_sync() {
  asm volatile("barrier.cluster.arrive.release;\nbarrier.cluster.wait.acquire;" ::: "memory");
}

// ---------------------------------------------------------------------------------------------
// The vector's content and its check

/** The word `i` of epoch `e` in direction `dir`: every word differs from the same word of any other
 *  epoch (within 2^32) and from every other word of its epoch (odd multipliers), so a stale, torn or
 *  misplaced word fails the check. An add per word (the index part is affine in the unrolled loop),
 *  so that making and checking the vector costs little next to the latency measured. */
__host__ __device__ __forceinline__ uint32_t word_value(uint32_t e, uint32_t i, uint32_t dir) {
  return e * 0x9E3779B1u + (i + 4096u * dir) * 0x85EBCA77u;
}

/** --selftest: the one word of epoch e that the producer corrupts (every kInjectEvery-th epoch). */
__device__ __forceinline__ bool injected(const Params& p, uint32_t e, uint32_t i) {
  return p.inject && e % kInjectEvery == 0 && i == e * 37u % kWords;
}
/** What the producer writes: word_value, with bit 0 of the injected word flipped. */
__device__ __forceinline__ uint32_t produced(const Params& p, uint32_t e, uint32_t i, uint32_t dir) {
  return word_value(e, i, dir) ^ uint32_t(injected(p, e, i));
}
__device__ __forceinline__ uint4 produced4(const Params& p, uint32_t e, uint32_t q, uint32_t dir) {
  return make_uint4(produced(p, e, 4 * q, dir), produced(p, e, 4 * q + 1, dir), produced(p, e, 4 * q + 2, dir),
                    produced(p, e, 4 * q + 3, dir));
}

struct Check {
  unsigned bad = 0, e = 0, i = 0, got = 0, want = 0;
  __device__ __forceinline__ void word(uint32_t got_, uint32_t e_, uint32_t i_, uint32_t dir) {
    const uint32_t want_ = word_value(e_, i_, dir);
    if (got_ != want_) {
      if (bad == 0) e = e_, i = i_, got = got_, want = want_;
      ++bad;
    }
  }
  __device__ __forceinline__ void quad(uint4 v, uint32_t e_, uint32_t q, uint32_t dir) {
    word(v.x, e_, 4 * q, dir);
    word(v.y, e_, 4 * q + 1, dir);
    word(v.z, e_, 4 * q + 2, dir);
    word(v.w, e_, 4 * q + 3, dir);
  }
};

/** A bounded spin: ok() is false once `timeout` ns have passed since its 32nd call, or once another
 *  thread aborted (both read every 32 calls, so a wait's fast path reads no clock). */
struct Limit {
  const Params& p;
  unsigned long long until = 0;
  unsigned n = 0;
  __device__ explicit Limit(const Params& p_) : p(p_) {}
  __device__ __forceinline__ bool ok() {
    if ((++n & 31u) != 0) return true;
    const unsigned long long now = sol::globaltimer_ns();
    if (until == 0) until = now + p.timeout_ns;
    return now < until && ld_relaxed_u32(&p.ctl->abort) == 0;
  }
};

/** A wait gave up: count it, and make every other wait and the streamers give up. */
__device__ void give_up(const Params& p) {
  atomicAdd(&p.out[blockIdx.x].timeouts, 1u);
  st_relaxed_u32(&p.ctl->abort, 1u);
  st_relaxed_u32(&p.ctl->stop, 1u);
}

// ---------------------------------------------------------------------------------------------
// Publishing (group thread t; e >= 1, the epoch; dir, the direction, an input of word_value)

struct Side {
  Mailbox* box;        // this direction's mailbox
  uint32_t dir;
  uint32_t vsm;        // this block's 12 KB of shared memory (b: staging; e: where the partner writes)
  uint32_t rx_bar;     // e: this block's receive mbarrier
  uint32_t peer_vsm;   // e: the partner's vsm, as a shared::cluster address
  uint32_t peer_bar;   // e: the partner's receive mbarrier, as a shared::cluster address
};

template <int S>
__device__ __forceinline__ void publish(const Params& p, const Side& o, uint32_t e, int t) {
  if constexpr (S == kRelAcq) {
    // MODEL (a): the group's weak stores precede thread 0's red.release.gpu in causality order
    // (program order, then bar.sync, which orders the group's accesses at CTA scope); a release is
    // cumulative, so its release pattern covers every store of the group. Each reader's
    // ld.acquire.gpu that reads the counter >= e reads this red's write (or a later RMW of the same
    // counter: observation order passes through atomic RMWs), so it synchronizes with the release,
    // and the reader's weak loads after it (program order) see the vector: no data race, every word
    // is epoch e's.
#pragma unroll
    for (int k = 0; k < kQuads; ++k) {
      const uint32_t q = k * kGroup + t;
      st_weak_v4(o.box->d32 + 4 * q, produced4(p, e, q, o.dir));
    }
    group_sync();
    if (t == 0) red_release_add(&o.box->counter, 1u);
  } else if constexpr (S == kBulkFence || S == kBulkNoFence) {
    // MODEL (b): (1) the group's st.shared are generic-proxy writes that the bulk copy reads through
    // the async proxy: each writer's fence.proxy.async.shared::cta, then bar.sync, orders them
    // before thread 0's cp.async.bulk. (2) "The completion of a cp{.reduce}.async.bulk operation is
    // followed by an implicit generic-async proxy fence" (PTX ISA, Async Proxy): after
    // cp.async.bulk.wait_group 0 (not .read: that one only waits for the source reads) the copy's
    // global writes are visible to thread 0's generic proxy, as if thread 0 had made them. (3) To
    // publish them at GPU scope thread 0 still needs a release pattern: fence.acq_rel.gpu followed by
    // the strong red.relaxed.gpu on the counter (= red.release.gpu); readers as (a). That fence is
    // the one the model requires. b_bulk_nofence leaves it out: the relaxed red is then unordered
    // with the copy's writes in the model (a reader may see the count and stale words): UNSAFE, kept
    // to price the fence.
#pragma unroll
    for (int k = 0; k < kQuads; ++k) {
      const uint32_t q = k * kGroup + t;
      st_shared_v4(o.vsm + 16 * q, produced4(p, e, q, o.dir));
    }
    sol::fence_proxy_async_smem();
    group_sync();
    if (t == 0) {
      asm volatile("cp.async.bulk.global.shared::cta.bulk_group [%0], [%1], %2;" ::"l"(o.box->d32), "r"(o.vsm),
                   "r"(kVecBytes)
                   : "memory");
      asm volatile("cp.async.bulk.commit_group;" ::: "memory");
      asm volatile("cp.async.bulk.wait_group 0;" ::: "memory");
      if constexpr (S == kBulkFence) asm volatile("fence.acq_rel.gpu;" ::: "memory");
      red_relaxed_add(&o.box->counter, 1u);
    }
    // Reuse of vsm: the next epoch's st.shared come after thread 0's wait_group (its completion
    // carries the implicit proxy fence) through the group barrier of the read side (group_all), so
    // the copy has read vsm before any thread writes it again.
  } else if constexpr (S == kLL8) {
    // MODEL (c): each word travels as one naturally aligned 8-byte {value, epoch} st.relaxed.gpu.b64
    // and is read by ld.relaxed.gpu.b64 of the same address: morally strong (both strong, gpu scope
    // includes both threads, complete overlap), so the read is single-copy atomic: it returns one
    // write whole, never half of one. A reader that sees epoch e in the word therefore holds epoch
    // e's value; no other location is involved, so no ordering (no fence, no release) is needed.
    // The buffer is reused only after the partner's answer, which the partner sends after its reads.
#pragma unroll
    for (int k = 0; k < kElems; ++k) {
      const uint32_t i = k * kGroup + t;
      st_relaxed_u64(o.box->d64 + i, (static_cast<unsigned long long>(e) << 32) | produced(p, e, i, o.dir));
    }
  } else if constexpr (S == kLL16) {
    // MODEL (c_ll16): NCCL's LL line: {v0, e, v1, e} in one st.volatile.v4.u32. The PTX model treats
    // a vector access as four scalar accesses in unspecified order, so a reader may see e in both
    // flag words and an old v0 in the model: UNSAFE by the model; the hardware performs an aligned
    // 16-byte access as one (what NCCL relies on).
#pragma unroll
    for (int k = 0; k < kPairs; ++k) {
      const uint32_t j = k * kGroup + t;
      st_volatile_v4(o.box->d64 + 2 * j, make_uint4(produced(p, e, 2 * j, o.dir), e, produced(p, e, 2 * j + 1, o.dir), e));
    }
  } else if constexpr (S == kCountArrivals) {
    // MODEL (d_count): each thread's own red.release.gpu covers its own stores (program order). The
    // counter takes 128 such RMWs per epoch; a reader's ld.acquire.gpu that reads >= 128 e reads the
    // result of a chain of RMWs that contains all 128 of epoch e (and every earlier one), and
    // observation order passes through atomic RMWs, so the acquire synchronizes with each of the
    // 128 releases: every word is visible. No bar.sync on the producer side.
#pragma unroll
    for (int k = 0; k < kQuads; ++k) {
      const uint32_t q = k * kGroup + t;
      st_weak_v4(o.box->d32 + 4 * q, produced4(p, e, q, o.dir));
    }
    red_release_add(&o.box->counter, 1u);
  } else if constexpr (S == kSelfCount) {
    // MODEL (d_selfcount): word i is a u64 accumulated by two red.relaxed.gpu.add.u64, one from
    // thread i % 128 (part a = v >> 1) and one from thread (i % 128) ^ 64 (part b = v - a), a warp 2
    // away, as two split-K producers. Each adds (1 << 48) + its part (two's complement), so the word
    // is the count of contributions << 48 plus the signed sum of the parts, exactly (integer adds,
    // |sum| < 2^47). The reader's ld.relaxed.gpu.b64 and the reds are morally strong 8-byte accesses
    // to one location: single-copy atomic, so a read returns the word after some prefix (in the
    // location's coherence order) of its reductions, and the count field says which: when
    // word - previous epoch's word carries count 2, both parts of epoch e are in it. Data and count
    // are one atomic word: no fence, no counter, no ordering between locations. With fp32 data the
    // value would be fixed point (a per-row scale): deterministic too, the sum is order-independent.
#pragma unroll
    for (int k = 0; k < kElems; ++k) {
      const uint32_t i = k * kGroup + t, i2 = k * kGroup + (t ^ 64);
      const long long v = static_cast<int32_t>(word_value(e, i, o.dir));
      const long long v2 = static_cast<int32_t>(word_value(e, i2, o.dir));
      // --selftest: the injected word's part a is one too large
      red_relaxed_add_u64(o.box->d64 + i, kCountOne + static_cast<unsigned long long>((v >> 1) + injected(p, e, i)));
      red_relaxed_add_u64(o.box->d64 + i2, kCountOne + static_cast<unsigned long long>(v2 - (v2 >> 1)));
    }
  } else if constexpr (S == kCluster) {
    // MODEL (e): st.async is a weak store into the partner CTA's shared memory whose mbarrier
    // complete_tx has release semantics at cluster scope (PTX ISA, st.async); the partner's
    // mbarrier.try_wait.parity.acquire.cluster that observes the phase complete (the partner armed
    // it with arrive.expect_tx of 12288 bytes, so it completes only when all 768 16-byte stores have
    // completed their bytes) acquires them: its ld.shared after the wait see the vector. The
    // partner re-arms the next phase right after reading (before it answers), and this CTA writes
    // the partner's buffer again only after reading that answer, so the partner's reads happen
    // before the next epoch's writes.
#pragma unroll
    for (int k = 0; k < kQuads; ++k) {
      const uint32_t q = k * kGroup + t;
      sol::st_async_v4(o.peer_vsm + 16 * q, produced4(p, e, q, o.dir), o.peer_bar);
    }
  }
}

/** Wait for epoch e on `in`, read the whole of this thread's share and check it. False when the wait
 *  gave up. prev: d_selfcount's words of the previous epoch. */
template <int S>
__device__ __forceinline__ bool wait_read(const Params& p, const Side& in, uint32_t e, int t, Check& chk,
                                          unsigned long long (&prev)[kElems]) {
  Limit lim(p);
  if constexpr (S == kRelAcq || S == kBulkFence || S == kBulkNoFence || S == kCountArrivals) {
    const unsigned target = S == kCountArrivals ? kGroup * e : e;
    while (ld_acquire_gpu(&in.box->counter) < target)
      if (!lim.ok()) return false;
    uint4 v[kQuads];
#pragma unroll
    for (int k = 0; k < kQuads; ++k) v[k] = ld_cg_v4(in.box->d32 + 4 * (k * kGroup + t));
#pragma unroll
    for (int k = 0; k < kQuads; ++k) chk.quad(v[k], e, k * kGroup + t, in.dir);
  } else if constexpr (S == kCluster) {
    while (!bench::mbar_try_wait<true>(in.rx_bar, (e - 1) & 1u))
      if (!lim.ok()) return false;
#pragma unroll
    for (int k = 0; k < kQuads; ++k) chk.quad(ld_shared_v4(in.vsm + 16 * (k * kGroup + t)), e, k * kGroup + t, in.dir);
  } else if constexpr (S == kLL8 || S == kSelfCount) {
    // every pending word is loaded in one pass (24 independent loads in flight), then checked
    uint32_t pending = (1u << kElems) - 1;
    for (;;) {
      unsigned long long w[kElems];
#pragma unroll
      for (int k = 0; k < kElems; ++k)
        if (pending & (1u << k)) w[k] = ld_relaxed_u64(in.box->d64 + k * kGroup + t);
#pragma unroll
      for (int k = 0; k < kElems; ++k) {
        if (!(pending & (1u << k))) continue;
        const uint32_t i = k * kGroup + t;
        if constexpr (S == kLL8) {
          if (static_cast<uint32_t>(w[k] >> 32) == e) {
            chk.word(static_cast<uint32_t>(w[k]), e, i, in.dir);
            pending &= ~(1u << k);
          }
        } else {
          const unsigned long long d = w[k] - prev[k];
          const unsigned long long count = (d + (kCountOne >> 1)) >> 48;
          if (count >= 2) {  // more than 2 cannot happen in ping-pong: it would show as a mismatch
            const long long v = static_cast<long long>(d - 2 * kCountOne);
            chk.word(count == 2 && v == static_cast<int32_t>(v) ? static_cast<uint32_t>(v) : ~word_value(e, i, in.dir),
                     e, i, in.dir);
            prev[k] = w[k];
            pending &= ~(1u << k);
          }
        }
      }
      if (pending == 0) break;
      if (!lim.ok()) return false;
    }
  } else if constexpr (S == kLL16) {
    uint32_t pending = (1u << kPairs) - 1;
    for (;;) {
      uint4 w[kPairs];
#pragma unroll
      for (int k = 0; k < kPairs; ++k)
        if (pending & (1u << k)) w[k] = ld_volatile_v4(in.box->d64 + 2 * (k * kGroup + t));
#pragma unroll
      for (int k = 0; k < kPairs; ++k) {
        if (!(pending & (1u << k))) continue;
        if (w[k].y == e && w[k].w == e) {
          const uint32_t j = k * kGroup + t;
          chk.word(w[k].x, e, 2 * j, in.dir);
          chk.word(w[k].z, e, 2 * j + 1, in.dir);
          pending &= ~(1u << k);
        }
      }
      if (pending == 0) break;
      if (!lim.ok()) return false;
    }
  }
  return true;
}

// ---------------------------------------------------------------------------------------------
// The streamer: lane 0 of warp 4 keeps p.stages stages of p.stage_bytes in flight, re-issuing each
// stage as soon as it lands, until ctl->stop; counts the bytes that land after the first full ring.

__device__ void stream(const Params& p, uint32_t ring, const uint64_t* bars, unsigned long long deadline) {
  const uint64_t policy = sol::policy_evict_first();
  const int n = p.stages;
  size_t issued = 0, waited = 0;
  for (int s = 0; s < n; ++s)
    bench::stream_issue(ring + s * p.stage_bytes, sol::smem_addr(&bars[s]), p.src, issued++ * gridDim.x + blockIdx.x,
                        p.stage_bytes, kSrcBytes, policy);
  unsigned long long bytes = 0, t0 = 0, t1 = 0;
  bool good = true;
  // the stop flag is loaded 8 landings before it is looked at, so its L2 round trip is never waited on
  unsigned stop_loaded = ld_relaxed_u32(&p.ctl->stop);
  for (;;) {
    const int s = int(waited % n);
    Limit lim(p);
    while (!bench::mbar_try_wait(sol::smem_addr(&bars[s]), uint32_t(waited / n) & 1u))
      if (!lim.ok()) {
        good = false;
        break;
      }
    if (!good) break;
    ++waited;
    const unsigned long long now = sol::globaltimer_ns();
    if (waited == size_t(n)) {
      t0 = now;
    } else if (waited > size_t(n)) {
      bytes += p.stage_bytes;
      t1 = now;
    }
    if ((waited & 7) == 0) {
      if (stop_loaded != 0 || now > deadline) break;
      stop_loaded = ld_relaxed_u32(&p.ctl->stop);
    }
    bench::stream_issue(ring + s * p.stage_bytes, sol::smem_addr(&bars[s]), p.src, issued++ * gridDim.x + blockIdx.x,
                        p.stage_bytes, kSrcBytes, policy);
  }
  // drain: no copy may still be writing this block's shared memory when it exits
  while (good && waited < issued) {
    Limit lim(p);
    while (!bench::mbar_try_wait(sol::smem_addr(&bars[waited % n]), uint32_t(waited / n) & 1u))
      if (!lim.ok()) {
        good = false;
        break;
      }
    ++waited;
  }
  if (!good) give_up(p);
  BlockOut& o = p.out[blockIdx.x];
  o.stream_bytes = bytes;
  o.stream_t0 = t0;
  o.stream_t1 = t1;
  o.streamed = 1;
}

// ---------------------------------------------------------------------------------------------

template <int S>
__global__ void __launch_bounds__(kThreads, 1) publish_kernel(const Params p) {
  extern __shared__ __align__(128) unsigned char smem[];  // [kRingBytes ring][kVecBytes vector]
  __shared__ __align__(8) uint64_t bars[kMaxStages];
  __shared__ __align__(8) uint64_t rx_bar;
  const int t = threadIdx.x, warp = t >> 5, lane = t & 31;
  const unsigned long long start = sol::globaltimer_ns(), deadline = start + p.budget_ns;
  const bool pair = int(blockIdx.x) == p.ping || int(blockIdx.x) == p.pong;
  const bool ping = int(blockIdx.x) == p.ping;
  const uint32_t ring = sol::smem_addr(smem), vsm = ring + kRingBytes;

  if (warp == kStreamWarp && lane == 0)
    for (int s = 0; s < p.stages; ++s) sol::mbar_init(&bars[s], 1);
  if (t == 0) {
    sol::mbar_init(&rx_bar, 1);
    p.out[blockIdx.x].smid = smid();
  }
  sol::mbar_init_fence();
  __syncthreads();
  if constexpr (S == kCluster) {
    if (t == 0) sol::mbar_expect_tx(sol::smem_addr(&rx_bar), kVecBytes);  // arm phase 0 (epoch 1)
    cluster_sync();  // both CTAs' mbarriers exist and are armed before any st.async
  }

  if (warp == kStreamWarp) {
    if (lane == 0 && p.stages > 0 && (!pair || p.pair_streams)) stream(p, ring, bars, deadline);
  } else if (pair) {
    // the group of ping or pong
    Side out{p.box + (ping ? 0 : 1), ping ? 0u : 1u, vsm, 0, 0, 0};
    Side in{p.box + (ping ? 1 : 0), ping ? 1u : 0u, vsm, sol::smem_addr(&rx_bar), 0, 0};
    if constexpr (S == kCluster) {
      const uint32_t peer = cluster_rank() ^ 1u;
      out.peer_vsm = sol::cluster_smem_addr(vsm, peer);
      out.peer_bar = sol::cluster_smem_addr(sol::smem_addr(&rx_bar), peer);
    }
    unsigned long long prev[kElems];
#pragma unroll
    for (int k = 0; k < kElems; ++k) prev[k] = 0;
    Check chk;
    if (ping) {
      // let the streams reach their steady state first (30 us)
      while (sol::globaltimer_ns() < start + 30000) {
      }
      if constexpr (S == kStreamOnly) {
        if (t == 0) {
          while (sol::globaltimer_ns() < start + 30000 + p.window_ns && ld_relaxed_u32(&p.ctl->abort) == 0) {
          }
          st_relaxed_u32(&p.ctl->stop, 1u);
        }
      }
    }
    if constexpr (S != kStreamOnly) {
      const int total = p.warmup + p.iters;
      int it = 0;
      for (; it < total; ++it) {
        const uint32_t e = uint32_t(it) + 1;
        bool ok;
        if (ping) {
          if (t == 0 && it == p.warmup) {
            p.ping_out->clk0 = clock64();
            p.ping_out->ns0 = sol::globaltimer_ns();
          }
          const long long t0 = clock64();
          publish<S>(p, out, e, t);
          ok = group_all(wait_read<S>(p, in, e, t, chk, prev));
          if (S == kCluster && t == 0 && ok) sol::mbar_expect_tx(in.rx_bar, kVecBytes);  // arm epoch e + 1
          const long long t1 = clock64();
          if (t == 0 && it >= p.warmup) p.rtt[it - p.warmup] = t1 - t0;
        } else {
          ok = group_all(wait_read<S>(p, in, e, t, chk, prev));
          if (S == kCluster && t == 0 && ok) sol::mbar_expect_tx(in.rx_bar, kVecBytes);
          if (ok) publish<S>(p, out, e, t);
        }
        if (!ok) break;
        // the kernel's budget, every 64 round trips, outside ping's timed span
        if ((it & 63) == 63 && !group_all(sol::globaltimer_ns() < deadline)) {
          ++it;
          break;
        }
      }
      if (ping && t == 0) {
        p.ping_out->clk1 = clock64();
        p.ping_out->ns1 = sol::globaltimer_ns();
        p.ping_out->iters_done = it > p.warmup ? it - p.warmup : 0;
        st_relaxed_u32(&p.ctl->stop, 1u);
      }
      if (t == 0 && it < total) give_up(p);  // ping or pong left early: a wait gave up or the budget ran out
    }
    if (chk.bad != 0) {
      BlockOut& o = p.out[blockIdx.x];
      if (atomicAdd(&o.mismatches, chk.bad) == 0) {
        o.bad_epoch = chk.e;
        o.bad_index = chk.i;
        o.bad_got = chk.got;
        o.bad_want = chk.want;
      }
    }
  }
  __syncthreads();
  if constexpr (S == kCluster) cluster_sync();  // no CTA leaves while its partner may still write to it
}

// ---------------------------------------------------------------------------------------------
// Host

template <int S>
using SchemeTag = std::integral_constant<int, S>;

/** f(SchemeTag<S>{}) for the run-time scheme s. */
template <class F>
void with_scheme(int s, F&& f) {
  switch (s) {
    case kStreamOnly: return f(SchemeTag<kStreamOnly>{});
    case kRelAcq: return f(SchemeTag<kRelAcq>{});
    case kBulkFence: return f(SchemeTag<kBulkFence>{});
    case kBulkNoFence: return f(SchemeTag<kBulkNoFence>{});
    case kLL8: return f(SchemeTag<kLL8>{});
    case kLL16: return f(SchemeTag<kLL16>{});
    case kCountArrivals: return f(SchemeTag<kCountArrivals>{});
    case kSelfCount: return f(SchemeTag<kSelfCount>{});
    case kCluster: return f(SchemeTag<kCluster>{});
    default: throw std::runtime_error("unknown scheme " + std::to_string(s));
  }
}

constexpr size_t kSmemBytes = size_t(kRingBytes) + kVecBytes;  // > half an SM's 228 KB: one block per SM

struct Config {
  int scheme;
  int inflight_kb;
  bool pair_streams;
  bool inject;
  int iters, warmup;
};

struct Outcome {
  Config c;
  int grid = 0, ping_sm = -1, pong_sm = -1, iters_done = 0;
  double clock_ghz = 0;
  double med_cyc = 0, p90_cyc = 0, med_ns = 0, p90_ns = 0;  // one way
  double stream_tbps = 0, stream_gbps_per_sm = 0, pair_gbps = 0;
  int streaming_sms = 0;
  unsigned timeouts = 0, mismatches = 0, expected_mismatches = 0;
  std::string first_bad, error;  // error: the run could not be launched or measured
  bool pass = false;
};

struct Bench {
  int dev = 0, sms = 0;
  cudaDeviceProp prop{};
  uint32_t stage_bytes = 8192;
  int pong = -1;
  unsigned long long window_ns = 2000000;
  unsigned char* src = nullptr;
  Mailbox* box = nullptr;
  Control* ctl = nullptr;
  BlockOut* out = nullptr;
  PingOut* ping_out = nullptr;
  long long* rtt = nullptr;
  int max_iters = 0;

  Bench(int iters_cap) : max_iters(iters_cap) {
    NIBBLE_CUDA_CALL(cudaGetDevice(&dev));
    NIBBLE_CUDA_CALL(cudaGetDeviceProperties(&prop, dev));
    sms = prop.multiProcessorCount;
    if (prop.major != 9) throw std::runtime_error("needs an sm_90 GPU (cp.async.bulk, st.async, clusters)");
    int coop = 0;
    NIBBLE_CUDA_CALL(cudaDeviceGetAttribute(&coop, cudaDevAttrCooperativeLaunch, dev));
    if (!coop) throw std::runtime_error("the device cannot launch cooperative kernels");
    NIBBLE_CUDA_CALL(cudaMalloc(&src, kSrcBytes));
    NIBBLE_CUDA_CALL(cudaMemset(src, 0x5A, kSrcBytes));
    NIBBLE_CUDA_CALL(cudaMalloc(&box, 2 * sizeof(Mailbox)));
    NIBBLE_CUDA_CALL(cudaMalloc(&ctl, sizeof(Control)));
    NIBBLE_CUDA_CALL(cudaMalloc(&out, size_t(sms) * sizeof(BlockOut)));
    NIBBLE_CUDA_CALL(cudaMalloc(&ping_out, sizeof(PingOut)));
    NIBBLE_CUDA_CALL(cudaMalloc(&rtt, size_t(std::max(1, max_iters)) * sizeof(long long)));
  }
  ~Bench() {
    NIBBLE_CUDA_CALL_NOEXCEPT(cudaFree(src));
    NIBBLE_CUDA_CALL_NOEXCEPT(cudaFree(box));
    NIBBLE_CUDA_CALL_NOEXCEPT(cudaFree(ctl));
    NIBBLE_CUDA_CALL_NOEXCEPT(cudaFree(out));
    NIBBLE_CUDA_CALL_NOEXCEPT(cudaFree(ping_out));
    NIBBLE_CUDA_CALL_NOEXCEPT(cudaFree(rtt));
  }
  Bench(const Bench&) = delete;
  Bench& operator=(const Bench&) = delete;

  /** Sets the kernel up and returns the grid: every SM's block (co-resident, one per SM), or for
   *  the cluster scheme as many 2-CTA clusters as can be resident at once. */
  template <int S>
  int prepare() {
    NIBBLE_CUDA_CALL(cudaFuncSetAttribute(publish_kernel<S>, cudaFuncAttributeMaxDynamicSharedMemorySize, int(kSmemBytes)));
    int per_sm = 0;
    NIBBLE_CUDA_CALL(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, publish_kernel<S>, kThreads, kSmemBytes));
    if (per_sm < 1) throw std::runtime_error(std::string(kSchemeName[S]) + ": no block fits on an SM");
    if (per_sm > 1) throw std::runtime_error(std::string(kSchemeName[S]) + ": more than one block per SM would fit");
    if constexpr (S == kCluster) {
      cudaLaunchConfig_t cfg{};
      cudaLaunchAttribute attr{};
      attr.id = cudaLaunchAttributeClusterDimension;
      attr.val.clusterDim.x = 2;
      attr.val.clusterDim.y = 1;
      attr.val.clusterDim.z = 1;
      cfg.gridDim = dim3(2 * (sms / 2));
      cfg.blockDim = dim3(kThreads);
      cfg.dynamicSmemBytes = kSmemBytes;
      cfg.attrs = &attr;
      cfg.numAttrs = 1;
      int clusters = 0;
      NIBBLE_CUDA_CALL(cudaOccupancyMaxActiveClusters(&clusters, publish_kernel<S>, &cfg));
      if (clusters < 1) throw std::runtime_error("e_cluster: no 2-CTA cluster can be resident");
      return 2 * std::min(clusters, sms / 2);
    }
    return sms;
  }

  template <int S>
  void launch(const Params& p, int grid) {
    cudaLaunchConfig_t cfg{};
    cudaLaunchAttribute attr{};
    if constexpr (S == kCluster) {
      attr.id = cudaLaunchAttributeClusterDimension;
      attr.val.clusterDim.x = 2;
      attr.val.clusterDim.y = 1;
      attr.val.clusterDim.z = 1;
    } else {
      attr.id = cudaLaunchAttributeCooperative;  // fails rather than run a grid that is not co-resident
      attr.val.cooperative = 1;
    }
    cfg.gridDim = dim3(grid);
    cfg.blockDim = dim3(kThreads);
    cfg.dynamicSmemBytes = kSmemBytes;
    cfg.attrs = &attr;
    cfg.numAttrs = 1;
    NIBBLE_CUDA_CALL(cudaLaunchKernelEx(&cfg, publish_kernel<S>, p));
    NIBBLE_CHECK_LAUNCH();
  }

  Outcome run(const Config& c) {
    Outcome r;
    r.c = c;
    if (c.iters > max_iters) throw std::runtime_error("iters above the allocation");
    const int stages = int(uint32_t(c.inflight_kb) * 1024 / stage_bytes);
    if (stages > kMaxStages || size_t(stages) * stage_bytes > kRingBytes)
      throw std::runtime_error("in-flight bytes over the ring (" + std::to_string(kMaxStages) + " stages, " +
                               std::to_string(kRingBytes) + " bytes)");
    int grid = 0;
    with_scheme(c.scheme, [&](auto tag) { grid = prepare<decltype(tag)::value>(); });
    r.grid = grid;
    Params p{};
    p.src = src;
    p.box = box;
    p.ctl = ctl;
    p.out = out;
    p.ping_out = ping_out;
    p.rtt = rtt;
    p.ping = 0;
    p.pong = c.scheme == kCluster ? 1 : (pong >= 0 ? pong : grid / 2);
    if (p.pong <= 0 || p.pong >= grid) throw std::runtime_error("pong block out of the grid");
    p.iters = c.iters;
    p.warmup = c.warmup;
    p.stages = stages;
    p.stage_bytes = stage_bytes;
    p.pair_streams = c.pair_streams;
    p.inject = c.inject;
    p.window_ns = window_ns;
    p.timeout_ns = 20000000ull;   // 20 ms: one wait (a round trip is ~1-20 us)
    p.budget_ns = 1500000000ull;  // 1.5 s: the whole kernel, whatever happens
    NIBBLE_CUDA_CALL(cudaMemset(box, 0, 2 * sizeof(Mailbox)));
    NIBBLE_CUDA_CALL(cudaMemset(ctl, 0, sizeof(Control)));
    NIBBLE_CUDA_CALL(cudaMemset(out, 0, size_t(sms) * sizeof(BlockOut)));
    NIBBLE_CUDA_CALL(cudaMemset(ping_out, 0, sizeof(PingOut)));
    with_scheme(c.scheme, [&](auto tag) { launch<decltype(tag)::value>(p, grid); });
    NIBBLE_CUDA_CALL(cudaDeviceSynchronize());

    std::vector<BlockOut> bo(grid);
    PingOut po{};
    NIBBLE_CUDA_CALL(cudaMemcpy(bo.data(), out, size_t(grid) * sizeof(BlockOut), cudaMemcpyDeviceToHost));
    NIBBLE_CUDA_CALL(cudaMemcpy(&po, ping_out, sizeof(PingOut), cudaMemcpyDeviceToHost));
    r.ping_sm = int(bo[p.ping].smid);
    r.pong_sm = int(bo[p.pong].smid);
    double sum_gbps = 0;
    for (int b = 0; b < grid; ++b) {
      r.timeouts += bo[b].timeouts;
      r.mismatches += bo[b].mismatches;
      if (bo[b].mismatches != 0 && r.first_bad.empty()) {
        char buf[160];
        std::snprintf(buf, sizeof buf, "block %d: epoch %u word %u got 0x%08x want 0x%08x", b, bo[b].bad_epoch,
                      bo[b].bad_index, bo[b].bad_got, bo[b].bad_want);
        r.first_bad = buf;
      }
      if (bo[b].streamed && bo[b].stream_t1 > bo[b].stream_t0) {
        const double gbps = double(bo[b].stream_bytes) / double(bo[b].stream_t1 - bo[b].stream_t0);  // bytes/ns
        sum_gbps += gbps;
        ++r.streaming_sms;
        if (b == p.ping) r.pair_gbps = gbps;
      }
    }
    r.stream_tbps = sum_gbps / 1000.0;
    r.stream_gbps_per_sm = r.streaming_sms ? sum_gbps / r.streaming_sms : 0;
    if (c.scheme != kStreamOnly) {
      r.iters_done = po.iters_done;
      std::vector<long long> v(std::max(0, po.iters_done));
      if (!v.empty()) {
        NIBBLE_CUDA_CALL(cudaMemcpy(v.data(), rtt, v.size() * sizeof(long long), cudaMemcpyDeviceToHost));
        std::sort(v.begin(), v.end());
        const auto at = [&](double q) { return double(v[std::min(v.size() - 1, size_t(q * double(v.size())))]); };
        r.med_cyc = at(0.5) / 2;
        r.p90_cyc = at(0.9) / 2;
        if (po.ns1 > po.ns0) r.clock_ghz = double(po.clk1 - po.clk0) / double(po.ns1 - po.ns0);
        if (r.clock_ghz > 0) {
          r.med_ns = r.med_cyc / r.clock_ghz;
          r.p90_ns = r.p90_cyc / r.clock_ghz;
        }
      }
    }
    const unsigned epochs = unsigned(c.warmup + c.iters);
    r.expected_mismatches = c.inject ? 2 * (epochs / kInjectEvery) : 0;
    r.pass = r.timeouts == 0 && r.mismatches == r.expected_mismatches &&
             (c.scheme == kStreamOnly || r.iters_done == c.iters);
    return r;
  }
};

/** b.run(c), a failure to set up or launch (a cluster shape the GPU refuses, ...) recorded as a
 *  failed row so that the other runs still report; an error that leaves the context unusable (a
 *  fault in a kernel) is thrown on. */
Outcome run_or_record(Bench& b, const Config& c) {
  try {
    return b.run(c);
  } catch (const std::exception& e) {
    Outcome r;
    r.c = c;
    r.error = e.what();
    (void)cudaGetLastError();
    NIBBLE_CUDA_CALL(cudaDeviceSynchronize());
    return r;
  }
}

std::string scheme_label(const Outcome& r) {
  std::string s = kSchemeName[r.c.scheme];
  if (r.c.scheme == kRelAcq && !r.c.pair_streams && r.c.inflight_kb > 0) s = "f_relacq_quiet";
  if (!kModelSafe[r.c.scheme]) s += " (UNSAFE)";
  return s;
}

void print_header() {
  std::printf("\n%-24s %8s %6s | %17s %17s %5s | %4s %6s %9s %8s %8s | %s\n", "scheme", "inflight", "pair",
              "one-way med ns(cyc)", "p90 ns(cyc)", "GHz", "SMs", "TB/s", "GB/s/SM", "vs none", "pairSM", "checks");
}

/** The stream-only run's per-SM rate at r's in-flight bytes (0: none). */
double none_gbps(const Outcome& r, const std::vector<Outcome>& base) {
  for (const Outcome& b : base)
    if (b.c.inflight_kb == r.c.inflight_kb) return b.stream_gbps_per_sm;
  return 0;
}

void print_row(const Outcome& r, const std::vector<Outcome>& base) {
  const double none = none_gbps(r, base);
  char med[40], p90[40], ratio[16] = "-";
  std::snprintf(med, sizeof med, "%7.0f (%6.0f)", r.med_ns, r.med_cyc);
  std::snprintf(p90, sizeof p90, "%7.0f (%6.0f)", r.p90_ns, r.p90_cyc);
  if (none > 0 && r.stream_gbps_per_sm > 0) std::snprintf(ratio, sizeof ratio, "%.3f", r.stream_gbps_per_sm / none);
  std::string why;
  if (!r.pass)
    why = r.error.empty() ? " timeouts " + std::to_string(r.timeouts) + " mismatches " + std::to_string(r.mismatches) +
                                "/" + std::to_string(r.expected_mismatches) + " iters " + std::to_string(r.iters_done) +
                                " " + r.first_bad
                          : " " + r.error;
  std::printf("%-24s %5d KB %6s | %17s %17s %5.3f | %4d %6.2f %9.2f %8s %8.2f | %s%s\n", scheme_label(r).c_str(),
              r.c.inflight_kb, r.c.inflight_kb == 0 ? "-" : (r.c.pair_streams ? "stream" : "quiet"), med, p90,
              r.clock_ghz, r.streaming_sms, r.stream_tbps, r.stream_gbps_per_sm, ratio, r.pair_gbps,
              r.pass ? "ok" : "FAIL", why.c_str());
  std::fflush(stdout);
}

/** s with the characters a JSON string cannot hold as they are replaced by a space. */
std::string json_safe(std::string s) {
  for (char& ch : s)
    if (ch == '"' || ch == '\\' || static_cast<unsigned char>(ch) < 0x20) ch = ' ';
  return s;
}

void json_outcome(FILE* f, const Outcome& r, double none_gbps) {
  std::fprintf(f,
               "    {\"scheme\": \"%s\", \"label\": \"%s\", \"model_safe\": %s, \"inflight_kb\": %d, \"pair_streams\": %s, "
               "\"selftest\": %s, \"grid\": %d, \"ping_sm\": %d, \"pong_sm\": %d, \"iters\": %d, \"iters_done\": %d, "
               "\"clock_ghz\": %.4f, \"one_way_median_ns\": %.1f, \"one_way_p90_ns\": %.1f, "
               "\"one_way_median_cycles\": %.1f, \"one_way_p90_cycles\": %.1f, \"streaming_sms\": %d, "
               "\"stream_tbps\": %.4f, \"stream_gbps_per_sm\": %.3f, \"stream_gbps_per_sm_without_publishing\": %.3f, "
               "\"pair_sm_stream_gbps\": %.3f, \"timeouts\": %u, \"mismatches\": %u, \"expected_mismatches\": %u, "
               "\"first_mismatch\": \"%s\", \"error\": \"%s\", \"pass\": %s}",
               kSchemeName[r.c.scheme], scheme_label(r).c_str(), kModelSafe[r.c.scheme] ? "true" : "false",
               r.c.inflight_kb, r.c.pair_streams ? "true" : "false", r.c.inject ? "true" : "false", r.grid, r.ping_sm,
               r.pong_sm, r.c.iters, r.iters_done, r.clock_ghz, r.med_ns, r.p90_ns, r.med_cyc, r.p90_cyc,
               r.streaming_sms, r.stream_tbps, r.stream_gbps_per_sm, none_gbps, r.pair_gbps, r.timeouts, r.mismatches,
               r.expected_mismatches, r.first_bad.c_str(), json_safe(r.error).c_str(), r.pass ? "true" : "false");
}

int scheme_by_name(const std::string& n) {
  for (int s = 1; s < kNumSchemes; ++s)
    if (n == kSchemeName[s]) return s;
  throw std::runtime_error("unknown scheme '" + n + "'");
}

}  // namespace

int main(int argc, char** argv) {
  std::string json_path;
  int iters = 2000, warmup = 200, pong = -1;
  uint32_t stage_bytes = 8192;
  double window_us = 2000;
  bool selftest = true, litmus = false;
  std::vector<int> schemes;
  try {
    for (int a = 1; a < argc; ++a) {
      const std::string k = argv[a];
      const auto next = [&]() -> std::string {
        if (a + 1 >= argc) throw std::runtime_error(k + " needs a value");
        return argv[++a];
      };
      if (k == "--json") json_path = next();
      else if (k == "--iters") iters = std::stoi(next());
      else if (k == "--warmup") warmup = std::stoi(next());
      else if (k == "--stage-bytes") stage_bytes = uint32_t(std::stoul(next()));
      else if (k == "--pong") pong = std::stoi(next());
      else if (k == "--window-us") window_us = std::stod(next());
      else if (k == "--no-selftest") selftest = false;
      else if (k == "--litmus") litmus = true;
      else if (k == "--only") {
        std::string l = next();
        for (size_t pos = 0; pos <= l.size();) {
          const size_t c = std::min(l.find(',', pos), l.size());
          if (c > pos) schemes.push_back(scheme_by_name(l.substr(pos, c - pos)));
          pos = c + 1;
        }
      } else {
        std::fprintf(stderr, "usage: %s [--json FILE] [--iters N] [--warmup N] [--stage-bytes B] [--pong BLOCK] "
                             "[--window-us US] [--only a_relacq,b_bulk_fence,...] [--no-selftest] [--litmus]\n", argv[0]);
        return 2;
      }
    }
    // A GPU test (nibble.test.publish_litmus) runs this too: no Hopper GPU is a skip (CTest's 77), not a failure.
    int devices = 0;
    const cudaError_t de = cudaGetDeviceCount(&devices);
    if (de != cudaSuccess || devices == 0) {
      std::printf("bench_publish: skipped: no usable CUDA device (%s)\n", de != cudaSuccess ? cudaGetErrorName(de) : "none");
      return 77;
    }
    int major = 0;
    NIBBLE_CUDA_CALL(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, 0));
    if (major != 9) {
      std::printf("bench_publish: skipped: built for sm_90a, the device is compute capability %d.x\n", major);
      return 77;
    }
    if (litmus && schemes.empty()) schemes = {scheme_by_name("a_relacq"), scheme_by_name("e_cluster")};
    if (iters < 1 || warmup < 0 || iters + warmup > 60000) throw std::runtime_error("iters in 1..60000 with warmup");
    if (stage_bytes < 16 || stage_bytes % 16 != 0) throw std::runtime_error("--stage-bytes: a multiple of 16");
    if (schemes.empty())
      for (int s = 1; s < kNumSchemes; ++s) schemes.push_back(s);

    Bench b(std::max(iters, 256));
    b.stage_bytes = stage_bytes;
    b.pong = pong;
    b.window_ns = static_cast<unsigned long long>(window_us * 1000);
    std::printf("bench_publish: %s, %d SMs, %d KB shared memory per block, stage %u B, %d round trips (+%d warm-up)\n",
                b.prop.name, b.sms, int(kSmemBytes / 1024), stage_bytes, iters, warmup);

    const int inflight[] = {0, 96, 192};
    std::vector<Outcome> base, rows, tests;
    for (int kb : inflight)
      if (kb > 0) base.push_back(run_or_record(b, {kStreamOnly, kb, true, false, iters, warmup}));
    std::printf("stream only (no publishing):");
    for (const Outcome& r : base)
      std::printf("  %d KB: %.2f TB/s (%.2f GB/s per SM, %d SMs)%s%s", r.c.inflight_kb, r.stream_tbps,
                  r.stream_gbps_per_sm, r.streaming_sms, r.pass ? "" : " FAIL ", r.error.c_str());
    std::printf("\n");
    if (selftest) {
      for (int s : schemes) tests.push_back(run_or_record(b, {s, 0, true, true, 256, 0}));
      std::printf("self-test (one corrupt word every %u epochs, both directions, must be caught):", kInjectEvery);
      for (const Outcome& r : tests)
        std::printf(" %s %u/%u%s%s", kSchemeName[r.c.scheme], r.mismatches, r.expected_mismatches,
                    r.pass ? "" : " FAIL ", r.error.c_str());
      std::printf("\n");
    }
    if (litmus) {
      // The schemes the dataflow megakernel publishes with, under the heaviest load, many times:
      // every word of every epoch checked (the self-test above shows the check catches a bad one).
      bool ok = true;
      for (const Outcome& r : tests) ok = ok && r.pass;
      print_header();
      for (int s : schemes) {
        rows.push_back(run_or_record(b, {s, 192, true, false, iters, warmup}));
        print_row(rows.back(), base);
        ok = ok && rows.back().pass;
      }
      std::printf("litmus: %d round trips per scheme under 192 KB of bulk copies in flight on every SM: %s\n", iters,
                  ok ? "every word of every epoch as published" : "FAILED");
      return ok ? 0 : 1;
    }
    print_header();
    for (int s : schemes)
      for (int kb : inflight)
        for (int pair_streams = 1; pair_streams >= (kb > 0 ? 0 : 1); --pair_streams) {
          rows.push_back(run_or_record(b, {s, kb, pair_streams != 0, false, iters, warmup}));
          print_row(rows.back(), base);
        }
    std::printf("(one-way = ping-pong round trip / 2, clock64 on the ping SM, ns at the clock measured over the run; "
                "pair: the ping and pong SMs stream too or stay quiet; TB/s: all streaming SMs together during the "
                "publish loop (SMs: how many streamed); vs none: per-SM stream rate over the stream-only run's; "
                "pairSM: the ping SM's own stream GB/s)\n");
    for (const Outcome& r : rows)
      if (r.error.empty() && (r.c.scheme == schemes.front() || r.c.scheme == kCluster) && r.c.inflight_kb == 0)
        std::printf("%s: ping block on SM %d, pong block on SM %d, grid %d\n", kSchemeName[r.c.scheme], r.ping_sm,
                    r.pong_sm, r.grid);

    bool all = true;
    for (const auto* set : {&base, &tests, &rows})
      for (const Outcome& r : *set) all = all && r.pass;
    if (!json_path.empty()) {
      FILE* f = std::fopen(json_path.c_str(), "w");
      if (!f) throw std::runtime_error("cannot write " + json_path);
      std::fprintf(f, "{\n  \"bench\": \"bench_publish\", \"device\": \"%s\", \"sms\": %d, \"stage_bytes\": %u, "
                      "\"vector_bytes\": %u, \"iters\": %d, \"warmup\": %d, \"all_pass\": %s,\n",
                   b.prop.name, b.sms, stage_bytes, kVecBytes, iters, warmup, all ? "true" : "false");
      const auto block = [&](const char* name, const std::vector<Outcome>& v, bool last) {
        std::fprintf(f, "  \"%s\": [\n", name);
        for (size_t i = 0; i < v.size(); ++i) {
          json_outcome(f, v[i], none_gbps(v[i], base));
          std::fprintf(f, i + 1 < v.size() ? ",\n" : "\n");
        }
        std::fprintf(f, last ? "  ]\n" : "  ],\n");
      };
      block("stream_only", base, false);
      block("selftest", tests, false);
      block("rows", rows, true);
      std::fprintf(f, "}\n");
      std::fclose(f);
    }
    std::printf("%s\n", all ? "all runs passed their checks" : "SOME RUNS FAILED (see FAIL above)");
    return all ? 0 : 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_publish: %s\n", e.what());
    return 1;
  }
}
