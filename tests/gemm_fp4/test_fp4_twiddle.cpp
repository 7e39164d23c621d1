// test_fp4_twiddle.cpp: the tilelang seed's bit-twiddled MXFP4 layout (fixtures/fp4.h): a pair worked
// by hand, the seed's own decoder (torch_convert_bit_twiddling, transcribed) against e2m1_decode on
// all 65536 byte pairs, and plain <-> twiddled round trips on random rows.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <stdexcept>
#include <vector>

#include "fixtures/fp4.h"
#include "fixtures/rng.h"

namespace nibble::fp4 {
namespace {

// The seed's decoder output: bf16 bits, widened to fp32, times 2^126 (exact: 2^126 is a power of two).
double seed_value(uint8_t first, uint8_t second, int pos) {
  const uint32_t u = uint32_t(twiddled_bf16_bits(first, second, pos)) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return double(f) * std::ldexp(1.0, 126);
}

// codes 7 (6.0), 9 (-0.5), 4 (2.0), A (-1.0); sign/e1/e0/m of each:
//   c0 = 0 1 1 1   c1 = 1 0 0 1   c2 = 0 1 0 0   c3 = 1 0 1 0
// v (bit 15 .. 0) = s0 s3 m3 s1 e1_3 e0_3 s2 e1_0 | e0_0 m0 e1_1 e0_1 m1 e1_2 e0_2 m2
//                 = 0  1  0  1  0    1    0  1    | 1    1  0    0    1  1    0    0   = 0x55, 0xCC
// plain: c0 | c1 << 4 = 0x97, c2 | c3 << 4 = 0xA4.
TEST(Twiddle, HandWorkedPair) {
  const uint8_t codes[4] = {0x7, 0x9, 0x4, 0xA};
  uint8_t first = 0, second = 0;
  twiddle4(codes, &first, &second);
  EXPECT_EQ(first, 0x55);
  EXPECT_EQ(second, 0xCC);
  const uint8_t plain[2] = {0x97, 0xA4};
  uint8_t tw[2] = {0, 0}, back[2] = {0, 0};
  plain_to_twiddled(plain, tw, 1, 4);
  EXPECT_EQ(tw[0], 0x55);
  EXPECT_EQ(tw[1], 0xCC);
  twiddled_to_plain(tw, back, 1, 4);
  EXPECT_EQ(back[0], 0x97);
  EXPECT_EQ(back[1], 0xA4);
  // The seed's decoder: pos 0 is v & 0x81C0 = 0x01C0 (exponent field 3, mantissa bit 1):
  // 2^(3 - 127) * 1.5 * 2^126 = 6.
  EXPECT_EQ(twiddled_bf16_bits(0x55, 0xCC, 0), 0x01C0);
  EXPECT_EQ(seed_value(0x55, 0xCC, 0), 6.0);
  EXPECT_EQ(seed_value(0x55, 0xCC, 1), -0.5);
  EXPECT_EQ(seed_value(0x55, 0xCC, 2), 2.0);
  EXPECT_EQ(seed_value(0x55, 0xCC, 3), -1.0);
}

// The comment's bit table (twiddle4) and the seed's decoder code agree on every byte pair, and the
// layout is a bijection on byte pairs.
TEST(Twiddle, SeedDecoderAgreesWithTheBitTableOnAllPairs) {
  for (int f = 0; f < 256; ++f)
    for (int s = 0; s < 256; ++s) {
      uint8_t c[4];
      untwiddle4(uint8_t(f), uint8_t(s), c);
      uint8_t f2, s2;
      twiddle4(c, &f2, &s2);
      ASSERT_EQ(f2, f);
      ASSERT_EQ(s2, s);
      for (int pos = 0; pos < 4; ++pos) {
        const double seed = seed_value(uint8_t(f), uint8_t(s), pos);
        const double mine = double(e2m1_decode(c[pos]));
        ASSERT_EQ(seed, mine) << "pair " << f << "," << s << " pos " << pos;
        ASSERT_EQ(std::signbit(seed), std::signbit(mine));
      }
    }
  EXPECT_THROW(twiddled_bf16_bits(0, 0, 4), std::invalid_argument);
}

TEST(Twiddle, RoundTripIsIdentityAndBothLayoutsDecodeAlike) {
  const int64_t rows = 7, K = 3080;  // the residue K: 3080 % 4 == 0
  std::vector<uint8_t> plain(size_t(rows * K / 2)), tw(plain.size()), back(plain.size());
  const uint64_t key = rng::stream_key(8, "test.twiddle");
  for (size_t i = 0; i < plain.size(); ++i) plain[i] = uint8_t(rng::draw(key, i) & 0xFF);
  plain_to_twiddled(plain.data(), tw.data(), rows, K);
  twiddled_to_plain(tw.data(), back.data(), rows, K);
  EXPECT_EQ(back, plain);
  EXPECT_NE(tw, plain);
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t k = 0; k < K; ++k) {
      const uint8_t* prow = &plain[size_t(r * K / 2)];
      const uint8_t* trow = &tw[size_t(r * K / 2)];
      const int64_t p = k / 4;
      ASSERT_EQ(seed_value(trow[2 * p], trow[2 * p + 1], int(k % 4)), double(e2m1_decode(packed_code(prow, k))))
          << "row " << r << " k " << k;
    }
}

TEST(Twiddle, NeedsKMultipleOf4) {
  std::vector<uint8_t> a(6), b(6);
  EXPECT_THROW(plain_to_twiddled(a.data(), b.data(), 1, 6), std::invalid_argument);
  EXPECT_THROW(twiddled_to_plain(a.data(), b.data(), 1, 10), std::invalid_argument);
  EXPECT_NO_THROW(plain_to_twiddled(a.data(), b.data(), 1, 8));
}

}  // namespace
}  // namespace nibble::fp4
