// test_oracle_fixture.cpp: the fp64 oracle on a real (tiny) fixture: two consecutive steps.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <vector>

#include "fixtures/decode/decode_fixture.h"
#include "fixtures/fixture.h"
#include "fixtures/safetensors.h"
#include "fixtures/decode/decode_config.h"
#include "reference/decode/oracle_fp64.h"
#include "test_fixture_util.h"

namespace nibble::oracle {
namespace {

std::vector<int64_t> fixture_tokens(const SafetensorsFile& f) {
  const auto& e = f.entry("tokens");
  std::vector<int64_t> t(e.nbytes() / sizeof(int64_t));
  std::memcpy(t.data(), f.data("tokens"), e.nbytes());
  return t;
}

TEST(OracleFixture, TinyTwoStepsAppendTheRoundedKv) {
  const DecodeConfig cfg = decode_config("tiny");
  const auto& c = cfg.dims;
  test::TempDir dir;
  const FixtureManifest m = build_decode_fixture(cfg, 0, dir.path(), 2, {});
  SafetensorsFile file(dir / m.file);
  const std::vector<int64_t> tokens = fixture_tokens(file);
  ASSERT_EQ(int64_t(tokens.size()), int64_t(cfg.decode_steps) * c.batch);

  DecodeOracle oracle(cfg, file);
  const int64_t kvd = int64_t(c.n_kv) * c.hd;
  std::vector<std::vector<uint16_t>> k_first;  // step 0's appended K, checked again after step 1
  for (int s = 0; s < 2; ++s) {
    const int pos = cfg.prefill + s;
    const std::vector<int64_t> step_tokens(tokens.begin() + s * c.batch, tokens.begin() + (s + 1) * c.batch);
    std::vector<uint16_t> k_app, v_app;
    StepTrace trace;
    const std::vector<double> logits = oracle.step(step_tokens, pos, &k_app, &v_app, &trace);

    ASSERT_EQ(int64_t(logits.size()), int64_t(c.batch) * c.vocab);
    double norm = 0;
    for (double v : logits) {
      ASSERT_TRUE(std::isfinite(v));
      norm += v * v;
    }
    EXPECT_GT(norm, 0.0);
    std::printf("step %d (pos %d): ||logits||_2 = %.6g\n", s, pos, std::sqrt(norm));

    ASSERT_EQ(int64_t(k_app.size()), int64_t(c.layers) * c.batch * kvd);
    ASSERT_EQ(v_app.size(), k_app.size());
    int64_t nonzero = 0;
    for (int l = 0; l < c.layers; ++l)
      for (int b = 0; b < c.batch; ++b)
        for (int h = 0; h < c.n_kv; ++h)
          for (int d = 0; d < c.hd; ++d) {
            const int64_t app = ((int64_t(l) * c.batch + b) * c.n_kv + h) * c.hd + d;
            const int64_t slot = ((int64_t(b) * c.n_kv + h) * c.max_seq + pos) * c.hd + d;
            // The appended K/V are the bf16 rounding of what the oracle computed ...
            ASSERT_EQ(k_app[size_t(app)], double_to_bf16(trace.k[size_t(app)])) << "layer " << l << " elem " << app;
            ASSERT_EQ(v_app[size_t(app)], double_to_bf16(trace.v[size_t(app)])) << "layer " << l << " elem " << app;
            // ... and sit in the oracle's cache at slot pos.
            ASSERT_EQ(oracle.k_cache(l)[size_t(slot)], k_app[size_t(app)]);
            ASSERT_EQ(oracle.v_cache(l)[size_t(slot)], v_app[size_t(app)]);
            nonzero += (k_app[size_t(app)] & 0x7FFF) != 0;
          }
    EXPECT_GT(nonzero, 0);
    if (s == 0) {
      for (int l = 0; l < c.layers; ++l) k_first.push_back(oracle.k_cache(l));
    } else {
      // Step 1 wrote slot pos + 1 only: slot pos (step 0's) is unchanged.
      for (int l = 0; l < c.layers; ++l)
        for (int b = 0; b < c.batch; ++b)
          for (int h = 0; h < c.n_kv; ++h) {
            const int64_t at = ((int64_t(b) * c.n_kv + h) * c.max_seq + (pos - 1)) * c.hd;
            EXPECT_EQ(0, std::memcmp(&oracle.k_cache(l)[size_t(at)], &k_first[size_t(l)][size_t(at)],
                                     size_t(c.hd) * 2));
          }
    }
  }
}

TEST(OracleFixture, DeterministicAndThreadIndependent) {
  const DecodeConfig cfg = decode_config("tiny");
  test::TempDir dir;
  const FixtureManifest m = build_decode_fixture(cfg, 1, dir.path(), 1, {});
  SafetensorsFile file(dir / m.file);
  const std::vector<int64_t> tokens = fixture_tokens(file);
  const std::vector<int64_t> first(tokens.begin(), tokens.begin() + cfg.dims.batch);
  DecodeOracle one(cfg, file, 1), three(cfg, file, 3);
  EXPECT_EQ(one.step(first, cfg.prefill, nullptr, nullptr), three.step(first, cfg.prefill, nullptr, nullptr));
  EXPECT_THROW(one.step(first, cfg.dims.max_seq, nullptr, nullptr), std::invalid_argument);
  EXPECT_THROW(one.step({cfg.dims.vocab}, cfg.prefill, nullptr, nullptr), std::invalid_argument);
}

// KvOffer: the oracle takes an offered bf16 value only when it is a legitimate rounding of its own
// exact value (within window * the head's RMS), and counts the rest as rejected.
TEST(OracleFixture, KvOfferAdoptsOnlyLegitimateRoundings) {
  const DecodeConfig cfg = decode_config("tiny");
  test::TempDir dir;
  const FixtureManifest m = build_decode_fixture(cfg, 0, dir.path(), 2, {});
  SafetensorsFile file(dir / m.file);
  const std::vector<int64_t> tokens = fixture_tokens(file);
  const std::vector<int64_t> first(tokens.begin(), tokens.begin() + cfg.dims.batch);

  DecodeOracle plain(cfg, file);
  std::vector<uint16_t> k0, v0;
  StepTrace t0;
  const std::vector<double> logits0 = plain.step(first, cfg.prefill, &k0, &v0, &t0);

  // Element 5 of K one ulp up (magnitude): with the default window (1e-5 of the head's RMS) it is
  // not a legitimate rounding, so the oracle keeps its own and the logits do not change.
  std::vector<uint16_t> k_bumped = k0;
  k_bumped[5] = uint16_t(k_bumped[5] + 1);
  {
    DecodeOracle o(cfg, file);
    std::vector<uint16_t> k, v;
    StepTrace t;
    const KvOffer offer{&k_bumped, &v0, 1e-5};
    EXPECT_EQ(o.step(first, cfg.prefill, &k, &v, &t, &offer), logits0);
    EXPECT_EQ(t.rejected, 1);
    EXPECT_EQ(t.adopted, 0);
    EXPECT_EQ(k, k0);
  }
  // With a window as wide as the head's RMS the same value is a legitimate rounding: it is stored
  // (and attention reads it), so the logits move.
  {
    DecodeOracle o(cfg, file);
    std::vector<uint16_t> k, v;
    StepTrace t;
    const KvOffer offer{&k_bumped, &v0, 1.0};
    EXPECT_NE(o.step(first, cfg.prefill, &k, &v, &t, &offer), logits0);
    EXPECT_EQ(t.rejected, 0);
    EXPECT_EQ(t.adopted, 1);
    EXPECT_EQ(k, k_bumped);
    const int64_t slot5 = int64_t(cfg.prefill) * cfg.dims.hd + 5;  // layer 0, batch 0, head 0, element 5
    EXPECT_EQ(o.k_cache(0)[size_t(slot5)], k_bumped[5]);
  }
  // Offering the oracle's own values changes nothing.
  {
    DecodeOracle o(cfg, file);
    StepTrace t;
    const KvOffer offer{&k0, &v0, 1e-5};
    EXPECT_EQ(o.step(first, cfg.prefill, nullptr, nullptr, &t, &offer), logits0);
    EXPECT_EQ(t.adopted + t.rejected, 0);
    const std::vector<uint16_t> short_k(3);
    const KvOffer bad{&short_k, &v0, 1e-5};
    EXPECT_THROW(o.step(first, cfg.prefill + 1, nullptr, nullptr, nullptr, &bad), std::invalid_argument);
  }
}

}  // namespace
}  // namespace nibble::oracle
