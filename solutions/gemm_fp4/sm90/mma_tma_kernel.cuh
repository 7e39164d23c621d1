// mma_tma_kernel.cuh: M <= 16, mma.sync fed by bulk copies (NIBBLE_FP4SM90_KIND=mmatma; slower than mma_kernel as measured, kept selectable for tuning)
// Part of libnibble_gemm_fp4_sm90.so, included once, in order, by gemm_fp4_sm90.cu (one translation
// unit: the kernels keep their names and code; the file comment there has the design).
#pragma once

#include "solutions/gemm_fp4/sm90/device_common.cuh"

namespace nibble::gemm_fp4_sm90 {
namespace {

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
  NIBBLE_DYNAMIC_SMEM(smem, 128);
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

}  // namespace
}  // namespace nibble::gemm_fp4_sm90
