// variants.h: the named variants of the decode task's reference, the rows of the drop-the-feature
// table (issue 3; the seed's "Where the tolerance comes from").
//
// Each variant is a ReferenceOptions value (reference_options.h), never a copy of the reference:
// the fp32 reference (nibble_reference_set_variant in libnibble_reference.so), the fp64 oracle
// (DecodeOracle's options argument) and the grader's calibrate command all select one by name
// from this one table. CPU-only, no CUDA.
//
//   must pass the gate (legitimate precision): fp32 (the default), bf16_dequant, bf16_activations,
//                                              bf16_residual
//   must fail it (a dropped feature):          nibble_swap, row_scale, no_zero, zero_off_by_one,
//                                              rope_interleaved, kv_slot_plus1, gqa_modulo
#pragma once

#include <string>
#include <vector>

#include "reference/decode/reference_options.h"

namespace nibble::ref {

/** One row of the variant table. */
struct VariantInfo {
  const char* name;         ///< the selector, e.g. "nibble_swap"
  bool must_pass;           ///< true: a legitimate precision choice, must stay below half the gate;
                            ///< false: a dropped feature, must land above twice the gate
  const char* description;  ///< one line for the calibrate table
  /** Which of the grader's checks the variant is judged by: "logits", "appended K/V" or "both".
   *  For a must-fail variant, the check(s) it is expected to fail; "appended K/V" marks one whose
   *  logits error is structurally small (kv_slot_plus1) and that only the appended-K/V comparison
   *  is relied on to reject. For a must-pass variant, "both": both errors must stay small. */
  const char* caught_by;
  ReferenceOptions options;  ///< the switches that implement it
};

/** The name of the default variant, the task's own definition ("fp32"). */
inline constexpr const char* kDefaultVariant = "fp32";

/** Every variant, the default first, then the other must-pass ones, then the must-fail ones. */
const std::vector<VariantInfo>& decode_variants();

/** The variant called `name`. Throws std::invalid_argument naming it and listing the valid names. */
const VariantInfo& find_decode_variant(const std::string& name);

/** The options of the variant called `name` (find_decode_variant(name).options); throws like it. */
ReferenceOptions variant_options(const std::string& name);

/** The valid names, comma-separated, in table order (for error messages and --help). */
std::string decode_variant_names();

/** The name of the table row whose options equal `opt`, or nullptr when no row has them. */
const char* variant_name(const ReferenceOptions& opt);

}  // namespace nibble::ref
