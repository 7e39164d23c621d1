// test_hostile_gpu.cpp: the hostile-solutions suite (issue 4, item 6) as whole grades on the tiny config.
//
// One test per row of tests/hostile/expectations.json: `nibble grade --config tiny --seeds 0` on
// tests/lib/libhostile_<name>.so must end in the row's disposition, with a reason containing the
// row's substring, a complete report, and exit code 0 (Passed) or 1 (anything else): never 2 or 3,
// never a signal. Then the honest launch paths (runtime API, private stream, driver API, CUDA graph,
// persisting L2, the step run twice) are compared with the control on GPU span, busy time and
// kernels per step. The last lines printed: "N hostile behaviours tried, M caught as expected".
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "gpu_test_util.h"
#include "harness/protocol.h"
#include "harness/atomic_file.h"
#include "harness/process.h"

using namespace nibble;
using json = nlohmann::json;

namespace {

std::string env_or(const char* k, const char* fallback) {
  const char* v = std::getenv(k);
  return v && *v ? v : fallback;
}

struct Row {
  std::string name, behaviour, disposition, reason, timing, compare;
  double step_timeout = 0;
  bool private_cache = false;  // the row damages its fixture: a cache of its own
  long long timing_seed = -1;  // >= 0: graded with --timing-seed (the one row that shows what it gives away)
  std::string graph_records;   // non-empty: graded with --graph-records of this value
  // The sandbox's rows (expectations.json "about"): layers without which the row is not graded; the
  // disposition once a layer is applied; copies of nibble and the reference; a file it must not leave.
  std::vector<std::string> needs;
  std::string if_layer, if_disposition, if_reason;
  // A row whose behaviour can end the candidate's process inside a library the solution called (not
  // the grader's code): Crashed is the verdict too when the reason places the crash in that library.
  std::string or_crashed_in;
  bool private_binaries = false;
  std::string leaves_no_file;
  double max_ledger_overhead_us = 0;  // > 0: the report's ledger overhead may exceed the control's by at most this
};

std::vector<Row> load_rows() {
  std::vector<Row> rows;
  try {
    const json j = json::parse(read_file(env_or("NIBBLE_SOURCE_DIR", ".") + "/tests/hostile/expectations.json"));
    for (const auto& r : j.at("rows")) {
      Row row;
      row.name = r.at("name");
      row.behaviour = r.at("behaviour");
      row.disposition = r.at("disposition");
      row.reason = r.at("reason");
      row.timing = r.at("timing");
      row.compare = r.value("compare", std::string());
      row.step_timeout = r.value("step_timeout", 0.0);
      row.private_cache = r.value("private_cache", false);
      row.needs = r.value("needs", std::vector<std::string>{});
      if (r.contains("if_applied")) {
        row.if_layer = r["if_applied"].at("layer");
        row.if_disposition = r["if_applied"].at("disposition");
        row.if_reason = r["if_applied"].at("reason");
      }
      if (r.contains("or_crashed")) row.or_crashed_in = r["or_crashed"].at("in");
      row.private_binaries = r.value("private_binaries", false);
      row.leaves_no_file = r.value("leaves_no_file", std::string());
      row.timing_seed = r.value("timing_seed", -1LL);
      row.graph_records = r.value("graph_records", std::string());
      row.max_ledger_overhead_us = r.value("max_ledger_overhead_us", 0.0);
      rows.push_back(row);
    }
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cannot read tests/hostile/expectations.json (is NIBBLE_SOURCE_DIR set?): %s\n", e.what());
  }
  return rows;
}

/** The --graph-records a row is graded with: its own, else the suite's (NIBBLE_HOSTILE_GRAPH_RECORDS:
 *  the whole suite in one mode, to try a mode before it becomes the default), else none (the
 *  grader's default). */
std::string graph_records_of(const Row& r) {
  if (!r.graph_records.empty()) return r.graph_records;
  const char* suite = std::getenv("NIBBLE_HOSTILE_GRAPH_RECORDS");
  return suite && *suite ? suite : "";
}

const std::vector<Row>& rows() {
  static const std::vector<Row> r = load_rows();
  return r;
}

struct Graded {
  ChildExit exit;
  json report;  // null when no report was written
  std::string output;
  std::vector<std::string> argv;
};

/** Each row is graded once per run, whichever test asks first. */
const Graded& graded(const Row& r) {
  static std::map<std::string, Graded> done;
  static TempDir fixtures("nibble-hostile-fixtures");  // the tiny fixture, built once per run
  auto it = done.find(r.name);
  if (it != done.end()) return it->second;
  const std::string bin = env_or("NIBBLE_BINARY_DIR", ".");
  TempDir t("nibble-hostile");
  Graded g;
  std::string nibble = bin + "/bin/nibble";
  if (r.private_binaries) {  // the row overwrites the grader's binaries: copies in <t>/bin and <t>/lib
    namespace fs = std::filesystem;
    fs::create_directories(t.path() + "/bin");
    fs::create_directories(t.path() + "/lib");
    fs::copy_file(nibble, t.path() + "/bin/nibble");
    fs::copy_file(bin + "/lib/libnibble_reference.so", t.path() + "/lib/libnibble_reference.so");
    nibble = t.path() + "/bin/nibble";
  }
  g.argv = {nibble, "grade", "--config", "tiny", "--seeds", "0",
            "--solution", bin + "/tests/lib/libhostile_" + r.name + ".so", "--out", t.path() + "/report.json",
            "--timeout", "300", "-q"};  // no --timing-seed but in its one row: the draws come from the OS, as by default
  if (r.timing_seed >= 0) g.argv.insert(g.argv.end(), {"--timing-seed", std::to_string(r.timing_seed)});
  if (!graph_records_of(r).empty()) g.argv.insert(g.argv.end(), {"--graph-records", graph_records_of(r)});
  if (r.timing == "none") g.argv.push_back("--no-timing");
  if (r.timing == "short") g.argv.insert(g.argv.end(), {"--min-rounds", "2", "--max-rounds", "2"});
  // One round of 32 calls (the row sleeps a second in each): stop at the first check of the budget.
  if (r.timing == "one_round") g.argv.insert(g.argv.end(), {"--min-rounds", "1", "--max-rounds", "1", "--max-timing-seconds", "1"});
  if (r.step_timeout > 0) g.argv.insert(g.argv.end(), {"--step-timeout", std::to_string(int(r.step_timeout))});
  setenv("NIBBLE_CACHE_DIR", (r.private_cache ? t.path() + "/cache" : fixtures.path()).c_str(), 1);
  g.exit = run_child(g.argv, t.path() + "/log", 900);
  g.output = file_tail(t.path() + "/log", 1 << 14);
  try {
    g.report = json::parse(read_file(t.path() + "/report.json"));
  } catch (const std::exception&) {
    g.report = json();
  }
  return done.emplace(r.name, std::move(g)).first->second;
}

std::string command_line(const Graded& g) {
  std::string s;
  for (const auto& a : g.argv) s += (s.empty() ? "" : " ") + a;
  return s;
}

/** The state the report gives the sandbox layer `name` ("" when it has none). */
std::string layer_state(const json& report, const std::string& name) {
  if (!report.is_object() || !report.contains("sandbox")) return "";
  for (const auto& l : report["sandbox"].value("layers", json::array()))
    if (l.value("name", "") == name) return l.value("state", "");
  return "";
}

/** The disposition and reason substring a correct grader gives `r` on this machine: the row's
 *  if_applied ones when the grade's report says that layer was applied. */
std::pair<std::string, std::string> expected(const Row& r, const json& report) {
  if (!r.if_layer.empty() && layer_state(report, r.if_layer) == "applied") return {r.if_disposition, r.if_reason};
  if (!r.or_crashed_in.empty() && report.is_object() && report.value("disposition", std::string()) == "Crashed") {
    // The crash's site as the Crashed reason gives it (", at <frame>"): in the library named, not anywhere.
    const std::string reason = report.value("reason", std::string());
    // The frame's library path, before its "(symbol+offset)".
    const size_t at = reason.rfind(", at ");
    const std::string library = at == std::string::npos ? "" : reason.substr(at + 5, reason.find('(', at) - at - 5);
    if (library.find(r.or_crashed_in) != std::string::npos) return {"Crashed", r.or_crashed_in};
  }
  return {r.disposition, r.reason};
}

/** Per row: what it got, for the summary. */
struct Outcome {
  std::string got;
  bool caught = false;  // disposition, reason, report and exit code as expected
  int timing = -1;      // rows compared on time: -1 not compared (yet), 0 out of bounds, 1 within
};
std::map<std::string, Outcome>& outcomes() {
  static std::map<std::string, Outcome> o;
  return o;
}

class Summary : public ::testing::Environment {
 public:
  void TearDown() override {
    if (outcomes().empty()) return;
    int caught = 0;
    std::ostringstream o;
    o << "\nhostile suite (tiny config):\n";
    for (const auto& r : rows()) {
      auto it = outcomes().find(r.name);
      if (it == outcomes().end()) continue;
      // A timed row is caught only when its time also agrees (forge_timing passes with a forged time).
      const bool compared = !r.compare.empty() && r.compare != "baseline";
      const bool ok = it->second.caught && (!compared || it->second.timing == 1);
      caught += ok;
      // The clock rule's margin on this host: the rows it catches must stay past the allowance,
      // which grows with the host's launch cost (a reviewer's point).
      std::string clock;
      const json& rep = graded(r).report;
      if (rep.is_object() && rep.contains("timing") && rep["timing"].is_object() && rep["timing"].contains("ledger")) {
        const json& l = rep["timing"]["ledger"];
        char b[96];
        std::snprintf(b, sizeof b, " [hidden %.0f of %.0f us]", l.value("hidden_us", -1.0), l.value("hidden_allowance_us", -1.0));
        clock = b;
      }
      char line[640];
      std::snprintf(line, sizeof line, "  %-20s expected %-14s got %-14s %s%s%s\n", r.name.c_str(),
                    expected(r, graded(r).report).first.c_str(),
                    it->second.got.c_str(), ok ? "ok" : "MISSED",
                    !compared ? "" : it->second.timing == 1 ? " (time agrees)" : it->second.timing == 0 ? " (time disagrees)" : " (time not compared)",
                    clock.c_str());
      o << line;
    }
    o << outcomes().size() << " hostile behaviours tried, " << caught << " caught as expected\n";
    std::cout << o.str() << std::flush;
  }
};
[[maybe_unused]] ::testing::Environment* const summary_env = ::testing::AddGlobalTestEnvironment(new Summary);

class Hostile : public ::testing::TestWithParam<Row> {};

}  // namespace

TEST_P(Hostile, GetsItsDisposition) {
  NIBBLE_REQUIRE_GPU();
  const Row& r = GetParam();
  // A row that would harm the machine outside the sandbox is graded only where its layers hold
  // (the control, graded first, says which do).
  for (const std::string& layer : r.needs) {
    const Graded& control = graded(rows().front());
    const std::string st = layer_state(control.report, layer);
    if (st != "applied")
      GTEST_SKIP() << r.name << " is graded only where the sandbox's " << layer << " layer is applied; the control's report says '"
                   << (st.empty() ? "(no such layer)" : st) << "'";
  }
  const Graded& g = graded(r);
  const auto [want, want_reason] = expected(r, g.report);
  SCOPED_TRACE(r.name + ": " + r.behaviour + "\n  " + command_line(g));
  const std::string got = g.report.is_object() ? g.report.value("disposition", std::string("(none)")) : "(no report)";
  outcomes()[r.name].got = got;

  // The grader itself: never a signal, never "could not run" (2) or "grader failed" (3).
  ASSERT_EQ(g.exit.kind, ChildExit::Exited) << "the grader " << g.exit.describe() << "\n" << g.output;
  EXPECT_EQ(g.exit.code, want == "Passed" ? 0 : 1) << "grader exit status\n" << g.output;

  // A complete report.
  ASSERT_TRUE(g.report.is_object()) << "no report was written\n" << g.output;
  for (const char* k : {"schema", "schema_version", "created_utc", "argv", "device", "task", "config", "solution",
                        "correctness", "disposition", "reason", "wall_seconds"})
    EXPECT_TRUE(g.report.contains(k)) << "the report lacks '" << k << "'";
  if (want != "MissingSymbol" && want != "AbiMismatch") {
    // A prefix: bad_name's name goes on with bytes that are not UTF-8 (replaced in the JSON).
    const std::string name = g.report.value("solution", json::object()).value("name", std::string());
    EXPECT_EQ(name.rfind("hostile-" + r.name, 0), 0u) << "the report names the solution '" << name << "'";
  }

  EXPECT_EQ(got, want) << "reason: " << g.report.value("reason", std::string()) << "\n" << g.output;
  const std::string reason = g.report.value("reason", std::string());
  // "a|b": the reason or another of the verdict's findings contains a or b (one behaviour, two ways a
  // correct grader can word it; a long hidden copy is on the grader's clock first, in the copy audit too).
  std::vector<std::string> said = {reason};
  for (const json& f : g.report.value("findings", json::array()))
    if (f.is_string()) said.push_back(f.get<std::string>());
  bool reason_ok = false;
  std::stringstream alternatives(want_reason);
  for (std::string a; std::getline(alternatives, a, '|');)
    for (const std::string& s : said) reason_ok = reason_ok || s.find(a) != std::string::npos;
  EXPECT_TRUE(reason_ok) << "neither the reason '" << reason << "' nor another finding ("
                         << g.report.value("findings", json::array()).dump() << ") contains '" << want_reason << "'";
  if (r.max_ledger_overhead_us > 0) {
    // Against the control's, graded in the same run: the machine's load lengthens every child's
    // calibration windows alike (87 us beside the control's ~30 under the whole test command's
    // parallel load on an H100, 2026-12-05), a load-time thread only this row's.
    const auto overhead = [](const json& report) {
      return report.value("timing", json::object()).value("ledger", json::object()).value("overhead_us", NAN);
    };
    const double mine = overhead(g.report), base = overhead(graded(rows().front()).report);
    ASSERT_FALSE(std::isnan(mine)) << "no timing.ledger.overhead_us in the report";
    ASSERT_FALSE(std::isnan(base)) << "no timing.ledger.overhead_us in the control's report";
    EXPECT_LE(mine, base + r.max_ledger_overhead_us)
        << "the call ledger's calibration windows came out slowed by the solution's load-time code (the control's: "
        << base << " us): they must run before the solution is loaded";
  }
  if (!r.leaves_no_file.empty()) {
    // Where Landlock holds, the file was never made; elsewhere RLIMIT_FSIZE capped it. Removed either way.
    const bool landlock = layer_state(g.report, "landlock") == "applied";
    for (const char* dir : {".", "/tmp", "/dev/shm"}) {
      const std::string f = std::string(dir) + "/" + r.leaves_no_file;
      std::error_code ec;
      if (!std::filesystem::exists(f, ec)) continue;
      const auto bytes = std::filesystem::file_size(f, ec);
      std::filesystem::remove(f, ec);
      EXPECT_FALSE(landlock) << f << " exists (" << bytes << " bytes) although Landlock was applied";
      EXPECT_LE(bytes, 16ull << 30) << f << ": RLIMIT_FSIZE did not hold";
    }
  }
  if (r.timing != "none" && want == "Passed") {
    ASSERT_TRUE(g.report.contains("timing") && g.report["timing"].contains("gpu_span_us")) << "a timed pass without timing";
    EXPECT_GT(g.report["timing"]["gpu_span_us"]["median"].get<double>(), 0.0);
  }
  // Every row but one is graded as by default, and its report says so; the fixed-seed row's says
  // what the seed gives away.
  if (r.timing != "none" && g.report.contains("timing")) {
    const std::string from = g.report["timing"].value("timing_seed_from", std::string());
    if (r.timing_seed >= 0)
      EXPECT_NE(from.find("not tamper-proof"), std::string::npos) << from;
    else
      EXPECT_EQ(from.rfind("none: every draw from the OS", 0), 0u) << from;
  }
  if (r.timing != "none" && g.report.contains("timing")) {
    EXPECT_EQ(g.report["timing"].value("graph_records", std::string()),
              graph_records_of(r).empty() ? kDefaultGraphRecords : graph_records_of(r));
  }
  outcomes()[r.name].caught = !::testing::Test::HasFailure();
}

INSTANTIATE_TEST_SUITE_P(Suite, Hostile, ::testing::ValuesIn(rows()),
                         [](const ::testing::TestParamInfo<Row>& i) { return i.param.name; });

namespace {
struct Times {
  double span = NAN, busy = NAN, kernels = NAN, wall = NAN;
  double graph_launches = 0;  // graded by graphs: graph launches recorded whole per call (their nodes are no kernels)
  long long graph_launches_audited = -1;  // the launch audit's graph launches over the timed phase, either mode
};
Times times_of(const Graded& g) {
  Times t;
  if (!g.report.is_object() || !g.report.contains("timing")) return t;
  const json& j = g.report["timing"];
  if (!j.contains("gpu_span_us")) return t;
  t.span = j["gpu_span_us"]["median"];
  t.busy = j["busy_us"]["median"];
  t.kernels = j["kernels_per_call"]["median"];
  t.wall = j["host_wall_us"]["median"];
  if (j.contains("graph_launches_per_call")) t.graph_launches = j["graph_launches_per_call"]["median"];
  t.graph_launches_audited = j.value("graph_launches_audited", -1LL);
  return t;
}
}  // namespace

// The timer sees every launch path: the same kernels launched through the runtime API, from a
// private stream that is still running when decode_step returns, through cuLaunchKernel from a
// module loaded at run time, or as a CUDA graph, give the same kernel count and busy time, and a
// busy time within 10% (the span of a launch-bound tiny step is host noise). A graph legitimately
// closes the launch gaps between kernels, so its span may be shorter but its busy time may not. Persisting L2 must not make the step
// faster (the harness resets it and flushes L2 before every call); the step run twice takes twice
// the time.
TEST(HostileTiming, HonestLaunchPathsAgree) {
  NIBBLE_REQUIRE_GPU();
  const Row* base_row = nullptr;
  for (const auto& r : rows())
    if (r.compare == "baseline") base_row = &r;
  ASSERT_NE(base_row, nullptr);
  const Times base = times_of(graded(*base_row));
  ASSERT_FALSE(std::isnan(base.span)) << "the control has no timing:\n" << graded(*base_row).output;
  // The audit's graph launches: none for the control (its figure reads the same in either record
  // mode: figure_graph_records), and for the graph row at least one a timed call (it captures on the
  // first call, then replays).
  EXPECT_EQ(base.graph_launches_audited, 0);
  std::printf("\nhonest launch paths, tiny config, medians over 64 timed calls (ratio to %s):\n", base_row->name.c_str());
  std::printf("  %-16s %10s %7s %10s %7s %9s %10s\n", "row", "span us", "ratio", "busy us", "ratio", "kern/step", "wall us");
  std::printf("  %-16s %10.2f %7s %10.2f %7s %9.0f %10.2f\n", base_row->name.c_str(), base.span, "1", base.busy, "1",
              base.kernels, base.wall);
  for (const auto& r : rows()) {
    if (r.compare.empty() || r.compare == "baseline") continue;
    const Graded& g = graded(r);
    const Times t = times_of(g);
    SCOPED_TRACE(r.name + " (" + r.compare + ")");
    if (std::isnan(t.span)) {
      ADD_FAILURE() << "no timing in the report:\n" << g.output;
      continue;
    }
    if (r.name == "graph") {
      EXPECT_GE(t.graph_launches_audited, 64) << "the graph row's launches, 64 timed calls at least";
    }
    const double rs = t.span / base.span, rb = t.busy / base.busy;
    std::printf("  %-16s %10.2f %7.3f %10.2f %7.3f %9.0f %10.2f\n", r.name.c_str(), t.span, rs, t.busy, rb, t.kernels, t.wall);
    bool ok = true;
    auto check = [&](bool cond, const std::string& what) {
      EXPECT_TRUE(cond) << what << " (span ratio " << rs << ", busy ratio " << rb << ", kernels " << t.kernels
                        << " vs " << base.kernels << ")";
      ok = ok && cond;
    };
    // On the tiny config a step is launch-bound: the GPU span swings with the host's launch speed
    // (75 us for the control in one H200 run, 149 us in the next), while the busy time (the kernels'
    // own time) is stable to a few percent. So the paths are compared on what the GPU did.
    if (r.compare == "same" && t.graph_launches > 0 && base.graph_launches == 0) {
      // Its graph recorded whole (--graph-records graphs): one record from the first node's start to
      // the last's end, so no kernel count, and a busy time with the gaps between nodes in it.
      check(rb > 0.9 && rb < 2.0, "busy time of the graph recorded whole is not between 0.9x and 2x the control's kernels'");
    } else if (r.compare == "same") {
      check(t.kernels == base.kernels, "the timer saw a different number of kernels per step");
      check(std::fabs(rb - 1.0) < 0.10, "busy time differs from the control's by 10% or more");
    } else if (r.compare == "double") {
      check(t.kernels == 2 * base.kernels, "twice the control's kernels expected");
      check(rb > 1.7 && rb < 2.3, "busy time should be about twice the control's");
    } else if (r.compare == "plus_40us") {
      // The 40 us kernel it launched beside the honest step is in the busy time: not hidden.
      check(t.busy >= base.busy + 30.0, "busy time should hold the 40 us kernel beyond the control's (" +
                                            std::to_string(t.busy) + " us against " + std::to_string(base.busy) + ")");
    }
    outcomes()[r.name].timing = ok ? 1 : 0;
  }
  std::fflush(stdout);
}
