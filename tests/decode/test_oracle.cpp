// test_oracle.cpp: each piece of the fp64 oracle against values worked out by hand.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <stdexcept>
#include <vector>

#include "fixtures/decode/decode_config.h"
#include "reference/decode/oracle_fp64.h"

namespace nibble::oracle {
namespace {

// bf16 bit patterns used below (sign | 8-bit exponent | 7-bit mantissa).
constexpr uint16_t kBf16One = 0x3F80;        // 1.0
constexpr uint16_t kBf16Half = 0x3F00;       // 0.5
constexpr uint16_t kBf16Quarter = 0x3E80;    // 0.25
constexpr uint16_t kBf16Two = 0x4000;        // 2.0
constexpr uint16_t kBf16MinusHalf = 0xBF00;  // -0.5
constexpr uint16_t kBf16OneAndAHalf = 0x3FC0;
constexpr uint16_t kBf16OnePlusUlp = 0x3F81;  // 1 + 2^-7

TEST(OracleDequant, LowNibbleIsTheEvenIndex) {
  EXPECT_EQ(unpack_code(0xA3, 0), 0x3);  // even index: low nibble
  EXPECT_EQ(unpack_code(0xA3, 1), 0xA);  // odd index: high nibble
  EXPECT_EQ(unpack_code(0xA3, 6), 0x3);
  EXPECT_EQ(unpack_code(0xA3, 7), 0xA);
  EXPECT_EQ(unpack_code(0x0F, 0), 15);
  EXPECT_EQ(unpack_code(0xF0, 1), 15);
}

TEST(OracleDequant, CodeMinusZeroTimesScale) {
  EXPECT_EQ(dequant_value(10, 3, kBf16Half), 3.5);          // (10 - 3) * 0.5
  EXPECT_EQ(dequant_value(3, 8, kBf16OneAndAHalf), -7.5);   // (3 - 8) * 1.5: the zero point shifts below 0
  EXPECT_EQ(dequant_value(8, 8, kBf16Two), 0.0);
  // A scale with its last mantissa bit set: (15 - 0) * (1 + 2^-7) = 15.1171875, exact.
  EXPECT_EQ(dequant_value(15, 0, kBf16OnePlusUlp), 15.1171875);
  EXPECT_EQ(bf16_to_double(0xC140), -12.0);
}

// A 2 x 4 weight with group 2, every element worked out by hand.
struct HandWeight {
  // row 0 bytes 0x21, 0x43 -> codes 1, 2, 3, 4; row 1 bytes 0xF0, 0x7E -> codes 0, 15, 14, 7
  std::vector<uint8_t> packed{0x21, 0x43, 0xF0, 0x7E};
  std::vector<uint16_t> scale{kBf16One, kBf16Quarter, kBf16Two, kBf16MinusHalf};
  std::vector<uint8_t> zero{1, 2, 8, 7};
  QuantWeightView view() const {
    QuantWeightView w;
    w.packed = packed.data();
    w.scale = scale.data();
    w.zero = zero.data();
    w.out = 2;
    w.in = 4;
    w.group = 2;
    return w;
  }
};

TEST(OracleDequant, WeightViewPerGroupScaleAndZero) {
  HandWeight hw;
  const QuantWeightView w = hw.view();
  // row 0: (1-1)*1, (2-1)*1, (3-2)*0.25, (4-2)*0.25
  EXPECT_EQ(w.at(0, 0), 0.0);
  EXPECT_EQ(w.at(0, 1), 1.0);
  EXPECT_EQ(w.at(0, 2), 0.25);
  EXPECT_EQ(w.at(0, 3), 0.5);
  // row 1: (0-8)*2, (15-8)*2, (14-7)*-0.5, (7-7)*-0.5
  EXPECT_EQ(w.at(1, 0), -16.0);
  EXPECT_EQ(w.at(1, 1), 14.0);
  EXPECT_EQ(w.at(1, 2), -3.5);
  EXPECT_EQ(w.at(1, 3), 0.0);
  std::vector<double> row(4);
  w.row(1, row.data());
  EXPECT_EQ(row, (std::vector<double>{-16.0, 14.0, -3.5, 0.0}));
}

TEST(OracleDequant, MatvecIsWTimesX) {
  HandWeight hw;
  const std::vector<double> y = matvec(hw.view(), {1, 2, 3, 4});
  ASSERT_EQ(y.size(), 2u);
  EXPECT_EQ(y[0], 0 * 1 + 1 * 2 + 0.25 * 3 + 0.5 * 4);   // 4.75
  EXPECT_EQ(y[1], -16 * 1 + 14 * 2 - 3.5 * 3 + 0 * 4);  // 1.5
  EXPECT_THROW(matvec(hw.view(), {1, 2, 3}), std::invalid_argument);
}

TEST(OracleDequant, MatvecDoesNotDependOnThreads) {
  // 130 rows (odd split over 3 threads), in 256 = 2 groups of 128.
  const int64_t out = 130, in = 256, group = 128;
  std::vector<uint8_t> packed(size_t(out * in / 2)), zero(size_t(out * in / group));
  std::vector<uint16_t> scale(zero.size());
  uint32_t s = 12345;
  auto next = [&] { return s = s * 1664525u + 1013904223u; };
  for (auto& b : packed) b = uint8_t(next() >> 24);
  for (auto& z : zero) z = uint8_t((next() >> 24) & 0xF);
  for (auto& sc : scale) sc = uint16_t(0x3C00 + ((next() >> 24) & 0x7F));  // ~2^-7 .. 2^-6
  std::vector<double> x(static_cast<size_t>(in));
  for (auto& v : x) v = double(int32_t(next() >> 8)) / double(1 << 23);
  QuantWeightView w{packed.data(), scale.data(), zero.data(), out, in, group};
  const auto y1 = matvec(w, x, 1), y3 = matvec(w, x, 3);
  EXPECT_EQ(y1, y3);
}

TEST(OracleBf16, RoundsToNearestEvenInOneStep) {
  EXPECT_EQ(double_to_bf16(1.0), 0x3F80);
  EXPECT_EQ(double_to_bf16(-2.0), 0xC000);
  EXPECT_EQ(double_to_bf16(1.0 + std::ldexp(1.0, -8)), 0x3F80);      // tie -> even (down)
  EXPECT_EQ(double_to_bf16(1.0 + 3 * std::ldexp(1.0, -8)), 0x3F82);  // tie -> even (up)
  // Just above / below a tie by 2^-40: fp32 would round both onto the tie, and a second rounding
  // to even would then be wrong for the first one.
  EXPECT_EQ(double_to_bf16(1.0 + std::ldexp(1.0, -8) + std::ldexp(1.0, -40)), 0x3F81);
  EXPECT_EQ(double_to_bf16(-(1.0 + std::ldexp(1.0, -8) + std::ldexp(1.0, -40))), 0xBF81);
  EXPECT_EQ(double_to_bf16(1.0 + std::ldexp(1.0, -8) - std::ldexp(1.0, -40)), 0x3F80);
  EXPECT_EQ(double_to_bf16(std::numeric_limits<double>::infinity()), 0x7F80);
  EXPECT_EQ(double_to_bf16(1e300), 0x7F80);
  const uint16_t nan = double_to_bf16(std::numeric_limits<double>::quiet_NaN());
  EXPECT_EQ(nan & 0x7F80, 0x7F80);
  EXPECT_NE(nan & 0x007F, 0);
}

TEST(OracleBf16, RoundingWithinAWindow) {
  const double ulp8 = std::ldexp(1.0, -8);  // half a bf16 ulp at 1.0
  // Just above the tie between 0x3F80 (1.0) and 0x3F81: bf16 says 0x3F81; a value 1e-9 away may
  // round to either neighbour, but never to 0x3F82.
  const double near_tie = 1.0 + ulp8 + std::ldexp(1.0, -40);
  EXPECT_TRUE(is_rounding_within(near_tie, 0.0, 0x3F81));
  EXPECT_FALSE(is_rounding_within(near_tie, 0.0, 0x3F80));
  EXPECT_TRUE(is_rounding_within(near_tie, 1e-9, 0x3F80));
  EXPECT_TRUE(is_rounding_within(near_tie, 1e-9, 0x3F81));
  EXPECT_FALSE(is_rounding_within(near_tie, 1e-9, 0x3F82));
  // Far from a tie a small window accepts only the correct rounding.
  EXPECT_TRUE(is_rounding_within(1.0, 1e-5, 0x3F80));
  EXPECT_FALSE(is_rounding_within(1.0, 1e-5, 0x3F81));
  EXPECT_FALSE(is_rounding_within(1.0, 1e-5, 0x3F7F));
  // A window of a few ulps accepts the ulps it spans, in either direction (and -0 == +0).
  EXPECT_TRUE(is_rounding_within(1.0, 3 * ulp8, 0x3F81));
  EXPECT_TRUE(is_rounding_within(1.0, 3 * ulp8, 0x3F7F));
  EXPECT_TRUE(is_rounding_within(0.0, 0.0, 0x8000));
  EXPECT_FALSE(is_rounding_within(1.0, 1.0, 0x7FC0));  // NaN never
}

TEST(OracleRope, PositionZeroIsIdentity) {
  std::vector<double> x{1, 2, 3, 4};
  rope_rotate_half(x.data(), 4, 0, 500000.0);
  EXPECT_EQ(x, (std::vector<double>{1, 2, 3, 4}));
}

TEST(OracleRope, RotateHalfAtPositionOne) {
  // hd = 4, theta = 4: inv_freq_0 = 4^0 = 1 and inv_freq_1 = 4^(-2/4) = 0.5, both exact, so at
  // pos 1 the angles are exactly 1 and 0.5 rad. Pairs are (x0, x2) and (x1, x3) (rotate-half).
  const double c1 = 0.5403023058681398, s1 = 0.8414709848078965;  // cos 1, sin 1
  const double c5 = 0.8775825618903728, s5 = 0.4794255386042030;  // cos 0.5, sin 0.5
  std::vector<double> x{1, 2, 3, 4};
  rope_rotate_half(x.data(), 4, 1, 4.0);
  EXPECT_NEAR(x[0], 1 * c1 - 3 * s1, 1e-15);  // -1.98411064855555
  EXPECT_NEAR(x[2], 3 * c1 + 1 * s1, 1e-15);  //  2.46237790241232
  EXPECT_NEAR(x[1], 2 * c5 - 4 * s5, 1e-15);  // -0.16253703063607
  EXPECT_NEAR(x[3], 4 * c5 + 2 * s5, 1e-15);  //  4.46918132476990
}

TEST(OracleRope, RotationKeepsEachPairsNorm) {
  std::vector<double> x(128);
  for (size_t i = 0; i < x.size(); ++i) x[i] = std::sin(double(i) + 0.5);
  std::vector<double> y = x;
  rope_rotate_half(y.data(), 128, 2048, 500000.0);
  for (size_t i = 0; i < 64; ++i)
    EXPECT_NEAR(y[i] * y[i] + y[i + 64] * y[i + 64], x[i] * x[i] + x[i + 64] * x[i + 64], 1e-14);
  EXPECT_NE(y[0], x[0]);  // pair 0 turns by 2048 rad
  EXPECT_THROW(rope_rotate_half(y.data(), 3, 1, 4.0), std::invalid_argument);
}

TEST(OracleGqa, FullConfigTwentyFourQueryHeadsOnEightKvHeads) {
  const auto full = decode_config("full").dims;
  ASSERT_EQ(full.n_q, 24);
  ASSERT_EQ(full.n_kv, 8);
  const int expected[24] = {0, 0, 0, 1, 1, 1, 2, 2, 2, 3, 3, 3, 4, 4, 4, 5, 5, 5, 6, 6, 6, 7, 7, 7};
  for (int j = 0; j < 24; ++j) EXPECT_EQ(gqa_kv_head(j, 24, 8), expected[j]) << "query head " << j;
}

TEST(OracleGqa, TinyConfig) {
  const auto tiny = decode_config("tiny").dims;
  ASSERT_EQ(tiny.n_q, 4);
  ASSERT_EQ(tiny.n_kv, 2);
  EXPECT_EQ(gqa_kv_head(0, tiny.n_q, tiny.n_kv), 0);
  EXPECT_EQ(gqa_kv_head(1, tiny.n_q, tiny.n_kv), 0);
  EXPECT_EQ(gqa_kv_head(2, tiny.n_q, tiny.n_kv), 1);
  EXPECT_EQ(gqa_kv_head(3, tiny.n_q, tiny.n_kv), 1);
  EXPECT_THROW(gqa_kv_head(0, 5, 2), std::invalid_argument);
}

TEST(OracleRmsnorm, HandVector) {
  // mean(3^2, 4^2) = 12.5; y = x * gain / sqrt(12.5)
  const auto y = rmsnorm({3, 4}, {1, 2}, 0.0);
  EXPECT_NEAR(y[0], 3 / std::sqrt(12.5), 1e-15);  // 0.848528137423857
  EXPECT_NEAR(y[1], 8 / std::sqrt(12.5), 1e-15);  // 2.262741699796952
  // eps is added inside the root: sqrt(1 + 3) = 2, exactly.
  EXPECT_EQ(rmsnorm({1, 1, 1, 1}, {1, 1, 1, 1}, 3.0), (std::vector<double>{0.5, 0.5, 0.5, 0.5}));
  EXPECT_EQ(rmsnorm({-2, 2}, {0.5, 1}, 0.0), (std::vector<double>{-0.5, 1.0}));
  EXPECT_THROW(rmsnorm({1, 2}, {1}, 0.0), std::invalid_argument);
}

TEST(OracleSilu, HandValues) {
  EXPECT_EQ(silu(0.0), 0.0);
  EXPECT_NEAR(silu(1.0), 0.7310585786300049, 1e-16);    // 1 / (1 + e^-1)
  EXPECT_NEAR(silu(-1.0), -0.2689414213699951, 1e-16);  // -1 / (1 + e)
  EXPECT_EQ(silu(1000.0), 1000.0);
  EXPECT_EQ(silu(-1000.0), 0.0);  // -1000 / (1 + inf): no NaN
}

TEST(OracleSoftmax, HandValues) {
  const auto p = softmax({0.0, std::log(3.0)});  // e^0 : e^ln3 = 1 : 3
  EXPECT_NEAR(p[0], 0.25, 1e-16);
  EXPECT_NEAR(p[1], 0.75, 1e-16);
  EXPECT_EQ(softmax({1000.0, 1000.0}), (std::vector<double>{0.5, 0.5}));  // max subtracted first
  EXPECT_THROW(softmax({}), std::invalid_argument);
}

TEST(OracleAttention, TwoSlotsByHand) {
  // hd = 4, so scores are q.k / 2: slot 0 scores 0, slot 1 scores (2 ln 3) / 2 = ln 3,
  // p = (1/4, 3/4), out = v0 / 4 + 3 v1 / 4.
  const std::vector<double> q{1, 0, 0, 0};
  const std::vector<double> keys{0, 0, 0, 0, /*slot 1*/ 2 * std::log(3.0), 5, -7, 9};
  const std::vector<double> vals{4, 0, -4, 8, /*slot 1*/ 0, 4, 4, 0};
  const auto out = attend(q, keys, vals, 2, 4);
  ASSERT_EQ(out.size(), 4u);
  EXPECT_NEAR(out[0], 1.0, 1e-15);
  EXPECT_NEAR(out[1], 3.0, 1e-15);
  EXPECT_NEAR(out[2], 2.0, 1e-15);
  EXPECT_NEAR(out[3], 2.0, 1e-15);
  // One slot: the softmax is 1 and the output is that slot's value.
  EXPECT_EQ(attend(q, {3, 1, 4, 1}, {2, 7, 1, 8}, 1, 4), (std::vector<double>{2, 7, 1, 8}));
  EXPECT_THROW(attend(q, keys, vals, 3, 4), std::invalid_argument);
}

}  // namespace
}  // namespace nibble::oracle
