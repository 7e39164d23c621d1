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
// it picks by M:
//   M <= 16  mma_kernel: mma.sync m16n8k16 (not wgmma: at N-side 8 or 16 the kernel is a weight
//            stream, and mma.sync needs no shared memory or warpgroup sync). One block per 16-row
//            slab, 8 warps splitting K (summed in shared memory at the end); each lane fetches its
//            4 chunks of 64 k (16 bytes each, evict-first: W is read once) before decoding any, so
//            ~190 blocks x 8 warps x 2 KB keep the whole weight stream in flight. Activations: the
//            kPerm k order gives a lane its B fragments as two 16-byte loads per chunk (L1/L2:
//            A is 96 KB at M = 16). Bytes: N K / 2 + N K / 16 (NVFP4); at M = 16, N = K = 3072,
//            5.3 MB: 1.3 us at 4 TB/s, ~3 us predicted with the ramp.
//            Also the fallback for any M when K % 8 != 0 (kStd order, 4-byte activation loads,
//            16 rows of A per block row).
//   M > 16   wgmma_kernel: one producer warpgroup (one thread: TMA of 64-k activation tiles, 128B
//            swizzle, into a ring of stages on full/empty mbarriers) and NCONS consumer warpgroups,
//            each 64 W rows x BN activation rows: per k16 step, decode 4 registers per thread, then
//            wgmma m64nBNk16 with A from registers and B from the stage; one wgmma group in flight
//            while the next step decodes (wait_group 1). The weights go global -> registers with a
//            prefetch ring of kPf chunks, never through shared memory.
//            BN = 256, NCONS = 2 (128 x 256 tile) for M > 256; BN = 64, NCONS = 1 for 16 < M <= 256
//            (more blocks: at M = 128, N = 3072 a 128 x 256 tile would give 24).
// The epilogue multiplies row n of C^T by colmul[n] (NVFP4: global x 2^8; MXFP4: 2^sh(n), fp4_frag.h).
// Residues: N padded to 128 with zero codes (rows past N never written), K padded to 64 (zero codes;
// the TMA zero-fills A past K and past M), the partial last scale block is an ordinary block.
// Not supported: a NaN block scale; M > 16 with A not 16-byte aligned (the TMA needs it; cudaMalloc'd
// A always is).
#include <cuda.h>  // CUtensorMap (the encode function comes from the runtime's driver entry point)
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>

#include "nibble/nibble_gemm.h"
#include "solutions/common/abi_util.h"
#include "solutions/common/gemm_abi_util.h"
#include "solutions/gemm_fp4_sm90/fp4_frag.h"
#include "solutions/gemm_fp4_sm90/wgmma_rs.cuh"

namespace nibble::gemm_fp4_sm90 {
namespace {

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

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void mbar_init(uint64_t* bar, uint32_t count) {
  asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_addr(bar)), "r"(count) : "memory");
}

__device__ __forceinline__ void mbar_wait(uint64_t* bar, uint32_t parity) {
  asm volatile(
      "{\n"
      ".reg .pred p;\n"
      "WAIT_%=:\n"
      "mbarrier.try_wait.parity.shared::cta.b64 p, [%0], %1;\n"
      "@!p bra WAIT_%=;\n"
      "}\n" ::"r"(smem_addr(bar)),
      "r"(parity)
      : "memory");
}

__device__ __forceinline__ void mbar_arrive(uint64_t* bar) {
  asm volatile("mbarrier.arrive.shared::cta.b64 _, [%0];" ::"r"(smem_addr(bar)) : "memory");
}

__device__ __forceinline__ void mbar_expect_tx(uint64_t* bar, uint32_t bytes) {
  asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_addr(bar)), "r"(bytes) : "memory");
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

// ---- M <= 16 (and the K % 8 != 0 fallback): mma.sync -------------------------------------------

constexpr int kMmaWarps = 8;  // warps per block, splitting K
constexpr int kMmaBatch = 4;  // chunks a lane fetches before decoding

/**
 * One block per 16-row slab of W and per 8 NT rows of A (grid.y). NT: n8 tiles (A rows / 8).
 * PERM: the kPerm order and 16-byte activation loads (K % 8 == 0, A 16-byte aligned); else kStd and
 * 4-byte loads.
 */
template <int NT, bool PERM, bool NV>
__global__ void __launch_bounds__(kMmaWarps * 32, 2)
    mma_kernel(const uint4* __restrict__ wq, const uint8_t* __restrict__ sc, const float* __restrict__ colmul,
               const uint16_t* __restrict__ A, float* __restrict__ C, int M, int N, int K, int nch) {
  constexpr int kSb = scale_bytes_per_chunk(NV);
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

  for (int c0 = warp; c0 < nch; c0 += kMmaWarps * kMmaBatch) {
    uint4 q[kMmaBatch];
    uint2 s[kMmaBatch];
#pragma unroll
    for (int p = 0; p < kMmaBatch; ++p) {
      const int c = c0 + p * kMmaWarps;
      if (c < nch) {
        q[p] = ld_stream(wp + size_t(c) * 32);
        const uint8_t* sr = sp + size_t(c) * kSb;
        if constexpr (PERM) {
          s[p].x = __ldg(reinterpret_cast<const uint16_t*>(sr) + (NV ? t : t >> 1) * 8 + g);
        } else if constexpr (NV) {
          s[p] = __ldg(reinterpret_cast<const uint2*>(sr) + g);
        } else {
          s[p].x = __ldg(reinterpret_cast<const uint32_t*>(sr) + g);
        }
      }
    }
#pragma unroll
    for (int p = 0; p < kMmaBatch; ++p) {
      const int c = c0 + p * kMmaWarps;
      if (c >= nch) break;
      const uint32_t qw[4] = {q[p].x, q[p].y, q[p].z, q[p].w};
      if constexpr (PERM) {
        // Lane (g, t): activation k 64c + 16t .. +15 of its row, 8 words; step j uses words 2j, 2j+1.
        uint32_t b[NT][8];
        const int k0 = 64 * c + 16 * t;
#pragma unroll
        for (int nt = 0; nt < NT; ++nt) {
          const uint4 lo = (avalid[nt] && k0 < K) ? __ldg(reinterpret_cast<const uint4*>(arow[nt] + k0)) : make_uint4(0, 0, 0, 0);
          const uint4 hi =
              (avalid[nt] && k0 + 8 < K) ? __ldg(reinterpret_cast<const uint4*>(arow[nt] + k0 + 8)) : make_uint4(0, 0, 0, 0);
          b[nt][0] = lo.x, b[nt][1] = lo.y, b[nt][2] = lo.z, b[nt][3] = lo.w;
          b[nt][4] = hi.x, b[nt][5] = hi.y, b[nt][6] = hi.z, b[nt][7] = hi.w;
        }
        const uint32_t s_lo = expand_scale<NV>(s[p].x, 0), s_hi = expand_scale<NV>(s[p].x, 1);
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          uint32_t a[4];
          decode_step(qw[j], s_lo, s_hi, a);
#pragma unroll
          for (int nt = 0; nt < NT; ++nt) mma_bf16_16816(acc[nt], a, b[nt][2 * j], b[nt][2 * j + 1]);
        }
      } else {
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          // kStd: step j covers k 64c + 16j .. +15; NVFP4 block j, MXFP4 block j / 2.
          const int bi = NV ? j : j >> 1;
          const uint32_t sw = NV ? (bi < 2 ? s[p].x : s[p].y) : s[p].x;
          const uint32_t s_lo = expand_scale<NV>(sw, (2 * bi) & 3), s_hi = expand_scale<NV>(sw, (2 * bi + 1) & 3);
          uint32_t a[4];
          decode_step(qw[j], s_lo, s_hi, a);
          const int k = 64 * c + 16 * j + 2 * t;
#pragma unroll
          for (int nt = 0; nt < NT; ++nt) {
            const uint32_t* ar = reinterpret_cast<const uint32_t*>(arow[nt]);
            const uint32_t b0 = (avalid[nt] && k < K) ? __ldg(ar + k / 2) : 0u;
            const uint32_t b1 = (avalid[nt] && k + 8 < K) ? __ldg(ar + (k + 8) / 2) : 0u;
            mma_bf16_16816(acc[nt], a, b0, b1);
          }
        }
      }
    }
  }
  // Sum the 8 warps' partial C^T tiles; acc[nt][i]: W row g + 8 (i >> 1), A row m0 + 8 nt + 2t + (i & 1).
#pragma unroll
  for (int nt = 0; nt < NT; ++nt)
#pragma unroll
    for (int i = 0; i < 4; ++i) red[warp][nt * 4 + i][lane] = acc[nt][i];
  __syncthreads();
  for (int e = threadIdx.x; e < NT * 4 * 32; e += blockDim.x) {
    const int idx = e / 32, l = e % 32, nt = idx / 4, i = idx % 4;
    float sum = 0.0f;
#pragma unroll
    for (int w = 0; w < kMmaWarps; ++w) sum += red[w][idx][l];
    const int n = slab * kSlabRows + (l >> 2) + 8 * (i >> 1);
    const int m = m0 + 8 * nt + 2 * (l & 3) + (i & 1);
    if (n < N && m < M) C[size_t(m) * N + n] = sum * colmul[n];
  }
}

// ---- M > 16: wgmma, A (weights) from registers, B (activations) from shared memory -------------

constexpr int kPf = 4;  // weight chunks a consumer thread has in flight

template <int BN, int NCONS>
struct WgCfg {
  static constexpr int kThreads = 128 * (NCONS + 1);
  static constexpr int kStageBytes = BN * 128;  // BN rows x 64 k x 2 bytes
  static constexpr int kStages = BN >= 256 ? 4 : 8;
  static constexpr int kSmem = kStages * kStageBytes + 1024 /* alignment */ + 2 * kStages * 8;
  static constexpr bool kSetRegs = NCONS >= 2;  // 384 threads: 168 registers each unless rebalanced
};

template <int BN, int NCONS, bool NV>
__global__ void __launch_bounds__(WgCfg<BN, NCONS>::kThreads, 1)
    wgmma_kernel(const __grid_constant__ CUtensorMap tmA, const uint4* __restrict__ wq, const uint8_t* __restrict__ sc,
                 const float* __restrict__ colmul, float* __restrict__ C, int M, int N, int nch) {
  using Cfg = WgCfg<BN, NCONS>;
  constexpr int kSb = scale_bytes_per_chunk(NV);
  extern __shared__ uint8_t smem_raw[];
  uint8_t* stages = reinterpret_cast<uint8_t*>((reinterpret_cast<uintptr_t>(smem_raw) + 1023) & ~uintptr_t(1023));
  uint64_t* full = reinterpret_cast<uint64_t*>(stages + Cfg::kStages * Cfg::kStageBytes);
  uint64_t* empty = full + Cfg::kStages;
  const int wg = threadIdx.x / 128;
  if (threadIdx.x == 0) {
    for (int s = 0; s < Cfg::kStages; ++s) {
      mbar_init(&full[s], 1);
      mbar_init(&empty[s], NCONS * 4);  // lane 0 of each consumer warp
    }
    asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory");
  }
  __syncthreads();
  const int m0 = blockIdx.y * BN;

  if (wg == 0) {  // producer
    if constexpr (Cfg::kSetRegs) asm volatile("setmaxnreg.dec.sync.aligned.u32 40;");
    if (threadIdx.x == 0) {
      asm volatile("prefetch.tensormap [%0];" ::"l"(reinterpret_cast<uint64_t>(&tmA)) : "memory");
      for (int c = 0; c < nch; ++c) {
        const int s = c % Cfg::kStages;
        if (c >= Cfg::kStages) mbar_wait(&empty[s], ((c / Cfg::kStages) - 1) & 1);
        mbar_expect_tx(&full[s], Cfg::kStageBytes);
        tma_load_2d(stages + s * Cfg::kStageBytes, &tmA, &full[s], 64 * c, m0);
      }
    }
    return;
  }
  if constexpr (Cfg::kSetRegs) asm volatile("setmaxnreg.inc.sync.aligned.u32 232;");

  const int lane = threadIdx.x & 31, cwarp = threadIdx.x / 32 - 4, g = lane >> 2;
  const int slab = blockIdx.x * (NCONS * 4) + cwarp;
  const uint4* wp = wq + size_t(slab) * nch * 32 + lane;
  const uint8_t* sp = sc + size_t(slab) * nch * kSb + g * (kSb / 8);
  const uint32_t stage0 = smem_addr(stages);

  float acc[BN / 2];
#pragma unroll
  for (int i = 0; i < BN / 2; ++i) acc[i] = 0.0f;

  uint4 qr[kPf];
  uint2 sr[kPf];
#pragma unroll
  for (int p = 0; p < kPf; ++p) {
    if (p < nch) {
      qr[p] = ld_stream(wp + size_t(p) * 32);
      if constexpr (NV)
        sr[p] = __ldg(reinterpret_cast<const uint2*>(sp + size_t(p) * kSb));
      else
        sr[p].x = __ldg(reinterpret_cast<const uint32_t*>(sp + size_t(p) * kSb));
    }
  }

  for (int c0 = 0; c0 < nch; c0 += kPf) {
#pragma unroll
    for (int p = 0; p < kPf; ++p) {
      const int c = c0 + p;
      if (c < nch) {
        const int s = c % Cfg::kStages;
        const uint32_t qw[4] = {qr[p].x, qr[p].y, qr[p].z, qr[p].w};
        const uint2 sw = sr[p];
        if (c + kPf < nch) {
          qr[p] = ld_stream(wp + size_t(c + kPf) * 32);
          if constexpr (NV)
            sr[p] = __ldg(reinterpret_cast<const uint2*>(sp + size_t(c + kPf) * kSb));
          else
            sr[p].x = __ldg(reinterpret_cast<const uint32_t*>(sp + size_t(c + kPf) * kSb));
        }
        mbar_wait(&full[s], (c / Cfg::kStages) & 1);
        const uint32_t base = stage0 + s * Cfg::kStageBytes;
#pragma unroll
        for (int j = 0; j < 4; ++j) {
          const int bi = NV ? j : j >> 1;
          const uint32_t w = NV ? (bi < 2 ? sw.x : sw.y) : sw.x;
          uint32_t a[4];
          decode_step(qw[j], expand_scale<NV>(w, (2 * bi) & 3), expand_scale<NV>(w, (2 * bi + 1) & 3), a);
          fence_acc(acc);
          wgmma_fence();
          wgmma_rs<BN>(acc, a, desc_sw128(base + 32 * j));
          wgmma_commit();
          fence_acc(acc);
          wgmma_wait<1>();  // the previous step's group is done: its registers and (at j == 0) stage are free
          if (j == 0 && c > 0 && lane == 0) mbar_arrive(&empty[(c - 1) % Cfg::kStages]);
        }
      }
    }
  }
  wgmma_wait<0>();
  fence_acc(acc);

  // acc[4 i + e]: W row 16 cwarp + g + 8 (e >> 1), A row 8 i + 2t + (e & 1) of the tile.
  const int t = lane & 3;
  const int n_lo = slab * kSlabRows + g, n_hi = n_lo + 8;
  const float f_lo = n_lo < N ? colmul[n_lo] : 0.0f, f_hi = n_hi < N ? colmul[n_hi] : 0.0f;
#pragma unroll
  for (int i = 0; i < BN / 8; ++i) {
#pragma unroll
    for (int e = 0; e < 4; ++e) {
      const int m = m0 + 8 * i + 2 * t + (e & 1);
      const int n = (e >> 1) ? n_hi : n_lo;
      if (m < M && n < N) C[size_t(m) * N + n] = acc[4 * i + e] * ((e >> 1) ? f_hi : f_lo);
    }
  }
}

// ---- Host side ----------------------------------------------------------------------------------

enum class Kind { kMma, kWgmmaSmall, kWgmmaLarge };

struct Handle {
  sol::GemmProblem g;
  Kind kind = Kind::kMma;
  KOrder order = KOrder::kStd;
  int64_t n_pad = 0, nch = 0;
  uint4* wq = nullptr;
  uint8_t* sc = nullptr;
  float* colmul = nullptr;
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
                                                                int(h.g.K), int(h.nch));
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

template <int BN, int NCONS, bool NV>
void launch_wgmma(Handle& h, const uint16_t* A, float* C, cudaStream_t stream) {
  using Cfg = WgCfg<BN, NCONS>;
  encode_a_map(h, A, BN);
  static bool attr_set = false;  // per instantiation; prepare/run are called from one thread at a time
  if (!attr_set) {
    SOL_CUDA(cudaFuncSetAttribute(wgmma_kernel<BN, NCONS, NV>, cudaFuncAttributeMaxDynamicSharedMemorySize, Cfg::kSmem));
    attr_set = true;
  }
  const dim3 grid(unsigned(h.n_pad / (64 * NCONS)), unsigned((h.g.M + BN - 1) / BN));
  wgmma_kernel<BN, NCONS, NV><<<grid, Cfg::kThreads, Cfg::kSmem, stream>>>(h.map, h.wq, h.sc, h.colmul, C,
                                                                           int(h.g.M), int(h.g.N), int(h.nch));
  SOL_CHECK_LAUNCH();
}

template <bool NV>
void launch(Handle& h, const uint16_t* A, float* C, cudaStream_t stream) {
  switch (h.kind) {
    case Kind::kMma: launch_mma_any<NV>(h, A, C, stream); break;
    case Kind::kWgmmaSmall: launch_wgmma<64, 1, NV>(h, A, C, stream); break;
    case Kind::kWgmmaLarge: launch_wgmma<256, 2, NV>(h, A, C, stream); break;
  }
}

void prepare(const nibble_gemm_problem* problem, cudaStream_t stream, void** handle) {
  if (!handle) throw sol::AbiFailure(NIBBLE_ERR_INVALID_ARGUMENT, "prepare: null handle");
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
  const bool k8 = g.K % 8 == 0;
  if (g.M <= 16 || !k8) {
    h->kind = Kind::kMma;
    h->order = (g.M <= 16 && k8) ? KOrder::kPerm : KOrder::kStd;
  } else {
    h->kind = g.M <= 256 ? Kind::kWgmmaSmall : Kind::kWgmmaLarge;
    h->order = KOrder::kStd;
  }
  if (h->kind != Kind::kMma && (g.M + 255) / 256 > 65535)
    throw sol::AbiFailure(NIBBLE_ERR_NOT_SUPPORTED, "M too large for the grid");
  if (h->kind == Kind::kMma && (g.M + 15) / 16 > 65535)
    throw sol::AbiFailure(NIBBLE_ERR_NOT_SUPPORTED, "M too large for the grid");

  // Repack on the host: copy the codes and scales down, rearrange, upload.
  const size_t pbytes = size_t(g.N * (g.K / 2)), sbytes = size_t(g.N * g.scale_cols);
  std::vector<uint8_t> packed(pbytes), scale(sbytes);
  SOL_CUDA(cudaMemcpyAsync(packed.data(), g.packed, pbytes, cudaMemcpyDeviceToHost, stream));
  SOL_CUDA(cudaMemcpyAsync(scale.data(), g.scale, sbytes, cudaMemcpyDeviceToHost, stream));
  SOL_CUDA(cudaStreamSynchronize(stream));
  Repacked r;
  const std::string why = repack(g.nvfp4, g.N, g.K, packed.data(), scale.data(), g.global_scale, h->order, &r);
  if (!why.empty()) throw sol::AbiFailure(NIBBLE_ERR_NOT_SUPPORTED, why);
  h->n_pad = r.n_pad;
  h->nch = r.nch;
  h->wq = h->mem.alloc<uint4>(r.w.size() * 4);
  h->sc = h->mem.alloc<uint8_t>(r.s.size());
  h->colmul = h->mem.alloc<float>(r.colmul.size() * 4);
  SOL_CUDA(cudaMemcpyAsync(h->wq, r.w.data(), r.w.size() * 4, cudaMemcpyHostToDevice, stream));
  SOL_CUDA(cudaMemcpyAsync(h->sc, r.s.data(), r.s.size(), cudaMemcpyHostToDevice, stream));
  SOL_CUDA(cudaMemcpyAsync(h->colmul, r.colmul.data(), r.colmul.size() * 4, cudaMemcpyHostToDevice, stream));
  SOL_CUDA(cudaStreamSynchronize(stream));  // the host vectors go out of scope
  *handle = h.release();
}

}  // namespace
}  // namespace nibble::gemm_fp4_sm90

// ---- The C ABI ----------------------------------------------------------------------------------

extern "C" {

/** The nibble.h ABI version this library was built against (NIBBLE_ABI_VERSION). */
NIBBLE_EXPORT int32_t nibble_abi_version(void) { return NIBBLE_ABI_VERSION; }

/** The GEMM ABI version (NIBBLE_GEMM_ABI_VERSION). */
NIBBLE_EXPORT int32_t nibble_gemm_abi_version(void) { return NIBBLE_GEMM_ABI_VERSION; }

/** The name reports show: "gemm-fp4-sm90". */
NIBBLE_EXPORT const char* nibble_solution_name(void) { return "gemm-fp4-sm90"; }

/** Check the problem, pick the kernel by M, repack codes and scales into its layout (host, untimed).
 *  NOT_SUPPORTED: not an sm_90 device, a NaN block scale, or M beyond the grid. */
NIBBLE_EXPORT nibble_status nibble_gemm_prepare(const nibble_gemm_problem* problem, void* stream, void** handle,
                                                nibble_error* err) {
  return nibble::sol::abi_guard(
      err, [&] { nibble::gemm_fp4_sm90::prepare(problem, static_cast<cudaStream_t>(stream), handle); });
}

/** One GEMM: one kernel launch on `stream` (mma.sync for M <= 16, wgmma above). */
NIBBLE_EXPORT nibble_status nibble_gemm_run(void* handle, const nibble_tensor* A, nibble_tensor* C, void* stream,
                                            nibble_error* err) {
  return nibble::sol::abi_guard(err, [&] {
    if (!handle) throw nibble::sol::AbiFailure(NIBBLE_ERR_INVALID_ARGUMENT, "run: null handle");
    auto& h = *static_cast<nibble::gemm_fp4_sm90::Handle*>(handle);
    const uint16_t* a = nullptr;
    float* c = nullptr;
    nibble::sol::check_gemm_io(h.g, A, C, &a, &c);
    const cudaStream_t s = static_cast<cudaStream_t>(stream);
    if (h.g.nvfp4)
      nibble::gemm_fp4_sm90::launch<true>(h, a, c, s);
    else
      nibble::gemm_fp4_sm90::launch<false>(h, a, c, s);
  });
}

/** Wait for the stream, free the repacked weights. */
NIBBLE_EXPORT nibble_status nibble_gemm_teardown(void* handle, void* stream, nibble_error* err) {
  return nibble::sol::abi_guard(err, [&] {
    std::unique_ptr<nibble::gemm_fp4_sm90::Handle> h(static_cast<nibble::gemm_fp4_sm90::Handle*>(handle));
    if (!h) return;
    SOL_CUDA(cudaStreamSynchronize(static_cast<cudaStream_t>(stream)));
    h->mem.release();
  });
}

}  // extern "C"
