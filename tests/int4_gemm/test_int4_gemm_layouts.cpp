// test_int4_gemm_layouts.cpp: what the harness hands a gemm-w4a16-int4 solution in each layout
// (fixtures/int4_gemm/int4_gemm_layouts.h) against the fixture's plain weights: the tensor list of
// include/nibble/nibble_gemm.h, an exact round trip, the g_idx relabelling by hand, and a reader
// written here from the formats' documentation (not fixtures/int4_formats.cpp) that decodes every
// W[n, k] of every layout, and, when it makes one layout mistake, computes exactly the oracle
// variant named for that mistake (reference/int4_gemm/int4_gemm_oracle.h).
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "fixtures/fp16.h"
#include "fixtures/int4_gemm/int4_gemm_fixture.h"
#include "fixtures/int4_gemm/int4_gemm_layouts.h"
#include "reference/int4_gemm/int4_gemm_oracle.h"

namespace nibble {
namespace {

using oracle::Int4GemmOptions;

const Int4LayoutTensor& find(const std::vector<Int4LayoutTensor>& ts, const std::string& name) {
  for (const auto& t : ts)
    if (t.spec.name == name) return t;
  throw std::runtime_error("no tensor " + name);
}
bool has(const std::vector<Int4LayoutTensor>& ts, const std::string& name) {
  for (const auto& t : ts)
    if (t.spec.name == name) return true;
  return false;
}
int32_t word(const Int4LayoutTensor& t, int64_t i) {
  int32_t w;
  std::memcpy(&w, t.bytes.data() + 4 * i, 4);
  return w;
}
uint16_t half(const Int4LayoutTensor& t, int64_t i) {
  uint16_t h;
  std::memcpy(&h, t.bytes.data() + 2 * i, 2);
  return h;
}
int nib(int32_t w, int i) { return int((uint32_t(w) >> (4 * i)) & 15u); }

/** The mistakes a kernel can make reading a layout. */
enum class Mistake { None, HighNibbleFirst, AwqIdentityOrder, GptqNoPlusOne, ZeroReadAsGptq, IgnoreGIdx };

/** W[n, k] from the tensors of `layout`, as the format's documentation says (header of nibble_gemm.h). */
double read_weight(const std::vector<Int4LayoutTensor>& ts, Int4Layout layout, int64_t N, int64_t K, int64_t n,
                   int64_t k, Mistake m = Mistake::None) {
  const int64_t G = K / 128;
  int64_t g = k / 128;
  int q = 0, z = 0;
  uint16_t s = 0;
  switch (layout) {
    case Int4Layout::Plain: {
      const uint8_t byte = find(ts, "W.packed").bytes[size_t(n * (K / 2) + k / 2)];
      const bool high = (k % 2 == 1) != (m == Mistake::HighNibbleFirst);
      q = high ? byte >> 4 : byte & 15;
      z = find(ts, "W.zero").bytes[size_t(n * G + g)];
      s = half(find(ts, "W.scale"), n * G + g);
      break;
    }
    case Int4Layout::Awq: {
      static const int order[8] = {0, 2, 4, 6, 1, 3, 5, 7};  // nibble i holds output 8c + order[i]
      int slot = int(n % 8);
      if (m != Mistake::AwqIdentityOrder)
        for (int i = 0; i < 8; ++i)
          if (order[i] == n % 8) slot = i;
      q = nib(word(find(ts, "W.qweight"), k * (N / 8) + n / 8), slot);
      z = nib(word(find(ts, "W.qzeros"), g * (N / 8) + n / 8), slot);
      s = half(find(ts, "W.scales"), g * N + n);
      break;
    }
    case Int4Layout::Gptq:
    case Int4Layout::GptqGIdx: {
      if (layout == Int4Layout::GptqGIdx && m != Mistake::IgnoreGIdx) g = word(find(ts, "W.g_idx"), k);
      q = nib(word(find(ts, "W.qweight"), (k / 8) * N + n), int(k % 8));
      z = nib(word(find(ts, "W.qzeros"), g * (N / 8) + n / 8), int(n % 8)) + (m == Mistake::GptqNoPlusOne ? 0 : 1);
      s = half(find(ts, "W.scales"), g * N + n);
      break;
    }
    case Int4Layout::CompressedTensors: {
      q = nib(word(find(ts, "W.weight_packed"), n * (K / 8) + k / 8), int(k % 8));
      z = has(ts, "W.weight_zero_point") ? nib(word(find(ts, "W.weight_zero_point"), (n / 8) * G + g), int(n % 8)) : 8;
      if (m == Mistake::ZeroReadAsGptq) z += 1;
      s = half(find(ts, "W.weight_scale"), n * G + g);
      break;
    }
  }
  return double(q - z) * double(f16_to_f32(s));
}

class Int4Layouts : public ::testing::TestWithParam<std::string> {};

TEST_P(Int4Layouts, EveryLayoutIsTheListedTensorsAndRoundTripsExactly) {
  const Int4GemmConfig c = int4_gemm_config(GetParam());
  for (uint64_t seed : {0, 1}) {
    const Int4Plain w = generate_int4_gemm_fixture(c, seed, 2).W;
    for (Int4Layout layout : all_int4_layouts()) {
      const auto ts = int4_layout_tensors(w, layout, c.symmetric);
      const auto specs = int4_layout_specs(c.N, c.K, layout, c.symmetric);
      ASSERT_EQ(ts.size(), specs.size()) << int4_layout_name(layout);
      for (size_t i = 0; i < ts.size(); ++i) {
        EXPECT_EQ(ts[i].spec.name, specs[i].name);
        EXPECT_EQ(ts[i].spec.dtype, specs[i].dtype) << specs[i].name;
        EXPECT_EQ(ts[i].spec.shape, specs[i].shape) << specs[i].name;
        EXPECT_EQ(int64_t(ts[i].bytes.size()), specs[i].nbytes()) << specs[i].name;
      }
      const Int4Plain back = int4_plain_from_layout(ts, layout, c.N, c.K);
      EXPECT_EQ(back.packed, w.packed) << int4_layout_name(layout);
      EXPECT_EQ(back.scale, w.scale) << int4_layout_name(layout);
      EXPECT_EQ(back.zero, w.zero) << int4_layout_name(layout);
    }
  }
}

TEST_P(Int4Layouts, AReaderFromTheDocumentationDecodesEveryWeightAndEachMistakeIsItsVariant) {
  const Int4GemmConfig c = int4_gemm_config(GetParam());
  const Int4Plain w = generate_int4_gemm_fixture(c, 0, 2).W;
  auto variant = [](void (*set)(Int4GemmOptions&)) {
    Int4GemmOptions o;
    set(o);
    return o;
  };
  struct Case {
    Int4Layout layout;
    Mistake mistake;
    Int4GemmOptions as;
  };
  const std::vector<Case> cases{
      {Int4Layout::Plain, Mistake::None, {}},
      {Int4Layout::Awq, Mistake::None, {}},
      {Int4Layout::Gptq, Mistake::None, {}},
      {Int4Layout::GptqGIdx, Mistake::None, {}},
      {Int4Layout::CompressedTensors, Mistake::None, {}},
      {Int4Layout::Plain, Mistake::HighNibbleFirst, variant([](Int4GemmOptions& o) { o.nibble_swap = true; })},
      {Int4Layout::Awq, Mistake::AwqIdentityOrder, variant([](Int4GemmOptions& o) { o.awq_order_ignored = true; })},
      {Int4Layout::Gptq, Mistake::GptqNoPlusOne, variant([](Int4GemmOptions& o) { o.gptq_zero_not_plus_one = true; })},
      {Int4Layout::CompressedTensors, Mistake::ZeroReadAsGptq, variant([](Int4GemmOptions& o) { o.gptq_zero_plus_one = true; })},
      {Int4Layout::GptqGIdx, Mistake::IgnoreGIdx, variant([](Int4GemmOptions& o) { o.g_idx_ignored = true; })},
  };
  for (const Case& cs : cases) {
    const auto ts = int4_layout_tensors(w, cs.layout, c.symmetric);
    int64_t wrong = 0, differs_from_task = 0;
    for (int64_t n = 0; n < c.N; ++n)
      for (int64_t k = 0; k < c.K; ++k) {
        const double got = read_weight(ts, cs.layout, c.N, c.K, n, k, cs.mistake);
        wrong += got != oracle::int4_weight(w, n, k, cs.as);
        differs_from_task += got != oracle::int4_weight(w, n, k);
      }
    EXPECT_EQ(wrong, 0) << int4_layout_name(cs.layout) << " mistake " << int(cs.mistake);
    if (cs.mistake != Mistake::None) {
      EXPECT_GT(differs_from_task, c.N * c.K / 4) << int4_layout_name(cs.layout) << ": the mistake must show";
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Configs, Int4Layouts, ::testing::Values("tiny", "tiny-sym"),
                         [](const ::testing::TestParamInfo<std::string>& i) {
                           return i.param == "tiny" ? std::string("tiny") : std::string("tiny_sym");
                         });

TEST(Int4Layouts, GIdxRelabelsWholeGroupsByHand) {
  EXPECT_EQ(int4_gemm_g_idx_labels(3), (std::vector<int32_t>{1, 2, 0}));
  EXPECT_EQ(int4_gemm_g_idx_labels(1), (std::vector<int32_t>{0}));
  const Int4GemmConfig c = int4_gemm_config("tiny");  // K = 384: 3 groups
  const Int4Plain w = generate_int4_gemm_fixture(c, 0, 1).W;
  const auto ts = int4_layout_tensors(w, Int4Layout::GptqGIdx, false);
  const auto& gi = find(ts, "W.g_idx");
  for (int64_t k = 0; k < c.K; ++k) EXPECT_EQ(word(gi, k), k < 128 ? 1 : k < 256 ? 2 : 0) << k;
  // Row 1 of W.scales holds plain group 0: scale[n, 0] for every n.
  for (int64_t n = 0; n < c.N; ++n) EXPECT_EQ(half(find(ts, "W.scales"), 1 * c.N + n), w.scale[size_t(n * 3 + 0)]) << n;
}

TEST(Int4Layouts, WhatAFormatCannotHoldIsRefused) {
  Int4Plain w = generate_int4_gemm_fixture(int4_gemm_config("tiny"), 0, 1).W;
  w.zero[5] = 0;  // GPTQ v1 stores zero - 1
  EXPECT_THROW(int4_layout_tensors(w, Int4Layout::Gptq, false), std::invalid_argument);
  EXPECT_NO_THROW(int4_layout_tensors(w, Int4Layout::Awq, false));
  EXPECT_THROW(int4_layout_tensors(w, Int4Layout::CompressedTensors, true), std::invalid_argument) << "symmetric needs zero 8";
  EXPECT_THROW(int4_plain_from_layout({}, Int4Layout::Awq, 40, 384), std::invalid_argument);
}

}  // namespace
}  // namespace nibble
