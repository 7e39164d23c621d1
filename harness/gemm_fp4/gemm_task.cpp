// gemm_task.cpp: the FP4 weight-only GEMMs (gemm-w4a16-nvfp4, gemm-bf16-mxfp4) as Tasks.
//
// Replay guard: a GEMM solution always sees the same shapes and weights, so a cached C would pass.
// Every call after the first flips the signs of a seeded half of A's elements (gemm_call_a; call 0
// is the fixture's A), a fresh mask per call, and the reference runs each checked and each kept
// timed call on the same A. Per-element signs, not per-row ones: a row's sign is read off one
// element of A, so a solution that kept the first call's C could re-sign its rows and pass; no
// cached C says anything about a new mixture of the signs within a row (that is a new GEMM). Each
// timed call's mask seed is drawn when it is staged, after prepare, so neither prepare nor an
// earlier call can compute a timed call's C ahead.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>

#include "fixtures/bf16.h"
#include "fixtures/gemm_fp4/gemm_fixture.h"
#include "fixtures/gemm_fp4/gemm_config.h"
#include "harness/cuda_check.h"
#include "harness/device_buffer.h"
#include "harness/gemm_fp4/gemm_guard.h"
#include "harness/gemm_fp4/gemm_problem.h"
#include "harness/gpu_checks.h"
#include "harness/stats.h"
#include "harness/task.h"
#include "reference/gemm_fp4/gemm_oracle.h"

namespace nibble {

namespace {

using json = nlohmann::json;

/** The gate of both GEMM tasks: worst relative Frobenius error of C. Chosen from the fp64 oracle's
 *  variant table (must-pass bf16 dequant 2.4e-3 NVFP4 / 1.7e-3 MXFP4; the closest must-fail,
 *  subnormals decoded as normals, 3.1e-2 / 4.3e-2): half-gate and twice-gate margins both hold at
 *  1e-2. `nibble calibrate` re-measures it. */
constexpr double kGemmGate = 1e-2;

/** The GEMM tasks' per-element guard: max |C - ref| / max |ref| at or below it. Chosen with
 *  `nibble calibrate --path cpu` at tiny and m16-n3072-k3072, both formats, seeds 0 and 1
 *  (2026-12-02, reports/cpu/calibration-gemm-*.json): bf16_dequant_fp32_acc reaches 0.0039, the
 *  c_sliver variant (the last 0.8% of C's columns left 0) 0.83 and more; 0.05 keeps both on the
 *  right side by 2x and more (the gate catches c_sliver too at these shapes: 0.089 > 0.01). */
constexpr double kGemmElementGuard = 0.05;

/** Timed calls are numbered from here: masks unlike the checked calls'. */
constexpr int64_t kFirstTimedCall = 1000;

class GemmRun final : public Session {
 public:
  GemmRun(const Job& job, const SolutionLibrary& lib, const SafetensorsFile& fixture, cudaStream_t stream,
          cudaStream_t harness_stream)
      : cfg_(gemm_config(job.task, job.config)),
        lib_(lib),
        stream_(stream),
        harness_stream_(harness_stream),
        check_seed_(job.check_seed),
        view_(gemm_fixture_view(cfg_, fixture)),
        A_(DType::BF16, {cfg_.M, cfg_.K}),
        packed_(DType::U8, {cfg_.N, cfg_.K / 2}),
        scale_(DType::U8, {cfg_.N, cfg_.scale_cols()}),
        global_(DType::F32, {1}),
        c_bf16_(lib.gemm_output_dtype == NIBBLE_GEMM_OUTPUT_BF16),
        C_(c_bf16_ ? DType::BF16 : DType::F32, {cfg_.M, cfg_.N}),
        a_call_(size_t(cfg_.M * cfg_.K)) {
    const bool nvfp4 = cfg_.format == Fp4Format::Nvfp4;
    NIBBLE_CUDA_CALL(cudaMemcpy(packed_.buf.get(), view_.packed, size_t(cfg_.N * cfg_.K / 2), cudaMemcpyHostToDevice));
    NIBBLE_CUDA_CALL(cudaMemcpy(scale_.buf.get(), view_.scale, size_t(cfg_.N * cfg_.scale_cols()), cudaMemcpyHostToDevice));
    NIBBLE_CUDA_CALL(cudaMemcpy(global_.buf.get(), &view_.global_scale, 4, cudaMemcpyHostToDevice));
    named_ = {{"W.packed", packed_.desc}, {"W.scale", scale_.desc}};
    if (nvfp4) named_.push_back({"W.global_scale", global_.desc});
    problem_ = gemm_problem(cfg_, named_, view_.global_scale, lib.gemm_output_dtype);
    weights_sum_ = weights_sum();
  }

  void build() override {
    nibble_error err{};
    check_status(lib_.gemm_prepare(&problem_, stream_, &handle_, &err), err, "prepare");
    NIBBLE_CUDA_CALL(cudaDeviceSynchronize());
  }

  std::string checked_call(int i, OutputFile& out) override {
    const uint64_t a_sum = stage(i, check_seed_);
    call();
    NIBBLE_CUDA_CALL(cudaDeviceSynchronize());
    if (device_checksum_bytes(A_.buf.get(), size_t(cfg_.M * cfg_.K * 2), harness_stream_) != a_sum)
      return "the candidate modified A during run (inputs are read-only)";
    add_c("call" + std::to_string(i), out);
    return "";
  }

  void stage_timed(int n, TimedRandom& rng) override {
    if (n == 0) round_.clear();
    const uint64_t seed = rng();
    round_.push_back({++timed_calls_ + kFirstTimedCall, seed});
    stage(round_.back().first, seed);
  }

  void call() override {
    nibble_error err{};
    check_status(lib_.gemm_run(handle_, &A_.desc, &C_.desc, stream_, &err), err, "run");
  }

  bool timed_outputs(const std::string& call_name, bool keep, OutputFile& out) override {
    // C is read back for the kept calls only: at M = 4096 a read is ~50 MB.
    if (!keep) return true;
    return add_c(call_name, out);
  }

  json replay_spec(const std::vector<int>& kept) const override {
    json calls = json::array();
    for (int n : kept) calls.push_back({{"n", n}, {"call", round_.at(size_t(n)).first}, {"seed", round_.at(size_t(n)).second}});
    return {{"calls", calls}};
  }

  void replay(const json& spec, const std::string& prefix, OutputFile& out) override {
    for (const auto& c : spec.at("calls")) {
      stage(c.at("call").get<int64_t>(), c.at("seed").get<uint64_t>());
      call();
      NIBBLE_CUDA_CALL(cudaDeviceSynchronize());
      add_c(prefix + std::to_string(c.at("n").get<int>()), out);
    }
  }

  std::string inputs_changed() override {
    return weights_sum() == weights_sum_ ? "" : "the candidate modified the weights (W.packed or W.scale)";
  }
  void dry_gap() override { stage(kFirstTimedCall, check_seed_); }
  void teardown() override {
    nibble_error err{};
    check_status(lib_.gemm_teardown(handle_, stream_, &err), err, "teardown");
    NIBBLE_CUDA_CALL(cudaDeviceSynchronize());
  }
  json facts() const override { return {{"c_dtype", c_bf16_ ? "bf16" : "fp32"}}; }

 private:
  /** Call `call`'s A uploaded and C NaN-filled (untimed); returns A's checksum. */
  uint64_t stage(int64_t call, uint64_t seed) {
    gemm_call_a(view_.A, cfg_.M * cfg_.K, seed, call, a_call_.data());
    // The harness's own work goes on its stream: the timer tells it from the solution's by that.
    NIBBLE_CUDA_CALL(cudaMemcpyAsync(A_.buf.get(), a_call_.data(), a_call_.size() * 2, cudaMemcpyHostToDevice,
                                     harness_stream_));
    NIBBLE_CUDA_CALL(cudaMemsetAsync(C_.buf.get(), 0xFF, C_.buf.bytes(), harness_stream_));  // NaN in fp32 and in bf16
    NIBBLE_CUDA_CALL(cudaStreamSynchronize(harness_stream_));
    return device_checksum_bytes(A_.buf.get(), size_t(cfg_.M * cfg_.K * 2), harness_stream_);
  }
  /** C as fp32, added as `<name>.C`; returns whether it is finite. */
  bool add_c(const std::string& name, OutputFile& out) {
    std::vector<float> c(size_t(cfg_.M * cfg_.N));
    if (c_bf16_) {
      std::vector<uint16_t> h(c.size());
      NIBBLE_CUDA_CALL(cudaMemcpyAsync(h.data(), C_.buf.get(), h.size() * 2, cudaMemcpyDeviceToHost, harness_stream_));
      NIBBLE_CUDA_CALL(cudaStreamSynchronize(harness_stream_));
      for (size_t i = 0; i < h.size(); ++i) c[i] = bf16_to_f32(h[i]);
    } else {
      NIBBLE_CUDA_CALL(cudaMemcpyAsync(c.data(), C_.buf.get(), c.size() * 4, cudaMemcpyDeviceToHost, harness_stream_));
      NIBBLE_CUDA_CALL(cudaStreamSynchronize(harness_stream_));
    }
    out.add(name + ".C", DType::F32, {cfg_.M, cfg_.N}, c.data(), c.size() * 4);
    return all_finite(c.data(), c.size());
  }
  uint64_t weights_sum() {
    return device_checksum_bytes(packed_.buf.get(), size_t(cfg_.N * cfg_.K / 2), harness_stream_) * 3 +
           device_checksum_bytes(scale_.buf.get(), size_t(cfg_.N * cfg_.scale_cols()), harness_stream_);
  }

  GemmConfig cfg_;
  const SolutionLibrary& lib_;
  cudaStream_t stream_, harness_stream_;
  uint64_t check_seed_;
  GemmFixtureView view_;
  DeviceTensor A_, packed_, scale_, global_;
  bool c_bf16_;
  DeviceTensor C_;
  std::vector<uint16_t> a_call_;
  std::vector<nibble_named_tensor> named_;
  nibble_gemm_problem problem_{};
  void* handle_ = nullptr;
  uint64_t weights_sum_ = 0;
  int64_t timed_calls_ = 0;
  std::vector<std::pair<int64_t, uint64_t>> round_;  // (call number, mask seed) of each call of the round
};

class GemmTask final : public Task {
 public:
  explicit GemmTask(std::string name) : name_(std::move(name)) {}
  std::string name() const override { return name_; }
  std::string family() const override { return "gemm_fp4"; }
  std::string description() const override {
    return gemm_format(name_) == Fp4Format::Nvfp4
               ? "C = A W^T, A bf16, W NVFP4 (e2m1, e4m3 scale per 16, fp32 global scale)"
               : "C = A W^T, A bf16, W MXFP4 (e2m1, e8m0 scale per 32)";
  }
  std::vector<std::string> official_configs() const override { return gemm_config_names(); }
  std::string config_syntax() const override { return "tiny | m<M>-n<N>-k<K>"; }
  void check_config(const std::string& config) const override { (void)gemm_config(name_, config); }
  nlohmann::ordered_json config_dims(const std::string& config) const override {
    const GemmConfig c = gemm_config(name_, config);
    return {{"M", c.M}, {"N", c.N}, {"K", c.K}, {"block", c.block}};
  }
  std::vector<TensorSpec> tensors(const std::string& config) const override { return gemm_config(name_, config).tensors(); }
  FixtureManifest build_fixture(const std::string& config, uint64_t seed, const std::string& dir, int threads,
                                const ProgressFn& progress) const override {
    return build_gemm_fixture(gemm_config(name_, config), seed, dir, threads, progress);
  }
  FixtureManifest generate_fixture_manifest(const std::string& config, uint64_t seed, int threads,
                                            const ProgressFn& progress) const override {
    return gemm_fixture_manifest(gemm_config(name_, config), seed, threads, progress);
  }
  std::optional<std::string> pinned_fixture_sha256(const std::string& config, uint64_t seed) const override {
    return find_pinned(gemm_fp4_pinned_fixtures(), name_, config, seed);
  }
  double gate(const std::string&) const override { return kGemmGate; }
  std::optional<double> element_guard(const std::string&) const override { return kGemmElementGuard; }
  std::string error_metric() const override {
    return "||C - C_ref||_F / ||C_ref||_F in fp64, per call against the reference's C of the same A; every call after "
           "the first flips the signs of a seeded half of A's elements";
  }
  std::vector<std::string> outputs() const override { return {"C"}; }
  std::string unit() const override { return "call"; }
  std::string build_call() const override { return "prepare"; }
  std::string timed_call() const override { return "run"; }
  int checked_calls(const std::string&) const override { return 2; }
  int calls_per_round() const override { return 32; }
  // One: a kept call's C is read back and re-computed by the reference (128 MiB at M = 4096 fp32).
  int kept_calls_per_round() const override { return 1; }
  Roofline roofline(const std::string& config, const json& facts) const override {
    const GemmConfig c = gemm_config(name_, config);
    const int c_bytes = facts.is_object() && facts.value("c_dtype", std::string("fp32")) == "bf16" ? 2 : 4;
    return {double(c.bytes_per_call(c_bytes)), double(c.flops()), "A, W's codes and scales read once, C written once"};
  }
  uint64_t read_floor_bytes(const std::string& config) const override { return uint64_t(gemm_config(name_, config).weight_bytes()); }
  bool host_wall_informational() const override { return true; }
  nlohmann::ordered_json timing_protocol() const override {
    return {{"inputs", "A with a fresh sign mask per call (its seed drawn after prepare: TimedRandom), uploaded and C "
                       "NaN-filled before the window"},
            {"outputs", "one call of every round, picked by the grader's parent after it returned, kept and re-checked against the reference"}};
  }
  std::string reference_library() const override { return "libnibble_gemm_reference.so"; }
  // solutions/gemm_fp4/baseline and cublas_bf16 (NIBBLE_GEMM_SOLUTION's names).
  std::vector<std::string> baseline_solutions() const override { return {"gemm-baseline", "cublas-bf16-predequantised"}; }
  SolutionLibrary::Abi abi() const override { return SolutionLibrary::Abi::Gemm; }
  std::unique_ptr<Session> open_session(const Job& job, const SolutionLibrary& lib, const SafetensorsFile& fixture,
                                        cudaStream_t stream, cudaStream_t harness_stream) const override {
    return std::make_unique<GemmRun>(job, lib, fixture, stream, harness_stream);
  }
  std::vector<TaskVariant> variants() const override {
    std::vector<TaskVariant> v;
    for (const auto& x : oracle::gemm_variants_for(name_)) v.push_back({x.name, x.description, x.must_pass, x.must_pass ? "" : "C"});
    return v;
  }
  double oracle_macs(const std::string& config) const override {
    const GemmConfig c = gemm_config(name_, config);
    return double(c.M) * double(c.N) * double(c.K) * double(oracle::gemm_variants_for(name_).size() + 1) *
           checked_calls(config);
  }
  OracleErrors oracle_errors(const std::string& config, const SafetensorsFile& f, uint64_t check_seed,
                             int threads) const override {
    const GemmConfig c = gemm_config(name_, config);
    const GemmFixtureView view = gemm_fixture_view(c, f);
    const auto variants = oracle::gemm_variants_for(name_);
    OracleErrors out{outputs(), std::vector<std::vector<double>>(variants.size(), {0.0}),
                     std::vector<std::vector<double>>(variants.size(), {0.0})};
    std::vector<uint16_t> a(size_t(c.M * c.K));
    for (int call = 0; call < checked_calls(config); ++call) {  // the A of each checked call, as a child stages it
      gemm_call_a(view.A, c.M * c.K, check_seed, call, a.data());
      const auto exact = oracle::gemm_fixture(c, f, {}, threads, a.data());
      for (size_t v = 0; v < variants.size(); ++v) {
        const auto got = oracle::gemm_fixture(c, f, variants[v].options, threads, a.data());
        out.per_variant[v][0] = nan_max(out.per_variant[v][0], relative_error(got.data(), exact.data(), got.size()));
        out.elem_per_variant[v][0] = nan_max(out.elem_per_variant[v][0], element_error(got.data(), exact.data(), got.size()));
      }
    }
    return out;
  }

 private:
  std::string name_;
};

}  // namespace

const Task& gemm_nvfp4_task() {
  static const GemmTask t(kGemmNvfp4Task);
  return t;
}

const Task& gemm_mxfp4_task() {
  static const GemmTask t(kGemmMxfp4Task);
  return t;
}

}  // namespace nibble
