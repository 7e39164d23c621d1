// gemm_oracle.cpp: the fp64 oracle of the FP4 GEMM tasks and its variant table (see gemm_oracle.h).
#include "reference/gemm_fp4/gemm_oracle.h"
#include "reference/sliver.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <thread>

#include "fixtures/bf16.h"
#include "fixtures/fp4.h"
#include "fixtures/gemm_fp4/gemm_fixture.h"
#include "reference/decode/oracle_fp64.h"

namespace nibble::oracle {
namespace {

GemmOptions with(void (*set)(GemmOptions&)) {
  GemmOptions o;
  set(o);
  return o;
}

}  // namespace

int fp4_code(uint8_t byte, int64_t k, bool nibble_swap) {
  const bool low = (k % 2 == 0) != nibble_swap;
  return low ? (byte & 0xF) : (byte >> 4);
}

double e2m1_value(int code, bool subnormal_as_normal) {
  if (subnormal_as_normal && (code & 0x7) == 0x1) return (code & 0x8) ? -0.75 : 0.75;
  return double(fp4::e2m1_decode(uint8_t(code)));
}

int64_t scale_column(int64_t k, Fp4Format format, const GemmOptions& o) {
  const int block = o.scale_block > 0 ? o.scale_block : (format == Fp4Format::Nvfp4 ? 16 : 32);
  return k / block;
}

double block_scale_value(uint8_t byte, Fp4Format format, const GemmOptions& o) {
  if (o.ignore_block_scales) return 1.0;
  return format == Fp4Format::Nvfp4 ? double(fp4::e4m3_decode(byte)) : fp4::e8m0_decode(byte, o.e8m0_bias);
}

double global_factor(float global, Fp4Format format, const GemmOptions& o) {
  if (format == Fp4Format::Mxfp4) return 1.0;
  return o.global_as_divisor ? 1.0 / double(global) : double(global);
}

double round_bf16(double x) { return round_to_bf16(x); }

int64_t Fp4WeightView::scale_cols() const { return fp4::num_blocks(K, format == Fp4Format::Nvfp4 ? 16 : 32); }

double Fp4WeightView::at(int64_t n, int64_t k) const {
  const int code = fp4_code(packed[n * (K / 2) + k / 2], k, options.nibble_swap);
  const int64_t col = scale_column(k, format, options);
  if (col >= scale_cols())  // only a scale_block smaller than the format's could get here
    throw std::out_of_range("Fp4WeightView::at: scale column " + std::to_string(col) + " of k = " +
                            std::to_string(k) + " is past the " + std::to_string(scale_cols()) + " scale columns");
  const uint8_t s = scale[n * scale_cols() + col];
  // e2m1 * scale is exact (<= 2 + 4 significant bits, or a power of two); the global factor adds
  // 24 bits (30 in all, exact in double) or, as a divisor, one rounding (a mutant only).
  const double w = e2m1_value(code, options.subnormal_as_normal) * block_scale_value(s, format, options) *
                   global_factor(global_scale, format, options);
  return options.bf16_dequant ? round_bf16(w) : w;
}

void Fp4WeightView::row(int64_t n, double* dst) const {
  for (int64_t k = 0; k < K; ++k) dst[k] = at(n, k);
}

std::vector<double> gemm(const uint16_t* A, int64_t M, const Fp4WeightView& W, int threads) {
  if (threads < 1) threads = 1;
  const int64_t N = W.N, K = W.K;
  std::vector<double> C(size_t(M * N));
  const GemmOptions& o = W.options;
  auto rows = [&](int64_t n0, int64_t n1) {
    std::vector<double> w(static_cast<size_t>(K));
    std::vector<float> wf(static_cast<size_t>(K));
    for (int64_t n = n0; n < n1; ++n) {
      W.row(n, w.data());
      for (int64_t k = 0; k < K; ++k) wf[size_t(k)] = float(w[size_t(k)]);
      for (int64_t m = 0; m < M; ++m) {
        const uint16_t* a = A + m * K;
        double c;
        if (o.fp32_accumulate) {
          float s = 0.0f;  // this file builds with -ffp-contract=off: a product, then a sum
          for (int64_t k = 0; k < K; ++k) s += bf16_to_f32(a[k]) * wf[size_t(k)];
          c = double(s);
        } else {
          double s = 0.0;
          for (int64_t k = 0; k < K; ++k) s += bf16_to_double(a[k]) * w[size_t(k)];
          c = s;
        }
        if (o.drop_sliver && n >= N - ref::sliver_columns(N)) c = 0.0;
        C[size_t(m * N + n)] = o.bf16_output ? round_bf16(c) : c;
      }
    }
  };
  const int t = int(std::min<int64_t>(threads, std::max<int64_t>(1, N)));
  if (t == 1) {
    rows(0, N);
  } else {
    std::vector<std::thread> pool;
    for (int i = 0; i < t; ++i) pool.emplace_back(rows, N * i / t, N * (i + 1) / t);
    for (auto& th : pool) th.join();
  }
  return C;
}

std::vector<double> gemm_fixture(const GemmConfig& cfg, const SafetensorsFile& fixture, const GemmOptions& o,
                                 int threads, const uint16_t* a) {
  const GemmFixtureView v = gemm_fixture_view(cfg, fixture);
  Fp4WeightView W;
  W.format = cfg.format;
  W.packed = v.packed;
  W.scale = v.scale;
  W.global_scale = v.global_scale;
  W.N = cfg.N;
  W.K = cfg.K;
  W.options = o;
  return gemm(a ? a : v.A, cfg.M, W, threads);
}

const std::vector<GemmVariantInfo>& gemm_variants() {
  static const std::vector<GemmVariantInfo> table{
      {"fp32", true, true, true, "weights dequantised exactly, fp64/fp32 GEMM (the task's definition)",
       GemmOptions{}},
      {"bf16_dequant_fp32_acc", true, true, true,
       "W rounded to bf16, fp32 products and accumulation, C rounded to bf16 (a bf16 tensor-core GEMM)",
       with([](GemmOptions& o) {
         o.bf16_dequant = true;
         o.fp32_accumulate = true;
         o.bf16_output = true;
       })},
      {"nibble_swap", false, true, true, "nibble order swapped: high nibble = even k",
       with([](GemmOptions& o) { o.nibble_swap = true; })},
      {"no_block_scale", false, true, true, "block scales ignored (taken as 1)",
       with([](GemmOptions& o) { o.ignore_block_scales = true; })},
      {"scale_block_32", false, true, false, "NVFP4 scale blocks of 32 instead of 16: element k reads scale[n, k/32]",
       with([](GemmOptions& o) { o.scale_block = 32; })},
      {"subnormal_as_normal", false, true, true, "e2m1 subnormal codes 0x1/0x9 decoded as +-0.75 instead of +-0.5",
       with([](GemmOptions& o) { o.subnormal_as_normal = true; })},
      {"e8m0_bias_125", false, false, true, "e8m0 scale decoded with bias 125: 2^(e-125) instead of 2^(e-127)",
       with([](GemmOptions& o) { o.e8m0_bias = 125; })},
      {"global_as_divisor", false, true, false, "NVFP4 global scale applied as a divisor: e2m1 * e4m3 / global",
       with([](GemmOptions& o) { o.global_as_divisor = true; })},
      {"c_sliver", false, true, true,
       "the last 0.8% of C's columns left 0 (reference/sliver.h): under the gate, for the per-element guard",
       with([](GemmOptions& o) { o.drop_sliver = true; })},
  };
  return table;
}

std::vector<GemmVariantInfo> gemm_variants_for(const std::string& task) {
  const bool nv = gemm_format(task) == Fp4Format::Nvfp4;  // throws for a non-GEMM task
  std::vector<GemmVariantInfo> out;
  for (const auto& v : gemm_variants())
    if (nv ? v.nvfp4 : v.mxfp4) out.push_back(v);
  return out;
}

const GemmVariantInfo& find_gemm_variant(const std::string& task, const std::string& name) {
  const bool nv = gemm_format(task) == Fp4Format::Nvfp4;
  std::string names;
  for (const auto& v : gemm_variants()) {
    if (!(nv ? v.nvfp4 : v.mxfp4)) continue;
    if (name == v.name) return v;
    names += (names.empty() ? "" : ", ") + std::string(v.name);
  }
  throw std::invalid_argument("unknown variant '" + name + "' for task " + task + "; valid variants: " + names);
}

}  // namespace nibble::oracle
