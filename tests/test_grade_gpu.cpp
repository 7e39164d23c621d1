// test_grade_gpu.cpp: whole grades on the tiny config. Every candidate, however broken, ends in
// exactly one disposition, a report, and the documented exit code; the grader never crashes.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <tuple>

#include "test_binary_dir.h"
#include "bundled_solutions.h"
#include "gemm_tasks.h"
#include "fixtures/safetensors.h"
#include "gpu_test_util.h"
#include "harness/atomic_file.h"
#include "harness/process.h"
#include "harness/profile.h"

using namespace nibble;
using json = nlohmann::json;

namespace {
using test::bindir;  // tests/test_binary_dir.h

struct Graded {
  int code;
  json report;
  std::string output;
  std::vector<std::string> files;  // what the grade left beside its report (file names)
};

Graded grade(const std::string& so, std::vector<std::string> extra = {"--no-timing"}, int timeout = 120) {
  static TempDir fixtures("nibble-grade-test-fixtures");  // shared cache: built once per run
  TempDir t;
  std::vector<std::string> args = {bindir() + "/bin/nibble", "grade", "--config", "tiny", "--solution", so,
                                   "--out", t.path() + "/report.json", "--timeout", std::to_string(timeout), "-q"};
  args.insert(args.end(), extra.begin(), extra.end());
  setenv("NIBBLE_CACHE_DIR", fixtures.path().c_str(), 1);
  const ChildExit e = run_child(args, t.path() + "/log", 300);
  Graded g;
  g.code = e.kind == ChildExit::Exited ? e.code : -1;
  g.output = file_tail(t.path() + "/log", 1 << 15);
  for (const auto& f : std::filesystem::directory_iterator(t.path())) g.files.push_back(f.path().filename().string());
  try {
    g.report = json::parse(read_file(t.path() + "/report.json"));
  } catch (const std::exception&) {
  }
  return g;
}
std::string lib(const std::string& n) { return bindir() + "/lib/lib" + n + ".so"; }
/** A GEMM task's grade on the tiny config: seed 0, one timed round, plus `extra`. */
Graded grade_gemm(const std::string& so, const std::string& task, std::vector<std::string> extra = {}) {
  std::vector<std::string> args = {"--task", task, "--seeds", "0", "--min-rounds", "1", "--max-rounds", "1"};
  args.insert(args.end(), extra.begin(), extra.end());
  return grade(so, args);
}
std::string bad(const std::string& n) { return bindir() + "/tests/lib/libbad_" + n + ".so"; }
}  // namespace

TEST(GradeGpu, ReferenceAgainstItselfPassesWithTiming) {
  NIBBLE_REQUIRE_GPU();
  const Graded g = grade(lib("nibble_reference"), {"--min-rounds", "2", "--max-rounds", "3"});
  ASSERT_EQ(g.code, 0) << g.output;
  EXPECT_EQ(g.report["disposition"], "Passed");
  EXPECT_LT(g.report["correctness"]["worst_rel_err"].get<double>(), 1e-5);
  const json& t = g.report["timing"];
  EXPECT_GE(t["gpu_span_us"]["n"].get<int>(), 64);
  EXPECT_GT(t["gpu_span_us"]["median"].get<double>(), 0.0);
  EXPECT_GE(t["kernels_per_call"]["min"].get<double>(), 1.0);
  EXPECT_EQ(t["unit"], "token");
  EXPECT_EQ(g.report["schema_version"], "2.9.0");
  EXPECT_EQ(t.value("graph_launches_audited", -1), 0) << "the megakernel launches no CUDA graph";
  EXPECT_EQ(t.value("clock", ""), "span");
  // The audits see the harness's own work too: a launch per timed call at least, and the L2 flush's
  // memset before each (the copy audit, observe-only), every one on the record in an honest grade.
  const int calls = t["gpu_span_us"]["n"].get<int>();
  EXPECT_GE(t.value("launches_audited", 0), calls) << t.dump().substr(0, 2000);
  EXPECT_GE(t.value("copies_audited", 0), calls) << t.dump().substr(0, 2000);
  EXPECT_EQ(t.value("unrecorded_launches", -1), 0);
  std::printf("  copy audit: %d copies and memsets, %d without a record (first: %s)\n", t.value("copies_audited", 0),
              t.value("unrecorded_copies", 0), t.value("first_unrecorded_copy", std::string("-")).c_str());
  EXPECT_FALSE(t["verified_calls"].empty()) << "the timed calls were re-checked";
  // The ledger's windows hold the seed's round trip, the staging and the digest; its calibration
  // windows do the same, so the overhead credited covers them (the figure the allowance judges).
  const json& lj = t["ledger"];
  std::printf("  ledger: overhead %.1f us (credit cap %.1f), hidden %.1f us of %.1f allowed, window median %.1f us\n",
              lj.value("overhead_us", -1.0), lj.value("overhead_credit_cap_us", -1.0), lj.value("hidden_us", -1.0),
              lj.value("hidden_allowance_us", -1.0), lj["window_us"].value("median", -1.0));
  EXPECT_LT(lj.value("overhead_us", 1e9), lj.value("overhead_credit_cap_us", 0.0)) << lj.dump();
  // The host's launch cost, measured by the child before the load: an empty kernel's launch is a
  // few us on every host measured (2.6-5.9); the allowance is 100 us times its slowdown + 10% of the span.
  ASSERT_TRUE(lj["host_launch_us"].is_number()) << lj.dump();
  const double host_us = lj["host_launch_us"].get<double>();
  std::printf("  host: %.2f us per kernel launch, slowdown %.2f\n", host_us, lj.value("host_slowdown", -1.0));
  EXPECT_GT(host_us, 0.5);
  EXPECT_LT(host_us, 50.0);
  EXPECT_DOUBLE_EQ(lj.value("host_slowdown", 0.0), std::min(3.0, std::max(1.0, host_us / 2.6)));
  // The span part is 10% of the median over every timed call (`samples`; the summary's median may
  // leave throttled rounds out).
  std::vector<double> all = t["gpu_span_us"]["samples"].get<std::vector<double>>();
  std::sort(all.begin(), all.end());
  const double median = all.empty() ? 0 : all.size() % 2 ? all[all.size() / 2] : (all[all.size() / 2 - 1] + all[all.size() / 2]) / 2;
  EXPECT_NEAR(lj.value("hidden_allowance_us", 0.0), 100.0 * lj.value("host_slowdown", 0.0) + 0.1 * median, 1e-6);
  // NVML's view of the GPU as each call closed: the candidate started no process on it.
  std::printf("  processes on the GPU as calls closed: at most %s\n", lj["gpu_processes"]["most"].dump().c_str());
  EXPECT_EQ(lj["gpu_processes"]["started_by_candidate"], json::array()) << lj["gpu_processes"].dump();
  // Where NVML listed them, the candidate's own child was among them: a listing that finds nothing is no check.
  EXPECT_TRUE(lj["gpu_processes"]["most"].is_null() || lj["gpu_processes"]["most"].get<int>() >= 1) << lj["gpu_processes"].dump();
  EXPECT_FALSE(g.report["device"]["name"].get<std::string>().empty());
  EXPECT_EQ(t["timing_seed_from"], "none: every draw from the OS-seeded generator of the grader's parent, revealed to the child as each timed call's window opens") << t.dump();
  EXPECT_TRUE(t["timing_seed"].is_null()) << t.dump();
  EXPECT_EQ(g.report["fixtures"].size(), 2u);
  std::cout << g.output;
}

// --graph-records graphs: an honest solution that replays its step as a CUDA graph (the hostile
// suite's `graph` row) is timed by one GRAPH_TRACE record per launch, and its launches pass the audit
// on that record; its kernels leave no record of their own (what spares their per-node tracing time,
// probe_cupti_launches's section 5). The same library by nodes: kernel records, no graph records.
TEST(GradeGpu, AGraphIsRecordedWholeOrByItsNodes) {
  NIBBLE_REQUIRE_GPU();
  const std::string so = bindir() + "/tests/lib/libhostile_graph.so";
  for (const std::string mode : {"graphs", "nodes"}) {
    const Graded g = grade(so, {"--seeds", "0", "--min-rounds", "1", "--max-rounds", "1", "--graph-records", mode});
    ASSERT_EQ(g.code, 0) << mode << "\n" << g.output;
    EXPECT_EQ(g.report["disposition"], "Passed") << g.report["reason"];
    const json& t = g.report["timing"];
    EXPECT_EQ(t.value("graph_records", ""), mode);
    EXPECT_EQ(t.value("unrecorded_launches", -1), 0) << t.dump().substr(0, 2000);
    const double graphs = t["graph_launches_per_call"]["median"].get<double>(), kernels = t["kernels_per_call"]["median"].get<double>();
    std::printf("  --graph-records %s: median %.1f us/token, %.0f graph launches and %.0f kernels recorded per call\n",
                mode.c_str(), t["gpu_span_us"]["median"].get<double>(), graphs, kernels);
    if (mode == "graphs") {
      EXPECT_GE(graphs, 1.0);
      EXPECT_EQ(kernels, 0.0) << "GRAPH_TRACE on: CUPTI was expected to write no record per node";
    } else {
      EXPECT_EQ(graphs, 0.0);
      EXPECT_GE(kernels, 1.0);
    }
  }
}

// --profile: a profiler's run after the verdict; the profile beside the report and its top kernels
// in it where the profiler is installed, a "not run" status (and the same verdict) where not.
TEST(GradeGpu, ProfileRunsAfterTheVerdict) {
  NIBBLE_REQUIRE_GPU();
  for (const std::string tool : {"ncu", "nsys"}) {
    SCOPED_TRACE(tool);
    const Graded g = grade(lib("nibble_unfused"), {"--no-timing", "--seeds", "0", "--profile", tool});
    ASSERT_EQ(g.code, 0) << g.output;
    ASSERT_TRUE(g.report.contains("profile")) << g.report.dump();
    const json& p = g.report["profile"];
    const std::string status = p.value("status", "");
    std::printf("  --profile %s: %s\n", tool.c_str(), status.c_str());
    if (find_profiler(tool).empty()) {
      EXPECT_EQ(status.rfind("not run: ", 0), 0u) << p.dump();
      continue;
    }
    if (status.find("NVGPUCTRPERM") != std::string::npos) {  // a machine that keeps the counters from users
      std::printf("  %s: no access to the GPU's performance counters here; the status says so\n", tool.c_str());
      continue;
    }
    EXPECT_EQ(status, "done") << p.dump() << "\n" << g.output;
    const std::string rep = tool == "ncu" ? "report.ncu-rep" : "report.nsys-rep";
    EXPECT_NE(std::find(g.files.begin(), g.files.end(), rep), g.files.end()) << "the profile is stored next to the report";
    ASSERT_TRUE(p["top_kernels"].is_array() && !p["top_kernels"].empty()) << p.dump();
    EXPECT_GT(p["top_kernels"][0]["total_us"].get<double>(), 0.0);
    if (tool == "ncu") {
      EXPECT_TRUE(p["top_kernels"][0]["registers_per_thread"].is_number()) << p.dump();
    }
    EXPECT_EQ(g.report["disposition"], "Passed");
  }
}

// --device: the report names the GPU the grade ran on (index, PCI bus id) and what NVML saw on it at
// the start (clocks, other processes).
TEST(GradeGpu, TheDeviceIsRecorded) {
  NIBBLE_REQUIRE_GPU();
  const Graded g = grade(lib("nibble_reference"), {"--no-timing", "--seeds", "0", "--device", "0"});
  ASSERT_EQ(g.code, 0) << g.output;
  const json& d = g.report["device"];
  EXPECT_EQ(d["index"], 0);
  EXPECT_EQ(d["pci_bus_id"].get<std::string>().size(), 12u) << d.dump() << " (0000:xx:yy.z)";
  EXPECT_TRUE(d["at_start"].is_object()) << d.dump();
  if (d["at_start"].contains("other_processes")) {
    EXPECT_TRUE(d["at_start"]["other_processes"].is_array());
  }
}

// The report lists every layer of the child's sandbox and the binaries pinned by hash; a grade with
// --require-sandbox passes where every layer is in force, and is refused (exit 2, before any
// candidate runs) where one is not. Prints what this machine gives (the GPU check reads it).
TEST(GradeGpu, SandboxIsReportedAndCanBeRequired) {
  NIBBLE_REQUIRE_GPU();
  const Graded g = grade(lib("nibble_reference"));
  ASSERT_EQ(g.code, 0) << g.output;
  const json& sb = g.report["sandbox"];
  ASSERT_TRUE(sb.is_object()) << g.report.dump();
  EXPECT_EQ(sb["layers"].size(), 7u) << sb.dump();
  EXPECT_EQ(sb["layers_from"], "the candidate's child");
  EXPECT_EQ(sb["binaries"]["solution"]["sha256"], g.report["solution"]["sha256"]);
  EXPECT_EQ(sb["binaries"]["reference"]["sha256"], g.report["reference"]["sha256"]);
  EXPECT_EQ(sb["binaries"]["nibble"]["sha256"].get<std::string>().size(), 64u);
  for (const auto& l : sb["layers"]) std::printf("  sandbox layer %s: %s: %s\n", l["name"].get<std::string>().c_str(),
                                                 l["state"].get<std::string>().c_str(), l["detail"].get<std::string>().c_str());
  const Graded r = grade(lib("nibble_reference"), {"--no-timing", "--require-sandbox"});
  if (sb["complete"].get<bool>()) {
    EXPECT_EQ(r.code, 0) << r.output;
    EXPECT_EQ(r.report["sandbox"]["required"], true);
  } else {
    EXPECT_EQ(r.code, 2) << r.output;
    EXPECT_NE(r.output.find("--require-sandbox"), std::string::npos) << r.output;
  }
}

// Every bundled decode solution (bundled_solutions.h) passes a timed grade; a .so not built for
// this GPU is skipped with the reason.
class GradeBundledDecodeGpu : public ::testing::TestWithParam<test::BundledSolution> {};

TEST_P(GradeBundledDecodeGpu, Passes) {
  NIBBLE_REQUIRE_GPU();
  const test::BundledSolution& sol = GetParam();
  std::string why;
  if (!test::runs_on_this_device(sol.cuda_architectures, &why)) GTEST_SKIP() << sol.target << ": " << why;
  const Graded g = grade(sol.path, {"--min-rounds", "2", "--max-rounds", "3"});
  ASSERT_EQ(g.code, 0) << g.output;
  EXPECT_EQ(g.report["disposition"], "Passed");
  EXPECT_LT(g.report["correctness"]["worst_rel_err"].get<double>(), 1e-1);
  std::cout << g.output;
}

std::string target_name(const ::testing::TestParamInfo<test::BundledSolution>& info) { return info.param.target; }

INSTANTIATE_TEST_SUITE_P(Solutions, GradeBundledDecodeGpu, ::testing::ValuesIn(test::bundled_solutions("decode")),
                         target_name);

TEST(GradeGpu, UnwrittenLogitsAreIncorrect) {
  NIBBLE_REQUIRE_GPU();
  const Graded g = grade(bad("nothing"));
  EXPECT_EQ(g.code, 1) << g.output;
  EXPECT_EQ(g.report["disposition"], "Incorrect");
  EXPECT_NE(g.report["reason"].get<std::string>().find("NaN"), std::string::npos);
}

TEST(GradeGpu, SegfaultIsCrashed) {
  NIBBLE_REQUIRE_GPU();
  const Graded g = grade(bad("segfault"));
  EXPECT_EQ(g.code, 1) << g.output;
  EXPECT_EQ(g.report["disposition"], "Crashed");
  EXPECT_NE(g.report["reason"].get<std::string>().find("signal 11"), std::string::npos) << g.report["reason"];
}

// The results are sealed before the solution's teardown (its last code): a teardown that fails or
// crashes still fails the grade, told by the process's end, with the error or the crash's site.
TEST(GradeGpu, ATeardownThatFailsOrCrashesIsCrashed) {
  NIBBLE_REQUIRE_GPU();
  Graded g = grade(bad("teardown_fails"), {"--no-timing"});
  EXPECT_EQ(g.code, 1) << g.output;
  EXPECT_EQ(g.report["disposition"], "Crashed") << g.report["reason"];
  EXPECT_NE(g.report["reason"].get<std::string>().find("in its teardown, after its results were sealed"), std::string::npos)
      << g.report["reason"];
  EXPECT_NE(g.report["reason"].get<std::string>().find("teardown could not free its buffers"), std::string::npos) << g.report["reason"];
  g = grade(bad("teardown_segfault"), {"--no-timing"});
  EXPECT_EQ(g.code, 1) << g.output;
  EXPECT_EQ(g.report["disposition"], "Crashed") << g.report["reason"];
  EXPECT_NE(g.report["reason"].get<std::string>().find("signal 11"), std::string::npos) << g.report["reason"];
  EXPECT_NE(g.report["reason"].get<std::string>().find("libbad_teardown_segfault.so(nibble_decode_teardown+"), std::string::npos)
      << g.report["reason"];
}

TEST(GradeGpu, HangIsTimedOut) {
  NIBBLE_REQUIRE_GPU();
  const Graded g = grade(bad("hang"), {"--no-timing"}, 15);
  EXPECT_EQ(g.code, 1) << g.output;
  EXPECT_EQ(g.report["disposition"], "TimedOut");
}

TEST(GradeGpu, DeclinedConfigIsNotSupported) {
  NIBBLE_REQUIRE_GPU();
  const Graded g = grade(bad("not_supported"));
  EXPECT_EQ(g.code, 1) << g.output;
  EXPECT_EQ(g.report["disposition"], "NotSupported");
  EXPECT_NE(g.report["reason"].get<std::string>().find("batch 64"), std::string::npos);
}

TEST(GradeGpu, AbiMismatchAndMissingSymbol) {
  NIBBLE_REQUIRE_GPU();
  Graded g = grade(bad("abi_version"));
  EXPECT_EQ(g.code, 1) << g.output;
  EXPECT_EQ(g.report["disposition"], "AbiMismatch");
  g = grade(bad("missing_teardown"));
  EXPECT_EQ(g.code, 1) << g.output;
  EXPECT_EQ(g.report["disposition"], "MissingSymbol");
}

TEST(GradeGpu, DumpWritesBothSidesOfEveryCheckedStep) {
  NIBBLE_REQUIRE_GPU();
  TempDir dump;
  const Graded g = grade(lib("nibble_unfused"), {"--no-timing", "--seeds", "0", "--dump", dump.path()});
  ASSERT_EQ(g.code, 0) << g.output;
  for (const char* who : {"reference", "candidate"}) {
    SafetensorsFile f(dump.path() + "/seed0-" + who + ".safetensors");
    for (int s = 0; s < 8; ++s)
      for (const char* t : {".logits", ".k_appended", ".v_appended"}) EXPECT_TRUE(f.has("call" + std::to_string(s) + t)) << who << s << t;
  }
}

TEST(GradeGpu, HistoryAndGoogleBenchmarkJson) {
  NIBBLE_REQUIRE_GPU();
  TempDir t;
  const Graded g = grade(lib("nibble_unfused"), {"--seeds", "0", "--min-rounds", "1", "--max-rounds", "1", "--history",
                                                 t.path() + "/h.jsonl", "--gbench-json", t.path() + "/gb.json"});
  ASSERT_EQ(g.code, 0) << g.output;
  const json h = json::parse(read_file(t.path() + "/h.jsonl"));
  EXPECT_EQ(h["disposition"], "Passed");
  EXPECT_GT(h["median_us"].get<double>(), 0.0);
  const json gb = json::parse(read_file(t.path() + "/gb.json"));
  ASSERT_TRUE(gb.contains("benchmarks"));
  int iterations = 0;
  for (const auto& b : gb["benchmarks"]) iterations += b["run_type"] == "iteration";
  EXPECT_EQ(iterations, 2 * 32);  // gpu span and host wall, one entry per timed call
}

// Every GEMM task (gemm_tasks.h) through the same grader: its bundled reference graded as a candidate
// and every bundled solution of its family (bundled_solutions.h; skipped on a GPU it is not built
// for) pass on the tiny config; a decode-ABI library is refused for a GEMM task.
void expect_gemm_pass(const std::string& so, const std::string& task) {
  const Graded g = grade_gemm(so, task);
  EXPECT_EQ(g.code, 0) << so << "\n" << g.output;
  EXPECT_EQ(g.report["disposition"], "Passed") << so;
  EXPECT_GT(g.report["timing"]["tflops"].get<double>(), 0.0) << so;
  EXPECT_EQ(g.report["timing"]["gaps_with_foreign_work"], 0) << so;
  std::cout << g.output;
}

class GradeBundledGemmGpu : public ::testing::TestWithParam<std::tuple<test::BundledSolution, std::string>> {};

TEST_P(GradeBundledGemmGpu, Passes) {
  NIBBLE_REQUIRE_GPU();
  const test::BundledSolution& sol = std::get<0>(GetParam());
  std::string why;
  if (!test::runs_on_this_device(sol.cuda_architectures, &why)) GTEST_SKIP() << sol.target << ": " << why;
  expect_gemm_pass(sol.path, std::get<1>(GetParam()));
}

std::string target_task_name(const ::testing::TestParamInfo<std::tuple<test::BundledSolution, std::string>>& info) {
  std::string s = std::string(std::get<0>(info.param).target) + "_" + std::get<1>(info.param);
  for (char& c : s)
    if (c == '-') c = '_';
  return s;
}

INSTANTIATE_TEST_SUITE_P(Solutions, GradeBundledGemmGpu, ::testing::ValuesIn(test::gemm_task_solutions()),
                         target_task_name);

class GradeGemmGpu : public ::testing::TestWithParam<std::string> {};

TEST_P(GradeGemmGpu, ReferencePassesADecodeLibraryIsRefused) {
  NIBBLE_REQUIRE_GPU();
  expect_gemm_pass(bindir() + "/lib/" + find_task(GetParam()).reference_library(), GetParam());
  Graded g = grade(lib("nibble_unfused"), {"--task", GetParam(), "--seeds", "0", "--no-timing"});
  EXPECT_EQ(g.code, 1) << g.output;
  EXPECT_EQ(g.report["disposition"], "MissingSymbol");
}

// The cheat a per-row sign guard could not see (tests/solutions/gemm_hostile.cu, HOSTILE_GEMM_REPLAY):
// the baseline's C of the first call, re-signed per row from A on every later call. Its first call
// is right; every later one, checked or timed, must be far off (a fresh sign mask per element mixes
// the terms of each dot product anew, which no kept C can say anything about).
TEST_P(GradeGemmGpu, ReplayingTheFirstCallFails) {
  NIBBLE_REQUIRE_GPU();
  const Graded g = grade_gemm(bindir() + "/tests/lib/libhostile_gemm_replay.so", GetParam());
  EXPECT_EQ(g.code, 1) << g.output;
  EXPECT_EQ(g.report["disposition"], "Incorrect") << g.output;
  EXPECT_NE(g.report["reason"].get<std::string>().find("gate"), std::string::npos) << g.report["reason"];
  const json& calls = g.report["correctness"]["per_seed"][0]["calls"];
  ASSERT_EQ(calls.size(), 2u) << g.report.dump(2);
  EXPECT_LT(calls[0]["outputs"]["C"]["rel_err"].get<double>(), 1e-4) << "the first call is the baseline's";
  EXPECT_GT(calls[1]["outputs"]["C"]["rel_err"].get<double>(), 0.5) << "a replayed call";
  const json& timed = g.report["timing"]["verified_calls"];
  ASSERT_GE(timed.size(), 1u) << g.report.dump(2);
  EXPECT_GT(timed[0]["outputs"]["C"]["rel_err"].get<double>(), 0.5) << "a replayed timed call";
  // No --timing-seed: each timed call's mask seed comes from the OS, after prepare.
  EXPECT_EQ(g.report["timing"]["timing_seed_from"], "none: every draw from the OS-seeded generator of the grader's parent, revealed to the child as each timed call's window opens")
      << g.report["timing"].dump();
  EXPECT_TRUE(g.report["timing"]["timing_seed"].is_null());
  // With one, the run is reproducible and says so.
  const Graded r = grade_gemm(bindir() + "/lib/" + find_task(GetParam()).reference_library(), GetParam(), {"--timing-seed", "7"});
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(r.report["timing"]["timing_seed"], 7) << r.report["timing"].dump();
  EXPECT_EQ(r.report["timing"]["timing_seed_from"].get<std::string>().rfind("nibble grade --timing-seed", 0), 0u);
  EXPECT_NE(r.report["timing"]["timing_seed_from"].get<std::string>().find("not tamper-proof"), std::string::npos);
}

// Kernels between timed calls, outside every window (tests/solutions/gemm_hostile.cu: a thread that
// launches a small kernel every ~20 us; a real cheat would read W back into L2 after the flush).
// The honest grades above prove the harness's own gap work is not mistaken for the candidate's.
TEST_P(GradeGemmGpu, WorkBetweenTimedCallsIsInvalidTiming) {
  NIBBLE_REQUIRE_GPU();
  const Graded g = grade_gemm(bindir() + "/tests/lib/libhostile_gemm_gap_work.so", GetParam());
  EXPECT_EQ(g.code, 1) << g.output;
  EXPECT_EQ(g.report["disposition"], "InvalidTiming") << g.output;
  EXPECT_NE(g.report["reason"].get<std::string>().find("between timed calls"), std::string::npos) << g.report["reason"];
  EXPECT_GT(g.report["timing"]["gaps_with_foreign_work"].get<int>(), 0);
  EXPECT_EQ(g.report["correctness"]["verdict"], "pass") << "its C is the baseline's";
}

std::string task_param_name(const ::testing::TestParamInfo<std::string>& info) {
  std::string s = info.param;
  for (char& c : s)
    if (c == '-') c = '_';
  return s;
}

INSTANTIATE_TEST_SUITE_P(Tasks, GradeGemmGpu, ::testing::ValuesIn(test::gemm_task_names()), task_param_name);

// The GPU path of GEMM calibration (the reference .so and each variant in child processes) against
// the CPU path (the fp64 oracle) on tiny: the same variants, the same verdicts, a healthy gate, and
// errors that agree (the GPU reference matches the oracle to 1e-4 relative per variant, see
// test_gemm_solutions_gpu; each error is a ratio of two such results).
class CalibrateGemmGpu : public ::testing::TestWithParam<std::string> {};

TEST_P(CalibrateGemmGpu, GpuTableMatchesTheOracleTable) {
  NIBBLE_REQUIRE_GPU();
  TempDir t;
  setenv("NIBBLE_CACHE_DIR", (t.path() + "/cache").c_str(), 1);
  json tables[2];
  const char* paths[2] = {"gpu", "cpu"};
  for (int i = 0; i < 2; ++i) {
    const std::string out = t.path() + "/" + paths[i] + ".json";
    const ChildExit e = run_child({bindir() + "/bin/nibble", "calibrate", "--task", GetParam(), "--config", "tiny", "--seeds",
                                   "0,1", "--path", paths[i], "--out", out, "-q"},
                                  t.path() + "/log", 600);
    const std::string log = file_tail(t.path() + "/log", 1 << 15);
    std::cout << log;
    ASSERT_EQ(e.kind, ChildExit::Exited) << e.describe();
    EXPECT_EQ(e.code, 0) << paths[i] << "\n" << log;
    tables[i] = json::parse(read_file(out));
  }
  EXPECT_EQ(tables[0]["path"].get<std::string>().rfind("gpu", 0), 0u);
  ASSERT_EQ(tables[0]["rows"].size(), tables[1]["rows"].size());
  for (size_t r = 0; r < tables[0]["rows"].size(); ++r) {
    const json &g = tables[0]["rows"][r], &c = tables[1]["rows"][r];
    EXPECT_EQ(g["variant"], c["variant"]);
    EXPECT_EQ(g["verdict"], g["expected"]) << g.dump();
    EXPECT_TRUE(g["healthy"].get<bool>()) << g.dump();
    if (g["worst"].is_number() && c["worst"].is_number()) {
      const double eg = g["worst"], ec = c["worst"];
      EXPECT_LE(std::fabs(eg - ec), 5e-4 + 1e-3 * ec) << g["variant"] << ": gpu " << eg << ", oracle " << ec;
    }
  }
}

INSTANTIATE_TEST_SUITE_P(Tasks, CalibrateGemmGpu, ::testing::ValuesIn(test::gemm_task_names()), task_param_name);
