// int4_mma_kernel.cuh: the small-M (M <= 16) tensor-core kernel of gemm-w4a16-int4, for int4_gemm_mma
// (its own solution) and int4_gemm_sm90 (its M <= 16 path): the weights' upload (prepare) and the
// launch (run). The layout: int4_mma_layout.h.
//
// C^T = W A^T with mma.sync m16n8k16 (bf16 in, fp32 accumulate): W's 16-row slab is the MMA's M side,
// A's M <= 16 rows one or two n8 tiles of its N side. One block of 8 warps per slab; warp w takes the
// chunks c = w, w + 8, ... of 64 k (split-K inside the block), decodes each chunk's codes in registers
// to the exact integers q - z (int4_frag.h: a shift and a LOP3, then HSUB2, per register), sums the
// chunk's exact products in fp32 on the tensor cores and scales the chunk's sum per row in fp32 (W is
// never rounded); A's fragments come from L2 (A is at most 16 x K bf16). The 8 warps' sums meet in
// shared memory and one pass writes C. Numerics: the oracle's fp32_accumulate row (fp32 sums of exact
// products).
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "solutions/common/abi_util.h"
#include "solutions/common/bf16x2.h"
#include "solutions/common/gemm_abi_util.h"
#include "solutions/common/mma_bf16.cuh"
#include "solutions/int4_gemm/mma/int4_mma_layout.h"

namespace nibble::int4_mma {
namespace {

constexpr int kWarps = 8;
constexpr int kBatch = 4;  // chunks whose codes a warp loads before it decodes them

/** One slab (16 rows of W, blockIdx.x) x all M rows of A; NT = n8 tiles of A's rows (1 or 2). */
template <int NT>
__global__ void __launch_bounds__(kWarps * 32) slab_kernel(const uint4* __restrict__ words, const RowRecord* __restrict__ records,
                                                           const uint16_t* __restrict__ A, float* __restrict__ C, int M,
                                                           int N, int K, int chunks, int groups) {
  __shared__ float red[kWarps][NT * 8][kSlabRows];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
  const int slab = blockIdx.x;
  float acc[NT][4] = {};
  const uint4* w_slab = words + size_t(slab) * chunks * 32;
  const RowRecord* r_slab = records + size_t(slab) * groups * kSlabRows;
  // This lane's A rows (one per n8 tile), clamped to a valid row when past M (their columns of C are
  // never written, and a clamped row keeps every load in bounds).
  const uint32_t* arow[NT];
  bool live[NT];
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) {
    const int m = 8 * nt + g;
    live[nt] = m < M;
    arow[nt] = reinterpret_cast<const uint32_t*>(A + size_t(live[nt] ? m : 0) * K);
  }
  for (int c0 = warp; c0 < chunks; c0 += kWarps * kBatch) {
    uint4 wv[kBatch];
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      const int c = c0 + b * kWarps;
      wv[b] = c < chunks ? __ldcs(w_slab + size_t(c) * 32 + lane) : make_uint4(0u, 0u, 0u, 0u);
    }
#pragma unroll
    for (int b = 0; b < kBatch; ++b) {
      const int c = c0 + b * kWarps;
      if (c >= chunks) break;
      const RowRecord lo = r_slab[(c / 2) * kSlabRows + g], hi = r_slab[(c / 2) * kSlabRows + g + 8];
      float d[NT][4] = {};
      const uint32_t wj[4] = {wv[b].x, wv[b].y, wv[b].z, wv[b].w};
#pragma unroll
      for (int j = 0; j < kWordsPerLane; ++j) {
        const uint32_t a0 = sol::bf16x2_sub(biased_pair(wj[j], 0), lo.zz);  // (128 + q) - (128 + z): exact
        const uint32_t a1 = sol::bf16x2_sub(biased_pair(wj[j], 1), hi.zz);
        const uint32_t a2 = sol::bf16x2_sub(biased_pair(wj[j], 2), lo.zz);
        const uint32_t a3 = sol::bf16x2_sub(biased_pair(wj[j], 3), hi.zz);
        const int kw = (c * kChunkK + 16 * j + 2 * t) / 2;  // 32-bit word index of k 2t of the step
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
          const uint32_t b0 = live[nt] ? __ldg(arow[nt] + kw) : 0u;
          const uint32_t b1 = live[nt] ? __ldg(arow[nt] + kw + 4) : 0u;  // k 2t + 8
          sol::mma_bf16_16816(d[nt], a0, a1, a2, a3, b0, b1);
        }
      }
#pragma unroll
      for (int nt = 0; nt < NT; ++nt) {
        acc[nt][0] = fmaf(lo.scale, d[nt][0], acc[nt][0]);
        acc[nt][1] = fmaf(lo.scale, d[nt][1], acc[nt][1]);
        acc[nt][2] = fmaf(hi.scale, d[nt][2], acc[nt][2]);
        acc[nt][3] = fmaf(hi.scale, d[nt][3], acc[nt][3]);
      }
    }
  }
  // d rows g / g + 8 are W rows (outputs n), columns 2t, 2t + 1 are A rows (m).
#pragma unroll
  for (int nt = 0; nt < NT; ++nt) {
    red[warp][8 * nt + 2 * t][g] = acc[nt][0];
    red[warp][8 * nt + 2 * t + 1][g] = acc[nt][1];
    red[warp][8 * nt + 2 * t][g + 8] = acc[nt][2];
    red[warp][8 * nt + 2 * t + 1][g + 8] = acc[nt][3];
  }
  __syncthreads();
  for (int i = threadIdx.x; i < NT * 8 * kSlabRows; i += kWarps * 32) {
    const int m = i / kSlabRows, row = i % kSlabRows, n = slab * kSlabRows + row;
    if (m >= M || n >= N) continue;
    float s = 0.0f;
#pragma unroll
    for (int w = 0; w < kWarps; ++w) s += red[w][m][row];
    C[size_t(m) * N + n] = s;
  }
}

/** The repacked weights on the device. */
struct MmaWeights {
  int64_t slabs = 0, chunks = 0, groups = 0;
  const uint4* words = nullptr;
  const RowRecord* records = nullptr;
};

template <class T>
std::vector<T> to_host(const T* p, size_t n, cudaStream_t stream) {
  std::vector<T> v(n);
  SOL_CUDA(cudaMemcpyAsync(v.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost, stream));
  SOL_CUDA(cudaStreamSynchronize(stream));
  return v;
}

/** prepare: the plain-layout weights of g copied down, repacked and uploaded into `mem` (untimed). */
MmaWeights upload_mma_weights(const sol::Int4Problem& g, cudaStream_t stream, sol::DeviceAllocs& mem) {
  const auto packed = to_host(g.packed, size_t(g.N * g.K / 2), stream);
  const auto scale = to_host(g.scale, size_t(g.N * g.groups), stream);
  const auto zero = to_host(g.zero, size_t(g.N * g.groups), stream);
  const Repacked r = repack(packed.data(), scale.data(), zero.data(), g.N, g.K);
  uint4* words = mem.alloc<uint4>(r.words.size() * 4);
  RowRecord* records = mem.alloc<RowRecord>(r.records.size() * sizeof(RowRecord));
  SOL_CUDA(cudaMemcpyAsync(words, r.words.data(), r.words.size() * 4, cudaMemcpyHostToDevice, stream));
  SOL_CUDA(cudaMemcpyAsync(records, r.records.data(), r.records.size() * sizeof(RowRecord), cudaMemcpyHostToDevice, stream));
  SOL_CUDA(cudaStreamSynchronize(stream));  // the host copies are freed with `r`
  return MmaWeights{r.slabs, r.chunks, r.groups, words, records};
}

/** run: C (M, N) fp32 = A (M <= 16, K) bf16 x W^T, one launch on `stream`. */
void launch_mma(const MmaWeights& w, const uint16_t* A, float* C, int64_t M, int64_t N, int64_t K, cudaStream_t stream) {
  const dim3 grid(unsigned(w.slabs)), block(kWarps * 32);
  if (M <= 8)
    slab_kernel<1><<<grid, block, 0, stream>>>(w.words, w.records, A, C, int(M), int(N), int(K), int(w.chunks), int(w.groups));
  else
    slab_kernel<2><<<grid, block, 0, stream>>>(w.words, w.records, A, C, int(M), int(N), int(K), int(w.chunks), int(w.groups));
  SOL_CHECK_LAUNCH();
}

}  // namespace
}  // namespace nibble::int4_mma
