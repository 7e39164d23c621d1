// test_int4_gemm_fixture.cpp: gemm-w4a16-int4's configs, the fp16 codec, the quantiser on
// hand-worked groups, and the fixture builder (pinned SHA-256 of the tiny configs, thread-count
// independence, the file against the in-memory tensors, every layout conversion of a real fixture).
//
// The pinned values were computed once (generator version 1) and are checked in: a failure after a
// deliberate change to the generator re-pins with a new kGeneratorVersion; without one, the bytes
// are not deterministic.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <set>

#include "fixtures/fp16.h"
#include "fixtures/int4_gemm/int4_gemm_fixture.h"
#include "fixtures/sha256.h"
#include "test_fixture_util.h"

namespace nibble {
namespace {

TEST(Int4GemmConfig, NamesAndShapes) {
  const auto names = int4_gemm_config_names();
  ASSERT_EQ(names.size(), 46u);
  std::set<std::string> unique(names.begin(), names.end());
  EXPECT_EQ(unique.size(), names.size());
  for (const auto& n : names) {
    const Int4GemmConfig c = int4_gemm_config(n);
    EXPECT_EQ(c.K % 128, 0) << n;
    EXPECT_EQ(c.N % 8, 0) << n;
  }
  const Int4GemmConfig t = int4_gemm_config("tiny");
  EXPECT_EQ(t.M, 3);
  EXPECT_EQ(t.N, 40);  // not a multiple of 64
  EXPECT_EQ(t.K, 384); // a multiple of 128, not of 256
  EXPECT_FALSE(t.symmetric);
  EXPECT_TRUE(int4_gemm_config("tiny-sym").symmetric);
  const Int4GemmConfig s = int4_gemm_config("m16-n14336-k4096-sym");
  EXPECT_EQ(s.N, 14336);
  EXPECT_TRUE(s.symmetric);
  EXPECT_EQ(s.groups(), 32);
  // bytes: A 2MK + codes NK/2 + fp16 scales and uint8 zeros 3 N K/128 + C 4MN
  EXPECT_EQ(t.bytes_per_call(), 2 * 3 * 384 + 40 * 192 + 40 * 3 * 3 + 4 * 3 * 40);
  EXPECT_EQ(t.flops(), 2 * 3 * 40 * 384);
}

TEST(Int4GemmConfig, RejectsWhatTheLayoutsCannotHold) {
  EXPECT_THROW(int4_gemm_config("m1-n3072-k3080"), std::invalid_argument);  // K % 128 != 0
  EXPECT_THROW(int4_gemm_config("m1-n3004-k3072"), std::invalid_argument);  // N % 8 != 0
  EXPECT_THROW(int4_gemm_config("full"), std::invalid_argument);
  EXPECT_THROW(int4_gemm_config("m1-n8-k128-asym"), std::invalid_argument);
  EXPECT_THROW(int4_gemm_config("-sym"), std::invalid_argument);
  try {
    int4_gemm_config("m1-n3004-k3072");
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("N of 8"), std::string::npos) << e.what();
  }
}

TEST(Fp16, MatchesTheCompilersConversion) {
  // _Float16 (GCC, x86-64) converts with round-to-nearest-even: every fp16 decodes alike, and a
  // spread of fp32 values (normals, subnormals, overflow, ties) encodes alike.
  for (uint32_t b = 0; b < 65536; ++b) {
    _Float16 h;
    const uint16_t hb = uint16_t(b);
    std::memcpy(&h, &hb, 2);
    const float want = float(h), got = f16_to_f32(hb);
    if (std::isnan(want)) EXPECT_TRUE(std::isnan(got)) << b;
    else EXPECT_EQ(std::memcmp(&want, &got, 4), 0) << b;
  }
  uint32_t x = 12345;
  for (int i = 0; i < 1000000; ++i) {
    x = x * 1664525u + 1013904223u;
    float f;
    std::memcpy(&f, &x, 4);
    if (std::isnan(f)) continue;
    const _Float16 h = _Float16(f);
    uint16_t hb;
    std::memcpy(&hb, &h, 2);
    ASSERT_EQ(f32_to_f16(f), hb) << std::hexfloat << f;
  }
  EXPECT_EQ(f32_to_f16(65504.0f), 0x7BFF);
  EXPECT_EQ(f32_to_f16(65520.0f), 0x7C00);           // the tie above the largest rounds to inf
  EXPECT_EQ(f32_to_f16(std::ldexp(1.0f, -25)), 0);   // half the smallest subnormal: tie to even 0
  EXPECT_EQ(f32_to_f16(std::ldexp(3.0f, -26)), 1);   // 0.75 of the smallest subnormal: up
}

TEST(Int4Quantise, HandWorkedGroups) {
  // Group 0: w = (i - 60) / 64 for i < 128: mn = -60/64, mx = 67/64, (mx - mn)/15 = 127/960 =
  // 0.13229..., fp16 0x303C = 0.132324... (rne of 0.1322916 at spacing 2^-13 = 0.000122); zero =
  // rint(0.9375 / 0.132324) = rint(7.085) = 7. Element i = 60 (w = 0): code rint(0) + 7 = 7.
  // Group 1: every w = 0.25 (mn = 0 since the range keeps 0): scale fp16(0.25 / 15) = 0x2444
  // (0.0166626), zero clamp(rint(0), 1, 15) = 1 (GPTQ v1 cannot hold 0), code
  // clamp(rint(15.0037) + 1) = 15 (clamped from 16).
  std::vector<float> w(256);
  for (int i = 0; i < 128; ++i) w[i] = float(i - 60) / 64.0f;
  for (int i = 128; i < 256; ++i) w[i] = 0.25f;
  std::vector<uint8_t> packed(128), zero(2);
  std::vector<uint16_t> scale(2);
  quantise_int4_row_f16(w.data(), 256, false, packed.data(), scale.data(), zero.data());
  EXPECT_EQ(scale[0], f32_to_f16(127.0f / 960.0f));
  EXPECT_EQ(scale[0], 0x303C);
  EXPECT_EQ(zero[0], 7);
  EXPECT_EQ(packed[30] & 0xF, 7);  // i = 60: w = 0
  EXPECT_EQ(scale[1], 0x2444);
  EXPECT_EQ(zero[1], 1);
  EXPECT_EQ(packed[64], 0xFF);
  // Symmetric: group 0 amax 67/64, scale fp16(2 * 67/64 / 15) = fp16(0.139583) = 0x3077, zero 8.
  quantise_int4_row_f16(w.data(), 256, true, packed.data(), scale.data(), zero.data());
  EXPECT_EQ(scale[0], f32_to_f16(2.0f * (67.0f / 64.0f) / 15.0f));
  EXPECT_EQ(scale[0], 0x3077);
  EXPECT_EQ(zero[0], 8);
  EXPECT_EQ(zero[1], 8);
  EXPECT_EQ(packed[30] & 0xF, 8);
  EXPECT_THROW(quantise_int4_row_f16(w.data(), 200, false, packed.data(), scale.data(), zero.data()),
               std::invalid_argument);
}

TEST(Int4GemmFixture, PinnedSha256OfTinyConfigs) {
  for (const char* config : {"tiny", "tiny-sym"})
    for (uint64_t seed : {0ull, 1ull}) {
      test::TempDir dir;
      const FixtureManifest m = build_int4_gemm_fixture(int4_gemm_config(config), seed, dir.path(), 1, {});
      const auto pinned = find_pinned(int4_gemm_pinned_fixtures(), kInt4GemmTask, config, seed);
      ASSERT_TRUE(pinned.has_value()) << config << " seed " << seed << " is not pinned; its SHA-256: " << m.file_sha256;
      EXPECT_EQ(m.file_sha256, *pinned) << config << " seed " << seed;
      EXPECT_EQ(int4_gemm_fixture_manifest(int4_gemm_config(config), seed, 1, {}).file_sha256, m.file_sha256);
    }
}

TEST(Int4GemmFixture, ThreadCountDoesNotChangeBytes) {
  const Int4GemmConfig c = int4_gemm_config("m5-n264-k640");
  const Int4GemmData one = generate_int4_gemm_fixture(c, 3, 1), four = generate_int4_gemm_fixture(c, 3, 4);
  EXPECT_EQ(one.A, four.A);
  EXPECT_EQ(one.W.packed, four.W.packed);
  EXPECT_EQ(one.W.scale, four.W.scale);
  EXPECT_EQ(one.W.zero, four.W.zero);
}

TEST(Int4GemmFixture, FileHoldsTheGeneratedTensorsAndEveryLayoutRoundTrips) {
  const Int4GemmConfig c = int4_gemm_config("tiny");
  test::TempDir dir;
  build_int4_gemm_fixture(c, 0, dir.path(), 2, {});
  const SafetensorsFile f(dir.path() + "/" + kFixtureModelFile);
  const Int4GemmView v = int4_gemm_fixture_view(c, f);
  const Int4GemmData d = generate_int4_gemm_fixture(c, 0, 1);
  EXPECT_EQ(std::vector<uint16_t>(v.A, v.A + c.M * c.K), d.A);
  const Int4Plain p = v.plain(c);
  EXPECT_EQ(p.packed, d.W.packed);
  EXPECT_EQ(p.scale, d.W.scale);
  EXPECT_EQ(p.zero, d.W.zero);
  // Every zero point in 1..15 (GPTQ v1 can hold it), the codes use the whole range.
  std::set<int> codes;
  for (int64_t n = 0; n < c.N; ++n)
    for (int64_t k = 0; k < c.K; ++k) codes.insert(p.code(n, k));
  EXPECT_EQ(codes.size(), 16u);
  for (uint8_t z : p.zero) EXPECT_GE(z, 1);
  EXPECT_EQ(from_awq(to_awq(p)).packed, p.packed);
  EXPECT_EQ(from_gptq(to_gptq(p, {1, 2, 0})).zero, p.zero);
  EXPECT_EQ(from_compressed_tensors(to_compressed_tensors(p, false)).scale, p.scale);
  const Int4GemmData s = generate_int4_gemm_fixture(int4_gemm_config("tiny-sym"), 0, 1);
  for (uint8_t z : s.W.zero) EXPECT_EQ(z, 8);
  EXPECT_EQ(from_compressed_tensors(to_compressed_tensors(s.W, true)).packed, s.W.packed);
  // A fixture of another shape is refused by the view, naming the tensor.
  EXPECT_THROW(int4_gemm_fixture_view(int4_gemm_config("m3-n48-k384"), f), std::runtime_error);
}

}  // namespace
}  // namespace nibble
