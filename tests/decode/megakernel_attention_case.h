// megakernel_attention_case.h: one case of the megakernel's attention stage (attention.cuh): its
// seeded random inputs and the checks of what the stage left, shared by the GPU stage test
// (test_megakernel_stages.cpp) and the CPU emulation test (tests/emulation), which run the same
// stage code on a GPU and on fibers.
//
// Checks: the counters reset; cache rows other than slot pos untouched; slot pos = bf16(RoPE(k)),
// bf16(v) (RoPE in fp32 as the kernel, within 4e-3 relative: no contraction ambiguity at bf16
// resolution except at ties, which the random data make negligible); the output against an fp64
// attention over the cache the kernel left (relative error below 1e-5, every element finite).
#pragma once

#include <gtest/gtest.h>

#include <cuda_runtime.h>  // float2

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <ostream>
#include <string>
#include <vector>

#include "fixtures/bf16.h"

#include "test_rng.h"

namespace nibble::test {

struct AttnCase {
  int hd, n_q, n_kv, max_seq, pos, blocks;  // blocks 0: one per SM (GPU only)
};

inline std::string attention_case_name(const AttnCase& t) {
  return "hd " + std::to_string(t.hd) + " n_q " + std::to_string(t.n_q) + " n_kv " + std::to_string(t.n_kv) + " pos " +
         std::to_string(t.pos) + " blocks " + std::to_string(t.blocks);
}
inline void PrintTo(const AttnCase& t, std::ostream* os) { *os << attention_case_name(t); }

/** The stage's inputs: K/V caches (n_kv, max_seq, hd) bf16, q|k|v (pre-RoPE) fp32, the RoPE table
 *  (max_seq, hd / 2) of {cos, sin} (theta 500000). */
struct AttnInputs {
  std::vector<uint16_t> kc, vc;
  std::vector<float> qkv;
  std::vector<float2> rope;
};

inline AttnInputs attention_inputs(const AttnCase& t) {
  Rng rng(uint64_t(t.hd * 1000 + t.n_q * 100 + t.pos));
  const int hd = t.hd, half = hd / 2;
  const size_t cache_n = size_t(t.n_kv) * t.max_seq * hd;
  AttnInputs in;
  in.kc.resize(cache_n);
  in.vc.resize(cache_n);
  for (auto& v : in.kc) v = f32_to_bf16(2.f * rng.uniform() - 1.f);
  for (auto& v : in.vc) v = f32_to_bf16(2.f * rng.uniform() - 1.f);
  in.qkv.resize(size_t(t.n_q + 2 * t.n_kv) * hd);
  for (auto& v : in.qkv) v = 2.f * rng.uniform() - 1.f;
  in.rope.resize(size_t(t.max_seq) * half);
  for (int p = 0; p < t.max_seq; ++p)
    for (int i = 0; i < half; ++i) {
      const double ang = double(p) * std::pow(500000.0, -2.0 * i / hd);
      in.rope[size_t(p) * half + i] = float2{float(std::cos(ang)), float(std::sin(ang))};
    }
  return in;
}

/** The checks above on what the stage left: caches kc2 / vc2, out (n_q, hd), counters cnt (n_kv). */
inline void check_attention(const AttnCase& t, const AttnInputs& in, const std::vector<uint16_t>& kc2,
                            const std::vector<uint16_t>& vc2, const std::vector<float>& out,
                            const std::vector<unsigned>& cnt) {
  const std::string what = attention_case_name(t);
  const int hd = t.hd, half = hd / 2, rep = t.n_q / t.n_kv;
  for (int h = 0; h < t.n_kv; ++h) EXPECT_EQ(cnt[size_t(h)], 0u) << what << ": counter not reset";
  int stray = 0, wrong = 0;
  for (int h = 0; h < t.n_kv; ++h) {
    const float* kh = in.qkv.data() + size_t(t.n_q) * hd + size_t(h) * hd;
    const float* vh = in.qkv.data() + size_t(t.n_q + t.n_kv) * hd + size_t(h) * hd;
    for (int s = 0; s < t.max_seq; ++s) {
      const size_t row = (size_t(h) * t.max_seq + s) * hd;
      if (s != t.pos) {
        stray += std::memcmp(kc2.data() + row, in.kc.data() + row, size_t(hd) * 2) != 0;
        stray += std::memcmp(vc2.data() + row, in.vc.data() + row, size_t(hd) * 2) != 0;
        continue;
      }
      for (int i = 0; i < half; ++i) {
        const float2 cs = in.rope[size_t(t.pos) * half + i];
        const double r1 = double(kh[i]) * cs.x - double(kh[i + half]) * cs.y;
        const double r2 = double(kh[i + half]) * cs.x + double(kh[i]) * cs.y;
        wrong += std::fabs(bf16_to_f32(kc2[row + i]) - r1) > std::fabs(r1) * 4e-3 + 1e-6;
        wrong += std::fabs(bf16_to_f32(kc2[row + i + half]) - r2) > std::fabs(r2) * 4e-3 + 1e-6;
        wrong += vc2[row + i] != f32_to_bf16(vh[i]);
        wrong += vc2[row + i + half] != f32_to_bf16(vh[i + half]);
      }
    }
  }
  EXPECT_EQ(stray, 0) << what << ": cache rows other than slot pos changed";
  EXPECT_EQ(wrong, 0) << what << ": appended K/V differ from bf16(rope(k)), bf16(v)";

  // fp64 attention over the cache the kernel left (slot pos included).
  const double scale = 1.0 / std::sqrt(double(hd));
  double num = 0, den = 0;
  int nonfinite = 0;
  for (int j = 0; j < t.n_q; ++j) {
    const int h = j / rep;
    std::vector<double> q(static_cast<size_t>(hd));
    const float* qh = in.qkv.data() + size_t(j) * hd;
    const float2* cs = in.rope.data() + size_t(t.pos) * half;
    for (int i = 0; i < half; ++i) {
      q[size_t(i)] = double(qh[i]) * cs[i].x - double(qh[i + half]) * cs[i].y;
      q[size_t(i + half)] = double(qh[i + half]) * cs[i].x + double(qh[i]) * cs[i].y;
    }
    std::vector<double> sc(static_cast<size_t>(t.pos) + 1);
    double mx = -1e300;
    for (int s = 0; s <= t.pos; ++s) {
      double d = 0;
      for (int e = 0; e < hd; ++e) d += q[size_t(e)] * bf16_to_f32(kc2[(size_t(h) * t.max_seq + s) * hd + e]);
      sc[size_t(s)] = d * scale;
      mx = std::max(mx, sc[size_t(s)]);
    }
    double l = 0;
    for (auto& v : sc) l += (v = std::exp(v - mx));
    for (int e = 0; e < hd; ++e) {
      double o = 0;
      for (int s = 0; s <= t.pos; ++s) o += sc[size_t(s)] * bf16_to_f32(vc2[(size_t(h) * t.max_seq + s) * hd + e]);
      o /= l;
      const float got = out[size_t(j) * hd + e];
      if (!std::isfinite(got)) ++nonfinite;
      num += (got - o) * (got - o);
      den += o * o;
    }
  }
  EXPECT_EQ(nonfinite, 0) << what;
  EXPECT_LT(std::sqrt(num / den), 1e-5) << what;
}

}  // namespace nibble::test
