// ledger.h: the call ledger, the grader's own record of every timed call, kept in the parent
// process where no solution code runs.
//
// The child (which hosts the solution, and with it everything the solution can reach: CUPTI, its
// clock, the child's memory) tells the parent over a socket when each timed call opens and when it
// is done (device synchronised). The parent answers "open" with the seed of the call's inputs
// (drawn by the parent as the call opens, so no input exists before), and the call's window runs
// from that answer's sending (the parent's CLOCK_REALTIME) to the kernel's stamp of "done"
// (SO_TIMESTAMPNS: a clock the child cannot set), so every call has a duration no solution can
// shorten and no late wake-up of the parent's thread distorts. It answers "done" with whether that
// call's outputs are kept for the reference to re-check: drawn by the parent as "done" arrives,
// from every round, so no call can know whether it will be checked. "done" carries a BLAKE3 digest
// of the call's outputs as they were when it was sent: a kept call's outputs read back later must
// have that digest, so no output can be computed after its window closed. Before the solution is loaded, the child runs a few calibration windows that do
// the harness's part of a timed window around a harness kernel: their (window - GPU span) is the
// ledger's own overhead. A message out of sequence is tampering (docs/architecture.md "Timing").
#pragma once

#include <atomic>
#include <cstdint>
#include <mutex>
#include <optional>
#include <sys/types.h>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "harness/hash.h"

namespace nibble {

/** One message, child -> parent (48 bytes: one packet of a SOCK_SEQPACKET socket). */
struct LedgerMessage {
  enum Kind : uint32_t { Open = 0x4f50454e, Done = 0x444f4e45, Span = 0x5350414e, Audit = 0x41554454, Host = 0x484f5354 };  // "OPEN", "DONE", "SPAN", "AUDT", "HOST"
  uint32_t kind;
  int32_t round;  // -1: a calibration window before the build (and "host")
  int32_t call;   // -1 for "host"
  uint32_t check;      // of kind, round, call, digest and kLedgerSalt: a torn or foreign write does not parse
  uint8_t digest[32];  // "done": Session::timed_digest() of the call's outputs (BLAKE3); "open": zeros;
                       // "span": the call's GPU span in us (a double), then whether it was valid (1 or 0),
                       // then zeros; "audit": a TimingAudit (8 int32); "host": the host's time per
                       // kernel launch in us (a double, host_launch_us), then zeros
};

/** The timed phase's audit counts (protocol.h TimingResult's fields of those names), committed to
 *  the ledger once after the last timed call, before the child writes them into its result: a
 *  result rewritten later must agree with what the parent already holds. */
struct TimingAudit {
  int32_t invalid_samples = 0, gaps_with_foreign_work = 0, late_kernels = 0, unrecorded_launches = 0, unrecorded_copies = 0,
          launch_callbacks_lost = 0, device_launch_graphs = 0, dropped_records = 0;
  bool operator==(const TimingAudit& o) const;
  bool operator!=(const TimingAudit& o) const { return !(*this == o); }
  /** "gaps_with_foreign_work 4, late_kernels 0, ...": for messages. */
  std::string text() const;
};
inline constexpr uint32_t kLedgerSalt = 0x6e69626cu;  // "nibl"
/** LedgerMessage::check of a message (FNV-1a over the digest, folded with kind, round, call and the
 *  salt): it tells a torn or foreign write from the harness's, not the harness from a solution that
 *  computes it (the ledger's sequence and clock guard against that). */
uint32_t ledger_check(uint32_t kind, int32_t round, int32_t call, const uint8_t* digest);

/** Windows the child times around a harness kernel before the solution is loaded (round -1): the
 *  ledger's own overhead (12 per window-work form of a GEMM, Task::window_work_forms). The parent
 *  takes no more: a solution's load-time code that opened more (slow ones) would raise the overhead
 *  credited to every timed call. */
inline constexpr int kLedgerCalibrationWindows = 24;

/** The parent's record of one timed (or calibration) call. */
struct LedgerCall {
  int round = 0, call = 0;
  double window_us = 0;  // kernel clock: "done" sent - "open" sent (stamped by the kernel, read by the parent)
  double span_us = 0;    // the GPU span the child committed as the call closed ("span", before the next call):
                         // a calibration window's harness kernel's (0: none sent, or none recorded), a timed
                         // call's as its result must report it
  bool span_committed = false, span_valid = false;
  bool kept = false;
  uint64_t seed = 0;    // the inputs' seed the parent revealed when the call opened
  Digest digest{};      // the outputs' digest the child committed with "done"
  // NVML, read as "done" arrived (NaN / 0 when NVML is not available).
  double sm_mhz = 0, mem_mhz = 0;
  uint64_t clock_events = 0;  // nvmlDeviceGetCurrentClocksEventReasons
  int gpu_processes = -1;     // processes with a context on this GPU (nvmlDeviceGetComputeRunningProcesses); -1: NVML could not say
};

/** Whether process `pid` descends from `ancestor` (its parent, its parent's parent, ...), read from
 *  `proc`/<pid>/stat up to init; false for a pid not there (ended, or in another pid
 *  namespace: NVML names processes in the driver's). */
bool descends_from(pid_t pid, pid_t ancestor, const std::string& proc = "/proc");

/** A GPU process NVML sees: its pid and the device memory it holds. */
struct GpuProcess {
  unsigned pid = 0;
  unsigned long long used_memory_bytes = 0;
};

/** NVML's view of the GPU the child uses, loaded at run time (libnvidia-ml.so.1 comes with the
 *  driver; a machine without one simply has no samples). Its functions are resolved once. */
class NvmlDevice {
 public:
  /** Opens NVML and finds the GPU whose UUID is `uuid` (as cudaDeviceProp::uuid, "GPU-..."; ""
   *  takes index 0). available() is false, with why(), when any of that fails. */
  explicit NvmlDevice(const std::string& uuid);
  ~NvmlDevice();
  NvmlDevice(const NvmlDevice&) = delete;
  NvmlDevice& operator=(const NvmlDevice&) = delete;
  bool available() const { return dev_ != nullptr; }
  const std::string& why() const { return why_; }
  /** SM and memory clocks in MHz and the clock-event (throttle) reasons mask, into `c`. */
  void sample(LedgerCall& c) const;
  /** The compute processes on this GPU now (nvmlDeviceGetComputeRunningProcesses); empty when
   *  none or NVML cannot say, which `listed` (when given) tells apart: true only for NVML's answer. */
  std::vector<GpuProcess> compute_processes(bool* listed = nullptr) const;
  /** How many GPUs NVML sees on this host; 0 (with `why`) when NVML is not there. */
  static int device_count(std::string* why = nullptr);

 private:
  void* lib_ = nullptr;
  void* dev_ = nullptr;
  bool initialized_ = false;
  std::string why_;
  using clock_fn = int (*)(void*, int, unsigned*);
  using reasons_fn = int (*)(void*, unsigned long long*);
  using processes_fn = int (*)(void*, unsigned*, void*);
  clock_fn clock_ = nullptr;
  reasons_fn reasons_ = nullptr;
  processes_fn processes_ = nullptr;
};

/** Clock-event reasons that lower the clocks below what the load asks for (nvml.h's
 *  nvmlClocksEventReason*): SwPowerCap 0x4, HwSlowdown 0x8, SwThermalSlowdown 0x20,
 *  HwThermalSlowdown 0x40, HwPowerBrakeSlowdown 0x80. GpuIdle 0x1, ApplicationsClocksSetting 0x2,
 *  SyncBoost 0x10 and DisplayClockSetting 0x100 are not throttling. */
inline constexpr uint64_t kThrottleReasons = 0x4ull | 0x8ull | 0x20ull | 0x40ull | 0x80ull;

/** One stream of the ledger's draws: with a seed, mt19937_64(seed ^ salt) (--timing-seed:
 *  reproducible, and so predictable); without, every 64-bit word from the OS (std::random_device,
 *  the kernel's generator), so no number of earlier draws tells the next. */
class LedgerDraws {
 public:
  LedgerDraws(std::optional<uint64_t> seed, uint64_t salt) {
    if (seed) mt_.emplace(*seed ^ salt);
  }
  uint64_t next();

 private:
  std::optional<std::mt19937_64> mt_;
  std::random_device dev_;
};

/**
 * The parent's side: a packet socket (child -> parent) and a pipe (answers), a thread that answers the child, the record. Construct before the
 * child is started, pass child_fds() to it, call finish() after it ended. Answers: to "open", 'R'
 * and the call's 8-byte input seed (the window opens as it is sent); to "done", 'K' (kept) or 'S',
 * decided then; "span" (a calibration window's GPU span, once, after its "done") none. `picks_per_round` calls of every round (at least 1) are kept. Input seeds and picks
 * are two streams (LedgerDraws): from `seed` when given (--timing-seed), else from the OS word by
 * word, so the seeds revealed tell nothing of the picks or of the next seed. At most
 * `calibration_windows` calibration windows (round -1) are taken. The answers go out on a pipe this
 * thread never waits on: a child that sends without reading them (filling the pipe) is tampering,
 * and finish() returns whatever the child did. After any violation the answers' pipe is closed:
 * the child's next wait ends at once.
 */
class CallLedger {
 public:
  CallLedger(int calls_per_round, int picks_per_round, std::optional<uint64_t> seed, const std::string& gpu_uuid,
             int calibration_windows = kLedgerCalibrationWindows);
  ~CallLedger();
  CallLedger(const CallLedger&) = delete;
  CallLedger& operator=(const CallLedger&) = delete;

  /** The child's ends: {read answers, write messages}. */
  int child_read_fd() const { return to_child_[0]; }
  int child_write_fd() const { return to_parent_[1]; }
  /** Stop the thread (the child has ended) and close every end. Idempotent. */
  void finish();

  /** After finish(): the timed calls in order, the calibration windows, the first violation ("" if
   *  none), and NVML's state. */
  const std::vector<LedgerCall>& calls() const { return calls_; }
  const std::vector<LedgerCall>& calibration() const { return calibration_; }
  const std::string& violation() const { return violation_; }
  const std::string& nvml_why() const { return nvml_why_; }
  /** Processes the child started (descends_from) that NVML listed on this GPU while a timed call
   *  closed: GPU work in no record of the child's. Empty where NVML is not there or names processes
   *  this process cannot see (another pid namespace). */
  const std::vector<unsigned>& started_on_gpu() const { return started_on_gpu_; }
  /** The timed phase's audit as the child committed it after its last call (none: not sent). */
  const std::optional<TimingAudit>& audit() const { return audit_; }
  /** The host's time per kernel launch (us) the child measured before the solution was loaded and
   *  sent as its first message (none: not sent; after the first message it is tampering). */
  const std::optional<double>& host_launch_us() const { return host_launch_us_; }
  bool nvml_available() const { return nvml_available_; }

 private:
  void serve();
  /** `sent_ns`: when the child sent `m` (CLOCK_REALTIME, stamped by the kernel). */
  void handle(const LedgerMessage& m, int64_t sent_ns);
  int to_parent_[2] = {-1, -1}, to_child_[2] = {-1, -1};
  int calls_per_round_, picks_per_round_, calibration_windows_;
  /** Writes an answer whole: "" when sent, else why not (a full pipe: the child does not read). */
  std::string answer(const void* bytes, size_t n, const char* what);
  LedgerDraws inputs_, picks_rng_;
  std::string gpu_uuid_;
  std::thread thread_;
  std::atomic<bool> stop_{false};
  std::vector<LedgerCall> calls_, calibration_;
  int picks_left_ = 0;  // of the current round
  std::string violation_, nvml_why_;
  bool nvml_available_ = false;
  const NvmlDevice* nvml_ = nullptr;  // serve()'s, while it runs
  // The open call: its (round, call), its input seed and when that was sent (the window's start).
  int open_round_ = 0, open_call_ = -1;
  bool is_open_ = false;
  int64_t open_ns_ = 0;
  uint64_t open_seed_ = 0;
  int last_round_ = -2, last_call_ = -1;
  bool span_sent_ = false;  // for the last "done"
  pid_t child_pid_ = 0;     // the sender of the first message (SCM_CREDENTIALS): every other must be it
  std::vector<unsigned> started_on_gpu_;
  std::optional<TimingAudit> audit_;
  std::optional<double> host_launch_us_;
  bool any_message_ = false;
};

/** Where a child's reported timing (`spans_us`: Result timing.gpu_span_us, `reported`: its audit
 *  counts) differs from what it committed to the ledger as each timed call closed (`calls`) and
 *  after the last (`audit`, none: never committed): "" when it does not, else the first difference
 *  and how many. The commitment is made between the harness's
 *  own steps, before the solution's next call; a result rewritten afterwards (its channel is in
 *  /proc/self/fd) must also rewrite what the parent already holds. Pure. */
std::string uncommitted_timing(const std::vector<LedgerCall>& calls, const std::optional<TimingAudit>& audit,
                               const std::vector<double>& spans_us, const TimingAudit& reported);

/** The child's side. Both calls throw std::runtime_error when the parent does not answer (a
 *  solution that read or closed the channel) within `timeout_seconds`. */
class LedgerClient {
 public:
  LedgerClient(int read_fd, int write_fd, double timeout_seconds = 30) : rfd_(read_fd), wfd_(write_fd), timeout_(timeout_seconds) {}
  /** The call's window opens: the seed of its inputs, which the parent draws only now. */
  uint64_t open(int round, int call);
  /** The call is done (device synchronised; `digest`: Session::timed_digest() of its outputs):
   *  whether the parent keeps its outputs. */
  bool done(int round, int call, const Digest& digest);
  /** Call (round, call), just done, had this GPU span (us) and it was `valid` (a record in its
   *  window): sent as the call closes, before the solution runs again, so that the parent holds it
   *  whatever is later written into the result (Result fields can be rewritten from inside the
   *  child). A calibration window's (round -1; span 0: none recorded) is sent before the solution
   *  is loaded: nothing the solution does can change the overhead the parent credits. No answer. */
  void span(int round, int call, double span_us, bool valid);
  /** The timed phase is over (its last call done and its span sent): its audit counts, before the
   *  child writes them into its result. No answer; no call opens after it. */
  void audit(const TimingAudit& a);
  /** The host's time per kernel launch (us, host_launch_us in gpu_checks.h), measured before the
   *  solution is loaded: the first message, or the parent takes it for tampering. No answer. */
  void host(double launch_us);

 private:
  void send(LedgerMessage::Kind k, int round, int call, const Digest& digest);
  /** The parent's answer to (round, call): one byte among `tags` (returned), then `n` more into
   *  `rest`; throws std::runtime_error when it does not come whole within the timeout. */
  char answer(const char* tags, void* rest, size_t n, int round, int call);
  int rfd_, wfd_;
  int last_round_ = -1, last_call_ = -1;  // of the last span sent: the audit follows it
  double timeout_;
};

}  // namespace nibble
