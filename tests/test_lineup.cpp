// test_lineup.cpp: several reports side by side (harness/lineup.h): ranks, speedups and the
// fraction of the floor on hand-made reports whose answers are known, and the reasons a report is
// listed apart.
#include <gtest/gtest.h>

#include <cmath>

#include "harness/lineup.h"

using namespace nibble;

namespace {

ReportView made(const std::string& name, const std::string& disposition, double median, const std::string& gpu = "NVIDIA H200") {
  ReportView r;
  r.schema_major = 2;
  r.schema_version = "2.1.0";
  r.task = "megakernel-int4-weight-decode";
  r.config = "full";
  r.device_name = gpu;
  r.solution_name = name;
  r.disposition = disposition;
  r.reason = disposition == "Passed" ? "under the gate" : "worst relative error 3 >= gate 0.1";
  r.unit = "token";
  r.gpu_span_us.present = true;
  r.gpu_span_us.median = median;
  r.gpu_span_us.q1 = median - 1;
  r.gpu_span_us.q3 = median + 1;
  r.floor_measured_copy_bw_us = 50;
  r.worst_rel_err = disposition == "Passed" ? 0.01 : 3;
  r.gate = 0.1;
  r.git_commit = "abc123";
  return r;
}

}  // namespace

TEST(Lineup, RanksThePassedReportsOfTheFirstGroupByMedian) {
  const std::vector<LineupRow> rows = make_lineup(
      {made("a", "Passed", 100), made("b", "Passed", 50), made("c", "Incorrect", 25), made("d", "Passed", 10, "NVIDIA H100")},
      {"a.json", "b.json", "c.json", "d.json"});
  ASSERT_EQ(rows.size(), 4u);
  EXPECT_EQ(rows[0].rank, 2);
  EXPECT_EQ(rows[1].rank, 1);
  EXPECT_EQ(rows[2].rank, 0) << "a report that did not pass is listed, never ranked";
  EXPECT_EQ(rows[3].rank, 0) << "another GPU";
  EXPECT_DOUBLE_EQ(rows[0].speedup_vs_first, 1.0);
  EXPECT_DOUBLE_EQ(rows[1].speedup_vs_first, 2.0);
  EXPECT_DOUBLE_EQ(rows[2].speedup_vs_first, 4.0);
  EXPECT_TRUE(std::isnan(rows[3].speedup_vs_first));
  EXPECT_DOUBLE_EQ(rows[0].fraction_of_floor, 0.5);
  EXPECT_DOUBLE_EQ(rows[1].fraction_of_floor, 1.0);
  EXPECT_EQ(rows[3].apart, "another GPU (NVIDIA H100)");
  EXPECT_EQ(rows[1].label, "b.json");

  const std::string text = format_lineup(rows);
  EXPECT_NE(text.find("2.00x"), std::string::npos) << text;
  EXPECT_NE(text.find("not ranked with the first: d (d.json): another GPU"), std::string::npos) << text;
  EXPECT_NE(text.find("c: Incorrect: worst relative error 3"), std::string::npos) << text;

  const auto j = lineup_json(rows);
  EXPECT_EQ(j["schema"], "nibble.lineup");
  EXPECT_EQ(j["rows"][1]["rank"], 1);
  EXPECT_TRUE(j["rows"][2]["rank"].is_null());
  EXPECT_TRUE(j["rows"][3]["speedup_vs_first"].is_null());
  EXPECT_DOUBLE_EQ(j["rows"][0]["fraction_of_floor"].get<double>(), 0.5);
}

TEST(Lineup, ReasonsToListApart) {
  ReportView other_task = made("g", "Passed", 5), other_config = made("t", "Passed", 5), old = made("o", "Passed", 5);
  other_task.task = "gemm-w4a16-nvfp4";
  other_config.config = "tiny";
  old.schema_major = 1;
  old.schema_version = "1.0.0";
  ReportView untimed = made("u", "Crashed", 0);
  untimed.gpu_span_us = FigureView{};
  const auto rows = make_lineup({made("a", "Passed", 100), other_task, other_config, old, untimed}, {"a", "g", "t", "o", "u"});
  EXPECT_EQ(rows[1].apart, "another task (gemm-w4a16-nvfp4)");
  EXPECT_EQ(rows[2].apart, "another config (tiny)");
  EXPECT_EQ(rows[3].apart, "another report schema (1.0.0)");
  EXPECT_EQ(rows[4].apart, "");
  EXPECT_TRUE(std::isnan(rows[4].median_us));
  EXPECT_EQ(rows[4].rank, 0);
  EXPECT_EQ(rows[0].rank, 1);
  EXPECT_NE(lineup_html(rows).find("not ranked: another task"), std::string::npos);
}
