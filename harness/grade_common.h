// grade_common.h: pieces the parent-side commands (grade, calibrate) share: child runs, fixtures,
// output comparison, formatting. Internal to harness/.
#pragma once

#include <chrono>
#include <cstdio>
#include <nlohmann/json.hpp>
#include <functional>
#include <iostream>
#include <string>
#include <utility>
#include <vector>

#include <memory>
#include <optional>

#include "fixtures/fixture.h"
#include "fixtures/tensor.h"
#include "harness/ledger.h"
#include "harness/process.h"
#include "harness/protocol.h"
#include "harness/task.h"
#include "harness/verdict.h"

namespace nibble {

using ordered_json = nlohmann::ordered_json;

/** Seconds since t0. */
double since(std::chrono::steady_clock::time_point t0);

/** Progress lines on stderr, unless quiet. */
struct Log {
  bool quiet;
  /** A line; ends a pending progress line first. */
  void operator()(const std::string& msg) const {
    if (quiet) return;
    if (progress_open) std::fprintf(stderr, "\n");
    progress_open = false;
    std::fprintf(stderr, "[nibble] %s\n", msg.c_str());
  }
  /** A progress line rewritten in place: only on a terminal, never with --quiet. */
  void progress(const std::string& line) const {
    if (quiet || !tty) return;
    std::fprintf(stderr, "\r[nibble]   %-60s", line.c_str());
    std::fflush(stderr);
    progress_open = true;
  }
  bool tty = false;
  mutable bool progress_open = false;
};

/** A memory file the parent created for a child (protocol.h), closed with this object. */
class Channel {
 public:
  explicit Channel(const std::string& name);
  ~Channel();
  Channel(const Channel&) = delete;
  Channel& operator=(const Channel&) = delete;
  int fd() const { return fd_; }
  /** A path that reopens this channel in this process (for readers that take a path). */
  std::string path() const { return "/proc/self/fd/" + std::to_string(fd_); }
  /** Whether the child wrote anything into it. */
  bool empty() const;

 private:
  int fd_;
};

/** The SHA-256 of the files the grade's children run (the nibble executable re-executed for each,
 *  the solution, the reference), taken at the start; before each child is started they are hashed
 *  again, so a child runs only the bytes the report names. */
class BinaryPins {
 public:
  /** Hashes `path` now, as `what` ("the solution"); throws std::runtime_error when unreadable. */
  void pin(const std::string& what, const std::string& path);
  /** "" while every pinned file still has its hash; else which one changed, for a person. */
  std::string changed() const;
  /** The hash taken for `path` ("" when not pinned). */
  std::string sha256(const std::string& path) const;
  /** {what: {path, sha256}} of every pin, and the rule, for the report. */
  ordered_json to_json() const;

 private:
  struct Pin {
    std::string what, path, sha256;
  };
  std::vector<Pin> pins_;
};

/** A child's end, the Result it left (none when it left nothing readable) and its output channels. */
struct ChildRun {
  std::string refused;  // not started: a pinned binary changed (BinaryPins::changed); exit is SpawnFailed
  ChildExit exit;
  std::optional<Result> result;
  std::shared_ptr<Channel> outputs, timed_outputs;
  std::shared_ptr<CallLedger> ledger;  // with timing: the parent's record of the timed calls
  std::string log_tail;
  bool completed() const { return exit.kind == ChildExit::Exited && exit.code == 0 && result && result->phase == "done"; }
  /** The last phase the child reported ("start" when none). */
  std::string phase() const { return result ? result->phase : "start"; }
  /** What went wrong, for a person: the child's error, else its end and log tail. */
  std::string describe_failure() const;
};

/**
 * --device N (grade, calibrate): the children see only GPU N of this host, through
 * CUDA_VISIBLE_DEVICES (the parent itself never touches CUDA): N counts the GPUs CUDA would list, or,
 * when CUDA_VISIBLE_DEVICES is already set, its entries (N = 1 with "2,3" is GPU 3). -1 changes
 * nothing. Returns what the report records ({index, cuda_visible_devices}); throws
 * std::invalid_argument for an N that names no GPU (device_number_problem).
 */
nlohmann::ordered_json select_device(int device);

/** How many GPUs --device numbers: CUDA_VISIBLE_DEVICES's entries when it is set (even empty: 0),
 *  else the GPUs NVML sees (nvidia-smi -L); 0 with `why` when NVML cannot say (no driver, or a
 *  container without NVML, where CUDA may still run: the grade's own probe then answers). */
int visible_device_count(std::string* why = nullptr);

/** Why GPU `device` (numbered as visible_device_count counts; `count` its answer) names none here,
 *  e.g. "CUDA_VISIBLE_DEVICES=2,3 lists 2 GPU(s), numbered from 0"; "" when it does, or when nothing
 *  can say (NVML absent and CUDA_VISIBLE_DEVICES unset). */
std::string device_number_problem(int device, int count);

/** NVML's view of the probed GPU (`uuid`) at the start: current SM and memory clocks and the compute
 *  processes of others on it, for the report's device section (empty object without NVML). */
nlohmann::ordered_json device_at_start(const std::string& uuid);

/** Runs `job` in a child (`nibble __child`, which enters the sandbox of `job.sandbox` first) with
 *  the parent's channels (and, with timing, its call ledger) and a watchdog of `timeout` seconds;
 *  with `pins`, only after they are checked (else nothing is started and ChildRun::refused says
 *  why). `wrapper`: an argv the child runs under (a profiler, profile.h). Never throws for
 *  anything the child does. */
ChildRun run_job_child(Job job, double timeout, const Log* log = nullptr, const std::string& what = "",
                       const BinaryPins* pins = nullptr, const std::vector<std::string>& wrapper = {});

/** The registry's task `task` with `config` checked, then `check_options()`; nullptr after printing
 *  "nibble <command>: <why>" when any of them throws (the caller exits 2: bad input). */
const Task* checked_task(const char* command, const std::string& task, const std::string& config,
                         const std::function<void()>& check_options);

/** Where a child's crash happened, from its log tail (the frames the child writes after
 *  kCrashFramesMarker before it dies of a fault or an abort): the first frame outside libc,
 *  "library(symbol+offset)", or "" when `exit` is no such death or the tail has no frames. */
std::string crash_site(const ChildExit& exit, const std::string& log_tail);

/** What the verdict needs to know of a candidate's end (judge's load, build and crash rules). */
void child_evidence(const ChildRun& c, const Task& task, Evidence* e);

/** The fixture of (task, config, seed): `given_dir`, or the cache (built when missing); verified
 *  by SHA-256 when `verify`. Returns the report's fixture entry; *dir_out and *manifest_out get the
 *  folder and its manifest. Throws std::invalid_argument for bad input (wrong fixture, other
 *  generator version), naming the command that makes the right one. */
ordered_json ensure_fixture(const Task& task, const std::string& config, uint64_t seed, const std::string& given_dir,
                            int threads, bool verify, const Log& log, std::string* dir_out, FixtureManifest* manifest_out);

/** How the fixture of (task, config, seed) in `dir`, with manifest `m` (whose file was re-hashed
 *  against it when `verified`, or made by this command when `built_now`), is trusted by its
 *  content, for the report's fixtures[].trust: its SHA-256 is the one the source pins ("pinned"),
 *  or, without a pin, the generator is rerun in memory on `threads` threads and makes that SHA-256
 *  ("rebuilt and compared"; *entry gets rebuild_seconds). Otherwise std::invalid_argument naming
 *  the file, the SHA-256 (and size, and differing tensors) it has and should have, and the command
 *  that rebuilds it (`given_dir`: the folder the user named, "" for the cache). */
std::string fixture_trust(const Task& task, const std::string& config, uint64_t seed, const std::string& dir,
                          const std::string& given_dir, const FixtureManifest& m, bool verified, bool built_now, int threads,
                          const Log& log, ordered_json* entry);

/** The provenance every nibble JSON document opens with (after nvbench's json_printer): schema
 *  and version, nibble version, UTC time, argv, git commit and dirty flag, host, task, config. */
ordered_json document_header(const std::string& schema, const std::vector<std::string>& argv, const std::string& task,
                             const std::string& config);

/** The task's bundled reference next to the nibble executable (<bin>/../lib), unless `given` names one. */
std::string bundled_reference(const std::string& exe, const Task& task, const std::string& given);

/** Throws std::invalid_argument unless `path` exists and starts with an ELF header (checked
 *  without loading it: the parent never dlopens a candidate), or is a Python module (.py) and this
 *  nibble has the Python shims. */
void check_solution_file(const std::string& path);

/** Throws std::invalid_argument, naming --reference, unless `path` exists, is a file and starts with
 *  an ELF header: a user's --reference is bad input (exit 2 before any work), not a grader failure. */
void check_reference_file(const std::string& path);

/** Throws std::runtime_error unless a file can be written atomically at `path`. */
void check_writable(const std::string& path);

/** Throws std::invalid_argument unless `seeds` is non-empty and has no seed twice. */
void check_seeds(const std::vector<uint64_t>& seeds);

/** What can be wrong with a calibration's options beyond its task and config, checked before any
 *  work (both task families): seeds present and distinct, --path gpu, cpu or auto, the table
 *  writable. Throws std::invalid_argument with the message for the user. */
struct CalibrateOptions;
void check_calibrate_options(const CalibrateOptions& opt);

/** What the device probe found: the device's facts, or why there is none; the probe child's sandbox. */
struct Probe {
  bool ok = false;
  ordered_json device;
  std::string why;               // !ok: what failed
  bool sandbox_refused = false;  // !ok because --require-sandbox and the sandbox has a gap (why says which)
  std::vector<SandboxLayer> layers;
};

/** The device probe in a child: its facts, the copy bandwidth when `measure_bandwidth`, a
 *  weight-read floor over `read_floor_bytes` when > 0, inside the sandbox every child gets
 *  (*sandbox). The throwaway probe of the riskiest layer: when the probe fails inside the user,
 *  network and IPC namespaces and succeeds without them, the namespaces are switched off in
 *  *sandbox, with the reason, for every later child of this run. */
Probe probe_device(bool measure_bandwidth, uint64_t read_floor_bytes, SandboxSpec* sandbox, bool require_sandbox = false,
                   const BinaryPins* pins = nullptr);

/** Calibration's path for `want` ("gpu", "cpu" or "auto", as check_calibrate_options allows):
 *  "gpu" when the probe finds a GPU, with its facts in *device (and *sandbox as probe_device left
 *  it); "cpu" for want "cpu" or for "auto" without a GPU; "" after printing why when want is
 *  "gpu" and no GPU answers (exit 2). */
std::string calibration_path(const std::string& want, const Log& log, ordered_json* device, SandboxSpec* sandbox,
                             const BinaryPins* pins = nullptr);

/** The report's "sandbox" block: whether it was required, each layer's state (as the child that
 *  ran the candidate, or else the probe, reported it) and the pinned binaries. */
ordered_json sandbox_section(const std::vector<SandboxLayer>& layers, const std::string& layers_from, bool required,
                             const BinaryPins& pins);

/** Calibration's GPU runs of one seed, each in a child process: the exact reference
 *  (`job` as given), then every name in `variants` (the same job with that variant), calling
 *  compare(i, variant run, exact run) after variant i (it may throw: the caller reports it); with
 *  `pins`, a child starts only after they are checked. Returns false after printing why when a
 *  child fails. */
bool run_variant_children(const Job& job, const std::vector<std::string>& variants,
                          double timeout_seconds, const Log& log,
                          const std::function<void(size_t, const ChildRun&, const ChildRun&)>& compare,
                          const BinaryPins* pins = nullptr);

/** The longest time limit an option may set, s (~11.6 days): the child's watchdog counts its
 *  deadline in int64 nanoseconds (overflowing past ~9.2e9 s) and runs the reference's replay under
 *  64 times the step limit, so a larger value would not mean "no limit" but a deadline in the past. */
inline constexpr double kMaxTimeoutSeconds = 1e6;

/** Everything about a grade's options that can be wrong, checked before any work (both task
 *  families): the solution file, --reference (an existing shared object), seeds (present,
 *  distinct, one with --fixture), report, --gbench-json and --history writable, --dump a folder,
 *  rounds sane, timeouts in (0, kMaxTimeoutSeconds]. Throws std::invalid_argument with the message
 *  for the user. */
struct GradeOptions;
void check_grade_options(const GradeOptions& opt);

/** The grade's fixture stage: each(seed) for every seed; an exception is bad input (a missing,
 *  wrong or corrupt fixture, its message naming the tensor and the rebuild command), printed as
 *  "nibble grade: fixture: ..." and answered 2 (GradeExit's kExitUsage); else 0. */
template <class F>
int fixture_stage(const std::vector<uint64_t>& seeds, F&& each) {
  try {
    for (uint64_t seed : seeds) each(seed);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "nibble grade: fixture: %s\n", e.what());
    return 2;
  }
  return 0;
}

/** The committed calibration table a decode grade of (task, config) shows its place in when no
 *  --calibration is given: reports/<gpu>/calibration-<config>.json of the source tree, the last
 *  of this task and config in folder order; "" when there is none. */
std::string committed_calibration(const std::string& task, const std::string& config);

/** --calibration FILE: a readable `nibble calibrate` table (schema "nibble.calibration", rows) of
 *  this task and config; std::invalid_argument naming what is wrong otherwise. */
void check_calibration_file(const std::string& path, const std::string& task, const std::string& config);

/** Where a command's human summary goes: stderr when its JSON output `out` is this process's
 *  stdout (--out /dev/stdout: the JSON alone on stdout, for a pipe), else stdout. */
std::ostream& summary_stream(const std::string& out);

/** printf("%.*g"). */
std::string fmt(double v, int prec = 3);
/** Current UTC time, ISO 8601. */
std::string utc_now();

}  // namespace nibble
