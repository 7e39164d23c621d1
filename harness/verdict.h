// verdict.h: the grade's verdict as a type, and every rule that decides it in one pure function.
//
// The grade gathers what it saw (the child's end, the outputs' errors, the timing record) into one
// plain Evidence; judge() applies the rules in a fixed order, the first failing rule wins. No task
// has rules of its own: a task supplies numbers (its gate, its per-element guard, its floor).
#pragma once

#include <algorithm>

#include <optional>
#include <cstdint>
#include <string>
#include <vector>

namespace nibble {

/** Exactly one per graded candidate (after CUTLASS's profiler). */
enum class Disposition {
  Passed,
  Incorrect,
  Crashed,
  TimedOut,
  InvalidTiming,
  AbiMismatch,
  MissingSymbol,
  NotSupported,
  NotLoadable,
};

/** "Passed", "Incorrect", ...: the report's spelling. */
const char* to_string(Disposition d);
/** The disposition of a report the grader wrote when it could not finish (no verdict was reached). */
inline constexpr const char* kGraderFailedDisposition = "GraderFailed";
/** The inverse of to_string; std::nullopt for any other string. */
std::optional<Disposition> disposition_from_string(const std::string& s);

/** The rule of judge() that decided, in the order they apply. */
enum class Rule { Load, Build, Crash, NonFinite, Gate, ElementGuard, Inputs, Timing, Passed };
const char* to_string(Rule r);

/** How the candidate's process ended, as far as the verdict cares. */
enum class ChildEnd {
  Completed,     // every phase ran and the child exited 0
  LoadFailed,    // the .so was refused: load_kind says why
  CallFailed,    // an entry point returned an error status (failed_call, call_status)
  CallTimedOut,  // the child's watchdog ended one call
  TimedOut,      // the parent's per-child timeout killed it
  InputModified, // the child found a read-only input changed (inputs_message)
  CudaError,     // a CUDA error surfaced after a solution call
  HarnessError,  // the child's own code failed (fixture unreadable, out of memory, ...)
  Died,          // killed by a signal or exited without saying why
};

/** Everything judge() looks at. Filled by the grade from the child's Result and the comparison. */
struct Evidence {
  ChildEnd end = ChildEnd::Completed;
  std::string end_message;        // the child's error message, or the exit description
  std::string load_kind;          // LoadFailed: NotFound, NotLoadable, MissingSymbol, AbiMismatch
  bool failed_in_build = false;   // CallFailed/CallTimedOut in build_model/prepare
  std::string call_status;        // CallFailed: "NOT_SUPPORTED", "INVALID_ARGUMENT", ...

  // Correctness: worst over seeds, calls and outputs (NaN when any compared value was NaN/Inf).
  bool compared = false;          // at least one checked call was compared with the reference
  std::string compare_error;      // outputs that could not be read/compared (a Crash)
  double worst_rel_err = 0;
  std::string worst_where;        // "logits 0.12, k 0.001" or the call that failed: for the reason
  double gate = 0;
  double worst_elem_err = 0;      // max |c - r| / max |r| per output, worst over all
  std::optional<double> element_guard;
  int nonfinite_outputs = 0;      // checked or verified calls holding NaN/Inf
  int nonfinite_timed_calls = 0;  // timed calls whose outputs held NaN/Inf
  std::string inputs_changed;     // a fixture or input the candidate changed (grade-side checks)

  // Timing (only when `timed`): medians and minimum of the per-call samples, us.
  bool timed = false;
  bool wall_clock = false;        // graded by the grader's clock (--clock wall): no time can hide beyond the span
  int samples = 0;
  double span_median_us = 0, span_min_us = 0, wall_median_us = 0;
  // The parent's call ledger (ledger.h): the calls it saw, the median window on its own clock, the
  // ledger's own overhead as measured (calibration windows around a harness kernel: window - span;
  // credited_overhead_us caps what the hidden-time rule subtracts), and the
  // first message out of sequence ("" when none).
  int ledger_calls = 0;
  double window_median_us = 0, window_overhead_us = 0;
  double window_work_us = 0;  // the credit's allowance for the harness's own bytes in each window (window_work_credit_us)
  double host_launch_us = 0;  // the host's time per kernel launch, measured before the load (CallLedger::host_launch_us); 0: none
  std::string ledger_violation;
  std::vector<unsigned> started_on_gpu;  // processes the candidate started that had a context on the GPU during its timed calls (CallLedger::started_on_gpu)
  std::string uncommitted_timing;  // where the result's spans differ from those committed as each call closed (uncommitted_timing)
  double floor_us = 0;            // bytes per call / theoretical bandwidth; 0 = unknown
  int invalid_samples = 0;
  std::string invalid_reason;
  int gaps_with_foreign_work = 0;
  std::string foreign_work;       // "3 kernels, 1 memcpy"
  int foreign_records_before_build = 0;  // of those, in the dry gap before the build: load-time code
  int launches_audited = 0;       // kernel and graph launches from the first gap to the end of the timed phase
  int unrecorded_launches = 0;    // of those, launches no CUPTI record carries the correlation id of
  std::string first_unrecorded_launch;
  bool launch_callbacks_lost = false;  // the harness's own launch after the timed calls went unseen
  int copies_audited = 0;         // copy and memset driver calls over the same phase (none issued on a capturing stream)
  int unrecorded_copies = 0;      // of those, calls no CUPTI record carries the correlation id of
  std::string first_unrecorded_copy;
  int device_launch_graphs = 0;   // graphs the solution instantiated for launch from the GPU
  bool graphs_recorded_whole = false;  // --graph-records graphs: device-launched graphs have records of their own
  int late_kernels = 0;  // kernels still running past the device sync that closed their call's window
  int64_t dropped_records = 0;         // activity records CUPTI dropped (it had no buffer for them)
  std::string unit = "call";      // for messages: "step", "call"
};

/** The host time per kernel launch (us, host_launch_us in gpu_checks.h) of the fastest hosts the
 *  H100s and H200s came with in 2026-11 and 12 (2.56-2.57 us, bench/probe_cupti_launches.cu "bare"):
 *  the host the hidden-time allowance's 100 us was set on. */
inline constexpr double kReferenceHostLaunchUs = 2.6;
/** The most the allowance's host part grows on a slow host: 3x (a host at 7.8 us per launch or
 *  slower), so a loaded or slow host never lets more than 300 us + 10% of the span hide. */
inline constexpr double kMaxHostSlowdown = 3.0;
/** How much slower than the reference host this one launches (host_launch_us / kReferenceHostLaunchUs),
 *  within [1, kMaxHostSlowdown]; 1 when not measured (0). */
inline double host_slowdown(double host_launch_us) {
  return std::min(kMaxHostSlowdown, std::max(1.0, host_launch_us / kReferenceHostLaunchUs));
}
/** Hidden time a call may show on the grader's clock beyond its GPU span and the ledger's own
 *  overhead: 100 us x host_slowdown + 10% of the span. A launch-bound honest path's time off the GPU
 *  (its launches, a graph's submission) scales with the host's launch cost: the tiny decode config
 *  through a CUDA graph hid 59-68 us beyond a ~62 us span on an H100 host at 2.6 us per launch
 *  (da3d507) and 110-166 us on one at 5.4 us (9011b5b), where a fixed 100 us failed every
 *  graph-launched solution; a solution that hides a tenth of a 1 ms call's GPU work from CUPTI
 *  does not stay within it on a fast host. `host_launch_us`: the child's measurement (0: none). */
inline double hidden_time_allowance_us(double span_us, double host_launch_us) {
  return 100.0 * host_slowdown(host_launch_us) + 0.1 * span_us;
}
/** The most of the ledger's measured overhead (the median window - span of its calibration windows)
 *  that the hidden-time rule credits, beyond the harness's bytes (window_work_credit_us). The H200
 *  measured 16-35 us over the 203 committed reports of 2026-11 and 12 (the test command's parallel
 *  load included), before each window held the seed's round trip, the staging and the digest; an
 *  H100 236-250 us with them (2026-12-06, the digest's scratch then allocated in every window), 363
 *  and 953 under the test command's load: the reveal's round trip puts a thread's wake-up in every
 *  window, which a loaded host delays. The calibration windows run before the solution is loaded
 *  (harness/child.cpp), but anything slowing them (another process, before 2026-12-05 a library's
 *  constructors or a Python import, which ran first) would be credited to every timed call, hiding
 *  that much work in each: a larger figure is reported, never credited. */
inline constexpr double kLedgerOverheadCreditUs = 400.0;
/** The credit's allowance for the bytes the harness itself moves in a window (Task::window_work:
 *  staging and the digest), at 1 TB/s (a quarter of an H100's or H200's DRAM bandwidth). */
inline double window_work_credit_us(uint64_t staged_bytes, uint64_t digested_bytes) {
  return double(staged_bytes + digested_bytes) / 1e6;
}
/** The most of the measured overhead the hidden-time rule credits. */
inline double overhead_credit_cap_us(const Evidence& e) { return kLedgerOverheadCreditUs + e.window_work_us; }
/** The ledger overhead the hidden-time rule subtracts: the measured one, at least 0, at most overhead_credit_cap_us. */
inline double credited_overhead_us(const Evidence& e) {
  return std::max(0.0, std::min(e.window_overhead_us, overhead_credit_cap_us(e)));
}
/** Time a call spent beyond its GPU span and the ledger's credited overhead, on the grader's clock
 *  (medians): what hidden_time_allowance_us bounds. */
inline double hidden_time_us(const Evidence& e) { return e.window_median_us - credited_overhead_us(e) - e.span_median_us; }
/** The per-call figure of a --clock wall grade: each window on the grader's clock less the credited
 *  ledger overhead, never below that call's GPU span (the window holds it; the overhead is a median,
 *  so a short call's window can come out shorter). windows_us and spans_us are per timed call, in
 *  order; a call without a span (the counts differ: InvalidTiming anyway) gets no floor. Pure. */
std::vector<double> grader_clock_samples(const std::vector<double>& windows_us, double credited_overhead_us,
                                         const std::vector<double>& spans_us);
/** How far the median GPU span may exceed the median ledger window: the two clocks' noise. */
inline constexpr double kSpanOverWindowSlackUs = 20.0;

struct Verdict {
  Disposition disposition = Disposition::Passed;
  Rule rule = Rule::Passed;
  std::string reason;
  /** Every failing check of the verdict's rule, the reason first: the timing rule's checks from the
   *  call ledger's on are all evaluated (a long hidden copy shows on the grader's clock and in the
   *  copy audit); its first three (no samples, invalid samples, a span below the floor) and every
   *  other rule stop at their first. Empty when Passed. */
  std::vector<std::string> findings;
};

/**
 * The verdict, first failing rule first: load/ABI; build (an error or timeout in build_model/
 * prepare, or the process ended or stopped before its build returned); crash or timeout later; non-finite outputs (checked, verified or timed); the gate on the
 * worst relative error; the per-element guard; input modification; timing validity (a sample below
 * the bandwidth floor, calls without valid GPU records, a call ledger out of sequence or at odds
 * with the child's count, a launch that left no CUPTI record, time on the grader's clock far above the
 * GPU span or below it, foreign
 * GPU work between timed calls). An input change found before anything could be
 * compared is the inputs rule's, not a crash. Pure: no I/O, no clock.
 */
Verdict judge(const Evidence& e);

}  // namespace nibble
