// variants.cpp: the table of decode-task variants (see variants.h).
#include "reference/decode/variants.h"

#include <stdexcept>

namespace nibble::ref {
namespace {

ReferenceOptions with(void (*set)(ReferenceOptions&)) {
  ReferenceOptions o;
  set(o);
  return o;
}

bool same(const ReferenceOptions& a, const ReferenceOptions& b) {
  return a.nibble_order == b.nibble_order && a.grouping == b.grouping && a.zero_point == b.zero_point &&
         a.rope == b.rope && a.kv_slot == b.kv_slot && a.gqa == b.gqa && a.bf16_dequant == b.bf16_dequant &&
         a.bf16_gemv_inputs == b.bf16_gemv_inputs && a.bf16_residual == b.bf16_residual && a.drop_sliver == b.drop_sliver;
}

}  // namespace

const std::vector<VariantInfo>& decode_variants() {
  // The seed's figures (full config, its own fixtures) are quoted where it measured the variant.
  static const std::vector<VariantInfo> table{
      {kDefaultVariant, true, "everything fp32, weights dequantised exactly (the task's definition)", "both",
       ReferenceOptions{}},
      {"bf16_dequant", true, "dequantised weight rounded to bf16 before the GEMV (the seed's own reference)",
       "both", with([](ReferenceOptions& o) { o.bf16_dequant = true; })},
      {"bf16_activations", true, "GEMV inputs rounded to bf16 (W4A16 activations), fp32 accumulation", "both",
       with([](ReferenceOptions& o) { o.bf16_gemv_inputs = true; })},
      {"bf16_residual", true, "residual stream h kept in bf16 (rounded after every add)", "both",
       with([](ReferenceOptions& o) { o.bf16_residual = true; })},
      {"nibble_swap", false, "nibble order swapped: high nibble = even input index (seed: 1.43)", "both",
       with([](ReferenceOptions& o) { o.nibble_order = NibbleOrder::HighFirst; })},
      {"row_scale", false, "one (scale, zero) per output row: the row's first group for every group (seed: 1.51)",
       "both", with([](ReferenceOptions& o) { o.grouping = ScaleGrouping::PerRow; })},
      {"no_zero", false, "zero point ignored: value = code * scale (seed: 10.2)", "both",
       with([](ReferenceOptions& o) { o.zero_point = ZeroPoint::Ignore; })},
      {"zero_off_by_one", false, "GPTQ-style zero off by one: value = (code - zero - 1) * scale", "both",
       with([](ReferenceOptions& o) { o.zero_point = ZeroPoint::SubtractPlusOne; })},
      {"rope_interleaved", false, "RoPE pairs (2i, 2i+1) instead of rotate-half (i, i+hd/2), same frequencies",
       "both", with([](ReferenceOptions& o) { o.rope = RopeStyle::Interleaved; })},
      {"kv_slot_plus1", false, "K/V appended at slot pos+1; attention over slots 0..pos reads a stale slot pos",
       "appended K/V", with([](ReferenceOptions& o) { o.kv_slot = KvSlot::AtPosPlusOne; })},
      {"gqa_modulo", false, "query head j reads KV head j % n_kv instead of j / (n_q/n_kv)", "both",
       with([](ReferenceOptions& o) { o.gqa = GqaMap::Modulo; })},
      {"logits_sliver", false,
       "the last 0.8% of every row's logits left 0 (reference/sliver.h): under the gate, for the per-element guard",
       "logits", with([](ReferenceOptions& o) { o.drop_sliver = true; })},
  };
  return table;
}

std::string decode_variant_names() {
  std::string s;
  for (const auto& v : decode_variants()) s += (s.empty() ? "" : ", ") + std::string(v.name);
  return s;
}

const VariantInfo& find_decode_variant(const std::string& name) {
  for (const auto& v : decode_variants())
    if (name == v.name) return v;
  throw std::invalid_argument("unknown variant '" + name + "'; valid variants: " + decode_variant_names());
}

ReferenceOptions variant_options(const std::string& name) { return find_decode_variant(name).options; }

const char* variant_name(const ReferenceOptions& opt) {
  for (const auto& v : decode_variants())
    if (same(v.options, opt)) return v.name;
  return nullptr;
}

}  // namespace nibble::ref
