// test_calibrate_cpu.cpp: `nibble calibrate --path cpu` on the tiny config (what CI can run): the
// fp64 oracle's variants give the expected verdict on both seeds, and the gate is healthy.
#include <gtest/gtest.h>

#include <cstdlib>
#include <nlohmann/json.hpp>

#include "harness/atomic_file.h"
#include "harness/process.h"

using namespace nibble;

TEST(CalibrateCpu, TinyTableHasTheExpectedVerdicts) {
  const char* b = std::getenv("NIBBLE_BINARY_DIR");
  const std::string bindir = b ? b : ".";
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
}

class CalibrateGemmCpu : public ::testing::TestWithParam<const char*> {};

TEST_P(CalibrateGemmCpu, TinyTableIsHealthy) {
  const char* b = std::getenv("NIBBLE_BINARY_DIR");
  const std::string bindir = b ? b : ".";
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
}

INSTANTIATE_TEST_SUITE_P(Tasks, CalibrateGemmCpu, ::testing::Values("gemm-w4a16-nvfp4", "gemm-bf16-mxfp4"));
