// test_python_solutions_gpu.cpp: every bundled Python solution (solutions/<family>/python/*.py that
// define the task's build entry point, for every task of the family in the registry) graded on tiny: Passed, and its report
// records the interpreter. A GEMM call at tiny (a ~3 us kernel) is host-bound in Python: those are
// graded with --clock wall, their host time in the figure (README "Grading a Python kernel"). Where the module's libraries are not installed (no torch or triton on
// this machine) the grade says NotLoadable with Python's "No module named ...": skipped with that
// reason, never passed silently.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <tuple>
#include <vector>

#include "test_binary_dir.h"
#include "gpu_test_util.h"
#include "harness/atomic_file.h"
#include "harness/process.h"
#include "harness/task.h"

using namespace nibble;
using json = nlohmann::json;

namespace {

using test::bindir;  // tests/test_binary_dir.h

/** Whether the module defines the build entry point of `t`'s ABI at top level (`def build_model(` or
 *  `def prepare(`; the others may come from an import): a helper the solutions import
 *  (decode_graph.py) defines none. */
bool is_solution(const std::string& path, const Task& t) {
  const std::string text = "\n" + read_file(path);
  return text.find("\ndef " + t.build_call() + "(") != std::string::npos;
}

/** (task, module path) for every task and every solution .py under solutions/<its family>/python. */
std::vector<std::tuple<std::string, std::string>> cases() {
  std::vector<std::tuple<std::string, std::string>> out;
  for (const Task* t : all_tasks()) {
    const std::filesystem::path dir = std::filesystem::path(NIBBLE_TEST_SOURCE_DIR) / "solutions" / t->family() / "python";
    std::vector<std::string> files;
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(dir, ec))
      if (e.path().extension() == ".py" && is_solution(e.path().string(), *t)) files.push_back(e.path().string());
    std::sort(files.begin(), files.end());
    for (const auto& f : files) out.emplace_back(t->name(), f);
  }
  return out;
}

class PythonSolutionGpu : public ::testing::TestWithParam<std::tuple<std::string, std::string>> {};

TEST_P(PythonSolutionGpu, PassesOnTiny) {
  NIBBLE_REQUIRE_GPU();
  const auto& [task, module] = GetParam();
  TempDir t("nibble-py-solution");
  setenv("NIBBLE_CACHE_DIR", (t.path() + "/cache").c_str(), 1);
  const std::string out = t.path() + "/report.json";
  const bool host_bound = find_task(task).unit() == "call";
  const ChildExit e = run_child({bindir() + "/bin/nibble", "grade", "--task", task, "--config", "tiny", "--seeds", "0",
                                 "--min-rounds", "1", "--max-rounds", "1", "--solution", module, "--out", out, "-q",
                                 "--clock", host_bound ? "wall" : "span"},
                                t.path() + "/log", 600);
  const std::string log = file_tail(t.path() + "/log", 1 << 14);
  ASSERT_EQ(e.kind, ChildExit::Exited) << e.describe() << "\n" << log;
  json r;
  try {
    r = json::parse(read_file(out));
  } catch (const std::exception& x) {
    FAIL() << "no report (" << x.what() << "), exit " << e.code << "\n" << log;
  }
  const std::string reason = r.value("reason", std::string());
  if (r["disposition"] == "NotLoadable" && reason.find("No module named") != std::string::npos)
    GTEST_SKIP() << module << ": " << reason.substr(reason.find("No module named"), 80);
  EXPECT_EQ(r["disposition"], "Passed") << module << " on " << task << ": " << reason << "\n" << log;
  EXPECT_EQ(e.code, 0) << log;
  const json& timing = r["timing"];
  EXPECT_EQ(timing.value("clock", std::string()), host_bound ? "wall" : "span");
  if (host_bound) {
    // The figure is the grader's clock, which holds the Python call's host time: above the GPU span.
    ASSERT_TRUE(timing.contains("grader_clock_us")) << timing.dump().substr(0, 400);
    EXPECT_EQ(timing.value("us_per_call", 0.0), timing["grader_clock_us"].value("median", -1.0));
    EXPECT_GT(timing["grader_clock_us"].value("median", 0.0), timing["gpu_span_us"].value("median", 0.0)) << log;
  }
  std::cout << module << " on " << task << ": " << r["disposition"] << ", worst error "
            << r["correctness"].value("worst_rel_err", -1.0) << "\n";
}

std::string case_name(const ::testing::TestParamInfo<std::tuple<std::string, std::string>>& i) {
  std::string s = std::get<0>(i.param) + "_" + std::filesystem::path(std::get<1>(i.param)).stem().string();
  for (char& c : s)
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  return s;
}

INSTANTIATE_TEST_SUITE_P(Bundled, PythonSolutionGpu, ::testing::ValuesIn(cases()), case_name);

}  // namespace
