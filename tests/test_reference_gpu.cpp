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
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "fixtures/fixture.h"
#include "fixtures/safetensors.h"
#include "fixtures/task.h"
#include "gpu_test_util.h"
#include "harness/cuda_check.h"
#include "harness/decode_session.h"
#include "harness/device_model.h"
#include "harness/solution_library.h"
#include "reference/oracle_fp64.h"
#include "test_fixture_util.h"

namespace nibble {
namespace {

constexpr double kLogitsTol = 1e-5;
constexpr double kKvWindow = 1e-5;             // KvOffer window, relative to a head's RMS
constexpr double kKvOwnRoundingFraction = 0.995;

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
  DecodeSession session(lib, model, stream.s);

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

TEST(ReferenceGpu, MatchesOracleSeed0) {
  NIBBLE_REQUIRE_GPU();
  compare_with_oracle(0);
}

TEST(ReferenceGpu, MatchesOracleSeed1) {
  NIBBLE_REQUIRE_GPU();
  compare_with_oracle(1);
}

}  // namespace
}  // namespace nibble
