// test_int4_gemm_oracle.cpp: the fp64 oracle of gemm-w4a16-int4 on hand-worked weights, and the
// separation of its variants on the tiny fixtures (must-pass far below the gate, must-fail far
// above: the numbers the gate is chosen from, printed).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>

#include "fixtures/bf16.h"
#include "fixtures/fp16.h"
#include "reference/int4_gemm/int4_gemm_oracle.h"
#include "reference/sliver.h"
#include "test_fixture_util.h"

namespace nibble {
namespace {

using oracle::Int4GemmOptions;
using oracle::int4_weight;

// N = 16 (two AWQ words), K = 256 (two groups of 128):
//   q[n][k] = (n + k) & 15, zero[n][g] = 1 + (2n + g) % 15, scale[n][g] = 0.5 (g = 0), 1.0 (g = 1)
Int4Plain hand_weight() {
  Int4Plain p;
  p.N = 16;
  p.K = 256;
  p.group = 128;
  p.packed.assign(16 * 128, 0);
  p.scale.resize(32);
  p.zero.resize(32);
  for (int n = 0; n < 16; ++n) {
    for (int k = 0; k < 256; k += 2) p.packed[n * 128 + k / 2] = uint8_t(((n + k) & 15) | (((n + k + 1) & 15) << 4));
    for (int g = 0; g < 2; ++g) {
      p.zero[n * 2 + g] = uint8_t(1 + (2 * n + g) % 15);
      p.scale[n * 2 + g] = g == 0 ? 0x3800 : 0x3C00;  // fp16 0.5, 1.0
    }
  }
  return p;
}

Int4GemmOptions opt(void (*set)(Int4GemmOptions&)) {
  Int4GemmOptions o;
  set(o);
  return o;
}

TEST(Int4GemmOracle, WeightsByHandUnderEveryVariant) {
  const Int4Plain w = hand_weight();
  // (3, 5): q = 8, z = 1 + 6 = 7, s = 0.5 -> 0.5
  EXPECT_EQ(int4_weight(w, 3, 5), 0.5);
  // nibble_swap: k = 5 reads the low nibble, k = 4's code 7 -> (7 - 7) * 0.5 = 0
  EXPECT_EQ(int4_weight(w, 3, 5, opt([](Int4GemmOptions& o) { o.nibble_swap = true; })), 0.0);
  // awq_order_ignored: n = 3 reads output kAwqOrder[3] = 6: q = 11, z = 13, its own scale 0.5 -> -1
  EXPECT_EQ(int4_weight(w, 3, 5, opt([](Int4GemmOptions& o) { o.awq_order_ignored = true; })), -1.0);
  // n = 12 (second word, i = 4) reads output 8 + kAwqOrder[4] = 9: q = 14, z = 1 + 18 % 15 = 4 -> 5
  EXPECT_EQ(int4_weight(w, 12, 5, opt([](Int4GemmOptions& o) { o.awq_order_ignored = true; })), 5.0);
  // GPTQ's minus one: zero - 1 = 6 -> 1.0; zero + 1 = 8 -> 0
  EXPECT_EQ(int4_weight(w, 3, 5, opt([](Int4GemmOptions& o) { o.gptq_zero_not_plus_one = true; })), 1.0);
  EXPECT_EQ(int4_weight(w, 3, 5, opt([](Int4GemmOptions& o) { o.gptq_zero_plus_one = true; })), 0.0);
  // (3, 130), group 1: q = 133 & 15 = 5, z = 1 + 7 = 8, s = 1 -> -3
  EXPECT_EQ(int4_weight(w, 3, 130), -3.0);
  // g_idx_ignored and scales_per_row: group 0's z = 7, s = 0.5 -> -1
  EXPECT_EQ(int4_weight(w, 3, 130, opt([](Int4GemmOptions& o) { o.g_idx_ignored = true; })), -1.0);
  EXPECT_EQ(int4_weight(w, 3, 130, opt([](Int4GemmOptions& o) { o.scales_per_row = true; })), -1.0);
  // g_idx_ignored on group 0 reads group G - 1 = 1: (8 - 8) * 1 = 0
  EXPECT_EQ(int4_weight(w, 3, 5, opt([](Int4GemmOptions& o) { o.g_idx_ignored = true; })), 0.0);
  // bf16_dequant: scale 1 + 2^-10 (fp16 0x3C01), (q - z) = 3: 3.0029296875 -> bf16 3.0
  Int4Plain b = w;
  b.scale[3 * 2 + 0] = 0x3C01;
  b.zero[3 * 2 + 0] = 5;
  EXPECT_EQ(int4_weight(b, 3, 5), 3.0 * (1.0 + 1.0 / 1024.0));
  EXPECT_EQ(int4_weight(b, 3, 5, opt([](Int4GemmOptions& o) { o.bf16_dequant = true; })), 3.0);
}

TEST(Int4GemmOracle, GemmByHand) {
  // q[n][k] = k % 16, zero 8, scale s_n = n + 1 (fp16 exact): W[n][k] = (k % 16 - 8) s_n.
  // A row 0 all ones: C = s_n * 8 * sum_{j<16} (j - 8) = -64 s_n.
  // A row 1, A[k] = 0.5 (k % 4): per 16 k, sum (j % 4)(j - 8) = -34 - 10 + 14 + 38 = 8, times 0.5,
  // times 8 periods: C = 32 s_n.
  Int4Plain w;
  w.N = 8;
  w.K = 128;
  w.group = 128;
  w.packed.resize(8 * 64);
  for (int n = 0; n < 8; ++n)
    for (int k = 0; k < 128; k += 2) w.packed[n * 64 + k / 2] = uint8_t((k % 16) | (((k + 1) % 16) << 4));
  for (int n = 0; n < 8; ++n) w.scale.push_back(f32_to_f16(float(n + 1)));
  w.zero.assign(8, 8);
  std::vector<uint16_t> A(2 * 128);
  for (int k = 0; k < 128; ++k) {
    A[k] = f32_to_bf16(1.0f);
    A[128 + k] = f32_to_bf16(0.5f * float(k % 4));
  }
  for (int threads : {1, 3}) {
    const auto C = oracle::int4_gemm(A.data(), 2, w, {}, threads);
    for (int n = 0; n < 8; ++n) {
      EXPECT_EQ(C[n], -64.0 * (n + 1)) << n;
      EXPECT_EQ(C[8 + n], 32.0 * (n + 1)) << n;
    }
  }
  Int4GemmOptions sliver;
  sliver.drop_sliver = true;
  const auto S = oracle::int4_gemm(A.data(), 2, w, sliver, 2);
  EXPECT_EQ(ref::sliver_columns(8), 1);
  EXPECT_EQ(S[7], 0.0);
  EXPECT_EQ(S[6], -64.0 * 7);
  Int4GemmOptions f32;
  f32.fp32_accumulate = true;
  EXPECT_EQ(oracle::int4_gemm(A.data(), 2, w, f32, 1)[8 + 2], 96.0);  // small integers: exact in fp32 too
}

double rel(const std::vector<double>& a, const std::vector<double>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num += (a[i] - b[i]) * (a[i] - b[i]);
    den += b[i] * b[i];
  }
  return std::sqrt(num / den);
}

double elem(const std::vector<double>& a, const std::vector<double>& b) {
  double num = 0, den = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num = std::max(num, std::fabs(a[i] - b[i]));
    den = std::max(den, std::fabs(b[i]));
  }
  return num / den;
}

TEST(Int4GemmOracle, VariantsSeparateOnTheTinyFixtures) {
  // Gate candidate 1e-2 (the FP4 tasks'), guard 0.05: must-pass at most half of both, must-fail at
  // least twice the gate, or (c_sliver) twice the guard. The symmetric config has no zero to get
  // wrong by one... except that GPTQ's rule still moves 8 to 7 or 9: every variant applies.
  const double gate = 1e-2, guard = 0.05;
  for (const char* config : {"tiny", "tiny-sym", "m16-n3072-k3072"})
    for (uint64_t seed : {0ull, 1ull}) {
      const Int4GemmConfig c = int4_gemm_config(config);
      const Int4GemmData d = generate_int4_gemm_fixture(c, seed, 2);
      const auto exact = oracle::int4_gemm(d.A.data(), c.M, d.W, {}, 2);
      for (const auto& v : oracle::int4_gemm_variants()) {
        const auto got = oracle::int4_gemm(d.A.data(), c.M, d.W, v.options, 2);
        const double r = rel(got, exact), e = elem(got, exact);
        std::printf("%-16s seed %llu  %-24s rel %.3e  elem %.3e\n", config, (unsigned long long)seed, v.name.c_str(), r, e);
        if (v.must_pass) {
          EXPECT_LE(r, gate / 2) << config << " " << v.name;
          EXPECT_LE(e, guard / 2) << config << " " << v.name;
        } else if (v.name == "c_sliver") {
          EXPECT_GE(e, 2 * guard) << config << " " << v.name;
        } else {
          EXPECT_GE(r, 2 * gate) << config << " " << v.name;
        }
      }
    }
}

}  // namespace
}  // namespace nibble
