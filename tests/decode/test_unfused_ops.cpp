// test_unfused_ops.cpp: the unfused solution's small kernels, each alone against fp64 on the CPU.
//
// attention (flash-decoding partial + combine): hd 64 and 128; 1, 2, 3, 4, 5 and 8 query heads per
// kv head; pos at 0, at chunk boundaries (63, 64, 65) and deep (2080), and a cache whose last chunk
// is cut short by max_seq. Slots past pos hold NaN: reading one fails the test.
// rope_kv_append: hd 64 and 128 at pos 0, 1 and 2050; K/V must be a correct bf16 rounding and no
// other cache slot may change. rmsnorm, embed (including out-of-range token ids -> NaN) and
// swiglu at small, odd and full sizes.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <ostream>
#include <string>
#include <vector>

#include "fixtures/bf16.h"
#include "decode/int4_test_matrix.h"
#include "gpu_test_util.h"
#include "kernels.h"
#include "test_rng.h"

namespace {

using nibble::bf16_to_f32;  // fixtures/bf16.h
using nibble::f32_to_bf16;

namespace uf = nibble::unfused;

#define CUDA_OK(call) ASSERT_EQ((call), cudaSuccess) << #call

using nibble::test::Rng;  // tests/test_rng.h

using nibble::test::DevBuf;  // tests/decode/int4_test_matrix.h

template <class T>
void upload(DevBuf& d, const std::vector<T>& h) {
  ASSERT_TRUE(d.p);
  ASSERT_EQ(cudaMemcpy(d.p, h.data(), h.size() * sizeof(T), cudaMemcpyHostToDevice), cudaSuccess);
}
template <class T>
std::vector<T> download(const DevBuf& d, size_t n) {
  std::vector<T> h(n);
  EXPECT_EQ(cudaMemcpy(h.data(), d.p, n * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
  return h;
}

// ---- attention ----------------------------------------------------------------------------------

struct AttnCase {
  int hd, n_q, n_kv, max_seq, pos;
};
void PrintTo(const AttnCase& c, std::ostream* os) {
  *os << "hd " << c.hd << ", n_q " << c.n_q << ", n_kv " << c.n_kv << ", max_seq " << c.max_seq << ", pos " << c.pos;
}
std::string attn_name(const testing::TestParamInfo<AttnCase>& p) {
  const AttnCase& c = p.param;
  return "hd" + std::to_string(c.hd) + "_q" + std::to_string(c.n_q) + "_kv" + std::to_string(c.n_kv) + "_seq" +
         std::to_string(c.max_seq) + "_pos" + std::to_string(c.pos);
}

class UnfusedAttention : public testing::TestWithParam<AttnCase> {};

TEST_P(UnfusedAttention, MatchesFp64) {
  NIBBLE_REQUIRE_GPU();
  const AttnCase c = GetParam();
  Rng rng(1000 + uint64_t(c.pos) * 31 + uint64_t(c.hd) + uint64_t(c.n_q) * 7);
  const size_t cache_n = size_t(c.n_kv) * c.max_seq * c.hd;
  std::vector<uint16_t> kc(cache_n, 0xFFFFu), vc(cache_n, 0xFFFFu);  // NaN past pos
  for (int h = 0; h < c.n_kv; ++h)
    for (int s = 0; s <= c.pos; ++s)
      for (int e = 0; e < c.hd; ++e) {
        const size_t i = (size_t(h) * c.max_seq + s) * c.hd + e;
        kc[i] = f32_to_bf16(rng.symmetric());
        vc[i] = f32_to_bf16(rng.symmetric());
      }
  std::vector<float> q(size_t(c.n_q) * c.hd);
  for (auto& v : q) v = 3.f * rng.symmetric();  // peaky softmax: the max subtraction matters

  // fp64 reference.
  const int n_rep = c.n_q / c.n_kv;
  std::vector<double> ref(q.size());
  for (int j = 0; j < c.n_q; ++j) {
    const int h = j / n_rep;
    std::vector<double> sc(size_t(c.pos) + 1);
    double m = -INFINITY;
    for (int s = 0; s <= c.pos; ++s) {
      double d = 0;
      for (int e = 0; e < c.hd; ++e) d += double(q[size_t(j) * c.hd + e]) * bf16_to_f32(kc[(size_t(h) * c.max_seq + s) * c.hd + e]);
      sc[s] = d / std::sqrt(double(c.hd));
      m = std::max(m, sc[s]);
    }
    double l = 0;
    for (auto& v : sc) l += (v = std::exp(v - m));
    for (int e = 0; e < c.hd; ++e) {
      double o = 0;
      for (int s = 0; s <= c.pos; ++s) o += sc[s] * bf16_to_f32(vc[(size_t(h) * c.max_seq + s) * c.hd + e]);
      ref[size_t(j) * c.hd + e] = o / l;
    }
  }

  DevBuf dq(q.size() * 4), dk(cache_n * 2), dv(cache_n * 2), dout(q.size() * 4);
  const size_t chunks = size_t(uf::attn_max_chunks(c.max_seq));
  DevBuf dpo(size_t(c.n_q) * chunks * c.hd * 4), dpml(size_t(c.n_q) * chunks * 2 * 4);
  upload(dq, q);
  upload(dk, kc);
  upload(dv, vc);
  CUDA_OK(cudaMemset(dout.p, 0xFF, q.size() * 4));
  ASSERT_EQ(uf::launch_attention_partial(dq.as<float>(), dk.as<uint16_t>(), dv.as<uint16_t>(), c.n_q, c.n_kv, c.hd,
                                         c.max_seq, c.pos, dpo.as<float>(), dpml.as<float>(), nullptr),
            cudaSuccess);
  ASSERT_EQ(uf::launch_attention_combine(dpo.as<float>(), dpml.as<float>(), c.n_q, c.hd, c.max_seq, c.pos,
                                         dout.as<float>(), nullptr),
            cudaSuccess);
  CUDA_OK(cudaDeviceSynchronize());
  const auto out = download<float>(dout, q.size());
  for (int j = 0; j < c.n_q; ++j) {
    double num = 0, den = 0;
    for (int e = 0; e < c.hd; ++e) {
      const size_t i = size_t(j) * c.hd + e;
      ASSERT_TRUE(std::isfinite(out[i])) << "head " << j << " element " << e << " = " << out[i];
      num += (out[i] - ref[i]) * (out[i] - ref[i]);
      den += ref[i] * ref[i];
    }
    EXPECT_LT(std::sqrt(num / den), 1e-5) << "query head " << j;
  }
}

INSTANTIATE_TEST_SUITE_P(Shapes, UnfusedAttention,
                         testing::Values(AttnCase{64, 4, 2, 256, 0}, AttnCase{64, 4, 2, 256, 63},
                                         AttnCase{64, 4, 2, 256, 64}, AttnCase{64, 4, 2, 256, 71},
                                         AttnCase{64, 6, 2, 100, 99},      // 3 per kv head; short last chunk
                                         AttnCase{128, 24, 8, 4096, 0}, AttnCase{128, 24, 8, 4096, 65},
                                         AttnCase{128, 24, 8, 4096, 2080},  // the full config at depth
                                         AttnCase{128, 8, 8, 200, 199},     // MHA
                                         AttnCase{128, 20, 4, 129, 128},    // 5 per kv head
                                         AttnCase{128, 8, 1, 300, 130}),    // 8 per kv head
                         attn_name);

// ---- rope_kv_append ------------------------------------------------------------------------------

struct RopeCase {
  int hd, n_q, n_kv, max_seq, pos;
};
void PrintTo(const RopeCase& c, std::ostream* os) {
  *os << "hd " << c.hd << ", n_q " << c.n_q << ", n_kv " << c.n_kv << ", pos " << c.pos;
}
std::string rope_name(const testing::TestParamInfo<RopeCase>& p) {
  return "hd" + std::to_string(p.param.hd) + "_q" + std::to_string(p.param.n_q) + "_kv" +
         std::to_string(p.param.n_kv) + "_pos" + std::to_string(p.param.pos);
}

class UnfusedRope : public testing::TestWithParam<RopeCase> {};

TEST_P(UnfusedRope, RotatesAndAppends) {
  NIBBLE_REQUIRE_GPU();
  const RopeCase c = GetParam();
  const double theta = 500000.0;
  const int half = c.hd / 2;
  std::vector<float2> table(size_t(c.max_seq) * half);
  for (int p = 0; p < c.max_seq; ++p)
    for (int i = 0; i < half; ++i) {
      const double a = double(p) * std::pow(theta, -2.0 * i / c.hd);
      table[size_t(p) * half + i] = make_float2(float(std::cos(a)), float(std::sin(a)));
    }
  Rng rng(77 + uint64_t(c.pos));
  const int nqkv = (c.n_q + 2 * c.n_kv) * c.hd;
  std::vector<float> qkv(static_cast<size_t>(nqkv));
  for (auto& v : qkv) v = 4.f * rng.symmetric();
  const size_t cache_n = size_t(c.n_kv) * c.max_seq * c.hd;
  const std::vector<uint16_t> sentinel(cache_n, 0x7F7Fu);

  DevBuf dqkv(qkv.size() * 4), dtab(table.size() * sizeof(float2)), dk(cache_n * 2), dv(cache_n * 2);
  upload(dqkv, qkv);
  upload(dtab, table);
  upload(dk, sentinel);
  upload(dv, sentinel);
  ASSERT_EQ(uf::launch_rope_kv_append(dqkv.as<float>(), dtab.as<float2>(), c.n_q, c.n_kv, c.hd, c.max_seq, c.pos,
                                      dk.as<uint16_t>(), dv.as<uint16_t>(), nullptr),
            cudaSuccess);
  CUDA_OK(cudaDeviceSynchronize());
  const auto out = download<float>(dqkv, qkv.size());
  const auto kc = download<uint16_t>(dk, cache_n), vc = download<uint16_t>(dv, cache_n);

  auto rotated = [&](const float* x, int i) {  // the pair element i of a head, in double
    const double a = double(c.pos) * std::pow(theta, -2.0 * (i % half) / c.hd);
    return i < half ? x[i] * std::cos(a) - x[i + half] * std::sin(a) : x[i] * std::cos(a) + x[i - half] * std::sin(a);
  };
  // A correct bf16 rounding of r is within half an ulp, |b - r| <= 2^-8 |r|, plus the fp32 error of
  // the rotation itself (a near-tie may round either way).
  auto bf16_ok = [](uint16_t b, double r) {
    return std::fabs(bf16_to_f32(b) - r) <= std::ldexp(std::fabs(r), -8) + 1e-5 * std::max(1.0, std::fabs(r));
  };
  for (int h = 0; h < c.n_q; ++h)
    for (int i = 0; i < c.hd; ++i) {
      const size_t at = size_t(h) * c.hd + i;
      const double r = rotated(qkv.data() + size_t(h) * c.hd, i);
      EXPECT_NEAR(out[at], r, 1e-6 * 8.0) << "q head " << h << " element " << i;
    }
  for (int h = 0; h < c.n_kv; ++h)
    for (int i = 0; i < c.hd; ++i) {
      const size_t slot = (size_t(h) * c.max_seq + c.pos) * c.hd + i;
      const float* k = qkv.data() + size_t(c.n_q + h) * c.hd;
      const float* v = qkv.data() + size_t(c.n_q + c.n_kv + h) * c.hd;
      EXPECT_TRUE(bf16_ok(kc[slot], rotated(k, i))) << "k head " << h << " element " << i << ": " << bf16_to_f32(kc[slot])
                                                    << " vs " << rotated(k, i);
      EXPECT_EQ(vc[slot], f32_to_bf16(v[i])) << "v head " << h << " element " << i;
    }
  int stray = 0;
  for (size_t i = 0; i < cache_n; ++i) {
    if (int((i / c.hd) % c.max_seq) == c.pos) continue;
    stray += (kc[i] != 0x7F7Fu) + (vc[i] != 0x7F7Fu);
  }
  EXPECT_EQ(stray, 0) << "cache elements outside slot pos changed";
}

INSTANTIATE_TEST_SUITE_P(Shapes, UnfusedRope,
                         testing::Values(RopeCase{64, 4, 2, 256, 0}, RopeCase{64, 4, 2, 256, 1},
                                         RopeCase{64, 4, 2, 256, 255}, RopeCase{128, 24, 8, 4096, 2050},
                                         RopeCase{128, 24, 8, 4096, 4095}),
                         rope_name);

// ---- rmsnorm, embed, swiglu ---------------------------------------------------------------------

TEST(UnfusedRmsnorm, MatchesFp64) {
  NIBBLE_REQUIRE_GPU();
  for (int d : {1, 7, 128, 256, 3072, 8192}) {
    Rng rng(5 + uint64_t(d));
    std::vector<float> x(static_cast<size_t>(d));
    std::vector<uint16_t> g(static_cast<size_t>(d));
    for (auto& v : x) v = 10.f * rng.symmetric();
    for (auto& v : g) v = f32_to_bf16(0.9f + 0.2f * rng.uniform());
    const double eps = 1e-5;
    double ss = 0;
    for (float v : x) ss += double(v) * v;
    const double inv = 1.0 / std::sqrt(ss / d + eps);
    DevBuf dx(size_t(d) * 4), dg(size_t(d) * 2), dy(size_t(d) * 4);
    upload(dx, x);
    upload(dg, g);
    CUDA_OK(cudaMemset(dy.p, 0xFF, size_t(d) * 4));
    ASSERT_EQ(uf::launch_rmsnorm(dx.as<float>(), dg.as<uint16_t>(), float(eps), d, dy.as<float>(), nullptr), cudaSuccess);
    CUDA_OK(cudaDeviceSynchronize());
    const auto y = download<float>(dy, size_t(d));
    for (int i = 0; i < d; ++i) {
      const double r = x[i] * inv * bf16_to_f32(g[i]);
      ASSERT_TRUE(std::isfinite(y[i])) << "d " << d << " element " << i;
      EXPECT_LE(std::fabs(y[i] - r), 1e-5 * std::fabs(r) + 1e-30) << "d " << d << " element " << i;
    }
  }
}

TEST(UnfusedEmbed, DequantisesTheTokenRow) {
  NIBBLE_REQUIRE_GPU();
  const int vocab = 1000, d = 384, groups = d / 128;
  Rng rng(9);
  std::vector<uint8_t> packed(size_t(vocab) * d / 2), zero(size_t(vocab) * groups);
  std::vector<uint16_t> scale(size_t(vocab) * groups);
  for (auto& b : packed) b = uint8_t(rng.below(256));
  for (auto& z : zero) z = uint8_t(rng.below(16));
  for (auto& s : scale) s = f32_to_bf16((0.5f + rng.uniform()) * 0.01f);
  DevBuf dp(packed.size()), ds(scale.size() * 2), dz(zero.size()), dtok(8), dh(size_t(d) * 4);
  upload(dp, packed);
  upload(ds, scale);
  upload(dz, zero);
  uf::Int4Matrix e;
  e.packed = dp.as<uint8_t>();
  e.scale = ds.as<uint16_t>();
  e.zero = dz.as<uint8_t>();
  e.rows = vocab;
  for (int64_t tok : {int64_t(0), int64_t(1), int64_t(500), int64_t(999), int64_t(-1), int64_t(1000)}) {
    upload(dtok, std::vector<int64_t>{tok});
    CUDA_OK(cudaMemset(dh.p, 0, size_t(d) * 4));
    ASSERT_EQ(uf::launch_embed(dtok.as<int64_t>(), e, d, dh.as<float>(), nullptr), cudaSuccess);
    CUDA_OK(cudaDeviceSynchronize());
    const auto h = download<float>(dh, size_t(d));
    for (int i = 0; i < d; ++i) {
      if (tok < 0 || tok >= vocab) {
        EXPECT_TRUE(std::isnan(h[i])) << "token " << tok << " (out of range) element " << i;
        continue;
      }
      const uint8_t byte = packed[size_t(tok) * d / 2 + i / 2];
      const int code = i % 2 ? byte >> 4 : byte & 0xF;
      const size_t g = size_t(tok) * groups + i / 128;
      EXPECT_EQ(double(h[i]), (code - int(zero[g])) * bf16_to_f32(scale[g])) << "token " << tok << " element " << i;
    }
  }
}

TEST(UnfusedSwiglu, MatchesFp64) {
  NIBBLE_REQUIRE_GPU();
  for (int n : {1, 7, 512, 8192}) {
    Rng rng(11 + uint64_t(n));
    std::vector<float> g(static_cast<size_t>(n)), u(static_cast<size_t>(n));
    for (auto& v : g) v = 12.f * rng.symmetric();
    for (auto& v : u) v = 3.f * rng.symmetric();
    if (n > 2) {
      g[0] = -100.f;  // exp(-g) overflows: silu -> -0
      g[1] = 100.f;
    }
    DevBuf dg(size_t(n) * 4), du(size_t(n) * 4), dy(size_t(n) * 4);
    upload(dg, g);
    upload(du, u);
    CUDA_OK(cudaMemset(dy.p, 0xFF, size_t(n) * 4));
    ASSERT_EQ(uf::launch_swiglu(dg.as<float>(), du.as<float>(), n, dy.as<float>(), nullptr), cudaSuccess);
    CUDA_OK(cudaDeviceSynchronize());
    const auto y = download<float>(dy, size_t(n));
    for (int i = 0; i < n; ++i) {
      const double r = double(g[i]) / (1.0 + std::exp(-double(g[i]))) * u[i];
      ASSERT_TRUE(std::isfinite(y[i])) << "n " << n << " element " << i;
      EXPECT_LE(std::fabs(y[i] - r), 1e-5 * std::fabs(r) + 1e-30) << "n " << n << " element " << i;
    }
  }
}

}  // namespace
