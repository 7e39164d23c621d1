// test_gemm_guard.cpp: the GEMM grader's replay guard (gemm_call_a): every call after the first
// flips the signs of a fresh half of A's elements, so no kept C, re-signed per row or not, matches
// a later call. The whole-grade check of a cheat is GradeGemmGpu.ReplayingTheFirstCallFails (gpu);
// the GPU's staging of the same A, launch_sign_mask, is checked against gemm_call_a in
// GpuChecks.SignMaskIsGemmCallA (gpu).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <string>
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
