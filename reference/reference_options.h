// reference_options.h: the switches of the fp32 reference, one per feature a kernel can drop.
//
// The task's drop-the-feature cases (DESIGN.md "Gate and drop-the-feature cases"; the seed's
// precision table) are options of the one reference, not copies of it (STYLE.md, cutlass:
// "References apart from kernels"). The default-constructed value is the task's definition; every
// other value is a deliberately wrong (mutant) or a legitimately less precise variant. The kernels
// consult these fields at exactly one place each: dequant_element, rope_pair, kv_write_slot,
// gqa_kv_head and the GEMV-input rounding (reference_kernels.cuh).
//
// Plain C++ (trivially copyable, passed by value to kernels); usable from host code that does not
// see CUDA.
#pragma once

#include <cstdint>

#include "nibble/nibble.h"

/** The reference's one export beyond the ABI (libnibble_reference.so): a sentence on its numerics
 *  (cuBLAS math mode, TF32 off, what is fp64) for the grader to record in reports. Static string. */
extern "C" NIBBLE_EXPORT const char* nibble_reference_numerics(void);
typedef const char* (*nibble_reference_numerics_fn)(void);

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

/** How RoPE pairs the elements of a head. */
enum class RopeStyle : int32_t {
  RotateHalf = 0,  ///< the task (Llama/HF): pairs (i, i + hd/2)
  Interleaved = 1  ///< mutant (GPT-J style): pairs (2i, 2i + 1)
};

/** Which cache slot a step's K/V are written to. */
enum class KvSlot : int32_t {
  AtPos = 0,       ///< the task: slot pos
  AtPosPlusOne = 1 ///< mutant: slot pos + 1 (off by one; attention then reads a stale slot pos)
};

/** Which KV head query head j reads. */
enum class GqaMap : int32_t {
  Block = 0,  ///< the task: j / (n_q / n_kv)
  Modulo = 1  ///< mutant: j % n_kv
};

/** The reference's configuration. Default = the task. */
struct ReferenceOptions {
  NibbleOrder nibble_order = NibbleOrder::LowFirst;
  ScaleGrouping grouping = ScaleGrouping::PerGroup;
  bool use_zero_point = true;    ///< false: mutant "zero point ignored", value = code * scale (seed: 10.2)
  RopeStyle rope = RopeStyle::RotateHalf;
  KvSlot kv_slot = KvSlot::AtPos;
  GqaMap gqa = GqaMap::Block;
  bool bf16_dequant = false;     ///< legitimate variant: dequantised weights rounded to bf16 (the seed's own reference)
  bool bf16_gemv_inputs = false; ///< legitimate variant: every GEMV input vector rounded to bf16 (W4A16 activations)

  /** True for the task's own definition (every field at its default). */
  bool is_default() const {
    return nibble_order == NibbleOrder::LowFirst && grouping == ScaleGrouping::PerGroup && use_zero_point &&
           rope == RopeStyle::RotateHalf && kv_slot == KvSlot::AtPos && gqa == GqaMap::Block && !bf16_dequant &&
           !bf16_gemv_inputs;
  }
};

}  // namespace nibble::ref
