// child.cpp: `nibble __child`, the grader's child process (see child.h and protocol.h).
#include "harness/child.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <nvtx3/nvToolsExt.h>
#include <execinfo.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <random>
#include <string_view>
#include <nlohmann/json.hpp>

#include "fixtures/fixture.h"
#include "fixtures/safetensors.h"
#include "harness/child_support.h"
#include "harness/cuda_check.h"
#include "harness/cupti_timer.h"
#include "harness/gpu_checks.h"
#include "harness/ledger.h"
#include "harness/profile.h"
#include "harness/process.h"
#include "harness/protocol.h"
#include "harness/python_solution.h"
#include "harness/sandbox.h"
#include "harness/solution_library.h"
#include "harness/stats.h"
#include "harness/task.h"

namespace nibble {

using namespace nibble::child;

namespace {

ChildError error_of(const char* kind, const std::string& message) {
  ChildError e;
  e.kind = kind;
  e.message = message;
  return e;
}

/** The error of a child whose job requires a complete sandbox that this one is not. */
ChildError sandbox_error(const std::string& gaps) {
  return error_of(kErrSandbox, "--require-sandbox: the child's sandbox could not be completed on this machine: " + gaps);
}

/** Opens the job's solution as every job that runs it does: its library (a Python solution's
 *  family shim stands in for the .so, and the module named to it is imported under the watchdog),
 *  its name and numerics in the result, phase "opened" (a crash in the build still leaves the
 *  name). Returns 0, or the child's exit code after recording the failure (a load error: 4). */
int open_solution(ResultWriter& out, CallWatchdog& watchdog, const Job& job, const Task& task,
                  std::unique_ptr<SolutionLibrary>* lib) {
  const bool python = !job.python_shim.empty();
  // A solution of the other family is told the tasks it is for.
  std::string other_tasks;
  for (const Task* t : all_tasks())
    if (t->abi() != task.abi()) other_tasks += (other_tasks.empty() ? "" : ", ") + t->name();
  const std::string other_family_hint = other_tasks.empty() ? "" : ": grade it with --task " + other_tasks;
  try {
    *lib = std::make_unique<SolutionLibrary>(python ? job.python_shim : job.solution, task.abi());
  } catch (const LoadError& e) {
    ChildError err = error_of(kErrLoad, std::string(e.what()) + (e.other_abi ? other_family_hint : ""));
    err.load_kind = load_kind_name(e.kind);
    return out.fail(err, 4);
  }
  if (python)
    if (const int code = load_python_module(out, watchdog, **lib, job.solution, job.build_timeout_seconds, other_family_hint))
      return code;
  out.r.solution_name = (*lib)->name();
  out.r.numerics = (*lib)->numerics();
  out.phase("opened");
  return 0;
}

/** Every job that opens a solution starts so: daemons the solution starts (setsid, double fork)
 *  reparent to this process, which kills them before every write of its results
 *  (ResultWriter::phase); the sandbox's state in the result (phase "start") before any solution code
 *  runs. The job's task, or nullptr with *code the exit code after recording why. */
const Task* start_job(ResultWriter& out, const Job& job, const std::vector<SandboxLayer>& layers, const std::string& gaps,
                      int* code) {
  prctl(PR_SET_CHILD_SUBREAPER, 1);
  out.r.sandbox = layers;
  if (!gaps.empty()) return *code = out.fail(sandbox_error(gaps), 3), nullptr;
  out.phase("start");
  const Task* task = task_or_null(job.task);
  if (!task) *code = out.fail(error_of(kErrHarness, "unknown task '" + job.task + "'"), 3);
  return task;
}

/** A "load" job (nibble grade where no GPU answers): the solution opened as a run opens it, in the
 *  same sandbox, and nothing more (no CUDA, no fixture): phase "done", or the load error. */
int load_job(const Job& job, const std::vector<SandboxLayer>& layers, const std::string& gaps) {
  ResultWriter out{job.result_fd, Result{}, {}};
  int code = 0;
  const Task* task = start_job(out, job, layers, gaps, &code);
  if (!task) return code;
  std::unique_ptr<SolutionLibrary> lib;
  CallWatchdog watchdog(&out);
  if ((code = open_solution(out, watchdog, job, *task, &lib))) return code;
  out.phase("done");
  return 0;
}

/** One solution (candidate, reference or variant) through the job: build, checked calls, the
 *  reference's replay of a candidate's kept timed calls, the timed rounds, teardown. `layers`: the
 *  sandbox this process is in; `gaps`: what is missing of it when the job requires it whole. */
int run_job(const Job& job, const std::vector<SandboxLayer>& layers, const std::string& gaps) {
  ResultWriter out{job.result_fd, Result{}, {}};
  int start_code = 0;
  const Task* task = start_job(out, job, layers, gaps, &start_code);
  if (!task) return start_code;
  const auto t_start = std::chrono::steady_clock::now();
  nlohmann::json secs = nlohmann::json::object();

  std::unique_ptr<SafetensorsFile> fixture;
  cudaStream_t stream = nullptr, harness_stream = nullptr;
  // Timing's CUPTI subscription and flush, and the call ledger's calibration windows around a
  // harness kernel (window - span: the ledger's own overhead), before the solution is loaded: a
  // library's constructors and a Python module's import are solution code, which could slow the
  // windows to inflate the overhead credited to every timed call (verdict.h caps the credit too).
  std::unique_ptr<TimedCalls> timed;
  std::unique_ptr<LedgerClient> ledger;
  try {
    if (job.timing && parse_graph_records(job.timing->graph_records) == GraphRecords::Graphs)
      enable_device_graph_records();  // before CUDA starts, or CUPTI ignores it
    NIBBLE_CUDA_CALL(cudaSetDevice(0));
    NIBBLE_CUDA_CALL(cudaFree(nullptr));  // create the context before anything is timed
    fixture = std::make_unique<SafetensorsFile>(job.fixture_dir + "/" + kFixtureModelFile);
    NIBBLE_CUDA_CALL(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    NIBBLE_CUDA_CALL(cudaStreamCreateWithFlags(&harness_stream, cudaStreamNonBlocking));
    if (job.timing) {
      const std::optional<GraphRecords> graphs = parse_graph_records(job.timing->graph_records);
      if (!graphs) throw std::runtime_error("job: graph_records \"" + job.timing->graph_records + "\" is neither nodes nor graphs");
      ledger = std::make_unique<LedgerClient>(job.ledger_read_fd, job.ledger_write_fd);
      // The host's launch cost, before CUPTI subscribes (its callbacks would add theirs): what a
      // launch-bound solution's time off the GPU scales with (hidden_time_allowance_us).
      ledger->host(host_launch_us(harness_stream));
      timed = std::make_unique<TimedCalls>(harness_stream, *graphs);
      // Each window does the harness's part of a timed window (the timed loop below): the flush,
      // the seed's round trip, staging's bytes, the call's device sync, the digest's pass.
      // A window per form the solution's window may take, in turn (calibration_overheads_us).
      // Scratch laid out as a timed window's: the masked tensor's source and copy (a GEMM's A0 and
      // A), then the outputs, NaN-filled (memset) and the ids uploaded over their start, and the
      // digest reads those outputs back, as a timed window's reads what the solution wrote there.
      std::vector<WindowWork> forms;
      uint64_t scratch = 8, uploaded = 0;
      const std::vector<nlohmann::json> form_facts = task->window_work_forms(job.config);
      if (form_facts.empty()) throw std::logic_error("task " + job.task + " names no window-work form");
      for (const nlohmann::json& f : form_facts) {
        const WindowWork w = task->window_work(job.config, f);
        if (w.masked_bytes % 2 || 2 * w.masked_bytes > w.staged_bytes)
          throw std::logic_error("window work of " + job.task + ": the masked bf16 tensor is not within the staged bytes");
        forms.push_back(w);
        scratch = std::max({scratch, w.staged_bytes, 2 * w.masked_bytes + w.digested_bytes, 2 * w.masked_bytes + w.uploaded_bytes});
        uploaded = std::max(uploaded, w.uploaded_bytes);
      }
      DeviceBuffer probe(size_t(1) << 20), staged(scratch);
      std::vector<uint8_t> upload(uploaded);
      for (int i = 0; i < kLedgerCalibrationWindows; ++i) {
        const WindowWork& ww = forms[size_t(i) % forms.size()];
        uint8_t* const outputs = static_cast<uint8_t*>(staged.get()) + 2 * ww.masked_bytes;
        timed->flush();
        const uint64_t seed = ledger->open(-1, i);
        if (ww.masked_bytes)
          launch_sign_mask(static_cast<const uint16_t*>(staged.get()), reinterpret_cast<uint16_t*>(outputs) - ww.masked_bytes / 2,
                           int64_t(ww.masked_bytes / 2), seed, 1, harness_stream);
        NIBBLE_CUDA_CALL(cudaMemsetAsync(outputs, 0xFF, ww.staged_bytes - 2 * ww.masked_bytes, harness_stream));
        if (ww.uploaded_bytes)
          NIBBLE_CUDA_CALL(cudaMemcpyAsync(outputs, upload.data(), ww.uploaded_bytes, cudaMemcpyHostToDevice, harness_stream));
        NIBBLE_CUDA_CALL(cudaStreamSynchronize(harness_stream));
        const uint64_t c0 = timed->now();
        const uint32_t before = CuptiTimer::this_thread_last_launch();
        launch_read_stream(probe.get(), probe.bytes(), harness_stream, 1);
        // The probe's id, as its launch callback saw it (0 when it saw none: the window is dropped).
        const uint32_t after = CuptiTimer::this_thread_last_launch(), probe_launch = after != before ? after : 0;
        NIBBLE_CUDA_CALL(cudaDeviceSynchronize());
        const uint64_t c1 = timed->now();
        (void)ledger->done(-1, i, device_blake3(outputs, ww.digested_bytes, harness_stream));
        const SpanStats st = timed->close(c0, c1, true, probe_launch);
        ledger->span(-1, i, st.valid ? double(st.span_ns) / 1e3 : 0.0, st.valid);  // 0: none (the grader drops the window)
      }
    }
  } catch (const std::exception& e) {
    return out.fail(error_of(kErrHarness, e.what()), 3);
  }
  const bool python = !job.python_shim.empty();
  std::unique_ptr<SolutionLibrary> lib;
  CallWatchdog watchdog(&out);
  if (const int code = open_solution(out, watchdog, job, *task, &lib)) return code;
  if (!job.variant.empty())
    if (const int code = select_variant(out, *lib, job.solution, job.variant)) return code;

  // One solution call under the watchdog; false after recording a SolutionError.
  auto call = [&](const std::string& what, double limit, auto&& body) -> bool {
    watchdog.arm(what, limit);
    try {
      body();
    } catch (const SolutionError& e) {
      watchdog.disarm();
      ChildError err = error_of(kErrSolution, e.what());
      err.call = what;
      err.status = status_name(e.status);
      out.fail(err, 5);
      return false;
    } catch (...) {
      watchdog.disarm();
      throw;
    }
    watchdog.disarm();
    return true;
  };
  auto modified = [&](const std::string& what) {
    ChildError err = error_of(kErrInputModified, what);
    return out.fail(err, 7);
  };
  // Outside the try: on an error the session (and the solution's teardown, which may crash after,
  // say, a cudaDeviceReset) goes only after the failure is written and sealed.
  std::unique_ptr<Session> session;
  try {
    auto t = std::chrono::steady_clock::now();
    session = task->open_session(job, *lib, *fixture, stream, harness_stream);
    secs["load_fixture"] = seconds_since(t);
    out.r.facts = session->facts();
    // The dry gap before the build: what the harness does between two timed calls, and anything
    // the solution's load-time code runs meanwhile (TimedCalls).
    if (timed) timed->dry_gap([&] { session->dry_gap(); });
    auto intact = [&](const std::string& when) {
      const std::string changed = session->inputs_changed();
      return changed.empty() ? std::string() : "the candidate modified '" + changed + "' " + when + " (inputs are read-only)";
    };

    t = std::chrono::steady_clock::now();
    if (!call(task->build_call(), job.build_timeout_seconds, [&] { session->build(); })) return 5;
    secs["build"] = seconds_since(t);
    if (const std::string m = intact("in " + task->build_call()); !m.empty()) return modified(m);
    if (python) {
      // After the build: the libraries the module imported are loaded now.
      std::lock_guard<std::mutex> lock(out.mu);
      out.r.facts["python"] = python_facts(*lib);
    }
    out.phase("built");

    t = std::chrono::steady_clock::now();
    OutputFile outputs;
    for (int i = 0; i < job.checked_calls; ++i) {
      std::string changed;
      if (!call(task->timed_call(), job.call_timeout_seconds, [&] { changed = session->checked_call(i, outputs); })) {
        outputs.write(job.outputs_fd, lib->name());  // the calls before this one are still compared
        return 5;
      }
      if (!changed.empty()) return modified(changed);
      out.r.checked_calls_done = i + 1;
    }
    // The reference's side of a candidate's kept timed calls: every round's, under one watchdog each.
    for (const auto& round : job.replay.is_array() ? job.replay : nlohmann::json::array())
      if (!call(task->timed_call(), job.call_timeout_seconds * 64,
                [&] { session->replay(round.at("spec"), round.at("prefix").get<std::string>(), outputs); }))
        return 5;
    outputs.write(job.outputs_fd, lib->name());
    if (const std::string m = intact("during the checked calls"); !m.empty()) return modified(m);
    secs["checked_calls"] = seconds_since(t);
    out.phase("checked");

    if (job.profile_calls > 0) {
      // A profiler's run (grade --profile, after the graded one): the calls it measures, by name.
      std::mt19937_64 rng(job.check_seed);
      for (int n = 0; n < job.profile_calls; ++n) {
        session->stage_timed(n, rng());
        if (!call(task->timed_call(), job.call_timeout_seconds, [&] {
              nvtxRangePushA(kProfileRange);
              session->call();
              NIBBLE_CUDA_CALL(cudaDeviceSynchronize());
              nvtxRangePop();
            }))
          return 5;
      }
      out.phase("profiled");
    }
    if (job.timing) {
      const TimingJob& tj = *job.timing;
      t = std::chrono::steady_clock::now();
      TimingResult tr;
      tr.seed = tj.seed;
      tr.seed_from = tj.seed ? "nibble grade --timing-seed: reproducible, and so predictable to a solution that reads it: not tamper-proof"
                            : "none: every draw from the OS-seeded generator of the grader's parent, revealed to the child as each "
                              "timed call's window opens";
      tr.calls_per_round = tj.calls_per_round;
      tr.stop_reason = "max rounds";
      OutputFile kept;
      nlohmann::json replay = nlohmann::json::array();
      double prev_median = -1;
      // Work between timed calls is in no window: TimedCalls judges every gap.
      timed->begin();
      for (int r = 0; r < tj.max_rounds; ++r) {
        // Which calls are re-checked against the reference is the parent's pick (the call ledger),
        // drawn as each call's "done" arrives: no call can know whether it will be.
        std::vector<int> keep;
        const std::string prefix = timed_round_prefix(r);
        for (int n = 0; n < tj.calls_per_round; ++n) {
          // The window opens before the call's inputs exist: the parent reveals their seed with its
          // answer, staging runs inside the window (GPU work), and "done" commits the outputs'
          // digest before the parent says whether they are kept.
          timed->flush();
          const uint64_t seed = ledger->open(r, n);
          session->stage_timed(n, seed);
          const uint64_t c0 = timed->now();
          const auto w0 = std::chrono::steady_clock::now();
          // All work the call caused, on any stream, is inside the window: sync the device.
          if (!call(task->timed_call(), job.call_timeout_seconds, [&] {
                session->call();
                NIBBLE_CUDA_CALL(cudaDeviceSynchronize());
              }))
            return 5;
          const double wall = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - w0).count();
          const uint64_t c1 = timed->now();
          const bool keep_n = ledger->done(r, n, session->timed_digest());
          const SpanStats st = timed->close(c0, c1);
          // Committed to the parent before the solution runs again: what the result must report.
          const double span_us = double(st.span_ns) / 1e3;
          ledger->span(r, n, span_us, st.valid);
          if (!st.valid) {
            ++tr.invalid_samples;
            tr.invalid_reason = st.invalid_reason;
          }
          tr.gpu_span_us.push_back(span_us);
          tr.busy_us.push_back(double(st.busy_ns) / 1e3);
          tr.host_wall_us.push_back(wall);
          tr.kernels.push_back(st.kernels);
          tr.memcpys.push_back(st.memcpys);
          tr.memsets.push_back(st.memsets);
          tr.graphs.push_back(st.graphs);
          if (keep_n) {
            keep.push_back(n);
            tr.kept.push_back(timed_call_name(r, n));
          }
          if (!session->timed_outputs(timed_call_name(r, n), keep_n, kept)) ++tr.nonfinite_calls;
          if (const std::string m = session->after_timed_call(keep_n); !m.empty()) return modified(m);
          if (keep_n)
            if (const std::string m = intact("in timed call " + std::to_string(n) + " of round " + std::to_string(r)); !m.empty())
              return modified(m);
        }
        ++tr.rounds;
        replay.push_back({{"prefix", prefix}, {"spec", session->replay_spec(keep)}});
        // The graded figure's median settles: the GPU span, or the call's wall time (the child's own
        // clock, which tracks the grader's window that --clock wall grades by).
        const double med = summarize(tj.clock == "wall" ? tr.host_wall_us : tr.gpu_span_us).median;
        if (tr.rounds >= tj.min_rounds && prev_median > 0 && std::fabs(med - prev_median) < tj.stable_fraction * med) {
          tr.stop_reason = "median stable";
          break;
        }
        prev_median = med;
        if (tr.rounds >= tj.min_rounds && seconds_since(t) > tj.max_seconds) {
          tr.stop_reason = "time budget";
          break;
        }
      }
      kept.write(job.timed_outputs_fd, lib->name());
      if (const std::string m = intact("during the timed calls"); !m.empty()) return modified(m);
      if (const std::string m = session->after_timing(); !m.empty()) return modified(m);
      tr.gaps_with_foreign_work = timed->gaps_with_foreign_work();
      tr.foreign_work = timed->foreign_work();
      tr.foreign_records_before_build = timed->foreign_records_before_build();
      tr.harness_records_per_gap = timed->harness_records_per_gap();
      tr.late_kernels = timed->late_kernels();
      const LaunchAudit audit = timed->launch_audit();
      tr.launches_audited = audit.launches;
      tr.unrecorded_launches = audit.unrecorded;
      tr.first_unrecorded_launch = audit.first_unrecorded;
      tr.launch_callbacks_lost = audit.callbacks_lost;
      tr.dropped_records = audit.dropped_records;
      tr.copies_audited = audit.copies;
      tr.unrecorded_copies = audit.unrecorded_copies;
      tr.first_unrecorded_copy = audit.first_unrecorded_copy;
      tr.device_launch_graphs = audit.device_launch_graphs;
      tr.graph_launches_audited = audit.graph_launches;
      tr.task_figures = session->timing_figures();
      // Committed before the result holds them: a result rewritten later must agree.
      ledger->audit(timing_audit(tr));
      {
        std::lock_guard<std::mutex> lock(out.mu);
        out.r.replay = std::move(replay);
        out.r.timing = std::move(tr);
      }
      secs["timing"] = seconds_since(t);
      out.phase("timed");
    }
    // Sealed before the solution's teardown, its last code: what it measured is what the parent
    // reads, whatever the teardown writes to the channel (it can find it in /proc/self/fd). A
    // teardown that fails or hangs still fails the grade: the process's exit says so
    // (child_evidence), beside the error on stderr.
    secs["total"] = seconds_since(t_start);
    {
      std::lock_guard<std::mutex> lock(out.mu);
      out.r.seconds = secs;
    }
    out.phase("done");
    if (!call("teardown", job.build_timeout_seconds, [&] { session->teardown(); })) return 5;
    session.reset();
  } catch (const CudaError& e) {
    return out.fail(error_of(kErrCuda, e.what()), 6);
  } catch (const std::exception& e) {
    return out.fail(error_of(kErrHarness, e.what()), 3);
  }
  return 0;
}

/** The device's facts, its copy bandwidth and (read_floor_bytes > 0) a task's weight-read floor. */
nlohmann::json probe_device(bool measure_bandwidth, size_t read_floor_bytes);

}  // namespace

namespace {

volatile sig_atomic_t g_fatal_signal = 0;  // the first fatal signal: what the process must die of

/** The first fatal signal again under its default action: from a fault inside on_fatal_signal, and
 *  from its alarm when the frames hang (backtrace_symbols_fd takes the loader's lock). */
void die_of_first_signal(int) {
  const int sig = g_fatal_signal;
  signal(sig, SIG_DFL);
  raise(sig);
  _exit(128 + sig);  // raise refused: the shell's convention, never a return into the fault
}

/** On a fault (SIGSEGV, SIGBUS, SIGFPE, SIGILL) or abort: the frames of the crash on stderr, which
 *  the parent keeps (the report's solution.log_tail, the Crashed reason's "at"), then the signal
 *  again under its default action, so the parent still sees the process killed by it. Only
 *  async-signal-safe calls (write, alarm, backtrace after its first call, backtrace_symbols_fd);
 *  its own stack, for a solution's stack overflow. */
void on_fatal_signal(int sig) {
  if (g_fatal_signal != 0) die_of_first_signal(sig);  // a second fault, in here: the first one's death
  g_fatal_signal = sig;
  struct sigaction again {};
  again.sa_handler = die_of_first_signal;
  sigemptyset(&again.sa_mask);
  for (const int s : kCrashSignals) (void)sigaction(s, &again, nullptr);
  (void)sigaction(SIGALRM, &again, nullptr);
  alarm(3);
  void* frames[14];  // 12 after the two skipped: within the log tail the parent keeps (3,000 bytes)
  const int n = backtrace(frames, 14);
  const std::string_view head = kCrashFramesMarker;
  (void)!write(2, "\n", 1);
  (void)!write(2, head.data(), head.size());
  (void)!write(2, "\n", 1);
  if (n > 2) backtrace_symbols_fd(frames + 2, n - 2, 2);  // past this handler and the kernel's signal trampoline
  die_of_first_signal(sig);
}

void install_crash_frames() {
  void* warm[1];
  (void)backtrace(warm, 1);  // its first call loads libgcc_s: here, before the sandbox, not in the handler
  static char alt_stack[64 * 1024];
  stack_t ss{};
  ss.ss_sp = alt_stack;
  ss.ss_size = sizeof alt_stack;
  (void)sigaltstack(&ss, nullptr);
  struct sigaction sa {};
  sa.sa_handler = on_fatal_signal;
  sa.sa_flags = SA_ONSTACK | SA_NODEFER;
  sigemptyset(&sa.sa_mask);
  for (const int sig : kCrashSignals) (void)sigaction(sig, &sa, nullptr);
}

}  // namespace

int child_main(int job_fd) {
  install_crash_frames();
  Job job;
  try {
    job = nlohmann::json::parse(read_channel(job_fd)).get<Job>();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "nibble __child: the job is not readable: %s\n", e.what());
    return 2;
  }
  close(job_fd);  // read once; a solution has no use for it
  if (job.protocol != kProtocolVersion) {
    std::fprintf(stderr, "nibble __child: job protocol %d, this nibble speaks %d\n", job.protocol, kProtocolVersion);
    return 2;
  }
  // The sandbox before anything else: one thread, no CUDA yet (sandbox.h). The child reads the
  // fixture's model file (not its folder: the folder's lock, which a child holding it would make
  // every other grade of the fixture wait on, stays out of reach) and the solution's folder (a
  // solution may load libraries that sit beside it).
  SandboxSpec spec = job.sandbox;
  if (!job.solution.empty()) {
    spec.readable.push_back(std::filesystem::absolute(job.solution).parent_path().string());
    // A link's target folder too: dlopen and Python open the file the link names (a newcomer's
    // link into another folder read "Permission denied" under Landlock).
    std::error_code ec;
    const std::filesystem::path target = std::filesystem::canonical(job.solution, ec);
    if (!ec) spec.readable.push_back(target.parent_path().string());
  }
  if (!job.fixture_dir.empty()) spec.readable.push_back(job.fixture_dir + "/" + kFixtureModelFile);
  if (!job.python_shim.empty()) {
    // The shim, the interpreter it embeds and that interpreter's packages (torch, triton, ...).
    spec.readable.push_back(std::filesystem::absolute(job.python_shim).parent_path().string());
    for (const std::string& p : python_readable_paths()) spec.readable.push_back(p);
    if (!job.python_scratch.empty()) spec.writable.push_back(job.python_scratch);
    enter_python_scratch(job.python_scratch);
  }
  // The parent's channels: kept by seccomp, and not inherited by what a solution execs (a Python
  // solution's Triton runs ptxas).
  for (const int fd : {job.result_fd, job.outputs_fd, job.timed_outputs_fd, job.ledger_read_fd, job.ledger_write_fd})
    if (fd >= 0) {
      spec.kept_fds.push_back(fd);
      (void)fcntl(fd, F_SETFD, FD_CLOEXEC);
    }
  const std::vector<SandboxLayer> layers = enter_sandbox(spec);
  const std::string gaps = job.require_sandbox ? sandbox_gaps(layers) : "";
  if (job.kind == "run") return run_job(job, layers, gaps);
  if (job.kind == "load") return load_job(job, layers, gaps);
  Result r;
  r.phase = "failed";
  r.sandbox = layers;
  if (!gaps.empty()) {
    r.error = sandbox_error(gaps);
  } else {
    try {
      r.probe = probe_device(job.measure_bandwidth, size_t(job.read_floor_bytes));
      r.phase = "done";
    } catch (const std::exception& e) {
      r.error = error_of(kErrHarness, e.what());
      std::fprintf(stderr, "nibble probe: %s\n", e.what());
    }
  }
  try {
    write_channel(job.result_fd, json_text(nlohmann::json(r)));
    seal_channel(job.result_fd);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "nibble probe: %s\n", e.what());
    return 3;
  }
  return r.phase == "done" ? 0 : 3;
}

namespace {

nlohmann::json probe_device(bool measure_bandwidth, size_t read_floor_bytes) {
  nlohmann::json j;
  {
    int dev = 0;
    NIBBLE_CUDA_CALL(cudaSetDevice(dev));
    cudaDeviceProp p{};
    NIBBLE_CUDA_CALL(cudaGetDeviceProperties(&p, dev));
    auto attr = [&](cudaDeviceAttr a) {
      int v = 0;
      NIBBLE_CUDA_CALL(cudaDeviceGetAttribute(&v, a, dev));
      return v;
    };
    int drv = 0, rt = 0;
    NIBBLE_CUDA_CALL(cudaDriverGetVersion(&drv));
    NIBBLE_CUDA_CALL(cudaRuntimeGetVersion(&rt));
    int cb_major = 0, cb_minor = 0, cb_patch = 0;
    cublasGetProperty(MAJOR_VERSION, &cb_major);
    cublasGetProperty(MINOR_VERSION, &cb_minor);
    cublasGetProperty(PATCH_LEVEL, &cb_patch);
    const int mem_khz = attr(cudaDevAttrMemoryClockRate);
    const int bus_bits = attr(cudaDevAttrGlobalMemoryBusWidth);
    j["name"] = p.name;
    {
      // As NVML and nvidia-smi spell it ("GPU-" and the 16 bytes in 8-4-4-4-12 hex groups): the
      // parent's call ledger finds this GPU in NVML by it.
      std::string u = "GPU-";
      char hex[3];
      for (int i = 0; i < 16; ++i) {
        std::snprintf(hex, sizeof hex, "%02x", unsigned(static_cast<unsigned char>(p.uuid.bytes[i])));
        u += hex;
        if (i == 3 || i == 5 || i == 7 || i == 9) u += '-';
      }
      j["uuid"] = u;
    }
    {
      char bus[32] = {};
      NIBBLE_CUDA_CALL(cudaDeviceGetPCIBusId(bus, sizeof bus, dev));
      j["pci_bus_id"] = bus;
    }
    j["compute_capability"] = std::to_string(p.major) + "." + std::to_string(p.minor);
    j["sms"] = p.multiProcessorCount;
    j["l2_bytes"] = p.l2CacheSize;
    j["persisting_l2_max_bytes"] = p.persistingL2CacheMaxSize;
    j["shared_memory_per_block_optin"] = p.sharedMemPerBlockOptin;
    j["memory_bytes"] = p.totalGlobalMem;
    j["sm_clock_khz"] = attr(cudaDevAttrClockRate);
    j["memory_clock_khz"] = mem_khz;
    j["memory_bus_width_bits"] = bus_bits;
    // Double data rate: two transfers per memory clock across the whole bus.
    j["theoretical_bandwidth_Bps"] = 2.0 * double(mem_khz) * 1e3 * double(bus_bits) / 8.0;
    j["driver_version"] = drv;
    j["runtime_version"] = rt;
    j["cublas_version"] = std::to_string(cb_major) + "." + std::to_string(cb_minor) + "." + std::to_string(cb_patch);
    j["cupti_api_version"] = CuptiTimer::version();
    if (measure_bandwidth) {
      // Device-to-device copy of 1 GiB, bytes read + written counted, 20 times: the bandwidth a
      // streaming kernel can expect on this GPU now (clocks and all), used for the floor.
      const size_t bytes = size_t(1) << 30;
      DeviceBuffer a(bytes), b(bytes);
      NIBBLE_CUDA_CALL(cudaMemset(a.get(), 1, bytes));
      NIBBLE_CUDA_CALL(cudaMemset(b.get(), 2, bytes));
      cudaEvent_t e0, e1;
      NIBBLE_CUDA_CALL(cudaEventCreate(&e0));
      NIBBLE_CUDA_CALL(cudaEventCreate(&e1));
      std::vector<double> bw;
      for (int i = 0; i < 23; ++i) {
        NIBBLE_CUDA_CALL(cudaEventRecord(e0));
        NIBBLE_CUDA_CALL(cudaMemcpyAsync(i % 2 ? a.get() : b.get(), i % 2 ? b.get() : a.get(), bytes, cudaMemcpyDeviceToDevice));
        NIBBLE_CUDA_CALL(cudaEventRecord(e1));
        NIBBLE_CUDA_CALL(cudaEventSynchronize(e1));
        float ms = 0;
        NIBBLE_CUDA_CALL(cudaEventElapsedTime(&ms, e0, e1));
        if (i >= 3) bw.push_back(2.0 * double(bytes) / (double(ms) * 1e-3));  // 3 warm-ups
      }
      NIBBLE_CUDA_CALL(cudaEventDestroy(e0));
      NIBBLE_CUDA_CALL(cudaEventDestroy(e1));
      const Summary s = summarize(bw);
      j["copy_bandwidth"] = {{"method", "cudaMemcpyAsync device-to-device, 1 GiB, read+write counted, events"},
                             {"median_Bps", s.median}, {"max_Bps", s.max}, {"n", s.n}};
    }
    if (read_floor_bytes > 0) {
      // The GEMM tasks' weight-read floor: what `nibble grade` does around a timed call (flush,
      // sync, CUPTI window) around a kernel that only reads the shape's weight bytes. At a few MB
      // it is ramp-bound, far above bytes / copy bandwidth (bench_stream_floor: 3.6 us for 5.3 MB).
      // A failure here leaves the floor out of the report ("read_floor": {"error"}), not the grade.
      try {
        const size_t bytes = (read_floor_bytes + 15) / 16 * 16;
        DeviceBuffer w(bytes);
        NIBBLE_CUDA_CALL(cudaMemset(w.get(), 0x5a, bytes));
        L2Flusher flusher;
        CuptiTimer timer;
        // Three grid shapes (1, 2, 4 blocks of 512 threads per SM); the floor is the fastest median.
        nlohmann::json shapes = nlohmann::json::array();
        double best = 0;
        for (const int bps : {1, 2, 4}) {
          std::vector<double> us;
          for (int i = 0; i < 53; ++i) {
            const SpanStats st = flushed_span(timer, flusher, [&] { launch_read_stream(w.get(), bytes, nullptr, bps); });
            if (i >= 3) us.push_back(double(st.span_ns) / 1e3);  // 3 warm-ups
          }
          const Summary s = summarize(us);
          shapes.push_back({{"blocks_per_sm", bps}, {"median_us", s.median}, {"q1_us", s.q1}, {"q3_us", s.q3}, {"n", s.n}});
          if (best == 0 || s.median < best) best = s.median;
        }
        j["read_floor"] = {{"method", "a read-only 16-byte-load kernel over the bytes at 1, 2 and 4 blocks of 512 threads per "
                                      "SM, L2 flushed (memset of 2x L2) before each run, CUPTI span; the fastest median"},
                           {"bytes", bytes}, {"median_us", best}, {"grids", shapes}};
      } catch (const std::exception& e) {
        j["read_floor"] = {{"error", e.what()}};
      }
    }
  }
  return j;
}

}  // namespace

}  // namespace nibble
