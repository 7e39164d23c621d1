// test_gemm_fp4_sm90_layout.cpp: gemm_fp4_sm90's repacked layout and register decode
// (solutions/gemm_fp4/sm90/fp4_frag.h) on the CPU, against the exact definition of every weight
// (fixtures/fp4.h nvfp4_dequant_at / mxfp4_dequant_at, what the oracle uses).
//
// For both formats and both k orders, random codes and scale bytes (NVFP4: every non-NaN e4m3 byte,
// negative, zero and subnormal scales included; MXFP4: exponents spread over 100 binades, one row
// at 0x00 / 0xFE extremes) are repacked, then every lane's fragment registers are decoded with the
// kernels' own functions (decode_reg, expand_scale: the host build of the same code) and placed
// back at the (row, k) the layout says they hold. Checks: each (n < N, k < K) decoded exactly once
// and equal, times the epilogue's colmul[n], to the exact weight; padding decodes to 0; NaN scales
// are declined. Shapes: K with a partial last block (200, 136, 3080) and N off 16 / 128; slab groups
// of 1, 4 and 8. The stream kernel's layout (repack_stream: kPerm records reordered by K slice and
// tile, scales beside their codes) the same way, per record, at splits 1 .. 8.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "fixtures/bf16.h"
#include "fixtures/fp4.h"
#include "experiments/gemm_fp4_stream/stream_layout.h"
#include "solutions/gemm_fp4/sm90/fp4_frag.h"

namespace nibble::gemm_fp4_sm90 {
namespace {

struct Weights {
  int64_t N, K;
  std::vector<uint8_t> packed, scale;
  float global = 1.0f;
};

Weights random_weights(bool nvfp4, int64_t N, int64_t K, uint64_t seed) {
  Weights w{N, K, {}, {}, 1.0f};
  const int block = nvfp4 ? 16 : 32;
  const int64_t S = (K + block - 1) / block;
  std::mt19937_64 rng(seed);
  w.packed.resize(size_t(N * K / 2));
  for (auto& b : w.packed) b = uint8_t(rng());
  w.scale.resize(size_t(N * S));
  for (int64_t n = 0; n < N; ++n)
    for (int64_t b = 0; b < S; ++b) {
      uint8_t v;
      if (nvfp4) {
        do v = uint8_t(rng()); while ((v & 0x7F) == 0x7F);  // any e4m3 byte but NaN
      } else if (n == 1) {
        v = (b % 2) ? 0xFE : 0x00;  // the extremes of e8m0 (the 0x00 blocks are zeroed: 2^-254 below)
      } else {
        v = uint8_t(77 + rng() % 100);
      }
      w.scale[size_t(n * S + b)] = v;
    }
  w.global = nvfp4 ? 0.0123f : 1.0f;
  return w;
}

/** Decode every lane's registers as the kernels do; out[n * K + k] = weight x colmul[n]. Counts
 *  how often each element was produced; padding elements must decode to 0. */
void decode_all(bool nvfp4, KOrder order, const Weights& w, const Repacked& r, std::vector<double>* out,
                std::vector<int>* hits) {
  const int sbpc = scale_bytes_per_chunk(nvfp4);
  out->assign(size_t(w.N * w.K), 0.0);
  hits->assign(size_t(w.N * w.K), 0);
  for (int64_t slab = 0; slab < r.n_pad / kSlabRows; ++slab)
    for (int64_t c = 0; c < r.nch; ++c) {
      const int64_t u = unit_index(slab, c, r.nch, r.group);
      const uint8_t* sc = &r.s[size_t(u * sbpc)];
      for (int lane = 0; lane < 32; ++lane) {
        const int g = lane / 4, t = lane % 4;
        for (int j = 0; j < 4; ++j) {
          const uint32_t q = r.w[size_t((u * 32 + lane) * kWordsPerLaneChunk + j)];
          // The scale word and byte indices each kernel uses for this step.
          uint32_t sw = 0;
          int i_lo = 0, i_hi = 1;
          if (order == KOrder::kPerm) {
            const int b = nvfp4 ? t : t / 2;
            sw = sc[b * 16 + 2 * g] | (uint32_t(sc[b * 16 + 2 * g + 1]) << 8);
          } else {
            const int bi = nvfp4 ? j : j / 2, base = g * 2 * (nvfp4 ? 4 : 2) + (nvfp4 && bi >= 2 ? 4 : 0);
            for (int e = 0; e < 4; ++e) sw |= uint32_t(sc[base + e]) << (8 * e);
            i_lo = (2 * bi) & 3;
            i_hi = (2 * bi + 1) & 3;
          }
          const uint32_t s_lo = nvfp4 ? expand_scale<true>(sw, i_lo) : expand_scale<false>(sw, i_lo);
          const uint32_t s_hi = nvfp4 ? expand_scale<true>(sw, i_hi) : expand_scale<false>(sw, i_hi);
          for (int reg = 0; reg < 4; ++reg) {
            const uint32_t v = decode_reg(q, reg, (reg & 1) ? s_hi : s_lo);
            for (int h = 0; h < 2; ++h) {
              const int64_t n = slab * kSlabRows + g + 8 * (reg & 1);
              const int64_t k = c * kChunkK + chunk_k(order, t, j, reg, h);
              const double x = double(bf16_to_f32(uint16_t(h ? v >> 16 : v & 0xFFFF)));
              if (n >= w.N || k >= w.K) {
                ASSERT_EQ(x, 0.0) << "padding (" << n << ", " << k << ") decodes to " << x;
                continue;
              }
              (*out)[size_t(n * w.K + k)] = x * double(r.colmul[size_t(n)]);
              ++(*hits)[size_t(n * w.K + k)];
            }
          }
        }
      }
    }
}

struct Case {
  bool nvfp4;
  KOrder order;
  int64_t N, K;
  int group;
};

class Fp4Sm90Layout : public ::testing::TestWithParam<Case> {};

TEST_P(Fp4Sm90Layout, EveryWeightDecodesExactly) {
  const Case cs = GetParam();
  const Weights w = random_weights(cs.nvfp4, cs.N, cs.K, 42 + uint64_t(cs.N));
  Repacked r;
  ASSERT_EQ(repack(cs.nvfp4, w.N, w.K, w.packed.data(), w.scale.data(), w.global, cs.order, cs.group, &r), "");
  EXPECT_EQ(r.n_pad % kRowAlign, 0);
  std::vector<double> got;
  std::vector<int> hits;
  decode_all(cs.nvfp4, cs.order, w, r, &got, &hits);
  if (HasFatalFailure()) return;
  const int block = cs.nvfp4 ? 16 : 32;
  const int64_t S = (w.K + block - 1) / block;
  int64_t bad = 0;
  for (int64_t n = 0; n < w.N; ++n) {
    const uint8_t* prow = &w.packed[size_t(n * w.K / 2)];
    const uint8_t* srow = &w.scale[size_t(n * S)];
    int emax = 0;
    for (int64_t b = 0; b < S; ++b) emax = std::max<int>(emax, srow[b]);
    for (int64_t k = 0; k < w.K; ++k) {
      ASSERT_EQ(hits[size_t(n * w.K + k)], 1) << "(" << n << ", " << k << ")";
      double want = cs.nvfp4 ? fp4::nvfp4_dequant_at(prow, srow, w.global, k) : fp4::mxfp4_dequant_at(prow, srow, k);
      // The documented MXFP4 exception: a block 2^-252 or more below its row's largest is zeroed.
      if (!cs.nvfp4 && int(srow[k / block]) + 253 - emax < 1) want = 0.0;
      // NVFP4: global x 256 is one fp32 product (exact: a power of two).
      if (got[size_t(n * w.K + k)] != want && ++bad <= 5)
        ADD_FAILURE() << "(" << n << ", " << k << "): got " << got[size_t(n * w.K + k)] << ", want " << want;
    }
  }
  EXPECT_EQ(bad, 0);
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, Fp4Sm90Layout,
    ::testing::Values(Case{true, KOrder::kStd, 40, 200, 1}, Case{true, KOrder::kPerm, 40, 200, 4},
                      Case{false, KOrder::kStd, 40, 200, 8}, Case{false, KOrder::kPerm, 40, 200, 1},
                      Case{true, KOrder::kStd, 130, 136, 4}, Case{true, KOrder::kPerm, 130, 136, 8},
                      Case{false, KOrder::kStd, 130, 136, 1}, Case{false, KOrder::kPerm, 130, 136, 4},
                      Case{true, KOrder::kPerm, 17, 202, 1}, Case{false, KOrder::kStd, 17, 202, 8},
                      Case{true, KOrder::kStd, 300, 3080, 8}, Case{false, KOrder::kPerm, 300, 3080, 4}),
    [](const ::testing::TestParamInfo<Case>& i) {
      return std::string(i.param.nvfp4 ? "nvfp4" : "mxfp4") + (i.param.order == KOrder::kStd ? "_std_" : "_perm_") +
             "n" + std::to_string(i.param.N) + "_k" + std::to_string(i.param.K) + "_g" + std::to_string(i.param.group);
    });

// The stream kernel's layout (repack_stream): every unit record, found where StreamLayout::unit
// says, decodes (kPerm: the lane's 16 code bytes, its 2 scale bytes at 512 + block * 16 + 2g) to
// the exact weights; each (tile, chunk) has its own record and together they fill the buffer.
// K = 3080 (49 chunks, uneven slices), N off 16; split 1, 2, 4, 8 and one slice per chunk.
struct StreamCase {
  bool nvfp4;
  int64_t N, K;
  int split;
};

class Fp4Sm90StreamLayout : public ::testing::TestWithParam<StreamCase> {};

TEST_P(Fp4Sm90StreamLayout, EveryWeightDecodesExactly) {
  const StreamCase cs = GetParam();
  const bool nv = cs.nvfp4;
  const Weights w = random_weights(nv, cs.N, cs.K, 7 + uint64_t(cs.K));
  StreamRepacked r;
  ASSERT_EQ(repack_stream(nv, w.N, w.K, w.packed.data(), w.scale.data(), w.global, cs.split, &r), "");
  const StreamLayout& L = r.lay;
  const int ub = stream_unit_bytes(nv);
  ASSERT_EQ(L.ntiles, (w.N + 15) / 16);
  ASSERT_EQ(L.nch, (w.K + 63) / 64);
  ASSERT_EQ(int64_t(r.units.size()), L.ntiles * L.nch * ub);
  ASSERT_EQ(int64_t(r.colmul.size()), L.ntiles * 16);
  // Slices: contiguous, covering the chunks, lengths within one of each other.
  EXPECT_EQ(L.c0(0), 0);
  EXPECT_EQ(L.c0(cs.split), L.nch);
  for (int s = 0; s < cs.split; ++s) {
    EXPECT_GE(L.len(s), L.nch / cs.split);
    EXPECT_LE(L.len(s), (L.nch + cs.split - 1) / cs.split);
    for (int64_t c = L.c0(s); c < L.c0(s + 1); ++c) ASSERT_EQ(L.slice_of(c), s) << "chunk " << c;
  }
  std::vector<int> used(size_t(L.ntiles * L.nch), 0);
  const int block = nv ? 16 : 32;
  const int64_t S = (w.K + block - 1) / block;
  int64_t bad = 0;
  for (int64_t t = 0; t < L.ntiles; ++t)
    for (int64_t c = 0; c < L.nch; ++c) {
      const int64_t u = L.unit(t, c);
      ASSERT_GE(u, 0);
      ASSERT_LT(u, L.ntiles * L.nch);
      ++used[size_t(u)];
      const uint8_t* rec = &r.units[size_t(u * ub)];
      for (int lane = 0; lane < 32; ++lane) {
        const int g = lane / 4, tt = lane % 4;
        const uint8_t* sb = rec + 512 + (nv ? tt : tt / 2) * 16 + 2 * g;  // the kernel's 2-byte scale read
        const uint32_t sw = sb[0] | (uint32_t(sb[1]) << 8);
        const uint32_t s_lo = nv ? expand_scale<true>(sw, 0) : expand_scale<false>(sw, 0);
        const uint32_t s_hi = nv ? expand_scale<true>(sw, 1) : expand_scale<false>(sw, 1);
        for (int j = 0; j < 4; ++j) {
          uint32_t q;
          std::memcpy(&q, rec + lane * 16 + 4 * j, 4);
          for (int reg = 0; reg < 4; ++reg) {
            const uint32_t v = decode_reg(q, reg, (reg & 1) ? s_hi : s_lo);
            for (int h = 0; h < 2; ++h) {
              const int64_t n = t * 16 + g + 8 * (reg & 1), k = c * kChunkK + chunk_k(KOrder::kPerm, tt, j, reg, h);
              const double x = double(bf16_to_f32(uint16_t(h ? v >> 16 : v & 0xFFFF)));
              if (n >= w.N || k >= w.K) {
                ASSERT_EQ(x, 0.0) << "padding (" << n << ", " << k << ")";
                continue;
              }
              const uint8_t* prow = &w.packed[size_t(n * w.K / 2)];
              const uint8_t* srow = &w.scale[size_t(n * S)];
              int emax = 0;
              for (int64_t b = 0; b < S; ++b) emax = std::max<int>(emax, srow[b]);
              double want = nv ? fp4::nvfp4_dequant_at(prow, srow, w.global, k) : fp4::mxfp4_dequant_at(prow, srow, k);
              if (!nv && int(srow[k / block]) + 253 - emax < 1) want = 0.0;  // the documented MXFP4 exception
              const double got = x * double(r.colmul[size_t(n)]);
              if (got != want && ++bad <= 5)
                ADD_FAILURE() << "(" << n << ", " << k << "): got " << got << ", want " << want;
            }
          }
        }
      }
    }
  EXPECT_EQ(bad, 0);
  for (size_t u = 0; u < used.size(); ++u) ASSERT_EQ(used[u], 1) << "unit record " << u;
  for (int64_t n = w.N; n < L.ntiles * 16; ++n) EXPECT_EQ(r.colmul[size_t(n)], 0.0f) << "padding row " << n;
}

INSTANTIATE_TEST_SUITE_P(
    Shapes, Fp4Sm90StreamLayout,
    ::testing::Values(StreamCase{true, 40, 3080, 4}, StreamCase{false, 40, 3080, 4}, StreamCase{true, 50, 3072, 8},
                      StreamCase{false, 50, 3072, 2}, StreamCase{true, 17, 200, 1}, StreamCase{false, 33, 200, 4},
                      StreamCase{true, 16, 136, 3}),
    [](const ::testing::TestParamInfo<StreamCase>& i) {
      return std::string(i.param.nvfp4 ? "nvfp4" : "mxfp4") + "_n" + std::to_string(i.param.N) + "_k" +
             std::to_string(i.param.K) + "_split" + std::to_string(i.param.split);
    });

TEST(Fp4Sm90StreamLayout, BadSplitsAreDeclined) {
  const Weights w = random_weights(true, 16, 128, 3);  // 2 chunks
  StreamRepacked r;
  EXPECT_NE(repack_stream(true, w.N, w.K, w.packed.data(), w.scale.data(), w.global, 0, &r), "");
  EXPECT_NE(repack_stream(true, w.N, w.K, w.packed.data(), w.scale.data(), w.global, 3, &r), "");
  EXPECT_EQ(repack_stream(true, w.N, w.K, w.packed.data(), w.scale.data(), w.global, 2, &r), "");
}

TEST(Fp4Sm90Layout, NanScalesAreDeclined) {
  Weights w = random_weights(true, 16, 64, 1);
  w.scale[5] = 0x7F;
  Repacked r;
  EXPECT_NE(repack(true, w.N, w.K, w.packed.data(), w.scale.data(), w.global, KOrder::kStd, 1, &r), "");
  Weights m = random_weights(false, 16, 64, 1);
  m.scale[3] = 0xFF;
  EXPECT_NE(repack(false, m.N, m.K, m.packed.data(), m.scale.data(), 1.0f, KOrder::kPerm, 4, &r), "");
}

}  // namespace
}  // namespace nibble::gemm_fp4_sm90
