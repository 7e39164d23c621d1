// test_gtest_main.cpp: cases for gtest_main.cpp's exit codes, driven by NIBBLE_GTEST_MAIN_CASE
// (run by tests/gtest_main_check.cmake, which checks each exit code): "skip" (every case skips:
// 77), "skip_fail" (one skips, one fails: 1), "skip_pass" (one skips, one passes: 0).
#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

namespace {
std::string mode() {
  const char* m = std::getenv("NIBBLE_GTEST_MAIN_CASE");
  return m ? m : "";
}
}  // namespace

TEST(GtestMain, Skips) { GTEST_SKIP() << "this case always skips"; }

TEST(GtestMain, SecondCase) {
  const std::string m = mode();
  if (m == "skip_fail") FAIL() << "this case fails in mode skip_fail";
  if (m == "skip") GTEST_SKIP() << "this case skips in mode skip";
  SUCCEED();
}
