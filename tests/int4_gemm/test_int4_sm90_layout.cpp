// test_int4_sm90_layout.cpp: the wgmma path's repacked layout of int4_gemm_sm90
// (solutions/int4_gemm/sm90/int4_wg_layout.h) decoded on the host exactly as the kernel does
// (decode_chunk: the host build of the same code, one unit per (slab, chunk) in sol::unit_index
// order, lane group g's record part at record_offset(g)), against the fp64 oracle's weight.
//
// For the tiny configs, a residue shape (N = 3000: the last tile partial; K = 3200: 25 groups) and
// slab groups 4 and 8 (the 64- and 128-row tiles): every (row, k) of every padded slab is decoded
// exactly once; a real row's weight equals bf16((q - z) x bf16(scale)) with q - z and the scale read
// from the oracle's definition (its exact weight divided by its fp16 scale), and lies within the
// documented bound (2^-7 + 2^-16) |W| (two roundings of u = 2^-8) of the exact weight; a padded row decodes to 0.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "fixtures/bf16.h"
#include "fixtures/fp16.h"
#include "fixtures/int4_gemm/int4_gemm_fixture.h"
#include "reference/int4_gemm/int4_gemm_oracle.h"
#include "solutions/int4_gemm/sm90/int4_wg_layout.h"

namespace nibble {
namespace {

using namespace int4_sm90;

TEST(Int4Sm90Layout, EveryWeightDecodesAsTheKernelReadsIt) {
  for (const char* config : {"tiny", "tiny-sym", "m17-n3000-k3200"})
    for (const int group : {4, 8}) {
      const Int4GemmConfig c = int4_gemm_config(config);
      const Int4Plain w = generate_int4_gemm_fixture(c, 3, 2).W;
      const Repacked r = repack(w.packed.data(), w.scale.data(), w.zero.data(), c.N, c.K, group);
      ASSERT_EQ(r.n_pad % 128, 0);
      ASSERT_GE(r.n_pad, c.N);
      ASSERT_EQ(r.nch, c.K / 64);
      const int64_t G = c.K / 128;
      std::vector<uint8_t> seen(size_t(r.n_pad * c.K), 0);
      int64_t bad_value = 0, bad_bound = 0, bad_pad = 0;
      for (int64_t slab = 0; slab < r.n_pad / 16; ++slab)
        for (int64_t ch = 0; ch < r.nch; ++ch) {
          const int64_t u = sol::unit_index(slab, ch, r.nch, group);
          for (int lane = 0; lane < 32; ++lane) {
            const int g = lane / 4, t = lane % 4;
            uint32_t q[4], rec[2];
            std::memcpy(q, &r.words[size_t((u * 32 + lane) * 4)], 16);
            std::memcpy(rec, &r.records[size_t(u * kRecordBytes + record_offset(g))], 8);
            uint32_t fr[4][4];
            decode_chunk(q, rec[0], rec[1], fr);
            for (int j = 0; j < 4; ++j)
              for (int reg = 0; reg < 4; ++reg)
                for (int e = 0; e < 2; ++e) {
                  const float got = bf16_to_f32(uint16_t(fr[j][reg] >> (16 * e)));
                  const int64_t n = slab * 16 + sol::frag_row(g, reg), k = ch * 64 + sol::frag_k(t, j, reg, e);
                  ++seen[size_t(n * c.K + k)];
                  if (n >= c.N) {
                    bad_pad += got != 0.0f;
                    continue;
                  }
                  const double exact = oracle::int4_weight(w, n, k);
                  const double s = f16_to_f32(w.scale[size_t(n * G + k / 128)]);
                  const double qz = exact / s;  // an integer in -15..15
                  const float want = round_bf16(float(qz) * round_bf16(float(s)));
                  bad_value += got != want;
                  bad_bound += std::fabs(got - exact) > (0x1p-7 + 0x1p-16) * std::fabs(exact);
                }
          }
        }
      int64_t not_once = 0;
      for (uint8_t v : seen) not_once += v != 1;
      EXPECT_EQ(not_once, 0) << config << " group " << group << ": every (row, k) of the padded slabs once";
      EXPECT_EQ(bad_value, 0) << config << " group " << group;
      EXPECT_EQ(bad_bound, 0) << config << " group " << group;
      EXPECT_EQ(bad_pad, 0) << config << " group " << group;
    }
}

TEST(Int4Sm90Layout, RecordAndDecodeByHand) {
  // One row (n = 0) of one group: codes k -> k % 16, zero 3, scale 0.75 (fp16 0x3A00, exact in bf16).
  const int64_t N = 8, K = 128;
  std::vector<uint8_t> packed(size_t(N * K / 2), 0), zero(size_t(N), 0);
  std::vector<uint16_t> scale(size_t(N), 0x3C00);  // 1.0
  for (int k = 0; k < K; k += 2) packed[size_t(k / 2)] = uint8_t((k % 16) | (((k + 1) % 16) << 4));
  zero[0] = 3;
  scale[0] = 0x3A00;
  const Repacked r = repack(packed.data(), scale.data(), zero.data(), N, K, 4);
  EXPECT_EQ(r.n_pad, 128);
  // Unit (slab 0, chunk 0): lane group 0's record = {bf16 0.75 (0x3F40) for row 0, 1.0 (0x3F80) for
  // row 8}, {128 + 3 (0x4303), 128 + 0 (0x4300)}; rows 8 .. 15 are padding (scale 0, zero 0).
  uint32_t rec[2];
  std::memcpy(rec, &r.records[0], 8);
  EXPECT_EQ(rec[0], 0x00003F40u);
  EXPECT_EQ(rec[1], 0x43004303u);
  // Lane 1 (g 0, t 1), step 0, register 0: row 0, k 2 and 3 -> (2 - 3) x 0.75, (3 - 3) x 0.75.
  uint32_t q[4], fr[4][4];
  std::memcpy(q, &r.words[4], 16);
  decode_chunk(q, rec[0], rec[1], fr);
  EXPECT_EQ(bf16_to_f32(uint16_t(fr[0][0])), -0.75f);
  EXPECT_EQ(bf16_to_f32(uint16_t(fr[0][0] >> 16)), 0.0f);
  // Register 2: k 2 + 8 = 10, 11 -> 7 x 0.75 = 5.25, 8 x 0.75 = 6.
  EXPECT_EQ(bf16_to_f32(uint16_t(fr[0][2])), 5.25f);
  EXPECT_EQ(bf16_to_f32(uint16_t(fr[0][2] >> 16)), 6.0f);
  EXPECT_THROW(repack(packed.data(), scale.data(), zero.data(), N, K, 2), std::invalid_argument);
  EXPECT_THROW(repack(packed.data(), scale.data(), zero.data(), N, 100, 4), std::invalid_argument);
}

TEST(Int4Sm90Layout, TwoRoundingsStayWithinTheBound) {
  // 13 x an fp16 scale whose bf16 rounding is the worst case (half an ulp): 1 + 2^-8 + 2^-10 rounds
  // to 1 + 2^-7 in bf16 (up), then 13 x 1.0078125 = 13.1015625 rounds to 13.125: the error against
  // the exact 13.0634765625 is 2^-7.7 of it: more than one rounding (2^-8) allows, within
  // two (2^-7 + 2^-16).
  const float s = 1.0f + 0x1p-8f + 0x1p-10f;
  const float w = round_bf16(13.0f * round_bf16(s));
  EXPECT_EQ(round_bf16(s), 1.0f + 0x1p-7f);
  EXPECT_EQ(w, 13.125f);
  EXPECT_GT(std::fabs(double(w) - 13.0 * s), 0x1p-8 * 13.0 * s);
  EXPECT_LE(std::fabs(double(w) - 13.0 * s), (0x1p-7 + 0x1p-16) * 13.0 * s);
}

}  // namespace
}  // namespace nibble
