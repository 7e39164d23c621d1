// gemm_reference_abi.cu: the fp32 cuBLAS reference of the FP4 dequant-GEMM tasks (issue 7), as an
// ABI solution (include/nibble/nibble_gemm.h), built as libnibble_gemm_reference.so and run by the
// grader in a child process exactly like a candidate.
//
//   gemm-w4a16-nvfp4  C (M, N) = A (M, K) W^T, W[n, k] = e2m1(code) * e4m3fn(scale[n, k/16]) * global
//   gemm-bf16-mxfp4   C (M, N) = A (M, K) W^T, W[n, k] = e2m1(code) * 2^(e8m0(scale[n, k/32]) - 127)
//
// prepare  dequantises W exactly to fp32 into its own (N, K) buffer (4 N K bytes: 100 MB at
//          N = 8192, K = 3072). NVFP4 stores e2m1 * e4m3 (at most 2 + 4 significant bits: exact)
//          and leaves the global scale out: e2m1 * e4m3 * global needs up to 30 bits, more than
//          fp32's 24 (fixtures/fp4.h), so the global is applied to C instead, as cuBLAS's alpha.
//          MXFP4's e2m1 * 2^(e - 127) is exact.
// run      reference/gemm_sgemm.cuh: cublasSgemm in pedantic fp32, C = alpha A W^T with alpha =
//          global (NVFP4) or 1.
//
// Variants: nibble_reference_set_variant(name) before prepare selects a row of reference/
// gemm_oracle.h's variant table (gemm_variants()), a GemmOptions value, exactly the options of the
// fp64 oracle: dequant_value() below is the one place that reads them (nibble order, block scales
// ignored, NVFP4 blocks of 32, subnormals as normals, e8m0 bias, global as divisor, W rounded to
// bf16) and run() reads the bf16 output rounding. The must-pass bf16_dequant_fp32_acc row: W
// rounded once from its exact value (the global scale included) to bf16, bf16 A (already), an
// fp32 GEMM, C rounded to bf16. The default "fp32" is the task, bit for bit the same as without
// the call.
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "fixtures/bf16.h"
#include "nibble/nibble_gemm.h"
#include "reference/gemm_fp4/gemm_oracle.h"
#include "reference/gemm_sgemm.cuh"
#include "reference/sliver.h"
#include "reference/variant_exports.h"
#include "solutions/common/abi_util.h"
#include "solutions/common/cublas_check.h"
#include "solutions/common/export.h"
#include "solutions/common/gemm_abi_util.h"

namespace nibble::gemmref {
namespace {

using oracle::GemmOptions;
using sol::AbiFailure;

// ---- The dequantisation, in the order of the oracle's Fp4WeightView::at -------------------------

/** e2m1 magnitudes of codes 0..7 (OCP MX v1.0, FP4 E2M1); sign in bit 3. */
__constant__ float kE2m1Magnitude[8] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f};

__device__ float e2m1_value(int code, bool subnormal_as_normal) {
  const int mag = code & 7;
  const float v = (subnormal_as_normal && mag == 1) ? 0.75f : kE2m1Magnitude[mag];
  return (code & 8) ? -v : v;
}

/** float8_e4m3fn: bias 7, exponent 0 subnormal (m * 2^-9), S.1111.111 NaN, no Inf. Exact. */
__device__ float e4m3_value(int byte) {
  const int e = (byte >> 3) & 0xF, m = byte & 7;
  if ((byte & 0x7F) == 0x7F) return __int_as_float(0x7FC00000);
  const float mag = e == 0 ? ldexpf(float(m), -9) : ldexpf(1.0f + float(m) / 8.0f, e - 7);
  return (byte & 0x80) ? -mag : mag;
}

/** e8m0: 2^(e - bias) (bias 127; 125 for a mutant); 0xFF is NaN. Exact (fp32 subnormal at e = 0). */
__device__ float e8m0_value(int byte, int bias) {
  if (byte == 0xFF) return __int_as_float(0x7FC00000);
  return ldexpf(1.0f, byte - bias);
}

/** double -> nearest bf16 (ties to even) in ONE rounding, returned as fp32: round to fp32 toward
 *  zero with a sticky bit (round to odd: 24 bits >= 8 + 2), then fp32 -> bf16 RNE. The oracle
 *  rounds the exact double value once (oracle::round_bf16); rounding to fp32 first and then to bf16
 *  could differ at a double rounding. */
__device__ float round_bf16_once(double x) {
  float f = __double2float_rz(x);
  if (double(f) != x) f = __uint_as_float(__float_as_uint(f) | 1u);
  return round_bf16(f);
}

/** W[n, k] of the selected variant, as the fp32 the GEMM reads. Without bf16_dequant: e2m1 * block
 *  scale, exact, the global factor left to alpha. With it: (e2m1 * block scale * global factor),
 *  exact in double, rounded once to bf16 (alpha is then 1). */
__device__ float dequant_value(const uint8_t* packed, const uint8_t* scale, int64_t n, int64_t k, int64_t K,
                               int64_t scale_cols, bool nvfp4, const GemmOptions& o, double global_factor) {
  const uint8_t byte = packed[n * (K / 2) + k / 2];
  const bool low = ((k & 1) == 0) != o.nibble_swap;
  const int code = low ? (byte & 0xF) : (byte >> 4);
  const int block = o.scale_block > 0 ? o.scale_block : (nvfp4 ? 16 : 32);
  const int64_t col = k / block;  // < scale_cols: the only override (32 on NVFP4) is coarser
  float s = 1.0f;
  if (!o.ignore_block_scales) {
    const int sb = scale[n * scale_cols + col];
    s = nvfp4 ? e4m3_value(sb) : e8m0_value(sb, o.e8m0_bias);
  }
  const float w = e2m1_value(code, o.subnormal_as_normal) * s;  // exact
  return o.bf16_dequant ? round_bf16_once(double(w) * global_factor) : w;
}

__global__ void dequant_kernel(const uint8_t* __restrict__ packed, const uint8_t* __restrict__ scale, int64_t N,
                               int64_t K, int64_t scale_cols, bool nvfp4, GemmOptions o, double global_factor,
                               float* __restrict__ W) {
  const int64_t total = N * K;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x)
    W[i] = dequant_value(packed, scale, i / K, i % K, K, scale_cols, nvfp4, o, global_factor);
}

using sol::grid_stride_blocks;
using sol::kGridStrideThreads;

// ---- Variant selection ----------------------------------------------------------------------------

/** Index into oracle::gemm_variants() (row 0 is "fp32", the task) that the next prepare builds.
 *  Process-wide; the grader runs one variant per child process. */
std::atomic<size_t> g_variant{0};

const oracle::GemmVariantInfo& selected_variant() { return oracle::gemm_variants().at(g_variant.load()); }

// ---- The handle -----------------------------------------------------------------------------------

struct Reference {
  sol::GemmProblem g;
  GemmOptions opt;
  float alpha = 1.0f;  // the global factor when W leaves it out
  ref::SgemmReference gemm;
};

std::unique_ptr<Reference> prepare(const nibble_gemm_problem* problem, cudaStream_t stream) {
  auto r = std::make_unique<Reference>();
  r->g = sol::parse_gemm_problem(problem);
  const sol::GemmProblem& g = r->g;
  const oracle::GemmVariantInfo& v = selected_variant();
  if (!(g.nvfp4 ? v.nvfp4 : v.mxfp4))
    throw AbiFailure(NIBBLE_ERR_INVALID_ARGUMENT,
                     std::string("variant '") + v.name + "' does not apply to task " + problem->task);
  r->opt = v.options;
  // The oracle's global_factor(): global, 1/global (mutant), 1 for MXFP4.
  const double gf = !g.nvfp4 ? 1.0 : (r->opt.global_as_divisor ? 1.0 / double(g.global_scale) : double(g.global_scale));
  r->alpha = r->opt.bf16_dequant ? 1.0f : float(gf);
  r->gemm.init(g.M, g.N, g.K, stream);
  dequant_kernel<<<grid_stride_blocks(g.N * g.K), kGridStrideThreads, 0, stream>>>(g.packed, g.scale, g.N, g.K, g.scale_cols,
                                                                          g.nvfp4, r->opt, gf, r->gemm.W);
  SOL_CHECK_LAUNCH();
  // Untimed: wait, so a fault is reported by prepare rather than the first run.
  SOL_CUDA(cudaStreamSynchronize(stream));
  return r;
}

void run(Reference& r, const nibble_tensor* A, nibble_tensor* C, cudaStream_t stream) {
  r.gemm.run(A, C, r.alpha, r.opt.bf16_output, r.opt.drop_sliver, stream);
}

/** After the stream is drained (export.h): the dequantised weights, scratch and cuBLAS, checked. */
void teardown(Reference& r, cudaStream_t) { r.gemm.release(); }

}  // namespace
}  // namespace nibble::gemmref

// ---- The C ABI ------------------------------------------------------------------------------------

NIBBLE_GEMM_SOLUTION("gemm-reference-fp32-cublas", nibble::gemmref::prepare, nibble::gemmref::run,
                     nibble::gemmref::teardown);

// The reference's own exports (reference/variant_exports.h): the variant and the numerics sentence.
namespace nibble::gemmref {
namespace {
const std::vector<ref::VariantRow>& variant_rows() {
  static const std::vector<ref::VariantRow> rows = [] {
    std::vector<ref::VariantRow> r;
    for (const auto& v : oracle::gemm_variants())
      r.push_back({v.name, v.description, v.must_pass, std::strcmp(v.name, "fp32") == 0});
    return r;
  }();
  return rows;
}
constexpr const char* kNumerics =
    "cublasSgemm fp32 (fp32 compute), math mode CUBLAS_PEDANTIC_MATH, TF32 off; weights dequantised exactly to "
    "fp32 (NVFP4: e2m1 * e4m3, the global scale applied as the GEMM's alpha); A bf16 -> fp32 exactly";
}  // namespace
}  // namespace nibble::gemmref

NIBBLE_REFERENCE_VARIANT_EXPORTS(nibble::gemmref::kNumerics, nibble::gemmref::variant_rows(), nibble::gemmref::g_variant)
