// mma_dequant_gemm.cuh: the small-M (M <= 16) kernel of the tuned dequantising GEMMs, shared by
// gemm_fp4_sm90 (NVFP4, MXFP4), int4_gemm_mma and int4_gemm_sm90 (int4 with a zero point): C^T = W A^T
// on mma.sync m16n8k16, W decoded from its repacked units (frag_units.h) straight into A-fragment
// registers, and its launch. sm_80 and later (mma.sync bf16); a format may need more (FP4's decode
// multiplies with mul.rn.bf16x2, sm_90).
//
// One block of kMmaWarps warps per 16-row slab of W and per 8 NT rows of A (grid.y), the warps
// splitting K by chunks of 64 (c = warp, warp + 8, ...) and summing in shared memory at the end.
// Each lane issues the loads of a batch of mma_batch<NT>() chunks (its 16 code bytes, evict-first: W
// is read once; its record part; its activations) before decoding any, so a warp's chain is one
// memory latency per batch. With the kPerm k order a lane's activations of a chunk are two 16-byte
// loads (A 16-byte aligned, K % 8 == 0); kStd (any even K) loads them 4 bytes at a time. Measured
// versions (FP4): solutions/gemm_fp4/sm90/NOTES.md.
//
// The weight format is the template parameter F, a struct of static members:
//   kRecordBytes           bytes of the record of one slab and kChunksPerRecord chunks (the lane
//                          group's part is what load_record reads)
//   kChunksPerRecord       chunks sharing one record (FP4: 1; int4: 2, a group of 128 k)
//   kColmul                the epilogue multiplies row n of C^T by colmul[n]
//   kChunkScale            decode gives exact integers and each chunk's sums are scaled per row in
//                          fp32 (scale_chunk) instead of accumulated as they are
//   Record                 a lane's part of one record, in registers
//   load_record<PERM>(p, g, t, r)        lane (g, t)'s part of the record at p, read-only path
//   decode_step<PERM>(q, r, j, a)        step j's 4 A registers from its code word q
//   scale_chunk(r, d, acc)               (kChunkScale) acc += the rows' scales x d
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "solutions/common/abi_util.h"
#include "solutions/common/frag_units.h"
#include "solutions/common/mma_bf16.cuh"
#include "solutions/common/sm90_async.cuh"

namespace nibble::sol {
namespace {

constexpr int kMmaWarps = 8;  // warps per block, splitting K
/** Chunks a lane fetches before decoding: 6 at NT = 1 (14 registers a chunk: a 48-chunk K, 3072,
 *  is then one batch per warp, one memory latency instead of two; the trace before v6 had that
 *  second round trip in every warp's chain), 4 at NT = 2 (22 registers a chunk: 6 exceed 128). */
template <int NT>
__host__ __device__ constexpr int mma_batch() {
  return NT == 1 ? 6 : 4;
}

/** The mma kernel's timeline marks (thread 0 of each block, when a trace buffer is given): entry,
 *  warp 0's first batch of codes landed, warp 0's K loop done, every warp's done (after
 *  __syncthreads), C written. */
constexpr int kMmaMarks = 5;

__device__ __forceinline__ void mma_mark(unsigned long long* trace, int k) {
  if (trace && threadIdx.x == 0) trace[(blockIdx.y * gridDim.x + blockIdx.x) * kMmaMarks + k] = globaltimer_ns();
}

/**
 * One block per 16-row slab of W (blockIdx.x; units in slab-major order, one slab per group) and per
 * 8 NT rows of A (blockIdx.y). NT: n8 tiles (A rows / 8). PERM: the kPerm order and 16-byte
 * activation loads (K % 8 == 0, A 16-byte aligned); else kStd and 4-byte loads. trace: kMmaMarks
 * %globaltimer marks per block, or null.
 */
template <int NT, bool PERM, class F>
__global__ void __launch_bounds__(kMmaWarps * 32, 2)
    mma_dequant_kernel(const uint4* __restrict__ wq, const uint8_t* __restrict__ sc, const float* __restrict__ colmul,
               const uint16_t* __restrict__ A, float* __restrict__ C, int M, int N, int K, int nch,
               unsigned long long* trace) {
  constexpr int kSb = F::kRecordBytes;
  mma_mark(trace, 0);
  __shared__ float red[kMmaWarps][NT * 4][32];
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, g = lane >> 2, t = lane & 3;
  const int slab = blockIdx.x, m0 = blockIdx.y * 8 * NT;
  const uint4* wp = wq + size_t(slab) * nch * 32 + lane;
  const uint8_t* sp = sc + size_t(slab) * ((nch + F::kChunksPerRecord - 1) / F::kChunksPerRecord) * kSb;
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
  if constexpr (F::kColmul && NT == 1)
    if (e_out >= 0 && n_out < N) cm = __ldg(colmul + n_out);
  for (int c0 = warp; c0 < nch; c0 += kMmaWarps * kMmaBatch) {
    // Every load of the batch (codes, scales, activations) is issued before any use: the chain
    // per warp is one memory latency per batch, not one per chunk (v1 waited on the activations
    // of each chunk: 8 us at m16-n3072-k3072).
    uint4 q[kMmaBatch];
    typename F::Record s[kMmaBatch];
    uint32_t b[kMmaBatch][NT][8];  // step j's B fragment: words 2j, 2j + 1
#pragma unroll
    for (int p = 0; p < kMmaBatch; ++p) {
      const int c = c0 + p * kMmaWarps;
      if (c < nch) {
        q[p] = ld_stream(wp + size_t(c) * 32);
        F::template load_record<PERM>(sp + size_t(c / F::kChunksPerRecord) * kSb, g, t, s[p]);
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
      // kChunkScale: the chunk's exact sums of (q - z) x A go to d, then scaled per row in fp32 into
      // acc (the weights never rounded); else straight into acc.
      float d[NT][4];
      float(&sums)[NT][4] = F::kChunkScale ? d : acc;
      if constexpr (F::kChunkScale) {
#pragma unroll
        for (int nt = 0; nt < NT; ++nt)
#pragma unroll
          for (int i = 0; i < 4; ++i) d[nt][i] = 0.0f;
      }
#pragma unroll
      for (int j = 0; j < 4; ++j) {
        uint32_t a[4];
        F::template decode_step<PERM>(qw[j], s[p], j, a);
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) mma_bf16_16816_ordered(sums[nt], a, b[p][nt][2 * j], b[p][nt][2 * j + 1]);
      }
      if constexpr (F::kChunkScale) {
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) F::scale_chunk(s[p], d[nt], acc[nt]);
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
    if constexpr (F::kColmul) {
      if (n_out < N && m < M) C[size_t(m) * N + n_out] = sum * (NT == 1 ? cm : colmul[n_out]);
    } else {
      if (n_out < N && m < M) C[size_t(m) * N + n_out] = sum;
    }
  }
  if (trace) {
    __syncthreads();
    mma_mark(trace, 4);
  }
}


/**
 * C (M, N) fp32 = A (M <= 16, K) bf16 x W^T of the repacked weights (slabs 16-row slabs, nch chunks;
 * records and colmul as F says), one launch on `stream`: NT = 1 for M <= 8, else 2; perm: the kPerm
 * layout (then A must be 16-byte aligned). kStdOrder: also instantiate the kStd kernel (else perm
 * must be true). Throws AbiFailure (NOT_SUPPORTED: A misaligned; CUDA: a launch error).
 */
template <class F, bool kStdOrder = true>
void launch_mma_dequant(bool perm, int64_t slabs, const uint4* wq, const uint8_t* sc, const float* colmul,
                        const uint16_t* A, float* C, int64_t M, int64_t N, int64_t K, int64_t nch,
                        unsigned long long* trace, cudaStream_t stream) {
  // cudaLaunchKernelEx rather than <<< >>>: plain C++, so that the CPU emulation test
  // (tests/emulation/) runs this header as it is.
  const auto args = [&](auto kernel, int nt) {
    cudaLaunchConfig_t cfg{};
    cfg.gridDim = dim3(unsigned(slabs), unsigned((M + 8 * nt - 1) / (8 * nt)));
    cfg.blockDim = dim3(kMmaWarps * 32);
    cfg.stream = stream;
    SOL_CUDA(cudaLaunchKernelEx(&cfg, kernel, wq, sc, colmul, A, C, int(M), int(N), int(K), int(nch), trace));
  };
  if (perm) {
    if (reinterpret_cast<uintptr_t>(A) % 16 != 0)
      throw AbiFailure(NIBBLE_ERR_NOT_SUPPORTED, "A is not 16-byte aligned (the repacked order needs it)");
    if (M <= 8)
      args(mma_dequant_kernel<1, true, F>, 1);
    else
      args(mma_dequant_kernel<2, true, F>, 2);
  } else if constexpr (kStdOrder) {
    args(mma_dequant_kernel<2, false, F>, 2);
  } else {
    throw AbiFailure(NIBBLE_ERR_INTERNAL, "this solution is built with the kPerm order only");
  }
  SOL_CHECK_LAUNCH();
}

}  // namespace
}  // namespace nibble::sol
