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
#include "harness/hash.h"
#include "harness/stats.h"

namespace nibble {

void gemm_call_a(const uint16_t* a0, int64_t n, uint64_t seed, int64_t call, uint16_t* a) {
  if (call == 0) {
    std::memcpy(a, a0, size_t(n) * 2);
    return;
  }
  for (int64_t w = 0; w * 64 < n; ++w) {
    const uint64_t x = sign_mask_word(seed, call, w);
    const int64_t e1 = std::min(n, w * 64 + 64);
    for (int64_t e = w * 64; e < e1; ++e) a[e] = uint16_t(a0[e] ^ (((x >> (e & 63)) & 1u) << 15));
  }
}

namespace {
/** The call number of every timed call's mask (a fresh seed each): unlike the checked calls'. */
constexpr int64_t kTimedCall = 1000;
}  // namespace

GemmSession::GemmSession(const SolutionLibrary& lib, int64_t M, int64_t N, int64_t K, const uint16_t* a0,
                         uint64_t check_seed, cudaStream_t stream, cudaStream_t harness_stream)
    : lib_(lib),
      stream_(stream),
      harness_stream_(harness_stream),
      M_(M),
      N_(N),
      K_(K),
      check_seed_(check_seed),
      A_(DType::BF16, {M, K}),
      c_bf16_(lib.gemm_output_dtype == NIBBLE_GEMM_OUTPUT_BF16),
      C_(c_bf16_ ? DType::BF16 : DType::F32, {M, N}),
      a0_dev_(size_t(M * K) * 2) {
  NIBBLE_CUDA_CALL(cudaMemcpy(a0_dev_.get(), a0, size_t(M * K) * 2, cudaMemcpyHostToDevice));
}

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
  stage(i, check_seed_);
  const uint64_t a_sum = a_checksum();
  call();
  NIBBLE_CUDA_CALL(cudaDeviceSynchronize());
  if (a_checksum() != a_sum)
    return "the candidate modified A during run (inputs are read-only)";
  add_c("call" + std::to_string(i), out);
  return "";
}

void GemmSession::stage_timed(int n, uint64_t seed) {
  if (n == 0) round_.clear();
  round_.push_back(seed);
  stage(kTimedCall, seed);
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
  for (int n : kept) calls.push_back({{"n", n}, {"seed", round_.at(size_t(n))}});
  return {{"calls", calls}};
}

void GemmSession::replay(const nlohmann::json& spec, const std::string& prefix, OutputFile& out) {
  for (const auto& c : spec.at("calls")) {
    stage(kTimedCall, c.at("seed").get<uint64_t>());
    call();
    NIBBLE_CUDA_CALL(cudaDeviceSynchronize());
    add_c(prefix + std::to_string(c.at("n").get<int>()), out);
  }
}

std::string GemmSession::inputs_changed() { return weights_sum() == weights_sum_ ? "" : weights_changed_message(); }

void GemmSession::dry_gap() {
  stage(kTimedCall, check_seed_);
  (void)timed_digest();
}

Digest GemmSession::timed_digest() { return device_blake3(C_.buf.get(), c_bytes(), harness_stream_); }

void GemmSession::teardown() {
  nibble_error err{};
  check_status(lib_.gemm_teardown(handle_, stream_, &err), err, "teardown");
  NIBBLE_CUDA_CALL(cudaDeviceSynchronize());
}

nlohmann::json GemmSession::facts() const { return {{"c_dtype", c_bf16_ ? "bf16" : "fp32"}}; }

void GemmSession::stage(int64_t call, uint64_t seed) {
  // On the GPU: a timed call's A is staged inside its window (its seed comes as the window opens).
  // The harness's own work goes on its stream: the timer tells it from the solution's by that.
  launch_sign_mask(static_cast<const uint16_t*>(a0_dev_.get()), static_cast<uint16_t*>(A_.buf.get()), M_ * K_, seed, call,
                   harness_stream_);
  NIBBLE_CUDA_CALL(cudaMemsetAsync(C_.buf.get(), 0xFF, c_bytes(), harness_stream_));  // NaN in fp32 and in bf16
  NIBBLE_CUDA_CALL(cudaStreamSynchronize(harness_stream_));
}

uint64_t GemmSession::a_checksum() { return device_checksum_bytes(A_.buf.get(), size_t(M_ * K_ * 2), harness_stream_); }

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

std::string GemmAbiTask::replay_spec_error(const std::string&, const nlohmann::json& spec, int calls,
                                           const std::vector<int>& picks, const std::vector<uint64_t>& seeds) const {
  try {
    std::vector<int> ns;
    for (const auto& c : spec.at("calls")) {
      const int n = c.at("n").get<int>();
      const uint64_t seed = c.at("seed").get<uint64_t>();
      if (n < 0 || n >= calls) return "call " + std::to_string(n) + " is not among the round's " + std::to_string(calls);
      if (size_t(n) >= seeds.size() || seed != seeds[size_t(n)])
        return "call " + std::to_string(n) + "'s seed is not the one the grader revealed for it";
      ns.push_back(n);
    }
    if (ns != picks)
      return "it replays " + std::to_string(ns.size()) + " calls, not the " + std::to_string(picks.size()) + " the grader picked";
    return "";
  } catch (const nlohmann::json::exception& e) {
    return std::string("it is not a GEMM replay spec: ") + e.what();
  }
}

Digest GemmAbiTask::kept_digest(const SafetensorsFile& timed, const std::string& call_name, const nlohmann::json& facts) const {
  const std::string name = call_name + ".C";
  if (!timed.has(name) || timed.entry(name).dtype != DType::F32)
    throw std::runtime_error("the kept call " + call_name + " has no fp32 C");
  const size_t n = timed.entry(name).nbytes() / 4;
  const uint8_t* c = timed.data(name);
  if (gemm_c_bytes(facts) == 4) return host_blake3(c, n * 4);
  std::vector<uint16_t> bf16(n);
  for (size_t i = 0; i < n; ++i) {
    uint32_t bits = 0;
    std::memcpy(&bits, c + i * 4, 4);
    if (bits & 0xFFFFu)
      throw std::runtime_error("the kept call " + call_name + "'s C element " + std::to_string(i) +
                               " is no bf16 value (low bits set), though the solution's C is bf16");
    bf16[i] = uint16_t(bits >> 16);  // bf16_to_f32 is bits << 16: this undoes it exactly
  }
  return host_blake3(bf16.data(), n * 2);
}

WindowWork GemmAbiTask::window_work(const std::string& config, const nlohmann::json& facts) const {
  const nlohmann::ordered_json d = config_dims(config);
  const uint64_t M = d.at("M").get<uint64_t>(), N = d.at("N").get<uint64_t>(), K = d.at("K").get<uint64_t>();
  const uint64_t c = M * N * uint64_t(gemm_c_bytes(facts));
  return {4 * M * K + c, 0, c, 2 * M * K};
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
