// gemm_fp4_sm90.cu: the tuned sm_90a solution of both FP4 dequant-GEMM tasks (issue 7), an ABI
// solution (include/nibble/nibble_gemm.h) built as libnibble_gemm_fp4_sm90.so.
//
//   gemm-w4a16-nvfp4  C (M, N) = A (M, K) W^T, W[n, k] = e2m1(code) * e4m3fn(scale[n, k/16]) * global
//   gemm-bf16-mxfp4   C (M, N) = A (M, K) W^T, W[n, k] = e2m1(code) * 2^(e8m0(scale[n, k/32]) - 127)
//
// Computed as C^T = W A^T: W's rows are the tensor cores' M side, decoded from the repacked codes
// straight into A-fragment registers (fp4_frag.h: the code's bits placed in a bf16 and one bf16x2
// multiply by the re-encoded block scale, exact), A's rows the N side. prepare repacks the codes
// and scales on the host (untimed; nothing is dequantised to memory) into the layout of the kernel
// it picks by M (H200 figures: NOTES.md):
//   M <= 16  mma_kernel: mma.sync m16n8k16 (not wgmma: at N-side 8 or 16 the kernel is a weight
//            stream, and mma.sync needs no shared memory or warpgroup sync). One block per 16-row
//            slab, 8 warps splitting K (summed in shared memory at the end); each lane issues the
//            loads of 6 (M <= 8) or 4 chunks of 64 k (codes 16 bytes, evict-first: W is read once;
//            scales; its activations) before decoding any. The kPerm k order gives a lane its B
//            fragments as two 16-byte loads per chunk (A is 96 KB at M = 16: L1/L2). Bytes:
//            N K / 2 + N K / 16 (NVFP4); at M = 16, N = K = 3072, 5.3 MB: measured 7.6 us against
//            3.6 us for a kernel that only reads those bytes under the grader's flush (M = 1: 5.7).
//            Also the fallback for any M when K % 8 != 0 (kStd order, 4-byte activation loads,
//            16 rows of A per block row).
//            mma_tma_kernel (NIBBLE_FP4SM90_KIND=mmatma): the same math fed by bulk copies into
//            shared memory; slower as measured (9.6 us), kept selectable for tuning.
//            stream_kernel (NIBBLE_FP4SM90_KIND=stream, v4, not yet the default): one block of 16
//            warps per SM, clusters of `split` blocks; a cluster owns a range of whole 16-row tiles,
//            its blocks the K slices of them, each warp a contiguous run of 576-byte units (codes +
//            scales, repack_stream) streamed through a per-warp ring of bulk copies, the block's A
//            slice in shared memory; partial tiles summed in shared memory and across the cluster
//            through distributed shared memory, in a fixed order (no atomics, C written once).
//   M > 16   wgmma_kernel: one producer warp (TMA of the 64-k activation tile, 128B swizzle, plus
//            bulk copies of the block's codes and scales, into a ring of stages on full/empty
//            mbarriers) and NCONS consumer warpgroups, each 64 W rows x BN activation rows: per
//            chunk, decode 16 registers per thread from the stage, then 4 x wgmma m64nBNk16 with A
//            from registers and B from the stage; the chunk's group runs while the next chunk
//            decodes (wait_group 1).
//            128 x 256 tiles (NCONS = 2, setmaxnreg 40 / 232) on persistent blocks, one per SM, for
//            M > 256 (276.6 us at m4096-n8192-k3072, cuBLAS bf16 280.1); 64 x 64 tiles for
//            16 < M <= 128 and 64 x 128 up to 256, K split over a cluster of blocks summed through
//            distributed shared memory when the tiles alone do not fill the SMs.
// The epilogue multiplies row n of C^T by colmul[n] (NVFP4: global x 2^8; MXFP4: 2^sh(n), fp4_frag.h).
// Residues: N padded to 128 with zero codes (rows past N never written), K padded to 64 (zero codes;
// the TMA zero-fills A past K and past M), the partial last scale block is an ordinary block.
// Not supported: a NaN block scale; A not 16-byte aligned when K % 8 == 0 (the vector loads and
// the TMA need it; cudaMalloc'd A always is); M or K beyond the grid / one block's shared memory.
#include <cuda.h>  // CUtensorMap (the encode function comes from the runtime's driver entry point)
#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include "nibble/nibble_gemm.h"
#include "solutions/common/abi_util.h"
#include "solutions/common/export.h"
#include "solutions/common/gemm_abi_util.h"
#include "solutions/common/sm90_async.cuh"
#include "solutions/gemm_fp4/sm90/fp4_frag.h"
#include "solutions/gemm_fp4/sm90/wgmma_rs.cuh"

namespace nibble::gemm_fp4_sm90 {
namespace {

using sol::bulk_load;
using sol::mbar_arrive;
using sol::mbar_expect_tx;
using sol::mbar_init;
using sol::mbar_wait;
using sol::policy_evict_first;
using sol::policy_evict_last;
using sol::smem_addr;

// ---- small device helpers -----------------------------------------------------------------------

/** 16 bytes, streamed: the weights are read once per call, keep L2 for the activations. */
__device__ __forceinline__ uint4 ld_stream(const uint4* p) { return __ldcs(p); }

__device__ __forceinline__ void mma_bf16_16816(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%0, %1, %2, %3};\n"
      : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

/** The 4 A-fragment registers of k16 step j: word q, scales s_lo (row g) and s_hi (row g + 8). */
__device__ __forceinline__ void decode_step(uint32_t q, uint32_t s_lo, uint32_t s_hi, uint32_t (&a)[4]) {
  a[0] = decode_reg(q, 0, s_lo);
  a[1] = decode_reg(q, 1, s_hi);
  a[2] = decode_reg(q, 2, s_lo);
  a[3] = decode_reg(q, 3, s_hi);
}

/** One kPerm chunk (16 weight rows x 64 k) of lane (g, t) into NT n8 tiles: q = its 16 bytes of
 *  codes, sw = its 2 scale bytes, lo[nt] / hi[nt] = the 8 + 8 bf16 activations of k 16 t .. 16 t + 15
 *  of the chunk for column 8 nt + g (zeros past M or K); acc[nt] += decode(q) x B (fp32). */
template <bool NV, int NT>
__device__ __forceinline__ void chunk_mma(const uint4& q, uint32_t sw, const uint4 (&lo)[NT], const uint4 (&hi)[NT],
                                          float (&acc)[NT][4]) {
  const uint32_t s_lo = expand_scale<NV>(sw, 0), s_hi = expand_scale<NV>(sw, 1);
  const uint32_t qw[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
  for (int j = 0; j < 4; ++j) {
    uint32_t a[4];
    decode_step(qw[j], s_lo, s_hi, a);
#pragma unroll
    for (int nt = 0; nt < NT; ++nt) {
      // step j reads k 4 j .. 4 j + 3 of the lane's 16: words 2 j, 2 j + 1 of lo|hi
      const uint4& v = j < 2 ? lo[nt] : hi[nt];
      const uint32_t b0 = (j & 1) ? v.z : v.x, b1 = (j & 1) ? v.w : v.y;
      mma_bf16_16816(acc[nt], a, b0, b1);
    }
  }
}

/** TMA: the (64 k x rows) box at (k, m) of the tensor map into dst, completing on bar. */
__device__ __forceinline__ void tma_load_2d(void* dst, const CUtensorMap* map, uint64_t* bar, int k, int m) {
  asm volatile(
      "cp.async.bulk.tensor.2d.shared::cluster.global.tile.mbarrier::complete_tx::bytes [%0], [%1, {%2, %3}], [%4];" ::"r"(
          smem_addr(dst)),
      "l"(reinterpret_cast<uint64_t>(map)), "r"(k), "r"(m), "r"(smem_addr(bar))
      : "memory");
}

__device__ __forceinline__ void wgmma_fence() { asm volatile("wgmma.fence.sync.aligned;" ::: "memory"); }
__device__ __forceinline__ void wgmma_commit() { asm volatile("wgmma.commit_group.sync.aligned;" ::: "memory"); }
template <int N>
__device__ __forceinline__ void wgmma_wait() {
  asm volatile("wgmma.wait_group.sync.aligned %0;" ::"n"(N) : "memory");
}

/** Keeps the compiler from moving accumulator reads/writes across the asynchronous wgmma. */
template <int R>
__device__ __forceinline__ void fence_acc(float (&d)[R]) {
#pragma unroll
  for (int i = 0; i < R; ++i) asm volatile("" : "+f"(d[i])::"memory");
}

/** Shared-memory descriptor of a K-major bf16 tile with 128-byte rows, 128B swizzle (8-row groups of
 *  1024 bytes), starting at byte address `addr` (a k16 step adds 32 bytes). */
__device__ __forceinline__ uint64_t desc_sw128(uint32_t addr) {
  return uint64_t((addr & 0x3FFFFu) >> 4) | (uint64_t(1) << 16) | (uint64_t(1024 >> 4) << 32) | (uint64_t(1) << 62);
}

// ---- M <= 16: mma.sync fed by bulk copies --------------------------------------------------------

constexpr int kTmaSlabs = 4;  // warps per block, one 16-row slab each (the layout's group G)
constexpr int kTmaParts = 4;  // mbarriers per block: the warps start on part 0 while 1.. arrive

/** Shared memory of mma_tma_kernel for `per` chunks per block. */
struct MmaTmaSmem {
  int w, s, a, a_pitch, red, bar, total;
  __host__ __device__ MmaTmaSmem(int per, int rows, bool nv, int nt) {
    w = 0;                                                      // [per][4 slabs][512]
    s = w + per * kTmaSlabs * 512;                              // [per][4 slabs][scale record]
    a = s + per * kTmaSlabs * scale_bytes_per_chunk(nv);        // [rows][a_pitch]: A's k range
    a_pitch = per * kChunkK * 2 + 16;                           // +16: rows g spread over the banks
    red = a + rows * a_pitch;                                   // [4 warps][NT * 4][32] fp32
    bar = red + kTmaSlabs * nt * 4 * 32 * 4;                    // kTmaParts mbarriers
    total = bar + 8 * kTmaParts;
  }
};

/**
 * M <= 16 (kPerm order, K % 8 == 0). Block (x, 0, z): the group of 4 slabs x (64 W rows), chunks
 * [z per, (z + 1) per) of K. One thread issues the block's whole input as bulk copies: its 4 slabs'
 * codes and scales (contiguous: the layout's groups) in kTmaParts parts, each on its own mbarrier,
 * and the M rows of A over its k range with part 0; so all of a block's bytes are in flight at once
 * and none of it occupies the SM's load slots (v2 issued 16-byte loads from each lane: 7.5 us at
 * m16-n3072-k3072, 0.75 TB/s, whatever the batching). Each warp computes its slab from shared
 * memory, part by part as they land. SPLIT > 1: the blocks of a (1, 1, SPLIT) cluster sum their
 * partial tiles through distributed shared memory.
 */
template <int NT, bool NV, int SPLIT>
__global__ void __launch_bounds__(kTmaSlabs * 32)
    mma_tma_kernel(const uint8_t* __restrict__ wq, const uint8_t* __restrict__ sc, const float* __restrict__ colmul,
                   const uint16_t* __restrict__ A, float* __restrict__ C, int M, int N, int K, int nch, int per) {
  constexpr int kSb = scale_bytes_per_chunk(NV);
  extern __shared__ __align__(128) uint8_t smem[];
  const MmaTmaSmem L(per, M, NV, NT);
  uint64_t* bar = reinterpret_cast<uint64_t*>(smem + L.bar);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
  const int cb = int(blockIdx.z) * per, ce = min(nch, cb + per), nc = max(0, ce - cb);
  const int pq = (nc + kTmaParts - 1) / kTmaParts;  // chunks per part (the last ones may be empty)
  if (threadIdx.x == 0) {
    for (int p = 0; p < kTmaParts; ++p) mbar_init(&bar[p], 1);
    sol::mbar_init_fence();
  }
  __syncthreads();
  if (threadIdx.x == 0 && nc > 0) {
    const int64_t u0 = unit_index(int64_t(blockIdx.x) * kTmaSlabs, cb, nch, kTmaSlabs);
    const uint64_t stream = policy_evict_first(), keep = policy_evict_last();
    const uint32_t abytes = uint32_t(min(K, ce * kChunkK) - cb * kChunkK) * 2;
    for (int p = 0; p < kTmaParts; ++p) {
      const int p0 = p * pq, p1 = min(nc, p0 + pq);
      if (p0 >= p1) break;
      const uint32_t wbytes = uint32_t(p1 - p0) * kTmaSlabs * 512, sbytes = uint32_t(p1 - p0) * kTmaSlabs * kSb;
      mbar_expect_tx(&bar[p], wbytes + sbytes + (p == 0 ? uint32_t(M) * abytes : 0u));
      if (p == 0)
        for (int m = 0; m < M; ++m)  // read by every block: keep in L2
          bulk_load(smem + L.a + m * L.a_pitch, A + int64_t(m) * K + int64_t(cb) * kChunkK, abytes, &bar[0], keep);
      // Read once per call: evict first.
      bulk_load(smem + L.w + p0 * kTmaSlabs * 512, wq + (u0 + p0 * kTmaSlabs) * 512, wbytes, &bar[p], stream);
      bulk_load(smem + L.s + p0 * kTmaSlabs * kSb, sc + (u0 + p0 * kTmaSlabs) * kSb, sbytes, &bar[p], stream);
    }
  }
  float acc[NT][4];
#pragma unroll
  for (int nt = 0; nt < NT; ++nt)
#pragma unroll
    for (int i = 0; i < 4; ++i) acc[nt][i] = 0.0f;
  for (int p = 0; p < kTmaParts; ++p) {
    const int p0 = p * pq, p1 = min(nc, p0 + pq);
    if (p0 >= p1) break;
    mbar_wait(&bar[p], 0);
#pragma unroll 2
    for (int cl = p0; cl < p1; ++cl) {
      const uint4 q = *reinterpret_cast<const uint4*>(smem + L.w + (cl * kTmaSlabs + warp) * 512 + lane * 16);
      const uint32_t sw =
          *reinterpret_cast<const uint16_t*>(smem + L.s + (cl * kTmaSlabs + warp) * kSb + (NV ? t : t >> 1) * 16 + 2 * g);
      // Lane (g, t): k 64 c + 16 t .. +15 of row 8 nt + g (K % 8 == 0: a 16-byte half is all in or out).
      const int k0 = (cb + cl) * kChunkK + 16 * t;
      uint4 lo[NT], hi[NT];
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
        const int row = 8 * nt + g;
        const uint8_t* ap = smem + L.a + row * L.a_pitch + (cl * kChunkK + 16 * t) * 2;
        const uint4 z = make_uint4(0, 0, 0, 0);
        lo[nt] = (row < M && k0 < K) ? *reinterpret_cast<const uint4*>(ap) : z;
        hi[nt] = (row < M && k0 + 8 < K) ? *reinterpret_cast<const uint4*>(ap + 16) : z;
      }
      chunk_mma<NV, NT>(q, sw, lo, hi, acc);
    }
  }
  // acc[nt][i]: W row 16 slab + g + 8 (i >> 1), A row 8 nt + 2t + (i & 1).
  const int slab = int(blockIdx.x) * kTmaSlabs + warp;
  if constexpr (SPLIT == 1) {
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int i = 0; i < 4; ++i) {
        const int n = slab * kSlabRows + g + 8 * (i >> 1), m = 8 * nt + 2 * t + (i & 1);
        if (n < N && m < M) C[size_t(m) * N + n] = acc[nt][i] * colmul[n];
      }
  } else {
    namespace cg = cooperative_groups;
    cg::cluster_group cluster = cg::this_cluster();
    float* red = reinterpret_cast<float*>(smem + L.red);  // [warp][nt * 4 + i][lane]
#pragma unroll
    for (int nt = 0; nt < NT; ++nt)
#pragma unroll
      for (int i = 0; i < 4; ++i) red[(warp * NT * 4 + nt * 4 + i) * 32 + lane] = acc[nt][i];
    cluster.sync();
    const int rank = int(cluster.block_rank());
    const float* parts[SPLIT];
#pragma unroll
    for (int r = 0; r < SPLIT; ++r) parts[r] = cluster.map_shared_rank(red, r);
    constexpr int kElems = kTmaSlabs * NT * 4 * 32, kPer = (kElems + SPLIT - 1) / SPLIT;
    for (int e = rank * kPer + int(threadIdx.x); e < min(kElems, (rank + 1) * kPer); e += kTmaSlabs * 32) {
      float sum = 0.0f;
#pragma unroll
      for (int r = 0; r < SPLIT; ++r) sum += parts[r][e];
      const int l = e % 32, idx = (e / 32) % (NT * 4), w = e / (32 * NT * 4), nt = idx / 4, i = idx % 4;
      const int n = (int(blockIdx.x) * kTmaSlabs + w) * kSlabRows + (l >> 2) + 8 * (i >> 1);
      const int m = 8 * nt + 2 * (l & 3) + (i & 1);
      if (n < N && m < M) C[size_t(m) * N + n] = sum * colmul[n];
    }
    cluster.sync();  // no block leaves while another still reads its shared memory
  }
}

// ---- M <= 16: the stream kernel (NIBBLE_FP4SM90_KIND=stream) ------------------------------------

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

// ---- The K % 8 != 0 fallback: mma.sync, 16-byte loads from each lane ------------------------------

constexpr int kMmaWarps = 8;  // warps per block, splitting K
/** Chunks a lane fetches before decoding: 6 at NT = 1 (14 registers a chunk: a 48-chunk K, 3072,
 *  is then one batch per warp, one memory latency instead of two; the trace before v6 had that
 *  second round trip in every warp's chain), 4 at NT = 2 (22 registers a chunk: 6 exceed 128). */
template <int NT>
__host__ __device__ constexpr int mma_batch() {
  return NT == 1 ? 6 : 4;
}

/** The mma kernel's timeline marks (thread 0 of each block, NIBBLE_FP4SM90_TRACE): entry, warp 0's
 *  first batch of codes landed, warp 0's K loop done, every warp's done (after __syncthreads), C
 *  written. */
constexpr int kMmaMarks = 5;

__device__ __forceinline__ void mma_mark(unsigned long long* trace, int k) {
  if (trace && threadIdx.x == 0) trace[(blockIdx.y * gridDim.x + blockIdx.x) * kMmaMarks + k] = sol::globaltimer_ns();
}

/**
 * One block per 16-row slab of W and per 8 NT rows of A (grid.y). NT: n8 tiles (A rows / 8).
 * PERM: the kPerm order and 16-byte activation loads (K % 8 == 0, A 16-byte aligned); else kStd and
 * 4-byte loads.
 */
template <int NT, bool PERM, bool NV>
__global__ void __launch_bounds__(kMmaWarps * 32, 2)
    mma_kernel(const uint4* __restrict__ wq, const uint8_t* __restrict__ sc, const float* __restrict__ colmul,
               const uint16_t* __restrict__ A, float* __restrict__ C, int M, int N, int K, int nch,
               unsigned long long* trace) {
  constexpr int kSb = scale_bytes_per_chunk(NV);
  mma_mark(trace, 0);
  __shared__ float red[kMmaWarps][NT * 4][32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
  const int slab = blockIdx.x, m0 = blockIdx.y * 8 * NT;
  const uint4* wp = wq + size_t(slab) * nch * 32 + lane;
  const uint8_t* sp = sc + size_t(slab) * nch * kSb;
  // The activation row of each n8 tile this lane feeds (B column g); rows past M read as zero.
  const uint16_t* arow[NT];
  bool avalid[NT];
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) {
    const int m = m0 + 8 * nt + g;
    avalid[nt] = m < M;
    arow[nt] = A + size_t(avalid[nt] ? m : 0) * K;
  }
  float acc[NT][4];
#pragma unroll
  for (int nt = 0; nt < NT; ++nt)
#pragma unroll
    for (int i = 0; i < 4; ++i) acc[nt][i] = 0.0f;

  constexpr int kMmaBatch = mma_batch<NT>();
  // This thread's element of the epilogue (at most one: NT x 4 x 32 <= 256 threads) and its row n.
  // NT = 1: its colmul is read now (at the end it is a DRAM round trip after the harness's L2
  // flush: with this and the 6-chunk batch, m1-n3072-k3072 6.53 -> 5.68 us); NT = 2 reads it in the
  // epilogue (read here, m16-n3072-k3072 went 7.55 -> 7.81 us: the first codes landed 0.6 us later).
  const int e_out = threadIdx.x < NT * 4 * 32 ? int(threadIdx.x) : -1;
  const int n_out = slab * kSlabRows + ((e_out % 32) >> 2) + 8 * (((e_out / 32) % 4) >> 1);
  float cm = 0.0f;
  if constexpr (NT == 1)
    if (e_out >= 0 && n_out < N) cm = __ldg(colmul + n_out);
  for (int c0 = warp; c0 < nch; c0 += kMmaWarps * kMmaBatch) {
    // Every load of the batch (codes, scales, activations) is issued before any use: the chain
    // per warp is one memory latency per batch, not one per chunk (v1 waited on the activations
    // of each chunk: 8 us at m16-n3072-k3072).
    uint4 q[kMmaBatch];
    uint32_t s[kMmaBatch][2];
    uint32_t b[kMmaBatch][NT][8];  // step j's B fragment: words 2j, 2j + 1
#pragma unroll
    for (int p = 0; p < kMmaBatch; ++p) {
      const int c = c0 + p * kMmaWarps;
      if (c < nch) {
        q[p] = ld_stream(wp + size_t(c) * 32);
        const uint8_t* sr = sp + size_t(c) * kSb;
        if constexpr (PERM) {
          s[p][0] = __ldg(reinterpret_cast<const uint16_t*>(sr) + (NV ? t : t >> 1) * 8 + g);
        } else if constexpr (NV) {
          const uint2 v = __ldg(reinterpret_cast<const uint2*>(sr) + g);
          s[p][0] = v.x, s[p][1] = v.y;
        } else {
          s[p][0] = __ldg(reinterpret_cast<const uint32_t*>(sr) + g);
        }
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
          if constexpr (PERM) {
            // Lane (g, t): k 64c + 16t .. +15 of its row (K % 8 == 0: a 16-byte half is all in or out).
            const int k0 = 64 * c + 16 * t;
            const uint4 z = make_uint4(0, 0, 0, 0);
            const uint4 lo = (avalid[nt] && k0 < K) ? __ldg(reinterpret_cast<const uint4*>(arow[nt] + k0)) : z;
            const uint4 hi = (avalid[nt] && k0 + 8 < K) ? __ldg(reinterpret_cast<const uint4*>(arow[nt] + k0 + 8)) : z;
            b[p][nt][0] = lo.x, b[p][nt][1] = lo.y, b[p][nt][2] = lo.z, b[p][nt][3] = lo.w;
            b[p][nt][4] = hi.x, b[p][nt][5] = hi.y, b[p][nt][6] = hi.z, b[p][nt][7] = hi.w;
          } else {
            // kStd: step j's pairs k 64c + 16j + 2t and + 8 (K even: a pair is all in or out).
            const uint32_t* ar = reinterpret_cast<const uint32_t*>(arow[nt]);
#pragma unroll
            for (int w = 0; w < 8; ++w) {
              const int k = 64 * c + 16 * (w >> 1) + 2 * t + 8 * (w & 1);
              b[p][nt][w] = (avalid[nt] && k < K) ? __ldg(ar + k / 2) : 0u;
            }
          }
        }
      }
    }
    if (trace && c0 == warp) {  // the first batch's codes have landed (a use of each waits for it)
      uint32_t d = 0;
#pragma unroll
      for (int p = 0; p < kMmaBatch; ++p) d ^= c0 + p * kMmaWarps < nch ? q[p].x : 0u;
      asm volatile("" ::"r"(d));  // d must exist before the mark: the loads' scoreboard waits here
      mma_mark(trace, 1);
    }
#pragma unroll
    for (int p = 0; p < kMmaBatch; ++p) {
      const int c = c0 + p * kMmaWarps;
      if (c >= nch) break;
      const uint32_t qw[4] = {q[p].x, q[p].y, q[p].z, q[p].w};
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        uint32_t s_lo, s_hi;
        if constexpr (PERM) {  // one scale block per lane and chunk
          s_lo = expand_scale<NV>(s[p][0], 0);
          s_hi = expand_scale<NV>(s[p][0], 1);
        } else {  // kStd: step j is NVFP4 block j, MXFP4 block j / 2
          const int bi = NV ? j : j >> 1;
          const uint32_t sw = bi < 2 ? s[p][0] : s[p][1];
          s_lo = expand_scale<NV>(sw, (2 * bi) & 3);
          s_hi = expand_scale<NV>(sw, (2 * bi + 1) & 3);
        }
        uint32_t a[4];
        decode_step(qw[j], s_lo, s_hi, a);
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) mma_bf16_16816(acc[nt], a, b[p][nt][2 * j], b[p][nt][2 * j + 1]);
      }
    }
  }
  mma_mark(trace, 2);
  // Sum the 8 warps' partial C^T tiles; acc[nt][i]: W row g + 8 (i >> 1), A row m0 + 8 nt + 2t + (i & 1).
#pragma unroll
  for (int nt = 0; nt < NT; ++nt)
#pragma unroll
    for (int i = 0; i < 4; ++i) red[warp][nt * 4 + i][lane] = acc[nt][i];
  __syncthreads();
  mma_mark(trace, 3);
  static_assert(NT * 4 * 32 <= kMmaWarps * 32, "one epilogue element per thread at most");
  if (e_out >= 0) {
    const int e = e_out, idx = e / 32, l = e % 32, nt = idx / 4, i = idx % 4;
    float sum = 0.0f;
#pragma unroll
    for (int w = 0; w < kMmaWarps; ++w) sum += red[w][idx][l];
    const int m = m0 + 8 * nt + 2 * (l & 3) + (i & 1);
    if (n_out < N && m < M) C[size_t(m) * N + n_out] = sum * (NT == 1 ? cm : colmul[n_out]);
  }
  if (trace) {
    __syncthreads();
    mma_mark(trace, 4);
  }
}

// ---- M > 16: wgmma, A (weights) from registers, B (activations) from shared memory -------------

constexpr int kPf = 4;  // weight chunks a consumer thread has in flight (even: fragment buffers alternate)

/** Warps 0 .. 4 NCONS - 1: consumer warpgroups (each 64 W rows); warp 4 NCONS: the TMA producer.
 *  NCONS = 2 (128 x 256 tiles): the producer is a whole warpgroup so that setmaxnreg can move
 *  registers to the consumers (40 / 232: 128 fp32 accumulators + two chunks of fragments); ptxas
 *  budgets a 288-thread block as if it had 384 threads (168 registers) and spills. NCONS = 1: one
 *  producer warp, two blocks per SM (split-K needs the company).
 *  WTMA: the block's codes and scales of each chunk travel with its activation tile (bulk copies on
 *  the stage's mbarrier) instead of 16-byte loads from each consumer lane. */
template <int BN, int NCONS, bool NV, bool WTMA>
struct WgCfg {
  static constexpr int kProducerWarps = NCONS >= 2 ? 4 : 1;
  static constexpr int kThreads = 128 * NCONS + 32 * kProducerWarps;
  static constexpr int kMinBlocks = NCONS >= 2 ? 1 : 2;
  static constexpr bool kSetRegs = NCONS >= 2;
  static constexpr int kGroup = 4 * NCONS;                         // slabs per block: the layout's G
  static constexpr int kABytes = BN * 128;                         // BN rows x 64 k x 2 bytes
  static constexpr int kWBytes = WTMA ? kGroup * 512 : 0;          // codes of the block's chunk
  static constexpr int kSBytes = WTMA ? kGroup * scale_bytes_per_chunk(NV) : 0;
  static constexpr int kStageBytes = (kABytes + kWBytes + kSBytes + 1023) / 1024 * 1024;  // 128B swizzle: 1 KB aligned
  static constexpr int kStages = BN >= 256 ? 4 : (BN >= 128 ? 5 : 8);
  static constexpr int kRingBytes = kStages * kStageBytes;
  static constexpr int kRedBytes = BN / 2 * 128 * NCONS * 4;  // split-K partials (reuse the ring)
  static_assert(kRedBytes <= kRingBytes, "the split-K partials live in the ring");
  static constexpr int kSmem = kRingBytes + 1024 /* alignment */ + 2 * kStages * 8;
};

/**
 * C^T tiles (64 NCONS W rows) x (BN A rows) over chunks [z per, (z + 1) per) of K, z = blockIdx.z;
 * nblk = the tiles along N.
 * SPLIT > 1: the SPLIT blocks of a (1, 1, SPLIT) cluster sum their partial tiles through
 * distributed shared memory (each block reduces and writes 1/SPLIT of the tile; deterministic).
 */
template <int BN, int NCONS, int SPLIT, bool NV, bool WTMA>
__global__ void __launch_bounds__(WgCfg<BN, NCONS, NV, WTMA>::kThreads, WgCfg<BN, NCONS, NV, WTMA>::kMinBlocks)
    wgmma_kernel(const __grid_constant__ CUtensorMap tmA, const uint4* __restrict__ wq, const uint8_t* __restrict__ sc,
                 const float* __restrict__ colmul, float* __restrict__ C, int M, int N, int nch, int nblk) {
  using Cfg = WgCfg<BN, NCONS, NV, WTMA>;
  constexpr int kSb = scale_bytes_per_chunk(NV), kG = Cfg::kGroup;
  extern __shared__ uint8_t smem_raw[];
  uint8_t* stages = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));
  uint64_t* full = reinterpret_cast<uint64_t*>(stages + Cfg::kRingBytes);
  uint64_t* empty = full + Cfg::kStages;
  const int warp = threadIdx.x / 32, lane = threadIdx.x & 31;
  if (threadIdx.x == 0) {
    for (int s = 0; s < Cfg::kStages; ++s) {
      mbar_init(&full[s], 1);
      mbar_init(&empty[s], NCONS * 4);  // lane 0 of each consumer warp
    }
    sol::mbar_init_fence();
  }
  __syncthreads();
  const int per = (nch + SPLIT - 1) / SPLIT;
  const int cb = int(blockIdx.z) * per, ce = min(nch, cb + per), nc = max(0, ce - cb);
  // Tiles t = n block + nblk * m block, this block's t0, t0 + stride, ...: one per block when the grid
  // covers them (always with SPLIT > 1), several when the grid is capped at the SMs (persistent:
  // the producer loads the next tile's first stages while the consumers finish the last one).
  const int tiles = nblk * ((M + BN - 1) / BN);
  const int t0 = int(blockIdx.y * gridDim.x + blockIdx.x), tstride = int(gridDim.x * gridDim.y);

  if (warp >= 4 * NCONS) {  // producer
    if constexpr (Cfg::kSetRegs) asm volatile("setmaxnreg.dec.sync.aligned.u32 40;");
    if (warp == 4 * NCONS && lane == 0) {
      asm volatile("prefetch.tensormap [%0];" ::"l"(reinterpret_cast<uint64_t>(&tmA)) : "memory");
      uint64_t stream = 0;
      if constexpr (WTMA) stream = policy_evict_first();
      int it = 0;  // chunks loaded by this block: the ring position
      for (int tile = t0; tile < tiles; tile += tstride) {
        const int m0 = (tile / nblk) * BN;
        // The tile's units: chunk c of its kG slabs is unit (n block nch + c) kG + warp.
        const int64_t ubase = int64_t(tile % nblk) * nch * kG;
        for (int c = cb; c < ce; ++c, ++it) {
          const int s = it % Cfg::kStages;
          uint8_t* st = stages + s * Cfg::kStageBytes;
          if (it >= Cfg::kStages) mbar_wait(&empty[s], ((it / Cfg::kStages) - 1) & 1);
          mbar_expect_tx(&full[s], Cfg::kABytes + Cfg::kWBytes + Cfg::kSBytes);
          tma_load_2d(st, &tmA, &full[s], 64 * c, m0);
          if constexpr (WTMA) {
            const int64_t u = ubase + int64_t(c) * kG;
            bulk_load(st + Cfg::kABytes, reinterpret_cast<const uint8_t*>(wq) + u * 512, Cfg::kWBytes, &full[s], stream);
            bulk_load(st + Cfg::kABytes + Cfg::kWBytes, sc + u * kSb, Cfg::kSBytes, &full[s], stream);
          }
        }
      }
    }
  } else {  // consumers
    if constexpr (Cfg::kSetRegs) asm volatile("setmaxnreg.inc.sync.aligned.u32 232;");
    const int g = lane >> 2, t = lane & 3;
    const uint32_t stage0 = smem_addr(stages);
    int it0 = 0;  // the ring position of the tile's first chunk
    for (int tile = t0; tile < tiles; tile += tstride) {
      const int m0 = (tile / nblk) * BN;
      const int64_t ubase = int64_t(tile % nblk) * nch * kG;
      const int slab = (tile % nblk) * kG + warp;
      const uint4* wp = wq + (ubase + warp) * 32 + lane;              // + c kG 32 for chunk c
      const uint8_t* sp = sc + (ubase + warp) * kSb + g * (kSb / 8);  // + c kG kSb

      float acc[BN / 2];
#pragma unroll
      for (int i = 0; i < BN / 2; ++i) acc[i] = 0.0f;

      uint4 qr[kPf];
      uint2 sr[kPf];
      if constexpr (!WTMA) {
#pragma unroll
        for (int p = 0; p < kPf; ++p) {
          if (cb + p < ce) {
            qr[p] = ld_stream(wp + size_t(cb + p) * kG * 32);
            if constexpr (NV)
              sr[p] = __ldg(reinterpret_cast<const uint2*>(sp + size_t(cb + p) * kG * kSb));
            else
              sr[p].x = __ldg(reinterpret_cast<const uint32_t*>(sp + size_t(cb + p) * kG * kSb));
          }
        }
      }
      // Two chunks' A fragments: chunk i decodes into fr[i & 1] while chunk i - 1's wgmma group runs.
      uint32_t fr[2][4][4];
      for (int c0 = cb; c0 < ce; c0 += kPf) {
#pragma unroll
        for (int p = 0; p < kPf; ++p) {
          const int c = c0 + p;
          if (c < ce) {
            const int i = c - cb, ri = it0 + i, s = ri % Cfg::kStages;
            const uint32_t base = stage0 + s * Cfg::kStageBytes;
            uint4 q;
            uint2 sw;
            if constexpr (WTMA) {
              mbar_wait(&full[s], (ri / Cfg::kStages) & 1);
              const uint8_t* st = stages + s * Cfg::kStageBytes;
              q = *reinterpret_cast<const uint4*>(st + Cfg::kABytes + warp * 512 + lane * 16);
              const uint8_t* ss = st + Cfg::kABytes + Cfg::kWBytes + warp * kSb + g * (kSb / 8);
              if constexpr (NV)
                sw = *reinterpret_cast<const uint2*>(ss);
              else
                sw.x = *reinterpret_cast<const uint32_t*>(ss);
            } else {
              q = qr[p];
              sw = sr[p];
              if (c + kPf < ce) {
                qr[p] = ld_stream(wp + size_t(c + kPf) * kG * 32);
                if constexpr (NV)
                  sr[p] = __ldg(reinterpret_cast<const uint2*>(sp + size_t(c + kPf) * kG * kSb));
                else
                  sr[p].x = __ldg(reinterpret_cast<const uint32_t*>(sp + size_t(c + kPf) * kG * kSb));
              }
            }
            const uint32_t qw[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
            for (int j = 0; j < 4; ++j) {  // kStd: step j is NVFP4 block j, MXFP4 block j / 2
              const int bi = NV ? j : j >> 1;
              const uint32_t w = NV ? (bi < 2 ? sw.x : sw.y) : sw.x;
              decode_step(qw[j], expand_scale<NV>(w, (2 * bi) & 3), expand_scale<NV>(w, (2 * bi + 1) & 3),
                          fr[p & 1][j]);
            }
            if constexpr (!WTMA) mbar_wait(&full[s], (ri / Cfg::kStages) & 1);
            fence_acc(acc);
            wgmma_fence();
#pragma unroll
            for (int j = 0; j < 4; ++j) wgmma_rs<BN>(acc, fr[p & 1][j], desc_sw128(base + 32 * j));
            wgmma_commit();
            fence_acc(acc);
            wgmma_wait<1>();  // chunk i - 1's group is done: its fragments and its stage are free
            if (i > 0 && lane == 0) mbar_arrive(&empty[(ri - 1) % Cfg::kStages]);
          }
        }
      }
      wgmma_wait<0>();
      fence_acc(acc);
      // The tile's last stage is free too: every stage is released exactly once, so the producer's
      // ring positions stay in step across tiles.
      if (nc > 0 && lane == 0) mbar_arrive(&empty[(it0 + nc - 1) % Cfg::kStages]);
      it0 += nc;

      // acc[4 q + e]: W row 16 warp + g + 8 (e >> 1), A row 8 q + 2t + (e & 1) of the tile.
      const int n_lo = slab * kSlabRows + g, n_hi = n_lo + 8;
      if constexpr (SPLIT == 1) {
        const float f_lo = n_lo < N ? colmul[n_lo] : 0.0f, f_hi = n_hi < N ? colmul[n_hi] : 0.0f;
#pragma unroll
        for (int q = 0; q < BN / 8; ++q) {
#pragma unroll
          for (int e = 0; e < 4; ++e) {
            const int m = m0 + 8 * q + 2 * t + (e & 1);
            const int n = (e >> 1) ? n_hi : n_lo;
            if (m < M && n < N) C[size_t(m) * N + n] = acc[4 * q + e] * ((e >> 1) ? f_hi : f_lo);
          }
        }
      } else {
        // One tile per block here. Partials into this block's ring, once every consumer
        // warpgroup's wgmma reads of it are done: red[i][thread], conflict-free.
        asm volatile("bar.sync 1, %0;" ::"n"(128 * NCONS) : "memory");
        float* red = reinterpret_cast<float*>(stages);
#pragma unroll
        for (int i = 0; i < BN / 2; ++i) red[i * (128 * NCONS) + threadIdx.x] = acc[i];
      }
    }
  }
  if constexpr (SPLIT > 1) {
    // Every ring read (TMA writes, wgmma reads) is complete in every block of the cluster: the
    // consumers waited on their last group, and no chunk is loaded that they did not consume.
    namespace cg = cooperative_groups;
    cg::cluster_group cluster = cg::this_cluster();
    cluster.sync();
    if (warp < 4 * NCONS && t0 < tiles) {
      const int rank = int(cluster.block_rank());
      const float* parts[SPLIT];
#pragma unroll
      for (int r = 0; r < SPLIT; ++r) parts[r] = cluster.map_shared_rank(reinterpret_cast<float*>(stages), r);
      const int g = lane >> 2, t = lane & 3;
      const int m0 = (t0 / nblk) * BN;
      const int slab = (t0 % nblk) * kG + warp;
      const int n_lo = slab * kSlabRows + g, n_hi = n_lo + 8;
      const float f_lo = n_lo < N ? colmul[n_lo] : 0.0f, f_hi = n_hi < N ? colmul[n_hi] : 0.0f;
      constexpr int kPer = (BN / 2 + SPLIT - 1) / SPLIT;
      for (int i = rank * kPer; i < min(BN / 2, (rank + 1) * kPer); ++i) {
        float sum = 0.0f;
#pragma unroll
        for (int r = 0; r < SPLIT; ++r) sum += parts[r][i * (128 * NCONS) + threadIdx.x];
        const int q = i / 4, e = i % 4;
        const int m = m0 + 8 * q + 2 * t + (e & 1);
        const int n = (e >> 1) ? n_hi : n_lo;
        if (m < M && n < N) C[size_t(m) * N + n] = sum * ((e >> 1) ? f_hi : f_lo);
      }
    }
    cluster.sync();  // no block leaves while another still reads its shared memory
  }
}

// ---- Host side ----------------------------------------------------------------------------------

enum class Kind { kMmaTma, kMma, kWg64, kWg128, kWg256, kStream };

struct Handle {
  sol::GemmProblem g;
  Kind kind = Kind::kMma;
  int split = 1;      // mma_tma / wgmma: blocks (a cluster) splitting K
  bool wtma = true;   // wgmma: codes and scales by bulk copy (else 16-byte loads per lane)
  int grid_cap = 0;   // wgmma, no split: at most this many (persistent) blocks; 0: one per tile
  int group = 1;      // the layout's slabs per group
  int smem_optin = 0;
  KOrder order = KOrder::kStd;
  int64_t n_pad = 0, nch = 0;
  uint4* wq = nullptr;
  uint8_t* sc = nullptr;
  float* colmul = nullptr;
  // stream: the repacked units, the launch's shape (StreamArgs) and its shared memory
  uint8_t* units = nullptr;
  StreamArgs sa{};
  int stream_smem = 0;
  std::string trace_path;  // NIBBLE_FP4SM90_TRACE: the stream or mma kernel's timeline, written at teardown
  unsigned long long* mma_trace = nullptr;  // the mma kernel's marks (kMmaMarks per block), when traced
  sol::DeviceAllocs mem;
  // The tensor map of the last A seen (run may get another pointer).
  const void* map_ptr = nullptr;
  CUtensorMap map{};
};

using EncodeTiledFn = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                                   const cuuint64_t*, const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave,
                                   CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

EncodeTiledFn encode_tiled() {
  static EncodeTiledFn fn = [] {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult q{};
    SOL_CUDA(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault, &q));
    if (q != cudaDriverEntryPointSuccess || !p)
      throw sol::AbiFailure(NIBBLE_ERR_CUDA, "cuTensorMapEncodeTiled is not available from the driver");
    return reinterpret_cast<EncodeTiledFn>(p);
  }();
  return fn;
}

/** A (M, K) bf16 row-major as 64 k x rows boxes, 128B swizzle, zero fill past M and K. */
void encode_a_map(Handle& h, const uint16_t* A, int rows) {
  if (h.map_ptr == A) return;
  if (reinterpret_cast<uintptr_t>(A) % 16 != 0)
    throw sol::AbiFailure(NIBBLE_ERR_NOT_SUPPORTED, "A is not 16-byte aligned (the TMA path needs it)");
  const cuuint64_t dims[2] = {cuuint64_t(h.g.K), cuuint64_t(h.g.M)};
  const cuuint64_t strides[1] = {cuuint64_t(h.g.K) * 2};
  const cuuint32_t box[2] = {64, cuuint32_t(rows)};
  const cuuint32_t estr[2] = {1, 1};
  const CUresult r = encode_tiled()(&h.map, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, const_cast<uint16_t*>(A), dims,
                                    strides, box, estr, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                                    CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
  if (r != CUDA_SUCCESS)
    throw sol::AbiFailure(NIBBLE_ERR_CUDA, "cuTensorMapEncodeTiled failed (CUresult " + std::to_string(int(r)) + ")");
  h.map_ptr = A;
}

template <int NT, bool PERM, bool NV>
void launch_mma(const Handle& h, const uint16_t* A, float* C, cudaStream_t stream) {
  const dim3 grid(unsigned(h.n_pad / kSlabRows), unsigned((h.g.M + 8 * NT - 1) / (8 * NT)));
  mma_kernel<NT, PERM, NV><<<grid, kMmaWarps * 32, 0, stream>>>(h.wq, h.sc, h.colmul, A, C, int(h.g.M), int(h.g.N),
                                                                int(h.g.K), int(h.nch), h.mma_trace);
  SOL_CHECK_LAUNCH();
}

template <bool NV>
void launch_mma_any(const Handle& h, const uint16_t* A, float* C, cudaStream_t stream) {
  if (h.order == KOrder::kPerm) {
    if (reinterpret_cast<uintptr_t>(A) % 16 != 0)
      throw sol::AbiFailure(NIBBLE_ERR_NOT_SUPPORTED, "A is not 16-byte aligned (the repacked order needs it)");
    if (h.g.M <= 8)
      launch_mma<1, true, NV>(h, A, C, stream);
    else
      launch_mma<2, true, NV>(h, A, C, stream);
  } else {
    launch_mma<2, false, NV>(h, A, C, stream);
  }
}

/** Launch with a (1, 1, split) cluster when split > 1. */
template <class... P, class... Args>
void launch_cluster(void (*kernel)(P...), dim3 grid, dim3 block, int smem, int split, cudaStream_t stream,
                    Args... args) {
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = grid;
  cfg.blockDim = block;
  cfg.dynamicSmemBytes = size_t(smem);
  cfg.stream = stream;
  cudaLaunchAttribute attr{};
  attr.id = cudaLaunchAttributeClusterDimension;
  attr.val.clusterDim.x = 1;
  attr.val.clusterDim.y = 1;
  attr.val.clusterDim.z = unsigned(split);
  cfg.attrs = &attr;
  cfg.numAttrs = split > 1 ? 1 : 0;
  SOL_CUDA(cudaLaunchKernelEx(&cfg, kernel, args...));
  SOL_CHECK_LAUNCH();
}

/** Shared memory of mma_tma_kernel at (per, M, format); NT from M. */
int mma_tma_smem(int per, int M, bool nv) { return MmaTmaSmem(per, M, nv, M <= 8 ? 1 : 2).total; }

template <int NT, bool NV, int SPLIT>
void launch_mma_tma_split(const Handle& h, const uint16_t* A, float* C, cudaStream_t stream) {
  const auto kernel = mma_tma_kernel<NT, NV, SPLIT>;
  static bool attr_set = false;  // per instantiation; prepare/run are called from one thread at a time
  if (!attr_set) {
    SOL_CUDA(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, h.smem_optin));
    attr_set = true;
  }
  const int per = int((h.nch + SPLIT - 1) / SPLIT);
  const dim3 grid(unsigned(h.n_pad / (16 * kTmaSlabs)), 1, unsigned(SPLIT));
  launch_cluster(kernel, grid, dim3(kTmaSlabs * 32), mma_tma_smem(per, int(h.g.M), NV), SPLIT, stream,
                 reinterpret_cast<const uint8_t*>(h.wq), static_cast<const uint8_t*>(h.sc),
                 static_cast<const float*>(h.colmul), A, C, int(h.g.M), int(h.g.N), int(h.g.K), int(h.nch), per);
}

template <int NT, bool NV>
void launch_mma_tma(const Handle& h, const uint16_t* A, float* C, cudaStream_t stream) {
  if (reinterpret_cast<uintptr_t>(A) % 16 != 0)
    throw sol::AbiFailure(NIBBLE_ERR_NOT_SUPPORTED, "A is not 16-byte aligned (the bulk copies need it)");
  switch (h.split) {
    case 1: launch_mma_tma_split<NT, NV, 1>(h, A, C, stream); break;
    case 2: launch_mma_tma_split<NT, NV, 2>(h, A, C, stream); break;
    case 4: launch_mma_tma_split<NT, NV, 4>(h, A, C, stream); break;
    case 8: launch_mma_tma_split<NT, NV, 8>(h, A, C, stream); break;
    default: throw sol::AbiFailure(NIBBLE_ERR_INTERNAL, "bad split " + std::to_string(h.split));
  }
}

template <int BN, int NCONS, int SPLIT, bool NV, bool WTMA>
void launch_wgmma_split(Handle& h, float* C, cudaStream_t stream) {
  using Cfg = WgCfg<BN, NCONS, NV, WTMA>;
  const auto kernel = wgmma_kernel<BN, NCONS, SPLIT, NV, WTMA>;
  static bool attr_set = false;  // per instantiation; prepare/run are called from one thread at a time
  if (!attr_set) {
    SOL_CUDA(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Cfg::kSmem));
    attr_set = true;
  }
  const int nblk = int(h.n_pad / (64 * NCONS)), mblk = int((h.g.M + BN - 1) / BN);
  // SPLIT == 1 with more tiles than fit at once: persistent blocks (h.grid_cap per the chooser).
  const int64_t tiles = int64_t(nblk) * mblk;
  const dim3 grid = (SPLIT == 1 && h.grid_cap > 0 && tiles > h.grid_cap) ? dim3(unsigned(h.grid_cap), 1, 1)
                                                                         : dim3(unsigned(nblk), unsigned(mblk), SPLIT);
  launch_cluster(kernel, grid, dim3(Cfg::kThreads), Cfg::kSmem, SPLIT, stream, h.map, static_cast<const uint4*>(h.wq),
                 static_cast<const uint8_t*>(h.sc), static_cast<const float*>(h.colmul), C, int(h.g.M), int(h.g.N),
                 int(h.nch), nblk);
}

template <int BN, int NCONS, int SPLIT, bool NV>
void launch_wgmma_w(Handle& h, float* C, cudaStream_t stream) {
  if (h.wtma)
    launch_wgmma_split<BN, NCONS, SPLIT, NV, true>(h, C, stream);
  else
    launch_wgmma_split<BN, NCONS, SPLIT, NV, false>(h, C, stream);
}

template <int BN, int NCONS, bool NV>
void launch_wgmma(Handle& h, const uint16_t* A, float* C, cudaStream_t stream) {
  encode_a_map(h, A, BN);
  switch (h.split) {
    case 1: launch_wgmma_w<BN, NCONS, 1, NV>(h, C, stream); break;
    case 2: launch_wgmma_w<BN, NCONS, 2, NV>(h, C, stream); break;
    case 4:
      if constexpr (BN <= 128) {
        launch_wgmma_w<BN, NCONS, 4, NV>(h, C, stream);
        break;
      }
      [[fallthrough]];
    case 8:
      if constexpr (BN <= 128) {
        launch_wgmma_w<BN, NCONS, 8, NV>(h, C, stream);
        break;
      }
      [[fallthrough]];
    default: throw sol::AbiFailure(NIBBLE_ERR_INTERNAL, "bad split " + std::to_string(h.split));
  }
}

/** The cudaLaunchConfig of stream_kernel: grid clusters x split, a (split, 1, 1) cluster when
 *  split > 1; `attr` must outlive the config. */
cudaLaunchConfig_t stream_config(const StreamArgs& a, int smem, cudaStream_t stream, cudaLaunchAttribute* attr) {
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(unsigned(a.clusters * a.split));
  cfg.blockDim = dim3(kStreamWarps * 32);
  cfg.dynamicSmemBytes = size_t(smem);
  cfg.stream = stream;
  *attr = cudaLaunchAttribute{};
  attr->id = cudaLaunchAttributeClusterDimension;
  attr->val.clusterDim.x = unsigned(a.split);
  attr->val.clusterDim.y = 1;
  attr->val.clusterDim.z = 1;
  cfg.attrs = attr;
  cfg.numAttrs = a.split > 1 ? 1 : 0;
  return cfg;
}

/** stream_kernel's instantiation for (M, format). */
template <bool NV>
auto stream_kernel_for(int M) {
  return M <= 8 ? stream_kernel<1, NV> : stream_kernel<2, NV>;
}

/** One stream_kernel launch on `stream` (prepare set its shape and shared memory); NOT_SUPPORTED
 *  when A is not 16-byte aligned (its bulk copies need it). */
template <bool NV>
void launch_stream(const Handle& h, const uint16_t* A, float* C, cudaStream_t stream) {
  if (reinterpret_cast<uintptr_t>(A) % 16 != 0)
    throw sol::AbiFailure(NIBBLE_ERR_NOT_SUPPORTED, "A is not 16-byte aligned (the stream kernel's bulk copies need it)");
  StreamArgs a = h.sa;
  a.A = A;
  a.C = C;
  cudaLaunchAttribute attr{};
  const cudaLaunchConfig_t cfg = stream_config(a, h.stream_smem, stream, &attr);
  SOL_CUDA(cudaLaunchKernelEx(&cfg, stream_kernel_for<NV>(int(h.g.M)), a));
  SOL_CHECK_LAUNCH();
}

template <bool NV>
void launch(Handle& h, const uint16_t* A, float* C, cudaStream_t stream) {
  switch (h.kind) {
    case Kind::kStream: launch_stream<NV>(h, A, C, stream); break;
    case Kind::kMmaTma:
      if (h.g.M <= 8)
        launch_mma_tma<1, NV>(h, A, C, stream);
      else
        launch_mma_tma<2, NV>(h, A, C, stream);
      break;
    case Kind::kMma: launch_mma_any<NV>(h, A, C, stream); break;
    case Kind::kWg64: launch_wgmma<64, 1, NV>(h, A, C, stream); break;
    case Kind::kWg128: launch_wgmma<128, 1, NV>(h, A, C, stream); break;
    case Kind::kWg256: launch_wgmma<256, 2, NV>(h, A, C, stream); break;
  }
}

/** Kernel, split-K and weight path for (M, N, K): see the file header. For measuring alternatives:
 *  NIBBLE_FP4SM90_KIND (stream, mmatma, mma, wg64, wg128, wg256), NIBBLE_FP4SM90_SPLIT (1, 2, 4, 8; 4
 *  and 8 not with wg256), NIBBLE_FP4SM90_WTMA (0: wgmma's weights by 16-byte loads per lane, 1: by
 *  bulk copy) and NIBBLE_FP4SM90_GRID (wgmma without split: at most this many persistent blocks; 0:
 *  one block per tile). The stream kind's split, grid and ring: plan_stream. */
void choose_kernel(Handle& h, int sms) {
  const sol::GemmProblem& g = h.g;
  const bool k8 = g.K % 8 == 0;
  // Measured on the H200 (NOTES.md, v3): at M <= 16 the per-lane-load mma kernel beats the
  // bulk-copy one (7.5 against 9.6 us at m16-n3072-k3072); at M = 128 64 x 64 tiles beat 64 x 128
  // (21.7 against 26.6 us at m128-n4096-k4096).
  if (!k8 || g.M <= 16)
    h.kind = Kind::kMma;
  else
    h.kind = g.M <= 128 ? Kind::kWg64 : (g.M <= 256 ? Kind::kWg128 : Kind::kWg256);
  if (const char* e = std::getenv("NIBBLE_FP4SM90_KIND")) {
    const std::string k = e;
    if (k == "stream") h.kind = Kind::kStream;
    else if (k == "mmatma") h.kind = Kind::kMmaTma;
    else if (k == "mma") h.kind = Kind::kMma;
    else if (k == "wg64") h.kind = Kind::kWg64;
    else if (k == "wg128") h.kind = Kind::kWg128;
    else if (k == "wg256") h.kind = Kind::kWg256;
    else throw sol::AbiFailure(NIBBLE_ERR_INVALID_ARGUMENT, "NIBBLE_FP4SM90_KIND: stream, mmatma, mma, wg64, wg128 or wg256");
    if (h.kind != Kind::kMma && !k8) throw sol::AbiFailure(NIBBLE_ERR_NOT_SUPPORTED, "K % 8 != 0 needs kind mma");
    if (h.kind == Kind::kMmaTma && g.M > 16) throw sol::AbiFailure(NIBBLE_ERR_NOT_SUPPORTED, "mmatma needs M <= 16");
    if (h.kind == Kind::kStream && g.M > 16) throw sol::AbiFailure(NIBBLE_ERR_NOT_SUPPORTED, "stream needs M <= 16");
  }
  if (h.kind == Kind::kStream) return;  // plan_stream (prepare) picks its split, grid and ring
  h.order = (h.kind == Kind::kMmaTma || (h.kind == Kind::kMma && g.M <= 16 && k8)) ? KOrder::kPerm : KOrder::kStd;
  h.group = h.kind == Kind::kMmaTma ? kTmaSlabs : h.kind == Kind::kMma ? 1 : h.kind == Kind::kWg256 ? 8 : 4;
  const int64_t nch = (g.K + kChunkK - 1) / kChunkK;
  const char* env_split = std::getenv("NIBBLE_FP4SM90_SPLIT");
  h.split = 1;
  if (h.kind == Kind::kMma) return;
  if (h.kind == Kind::kMmaTma) {
    // Two blocks per SM or more (each warp's decode is a chain of dependent steps: the SM needs
    // several to hide it), and at most ~72 KB of shared memory each (three per SM), so that the
    // whole weight matrix is in flight at once at these shapes.
    const int64_t groups = (g.N + 16 * kTmaSlabs - 1) / (16 * kTmaSlabs);
    const auto smem = [&](int s) { return mma_tma_smem(int((nch + s - 1) / s), int(g.M), g.nvfp4); };
    while (h.split < 8 && (groups * h.split < 2 * sms || smem(h.split) > 72 * 1024) && nch / (2 * h.split) >= 2)
      h.split *= 2;
    if (env_split) h.split = std::atoi(env_split);
    if (h.split != 1 && h.split != 2 && h.split != 4 && h.split != 8)
      throw sol::AbiFailure(NIBBLE_ERR_INVALID_ARGUMENT, "NIBBLE_FP4SM90_SPLIT: 1, 2, 4 or 8");
    if (smem(h.split) > h.smem_optin)
      throw sol::AbiFailure(NIBBLE_ERR_NOT_SUPPORTED, "K too large for the shared memory of one block");
    return;
  }
  // Split K while the blocks still fit one wave at two per SM (one consumer warpgroup's chain of
  // dependent steps cannot keep an SM's tensor cores busy: v1 took 42 us at m128-n4096-k4096 with
  // 128 blocks of one warpgroup), keeping >= 4 chunks per block.
  const int bn = h.kind == Kind::kWg64 ? 64 : (h.kind == Kind::kWg128 ? 128 : 256);
  const int64_t rows = h.kind == Kind::kWg256 ? 128 : 64;
  const int64_t blocks = ((g.N + rows - 1) / rows) * ((g.M + bn - 1) / bn);
  const int max_split = bn == 256 ? 2 : 8;
  while (h.split < max_split && blocks * 2 * h.split <= 2 * int64_t(sms) && nch / (2 * h.split) >= 4) h.split *= 2;
  if (env_split) {
    const int v = std::atoi(env_split);
    if (v != 1 && v != 2 && !(bn <= 128 && (v == 4 || v == 8)))
      throw sol::AbiFailure(NIBBLE_ERR_INVALID_ARGUMENT, "NIBBLE_FP4SM90_SPLIT: 1, 2 (4, 8 below BN 256)");
    h.split = v;
  }
  // The weights come with the activation tile: 276.6 us at m4096-n8192-k3072 against 308.4 with
  // per-lane loads (both persistent), 26.6 against 36.7 us at m128-n4096-k4096.
  h.wtma = true;
  if (const char* e = std::getenv("NIBBLE_FP4SM90_WTMA")) h.wtma = std::atoi(e) != 0;
  // Persistent blocks (one wave: 1 per SM at 128 x 256, 2 below) when there are more tiles.
  h.grid_cap = sms * (h.kind == Kind::kWg256 ? 1 : 2);
  if (const char* e = std::getenv("NIBBLE_FP4SM90_GRID")) h.grid_cap = std::atoi(e);
}

/** A launch of stream_kernel: its arguments (pointers unset), shared memory, and the estimated
 *  bytes of the busiest SM (its weights plus half its A slice: L2 reads cost less than DRAM ones). */
struct StreamPlan {
  StreamArgs a{};
  int smem = 0;
  double cost = 0.0;
};

/**
 * The stream kernel's plan with `split` blocks per cluster (1, 2, 4 or 8): clusters = SMs / split
 * tile ranges (at most ntiles, at most `clusters_cap` when > 0, at most what fits on the GPU at once:
 * clusters live inside a GPC, and a second wave would double the time), ring slots per warp enough
 * for the longest warp range (at most `stages_cap` when > 0) as far as shared memory allows.
 * @return false when the split does not apply (more slices than chunks of K) or nothing fits.
 */
template <bool NV>
bool plan_stream_split(const Handle& h, int split, int sms, int clusters_cap, int stages_cap, StreamPlan* out) {
  const sol::GemmProblem& g = h.g;
  const int ub = stream_unit_bytes(NV), nt = g.M <= 8 ? 1 : 2;
  StreamArgs a{};
  a.M = int(g.M);
  a.N = int(g.N);
  a.K = int(g.K);
  a.ntiles = int((g.N + kSlabRows - 1) / kSlabRows);
  a.nch = int((g.K + kChunkK - 1) / kChunkK);
  a.split = split;
  if (split < 1 || split > 8 || split > a.nch || split > sms) return false;
  if (int64_t(a.ntiles) * sms > INT32_MAX || int64_t(a.ntiles) * a.nch * kStreamWarps > INT32_MAX)
    return false;  // the kernel's int math (tile ranges, unit ranges x 16)
  a.len_max = (a.nch + split - 1) / split;  // c0(r) = floor(nch r / split): slices differ by at most one
  // Ring slots for (clusters): the longest warp range's stages, fewer if shared memory runs out; 0: none fit.
  const auto fit = [&](int clusters) {
    a.clusters = clusters;
    a.dt_max = (a.ntiles + clusters - 1) / clusters;
    const int per_warp = (a.dt_max * a.len_max + kStreamWarps - 1) / kStreamWarps;
    int stages = std::max(1, (per_warp + kStreamStageUnits - 1) / kStreamStageUnits);
    if (stages_cap > 0) stages = std::min(stages, stages_cap);
    const auto bytes = [&](int st) { return StreamSmem(st, ub, a.M, nt, a.len_max, a.dt_max, split).total; };
    while (stages > 1 && bytes(stages) > h.smem_optin) --stages;
    a.stages = bytes(stages) <= h.smem_optin ? stages : 0;
    return a.stages;
  };
  int clusters = std::min(sms / split, a.ntiles);
  if (clusters_cap > 0) clusters = std::min(clusters, clusters_cap);
  if (!fit(clusters)) return false;
  // At least half of the SM's shared memory: one block per SM, never two sharing one while another idles.
  const auto request = [&] {
    return std::max(StreamSmem(a.stages, ub, a.M, nt, a.len_max, a.dt_max, split).total, h.smem_optin / 2 + 1024);
  };
  if (split > 1) {
    cudaLaunchAttribute attr{};
    const cudaLaunchConfig_t cfg = stream_config(a, request(), nullptr, &attr);
    int fits = 0;
    // An error here (a cluster shape this device cannot run) rules the split out, not the kernel.
    if (cudaOccupancyMaxActiveClusters(&fits, stream_kernel_for<NV>(a.M), &cfg) != cudaSuccess) {
      (void)cudaGetLastError();  // not sticky: clear it so the next call does not report it
      return false;
    }
    if (fits < 1) return false;
    if (fits < clusters && !fit(fits)) return false;
  }
  out->a = a;
  out->smem = request();
  out->cost = double(a.dt_max) * a.len_max * ub + 0.5 * a.M * a.len_max * kChunkK * 2;
  return true;
}

/** Pick the stream kernel's split (NIBBLE_FP4SM90_SPLIT, else the cheapest of 1, 2, 4, 8 by
 *  StreamPlan::cost, ties to the smaller), grid and ring; fills h.sa, h.stream_smem and h.split.
 *  Switches for measuring: NIBBLE_FP4SM90_GRID (at most this many clusters), NIBBLE_FP4SM90_STAGES
 *  (at most this many ring slots per warp). NOT_SUPPORTED when K % 8 != 0 or nothing fits. */
template <bool NV>
void plan_stream(Handle& h, int sms) {
  if (h.g.K % 8 != 0)
    throw sol::AbiFailure(NIBBLE_ERR_NOT_SUPPORTED, "the stream kernel needs K % 8 == 0 (16-byte rows of A)");
  for (const auto& kernel : {stream_kernel<1, NV>, stream_kernel<2, NV>})
    SOL_CUDA(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, h.smem_optin));
  const char* e_grid = std::getenv("NIBBLE_FP4SM90_GRID");
  const char* e_stages = std::getenv("NIBBLE_FP4SM90_STAGES");
  const char* e_split = std::getenv("NIBBLE_FP4SM90_SPLIT");
  const int clusters_cap = e_grid ? std::atoi(e_grid) : 0, stages_cap = e_stages ? std::atoi(e_stages) : 0;
  StreamPlan best, p;
  bool found = false;
  if (e_split) {
    const int v = std::atoi(e_split);
    if (v != 1 && v != 2 && v != 4 && v != 8)
      throw sol::AbiFailure(NIBBLE_ERR_INVALID_ARGUMENT, "NIBBLE_FP4SM90_SPLIT: 1, 2, 4 or 8");
    found = plan_stream_split<NV>(h, v, sms, clusters_cap, stages_cap, &best);
  } else {
    for (const int split : {1, 2, 4, 8})
      if (plan_stream_split<NV>(h, split, sms, clusters_cap, stages_cap, &p) && (!found || p.cost < best.cost)) {
        best = p;
        found = true;
      }
  }
  if (!found) throw sol::AbiFailure(NIBBLE_ERR_NOT_SUPPORTED, "the stream kernel does not fit this shape");
  h.sa = best.a;
  const char* e_pf = std::getenv("NIBBLE_FP4SM90_PREFETCH");
  h.sa.prefetch = e_pf && std::atoi(e_pf) == 0 ? 0 : 1;
  h.stream_smem = best.smem;
  h.split = best.a.split;
}

/** The stream kernel's weights: repack_stream on the host, uploaded (prepare). */
void upload_stream(Handle& h, const std::vector<uint8_t>& packed, const std::vector<uint8_t>& scale,
                   cudaStream_t stream) {
  const sol::GemmProblem& g = h.g;
  StreamRepacked r;
  const std::string why =
      repack_stream(g.nvfp4, g.N, g.K, packed.data(), scale.data(), g.global_scale, h.sa.split, &r);
  if (!why.empty()) throw sol::AbiFailure(NIBBLE_ERR_NOT_SUPPORTED, why);
  h.nch = r.lay.nch;
  h.units = h.mem.alloc<uint8_t>(r.units.size());
  h.colmul = h.mem.alloc<float>(r.colmul.size() * 4);
  SOL_CUDA(cudaMemcpyAsync(h.units, r.units.data(), r.units.size(), cudaMemcpyHostToDevice, stream));
  SOL_CUDA(cudaMemcpyAsync(h.colmul, r.colmul.data(), r.colmul.size() * 4, cudaMemcpyHostToDevice, stream));
  SOL_CUDA(cudaStreamSynchronize(stream));  // the host vectors go out of scope
  h.sa.units = h.units;
  h.sa.colmul = h.colmul;
  h.sa.trace = nullptr;
  if (const char* tp = std::getenv("NIBBLE_FP4SM90_TRACE"); tp && *tp) {
    h.trace_path = tp;
    const size_t n = size_t(h.sa.clusters) * h.sa.split * kStreamMarks;
    h.sa.trace = h.mem.alloc<unsigned long long>(n * 8);
    SOL_CUDA(cudaMemsetAsync(h.sa.trace, 0, n * 8, stream));
  }
}

/** NIBBLE_FP4SM90_TRACE: the last run's timeline of `blocks` blocks x `names.size()` %globaltimer
 *  marks at `trace`, per mark the first, mean and latest block (us after the first block's entry),
 *  into h.trace_path under the line `title` (teardown; best effort: a file that cannot be written is
 *  skipped, the solution's result does not depend on it). */
void write_trace(const Handle& h, const unsigned long long* trace, int blocks, const std::vector<const char*>& names,
                 const std::string& title) {
  const size_t nm = names.size();
  std::vector<unsigned long long> t(size_t(blocks) * nm);
  SOL_CUDA(cudaMemcpy(t.data(), trace, t.size() * 8, cudaMemcpyDeviceToHost));
  unsigned long long t0 = ~0ull;
  for (int b = 0; b < blocks; ++b) t0 = std::min(t0, t[size_t(b) * nm]);
  FILE* f = std::fopen(h.trace_path.c_str(), "w");
  if (!f) return;
  std::fprintf(f, "%s\n%-26s %10s %10s %10s   (us after the first block's entry)\n", title.c_str(), "mark", "first", "mean",
               "last");
  for (size_t k = 0; k < nm; ++k) {
    double sum = 0, lo = 1e30, hi = 0;
    for (int b = 0; b < blocks; ++b) {
      const double v = double(t[size_t(b) * nm + k] - t0) / 1000.0;
      sum += v, lo = std::min(lo, v), hi = std::max(hi, v);
    }
    std::fprintf(f, "%-26s %10.2f %10.2f %10.2f\n", names[k], lo, sum / blocks, hi);
  }
  std::fclose(f);
}

void write_stream_trace(const Handle& h) {
  char title[160];
  std::snprintf(title, sizeof title, "stream kernel trace: M %lld N %lld K %lld, %d clusters x split %d, %d ring slots per warp",
                (long long)h.g.M, (long long)h.g.N, (long long)h.g.K, h.sa.clusters, h.sa.split, h.sa.stages);
  write_trace(h, h.sa.trace, h.sa.clusters * h.sa.split,
              {"entry", "A landed", "warp 0 units done", "all units done", "cluster start barrier", "C written"}, title);
}

/** The mma kernel's grid blocks (launch_mma's grid). */
int mma_blocks(const Handle& h, int nt) { return int(h.n_pad / kSlabRows) * int((h.g.M + 8 * nt - 1) / (8 * nt)); }

void write_mma_trace(const Handle& h) {
  char title[160];
  std::snprintf(title, sizeof title, "mma kernel trace: M %lld N %lld K %lld, %d blocks of %d warps, %d chunks per lane batch",
                (long long)h.g.M, (long long)h.g.N, (long long)h.g.K, mma_blocks(h, h.g.M <= 8 ? 1 : 2), kMmaWarps,
                h.order == KOrder::kPerm && h.g.M <= 8 ? mma_batch<1>() : mma_batch<2>());
  write_trace(h, h.mma_trace, mma_blocks(h, h.g.M <= 8 ? 1 : 2),
              {"entry", "warp 0 first codes landed", "warp 0 K loop done", "all warps done", "C written"}, title);
}

/** Check the problem, pick the kernel by M, repack codes and scales into its layout (host, untimed).
 *  NOT_SUPPORTED: not an sm_90 device, a NaN block scale, or M beyond the grid. */
std::unique_ptr<Handle> prepare(const nibble_gemm_problem* problem, cudaStream_t stream) {
  auto h = std::make_unique<Handle>();
  h->g = sol::parse_gemm_problem(problem);
  const sol::GemmProblem& g = h->g;
  int dev = 0;
  cudaDeviceProp prop{};
  SOL_CUDA(cudaGetDevice(&dev));
  SOL_CUDA(cudaGetDeviceProperties(&prop, dev));
  if (prop.major != 9)
    throw sol::AbiFailure(NIBBLE_ERR_NOT_SUPPORTED, "built for sm_90a only (device is sm_" +
                                                        std::to_string(prop.major * 10 + prop.minor) + ")");
  h->smem_optin = int(prop.sharedMemPerBlockOptin);
  choose_kernel(*h, prop.multiProcessorCount);
  if (h->kind == Kind::kStream) {
    if (g.nvfp4)
      plan_stream<true>(*h, prop.multiProcessorCount);
    else
      plan_stream<false>(*h, prop.multiProcessorCount);
  }
  const int64_t m_tile = h->kind == Kind::kMma || h->kind == Kind::kMmaTma || h->kind == Kind::kStream ? 16
                         : h->kind == Kind::kWg64                         ? 64
                         : h->kind == Kind::kWg128                        ? 128
                                                                          : 256;
  if ((g.M + m_tile - 1) / m_tile > 65535) throw sol::AbiFailure(NIBBLE_ERR_NOT_SUPPORTED, "M too large for the grid");

  // Repack on the host: copy the codes and scales down, rearrange, upload.
  const size_t pbytes = size_t(g.N * (g.K / 2)), sbytes = size_t(g.N * g.scale_cols);
  std::vector<uint8_t> packed(pbytes), scale(sbytes);
  SOL_CUDA(cudaMemcpyAsync(packed.data(), g.packed, pbytes, cudaMemcpyDeviceToHost, stream));
  SOL_CUDA(cudaMemcpyAsync(scale.data(), g.scale, sbytes, cudaMemcpyDeviceToHost, stream));
  SOL_CUDA(cudaStreamSynchronize(stream));
  if (h->kind == Kind::kStream) {
    upload_stream(*h, packed, scale, stream);
    return h;
  }
  Repacked r;
  const std::string why = repack(g.nvfp4, g.N, g.K, packed.data(), scale.data(), g.global_scale, h->order, h->group, &r);
  if (!why.empty()) throw sol::AbiFailure(NIBBLE_ERR_NOT_SUPPORTED, why);
  h->n_pad = r.n_pad;
  h->nch = r.nch;
  h->wq = h->mem.alloc<uint4>(r.w.size() * 4);
  h->sc = h->mem.alloc<uint8_t>(r.s.size());
  h->colmul = h->mem.alloc<float>(r.colmul.size() * 4);
  SOL_CUDA(cudaMemcpyAsync(h->wq, r.w.data(), r.w.size() * 4, cudaMemcpyHostToDevice, stream));
  SOL_CUDA(cudaMemcpyAsync(h->sc, r.s.data(), r.s.size(), cudaMemcpyHostToDevice, stream));
  SOL_CUDA(cudaMemcpyAsync(h->colmul, r.colmul.data(), r.colmul.size() * 4, cudaMemcpyHostToDevice, stream));
  if (const char* tp = std::getenv("NIBBLE_FP4SM90_TRACE"); tp && *tp && h->kind == Kind::kMma) {
    h->trace_path = tp;
    const size_t n = size_t(mma_blocks(*h, g.M <= 8 ? 1 : 2)) * kMmaMarks;
    h->mma_trace = h->mem.alloc<unsigned long long>(n * 8);
    SOL_CUDA(cudaMemsetAsync(h->mma_trace, 0, n * 8, stream));
  }
  SOL_CUDA(cudaStreamSynchronize(stream));  // the host vectors go out of scope
  return h;
}

/** One GEMM: one kernel launch on `stream` (mma.sync for M <= 16, wgmma above; the stream kernel
 *  when NIBBLE_FP4SM90_KIND=stream). */
void run(Handle& h, const nibble_tensor* A, nibble_tensor* C, cudaStream_t stream) {
  const uint16_t* a = nullptr;
  float* c = nullptr;
  sol::check_gemm_io(h.g, A, C, &a, &c);
  if (h.g.nvfp4)
    launch<true>(h, a, c, stream);
  else
    launch<false>(h, a, c, stream);
}

/** After the stream is drained (export.h): write the trace if one was asked for, free the repacked
 *  weights, checked. */
void teardown(Handle& h, cudaStream_t) {
  if (h.sa.trace && h.kind == Kind::kStream) write_stream_trace(h);
  if (h.mma_trace && h.kind == Kind::kMma) write_mma_trace(h);
  h.mem.release();
}

}  // namespace
}  // namespace nibble::gemm_fp4_sm90

NIBBLE_GEMM_SOLUTION("gemm-fp4-sm90", nibble::gemm_fp4_sm90::prepare, nibble::gemm_fp4_sm90::run,
                     nibble::gemm_fp4_sm90::teardown);
