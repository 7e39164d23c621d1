// reference_options.h: the switches of the fp32 reference and of the fp64 oracle, one per feature
// a kernel can drop and one per legitimate precision choice.
//
// The task's drop-the-feature cases (DESIGN.md "Gate and drop-the-feature cases"; the seed's
// precision table; issue 3) are options of the one reference and of the one oracle, not copies of
// them (STYLE.md, cutlass: "References apart from kernels"). The default-constructed value is the
// task's definition; every other value is a deliberately wrong (mutant) or a legitimately less
// precise variant. The named variants (the table `calibrate` prints) map onto these fields in
// reference/decode/variants.h. The kernels consult the feature fields at exactly one place each:
// dequant_element, rope_pair, kv_write_slot, gqa_kv_head (reference_kernels.cuh); the oracle in
// the pieces of the same names (oracle_fp64.h). The bf16 rounding points are read by the step
// functions of both (reference_abi.cu step(), DecodeOracle::step).
//
// Plain C++ (trivially copyable, passed by value to kernels); usable from host code that does not
// see CUDA (the oracle, the grader).
#pragma once

#include <cstdint>

#include "nibble/nibble.h"

// ---- The reference's exports beyond the ABI (libnibble_reference.so), all optional to a loader ----

/** A sentence on the reference's numerics (cuBLAS math mode, TF32 off, what is fp64, and the
 *  selected variant when it is not the default: "...; VARIANT <name> (...): <description>") for the
 *  grader to record in reports. Static string (each stays valid for the library's lifetime). */
extern "C" NIBBLE_EXPORT const char* nibble_reference_numerics(void);
typedef const char* (*nibble_reference_numerics_fn)(void);

/**
 * Select the variant (reference/decode/variants.h: "fp32", the default, or a drop-the-feature / precision
 * variant by name) that the NEXT nibble_decode_build_model builds; a model already built keeps the
 * variant it was built with. Process-wide: the grader runs one variant per child process.
 * @param name  a name from decode_variants(); NULL or unknown gives NIBBLE_ERR_INVALID_ARGUMENT
 *              with the list of valid names in err, and leaves the selection unchanged.
 */
extern "C" NIBBLE_EXPORT nibble_status nibble_reference_set_variant(const char* name, nibble_error* err);
typedef nibble_status (*nibble_reference_set_variant_fn)(const char* name, nibble_error* err);

/** The name of the variant currently selected ("fp32" unless nibble_reference_set_variant chose
 *  another). Static string. */
extern "C" NIBBLE_EXPORT const char* nibble_reference_variant(void);
typedef const char* (*nibble_reference_variant_fn)(void);

namespace nibble::ref {

/** Which nibble of packed[o, i/2] holds the even input index. */
enum class NibbleOrder : int32_t {
  LowFirst = 0,  ///< the task: low nibble = even index
  HighFirst = 1  ///< mutant: nibble order swapped (seed: relerr 1.43)
};

/** Which (scale, zero) an element uses. */
enum class ScaleGrouping : int32_t {
  PerGroup = 0,  ///< the task: (o, i / group)
  PerRow = 1     ///< mutant: the row's first group for the whole row (seed: 1.51)
};

/** How the zero point enters the dequantisation. */
enum class ZeroPoint : int32_t {
  Subtract = 0,       ///< the task: (code - zero) * scale
  Ignore = 1,         ///< mutant: code * scale, the quantisation taken as symmetric (seed: 10.2)
  SubtractPlusOne = 2 ///< mutant: (code - zero - 1) * scale, GPTQ's stored-zero-minus-one convention misapplied
};

/** How RoPE pairs the elements of a head. Both use inv_freq_i = theta^(-2i/hd) for pair i. */
enum class RopeStyle : int32_t {
  RotateHalf = 0,  ///< the task (Llama/HF): pair i is (i, i + hd/2)
  Interleaved = 1  ///< mutant (GPT-J style): pair i is (2i, 2i + 1)
};

/** Which cache slot a step's K/V are written to. */
enum class KvSlot : int32_t {
  AtPos = 0,       ///< the task: slot pos
  AtPosPlusOne = 1 ///< mutant: slot pos + 1, none when pos + 1 == max_seq (off by one; attention
                   ///< still covers slots 0..pos, so it reads a stale slot pos)
};

/** Which KV head query head j reads. */
enum class GqaMap : int32_t {
  Block = 0,  ///< the task: j / (n_q / n_kv)
  Modulo = 1  ///< mutant: j % n_kv
};

/** The reference's (and the oracle's) configuration. Default = the task. */
struct ReferenceOptions {
  NibbleOrder nibble_order = NibbleOrder::LowFirst;
  ScaleGrouping grouping = ScaleGrouping::PerGroup;
  ZeroPoint zero_point = ZeroPoint::Subtract;
  RopeStyle rope = RopeStyle::RotateHalf;
  KvSlot kv_slot = KvSlot::AtPos;
  GqaMap gqa = GqaMap::Block;
  bool bf16_dequant = false;     ///< legitimate: dequantised weights rounded to bf16 (the seed's own reference)
  bool bf16_gemv_inputs = false; ///< legitimate: every GEMV input vector (the normed activations, the
                                 ///< attention output, silu(gate) * up) rounded to bf16 (W4A16 activations)
  bool bf16_residual = false;    ///< legitimate: the residual stream h kept in bf16: rounded when the
                                 ///< embedding row is loaded and after every residual add
  bool drop_sliver = false;      ///< mutant: the last sliver_columns(vocab) logits of every row left 0
                                 ///< (reference/sliver.h)

  /** True for the task's own definition (every field at its default). */
  bool is_default() const {
    return nibble_order == NibbleOrder::LowFirst && grouping == ScaleGrouping::PerGroup &&
           zero_point == ZeroPoint::Subtract && rope == RopeStyle::RotateHalf && kv_slot == KvSlot::AtPos &&
           gqa == GqaMap::Block && !bf16_dequant && !bf16_gemv_inputs && !bf16_residual && !drop_sliver;
  }
};

}  // namespace nibble::ref
