// stream_kernel.cuh: M <= 16, the stream kernel (an experiment, never the shipped default:
// solutions/gemm_fp4/sm90/NOTES.md v4-v5 measured it slower than the mma kernel). Built into
// libnibble_gemm_fp4_stream.so by gemm_fp4_stream.cu (the design is in its file comment).
#pragma once

#include "experiments/gemm_fp4_stream/stream_layout.h"
#include "solutions/gemm_fp4/sm90/device_common.cuh"

namespace nibble::gemm_fp4_sm90 {
namespace {

// ---- M <= 16: the stream kernel ------------------------------------------------------------------

constexpr int kStreamWarps = 16;      // one block per SM: 4 warps per scheduler to hide the decode chains
constexpr int kStreamStageUnits = 2;  // units per bulk copy (1152 / 1088 bytes)

/** Shared memory of stream_kernel (byte offsets; every region 16-byte aligned). `stages`: ring slots
 *  per warp; `ub`: stream_unit_bytes; `len_max`: chunks of the longest K slice; `dt_max`: tiles of
 *  the largest cluster; `split`: blocks per cluster. */
struct StreamSmem {
  int ring, a, a_pitch, slots, recv, bar, total;
  __host__ __device__ StreamSmem(int stages, int ub, int M, int nt, int len_max, int dt_max, int split) {
    ring = 0;                                                   // [16 warps][stages][2 units]
    a = ring + kStreamWarps * stages * kStreamStageUnits * ub;  // [M][a_pitch] bf16: A's k slice
    a_pitch = len_max * kChunkK * 2 + 16;                       // +16: a k16 load's 8 rows g in distinct banks
    slots = a + M * a_pitch;                                    // [15 + dt_max][nt][32] float4: warp partials
    recv = slots + (kStreamWarps - 1 + dt_max) * nt * 32 * 16;  // [split][share] float4: the cluster's partials
    const int share = (dt_max * nt * 32 + split - 1) / split;
    bar = recv + (split > 1 ? split * share * 16 : 0);          // 16 x stages ring mbarriers, then A's
    total = bar + (kStreamWarps * stages + 1) * 8;
  }
};

/** Everything stream_kernel needs (by value: a kernel parameter). */
struct StreamArgs {
  const uint8_t* units;  // the stream layout (fp4_frag.h)
  const float* colmul;   // ntiles x 16: the epilogue's factor per W row
  const uint16_t* A;     // (M, K) bf16, 16-byte aligned, K % 8 == 0
  float* C;              // (M, N) fp32
  int M, N, K;
  int ntiles, nch;       // 16-row tiles of W, 64-k chunks of K
  int split, clusters;   // blocks per cluster (K slices), clusters (tile ranges)
  int stages;            // ring slots per warp
  int len_max, dt_max;   // the smem layout's sizes (StreamSmem)
  int prefetch;          // 1: colmul prefetched into L2 at entry (NIBBLE_FP4SM90_PREFETCH=0 turns it off)
  // NIBBLE_FP4SM90_TRACE: per block kStreamMarks %globaltimer stamps (ns) of the last run, else null
  unsigned long long* trace;
};

/** The stream kernel's timeline marks (thread 0 of each block): entry, A landed, warp 0's units
 *  done, every warp's units done (after __syncthreads), the cluster's start barrier passed, C written. */
constexpr int kStreamMarks = 6;

__device__ __forceinline__ void stream_mark(const StreamArgs& p, int k) {
  if (p.trace && threadIdx.x == 0) p.trace[blockIdx.x * kStreamMarks + k] = sol::globaltimer_ns();
}

__device__ __forceinline__ void add4(float4& a, const float4& b) {
  a.x += b.x, a.y += b.y, a.z += b.z, a.w += b.w;
}

/**
 * M <= 16, K % 8 == 0. A weight stream over the whole GPU: cluster q (split blocks, one per SM)
 * owns the tiles [ntiles q / clusters, ntiles (q + 1) / clusters) (whole tiles: balanced to one
 * tile), its block r the K slice r of them, which the stream layout stores as one contiguous run
 * of units; the block's 16 warps cut that run into contiguous sub-ranges. Each warp streams its
 * units through a private ring of `stages` slots of 2 units, lane 0 refilling a slot with one bulk
 * copy (evict-first: W is read once) on the slot's mbarrier, the warp reading it back with 16-byte
 * LDS; every slot's copy is issued at the start, so with the ring sized to the range (prepare does
 * when shared memory allows) a block's whole share of W is in flight at once, and none of it in
 * registers or load slots. The block's K slice of A (M rows, bulk-copied once, evict-last: every
 * cluster reads it) gives the B fragments; K split 4 ways cuts A's L2 -> SM traffic 4x against
 * whole-K blocks (18 MB at m16-n3072-k3072 for v2's kernel, more than the 5.3 MB of weights).
 * Sums, all deterministic (two runs bitwise equal, no atomics, nothing to zero): a warp's partial
 * C^T tile goes to shared-memory slot (warp + tile) when its range leaves the tile (a warp's tiles
 * are a staircase, so the slots are distinct); the block adds the slots of each tile in warp order
 * and pushes the sum through distributed shared memory to the cluster block that finishes that part
 * of the tile, which adds the split partials in rank order, scales by colmul and writes C.
 * Bytes: N K / 2 + N K / 16 (NVFP4) from DRAM; A's slice once per cluster from L2.
 */
template <int NT, bool NV>
__global__ void __launch_bounds__(kStreamWarps * 32, 1) stream_kernel(const StreamArgs p) {
  constexpr int kUB = stream_unit_bytes(NV), kSU = kStreamStageUnits;
  extern __shared__ __align__(128) uint8_t smem[];
  const StreamSmem L(p.stages, kUB, p.M, NT, p.len_max, p.dt_max, p.split);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
  const int S = p.split, r = int(blockIdx.x) % S, q = int(blockIdx.x) / S;  // cluster (S, 1, 1): rank = x % S
  // Split-phase "every block of the cluster has started" (needed before distributed shared memory
  // is written); waited on only after the stream, so it costs nothing.
  stream_mark(p, 0);
  if (S > 1) asm volatile("barrier.cluster.arrive.relaxed.aligned;" ::: "memory");
  // 32-bit: prepare checks ntiles x clusters and nch x split (64-bit division is a ~70-instruction call).
  const int T0 = p.ntiles * q / p.clusters, dT = p.ntiles * (q + 1) / p.clusters - T0;
  const int c0 = p.nch * r / S, len = p.nch * (r + 1) / S - c0;
  const int U = dT * len;  // the block's units: tile-major over its K slice
  const int ua = U * warp / kStreamWarps, ue = U * (warp + 1) / kStreamWarps;
  const int nst = (ue - ua + kSU - 1) / kSU;  // this warp's stages
  const uint8_t* gunits = p.units + (int64_t(p.ntiles) * c0 + int64_t(T0) * len) * kUB;  // the block's unit 0
  uint8_t* ring = smem + L.ring + warp * p.stages * kSU * kUB;
  uint64_t* bars = reinterpret_cast<uint64_t*>(smem + L.bar) + warp * p.stages;
  uint64_t* abar = reinterpret_cast<uint64_t*>(smem + L.bar) + kStreamWarps * p.stages;
  const int abytes = (min(p.K, (c0 + len) * kChunkK) - c0 * kChunkK) * 2;  // A's k slice per row (K % 8 == 0: x 16)

  // Stage k of this warp: units [ua + 2k, min(ue, ua + 2k + 2)) into slot s = k % stages.
  const auto issue = [&](int k, int s, uint64_t policy) {
    const int u = ua + k * kSU, n = min(kSU, ue - u);
    mbar_expect_tx(&bars[s], uint32_t(n * kUB));
    bulk_load(ring + s * kSU * kUB, gunits + int64_t(u) * kUB, uint32_t(n * kUB), &bars[s], policy);
  };
  if (lane == 0) {
    for (int s = 0; s < p.stages; ++s) mbar_init(&bars[s], 1);
    if (warp == 0) mbar_init(abar, 1);
    sol::mbar_init_fence();  // visible to the copy engine
    if (warp == 0) {  // A first: every warp's first unit needs it
      const uint64_t keep = policy_evict_last();
      mbar_expect_tx(abar, uint32_t(p.M * abytes));
      for (int m = 0; m < p.M; ++m)
        bulk_load(smem + L.a + m * L.a_pitch, p.A + int64_t(m) * p.K + c0 * kChunkK, uint32_t(abytes), abar, keep);
    }
    // The epilogue's colmul rows of this cluster into L2 now (the harness flushes L2 before every
    // call; read at the end, a DRAM round trip on the critical path). 64 bytes per tile.
    if (warp == 1 && r == 0 && p.prefetch)
      sol::bulk_prefetch_l2(p.colmul + T0 * kSlabRows, uint32_t(dT * 64));
  }
  // The last slice's chunk past K: zero A there (its codes are 0, but 0 x a stale NaN is NaN).
  const int tail16 = (len * kChunkK * 2 - abytes) / 16;
  for (int i = int(threadIdx.x); i < p.M * tail16; i += int(blockDim.x))
    *reinterpret_cast<uint4*>(smem + L.a + (i / tail16) * L.a_pitch + abytes + 16 * (i % tail16)) = make_uint4(0, 0, 0, 0);
  // A's mbarrier initialised and the tail zeroed before any warp reads A; and A's copies queued
  // before any weight copy (issued together in v4, A landed behind the block's whole share of W:
  // at 4 us in its trace).
  __syncthreads();
  if (lane == 0) {
    const uint64_t stream = policy_evict_first();
    for (int k = 0; k < min(nst, p.stages); ++k) issue(k, k, stream);
  }

  float4* slots = reinterpret_cast<float4*>(smem + L.slots);
  float acc[NT][4];
#pragma unroll
  for (int nt = 0; nt < NT; ++nt)
#pragma unroll
    for (int i = 0; i < 4; ++i) acc[nt][i] = 0.0f;
  // Lane (g, t) feeds B column g of n8 tile nt: A row 8 nt + g (rows past M: any row, their C
  // columns are never written), k 16 t .. 16 t + 15 of each chunk.
  const uint8_t* arow[NT];
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) arow[nt] = smem + L.a + min(8 * nt + g, p.M - 1) * L.a_pitch + 32 * t;
  // The partial tile of this warp into slot (warp + tile): distinct per (warp, tile), see above.
  const auto flush = [&](int tile) {
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
      slots[((warp + tile) * NT + nt) * 32 + lane] = make_float4(acc[nt][0], acc[nt][1], acc[nt][2], acc[nt][3]);
#pragma unroll
      for (int i = 0; i < 4; ++i) acc[nt][i] = 0.0f;
    }
  };
  int tl = ua / len, cl = ua - tl * len;  // the next unit's tile (block-local) and chunk (slice-local)
  if (nst > 0) mbar_wait(abar, 0);
  stream_mark(p, 1);
  int s = 0;           // this stage's ring slot: k % stages
  uint32_t phase = 0;  // its mbarrier's phase parity: (k / stages) & 1
  for (int k = 0; k < nst; ++k) {
    mbar_wait(&bars[s], phase);
    const uint8_t* st = ring + s * kSU * kUB;
    const int n = min(kSU, ue - ua - k * kSU);
#pragma unroll
    for (int i = 0; i < kSU; ++i) {
      if (i < n) {
        const uint8_t* un = st + i * kUB;
        const uint4 qv = *reinterpret_cast<const uint4*>(un + lane * 16);
        // kPerm: lane (g, t)'s 2 bytes (rows g, g + 8) of block t (NVFP4) or t / 2 (MXFP4).
        const uint32_t sw = *reinterpret_cast<const uint16_t*>(un + 512 + (NV ? t : t >> 1) * 16 + 2 * g);
        uint4 lo[NT], hi[NT];
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
          lo[nt] = *reinterpret_cast<const uint4*>(arow[nt] + cl * (kChunkK * 2));
          hi[nt] = *reinterpret_cast<const uint4*>(arow[nt] + cl * (kChunkK * 2) + 16);
        }
        chunk_mma<NV, NT>(qv, sw, lo, hi, acc);
        if (++cl == len) {
          flush(tl);
          ++tl;
          cl = 0;
        }
      }
    }
    __syncwarp();  // every lane has read the slot before lane 0 refills it
    if (k + p.stages < nst && lane == 0) {
      // The slot was read through the generic proxy; the copy engine (async proxy) writes it next.
      sol::fence_proxy_async_smem();
      issue(k + p.stages, s, policy_evict_first());
    }
    if (++s == p.stages) s = 0, phase ^= 1u;
  }
  if (nst > 0 && cl != 0) flush(tl);  // the range ends inside a tile
  stream_mark(p, 2);
  __syncthreads();
  stream_mark(p, 3);

  // Each float4 item (tile tt, n8 tile nt, lane l) of the block's C^T tiles: rows g, g + 8 of the
  // tile x columns 8 nt + 2t, + 1 (the accumulator order). Summed over the warps that met tile tt,
  // in warp order.
  const int items = dT * NT * 32;
  const int share = (items + S - 1) / S;  // items each block of the cluster finishes
  float4* recv = reinterpret_cast<float4*>(smem + L.recv);
  // Writes item i's sum v (scaled by colmul) to C.
  const auto store = [&](int i, float4 v) {
    const int tt = i / (NT * 32), nt = (i / 32) % NT, l = i % 32;
    const int n = (T0 + tt) * kSlabRows + (l >> 2), m = 8 * nt + 2 * (l & 3);
    const float e[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int h = 0; h < 4; ++h) {
      const int nn = n + 8 * (h >> 1), mm = m + (h & 1);
      if (nn < p.N && mm < p.M) p.C[int64_t(mm) * p.N + nn] = e[h] * p.colmul[nn];
    }
  };
  if (S > 1) asm volatile("barrier.cluster.wait.aligned;" ::: "memory");  // the start barrier
  stream_mark(p, 4);
  namespace cg = cooperative_groups;
  for (int i = int(threadIdx.x); i < items; i += int(blockDim.x)) {
    const int tt = i / (NT * 32), rem = i % (NT * 32);
    // The warps whose ranges [U w / 16, U (w + 1) / 16) meet the tile's units [tt len, (tt + 1) len).
    const int wlo = (kStreamWarps * (tt * len + 1) + U - 1) / U - 1;
    const int whi = min(kStreamWarps - 1, (kStreamWarps * (tt + 1) * len + U - 1) / U - 1);
    float4 v = make_float4(0.0f, 0.0f, 0.0f, 0.0f);
    for (int w = max(wlo, 0); w <= whi; ++w)
      if (U * w / kStreamWarps < U * (w + 1) / kStreamWarps) add4(v, slots[(w + tt) * NT * 32 + rem]);
    if (S == 1) {
      store(i, v);
    } else {
      const int owner = i / share;
      float4* dst = cg::this_cluster().map_shared_rank(recv, owner);
      dst[r * share + (i - owner * share)] = v;
    }
  }
  if (S > 1) {
    // Release the pushes, acquire the others'; nobody touches another block's memory after this.
    asm volatile("barrier.cluster.arrive.release.aligned;\n\tbarrier.cluster.wait.acquire.aligned;" ::: "memory");
    for (int il = int(threadIdx.x); il < share && r * share + il < items; il += int(blockDim.x)) {
      float4 v = recv[il];
      for (int rr = 1; rr < S; ++rr) add4(v, recv[rr * share + il]);
      store(r * share + il, v);
    }
  }
  if (p.trace) {
    __syncthreads();
    stream_mark(p, 5);
  }
}

}  // namespace
}  // namespace nibble::gemm_fp4_sm90
