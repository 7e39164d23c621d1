// wgmma_dequant_gemm.cuh: the M > 16 path of the tuned dequantising GEMMs, shared by gemm_fp4_sm90
// (NVFP4, MXFP4) and int4_gemm_sm90 (int4 with a zero point): C^T = W A^T on wgmma, W decoded from
// its repacked units (frag_units.h) straight into A-fragment registers, A through a TMA ring; and
// its host side (tile and split-K choice, the tensor map of A, the launch). sm_90a only.
//
// The kernel: one producer warp (TMA of the 64-k activation tile, 128B swizzle, plus bulk copies of
// the block's codes and scale records, into a ring of stages on full/empty mbarriers) and NCONS
// consumer warpgroups, each 64 W rows x BN activation rows: per chunk, decode 16 registers per
// thread from the stage, then 4 x wgmma m64nBNk16 with A from registers and B from the stage; the
// chunk's group runs while the next chunk decodes (wait_group 1). 128 x 256 tiles (NCONS = 2,
// setmaxnreg 40 / 232) on persistent blocks for M > 256; 64 x 64 tiles up to M = 64 and 64 x 128 up
// to 256 (128 x 128, NCONS = 2, on request: WgmmaPlan::rows128), K split over a cluster of blocks
// summed through distributed shared memory when the tiles alone do not fill the SMs. Measurements of every choice: solutions/gemm_fp4/sm90/NOTES.md.
//
// The weight format is the template parameter F, a struct of static members:
//   kRecordBytes        bytes of the scale record of one unit (a multiple of 8: lane group g reads
//                       kRecordBytes / 8 bytes at offset g kRecordBytes / 8; the record of a block's
//                       G slabs is one bulk copy, so G kRecordBytes is a multiple of 16)
//   kColmul             whether the epilogue multiplies row n of C^T by colmul[n]
//   record_ldg(p, r)    lane group g's part of a record from global memory (read-only path) into r;
//                       needed only by the per-lane weight path (launch_wgmma's kPerLaneLoads)
//   record_shared(p, r) the same from shared memory
//   decode(q, r, fr)    a lane's 16 code bytes q of one chunk and its record part r -> the 4 k16
//                       steps' A fragments fr[j][0..3] (bf16x2), in the kStd k order (frag_k)
#pragma once

#include <cooperative_groups.h>
#include <cuda.h>  // CUtensorMap (the encode function comes from the runtime's driver entry point)
#include <cuda_runtime.h>

#include <cstdint>
#include <cstdlib>
#include <optional>
#include <string>

#include "solutions/common/abi_util.h"
#include "solutions/common/frag_units.h"
#include "solutions/common/sm90_async.cuh"
#include "solutions/common/sm90_wgmma.cuh"

namespace nibble::sol {
namespace {

// ---- the kernel ---------------------------------------------------------------------------------

constexpr int kPf = 4;  // weight chunks a consumer thread has in flight (even: fragment buffers alternate)

/** Warps 0 .. 4 NCONS - 1: consumer warpgroups (each 64 W rows); warp 4 NCONS: the TMA producer.
 *  NCONS = 2 (128 x 256 tiles): the producer is a whole warpgroup so that setmaxnreg can move
 *  registers to the consumers (40 / 232: 128 fp32 accumulators + two chunks of fragments); ptxas
 *  budgets a 288-thread block as if it had 384 threads (168 registers) and spills. NCONS = 1: one
 *  producer warp, two blocks per SM (split-K needs the company).
 *  WTMA: the block's codes and scales of each chunk travel with its activation tile (bulk copies on
 *  the stage's mbarrier) instead of 16-byte loads from each consumer lane. */
template <int BN, int NCONS, class F, bool WTMA>
struct WgCfg {
  static constexpr int kProducerWarps = NCONS >= 2 ? 4 : 1;
  static constexpr int kThreads = 128 * NCONS + 32 * kProducerWarps;
  static constexpr int kMinBlocks = NCONS >= 2 ? 1 : 2;
  static constexpr bool kSetRegs = NCONS >= 2;
  static constexpr int kGroup = 4 * NCONS;                         // slabs per block: the layout's G
  static constexpr int kABytes = BN * 128;                         // BN rows x 64 k x 2 bytes
  static constexpr int kWBytes = WTMA ? kGroup * 512 : 0;          // codes of the block's chunk
  static constexpr int kSBytes = WTMA ? kGroup * F::kRecordBytes : 0;
  static_assert(F::kRecordBytes % 8 == 0 && (kGroup * F::kRecordBytes) % 16 == 0,
                "a record splits into 8 lane-group parts and a block's records are one bulk copy (16-byte multiple)");
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
template <int BN, int NCONS, int SPLIT, class F, bool WTMA>
__global__ void __launch_bounds__(WgCfg<BN, NCONS, F, WTMA>::kThreads, WgCfg<BN, NCONS, F, WTMA>::kMinBlocks)
    wgmma_kernel(const __grid_constant__ CUtensorMap tmA, const uint4* __restrict__ wq, const uint8_t* __restrict__ sc,
                 const float* __restrict__ colmul, float* __restrict__ C, int M, int N, int nch, int nblk) {
  using Cfg = WgCfg<BN, NCONS, F, WTMA>;
  constexpr int kSb = F::kRecordBytes, kG = Cfg::kGroup;
  NIBBLE_DYNAMIC_SMEM(smem_raw, 16);
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
    if constexpr (Cfg::kSetRegs) setmaxnreg_dec<40>();
    if (warp == 4 * NCONS && lane == 0) {
      prefetch_tensormap(&tmA);
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
    if constexpr (Cfg::kSetRegs) setmaxnreg_inc<232>();
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
            F::record_ldg(sp + size_t(cb + p) * kG * kSb, sr[p]);
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
              F::record_shared(ss, sw);
            } else {
              q = qr[p];
              sw = sr[p];
              if (c + kPf < ce) {
                qr[p] = ld_stream(wp + size_t(c + kPf) * kG * 32);
                F::record_ldg(sp + size_t(c + kPf) * kG * kSb, sr[p]);
              }
            }
            F::decode(q, sw, fr[p & 1]);
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
        const float f_lo = F::kColmul ? (n_lo < N ? colmul[n_lo] : 0.0f) : 1.0f, f_hi = F::kColmul ? (n_hi < N ? colmul[n_hi] : 0.0f) : 1.0f;
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
        named_barrier_sync<1, 128 * NCONS>();
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
      const float f_lo = F::kColmul ? (n_lo < N ? colmul[n_lo] : 0.0f) : 1.0f, f_hi = F::kColmul ? (n_hi < N ? colmul[n_hi] : 0.0f) : 1.0f;
      // The partials of kB elements (32 floats) are loaded before their stores: a store to C (a
      // generic pointer the compiler cannot tell from the partials') would otherwise order the next
      // element's DSMEM loads after it, kPer round trips in a row (~2.5 us at M = 128, issue 25).
      // The two-warpgroup kernels (168 registers, none to spare: 16 elements at once spilled ~100 B)
      // keep one element at a time. The sums keep the rank order: bitwise as before.
      constexpr int kPer = (BN / 2 + SPLIT - 1) / SPLIT, kB = NCONS > 1 ? 1 : (32 / SPLIT < kPer ? 32 / SPLIT : kPer);
      const int i0 = rank * kPer;
#pragma unroll 1
      for (int b0 = 0; b0 < kPer; b0 += kB) {
        float part[kB][SPLIT];
#pragma unroll
        for (int ii = 0; ii < kB; ++ii)
#pragma unroll
          for (int r = 0; r < SPLIT; ++r) {
            const int i = i0 + b0 + ii;
            part[ii][r] = b0 + ii < kPer && i < BN / 2 ? parts[r][i * (128 * NCONS) + threadIdx.x] : 0.0f;
          }
#pragma unroll
        for (int ii = 0; ii < kB; ++ii) {
          const int i = i0 + b0 + ii;
          float sum = 0.0f;
#pragma unroll
          for (int r = 0; r < SPLIT; ++r) sum += part[ii][r];
          const int q = i / 4, e = i % 4;
          const int m = m0 + 8 * q + 2 * t + (e & 1);
          const int n = (e >> 1) ? n_hi : n_lo;
          if (b0 + ii < kPer && i < BN / 2 && m < M && n < N) C[size_t(m) * N + n] = sum * ((e >> 1) ? f_hi : f_lo);
        }
      }
    }
    cluster.sync();  // no block leaves while another still reads its shared memory
  }
}


// ---- host side ----------------------------------------------------------------------------------

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

/** The tile, split-K and weight path of one problem (prepare's choice; see plan_wgmma). */
struct WgmmaPlan {
  int bn = 64;        // activation rows per tile: 64, 128 or 256 (two consumer warpgroups)
  int split = 1;      // blocks (a cluster) splitting K: up to wgmma_max_split; the planner takes 1, 2, 4, 8
  bool wtma = true;   // codes and records by bulk copy with the activation tile (else 16-byte loads per lane)
  int grid_cap = 0;   // split 1: at most this many (persistent) blocks; 0: one per tile
  bool rows128 = false;  // bn 128: 128 W rows per tile, two consumer warpgroups (bn 256 always has them)
  int ncons() const { return bn == 256 || rows128 ? 2 : 1; }
  int rows() const { return 64 * ncons(); }  // W rows per tile
  int group() const { return 4 * ncons(); }  // slabs per tile: the repacked layout's G
};

/** The tile for M: one row of tiles up to M = 128, so that each weight is decoded once (H100,
 *  2026-12-06, reports/h100/session12-24becb6/m128-tiles: 64 x 128 tiles beat 64 x 64 on 23 of the
 *  25 M = 128 configs, e.g. 14.5 against 17.3 us at nvfp4 m128-n3072-k3072; the 2 others, N = 4096,
 *  were split into 256 blocks, which wgmma_split_wave no longer allows at this width: 20.3 against
 *  21.3 us at nvfp4 m128-n4096-k4096 in one call, 47.7 against 55.4 at int4 m128-n4096-k14336). */
inline int wgmma_bn_for(int64_t M) { return M <= 64 ? 64 : (M <= 256 ? 128 : 256); }

/** Blocks of plan p an SM holds at once: 1 with two consumer warpgroups (registers: 384 threads at up
 *  to 232 registers for the consumers), 2 with one (shared memory). */
inline int wgmma_blocks_per_sm(const WgmmaPlan& p) { return p.ncons() == 2 ? 1 : 2; }

/** The largest K split (cluster size) of plan p's kernels: 8 with one consumer warpgroup, 4 at
 *  128 x 128 and 2 at 128 x 256 with two. Splits 1, 2, 4 and 8 are built for every weight path; 3, 5
 *  and 6 (kWgmmaOddSplits: e.g. 144 or 240 blocks for the 48 tiles of an M = 128, N = 3072 problem,
 *  between the planner's 96 and 192) for the bulk-copy path only, to be measured (override_wgmma_plan). */
inline int wgmma_max_split(const WgmmaPlan& p) { return p.ncons() == 1 ? 8 : (p.bn == 128 ? 4 : 2); }
inline constexpr int kWgmmaOddSplits[] = {3, 5, 6};

/** Whether the kernels are built for plan p (its split up to wgmma_max_split; 3, 5, 6 with p.wtma
 *  only; per-lane weight loads, !p.wtma, only where the solution builds them: kPerLaneLoads of
 *  launch_wgmma). */
inline bool wgmma_split_built(const WgmmaPlan& p, bool per_lane_built = true) {
  if (p.split < 1 || p.split > wgmma_max_split(p) || (!p.wtma && !per_lane_built)) return false;
  if (p.split == 1 || p.split == 2 || p.split == 4 || p.split == 8) return true;
  for (const int s : kWgmmaOddSplits)
    if (p.split == s) return p.wtma;
  return false;
}

/** Blocks a split-K plan may fill: two per SM at 64 x 64 tiles, one with two consumer warpgroups
 *  (128 x 256, 128 x 128), and 3/2 per SM at
 *  64 x 128, where 256 split blocks on 132 SMs (two on nearly every SM) measured slower than half as
 *  many, while 192 (two on 60 SMs) measured faster than 96 (H100, 2026-12-06, M = 128, nvfp4:
 *  n4096-k4096 26.4 us at split 4 = 256 blocks, 20.3 at split 2 = 128; n8192-k3072 23.7 at split 2 =
 *  256, 21.6 at split 1; n3072-k3072 14.5 at split 4 = 192, 17.3 at split 2 = 96;
 *  reports/h100/session12-24becb6/). Why 256 loses is not measured yet (cluster placement is a
 *  candidate: cudaOccupancyMaxActiveClusters). */
inline int64_t wgmma_split_wave(const WgmmaPlan& p, int sms) {
  if (p.ncons() == 2) return sms;  // one block per SM (wgmma_blocks_per_sm)
  return p.bn == 64 ? 2 * int64_t(sms) : 3 * int64_t(sms) / 2;
}

/** Tiles of plan p on an (M, N) problem: W's rows padded to kRowAlign, as the launch counts them. */
inline int64_t wgmma_tiles(const WgmmaPlan& p, int64_t M, int64_t N) {
  const int64_t n_pad = (N + kRowAlign - 1) / kRowAlign * kRowAlign;
  return (n_pad / p.rows()) * ((M + p.bn - 1) / p.bn);
}

/**
 * The plan for tile width bn on an (M, N) problem of nch chunks over `sms` SMs: split K while the
 * split blocks still fit wgmma_split_wave (two per SM at 64 x 64 tiles: one consumer warpgroup's chain of
 * dependent steps cannot keep an SM's tensor cores busy: v1 took 42 us at m128-n4096-k4096 with 128
 * blocks of one warpgroup), keeping >= 4 chunks per block; the weights by bulk copy with the
 * activation tile (276.6 us at m4096-n8192-k3072 against 308.4 with per-lane loads, 26.6 against
 * 36.7 us at m128-n4096-k4096); persistent blocks (one wave) when there are more tiles. Until
 * 2026-12-05 the split counted two blocks per SM at 128 x 256 too, so m4096-n1024-k3072's 128 tiles
 * split into 256 blocks, two waves of one block per SM (int4_gemm_sm90's 0.63x cuBLAS shape).
 */
inline WgmmaPlan plan_wgmma(int bn, int64_t M, int64_t N, int64_t nch, int sms, bool rows128 = false) {
  WgmmaPlan p;
  p.bn = bn;
  p.rows128 = rows128 && bn == 128;
  const int64_t blocks = wgmma_tiles(p, M, N);
  const int64_t wave = int64_t(sms) * wgmma_blocks_per_sm(p);
  const int max_split = wgmma_max_split(p);
  while (p.split < max_split && blocks * 2 * p.split <= wgmma_split_wave(p, sms) && nch / (2 * p.split) >= 4)
    p.split *= 2;
  p.wtma = true;
  p.grid_cap = int(wave);
  return p;
}

/**
 * For measuring alternatives: <prefix>SPLIT (1 to wgmma_max_split: 8 with one consumer warpgroup, 4 at
 * 128 x 128, 2 at 128 x 256; 3, 5 and 6 with bulk-copied weights only), <prefix>WTMA (0: weights by
 * 16-byte loads per lane, 1: by bulk copy) and <prefix>GRID (split 1: at most this many persistent
 * blocks; 0: one block per tile) from the environment replace the plan's choices.
 * per_lane_built: the solution builds the per-lane weight path (launch_wgmma's kPerLaneLoads).
 * Throws AbiFailure INVALID_ARGUMENT, naming what is built, for a plan the kernels are not built for
 * (wgmma_split_built) or a value that is not a whole number.
 */
inline void override_wgmma_plan(WgmmaPlan& p, const std::string& prefix, bool per_lane_built = true) {
  const auto whole = [&](const char* name, long lo, long hi, const std::string& meaning) -> std::optional<int> {
    const auto v = env_whole((prefix + name).c_str(), lo, hi, meaning);
    return v ? std::optional<int>(int(*v)) : std::nullopt;
  };
  if (const auto v = whole("WTMA", 0, 1, "1 (weights by bulk copy) or 0 (by 16-byte loads per lane)")) p.wtma = *v != 0;
  if (!p.wtma && !per_lane_built)
    throw AbiFailure(NIBBLE_ERR_INVALID_ARGUMENT, prefix + "WTMA=0: the per-lane weight path is not built here");
  // 0 and 7 pass the syntax so that the refusal below lists the splits that are built.
  if (const auto v = whole("SPLIT", 0, 1 << 20, "a split from 1 to 8, one the kernels are built for")) p.split = *v;
  if (!wgmma_split_built(p, per_lane_built)) {
    // The splits this tile width has on a weight path, by the same rule.
    const auto built = [&](bool wtma) {
      std::string s;
      for (int k = 1; k <= 8; ++k) {
        WgmmaPlan q = p;
        q.split = k, q.wtma = wtma;
        if (wgmma_split_built(q, per_lane_built)) s += (s.empty() ? "" : ", ") + std::to_string(k);
      }
      return s;
    };
    throw AbiFailure(NIBBLE_ERR_INVALID_ARGUMENT,
                     prefix + "SPLIT=" + std::to_string(p.split) + " is not built for " + std::to_string(p.rows()) + " x " +
                         std::to_string(p.bn) + " tiles with " + (p.wtma ? "bulk-copied" : "per-lane loaded") +
                         " weights: " + built(p.wtma) +
                         (p.wtma || built(true) == built(false) ? "" : " (with " + prefix + "WTMA=1: " + built(true) + ")"));
  }
  if (const auto v = whole("GRID", 0, 1 << 20, "at most this many persistent blocks, 0 for one per tile")) p.grid_cap = *v;
}

/** The current device's properties; NOT_SUPPORTED unless it is sm_90 (the kernels are sm_90a). */
inline cudaDeviceProp require_sm90() {
  int dev = 0;
  cudaDeviceProp prop{};
  SOL_CUDA(cudaGetDevice(&dev));
  SOL_CUDA(cudaGetDeviceProperties(&prop, dev));
  if (prop.major != 9)
    throw AbiFailure(NIBBLE_ERR_NOT_SUPPORTED,
                     "built for sm_90a only (device is sm_" + std::to_string(prop.major * 10 + prop.minor) + ")");
  return prop;
}

/** The problem and repacked weights the kernel reads (device pointers; n_pad a multiple of kRowAlign). */
struct WgmmaWeights {
  int64_t M = 0, N = 0, K = 0, n_pad = 0, nch = 0;
  const uint4* wq = nullptr;
  const uint8_t* sc = nullptr;
  const float* colmul = nullptr;  // n_pad factors, or null when the format has none
};

using EncodeTiledFn = CUresult (*)(CUtensorMap*, CUtensorMapDataType, cuuint32_t, void*, const cuuint64_t*,
                                   const cuuint64_t*, const cuuint32_t*, const cuuint32_t*, CUtensorMapInterleave,
                                   CUtensorMapSwizzle, CUtensorMapL2promotion, CUtensorMapFloatOOBfill);

inline EncodeTiledFn encode_tiled() {
  static EncodeTiledFn fn = [] {
    void* p = nullptr;
    cudaDriverEntryPointQueryResult q{};
    SOL_CUDA(cudaGetDriverEntryPointByVersion("cuTensorMapEncodeTiled", &p, 12000, cudaEnableDefault, &q));
    if (q != cudaDriverEntryPointSuccess || !p)
      throw AbiFailure(NIBBLE_ERR_CUDA, "cuTensorMapEncodeTiled is not available from the driver");
    return reinterpret_cast<EncodeTiledFn>(p);
  }();
  return fn;
}

/** The tensor map of A (M, K) bf16 row-major as 64 k x rows boxes, 128B swizzle, zero fill past M
 *  and K; re-encoded only when run gets another A. */
class ATensorMap {
 public:
  const CUtensorMap& get(const uint16_t* A, int64_t M, int64_t K, int rows) {
    if (ptr_ == A) return map_;
    if (reinterpret_cast<uintptr_t>(A) % 16 != 0)
      throw AbiFailure(NIBBLE_ERR_NOT_SUPPORTED, "A is not 16-byte aligned (the TMA path needs it)");
    const cuuint64_t dims[2] = {cuuint64_t(K), cuuint64_t(M)};
    const cuuint64_t strides[1] = {cuuint64_t(K) * 2};
    const cuuint32_t box[2] = {64, cuuint32_t(rows)};
    const cuuint32_t estr[2] = {1, 1};
    const CUresult r = encode_tiled()(&map_, CU_TENSOR_MAP_DATA_TYPE_BFLOAT16, 2, const_cast<uint16_t*>(A), dims,
                                      strides, box, estr, CU_TENSOR_MAP_INTERLEAVE_NONE, CU_TENSOR_MAP_SWIZZLE_128B,
                                      CU_TENSOR_MAP_L2_PROMOTION_L2_256B, CU_TENSOR_MAP_FLOAT_OOB_FILL_NONE);
    if (r != CUDA_SUCCESS)
      throw AbiFailure(NIBBLE_ERR_CUDA, "cuTensorMapEncodeTiled failed (CUresult " + std::to_string(int(r)) + ")");
    ptr_ = A;
    return map_;
  }

 private:
  const void* ptr_ = nullptr;
  CUtensorMap map_{};
};

template <int BN, int NCONS, int SPLIT, class F, bool WTMA>
void launch_wgmma_split(const WgmmaPlan& p, const WgmmaWeights& w, const CUtensorMap& map, float* C,
                        cudaStream_t stream) {
  using Cfg = WgCfg<BN, NCONS, F, WTMA>;
  const auto kernel = wgmma_kernel<BN, NCONS, SPLIT, F, WTMA>;
  static bool attr_set = false;  // per instantiation; prepare/run are called from one thread at a time
  if (!attr_set) {
    SOL_CUDA(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Cfg::kSmem));
    attr_set = true;
  }
  const int nblk = int(w.n_pad / (64 * NCONS)), mblk = int((w.M + BN - 1) / BN);
  // SPLIT == 1 with more tiles than fit at once: persistent blocks (p.grid_cap per the plan).
  const int64_t tiles = int64_t(nblk) * mblk;
  const dim3 grid = (SPLIT == 1 && p.grid_cap > 0 && tiles > p.grid_cap) ? dim3(unsigned(p.grid_cap), 1, 1)
                                                                         : dim3(unsigned(nblk), unsigned(mblk), SPLIT);
  launch_cluster(kernel, grid, dim3(Cfg::kThreads), Cfg::kSmem, SPLIT, stream, map, w.wq, w.sc, w.colmul, C,
                 int(w.M), int(w.N), int(w.nch), nblk);
}

template <int BN, int NCONS, int SPLIT, class F, bool kPerLaneLoads>
void launch_wgmma_w(const WgmmaPlan& p, const WgmmaWeights& w, const CUtensorMap& map, float* C, cudaStream_t stream) {
  if (p.wtma)
    launch_wgmma_split<BN, NCONS, SPLIT, F, true>(p, w, map, C, stream);
  else if constexpr (kPerLaneLoads)
    launch_wgmma_split<BN, NCONS, SPLIT, F, false>(p, w, map, C, stream);
  else
    throw AbiFailure(NIBBLE_ERR_INTERNAL, "this solution is built with bulk-copied weights only (wtma)");
}

/** Split S (one of kWgmmaOddSplits), built for the bulk-copy path only where NCONS / BN allow it. */
template <int BN, int NCONS, int S, class F>
void launch_wgmma_odd(const WgmmaPlan& p, const WgmmaWeights& w, const CUtensorMap& map, float* C, cudaStream_t stream) {
  if constexpr (NCONS == 1 || (BN == 128 && S <= 4)) {
    if (p.wtma) return launch_wgmma_split<BN, NCONS, S, F, true>(p, w, map, C, stream);
  }
  throw AbiFailure(NIBBLE_ERR_INTERNAL, "split " + std::to_string(S) + " is not built for this plan (wgmma_split_built)");
}

template <int BN, int NCONS, class F, bool kPerLaneLoads>
void launch_wgmma_bn(const WgmmaPlan& p, const WgmmaWeights& w, ATensorMap& amap, const uint16_t* A, float* C,
                     cudaStream_t stream) {
  const CUtensorMap& map = amap.get(A, w.M, w.K, BN);
  switch (p.split) {
    case 3: launch_wgmma_odd<BN, NCONS, 3, F>(p, w, map, C, stream); break;
    case 5: launch_wgmma_odd<BN, NCONS, 5, F>(p, w, map, C, stream); break;
    case 6: launch_wgmma_odd<BN, NCONS, 6, F>(p, w, map, C, stream); break;
    case 1: launch_wgmma_w<BN, NCONS, 1, F, kPerLaneLoads>(p, w, map, C, stream); break;
    case 2: launch_wgmma_w<BN, NCONS, 2, F, kPerLaneLoads>(p, w, map, C, stream); break;
    case 4:
      if constexpr (BN <= 128) {
        launch_wgmma_w<BN, NCONS, 4, F, kPerLaneLoads>(p, w, map, C, stream);
        break;
      }
      [[fallthrough]];
    case 8:
      if constexpr (NCONS == 1) {
        launch_wgmma_w<BN, NCONS, 8, F, kPerLaneLoads>(p, w, map, C, stream);
        break;
      }
      [[fallthrough]];
    default: throw AbiFailure(NIBBLE_ERR_INTERNAL, "bad split " + std::to_string(p.split));
  }
}

/**
 * One GEMM on `stream`: C (M, N) fp32 = A (M, K) bf16 (16-byte aligned, row-major) times W^T of the
 * repacked weights `w` in format F (groups of p.group() slabs), by the plan p. kPerLaneLoads: also
 * instantiate the per-lane weight path (p.wtma false); without it such a plan is refused.
 * Throws AbiFailure (NOT_SUPPORTED: A misaligned; CUDA: a launch error).
 */
template <class F, bool kPerLaneLoads = true>
void launch_wgmma(const WgmmaPlan& p, const WgmmaWeights& w, ATensorMap& amap, const uint16_t* A, float* C,
                  cudaStream_t stream) {
  switch (p.bn) {
    case 64: launch_wgmma_bn<64, 1, F, kPerLaneLoads>(p, w, amap, A, C, stream); break;
    case 128:
      if (p.rows128)
        launch_wgmma_bn<128, 2, F, kPerLaneLoads>(p, w, amap, A, C, stream);
      else
        launch_wgmma_bn<128, 1, F, kPerLaneLoads>(p, w, amap, A, C, stream);
      break;
    case 256: launch_wgmma_bn<256, 2, F, kPerLaneLoads>(p, w, amap, A, C, stream); break;
    default: throw AbiFailure(NIBBLE_ERR_INTERNAL, "bad tile width " + std::to_string(p.bn));
  }
}

}  // namespace
}  // namespace nibble::sol
