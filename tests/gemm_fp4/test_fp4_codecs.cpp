// test_fp4_codecs.cpp: the e2m1, e4m3fn and e8m0 codecs of fixtures/fp4.h, by hand and exhaustively.
#include <gtest/gtest.h>

#include <cfloat>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <stdexcept>

#include "fixtures/fp4.h"
#include "fixtures/rng.h"

namespace nibble::fp4 {
namespace {

// The nearest representable value by brute force over a format's non-negative codes, ties to the
// even code (the lower bit 0), saturating at the largest: what RNE with saturation means.
template <class Decode>
uint8_t nearest_code(double x, int max_code, Decode decode) {
  const double a = std::fabs(x);
  if (a >= decode(uint8_t(max_code))) return uint8_t(max_code);
  int best = 0;
  double best_d = INFINITY;
  for (int c = 0; c <= max_code; ++c) {
    const double d = std::fabs(decode(uint8_t(c)) - a);
    if (d < best_d || (d == best_d && (c % 2 == 0))) {
      best = c;
      best_d = d;
    }
  }
  return uint8_t(best);
}

TEST(E2m1, EveryCodeDecodesToTheTable) {
  const float table[16] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f,
                           -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};
  for (int c = 0; c < 16; ++c) {
    EXPECT_EQ(e2m1_decode(uint8_t(c)), table[c]) << "code " << c;
    EXPECT_EQ(std::signbit(e2m1_decode(uint8_t(c))), c >= 8) << "code " << c;
  }
  EXPECT_TRUE(std::signbit(e2m1_decode(0x8)));  // -0
  EXPECT_EQ(e2m1_decode(0x1), 0.5f);            // the subnormals
  EXPECT_EQ(e2m1_decode(0x9), -0.5f);
  EXPECT_EQ(e2m1_decode(0xF7), 6.0f);           // only the low nibble is read
}

TEST(E2m1, EncodeRoundsToNearestEvenAndSaturates) {
  // Ties: the even code wins.
  EXPECT_EQ(e2m1_encode(0.25f), 0x0);   // 0 (code 0) vs 0.5 (code 1)
  EXPECT_EQ(e2m1_encode(0.75f), 0x2);   // 0.5 (1) vs 1.0 (2)
  EXPECT_EQ(e2m1_encode(1.25f), 0x2);   // 1.0 (2) vs 1.5 (3)
  EXPECT_EQ(e2m1_encode(1.75f), 0x4);   // 1.5 (3) vs 2.0 (4)
  EXPECT_EQ(e2m1_encode(2.5f), 0x4);    // 2 (4) vs 3 (5)
  EXPECT_EQ(e2m1_encode(3.5f), 0x6);    // 3 (5) vs 4 (6)
  EXPECT_EQ(e2m1_encode(5.0f), 0x6);    // 4 (6) vs 6 (7)
  EXPECT_EQ(e2m1_encode(-5.0f), 0xE);
  // Off ties.
  EXPECT_EQ(e2m1_encode(0.26f), 0x1);
  EXPECT_EQ(e2m1_encode(0.74f), 0x1);
  EXPECT_EQ(e2m1_encode(2.51f), 0x5);
  EXPECT_EQ(e2m1_encode(5.01f), 0x7);
  // Saturation.
  EXPECT_EQ(e2m1_encode(6.0f), 0x7);
  EXPECT_EQ(e2m1_encode(7.0f), 0x7);
  EXPECT_EQ(e2m1_encode(1e30f), 0x7);
  EXPECT_EQ(e2m1_encode(INFINITY), 0x7);
  EXPECT_EQ(e2m1_encode(-INFINITY), 0xF);
  // Signed zero: a small negative value keeps its sign.
  EXPECT_EQ(e2m1_encode(0.0f), 0x0);
  EXPECT_EQ(e2m1_encode(-0.0f), 0x8);
  EXPECT_EQ(e2m1_encode(-0.1f), 0x8);
  EXPECT_EQ(e2m1_encode(1e-45f), 0x0);  // fp32 subnormal
  EXPECT_THROW(e2m1_encode(NAN), std::invalid_argument);
  for (int c = 0; c < 16; ++c) EXPECT_EQ(e2m1_encode(e2m1_decode(uint8_t(c))), c) << "code " << c;
}

TEST(E2m1, EncodeMatchesBruteForceNearest) {
  auto dec = [](uint8_t c) { return double(e2m1_decode(c)); };
  for (int i = -1000; i <= 1000; ++i) {  // every multiple of 1/128 in [-7.8, 7.8]: all ties included
    const float x = float(i) / 128.0f;
    const uint8_t want = uint8_t(nearest_code(x, 7, dec) | (std::signbit(x) ? 0x8 : 0));
    ASSERT_EQ(e2m1_encode(x), want) << "x = " << x;
  }
  const uint64_t key = rng::stream_key(3, "test.e2m1");
  for (uint64_t e = 0; e < 20000; ++e) {
    const float x = rng::normal(key, e) * 2.5f;
    const uint8_t want = uint8_t(nearest_code(x, 7, dec) | (std::signbit(x) ? 0x8 : 0));
    ASSERT_EQ(e2m1_encode(x), want) << "x = " << x;
  }
}

TEST(E2m1, ScaledEncodeIsAnExactExponentShift) {
  EXPECT_EQ(e2m1_encode_scaled(0.75f, -3), 0x7);   // 0.75 * 2^3 = 6
  EXPECT_EQ(e2m1_encode_scaled(7.0f, 0), 0x7);     // saturates
  EXPECT_EQ(e2m1_encode_scaled(12.0f, 1), 0x7);    // 6
  EXPECT_EQ(e2m1_encode_scaled(5.0f, 1), 0x4);     // 2.5: the tie goes to 2 (code 4)
  EXPECT_EQ(e2m1_encode_scaled(-3.0f, -1), 0xF);   // -6
  EXPECT_EQ(e2m1_encode_scaled(1.0f, 2), 0x0);     // 0.25: the tie goes to 0
}

TEST(E4m3, HandValues) {
  EXPECT_EQ(e4m3_decode(0x38), 1.0f);
  EXPECT_EQ(e4m3_decode(0x3F), 1.875f);
  EXPECT_EQ(e4m3_decode(0x40), 2.0f);
  EXPECT_EQ(e4m3_decode(0x7E), 448.0f);
  EXPECT_EQ(e4m3_decode(0xFE), -448.0f);
  EXPECT_EQ(e4m3_decode(0x08), std::ldexp(1.0f, -6));  // min normal
  EXPECT_EQ(e4m3_decode(0x01), std::ldexp(1.0f, -9));  // min subnormal
  EXPECT_EQ(e4m3_decode(0x07), 7 * std::ldexp(1.0f, -9));
  EXPECT_EQ(e4m3_decode(0x1D), 0.1015625f);            // 1.625 * 2^-4
  EXPECT_TRUE(std::isnan(e4m3_decode(0x7F)));
  EXPECT_TRUE(std::isnan(e4m3_decode(0xFF)));
  EXPECT_TRUE(std::signbit(e4m3_decode(0x80)));
}

TEST(E4m3, RoundTripOfEveryByteButNaN) {
  for (int b = 0; b < 256; ++b) {
    if (b == 0x7F || b == 0xFF) continue;
    EXPECT_EQ(e4m3_encode(e4m3_decode(uint8_t(b))), b) << "byte 0x" << std::hex << b;
  }
}

TEST(E4m3, TiesToEvenAndSaturation) {
  EXPECT_EQ(e4m3_encode(1.0625f), 0x38);   // 1 (m 0) vs 1.125 (m 1)
  EXPECT_EQ(e4m3_encode(1.1875f), 0x3A);   // 1.125 (m 1) vs 1.25 (m 2)
  EXPECT_EQ(e4m3_encode(1.9375f), 0x40);   // 1.875 (0x3F) vs 2.0 (0x40): carries into the exponent
  EXPECT_EQ(e4m3_encode(std::ldexp(1.0f, -10)), 0x00);      // half the min subnormal: tie to 0
  EXPECT_EQ(e4m3_encode(3 * std::ldexp(1.0f, -10)), 0x02);  // 1.5 * 2^-9: tie to m = 2
  EXPECT_EQ(e4m3_encode(15 * std::ldexp(1.0f, -10)), 0x08); // 7.5 * 2^-9: tie to the min normal
  EXPECT_EQ(e4m3_encode(0.1f), 0x1D);
  EXPECT_EQ(e4m3_encode(448.0f), 0x7E);
  EXPECT_EQ(e4m3_encode(464.0f), 0x7E);    // the tie with 480 (the NaN pattern)
  EXPECT_EQ(e4m3_encode(470.0f), 0x7E);    // would round to 480: saturates, never 0x7F
  EXPECT_EQ(e4m3_encode(1e6f), 0x7E);
  EXPECT_EQ(e4m3_encode(FLT_MAX), 0x7E);
  EXPECT_EQ(e4m3_encode(INFINITY), 0x7E);
  EXPECT_EQ(e4m3_encode(-INFINITY), 0xFE);
  EXPECT_EQ(e4m3_encode(-500.0f), 0xFE);
  EXPECT_EQ(e4m3_encode(-0.0f), 0x80);
  EXPECT_THROW(e4m3_encode(NAN), std::invalid_argument);
}

TEST(E4m3, EncodeMatchesBruteForceNearest) {
  auto dec = [](uint8_t c) { return double(e4m3_decode(c)); };
  const uint64_t key = rng::stream_key(4, "test.e4m3");
  for (uint64_t e = 0; e < 20000; ++e) {
    // Log-uniform-ish magnitudes from 2^-12 to 2^10: subnormals, normals and saturation.
    const float u = rng::uniform(key, 2 * e);
    const float x = std::ldexp(1.0f + u, int(rng::draw(key, 2 * e + 1) % 23) - 12) *
                    ((e % 2) ? -1.0f : 1.0f);
    const uint8_t want = uint8_t(nearest_code(x, 0x7E, dec) | (std::signbit(x) ? 0x80 : 0));
    ASSERT_EQ(e4m3_encode(x), want) << "x = " << x;
  }
  // Every midpoint between neighbouring positive values.
  for (int b = 0; b < 0x7E; ++b) {
    const double mid = (dec(uint8_t(b)) + dec(uint8_t(b + 1))) / 2;
    const float x = float(mid);
    ASSERT_EQ(double(x), mid);  // midpoints of e4m3 values are exact in fp32
    ASSERT_EQ(e4m3_encode(x), (b % 2 == 0) ? b : b + 1) << "midpoint above byte " << b;
  }
}

TEST(E8m0, DecodeWithBias) {
  EXPECT_EQ(e8m0_decode(127), 1.0);
  EXPECT_EQ(e8m0_decode(128), 2.0);
  EXPECT_EQ(e8m0_decode(124), 0.125);
  EXPECT_EQ(e8m0_decode(0), std::ldexp(1.0, -127));
  EXPECT_EQ(e8m0_decode(254), std::ldexp(1.0, 127));
  EXPECT_TRUE(std::isnan(e8m0_decode(0xFF)));
  EXPECT_EQ(e8m0_decode(127, 125), 4.0);  // the drop-the-feature bias
}

// OCP MX v1.0 section 6.3, Algorithm 1: shared_exp = floor(log2(amax)) - emax_elem (2 for E2M1),
// elements V / 2^shared_exp quantised with clamping to the max normal (6).
TEST(E8m0, OcpSharedExponentByHand) {
  EXPECT_EQ(e8m0_encode_block(6.0f), 127);   // floor(log2 6) = 2 -> 0 -> X = 1, 6 / 1 = 6
  EXPECT_EQ(e8m0_encode_block(7.0f), 127);   // floor(log2 7) = 2 -> X = 1: 7 saturates to 6 (OCP
                                             // does not round the scale up to 2^1)
  EXPECT_EQ(e8m0_encode_block(7.99f), 127);
  EXPECT_EQ(e8m0_encode_block(8.0f), 128);   // floor(log2 8) = 3 -> X = 2, 8 / 2 = 4
  EXPECT_EQ(e8m0_encode_block(4.0f), 127);   // 2 -> X = 1, 4 -> 4
  EXPECT_EQ(e8m0_encode_block(3.99f), 126);  // 1 -> X = 1/2, 3.99 * 2 = 7.98 saturates to 6 (3.0)
  EXPECT_EQ(e8m0_encode_block(0.75f), 124);  // -1 -> -3 -> X = 1/8, 0.75 * 8 = 6
  EXPECT_EQ(e8m0_encode_block(1.0f), 125);   // 0 -> -2 -> X = 1/4, 1 * 4 = 4
  EXPECT_EQ(e8m0_encode_block(0.0f), 0);     // all-zero block: clamps to 2^-127
  EXPECT_EQ(e8m0_encode_block(1e-40f), 0);   // fp32 subnormal
  EXPECT_EQ(e8m0_encode_block(std::ldexp(1.0f, -125)), 0);  // -125 - 2 = -127
  EXPECT_EQ(e8m0_encode_block(std::ldexp(1.0f, -124)), 1);
  EXPECT_EQ(e8m0_encode_block(FLT_MAX), 252);  // 127 - 2 + 127: never 0xFF
  EXPECT_EQ(mx_shared_exponent(0.75f), -3);
  EXPECT_THROW(mx_shared_exponent(INFINITY), std::invalid_argument);
  EXPECT_THROW(mx_shared_exponent(-1.0f), std::invalid_argument);
  EXPECT_THROW(mx_shared_exponent(NAN), std::invalid_argument);
  // The rule guarantees amax / X in [4, 8): every block's largest element lands on 4 or 6.
  const uint64_t key = rng::stream_key(5, "test.e8m0");
  for (uint64_t e = 0; e < 5000; ++e) {
    const float amax = std::ldexp(1.0f + rng::uniform(key, e), int(e % 40) - 20);
    const double q = double(amax) / e8m0_decode(e8m0_encode_block(amax));
    ASSERT_GE(q, 4.0) << amax;
    ASSERT_LT(q, 8.0) << amax;
  }
}

}  // namespace
}  // namespace nibble::fp4
