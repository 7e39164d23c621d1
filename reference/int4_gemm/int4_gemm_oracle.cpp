// int4_gemm_oracle.cpp: see int4_gemm_oracle.h.
#include "reference/int4_gemm/int4_gemm_oracle.h"

#include "fixtures/bf16.h"
#include "fixtures/fp16.h"
#include "fixtures/parallel.h"
#include "reference/sliver.h"

namespace nibble::oracle {

const std::vector<Int4GemmVariant>& int4_gemm_variants() {
  static const std::vector<Int4GemmVariant> v = [] {
    std::vector<Int4GemmVariant> t;
    auto add = [&](const char* name, const char* what, bool pass, auto set) {
      Int4GemmOptions o;
      set(o);
      t.push_back({name, what, pass, o});
    };
    add("fp32_accumulate", "products and k-ordered sums in fp32", true, [](Int4GemmOptions& o) { o.fp32_accumulate = true; });
    add("bf16_dequant", "W rounded to bf16, fp32 products and sums (a bf16 tensor-core kernel)", true,
        [](Int4GemmOptions& o) { o.bf16_dequant = true; });
    add("bf16_output", "W rounded to bf16, fp32 sums, C rounded to bf16 (a kernel that writes a bf16 C)", true,
        [](Int4GemmOptions& o) {
          o.bf16_dequant = true;
          o.bf16_output = true;
        });
    add("nibble_swap", "the high nibble read as the even k", false, [](Int4GemmOptions& o) { o.nibble_swap = true; });
    add("awq_order_ignored", "AWQ words read in the identity order, not 0,2,4,6,1,3,5,7", false,
        [](Int4GemmOptions& o) { o.awq_order_ignored = true; });
    add("gptq_zero_not_plus_one", "GPTQ v1 qzeros read without adding 1 back (zero - 1)", false,
        [](Int4GemmOptions& o) { o.gptq_zero_not_plus_one = true; });
    add("gptq_zero_plus_one", "a true zero point read with GPTQ v1's rule (zero + 1; vLLM PR 38966)", false,
        [](Int4GemmOptions& o) { o.gptq_zero_plus_one = true; });
    add("g_idx_ignored", "g_idx ignored: each group reads the scale and zero row of its index, not of its label", false,
        [](Int4GemmOptions& o) { o.g_idx_ignored = true; });
    add("scales_per_row", "one scale and zero per row (group 0's) for every group", false,
        [](Int4GemmOptions& o) { o.scales_per_row = true; });
    add("c_sliver", "the last 0.8% of C's columns left 0", false, [](Int4GemmOptions& o) { o.drop_sliver = true; });
    return t;
  }();
  return v;
}

double int4_weight(const Int4Plain& w, int64_t n, int64_t k, const Int4GemmOptions& o) {
  const int64_t G = w.groups();
  // The output whose code and zero this (n, k) reads: AWQ's nibble i holds 8c + kAwqOrder[i].
  const int64_t nc = o.awq_order_ignored ? (n / 8) * 8 + kAwqOrder[n % 8] : n;
  int64_t g = k / w.group;
  if (o.g_idx_ignored) g = (g + G - 1) % G;  // row g of the relabelled tensors holds group g - 1
  if (o.scales_per_row) g = 0;
  const uint8_t byte = w.packed[size_t(nc * (w.K / 2) + k / 2)];
  const bool low = (k % 2 == 0) != o.nibble_swap;
  const int q = low ? (byte & 0xF) : (byte >> 4);
  int z = w.zero[size_t(nc * G + g)];
  if (o.gptq_zero_not_plus_one) z -= 1;
  if (o.gptq_zero_plus_one) z += 1;
  const double v = double(q - z) * double(f16_to_f32(w.scale[size_t(n * G + g)]));
  return o.bf16_dequant ? double(bf16_to_f32(f32_to_bf16(float(v)))) : v;  // v is exact in fp32
}

std::vector<double> int4_gemm(const uint16_t* A, int64_t M, const Int4Plain& w, const Int4GemmOptions& o, int threads) {
  w.validate();
  const int64_t N = w.N, K = w.K;
  const bool f32 = o.fp32_accumulate || o.bf16_dequant;
  std::vector<double> a(size_t(M * K));
  for (int64_t i = 0; i < M * K; ++i) a[size_t(i)] = bf16_to_f32(A[i]);
  std::vector<double> C(size_t(M * N), 0.0);
  const int64_t live = o.drop_sliver ? N - ref::sliver_columns(N) : N;
  parallel_rows(live, std::max(1, threads), [&](int64_t n0, int64_t n1) {
    std::vector<double> row(static_cast<size_t>(K));
    for (int64_t n = n0; n < n1; ++n) {
      for (int64_t k = 0; k < K; ++k) row[size_t(k)] = int4_weight(w, n, k, o);
      for (int64_t m = 0; m < M; ++m) {
        const double* am = &a[size_t(m * K)];
        if (f32) {
          float s = 0.0f;
          for (int64_t k = 0; k < K; ++k) s += float(am[k]) * float(row[size_t(k)]);
          C[size_t(m * N + n)] = o.bf16_output ? bf16_to_f32(f32_to_bf16(s)) : s;
        } else {
          double s = 0.0;
          for (int64_t k = 0; k < K; ++k) s += am[k] * row[size_t(k)];
          C[size_t(m * N + n)] = s;
        }
      }
    }
  });
  return C;
}

std::vector<double> int4_gemm_fixture(const Int4GemmConfig& cfg, const SafetensorsFile& fixture,
                                      const Int4GemmOptions& o, int threads, const uint16_t* a) {
  const Int4GemmView v = int4_gemm_fixture_view(cfg, fixture);
  return int4_gemm(a ? a : v.A, cfg.M, v.plain(cfg), o, threads);
}

}  // namespace nibble::oracle
