// test_gemm_guard.cpp: the GEMM grader's replay guard (gemm_call_a): every call after the first
// flips the signs of a fresh half of A's elements, so no kept C, re-signed per row or not, matches
// a later call. The whole-grade check of a cheat is GradeGemmGpu.ReplayingTheFirstCallFails (gpu).
// And TimedRandom, the timed calls' randomness (a seed only when the user fixes one), and
// compare_gemm_outputs, the call-by-call comparison of the candidate's C with the reference's.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <set>
#include <vector>

#include "harness/child_support.h"
#include "harness/gemm_guard.h"
#include "harness/process.h"

using namespace nibble;

namespace {
std::vector<uint16_t> call_a(const std::vector<uint16_t>& a0, uint64_t seed, int64_t call) {
  std::vector<uint16_t> a(a0.size());
  gemm_call_a(a0.data(), int64_t(a0.size()), seed, call, a.data());
  return a;
}
// bf16 bit patterns of nonzero values (1.0 .. about 2^20, both signs): a flip always shows.
std::vector<uint16_t> some_a(size_t n) {
  std::vector<uint16_t> a(n);
  for (size_t i = 0; i < n; ++i) a[i] = uint16_t(0x3F80 + (i * 37) % 0x0A00) | uint16_t((i % 3 == 0) << 15);
  return a;
}
}  // namespace

TEST(GemmGuard, CallZeroIsTheFixturesA) {
  const auto a0 = some_a(1000);
  EXPECT_EQ(call_a(a0, 7, 0), a0);
}

TEST(GemmGuard, LaterCallsFlipOnlySignsAboutHalfOfThemAFreshMaskEachCall) {
  const int64_t M = 16, K = 3080;  // K not a multiple of 64: masks run across row ends
  const auto a0 = some_a(size_t(M * K));
  const auto a1 = call_a(a0, 7, 1), a2 = call_a(a0, 7, 2), a1_again = call_a(a0, 7, 1), b1 = call_a(a0, 8, 1);
  EXPECT_EQ(a1, a1_again) << "reproducible from (seed, call)";
  size_t flipped1 = 0, differ12 = 0, differ_seed = 0;
  for (size_t i = 0; i < a0.size(); ++i) {
    ASSERT_EQ(a1[i] & 0x7FFF, a0[i] & 0x7FFF) << "only the sign changes, element " << i;
    flipped1 += a1[i] != a0[i];
    differ12 += a1[i] != a2[i];
    differ_seed += a1[i] != b1[i];
  }
  const double n = double(a0.size());  // 49280: a fair coin's count is within +-1% of n/2 at 4.4 sigma
  EXPECT_NEAR(flipped1 / n, 0.5, 0.01);
  EXPECT_NEAR(differ12 / n, 0.5, 0.01) << "each call its own mask";
  EXPECT_NEAR(differ_seed / n, 0.5, 0.01) << "each timing seed its own masks";
  // Neighbours flip independently (a mask per element, not per word or per row): about half of the
  // adjacent pairs differ in whether they flipped.
  size_t split_pairs = 0;
  for (size_t i = 0; i + 1 < a0.size(); ++i) split_pairs += (a1[i] != a0[i]) != (a1[i + 1] != a0[i + 1]);
  EXPECT_NEAR(split_pairs / (n - 1), 0.5, 0.01);
  // No row is the first call's row up to one sign (what a per-row guard allowed a cache to undo).
  for (int64_t m = 0; m < M; ++m) {
    size_t same = 0;
    for (int64_t k = 0; k < K; ++k) same += a1[size_t(m * K + k)] == a0[size_t(m * K + k)];
    EXPECT_GT(same, size_t(K / 4)) << "row " << m;
    EXPECT_LT(same, size_t(3 * K / 4)) << "row " << m;
  }
}

// The timed calls' randomness: with a seed exactly mt19937_64(seed) (a reproducible run); without,
// 64-bit words from the OS, distinct draw to draw (no seed to recover), usable as any URBG.
TEST(TimedRandom, SeededIsMt19937_64UnseededIsTheOs) {
  nibble::child::TimedRandom seeded(uint64_t(7));
  std::mt19937_64 mt(7);
  for (int i = 0; i < 1000; ++i) ASSERT_EQ(seeded(), mt()) << i;
  nibble::child::TimedRandom os(std::nullopt), os2(std::nullopt);
  std::set<uint64_t> seen;
  uint64_t high = 0, low = 0;
  for (int i = 0; i < 1000; ++i) {
    const uint64_t v = os();
    seen.insert(v);
    high |= v >> 32;
    low |= v & 0xFFFFFFFFu;
  }
  EXPECT_EQ(seen.size(), 1000u) << "64-bit draws repeat with probability ~3e-14";
  EXPECT_EQ(high, 0xFFFFFFFFu) << "both halves of the word are random";
  EXPECT_EQ(low, 0xFFFFFFFFu);
  EXPECT_NE(os(), os2()) << "two generators, two streams";
  std::uniform_int_distribution<int64_t> vocab(0, 128255);
  for (int i = 0; i < 1000; ++i) {
    const int64_t t = vocab(os);
    ASSERT_GE(t, 0);
    ASSERT_LE(t, 128255);
  }
}

namespace {
struct Out {
  std::string name;
  std::vector<float> c;
  int64_t call;
  uint64_t seed;
};
std::string write_outputs(const std::string& path, const std::vector<Out>& outs) {
  std::vector<nibble::TensorView> v;
  for (const auto& o : outs) {
    v.push_back({o.name + ".C", nibble::DType::F32, {int64_t(o.c.size())}, o.c.data(), o.c.size() * 4});
    v.push_back({o.name + ".call", nibble::DType::I64, {1}, &o.call, 8});
    v.push_back({o.name + ".seed", nibble::DType::I64, {1}, &o.seed, 8});
  }
  nibble::write_safetensors(path, v);
  return path;
}
std::string compare_error(const std::vector<Out>& cand, const std::vector<Out>& ref, const std::vector<std::string>& names,
                          int64_t M, int64_t N) {
  nibble::TempDir t;
  nibble::SafetensorsFile c(write_outputs(t.path() + "/c.safetensors", cand)), r(write_outputs(t.path() + "/r.safetensors", ref));
  double worst = 0;
  try {
    compare_gemm_outputs(c, r, names, M, N, &worst);
  } catch (const std::exception& e) {
    return e.what();
  }
  return "";
}
}  // namespace

// By hand: C_ref = (3, 4), ||C_ref|| = 5; the candidate (3, 4.5) is off by 0.5: 0.1. A timed call
// (1005) with its seed passes through; a NaN makes the error NaN and sticks in *worst.
TEST(CompareGemmOutputs, ErrorsPerCallByHand) {
  nibble::TempDir t;
  const uint64_t big = 0xF00DF00DF00DF00Dull;  // a uint64 above INT64_MAX: stored as the same bits
  const std::vector<Out> ref = {{"call0", {3, 4}, 0, 7}, {"call1", {1, 0}, 1, 7}, {"timed", {0, 2}, 1005, big}};
  const std::vector<Out> cand = {{"call0", {3, 4.5f}, 0, 7}, {"call1", {1, 0}, 1, 7}, {"timed", {0, 2}, 1005, big}};
  nibble::SafetensorsFile c(write_outputs(t.path() + "/c.safetensors", cand)), r(write_outputs(t.path() + "/r.safetensors", ref));
  double worst = 0;
  const auto calls = compare_gemm_outputs(c, r, {"call0", "call1"}, 1, 2, &worst);
  ASSERT_EQ(calls.size(), 2u);
  EXPECT_NEAR(calls[0]["rel_err"].get<double>(), 0.1, 1e-12);
  EXPECT_EQ(calls[1]["rel_err"].get<double>(), 0.0);
  EXPECT_EQ(calls[1]["call"], 1);
  EXPECT_NEAR(worst, 0.1, 1e-12);
  const auto timed = compare_gemm_outputs(c, r, {"timed"}, 1, 2, &worst);
  EXPECT_EQ(timed[0]["call"], 1005);
  EXPECT_NEAR(worst, 0.1, 1e-12) << "a smaller error leaves the worst as it was";
  uint64_t s = 0;
  EXPECT_TRUE(nibble::gemm_stored_seed(c, "timed", &s));
  EXPECT_EQ(s, big);
  EXPECT_EQ(nibble::gemm_stored_call(c, "absent"), -1);
  const float nan_c[2] = {NAN, 4}, ref_c[2] = {3, 4};
  EXPECT_TRUE(std::isnan(nibble::gemm_rel_err(nan_c, ref_c, 2)));
  const float zero[2] = {0, 0};
  EXPECT_EQ(nibble::gemm_rel_err(zero, zero, 2), 0.0);
  EXPECT_TRUE(std::isinf(nibble::gemm_rel_err(ref_c, zero, 2)));
}

// Outputs that cannot be compared are refused with a reason, never compared against the wrong A.
TEST(CompareGemmOutputs, RefusesMismatchedCallsSeedsSizesAndUntimedKeptCalls) {
  const std::vector<Out> ref = {{"call1", {1, 2}, 1, 7}, {"timed", {1, 2}, 1001, 9}};
  EXPECT_NE(compare_error({{"call1", {1, 2}, 2, 7}}, ref, {"call1"}, 1, 2).find("call1: the candidate's output is of call 2, the reference's of call 1"),
            std::string::npos);
  EXPECT_NE(compare_error({{"call1", {1, 2}, 1, 8}}, ref, {"call1"}, 1, 2).find("different seeds"), std::string::npos);
  EXPECT_NE(compare_error({{"call1", {1, 2, 3}, 1, 7}}, ref, {"call1"}, 1, 2).find("holds 12 bytes, not M x N fp32 (8)"),
            std::string::npos);
  EXPECT_NE(compare_error({{"timed", {1, 2}, 1, 9}}, {{"timed", {1, 2}, 1, 9}}, {"timed"}, 1, 2).find("not a timed call"),
            std::string::npos);
  EXPECT_EQ(compare_error({{"timed", {1, 2}, 1001, 9}}, ref, {"timed"}, 1, 2), "");
}
