// int4_gemm_task.cpp: gemm-w4a16-int4 (issue 24) as a Task: C = A W^T with W int4 in groups of 128
// along K (scale and zero point per group), handed to the solution in the checkpoint layout it asks
// for (nibble_gemm_int4_layout: plain, AWQ, GPTQ with or without g_idx, compressed-tensors),
// converted exactly from the fixture's plain layout (fixtures/int4_gemm/int4_gemm_layouts.h).
// The calls, the replay guard and the checks: harness/gemm_session.h.
#include <memory>
#include <string>
#include <vector>

#include "fixtures/int4_gemm/int4_gemm_config.h"
#include "fixtures/int4_gemm/int4_gemm_fixture.h"
#include "fixtures/int4_gemm/int4_gemm_layouts.h"
#include "harness/cuda_check.h"
#include "harness/device_buffer.h"
#include "harness/gemm_session.h"
#include "harness/gpu_checks.h"
#include "reference/int4_gemm/int4_gemm_oracle.h"

namespace nibble {

namespace {

using json = nlohmann::json;

static_assert(int(Int4Layout::Plain) == NIBBLE_INT4_LAYOUT_PLAIN && int(Int4Layout::Awq) == NIBBLE_INT4_LAYOUT_AWQ &&
                  int(Int4Layout::Gptq) == NIBBLE_INT4_LAYOUT_GPTQ &&
                  int(Int4Layout::GptqGIdx) == NIBBLE_INT4_LAYOUT_GPTQ_G_IDX &&
                  int(Int4Layout::CompressedTensors) == NIBBLE_INT4_LAYOUT_COMPRESSED_TENSORS,
              "fixtures/int4_formats.h Int4Layout and include/nibble/nibble_gemm.h NIBBLE_INT4_LAYOUT_* agree");

/** The gate: worst relative Frobenius error of C. From the fp64 oracle's variant table (`nibble
 *  calibrate --path cpu`, seeds 0 and 1, reports/cpu/calibration-gemm-w4a16-int4-*.json) at tiny,
 *  tiny-sym, m16-n3072-k3072 and m1-n3000-k3200: the worst must-pass row (bf16_output: W and C
 *  rounded to bf16) reaches 2.6e-3, the closest must-fail one 8.9e-2 (c_sliver; every layout
 *  mistake 0.12 and more): 1e-2 keeps both margins above 3x. */
constexpr double kInt4Gate = 1e-2;

/** The per-element guard (max |C - ref| / max |ref|), as the FP4 GEMMs': c_sliver (the last 0.8% of
 *  C's columns left 0) reaches ~0.8 and more, the must-pass rows stay far below 0.025. */
constexpr double kInt4ElementGuard = 0.05;

/** The weights in the solution's layout, uploaded once; the problem names them. */
class Int4GemmRun final : public GemmSession {
 public:
  Int4GemmRun(const Int4GemmConfig& cfg, const Int4GemmView& view, const SolutionLibrary& lib, uint64_t check_seed,
              cudaStream_t stream, cudaStream_t harness_stream)
      : GemmSession(lib, cfg.M, cfg.N, cfg.K, view.A, check_seed, stream, harness_stream),
        cfg_(cfg),
        layout_(Int4Layout(lib.gemm_int4_layout)) {
    const auto host = int4_layout_tensors(view.plain(cfg_), layout_, cfg_.symmetric);
    weights_.reserve(host.size());  // the descriptors below point into the DeviceTensors
    for (const auto& t : host) {
      weights_.emplace_back(t.spec.dtype, t.spec.shape);
      NIBBLE_CUDA_CALL(cudaMemcpy(weights_.back().buf.get(), t.bytes.data(), t.bytes.size(), cudaMemcpyHostToDevice));
      names_.push_back(t.spec.name);
    }
    for (size_t i = 0; i < weights_.size(); ++i) named_.push_back({names_[i].c_str(), weights_[i].desc});
    nibble_gemm_problem p{};
    p.struct_size = sizeof(p);
    p.task = kInt4GemmTask;
    p.config_name = cfg_.name.c_str();
    p.M = cfg_.M;
    p.N = cfg_.N;
    p.K = cfg_.K;
    p.block = kInt4Group;
    p.scale_format = NIBBLE_GEMM_SCALE_F16;
    p.global_scale = 1.0f;
    p.c_dtype = c_dtype();
    p.tensors = named_.data();
    p.num_tensors = int32_t(named_.size());
    set_problem(p);
  }

  json facts() const override {
    json f = GemmSession::facts();
    f["int4_layout"] = int4_layout_name(layout_);
    return f;
  }

 private:
  uint64_t weights_sum() override {
    uint64_t s = 0;
    for (auto& w : weights_) s = s * 3 + device_checksum_bytes(w.buf.get(), w.buf.bytes(), harness_stream_);
    return s;
  }
  std::string weights_changed_message() const override {
    std::string list;
    for (const auto& n : names_) list += (list.empty() ? "" : ", ") + n;
    return "the candidate modified the weights (" + list + ", layout " + int4_layout_name(layout_) + ")";
  }

  Int4GemmConfig cfg_;  // the problem's config name points into it
  Int4Layout layout_;
  std::vector<DeviceTensor> weights_;
  std::vector<std::string> names_;
  std::vector<nibble_named_tensor> named_;
};

class Int4GemmTask final : public GemmAbiTask {
 public:
  std::string name() const override { return kInt4GemmTask; }
  std::string family() const override { return "int4_gemm"; }
  std::string description() const override {
    return "C = A W^T, A bf16, W int4 per group of 128 along K (fp16 scale, zero point), in the layout the solution "
           "asks for: plain, AWQ, GPTQ (with or without g_idx), compressed-tensors";
  }
  std::vector<std::string> official_configs() const override { return int4_gemm_config_names(); }
  std::string config_syntax() const override { return "tiny[-sym] | m<M>-n<N>-k<K>[-sym]"; }
  void check_config(const std::string& config) const override { (void)int4_gemm_config(config); }
  nlohmann::ordered_json config_dims(const std::string& config) const override {
    const Int4GemmConfig c = int4_gemm_config(config);
    return {{"M", c.M}, {"N", c.N}, {"K", c.K}, {"group", kInt4Group}, {"symmetric", c.symmetric}};
  }
  std::vector<TensorSpec> tensors(const std::string& config) const override { return int4_gemm_config(config).tensors(); }
  FixtureManifest build_fixture(const std::string& config, uint64_t seed, const std::string& dir, int threads,
                                const ProgressFn& progress) const override {
    return build_int4_gemm_fixture(int4_gemm_config(config), seed, dir, threads, progress);
  }
  FixtureManifest generate_fixture_manifest(const std::string& config, uint64_t seed, int threads,
                                            const ProgressFn& progress) const override {
    return int4_gemm_fixture_manifest(int4_gemm_config(config), seed, threads, progress);
  }
  std::optional<std::string> pinned_fixture_sha256(const std::string& config, uint64_t seed) const override {
    return find_pinned(int4_gemm_pinned_fixtures(), kInt4GemmTask, config, seed);
  }
  double gate(const std::string&) const override { return kInt4Gate; }
  std::optional<double> element_guard(const std::string&) const override { return kInt4ElementGuard; }
  /** A and the weights as the solution's layout holds them read once, C written once. */
  Roofline roofline(const std::string& config, const json& facts) const override {
    const Int4GemmConfig c = int4_gemm_config(config);
    const int c_bytes = gemm_c_bytes(facts);
    const Int4Layout layout = int4_layout_from_name(facts.is_object() ? facts.value("int4_layout", std::string("plain")) : "plain");
    double w = 0;
    for (const auto& s : int4_layout_specs(c.N, c.K, layout, c.symmetric)) w += double(s.nbytes());
    return {2.0 * double(c.M * c.K) + w + double(c.M * c.N * c_bytes), double(c.flops()),
            std::string("A, the weights in the ") + int4_layout_name(layout) + " layout read once, C written once"};
  }
  uint64_t read_floor_bytes(const std::string& config) const override { return uint64_t(int4_gemm_config(config).weight_bytes()); }
  std::string reference_library() const override { return "libnibble_int4_gemm_reference.so"; }
  // solutions/int4_gemm (NIBBLE_INT4_GEMM_SOLUTION's names).
  std::vector<std::string> baseline_solutions() const override {
    return {"int4-gemm-baseline-plain", "int4-cublas-bf16-predequantised"};
  }
  std::unique_ptr<Session> open_session(const Job& job, const SolutionLibrary& lib, const SafetensorsFile& fixture,
                                        cudaStream_t stream, cudaStream_t harness_stream) const override {
    const Int4GemmConfig cfg = int4_gemm_config(job.config);
    return std::make_unique<Int4GemmRun>(cfg, int4_gemm_fixture_view(cfg, fixture), lib, job.check_seed, stream,
                                         harness_stream);
  }
  std::vector<TaskVariant> variants() const override {
    std::vector<TaskVariant> v;
    for (const auto& x : oracle::int4_gemm_variants()) v.push_back({x.name, x.description, x.must_pass, x.must_pass ? "" : "C"});
    return v;
  }
  double oracle_macs(const std::string& config) const override {
    const Int4GemmConfig c = int4_gemm_config(config);
    return double(c.M) * double(c.N) * double(c.K) * double(oracle::int4_gemm_variants().size() + 1) *
           checked_calls(config);
  }
  OracleErrors oracle_errors(const std::string& config, const SafetensorsFile& f, uint64_t check_seed,
                             int threads) const override {
    const Int4GemmConfig c = int4_gemm_config(config);
    const Int4GemmView view = int4_gemm_fixture_view(c, f);
    const Int4Plain w = view.plain(c);
    const auto& variants = oracle::int4_gemm_variants();
    return gemm_oracle_errors(config, view.A, c.M, c.K, check_seed, variants.size(), [&](int v, const uint16_t* a) {
      return oracle::int4_gemm(a, c.M, w, v < 0 ? oracle::Int4GemmOptions{} : variants[size_t(v)].options, threads);
    });
  }
};

}  // namespace

const Task& int4_gemm_task() {
  static const Int4GemmTask t;
  return t;
}

}  // namespace nibble
