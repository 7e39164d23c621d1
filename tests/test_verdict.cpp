// test_verdict.cpp: judge(), every rule and the order between them, for every task in the registry
// (each task's own gate, guard and unit; the evidence is what a grade of it would gather).
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "harness/task.h"
#include "harness/verdict.h"

using namespace nibble;

namespace {

/** A candidate that passes everything: completed, compared at a tenth of the gate, timed validly
 *  (span 1000 us, wall 1010 us, floor 400 us; the grader's ledger saw every call, 1030 us each,
 *  20 us of it its own overhead). */
Evidence passing(const Task& t) {
  const std::string config = t.official_configs().front();
  Evidence e;
  e.gate = t.gate(config);
  e.element_guard = t.element_guard(config);
  e.unit = t.unit();
  e.compared = true;
  e.worst_rel_err = e.gate / 10;
  e.worst_elem_err = 0;
  e.timed = true;
  e.samples = 96;
  e.span_median_us = 1000;
  e.span_min_us = 990;
  e.wall_median_us = 1010;
  e.floor_us = 400;
  e.ledger_calls = 96;
  e.window_median_us = 1030;
  e.window_overhead_us = 20;
  return e;
}

class Judge : public ::testing::TestWithParam<const Task*> {
 protected:
  Evidence base() const { return passing(*GetParam()); }
};

void expect(const Evidence& e, Disposition d, Rule r, const std::string& reason_part = "") {
  const Verdict v = judge(e);
  EXPECT_EQ(to_string(v.disposition), std::string(to_string(d))) << v.reason;
  EXPECT_EQ(to_string(v.rule), std::string(to_string(r))) << v.reason;
  if (!reason_part.empty()) {
    EXPECT_NE(v.reason.find(reason_part), std::string::npos) << v.reason;
  }
}

}  // namespace

TEST_P(Judge, AnHonestCandidatePassesWithItsMargin) {
  const Evidence e = base();
  expect(e, Disposition::Passed, Rule::Passed, "0.1x the gate");
}

TEST_P(Judge, LoadFailuresNameTheirKind) {
  Evidence e = base();
  e.end = ChildEnd::LoadFailed;
  e.compared = false;
  e.end_message = "bad .so";
  e.load_kind = "AbiMismatch";
  expect(e, Disposition::AbiMismatch, Rule::Load, "bad .so");
  e.load_kind = "MissingSymbol";
  expect(e, Disposition::MissingSymbol, Rule::Load);
  e.load_kind = "NotLoadable";
  expect(e, Disposition::NotLoadable, Rule::Load);
  e.load_kind = "NotFound";
  expect(e, Disposition::NotLoadable, Rule::Load);
}

TEST_P(Judge, BuildFailures) {
  Evidence e = base();
  e.compared = false;
  e.failed_in_build = true;
  e.end = ChildEnd::CallFailed;
  e.call_status = "NOT_SUPPORTED";
  expect(e, Disposition::NotSupported, Rule::Build);
  e.call_status = "INTERNAL";
  expect(e, Disposition::Crashed, Rule::Build);
  e.end = ChildEnd::CallTimedOut;
  expect(e, Disposition::TimedOut, Rule::Build);
  e.end = ChildEnd::TimedOut;  // the parent's timeout (or a stopped child) before the build returned
  expect(e, Disposition::TimedOut, Rule::Build);
}

TEST_P(Judge, CrashesAndTimeoutsAfterTheBuild) {
  Evidence e = base();
  for (auto [end, d] : std::vector<std::pair<ChildEnd, Disposition>>{{ChildEnd::Died, Disposition::Crashed},
                                                                     {ChildEnd::TimedOut, Disposition::TimedOut},
                                                                     {ChildEnd::CallTimedOut, Disposition::TimedOut},
                                                                     {ChildEnd::CudaError, Disposition::Crashed},
                                                                     {ChildEnd::HarnessError, Disposition::Crashed}}) {
    e.end = end;
    expect(e, d, Rule::Crash);
  }
  e.end = ChildEnd::CallFailed;
  e.call_status = "NOT_SUPPORTED";
  expect(e, Disposition::NotSupported, Rule::Crash);
  e.call_status = "CUDA";
  expect(e, Disposition::Crashed, Rule::Crash);
  e = base();
  e.compare_error = "the candidate's outputs could not be read";
  expect(e, Disposition::Crashed, Rule::Crash, "could not be read");
  e = base();
  e.compared = false;  // completed, but nothing to compare
  expect(e, Disposition::Crashed, Rule::Crash);
  // The child's wait on the ledger failed because the solution tampered with it: that is the reason.
  for (const ChildEnd end : {ChildEnd::HarnessError, ChildEnd::Died, ChildEnd::TimedOut}) {
    e = base();
    e.end = end;
    e.end_message = "the grader's call ledger did not answer for round 0, call 0";
    e.ledger_violation = "a calibration window beyond the harness's 24 (round -1, call 24)";
    expect(e, Disposition::InvalidTiming, Rule::Timing, "call ledger was tampered with: a calibration window beyond");
  }
}

TEST_P(Judge, NonFiniteOutputsAnywhere) {
  Evidence e = base();
  e.worst_rel_err = NAN;
  expect(e, Disposition::Incorrect, Rule::NonFinite);
  e = base();
  e.nonfinite_outputs = 1;
  expect(e, Disposition::Incorrect, Rule::NonFinite);
  e = base();
  e.nonfinite_timed_calls = 3;
  expect(e, Disposition::Incorrect, Rule::NonFinite, "3 timed");
}

TEST_P(Judge, TheGateIsStrict) {
  Evidence e = base();
  e.worst_rel_err = e.gate;  // not below the gate
  expect(e, Disposition::Incorrect, Rule::Gate, "above the gate");
  e.worst_rel_err = std::nextafter(e.gate, 0.0);
  expect(e, Disposition::Passed, Rule::Passed);
  e.worst_rel_err = INFINITY;  // a reference of zeros against a non-zero output
  expect(e, Disposition::Incorrect, Rule::Gate);
}

TEST_P(Judge, ThePerElementGuard) {
  Evidence e = base();
  e.element_guard = 0.05;
  e.worst_elem_err = 0.05;  // at the guard: allowed
  expect(e, Disposition::Passed, Rule::Passed);
  e.worst_elem_err = 0.7;   // a sliver of the output zeroed
  expect(e, Disposition::Incorrect, Rule::ElementGuard, "per-element guard");
  e.element_guard.reset();  // a task without a guard yet
  expect(e, Disposition::Passed, Rule::Passed);
}

TEST_P(Judge, InputModification) {
  Evidence e = base();
  e.end = ChildEnd::InputModified;
  e.end_message = "the candidate modified 'W'";
  expect(e, Disposition::Incorrect, Rule::Inputs, "modified 'W'");
  e.compared = false;  // stopped during the checked calls
  expect(e, Disposition::Incorrect, Rule::Inputs);
  e = base();
  e.inputs_changed = "fixture file changed";
  expect(e, Disposition::Incorrect, Rule::Inputs, "fixture file changed");
  e.compared = false;  // found before the reference ran: nothing was compared, still not a crash
  expect(e, Disposition::Incorrect, Rule::Inputs, "fixture file changed");
}

TEST_P(Judge, TimingValidity) {
  Evidence e = base();
  e.samples = 0;
  expect(e, Disposition::InvalidTiming, Rule::Timing);
  e = base();
  e.span_min_us = 399;  // below the floor
  expect(e, Disposition::InvalidTiming, Rule::Timing, "below the physical floor");
  e = base();
  e.floor_us = 0;  // unknown floor: not judged
  e.span_min_us = 1;
  expect(e, Disposition::Passed, Rule::Passed);
  e = base();
  e.invalid_samples = 2;
  e.invalid_reason = "no record";
  e.span_min_us = 0;  // an invalid sample's span: said as what it is, not as a record below the floor
  expect(e, Disposition::InvalidTiming, Rule::Timing, "no valid GPU record: no record");
  // The grader's own clock: hidden time beyond the span and the ledger's overhead may be at most
  // 100 us + 10% of the span (here 200 us: a window of 1220 us is at the edge, 1221 beyond it).
  e = base();
  e.window_median_us = 1220;
  expect(e, Disposition::Passed, Rule::Passed);
  e.window_median_us = 1221;
  expect(e, Disposition::InvalidTiming, Rule::Timing, "201 us beyond its CUPTI GPU span");
  // The allowance's 100 us grows with the host's launch cost over 2.6 us, never below 1x, at most
  // 3x: here 5.2 us per launch, twice the reference, so 300 us at a 1000 us span.
  EXPECT_DOUBLE_EQ(host_slowdown(0), 1.0);    // not measured
  EXPECT_DOUBLE_EQ(host_slowdown(1.3), 1.0);  // a faster host: never tighter than the reference's
  EXPECT_DOUBLE_EQ(host_slowdown(5.2), 2.0);
  EXPECT_DOUBLE_EQ(host_slowdown(52), 3.0);
  EXPECT_DOUBLE_EQ(hidden_time_allowance_us(1000, 5.2), 300.0);
  e = base();
  e.host_launch_us = 5.2;
  e.window_median_us = 1320;
  expect(e, Disposition::Passed, Rule::Passed);
  e.window_median_us = 1321;
  expect(e, Disposition::InvalidTiming, Rule::Timing, "301 us beyond its CUPTI GPU span");
  expect(e, Disposition::InvalidTiming, Rule::Timing, "300 us allowed (100 us x 2 for this host's 5.2 us per kernel launch");
  e.host_launch_us = 520;  // a host 200x slower still lets 300 us hide, no more
  e.window_median_us = 1420;
  expect(e, Disposition::Passed, Rule::Passed);
  e.window_median_us = 1421;
  expect(e, Disposition::InvalidTiming, Rule::Timing, "400 us allowed (100 us x 3");
  // hostile_graph on tiny on an H100 host at 5.38 us per launch (9011b5b): 110 us beyond a 61.6 us
  // span, over a fixed 106 us allowance; within the host's.
  e = base();
  e.span_median_us = 61.6;
  e.span_min_us = 60;
  e.floor_us = 10;
  e.window_median_us = 61.6 + 20 + 110;
  expect(e, Disposition::InvalidTiming, Rule::Timing, "110 us beyond its CUPTI GPU span");
  e.host_launch_us = 5.38;
  expect(e, Disposition::Passed, Rule::Passed);
  e = base();
  e.span_median_us = 64;  // launch-bound through a CUDA graph (tiny, H200): 132 us of wall
  e.span_min_us = 60;
  e.floor_us = 10;
  e.window_median_us = 132 + 20;
  expect(e, Disposition::Passed, Rule::Passed);
  // The ledger's overhead is credited up to 400 us, plus the harness's own bytes in each window at
  // 1 TB/s: a solution whose load-time code slowed the calibration windows to 5 ms would otherwise
  // hide 5 ms of work per call. Here 1000 us of span in a 1800 us window: with 400 us credited, 400
  // us are hidden (the allowance is 200).
  e = base();
  e.window_overhead_us = 5000;
  e.window_median_us = 1800;
  expect(e, Disposition::InvalidTiming, Rule::Timing, "400 us beyond its CUPTI GPU span");
  expect(e, Disposition::InvalidTiming, Rule::Timing, "400 us credited of 5e+03 measured");
  EXPECT_EQ(credited_overhead_us(e), kLedgerOverheadCreditUs);
  e.window_work_us = window_work_credit_us(150'000'000, 50'000'000);  // 200 MB staged and digested: 200 us more
  EXPECT_DOUBLE_EQ(e.window_work_us, 200.0);
  EXPECT_EQ(credited_overhead_us(e), 600.0);
  expect(e, Disposition::Passed, Rule::Passed);  // 200 us hidden: at the allowance
  e.window_median_us = 1801;
  expect(e, Disposition::InvalidTiming, Rule::Timing, "201 us beyond its CUPTI GPU span");
  e.window_work_us = 0;
  e.window_overhead_us = 400;  // at the credit: the edge is 400 + 1000 + 200
  e.window_median_us = 1600;
  expect(e, Disposition::Passed, Rule::Passed);
  e.window_median_us = 1601;
  expect(e, Disposition::InvalidTiming, Rule::Timing, "and the ledger's overhead (400 us), more than");
  e.window_overhead_us = -600;  // a negative measure credits nothing (the calibration's fault, never the call's gain)
  EXPECT_EQ(credited_overhead_us(e), 0.0);
  e.window_median_us = 1200;
  expect(e, Disposition::Passed, Rule::Passed);  // 200 us hidden: at the allowance, as with 0 measured
  e = base();
  e.span_median_us = 400;  // a third of a 1 ms call's work visible to CUPTI, the rest hidden
  e.span_min_us = 400;
  e.window_median_us = 1030;
  expect(e, Disposition::InvalidTiming, Rule::Timing, "wall time on the grader's own clock");
  // Graded on the grader's clock (--clock wall), the time beyond the span is the figure, not hidden:
  // the same window passes; the clocks must still agree.
  e.wall_clock = true;
  expect(e, Disposition::Passed, Rule::Passed);
  e.window_median_us = 350;  // shorter than the span: the clocks disagree, whichever is the figure
  expect(e, Disposition::InvalidTiming, Rule::Timing, "the clocks disagree");
  // The launch audit: one launch without a record is hidden work, however far inside the allowance
  // the window stays (here the records were off for one launch of 960: nothing on the grader's clock).
  e = base();
  e.launches_audited = 960;
  expect(e, Disposition::Passed, Rule::Passed);
  e.unrecorded_launches = 1;
  e.first_unrecorded_launch = "cudaLaunchKernel_v7000";
  expect(e, Disposition::InvalidTiming, Rule::Timing,
         "1 of the 960 kernel and graph launches of the timed phase left no GPU record (the first: "
         "cudaLaunchKernel_v7000; a kernel, or a graph with kernel nodes, needs a kernel record, a graph with memcpy "
         "or memset nodes a record of each kind too, a graph recorded whole by --graph-records graphs its own record)");
  // The copy audit: a copy or memset call without a record ran with the copy records off, however
  // short (every driver copy leaves one, host to host included: probe_cupti_launches, H100).
  e = base();
  e.copies_audited = 4000;
  expect(e, Disposition::Passed, Rule::Passed);
  e.unrecorded_copies = 2;
  e.first_unrecorded_copy = "cuMemcpyAsync";
  expect(e, Disposition::InvalidTiming, Rule::Timing,
         "2 of the 4000 copy and memset calls of the timed phase left no GPU record (the first: cuMemcpyAsync)");
  e.gaps_with_foreign_work = 1;  // a hidden copy is named before the gaps' (recorded) work
  expect(e, Disposition::InvalidTiming, Rule::Timing, "left no GPU record");
  // A graph instantiated for launch from the GPU: by nodes nothing audits its launches (no host
  // call); recorded whole (--graph-records graphs) its launches have records of their own.
  e = base();
  e.device_launch_graphs = 1;
  expect(e, Disposition::InvalidTiming, Rule::Timing,
         "the solution instantiated 1 CUDA graph(s) for launch from the GPU (cudaGraphInstantiateFlagDeviceLaunch)");
  e.graphs_recorded_whole = true;
  expect(e, Disposition::Passed, Rule::Passed);
  // A kernel still running past the window's device sync (another context's work): untimed work that
  // may have written the outputs after the window, however short.
  e = base();
  e.late_kernels = 1;
  expect(e, Disposition::InvalidTiming, Rule::Timing,
         "1 kernel of the timed phase ran past the device synchronisation that closed its ");
  // With foreign work in the gaps too (a thread launching between calls leaves both: one kernel
  // started as a window closed reaches the next collect), the gap is named.
  e.gaps_with_foreign_work = 2;
  expect(e, Disposition::InvalidTiming, Rule::Timing, "between timed");
  e.gaps_with_foreign_work = 0;
  e.late_kernels = 0;
  expect(e, Disposition::Passed, Rule::Passed);
  e = base();
  e.dropped_records = 3;  // CUPTI had no buffer: what the records say is incomplete
  expect(e, Disposition::InvalidTiming, Rule::Timing, "CUPTI dropped 3 activity records");
  e = base();
  e.launches_audited = 960;  // the callbacks ended: the harness's own launch at the end went unseen
  e.launch_callbacks_lost = true;
  expect(e, Disposition::InvalidTiming, Rule::Timing, "launch callbacks were ended");
  e = base();
  e.launches_audited = 960;
  e.unrecorded_launches = 1;
  e.first_unrecorded_launch = "cudaLaunchKernel_v7000";
  e.window_median_us = 1500;  // and beyond the allowance too: the clock rule says how much
  expect(e, Disposition::InvalidTiming, Rule::Timing, "beyond its CUPTI GPU span");
  e = base();
  e.window_median_us = 979;  // the span is longer than the call lasted, beyond 20 us of noise
  expect(e, Disposition::InvalidTiming, Rule::Timing, "clocks disagree");
  e.window_median_us = 980;
  expect(e, Disposition::Passed, Rule::Passed);
  e = base();
  e.ledger_calls = 95;  // the child says 96 calls, the grader saw 95
  expect(e, Disposition::InvalidTiming, Rule::Timing, "ledger saw 95");
  e = base();
  e.ledger_violation = "a call out of sequence (round 0, call 5)";
  expect(e, Disposition::InvalidTiming, Rule::Timing, "call ledger was tampered with: a call out of sequence");
  e = base();
  e.started_on_gpu = {4242};
  expect(e, Disposition::InvalidTiming, Rule::Timing, "a process the candidate started (pid 4242) had a context on the GPU");
  e = base();
  e.uncommitted_timing = "round 0, call 0: 980.0 us committed, 490.0 us reported";
  expect(e, Disposition::InvalidTiming, Rule::Timing, "timing was rewritten after its calls");
  e = base();
  e.gaps_with_foreign_work = 4;
  e.foreign_work = "4 memcpys";
  expect(e, Disposition::InvalidTiming, Rule::Timing, "(4 memcpys in 4 gaps)");
  e.window_median_us = 900;  // and their records inside the windows made the span outlast them: the work is named
  expect(e, Disposition::InvalidTiming, Rule::Timing, "(4 memcpys in 4 gaps)");
  e = base();
  e.gaps_with_foreign_work = 1;  // the dry gap before the build held the solution's kernels: load-time code
  e.foreign_work = "3 kernels";
  e.foreign_records_before_build = 3;
  expect(e, Disposition::InvalidTiming, Rule::Timing, "(3 kernels in 1 gaps, 3 of the records in the dry gap before the build");
  e = base();
  e.timed = false;  // --no-timing: nothing to judge
  e.samples = 0;
  expect(e, Disposition::Passed, Rule::Passed);
}

TEST_P(Judge, EveryFailingTimingCheckIsAFinding) {
  Evidence e = base();
  EXPECT_TRUE(judge(e).findings.empty());
  // A 1.2 ms copy hidden with the copy records off: on the grader's clock, and in the copy audit.
  e.window_median_us = 1030 + 1200;
  e.unrecorded_copies = 96;
  e.copies_audited = 4000;
  e.first_unrecorded_copy = "cuGraphLaunch";
  e.late_kernels = 3;
  const Verdict v = judge(e);
  ASSERT_EQ(v.findings.size(), 3u) << v.reason;
  EXPECT_EQ(v.findings[0], v.reason);
  EXPECT_NE(v.findings[0].find("beyond its CUPTI GPU span"), std::string::npos) << v.findings[0];
  EXPECT_NE(v.findings[1].find("96 of the 4000 copy and memset calls"), std::string::npos) << v.findings[1];
  EXPECT_NE(v.findings[2].find("3 kernels of the timed phase ran past"), std::string::npos) << v.findings[2];
  // Any other rule: its first failing check alone.
  e.worst_rel_err = e.gate * 2;
  const Verdict gate = judge(e);
  EXPECT_EQ(gate.findings, std::vector<std::string>{gate.reason});
}

TEST_P(Judge, TheFirstFailingRuleWins) {
  // Each step adds the next rule's failure to every earlier one: the verdict stays with the first.
  Evidence all = base();
  all.gaps_with_foreign_work = 1;                                 // timing
  expect(all, Disposition::InvalidTiming, Rule::Timing);
  all.inputs_changed = "fixture changed";                         // inputs
  expect(all, Disposition::Incorrect, Rule::Inputs);
  all.element_guard = 0.01;
  all.worst_elem_err = 0.5;                                       // element guard
  expect(all, Disposition::Incorrect, Rule::ElementGuard);
  all.worst_rel_err = all.gate * 2;                               // gate
  expect(all, Disposition::Incorrect, Rule::Gate);
  all.nonfinite_timed_calls = 1;                                  // non-finite
  expect(all, Disposition::Incorrect, Rule::NonFinite);
  all.end = ChildEnd::CudaError;                                  // crash
  expect(all, Disposition::Crashed, Rule::Crash);
  all.end = ChildEnd::CallFailed;                                 // build
  all.failed_in_build = true;
  all.call_status = "NOT_SUPPORTED";
  expect(all, Disposition::NotSupported, Rule::Build);
  all.end = ChildEnd::LoadFailed;                                 // load
  all.load_kind = "MissingSymbol";
  expect(all, Disposition::MissingSymbol, Rule::Load);
}

INSTANTIATE_TEST_SUITE_P(EveryTask, Judge, ::testing::ValuesIn(all_tasks()),
                         [](const ::testing::TestParamInfo<const Task*>& p) {
                           std::string n = p.param->name();
                           for (char& c : n)
                             if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
                           return n;
                         });

TEST(Disposition, StringsRoundTrip) {
  for (int i = 0; i <= int(Disposition::NotLoadable); ++i) {
    const auto d = Disposition(i);
    ASSERT_EQ(disposition_from_string(to_string(d)), d);
  }
  EXPECT_FALSE(disposition_from_string("passed").has_value());
  EXPECT_STREQ(to_string(Disposition::InvalidTiming), "InvalidTiming");
}

TEST(Verdict, GraderClockSamplesAreTheWindowsLessTheOverheadNeverBelowTheSpan) {
  // Three calls (us): a Python call of 200 on the grader's clock around a 3 us span, one whose window
  // came out shorter than the overhead credited (a 12 us span in 40: 40 - 30 = 10 < 12), and a call
  // the child's count lacks (no span to floor it).
  const std::vector<double> got = grader_clock_samples({200, 40, 90}, 30, {3, 12});
  ASSERT_EQ(got.size(), 3u);
  EXPECT_DOUBLE_EQ(got[0], 170);
  EXPECT_DOUBLE_EQ(got[1], 12);
  EXPECT_DOUBLE_EQ(got[2], 60);
  EXPECT_TRUE(grader_clock_samples({}, 30, {3}).empty());
}
