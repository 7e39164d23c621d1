// gemm_session.cpp: see gemm_session.h.
#include "harness/gemm_session.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>

#include "fixtures/bf16.h"
#include "harness/cuda_check.h"
#include "harness/gpu_checks.h"
#include "harness/stats.h"

namespace nibble {

void gemm_call_a(const uint16_t* a0, int64_t n, uint64_t seed, int64_t call, uint16_t* a) {
  if (call == 0) {
    std::memcpy(a, a0, size_t(n) * 2);
    return;
  }
  for (int64_t w = 0; w * 64 < n; ++w) {
    uint64_t x = seed * 0x9e3779b97f4a7c15ull + uint64_t(call) * 0xbf58476d1ce4e5b9ull + uint64_t(w) * 0x94d049bb133111ebull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    x ^= x >> 31;
    const int64_t e1 = std::min(n, w * 64 + 64);
    for (int64_t e = w * 64; e < e1; ++e) a[e] = uint16_t(a0[e] ^ (((x >> (e & 63)) & 1u) << 15));
  }
}

namespace {
/** Timed calls are numbered from here: masks unlike the checked calls'. */
constexpr int64_t kFirstTimedCall = 1000;
}  // namespace

GemmSession::GemmSession(const SolutionLibrary& lib, int64_t M, int64_t N, int64_t K, const uint16_t* a0,
                         uint64_t check_seed, cudaStream_t stream, cudaStream_t harness_stream)
    : lib_(lib),
      stream_(stream),
      harness_stream_(harness_stream),
      M_(M),
      N_(N),
      K_(K),
      a0_(a0),
      check_seed_(check_seed),
      A_(DType::BF16, {M, K}),
      c_bf16_(lib.gemm_output_dtype == NIBBLE_GEMM_OUTPUT_BF16),
      C_(c_bf16_ ? DType::BF16 : DType::F32, {M, N}),
      a_call_(size_t(M * K)) {}

void GemmSession::set_problem(const nibble_gemm_problem& p) {
  // A cudaMemcpy from pageable memory may return before its DMA lands, and the harness's and the
  // solution's streams are non-blocking: the uploads finish before the checksum or prepare reads them.
  NIBBLE_CUDA_CALL(cudaDeviceSynchronize());
  problem_ = p;
  weights_sum_ = weights_sum();
}

void GemmSession::build() {
  nibble_error err{};
  check_status(lib_.gemm_prepare(&problem_, stream_, &handle_, &err), err, "prepare");
  NIBBLE_CUDA_CALL(cudaDeviceSynchronize());
}

std::string GemmSession::checked_call(int i, OutputFile& out) {
  const uint64_t a_sum = stage(i, check_seed_);
  call();
  NIBBLE_CUDA_CALL(cudaDeviceSynchronize());
  if (device_checksum_bytes(A_.buf.get(), size_t(M_ * K_ * 2), harness_stream_) != a_sum)
    return "the candidate modified A during run (inputs are read-only)";
  add_c("call" + std::to_string(i), out);
  return "";
}

void GemmSession::stage_timed(int n, TimedRandom& rng) {
  if (n == 0) round_.clear();
  const uint64_t seed = rng();
  round_.push_back({++timed_calls_ + kFirstTimedCall, seed});
  stage(round_.back().first, seed);
}

void GemmSession::call() {
  nibble_error err{};
  check_status(lib_.gemm_run(handle_, &A_.desc, &C_.desc, stream_, &err), err, "run");
}

bool GemmSession::timed_outputs(const std::string& call_name, bool keep, OutputFile& out) {
  // C is read back for the kept calls only: at M = 4096 a read is ~50 MB.
  if (!keep) return true;
  return add_c(call_name, out);
}

nlohmann::json GemmSession::replay_spec(const std::vector<int>& kept) const {
  nlohmann::json calls = nlohmann::json::array();
  for (int n : kept) calls.push_back({{"n", n}, {"call", round_.at(size_t(n)).first}, {"seed", round_.at(size_t(n)).second}});
  return {{"calls", calls}};
}

void GemmSession::replay(const nlohmann::json& spec, const std::string& prefix, OutputFile& out) {
  for (const auto& c : spec.at("calls")) {
    stage(c.at("call").get<int64_t>(), c.at("seed").get<uint64_t>());
    call();
    NIBBLE_CUDA_CALL(cudaDeviceSynchronize());
    add_c(prefix + std::to_string(c.at("n").get<int>()), out);
  }
}

std::string GemmSession::inputs_changed() { return weights_sum() == weights_sum_ ? "" : weights_changed_message(); }

void GemmSession::dry_gap() { stage(kFirstTimedCall, check_seed_); }

void GemmSession::teardown() {
  nibble_error err{};
  check_status(lib_.gemm_teardown(handle_, stream_, &err), err, "teardown");
  NIBBLE_CUDA_CALL(cudaDeviceSynchronize());
}

nlohmann::json GemmSession::facts() const { return {{"c_dtype", c_bf16_ ? "bf16" : "fp32"}}; }

uint64_t GemmSession::stage(int64_t call, uint64_t seed) {
  gemm_call_a(a0_, M_ * K_, seed, call, a_call_.data());
  // The harness's own work goes on its stream: the timer tells it from the solution's by that.
  NIBBLE_CUDA_CALL(cudaMemcpyAsync(A_.buf.get(), a_call_.data(), a_call_.size() * 2, cudaMemcpyHostToDevice,
                                   harness_stream_));
  NIBBLE_CUDA_CALL(cudaMemsetAsync(C_.buf.get(), 0xFF, C_.buf.bytes(), harness_stream_));  // NaN in fp32 and in bf16
  NIBBLE_CUDA_CALL(cudaStreamSynchronize(harness_stream_));
  return device_checksum_bytes(A_.buf.get(), size_t(M_ * K_ * 2), harness_stream_);
}

bool GemmSession::add_c(const std::string& name, OutputFile& out) {
  std::vector<float> c(size_t(M_ * N_));
  if (c_bf16_) {
    std::vector<uint16_t> h(c.size());
    NIBBLE_CUDA_CALL(cudaMemcpyAsync(h.data(), C_.buf.get(), h.size() * 2, cudaMemcpyDeviceToHost, harness_stream_));
    NIBBLE_CUDA_CALL(cudaStreamSynchronize(harness_stream_));
    for (size_t i = 0; i < h.size(); ++i) c[i] = bf16_to_f32(h[i]);
  } else {
    NIBBLE_CUDA_CALL(cudaMemcpyAsync(c.data(), C_.buf.get(), c.size() * 4, cudaMemcpyDeviceToHost, harness_stream_));
    NIBBLE_CUDA_CALL(cudaStreamSynchronize(harness_stream_));
  }
  out.add(name + ".C", DType::F32, {M_, N_}, c.data(), c.size() * 4);
  return all_finite(c.data(), c.size());
}

OracleErrors GemmAbiTask::gemm_oracle_errors(const std::string& config, const uint16_t* a0, int64_t M, int64_t K,
                                             uint64_t check_seed, size_t variants,
                                             const std::function<std::vector<double>(int, const uint16_t*)>& c) const {
  OracleErrors out{outputs(), std::vector<std::vector<double>>(variants, {0.0}),
                   std::vector<std::vector<double>>(variants, {0.0})};
  std::vector<uint16_t> a(size_t(M * K));
  for (int call = 0; call < checked_calls(config); ++call) {  // the A of each checked call, as a child stages it
    gemm_call_a(a0, M * K, check_seed, call, a.data());
    const auto exact = c(-1, a.data());
    for (size_t v = 0; v < variants; ++v) {
      const auto got = c(int(v), a.data());
      out.per_variant[v][0] = nan_max(out.per_variant[v][0], relative_error(got.data(), exact.data(), got.size()));
      out.elem_per_variant[v][0] = nan_max(out.elem_per_variant[v][0], element_error(got.data(), exact.data(), got.size()));
    }
  }
  return out;
}

}  // namespace nibble
