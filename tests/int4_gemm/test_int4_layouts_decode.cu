// test_int4_layouts_decode.cu: the int4 solutions' layout reader (solutions/int4_gemm/int4_layouts.cuh,
// what the baseline's kernel calls for every W[n, k]) run on the host over the tensors the harness
// hands each layout (fixtures/int4_gemm/int4_gemm_layouts.h), against the fp64 oracle's weight: every
// (n, k) of the tiny configs, asymmetric and symmetric, equal. No GPU: the functions are
// __host__ __device__ and the tensors stay in host memory.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "fixtures/int4_gemm/int4_gemm_fixture.h"
#include "fixtures/int4_gemm/int4_gemm_layouts.h"
#include "reference/int4_gemm/int4_gemm_oracle.h"
#include "solutions/int4_gemm/int4_layouts.cuh"

namespace nibble {
namespace {

template <class T>
const T* ptr(const std::vector<Int4LayoutTensor>& ts, const std::string& name) {
  for (const auto& t : ts)
    if (t.spec.name == name) return reinterpret_cast<const T*>(t.bytes.data());
  return nullptr;
}

/** The Int4Problem parse_int4_problem would return, over host copies. */
sol::Int4Problem host_problem(const std::vector<Int4LayoutTensor>& ts, Int4Layout layout, int64_t N, int64_t K) {
  sol::Int4Problem g;
  g.layout = int(layout);
  g.M = 1;
  g.N = N;
  g.K = K;
  g.groups = K / 128;
  g.packed = ptr<uint8_t>(ts, "W.packed");
  g.zero = ptr<uint8_t>(ts, "W.zero");
  g.scale = layout == Int4Layout::Plain               ? ptr<uint16_t>(ts, "W.scale")
            : layout == Int4Layout::CompressedTensors ? ptr<uint16_t>(ts, "W.weight_scale")
                                                      : ptr<uint16_t>(ts, "W.scales");
  g.qweight = layout == Int4Layout::CompressedTensors ? ptr<int32_t>(ts, "W.weight_packed") : ptr<int32_t>(ts, "W.qweight");
  g.qzeros = layout == Int4Layout::CompressedTensors ? ptr<int32_t>(ts, "W.weight_zero_point") : ptr<int32_t>(ts, "W.qzeros");
  g.g_idx = ptr<int32_t>(ts, "W.g_idx");
  return g;
}

template <int L>
int64_t mismatches(const sol::Int4Problem& g, const Int4Plain& w) {
  int64_t bad = 0;
  for (int64_t n = 0; n < g.N; ++n)
    for (int64_t k = 0; k < g.K; ++k) bad += double(sol::int4_weight<L>(g, n, k)) != oracle::int4_weight(w, n, k);
  return bad;
}

TEST(Int4LayoutsDecode, EveryWeightOfEveryLayoutIsTheOraclesWeight) {
  for (const char* config : {"tiny", "tiny-sym"}) {
    const Int4GemmConfig c = int4_gemm_config(config);
    const Int4Plain w = generate_int4_gemm_fixture(c, 1, 1).W;
    for (Int4Layout layout : all_int4_layouts()) {
      const auto ts = int4_layout_tensors(w, layout, c.symmetric);
      const sol::Int4Problem g = host_problem(ts, layout, c.N, c.K);
      int64_t bad = -1;
      switch (layout) {
        case Int4Layout::Plain: bad = mismatches<NIBBLE_INT4_LAYOUT_PLAIN>(g, w); break;
        case Int4Layout::Awq: bad = mismatches<NIBBLE_INT4_LAYOUT_AWQ>(g, w); break;
        case Int4Layout::Gptq: bad = mismatches<NIBBLE_INT4_LAYOUT_GPTQ>(g, w); break;
        case Int4Layout::GptqGIdx: bad = mismatches<NIBBLE_INT4_LAYOUT_GPTQ_G_IDX>(g, w); break;
        case Int4Layout::CompressedTensors: bad = mismatches<NIBBLE_INT4_LAYOUT_COMPRESSED_TENSORS>(g, w); break;
      }
      EXPECT_EQ(bad, 0) << config << " " << int4_layout_name(layout);
    }
  }
}

TEST(Int4LayoutsDecode, Fp16ByHand) {
  EXPECT_EQ(sol::int4_f16_to_f32(0x3C00), 1.0f);
  EXPECT_EQ(sol::int4_f16_to_f32(0xC000), -2.0f);
  EXPECT_EQ(sol::int4_f16_to_f32(0x0001), 0x1p-24f);   // the smallest subnormal
  EXPECT_EQ(sol::int4_f16_to_f32(0x0400), 0x1p-14f);   // the smallest normal
  EXPECT_EQ(sol::int4_f16_to_f32(0x7BFF), 65504.0f);   // the largest
  EXPECT_EQ(sol::int4_awq_slot(0), 0);
  EXPECT_EQ(sol::int4_awq_slot(2), 1);
  EXPECT_EQ(sol::int4_awq_slot(1), 4);
  EXPECT_EQ(sol::int4_awq_slot(7), 7);
}

}  // namespace
}  // namespace nibble
