// task.h: everything task-specific, behind one interface, and the registry that lists the tasks.
//
// The generic harness (grade, the child, calibrate, fixture, report, compare) asks the registry
// for a Task by name and never names one. A task family lives in its own subfolder of harness/,
// fixtures/, reference/, solutions/ and tests/ (decode, gemm_fp4); docs/adding-a-task.md lists the
// files a new one adds.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "fixtures/fixture.h"
#include "fixtures/safetensors.h"
#include "fixtures/tensor.h"
#include "harness/anchors.h"
#include "harness/hash.h"
#include "harness/protocol.h"
#include "harness/solution_library.h"

namespace nibble {

/** Output tensors of a child, kept for the parent: `<call>.<output>`, e.g. call0.logits, timed3.C. */
struct OutputFile {
  std::vector<std::vector<uint8_t>> blobs;
  std::vector<TensorView> views;
  void add(const std::string& name, DType dt, std::vector<int64_t> shape, const void* data, size_t n);
  /** The whole set as one safetensors file written into `fd` (a parent's channel), then sealed. */
  void write(int fd, const std::string& solution);
  void clear() {
    blobs.clear();
    views.clear();
  }
};

/**
 * One solution driven through its task's ABI inside a child process. Every method that calls into
 * the solution throws SolutionError (decode_session.h) for a non-OK status; CUDA failures throw
 * CudaError. The child runner (harness/child.cpp) arms its watchdog around each call, times call()
 * and judges nothing itself: what a method finds goes into the Result.
 */
class Session {
 public:
  virtual ~Session() = default;
  /** build_model / prepare, the device synchronised after it. */
  virtual void build() = 0;
  /** Checked call i (0 ..): staged, called, synchronised; its outputs added as "call<i>.<output>".
   *  Returns "" or what the call changed that it may not (then the child stops: input_modified). */
  virtual std::string checked_call(int i, OutputFile& out) = 0;
  /** Stage timed call `n` of a round from `seed` (inputs written, outputs poisoned, the harness's
   *  stream synchronised). The seed is the call ledger's reveal, drawn by the grader's parent when
   *  the call's window opened, so staging runs inside the window: GPU work on the harness's stream
   *  only, no host loop over the inputs. */
  virtual void stage_timed(int n, uint64_t seed) = 0;
  /** The solution's call alone (the child syncs the device after it, inside the timing window). */
  virtual void call() = 0;
  /** After a timed call (device synchronised), inside its window: device_blake3 of the outputs
   *  timed_outputs() would keep, as they are on the device, the commitment the child sends with
   *  "done" (Task::kept_digest recomputes it from what is read back). */
  virtual Digest timed_digest() = 0;
  /** After a timed call: whether its outputs are finite (checked on every kept call at least),
   *  and when `keep`, its outputs added as "<call_name>.<output>". */
  virtual bool timed_outputs(const std::string& call_name, bool keep, OutputFile& out) = 0;
  /** After each timed call, outside the window: "" or what the call changed that it may not. Every
   *  call gets the cheap checks (the token ids); an `audit` (a call the grader picked to keep, so
   *  unpredictable to the solution) gets the costly ones too (caches beyond the positions written
   *  so far). The child also re-checks inputs_changed() after an audited call. */
  virtual std::string after_timed_call(bool audit) { (void)audit; return ""; }
  /** After the timed rounds: "" or what they changed that they may not (the caches above the last
   *  position). Once, not per round: its kernels would be GPU work in a gap between timed calls. */
  virtual std::string after_timing() { return ""; }
  /** What the reference needs to recompute calls `kept` of the round just ended (called at the end
   *  of every round, before the next one is staged). */
  virtual nlohmann::json replay_spec(const std::vector<int>& kept) const = 0;
  /** Reference side: recompute the kept calls of one round's `spec` into "<prefix><n>.<output>". */
  virtual void replay(const nlohmann::json& spec, const std::string& prefix, OutputFile& out) = 0;
  /** "" when every read-only input (weights, caches' prefix, ...) is unchanged, else its name. */
  virtual std::string inputs_changed() = 0;
  /** The harness's own work between two timed calls but the flush (staging, the digest), run once
   *  before the solution is built so the timer can count it (TimedCalls). */
  virtual void dry_gap() = 0;
  /** teardown; throws SolutionError. */
  virtual void teardown() = 0;
  /** Facts of the solution the report shows (GEMM: the output dtype it chose). */
  virtual nlohmann::json facts() const { return nlohmann::json::object(); }
  /** Per-call figures of the timed rounds the report keeps (decode: positions). */
  virtual nlohmann::json timing_figures() const { return nlohmann::json(); }
};

/** One drop-the-feature variant of the bundled reference (calibrate's table). */
struct TaskVariant {
  std::string name, description;
  bool must_pass = false;
  std::string caught_by;  // which outputs are expected to catch it ("" for must-pass rows)
};

/** What one config of a task moves and computes per timed sample (the roofline). */
struct Roofline {
  double bytes = 0, flops = 0;
  std::string bytes_note;
};

/** The harness's own GPU work inside one timed window (Task::window_work), in bytes. */
struct WindowWork {
  uint64_t staged_bytes = 0;    // written (and read) on the device to stage the inputs and poison the outputs
  uint64_t uploaded_bytes = 0;  // of those, copied from host memory (the decode step's token ids)
  uint64_t digested_bytes = 0;  // the outputs checksummed for the ledger's commitment
  uint64_t masked_bytes = 0;    // of the staged, a bf16 tensor launch_sign_mask writes from the fixture's (read as much)
  bool operator==(const WindowWork& o) const {
    return staged_bytes == o.staged_bytes && uploaded_bytes == o.uploaded_bytes && digested_bytes == o.digested_bytes &&
           masked_bytes == o.masked_bytes;
  }
};

/** Per-variant, per-call errors of the fp64 oracle path of calibrate. */
struct OracleErrors {
  std::vector<std::string> outputs;                 // output names, e.g. logits, k_appended, v_appended
  std::vector<std::vector<double>> per_variant;     // [variant][output] worst relative error
  std::vector<std::vector<double>> elem_per_variant;  // [variant][output] worst element error
};

/**
 * Everything that makes a task. Implementations: harness/decode/decode_task.cpp,
 * harness/gemm_fp4/gemm_task.cpp. Methods taking a config throw std::invalid_argument for a config
 * the task does not know (check_config says so first).
 */
class Task {
 public:
  virtual ~Task() = default;
  /** The registry name (--task). */
  virtual std::string name() const = 0;
  /** The subfolder of the task family in harness/, fixtures/, reference/, solutions/, tests/. */
  virtual std::string family() const = 0;
  virtual std::string description() const = 0;
  /** The configs `nibble configs` lists and calibrate tables exist for. */
  virtual std::vector<std::string> official_configs() const = 0;
  /** The config grade and calibrate use without --config ("" = the user must name one). */
  virtual std::string default_config() const { return ""; }
  /** What --config accepts, for help and errors ("full | tiny", "tiny | m<M>-n<N>-k<K>"). */
  virtual std::string config_syntax() const = 0;
  /** Throws std::invalid_argument, naming what is accepted, unless the task knows `config`. */
  virtual void check_config(const std::string& config) const = 0;
  /** The config's dimensions for the report. */
  virtual nlohmann::ordered_json config_dims(const std::string& config) const = 0;
  /** The tensors of the fixture, in file order. */
  virtual std::vector<TensorSpec> tensors(const std::string& config) const = 0;
  /** Builds the fixture of (config, seed) into `dir` (deterministic bytes) and its manifest. */
  virtual FixtureManifest build_fixture(const std::string& config, uint64_t seed, const std::string& dir, int threads,
                                        const ProgressFn& progress) const = 0;
  /** The manifest build_fixture would write for (config, seed), every hash computed from the
   *  generated bytes in memory, nothing written: what a fixture without a pinned SHA-256 is
   *  compared with (the same generation, and host memory, as build_fixture). */
  virtual FixtureManifest generate_fixture_manifest(const std::string& config, uint64_t seed, int threads,
                                                    const ProgressFn& progress) const = 0;
  /** The whole-file SHA-256 the generator makes for (config, seed), when the source pins it. */
  virtual std::optional<std::string> pinned_fixture_sha256(const std::string& /*config*/, uint64_t /*seed*/) const {
    return std::nullopt;
  }
  /** The gate: worst relative error allowed over every checked output. */
  virtual double gate(const std::string& config) const = 0;
  /** The per-element guard (max |out - ref| / max |ref| per output), none until calibrated. */
  virtual std::optional<double> element_guard(const std::string& config) const = 0;
  /** The error metric in words, for the report. */
  virtual std::string error_metric() const = 0;
  /** The outputs the gate covers (names after "call<i>."), in report order. */
  virtual std::vector<std::string> outputs() const = 0;
  /** What one timed sample is: "token" (one decode step) or "call". */
  virtual std::string unit() const = 0;
  /** The entry points' names for messages: the build ("build_model", "prepare"), the timed call. */
  virtual std::string build_call() const = 0;
  virtual std::string timed_call() const = 0;
  /** Checked calls per seed. */
  virtual int checked_calls(const std::string& config) const = 0;
  /** What is wrong with `spec`, one timed round's replay spec (Session::replay_spec's form) as a
   *  candidate's child wrote it, for this config, a round of `calls` calls, the calls `picks` the
   *  grader's ledger kept of it (ascending) and the seeds it revealed for the round's calls (in
   *  order); "" when it replays exactly those calls on exactly those seeds' inputs, safely. The
   *  candidate shares its child's process and can write that spec itself: the parent checks it
   *  before handing it to the reference (the decode replay checks it again: a step past the KV cache
   *  or a token past the vocabulary would write out of bounds). */
  virtual std::string replay_spec_error(const std::string& config, const nlohmann::json& spec, int calls,
                                        const std::vector<int>& picks, const std::vector<uint64_t>& seeds) const = 0;
  /** The digest Session::timed_digest() committed for kept call `call_name`, recomputed on the host
   *  from its outputs as read back into `timed` (the child's timed-outputs file); `facts` are the
   *  solution's (GEMM: its C dtype, which the device bytes had). Throws std::runtime_error when the
   *  call's outputs are not there in the task's form. */
  virtual Digest kept_digest(const SafetensorsFile& timed, const std::string& call_name, const nlohmann::json& facts) const = 0;
  /** Bytes the harness itself writes (staging: inputs and poisoned outputs) and checksums (the
   *  digest) inside each timed window of a solution with these `facts` (Session::facts(); a GEMM's C
   *  dtype sets the bytes), for the ledger's calibration windows, which move as many before any
   *  solution code runs. */
  virtual WindowWork window_work(const std::string& config, const nlohmann::json& facts) const = 0;
  /** The facts whose window_work differ, one per form a solution may take: the calibration windows
   *  run before the solution is loaded, so they mirror each form in turn (window i the form
   *  i % size) and the grader credits those of the solution's own (calibration_overheads_us). */
  virtual std::vector<nlohmann::json> window_work_forms(const std::string&) const { return {nlohmann::json::object()}; }
  /** Timed calls per round. */
  virtual int calls_per_round() const = 0;
  /** Calls of every round the grader keeps and has the reference re-check, picked by the parent
   *  after each call returned (ledger.h): one in eight by default. */
  virtual int kept_calls_per_round() const { return std::max(1, calls_per_round() / 8); }
  /** Bytes and FLOPs one timed sample moves and computes, given the solution's facts. */
  virtual Roofline roofline(const std::string& config, const nlohmann::json& facts) const = 0;
  /** Bytes of a read-only kernel the probe times as this task's weight-read floor (0: none). */
  virtual uint64_t read_floor_bytes(const std::string& /*config*/) const { return 0; }
  /** Whether host wall time per sample is launch noise (small GEMMs): compare does not judge it. */
  virtual bool host_wall_informational() const { return false; }
  /** What a timed call does, for the report's protocol section. */
  virtual nlohmann::ordered_json timing_protocol() const = 0;
  /** The bundled reference's file name in <prefix>/lib. */
  virtual std::string reference_library() const = 0;
  virtual SolutionLibrary::Abi abi() const = 0;
  /** Child side: the fixture uploaded, the session ready to build `lib`. */
  virtual std::unique_ptr<Session> open_session(const Job& job, const SolutionLibrary& lib, const SafetensorsFile& fixture,
                                                cudaStream_t stream, cudaStream_t harness_stream) const = 0;
  /** The drop-the-feature variants of the bundled reference and the fp64 oracle. */
  virtual std::vector<TaskVariant> variants() const = 0;
  /** fp64 multiply-adds of the oracle path (the exact run and every variant, every checked call), per seed. */
  virtual double oracle_macs(const std::string& config) const = 0;
  /** The fp64 oracle path of calibrate: every variant's worst error per output against the exact
   *  oracle, over the same checked calls a child runs with this `check_seed`. */
  virtual OracleErrors oracle_errors(const std::string& config, const SafetensorsFile& fixture, uint64_t check_seed,
                                     int threads) const = 0;
  /** The seed's error table for the HTML page when a report has no calibration. */
  virtual std::vector<ErrorAnchor> error_anchors(const std::string& /*config*/) const { return {}; }
  /** The bundled solutions a leaderboard measures the others against, as their reports name them
   *  (nibble_solution_name): the plain baseline and the reference an author wants to beat. Empty
   *  for a task without any. */
  virtual std::vector<std::string> baseline_solutions() const { return {}; }
};

class CallLedger;

/** Why the replay spec a candidate's child wrote (Result::replay: [{"prefix": "timed<round>-", "spec"}],
 *  one per timed round, in order) may not go to the reference, or "": the candidate can write it
 *  itself, so it must be one per round the parent's ledger saw, each replaying exactly the ledger's
 *  picks of that round on the inputs of the seeds it revealed, within the task's bounds
 *  (Task::replay_spec_error): checked before the reference runs (a spec of thousands of calls would
 *  hold it until its timeout). */
std::string replay_error(const Task& task, const std::string& config, const nlohmann::json& replay, const CallLedger& ledger);

/** "" when every kept call's outputs as read back (`timed`, the child's timed-outputs file) have the
 *  digest its "done" committed to the ledger (Task::kept_digest, `facts` the solution's), else the
 *  first call whose outputs changed after its window closed, or that cannot be read: outputs
 *  computed after the window closed. */
std::string kept_digest_error(const Task& task, const SafetensorsFile& timed, const CallLedger& ledger, const nlohmann::json& facts);

/** The ledger's overhead in each calibration window that mirrored the window work of a solution
 *  with these `facts` (window i mirrors Task::window_work_forms(config)[i % forms]): its window on
 *  the grader's clock (`window_us`) less its harness kernel's GPU span (`span_us`, CUPTI's, sent
 *  by the child over the ledger before the solution was loaded; LedgerCall::span_us), in us. Left
 *  out: each form's first window (it warms up: module loading, first allocations), and a span
 *  outside (0, window] (0: none recorded); none when the two lists differ in length or no form's
 *  window work is the solution's (nothing measured it). */
std::vector<double> calibration_overheads_us(const Task& task, const std::string& config, const nlohmann::json& facts,
                                             const std::vector<double>& window_us, const std::vector<double>& span_us);

/** Every task, in `nibble configs` order. */
const std::vector<const Task*>& all_tasks();
/** The task named `name`; throws std::invalid_argument listing the known tasks. */
const Task& find_task(const std::string& name);
/** nullptr when no task has that name. */
const Task* task_or_null(const std::string& name);

}  // namespace nibble
