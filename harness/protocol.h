// protocol.h: what the grader's parent hands a child process and what it gets back.
//
// One hidden command, `nibble __child <job-fd>`, runs every child (candidate, reference, variant,
// device probe). The parent creates every channel: the job, the result and the output tensors are
// memory files (memfd) it opens before the fork and keeps; the child gets their descriptor numbers,
// never a path, so nothing it does to the file system can put words in its result or outputs. The
// result is rewritten after every phase, so a child that dies still leaves what it learnt.
#pragma once

#include <algorithm>
#include <cstdint>
#include <csignal>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "harness/ledger.h"
#include "harness/sandbox.h"

namespace nlohmann {
/** std::optional<T> as the value or null. */
template <class T>
struct adl_serializer<std::optional<T>> {
  static void to_json(json& j, const std::optional<T>& o) {
    if (o) j = *o;
    else j = nullptr;
  }
  static void from_json(const json& j, std::optional<T>& o) {
    if (j.is_null()) o.reset();
    else o = j.get<T>();
  }
};
}  // namespace nlohmann

namespace nibble {

/** Bumped on any change of Job, Result or the call ledger's messages; a child refuses a job of
 *  another version. 11: each timed call's span and the timed phase's audit committed to the
 *  ledger, the result sealed before the solution's teardown; 12: the host's launch time, the
 *  ledger's first message. */
inline constexpr int kProtocolVersion = 12;

/** The line a child that a fatal signal ends writes to its stderr before the frames of the crash
 *  (library or executable, offset), one a line, the crash's own frame first. */
inline constexpr const char* kCrashFramesMarker = "nibble __child: fatal signal; its frames, the crash's first:";
/** The signals a child writes a crash's frames for before it dies of them (a fault, an abort). */
inline constexpr int kCrashSignals[] = {SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT};

/** How `nibble grade` records a CUDA graph's launch unless --graph-records says otherwise: "graphs",
 *  one GRAPH_TRACE record per launch (cupti_timer.h GraphRecords). Per-node records add GPU time to
 *  every node: the PyTorch anchors (~2,000 kernels a step in a graph) graded 18-27% slower by nodes
 *  than whole on an H100, and the hostile suite gave every row its verdict either way
 *  (reports/h100/session20-2e1e344/, reports/h100/session21-705fee0/). A report without
 *  timing.graph_records (schema before 2.5) was recorded by nodes. */
inline constexpr char kDefaultGraphRecords[] = "graphs";

/** The timed rounds a candidate runs (after its checked calls). */
struct TimingJob {
  int calls_per_round = 32;
  int min_rounds = 3, max_rounds = 20;
  double max_seconds = 120;
  double stable_fraction = 0.005;  // stop once the median moves less than this between rounds
  std::string clock = "span";      // the figure whose median must settle: "span" (GPU span) or "wall" (host wall time)
  // --timing-seed: every timed call's randomness from this seed (reproducible, so predictable);
  // none: each draw from the OS when it is needed, after the build.
  std::optional<uint64_t> seed;
  // Read by the parent's call ledger (ledger.h), not the child: how many calls of each round it
  // keeps for the reference, and the GPU (UUID) whose clocks it samples through NVML.
  int kept_per_round = 1;
  std::string gpu_uuid;
  // --graph-records: how a CUDA graph's launch is recorded, "nodes" or "graphs" (cupti_timer.h
  // GraphRecords).
  std::string graph_records = kDefaultGraphRecords;
};
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(TimingJob, calls_per_round, min_rounds, max_rounds, max_seconds,
                                                stable_fraction, clock, seed, kept_per_round, gpu_uuid, graph_records)

/** What one child does. kind "run": one solution on one fixture; kind "probe": the device; kind
 *  "load": the solution opened and nothing more (no CUDA: nibble grade where no GPU answers). */
struct Job {
  int protocol = kProtocolVersion;
  std::string kind = "run";
  std::string task, config;
  std::string solution;       // .so path, or a Python solution's .py
  // A Python solution: the shim .so the child loads in its place (python_solution.h), and the folder
  // (under /dev/shm, made and removed by the parent) that is its TMPDIR and Triton's cache.
  std::string python_shim, python_scratch;
  std::string fixture_dir;    // holds model.safetensors
  std::string variant;        // the bundled reference's variant ("" = exact)
  bool police = true;         // side-effect checks (variants of our own reference are measured, not policed)
  int checked_calls = 0;
  uint64_t check_seed = 0;    // the checked calls' randomness (GEMM: A's sign masks after call 0)
  std::optional<TimingJob> timing;
  // --profile: after the checked calls, this many calls of the timed entry point, each inside an
  // NVTX range "nibble_call" (the profiler's filter), without CUPTI (the profiler's subscriber).
  int profile_calls = 0;
  nlohmann::json replay;  // a candidate's Result::replay: recompute its kept timed calls
  double build_timeout_seconds = 600;  // build_model / prepare / teardown
  double call_timeout_seconds = 20;    // one call plus the device sync after it
  // probe
  bool measure_bandwidth = true;
  uint64_t read_floor_bytes = 0;
  // Descriptors the child writes (memfds the parent created): result JSON, outputs of the checked
  // (and replayed) calls, outputs of the kept timed calls (safetensors).
  int result_fd = -1, outputs_fd = -1, timed_outputs_fd = -1;
  // With timing: the call ledger's pipes (ledger.h), the answers to read and the messages to write.
  int ledger_read_fd = -1, ledger_write_fd = -1;
  // The child's sandbox (sandbox.h); with require_sandbox, a child whose sandbox has a gap refuses
  // to run anything (error kind "sandbox").
  SandboxSpec sandbox;
  bool require_sandbox = false;
};
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(Job, protocol, kind, task, config, solution, python_shim, python_scratch,
                                                fixture_dir, variant, police,
                                                checked_calls, check_seed, timing, profile_calls, replay, build_timeout_seconds,
                                                call_timeout_seconds, measure_bandwidth, read_floor_bytes, result_fd,
                                                outputs_fd, timed_outputs_fd, ledger_read_fd, ledger_write_fd, sandbox,
                                                require_sandbox)

/** Why a child stopped early. kind: load, solution, cuda, harness, timeout, input_modified, sandbox. */
struct ChildError {
  std::string kind, message;
  std::string load_kind;     // load: NotFound, NotLoadable, MissingSymbol, AbiMismatch
  std::string call;          // solution/timeout: the entry point
  std::string status;        // solution: the nibble_status name
  std::string tensor;        // input_modified: what changed
  std::string during_phase;
};
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(ChildError, kind, message, load_kind, call, status, tensor, during_phase)

/** The output prefix of timed round `round`'s calls: call n's outputs are "<prefix><n>.<output>",
 *  in the candidate's kept outputs, the reference's replay and the parent's picks alike. */
inline std::string timed_round_prefix(int round) { return "timed" + std::to_string(round) + "-"; }
inline std::string timed_call_name(int round, int call) { return timed_round_prefix(round) + std::to_string(call); }

/** The timed rounds' record: one entry per timed call in the sample vectors. */
struct TimingResult {
  std::optional<uint64_t> seed;
  std::string seed_from;
  int calls_per_round = 0, rounds = 0;
  std::string stop_reason;
  int invalid_samples = 0;
  std::string invalid_reason;
  int nonfinite_calls = 0;            // timed calls whose checked outputs held NaN/Inf
  int gaps_with_foreign_work = 0;     // gaps between timed calls with GPU work beyond the harness's
  std::string foreign_work;           // what those gaps held: "3 kernels, 1 memcpy"
  int foreign_records_before_build = 0;  // of those, records in the dry gap before the build (load-time code)
  int harness_records_per_gap = 0;
  int late_kernels = 0;
  int launches_audited = 0;           // kernel and graph launches from the first gap to the audit's own launch after the timed calls
  int unrecorded_launches = 0;        // of those, launches that left no CUPTI record (records switched off)
  std::string first_unrecorded_launch;  // its API, e.g. "cudaLaunchKernel_v7000"
  bool launch_callbacks_lost = false; // the harness's own launch after the timed calls was not seen
  int64_t dropped_records = 0;        // activity records CUPTI dropped from the first gap on (no buffer)
  int copies_audited = 0;             // copy and memset calls over the same phase
  int unrecorded_copies = 0;          // of those, calls no record carries the correlation id of
  std::string first_unrecorded_copy;  // its API, e.g. "cuMemcpyAsync"
  int device_launch_graphs = 0;       // graphs the solution instantiated for launch from the GPU (LaunchAudit)
  int graph_launches_audited = 0;     // of launches_audited, the graph launches (LaunchAudit::graph_launches)
  std::vector<double> gpu_span_us, busy_us, host_wall_us;
  std::vector<int> kernels, memcpys, memsets;
  std::vector<int> graphs;            // graph launches recorded whole (--graph-records graphs)
  std::vector<std::string> kept;      // the calls whose outputs were kept, "timed<round>-<call>"
  nlohmann::json task_figures;  // e.g. decode: the position of every call
};

/** The audit counts of `tr`, as the child commits them to the call ledger (TimingAudit) and the
 *  parent compares them with the result's. */
inline TimingAudit timing_audit(const TimingResult& tr) {
  TimingAudit a;
  a.invalid_samples = tr.invalid_samples;
  a.gaps_with_foreign_work = tr.gaps_with_foreign_work;
  a.late_kernels = tr.late_kernels;
  a.unrecorded_launches = tr.unrecorded_launches;
  a.unrecorded_copies = tr.unrecorded_copies;
  a.launch_callbacks_lost = tr.launch_callbacks_lost ? 1 : 0;
  a.device_launch_graphs = tr.device_launch_graphs;
  a.dropped_records = int32_t(std::min<int64_t>(tr.dropped_records, INT32_MAX));
  return a;
}
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(TimingResult, seed, seed_from, calls_per_round, rounds, stop_reason,
                                                invalid_samples, invalid_reason, nonfinite_calls, gaps_with_foreign_work,
                                                foreign_work, foreign_records_before_build, harness_records_per_gap,
                                                late_kernels, launches_audited, unrecorded_launches,
                                                first_unrecorded_launch, launch_callbacks_lost, dropped_records, copies_audited,
                                                unrecorded_copies, first_unrecorded_copy, device_launch_graphs, graph_launches_audited, gpu_span_us, busy_us, host_wall_us, kernels, memcpys, memsets, graphs, kept,
                                                task_figures)

/** What a child says, rewritten after every phase: opened, built, checked, timed, done (or failed). */
struct Result {
  int protocol = kProtocolVersion;
  std::string phase = "start";
  std::string solution_name, numerics, variant;
  nlohmann::json facts;        // task-specific facts of the solution (GEMM: c_dtype)
  std::optional<ChildError> error;
  int checked_calls_done = 0;
  std::optional<TimingResult> timing;
  nlohmann::json replay;       // what the reference needs to recompute the kept timed calls:
                               // [{"prefix": "timed<round>-", "spec": <the task's>}], one per round
  nlohmann::json seconds;      // per phase
  nlohmann::json probe;        // kind probe: the device's facts
  std::vector<SandboxLayer> sandbox;  // every layer of the child's sandbox and its state, from phase "start" on
};
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(Result, protocol, phase, solution_name, numerics, variant, facts, error,
                                                checked_calls_done, timing, replay, seconds, probe, sandbox)

/** The child's Result from its channel's text, which a candidate may have written itself (it shares
 *  the child's process): parsed with a depth bound (parse_json_bounded), where nlohmann's recursive
 *  copies and conversions of a 200,000-level document (400 KB, under the channel's size cap)
 *  overflowed the parent's stack; throws a std::exception when it is not a Result. */
Result parse_child_result(const std::string& text);

/** A memory file (memfd, close-on-exec, sealable) named for /proc listings; throws std::runtime_error. */
int make_channel(const std::string& name);
/** The whole content of `fd` from offset 0; throws std::runtime_error, also when it holds more than
 *  `max_bytes` (a child that grew its result to fill the parent's memory). */
std::string read_channel(int fd, size_t max_bytes = size_t(64) << 20);
/** Seal `fd` against any later write, truncation or growth (F_SEAL_WRITE, SHRINK, GROW, SEAL): what
 *  the child wrote last is what the parent reads, whatever solution code runs after. */
void seal_channel(int fd);
/** Replace the content of `fd` with `data` (truncate, then write from offset 0). */
void write_channel(int fd, const std::string& data);

}  // namespace nibble
