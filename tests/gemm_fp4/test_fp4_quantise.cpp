// test_fp4_quantise.cpp: the NVFP4 and MXFP4 block quantisers on hand-worked rows (a full block and
// a partial last block each), their invariants on random data, and their errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <vector>

#include "fixtures/fp4.h"
#include "fixtures/rng.h"

namespace nibble::fp4 {
namespace {

// K = 20: one block of 16 and a partial block of 4, global scale 0.5 chosen by hand.
//  Block 0: amax 12 -> (12 / 6) / 0.5 = 4 -> e4m3 0x48 (2^2); denominator 4 * 0.5 = 2; w / 2:
//    12 -> 6 (7)    -12 -> -6 (F)   1 -> 0.5 (1)    0.5 -> 0.25 tie (0)   0.49 -> 0.245 (0)
//    -0.5 -> -0.25 tie (-0 = 8)     2.5 -> 1.25 tie (2: 1.0)   3.5 -> 1.75 tie (4: 2.0)
//    5 -> 2.5 tie (4: 2.0)          7 -> 3.5 tie (6: 4.0)      9 -> 4.5 (6: 4.0)   11 -> 5.5 (7: 6)
//    -0.1 -> -0.05 (8)              0 -> 0 (0)     6 -> 3 (5)   4 -> 2 (4)
//  Block 1 (k = 16..19): amax 0.3 -> (0.3 / 6) / 0.5 = 0.1 -> e4m3 RNE: 0.1 / 2^-7 = 12.8 -> 13 ->
//    0x1D = 1.625 * 2^-4 = 0.1015625; denominator 0.05078125:
//    0.3 -> 5.91 (7: 6)   -0.3 -> (F)   0.1 -> 1.97 (4: 2)   0.05 -> 0.98 (2: 1)
TEST(Nvfp4, HandWorkedRowWithPartialBlock) {
  const std::vector<float> w = {12, -12, 1, 0.5f, 0.49f, -0.5f, 2.5f, 3.5f, 5, 7, 9, 11, -0.1f, 0, 6, 4,
                                0.3f, -0.3f, 0.1f, 0.05f};
  std::vector<uint8_t> packed(10, 0xAA), scale(2, 0xAA);
  nvfp4_quantise_row(w.data(), 20, 0.5f, packed.data(), scale.data());
  EXPECT_EQ(scale[0], 0x48);
  EXPECT_EQ(scale[1], 0x1D);
  const std::vector<uint8_t> want = {0xF7, 0x01, 0x80, 0x42, 0x64, 0x76, 0x08, 0x45, 0xF7, 0x24};
  for (size_t i = 0; i < want.size(); ++i) EXPECT_EQ(packed[i], want[i]) << "byte " << i;
  // value = e2m1 * e4m3 * global
  EXPECT_EQ(nvfp4_dequant_at(packed.data(), scale.data(), 0.5f, 0), 12.0);
  EXPECT_EQ(nvfp4_dequant_at(packed.data(), scale.data(), 0.5f, 9), 8.0);
  EXPECT_EQ(nvfp4_dequant_at(packed.data(), scale.data(), 0.5f, 14), 6.0);
  EXPECT_EQ(nvfp4_dequant_at(packed.data(), scale.data(), 0.5f, 16), 6 * 0.1015625 * 0.5);
  EXPECT_EQ(nvfp4_dequant_at(packed.data(), scale.data(), 0.5f, 19), 1 * 0.1015625 * 0.5);
  EXPECT_TRUE(std::signbit(nvfp4_dequant_at(packed.data(), scale.data(), 0.5f, 5)));  // -0
}

TEST(Nvfp4, GlobalScaleRule) {
  EXPECT_EQ(nvfp4_global_scale(2688.0f), 1.0f);
  EXPECT_EQ(nvfp4_global_scale(5376.0f), 2.0f);
  EXPECT_EQ(nvfp4_global_scale(0.0f), 1.0f);
  EXPECT_EQ(nvfp4_global_scale(1.0f), 1.0f / 2688.0f);
  EXPECT_THROW(nvfp4_global_scale(INFINITY), std::invalid_argument);
  EXPECT_THROW(nvfp4_global_scale(-1.0f), std::invalid_argument);
}

// With global = amax / 2688, the block holding the tensor's amax gets scale 448 (0x7E) and that
// element code 6 (saturating neither past 448 nor to the NaN byte), whatever the amax.
TEST(Nvfp4, TensorAmaxLandsOnTheTopScale) {
  const uint64_t key = rng::stream_key(6, "test.nvfp4.amax");
  for (uint64_t t = 0; t < 2000; ++t) {
    std::vector<float> w(32);
    for (size_t i = 0; i < w.size(); ++i) w[i] = rng::normal(key, t * 32 + i) * std::ldexp(1.0f, int(t % 30) - 15);
    float amax = 0;
    for (float v : w) amax = std::max(amax, std::fabs(v));
    const float g = nvfp4_global_scale(amax);
    std::vector<uint8_t> packed(16), scale(2);
    nvfp4_quantise_row(w.data(), 32, g, packed.data(), scale.data());
    const uint8_t top = std::max(scale[0], scale[1]);
    ASSERT_EQ(top, 0x7E) << "trial " << t;
    for (uint8_t s : scale) ASSERT_NE(s & 0x7F, 0x7F);
  }
}

TEST(Nvfp4, ZeroAndTinyBlocksGiveZeroCodes) {
  std::vector<float> w(16, 0.0f);
  w[3] = 1e-30f;  // far below 2^-10 * 6 * global: the scale rounds to 0
  std::vector<uint8_t> packed(8, 0xAA), scale(1, 0xAA);
  nvfp4_quantise_row(w.data(), 16, 1.0f, packed.data(), scale.data());
  EXPECT_EQ(scale[0], 0x00);
  for (uint8_t b : packed) EXPECT_EQ(b, 0x00);
}

TEST(Nvfp4, RejectsBadInput) {
  std::vector<float> w(16, 1.0f);
  std::vector<uint8_t> packed(8), scale(1);
  EXPECT_THROW(nvfp4_quantise_row(w.data(), 15, 1.0f, packed.data(), scale.data()), std::invalid_argument);
  EXPECT_THROW(nvfp4_quantise_row(w.data(), 16, 0.0f, packed.data(), scale.data()), std::invalid_argument);
  w[7] = NAN;
  EXPECT_THROW(nvfp4_quantise_row(w.data(), 16, 1.0f, packed.data(), scale.data()), std::invalid_argument);
}

// K = 40: one block of 32 and a partial block of 8.
//  Block 0: amax 7 -> floor(log2 7) - 2 = 0 -> byte 127, X = 1:
//    7 -> 6 (7, saturated)  0.25 -> 0 (tie)  -2.5 -> -2 (C, tie)  5 -> 4 (6, tie)  0.75 -> 1 (2, tie)
//    1.75 -> 2 (4, tie)     3 -> 3 (5)       -0.5 -> (9)          then 24 zeros
//  Block 1: amax 0.75 -> -1 - 2 = -3 -> byte 124, X = 1/8; V * 8:
//    0.75 -> 6 (7)  0.1 -> 0.8 -> 1 (2)  -0.3 -> -2.4 -> -2 (C)  0.0625 -> 0.5 (1)  0.03125 -> 0.25 (0)
//    0.5 -> 4 (6)   0.6 -> 4.8 -> 4 (6)  0.7 -> 5.6 -> 6 (7)
TEST(Mxfp4, HandWorkedRowWithPartialBlock) {
  std::vector<float> w(40, 0.0f);
  const float b0[8] = {7, 0.25f, -2.5f, 5, 0.75f, 1.75f, 3, -0.5f};
  const float b1[8] = {0.75f, 0.1f, -0.3f, 0.0625f, 0.03125f, 0.5f, 0.6f, 0.7f};
  for (int i = 0; i < 8; ++i) {
    w[size_t(i)] = b0[i];
    w[size_t(32 + i)] = b1[i];
  }
  std::vector<uint8_t> packed(20, 0xAA), scale(2, 0xAA);
  mxfp4_quantise_row(w.data(), 40, packed.data(), scale.data());
  EXPECT_EQ(scale[0], 127);
  EXPECT_EQ(scale[1], 124);
  const uint8_t head[4] = {0x07, 0x6C, 0x42, 0x95};
  for (int i = 0; i < 4; ++i) EXPECT_EQ(packed[size_t(i)], head[i]) << "byte " << i;
  for (int i = 4; i < 16; ++i) EXPECT_EQ(packed[size_t(i)], 0x00) << "byte " << i;
  const uint8_t tail[4] = {0x27, 0x1C, 0x60, 0x76};
  for (int i = 0; i < 4; ++i) EXPECT_EQ(packed[size_t(16 + i)], tail[i]) << "byte " << 16 + i;
  EXPECT_EQ(mxfp4_dequant_at(packed.data(), scale.data(), 0), 6.0);   // 7 saturated
  EXPECT_EQ(mxfp4_dequant_at(packed.data(), scale.data(), 2), -2.0);
  EXPECT_EQ(mxfp4_dequant_at(packed.data(), scale.data(), 32), 0.75);
  EXPECT_EQ(mxfp4_dequant_at(packed.data(), scale.data(), 35), 0.0625);
  EXPECT_EQ(mxfp4_dequant_at(packed.data(), scale.data(), 39), 0.75);
}

// On normal data both quantisers stay within half a step of the grid they chose, where the step
// of an element is its scale times the e2m1 spacing around it (<= 2 * scale, 1 below 4 * scale),
// plus the saturation OCP's rule allows at the top of an MX block.
TEST(Fp4, ErrorOnNormalData) {
  const int64_t K = 3080;  // partial last blocks for both formats
  const uint64_t key = rng::stream_key(7, "test.fp4.error");
  std::vector<float> w(size_t(8 * K));
  float amax = 0;
  for (size_t e = 0; e < w.size(); ++e) {
    w[e] = rng::normal(key, e) / 55.0f;
    amax = std::max(amax, std::fabs(w[e]));
  }
  const float g = nvfp4_global_scale(amax);
  double nv_err = 0, mx_err = 0, ref = 0;
  for (int64_t r = 0; r < 8; ++r) {
    std::vector<uint8_t> p(size_t(K / 2)), s16(size_t(num_blocks(K, 16))), s32(size_t(num_blocks(K, 32)));
    const float* row = &w[size_t(r * K)];
    nvfp4_quantise_row(row, K, g, p.data(), s16.data());
    for (int64_t k = 0; k < K; ++k) {
      const double v = nvfp4_dequant_at(p.data(), s16.data(), g, k);
      const double step = double(e4m3_decode(s16[size_t(k / 16)])) * double(g) * 2.0;
      ASSERT_LE(std::fabs(v - row[k]), step / 2 * (1 + 1e-6) + 1e-12) << "nvfp4 row " << r << " k " << k;
      nv_err += (v - row[k]) * (v - row[k]);
      ref += double(row[k]) * row[k];
    }
    mxfp4_quantise_row(row, K, p.data(), s32.data());
    for (int64_t k = 0; k < K; ++k) {
      const double v = mxfp4_dequant_at(p.data(), s32.data(), k);
      const double X = e8m0_decode(s32[size_t(k / 32)]);
      // |V / X| < 8: saturation at 6 costs up to 2 X, rounding up to X (half of the spacing 2).
      ASSERT_LE(std::fabs(v - row[k]), 2 * X) << "mxfp4 row " << r << " k " << k;
      mx_err += (v - row[k]) * (v - row[k]);
    }
  }
  const double nv_rel = std::sqrt(nv_err / ref), mx_rel = std::sqrt(mx_err / ref);
  std::printf("relative RMS quantisation error on normal data: NVFP4 %.4f, MXFP4 %.4f\n", nv_rel, mx_rel);
  EXPECT_GT(nv_rel, 0.02);
  EXPECT_LT(nv_rel, 0.15);
  EXPECT_GT(mx_rel, nv_rel);  // coarser blocks and power-of-two scales
  EXPECT_LT(mx_rel, 0.25);
}

}  // namespace
}  // namespace nibble::fp4
