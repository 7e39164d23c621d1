// gemm_task.cpp: the FP4 weight-only GEMMs (gemm-w4a16-nvfp4, gemm-bf16-mxfp4) as Tasks.
//
// The replay guard and the calls: harness/gemm_session.h.
#include <memory>

#include "fixtures/gemm_fp4/gemm_fixture.h"
#include "fixtures/gemm_fp4/gemm_config.h"
#include "harness/cuda_check.h"
#include "harness/device_buffer.h"
#include "harness/gemm_fp4/gemm_problem.h"
#include "harness/gemm_session.h"
#include "harness/gpu_checks.h"
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

/** The FP4 weights uploaded once: W.packed, W.scale and (NVFP4) W.global_scale. */
class GemmRun final : public GemmSession {
 public:
  GemmRun(const GemmConfig& cfg, const GemmFixtureView& view, const SolutionLibrary& lib, uint64_t check_seed,
          cudaStream_t stream, cudaStream_t harness_stream)
      : GemmSession(lib, cfg.M, cfg.N, cfg.K, view.A, check_seed, stream, harness_stream),
        cfg_(cfg),
        packed_(DType::U8, {cfg_.N, cfg_.K / 2}),
        scale_(DType::U8, {cfg_.N, cfg_.scale_cols()}),
        global_(DType::F32, {1}) {
    const bool nvfp4 = cfg_.format == Fp4Format::Nvfp4;
    NIBBLE_CUDA_CALL(cudaMemcpy(packed_.buf.get(), view.packed, size_t(cfg_.N * cfg_.K / 2), cudaMemcpyHostToDevice));
    NIBBLE_CUDA_CALL(cudaMemcpy(scale_.buf.get(), view.scale, size_t(cfg_.N * cfg_.scale_cols()), cudaMemcpyHostToDevice));
    NIBBLE_CUDA_CALL(cudaMemcpy(global_.buf.get(), &view.global_scale, 4, cudaMemcpyHostToDevice));
    named_ = {{"W.packed", packed_.desc}, {"W.scale", scale_.desc}};
    if (nvfp4) named_.push_back({"W.global_scale", global_.desc});
    set_problem(gemm_problem(cfg_, named_, view.global_scale, c_dtype()));
  }

 private:
  uint64_t weights_sum() override {
    return device_checksum_bytes(packed_.buf.get(), size_t(cfg_.N * cfg_.K / 2), harness_stream_) * 3 +
           device_checksum_bytes(scale_.buf.get(), size_t(cfg_.N * cfg_.scale_cols()), harness_stream_);
  }
  std::string weights_changed_message() const override {
    return "the candidate modified the weights (W.packed or W.scale)";
  }

  GemmConfig cfg_;  // the problem's task and config names point into it
  DeviceTensor packed_, scale_, global_;
  std::vector<nibble_named_tensor> named_;
};

class GemmTask final : public GemmAbiTask {
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
  Roofline roofline(const std::string& config, const json& facts) const override {
    const GemmConfig c = gemm_config(name_, config);
    return {double(c.bytes_per_call(gemm_c_bytes(facts))), double(c.flops()), "A, W's codes and scales read once, C written once"};
  }
  uint64_t read_floor_bytes(const std::string& config) const override { return uint64_t(gemm_config(name_, config).weight_bytes()); }
  std::string reference_library() const override { return "libnibble_gemm_reference.so"; }
  // solutions/gemm_fp4/baseline and cublas_bf16 (NIBBLE_GEMM_SOLUTION's names).
  std::vector<std::string> baseline_solutions() const override { return {"gemm-baseline", "cublas-bf16-predequantised"}; }
  std::unique_ptr<Session> open_session(const Job& job, const SolutionLibrary& lib, const SafetensorsFile& fixture,
                                        cudaStream_t stream, cudaStream_t harness_stream) const override {
    const GemmConfig cfg = gemm_config(job.task, job.config);
    return std::make_unique<GemmRun>(cfg, gemm_fixture_view(cfg, fixture), lib, job.check_seed, stream, harness_stream);
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
    const auto variants = oracle::gemm_variants_for(name_);
    return gemm_oracle_errors(config, gemm_fixture_view(c, f).A, c.M, c.K, check_seed, variants.size(),
                              [&](int v, const uint16_t* a) {
                                return oracle::gemm_fixture(c, f, v < 0 ? oracle::GemmOptions{} : variants[size_t(v)].options,
                                                            threads, a);
                              });
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
