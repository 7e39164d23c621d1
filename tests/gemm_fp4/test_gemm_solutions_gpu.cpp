// test_gemm_solutions_gpu.cpp: the FP4 GEMM .so's (issue 7) through their C ABI
// (include/nibble/nibble_gemm.h) against the fp64 CPU oracle (reference/gemm_fp4/gemm_oracle.h), on the GPU.
//
// For both tasks and each config below, the fixture is built in a temporary folder, A and the
// weight tensors are uploaded, and each library is dlopened (plain dlopen/dlsym: the harness's
// SolutionLibrary is decode-specific) and driven like the grader does: prepare, C filled with NaN,
// run, twice, teardown. Checks: every element of C written (finite), and
//   ||C - C_oracle||_2 / ||C_oracle||_2 (fp64) below
//     reference (libnibble_gemm_reference.so)        1e-5   exact fp32 weights, fp32 cuBLAS
//     baseline (libnibble_gemm_baseline.so)          1e-5   exact weights decoded in registers,
//                                                           fp32 sums (expected ~1e-6)
//     cuBLAS bf16 (libnibble_gemm_cublas_bf16.so)    twice what the oracle's own must-pass
//                                                           bf16_dequant_fp32_acc row measures on
//                                                           the same fixture (at most 2e-2)
// and, for the reference, each variant of the task (gemm_variants_for) selected through
// nibble_reference_set_variant against the oracle with the same GemmOptions: 1e-4 (the same exact
// arithmetic in fp32 and fp64), 1e-2 for bf16_dequant_fp32_acc (its bf16 output rounding of an fp32
// sum: a value within fp32 error of a bf16 tie may land on either neighbour).
//
// Configs (every kernel at its smallest, an odd size and a residue case, STYLE.md):
//   tiny            M = 3, N = 40, K = 200: partial last block (200 = 12 * 16 + 8 = 6 * 32 + 8)
//   m3-n3000-k3080  N not a multiple of 64/128, K = 3080 with a partial last block (the official
//                   residue shapes' N and K at a small M)
//   m1-n129-k202    M = 1; K % 8 != 0 (the baseline's byte-wise path), rows of 101 bytes
//   m67-n300-k3080  the baseline's tiled kernel with a partial tile in M, N and K
//   m17-n65-k202    the tiled kernel's smallest M, K % 32 = 10
//
// Every bundled GEMM solution (bundled_solutions.h: each nibble_add_solution(... FAMILY gemm_fp4)),
// whatever it is, on the same configs: ABI versions, a name, every element of C written and finite
// on both runs, and the error below the tasks' gate (1e-2); a .so not built for this GPU is skipped.
//
// The tuned sm_90a solution (libnibble_gemm_fp4_sm90.so, solutions/gemm_fp4/sm90) is checked the
// same way (1e-4: exact weights, bf16 products, fp32 tensor-core sums; expected ~1e-6; two runs
// bitwise equal) on every kernel it picks by M, each at a residue shape (N = 3000 or 300, not a
// multiple of 128; K = 3080, a partial last block; K = 202, K % 8 != 0): M = 1 and 3 (mma.sync,
// one n8 tile), M = 16 (two tiles), M = 17 with K = 202 (the kStd fallback), M = 67 and 128 (wgmma,
// 64 x 64 tiles, K split), M = 300 (wgmma, 128 x 256 tiles, a partial tile in M, K split), and the
// variants prepare does not pick by itself (GemmFp4Sm90Forced). It skips (with the reason) on a GPU
// other than sm_90.
#include <cuda_runtime.h>
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <stdexcept>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "bundled_solutions.h"
#include "fixtures/fixture.h"
#include "fixtures/gemm_fp4/gemm_fixture.h"
#include "fixtures/gemm_fp4/gemm_config.h"
#include "fixtures/safetensors.h"
#include "gpu_test_util.h"
#include "harness/gemm_fp4/gemm_problem.h"
#include "harness/stats.h"
#include "nibble/nibble_gemm.h"
#include "reference/gemm_fp4/gemm_oracle.h"
#include "test_fixture_util.h"
#include "test_env.h"

namespace nibble {
namespace {

/** ||out - ref||_2 / ||ref||_2 in fp64 (harness/stats.h, the gate's one implementation). */
double vec_rel_err(const std::vector<double>& out, const std::vector<double>& ref) {
  if (out.size() != ref.size()) throw std::invalid_argument("vec_rel_err: sizes differ");
  return relative_error(out.data(), ref.data(), out.size());
}

constexpr double kExactTol = 1e-5;          // reference and baseline vs the oracle
constexpr double kBf16CapTol = 2e-2;        // cuBLAS bf16: at most this
constexpr double kVariantTol = 1e-4;        // reference variant vs the oracle's same variant
constexpr double kBf16VariantTol = 1e-2;    // ... for bf16_dequant_fp32_acc
constexpr double kFp4Sm90Tol = 1e-4;        // gemm_fp4_sm90 vs the oracle
constexpr double kGateTol = 1e-2;           // any bundled solution: the tasks' gate (nibble calibrate)
constexpr uint64_t kSeed = 0;
constexpr int kOracleThreads = 2;

void cuda_ok(cudaError_t e, const char* what) {
  if (e != cudaSuccess)
    throw std::runtime_error(std::string(what) + ": " + cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")");
}

/** One device allocation, freed once. */
class DevBuf {
 public:
  explicit DevBuf(size_t bytes) { cuda_ok(cudaMalloc(&p_, std::max<size_t>(bytes, 1)), "cudaMalloc"); }
  ~DevBuf() { cudaFree(p_); }
  DevBuf(const DevBuf&) = delete;
  DevBuf& operator=(const DevBuf&) = delete;
  void* get() const { return p_; }

 private:
  void* p_ = nullptr;
};

/** A non-blocking stream, destroyed once. */
class Stream {
 public:
  Stream() { cuda_ok(cudaStreamCreateWithFlags(&s_, cudaStreamNonBlocking), "cudaStreamCreateWithFlags"); }
  ~Stream() { cudaStreamDestroy(s_); }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  cudaStream_t get() const { return s_; }

 private:
  cudaStream_t s_ = nullptr;
};

/** A row-major nibble_tensor over device memory; owns its shape and strides. Not movable (the
 *  descriptor points into itself). */
class Tensor {
 public:
  Tensor(void* data, nibble_dtype dtype, std::vector<int64_t> shape) : shape_(std::move(shape)) {
    strides_.assign(shape_.size(), 1);
    for (int i = int(shape_.size()) - 2; i >= 0; --i) strides_[size_t(i)] = strides_[size_t(i) + 1] * shape_[size_t(i) + 1];
    t_.data = data;
    t_.device = {NIBBLE_DEVICE_CUDA, 0};
    cuda_ok(cudaGetDevice(&t_.device.device_id), "cudaGetDevice");
    t_.ndim = int32_t(shape_.size());
    t_.dtype = dtype;
    t_.shape = shape_.data();
    t_.strides = strides_.data();
    t_.byte_offset = 0;
  }
  Tensor(const Tensor&) = delete;
  Tensor& operator=(const Tensor&) = delete;
  nibble_tensor* get() { return &t_; }
  const nibble_tensor& desc() const { return t_; }

 private:
  std::vector<int64_t> shape_, strides_;
  nibble_tensor t_{};
};

constexpr nibble_dtype kU8{NIBBLE_DTYPE_UINT, 8, 1};
constexpr nibble_dtype kBF16{NIBBLE_DTYPE_BFLOAT, 16, 1};
constexpr nibble_dtype kF32{NIBBLE_DTYPE_FLOAT, 32, 1};

/** A GEMM .so's entry points, resolved with dlsym. The library stays loaded for the process's life
 *  (never dlclosed: cuBLAS and the CUDA runtime keep state that the library registered). */
struct GemmLibrary {
  std::string path;
  void* lib = nullptr;
  nibble_abi_version_fn abi_version = nullptr;
  nibble_gemm_abi_version_fn gemm_abi_version = nullptr;
  nibble_solution_name_fn name = nullptr;
  nibble_gemm_prepare_fn prepare = nullptr;
  nibble_gemm_run_fn run = nullptr;
  nibble_gemm_teardown_fn teardown = nullptr;

  explicit GemmLibrary(std::string p) : path(std::move(p)) {
    lib = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
    if (!lib) throw std::runtime_error("dlopen " + path + ": " + dlerror());
    abi_version = sym<nibble_abi_version_fn>("nibble_abi_version");
    gemm_abi_version = sym<nibble_gemm_abi_version_fn>("nibble_gemm_abi_version");
    name = sym<nibble_solution_name_fn>("nibble_solution_name");
    prepare = sym<nibble_gemm_prepare_fn>("nibble_gemm_prepare");
    run = sym<nibble_gemm_run_fn>("nibble_gemm_run");
    teardown = sym<nibble_gemm_teardown_fn>("nibble_gemm_teardown");
  }
  template <class F>
  F sym(const char* s) const {
    void* f = dlsym(lib, s);
    if (!f) throw std::runtime_error(path + ": missing symbol " + s);
    return reinterpret_cast<F>(f);
  }
};

[[maybe_unused]] std::string lib_path(const char* name) {
  const char* bin = std::getenv("NIBBLE_BINARY_DIR");
  return std::string(bin ? bin : ".") + "/lib/lib" + name + ".so";
}

std::string reference_so() {
#ifdef NIBBLE_GEMM_REFERENCE_SO
  return NIBBLE_GEMM_REFERENCE_SO;
#else
  return lib_path("nibble_gemm_reference");
#endif
}
/** The .so of bundled solution `target` (bundled_solutions.h). */
std::string solution_so(const char* target) { return test::bundled_solution(target).path; }

/** Empty when bundled solution `target` runs on this GPU, else why not. */
std::string not_built_for_this_gpu(const char* target) {
  std::string why;
  return test::runs_on_this_device(test::bundled_solution(target).cuda_architectures, &why) ? "" : why;
}

/** Each library loaded once per process. */
GemmLibrary& library(const std::string& path) {
  static std::vector<std::unique_ptr<GemmLibrary>> loaded;
  for (auto& l : loaded)
    if (l->path == path) return *l;
  loaded.push_back(std::make_unique<GemmLibrary>(path));
  return *loaded.back();
}

/** A GEMM fixture on the host (built in a temporary folder) and its weights on the GPU, with the
 *  problem struct prepare receives. Not movable (the problem points into it). */
class GpuGemmFixture {
 public:
  GpuGemmFixture(const std::string& task, const std::string& config) : cfg(gemm_config(task, config)) {
    {
      test::TempDir dir;
      build_gemm_fixture(cfg, kSeed, dir.path(), kOracleThreads, nullptr);
      SafetensorsFile f(dir / kFixtureModelFile);
      const GemmFixtureView v = gemm_fixture_view(cfg, f);
      A.assign(v.A, v.A + cfg.M * cfg.K);
      packed.assign(v.packed, v.packed + cfg.N * (cfg.K / 2));
      scale.assign(v.scale, v.scale + cfg.N * cfg.scale_cols());
      global = v.global_scale;
    }
    dA_ = std::make_unique<DevBuf>(A.size() * 2);
    dPacked_ = std::make_unique<DevBuf>(packed.size());
    dScale_ = std::make_unique<DevBuf>(scale.size());
    dGlobal_ = std::make_unique<DevBuf>(sizeof(float));
    cuda_ok(cudaMemcpy(dA_->get(), A.data(), A.size() * 2, cudaMemcpyHostToDevice), "upload A");
    cuda_ok(cudaMemcpy(dPacked_->get(), packed.data(), packed.size(), cudaMemcpyHostToDevice), "upload W.packed");
    cuda_ok(cudaMemcpy(dScale_->get(), scale.data(), scale.size(), cudaMemcpyHostToDevice), "upload W.scale");
    cuda_ok(cudaMemcpy(dGlobal_->get(), &global, sizeof(float), cudaMemcpyHostToDevice), "upload W.global_scale");
    tPacked_ = std::make_unique<Tensor>(dPacked_->get(), kU8, std::vector<int64_t>{cfg.N, cfg.K / 2});
    tScale_ = std::make_unique<Tensor>(dScale_->get(), kU8, std::vector<int64_t>{cfg.N, cfg.scale_cols()});
    tGlobal_ = std::make_unique<Tensor>(dGlobal_->get(), kF32, std::vector<int64_t>{1});
    tA_ = std::make_unique<Tensor>(dA_->get(), kBF16, std::vector<int64_t>{cfg.M, cfg.K});
    named_.push_back({"W.packed", tPacked_->desc()});
    named_.push_back({"W.scale", tScale_->desc()});
    if (cfg.format == Fp4Format::Nvfp4) named_.push_back({"W.global_scale", tGlobal_->desc()});
    problem = gemm_problem(cfg, named_, global, NIBBLE_GEMM_OUTPUT_F32);
  }
  GpuGemmFixture(const GpuGemmFixture&) = delete;
  GpuGemmFixture& operator=(const GpuGemmFixture&) = delete;

  /** The fp64 oracle's C with options `o`. */
  std::vector<double> oracle_c(const oracle::GemmOptions& o = {}) const {
    oracle::Fp4WeightView w;
    w.format = cfg.format;
    w.packed = packed.data();
    w.scale = scale.data();
    w.global_scale = global;
    w.N = cfg.N;
    w.K = cfg.K;
    w.options = o;
    return oracle::gemm(A.data(), cfg.M, w, kOracleThreads);
  }

  const nibble_tensor* a_tensor() const { return &tA_->desc(); }

  GemmConfig cfg;
  std::vector<uint16_t> A;
  std::vector<uint8_t> packed, scale;
  float global = 1.0f;
  nibble_gemm_problem problem{};

 private:
  std::unique_ptr<DevBuf> dA_, dPacked_, dScale_, dGlobal_;
  std::unique_ptr<Tensor> tPacked_, tScale_, tGlobal_, tA_;
  std::vector<nibble_named_tensor> named_;
};

/** prepare, then `runs` x (C := NaN, run, read C back), teardown. outs gets each run's C. */
void drive(GemmLibrary& lib, const GpuGemmFixture& fx, int runs, std::vector<std::vector<float>>* outs) {
  Stream stream;
  nibble_error err{};
  void* handle = nullptr;
  const nibble_status ps = lib.prepare(&fx.problem, stream.get(), &handle, &err);
  ASSERT_EQ(ps, NIBBLE_OK) << lib.path << " prepare: " << err.message;
  const size_t n = size_t(fx.cfg.M * fx.cfg.N);
  DevBuf dC(n * sizeof(float));
  Tensor C(dC.get(), kF32, {fx.cfg.M, fx.cfg.N});
  for (int i = 0; i < runs; ++i) {
    cuda_ok(cudaMemsetAsync(dC.get(), 0xFF, n * sizeof(float), stream.get()), "NaN-fill C");  // 0xFFFFFFFF: NaN
    const nibble_status rs = lib.run(handle, fx.a_tensor(), C.get(), stream.get(), &err);
    EXPECT_EQ(rs, NIBBLE_OK) << lib.path << " run: " << err.message;
    cuda_ok(cudaStreamSynchronize(stream.get()), "run");
    std::vector<float> out(n);
    cuda_ok(cudaMemcpy(out.data(), dC.get(), n * sizeof(float), cudaMemcpyDeviceToHost), "read C");
    outs->push_back(std::move(out));
  }
  const nibble_status ts = lib.teardown(handle, stream.get(), &err);
  EXPECT_EQ(ts, NIBBLE_OK) << lib.path << " teardown: " << err.message;
}

/** Count the elements of C that are not finite (never written: NaN from the fill). */
size_t non_finite(const std::vector<float>& c) {
  return size_t(std::count_if(c.begin(), c.end(), [](float x) { return !std::isfinite(x); }));
}

double rel_err(const std::vector<float>& c, const std::vector<double>& ref) {
  return vec_rel_err(std::vector<double>(c.begin(), c.end()), ref);
}

// ---- parameterised over (task, config) ----------------------------------------------------------

struct Case {
  const char* task;
  const char* config;
};

class GemmSolutions : public ::testing::TestWithParam<Case> {};

const std::vector<const char*> kConfigs = {"tiny", "m3-n3000-k3080", "m1-n129-k202", "m67-n300-k3080",
                                           "m17-n65-k202"};

std::vector<Case> all_cases() {
  std::vector<Case> out;
  for (const char* task : {kGemmNvfp4Task, kGemmMxfp4Task})
    for (const char* c : kConfigs) out.push_back({task, c});
  return out;
}

std::string case_name(const ::testing::TestParamInfo<Case>& info) {
  std::string s = std::string(info.param.task) + "_" + info.param.config;
  for (char& ch : s)
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  return s;
}

void check_solution(const std::string& so, const char* want_name, const GpuGemmFixture& fx,
                    const std::vector<double>& ref, double tol, bool bitwise_repeatable) {
  GemmLibrary& lib = library(so);
  // The reference: its task definition, whatever a failed variant test may have left selected.
  using set_variant_fn = nibble_status (*)(const char*, nibble_error*);
  if (void* f = dlsym(lib.lib, "nibble_reference_set_variant")) {
    nibble_error err{};
    ASSERT_EQ(reinterpret_cast<set_variant_fn>(f)("fp32", &err), NIBBLE_OK) << err.message;
  }
  EXPECT_EQ(lib.abi_version(), NIBBLE_ABI_VERSION);
  EXPECT_EQ(lib.gemm_abi_version(), NIBBLE_GEMM_ABI_VERSION);
  if (want_name)
    EXPECT_STREQ(lib.name(), want_name);
  else
    want_name = lib.name();
  ASSERT_NE(want_name, nullptr);
  EXPECT_STRNE(want_name, "") << so << ": nibble_solution_name";
  std::vector<std::vector<float>> outs;
  drive(lib, fx, 2, &outs);
  if (::testing::Test::HasFatalFailure()) return;
  for (size_t i = 0; i < outs.size(); ++i) {
    EXPECT_EQ(non_finite(outs[i]), 0u) << want_name << " run " << i << ": elements of C not written (or not finite)";
    const double e = rel_err(outs[i], ref);
    std::printf("%-26s %-17s %-15s run %zu relerr %.3e (tol %.1e)\n", want_name, fx.cfg.task.c_str(),
                fx.cfg.name.c_str(), i, e, tol);
    EXPECT_LT(e, tol) << want_name << " " << fx.cfg.task << " " << fx.cfg.name << " run " << i;
  }
  if (bitwise_repeatable && outs.size() == 2) {
    EXPECT_EQ(std::memcmp(outs[0].data(), outs[1].data(), outs[0].size() * sizeof(float)), 0)
        << want_name << ": two runs on the same A differ";
  }
}

TEST_P(GemmSolutions, ReferenceBaselineAndCublasBf16MatchTheOracle) {
  NIBBLE_REQUIRE_GPU();
  const Case c = GetParam();
  const GpuGemmFixture fx(c.task, c.config);
  const std::vector<double> ref = fx.oracle_c();
  // The cuBLAS bf16 bound: twice what the oracle's own bf16 tensor-core row measures here.
  const double bf16_row =
      vec_rel_err(fx.oracle_c(oracle::find_gemm_variant(c.task, "bf16_dequant_fp32_acc").options), ref);
  const double bf16_tol = std::min(kBf16CapTol, 2.0 * bf16_row);
  std::printf("oracle bf16_dequant_fp32_acc vs fp32: %.3e -> cuBLAS bf16 bound %.3e\n", bf16_row, bf16_tol);

  check_solution(reference_so(), "gemm-reference-fp32-cublas", fx, ref, kExactTol, false);
  check_solution(solution_so("nibble_gemm_baseline"), "gemm-baseline", fx, ref, kExactTol, true);
  check_solution(solution_so("nibble_gemm_cublas_bf16"), "cublas-bf16-predequantised", fx, ref, bf16_tol, false);
}

INSTANTIATE_TEST_SUITE_P(Configs, GemmSolutions, ::testing::ValuesIn(all_cases()), case_name);

// ---- every bundled solution -----------------------------------------------------------------------

class BundledGemmSolution : public ::testing::TestWithParam<std::tuple<test::BundledSolution, Case>> {};

TEST_P(BundledGemmSolution, WritesEveryElementWithinTheGate) {
  NIBBLE_REQUIRE_GPU();
  const test::BundledSolution& sol = std::get<0>(GetParam());
  const Case c = std::get<1>(GetParam());
  if (const std::string why = not_built_for_this_gpu(sol.target); !why.empty()) GTEST_SKIP() << sol.target << ": " << why;
  const GpuGemmFixture fx(c.task, c.config);
  check_solution(sol.path, nullptr, fx, fx.oracle_c(), kGateTol, false);
}

std::string bundled_name(const ::testing::TestParamInfo<std::tuple<test::BundledSolution, Case>>& info) {
  return std::string(std::get<0>(info.param).target) + "_" +
         case_name(::testing::TestParamInfo<Case>(std::get<1>(info.param), info.index));
}

INSTANTIATE_TEST_SUITE_P(Configs, BundledGemmSolution,
                         ::testing::Combine(::testing::ValuesIn(test::bundled_solutions("gemm_fp4")),
                                            ::testing::ValuesIn(all_cases())),
                         bundled_name);

// ---- the tuned sm_90a solution ------------------------------------------------------------------

class GemmFp4Sm90 : public ::testing::TestWithParam<Case> {};

const std::vector<const char*> kSm90Configs = {"tiny",           "m1-n3000-k3080",  "m16-n3000-k3080",
                                               "m17-n65-k202",   "m67-n300-k3080",  "m128-n3000-k3080",
                                               "m300-n300-k3080"};

std::vector<Case> sm90_cases() {
  std::vector<Case> out;
  for (const char* task : {kGemmNvfp4Task, kGemmMxfp4Task})
    for (const char* c : kSm90Configs) out.push_back({task, c});
  return out;
}

TEST_P(GemmFp4Sm90, MatchesTheOracle) {
  NIBBLE_REQUIRE_GPU();
  if (const std::string why = not_built_for_this_gpu("nibble_gemm_fp4_sm90"); !why.empty())
    GTEST_SKIP() << "gemm_fp4_sm90: " << why;
  const Case c = GetParam();
  const GpuGemmFixture fx(c.task, c.config);
  check_solution(solution_so("nibble_gemm_fp4_sm90"), "gemm-fp4-sm90", fx, fx.oracle_c(), kFp4Sm90Tol, true);
}

INSTANTIATE_TEST_SUITE_P(Configs, GemmFp4Sm90, ::testing::ValuesIn(sm90_cases()), case_name);

// The kernel, split-K and weight-path choices prepare would not make at these shapes
// (NIBBLE_FP4SM90_KIND / _SPLIT / _WTMA, read by prepare), so that every variant is checked: the
// bulk-copy mma.sync kernel unsplit (one block: all of K in shared memory) and split 8 and 2
// (clusters summing through distributed shared memory); wgmma 64 x 64 split 8 with bulk-copied
// weights, 64 x 128 split 4 with per-lane weight loads, 64 x 128 unsplit on 5 persistent blocks
// (10 tiles each), 128 x 128 of two consumer warpgroups (wg128x2) split 2, and unsplit with per-lane
// weight loads on 3 persistent blocks (8 tiles each), the odd K splits with bulk-copied weights (64 x
// 128 split 3 and 6, 64 x 64 split 5, 128 x 128 split 3: 49 chunks in uneven ranges), 128 x 256 unsplit with bulk-copied weights and a partial tile in M, one block per
// tile and on 2 or 4 persistent blocks (3 and 2 tiles each: the ring's phases carry across tiles);
// mma.sync's kStd order at M = 128. The stream kernel (the experiment libnibble_gemm_fp4_stream.so,
// M <= 16; "Stream" below, kind "stream") at
// M in {1, 3, 16} x N in {3000, 3072} x K in {3072, 3080} with its own split and grid, then forced
// to split 1 (no cluster), 2 and 8, and to 3 clusters with 2 ring slots per warp (each warp's
// range ~50 units: the ring wraps and refills).
struct Forced {
  const char* config;
  const char* kind;
  const char* split;       // "": prepare's choice (NIBBLE_FP4SM90_SPLIT unset)
  const char* wtma;
  const char* grid;        // persistent blocks (0: one per tile); stream: clusters (0: prepare's choice)
  const char* stages = "0";  // stream: ring slots per warp at most (0: prepare's choice)
};

/** Set NIBBLE_FP4SM90_<name> to v, or unset it when v is empty. */
void set_or_unset(const char* name, const char* v) {
  ASSERT_TRUE(test::set_or_unset_env(std::string("NIBBLE_FP4SM90_") + name, v)) << name;
}

class GemmFp4Sm90Forced : public ::testing::TestWithParam<std::tuple<const char*, Forced>> {};

TEST_P(GemmFp4Sm90Forced, MatchesTheOracle) {
  NIBBLE_REQUIRE_GPU();
  if (const std::string why = not_built_for_this_gpu("nibble_gemm_fp4_sm90"); !why.empty())
    GTEST_SKIP() << "gemm_fp4_sm90: " << why;
  const char* task = std::get<0>(GetParam());
  const Forced f = std::get<1>(GetParam());
  // The stream kernel is the experiment libnibble_gemm_fp4_stream.so (same sm_90a target), which
  // reads the same switches but has no kinds.
  const bool stream = std::string(f.kind) == "stream";
  const GpuGemmFixture fx(task, f.config);
  set_or_unset("KIND", stream ? "" : f.kind);
  set_or_unset("SPLIT", f.split);
  set_or_unset("WTMA", f.wtma);
  set_or_unset("GRID", f.grid);
  set_or_unset("STAGES", f.stages);
  std::printf("forced kind %s split %s wtma %s grid %s stages %s\n", f.kind, *f.split ? f.split : "(auto)", f.wtma,
              f.grid, f.stages);
  if (stream)
    check_solution(lib_path("nibble_gemm_fp4_stream"), "gemm-fp4-stream", fx, fx.oracle_c(), kFp4Sm90Tol, true);
  else
    check_solution(solution_so("nibble_gemm_fp4_sm90"), "gemm-fp4-sm90", fx, fx.oracle_c(), kFp4Sm90Tol, true);
  for (const char* v : {"KIND", "SPLIT", "WTMA", "GRID", "STAGES"}) set_or_unset(v, "");
}

std::string forced_name(const ::testing::TestParamInfo<std::tuple<const char*, Forced>>& i) {
  const Forced& f = std::get<1>(i.param);
  std::string s = std::string(std::get<0>(i.param)) + "_" + f.config + "_" + f.kind + "_split" +
                  (*f.split ? f.split : "auto") + "_wtma" + f.wtma + "_grid" + f.grid;
  if (std::string(f.stages) != "0") s += std::string("_stages") + f.stages;
  for (char& ch : s)
    if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
  return s;
}

/** The stream kernel's cases (see above). The config names live for the process (static storage). */
std::vector<Forced> stream_forced() {
  static std::vector<std::string> names;
  std::vector<Forced> out;
  if (names.empty())
    for (const char* m : {"1", "3", "16"})
      for (const char* n : {"3000", "3072"})
        for (const char* k : {"3072", "3080"}) names.push_back(std::string("m") + m + "-n" + n + "-k" + k);
  for (const std::string& c : names) out.push_back(Forced{c.c_str(), "stream", "", "1", "0"});
  out.push_back(Forced{"m3-n3072-k3080", "stream", "1", "1", "0"});
  out.push_back(Forced{"m1-n3000-k3080", "stream", "2", "1", "0"});
  out.push_back(Forced{"m16-n3072-k3080", "stream", "8", "1", "0"});
  out.push_back(Forced{"m16-n3000-k3080", "stream", "4", "1", "3", "2"});
  return out;
}

INSTANTIATE_TEST_SUITE_P(
    Variants, GemmFp4Sm90Forced,
    ::testing::Combine(::testing::Values(kGemmNvfp4Task, kGemmMxfp4Task),
                       ::testing::Values(Forced{"m16-n3000-k3080", "mmatma", "1", "1", "0"},
                                         Forced{"m16-n3000-k3080", "mmatma", "8", "1", "0"},
                                         Forced{"m1-n3000-k3080", "mmatma", "2", "1", "0"},
                                         Forced{"m128-n3000-k3080", "wg64", "8", "1", "0"},
                                         Forced{"m128-n3000-k3080", "wg128", "4", "0", "0"},
                                         Forced{"m128-n3000-k3080", "wg128", "1", "1", "5"},
                                         Forced{"m128-n3000-k3080", "wg128x2", "2", "1", "0"},
                                         Forced{"m128-n3000-k3080", "wg128x2", "1", "0", "3"},
                                         Forced{"m128-n3000-k3080", "wg128", "3", "1", "0"},
                                         Forced{"m128-n3000-k3080", "wg64", "5", "1", "0"},
                                         Forced{"m128-n3000-k3080", "wg128", "6", "1", "0"},
                                         Forced{"m128-n3000-k3080", "wg128x2", "3", "1", "0"},
                                         Forced{"m300-n300-k3080", "wg256", "1", "1", "0"},
                                         Forced{"m300-n300-k3080", "wg256", "1", "0", "2"},
                                         Forced{"m300-n300-k3080", "wg256", "1", "1", "4"},
                                         Forced{"m128-n3000-k3080", "mma", "1", "1", "0"})),
    forced_name);

INSTANTIATE_TEST_SUITE_P(Stream, GemmFp4Sm90Forced,
                         ::testing::Combine(::testing::Values(kGemmNvfp4Task, kGemmMxfp4Task),
                                            ::testing::ValuesIn(stream_forced())),
                         forced_name);

// ---- the reference's variants -------------------------------------------------------------------

class GemmReferenceVariants : public ::testing::TestWithParam<Case> {};

std::vector<Case> variant_cases() {
  std::vector<Case> out;
  for (const char* task : {kGemmNvfp4Task, kGemmMxfp4Task})
    for (const char* c : {"tiny", "m3-n3000-k3080"}) out.push_back({task, c});
  return out;
}

TEST_P(GemmReferenceVariants, EachVariantMatchesTheOraclesSameVariant) {
  NIBBLE_REQUIRE_GPU();
  const Case c = GetParam();
  const GpuGemmFixture fx(c.task, c.config);
  GemmLibrary& lib = library(reference_so());
  using set_variant_fn = nibble_status (*)(const char*, nibble_error*);
  using variant_fn = const char* (*)(void);
  using numerics_fn = const char* (*)(void);
  const auto set_variant = lib.sym<set_variant_fn>("nibble_reference_set_variant");
  const auto variant = lib.sym<variant_fn>("nibble_reference_variant");
  const auto numerics = lib.sym<numerics_fn>("nibble_reference_numerics");
  nibble_error err{};
  EXPECT_EQ(set_variant("no_such_variant", &err), NIBBLE_ERR_INVALID_ARGUMENT);
  EXPECT_NE(std::string(err.message).find("valid variants"), std::string::npos) << err.message;
  const std::vector<double> exact = fx.oracle_c();
  for (const auto& v : oracle::gemm_variants_for(c.task)) {
    ASSERT_EQ(set_variant(v.name, &err), NIBBLE_OK) << err.message;
    EXPECT_STREQ(variant(), v.name);
    EXPECT_NE(numerics(), nullptr);
    const bool bf16 = std::string(v.name) == "bf16_dequant_fp32_acc";
    const double tol = bf16 ? kBf16VariantTol : kVariantTol;
    std::vector<std::vector<float>> outs;
    drive(lib, fx, 1, &outs);
    if (HasFatalFailure()) break;
    const std::vector<double> want = fx.oracle_c(v.options);
    EXPECT_EQ(non_finite(outs[0]), 0u) << v.name;
    const double e = rel_err(outs[0], want);
    std::printf("reference variant %-22s %-17s %-15s relerr vs oracle variant %.3e (tol %.0e); vs exact %.3e "
                "(oracle variant vs exact %.3e)\n",
                v.name, c.task, c.config, e, tol, rel_err(outs[0], exact), vec_rel_err(want, exact));
    EXPECT_LT(e, tol) << v.name << " " << c.task << " " << c.config;
  }
  // Later tests in this process get the task's definition back.
  EXPECT_EQ(set_variant("fp32", &err), NIBBLE_OK) << err.message;
}

INSTANTIATE_TEST_SUITE_P(Configs, GemmReferenceVariants, ::testing::ValuesIn(variant_cases()), case_name);

}  // namespace
}  // namespace nibble
