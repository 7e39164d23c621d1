// test_fixture_rng.cpp: the counter-based generator (known-answer values, its distribution) and
// the fixture's independence from the thread count and the order work is done in.
#include <gtest/gtest.h>

#include <cmath>
#include <set>

#include "fixtures/decode/decode_fixture.h"
#include "fixtures/fixture.h"
#include "fixtures/rng.h"
#include "fixtures/safetensors.h"
#include "test_fixture_util.h"

namespace nibble {
namespace {

TEST(Rng, KnownAnswers) {
  // splitmix64 seeded with 0 yields these (Vigna's reference splitmix64.c).
  EXPECT_EQ(rng::draw(0, 0), 0xE220A8397B1DCDAFull);
  EXPECT_EQ(rng::draw(0, 1), 0x6E789E6AA1B965F4ull);
  EXPECT_EQ(rng::draw(0, 2), 0x06C45D188009454Full);
  EXPECT_EQ(rng::mix64(0), 0u);
  // FNV-1a 64 test vectors.
  EXPECT_EQ(rng::fnv1a64(""), 0xCBF29CE484222325ull);
  EXPECT_EQ(rng::fnv1a64("a"), 0xAF63DC4C8601EC8Cull);
  EXPECT_EQ(rng::fnv1a64("foobar"), 0x85944171F73967E8ull);
}

TEST(Rng, PureFunctionOfSeedNameIndex) {
  const uint64_t k = rng::stream_key(7, "layers.0.q");
  EXPECT_EQ(k, rng::stream_key(7, "layers.0.q"));
  EXPECT_NE(k, rng::stream_key(8, "layers.0.q"));
  EXPECT_NE(k, rng::stream_key(7, "layers.0.k"));
  EXPECT_NE(rng::stream_key(0, "layers.1.q"), rng::stream_key(0, "layers.10.q"));
  // Evaluation order does not matter: backwards equals forwards.
  std::vector<float> fwd(1000), bwd(1000);
  for (int i = 0; i < 1000; ++i) fwd[size_t(i)] = rng::normal(k, uint64_t(i));
  for (int i = 999; i >= 0; --i) bwd[size_t(i)] = rng::normal(k, uint64_t(i));
  EXPECT_EQ(fwd, bwd);
  // The uniform is the top 24 bits, exactly.
  EXPECT_EQ(rng::uniform(k, 3), float(rng::draw(k, 3) >> 40) / 16777216.0f);
}

TEST(Rng, Distribution) {
  const uint64_t k = rng::stream_key(0, "test.distribution");
  const int n = 1 << 20;
  double su = 0, sz = 0, sz2 = 0, sz4 = 0;
  float umin = 1, umax = 0, zmax = 0;
  for (int i = 0; i < n; ++i) {
    const float u = rng::uniform(k, uint64_t(i));
    su += u;
    umin = std::min(umin, u);
    umax = std::max(umax, u);
    const double z = rng::normal(k, uint64_t(i));
    sz += z;
    sz2 += z * z;
    sz4 += z * z * z * z;
    zmax = std::max(zmax, float(std::fabs(z)));
  }
  EXPECT_GE(umin, 0.0f);
  EXPECT_LT(umax, 1.0f);
  EXPECT_NEAR(su / n, 0.5, 2e-3);
  EXPECT_NEAR(sz / n, 0.0, 5e-3);
  EXPECT_NEAR(sz2 / n, 1.0, 5e-3);
  // Irwin-Hall(4) kurtosis is 3 - 1.2 / 4 = 2.7 (a normal's is 3).
  EXPECT_NEAR(sz4 / n, 2.7, 3e-2);
  EXPECT_LE(zmax, 2.0f * std::sqrt(3.0f));
}

// 1 thread and 3 threads split the work differently; the bytes must not notice.
TEST(Rng, FixtureIndependentOfThreadCount) {
  const DecodeConfig cfg = decode_config("tiny");
  test::TempDir a, b;
  const FixtureManifest ma = build_decode_fixture(cfg, 3, a.path(), 1, nullptr);
  const FixtureManifest mb = build_decode_fixture(cfg, 3, b.path(), 3, nullptr);
  EXPECT_EQ(ma.threads, 1);
  EXPECT_EQ(mb.threads, 3);
  EXPECT_EQ(ma.file_sha256, mb.file_sha256);
  EXPECT_EQ(ma.tensor_sha256, mb.tensor_sha256);
  EXPECT_EQ(test::read_bytes(a / kFixtureModelFile), test::read_bytes(b / kFixtureModelFile));
}

TEST(Rng, SeedsGiveDifferentTensors) {
  const DecodeConfig cfg = decode_config("tiny");
  test::TempDir a, b;
  const FixtureManifest ma = build_decode_fixture(cfg, 0, a.path(), 2, nullptr);
  const FixtureManifest mb = build_decode_fixture(cfg, 1, b.path(), 2, nullptr);
  EXPECT_NE(ma.file_sha256, mb.file_sha256);
  for (const auto& [name, h] : ma.tensor_sha256) EXPECT_NE(h, mb.tensor_sha256.at(name)) << name;
  // And within one fixture, no two tensors of the same size share bytes (distinct streams).
  std::set<std::string> seen;
  for (const auto& [name, h] : ma.tensor_sha256) EXPECT_TRUE(seen.insert(h).second) << name;
}

}  // namespace
}  // namespace nibble
