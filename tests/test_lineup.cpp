// test_lineup.cpp: several reports side by side (harness/lineup.h): ranks, speedups and the
// fraction of the floor on hand-made reports whose answers are known, and the reasons a report is
// listed apart; the leaderboard built on it (groups per task and config, the ranked set of one GPU
// and schema, speedups over the bundled baselines) and its text, Markdown, HTML and JSON; and that
// each task's bundled baselines are names its bundled solutions report.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <filesystem>

#include "bundled_solutions.h"
#include "harness/lineup.h"
#include "harness/solution_library.h"
#include "harness/task.h"
#include "harness/task_anchors.h"
#include "markup_check.h"

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
  r.gpu_span_us.samples = {median - 1, median, median + 1};  // a grade's report keeps them
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
  std::vector<LineupRow> mixed = rows;
  mixed[1].unit = "call";  // a GEMM report beside decode ones: its median says its own unit
  EXPECT_NE(lineup_html(mixed).find("5 us/call"), std::string::npos);
  EXPECT_NE(format_lineup(mixed).find("5 us/call"), std::string::npos);
}

TEST(Lineup, AReportOnTheGradersClockIsRankedApartByItsOwnFigure) {
  // A --clock wall report: its median is the grader's clock (200 us), not its 3 us GPU span, and it
  // is never ranked against span reports, nor grouped with them on the leaderboard.
  ReportView wall = made("py", "Passed", 3);
  wall.clock = "wall";
  wall.grader_clock_us.present = true;
  wall.grader_clock_us.median = 200;
  wall.grader_clock_us.q1 = 190;
  wall.grader_clock_us.q3 = 210;
  wall.grader_clock_us.samples = {190, 200, 210};
  const auto rows = make_lineup({made("a", "Passed", 100), wall}, {"a.json", "py.json"});
  EXPECT_EQ(rows[1].apart, "timed on the grader's clock (--clock wall), not by GPU span");
  EXPECT_EQ(rows[1].rank, 0);
  EXPECT_EQ(rows[1].median_us, 200);
  EXPECT_EQ(rows[1].q3_us, 210);
  const auto first_wall = make_lineup({wall, made("a", "Passed", 100)}, {"py.json", "a.json"});
  EXPECT_EQ(first_wall[0].rank, 1);
  EXPECT_EQ(first_wall[1].apart, "timed by GPU span, not on the grader's clock (--clock wall)");
}

TEST(Lineup, AReportWithGraphsRecordedWholeIsRankedApart) {
  ReportView whole = made("graph", "Passed", 50);
  whole.graph_records = "graphs";
  const auto rows = make_lineup({made("a", "Passed", 100), whole}, {"a.json", "graph.json"});
  EXPECT_EQ(rows[1].rank, 0);
  EXPECT_EQ(rows[1].apart, "its CUDA graphs recorded by graphs, the first row's by nodes (--graph-records)");
  // A report whose timed calls launched no CUDA graph reads the same in either mode: ranked with it.
  ReportView none = whole;
  none.graph_launches_audited = 0;
  const auto with_none = make_lineup({made("a", "Passed", 100), none}, {"a.json", "none.json"});
  EXPECT_EQ(with_none[1].apart, "");
  EXPECT_EQ(with_none[1].rank, 1);
  // ... and a first row that launched none goes with the per-node set: a whole-graph row is apart.
  ReportView a = made("a", "Passed", 100);
  a.graph_launches_audited = 0;
  const auto first_none = make_lineup({a, whole}, {"a.json", "graph.json"});
  EXPECT_EQ(first_none[1].apart, "its CUDA graphs recorded by graphs, the first row's by nodes or none launched (--graph-records)");
  // A first row graded whole that launched none (the megakernel beside a PyTorch graph, both by the
  // default): the set is the whole-graph one, so a graph recorded whole ranks and one by nodes is
  // apart (a reviewer's finding: it was the other way round).
  ReportView mk = none, g = whole, n = made("n", "Passed", 60);
  g.graph_launches_audited = n.graph_launches_audited = 64;
  const auto default_mode = make_lineup({mk, g, n}, {"mk.json", "g.json", "n.json"});
  EXPECT_EQ(default_mode[1].apart, "");
  EXPECT_EQ(default_mode[1].rank, 2) << "ranked (a tie with the first keeps the given order)";
  EXPECT_EQ(default_mode[2].apart, "its CUDA graphs recorded by nodes, the first row's by graphs (--graph-records)");
  EXPECT_NE(default_mode[0].group.find("graphs recorded whole"), std::string::npos) << default_mode[0].group;
}

// ---------------------------------------------------------------------------------------------
// The leaderboard

namespace {

/** The baselines a test gives the leaderboard (the decode task's names). */
std::vector<std::string> decode_baselines(const std::string&) { return {"unfused", "reference-fp32-cublas"}; }

const LeaderboardRow& row_named(const LeaderboardGroup& g, const std::string& label) {
  for (const LeaderboardRow& r : g.rows)
    if (r.row.label == label) return r;
  throw std::runtime_error("no row " + label);
}

}  // namespace

TEST(Leaderboard, OneGroupPerTaskAndConfigInOrder) {
  ReportView gemm = made("g", "Passed", 7), tiny = made("t", "Passed", 5);
  gemm.task = "gemm-w4a16-nvfp4";
  gemm.config = "m16-n3072-k3072";
  gemm.unit = "call";
  tiny.config = "tiny";
  const auto groups = make_leaderboard({made("a", "Passed", 100), tiny, gemm, made("b", "Passed", 50)}, {"a", "t", "g", "b"},
                                       decode_baselines);
  ASSERT_EQ(groups.size(), 3u);
  EXPECT_EQ(groups[0].task, "gemm-w4a16-nvfp4");
  EXPECT_EQ(groups[0].unit, "call");
  EXPECT_EQ(groups[1].task, "megakernel-int4-weight-decode");
  EXPECT_EQ(groups[1].config, "full");
  EXPECT_EQ(groups[2].config, "tiny");
  ASSERT_EQ(groups[1].rows.size(), 2u);
  EXPECT_EQ(groups[1].rows[0].row.label, "b") << "ranked rows first, fastest first";
  EXPECT_EQ(groups[1].rows[0].row.rank, 1);
  EXPECT_EQ(groups[1].rows[1].row.rank, 2);
  EXPECT_EQ(groups[0].rows[0].row.rank, 1) << "each group has its own rank 1";
  EXPECT_EQ(groups[2].rows[0].row.rank, 1);
  EXPECT_EQ(groups[1].ranked, "megakernel-int4-weight-decode / full / NVIDIA H200 / schema 2");
}

TEST(Leaderboard, RanksOneGpuAndSchemaListsTheOthersApartWithTheReason) {
  ReportView v1 = made("old", "Passed", 1);
  v1.schema_major = 1;
  v1.schema_version = "1.0.0";
  const auto groups = make_leaderboard({made("a", "Passed", 100), made("h100", "Passed", 10, "NVIDIA H100"),
                                        made("bad", "Incorrect", 25), made("b", "Passed", 50), v1},
                                       {"a.json", "h100.json", "bad.json", "b.json", "old.json"}, decode_baselines);
  ASSERT_EQ(groups.size(), 1u);
  const LeaderboardGroup& g = groups[0];
  EXPECT_EQ(g.gpu, "NVIDIA H200");
  EXPECT_EQ(g.schema_major, 2);
  // Order: the ranked by rank, the ranked set's unranked, those apart (each in the given order).
  std::vector<std::string> order;
  for (const LeaderboardRow& r : g.rows) order.push_back(r.row.label);
  EXPECT_EQ(order, (std::vector<std::string>{"b.json", "a.json", "bad.json", "h100.json", "old.json"}));
  EXPECT_EQ(row_named(g, "b.json").row.rank, 1);
  EXPECT_EQ(row_named(g, "a.json").row.rank, 2);
  EXPECT_EQ(row_named(g, "bad.json").row.rank, 0) << "a report that did not pass is listed, never ranked";
  EXPECT_EQ(row_named(g, "bad.json").row.apart, "");
  EXPECT_EQ(row_named(g, "h100.json").row.rank, 0) << "10 us on another GPU is not a rank 1 on this one";
  EXPECT_EQ(row_named(g, "h100.json").row.apart, "another GPU (NVIDIA H100)");
  EXPECT_EQ(row_named(g, "old.json").row.apart, "another report schema (1.0.0)");

  const std::string text = format_leaderboard(groups);
  EXPECT_NE(text.find("not ranked: another GPU (NVIDIA H100)"), std::string::npos) << text;
  EXPECT_NE(text.find("worst relative error 3 >= gate 0.1"), std::string::npos) << text;
  EXPECT_NE(text.find("the Passed reports on NVIDIA H200 under report schema 2 (2 ranked of 3 there; 2 listed apart)"),
            std::string::npos)
      << text;
}

TEST(Leaderboard, ReportsOnTheGradersClockAreNotRankedWithSpans) {
  ReportView wall = made("py", "Passed", 3);  // a 3 us span, 200 us on the grader's clock
  wall.clock = "wall";
  wall.grader_clock_us.present = true;
  wall.grader_clock_us.median = 200;
  wall.grader_clock_us.samples = {200};
  const auto groups = make_leaderboard({made("a", "Passed", 100), made("b", "Passed", 50), wall},
                                       {"a.json", "b.json", "py.json"}, decode_baselines);
  ASSERT_EQ(groups.size(), 1u);
  EXPECT_EQ(row_named(groups[0], "b.json").row.rank, 1);
  EXPECT_EQ(row_named(groups[0], "py.json").row.rank, 0) << "3 us of GPU span is not a rank 1 when the call took 200";
  EXPECT_EQ(row_named(groups[0], "py.json").row.apart, "timed on the grader's clock (--clock wall), not by GPU span");
  EXPECT_EQ(groups[0].clock, "span");
  // A set of reports on the grader's clock with more Passed reports is the one ranked, and says so.
  ReportView wall2 = wall;
  wall2.solution_name = "py2";
  const auto walls = make_leaderboard({made("a", "Passed", 100), wall, wall2}, {"a.json", "py.json", "py2.json"}, decode_baselines);
  EXPECT_EQ(walls[0].clock, "wall");
  EXPECT_NE(format_leaderboard(walls).find("Ranked by median time on the grader's clock"), std::string::npos)
      << format_leaderboard(walls);
}

TEST(Leaderboard, AReportThatLaunchedNoGraphRanksInEitherRecordMode) {
  // Two graphs-mode reports whose calls launched graphs, one graphs-mode report that launched none
  // and one old nodes report (which cannot say): the whole-graph set has the most rankable reports;
  // the report that launched none ranks in it, the nodes one is apart with the reason (a newcomer's
  // finding, 2026-12-07: a one-kernel megakernel was set apart by a mode it does not depend on).
  ReportView g1 = made("g1", "Passed", 40), g2 = made("g2", "Passed", 60), none = made("mk", "Passed", 50);
  for (ReportView* r : {&g1, &g2, &none}) r->graph_records = "graphs";
  g1.graph_launches_audited = g2.graph_launches_audited = 64;
  none.graph_launches_audited = 0;
  const auto groups = make_leaderboard({g1, g2, none, made("old", "Passed", 30)}, {"g1", "g2", "mk", "old"}, decode_baselines);
  ASSERT_EQ(groups.size(), 1u);
  EXPECT_EQ(groups[0].graph_records, "graphs");
  EXPECT_EQ(row_named(groups[0], "g1").row.rank, 1);
  EXPECT_EQ(row_named(groups[0], "mk").row.rank, 2);
  EXPECT_EQ(row_named(groups[0], "g2").row.rank, 3);
  EXPECT_EQ(row_named(groups[0], "old").row.apart, "its CUDA graphs recorded by nodes, the first row's by graphs (--graph-records)");
  // The same report that launched none beside old nodes reports: ranked with them.
  const auto nodes = make_leaderboard({none, made("a", "Passed", 100), made("b", "Passed", 70)}, {"mk", "a", "b"}, decode_baselines);
  EXPECT_EQ(nodes[0].graph_records, "nodes");
  EXPECT_EQ(row_named(nodes[0], "mk").row.rank, 1);
  EXPECT_EQ(row_named(nodes[0], "b").row.rank, 2);
}

TEST(Leaderboard, TheRankedSetHasTheMostPassedReportsThenTheNewerSchema) {
  // Two Passed on the H100 against one on the H200 (and a failed one there): the H100 is ranked.
  auto groups = make_leaderboard({made("a", "Passed", 100), made("x", "Crashed", 0), made("h1", "Passed", 10, "NVIDIA H100"),
                                  made("h2", "Passed", 20, "NVIDIA H100")},
                                 {"a", "x", "h1", "h2"}, decode_baselines);
  ASSERT_EQ(groups.size(), 1u);
  EXPECT_EQ(groups[0].gpu, "NVIDIA H100");
  EXPECT_EQ(row_named(groups[0], "h1").row.rank, 1);
  EXPECT_EQ(row_named(groups[0], "a").row.apart, "another GPU (NVIDIA H200)");
  EXPECT_EQ(row_named(groups[0], "x").row.apart, "another GPU (NVIDIA H200)");
  // One each under schema 1 and 2: the newer schema is ranked, whichever came first.
  ReportView v1 = made("old", "Passed", 1);
  v1.schema_major = 1;
  v1.schema_version = "1.0.0";
  groups = make_leaderboard({v1, made("new", "Passed", 100)}, {"old", "new"}, decode_baselines);
  EXPECT_EQ(groups[0].schema_major, 2);
  EXPECT_EQ(row_named(groups[0], "new").row.rank, 1);
  EXPECT_EQ(row_named(groups[0], "old").row.apart, "another report schema (1.0.0)");
}

TEST(Leaderboard, AFullTieIsBrokenByTheNewestReportNotTheInputOrder) {
  // One Passed report on each GPU, same schema: the set with the newer report is ranked, given in
  // either order (it was the first met: a newcomer's finding).
  ReportView h100 = made("h100", "Passed", 10, "NVIDIA H100"), h200 = made("h200", "Passed", 20);
  h100.created_utc = "2026-12-06T05:40:00Z";
  h200.created_utc = "2026-12-05T10:00:00Z";
  for (const bool h100_first : {true, false}) {
    const auto groups = h100_first ? make_leaderboard({h100, h200}, {"h100", "h200"}, decode_baselines)
                                   : make_leaderboard({h200, h100}, {"h200", "h100"}, decode_baselines);
    EXPECT_EQ(groups[0].gpu, "NVIDIA H100") << h100_first;
    EXPECT_EQ(row_named(groups[0], "h200").row.apart, "another GPU (NVIDIA H200)") << h100_first;
  }
}

TEST(Leaderboard, AMedianThatIsNotItsSamplesIsNotRanked) {
  // Samples 9, 10, 11: their median is 10. A report whose stored median says 1 (edited by hand) is
  // listed apart with both figures; the honest one is ranked.
  ReportView honest = made("honest", "Passed", 10), edited = made("edited", "Passed", 10);
  honest.gpu_span_us.samples = edited.gpu_span_us.samples = {9, 10, 11};
  edited.gpu_span_us.median = 1;
  edited.gpu_span_us.q1 = 0.5;
  const auto groups = make_leaderboard({honest, edited}, {"honest", "edited"}, decode_baselines);
  EXPECT_EQ(row_named(groups[0], "honest").row.rank, 1);
  EXPECT_EQ(row_named(groups[0], "edited").row.rank, 0);
  EXPECT_EQ(row_named(groups[0], "edited").row.apart, "its median (1 us) is not its 3 samples' (10 us): an edited report");
  // Within the samples' range but not their median: also apart, unless the grade left throttled
  // rounds out of the median (then its samples are more than its summary's).
  edited.gpu_span_us.median = 9.5;
  edited.gpu_span_us.q1 = 9;
  EXPECT_NE(row_named(make_leaderboard({edited}, {"edited"}, decode_baselines)[0], "edited").row.apart, "");
  edited.throttled_rounds_excluded = true;
  EXPECT_EQ(row_named(make_leaderboard({edited}, {"edited"}, decode_baselines)[0], "edited").row.rank, 1);
  // Without samples at all (a Passed schema-2 report always has them): apart too, and an edited
  // first row of a side by side gives no speedups over its median.
  ReportView bare = made("bare", "Passed", 1);
  bare.gpu_span_us.samples.clear();
  const auto rows = make_lineup({bare, honest}, {"bare", "honest"});
  EXPECT_EQ(rows[0].apart, "its median has no samples beside it: an edited report");
  EXPECT_TRUE(std::isnan(rows[1].speedup_vs_first)) << rows[1].speedup_vs_first;
  // ... nor do edited reports pick which GPU's set is ranked: two edited H100 reports against one
  // honest H200 report.
  ReportView e1 = made("e1", "Passed", 10, "NVIDIA H100"), e2 = made("e2", "Passed", 10, "NVIDIA H100");
  e1.gpu_span_us.samples = e2.gpu_span_us.samples = {50, 60, 70};
  EXPECT_EQ(make_leaderboard({e1, e2, honest}, {"e1", "e2", "honest"}, decode_baselines)[0].gpu, "NVIDIA H200");
}

TEST(Leaderboard, SpeedupOverTheBundledBaselinesByHand) {
  ReportView slow_base = made("unfused", "Passed", 300), faster_base = made("unfused", "Passed", 250);
  ReportView apart_base = made("reference-fp32-cublas", "Passed", 600, "NVIDIA H100");
  const auto groups = make_leaderboard({made("mine", "Passed", 100), slow_base, made("broken", "Incorrect", 50), faster_base, apart_base},
                                       {"mine.json", "unfused-1.json", "broken.json", "unfused-2.json", "ref-h100.json"},
                                       [](const std::string&) -> std::vector<std::string> { return {"unfused", "reference-fp32-cublas"}; });
  const LeaderboardGroup& g = groups.at(0);
  EXPECT_EQ(g.baseline_solutions, (std::vector<std::string>{"unfused", "reference-fp32-cublas"}));
  // The reference is on another GPU: not a baseline here. unfused twice: its fastest report.
  ASSERT_EQ(g.baselines.size(), 1u);
  EXPECT_EQ(g.baselines[0].solution, "unfused");
  EXPECT_EQ(g.baselines[0].label, "unfused-2.json");
  EXPECT_DOUBLE_EQ(g.baselines[0].median_us, 250);
  EXPECT_DOUBLE_EQ(row_named(g, "mine.json").speedup.at(0), 2.5);
  EXPECT_DOUBLE_EQ(row_named(g, "unfused-2.json").speedup.at(0), 1.0);
  EXPECT_NEAR(row_named(g, "unfused-1.json").speedup.at(0), 250.0 / 300, 1e-12);
  EXPECT_TRUE(std::isnan(row_named(g, "broken.json").speedup.at(0))) << "a failed grade's time is no result";
  EXPECT_TRUE(std::isnan(row_named(g, "ref-h100.json").speedup.at(0)));

  // The example: baseline 300 us, solution 100 us -> 3.00x, in every output.
  const auto three = make_leaderboard({made("unfused", "Passed", 300), made("mine", "Passed", 100)}, {"u", "m"}, decode_baselines);
  EXPECT_DOUBLE_EQ(row_named(three[0], "m").speedup.at(0), 3.0);
  const std::string text = format_leaderboard(three);
  EXPECT_NE(text.find("3.00x"), std::string::npos) << text;
  EXPECT_NE(text.find("vs unfused"), std::string::npos) << text;
  EXPECT_EQ(text.find("vs reference-fp32-cublas"), std::string::npos) << "a column only for a baseline present: " << text;
  EXPECT_NE(leaderboard_markdown(three).find("| 3.00x |"), std::string::npos);
  EXPECT_NE(leaderboard_html(three).find("<td>3.00x</td>"), std::string::npos);
  const auto j = leaderboard_json(three, {"in"});
  EXPECT_DOUBLE_EQ(j["groups"][0]["rows"][0]["speedup_vs_baselines"]["unfused"].get<double>(), 3.0);
  EXPECT_EQ(j["groups"][0]["baselines"][0]["label"], "u");
}

TEST(Leaderboard, NoBaselineInTheGroupIsSaid) {
  const auto none = make_leaderboard({made("mine", "Passed", 100)}, {"m"}, decode_baselines);
  EXPECT_TRUE(none[0].baselines.empty());
  EXPECT_TRUE(none[0].rows[0].speedup.empty());
  for (const std::string& out : {format_leaderboard(none), leaderboard_markdown(none), leaderboard_html(none)}) {
    EXPECT_NE(out.find("No baseline in this group"), std::string::npos) << out;
    EXPECT_NE(out.find("bundled baselines, unfused, reference-fp32-cublas, have no ranked report here"), std::string::npos) << out;
  }
  const auto j = leaderboard_json(none, {});
  EXPECT_TRUE(j["groups"][0]["baselines"].empty());
  EXPECT_TRUE(j["groups"][0]["rows"][0]["speedup_vs_baselines"].empty());
  EXPECT_NE(j["groups"][0]["baseline_note"].get<std::string>().find("No baseline"), std::string::npos);
  const auto no_list = make_leaderboard({made("mine", "Passed", 100)}, {"m"}, nullptr);
  EXPECT_NE(format_leaderboard(no_list).find("the task has no bundled baseline"), std::string::npos);
}

TEST(Leaderboard, JsonHasEveryFieldAndNullForUnknownNumbers) {
  ReportView untimed = made("u", "Crashed", 0);
  untimed.gpu_span_us = FigureView{};
  untimed.worst_rel_err = NAN;
  untimed.git_commit.reset();
  const auto j = leaderboard_json(make_leaderboard({made("unfused", "Passed", 300), untimed}, {"a.json", "u.json"}, decode_baselines),
                                  {"reports/"});
  EXPECT_EQ(j["schema"], "nibble.leaderboard");
  EXPECT_EQ(j["schema_version"], "1.1.0");
  EXPECT_EQ(j["inputs"], nlohmann::ordered_json::array({"reports/"}));
  EXPECT_EQ(j["unread"], nlohmann::ordered_json::array());
  ASSERT_EQ(j["groups"].size(), 1u);
  const auto& g = j["groups"][0];
  for (const char* k : {"task", "config", "unit", "ranked", "gpu", "schema_major", "clock", "baseline_solutions", "baselines", "baseline_note", "rows"})
    EXPECT_TRUE(g.contains(k)) << k;
  const auto& ranked = g["rows"][0];
  for (const char* k : {"label", "solution", "disposition", "reason", "task", "config", "gpu", "schema_version", "commit", "unit",
                        "median_us", "q1_us", "q3_us", "floor_us", "fraction_of_floor", "worst_rel_err", "gate", "rank", "group",
                        "apart", "speedup_vs_baselines"})
    EXPECT_TRUE(ranked.contains(k)) << k;
  EXPECT_FALSE(ranked.contains("speedup_vs_first")) << "a lineup's field; a leaderboard has no first row";
  EXPECT_EQ(ranked["rank"], 1);
  EXPECT_DOUBLE_EQ(ranked["fraction_of_floor"].get<double>(), 50.0 / 300);
  const auto& crashed = g["rows"][1];
  EXPECT_EQ(crashed["disposition"], "Crashed");
  for (const char* k : {"rank", "median_us", "q1_us", "q3_us", "fraction_of_floor", "worst_rel_err"}) EXPECT_TRUE(crashed[k].is_null()) << k;
  EXPECT_TRUE(crashed["speedup_vs_baselines"]["unfused"].is_null());
}

TEST(Leaderboard, MarkdownAndHtmlEscapeWhatTheReportsSay) {
  ReportView odd = made("a|b <script>&", "Passed", 100);
  odd.reason = "line one\nline two";
  const auto groups = make_leaderboard({made("unfused", "Passed", 300), odd}, {"u", "o"}, decode_baselines);
  const std::string md = leaderboard_markdown(groups);
  EXPECT_NE(md.find("\n| rank | solution | disposition | median us/token | q1 - q3 | of floor | vs unfused | worst err | gate | GPU | "
                    "commit | report | note |\n| ---: | :--- | :--- | ---: | ---: | ---: | ---: | ---: | ---: | :--- | :--- | :--- | :--- |\n"),
            std::string::npos)
      << md;
  EXPECT_NE(md.find("a\\|b \\<script\\>&"), std::string::npos) << md;
  EXPECT_EQ(md.find("<script>"), std::string::npos) << md;
  const std::string html = leaderboard_html(groups);
  EXPECT_EQ(nibble::test::markup_problem(html), "");
  EXPECT_NE(html.find("a|b &lt;script&gt;&amp;"), std::string::npos);
  EXPECT_EQ(html.find("<script"), std::string::npos) << "no script, not even one a report names";
  EXPECT_EQ(html.find("http"), std::string::npos) << "no network";
  // The text table keeps one line per row: a newline in a name becomes a space there.
  ReportView nl = made("two\nlines", "Passed", 50);
  const std::string text = format_leaderboard(make_leaderboard({made("unfused", "Passed", 300), nl}, {"u", "n"}, decode_baselines));
  EXPECT_NE(text.find("two lines"), std::string::npos) << text;
  EXPECT_EQ(text.find("two\nlines"), std::string::npos) << text;
}

TEST(Leaderboard, AGroupOfATaskThisNibbleDoesNotKnowSaysSo) {
  ReportView odd = made("unfused", "Passed", 300);
  odd.task += " ";  // a trailing space: a group of its own that looked like the task's
  const auto groups = make_leaderboard({made("unfused", "Passed", 300), odd}, {"a", "b"}, decode_baselines);
  ASSERT_EQ(groups.size(), 2u);
  EXPECT_TRUE(groups[0].known_task);
  EXPECT_FALSE(groups[1].known_task);
  const std::string text = format_leaderboard(groups);
  EXPECT_NE(text.find("megakernel-int4-weight-decode  / full (a task this nibble does not know)"), std::string::npos) << text;
  EXPECT_EQ(leaderboard_json(groups, {})["groups"][1]["known_task"], false);
}

TEST(Leaderboard, FilesThatDidNotReadAreListedEscapedAfterTheGroups) {
  const auto groups = make_leaderboard({made("unfused", "Passed", 300)}, {"u"}, decode_baselines);
  const std::vector<UnreadReport> unread{{"r/a|b <script>.json", "r/a|b <script>.json is not valid JSON:\nline 3"}};
  const std::string text = format_leaderboard(groups, unread);
  EXPECT_NE(text.find("1 report in 1 group (task / config); 1 file that did not read as a report, listed at the end"), std::string::npos) << text;
  EXPECT_GT(text.find("Files that did not read"), text.find("unfused")) << text;
  EXPECT_NE(text.find("is not valid JSON: line 3"), std::string::npos) << "one line per file: " << text;
  const std::string md = leaderboard_markdown(groups, unread);
  EXPECT_NE(md.find("| r/a\\|b \\<script\\>.json | r/a\\|b \\<script\\>.json is not valid JSON: line 3 |"), std::string::npos) << md;
  const std::string html = leaderboard_html(groups, unread);
  EXPECT_EQ(nibble::test::markup_problem(html), "");
  EXPECT_NE(html.find("<td class=\"t path\">r/a|b &lt;script&gt;.json</td>"), std::string::npos) << html;
  EXPECT_EQ(html.find("<script"), std::string::npos);
  const auto j = leaderboard_json(groups, {"r"}, unread);
  ASSERT_EQ(j["unread"].size(), 1u);
  EXPECT_EQ(j["unread"][0]["path"], unread[0].path);
  EXPECT_EQ(j["unread"][0]["reason"], unread[0].reason);
  // None: no section, no count.
  EXPECT_EQ(format_leaderboard(groups).find("did not read"), std::string::npos);
  EXPECT_EQ(leaderboard_html(groups).find("did not read"), std::string::npos);
}

TEST(Leaderboard, TheTasksNameTheirBundledBaselines) {
  EXPECT_EQ(task_baseline_solutions("megakernel-int4-weight-decode"), (std::vector<std::string>{"unfused", "reference-fp32-cublas"}));
  for (const char* gemm : {"gemm-w4a16-nvfp4", "gemm-bf16-mxfp4"})
    EXPECT_EQ(task_baseline_solutions(gemm), (std::vector<std::string>{"gemm-baseline", "cublas-bf16-predequantised"})) << gemm;
  EXPECT_TRUE(task_baseline_solutions("no-such-task").empty());
}

// Each name a task gives as a baseline is what one of its bundled solutions (or its reference)
// returns from nibble_solution_name: a renamed solution would otherwise drop out of every
// leaderboard's speedups without a word. dlopen only: no GPU needed.
TEST(Leaderboard, BaselinesAreNamesTheBundledSolutionsReport) {
  const char* bin = std::getenv("NIBBLE_BINARY_DIR");
  const std::string lib_dir = std::string(bin && *bin ? bin : NIBBLE_BUNDLED_BINARY_DIR) + "/lib/";
  for (const Task* task : all_tasks()) {
    std::vector<std::string> paths{lib_dir + task->reference_library()};
    for (const test::BundledSolution& s : test::bundled_solutions(task->family())) paths.push_back(s.path);
    std::vector<std::string> names;
    for (const std::string& p : paths) {
      if (!std::filesystem::exists(p)) GTEST_SKIP() << p << " is not built";
      names.push_back(SolutionLibrary(p, task->abi()).name());
    }
    for (const std::string& b : task->baseline_solutions())
      EXPECT_NE(std::find(names.begin(), names.end(), b), names.end()) << task->name() << ": no bundled solution is named " << b;
  }
}
