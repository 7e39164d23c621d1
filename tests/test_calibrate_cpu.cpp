// test_calibrate_cpu.cpp: `nibble calibrate --path cpu` on the tiny config (what CI can run): the
// fp64 oracle's variants give the expected verdict on both seeds, and the gate is healthy.
#include <gtest/gtest.h>

#include <cstdlib>
#include <nlohmann/json.hpp>

#include "test_binary_dir.h"
#include "gemm_tasks.h"
#include "harness/atomic_file.h"
#include "harness/process.h"

using namespace nibble;

namespace {

/** The sliver variant (the last 0.8% of every output row left 0) is what the per-element guard is
 *  for: the table has the guard, the row's element error is at least twice it, and the guard is
 *  among what catches it. */
void expect_sliver_caught_by_the_guard(const nlohmann::json& j, const std::string& variant) {
  ASSERT_TRUE(j["element_guard"].is_number()) << "the task has no per-element guard";
  const double guard = j["element_guard"].get<double>();
  for (const auto& row : j["rows"]) {
    if (row["variant"] != variant) continue;
    EXPECT_GE(row["worst_elem"].get<double>(), 2 * guard) << row.dump();
    EXPECT_NE(row["caught_by"].get<std::string>().find("element_guard"), std::string::npos) << row.dump();
    return;
  }
  ADD_FAILURE() << "no row " << variant;
}

}  // namespace

TEST(CalibrateCpu, TinyTableHasTheExpectedVerdicts) {
  const std::string bindir = test::bindir();
  TempDir t;
  setenv("NIBBLE_CACHE_DIR", (t.path() + "/cache").c_str(), 1);
  const std::string out = t.path() + "/calibration.json";
  const ChildExit e = run_child({bindir + "/bin/nibble", "calibrate", "--config", "tiny", "--seeds", "0,1", "--path", "cpu",
                                 "--out", out, "-q"},
                                t.path() + "/log", 600);
  const std::string log = file_tail(t.path() + "/log", 1 << 15);
  std::cout << log;
  ASSERT_EQ(e.kind, ChildExit::Exited) << e.describe();
  const auto j = nlohmann::json::parse(read_file(out));
  ASSERT_GE(j["rows"].size(), 11u);
  for (const auto& row : j["rows"]) {
    EXPECT_EQ(row["verdict"], row["expected"]) << row.dump();
    EXPECT_TRUE(row["healthy"].get<bool>()) << row.dump();
    EXPECT_EQ(row["per_seed"].size(), 2u);
    // The element error (the per-element guard's measure) is never below the relative error's
    // share of one element, and is there for every row (null only for a NaN output).
    if (row["worst_elem"].is_number() && row["worst"].is_number()) {
      EXPECT_GE(row["worst_elem"].get<double>(), 0.0) << row.dump();
    } else {
      EXPECT_TRUE(row["worst_elem"].is_null() || row["worst_elem"].is_number()) << row.dump();
    }
  }
  EXPECT_TRUE(j["healthy"].get<bool>());
  EXPECT_EQ(e.code, 0) << log;
  // The NIBBLE_* variables it ran with (here the cache folder this test set): every report says so.
  EXPECT_EQ(j["environment"].value("NIBBLE_CACHE_DIR", std::string()), t.path() + "/cache") << j["environment"].dump();
  for (const auto& [k, v] : j["environment"].items()) EXPECT_EQ(k.rfind("NIBBLE_", 0), 0u) << k;
  expect_sliver_caught_by_the_guard(j, "logits_sliver");
}

class CalibrateGemmCpu : public ::testing::TestWithParam<std::string> {};

TEST_P(CalibrateGemmCpu, TinyTableIsHealthy) {
  const std::string bindir = test::bindir();
  TempDir t;
  setenv("NIBBLE_CACHE_DIR", (t.path() + "/cache").c_str(), 1);
  const std::string out = t.path() + "/calibration.json";
  const ChildExit e = run_child({bindir + "/bin/nibble", "calibrate", "--task", GetParam(), "--config", "tiny", "--seeds",
                                 "0,1", "--path", "cpu", "--out", out, "-q"},
                                t.path() + "/log", 600);
  const std::string log = file_tail(t.path() + "/log", 1 << 15);
  std::cout << log;
  ASSERT_EQ(e.kind, ChildExit::Exited) << e.describe();
  const auto j = nlohmann::json::parse(read_file(out));
  ASSERT_GE(j["rows"].size(), 6u);
  for (const auto& row : j["rows"]) {
    EXPECT_EQ(row["verdict"], row["expected"]) << row.dump();
    EXPECT_TRUE(row["healthy"].get<bool>()) << row.dump();
  }
  EXPECT_EQ(e.code, 0) << log;
  expect_sliver_caught_by_the_guard(j, "c_sliver");
}

INSTANTIATE_TEST_SUITE_P(Tasks, CalibrateGemmCpu, ::testing::ValuesIn(test::gemm_task_names()),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           std::string s = info.param;
                           for (char& c : s)
                             if (c == '-') c = '_';
                           return s;
                         });

// K one group (m1-n8-k128): ignoring g_idx or taking one scale per row changes nothing there, so
// those must-fail rows measure exactly 0. They are not applicable, not a weak gate: the table stays
// healthy (it said "NOT OK", exit 1: a newcomer's finding), and every applicable row is judged.
TEST(CalibrateCpu, AVariantWithNoEffectAtTheConfigIsNotApplicable) {
  TempDir t;
  setenv("NIBBLE_CACHE_DIR", (t.path() + "/cache").c_str(), 1);
  const std::string out = t.path() + "/calibration.json";
  const ChildExit e = run_child({test::bindir() + "/bin/nibble", "calibrate", "--task", "gemm-w4a16-int4", "--config",
                                 "m1-n8-k128-sym", "--seeds", "0", "--path", "cpu", "--out", out, "-q"},
                                t.path() + "/log", 600);
  ASSERT_EQ(e.kind, ChildExit::Exited) << e.describe();
  EXPECT_EQ(e.code, 0) << file_tail(t.path() + "/log", 1 << 15);
  const auto j = nlohmann::json::parse(read_file(out));
  int not_applicable = 0;
  for (const auto& row : j["rows"]) {
    const bool zero = row["worst"] == 0.0 && row["worst_elem"] == 0.0;
    EXPECT_EQ(row["applicable"].get<bool>(), !(zero && row["expected"] == "FAIL")) << row.dump();
    if (!row["applicable"].get<bool>()) ++not_applicable;
    else EXPECT_EQ(row["verdict"], row["expected"]) << row.dump();
  }
  EXPECT_EQ(not_applicable, 2) << "g_idx_ignored and scales_per_row";
  EXPECT_TRUE(j["healthy"].get<bool>());
}
