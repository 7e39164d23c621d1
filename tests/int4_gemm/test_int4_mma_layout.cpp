// test_int4_mma_layout.cpp: the repacked layout of int4_gemm_mma (solutions/int4_gemm/mma/
// int4_mma_layout.h) decoded on the host exactly as the kernel does (lane, step, register, element;
// the bf16 pair 128 + q minus the row's 128 + z, times its scale) against the fp64 oracle's weight,
// for every weight of the tiny configs and of a residue shape whose last slab is partial.
#include <gtest/gtest.h>

#include <cstring>

#include "fixtures/bf16.h"
#include "fixtures/int4_gemm/int4_gemm_fixture.h"
#include "reference/int4_gemm/int4_gemm_oracle.h"
#include "solutions/int4_gemm/mma/int4_mma_layout.h"

namespace nibble {
namespace {

using namespace int4_mma;

TEST(Int4MmaLayout, EveryWeightDecodesAsTheKernelReadsIt) {
  for (const char* config : {"tiny", "tiny-sym", "m1-n40-k256"}) {
    const Int4GemmConfig c = int4_gemm_config(config);
    const Int4Plain w = generate_int4_gemm_fixture(c, 2, 1).W;
    const Repacked r = repack(w.packed.data(), w.scale.data(), w.zero.data(), c.N, c.K);
    ASSERT_EQ(r.slabs, (c.N + 15) / 16);
    int64_t checked = 0, bad = 0;
    for (int64_t s = 0; s < r.slabs; ++s)
      for (int64_t ch = 0; ch < r.chunks; ++ch)
        for (int lane = 0; lane < 32; ++lane) {
          const int g = lane / 4, t = lane % 4;
          const RowRecord lo = r.records[size_t((s * r.groups + ch / 2) * kSlabRows + g)];
          const RowRecord hi = r.records[size_t((s * r.groups + ch / 2) * kSlabRows + g + 8)];
          for (int j = 0; j < kWordsPerLane; ++j) {
            const uint32_t word = r.words[size_t(((s * r.chunks + ch) * 32 + lane) * kWordsPerLane + j)];
            for (int reg = 0; reg < 4; ++reg) {
              const RowRecord& rec = (reg & 1) ? hi : lo;
              const uint32_t pair = biased_pair(word, reg);
              for (int e = 0; e < 2; ++e) {
                const float q128 = bf16_to_f32(uint16_t(pair >> (16 * e)));
                const float z128 = bf16_to_f32(uint16_t(rec.zz >> (16 * e)));
                const double got = double(q128 - z128) * double(rec.scale);
                const int64_t n = s * kSlabRows + frag_row(g, reg), k = ch * kChunkK + frag_k(t, j, reg, e);
                const double want = n < c.N ? oracle::int4_weight(w, n, k) : 0.0;  // padded rows weigh 0
                bad += got != want;
                ++checked;
              }
            }
          }
        }
    EXPECT_EQ(bad, 0) << config;
    EXPECT_EQ(checked, r.slabs * 16 * c.K) << config << ": every (row, k) of every slab once";
  }
}

TEST(Int4MmaLayout, FragmentIndicesByHand) {
  // mma.m16n8k16's A fragment: lane 5 is (g 1, t 1); register 3 element 1 is row 9, k 2 + 8 + 1 = 11.
  EXPECT_EQ(frag_row(1, 3), 9);
  EXPECT_EQ(frag_k(1, 0, 3, 1), 11);
  EXPECT_EQ(frag_k(3, 2, 0, 0), 38);
  // register r of a word: nibbles r (element 0) and r + 4 (element 1) -> {128 + q0, 128 + q1} as bf16 bits
  EXPECT_EQ(biased_pair(0x00A00050u, 1), 0x430A4305u);
  EXPECT_EQ(biased_pair(0xF0000000u, 3), 0x430F4300u);
  EXPECT_EQ(bf16_to_f32(0x4305), 133.0f);
  EXPECT_THROW(repack(nullptr, nullptr, nullptr, 16, 100), std::invalid_argument);
}

}  // namespace
}  // namespace nibble
