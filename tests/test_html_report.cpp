// test_html_report.cpp: `nibble report html`: the page carries the key figures, its markup is
// balanced (the SVG must be well-formed XML to render at all), every report string is escaped, and
// headless Chromium renders it (Debian package `chromium`; skipped with the reason without it).
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <sstream>
#include <unistd.h>

#include "harness/atomic_file.h"
#include "harness/compare.h"
#include "harness/html_report.h"
#include "harness/process.h"
#include "harness/report_view.h"
#include "harness/task_anchors.h"
#include "markup_check.h"

using namespace nibble;
using nibble::test::markup_problem;
using json = nlohmann::ordered_json;
namespace fs = std::filesystem;

namespace {

std::string data(const std::string& name) {
  const char* s = std::getenv("NIBBLE_SOURCE_DIR");
  return std::string(s ? s : NIBBLE_TEST_SOURCE_DIR) + "/tests/data/" + name;
}
json unfused() { return load_report(data("reports/h200-unfused-full.json")); }
json reference() { return load_report(data("reports/h200-reference-full.json")); }
ReportView view(const json& r) { return read_report_view(r, "a test report"); }

/** What `nibble report html` draws beside `r`: its task's anchors (task_anchors.h). */
HtmlAnchors anchors_of(const ReportView& r) { return {task_error_anchors(r.task, r.config), {}, {}}; }

/** The page `nibble report html` writes for `r` (and BASE `base` with the comparison `c`). */
std::string page(const json& r, const std::string& label, const json* base = nullptr, const std::string& base_label = "",
                 const Comparison* c = nullptr) {
  const ReportView v = view(r);
  if (!base) return render_html_report(v, label, anchors_of(v));
  const ReportView b = view(*base);
  return render_html_report(v, label, anchors_of(v), &b, base_label, c);
}

Comparison compare_json(const json& base, const json& neu, const CompareOptions& opt, const std::string& base_label = "BASE",
                        const std::string& new_label = "NEW") {
  return compare_reports(view(base), view(neu), opt, base_label, new_label);
}

/** Text of the element with id="<id>" (no nested tags), or "" when absent. */
std::string by_id(const std::string& html, const std::string& id) {
  std::smatch m;
  const std::regex re("id=\"" + id + "\">([^<]*)<");
  return std::regex_search(html, m, re) ? m[1].str() : "";
}

size_t count(const std::string& s, const std::string& what) {
  size_t n = 0;
  for (size_t p = s.find(what); p != std::string::npos; p = s.find(what, p + 1)) ++n;
  return n;
}
}  // namespace

TEST(HtmlReport, KeyFiguresOfTheUnfusedReport) {
  // The same grade in either schema: the same figures, ids, charts and anchors.
  for (const char* file : {"reports/h200-unfused-full.json", "reports/v2/h200-unfused-full.json"}) {
    SCOPED_TRACE(file);
    const std::string html = page(load_report(data(file)), file);
    EXPECT_EQ(by_id(html, "disposition"), "Passed");
    EXPECT_EQ(by_id(html, "reason"), "worst relative error 0.000224 &lt; gate 0.1 (0.0022x the gate)");
    EXPECT_EQ(by_id(html, "median-us"), "2640.4");
    EXPECT_EQ(by_id(html, "floor-measured-us"), "458.9");
    EXPECT_EQ(by_id(html, "floor-theoretical-us"), "399.0");
    EXPECT_EQ(by_id(html, "worst-rel-err"), "0.000224");
    EXPECT_EQ(by_id(html, "gate"), "0.1");
    EXPECT_EQ(by_id(html, "fraction-measured-bw"), "17.4");
    // Four charts: error vs gate, per position, histogram, roofline.
    EXPECT_EQ(count(html, "<svg "), 4u);
    // The anchors: the seed's drop-the-feature points; no typed-in time (those come --beside).
    for (const char* s : {"nibble order swapped 1.43", "one scale/zero per row 1.51", "zero point ignored 10.2",
                          "most precise legitimate variant 0.049", "x the measured floor"})
      EXPECT_NE(html.find(s), std::string::npos) << s;
    EXPECT_EQ(html.find("4160.0 us"), std::string::npos);
    // Self-contained: nothing to fetch, nothing to run. (The SVG namespace URI names, never fetches.)
    const std::string stripped = std::regex_replace(html, std::regex("http://www\\.w3\\.org/2000/svg"), "");
    for (const char* s : {"<script", "http://", "https://", "src=", "<link", "url("}) EXPECT_EQ(stripped.find(s), std::string::npos) << s;
  }
}

TEST(HtmlReport, KeyFiguresOfAGemmReport) {
  // A gemm_fp4_sm90 grade (nvfp4 m16-n3072-k3072): its rates, per call, no decode-only chart.
  const json g = load_report(data("reports/h200-gemm-nvfp4-m16-fp4_sm90.json"));
  const std::string html = page(g, "gemm.json");
  EXPECT_EQ(by_id(html, "disposition"), "Passed");
  EXPECT_EQ(by_id(html, "median-us"), "7.488");
  EXPECT_EQ(by_id(html, "floor-measured-us"), "1.333");
  EXPECT_EQ(by_id(html, "tflops"), "40.3");
  EXPECT_EQ(by_id(html, "tbps"), "0.75");
  EXPECT_EQ(by_id(html, "fraction-measured-bw"), "17.8");  // 1.3331 us floor / 7.488 us median
  EXPECT_EQ(by_id(html, "worst-rel-err"), "1.21e-07");
  EXPECT_EQ(by_id(html, "gate"), "0.01");
  // Three charts: error vs gate, roofline, histogram; no per-position chart (a GEMM has none).
  EXPECT_EQ(count(html, "<svg "), 3u);
  EXPECT_EQ(html.find("decode step"), std::string::npos);
  EXPECT_EQ(html.find("per step"), std::string::npos);
  EXPECT_NE(html.find("microseconds per call"), std::string::npos);
  EXPECT_NE(html.find("Bytes a call must move: 5.603 MB"), std::string::npos);
  EXPECT_EQ(markup_problem(html), "");
  // Without a calibration table no variant points: the decode seed's (0.049, 1.43, ...) belong to
  // another task and gate.
  EXPECT_EQ(html.find("most precise legitimate variant"), std::string::npos);
  EXPECT_EQ(html.find("nibble order swapped 1.43"), std::string::npos);
  EXPECT_NE(html.find("none: no calibration table given"), std::string::npos);
  EXPECT_EQ(html.find("floor-weight-read-us"), std::string::npos) << "that report predates the weight-read floor";
  json f = g;
  f["timing"]["floor_us_weight_read"] = 3.56;
  const std::string hf = page(f, "gemm.json");
  EXPECT_EQ(by_id(hf, "floor-weight-read-us"), "3.56");
  EXPECT_NE(hf.find("weight-read floor (read-only kernel)"), std::string::npos);
  EXPECT_NE(hf.find("(2.10x the weight-read floor)"), std::string::npos);  // 7.488 / 3.56
  EXPECT_EQ(hf.find("x the measured floor)"), std::string::npos);
  EXPECT_EQ(markup_problem(hf), "");
  // The error section quotes the report's own guard: this one was graded with row negation.
  EXPECT_NE(html.find("every call after the first negates a seeded subset of A"), std::string::npos);
  EXPECT_EQ(html.find("flips the signs"), std::string::npos);
  // A floor that is not a positive number is no floor (a hand-edited report).
  for (const json& bad : {json(-1.0), json(nullptr), json("3.5"), json(0.0)}) {
    json b = g;
    b["timing"]["floor_us_weight_read"] = bad;
    const std::string hb = page(b, "gemm.json");
    EXPECT_EQ(hb.find("floor-weight-read-us"), std::string::npos) << bad.dump();
    EXPECT_EQ(hb.find("weight-read floor"), std::string::npos) << bad.dump();
  }
}

TEST(HtmlReport, AReportWithGraphsRecordedWholeSaysSo) {
  // --graph-records graphs: the page and the text view say how the span's graphs were recorded
  // (the default says nothing: every report before it recorded nodes).
  json g = load_report(data("reports/h200-gemm-nvfp4-m16-fp4_sm90.json"));
  EXPECT_EQ(page(g, "gemm.json").find("id=\"graph-records\""), std::string::npos);
  g["timing"]["graph_records"] = "graphs";
  g["timing"]["graph_launches_per_call"] = g["timing"]["kernels_per_call"];
  EXPECT_EQ(by_id(page(g, "gemm.json"), "graph-records"), "whole (--graph-records graphs)");
  const std::string text = format_summary(view(g));
  EXPECT_NE(text.find(" graph launches/call recorded whole (--graph-records graphs)"), std::string::npos) << text;
}

TEST(HtmlReport, AReportOnTheGradersClockLeadsWithThatClock) {
  // The GEMM grade above as if graded with --clock wall: its figure is the grader's clock (a median
  // of 40 us, set here by hand), the GPU span beside it, and the text view says which is which.
  json g = load_report(data("reports/h200-gemm-nvfp4-m16-fp4_sm90.json"));
  g["timing"]["clock"] = "wall";
  json wall = g["timing"]["gpu_span_us"];
  for (auto& v : wall["samples"]) v = 40.0;
  wall["median"] = 40.0;
  g["timing"]["grader_clock_us"] = wall;
  // The headline and the throughput follow the graded figure, as grade.cpp writes them.
  g["timing"]["us_per_call"] = 40.0;
  g["timing"]["tflops"] = g["timing"]["flops_per_call"].get<double>() / 40.0 * 1e-6;
  g["timing"]["achieved_bandwidth_Bps"] = g["timing"]["bytes_per_call"].get<double>() / 40.0 * 1e6;
  const std::string html = page(g, "gemm.json");
  EXPECT_EQ(by_id(html, "median-us"), "40");
  EXPECT_EQ(by_id(html, "median-span-us"), "7.488");
  EXPECT_NE(html.find("median on the grader&#39;s clock per call"), std::string::npos);
  // The roofline's bars in the same clock: the candidate's at 40 us, the axis saying which clock.
  EXPECT_NE(html.find("(median on the grader&#39;s clock; shorter is better)"), std::string::npos);
  EXPECT_NE(html.find(">40 us  ("), std::string::npos);
  EXPECT_EQ(html.find(">7.488 us  ("), std::string::npos) << "the span drawn as the figure";
  const std::string text = format_summary(view(g));
  EXPECT_NE(text.find("40 us median on the grader's clock"), std::string::npos) << text;
  EXPECT_NE(text.find("GPU span 7.488 us"), std::string::npos) << text;
}

TEST(HtmlReport, KeyFiguresOfVersion2Reports) {
  // What only version 2 says (the grades' shared figures: KeyFiguresOfTheUnfusedReport).
  const json u = load_report(data("reports/v2/h200-unfused-full.json"));
  std::string html = page(u, "v2/h200-unfused-full.json");
  EXPECT_EQ(by_id(html, "tflops"), "2.7");  // a decode step's FLOPs
  EXPECT_NE(html.find("Worst relative error of logits, k, v over the checked steps"), std::string::npos);
  EXPECT_NE(html.find("<th>verdict rule</th><td>passed</td>"), std::string::npos);
  EXPECT_EQ(markup_problem(html), "");
  const json g = load_report(data("reports/v2/h200-gemm-nvfp4-m16-fp4_sm90.json"));
  html = page(g, "v2/gemm.json", &g, "v2/gemm.json", nullptr);
  EXPECT_EQ(by_id(html, "median-us"), "7.488");
  EXPECT_EQ(by_id(html, "tflops"), "40.3");
  EXPECT_EQ(by_id(html, "floor-weight-read-us"), "3.56");
  EXPECT_EQ(by_id(html, "fraction-measured-bw"), "17.8");
  EXPECT_NE(html.find("(2.10x the weight-read floor)"), std::string::npos);
  EXPECT_EQ(count(html, "<svg "), 4u);  // error, roofline, histogram, strip (no positions)
  EXPECT_EQ(html.find("per step"), std::string::npos);
  EXPECT_NE(html.find("Worst relative error of C over the checked calls"), std::string::npos);
  EXPECT_EQ(markup_problem(html), "");
  // With a comparison: v2 against v2.
  const ReportView gv = view(g);
  const Comparison c = compare_reports(gv, gv, CompareOptions{});
  html = render_html_report(gv, "g.json", HtmlAnchors{}, &gv, "g.json", &c);
  EXPECT_EQ(by_id(html, "compare-exit"), "0");
  EXPECT_EQ(markup_problem(html), "");
}

TEST(HtmlReport, TheAnchorsComeFromTheCallerNotTheTask) {
  // The renderer draws what it is given: a report of a task it has never heard of renders from its
  // own figures, and the decode report without its task's anchors shows none.
  json u = unfused();
  u["task"] = "some-new-task";
  const ReportView v = view(u);
  std::string html = render_html_report(v, "u.json", HtmlAnchors{});
  EXPECT_EQ(count(html, "<svg "), 4u);
  EXPECT_EQ(html.find("nibble order swapped"), std::string::npos);
  EXPECT_EQ(html.find("4160.0 us"), std::string::npos);
  EXPECT_NE(html.find("none: no calibration table given"), std::string::npos);
  EXPECT_EQ(markup_problem(html), "");
  html = render_html_report(v, "u.json", HtmlAnchors{{{"a mutant", 2.5, false}}, {}, {}});
  EXPECT_NE(html.find("a mutant 2.5"), std::string::npos);
  EXPECT_NE(html.find("the drop-the-feature table of the task&#39;s seed"), std::string::npos);
}

TEST(TaskAnchors, TodaysData) {
  const auto e = task_error_anchors("megakernel-int4-weight-decode", "full");
  ASSERT_EQ(e.size(), 4u);
  EXPECT_TRUE(e[0].must_pass);
  EXPECT_DOUBLE_EQ(e[3].worst_rel_err, 10.2);
  EXPECT_TRUE(task_error_anchors("gemm-bf16-mxfp4", "m1-n3072-k3072").empty())
      << "a gate of 1e-2, not 0.1: the decode points would mislead";
}

// Reports beside the page's own (--beside): a bar each in the roofline, when the same task, config
// and GPU, and a row each in the lineup table; never a typed-in time.
TEST(HtmlReport, ReportsBesideItAreBarsAndRows) {
  const json u = unfused(), r = reference();
  json g = load_report(data("reports/h200-gemm-nvfp4-m16-fp4_sm90.json"));
  const ReportView uv = view(u), rv = view(r), gv = view(g);
  HtmlAnchors a = anchors_of(uv);
  a.beside = {rv, gv};
  a.beside_labels = {"reference.json", "gemm.json"};
  const std::string html = render_html_report(uv, "unfused.json", a);
  EXPECT_EQ(markup_problem(html), "");
  EXPECT_NE(html.find("id=\"lineup\""), std::string::npos);
  EXPECT_NE(html.find(html_escape(rv.solution_name) + " (graded beside it)"), std::string::npos) << "same task, config, GPU: a bar";
  EXPECT_EQ(html.find(html_escape(gv.solution_name) + " (graded beside it)"), std::string::npos) << "another task: no bar";
  EXPECT_NE(html.find("not ranked: another task (gemm-w4a16-nvfp4)"), std::string::npos);
  EXPECT_EQ(html.find("published times"), std::string::npos);
}

TEST(HtmlReport, ExtremeSamplesStillRender) {
  // Every sample 1e16 (no spread, and a step of 1 is below a double's precision there): the tick
  // loop once never advanced and the histogram's bin index overflowed (a newcomer's segfault).
  for (double v : {1e16, 1e300, 3.0}) {
    json u = unfused();
    for (auto& x : u["timing"]["gpu_span_us"]["samples"]) x = v;
    const std::string html = page(u, "extreme.json", &u, "extreme.json");
    EXPECT_EQ(markup_problem(html), "") << v;
    EXPECT_EQ(count(html, "<svg "), 5u) << v;  // error, roofline, positions, histogram, strip
  }
}

TEST(HtmlReport, NumbersADoubleCannotHoldAreBadInput) {
  const fs::path p = fs::temp_directory_path() / ("nibble-inf-" + std::to_string(::getpid()) + ".json");
  write_file_atomic(p.string(), "{\"schema\": \"nibble.report\", \"x\": 1e999}");
  EXPECT_THROW(load_report(p.string()), BadReport);
  fs::remove(p);
}

TEST(HtmlReport, MarkupIsBalancedAndSvgWellFormed) {
  const json u = unfused(), r = reference();
  const Comparison c = compare_json(r, u, CompareOptions{});
  for (const std::string& html : {page(u, "u.json"), page(u, "u.json", &r, "r.json", &c),
                                  page(r, "r.json")}) {
    EXPECT_EQ(markup_problem(html), "");
    // Each SVG on its own, as an XML parser (the browser's, for an inline SVG's text) sees it.
    for (size_t p = html.find("<svg "); p != std::string::npos; p = html.find("<svg ", p + 1)) {
      const size_t e = html.find("</svg>", p);
      ASSERT_NE(e, std::string::npos);
      const std::string svg = html.substr(p, e + 6 - p);
      EXPECT_EQ(markup_problem(svg), "") << svg.substr(0, 200);
      EXPECT_EQ(count(svg, "<svg"), 1u);
      EXPECT_EQ(svg.find("nan"), std::string::npos) << "a NaN coordinate: " << svg.substr(0, 300);
      EXPECT_EQ(svg.find("inf"), std::string::npos) << "an infinite coordinate";
    }
  }
}

TEST(HtmlReport, WithABaseShowsTheComparison) {
  const json u = unfused(), r = reference();
  const Comparison c = compare_json(r, u, CompareOptions{});
  const std::string html = page(u, "u.json", &r, "r.json", &c);
  EXPECT_EQ(by_id(html, "compare-exit"), "0");
  EXPECT_EQ(count(html, "class=\"verdict good\" data-figure=\"gpu_span_us\">FASTER<"), 1u) << html.substr(html.find("compare-table"), 1500);
  EXPECT_EQ(count(html, "data-figure=\"host_wall_us\">FASTER<"), 1u);
  EXPECT_EQ(count(html, "<svg "), 5u);  // + the strip plot of both sample sets
  EXPECT_NE(html.find("BASE (reference-fp32-cublas)"), std::string::npos);  // on the roofline bar
  const Comparison slower = compare_json(u, r, CompareOptions{});
  const std::string h2 = page(r, "r.json", &u, "u.json", &slower);
  EXPECT_EQ(by_id(h2, "compare-exit"), "1");
  EXPECT_EQ(count(h2, ">SLOWER<"), 2u);
}

TEST(HtmlReport, EscapesEveryStringFromTheReport) {
  json u = unfused();
  const std::string evil = "<script>alert(\"x\")</script>&'";
  u["solution"]["name"] = evil;
  u["reason"] = evil;
  u["device"]["name"] = evil;
  u["argv"][0] = evil;
  u["calibration"]["rows"] = json::array({{{"variant", evil}, {"worst", 1.5}, {"expected", "FAIL"}}});
  const std::string html = page(u, evil);
  EXPECT_EQ(html.find("<script"), std::string::npos);
  EXPECT_NE(html.find("&lt;script&gt;alert(&quot;x&quot;)&lt;/script&gt;&amp;&#39;"), std::string::npos);
  EXPECT_EQ(markup_problem(html), "");
}

TEST(HtmlReport, CalibrationRowsReplaceTheSeedPoints) {
  json u = unfused();
  u["calibration"]["rows"] = json::array({{{"variant", "bf16_dequant"}, {"worst", 0.031}, {"expected", "PASS"}},
                                          {{"variant", "swap_nibbles"}, {"worst", 1.38}, {"expected", "FAIL"}}});
  const auto a = error_anchors(view(u), anchors_of(view(u)).errors);
  ASSERT_EQ(a.size(), 2u);
  EXPECT_TRUE(a[0].must_pass);
  const std::string html = page(u, "u.json");
  EXPECT_NE(html.find("swap_nibbles 1.38"), std::string::npos);
  EXPECT_EQ(html.find("nibble order swapped"), std::string::npos);
  EXPECT_EQ(error_anchors(view(unfused()), anchors_of(view(unfused())).errors).size(), 4u);
  // Many mutants near one error (measured: swap, RoPE, KV slot, GQA all at 1.42-1.43): the labels
  // stack in rows and the chart grows to hold them.
  for (const char* v : {"rope_interleaved", "kv_slot_plus1", "gqa_modulo", "row_scale"})
    u["calibration"]["rows"].push_back({{"variant", v}, {"worst", 1.42}, {"expected", "FAIL"}});
  const std::string tall = page(u, "u.json");
  std::smatch m;
  ASSERT_TRUE(std::regex_search(tall, m, std::regex("<svg [^>]*height=\"([0-9]+)\"[^>]*aria-label=\"worst relative error")));
  EXPECT_GT(std::stoi(m[1].str()), 200);
  EXPECT_EQ(markup_problem(tall), "");
}

TEST(HtmlReport, GradesCalibrationSummaryGivesTwoPoints) {
  // What nibble grade records: the two variants either side of the gate, and where they came from.
  json u = unfused();
  u["correctness"]["calibration"] = {{"source", "reports/h200/calibration-full.json"}, {"device", "NVIDIA H200"},
                                     {"legitimate_variants_worst", 0.0286}, {"dropped_feature_variants_best", 1.42}};
  const auto a = error_anchors(view(u), anchors_of(view(u)).errors);
  ASSERT_EQ(a.size(), 2u);
  EXPECT_TRUE(a[0].must_pass);
  EXPECT_FALSE(a[1].must_pass);
  const std::string html = page(u, "u.json");
  EXPECT_NE(html.find("worst legitimate variant 0.0286"), std::string::npos);
  EXPECT_NE(html.find("best dropped-feature variant 1.42"), std::string::npos);
  EXPECT_NE(html.find("measured by nibble calibrate on NVIDIA H200 (reports/h200/calibration-full.json)"), std::string::npos);
  EXPECT_NE(error_anchor_source(view(unfused()), anchors_of(view(unfused())).errors).find("seed"), std::string::npos);
}

TEST(HtmlReport, AFailedGradeWithoutTimingStillRenders) {
  json u = unfused();
  u["disposition"] = "Crashed";
  u["reason"] = "killed by signal 11 (Segmentation fault) in decode_step";
  u["correctness"]["worst_rel_err"] = nullptr;
  u.erase("timing");
  std::string html = page(u, "u.json");
  EXPECT_EQ(by_id(html, "disposition"), "Crashed");
  EXPECT_EQ(by_id(html, "median-us"), "n/a");
  EXPECT_EQ(by_id(html, "worst-rel-err"), "NaN");
  EXPECT_NE(html.find("verdict-box fail"), std::string::npos);
  EXPECT_EQ(markup_problem(html), "");
  EXPECT_NE(html.find("this solution: NaN/Inf"), std::string::npos);
  // Stopped before any output was compared: no worst error at all.
  u["correctness"].erase("worst_rel_err");
  html = page(u, "u.json");
  EXPECT_EQ(by_id(html, "worst-rel-err"), "not run");
  EXPECT_NE(html.find("this solution: not checked"), std::string::npos);
  EXPECT_EQ(html.find("nan"), std::string::npos);
  EXPECT_EQ(markup_problem(html), "");
}

// ---------------------------------------------------------------------------------------------
// Headless Chromium

namespace {
std::string find_on_path(const std::string& exe) {
  const char* path = std::getenv("PATH");
  std::stringstream ss(path ? path : "");
  std::string dir;
  while (std::getline(ss, dir, ':'))
    if (!dir.empty() && access((dir + "/" + exe).c_str(), X_OK) == 0) return dir + "/" + exe;
  return "";
}

/** PNG width and height from the IHDR chunk; {0, 0} when not a PNG. */
std::pair<uint32_t, uint32_t> png_size(const std::string& bytes) {
  static const std::string sig("\x89PNG\r\n\x1a\n", 8);
  if (bytes.size() < 24 || bytes.compare(0, 8, sig) != 0 || bytes.compare(12, 4, "IHDR") != 0) return {0, 0};
  auto be32 = [&](size_t o) {
    return (uint32_t(uint8_t(bytes[o])) << 24) | (uint32_t(uint8_t(bytes[o + 1])) << 16) | (uint32_t(uint8_t(bytes[o + 2])) << 8) |
           uint32_t(uint8_t(bytes[o + 3]));
  };
  return {be32(16), be32(20)};
}
}  // namespace

TEST(HtmlReportChromium, RendersToAScreenshotAndTheDomHasTheFigures) {
  const std::string chromium = find_on_path("chromium");
  if (chromium.empty())
    GTEST_SKIP() << "chromium is not on PATH (Debian package `chromium`; scripts/setup.sh installs it): "
                    "the page is not rendered in a browser here";
  TempDir t("nibble-chromium");
  const json u = unfused(), r = reference();
  const Comparison c = compare_json(r, u, CompareOptions{}, "h200-reference-full.json", "h200-unfused-full.json");
  write_file_atomic(t.path() + "/report.html", page(u, "h200-unfused-full.json", &r, "h200-reference-full.json", &c));
  const std::string url = "file://" + t.path() + "/report.html";
  const std::vector<std::string> common = {chromium, "--headless", "--disable-gpu", "--no-sandbox", "--no-first-run",
                                           "--user-data-dir=" + t.path() + "/profile", "--hide-scrollbars"};

  // The DOM as the browser parsed it: the ids must be there, with their values.
  std::vector<std::string> dump = common;
  dump.insert(dump.end(), {"--dump-dom", url});
  const ChildExit d = run_child(dump, t.path() + "/dom.html", 120);
  ASSERT_EQ(d.kind, ChildExit::Exited) << d.describe();
  ASSERT_EQ(d.code, 0) << file_tail(t.path() + "/dom.html");
  const std::string dom = read_file(t.path() + "/dom.html");
  EXPECT_EQ(by_id(dom, "disposition"), "Passed");
  EXPECT_EQ(by_id(dom, "median-us"), "2640.4");
  EXPECT_EQ(by_id(dom, "floor-measured-us"), "458.9");
  EXPECT_EQ(by_id(dom, "compare-exit"), "0");
  EXPECT_EQ(count(dom, "</svg>"), 5u) << "every SVG parsed into the DOM";

  std::vector<std::string> shot = common;
  const std::string png = t.path() + "/report.png";
  shot.insert(shot.end(), {"--screenshot=" + png, "--window-size=1200,1600", url});
  const ChildExit s = run_child(shot, t.path() + "/shot.log", 120);
  ASSERT_EQ(s.kind, ChildExit::Exited) << s.describe();
  ASSERT_EQ(s.code, 0) << file_tail(t.path() + "/shot.log");
  ASSERT_TRUE(fs::exists(png)) << file_tail(t.path() + "/shot.log");
  const std::string bytes = read_file(png);
  const auto [w, h] = png_size(bytes);
  EXPECT_EQ(w, 1200u);
  EXPECT_EQ(h, 1600u);
  // A blank 1200x1600 page compresses to a few kB; text and charts take far more.
  EXPECT_GT(bytes.size(), 60000u) << "the screenshot looks empty";
  if (const char* keep = std::getenv("NIBBLE_SCREENSHOT_OUT")) {
    fs::create_directories(fs::path(keep).parent_path());
    fs::copy_file(png, keep, fs::copy_options::overwrite_existing);
    std::printf("screenshot kept at %s\n", keep);
  }
}
