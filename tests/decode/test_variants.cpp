// test_variants.cpp: the decode task's variants (reference/decode/variants.h), on the CPU.
//
// 1. The table: names, the default row, lookup errors, the name <-> options mapping.
// 2. Each variant's piece of math in the fp64 oracle, against values worked out by hand: the
//    dequantisation of a chosen byte pattern, RoPE pairing, the GQA head map, the KV write slot.
// 3. The oracle run with each variant on a tiny fixture (seed 0, the 8 checked steps) against the
//    exact oracle, measured the way the grader measures a candidate (logits relative error; K/V at
//    slot pos, max of K's and V's relative error): every must-fail variant above twice the gate in
//    the check(s) its table row names, every must-pass one below half of it. The table is printed.
// The fp32 reference's kernels implement the same options; test_reference_gpu compares each of
// its variants with the oracle's on a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <set>
#include <stdexcept>
#include <string>
#include <vector>

#include "fixtures/decode/decode_fixture.h"
#include "fixtures/fixture.h"
#include "fixtures/safetensors.h"
#include "fixtures/decode/decode_config.h"
#include "reference/decode/oracle_fp64.h"
#include "reference/decode/variants.h"
#include "test_fixture_util.h"

namespace nibble::oracle {
namespace {

using ref::ReferenceOptions;
using ref::variant_options;

constexpr uint16_t kBf16Half = 0x3F00;        // 0.5
constexpr uint16_t kBf16Two = 0x4000;         // 2.0
constexpr uint16_t kBf16OnePlusUlp = 0x3F81;  // 1 + 2^-7

// ---- 1. The table ------------------------------------------------------------------------------

TEST(VariantTable, DefaultFirstNamesUniqueEveryMutantChangesSomething) {
  const auto& table = ref::decode_variants();
  ASSERT_FALSE(table.empty());
  // Row 0 is the default: libnibble_reference.so starts with index 0 selected.
  EXPECT_STREQ(table[0].name, ref::kDefaultVariant);
  EXPECT_TRUE(table[0].options.is_default());
  EXPECT_TRUE(table[0].must_pass);

  std::set<std::string> names;
  for (const auto& v : table) {
    EXPECT_TRUE(names.insert(v.name).second) << "duplicate variant " << v.name;
    const std::string by = v.caught_by;
    EXPECT_TRUE(by == "logits" || by == "appended K/V" || by == "both") << v.name << ": caught_by '" << by << "'";
    EXPECT_GT(std::strlen(v.description), 0u) << v.name;
    if (std::string(v.name) != ref::kDefaultVariant) {
      EXPECT_FALSE(v.options.is_default()) << v.name;
    }
  }
  // The list, exactly, and the sliver the per-element guard is for.
  const std::set<std::string> must_fail{"nibble_swap", "row_scale", "no_zero", "zero_off_by_one",
                                        "rope_interleaved", "kv_slot_plus1", "gqa_modulo", "logits_sliver"};
  const std::set<std::string> must_pass{"fp32", "bf16_dequant", "bf16_activations", "bf16_residual"};
  EXPECT_EQ(table.size(), must_fail.size() + must_pass.size());
  for (const auto& v : table) EXPECT_EQ(v.must_pass, must_pass.count(v.name) == 1) << v.name;
  for (const auto& n : must_fail) EXPECT_FALSE(ref::find_decode_variant(n).must_pass) << n;
}

TEST(VariantTable, LookupByNameAndBack) {
  for (const auto& v : ref::decode_variants()) {
    EXPECT_EQ(&ref::find_decode_variant(v.name), &v);
    EXPECT_STREQ(ref::variant_name(variant_options(v.name)), v.name);
  }
  EXPECT_EQ(variant_options("nibble_swap").nibble_order, ref::NibbleOrder::HighFirst);
  EXPECT_EQ(variant_options("row_scale").grouping, ref::ScaleGrouping::PerRow);
  EXPECT_EQ(variant_options("no_zero").zero_point, ref::ZeroPoint::Ignore);
  EXPECT_EQ(variant_options("zero_off_by_one").zero_point, ref::ZeroPoint::SubtractPlusOne);
  EXPECT_EQ(variant_options("rope_interleaved").rope, ref::RopeStyle::Interleaved);
  EXPECT_EQ(variant_options("kv_slot_plus1").kv_slot, ref::KvSlot::AtPosPlusOne);
  EXPECT_EQ(variant_options("gqa_modulo").gqa, ref::GqaMap::Modulo);
  EXPECT_TRUE(variant_options("bf16_dequant").bf16_dequant);
  EXPECT_TRUE(variant_options("bf16_activations").bf16_gemv_inputs);
  EXPECT_TRUE(variant_options("bf16_residual").bf16_residual);
  EXPECT_TRUE(variant_options("fp32").is_default());

  ReferenceOptions two;  // no row combines two switches
  two.bf16_dequant = two.bf16_residual = true;
  EXPECT_EQ(ref::variant_name(two), nullptr);
}

TEST(VariantTable, UnknownNameListsTheValidOnes) {
  try {
    ref::find_decode_variant("nibble_swapped");
    FAIL() << "no exception";
  } catch (const std::invalid_argument& e) {
    const std::string what = e.what();
    EXPECT_NE(what.find("'nibble_swapped'"), std::string::npos) << what;
    for (const auto& v : ref::decode_variants()) EXPECT_NE(what.find(v.name), std::string::npos) << what;
  }
  EXPECT_THROW(variant_options(""), std::invalid_argument);
  EXPECT_EQ(ref::decode_variant_names().rfind("fp32, ", 0), 0u) << ref::decode_variant_names();
}

// ---- 2. The pieces, by hand ----------------------------------------------------------------------

// One row of 4 inputs in two groups of 2, both bytes 0x4B: codes (even index = low nibble) 0xB, 0x4,
// 0xB, 0x4. Group 0: scale 0.5, zero 3; group 1: scale 2, zero 5.
struct ByteWeight {
  std::vector<uint8_t> packed{0x4B, 0x4B};
  std::vector<uint16_t> scale{kBf16Half, kBf16Two};
  std::vector<uint8_t> zero{3, 5};
  std::vector<double> row(const ReferenceOptions& opt) const {
    QuantWeightView w;
    w.packed = packed.data();
    w.scale = scale.data();
    w.zero = zero.data();
    w.out = 1;
    w.in = 4;
    w.group = 2;
    w.options = opt;
    std::vector<double> r(4);
    w.row(0, r.data());
    return r;
  }
};

TEST(VariantDequant, ByteFourBInTwoGroups) {
  const ByteWeight w;
  // The task: (code - zero) * scale, low nibble = even index.
  EXPECT_EQ(w.row(variant_options("fp32")),
            (std::vector<double>{(0xB - 3) * 0.5, (0x4 - 3) * 0.5, (0xB - 5) * 2.0, (0x4 - 5) * 2.0}));
  // High nibble = even index: each byte's two values trade places.
  EXPECT_EQ(w.row(variant_options("nibble_swap")),
            (std::vector<double>{(0x4 - 3) * 0.5, (0xB - 3) * 0.5, (0x4 - 5) * 2.0, (0xB - 5) * 2.0}));
  // Group 1 reads group 0's (scale, zero) = (0.5, 3).
  EXPECT_EQ(w.row(variant_options("row_scale")),
            (std::vector<double>{(0xB - 3) * 0.5, (0x4 - 3) * 0.5, (0xB - 3) * 0.5, (0x4 - 3) * 0.5}));
  EXPECT_EQ(w.row(variant_options("no_zero")), (std::vector<double>{0xB * 0.5, 0x4 * 0.5, 0xB * 2.0, 0x4 * 2.0}));
  EXPECT_EQ(w.row(variant_options("zero_off_by_one")),
            (std::vector<double>{(0xB - 4) * 0.5, (0x4 - 4) * 0.5, (0xB - 6) * 2.0, (0x4 - 6) * 2.0}));
  // These values are bf16 already, so the rounding variant, and the variants that do not touch the
  // weights, give the task's values.
  for (const char* same : {"bf16_dequant", "bf16_activations", "bf16_residual", "rope_interleaved", "kv_slot_plus1",
                           "gqa_modulo"})
    EXPECT_EQ(w.row(variant_options(same)), w.row(variant_options("fp32"))) << same;
  // The numbers, spelled out once.
  EXPECT_EQ(w.row(variant_options("fp32")), (std::vector<double>{4.0, 0.5, 12.0, -2.0}));
  EXPECT_EQ(w.row(variant_options("no_zero")), (std::vector<double>{5.5, 2.0, 22.0, 8.0}));
  EXPECT_EQ(w.row(variant_options("zero_off_by_one")), (std::vector<double>{3.5, 0.0, 10.0, -4.0}));
}

TEST(VariantDequant, Bf16DequantRoundsTwelveBitValues) {
  // (15 - 0) * (1 + 2^-7) = 15.1171875 needs 11 significand bits; bf16 keeps 8, so the nearest
  // bf16 (spacing 2^-4 in [8, 16)) is 15.125. The exact variants keep 15.1171875.
  EXPECT_EQ(dequant_value(15, 0, kBf16OnePlusUlp), 15.1171875);
  EXPECT_EQ(round_to_bf16(15.1171875), 15.125);
  ByteWeight w;
  w.packed = {0x0F, 0x00};  // codes 15, 0, 0, 0
  w.scale = {kBf16OnePlusUlp, kBf16OnePlusUlp};
  w.zero = {0, 0};
  EXPECT_EQ(w.row(variant_options("fp32"))[0], 15.1171875);
  EXPECT_EQ(w.row(variant_options("bf16_dequant"))[0], 15.125);
  EXPECT_EQ(w.row(variant_options("bf16_activations"))[0], 15.1171875);
}

TEST(VariantPieces, UnpackAndZeroPoint) {
  EXPECT_EQ(unpack_code(0x4B, 0, ref::NibbleOrder::LowFirst), 0xB);
  EXPECT_EQ(unpack_code(0x4B, 1, ref::NibbleOrder::LowFirst), 0x4);
  EXPECT_EQ(unpack_code(0x4B, 0, ref::NibbleOrder::HighFirst), 0x4);
  EXPECT_EQ(unpack_code(0x4B, 1, ref::NibbleOrder::HighFirst), 0xB);
  EXPECT_EQ(dequant_value(0xB, 3, kBf16Half, ref::ZeroPoint::Subtract), 4.0);
  EXPECT_EQ(dequant_value(0xB, 3, kBf16Half, ref::ZeroPoint::Ignore), 5.5);
  EXPECT_EQ(dequant_value(0xB, 3, kBf16Half, ref::ZeroPoint::SubtractPlusOne), 3.5);
  EXPECT_EQ(dequant_value(0, 15, kBf16Two, ref::ZeroPoint::SubtractPlusOne), -32.0);  // the extreme: -16 * 2
}

TEST(VariantPieces, RopeInterleavedVersusRotateHalf) {
  // hd = 4, theta = 4, pos = 1: pair 0 turns by 1 rad (inv_freq 4^0), pair 1 by 0.5 rad (4^(-2/4)).
  const double c0 = std::cos(1.0), s0 = std::sin(1.0), c1 = std::cos(0.5), s1 = std::sin(0.5);
  const double x[4] = {1.0, 2.0, 3.0, 4.0};
  double half[4], inter[4];
  std::copy(x, x + 4, half);
  std::copy(x, x + 4, inter);
  rope(half, 4, 1, 4.0, ref::RopeStyle::RotateHalf);
  rope(inter, 4, 1, 4.0, ref::RopeStyle::Interleaved);
  // Rotate-half: pairs (0, 2) and (1, 3).
  const double want_half[4] = {x[0] * c0 - x[2] * s0, x[1] * c1 - x[3] * s1, x[2] * c0 + x[0] * s0,
                               x[3] * c1 + x[1] * s1};
  // Interleaved: pairs (0, 1) and (2, 3), with the same frequency per pair index.
  const double want_inter[4] = {x[0] * c0 - x[1] * s0, x[1] * c0 + x[0] * s0, x[2] * c1 - x[3] * s1,
                                x[3] * c1 + x[2] * s1};
  for (int i = 0; i < 4; ++i) {
    EXPECT_NEAR(half[i], want_half[i], 1e-15) << i;
    EXPECT_NEAR(inter[i], want_inter[i], 1e-15) << i;
  }
  // rope(RotateHalf) is rope_rotate_half.
  double legacy[4];
  std::copy(x, x + 4, legacy);
  rope_rotate_half(legacy, 4, 1, 4.0);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(legacy[i], half[i]);
  // A unit vector shows the pairing alone: e0 turns towards e2 (rotate-half) or e1 (interleaved).
  double e_half[4] = {1, 0, 0, 0}, e_inter[4] = {1, 0, 0, 0};
  rope(e_half, 4, 1, 4.0, ref::RopeStyle::RotateHalf);
  rope(e_inter, 4, 1, 4.0, ref::RopeStyle::Interleaved);
  EXPECT_DOUBLE_EQ(e_half[0], c0);
  EXPECT_DOUBLE_EQ(e_half[2], s0);
  EXPECT_EQ(e_half[1], 0.0);
  EXPECT_DOUBLE_EQ(e_inter[0], c0);
  EXPECT_DOUBLE_EQ(e_inter[1], s0);
  EXPECT_EQ(e_inter[2], 0.0);
  EXPECT_THROW(rope(e_half, 3, 1, 4.0, ref::RopeStyle::Interleaved), std::invalid_argument);
}

TEST(VariantPieces, GqaModuloForTheFullConfig) {
  // n_q = 24, n_kv = 8 (the seed's config): 3 query heads per KV head.
  const int block[24] = {0, 0, 0, 1, 1, 1, 2, 2, 2, 3, 3, 3, 4, 4, 4, 5, 5, 5, 6, 6, 6, 7, 7, 7};
  const int modulo[24] = {0, 1, 2, 3, 4, 5, 6, 7, 0, 1, 2, 3, 4, 5, 6, 7, 0, 1, 2, 3, 4, 5, 6, 7};
  int agree = 0;
  for (int j = 0; j < 24; ++j) {
    EXPECT_EQ(gqa_kv_head(j, 24, 8), block[j]) << j;
    EXPECT_EQ(gqa_kv_head(j, 24, 8, ref::GqaMap::Block), block[j]) << j;
    EXPECT_EQ(gqa_kv_head(j, 24, 8, ref::GqaMap::Modulo), modulo[j]) << j;
    agree += block[j] == modulo[j];
  }
  EXPECT_EQ(agree, 4);  // query heads 0, 11, 12, 23 happen to agree; the other 20 read a wrong KV head
  // tiny: n_q = 4, n_kv = 2: block 0 0 1 1, modulo 0 1 0 1 (query heads 1 and 2 trade KV heads).
  EXPECT_EQ(gqa_kv_head(1, 4, 2, ref::GqaMap::Modulo), 1);
  EXPECT_EQ(gqa_kv_head(2, 4, 2, ref::GqaMap::Modulo), 0);
  EXPECT_THROW(gqa_kv_head(0, 24, 7, ref::GqaMap::Modulo), std::invalid_argument);
}

TEST(VariantPieces, KvWriteSlot) {
  EXPECT_EQ(kv_write_slot(2048, 4096, ref::KvSlot::AtPos), 2048);
  EXPECT_EQ(kv_write_slot(2048, 4096, ref::KvSlot::AtPosPlusOne), 2049);
  EXPECT_EQ(kv_write_slot(4095, 4096, ref::KvSlot::AtPos), 4095);
  EXPECT_EQ(kv_write_slot(4095, 4096, ref::KvSlot::AtPosPlusOne), -1);  // never past the cache
}

// ---- 3. The oracle with each variant on a tiny fixture --------------------------------------------

std::vector<int64_t> fixture_tokens(const SafetensorsFile& f) {
  const auto& e = f.entry("tokens");
  std::vector<int64_t> t(e.nbytes() / sizeof(int64_t));
  std::memcpy(t.data(), f.data("tokens"), e.nbytes());
  return t;
}

/** ||got - want||_2 / ||want||_2 in fp64 (the grader's metric). */
double relative_error(const std::vector<double>& got, const std::vector<double>& want) {
  double num = 0, den = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    num += (got[i] - want[i]) * (got[i] - want[i]);
    den += want[i] * want[i];
  }
  return std::sqrt(num) / std::sqrt(den);
}

double relative_error_bf16(const std::vector<uint16_t>& got, const std::vector<uint16_t>& want) {
  std::vector<double> g(got.size()), w(want.size());
  for (size_t i = 0; i < got.size(); ++i) g[i] = bf16_to_double(got[i]);
  for (size_t i = 0; i < want.size(); ++i) w[i] = bf16_to_double(want[i]);
  return relative_error(g, w);
}

struct OracleRun {
  std::vector<std::vector<double>> logits;
  std::vector<std::vector<uint16_t>> k, v;
};

OracleRun run_oracle(const DecodeConfig& cfg, const SafetensorsFile& file, const std::vector<int64_t>& tokens,
               const ReferenceOptions& opt) {
  DecodeOracle oracle(cfg, file, 2, opt);
  OracleRun r;
  for (int s = 0; s < cfg.checked_steps; ++s) {
    const std::vector<int64_t> step_tokens(tokens.begin() + int64_t(s) * cfg.dims.batch,
                                           tokens.begin() + int64_t(s + 1) * cfg.dims.batch);
    std::vector<uint16_t> k, v;
    r.logits.push_back(oracle.step(step_tokens, cfg.prefill + s, &k, &v));
    r.k.push_back(std::move(k));
    r.v.push_back(std::move(v));
  }
  return r;
}

TEST(VariantOracleTiny, EachVariantOnItsSideOfTheGate) {
  const DecodeConfig cfg = decode_config("tiny");
  test::TempDir dir;
  const FixtureManifest m = build_decode_fixture(cfg, 0, dir.path(), 2, {});
  SafetensorsFile file(dir / m.file);
  const std::vector<int64_t> tokens = fixture_tokens(file);
  const OracleRun exact = run_oracle(cfg, file, tokens, ReferenceOptions{});
  const double fail_above = 2 * cfg.gate, pass_below = cfg.gate / 2;

  std::printf("tiny, seed 0, %d steps from pos %d; gate %.0e; worst (and best) step, against the exact oracle\n",
              cfg.checked_steps, cfg.prefill, cfg.gate);
  std::printf("%-17s %-5s %-13s %-21s %-21s %s\n", "variant", "must", "caught by", "logits relerr", "K/V relerr",
              "worst / gate");
  for (const auto& var : ref::decode_variants()) {
    const OracleRun got = var.options.is_default() ? exact : run_oracle(cfg, file, tokens, var.options);
    double lw = 0, lb = INFINITY, kw = 0, kb = INFINITY;
    for (int s = 0; s < cfg.checked_steps; ++s) {
      const double le = relative_error(got.logits[size_t(s)], exact.logits[size_t(s)]);
      const double ke = std::max(relative_error_bf16(got.k[size_t(s)], exact.k[size_t(s)]),
                                 relative_error_bf16(got.v[size_t(s)], exact.v[size_t(s)]));
      ASSERT_TRUE(std::isfinite(le) && std::isfinite(ke)) << var.name << " step " << s;
      lw = std::max(lw, le), lb = std::min(lb, le), kw = std::max(kw, ke), kb = std::min(kb, ke);
    }
    std::printf("%-17s %-5s %-13s %.3e (%.3e)  %.3e (%.3e)  %.3g\n", var.name, var.must_pass ? "PASS" : "FAIL",
                var.caught_by, lw, lb, kw, kb, std::max(lw, kw) / cfg.gate);
    const std::string by = var.caught_by;
    if (var.must_pass) {
      EXPECT_LT(lw, pass_below) << var.name << ": logits";
      EXPECT_LT(kw, pass_below) << var.name << ": appended K/V";
    } else if (var.options.drop_sliver) {
      // Under the gate by design: the per-element guard catches it (test_calibrate_cpu).
      EXPECT_GT(lw, 0.0) << var.name << ": logits";
      EXPECT_EQ(kw, 0.0) << var.name << ": the sliver is in the logits only";
    } else {
      if (by == "logits" || by == "both") {
        EXPECT_GT(lw, fail_above) << var.name << ": logits";
      }
      if (by == "appended K/V" || by == "both") {
        EXPECT_GT(kw, fail_above) << var.name << ": appended K/V";
      }
    }
    if (var.options.is_default()) {
      EXPECT_EQ(lw, 0.0);
    }
  }
}

// kv_slot_plus1 in the oracle: this step's K/V go to slot pos + 1, the grader's "appended" view is
// slot pos (the fixture's zeros at the first step, the previous step's K/V after that), and a
// KvOffer of slot pos is judged against the exact values of the write that put them there.
TEST(VariantOracleTiny, KvSlotPlusOneWritesAheadAndIsJudgedAtSlotPos) {
  const DecodeConfig cfg = decode_config("tiny");
  const auto& c = cfg.dims;
  test::TempDir dir;
  const FixtureManifest m = build_decode_fixture(cfg, 0, dir.path(), 2, {});
  SafetensorsFile file(dir / m.file);
  const std::vector<int64_t> tokens = fixture_tokens(file);
  const std::vector<int64_t> t0(tokens.begin(), tokens.begin() + c.batch);
  const std::vector<int64_t> t1(tokens.begin() + c.batch, tokens.begin() + 2 * c.batch);
  const ReferenceOptions plus1 = variant_options("kv_slot_plus1");
  const int p = cfg.prefill;
  auto at = [&](int slot, int d) { return int64_t(slot) * c.hd + d; };  // layer 0, batch 0, kv head 0

  DecodeOracle o(cfg, file, 1, plus1);
  std::vector<uint16_t> k0, v0, k1, v1;
  StepTrace tr0, tr1;
  o.step(t0, p, &k0, &v0, &tr0);
  for (size_t e = 0; e < k0.size(); ++e) ASSERT_EQ(k0[e], 0) << "slot pos before any write is the fixture's zero";
  for (int d = 0; d < c.hd; ++d) ASSERT_EQ(o.k_cache(0)[size_t(at(p + 1, d))], double_to_bf16(tr0.k[size_t(d)]));
  o.step(t1, p + 1, &k1, &v1, &tr1);
  for (int d = 0; d < c.hd; ++d) {
    EXPECT_EQ(k1[size_t(d)], double_to_bf16(tr0.k[size_t(d)])) << "slot pos + 1 holds the previous step's K";
    EXPECT_EQ(o.k_cache(0)[size_t(at(p + 2, d))], double_to_bf16(tr1.k[size_t(d)]));
  }

  // Offers. Step 0: slot pos was never written by the oracle, so only its own content is accepted,
  // whatever the window. Step 1: slot pos holds step 0's K; one ulp off is rejected at window 1e-5
  // and adopted at window 1 (a legitimate rounding of step 0's exact value within the head's RMS).
  std::vector<uint16_t> k0_bumped = k0;
  k0_bumped[3] = 0x0001;
  std::vector<uint16_t> k1_bumped = k1;
  k1_bumped[3] = uint16_t(k1_bumped[3] + 1);
  for (const double window : {1e-5, 1.0}) {
    DecodeOracle q(cfg, file, 1, plus1);
    StepTrace s0, s1;
    std::vector<uint16_t> k, v;
    const KvOffer offer0{&k0_bumped, &v0, window};
    q.step(t0, p, &k, &v, &s0, &offer0);
    EXPECT_EQ(s0.rejected, 1) << window;
    EXPECT_EQ(s0.adopted, 0) << window;
    EXPECT_EQ(k, k0) << window;
    const KvOffer offer1{&k1_bumped, &v1, window};
    q.step(t1, p + 1, &k, &v, &s1, &offer1);
    EXPECT_EQ(s1.rejected, window < 1 ? 1 : 0) << window;
    EXPECT_EQ(s1.adopted, window < 1 ? 0 : 1) << window;
    EXPECT_EQ(k, window < 1 ? k1 : k1_bumped) << window;
  }
}

}  // namespace
}  // namespace nibble::oracle
