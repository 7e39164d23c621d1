// verdict.cpp: see verdict.h.
#include "harness/verdict.h"

#include <cmath>
#include <cstdio>

namespace nibble {

namespace {

std::string g3(double v) {
  if (std::isnan(v)) return "NaN";
  char b[32];
  std::snprintf(b, sizeof b, "%.3g", v);
  return b;
}

constexpr const char* kDispositionNames[] = {"Passed",        "Incorrect",     "Crashed",      "TimedOut",   "InvalidTiming",
                                             "AbiMismatch",   "MissingSymbol", "NotSupported", "NotLoadable"};

Verdict fail(Disposition d, Rule r, std::string why) { return {d, r, why, {why}}; }

}  // namespace

const char* to_string(Disposition d) { return kDispositionNames[int(d)]; }

std::optional<Disposition> disposition_from_string(const std::string& s) {
  for (int i = 0; i < int(sizeof kDispositionNames / sizeof *kDispositionNames); ++i)
    if (s == kDispositionNames[i]) return Disposition(i);
  return std::nullopt;
}

const char* to_string(Rule r) {
  switch (r) {
    case Rule::Load: return "load";
    case Rule::Build: return "build";
    case Rule::Crash: return "crash";
    case Rule::NonFinite: return "nonfinite";
    case Rule::Gate: return "gate";
    case Rule::ElementGuard: return "element_guard";
    case Rule::Inputs: return "inputs";
    case Rule::Timing: return "timing";
    case Rule::Passed: return "passed";
  }
  return "?";
}

Verdict judge(const Evidence& e) {
  using D = Disposition;
  // 1. Load / ABI: nothing of the solution ran.
  if (e.end == ChildEnd::LoadFailed) {
    const D d = e.load_kind == "AbiMismatch" ? D::AbiMismatch : e.load_kind == "MissingSymbol" ? D::MissingSymbol : D::NotLoadable;
    return fail(d, Rule::Load, e.end_message);
  }
  // 2. Build: build_model / prepare refused or failed.
  if (e.failed_in_build && (e.end == ChildEnd::CallFailed || e.end == ChildEnd::CallTimedOut || e.end == ChildEnd::TimedOut)) {
    if (e.end != ChildEnd::CallFailed) return fail(D::TimedOut, Rule::Build, e.end_message);
    return fail(e.call_status == "NOT_SUPPORTED" ? D::NotSupported : D::Crashed, Rule::Build, e.end_message);
  }
  // 3. Crash or timeout after the build; one that followed tampering with the call ledger (which
  // then stops answering the child) is that tampering.
  if (e.end != ChildEnd::Completed && !e.ledger_violation.empty())
    return fail(D::InvalidTiming, Rule::Timing,
                "the grader's call ledger was tampered with: " + e.ledger_violation + "; then: " + e.end_message);
  switch (e.end) {
    case ChildEnd::CallFailed:
      return fail(e.call_status == "NOT_SUPPORTED" ? D::NotSupported : D::Crashed, Rule::Crash, e.end_message);
    case ChildEnd::CallTimedOut:
    case ChildEnd::TimedOut: return fail(D::TimedOut, Rule::Crash, e.end_message);
    case ChildEnd::CudaError: return fail(D::Crashed, Rule::Crash, "CUDA error after a solution call: " + e.end_message);
    case ChildEnd::HarnessError:
      return fail(D::Crashed, Rule::Crash, "harness error in the candidate's process: " + e.end_message);
    case ChildEnd::Died: return fail(D::Crashed, Rule::Crash, e.end_message);
    default: break;
  }
  if (!e.compare_error.empty()) return fail(D::Crashed, Rule::Crash, e.compare_error);
  // 4. Non-finite outputs anywhere (checked, verified or timed calls).
  if (e.nonfinite_outputs > 0 || (e.compared && std::isnan(e.worst_rel_err)))
    return fail(D::Incorrect, Rule::NonFinite,
                "NaN or Inf in the candidate's outputs" + (e.worst_where.empty() ? std::string() : " (" + e.worst_where + ")"));
  if (e.nonfinite_timed_calls > 0)
    return fail(D::Incorrect, Rule::NonFinite,
                std::to_string(e.nonfinite_timed_calls) + " timed " + e.unit + "(s) left NaN/Inf in the outputs");
  // 5. The gate.
  // Stopped before anything could be compared because an input changed (in the child, or the
  // fixture on disk, found before the reference ran): that is the verdict, not a crash.
  if (e.end == ChildEnd::InputModified && !e.compared) return fail(D::Incorrect, Rule::Inputs, e.end_message);
  if (!e.inputs_changed.empty() && !e.compared) return fail(D::Incorrect, Rule::Inputs, e.inputs_changed);
  if (!e.compared) return fail(D::Crashed, Rule::Crash, "no checked output to compare: " + e.end_message);
  if (!(e.worst_rel_err < e.gate))
    return fail(D::Incorrect, Rule::Gate,
                "worst relative error " + g3(e.worst_rel_err) + (e.worst_where.empty() ? "" : " (" + e.worst_where + ")") +
                    " is above the gate " + g3(e.gate));
  // 6. The per-element guard: a sliver of the output cannot be anything.
  if (e.element_guard && !(e.worst_elem_err <= *e.element_guard))
    return fail(D::Incorrect, Rule::ElementGuard,
                "worst element error " + g3(e.worst_elem_err) + " (max |out - ref| / max |ref|) is above the per-element guard " +
                    g3(*e.element_guard));
  // 7. Inputs the candidate may read but not write.
  if (e.end == ChildEnd::InputModified) return fail(D::Incorrect, Rule::Inputs, e.end_message);
  if (!e.inputs_changed.empty()) return fail(D::Incorrect, Rule::Inputs, e.inputs_changed);
  // 8. Timing validity.
  if (e.timed) {
    if (e.samples == 0) return fail(D::InvalidTiming, Rule::Timing, "no timed " + e.unit + " was recorded");
    if (e.invalid_samples > 0)
      return fail(D::InvalidTiming, Rule::Timing,
                  std::to_string(e.invalid_samples) + " timed " + e.unit + "(s) had no valid GPU record: " + e.invalid_reason);
    if (e.floor_us > 0 && e.span_min_us < e.floor_us)
      return fail(D::InvalidTiming, Rule::Timing,
                  "a timed " + e.unit + " took " + g3(e.span_min_us) + " us, below the physical floor " + g3(e.floor_us) +
                      " us (bytes per " + e.unit + " / theoretical bandwidth): not a record");
    // Every timing rule that fails is a finding (Verdict::findings), in this order; the first is the
    // reason. A hidden copy that is also long shows on the clock and in the copy audit: both are said.
    std::vector<std::string> findings;
    // The grader's own clock (the parent's call ledger) bounds what CUPTI, which the solution
    // shares a process with, says.
    if (!e.ledger_violation.empty())
      findings.push_back("the grader's call ledger was tampered with: " + e.ledger_violation);
    if (!e.started_on_gpu.empty()) {
      std::string pids;
      for (const unsigned p : e.started_on_gpu) pids += (pids.empty() ? "" : ", ") + std::to_string(p);
      findings.push_back("a process the candidate started (pid " + pids + ") had a context on the GPU during its timed " + e.unit +
                         "s (NVML): its GPU work is in none of the candidate's records");
    }
    if (!e.uncommitted_timing.empty())
      findings.push_back("the child's timing was rewritten after its calls: the result differs from what each " + e.unit +
                         " committed to the grader's ledger as it closed (" + e.uncommitted_timing + ")");
    if (e.ledger_calls != e.samples)
      findings.push_back("the child reported " + std::to_string(e.samples) + " timed " + e.unit + "s, the grader's own ledger saw " +
                         std::to_string(e.ledger_calls));
    // Time the GPU timer never saw (host work, a sleep, GPU work hidden from CUPTI) is work the
    // span would hide.
    // Graded by that clock (--clock wall), the time counts in the figure instead.
    const double hidden = hidden_time_us(e);
    const double allowance = hidden_time_allowance_us(e.span_median_us, e.host_launch_us);
    if (!e.wall_clock && hidden > allowance)
      findings.push_back("each " + e.unit + " took " + g3(e.window_median_us) + " us (median) of wall time on the grader's own clock, " +
                         g3(hidden) + " us beyond its CUPTI GPU span (" + g3(e.span_median_us) + " us) and the ledger's overhead (" +
                         g3(credited_overhead_us(e)) + " us" +
                         (e.window_overhead_us > overhead_credit_cap_us(e)
                              ? " credited of " + g3(e.window_overhead_us) +
                                    " measured: the calibration windows were slow, the machine busy or the solution's "
                                    "load-time code running"
                              : std::string()) +
                         "), more than the " + g3(allowance) + " us allowed (100 us" +
                         (e.host_launch_us > 0 ? " x " + g3(host_slowdown(e.host_launch_us)) + " for this host's " +
                                                     g3(e.host_launch_us) + " us per kernel launch"
                                               : std::string()) +
                         " + 10% of the span): the call spends time the GPU timer cannot see (host work, GPU work hidden from "
                         "CUPTI, or another process using this GPU); a solution host-bound by design (Python at a small "
                         "shape) is graded by that clock with nibble grade --clock wall");
    // Every launch the driver accepted leaves a record with its correlation id, unless the records
    // were switched off (CUPTI's switches are the solution's too): hidden work, however short (a
    // finding after the clock rule's, which names how much when it is more than the allowance).
    if (e.dropped_records > 0)
      findings.push_back("CUPTI dropped " + std::to_string(e.dropped_records) +
                         " activity records (it had no buffer for them): the GPU spans and the launch audit are incomplete");
    if (e.launch_callbacks_lost)
      findings.push_back("the harness's own kernel launch after the timed " + e.unit +
                         "s went unseen: CUPTI's launch callbacks were ended in the solution's process (cuptiFinalize or an "
                         "unsubscription), so no launch could be matched with its GPU record");
    // A graph instantiated for device launch can be launched by a kernel: no host call, so by nodes
    // no callback and no audit; its records are taken only under --graph-records graphs
    // (enable_device_graph_records), where its own record holds its work.
    if (e.device_launch_graphs > 0 && !e.graphs_recorded_whole)
      findings.push_back("the solution instantiated " + std::to_string(e.device_launch_graphs) +
                         " CUDA graph(s) for launch from the GPU (cudaGraphInstantiateFlagDeviceLaunch): a kernel's "
                         "launch of one makes no host call, so by nodes nothing audits it and the GPU span need not hold "
                         "its work; grade with --graph-records graphs, which records such graphs whole");
    if (e.unrecorded_launches > 0)
      findings.push_back(std::to_string(e.unrecorded_launches) + " of the " + std::to_string(e.launches_audited) +
                         " kernel and graph launches of the timed phase left no GPU record (the first: " +
                         e.first_unrecorded_launch +
                         "; a kernel, or a graph with kernel nodes, needs a kernel record, a graph with memcpy or "
                         "memset nodes a record of each kind too, a graph recorded whole by --graph-records graphs its own "
                         "record): CUPTI's records were "
                         "switched off or taken while they ran, so the GPU span does not hold all of the work");
    // Every copy and memset that reaches the driver leaves a record, host to host and pageable ones
    // too (bench/probe_cupti_launches on an H100, 2026-12-06: 6 host-to-host driver copies, 6
    // records; a zero-byte one makes no driver call, a captured one is left out of the audit): one
    // without a record ran with the copy records off. Honest grades: 0 of ~600,000 audited.
    if (e.unrecorded_copies > 0)
      findings.push_back(std::to_string(e.unrecorded_copies) + " of the " + std::to_string(e.copies_audited) +
                         " copy and memset calls of the timed phase left no GPU record (the first: " + e.first_unrecorded_copy +
                         "): CUPTI's copy records were switched off while they ran, so the GPU span does not hold all "
                         "of the work");
    // Foreign work before the clock comparison: its records inside a window lengthen the span past
    // the window, and the work is the cause worth naming (H200, 2026-12-05: a solution's own copies
    // between calls read "the clocks disagree").
    if (e.gaps_with_foreign_work > 0)
      findings.push_back("the GPU ran work that was not the harness's between timed " + e.unit + "s (" +
                         (e.foreign_work.empty() ? std::string() : e.foreign_work + " ") + "in " +
                         std::to_string(e.gaps_with_foreign_work) + " gaps" +
                         (e.foreign_records_before_build > 0
                              ? ", " + std::to_string(e.foreign_records_before_build) +
                                    " of the records in the dry gap before the build: the solution's load-time code, "
                                    "which an allowance measured there would have let hide as much in every gap"
                              : std::string()) +
                         "), outside every timing window: work a timed call may depend on was not timed");
    // A kernel of the process that outlived the device synchronisation closing its call's window (the
    // harness's syncs cover every stream of its context: another context's work does not wait) ran
    // untimed, and may have written the call's outputs after the window; honest runs show none (0
    // over the 332 timed reports of 2026-12-06's two H100 runs). After the gap rule: a thread that
    // launches between calls also leaves late kernels (one started as a window closed is delivered
    // at the next collect; H100, 2026-12-06, the GEMM gap_work rows), and the gap names it better.
    if (e.late_kernels > 0) {
      const bool many = e.late_kernels > 1;
      findings.push_back(std::to_string(e.late_kernels) + (many ? " kernels" : " kernel") +
                         " of the timed phase ran past the device synchronisation that closed " + (many ? "their " : "its ") +
                         e.unit + "'s window (CUPTI delivered " + (many ? "them" : "it") +
                         " only at a later collect): work that outlives a timed " + e.unit +
                         " (another CUDA context of the process does not wait for the harness's synchronisation), or "
                         "started by another thread as the window closed, was not timed, and may have written the "
                         "outputs after the window");
    }
    if (e.span_median_us > e.window_median_us + kSpanOverWindowSlackUs)
      findings.push_back("the CUPTI GPU span (" + g3(e.span_median_us) + " us median) is longer than the " + e.unit +
                         " lasted on the grader's own clock (" + g3(e.window_median_us) + " us): the clocks disagree");
    if (!findings.empty()) return {D::InvalidTiming, Rule::Timing, findings.front(), findings};
  }
  char margin[64];
  std::snprintf(margin, sizeof margin, " (%.2gx the gate)", e.worst_rel_err / e.gate);
  return {D::Passed, Rule::Passed, "worst relative error " + g3(e.worst_rel_err) + " < gate " + g3(e.gate) + margin, {}};
}

std::vector<double> grader_clock_samples(const std::vector<double>& windows_us, double credited_overhead_us,
                                         const std::vector<double>& spans_us) {
  std::vector<double> out;
  for (size_t i = 0; i < windows_us.size(); ++i)
    out.push_back(std::max(windows_us[i] - credited_overhead_us, i < spans_us.size() ? spans_us[i] : 0.0));
  return out;
}

}  // namespace nibble
