// test_unfused_gemv.cpp: the unfused solution's int4 GEMV kernel alone against an fp64 CPU product.
//
// Shapes that break kernels: out in {1, 3, 7, 19, 733, 3072} (fewer rows than a warp's 4, a
// partial last warp, a partial last block) x in in {128, 256, 384, 3072} (one group, an odd number
// of groups, fewer quarter-groups than lanes), fp32 and bf16 activations, without a residual, with
// one, and in place (residual == y, as o-proj and down run). Random codes, zero points and scales
// from a fixed seed. y is filled with NaN first, so an untouched element fails.
// Checks, per element: |y - ref| <= 1e-5 * (|residual| + sum_i |W[o,i] x[i]|) (the fp32
// summation's error bound, far above its ~40 eps worst case here), and ||y - ref|| / ||ref|| < 1e-5.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
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

using nibble::unfused::Int4Matrix;

#define CUDA_OK(call) ASSERT_EQ((call), cudaSuccess) << #call << ": " << cudaGetErrorString(cudaGetLastError())

using nibble::test::Rng;  // tests/test_rng.h

using nibble::test::DeviceMatrix;  // tests/decode/int4_test_matrix.h
using nibble::test::DevBuf;
using nibble::test::HostMatrix;

/** The unfused kernels' view of a DeviceMatrix of `rows` rows. */
Int4Matrix view(const DeviceMatrix& d, int rows) {
  Int4Matrix m;
  m.packed = d.packed.as<uint8_t>();
  m.scale = d.scale.as<uint16_t>();
  m.zero = d.zero.as<uint8_t>();
  m.rows = rows;
  return m;
}

enum class Residual { None, Separate, InPlace };
enum class XType { F32, BF16 };

/** Compare y with ref; bound[o] = |residual| + sum |W x|, the scale of the rounding error. */
void expect_close(const std::vector<float>& y, const std::vector<double>& ref, const std::vector<double>& bound,
                  const std::string& what) {
  double num = 0, den = 0;
  int bad = 0;
  for (size_t o = 0; o < y.size(); ++o) {
    if (!std::isfinite(y[o])) {
      if (bad++ < 5) ADD_FAILURE() << what << ": y[" << o << "] = " << y[o] << " (never written or NaN)";
      continue;
    }
    const double e = std::fabs(double(y[o]) - ref[o]);
    num += e * e;
    den += ref[o] * ref[o];
    if (e > 1e-5 * bound[o] + 1e-30) {
      if (bad++ < 5)
        ADD_FAILURE() << what << ": y[" << o << "] = " << y[o] << ", fp64 " << ref[o] << ", error " << e
                      << " > 1e-5 * " << bound[o];
    }
  }
  const double rel = den > 0 ? std::sqrt(num / den) : std::sqrt(num);
  EXPECT_LT(rel, 1e-5) << what << ": relative error " << rel;
  EXPECT_EQ(bad, 0) << what << ": " << bad << " bad elements of " << y.size();
}

struct Shape {
  int out, in;
  Residual res;
  XType xt;
};

void PrintTo(const Shape& s, std::ostream* os) {
  *os << "out " << s.out << ", in " << s.in
      << (s.res == Residual::None ? ", no residual" : s.res == Residual::Separate ? ", residual" : ", in place")
      << (s.xt == XType::F32 ? ", fp32 x" : ", bf16 x");
}

std::string shape_name(const testing::TestParamInfo<Shape>& p) {
  const char* r = p.param.res == Residual::None ? "plain" : p.param.res == Residual::Separate ? "residual" : "inplace";
  return "out" + std::to_string(p.param.out) + "_in" + std::to_string(p.param.in) + "_" + r +
         (p.param.xt == XType::F32 ? "_xf32" : "_xbf16");
}

class UnfusedGemv : public testing::TestWithParam<Shape> {};

TEST_P(UnfusedGemv, MatchesFp64) {
  NIBBLE_REQUIRE_GPU();
  const Shape sh = GetParam();
  Rng rng(0x5EED0000ull + uint64_t(sh.out) * 7919u + uint64_t(sh.in));
  const HostMatrix hm(sh.out, sh.in, rng);
  std::vector<float> x(size_t(sh.in)), res(size_t(sh.out));
  std::vector<uint16_t> xb(size_t(sh.in));
  for (int i = 0; i < sh.in; ++i) {
    x[i] = 2.f * rng.uniform() - 1.f;
    xb[i] = f32_to_bf16(x[i]);
    if (sh.xt == XType::BF16) x[i] = float(bf16_to_f32(xb[i]));  // the value the kernel sees
  }
  for (auto& r : res) r = 2.f * rng.uniform() - 1.f;

  std::vector<double> ref(size_t(sh.out)), bound(size_t(sh.out));
  for (int o = 0; o < sh.out; ++o) {
    double acc = 0, mag = 0;
    for (int i = 0; i < sh.in; ++i) {
      const double t = hm.at(o, i) * double(x[i]);
      acc += t;
      mag += std::fabs(t);
    }
    const double r = sh.res == Residual::None ? 0.0 : double(res[o]);
    ref[o] = r + acc;
    bound[o] = std::fabs(r) + mag;
  }

  const DeviceMatrix dm(hm);
  DevBuf dx(size_t(sh.in) * 4), dy(size_t(sh.out) * 4), dres(size_t(sh.out) * 4);
  ASSERT_TRUE(dm.packed.p && dm.scale.p && dm.zero.p && dx.p && dy.p && dres.p);
  if (sh.xt == XType::F32) CUDA_OK(cudaMemcpy(dx.p, x.data(), x.size() * 4, cudaMemcpyHostToDevice));
  else CUDA_OK(cudaMemcpy(dx.p, xb.data(), xb.size() * 2, cudaMemcpyHostToDevice));
  CUDA_OK(cudaMemcpy(dres.p, res.data(), res.size() * 4, cudaMemcpyHostToDevice));
  if (sh.res == Residual::InPlace) CUDA_OK(cudaMemcpy(dy.p, res.data(), res.size() * 4, cudaMemcpyHostToDevice));
  else CUDA_OK(cudaMemset(dy.p, 0xFF, size_t(sh.out) * 4));  // NaN: an unwritten element fails

  Int4Matrix m = view(dm, sh.out);
  m.y = dy.as<float>();
  m.residual = sh.res == Residual::None ? nullptr : sh.res == Residual::Separate ? dres.as<float>() : dy.as<float>();
  const cudaError_t launched =
      sh.xt == XType::F32 ? nibble::unfused::launch_int4_gemv(&m, 1, dx.as<float>(), sh.in, nullptr)
                          : nibble::unfused::launch_int4_gemv_bf16x(&m, 1, dx.as<uint16_t>(), sh.in, nullptr);
  ASSERT_EQ(launched, cudaSuccess) << cudaGetErrorString(launched);
  CUDA_OK(cudaDeviceSynchronize());
  std::vector<float> y(size_t(sh.out));
  CUDA_OK(cudaMemcpy(y.data(), dy.p, y.size() * 4, cudaMemcpyDeviceToHost));
  expect_close(y, ref, bound, shape_name(testing::TestParamInfo<Shape>(sh, 0)));
}

std::vector<Shape> all_shapes() {
  std::vector<Shape> v;
  for (int out : {1, 3, 7, 19, 733, 3072})
    for (int in : {128, 256, 384, 3072})
      for (Residual r : {Residual::None, Residual::Separate, Residual::InPlace}) {
        v.push_back({out, in, r, XType::F32});
        if (r == Residual::None) v.push_back({out, in, r, XType::BF16});
      }
  return v;
}

INSTANTIATE_TEST_SUITE_P(Shapes, UnfusedGemv, testing::ValuesIn(all_shapes()), shape_name);

// Three matrices of awkward row counts in one launch (the q/k/v path), sharing x, each writing its
// own y; the warp ranges of one matrix must not leak into the next.
TEST(UnfusedGemvMulti, ThreeMatricesOneLaunch) {
  NIBBLE_REQUIRE_GPU();
  const int in = 384;
  const int rows[3] = {19, 1, 733};
  Rng rng(42);
  std::vector<HostMatrix> hm;
  for (int r : rows) hm.emplace_back(r, in, rng);
  std::vector<float> x(in);
  for (auto& v : x) v = 2.f * rng.uniform() - 1.f;
  DevBuf dx(size_t(in) * 4);
  CUDA_OK(cudaMemcpy(dx.p, x.data(), x.size() * 4, cudaMemcpyHostToDevice));
  std::vector<std::unique_ptr<DeviceMatrix>> dm;
  std::vector<std::unique_ptr<DevBuf>> dy;
  Int4Matrix mats[3];
  for (int k = 0; k < 3; ++k) {
    dm.push_back(std::make_unique<DeviceMatrix>(hm[k]));
    dy.push_back(std::make_unique<DevBuf>(size_t(rows[k]) * 4));
    CUDA_OK(cudaMemset(dy[k]->p, 0xFF, size_t(rows[k]) * 4));
    mats[k] = view(*dm[k], rows[k]);
    mats[k].y = dy[k]->as<float>();
  }
  ASSERT_EQ(nibble::unfused::launch_int4_gemv(mats, 3, dx.as<float>(), in, nullptr), cudaSuccess);
  CUDA_OK(cudaDeviceSynchronize());
  for (int k = 0; k < 3; ++k) {
    std::vector<float> y(size_t(rows[k]));
    CUDA_OK(cudaMemcpy(y.data(), dy[k]->p, y.size() * 4, cudaMemcpyDeviceToHost));
    std::vector<double> ref(y.size()), bound(y.size());
    for (int o = 0; o < rows[k]; ++o)
      for (int i = 0; i < in; ++i) {
        const double t = hm[k].at(o, i) * double(x[i]);
        ref[o] += t;
        bound[o] += std::fabs(t);
      }
    expect_close(y, ref, bound, "matrix " + std::to_string(k) + " (" + std::to_string(rows[k]) + " rows)");
  }
}

TEST(UnfusedGemvArgs, RejectsBadShapesWithoutLaunching) {
  // No GPU needed: the launcher validates before it launches.
  Int4Matrix m;
  alignas(16) static float x[256];
  m.packed = reinterpret_cast<const uint8_t*>(x);
  m.scale = reinterpret_cast<const uint16_t*>(x);
  m.zero = reinterpret_cast<const uint8_t*>(x);
  m.y = x;
  m.rows = 4;
  EXPECT_EQ(nibble::unfused::launch_int4_gemv(&m, 1, x, 100, nullptr), cudaErrorInvalidValue);  // not a group multiple
  EXPECT_EQ(nibble::unfused::launch_int4_gemv(&m, 0, x, 128, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(nibble::unfused::launch_int4_gemv(&m, 4, x, 128, nullptr), cudaErrorInvalidValue);
  EXPECT_EQ(nibble::unfused::launch_int4_gemv(&m, 1, x + 1, 128, nullptr), cudaErrorInvalidValue);  // x misaligned
  m.rows = 0;
  EXPECT_EQ(nibble::unfused::launch_int4_gemv(&m, 1, x, 128, nullptr), cudaErrorInvalidValue);
}

}  // namespace
