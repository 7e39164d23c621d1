// test_fixture_quantise.cpp: the int4 RTN quantiser on hand-worked groups, its nibble order, its
// clamps, the bf16-rounded scale, and its error on realistic data.
#include <gtest/gtest.h>

#include <cmath>
#include <stdexcept>
#include <vector>

#include "fixtures/bf16.h"
#include "fixtures/decode/quantise.h"
#include "fixtures/rng.h"

namespace nibble {
namespace {

// Row of two groups of 128, worked by hand.
//  Group 0: mn = -0.75, mx = 6.75 -> scale = 7.5 / 15 = 0.5 (exact in bf16), zero = rint(1.5) = 2.
//    w =  -0.75: rint(-1.5) = -2, +2 ->  0
//    w =   6.75: rint(13.5) = 14, +2 -> 16 -> clamps to 15 (both halves rounded up: the one clamp
//                 that min/max quantisation can produce)
//    w =   0.25: rint(0.5)  =  0 (half to even), +2 -> 2
//    w =   0.75: rint(1.5)  =  2, +2 -> 4
//    w =   1.0 :  2, +2 -> 4
//    w =  -0.25: rint(-0.5) = -0, +2 -> 2
//    w =   3.1 : rint(6.2)  =  6, +2 -> 8
//    w =   0   : 2
//  Group 1: mn = -1, mx = 2 -> (mx - mn) / 15 = 0.2f = 0x3E4CCCCD, bf16 RNE -> 0x3E4D = 0.2001953125;
//    zero = rint(1 / 0.2001953125 = 4.9951) = 5
//    w = -1  : rint(-4.995) = -5, +5 -> 0
//    w =  2  : rint(9.990)  = 10, +5 -> 15
//    w = 0.3 : 0.3 / 0.2001953125 = 1.4985 -> 1, +5 -> 6   (with the unrounded 0.2 it would be
//              rint(1.5) = 2 -> 7: the stored bf16 scale is what computes the codes)
//    w =  0  : 5
std::vector<float> hand_row() {
  std::vector<float> w(256, 0.0f);
  const float g0[] = {-0.75f, 6.75f, 0.25f, 0.75f, 1.0f, -0.25f, 3.1f};
  for (int i = 0; i < 7; ++i) w[size_t(i)] = g0[i];
  w[128] = -1.0f;
  w[129] = 2.0f;
  w[130] = 0.3f;
  return w;
}

TEST(Quantise, HandWorkedGroups) {
  const auto w = hand_row();
  std::vector<uint8_t> packed(128), zero(2);
  std::vector<uint16_t> scale(2);
  quantise_row_int4(w.data(), 256, 128, packed.data(), scale.data(), zero.data());

  EXPECT_EQ(scale[0], 0x3F00);  // 0.5
  EXPECT_EQ(zero[0], 2);
  EXPECT_EQ(scale[1], 0x3E4D);  // 0.2001953125
  EXPECT_EQ(bf16_to_f32(scale[1]), 0.2001953125f);
  EXPECT_EQ(zero[1], 5);

  // Low nibble = even index: byte 0 holds code(w0) = 0 low and code(w1) = 15 high.
  EXPECT_EQ(packed[0], 0xF0);
  EXPECT_EQ(packed[1], 0x42);  // codes 2 (w2), 4 (w3)
  EXPECT_EQ(packed[2], 0x24);  // codes 4 (w4), 2 (w5)
  EXPECT_EQ(packed[3], 0x28);  // codes 8 (w6), 2 (w7 = 0)
  for (int i = 4; i < 64; ++i) EXPECT_EQ(packed[size_t(i)], 0x22) << "byte " << i;
  EXPECT_EQ(packed[64], 0xF0);  // codes 0, 15
  EXPECT_EQ(packed[65], 0x56);  // codes 6 (w = 0.3), 5 (w = 0)
  for (int i = 66; i < 128; ++i) EXPECT_EQ(packed[size_t(i)], 0x55) << "byte " << i;

  // (code - zero) * scale
  EXPECT_EQ(dequantise_int4_at(packed.data(), scale.data(), zero.data(), 0, 128), -1.0f);
  EXPECT_EQ(dequantise_int4_at(packed.data(), scale.data(), zero.data(), 1, 128), 6.5f);  // clamped
  EXPECT_EQ(dequantise_int4_at(packed.data(), scale.data(), zero.data(), 6, 128), 3.0f);
  EXPECT_EQ(dequantise_int4_at(packed.data(), scale.data(), zero.data(), 7, 128), 0.0f);
  EXPECT_EQ(dequantise_int4_at(packed.data(), scale.data(), zero.data(), 128, 128), -5 * 0.2001953125f);
  EXPECT_EQ(dequantise_int4_at(packed.data(), scale.data(), zero.data(), 130, 128), 0.2001953125f);
}

TEST(Quantise, GroupParamsAndCodes) {
  const Int4GroupParams p = int4_group_params(-0.75f, 6.75f);
  EXPECT_EQ(p.scale_bf16, 0x3F00);
  EXPECT_EQ(p.zero, 2);
  EXPECT_EQ(int4_code(6.75f, p), 15);
  EXPECT_EQ(int4_code(0.25f, p), 2);
  EXPECT_EQ(int4_code(1e30f, p), 15);
  EXPECT_EQ(int4_code(-1e30f, p), 0);
  // An all-positive group: -mn / scale < 0, so the zero point clamps to 0.
  const Int4GroupParams q = int4_group_params(1.0f, 16.0f);
  EXPECT_EQ(q.scale_bf16, 0x3F80);  // 1.0
  EXPECT_EQ(q.zero, 0);
  EXPECT_EQ(int4_code(16.0f, q), 15);
  // An all-negative group: zero clamps to 15.
  EXPECT_EQ(int4_group_params(-16.0f, -1.0f).zero, 15);
}

TEST(Quantise, ConstantGroupUsesSmallestNormalScale) {
  std::vector<float> w(128, 0.0f);
  std::vector<uint8_t> packed(64), zero(1);
  std::vector<uint16_t> scale(1);
  quantise_row_int4(w.data(), 128, 128, packed.data(), scale.data(), zero.data());
  EXPECT_EQ(scale[0], kBf16MinNormalBits);
  EXPECT_EQ(bf16_to_f32(scale[0]), std::ldexp(1.0f, -126));
  EXPECT_EQ(zero[0], 0);
  for (uint8_t b : packed) EXPECT_EQ(b, 0);
  std::vector<float> back(128, 1.0f);
  dequantise_int4(packed.data(), scale.data(), zero.data(), 1, 128, 128, back.data());
  for (float v : back) EXPECT_EQ(v, 0.0f);
}

TEST(Quantise, MatrixEqualsRows) {
  const int64_t out = 3, in = 384;
  std::vector<float> w(size_t(out * in));
  const uint64_t key = rng::stream_key(5, "test.matrix");
  for (size_t e = 0; e < w.size(); ++e) w[e] = rng::normal(key, e);
  std::vector<uint8_t> packed(size_t(out * in / 2)), zero(size_t(out * 3));
  std::vector<uint16_t> scale(size_t(out * 3));
  quantise_int4(w.data(), out, in, 128, packed.data(), scale.data(), zero.data());
  for (int64_t o = 0; o < out; ++o) {
    std::vector<uint8_t> p(size_t(in / 2)), z(3);
    std::vector<uint16_t> s(3);
    quantise_row_int4(w.data() + o * in, in, 128, p.data(), s.data(), z.data());
    for (int64_t i = 0; i < in / 2; ++i) ASSERT_EQ(packed[size_t(o * in / 2 + i)], p[size_t(i)]);
    for (int g = 0; g < 3; ++g) {
      ASSERT_EQ(scale[size_t(o * 3 + g)], s[size_t(g)]);
      ASSERT_EQ(zero[size_t(o * 3 + g)], z[size_t(g)]);
    }
  }
}

// On the fixture's own distribution: every value within half a step of its dequantised code, plus
// at the clamped ends 15 * 2^-8 steps (the bf16 scale rounded down) -- so 0.57 steps -- and the relative
// RMS error near the seed's "~10% relative quantisation error on the weights".
TEST(Quantise, ErrorOnNormalData) {
  const int64_t out = 64, in = 1024;
  std::vector<float> w(size_t(out * in)), back(w.size());
  const uint64_t key = rng::stream_key(1, "test.error");
  for (size_t e = 0; e < w.size(); ++e) w[e] = rng::normal(key, e) / 32.0f;
  std::vector<uint8_t> packed(w.size() / 2), zero(w.size() / 128);
  std::vector<uint16_t> scale(w.size() / 128);
  quantise_int4(w.data(), out, in, 128, packed.data(), scale.data(), zero.data());
  dequantise_int4(packed.data(), scale.data(), zero.data(), out, in, 128, back.data());
  double err2 = 0, ref2 = 0;
  for (size_t e = 0; e < w.size(); ++e) {
    const float s = bf16_to_f32(scale[e / 128]);
    ASSERT_LE(std::fabs(back[e] - w[e]), 0.57f * s) << "element " << e;
    err2 += double(back[e] - w[e]) * (back[e] - w[e]);
    ref2 += double(w[e]) * w[e];
  }
  const double rel = std::sqrt(err2 / ref2);
  EXPECT_GT(rel, 0.05);
  EXPECT_LT(rel, 0.15);
}

TEST(Quantise, RejectsBadShapes) {
  std::vector<float> w(256);
  std::vector<uint8_t> p(128), z(2);
  std::vector<uint16_t> s(2);
  EXPECT_THROW(quantise_row_int4(w.data(), 100, 128, p.data(), s.data(), z.data()), std::invalid_argument);
  EXPECT_THROW(quantise_row_int4(w.data(), 256, 127, p.data(), s.data(), z.data()), std::invalid_argument);
  EXPECT_THROW(quantise_row_int4(w.data(), 256, 0, p.data(), s.data(), z.data()), std::invalid_argument);
  EXPECT_THROW(dequantise_int4(p.data(), s.data(), z.data(), 1, 200, 128, w.data()), std::invalid_argument);
}

}  // namespace
}  // namespace nibble
