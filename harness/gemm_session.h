// gemm_session.h: what every task of the GEMM ABI (include/nibble/nibble_gemm.h) does the same way
// in the child: A staged per call with the replay guard, C NaN-filled and read back, the kept calls
// replayed, prepare/run/teardown called and checked. A task family supplies only its weights (the
// tensors it hands prepare, their checksum) and its facts: gemm_fp4/gemm_task.cpp,
// int4_gemm/int4_gemm_task.cpp.
//
// Replay guard: a GEMM solution always sees the same shapes and weights, so a cached C would pass.
// Every call after the first flips the signs of a seeded half of A's elements (gemm_call_a; call 0
// is the fixture's A), a fresh mask per call, and the reference runs each checked and each kept
// timed call on the same A. Per-element signs, not per-row ones: a row's sign is read off one
// element of A, so a solution that kept the first call's C could re-sign its rows and pass; no
// cached C says anything about a new mixture of the signs within a row (that is a new GEMM). Each
// timed call's mask seed is the call ledger's, revealed as the call's window opens (A staged on the
// GPU inside it), so neither prepare nor an earlier call can compute a timed call's C ahead.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <utility>
#include <vector>

#include "harness/device_buffer.h"
#include "harness/task.h"
#include "nibble/nibble_gemm.h"

namespace nibble {

/** Call `call`'s A, the GEMM grader's replay guard: the fixture's A (`a0`, n bf16 bit patterns)
 *  with the sign of each element e flipped where bit e % 64 of splitmix64(seed, call, e / 64) is
 *  set (about half of them, a fresh mask per call); call 0 is `a0` unchanged. Exact (the bf16 sign
 *  bit), so the candidate, the reference and a test all rebuild the same A from (seed, call).
 *  Writes n values to `a`. */
void gemm_call_a(const uint16_t* a0, int64_t n, uint64_t seed, int64_t call, uint16_t* a);

/** Bytes per element of the C a solution with these facts (GemmSession::facts()) writes: 2 where
 *  c_dtype is "bf16", else 4 (fp32, also for facts without it). */
inline int gemm_c_bytes(const nlohmann::json& facts) {
  return facts.is_object() && facts.value("c_dtype", std::string("fp32")) == "bf16" ? 2 : 4;
}

/**
 * The Session of a GEMM-ABI task. The derived class uploads its weights, then calls
 * set_problem() with the nibble_gemm_problem it filled (tensors pointing into its own storage)
 * before build(); weights_sum() is its checksum of every weight tensor on the device.
 */
class GemmSession : public Session {
 public:
  /** `a0`: the fixture's A (M, K) bf16 bits, uploaded once. */
  GemmSession(const SolutionLibrary& lib, int64_t M, int64_t N, int64_t K, const uint16_t* a0, uint64_t check_seed,
              cudaStream_t stream, cudaStream_t harness_stream);

  void build() override;
  std::string checked_call(int i, OutputFile& out) override;
  void stage_timed(int n, uint64_t seed) override;
  Digest timed_digest() override;
  void call() override;
  bool timed_outputs(const std::string& call_name, bool keep, OutputFile& out) override;
  nlohmann::json replay_spec(const std::vector<int>& kept) const override;
  void replay(const nlohmann::json& spec, const std::string& prefix, OutputFile& out) override;
  std::string inputs_changed() override;
  void dry_gap() override;
  void teardown() override;
  /** c_dtype; a derived class adds its own. */
  nlohmann::json facts() const override;

 protected:
  /** The problem prepare gets (its tensors must stay valid until teardown); takes the checksum the
   *  weights are compared with after every call. */
  void set_problem(const nibble_gemm_problem& p);
  /** A checksum of every weight tensor on the device (device_checksum_bytes on harness_stream_). */
  virtual uint64_t weights_sum() = 0;
  /** The message when weights_sum() changed: which tensors. */
  virtual std::string weights_changed_message() const = 0;
  /** The C dtype the solution asked for (NIBBLE_GEMM_OUTPUT_*). */
  int32_t c_dtype() const { return c_bf16_ ? NIBBLE_GEMM_OUTPUT_BF16 : NIBBLE_GEMM_OUTPUT_F32; }

  const SolutionLibrary& lib_;
  cudaStream_t stream_, harness_stream_;

 private:
  /** Call `call`'s A staged from the fixture's on the GPU (launch_sign_mask) and C NaN-filled,
   *  synchronised. */
  void stage(int64_t call, uint64_t seed);
  /** A's checksum on the device (a checked call must leave it as staged). */
  uint64_t a_checksum();
  size_t c_bytes() const { return size_t(M_ * N_) * (c_bf16_ ? 2 : 4); }
  /** C as fp32, added as `<name>.C`; returns whether it is finite. */
  bool add_c(const std::string& name, OutputFile& out);

  int64_t M_, N_, K_;
  uint64_t check_seed_;
  DeviceTensor A_;
  bool c_bf16_;
  DeviceTensor C_;
  DeviceBuffer a0_dev_;  // the fixture's A on the device, what every call's A is staged from
  nibble_gemm_problem problem_{};
  void* handle_ = nullptr;
  uint64_t weights_sum_ = 0;
  std::vector<uint64_t> round_;  // the mask seed of each call of the round
};

/**
 * What every GEMM-ABI task says the same way: one output C, a timed call is `run`, two checked calls
 * per seed, 32 timed calls per round with one kept (a kept C is read back and recomputed by the
 * reference: 64 MiB at M = 4096 fp32), host wall time informational, the replay guard's protocol.
 */
class GemmAbiTask : public Task {
 public:
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
  int kept_calls_per_round() const override { return 1; }
  /** {"calls": [{"n", "seed"}]}, its n exactly the picks in order (each below `calls`), each seed
   *  the one the ledger revealed for call n (`seeds`): any seed stages a valid A (gemm_call_a). */
  std::string replay_spec_error(const std::string&, const nlohmann::json& spec, int calls, const std::vector<int>& picks,
                                const std::vector<uint64_t>& seeds) const override;
  /** host_blake3 of kept C as the device held it (re-encoded to bf16 when facts' c_dtype says so:
   *  the fp32 read back is exact, and a value with low bits set is no bf16's). */
  Digest kept_digest(const SafetensorsFile& timed, const std::string& call_name, const nlohmann::json& facts) const override;
  /** Staging reads the fixture's A and writes the call's (2 x M x K x 2 bytes, launch_sign_mask) and
   *  NaN-fills C; the digest reads C (M x N x gemm_c_bytes(facts) bytes). */
  WindowWork window_work(const std::string& config, const nlohmann::json& facts) const override;
  /** C in fp32 and in bf16. */
  std::vector<nlohmann::json> window_work_forms(const std::string&) const override {
    return {{{"c_dtype", "fp32"}}, {{"c_dtype", "bf16"}}};
  }
  bool host_wall_informational() const override { return true; }
  nlohmann::ordered_json timing_protocol() const override {
    return {{"inputs", "A with a fresh sign mask per call, its seed drawn by the grader's parent and revealed as the "
                       "call's window opens, A staged on the GPU and C NaN-filled inside the window"},
            {"outputs", "one call of every round, picked by the grader's parent after it returned, kept and re-checked against the reference"}};
  }
  SolutionLibrary::Abi abi() const override { return SolutionLibrary::Abi::Gemm; }

 protected:
  /**
   * The fp64 oracle path of calibrate for a GEMM: over the checked calls' A (gemm_call_a from the
   * fixture's `a0`, M x K, as a child stages them), `c(v, a)` is variant v's C on A `a` (v = -1:
   * the task's exact C); each variant's worst relative and element error against the exact one.
   */
  OracleErrors gemm_oracle_errors(const std::string& config, const uint16_t* a0, int64_t M, int64_t K,
                                  uint64_t check_seed, size_t variants,
                                  const std::function<std::vector<double>(int, const uint16_t*)>& c) const;
};

}  // namespace nibble
