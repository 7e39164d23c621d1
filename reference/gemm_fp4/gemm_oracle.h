// gemm_oracle.h: the fp64 CPU oracle of the FP4 dequant-GEMM tasks (issue 7), and their variants.
//
// C (M, N) = A (M, K) * dequant(W)^T in double precision, from the fixture's bytes, written for
// clarity only (the fp32 cuBLAS reference is checked against it on small shapes):
//   A[m, k]  bf16 -> double, exact
//   W[n, k]  NVFP4: e2m1(code) * e4m3fn(scale[n, k/16]) * global     (2 + 4 + 24 bits: exact)
//            MXFP4: e2m1(code) * 2^(e8m0(scale[n, k/32]) - 127)      (exact)
//            code = low nibble of packed[n, k/2] for even k, high nibble for odd k
//   C[m, n]  sum over k in index order of A[m, k] * W[n, k], each product exact (8 + 30 bits), the
//            sum rounded to double at each add: relative error ~K * 2^-53, far below any gate.
//
// Variants (the rows of the drop-the-feature table, issue 7 "Reference, gate, variants") are
// options of this one oracle (GemmOptions), named in gemm_variants():
//   must pass   fp32                  the task's definition (the default options)
//               bf16_dequant_fp32_acc W rounded to bf16, products and sums in fp32 (index order), C
//                                     rounded to bf16: what a bf16 tensor-core kernel computes
//   must fail   nibble_swap           high nibble = even k
//               no_block_scale        every block scale taken as 1 (the global scale kept)
//               scale_block_32        NVFP4 only: element k reads scale[n, k/32] (blocks of 32 on the
//                                     per-16 scale tensor, its row stride unchanged)
//               subnormal_as_normal   codes 0x1 / 0x9 decoded as +-0.75 (exponent field 0 read as a
//                                     normal 2^-1 * 1.5) instead of +-0.5; zero stays zero
//               e8m0_bias_125         MXFP4 only: 2^(e - 125)
//               global_as_divisor     NVFP4 only: e2m1 * e4m3 / global
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "fixtures/gemm_fp4/gemm_config.h"
#include "fixtures/safetensors.h"

namespace nibble::oracle {

/** The oracle's switches. Default-constructed = the task's definition. */
struct GemmOptions {
  bool nibble_swap = false;          ///< mutant: the HIGH nibble holds the even k
  bool ignore_block_scales = false;  ///< mutant: block scale = 1
  int scale_block = 0;               ///< 0: the task's block (16 / 32); mutant scale_block_32: 32
  bool subnormal_as_normal = false;  ///< mutant: e2m1 codes 0x1 / 0x9 -> +-0.75
  int e8m0_bias = 127;               ///< mutant e8m0_bias_125: 125
  bool global_as_divisor = false;    ///< mutant: W = e2m1 * e4m3 / global
  bool bf16_dequant = false;         ///< legitimate: W rounded to bf16 (RNE, from the exact value)
  bool fp32_accumulate = false;      ///< legitimate: products and the k-ordered sum in fp32
  bool bf16_output = false;          ///< legitimate: C rounded to bf16 (RNE)
  bool drop_sliver = false;          ///< mutant: the last sliver_columns(N) columns of C left 0 (reference/sliver.h)
};

/** The e2m1 code of element k from the byte packed[n, k/2] that holds it (low nibble = even k, or
 *  the high one under nibble_swap). */
int fp4_code(uint8_t byte, int64_t k, bool nibble_swap = false);

/** e2m1 code -> value: fp4::e2m1_decode, or +-0.75 for 0x1 / 0x9 under subnormal_as_normal. */
double e2m1_value(int code, bool subnormal_as_normal = false);

/** The scale column element k reads: k / block, block = options.scale_block if set, else the
 *  format's (16 NVFP4, 32 MXFP4). */
int64_t scale_column(int64_t k, Fp4Format format, const GemmOptions& o = {});

/** A block scale byte -> value: e4m3fn (NVFP4) or 2^(e - o.e8m0_bias) (MXFP4); 1 under
 *  ignore_block_scales. Exact. */
double block_scale_value(uint8_t byte, Fp4Format format, const GemmOptions& o = {});

/** The factor the global scale contributes: global (NVFP4), 1/global under global_as_divisor,
 *  1 for MXFP4. */
double global_factor(float global, Fp4Format format, const GemmOptions& o = {});

/** double -> bf16 -> double, round to nearest even in one rounding (oracle::round_to_bf16). */
double round_bf16(double x);

/**
 * A read-only view of one FP4 weight, logical (N, K), with the options its at() applies.
 * Pointers are borrowed (a GemmFixtureData's vectors or a SafetensorsFile's mapping).
 */
struct Fp4WeightView {
  Fp4Format format = Fp4Format::Nvfp4;
  const uint8_t* packed = nullptr;  // (N, K/2)
  const uint8_t* scale = nullptr;   // (N, ceil(K/block)), block = 16 or 32 by format
  float global_scale = 1.0f;        // NVFP4; ignored for MXFP4
  int64_t N = 0, K = 0;
  GemmOptions options{};

  /** Columns of the scale tensor: ceil(K / 16) or ceil(K / 32). */
  int64_t scale_cols() const;
  /** W[n, k] under `options`: e2m1 * scale * global-factor, exact in double unless bf16_dequant. */
  double at(int64_t n, int64_t k) const;
  /** Row n into dst[0, K). */
  void row(int64_t n, double* dst) const;
};

/**
 * C = A W^T (M, N) row-major. A is (M, K) bf16 bits (K = W.K). Double, k-ordered sums; under
 * W.options.fp32_accumulate, fp32 products and sums (in k order); under bf16_output every C
 * element rounded to bf16. `threads` (>= 1) splits rows of C; the result does not depend on it.
 */
std::vector<double> gemm(const uint16_t* A, int64_t M, const Fp4WeightView& W, int threads = 1);

/**
 * The oracle on an open fixture: checks its tensors against cfg (gemm_fixture_view), then gemm, on
 * the fixture's A or, when given, on `a` (M x K bf16 bits: a call's A with its sign mask).
 * Throws std::runtime_error naming a missing or mis-shaped tensor.
 */
std::vector<double> gemm_fixture(const GemmConfig& cfg, const SafetensorsFile& fixture, const GemmOptions& o = {},
                                 int threads = 1, const uint16_t* a = nullptr);


/** One row of the GEMM variant table. */
struct GemmVariantInfo {
  const char* name;
  bool must_pass;           ///< a legitimate precision choice (true) or a dropped feature (false)
  bool nvfp4, mxfp4;        ///< the tasks it applies to
  const char* description;  ///< one line for the calibrate table
  GemmOptions options;
};

/** Every variant: fp32 (the default) first, the must-pass one, then the must-fail ones. */
const std::vector<GemmVariantInfo>& gemm_variants();

/** The variants that apply to `task` (a GEMM task name; throws std::invalid_argument otherwise). */
std::vector<GemmVariantInfo> gemm_variants_for(const std::string& task);

/** The variant `name` of `task`; throws std::invalid_argument listing the task's names. */
const GemmVariantInfo& find_gemm_variant(const std::string& task, const std::string& name);

}  // namespace nibble::oracle
