// int4_gemm_oracle.h: the fp64 CPU oracle of gemm-w4a16-int4 (issue 24) and its variants.
//
// C (M, N) = A (M, K) * W^T in double precision from the fixture's bytes, written for clarity only:
//   A[m, k]  bf16 -> double, exact
//   W[n, k]  (q[n, k] - zero[n, k/128]) * fp16(scale[n, k/128])   (|q - z| <= 15 times an fp16: exact)
//            q = low nibble of packed[n, k/2] for even k, high nibble for odd k
//   C[m, n]  the k-ordered sum of exact products (8 + 15 bits), rounded to double at each add
//
// Variants (options of this one oracle, named in int4_gemm_variants()): each is what a kernel that
// drops one feature of a layout computes, read back into the plain layout.
//   must pass  fp32_accumulate        products and k-ordered sums in fp32
//              bf16_output            W rounded to bf16, fp32 sums, C rounded to bf16: a kernel that
//                                     asks for a bf16 C (nibble_gemm_output_dtype)
//              bf16_dequant           W rounded to bf16 (RNE) before fp32 products and sums: what a
//                                     bf16 tensor-core kernel computes
//   must fail  nibble_swap            the HIGH nibble holds the even k
//              awq_order_ignored      AWQ words read in the identity order: output n = 8c + i gets
//                                     the code and zero of output 8c + kAwqOrder[i]
//              gptq_zero_not_plus_one GPTQ qzeros read without adding 1 back: zero - 1
//              gptq_zero_plus_one     a true zero point read with GPTQ v1's rule (vLLM PR 38966):
//                                     zero + 1, every weight one scale step off
//              g_idx_ignored          the gptq_g_idx layout read as if g_idx were k / 128: group g
//                                     gets the scale and zero of the group whose label is g
//                                     (int4_gemm_g_idx_labels: group (g - 1) mod G)
//              scales_per_row         one scale and zero per row (group 0's) for every group
//              c_sliver               the last sliver_columns(N) columns of C left 0 (reference/sliver.h)
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "fixtures/int4_gemm/int4_gemm_fixture.h"
#include "fixtures/safetensors.h"

namespace nibble::oracle {

/** The oracle's switches; default-constructed = the task's definition. */
struct Int4GemmOptions {
  bool nibble_swap = false;
  bool awq_order_ignored = false;
  bool gptq_zero_not_plus_one = false;
  bool gptq_zero_plus_one = false;
  bool g_idx_ignored = false;
  bool scales_per_row = false;
  bool bf16_dequant = false;
  bool bf16_output = false;  ///< C rounded to bf16 (RNE) at the end
  bool fp32_accumulate = false;
  bool drop_sliver = false;
};

/** One row of the variant table. */
struct Int4GemmVariant {
  std::string name, description;
  bool must_pass = false;
  Int4GemmOptions options;
};

/** The variants above, must-pass first. */
const std::vector<Int4GemmVariant>& int4_gemm_variants();

/** W[n, k] of the plain triple `w` under `o` (exact in double unless bf16_dequant). */
double int4_weight(const Int4Plain& w, int64_t n, int64_t k, const Int4GemmOptions& o = {});

/**
 * C = A W^T (M, N) row-major; A (M, K) bf16 bits with K = w.K. Double and k-ordered unless
 * fp32_accumulate or bf16_dequant (fp32 products and sums); each C rounded to bf16 under bf16_output. `threads` (>= 1) splits rows of W; the
 * result does not depend on it. Throws std::invalid_argument for a malformed `w`.
 */
std::vector<double> int4_gemm(const uint16_t* A, int64_t M, const Int4Plain& w, const Int4GemmOptions& o = {},
                              int threads = 1);

/** The oracle on an open fixture (int4_gemm_fixture_view checks it), on the fixture's A or on `a`
 *  (a call's A, M x K bf16 bits). Throws std::runtime_error for a missing or mis-shaped tensor. */
std::vector<double> int4_gemm_fixture(const Int4GemmConfig& cfg, const SafetensorsFile& fixture,
                                      const Int4GemmOptions& o = {}, int threads = 1, const uint16_t* a = nullptr);

}  // namespace nibble::oracle
