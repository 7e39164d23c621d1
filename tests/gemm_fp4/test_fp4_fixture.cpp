// test_fp4_fixture.cpp: the GEMM task configs (names, tensor lists, rooflines) and the GEMM fixture
// builder: pinned SHA-256 of the tiny fixtures of both tasks, thread-count independence, the file
// against the in-memory tensors, and the properties the quantisers promise on real fixture data.
//
// The pinned values were computed once (generator version 1) and are checked in. If this fails
// after a deliberate change to the GEMM generator, the FP4 quantisers, the tensor list or the
// safetensors writer, bump kGeneratorVersion (fixtures/rng.h) and re-pin; if it fails without one,
// fixture bytes are not deterministic.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <set>
#include <stdexcept>

#include "fixtures/fp4.h"
#include "fixtures/gemm_fp4/gemm_fixture.h"
#include "fixtures/sha256.h"
#include "test_fixture_util.h"

namespace nibble {
namespace {

TEST(GemmConfig, NamesAndShapes) {
  const auto names = gemm_config_names();
  ASSERT_EQ(names.size(), 29u);
  EXPECT_EQ(names[0], "tiny");
  EXPECT_EQ(names[1], "m1-n3072-k3072");
  EXPECT_EQ(names.back(), "m4096-n3000-k3080");
  std::set<std::string> unique(names.begin(), names.end());
  EXPECT_EQ(unique.size(), names.size());
  for (const auto& task : gemm_task_names())
    for (const auto& n : names) {
      const GemmConfig c = gemm_config(task, n);
      EXPECT_EQ(c.name, n);
      EXPECT_EQ(c.K % 4, 0) << n;  // every official K admits the twiddled layout
    }
  const GemmConfig t = gemm_config(kGemmNvfp4Task, "tiny");
  EXPECT_EQ(t.M, 3);
  EXPECT_EQ(t.N, 40);
  EXPECT_EQ(t.K, 200);
  EXPECT_EQ(t.scale_cols(), 13);  // 200 = 12 * 16 + 8: a partial last block
  EXPECT_EQ(gemm_config(kGemmMxfp4Task, "tiny").scale_cols(), 7);  // 200 = 6 * 32 + 8
  const GemmConfig r = gemm_config(kGemmMxfp4Task, "m16-n3000-k3080");
  EXPECT_EQ(r.N, 3000);
  EXPECT_EQ(r.K, 3080);
  EXPECT_EQ(r.scale_cols(), 97);
  EXPECT_EQ(r.block, 32);
  EXPECT_EQ(r.format, Fp4Format::Mxfp4);
}

TEST(GemmConfig, RejectsBadNamesAndTasks) {
  EXPECT_THROW(gemm_config(kGemmNvfp4Task, "full"), std::invalid_argument);
  EXPECT_THROW(gemm_config(kGemmNvfp4Task, "m1-n2-k3"), std::invalid_argument);   // odd K
  EXPECT_THROW(gemm_config(kGemmNvfp4Task, "m0-n2-k4"), std::invalid_argument);
  EXPECT_THROW(gemm_config(kGemmNvfp4Task, "m01-n2-k4"), std::invalid_argument);  // leading zero
  EXPECT_THROW(gemm_config(kGemmNvfp4Task, "m1-n2-k4-"), std::invalid_argument);
  EXPECT_THROW(gemm_config(kGemmNvfp4Task, "m1-n2"), std::invalid_argument);
  EXPECT_THROW(gemm_config("megakernel-int4-weight-decode", "tiny"), std::invalid_argument);
  try {
    gemm_config(kGemmMxfp4Task, "huge");
    FAIL();
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("m128-n8192-k3072"), std::string::npos) << e.what();
  }
  EXPECT_EQ(gemm_config(kGemmNvfp4Task, "m5-n7-k2").name, "m5-n7-k2");  // any well-formed shape
}

TEST(GemmConfig, TensorsBytesAndFlops) {
  const GemmConfig nv = gemm_config(kGemmNvfp4Task, "m16-n3072-k3072");
  const auto t = nv.tensors();
  ASSERT_EQ(t.size(), 4u);
  EXPECT_EQ(t[0].name, "A");
  EXPECT_EQ(t[0].dtype, DType::BF16);
  EXPECT_EQ(t[0].shape, (std::vector<int64_t>{16, 3072}));
  EXPECT_EQ(t[1].name, "W.packed");
  EXPECT_EQ(t[1].shape, (std::vector<int64_t>{3072, 1536}));
  EXPECT_EQ(t[2].name, "W.scale");
  EXPECT_EQ(t[2].dtype, DType::U8);
  EXPECT_EQ(t[2].shape, (std::vector<int64_t>{3072, 192}));
  EXPECT_EQ(t[3].name, "W.global_scale");
  EXPECT_EQ(t[3].dtype, DType::F32);
  EXPECT_EQ(t[3].shape, (std::vector<int64_t>{1}));
  // A 98304 + codes 4718592 + scales 589824 + global 4 + C (fp32) 196608
  EXPECT_EQ(nv.bytes_per_call(), 5603332);
  EXPECT_EQ(nv.bytes_per_call(2), 5603332 - 98304);
  EXPECT_EQ(nv.weight_bytes(), 4718592 + 589824);  // codes + scales: the 5308416 the read floor reads
  EXPECT_EQ(nv.flops(), 2LL * 16 * 3072 * 3072);
  const GemmConfig mx = gemm_config(kGemmMxfp4Task, "m16-n3072-k3072");
  EXPECT_EQ(mx.tensors().size(), 3u);
  EXPECT_EQ(mx.bytes_per_call(), 98304 + 4718592 + 294912 + 196608);
  EXPECT_EQ(mx.weight_bytes(), 4718592 + 294912);  // MXFP4: a scale per 32
  EXPECT_THROW(mx.bytes_per_call(3), std::invalid_argument);
}

struct Pinned {
  const char* task;
  uint64_t seed;
  const char* file_sha256;
};

class PinnedGemmTiny : public ::testing::TestWithParam<Pinned> {};

TEST_P(PinnedGemmTiny, WholeFileSha256AndThreadIndependence) {
  ASSERT_EQ(kGeneratorVersion, 1) << "generator changed: re-pin the values below for the new version";
  const Pinned p = GetParam();
  const GemmConfig cfg = gemm_config(p.task, "tiny");
  test::TempDir d1, d3;
  const FixtureManifest m1 = build_gemm_fixture(cfg, p.seed, d1.path(), 1, nullptr);
  const FixtureManifest m3 = build_gemm_fixture(cfg, p.seed, d3.path(), 3, nullptr);
  EXPECT_EQ(m1.file_sha256, p.file_sha256) << p.task << " seed " << p.seed;
  EXPECT_EQ(m3.file_sha256, m1.file_sha256) << "thread count changed the bytes";
  verify_fixture(d1.path(), m1);
  const FixtureManifest back = read_manifest(d1.path());
  EXPECT_EQ(back.task, p.task);
  EXPECT_EQ(back.config, "tiny");
  EXPECT_EQ(back.tensor_sha256, m1.tensor_sha256);
  // The in-memory manifest (what an unpinned cached fixture is compared with) is the written one.
  const FixtureManifest mem = gemm_fixture_manifest(cfg, p.seed, 2, nullptr);
  EXPECT_EQ(mem.file_sha256, p.file_sha256);
  EXPECT_EQ(mem.file_bytes, m1.file_bytes);
  EXPECT_EQ(mem.tensor_sha256, m1.tensor_sha256);
  // ensure_* reuses a matching fixture (same build, no rebuild: build_seconds unchanged).
  const FixtureManifest again = ensure_gemm_fixture(cfg, p.seed, d1.path(), 1, true, nullptr);
  EXPECT_EQ(again.build_seconds, back.build_seconds);
}

INSTANTIATE_TEST_SUITE_P(
    GeneratorV1, PinnedGemmTiny,
    ::testing::Values(
        Pinned{kGemmNvfp4Task, 0, "49b3cf0e16388ccaf477e10331fcc5ab2752f3a652fbc4c75b359421ec636b25"},
        Pinned{kGemmNvfp4Task, 1, "c01b98aefff3ef8de044bf2b8aa2c117b10331741b8e93d320433e201abc3ba1"},
        Pinned{kGemmMxfp4Task, 0, "a7bbc1a69d17a32d5170bde34e113842d7240ad284c8109edad4f6b1997993ce"},
        Pinned{kGemmMxfp4Task, 1, "0e63a3b7ba598229752c4038545922b133e21dbe8dbcbd463d9f9a7140bc064c"}),
    [](const ::testing::TestParamInfo<Pinned>& i) {
      return std::string(i.param.task == std::string(kGemmNvfp4Task) ? "nvfp4" : "mxfp4") + "_seed" +
             std::to_string(i.param.seed);
    });

TEST(GemmFixture, HostMemoryIsCheckedBeforeAllocating) {
  // m16-n3072-k3072 NVFP4: A 2*16*3072 + codes 3072*1536 + scales 3072*192 + fp32 W 4*3072*3072.
  const GemmConfig c = gemm_config("gemm-w4a16-nvfp4", "m16-n3072-k3072");
  const int64_t need = 2 * 16 * 3072 + 3072 * 1536 + 3072 * 192 + 4 * 3072 * 3072;
  EXPECT_EQ(gemm_fixture_host_bytes(c), need);
  EXPECT_NO_THROW(check_gemm_fixture_fits(c, uint64_t(need) * 2));
  try {
    check_gemm_fixture_fits(c, uint64_t(need));  // over 90% of it
    FAIL() << "expected std::invalid_argument";
  } catch (const std::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("needs about 0.0"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("m16-n3072-k3072 is too large"), std::string::npos) << e.what();
  }
  // The newcomer's shape: within the per-operand limit (2^32), ~26 GB to build.
  const GemmConfig big = gemm_config("gemm-w4a16-nvfp4", "m65536-n65536-k65536");
  EXPECT_GT(gemm_fixture_host_bytes(big), int64_t(25) << 30);
  EXPECT_THROW(check_gemm_fixture_fits(big, uint64_t(16) << 30), std::invalid_argument);
}

TEST(GemmFixture, FileHoldsTheGeneratedTensors) {
  for (const auto& task : gemm_task_names()) {
    const GemmConfig cfg = gemm_config(task, "tiny");
    const GemmFixtureData d = generate_gemm_fixture(cfg, 0, 2);
    test::TempDir dir;
    build_gemm_fixture(cfg, 0, dir.path(), 2, nullptr);
    SafetensorsFile f(dir / kFixtureModelFile);
    const GemmFixtureView v = gemm_fixture_view(cfg, f);
    EXPECT_EQ(std::memcmp(v.A, d.A.data(), d.A.size() * 2), 0) << task;
    EXPECT_EQ(std::memcmp(v.packed, d.packed.data(), d.packed.size()), 0) << task;
    EXPECT_EQ(std::memcmp(v.scale, d.scale.data(), d.scale.size()), 0) << task;
    EXPECT_EQ(v.global_scale, d.global_scale) << task;
    EXPECT_EQ(f.metadata().at("task"), task);
    EXPECT_EQ(f.metadata().at("scale_format"), cfg.format == Fp4Format::Nvfp4 ? "e4m3fn" : "e8m0");
    // The view refuses a fixture of another config.
    EXPECT_THROW(gemm_fixture_view(gemm_config(task, "m3-n40-k256"), f), std::runtime_error);
  }
}

// What the quantisers promise, on the fixture's own data: no NaN scale byte; NVFP4's top scale is
// 448 and its global scale amax / 2688; every e2m1 code appears (both subnormals and -0 included);
// the dequantised weights are near the fp32 ones they came from.
TEST(GemmFixture, QuantisedWeightsOnFixtureData) {
  for (const auto& task : gemm_task_names()) {
    const GemmConfig cfg = gemm_config(task, "m4-n256-k1000");
    const GemmFixtureData d = generate_gemm_fixture(cfg, 3, 2);
    std::set<int> codes;
    for (uint8_t b : d.packed) {
      codes.insert(b & 0xF);
      codes.insert(b >> 4);
    }
    EXPECT_EQ(codes.size(), 16u) << task;
    uint8_t top = 0;
    for (uint8_t s : d.scale) {
      ASSERT_NE(s, 0xFF) << task;
      if (cfg.format == Fp4Format::Nvfp4) {
        ASSERT_NE(s, 0x7F) << task;
      }
      top = std::max(top, s);
    }
    if (cfg.format == Fp4Format::Nvfp4) {
      EXPECT_EQ(top, 0x7E);  // the block holding the tensor's amax
      EXPECT_GT(d.global_scale, 0.0f);
    } else {
      EXPECT_EQ(d.global_scale, 1.0f);
    }
    // A is bf16 of unit normals; C = A W^T has unit-scale entries (W = z / sqrt(K)).
    double a2 = 0;
    for (uint16_t h : d.A) {
      const uint32_t u = uint32_t(h) << 16;
      float f;
      std::memcpy(&f, &u, 4);
      a2 += double(f) * f;
    }
    EXPECT_NEAR(a2 / double(d.A.size()), 1.0, 0.1);
    double w2 = 0;
    for (int64_t n = 0; n < cfg.N; ++n)
      for (int64_t k = 0; k < cfg.K; ++k) {
        const uint8_t* prow = &d.packed[size_t(n * cfg.K / 2)];
        const uint8_t* srow = &d.scale[size_t(n * cfg.scale_cols())];
        const double w = cfg.format == Fp4Format::Nvfp4 ? fp4::nvfp4_dequant_at(prow, srow, d.global_scale, k)
                                                       : fp4::mxfp4_dequant_at(prow, srow, k);
        w2 += w * w;
      }
    EXPECT_NEAR(w2 / double(cfg.N), 1.0, 0.15) << task;  // row norm^2 of W ~ 1
  }
}

}  // namespace
}  // namespace nibble
