// int4_mma_kernel.cuh: the small-M (M <= 16) path of gemm-w4a16-int4 for int4_gemm_mma (its own
// solution) and int4_gemm_sm90 (its M <= 16 path): the int4 format of the shared small-M kernel
// (solutions/common/mma_dequant_gemm.cuh, the FP4 GEMM's tuned mma.sync kernel: batched loads, the
// kPerm order's 16-byte activation loads, split-K over 8 warps), the weights' upload (prepare) and
// the launch (run). The layout: int4_mma_layout.h.
//
// Per register: a shift and a LOP3 place two codes over the bf16 of 128 (exact), an HSUB2 takes
// 128 + z away: q - z exactly. The MMA sums a chunk's exact products in fp32, and the chunk's sums
// are scaled per row in fp32 by the fp16 scale (exact in fp32): W is never rounded. Numerics: the
// oracle's fp32_accumulate row (fp32 sums of exact products).
#pragma once

#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <vector>

#include "solutions/common/abi_util.h"
#include "solutions/common/gemm_abi_util.h"
#include "solutions/common/mma_dequant_gemm.cuh"
#include "solutions/int4_gemm/mma/int4_mma_layout.h"

namespace nibble::int4_mma {
namespace {

/** int4 with a zero point for sol::mma_dequant_kernel (kPerm order only): one record per group of
 *  128 k, exact integer decode, per-chunk fp32 scaling, no epilogue factor. */
struct Int4MmaFormat {
  static constexpr int kRecordBytes = int4_mma::kRecordBytes;
  static constexpr int kChunksPerRecord = kGroup / kChunkK;
  static constexpr bool kColmul = false;
  static constexpr bool kChunkScale = true;
  struct Record {
    uint32_t zz;      // {128 + z of row g, of row g + 8}, bf16
    uint32_t scales;  // {scale of row g, of row g + 8}, fp16
  };
  template <bool PERM>
  static __device__ __forceinline__ void load_record(const uint8_t* sr, int g, int, Record& r) {
    const uint2 v = __ldg(reinterpret_cast<const uint2*>(sr) + g);
    r.zz = v.x, r.scales = v.y;
  }
  template <bool PERM>
  static __device__ __forceinline__ void decode_step(uint32_t q, const Record& r, int, uint32_t (&a)[4]) {
    a[0] = decode_reg(q, 0, r.zz);
    a[1] = decode_reg(q, 1, r.zz);
    a[2] = decode_reg(q, 2, r.zz);
    a[3] = decode_reg(q, 3, r.zz);
  }
  /** d rows g (d[0], d[1]) and g + 8 (d[2], d[3]) times their rows' scales, into acc. */
  static __device__ __forceinline__ void scale_chunk(const Record& r, const float (&d)[4], float (&acc)[4]) {
    const float s_lo = __half2float(__ushort_as_half(uint16_t(r.scales & 0xFFFFu)));
    const float s_hi = __half2float(__ushort_as_half(uint16_t(r.scales >> 16)));
    acc[0] = fmaf(s_lo, d[0], acc[0]);
    acc[1] = fmaf(s_lo, d[1], acc[1]);
    acc[2] = fmaf(s_hi, d[2], acc[2]);
    acc[3] = fmaf(s_hi, d[3], acc[3]);
  }
};

/** The repacked weights on the device. */
struct MmaWeights {
  int64_t slabs = 0, chunks = 0;
  const uint4* words = nullptr;
  const uint8_t* records = nullptr;
};

template <class T>
std::vector<T> to_host(const T* p, size_t n, cudaStream_t stream) {
  std::vector<T> v(n);
  SOL_CUDA(cudaMemcpyAsync(v.data(), p, n * sizeof(T), cudaMemcpyDeviceToHost, stream));
  SOL_CUDA(cudaStreamSynchronize(stream));
  return v;
}

/** The plain-layout weights of g on the host, for a repack (prepare, untimed). */
struct PlainWeights {
  std::vector<uint8_t> packed;   // (N, K/2)
  std::vector<uint16_t> scale;   // (N, K/128) fp16 bits
  std::vector<uint8_t> zero;     // (N, K/128)
};
PlainWeights download_plain(const sol::Int4Problem& g, cudaStream_t stream) {
  return PlainWeights{to_host(g.packed, size_t(g.N * g.K / 2), stream), to_host(g.scale, size_t(g.N * g.groups), stream),
                      to_host(g.zero, size_t(g.N * g.groups), stream)};
}

/** prepare: the plain-layout weights of g copied down, repacked and uploaded into `mem` (untimed). */
MmaWeights upload_mma_weights(const sol::Int4Problem& g, cudaStream_t stream, sol::DeviceAllocs& mem) {
  const PlainWeights p = download_plain(g, stream);
  const Repacked r = repack(p.packed.data(), p.scale.data(), p.zero.data(), g.N, g.K);
  uint4* words = mem.alloc<uint4>(r.words.size() * 4);
  uint8_t* records = mem.alloc<uint8_t>(r.records.size());
  SOL_CUDA(cudaMemcpyAsync(words, r.words.data(), r.words.size() * 4, cudaMemcpyHostToDevice, stream));
  SOL_CUDA(cudaMemcpyAsync(records, r.records.data(), r.records.size(), cudaMemcpyHostToDevice, stream));
  SOL_CUDA(cudaStreamSynchronize(stream));  // the host copies are freed with `r`
  return MmaWeights{r.slabs, r.chunks, words, records};
}

/** run: C (M, N) fp32 = A (M <= 16, K) bf16, 16-byte aligned, x W^T: one launch on `stream`. */
void launch_mma(const MmaWeights& w, const uint16_t* A, float* C, int64_t M, int64_t N, int64_t K, cudaStream_t stream) {
  sol::launch_mma_dequant<Int4MmaFormat, /*kStdOrder=*/false>(true, w.slabs, w.words, w.records, nullptr, A, C, M, N, K,
                                                               w.chunks, nullptr, stream);
}

}  // namespace
}  // namespace nibble::int4_mma
