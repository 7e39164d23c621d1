// gemm_baseline.cu: the correct, simple baseline of both FP4 dequant-GEMM tasks (issue 7), an ABI
// solution (include/nibble/nibble_gemm.h) built as libnibble_gemm_baseline.so.
//
//   gemm-w4a16-nvfp4  C (M, N) = A (M, K) W^T, W[n, k] = e2m1(code) * e4m3fn(scale[n, k/16]) * global
//   gemm-bf16-mxfp4   C (M, N) = A (M, K) W^T, W[n, k] = e2m1(code) * 2^(e8m0(scale[n, k/32]) - 127)
//   A bf16 (M, K); W.packed (N, K/2) uint8, low nibble = even k; W.scale (N, ceil(K/B)); C fp32.
//
// The codes are decoded in registers (solutions/common/fp4_device.cuh: the fp32 bit pattern built
// from the code's fields), never into a dequantised copy of W in memory. e2m1 * block scale is exact
// in fp32 (2 + 4 significant bits, or a power of two); the products with A and the sums over K are
// fp32 (CUDA cores, no tensor cores); NVFP4's global scale multiplies the finished fp32 sum once
// (e2m1 * e4m3 * global needs 30 bits, fp32 has 24). prepare allocates nothing.
//
// Two kernels, chosen by M:
//   M <= 16  gemv_kernel: one warp per column n and R <= 8 rows of C; the lanes split K (8 codes,
//            one 4-byte load, per lane and step when K % 8 == 0, else one byte), each keeps R fp32
//            partial sums, a shuffle tree adds them. W is read once (N K / 2 bytes + scales), A
//            from L1/L2. Bound by the decode's issue rate (one decode per FMA at R = 1), not by
//            W's 14 MB: at M = 1, N = 8192, K = 3072, 8192 warps (all resident on an H200) of 12
//            steps of ~140 instructions: ~15-25 us predicted (M = 16: ~60-100 us).
//   M > 16   tiled_kernel: 64 x 64 C tile per 256-thread block, 4 x 4 per thread, K in steps of
//            32: the A tile (bf16 -> fp32, transposed), the tile's packed bytes (raw) and its block
//            scales (decoded, one per 16 k) are staged in shared memory; each thread decodes the
//            codes of its 4 columns in registers and reuses each across 4 rows (the 16 threads
//            sharing a column decode it redundantly: the price of never storing decoded W). PTX
//            per 32-k step per thread: 512 FMAs among ~3500 ops (62 registers, 4 blocks per SM):
//            at M = 4096, N = 8192, K = 3072 (1.0e11 FMAs) ~15 ms of pure issue, 20-40 ms
//            predicted; M = 128: ~0.5-1 ms.
// Residues: any M, N, even K; the partial last scale block needs nothing special (each k reads
// scale[n, k / B]); out-of-range A and W entries of a tile are staged as 0 and never written out.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <memory>

#include "fixtures/bf16.h"
#include "nibble/nibble_gemm.h"
#include "solutions/common/abi_util.h"
#include "solutions/common/export.h"
#include "solutions/common/fp4_device.cuh"
#include "solutions/common/gemm_abi_util.h"

namespace nibble::gemm_baseline {
namespace {

using sol::block_scale_to_f32;
using sol::e2m1_to_f32;

// ---- M <= 16: one warp per column ---------------------------------------------------------------

constexpr int kGemvWarps = 4;  // warps (columns) per block

/**
 * C[m0 .. m0+R-1, n] for the warp's column n. VEC: K % 8 == 0 and 4-byte-aligned packed rows,
 * 16-byte-aligned A rows (each lane reads 8 codes and 8 bf16 of each row per step); otherwise one
 * byte (2 codes) per step. Rows past M read row M-1 (valid memory) and are not written.
 */
template <int R, bool VEC>
__global__ void __launch_bounds__(kGemvWarps * 32)
    gemv_kernel(const uint16_t* __restrict__ A, const uint8_t* __restrict__ packed, const uint8_t* __restrict__ scale,
                int M, int N, int K, int scale_cols, int block, bool nvfp4, float global, float* __restrict__ C) {
  const int lane = threadIdx.x & 31;
  const int n = blockIdx.x * kGemvWarps + int(threadIdx.x >> 5);
  if (n >= N) return;  // the whole warp: n depends on the warp only, so the shuffles below stay full
  const int m0 = blockIdx.y * R;
  const uint16_t* arow[R];
#pragma unroll
  for (int r = 0; r < R; ++r) arow[r] = A + int64_t(min(m0 + r, M - 1)) * K;
  const uint8_t* wrow = packed + int64_t(n) * (K / 2);
  const uint8_t* srow = scale + int64_t(n) * scale_cols;
  float acc[R];
#pragma unroll
  for (int r = 0; r < R; ++r) acc[r] = 0.0f;

  if constexpr (VEC) {
    const int chunks = K / 8;  // chunk c: k = 8c .. 8c+7, one scale block (8 divides 16 and 32)
    for (int c = lane; c < chunks; c += 32) {
      const uint32_t word = __ldg(reinterpret_cast<const uint32_t*>(wrow) + c);
      const float s = block_scale_to_f32(__ldg(srow + (8 * c) / block), nvfp4);
      float w[8];
#pragma unroll
      for (int e = 0; e < 8; ++e) w[e] = e2m1_to_f32(word >> (4 * e)) * s;  // k = 8c + e (little-endian)
#pragma unroll
      for (int r = 0; r < R; ++r) {
        const uint4 q = __ldg(reinterpret_cast<const uint4*>(arow[r]) + c);
        const uint32_t p[4] = {q.x, q.y, q.z, q.w};
#pragma unroll
        for (int h = 0; h < 4; ++h) {
          acc[r] = fmaf(bf16_to_f32(uint16_t(p[h] & 0xFFFFu)), w[2 * h], acc[r]);
          acc[r] = fmaf(bf16_to_f32(uint16_t(p[h] >> 16)), w[2 * h + 1], acc[r]);
        }
      }
    }
  } else {
    const int bytes = K / 2;  // byte c: k = 2c (low nibble), 2c + 1 (high)
    for (int c = lane; c < bytes; c += 32) {
      const uint32_t b = __ldg(wrow + c);
      const float s = block_scale_to_f32(__ldg(srow + (2 * c) / block), nvfp4);
      const float w0 = e2m1_to_f32(b) * s, w1 = e2m1_to_f32(b >> 4) * s;
#pragma unroll
      for (int r = 0; r < R; ++r) {
        acc[r] = fmaf(bf16_to_f32(__ldg(arow[r] + 2 * c)), w0, acc[r]);
        acc[r] = fmaf(bf16_to_f32(__ldg(arow[r] + 2 * c + 1)), w1, acc[r]);
      }
    }
  }
#pragma unroll
  for (int r = 0; r < R; ++r)
#pragma unroll
    for (int off = 16; off > 0; off >>= 1) acc[r] += __shfl_xor_sync(0xFFFFFFFFu, acc[r], off);
  if (lane == 0) {
#pragma unroll
    for (int r = 0; r < R; ++r)
      if (m0 + r < M) C[int64_t(m0 + r) * N + n] = acc[r] * global;
  }
}

// ---- M > 16: 64 x 64 tiles ----------------------------------------------------------------------

constexpr int kBM = 64, kBN = 64, kBK = 32, kTM = 4, kTN = 4;
constexpr int kTileThreads = (kBM / kTM) * (kBN / kTN);  // 256: 16 x 16
constexpr int kWsPitch = kBK / 2 + 4;  // 20 bytes: rows tx + 16j land in distinct banks (5 tx mod 32)
static_assert(kTileThreads == 256, "the staging loops below assume 256 threads");
static_assert(kBM * kBK == kTileThreads * 8 && kBN * (kBK / 2) == kTileThreads * 4, "staging split");

/** Thread (ty, tx) = (tid / 16, tid % 16) owns C rows m_base + ty + 16 i and columns n_base + tx + 16 j
 *  (i, j < 4). k is summed in index order per element. */
__global__ void __launch_bounds__(kTileThreads)
    tiled_kernel(const uint16_t* __restrict__ A, const uint8_t* __restrict__ packed, const uint8_t* __restrict__ scale,
                 int M, int N, int K, int scale_cols, int block, bool nvfp4, float global, float* __restrict__ C) {
  __shared__ float As[kBK][kBM];           // A tile, transposed: As[kk][row]
  __shared__ uint8_t Ws[kBN][kWsPitch];    // packed codes of the tile, raw
  __shared__ float Ss[kBN][kBK / 16];      // block scale of k in [k0 + 16q, k0 + 16q + 16)
  const int tid = threadIdx.x, tx = tid % 16, ty = tid / 16;
  const int m_base = blockIdx.y * kBM, n_base = blockIdx.x * kBN;
  const int64_t half_k = K / 2;
  float acc[kTM][kTN];
#pragma unroll
  for (int i = 0; i < kTM; ++i)
#pragma unroll
    for (int j = 0; j < kTN; ++j) acc[i][j] = 0.0f;

  for (int k0 = 0; k0 < K; k0 += kBK) {
    {  // A: row tid / 4, k = k0 + (tid % 4) * 8 + e; zero outside (M, K)
      const int r = tid / 4, kc = (tid % 4) * 8, m = m_base + r;
#pragma unroll
      for (int e = 0; e < 8; ++e) {
        const int k = k0 + kc + e;
        As[kc + e][r] = (m < M && k < K) ? bf16_to_f32(A[int64_t(m) * K + k]) : 0.0f;
      }
    }
    {  // packed bytes: row tid / 4, byte k0/2 + (tid % 4) * 4 + e; code 0 (+0) outside (N, K)
      const int r = tid / 4, bc = (tid % 4) * 4, n = n_base + r;
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int64_t b = k0 / 2 + bc + e;
        Ws[r][bc + e] = (n < N && b < half_k) ? packed[int64_t(n) * half_k + b] : uint8_t(0);
      }
    }
    if (tid < kBN * (kBK / 16)) {  // scales: row tid / 2, sub-block q = tid % 2 (MXFP4: both read one byte)
      const int r = tid / 2, q = tid % 2, n = n_base + r, ks = k0 + 16 * q;
      Ss[r][q] = (n < N && ks < K) ? block_scale_to_f32(scale[int64_t(n) * scale_cols + ks / block], nvfp4) : 0.0f;
    }
    __syncthreads();
#pragma unroll
    for (int kb = 0; kb < kBK / 2; ++kb) {  // byte kb: k = k0 + 2kb (low nibble), k0 + 2kb + 1 (high)
      float a0[kTM], a1[kTM];
#pragma unroll
      for (int i = 0; i < kTM; ++i) {
        a0[i] = As[2 * kb][ty + 16 * i];
        a1[i] = As[2 * kb + 1][ty + 16 * i];
      }
#pragma unroll
      for (int j = 0; j < kTN; ++j) {
        const int r = tx + 16 * j;
        const uint32_t byte = Ws[r][kb];
        const float s = Ss[r][kb / 8];
        const float w0 = e2m1_to_f32(byte) * s, w1 = e2m1_to_f32(byte >> 4) * s;
#pragma unroll
        for (int i = 0; i < kTM; ++i) {
          acc[i][j] = fmaf(a0[i], w0, acc[i][j]);
          acc[i][j] = fmaf(a1[i], w1, acc[i][j]);
        }
      }
    }
    __syncthreads();
  }
#pragma unroll
  for (int i = 0; i < kTM; ++i) {
    const int m = m_base + ty + 16 * i;
#pragma unroll
    for (int j = 0; j < kTN; ++j) {
      const int n = n_base + tx + 16 * j;
      if (m < M && n < N) C[int64_t(m) * N + n] = acc[i][j] * global;
    }
  }
}

// ---- Launch -------------------------------------------------------------------------------------

struct Args {
  const uint16_t* A;
  const uint8_t* packed;
  const uint8_t* scale;
  int M, N, K, scale_cols, block;
  bool nvfp4;
  float global;
  float* C;
};

template <int R, bool VEC>
void launch_gemv(const Args& a, cudaStream_t stream) {
  const dim3 grid(unsigned((a.N + kGemvWarps - 1) / kGemvWarps), unsigned((a.M + R - 1) / R));
  gemv_kernel<R, VEC><<<grid, kGemvWarps * 32, 0, stream>>>(a.A, a.packed, a.scale, a.M, a.N, a.K, a.scale_cols,
                                                            a.block, a.nvfp4, a.global, a.C);
  SOL_CHECK_LAUNCH();
}

template <int R>
void launch_gemv_rows(const Args& a, bool vec, cudaStream_t stream) {
  if (vec)
    launch_gemv<R, true>(a, stream);
  else
    launch_gemv<R, false>(a, stream);
}

void launch(const Args& a, cudaStream_t stream) {
  if (a.M <= 16) {
    const bool vec = a.K % 8 == 0 && reinterpret_cast<uintptr_t>(a.packed) % 4 == 0 &&
                     reinterpret_cast<uintptr_t>(a.A) % 16 == 0;
    if (a.M == 1)
      launch_gemv_rows<1>(a, vec, stream);
    else if (a.M == 2)
      launch_gemv_rows<2>(a, vec, stream);
    else if (a.M <= 4)
      launch_gemv_rows<4>(a, vec, stream);
    else
      launch_gemv_rows<8>(a, vec, stream);
    return;
  }
  const dim3 grid(unsigned((a.N + kBN - 1) / kBN), unsigned((a.M + kBM - 1) / kBM));
  if (grid.y > 65535u) throw sol::AbiFailure(NIBBLE_ERR_NOT_SUPPORTED, "M too large for the tiled grid");
  tiled_kernel<<<grid, kTileThreads, 0, stream>>>(a.A, a.packed, a.scale, a.M, a.N, a.K, a.scale_cols, a.block,
                                                  a.nvfp4, a.global, a.C);
  SOL_CHECK_LAUNCH();
}

struct Handle {
  sol::GemmProblem g;
};

/** Check the problem; nothing to allocate or repack (the kernels read the harness's W as it is). */
std::unique_ptr<Handle> prepare(const nibble_gemm_problem* problem, cudaStream_t) {
  auto h = std::make_unique<Handle>();
  h->g = sol::parse_gemm_problem(problem);
  return h;
}

void run(Handle& h, const nibble_tensor* A, nibble_tensor* C, cudaStream_t stream) {
  const sol::GemmProblem& g = h.g;
  Args a{};
  sol::check_gemm_io(g, A, C, &a.A, &a.C);
  a.packed = g.packed;
  a.scale = g.scale;
  a.M = int(g.M);
  a.N = int(g.N);
  a.K = int(g.K);
  a.scale_cols = int(g.scale_cols);
  a.block = g.block;
  a.nvfp4 = g.nvfp4;
  a.global = g.nvfp4 ? g.global_scale : 1.0f;
  launch(a, stream);
}

/** Nothing but the handle to free (export.h deletes it). */
void teardown(Handle&, cudaStream_t) {}

}  // namespace
}  // namespace nibble::gemm_baseline

NIBBLE_GEMM_SOLUTION("gemm-baseline", nibble::gemm_baseline::prepare, nibble::gemm_baseline::run,
                     nibble::gemm_baseline::teardown);
