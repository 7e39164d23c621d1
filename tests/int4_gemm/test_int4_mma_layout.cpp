// test_int4_mma_layout.cpp: the small-M int4 layout (solutions/int4_gemm/mma/int4_mma_layout.h: the
// kPerm k order, one 64-byte record per slab and group) decoded on the host exactly as the kernel does
// (lane, step, register, element; decode_reg: the bf16 pair 128 + q minus the row's 128 + z, then the
// chunk's sum times the row's fp16 scale in fp32) against the fp64 oracle's weight, for every weight
// of the tiny configs and of a residue shape whose last slab is partial; every (row, k) exactly once.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "fixtures/bf16.h"
#include "fixtures/fp16.h"
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
    std::vector<uint8_t> seen(size_t(r.slabs * 16 * c.K), 0);
    int64_t bad = 0;
    for (int64_t s = 0; s < r.slabs; ++s)
      for (int64_t ch = 0; ch < r.chunks; ++ch)
        for (int lane = 0; lane < 32; ++lane) {
          const int g = lane / 4, t = lane % 4;
          uint32_t rec[2];  // the kernel's load_record: 8 bytes at 8 g of the (slab, group) record
          std::memcpy(rec, &r.records[size_t((s * r.groups + ch / 2) * kRecordBytes + 8 * g)], 8);
          for (int j = 0; j < kWordsPerLane; ++j) {
            const uint32_t word = r.words[size_t(((s * r.chunks + ch) * 32 + lane) * kWordsPerLane + j)];
            for (int reg = 0; reg < 4; ++reg) {
              const uint32_t qz = decode_reg(word, reg, rec[0]);
              const float scale = f16_to_f32(uint16_t(rec[1] >> (16 * (reg & 1))));
              for (int e = 0; e < 2; ++e) {
                const double got = double(bf16_to_f32(uint16_t(qz >> (16 * e)))) * double(scale);
                const int64_t n = s * kSlabRows + sol::frag_row(g, reg);
                const int64_t k = ch * kChunkK + sol::chunk_k(sol::KOrder::kPerm, t, j, reg, e);
                ++seen[size_t(n * c.K + k)];
                const double want = n < c.N ? oracle::int4_weight(w, n, k) : 0.0;  // padded rows weigh 0
                bad += got != want;
              }
            }
          }
        }
    int64_t not_once = 0;
    for (uint8_t v : seen) not_once += v != 1;
    EXPECT_EQ(bad, 0) << config;
    EXPECT_EQ(not_once, 0) << config << ": every (row, k) of every slab once";
  }
}

TEST(Int4MmaLayout, FragmentIndicesByHand) {
  // mma.m16n8k16's A fragment: lane 5 is (g 1, t 1); register 3 element 1 is row 9, k 2 + 8 + 1 = 11;
  // in the kPerm order the same element sits at k 16 + 4 j + 2 + 1 of the chunk (j = 2: 27).
  EXPECT_EQ(sol::frag_row(1, 3), 9);
  EXPECT_EQ(sol::frag_k(1, 0, 3, 1), 11);
  EXPECT_EQ(sol::frag_k(3, 2, 0, 0), 38);
  EXPECT_EQ(sol::chunk_k(sol::KOrder::kPerm, 1, 2, 3, 1), 27);
  // register r of a word: nibbles r (element 0) and r + 4 (element 1) -> {128 + q0, 128 + q1} as bf16 bits
  EXPECT_EQ(biased_pair(0x00A00050u, 1), 0x430A4305u);
  EXPECT_EQ(biased_pair(0xF0000000u, 3), 0x430F4300u);
  EXPECT_EQ(bf16_to_f32(0x4305), 133.0f);
  // minus the high half's 128 + 3 (register 1 is row g + 8): {5 - 3, 10 - 3}
  EXPECT_EQ(decode_reg(0x00A00050u, 1, 0x43034309u), 0x40E04000u);  // bf16 {2.0, 7.0}
  EXPECT_THROW(repack(nullptr, nullptr, nullptr, 16, 100), std::invalid_argument);
}

}  // namespace
}  // namespace nibble
