// test_int4_formats.cpp: fixtures/int4_formats.h on hand-worked words and by round trips.
//
// The hand-worked case: N = 8 outputs, K = 16 inputs, groups of 8 (2 groups), so every word of
// every format is written out below, computed by hand from the rules in int4_formats.h:
//   code q[n][k] = (n + k) & 15             every code 0..15 occurs (n + k runs over 0..22)
//   zero z[n][0] = n + 1 (1..8), z[n][1] = 15 - n (15..8)
//   scale bits s[n][g] = 0x3C00 + 16 n + g  (opaque 16-bit words: they are moved, never converted)
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <stdexcept>
#include <vector>

#include "fixtures/int4_formats.h"

using namespace nibble;

namespace {

Int4Plain hand_case() {
  Int4Plain p;
  p.N = 8;
  p.K = 16;
  p.group = 8;
  p.packed.assign(8 * 8, 0);
  p.scale.resize(8 * 2);
  p.zero.resize(8 * 2);
  for (int n = 0; n < 8; ++n) {
    for (int k = 0; k < 16; k += 2)
      p.packed[n * 8 + k / 2] = uint8_t(((n + k) & 15) | (((n + k + 1) & 15) << 4));  // low nibble = even k
    p.zero[n * 2 + 0] = uint8_t(n + 1);
    p.zero[n * 2 + 1] = uint8_t(15 - n);
    for (int g = 0; g < 2; ++g) p.scale[n * 2 + g] = uint16_t(0x3C00 + 16 * n + g);
  }
  return p;
}

int32_t w(uint32_t bits) { return static_cast<int32_t>(bits); }

void expect_same(const Int4Plain& a, const Int4Plain& b) {
  EXPECT_EQ(a.N, b.N);
  EXPECT_EQ(a.K, b.K);
  EXPECT_EQ(a.group, b.group);
  EXPECT_EQ(a.packed, b.packed);
  EXPECT_EQ(a.scale, b.scale);
  EXPECT_EQ(a.zero, b.zero);
}

// A random plain triple; zeros in 1..15 so that GPTQ v1 can hold them.
Int4Plain random_plain(int64_t N, int64_t K, int group, uint32_t seed) {
  std::mt19937 rng(seed);
  Int4Plain p;
  p.N = N;
  p.K = K;
  p.group = group;
  p.packed.resize(size_t(N * K / 2));
  for (auto& b : p.packed) b = uint8_t(rng());
  p.scale.resize(size_t(N * (K / group)));
  for (auto& s : p.scale) s = uint16_t(rng());
  p.zero.resize(size_t(N * (K / group)));
  for (auto& z : p.zero) z = uint8_t(1 + rng() % 15);
  return p;
}

}  // namespace

TEST(Int4Formats, PlainCodeAccessorReadsLowNibbleForEvenK) {
  const Int4Plain p = hand_case();
  // byte [n=3, 2] packs k = 4 (low) and k = 5 (high): codes 7 and 8 -> 0x87
  EXPECT_EQ(p.packed[3 * 8 + 2], 0x87);
  EXPECT_EQ(p.code(3, 4), 7);
  EXPECT_EQ(p.code(3, 5), 8);
}

TEST(Int4Formats, AwqWordsByHand) {
  const AwqWeights a = to_awq(hand_case());
  ASSERT_EQ(a.qweight.size(), 16u);  // (K, N/8) = (16, 1)
  // word [k, 0]: bits 4i..4i+3 hold n = order[i], order = 0,2,4,6,1,3,5,7
  // k = 0: q = n -> nibbles (i0..i7) 0,2,4,6,1,3,5,7 -> 0x75316420
  EXPECT_EQ(a.qweight[0], w(0x75316420u));
  // k = 8: q = 8 + n -> 8,A,C,E,9,B,D,F -> 0xFDB9ECA8 (negative as int32)
  EXPECT_EQ(a.qweight[8], w(0xFDB9ECA8u));
  // k = 9: q = 9..15,0 -> n0=9 n2=B n4=D n6=F n1=A n3=C n5=E n7=0 -> 0x0ECAFDB9
  EXPECT_EQ(a.qweight[9], w(0x0ECAFDB9u));
  // k = 15: n0=F n2=1 n4=3 n6=5 n1=0 n3=2 n5=4 n7=6 -> 0x6420531F
  EXPECT_EQ(a.qweight[15], w(0x6420531Fu));
  ASSERT_EQ(a.qzeros.size(), 2u);  // (K/G, N/8)
  // group 0: z = n + 1 -> i0..i7: 1,3,5,7,2,4,6,8 -> 0x86427531
  EXPECT_EQ(a.qzeros[0], w(0x86427531u));
  // group 1: z = 15 - n -> F,D,B,9,E,C,A,8 -> 0x8ACE9BDF
  EXPECT_EQ(a.qzeros[1], w(0x8ACE9BDFu));
  // scales (K/G, N): transposed, bits unchanged
  ASSERT_EQ(a.scales.size(), 16u);
  EXPECT_EQ(a.scales[0 * 8 + 5], 0x3C00 + 80 + 0);
  EXPECT_EQ(a.scales[1 * 8 + 5], 0x3C00 + 80 + 1);
  expect_same(from_awq(a), hand_case());
}

TEST(Int4Formats, AwqOrderIgnoredIsNotTheSameMatrix) {
  // Reading AWQ words in the identity order swaps n = 1 with n = 2 etc.: the check that the order
  // matters at all (a kernel that ignores it reads other outputs' codes).
  const AwqWeights a = to_awq(hand_case());
  const uint32_t word = uint32_t(a.qweight[0]);
  EXPECT_EQ((word >> 4) & 0xF, 2u);  // nibble 1 is n = 2, not n = 1
  EXPECT_EQ((word >> 16) & 0xF, 1u); // nibble 4 is n = 1
}

TEST(Int4Formats, GptqWordsByHand) {
  const GptqWeights q = to_gptq(hand_case());
  ASSERT_EQ(q.qweight.size(), 16u);  // (K/8, N) = (2, 8)
  // word [r, n]: nibble j holds k = 8r + j
  // [0, 0]: q = 0..7 -> 0x76543210;  [1, 0]: q = 8..15 -> 0xFEDCBA98
  EXPECT_EQ(q.qweight[0 * 8 + 0], w(0x76543210u));
  EXPECT_EQ(q.qweight[1 * 8 + 0], w(0xFEDCBA98u));
  // [1, 3]: q = 11,12,13,14,15,0,1,2 -> 0x210FEDCB
  EXPECT_EQ(q.qweight[1 * 8 + 3], w(0x210FEDCBu));
  ASSERT_EQ(q.qzeros.size(), 2u);  // (K/G, N/8)
  // the minus-one rule: group 0 stores z - 1 = n -> 0x76543210
  EXPECT_EQ(q.qzeros[0], w(0x76543210u));
  // group 1 stores 14 - n: E,D,C,B,A,9,8,7 -> 0x789ABCDE
  EXPECT_EQ(q.qzeros[1], w(0x789ABCDEu));
  EXPECT_TRUE(q.g_idx.empty());
  expect_same(from_gptq(q), hand_case());
}

TEST(Int4Formats, GptqZeroZeroIsRefusedAndStoredFifteenIsRefused) {
  Int4Plain p = hand_case();
  p.zero[5 * 2 + 1] = 0;  // output 5, group 1
  try {
    to_gptq(p);
    FAIL() << "a zero point of 0 packed into GPTQ v1";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("output 5, group 1"), std::string::npos) << e.what();
  }
  GptqWeights q = to_gptq(hand_case());
  q.qzeros[1] = w(0x789ABCDFu);  // n = 0, group 1: stored 15 = a zero point of 16
  EXPECT_THROW(from_gptq(q), std::invalid_argument);
  q.qzeros[1] = w(0x789ABCD0u);  // stored 0 = a zero point of 1
  EXPECT_EQ(from_gptq(q).zero[0 * 2 + 1], 1);
}

TEST(Int4Formats, GptqGIdxPermutationByHand) {
  // labels {1, 0}: plain group 0 is GPTQ group 1 and vice versa.
  const GptqWeights q = to_gptq(hand_case(), {1, 0});
  ASSERT_EQ(q.g_idx.size(), 16u);
  for (int k = 0; k < 8; ++k) EXPECT_EQ(q.g_idx[k], 1) << k;
  for (int k = 8; k < 16; ++k) EXPECT_EQ(q.g_idx[k], 0) << k;
  // qzeros rows swap: row 0 holds plain group 1 (0x789ABCDE), row 1 plain group 0 (0x76543210)
  EXPECT_EQ(q.qzeros[0], w(0x789ABCDEu));
  EXPECT_EQ(q.qzeros[1], w(0x76543210u));
  // scales rows swap: row 1, output 2 = plain scale (n = 2, g = 0) = 0x3C20
  EXPECT_EQ(q.scales[1 * 8 + 2], 0x3C20);
  EXPECT_EQ(q.scales[0 * 8 + 2], 0x3C21);
  // qweight does not move (g_idx indexes groups, not K)
  EXPECT_EQ(q.qweight, to_gptq(hand_case()).qweight);
  expect_same(from_gptq(q), hand_case());
  // ignoring g_idx reads the other group's scales and zeros: not the same triple
  GptqWeights ignored = q;
  ignored.g_idx.clear();
  const Int4Plain wrong = from_gptq(ignored);
  EXPECT_NE(wrong.zero, hand_case().zero);
  EXPECT_NE(wrong.scale, hand_case().scale);
}

TEST(Int4Formats, GptqScatteredActOrderIsRefused) {
  GptqWeights q = to_gptq(hand_case(), {0, 1});
  std::swap(q.g_idx[3], q.g_idx[12]);  // k = 3 in group 1, k = 12 in group 0
  EXPECT_THROW(from_gptq(q), std::invalid_argument);
  EXPECT_THROW(to_gptq(hand_case(), {0, 0}), std::invalid_argument);
  EXPECT_THROW(to_gptq(hand_case(), {0}), std::invalid_argument);
  // A group id out of range inside a run is said as that, not as scattered groups.
  GptqWeights r = to_gptq(hand_case(), {0, 1});
  r.g_idx[5] = 7;  // two groups
  try {
    from_gptq(r);
    ADD_FAILURE() << "g_idx[5] = 7 of 2 groups was accepted";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("g_idx[5] = 7 is not a group id 0..1"), std::string::npos) << e.what();
  }
}

TEST(Int4Formats, CompressedTensorsWordsByHand) {
  const CompressedTensorsWeights c = to_compressed_tensors(hand_case(), false);
  ASSERT_EQ(c.weight_packed.size(), 16u);  // (N, K/8) = (8, 2)
  // word [n, c]: nibble i holds k = 8c + i, the nibble being (signed q - 8) + 8 = q
  EXPECT_EQ(c.weight_packed[0 * 2 + 0], w(0x76543210u));
  EXPECT_EQ(c.weight_packed[3 * 2 + 1], w(0x210FEDCBu));
  ASSERT_EQ(c.weight_zero_point.size(), 2u);  // (N/8, K/G) = (1, 2), packed down N
  // group 0: nibble i holds z[n = i] = i + 1 -> 0x87654321; group 1: 15 - i -> 0x89ABCDEF
  EXPECT_EQ(c.weight_zero_point[0], w(0x87654321u));
  EXPECT_EQ(c.weight_zero_point[1], w(0x89ABCDEFu));
  EXPECT_EQ(c.weight_scale, hand_case().scale);  // (N, K/G): the plain order
  EXPECT_EQ(c.weight_shape, (std::vector<int64_t>{8, 16}));
  expect_same(from_compressed_tensors(c), hand_case());
}

TEST(Int4Formats, CompressedTensorsSymmetricNeedsZeroEight) {
  EXPECT_THROW(to_compressed_tensors(hand_case(), true), std::invalid_argument);
  Int4Plain p = hand_case();
  p.zero.assign(p.zero.size(), 8);
  const CompressedTensorsWeights c = to_compressed_tensors(p, true);
  EXPECT_TRUE(c.weight_zero_point.empty());
  expect_same(from_compressed_tensors(c), p);
}

TEST(Int4Formats, CompressedTensorsPadsAPartialWord) {
  // K = 12 is not a multiple of 8: pack_to_int32 pads the row with zeros to 16.
  Int4Plain p;
  p.N = 1;
  p.K = 12;
  p.group = 12;
  p.packed = {0x21, 0x43, 0x65, 0x87, 0xA9, 0xCB};  // codes 1..12
  p.scale = {0x3C00};
  p.zero = {8};
  const CompressedTensorsWeights c = to_compressed_tensors(p, true);
  ASSERT_EQ(c.weight_packed.size(), 2u);
  EXPECT_EQ(c.weight_packed[0], w(0x87654321u));
  EXPECT_EQ(c.weight_packed[1], w(0x0000CBA9u));
  expect_same(from_compressed_tensors(c), p);
}

TEST(Int4Formats, RoundTripsThroughEveryFormat) {
  for (uint32_t seed : {1u, 2u, 3u}) {
    const Int4Plain p = random_plain(24, 384, 128, seed);
    expect_same(from_awq(to_awq(p)), p);
    expect_same(from_gptq(to_gptq(p)), p);
    expect_same(from_gptq(to_gptq(p, {2, 0, 1})), p);
    expect_same(from_compressed_tensors(to_compressed_tensors(p, false)), p);
  }
}

TEST(Int4Formats, ShapesTheFormatsCannotHoldAreRefused) {
  Int4Plain p = random_plain(12, 256, 128, 7);  // N = 12: not a multiple of 8
  EXPECT_THROW(to_awq(p), std::invalid_argument);
  EXPECT_THROW(to_gptq(p), std::invalid_argument);
  expect_same(from_compressed_tensors(to_compressed_tensors(p, false)), p);  // padded, fine
  p.packed.pop_back();
  EXPECT_THROW(to_compressed_tensors(p, false), std::invalid_argument);
  AwqWeights a = to_awq(random_plain(8, 256, 128, 8));
  a.qzeros.pop_back();
  EXPECT_THROW(from_awq(a), std::invalid_argument);
}

TEST(Int4Formats, LayoutNames) {
  for (Int4Layout l : all_int4_layouts()) EXPECT_EQ(int4_layout_from_name(int4_layout_name(l)), l);
  EXPECT_THROW(int4_layout_from_name("exllama"), std::invalid_argument);
  EXPECT_STREQ(int4_layout_name(Int4Layout::GptqGIdx), "gptq_g_idx");
}
