// int4_gemm_reference_abi.cu: the fp32 cuBLAS reference of gemm-w4a16-int4 (issue 24), as an ABI
// solution (include/nibble/nibble_gemm.h), built as libnibble_int4_gemm_reference.so and run by the
// grader in a child process exactly like a candidate. It takes the plain layout (no
// nibble_gemm_int4_layout export).
//
//   C (M, N) = A (M, K) W^T, W[n, k] = (q[n, k] - zero[n, k/128]) * fp16 scale[n, k/128]
//
// prepare  dequantises W to fp32 into its own (N, K) buffer (4 N K bytes: 235 MB at N = 14336,
//          K = 4096): |q - z| <= 15 (4 bits) times an fp16 (11 significant bits) is exact in fp32.
// run      reference/gemm_sgemm.cuh: cublasSgemm in pedantic fp32 (no TF32), C = A W^T.
//
// Variants: nibble_reference_set_variant(name) before prepare selects a row of the fp64 oracle's
// table (reference/int4_gemm/int4_gemm_oracle.h, int4_gemm_variants()), an Int4GemmOptions value;
// dequant_value() below is the one place that reads the options, in the order of the oracle's
// int4_weight(), and run() the sliver and the bf16 output. Row "fp32" is the task; fp32_accumulate computes the same as
// it here (cuBLAS's fp32 sums are that variant: the oracle measures it against fp64).
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "fixtures/bf16.h"
#include "nibble/nibble_gemm.h"
#include "reference/int4_gemm/int4_gemm_oracle.h"
#include "reference/gemm_sgemm.cuh"
#include "reference/variant_exports.h"
#include "solutions/common/abi_util.h"
#include "solutions/common/export.h"
#include "solutions/common/gemm_abi_util.h"

namespace nibble::int4ref {
namespace {

using oracle::Int4GemmOptions;

/** AWQ's nibble order (fixtures/int4_formats.h kAwqOrder), for awq_order_ignored. */
__constant__ int kAwqOrderDev[8] = {0, 2, 4, 6, 1, 3, 5, 7};

/** fp16 bits -> fp32, exact (subnormals included). */
__device__ float f16_value(uint16_t h) {
  const int e = (h >> 10) & 0x1F, m = h & 0x3FF;
  float v;
  if (e == 0)
    v = ldexpf(float(m), -24);
  else if (e == 31)
    v = m ? __int_as_float(0x7FC00000) : __int_as_float(0x7F800000);
  else
    v = ldexpf(float(m | 0x400), e - 25);
  return (h & 0x8000) ? -v : v;
}

/** W[n, k] of the selected variant, as the fp32 the GEMM reads (oracle::int4_weight's order). */
__device__ float dequant_value(const sol::Int4Problem& g, int64_t n, int64_t k, const Int4GemmOptions& o) {
  const int64_t G = g.groups;
  const int64_t nc = o.awq_order_ignored ? (n / 8) * 8 + kAwqOrderDev[n % 8] : n;
  int64_t grp = k / 128;
  if (o.g_idx_ignored) grp = (grp + G - 1) % G;
  if (o.scales_per_row) grp = 0;
  const uint8_t byte = g.packed[nc * (g.K / 2) + k / 2];
  const bool low = ((k & 1) == 0) != o.nibble_swap;
  const int q = low ? (byte & 0xF) : (byte >> 4);
  int z = g.zero[nc * G + grp];
  if (o.gptq_zero_not_plus_one) z -= 1;
  if (o.gptq_zero_plus_one) z += 1;
  const float v = float(q - z) * f16_value(g.scale[n * G + grp]);  // exact
  return o.bf16_dequant ? round_bf16(v) : v;
}

__global__ void dequant_kernel(sol::Int4Problem g, Int4GemmOptions o, float* __restrict__ W) {
  const int64_t total = g.N * g.K;
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += int64_t(gridDim.x) * blockDim.x)
    W[i] = dequant_value(g, i / g.K, i % g.K, o);
}

// ---- Variant selection ----------------------------------------------------------------------------

/** The rows: "fp32" (the task) then the oracle's table. */
const std::vector<ref::VariantRow>& variant_rows() {
  static const std::vector<ref::VariantRow> rows = [] {
    std::vector<ref::VariantRow> r{{"fp32", "the task", true, true}};
    for (const auto& v : oracle::int4_gemm_variants()) r.push_back({v.name, v.description, v.must_pass, false});
    return r;
  }();
  return rows;
}
/** The selected row (0: the task). Process-wide; the grader runs one variant per child process. */
std::atomic<size_t> g_variant{0};

Int4GemmOptions selected_options() {
  const size_t i = g_variant.load();
  return i == 0 ? Int4GemmOptions{} : oracle::int4_gemm_variants().at(i - 1).options;
}

constexpr const char* kNumerics =
    "cublasSgemm fp32 (fp32 compute), math mode CUBLAS_PEDANTIC_MATH, TF32 off; weights dequantised exactly to "
    "fp32 ((q - zero) * fp16 scale); A bf16 -> fp32 exactly";

// ---- The handle -----------------------------------------------------------------------------------

struct Reference {
  Int4GemmOptions opt;
  ref::SgemmReference gemm;
};

std::unique_ptr<Reference> prepare(const nibble_gemm_problem* problem, cudaStream_t stream) {
  auto r = std::make_unique<Reference>();
  const sol::Int4Problem g = sol::parse_int4_problem(problem, NIBBLE_INT4_LAYOUT_PLAIN);
  r->opt = selected_options();
  r->gemm.init(g.M, g.N, g.K, stream);
  dequant_kernel<<<sol::grid_stride_blocks(g.N * g.K), sol::kGridStrideThreads, 0, stream>>>(g, r->opt, r->gemm.W);
  SOL_CHECK_LAUNCH();
  SOL_CUDA(cudaStreamSynchronize(stream));  // a fault is reported by prepare rather than the first run
  return r;
}

void run(Reference& r, const nibble_tensor* A, nibble_tensor* C, cudaStream_t stream) {
  r.gemm.run(A, C, 1.0f, r.opt.bf16_output, r.opt.drop_sliver, stream);
}

void teardown(Reference& r, cudaStream_t) { r.gemm.release(); }

}  // namespace
}  // namespace nibble::int4ref

NIBBLE_GEMM_SOLUTION("int4-gemm-reference-fp32-cublas", nibble::int4ref::prepare, nibble::int4ref::run,
                     nibble::int4ref::teardown);

NIBBLE_REFERENCE_VARIANT_EXPORTS(nibble::int4ref::kNumerics, nibble::int4ref::variant_rows(), nibble::int4ref::g_variant)
