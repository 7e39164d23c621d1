// test_reference_gpu.cpp: the fp32 cuBLAS reference (libnibble_reference.so, through the C ABI
// and DecodeSession exactly as the grader drives it) against the fp64 CPU oracle on the tiny
// config: 8 consecutive steps from pos = prefill, seeds 0 and 1.
//
// Logits: ||ref - oracle||_2 / ||oracle||_2 (fp64) below 1e-5 at every step.
// Appended K/V: both sides round to bf16, the reference from fp32 and the oracle from fp64, so a
// value within ~1e-7 of a rounding tie may land on either neighbour (measured on an fp32 emulation
// of this reference: 1-5 of the run's 4096 K/V elements per seed). One such flip moves the logits
// by up to ~1e-4 at this size, so the oracle is handed the reference's appended K/V (KvOffer) and
// takes each element that is a legitimate rounding of its own exact value within 1e-5 of the
// head's RMS; with that, the emulation's worst logits error over 10 seeds was 1.9e-6.
// The test then requires: every appended element identical to what the oracle stored (none
// rejected: the reference's K/V before rounding agree with the oracle's within 1e-5 of the head's
// RMS), and at least 99.5% identical to the oracle's own rounding (ties are rare; a systematic
// rounding error such as truncation would differ in about half of them).
//
// Variants (reference/decode/variants.h): for each one, the .so with that variant selected through its
// export nibble_reference_set_variant (resolved like the grader's child does) against the oracle
// with the same ReferenceOptions, tiny, seed 0, 8 steps. Two kinds:
//  - exact-arithmetic variants (every mutant, and bf16_dequant: it rounds the dequantised weight,
//    an exact 12-bit value, so fp32 and fp64 round it identically): the same function in fp32 and
//    fp64, checked like the default, with a logits bound of 1e-4 (an fp32 emulation of the
//    reference measured at most 7.8e-7 over both seeds; 2.8e-6 with 10x its rounding noise);
//  - bf16_activations and bf16_residual round *computed* values to bf16 at every GEMV input / every
//    residual write. A value within fp32 error of a bf16 tie rounds either way, and unlike the K/V
//    cache no offer can absorb it: one such flip moves its vector by 2^-8 of an element, the next
//    roundings then flip too, and the two runs settle at a tie-chaos distance of the order of the
//    bf16 noise itself. The same emulation measured up to 3.6e-3 logits relative error (6.1e-3
//    with 10x noise) against the oracle's variant, and 2.8e-3 in the appended K/V, while its
//    distance from the exact oracle stayed within [0.92, 1.15] of the oracle variant's at every
//    step. So those two are held to: logits and K/V within 1e-2 of the oracle's variant (the same
//    function up to tie chaos), and, per step, a distance from the exact oracle within
//    [0.75, 1.33] of the oracle variant's (the rounding happens, at as many points as the
//    oracle's: a variant that did not round would sit at ratio ~0).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "fixtures/decode/decode_fixture.h"
#include "fixtures/fixture.h"
#include "fixtures/safetensors.h"
#include "fixtures/decode/decode_config.h"
#include "gpu_test_util.h"
#include "harness/cuda_check.h"
#include "harness/decode/decode_session.h"
#include "harness/decode/device_model.h"
#include "harness/solution_library.h"
#include "reference/decode/oracle_fp64.h"
#include "reference/decode/reference_options.h"
#include "reference/decode/variants.h"
#include "test_fixture_util.h"

namespace nibble {
namespace {

constexpr double kLogitsTol = 1e-5;
constexpr double kKvWindow = 1e-5;             // KvOffer window, relative to a head's RMS
constexpr double kKvOwnRoundingFraction = 0.995;
constexpr double kVariantLogitsTol = 1e-4;     // exact-arithmetic variants (see the header)
constexpr double kTieChaosTol = 1e-2;          // bf16_activations / bf16_residual: logits and K/V
constexpr double kTieChaosRatioLo = 0.75;      // their distance from the exact oracle, over the
constexpr double kTieChaosRatioHi = 1.0 / 0.75;  // oracle variant's, at every step

std::string reference_so() {
#ifdef NIBBLE_REFERENCE_SO
  return NIBBLE_REFERENCE_SO;
#else
  const char* bin = std::getenv("NIBBLE_BINARY_DIR");
  return std::string(bin ? bin : ".") + "/lib/libnibble_reference.so";
#endif
}

/** A non-blocking stream, destroyed once. */
struct Stream {
  cudaStream_t s = nullptr;
  Stream() { NIBBLE_CUDA_CALL(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking)); }
  ~Stream() { NIBBLE_CUDA_CALL_NOEXCEPT(cudaStreamDestroy(s)); }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
};

double relative_error(const std::vector<float>& got, const std::vector<double>& want) {
  double num = 0, den = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double d = double(got[i]) - want[i];
    num += d * d;
    den += want[i] * want[i];
  }
  return std::sqrt(num) / std::sqrt(den);
}

double relative_error(const std::vector<double>& got, const std::vector<double>& want) {
  double num = 0, den = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    num += (got[i] - want[i]) * (got[i] - want[i]);
    den += want[i] * want[i];
  }
  return std::sqrt(num) / std::sqrt(den);
}

/** The grader's appended-K/V metric for one tensor: ||got - want||_2 / ||want||_2 over bf16 values. */
double relative_error_bf16(const std::vector<uint16_t>& got, const std::vector<uint16_t>& want) {
  double num = 0, den = 0;
  for (size_t i = 0; i < want.size(); ++i) {
    const double w = oracle::bf16_to_double(want[i]), d = oracle::bf16_to_double(got[i]) - w;
    num += d * d;
    den += w * w;
  }
  return den > 0 ? std::sqrt(num) / std::sqrt(den) : (num > 0 ? INFINITY : 0.0);
}

/** The reference's variant exports (reference_options.h), resolved on the library the session
 *  uses; selects a variant for the next build and puts "fp32" back on destruction, so later tests
 *  in this process get the default. */
class VariantSelection {
 public:
  explicit VariantSelection(const SolutionLibrary& lib)
      : set_(reinterpret_cast<nibble_reference_set_variant_fn>(lib.optional_symbol("nibble_reference_set_variant"))),
        get_(reinterpret_cast<nibble_reference_variant_fn>(lib.optional_symbol("nibble_reference_variant"))),
        numerics_(reinterpret_cast<nibble_reference_numerics_fn>(lib.optional_symbol("nibble_reference_numerics"))) {}
  ~VariantSelection() {
    nibble_error err{};
    if (set_ && set_(ref::kDefaultVariant, &err) != NIBBLE_OK)
      std::fprintf(stderr, "could not restore the default variant: %s\n", err.message);
  }
  VariantSelection(const VariantSelection&) = delete;
  VariantSelection& operator=(const VariantSelection&) = delete;

  bool resolved() const { return set_ && get_ && numerics_; }
  /** nibble_reference_set_variant(name); the error message in *message. */
  nibble_status select(const char* name, std::string* message = nullptr) {
    nibble_error err{};
    const nibble_status st = set_(name, &err);
    if (message) *message = err.message;
    return st;
  }
  std::string current() const { return get_(); }
  std::string numerics() const { return numerics_(); }

 private:
  nibble_reference_set_variant_fn set_;
  nibble_reference_variant_fn get_;
  nibble_reference_numerics_fn numerics_;
};

void compare_with_oracle(uint64_t seed) {
  const DecodeConfig cfg = decode_config("tiny");
  const auto& c = cfg.dims;
  test::TempDir dir;
  const FixtureManifest manifest = build_decode_fixture(cfg, seed, dir.path(), 0, {});
  SafetensorsFile file(dir / manifest.file);
  DeviceModel model(cfg, file);
  oracle::DecodeOracle oracle(cfg, file);
  oracle::DecodeOracle raw(cfg, file);  // keeps its own roundings throughout: printed, not asserted

  SolutionLibrary lib(reference_so());
  EXPECT_EQ(lib.name(), "reference-fp32-cublas");
  Stream stream;
  DecodeSession session(lib, model, stream.s, stream.s);  // the harness stages on the same stream here

  int64_t kv_elements = 0, adopted = 0;
  double worst = 0;
  for (int s = 0; s < cfg.checked_steps; ++s) {
    const int pos = cfg.prefill + s;
    const std::vector<int64_t> tokens(model.tokens().begin() + int64_t(s) * c.batch,
                                      model.tokens().begin() + int64_t(s + 1) * c.batch);
    const StepOutputs got = session.run_step(tokens, pos);
    ASSERT_EQ(got.k_appended.size(), size_t(int64_t(c.layers) * c.batch * c.n_kv * c.hd));
    ASSERT_EQ(got.v_appended.size(), got.k_appended.size());

    std::vector<uint16_t> k_want, v_want;
    oracle::StepTrace trace;
    const oracle::KvOffer offer{&got.k_appended, &got.v_appended, kKvWindow};
    const std::vector<double> want = oracle.step(tokens, pos, &k_want, &v_want, &trace, &offer);

    ASSERT_EQ(got.logits.size(), want.size());
    for (size_t i = 0; i < got.logits.size(); ++i)
      ASSERT_TRUE(std::isfinite(got.logits[i])) << "seed " << seed << " step " << s << ": logit " << i << " = "
                                                << got.logits[i];
    const double err = relative_error(got.logits, want);
    const double raw_err = relative_error(got.logits, raw.step(tokens, pos));
    worst = std::max(worst, err);
    kv_elements += int64_t(got.k_appended.size() + got.v_appended.size());
    adopted += trace.adopted;
    std::printf("seed %llu step %d (pos %d): logits relerr %.3e (%.3e against the oracle's own K/V roundings); "
                "K/V: %lld tie flips taken, %lld rejected\n",
                static_cast<unsigned long long>(seed), s, pos, err, raw_err, static_cast<long long>(trace.adopted),
                static_cast<long long>(trace.rejected));
    EXPECT_LT(err, kLogitsTol) << "seed " << seed << " step " << s << " (pos " << pos << ")";
    EXPECT_EQ(trace.rejected, 0) << "seed " << seed << " step " << s
                                 << ": appended K/V elements that are not a rounding of the oracle's value";
    EXPECT_TRUE(got.k_appended == k_want) << "seed " << seed << " step " << s << ": K differs";
    EXPECT_TRUE(got.v_appended == v_want) << "seed " << seed << " step " << s << ": V differs";
  }
  session.close();

  const double own = 1.0 - double(adopted) / double(kv_elements);
  std::printf("seed %llu: worst logits relerr %.3e over %d steps (gate %.0e); K/V %.5f identical to the oracle's "
              "own rounding (%lld of %lld tie flips)\n",
              static_cast<unsigned long long>(seed), worst, cfg.checked_steps, kLogitsTol, own,
              static_cast<long long>(adopted), static_cast<long long>(kv_elements));
  EXPECT_GE(own, kKvOwnRoundingFraction) << "seed " << seed;
}

/** One variant of the reference against the same variant of the oracle (see the file header). */
void compare_variant_with_oracle(const ref::VariantInfo& var, uint64_t seed) {
  SCOPED_TRACE(std::string("variant ") + var.name);
  const DecodeConfig cfg = decode_config("tiny");
  const auto& c = cfg.dims;
  test::TempDir dir;
  const FixtureManifest manifest = build_decode_fixture(cfg, seed, dir.path(), 0, {});
  SafetensorsFile file(dir / manifest.file);
  DeviceModel model(cfg, file);
  oracle::DecodeOracle oracle(cfg, file, 1, var.options);
  oracle::DecodeOracle exact(cfg, file);  // the task, for the tie-chaos variants' distance check
  const bool tie_chaos = var.options.bf16_gemv_inputs || var.options.bf16_residual;

  SolutionLibrary lib(reference_so());
  VariantSelection selection(lib);
  ASSERT_TRUE(selection.resolved()) << reference_so() << " lacks the variant exports";
  std::string message;
  ASSERT_EQ(selection.select(var.name, &message), NIBBLE_OK) << message;
  ASSERT_EQ(selection.current(), var.name);
  Stream stream;
  DecodeSession session(lib, model, stream.s, stream.s);  // builds the selected variant (staging on the same stream)

  double worst_logits = 0, worst_kv = 0, worst_ratio = 0, best_ratio = INFINITY;
  int64_t adopted = 0, rejected = 0;
  for (int s = 0; s < cfg.checked_steps; ++s) {
    const int pos = cfg.prefill + s;
    const std::vector<int64_t> tokens(model.tokens().begin() + int64_t(s) * c.batch,
                                      model.tokens().begin() + int64_t(s + 1) * c.batch);
    const StepOutputs got = session.run_step(tokens, pos);
    ASSERT_EQ(got.k_appended.size(), size_t(int64_t(c.layers) * c.batch * c.n_kv * c.hd));
    for (size_t i = 0; i < got.logits.size(); ++i)
      ASSERT_TRUE(std::isfinite(got.logits[i])) << "step " << s << ": logit " << i << " = " << got.logits[i];

    std::vector<uint16_t> k_want, v_want;
    oracle::StepTrace trace;
    const oracle::KvOffer offer{&got.k_appended, &got.v_appended, kKvWindow};
    const std::vector<double> want = oracle.step(tokens, pos, &k_want, &v_want, &trace, &offer);
    const std::vector<double> task = exact.step(tokens, pos);
    const double err = relative_error(got.logits, want);
    const double kv = std::max(relative_error_bf16(got.k_appended, k_want), relative_error_bf16(got.v_appended, v_want));
    worst_logits = std::max(worst_logits, err);
    worst_kv = std::max(worst_kv, kv);
    adopted += trace.adopted;
    rejected += trace.rejected;
    if (tie_chaos) {
      const double ratio = relative_error(got.logits, task) / relative_error(want, task);
      worst_ratio = std::max(worst_ratio, ratio);
      best_ratio = std::min(best_ratio, ratio);
      EXPECT_GT(ratio, kTieChaosRatioLo) << "step " << s << ": the reference's variant is much closer to the task "
                                         << "than the oracle's: does it round where the oracle does?";
      EXPECT_LT(ratio, kTieChaosRatioHi) << "step " << s << ": the reference's variant is much further from the "
                                         << "task than the oracle's: does it round more often?";
      EXPECT_LT(err, kTieChaosTol) << "step " << s;
      EXPECT_LT(kv, kTieChaosTol) << "step " << s;
    } else {
      EXPECT_LT(err, kVariantLogitsTol) << "step " << s << " (pos " << pos << ")";
      EXPECT_EQ(trace.rejected, 0) << "step " << s << ": appended K/V not a rounding of the oracle's value";
      EXPECT_TRUE(got.k_appended == k_want) << "step " << s << ": K differs";
      EXPECT_TRUE(got.v_appended == v_want) << "step " << s << ": V differs";
    }
  }
  session.close();
  if (tie_chaos)
    std::printf("%-17s logits relerr %.3e, K/V relerr %.3e (bound %.0e, tie chaos); distance from the task over "
                "the oracle variant's: [%.3f, %.3f]; K/V offers: %lld taken, %lld rejected\n",
                var.name, worst_logits, worst_kv, kTieChaosTol, best_ratio, worst_ratio,
                static_cast<long long>(adopted), static_cast<long long>(rejected));
  else
    std::printf("%-17s logits relerr %.3e (bound %.0e), K/V identical to the oracle's; %lld tie flips taken\n",
                var.name, worst_logits, kVariantLogitsTol, static_cast<long long>(adopted));
}

TEST(ReferenceGpu, MatchesOracleSeed0) {
  NIBBLE_REQUIRE_GPU();
  compare_with_oracle(0);
}

TEST(ReferenceGpu, MatchesOracleSeed1) {
  NIBBLE_REQUIRE_GPU();
  compare_with_oracle(1);
}

// The variant exports themselves: no GPU needed (nothing is built), only the .so loaded.
TEST(ReferenceVariants, SelectByNameUnknownNameListsTheValidOnes) {
  SolutionLibrary lib(reference_so());
  VariantSelection selection(lib);
  ASSERT_TRUE(selection.resolved()) << reference_so() << " lacks the variant exports";
  EXPECT_EQ(selection.current(), ref::kDefaultVariant);
  const std::string base = selection.numerics();
  EXPECT_EQ(base.find("VARIANT"), std::string::npos) << base;
  for (const auto& v : ref::decode_variants()) {
    ASSERT_EQ(selection.select(v.name), NIBBLE_OK) << v.name;
    EXPECT_EQ(selection.current(), v.name);
    const std::string numerics = selection.numerics();
    if (v.options.is_default())
      EXPECT_EQ(numerics, base);
    else
      EXPECT_NE(numerics.find(std::string("VARIANT ") + v.name), std::string::npos) << numerics;
  }
  ASSERT_EQ(selection.select("gqa_modulo"), NIBBLE_OK);
  std::string message;
  EXPECT_EQ(selection.select("gqa_mod", &message), NIBBLE_ERR_INVALID_ARGUMENT);
  EXPECT_NE(message.find("'gqa_mod'"), std::string::npos) << message;
  for (const auto& v : ref::decode_variants()) EXPECT_NE(message.find(v.name), std::string::npos) << message;
  EXPECT_EQ(selection.current(), "gqa_modulo") << "a failed selection leaves the previous one";
  EXPECT_EQ(selection.select(nullptr, &message), NIBBLE_ERR_INVALID_ARGUMENT);
  ASSERT_EQ(selection.select(ref::kDefaultVariant), NIBBLE_OK);
  EXPECT_EQ(selection.numerics(), base);
}

TEST(ReferenceGpu, VariantsMatchTheOracleVariantsSeed0) {
  NIBBLE_REQUIRE_GPU();
  for (const auto& v : ref::decode_variants()) compare_variant_with_oracle(v, 0);
}

}  // namespace
}  // namespace nibble
