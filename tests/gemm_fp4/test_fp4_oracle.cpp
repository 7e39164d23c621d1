// test_fp4_oracle.cpp: the fp64 GEMM oracle (reference/gemm_fp4/gemm_oracle.h) on a 2 x 3 x 32 product worked
// by hand for both formats, each variant's dequantisation of chosen bytes, the variant table, and
// the variants on fixture data (a preview of the calibrate table, printed).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <stdexcept>
#include <vector>

#include "harness/stats.h"
#include "fixtures/bf16.h"
#include "fixtures/gemm_fp4/gemm_fixture.h"
#include "reference/gemm_fp4/gemm_oracle.h"
#include "test_fixture_util.h"

namespace nibble::oracle {
namespace {

// M = 2, N = 3, K = 32. A row 0 = 32 ones; A row 1 = (2, 0, 0, ...).
// W.packed rows (16 bytes each, the same byte throughout):
//   row 0: 0x22 -> every code 2 (1.0)
//   row 1: 0x97 -> even k code 7 (6.0), odd k code 9 (-0.5)
//   row 2: 0x01 -> even k code 1 (0.5, the subnormal), odd k code 0
// NVFP4 (scales per 16, global 0.5):
//   row 0: scales 0x38 (1), 0x40 (2)        W = 0.5 (k < 16), 1 (k >= 16)
//   row 1: scales 0x30 (0.5), 0x30          W = 1.5 (even), -0.125 (odd)
//   row 2: scales 0x7E (448), 0x08 (2^-6)   W = 112 (even, k < 16), 2^-8 (even, k >= 16), 0 (odd)
//   C row 0: 16*0.5 + 16*1 = 24 | 16*1.5 - 16*0.125 = 22 | 8*112 + 8*2^-8 = 896.03125
//   C row 1: 2*0.5 = 1          | 2*1.5 = 3              | 2*112 = 224
// MXFP4 (one scale per 32):
//   row 0: 127 (1)   W = 1           row 1: 126 (0.5)  W = 3, -0.25     row 2: 130 (8)  W = 4, 0
//   C row 0: 32 | 16*3 - 16*0.25 = 44 | 16*4 = 64        C row 1: 2 | 6 | 8
struct Hand {
  std::vector<uint16_t> A;
  std::vector<uint8_t> packed;
  std::vector<uint8_t> nv_scale = {0x38, 0x40, 0x30, 0x30, 0x7E, 0x08};
  std::vector<uint8_t> mx_scale = {127, 126, 130};
  Hand() : A(64, 0), packed(48) {
    for (int k = 0; k < 32; ++k) A[size_t(k)] = f32_to_bf16(1.0f);
    A[32] = f32_to_bf16(2.0f);
    for (int i = 0; i < 16; ++i) {
      packed[size_t(i)] = 0x22;
      packed[size_t(16 + i)] = 0x97;
      packed[size_t(32 + i)] = 0x01;
    }
  }
  Fp4WeightView view(Fp4Format f, const GemmOptions& o = {}) const {
    Fp4WeightView w;
    w.format = f;
    w.packed = packed.data();
    w.scale = f == Fp4Format::Nvfp4 ? nv_scale.data() : mx_scale.data();
    w.global_scale = f == Fp4Format::Nvfp4 ? 0.5f : 1.0f;
    w.N = 3;
    w.K = 32;
    w.options = o;
    return w;
  }
};

TEST(GemmOracle, HandWorked2x3x32) {
  const Hand h;
  const auto nv = gemm(h.A.data(), 2, h.view(Fp4Format::Nvfp4));
  const std::vector<double> nv_want = {24, 22, 896.03125, 1, 3, 224};
  EXPECT_EQ(nv, nv_want);
  const auto mx = gemm(h.A.data(), 2, h.view(Fp4Format::Mxfp4), 2);
  const std::vector<double> mx_want = {32, 44, 64, 2, 6, 8};
  EXPECT_EQ(mx, mx_want);
  // Every value here is a bf16 value, so the must-pass variant gives the same C exactly.
  const auto nv_bf16 = gemm(h.A.data(), 2, h.view(Fp4Format::Nvfp4, find_gemm_variant(kGemmNvfp4Task,
                                                                      "bf16_dequant_fp32_acc").options));
  EXPECT_EQ(nv_bf16[0], 24);
  EXPECT_EQ(nv_bf16[3], 1);
  EXPECT_EQ(nv_bf16[5], 224);
  EXPECT_EQ(nv_bf16[2], round_bf16(896.03125));  // 896.03125 needs 15 bits: C rounded to bf16 (896)
  EXPECT_EQ(nv_bf16[2], 896.0);
}

TEST(GemmOracle, EachVariantDequantisesTheChosenBytesAsItShould) {
  const Hand h;
  auto at = [&](Fp4Format f, const char* variant, int64_t n, int64_t k) {
    const char* task = f == Fp4Format::Nvfp4 ? kGemmNvfp4Task : kGemmMxfp4Task;
    return h.view(f, find_gemm_variant(task, variant).options).at(n, k);
  };
  const auto NV = Fp4Format::Nvfp4, MX = Fp4Format::Mxfp4;
  // The task: byte 0x97 of row 1 -> k = 0 code 7, k = 1 code 9.
  EXPECT_EQ(at(NV, "fp32", 1, 0), 1.5);
  EXPECT_EQ(at(NV, "fp32", 1, 1), -0.125);
  // nibble_swap: k = 0 reads the high nibble (9): -0.5 * 0.5 * 0.5.
  EXPECT_EQ(at(NV, "nibble_swap", 1, 0), -0.125);
  EXPECT_EQ(at(NV, "nibble_swap", 1, 1), 1.5);
  EXPECT_EQ(at(MX, "nibble_swap", 1, 0), -0.25);
  // no_block_scale: 6 * 1 * 0.5 (NVFP4 keeps the global), 6 (MXFP4).
  EXPECT_EQ(at(NV, "no_block_scale", 1, 0), 3.0);
  EXPECT_EQ(at(MX, "no_block_scale", 1, 0), 6.0);
  // scale_block_32: k = 16 reads scale[n, 0] instead of scale[n, 1].
  EXPECT_EQ(at(NV, "fp32", 0, 16), 1.0);
  EXPECT_EQ(at(NV, "scale_block_32", 0, 16), 0.5);
  EXPECT_EQ(at(NV, "scale_block_32", 2, 16), 112.0);  // 448 instead of 2^-6
  EXPECT_EQ(at(NV, "scale_block_32", 0, 15), 0.5);    // k < 16 unchanged
  // subnormal_as_normal: code 1 -> 0.75, code 9 -> -0.75; code 0 stays 0, code 7 stays 6.
  EXPECT_EQ(at(NV, "subnormal_as_normal", 2, 0), 0.75 * 448 * 0.5);
  EXPECT_EQ(at(NV, "subnormal_as_normal", 1, 1), -0.75 * 0.5 * 0.5);
  EXPECT_EQ(at(NV, "subnormal_as_normal", 2, 1), 0.0);
  EXPECT_EQ(at(NV, "subnormal_as_normal", 1, 0), 1.5);
  EXPECT_EQ(at(MX, "subnormal_as_normal", 2, 0), 0.75 * 8);
  // e8m0_bias_125: 2^(127 - 125) = 4 instead of 1.
  EXPECT_EQ(at(MX, "e8m0_bias_125", 0, 0), 4.0);
  EXPECT_EQ(at(MX, "e8m0_bias_125", 2, 0), 0.5 * 32);
  // global_as_divisor: 1 * 1 / 0.5.
  EXPECT_EQ(at(NV, "global_as_divisor", 0, 0), 2.0);
}

TEST(GemmOracle, Pieces) {
  EXPECT_EQ(fp4_code(0x97, 0), 7);
  EXPECT_EQ(fp4_code(0x97, 1), 9);
  EXPECT_EQ(fp4_code(0x97, 0, true), 9);
  EXPECT_EQ(e2m1_value(0x1), 0.5);
  EXPECT_EQ(e2m1_value(0x1, true), 0.75);
  EXPECT_EQ(e2m1_value(0x9, true), -0.75);
  EXPECT_EQ(e2m1_value(0x0, true), 0.0);
  EXPECT_EQ(scale_column(47, Fp4Format::Nvfp4), 2);
  EXPECT_EQ(scale_column(47, Fp4Format::Mxfp4), 1);
  GemmOptions o;
  o.scale_block = 32;
  EXPECT_EQ(scale_column(47, Fp4Format::Nvfp4, o), 1);
  EXPECT_EQ(block_scale_value(0x7E, Fp4Format::Nvfp4), 448.0);
  EXPECT_EQ(block_scale_value(0x7E, Fp4Format::Mxfp4), std::ldexp(1.0, 126 - 127));
  EXPECT_EQ(global_factor(0.25f, Fp4Format::Nvfp4), 0.25);
  EXPECT_EQ(global_factor(0.25f, Fp4Format::Mxfp4), 1.0);
  // bf16_dequant rounds the exact product once: 6 * 1 * (1/3 in fp32) is not a bf16 value.
  const Hand h;
  Fp4WeightView w = h.view(Fp4Format::Nvfp4);
  w.global_scale = 1.0f / 3.0f;
  w.options.bf16_dequant = true;
  const double exact = 6.0 * 0.5 * double(1.0f / 3.0f);
  EXPECT_NE(w.at(1, 0), exact);
  EXPECT_EQ(w.at(1, 0), round_bf16(exact));
}

TEST(GemmVariants, Table) {
  const auto nv = gemm_variants_for(kGemmNvfp4Task);
  const auto mx = gemm_variants_for(kGemmMxfp4Task);
  ASSERT_EQ(nv.size(), 8u);
  ASSERT_EQ(mx.size(), 7u);
  EXPECT_STREQ(nv[0].name, "fp32");
  EXPECT_TRUE(nv[0].must_pass);
  EXPECT_TRUE(find_gemm_variant(kGemmMxfp4Task, "bf16_dequant_fp32_acc").must_pass);
  EXPECT_FALSE(find_gemm_variant(kGemmMxfp4Task, "e8m0_bias_125").must_pass);
  EXPECT_THROW(find_gemm_variant(kGemmNvfp4Task, "e8m0_bias_125"), std::invalid_argument);
  EXPECT_THROW(find_gemm_variant(kGemmMxfp4Task, "global_as_divisor"), std::invalid_argument);
  EXPECT_THROW(find_gemm_variant(kGemmMxfp4Task, "scale_block_32"), std::invalid_argument);
  EXPECT_THROW(gemm_variants_for("megakernel-int4-weight-decode"), std::invalid_argument);
}

// The oracle on fixture data with every variant: must-pass rows far below, must-fail rows far
// above any plausible gate. The gate itself is measured by `nibble calibrate` on the GPU; this is
// the CPU preview (printed), with generous bounds.
TEST(GemmVariants, SeparateOnFixtureData) {
  for (const auto& task : gemm_task_names()) {
    for (const char* name : {"tiny", "m16-n256-k3080"}) {
      const GemmConfig cfg = gemm_config(task, name);
      test::TempDir dir;
      build_gemm_fixture(cfg, 0, dir.path(), 2, nullptr);
      SafetensorsFile f(dir / kFixtureModelFile);
      const auto ref = gemm_fixture(cfg, f, {}, 2);
      for (const auto& v : gemm_variants_for(task)) {
        const auto got = gemm_fixture(cfg, f, v.options, 2);
        const double err = nibble::relative_error(got.data(), ref.data(), ref.size());
        std::printf("%-17s %-15s %-22s %s relerr %.3e\n", task.c_str(), name, v.name,
                    v.must_pass ? "pass" : "fail", err);
        if (v.must_pass)
          EXPECT_LT(err, 5e-3) << task << " " << name << " " << v.name;
        else
          EXPECT_GT(err, 2e-2) << task << " " << name << " " << v.name;
      }
    }
  }
}

TEST(GemmOracle, ThreadCountDoesNotChangeC) {
  const GemmConfig cfg = gemm_config(kGemmMxfp4Task, "tiny");
  test::TempDir dir;
  build_gemm_fixture(cfg, 1, dir.path(), 1, nullptr);
  SafetensorsFile f(dir / kFixtureModelFile);
  EXPECT_EQ(gemm_fixture(cfg, f, {}, 1), gemm_fixture(cfg, f, {}, 3));
}

}  // namespace
}  // namespace nibble::oracle
