// test_gemm_guard.cpp: the GEMM grader's replay guard (gemm_call_a): every call after the first
// flips the signs of a fresh half of A's elements, so no kept C, re-signed per row or not, matches
// a later call. The whole-grade check of a cheat is GradeGemmGpu.ReplayingTheFirstCallFails (gpu).
// And TimedRandom, the timed calls' randomness (a seed only when the user fixes one).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <set>
#include <vector>

#include "harness/task.h"
#include "harness/gemm_session.h"
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
  nibble::TimedRandom seeded(uint64_t(7));
  std::mt19937_64 mt(7);
  for (int i = 0; i < 1000; ++i) ASSERT_EQ(seeded(), mt()) << i;
  nibble::TimedRandom os(std::nullopt), os2(std::nullopt);
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
