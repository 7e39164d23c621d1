// mma_kernel.cuh: M <= 16 and the K % 8 != 0 fallback: mma.sync with 16-byte loads from each lane (the default at small M)
// Part of libnibble_gemm_fp4_sm90.so, included once, in order, by gemm_fp4_sm90.cu (one translation
// unit: the kernels keep their names and code; the file comment there has the design).
#pragma once

#include "solutions/gemm_fp4/sm90/device_common.cuh"

namespace nibble::gemm_fp4_sm90 {
namespace {

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

}  // namespace
}  // namespace nibble::gemm_fp4_sm90
