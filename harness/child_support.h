// child_support.h: the child's pieces: its Result written after every phase, the per-call
// watchdog, the L2 flush before timed calls, the CUPTI windows of the timed calls.
// Internal to harness/.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <nlohmann/json.hpp>
#include <optional>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "fixtures/safetensors.h"
#include "harness/atomic_file.h"
#include "harness/child.h"
#include "harness/protocol.h"
#include "harness/cuda_check.h"
#include "harness/cupti_timer.h"
#include "harness/device_buffer.h"
#include "harness/gpu_checks.h"
#include "harness/process.h"
#include "harness/solution_library.h"
#include "solutions/python/python_shim.h"

namespace nibble::child {

using json = nlohmann::ordered_json;

inline double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

inline const char* load_kind_name(LoadError::Kind k) {
  switch (k) {
    case LoadError::NotFound: return "NotFound";
    case LoadError::NotLoadable: return "NotLoadable";
    case LoadError::MissingSymbol: return "MissingSymbol";
    case LoadError::AbiMismatch: return "AbiMismatch";
  }
  return "?";
}

/** The child's Result, rewritten into the parent's channel after every phase, so a crash later
 *  still leaves what was learnt. Shared with the watchdog thread, hence the mutex. */
struct ResultWriter {
  int fd;
  Result r;
  std::mutex mu;
  /** Writes the result at phase `p`; the last phases (done, failed) seal the channel, so nothing
   *  that runs after (solution threads, exit handlers, destructors) can change what the parent reads. */
  void phase(const char* p) {
    // Nothing the solution started outside this process (a daemon reparented to us, the child
    // subreaper) may outlive a write of our results and rewrite them afterwards.
    reap_descendants();
    std::lock_guard<std::mutex> lock(mu);
    if (sealed) return;
    r.phase = p;
    nlohmann::json j = r;
    write_channel(fd, j.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace));
    if (r.phase == "done" || r.phase == "failed") {
      seal_channel(fd);
      sealed = true;
    }
  }
  bool sealed = false;
  /** Records the error (kind: load, solution, cuda, harness, timeout, input_modified), writes the
   *  result, returns `code` for the process to exit with. */
  int fail(ChildError e, int code) {
    {
      std::lock_guard<std::mutex> lock(mu);
      e.during_phase = r.phase;
      r.error = e;
    }
    phase("failed");
    std::fprintf(stderr, "nibble child: %s error: %s\n", e.kind.c_str(), e.message.c_str());
    return code;
  }
};

/** Kills this process when one solution call (build_model, or decode_step with the device sync
 *  after it) outlives its limit, after writing which call it was. A hung kernel or host loop
 *  thus ends as TimedOut with the call named, not as a silent whole-process timeout. */
class CallWatchdog {
 public:
  explicit CallWatchdog(ResultWriter* out) : out_(out), thread_([this] { loop(); }) {}
  ~CallWatchdog() {
    stop_ = true;
    thread_.join();
  }
  void arm(const std::string& call, double seconds) {
    std::lock_guard<std::mutex> lock(mu_);
    call_ = call;
    limit_ = seconds;
    deadline_ = std::chrono::steady_clock::now() + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                                        std::chrono::duration<double>(seconds));
    armed_ = true;
  }
  void disarm() {
    std::lock_guard<std::mutex> lock(mu_);
    armed_ = false;
  }

 private:
  void loop() {
    while (!stop_) {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      std::lock_guard<std::mutex> lock(mu_);
      if (armed_ && std::chrono::steady_clock::now() > deadline_) {
        ChildError e;
        e.kind = kErrTimeout;
        e.message = call_ + " did not return within " + std::to_string(int(limit_)) + " s (watchdog)";
        e.call = call_;
        // The write can throw (a candidate that sealed or replaced the channel itself): the hang
        // still ends here, as a killed child, never as an exception out of this thread (abort).
        try {
          out_->fail(e, 9);
        } catch (...) {
        }
        std::_Exit(9);
      }
    }
  }
  ResultWriter* out_;
  std::mutex mu_;
  std::string call_;
  double limit_ = 0;
  std::chrono::steady_clock::time_point deadline_;
  bool armed_ = false;
  std::atomic<bool> stop_{false};
  std::thread thread_;
};

/** An L2-sized scratch written before every timed call, so each call starts with a cold L2
 *  (weights cannot stay resident between calls). Twice the L2: the replacement policy is not LRU. */
class L2Flusher {
 public:
  L2Flusher() {
    int dev = 0, l2 = 0;
    NIBBLE_CUDA_CALL(cudaGetDevice(&dev));
    NIBBLE_CUDA_CALL(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, dev));
    int persisting_max = 0;
    NIBBLE_CUDA_CALL(cudaDeviceGetAttribute(&persisting_max, cudaDevAttrMaxPersistingL2CacheSize, dev));
    // Where the limit cannot be set (no persisting L2; MPS clients), nothing can set it either.
    carveout_settable_ = persisting_max > 0 && cudaDeviceSetLimit(cudaLimitPersistingL2CacheSize, 0) == cudaSuccess;
    if (!carveout_settable_) (void)cudaGetLastError();
    buf_ = DeviceBuffer(size_t(std::max(l2, 1 << 20)) * 2);
  }
  void flush(cudaStream_t s) {
    // No persisting carve-out (a solution may have set cudaLimitPersistingL2CacheSize and an
    // access-policy window on its weights), and persisting lines become normal, so the writes
    // below evict them and nothing stays resident across calls.
    if (carveout_settable_) NIBBLE_CUDA_CALL(cudaDeviceSetLimit(cudaLimitPersistingL2CacheSize, 0));
    NIBBLE_CUDA_CALL(cudaCtxResetPersistingL2Cache());
    NIBBLE_CUDA_CALL(cudaMemsetAsync(buf_.get(), int(++n_ & 0xff), buf_.bytes(), s));
  }

 private:
  DeviceBuffer buf_;
  bool carveout_settable_ = false;
  unsigned n_ = 0;
};

/** The CUPTI records' summary (span_ns, kernels, ...) of the GPU work `launch` starts, timed as a
 *  graded call is: `flusher` empties L2, the device is synchronised, then the window from `launch`
 *  to the next device sync. Throws std::runtime_error when the window's records are invalid (none,
 *  or a zero duration). */
template <class F>
SpanStats flushed_span(CuptiTimer& timer, L2Flusher& flusher, F&& launch) {
  flusher.flush(nullptr);
  NIBBLE_CUDA_CALL(cudaDeviceSynchronize());
  const uint64_t t0 = timer.now();
  launch();
  NIBBLE_CUDA_CALL(cudaDeviceSynchronize());
  const SpanStats st = span_of(timer.collect(t0, timer.now()));
  if (!st.valid) throw std::runtime_error("timed launch: " + st.invalid_reason);
  return st;
}

/**
 * Timed calls with the work between them watched, for every task: the L2 flush and one CUPTI
 * subscription. All of the harness's own GPU work between two timed calls (staging, read-backs,
 * checks, the flush) runs on `stream`, the harness's stream, which the solution is never given; a
 * record in a gap on any other stream is the solution's work (kernel, copy or memset) that no
 * window timed. Built before the solution is loaded (its CUPTI subscription, the flush's buffer),
 * so that the call ledger's calibration windows can be timed before any solution code runs; then,
 * once the session is open and before the build, dry_gap() runs a dry gap (`harness_gap`,
 * everything the harness does there but the flush, then the flush). The harness leaves nothing on
 * other streams there (its records per gap, in every H200 report, are exactly its own on-stream
 * operations), so what the dry gap shows on them is the solution's: its load-time code (a .so's
 * constructors, a Python module's import) has run, and a thread it started could otherwise have
 * raised an allowance measured here to hide its later gap work. The dry gap is judged as a gap: its
 * foreign records count from begin() on. begin() drops what was recorded since (the build, the
 * checked calls); then per timed call flush() (record kinds re-enabled, flush, device sync), the
 * harness's staging, now() (one timestamp ends the gap and opens the window), the call with its
 * device sync, now() again, the harness's digest, and close(c0, c1): one collect after the call,
 * split near c0 (a collect just before the launch put CUPTI's next buffer request inside the window,
 * e970ed3). Kernels CUPTI
 * delivers only after the collect that should have seen them (still running past a window's device
 * sync) count in late_kernels(), judged InvalidTiming (verdict.cpp). From begin() on every kernel and graph launch
 * must leave a record (launch_audit(): a launch without one ran with CUPTI's records switched off).
 * `graphs`: how a graph launch is recorded (GraphRecords). Throws std::runtime_error on CUDA/CUPTI errors.
 */
class TimedCalls {
 public:
  explicit TimedCalls(cudaStream_t stream, GraphRecords graphs = GraphRecords::Nodes)
      : stream_(stream), timer_(graphs), stream_id_(timer_.stream_id(stream)) {}
  /** The dry gap (above): once, after the session is open, before the build. */
  template <class F>
  void dry_gap(F&& harness_gap) {
    timer_.reenable();  // a solution's load-time code may have switched record kinds off
    const uint64_t g0 = timer_.now();
    harness_gap();
    flusher_.flush(stream_);
    NIBBLE_CUDA_CALL(cudaDeviceSynchronize());
    const std::vector<ActivityRecord> dry = timer_.collect(g0, timer_.now());
    harness_records_per_gap_ = int(dry.size());
    dry_gap_foreign_ = span_of(off_stream(dry));
  }
  /** The first gap starts now; everything recorded before (the build, the checked calls, the
   *  ledger's calibration windows) is neither a gap nor late. */
  void begin() {
    timer_.reenable();
    timer_.start_launch_audit();
    gap_start_ = timer_.now();
    (void)timer_.collect(0, gap_start_);
    late_kernels_ = 0;
    gaps_with_foreign_work_ = foreign_kernels_ = foreign_memcpys_ = foreign_memsets_ = foreign_graphs_ = 0;
    count_foreign(dry_gap_foreign_);
  }
  /** Record kinds re-enabled, L2 flushed, device synchronised: before a call's window opens. */
  void flush() {
    timer_.reenable();
    flusher_.flush(stream_);
    NIBBLE_CUDA_CALL(cudaDeviceSynchronize());
  }
  /** CUPTI's clock: a window's opening and closing timestamps. */
  uint64_t now() const { return timer_.now(); }
  /** flush(), then the window's opening timestamp. */
  uint64_t open() {
    flush();
    return now();
  }
  /** After the call and its device synchronisation: the window's records (in_window: the
   *  solution's from c0 - kActivitySkewNs to c1 + kActivitySkewNs) summarised, and the gap before
   *  it judged; records that start later belong to the next gap. A `calibration` window's is its
   *  harness kernel, collected up to c1 only: the record of launch `probe` (its correlation id,
   *  CuptiTimer::this_thread_last_launch), none when it has none or `probe` is 0 (a staging kernel
   *  before c0 and the digest's after c1 may read as inside by the skew). */
  SpanStats close(uint64_t c0, uint64_t c1, bool calibration = false, uint32_t probe = 0) {
    // The edge's records are all in CUPTI's buffers by now (now() is later than c1 + the skew)
    // unless close() came sooner: then the edge is now, and nothing after it is collected early.
    const uint64_t t1 = calibration ? c1 : std::max(c1, std::min(c1 + kActivitySkewNs, now()));
    std::vector<ActivityRecord> gap, window, late;
    for (const ActivityRecord& r : timer_.collect(gap_start_, t1, &late))
      (in_window(r, c0, stream_id_, calibration) ? window : gap).push_back(r);
    if (calibration)  // the probe's record alone, or none (the grader drops the window)
      window.erase(std::remove_if(window.begin(), window.end(),
                                  [&](const ActivityRecord& r) { return probe == 0 || r.correlation_id != probe; }),
                   window.end());
    count_foreign(span_of(off_stream(gap)));
    // Delivered after the collect that should have seen them: kernels still running past a
    // window's device sync (late_kernels), and the solution's copies and memsets, which started
    // in a window's edge or a gap, counted as gap work (nothing else would see them).
    const SpanStats l = span_of(late), l_off = span_of(off_stream(late));
    late_kernels_ += l.kernels + l.graphs;  // a graph recorded whole still running is late work too
    count_foreign({0, 0, 0, l_off.memcpys, l_off.memsets, false, "", 0});
    gap_start_ = t1;
    return span_of(window);
  }
  SpanStats close(uint64_t c0) { return close(c0, now()); }
  /** The harness's own records in one gap (all streams), counted on the dry gap. */
  int harness_records_per_gap() const { return harness_records_per_gap_; }
  int gaps_with_foreign_work() const { return gaps_with_foreign_work_; }
  /** What the gaps with foreign work held beyond the harness's, e.g. "3 kernels, 1 memcpy". */
  std::string foreign_work() const {
    std::string s;
    for (const auto& [n, what] : {std::pair<int, const char*>{foreign_kernels_, "kernel"}, {foreign_memcpys_, "memcpy"},
                                  {foreign_memsets_, "memset"}, {foreign_graphs_, "graph launch"}})
      if (n > 0) s += (s.empty() ? "" : ", ") + std::to_string(n) + " " + what + (n > 1 ? "s" : "");
    return s;
  }
  int late_kernels() const { return late_kernels_; }
  /** The launches since begin() matched with their records (after the last close()). A launch of
   *  the harness's own comes first: were it not seen, the launch callbacks were ended (a solution's
   *  cuptiFinalize or unsubscription), and no count of unrecorded launches could be trusted. */
  LaunchAudit launch_audit() {
    const uint32_t before = timer_.last_launch();
    launch_read_stream(sentinel_.get(), sentinel_.bytes(), stream_, 1);
    const uint32_t last = timer_.last_launch();  // the sentinel's id when seen; what the sync below waits for
    NIBBLE_CUDA_CALL(cudaDeviceSynchronize());
    LaunchAudit a = timer_.launch_audit(last);
    a.callbacks_lost = last == before;  // correlation ids grow: a launch seen raises the last
    return a;
  }
  /** Records on other streams in the dry gap (counted in the gaps from begin() on). */
  int foreign_records_before_build() const { return records(dry_gap_foreign_); }

 private:
  static int records(const SpanStats& s) { return s.kernels + s.memcpys + s.memsets + s.graphs; }
  /** A gap's records on other streams than the harness's: one gap with foreign work, if any. */
  void count_foreign(const SpanStats& foreign) {
    if (records(foreign) == 0) return;
    ++gaps_with_foreign_work_;
    foreign_kernels_ += foreign.kernels;
    foreign_memcpys_ += foreign.memcpys;
    foreign_memsets_ += foreign.memsets;
    foreign_graphs_ += foreign.graphs;
  }
  std::vector<ActivityRecord> off_stream(const std::vector<ActivityRecord>& rs) const {
    std::vector<ActivityRecord> out;
    for (const ActivityRecord& r : rs)
      if (r.stream_id != stream_id_) out.push_back(r);
    return out;
  }
  cudaStream_t stream_;
  L2Flusher flusher_;
  CuptiTimer timer_;
  DeviceBuffer sentinel_{4096};  // what launch_audit()'s own launch reads
  uint32_t stream_id_;
  SpanStats dry_gap_foreign_;
  int harness_records_per_gap_ = 0, gaps_with_foreign_work_ = 0, late_kernels_ = 0;
  int foreign_kernels_ = 0, foreign_memcpys_ = 0, foreign_memsets_ = 0, foreign_graphs_ = 0;
  uint64_t gap_start_ = 0;
};

/** Select a variant of the bundled reference (nibble_reference_set_variant) before its build
 *  call; returns 0, or the child's exit code after recording the failure. */
inline int select_variant(ResultWriter& out, const SolutionLibrary& lib, const std::string& solution,
                          const std::string& variant) {
  using set_variant_fn = nibble_status (*)(const char*, nibble_error*);
  auto set_variant = reinterpret_cast<set_variant_fn>(lib.optional_symbol("nibble_reference_set_variant"));
  if (!set_variant) {
    ChildError e;
    e.kind = kErrLoad;
    e.message = solution + " has no nibble_reference_set_variant: variants need the bundled reference";
    e.load_kind = "MissingSymbol";
    return out.fail(e, 4);
  }
  nibble_error err{};
  if (set_variant(variant.c_str(), &err) != NIBBLE_OK) {
    ChildError e;
    e.kind = kErrSolution;
    e.message = std::string("nibble_reference_set_variant: ") + err.message;
    e.call = "nibble_reference_set_variant";
    e.status = "INVALID_ARGUMENT";
    return out.fail(e, 5);
  }
  out.r.variant = variant;
  // The numerics string names the variant once one is selected.
  using numerics_fn = const char* (*)(void);
  if (auto num = reinterpret_cast<numerics_fn>(lib.optional_symbol("nibble_reference_numerics")))
    out.r.numerics = num() ? num() : "";
  return 0;
}

/**
 * A Python solution's module named to its shim (solutions/python/python_shim.h): the interpreter
 * starts and the module is imported under the watchdog (an import can hang like any call), then the
 * library's name and options (the GEMM output dtype) are read again. Returns 0, or the child's exit
 * code after recording the failure: a module that cannot be imported (syntax error, ImportError,
 * an exception at import) is a load error NotLoadable, one without an entry point MissingSymbol,
 * each with the shim's message (the traceback's last lines; `other_family_hint`, the tasks it is for,
 * appended when the module is the other task family's); an import past `timeout` seconds
 * ends the process through the watchdog (TimedOut, call "import").
 */
inline int load_python_module(ResultWriter& out, CallWatchdog& watchdog, SolutionLibrary& lib, const std::string& module,
                              double timeout, const std::string& other_family_hint) {
  auto load = reinterpret_cast<nibble_python_load_module_fn>(lib.optional_symbol("nibble_python_load_module"));
  ChildError e;
  e.kind = kErrLoad;
  e.call = "import";
  if (!load) {
    e.message = lib.path() + " is not a Python shim (no nibble_python_load_module)";
    e.load_kind = "MissingSymbol";
    return out.fail(e, 4);
  }
  nibble_error err{};
  watchdog.arm("import", timeout);
  const int32_t rc = load(module.c_str(), &err);
  watchdog.disarm();
  if (rc != NIBBLE_PYTHON_LOADED) {
    e.message = "cannot load the Python solution '" + module + "': " + std::string(err.message, strnlen(err.message, sizeof err.message));
    if (rc == NIBBLE_PYTHON_OTHER_FAMILY) e.message += other_family_hint;
    e.load_kind = rc == NIBBLE_PYTHON_MISSING_ENTRY || rc == NIBBLE_PYTHON_OTHER_FAMILY ? "MissingSymbol" : "NotLoadable";
    return out.fail(e, 4);
  }
  try {
    lib.refresh();
  } catch (const LoadError& le) {
    e.message = le.what();
    e.load_kind = load_kind_name(le.kind);
    return out.fail(e, 4);
  }
  return 0;
}

/** What a Python shim says of its interpreter and the libraries the module imported
 *  (nibble_python_facts), as JSON; {"error": ...} when it says nothing readable. */
inline nlohmann::json python_facts(const SolutionLibrary& lib) {
  auto facts = reinterpret_cast<nibble_python_facts_fn>(lib.optional_symbol("nibble_python_facts"));
  if (!facts) return {{"error", "the shim has no nibble_python_facts"}};
  const char* text = facts();
  try {
    return parse_json_bounded(std::string(text ? text : ""), "the shim's facts");  // the candidate's process wrote them
  } catch (const std::exception& ex) {
    return {{"error", std::string("unreadable facts: ") + ex.what()}};
  }
}

}  // namespace nibble::child
