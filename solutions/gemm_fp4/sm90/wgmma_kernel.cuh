// wgmma_kernel.cuh: M > 16: wgmma, the weights decoded into A-fragment registers, the activations through a TMA ring
// Part of libnibble_gemm_fp4_sm90.so, included once, in order, by gemm_fp4_sm90.cu (one translation
// unit: the kernels keep their names and code; the file comment there has the design).
#pragma once

#include <cuda.h>

#include "solutions/gemm_fp4/sm90/device_common.cuh"

namespace nibble::gemm_fp4_sm90 {
namespace {

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

}  // namespace
}  // namespace nibble::gemm_fp4_sm90
