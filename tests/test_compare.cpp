// test_compare.cpp: `nibble compare`: its statistics against numbers computed independently
// (scipy; tests/data/compare/make_expected.py reproduces every constant below), its verdicts on two
// real H200 reports (tests/data/reports/), and every exit code, in process and through the binary.
#include <algorithm>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <fstream>

#include "harness/atomic_file.h"
#include "harness/compare.h"
#include "harness/process.h"
#include "harness/report_view.h"
#include "markup_check.h"

using namespace nibble;
using json = nlohmann::ordered_json;
namespace fs = std::filesystem;

namespace {

std::string source_dir() {
  const char* s = std::getenv("NIBBLE_SOURCE_DIR");
  return s ? s : NIBBLE_TEST_SOURCE_DIR;
}
std::string data(const std::string& name) { return source_dir() + "/tests/data/" + name; }
json unfused() { return load_report(data("reports/h200-unfused-full.json")); }
json reference() { return load_report(data("reports/h200-reference-full.json")); }
json gemm() { return load_report(data("reports/h200-gemm-nvfp4-m16-fp4_sm90.json")); }
// The same two grades in schema 2.0.0 (docs/report-schema.md; tests/data/reports/v2/README.md).
json unfused_v2() { return load_report(data("reports/v2/h200-unfused-full.json")); }
json gemm_v2() { return load_report(data("reports/v2/h200-gemm-nvfp4-m16-fp4_sm90.json")); }
ReportView view(const json& r) { return read_report_view(r, "a test report"); }
std::vector<double> samples_of(const json& r, const std::string& figure) { return timed_figure(view(r), figure).samples; }
/** validate_report refuses `edited`, saying `says`. */
void refused(const json& edited, const std::string& says) {
  try {
    validate_report(edited, "r.json");
    ADD_FAILURE() << "taken: " << edited.dump().substr(0, 400);
  } catch (const BadReport& e) {
    EXPECT_NE(std::string(e.what()).find(says), std::string::npos) << e.what();
  }
}
Comparison compare_json(const json& base, const json& neu, const CompareOptions& opt) {
  return compare_reports(view(base), view(neu), opt);
}

const FigureComparison& figure(const Comparison& c, const std::string& name) {
  for (const auto& f : c.figures)
    if (f.figure == name) return f;
  throw std::runtime_error("no figure " + name);
}

/** A report whose GPU span and host wall samples are `span` and `span` * 1.005. */
json with_samples(json r, const std::vector<double>& span) {
  std::vector<double> wall;
  for (double v : span) wall.push_back(v * 1.005);
  r["timing"]["gpu_span_us"]["samples"] = span;
  r["timing"]["host_wall_us"]["samples"] = wall;
  r["timing"]["gpu_span_us"]["n"] = span.size();
  r["timing"]["host_wall_us"]["n"] = wall.size();
  return r;
}

/** n values around `center`, spread +-`spread` (a deterministic pseudo-random walk). */
std::vector<double> noisy(double center, double spread, size_t n, uint64_t seed) {
  SplitMix64 g(seed);
  std::vector<double> v;
  for (size_t i = 0; i < n; ++i) v.push_back(center + spread * (double(g.next() >> 11) / double(1ull << 53) * 2 - 1));
  return v;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// The statistics against scipy

TEST(MannWhitney, MatchesScipyAsymptoticTwoSided) {
  struct Case {
    const char* name;
    std::vector<double> x, y;
    double u1, p;
  };
  // scipy.stats.mannwhitneyu(x, y, alternative="two-sided", method="asymptotic"), scipy 1.17.1.
  const Case cases[] = {
      // By hand too: U1 = 0, U = 4, mu = 2, sigma^2 = 2*2/12 * 5 = 5/3,
      // z = (4 - 2 - 0.5) / sqrt(5/3) = 1.161895, p = 2 (1 - Phi(z)) = 0.245278.
      {"hand_2v2", {1, 2}, {3, 4}, 0.0, 0.2452781168067728},
      {"no_ties_5v5", {1, 2, 3, 4, 5}, {6, 7, 8, 9, 10}, 0.0, 0.012185780355344813},
      {"ties_8v9", {1, 2, 2, 3, 3, 3, 4, 5}, {2, 3, 4, 4, 5, 6, 6, 7, 8}, 13.0, 0.028372715346028934},
      {"overlap_12v10",
       {101.2, 99.8, 100.5, 102.3, 98.7, 100.1, 101.9, 99.4, 100.0, 103.1, 98.2, 100.7},
       {100.9, 102.5, 101.7, 103.8, 100.2, 102.2, 104.0, 101.1, 100.6, 102.9},
       26.0,
       0.027179886800582677},
      {"all_equal", {5, 5, 5}, {5, 5}, 3.0, 1.0},
  };
  for (const Case& c : cases) {
    const MannWhitney m = mann_whitney_u(c.x, c.y);
    EXPECT_DOUBLE_EQ(m.u1, c.u1) << c.name;
    EXPECT_NEAR(m.p, c.p, 1e-12 * std::max(1.0, c.p)) << c.name;
    EXPECT_NEAR(m.p, c.p, 1e-10 * c.p) << c.name;
  }
  // Symmetric: swapping the samples keeps p and mirrors U.
  const MannWhitney a = mann_whitney_u(cases[2].x, cases[2].y), b = mann_whitney_u(cases[2].y, cases[2].x);
  EXPECT_DOUBLE_EQ(a.p, b.p);
  EXPECT_DOUBLE_EQ(a.u1 + b.u1, double(cases[2].x.size() * cases[2].y.size()));
}

TEST(MannWhitney, MatchesScipyOnTheH200Reports) {
  const json u = unfused(), r = reference();
  // x = reference, y = unfused (96 each): fully separated, so the tail p keeps its digits via erfc.
  const MannWhitney span = mann_whitney_u(samples_of(r, "gpu_span_us"), samples_of(u, "gpu_span_us"));
  EXPECT_DOUBLE_EQ(span.u1, 9216.0);
  EXPECT_NEAR(span.p, 5.2536846851596044e-33, 1e-9 * 5.25e-33);
  const MannWhitney wall = mann_whitney_u(samples_of(r, "host_wall_us"), samples_of(u, "host_wall_us"));
  EXPECT_NEAR(wall.p, 5.254326993995392e-33, 1e-9 * 5.25e-33);
  // Overlapping: the unfused run's first 40 calls against its last 40.
  const auto s = samples_of(u, "gpu_span_us"), w = samples_of(u, "host_wall_us");
  const MannWhitney a = mann_whitney_u({s.begin(), s.begin() + 40}, {s.end() - 40, s.end()});
  EXPECT_DOUBLE_EQ(a.u1, 656.0);
  EXPECT_NEAR(a.p, 0.16732893475783828, 1e-12);
  const MannWhitney b = mann_whitney_u({w.begin(), w.begin() + 40}, {w.end() - 40, w.end()});
  EXPECT_DOUBLE_EQ(b.u1, 617.0);
  EXPECT_NEAR(b.p, 0.07907012836877947, 1e-12);
}

TEST(MannWhitney, RejectsEmptySamples) {
  EXPECT_THROW(mann_whitney_u({}, {1.0}), std::invalid_argument);
  EXPECT_THROW(mann_whitney_u({1.0}, {}), std::invalid_argument);
}

TEST(NormalQuantile, MatchesScipyNormPpf) {
  const std::pair<double, double> cases[] = {
      {1e-10, -6.361340902404056}, {0.001, -3.090232306167813}, {0.02, -2.053748910631823},
      {0.025, -1.9599639845400545}, {0.3, -0.5244005127080409}, {0.5, 0.0},
      {0.8, 0.8416212335729143},   {0.975, 1.959963984540054},  {0.99, 2.3263478740408408},
      {0.999999, 4.753424308817087},
  };
  for (auto [p, z] : cases) EXPECT_NEAR(normal_quantile(p), z, 1e-12 * std::max(1.0, std::fabs(z))) << "p = " << p;
  for (double p : {0.01, 0.2, 0.6, 0.95}) EXPECT_NEAR(normal_cdf(normal_quantile(p)), p, 1e-15);
  EXPECT_THROW(normal_quantile(0.0), std::invalid_argument);
  EXPECT_THROW(normal_quantile(1.0), std::invalid_argument);
}

TEST(Bootstrap, ReproducesAnIndependentImplementationExactly) {
  // make_expected.py re-implements the resampling (splitmix64, rejection draw, x's draws then
  // y's) in Python with numpy's median and linear percentile.
  const std::vector<double> x = {101.2, 99.8, 100.5, 102.3, 98.7, 100.1, 101.9, 99.4, 100.0, 103.1, 98.2, 100.7};
  const std::vector<double> y = {100.9, 102.5, 101.7, 103.8, 100.2, 102.2, 104.0, 101.1, 100.6, 102.9};
  const RatioCI ci = bootstrap_ratio_of_medians(x, y, 0.05, 2000, 42);
  EXPECT_NEAR(ci.ratio, 1.0164506480558326, 1e-14);
  EXPECT_NEAR(ci.lo, 0.9990118577075098, 1e-13);
  EXPECT_NEAR(ci.hi, 1.0296780684104627, 1e-13);
  EXPECT_DOUBLE_EQ(ci.level, 0.95);

  const json u = unfused(), r = reference();
  const RatioCI g = bootstrap_ratio_of_medians(samples_of(r, "gpu_span_us"), samples_of(u, "gpu_span_us"), 0.05);
  EXPECT_NEAR(g.ratio, 0.4294709141355339, 1e-14);
  EXPECT_NEAR(g.lo, 0.4288583273202732, 1e-13);
  EXPECT_NEAR(g.hi, 0.43056841681052876, 1e-13);
}

TEST(Bootstrap, AgreesWithScipyBootstrapWithinMonteCarloError) {
  // scipy.stats.bootstrap(method="percentile", n_resamples=20000), its own RNG: the intervals must
  // agree to Monte Carlo error (a few parts in 1e4 of the ratio here).
  const std::vector<double> x = {101.2, 99.8, 100.5, 102.3, 98.7, 100.1, 101.9, 99.4, 100.0, 103.1, 98.2, 100.7};
  const std::vector<double> y = {100.9, 102.5, 101.7, 103.8, 100.2, 102.2, 104.0, 101.1, 100.6, 102.9};
  const RatioCI ci = bootstrap_ratio_of_medians(x, y, 0.05, 20000, 7);
  EXPECT_NEAR(ci.lo, 0.9995085327422284, 2e-3);
  EXPECT_NEAR(ci.hi, 1.0296780684104627, 2e-3);
  const json u = unfused(), r = reference();
  const RatioCI g = bootstrap_ratio_of_medians(samples_of(r, "gpu_span_us"), samples_of(u, "gpu_span_us"), 0.05, 20000, 7);
  EXPECT_NEAR(g.lo, 0.42886490445300096, 3e-4);
  EXPECT_NEAR(g.hi, 0.4305788879108684, 3e-4);
}

TEST(Bootstrap, CoversTheTrueRatioAtAboutItsLevel) {
  // Both samples from one distribution (true ratio 1): a 90% interval should cover 1 in about 90%
  // of trials. 300 trials: the binomial standard error is 1.7%, so [0.82, 0.97] is a wide band
  // that still catches an interval of the wrong width (the median's percentile bootstrap is known
  // to run slightly wide or narrow at small n, hence not a tight band).
  int covered = 0;
  const int trials = 300;
  for (int t = 0; t < trials; ++t) {
    const auto x = noisy(100, 10, 31, 1000 + t), y = noisy(100, 10, 31, 5000 + t);
    const RatioCI ci = bootstrap_ratio_of_medians(x, y, 0.10, 400, uint64_t(t));
    covered += ci.lo <= 1 && 1 <= ci.hi;
  }
  const double rate = double(covered) / trials;
  EXPECT_GT(rate, 0.82);
  EXPECT_LT(rate, 0.97);
}

TEST(Bootstrap, IsDeterministicAndChecksItsInput) {
  const auto x = noisy(100, 5, 20, 1), y = noisy(103, 5, 20, 2);
  const RatioCI a = bootstrap_ratio_of_medians(x, y, 0.05, 500, 9), b = bootstrap_ratio_of_medians(x, y, 0.05, 500, 9);
  EXPECT_EQ(a.lo, b.lo);
  EXPECT_EQ(a.hi, b.hi);
  const RatioCI c = bootstrap_ratio_of_medians(x, y, 0.05, 500, 10);
  EXPECT_TRUE(c.lo != a.lo || c.hi != a.hi);
  EXPECT_LE(a.lo, a.ratio);
  EXPECT_GE(a.hi, a.ratio);
  EXPECT_THROW(bootstrap_ratio_of_medians({}, y, 0.05), std::invalid_argument);
  EXPECT_THROW(bootstrap_ratio_of_medians(x, y, 0.0), std::invalid_argument);
  EXPECT_THROW(bootstrap_ratio_of_medians(x, y, 0.05, 0), std::invalid_argument);
  EXPECT_THROW(bootstrap_ratio_of_medians({-1.0}, y, 0.05), std::invalid_argument);
}

TEST(Median, EvenAndOddCounts) {
  EXPECT_DOUBLE_EQ(median_of({3, 1, 2}), 2);
  EXPECT_DOUBLE_EQ(median_of({4, 1, 3, 2}), 2.5);
  EXPECT_DOUBLE_EQ(median_of({7}), 7);
  EXPECT_THROW(median_of({}), std::invalid_argument);
}

TEST(SplitMix64, KnownSequenceAndUnbiasedRange) {
  // splitmix64 from seed 0: the reference values of Vigna's splitmix64.c.
  SplitMix64 g(0);
  EXPECT_EQ(g.next(), 0xE220A8397B1DCDAFull);
  EXPECT_EQ(g.next(), 0x6E789E6AA1B965F4ull);
  SplitMix64 h(1);
  std::vector<int> counts(7, 0);
  for (int i = 0; i < 70000; ++i) counts[h.below(7)]++;
  for (int c : counts) EXPECT_NEAR(c, 10000, 400);
}

TEST(SampleFactor, StandardSampleSizeFormula) {
  // make_expected.py: ((z_.975 + z_.8) se / d)^2 with se from the interval, d to the threshold.
  RatioCI ci;
  ci.ratio = 1.02;
  ci.lo = 0.98;
  ci.hi = 1.06;
  const auto k = sample_factor(ci, 1.05, 0.05, 0.8);
  ASSERT_TRUE(k.has_value());
  EXPECT_NEAR(*k, 3.743295046057968, 1e-12);
  ci.ratio = 1.05;  // on the threshold: nothing settles it
  EXPECT_FALSE(sample_factor(ci, 1.05, 0.05, 0.8).has_value());
}

TEST(Classify, VerdictRules) {
  CompareOptions o;  // 5%, alpha 0.05
  MannWhitney sig, ns;
  sig.p = 1e-6;
  ns.p = 0.4;
  auto ci = [](double lo, double hi) {
    RatioCI c;
    c.lo = lo;
    c.hi = hi;
    c.ratio = std::sqrt(lo * hi);
    return c;
  };
  EXPECT_EQ(classify(ci(1.08, 1.12), sig, o), "SLOWER");
  EXPECT_EQ(classify(ci(0.80, 0.90), sig, o), "FASTER");
  EXPECT_EQ(classify(ci(0.99, 1.01), ns, o), "SAME");
  EXPECT_EQ(classify(ci(1.01, 1.03), sig, o), "SAME");    // significant but within the threshold
  EXPECT_EQ(classify(ci(1.03, 1.08), sig, o), "UNSURE");  // straddles 1.05
  EXPECT_EQ(classify(ci(0.90, 1.10), ns, o), "UNSURE");
  EXPECT_EQ(classify(ci(1.08, 1.12), ns, o), "UNSURE");   // interval beyond, rank test unconvinced
}

// ---------------------------------------------------------------------------------------------
// Reports: verdicts and exit codes

TEST(CompareReports, UnfusedAgainstReferenceIsFaster) {
  const Comparison c = compare_json(reference(), unfused(), CompareOptions{});
  EXPECT_EQ(c.exit_code, kCompareOk) << c.result;
  ASSERT_EQ(c.figures.size(), 2u);
  for (const auto& f : c.figures) {
    EXPECT_EQ(f.verdict, "FASTER") << f.figure << ": " << f.why;
    EXPECT_LT(f.ci.hi, 0.44);
    EXPECT_LT(f.mwu.p, 1e-30);
  }
  EXPECT_NEAR(figure(c, "gpu_span_us").median_base, 6148.038, 1e-6);
  EXPECT_NEAR(figure(c, "gpu_span_us").median_new, 2640.4035, 1e-6);
  EXPECT_TRUE(c.not_comparable.empty());
  EXPECT_FALSE(c.forced);
}

TEST(CompareReports, ReferenceAgainstUnfusedIsASlowdown) {
  const Comparison c = compare_json(unfused(), reference(), CompareOptions{});
  EXPECT_EQ(c.exit_code, kCompareSlower) << c.result;
  for (const auto& f : c.figures) EXPECT_EQ(f.verdict, "SLOWER") << f.figure << ": " << f.why;
  EXPECT_NEAR(figure(c, "gpu_span_us").ci.ratio, 6148.038 / 2640.4035, 1e-9);
  const std::string table = format_comparison(c);
  EXPECT_NE(table.find("SLOWER (+132.8%)"), std::string::npos) << table;
  EXPECT_NE(table.find("result: exit 1"), std::string::npos) << table;
}

TEST(CompareReports, AHugeFigureIsPrintedInFewDigits) {
  // A newcomer's finding: medians of 1e200 us printed the change as a 200-digit percentage.
  std::vector<double> huge(32);
  for (size_t i = 0; i < huge.size(); ++i) huge[i] = 1e200 * (1 + 0.001 * double(i));
  const Comparison c = compare_json(unfused(), with_samples(unfused(), huge), CompareOptions{});
  const std::string table = format_comparison(c);
  EXPECT_NE(table.find("SLOWER (+3.846e+198%)"), std::string::npos) << table;  // 100 * (1.0155e200 / 2640.4 - 1), in %g
  size_t run = 0, longest = 0;
  for (const char ch : table) longest = std::max(longest, run = std::isdigit(static_cast<unsigned char>(ch)) ? run + 1 : 0);
  EXPECT_LT(longest, 20u) << table;
}

TEST(CompareReports, SameReportTwiceIsSame) {
  const json u = unfused();
  const Comparison c = compare_json(u, u, CompareOptions{});
  EXPECT_EQ(c.exit_code, kCompareOk);
  for (const auto& f : c.figures) {
    EXPECT_EQ(f.verdict, "SAME") << f.figure << ": " << f.why;
    EXPECT_DOUBLE_EQ(f.ci.ratio, 1.0);
    EXPECT_DOUBLE_EQ(f.mwu.p, 1.0);
  }
}

TEST(CompareReports, ANoisySampleSetIsUnsureAndSaysHowManyMoreSamples) {
  // 32 calls each, +-25% noise, NEW 4% slower: the interval straddles the 5% threshold.
  const json base = with_samples(unfused(), noisy(2640, 660, 32, 11));
  const json neu = with_samples(unfused(), noisy(2640 * 1.04, 660, 32, 12));
  const Comparison c = compare_json(base, neu, CompareOptions{});
  const FigureComparison& f = figure(c, "gpu_span_us");
  EXPECT_EQ(f.verdict, "UNSURE") << f.why;
  EXPECT_LT(f.ci.lo, 1.05);
  EXPECT_GT(f.ci.hi, 1.05);
  ASSERT_TRUE(f.samples_needed_new.has_value());
  EXPECT_GT(*f.samples_needed_new, 32u);
  EXPECT_EQ(c.exit_code, kCompareOk) << "UNSURE is not a proven slowdown";
  const std::string table = format_comparison(c);
  EXPECT_NE(table.find("UNSURE"), std::string::npos);
  EXPECT_NE(table.find("samples per report would tell"), std::string::npos) << table;
  EXPECT_NE(table.find("--min-rounds"), std::string::npos) << table;
  const json j = comparison_json(c);
  EXPECT_TRUE(j["figures"][0]["samples_needed_new"].is_number());
}

TEST(CompareReports, TooFewSamplesAreUnsureWhateverTheInterval) {
  // One sample each, NEW 4.4% slower: the bootstrap interval is the single ratio, [+4.4%, +4.4%],
  // inside the 5% threshold, which alone would say SAME.
  const json base = with_samples(unfused(), {2640.0});
  const json neu = with_samples(unfused(), {2640.0 * 1.044});
  const Comparison c = compare_json(base, neu, CompareOptions{});
  const FigureComparison& f = figure(c, "gpu_span_us");
  EXPECT_EQ(f.verdict, "UNSURE") << f.why;
  EXPECT_NE(f.why.find("too few"), std::string::npos) << f.why;
  ASSERT_TRUE(f.samples_needed_new.has_value());
  EXPECT_EQ(*f.samples_needed_new, kMinCompareSamples);
  EXPECT_EQ(c.exit_code, kCompareOk);
}

TEST(CompareReports, AGemmCallsHostWallTimeIsInformational) {
  // Same GPU span, host wall 30% slower (launch and sync noise around a ~7 us kernel): SAME on the
  // GPU span, SLOWER on the host wall, and the exit code follows the GPU span only.
  json base = load_report(data("reports/h200-gemm-nvfp4-m16-fp4_sm90.json"));
  json neu = base;
  for (auto& x : neu["timing"]["host_wall_us"]["samples"]) x = x.get<double>() * 1.3;
  const Comparison c = compare_json(base, neu, CompareOptions{});
  EXPECT_EQ(figure(c, "gpu_span_us").verdict, "SAME");
  const FigureComparison& h = figure(c, "host_wall_us");
  EXPECT_EQ(h.verdict, "SLOWER") << h.why;
  EXPECT_TRUE(h.informational);
  EXPECT_EQ(c.exit_code, kCompareOk) << c.result;
  EXPECT_NE(format_comparison(c).find("informational for this task"), std::string::npos);
  EXPECT_FALSE(comparison_json(c)["figures"][1]["sets_exit_code"].get<bool>());
  // The decode task's host wall time still counts (a step is ~1.5 ms of GPU work).
  json ub = unfused(), un = unfused();
  for (auto& x : un["timing"]["host_wall_us"]["samples"]) x = x.get<double>() * 1.3;
  EXPECT_EQ(compare_json(ub, un, CompareOptions{}).exit_code, kCompareSlower);
}

TEST(CompareReports, ANoisyButLargeSameSetIsSame) {
  // Same distribution, 640 calls each, 1% noise: the interval is narrow around 1.
  const json base = with_samples(unfused(), noisy(2640, 26, 640, 21));
  const json neu = with_samples(unfused(), noisy(2640, 26, 640, 22));
  const Comparison c = compare_json(base, neu, CompareOptions{});
  EXPECT_EQ(figure(c, "gpu_span_us").verdict, "SAME") << figure(c, "gpu_span_us").why;
  EXPECT_EQ(c.exit_code, kCompareOk);
}

TEST(CompareReports, ThresholdDecidesASmallSignificantSlowdown) {
  // NEW 3% slower with tight samples: significant, but below a 5% threshold; above a 1% one.
  const json base = with_samples(unfused(), noisy(2640, 10, 96, 31));
  const json neu = with_samples(unfused(), noisy(2640 * 1.03, 10, 96, 32));
  EXPECT_EQ(compare_json(base, neu, CompareOptions{}).exit_code, kCompareOk);
  CompareOptions strict;
  strict.max_slowdown_pct = 1;
  const Comparison c = compare_json(base, neu, strict);
  EXPECT_EQ(c.exit_code, kCompareSlower) << c.result;
  EXPECT_EQ(figure(c, "gpu_span_us").verdict, "SLOWER");
}

TEST(CompareReports, CorrectnessRegressionExits2) {
  const json base = unfused();
  json neu = unfused();
  neu["disposition"] = "Incorrect";
  neu["reason"] = "worst relative error 1.43 is above the gate 0.1";
  neu["correctness"]["worst_rel_err"] = 1.43;
  Comparison c = compare_json(base, neu, CompareOptions{});
  EXPECT_EQ(c.exit_code, kCompareCorrectness) << c.result;
  EXPECT_EQ(c.correctness_regressions.size(), 2u);  // the disposition and the gate crossing

  // The error crossing the gate alone (an Incorrect report whose disposition is not what changed).
  json past_gate = unfused(), was_incorrect = unfused();
  for (json* r : {&past_gate, &was_incorrect}) (*r)["disposition"] = "Incorrect";
  was_incorrect["correctness"]["worst_rel_err"] = 0.05;
  past_gate["correctness"]["worst_rel_err"] = 0.25;
  c = compare_json(was_incorrect, past_gate, CompareOptions{});
  EXPECT_EQ(c.exit_code, kCompareCorrectness) << c.result;
  EXPECT_NE(c.result.find("at or past the gate 0.1"), std::string::npos) << c.result;
  // A report that says Passed regardless contradicts itself: bad input, not a comparison.
  past_gate["disposition"] = "Passed";
  EXPECT_THROW(compare_json(base, past_gate, CompareOptions{}), BadReport);

  // NaN in the outputs (worst_rel_err null), and a crash with no timing: still 2, not 3.
  json crashed = unfused();
  crashed["disposition"] = "Crashed";
  crashed["reason"] = "killed by signal 11";
  crashed["correctness"]["worst_rel_err"] = nullptr;
  crashed.erase("timing");
  c = compare_json(base, crashed, CompareOptions{});
  EXPECT_EQ(c.exit_code, kCompareCorrectness) << c.result;

  // A fail that stays a fail is no regression.
  c = compare_json(crashed, crashed, CompareOptions{});
  EXPECT_NE(c.exit_code, kCompareCorrectness);
}

TEST(CompareReports, NotComparableExits3AndForceSaysSo) {
  const json base = unfused();
  struct Case {
    const char* what;
    std::function<void(json&)> change;
  };
  const Case cases[] = {
      {"task", [](json& r) { r["task"] = "gemm-w4a16-nvfp4"; }},
      {"config", [](json& r) { r["config"] = "tiny"; }},
      {"fixtures", [](json& r) { r["fixtures"][1]["file_sha256"] = std::string(64, '0'); }},
      {"GPU", [](json& r) { r["device"]["name"] = "NVIDIA H100 80GB HBM3"; }},
  };
  for (const Case& k : cases) {
    json neu = reference();  // slower: forced, it must come out 1
    k.change(neu);
    Comparison c = compare_json(base, neu, CompareOptions{});
    EXPECT_EQ(c.exit_code, kCompareNotComparable) << k.what;
    ASSERT_EQ(c.not_comparable.size(), 1u) << k.what;
    EXPECT_EQ(c.not_comparable[0].rfind(k.what, 0), 0u) << c.not_comparable[0];
    if (std::string(k.what) == "fixtures") {  // each side's seeds in its own brackets
      EXPECT_NE(c.not_comparable[0].find("], NEW [seed 0 "), std::string::npos) << c.not_comparable[0];
    }
    CompareOptions force;
    force.force = true;
    c = compare_json(base, neu, force);
    EXPECT_EQ(c.exit_code, kCompareSlower) << k.what;
    EXPECT_TRUE(c.forced);
    EXPECT_NE(format_comparison(c).find("FORCED (--force)"), std::string::npos);
    EXPECT_TRUE(comparison_json(c)["forced"].get<bool>());
    // Forced and faster: 0, still stated.
    json faster = base;
    k.change(faster);
    c = compare_json(reference(), faster, force);
    EXPECT_EQ(c.exit_code, kCompareOk) << k.what;
    EXPECT_TRUE(c.forced);
  }
}

TEST(CompareReports, MissingTimingExits3EvenWhenForced) {
  json neu = unfused();
  neu.erase("timing");  // graded with --no-timing: passes, but nothing to compare
  Comparison c = compare_json(unfused(), neu, CompareOptions{});
  EXPECT_EQ(c.exit_code, kCompareNotComparable) << c.result;
  EXPECT_TRUE(c.figures.empty());
  // --force compares what there is; with nothing there, it is still not a pass.
  CompareOptions force;
  force.force = true;
  c = compare_json(unfused(), neu, force);
  EXPECT_EQ(c.exit_code, kCompareNotComparable) << c.result;
  EXPECT_NE(c.result.find("nothing to compare"), std::string::npos) << c.result;
  EXPECT_TRUE(c.forced);
}

TEST(CompareReports, ReportsOfTwoClocksAreNotComparableEvenWhenForced) {
  // A --clock wall report's figure is the grader's clock: never set against a GPU span.
  json neu = unfused();
  neu["timing"]["clock"] = "wall";
  neu["timing"]["grader_clock_us"] = neu["timing"]["gpu_span_us"];
  CompareOptions force;
  force.force = true;
  const Comparison c = compare_json(unfused(), neu, force);
  EXPECT_EQ(c.exit_code, kCompareNotComparable) << c.result;
  EXPECT_NE(c.result.find("clock: BASE was graded by GPU span, NEW by the grader's clock"), std::string::npos) << c.result;
  // Both on the grader's clock: compared, its samples among the figures.
  json base = neu;
  const Comparison same = compare_json(base, neu, CompareOptions{});
  EXPECT_EQ(same.exit_code, kCompareOk) << same.result;
  bool grader_clock = false;
  for (const auto& f : same.figures) {
    grader_clock = grader_clock || f.figure == "grader_clock_us";
    if (f.figure == "gpu_span_us") {
      EXPECT_TRUE(f.informational) << "a wall report is judged by its own figure";
    }
    if (f.figure == "grader_clock_us") {
      EXPECT_FALSE(f.informational);
    }
  }
  EXPECT_TRUE(grader_clock);
}

TEST(CompareReports, ReportsOfTwoGraphRecordModesAreNotComparableEvenWhenForced) {
  // Per-node records add GPU time to every node of a graph: a --graph-records graphs report is
  // never set against a nodes one (an older report, without the key, recorded nodes).
  json neu = unfused();
  neu["timing"]["graph_records"] = "graphs";
  CompareOptions force;
  force.force = true;
  const Comparison c = compare_json(unfused(), neu, force);
  EXPECT_EQ(c.exit_code, kCompareNotComparable) << c.result;
  EXPECT_NE(c.result.find("graph records: BASE recorded a CUDA graph's launch by nodes, NEW by graphs"), std::string::npos)
      << c.result;
  json base = unfused();
  base["timing"]["graph_records"] = "graphs";
  EXPECT_EQ(compare_json(base, neu, CompareOptions{}).exit_code, kCompareOk);
}

TEST(CompareReports, AReportThatLaunchedNoGraphIsComparableInEitherMode) {
  // Its timed calls launched no CUDA graph (timing.graph_launches_audited 0), so its figure reads the
  // same in either record mode (the megakernel on an H100: 1289.9 us/token by nodes, 1289.8 whole):
  // set against a nodes report, even one from before the count that cannot say it launched none.
  json neu = unfused();
  neu["timing"]["graph_records"] = "graphs";
  neu["timing"]["graph_launches_audited"] = 0;
  EXPECT_EQ(figure_graph_records(view(neu)), "");
  EXPECT_EQ(figure_graph_records(view(unfused())), "nodes") << "before 2.7, by nodes: cannot say";
  const Comparison c = compare_json(unfused(), neu, CompareOptions{});
  EXPECT_EQ(c.exit_code, kCompareOk) << c.result;
  EXPECT_EQ(compare_json(neu, unfused(), CompareOptions{}).exit_code, kCompareOk);
  // Before 2.7, graded whole: no graph record in any call says the same; one in some call does not.
  json whole = unfused();
  whole["timing"]["graph_records"] = "graphs";
  whole["timing"]["graph_launches_per_call"] = {{"median", 0}, {"q1", 0}, {"q3", 0}, {"min", 0}, {"max", 0}, {"n", 64}};
  EXPECT_EQ(figure_graph_records(view(whole)), "");
  EXPECT_EQ(compare_json(unfused(), whole, CompareOptions{}).exit_code, kCompareOk);
  whole["timing"]["graph_launches_per_call"]["max"] = 1;
  EXPECT_EQ(figure_graph_records(view(whole)), "graphs");
  EXPECT_EQ(compare_json(unfused(), whole, CompareOptions{}).exit_code, kCompareNotComparable);
  // Both launched graphs, in two modes: not comparable even forced, and the old nodes side is told
  // how to get a comparable pair.
  json launched = unfused();
  launched["timing"]["graph_records"] = "graphs";
  launched["timing"]["graph_launches_audited"] = 128;
  CompareOptions force;
  force.force = true;
  const Comparison old = compare_json(unfused(), launched, force);
  EXPECT_EQ(old.exit_code, kCompareNotComparable) << old.result;
  EXPECT_NE(old.result.find("BASE, a report before schema 2.7, does not say whether its timed calls launched a CUDA graph"),
            std::string::npos) << old.result;
  json nodes = unfused();
  nodes["timing"]["graph_launches_audited"] = 128;
  const Comparison both = compare_json(nodes, launched, force);
  EXPECT_EQ(both.exit_code, kCompareNotComparable) << both.result;
  EXPECT_EQ(both.result.find("before schema 2.7"), std::string::npos) << both.result;
  nodes["timing"]["graph_launches_audited"] = 0;
  EXPECT_EQ(compare_json(nodes, launched, CompareOptions{}).exit_code, kCompareOk) << "BASE launched none";
}

TEST(CompareReports, ACorrectnessRegressionIsTwoWhateverTheModes) {
  // Correctness does not depend on how a call was timed: figures of two clocks or graph-record
  // modes are not compared, but a pass that became a fail is still the CI contract's 2.
  json neu = unfused();
  neu["timing"]["graph_records"] = "graphs";
  neu["timing"]["graph_launches_audited"] = 128;
  neu["disposition"] = "Incorrect";
  const Comparison c = compare_json(unfused(), neu, CompareOptions{});
  EXPECT_EQ(c.exit_code, kCompareCorrectness) << c.result;
  EXPECT_NE(c.result.find("the timing is not comparable: graph records"), std::string::npos) << c.result;
  EXPECT_TRUE(c.refused_timing_only);
  EXPECT_TRUE(c.figures.empty()) << "no figure of two modes is compared";
  json wall = unfused();
  wall["timing"]["clock"] = "wall";
  wall["timing"]["grader_clock_us"] = wall["timing"]["gpu_span_us"];
  wall["disposition"] = "Incorrect";
  EXPECT_EQ(compare_json(unfused(), wall, CompareOptions{}).exit_code, kCompareCorrectness);
  // A NEW without timing (it crashed before) has no mode: a correctness regression, not a mode.
  json crashed = unfused();
  crashed.erase("timing");
  crashed["disposition"] = "Crashed";
  json whole_base = neu;
  whole_base["disposition"] = "Passed";
  const Comparison untimed = compare_json(whole_base, crashed, CompareOptions{});
  EXPECT_EQ(untimed.exit_code, kCompareCorrectness) << untimed.result;
  EXPECT_EQ(untimed.result.find("graph records"), std::string::npos) << untimed.result;
  // Another task or config still outranks it (the correctness of another measurement), unless forced.
  wall["config"] = "tiny";
  EXPECT_EQ(compare_json(unfused(), wall, CompareOptions{}).exit_code, kCompareNotComparable);
}

TEST(CompareReports, AModeKeyOfAnotherValueIsAMalformedReport) {
  // timing.clock and timing.graph_records hold one of two values or are absent (an older report):
  // "GRAPHS", "" or a number would otherwise be ranked, compared and printed as a third mode (a
  // newcomer's finding, 2026-12-07).
  for (const auto& [key, bad] : {std::pair<const char*, json>{"graph_records", "GRAPHS"}, {"graph_records", ""},
                                 {"graph_records", 3}, {"graph_records", nullptr}, {"clock", "WALL"}}) {
    json r = unfused();
    r["timing"][key] = bad;
    try {
      validate_report(r, "r.json");
      ADD_FAILURE() << key << " = " << bad.dump() << " was taken";
    } catch (const BadReport& e) {
      EXPECT_NE(std::string(e.what()).find(std::string("timing.") + key), std::string::npos) << e.what();
    }
  }
  // timing.graph_launches_audited is a count where given.
  for (const json& bad : {json(-1), json(1.5), json("3"), json(nullptr)}) {
    json r = unfused();
    r["timing"]["graph_launches_audited"] = bad;
    EXPECT_THROW(validate_report(r, "r.json"), BadReport) << bad.dump();
  }
  json ok = unfused();
  ok["timing"]["graph_records"] = "graphs";
  ok["timing"]["clock"] = "wall";
  ok["timing"]["graph_launches_audited"] = 0;
  EXPECT_NO_THROW(validate_report(ok, "r.json"));
}

TEST(CompareReports, AUnitOtherThanItsTasksIsAMalformedReport) {
  // A decode report edited to time "calls" would be ranked beside the GEMM-unit reports' medians
  // (a newcomer's finding, 2026-12-07); a GEMM report edited to "token" likewise.
  for (const auto& [r, bad] : {std::pair{unfused_v2(), "call"}, std::pair{gemm_v2(), "token"}}) {
    json edited = r;
    edited["timing"]["unit"] = bad;
    try {
      validate_report(edited, "r.json");
      ADD_FAILURE() << r["task"] << " with unit " << bad << " was taken";
    } catch (const BadReport& e) {
      EXPECT_NE(std::string(e.what()).find("timing.unit is \"" + std::string(bad) + "\", but a sample of " +
                                           r["task"].get<std::string>() + " is one " + (std::string(bad) == "call" ? "token" : "call")),
                std::string::npos)
          << e.what();
    }
    EXPECT_NO_THROW(validate_report(r, "r.json"));
  }
}

TEST(CompareReports, APassedReportIsJudgedAgainstItsTasksGateAndGuard) {
  // A red-team's finding, 2026-12-07: with the gate edited up, removed or made a string, a Passed
  // report at 5x the task's gate was ranked and compared as passing.
  const json r = unfused_v2();
  ASSERT_EQ(r["disposition"], "Passed");
  for (const json& gate : {json(nullptr), json("0.1"), json(1e9), json(0), json(-1)}) {
    json edited = r;
    edited["correctness"]["gate"] = gate;
    edited["correctness"]["worst_rel_err"] = 0.5;
    refused(edited, gate.is_number() && gate.get<double>() > 0 ? "is not megakernel-int4-weight-decode's gate 0.1 for config full"
                                                                : "without a positive correctness.gate");
  }
  json no_gate = r;
  no_gate["correctness"].erase("gate");
  refused(no_gate, "without a positive correctness.gate");
  json negative = r;
  negative["correctness"]["worst_rel_err"] = -1;
  refused(negative, "correctness.worst_rel_err is -1, below 0");
  json guard = r;
  guard["correctness"]["element_guard"] = 0.9;
  refused(guard, "correctness.element_guard 0.9 is not megakernel-int4-weight-decode's 0.2");
  json elem = r;
  elem["correctness"]["element_guard"] = 0.2;  // this report predates the guard (null)
  elem["correctness"]["worst_elem_err"] = 0.9;
  refused(elem, "disposition Passed with correctness.worst_elem_err 0.9 past its element guard 0.2");
  // A report that did not pass states what it failed with: an error past the gate is its reason.
  json failed = elem;
  failed["disposition"] = "Incorrect";
  EXPECT_NO_THROW(validate_report(failed, "r.json"));
  // A task this nibble does not know keeps its own gate (a later nibble's task).
  json later = r;
  later["task"] = "a-later-task";
  later["correctness"]["gate"] = 0.5;
  later["correctness"]["worst_rel_err"] = 0.4;
  EXPECT_NO_THROW(validate_report(later, "r.json"));
  EXPECT_NO_THROW(validate_report(r, "r.json"));
}

TEST(CompareReports, TheWorstErrorIsTheWorstOfEverySeedCallAndOutput) {
  // A newcomer's finding, 2026-12-07: a seed's error edited to 0.5 (past the gate 0.1) under the
  // untouched headline 0.0005 was shown as Passed and ranked first.
  const json r = unfused_v2();
  ASSERT_EQ(r["disposition"], "Passed");
  const json& seed0 = r["correctness"]["per_seed"][0];
  ASSERT_TRUE(seed0["calls"].is_array() && !seed0["calls"].empty());
  json seed = r;
  seed["correctness"]["per_seed"][0]["worst_rel_err"] = 0.5;
  refused(seed, "correctness.per_seed[seed 0].worst_rel_err 0.5 is past correctness.worst_rel_err");
  json call = r;
  call["correctness"]["per_seed"][0]["calls"][0]["rel_err"] = 0.5;
  refused(call, ".calls[\"step0\"].rel_err 0.5 is past correctness.worst_rel_err");
  json output = r;
  output["correctness"]["per_seed"][0]["calls"][0]["outputs"]["logits"]["elem_err"] = 0.9;
  refused(output, ".outputs[\"logits\"].elem_err 0.9 is past correctness.worst_elem_err");
  json nan_seed = r;
  nan_seed["correctness"]["per_seed"][0]["worst_rel_err"] = nullptr;
  refused(nan_seed, "disposition Passed with correctness.per_seed[seed 0].worst_rel_err null");
  // Not Passed, a seed past a headline is still no report nibble writes; a NaN seed is (Incorrect).
  nan_seed["disposition"] = "Incorrect";
  EXPECT_NO_THROW(validate_report(nan_seed, "r.json"));
  seed["disposition"] = "Incorrect";
  refused(seed, "is past correctness.worst_rel_err");
  // Every seed, call and output at or under the headline: taken.
  json equal = r;
  equal["correctness"]["per_seed"][0]["worst_rel_err"] = r["correctness"]["worst_rel_err"];
  EXPECT_NO_THROW(validate_report(equal, "r.json"));
}

TEST(CompareReports, TheHeadlineTimeAndThroughputFollowFromTheSamples) {
  // A newcomer's finding: us_per_call edited to 1 (or every sample to 1e308 under an unchanged
  // TFLOP/s) was shown as it stood.
  const json g = gemm_v2();
  ASSERT_TRUE(g["timing"]["tflops"].is_number());
  EXPECT_NO_THROW(validate_report(g, "g.json"));
  EXPECT_NO_THROW(validate_report(unfused_v2(), "u.json"));
  json headline = g;
  headline["timing"]["us_per_call"] = 1.0;
  refused(headline, "timing.us_per_call 1.0 is not the graded figure's median");
  json tflops = g;
  tflops["timing"]["tflops"] = 2 * g["timing"]["tflops"].get<double>();
  refused(tflops, "timing.tflops");
  refused(tflops, "does not follow from timing.flops_per_call");
  json bandwidth = g;
  bandwidth["timing"]["achieved_bandwidth_Bps"] = 1e15;
  refused(bandwidth, "timing.achieved_bandwidth_Bps 1e+15 does not follow from timing.bytes_per_call");
  // The same edits with the figure they follow from deleted or not a number (a newcomer's report
  // without us_per_call showed "99 TFLOP/s"): refused, not skipped.
  json no_headline = tflops;
  no_headline["timing"].erase("us_per_call");
  refused(no_headline, "timing.us_per_call is null, but the report has graded samples");
  for (const json& odd : {json("fast"), json(nullptr), json("7.488")}) {
    json h = g;
    h["timing"]["us_per_call"] = odd;
    refused(h, "timing.us_per_call is " + odd.dump());
  }
  json text = g;
  text["timing"]["tflops"] = "99";
  refused(text, "timing.tflops is \"99\", not a number");
  json no_amount = g;
  no_amount["timing"].erase("flops_per_call");
  refused(no_amount, "timing.tflops without timing.flops_per_call");
  // Each fraction of a floor is the floor over the headline (by hand from the report's figures: the
  // measured-copy floor 1.3331 us over 7.488 us is 0.17804), and each bandwidth floor the bytes over
  // the device's bandwidth.
  EXPECT_NEAR(g["timing"]["fraction_of_measured_bw"].get<double>(), 1.333141312831416 / 7.488, 1e-9);
  json fraction = g;
  fraction["timing"]["fraction_of_measured_bw"] = 0.99;
  refused(fraction, "timing.fraction_of_measured_bw 0.99 is not its floor 1.33314 us over timing.us_per_call 7.488");
  json floor = fraction;
  floor["timing"]["floors"]["measured_copy_bw_us"] = 0.99 * 7.488;
  refused(floor, "timing.floors.measured_copy_bw_us 7.41312 is not timing.bytes_per_call");
  json read_floor = g;
  read_floor["timing"]["fraction_of_weight_read_floor"] = 0.9;
  refused(read_floor, "timing.fraction_of_weight_read_floor 0.9 is not its floor 3.56 us");
  read_floor["timing"]["fraction_of_weight_read_floor"] = 3.56 / 7.488;
  EXPECT_NO_THROW(validate_report(read_floor, "g.json"));
  // The weight-read floor is the device's read-floor kernel's median (this report predates that key:
  // given here as grade.cpp writes it), so an edit of both floor and fraction is refused too.
  read_floor["device"]["read_floor"]["median_us"] = 3.56;
  EXPECT_NO_THROW(validate_report(read_floor, "g.json"));
  read_floor["timing"]["floors"]["weight_read_us"] = 7.0;
  read_floor["timing"]["fraction_of_weight_read_floor"] = 7.0 / 7.488;
  refused(read_floor, "timing.floors.weight_read_us 7.0 is not device.read_floor.median_us (3.56 us)");
}

TEST(CompareReports, ARedTeamsConsistentEditsAreRefused) {
  // Edits made whole enough to pass the checks of single figures (a red-team's list, 2026-12-08).
  const json g = gemm_v2();
  // The headline and what follows from it set to `us`, as grade.cpp writes them.
  const auto headline = [](json& r, double us) {
    json& t = r["timing"];
    t["us_per_call"] = us;
    t["tflops"] = t["flops_per_call"].get<double>() / us * 1e-6;
    t["achieved_bandwidth_Bps"] = t["bytes_per_call"].get<double>() / us * 1e6;
    t["fraction_of_theoretical_bw"] = t["floors"]["theoretical_bw_us"].get<double>() / us;
    t["fraction_of_measured_bw"] = t["floors"]["measured_copy_bw_us"].get<double>() / us;
  };
  // One huge sample with the median, quartiles and min at 3 us: the median check's tolerance was
  // the largest sample's, so any median passed; the samples' own median is ~7.5 us.
  json huge = g;
  json& f = huge["timing"]["gpu_span_us"];
  f["samples"].push_back(1e11);
  f["n"] = f["samples"].size();
  f["median"] = f["q1"] = f["min"] = 3.0;
  f["max"] = 1e11;
  headline(huge, 3.0);
  EXPECT_NE(figure_problem(view(huge)).find("is not its"), std::string::npos) << figure_problem(view(huge));
  // Floors and fractions deleted, every time scaled to a tenth: the Passed grade's samples are then
  // below the floor its bytes and device bandwidth give (7.67 MB at 4.81 TB/s: 1.16 us, by hand).
  json no_floors = g;
  json& t = no_floors["timing"];
  for (const char* k : {"floors", "fraction_of_measured_bw", "fraction_of_theoretical_bw"}) t.erase(k);
  for (const char* k : {"median", "q1", "q3", "min", "max", "mean", "stdev"}) t["gpu_span_us"][k] = t["gpu_span_us"][k].get<double>() / 10;
  for (json& v : t["gpu_span_us"]["samples"]) v = v.get<double>() / 10;
  t["us_per_call"] = t["gpu_span_us"]["median"];
  t["tflops"] = t["flops_per_call"].get<double>() / t["us_per_call"].get<double>() * 1e-6;
  t["achieved_bandwidth_Bps"] = t["bytes_per_call"].get<double>() / t["us_per_call"].get<double>() * 1e6;
  EXPECT_NO_THROW(validate_report(no_floors, "g.json"));
  EXPECT_NEAR(view(no_floors).floor_theoretical_bw_us, 1.16389, 1e-4);
  EXPECT_NE(figure_problem(view(no_floors)).find("below the theoretical bandwidth floor"), std::string::npos)
      << figure_problem(view(no_floors));
  // The grader's clock beside a span clock: a wall grade relabelled to rank by its span.
  json relabelled = g;
  relabelled["timing"]["grader_clock_us"] = relabelled["timing"]["gpu_span_us"];
  refused(relabelled, "timing.grader_clock_us is there but timing.clock is null");
  relabelled["timing"]["clock"] = "span";
  refused(relabelled, "timing.grader_clock_us is there but timing.clock is \"span\"");
  // Another solution's name and hash over the graded binary's (the sandbox's pin, as schema 2.1 writes it).
  json other = g;
  other["sandbox"]["binaries"]["solution"]["sha256"] = g["solution"]["sha256"];
  EXPECT_NO_THROW(validate_report(other, "g.json"));
  other["solution"]["sha256"] = std::string(64, 'a');
  refused(other, "is not the graded binary's, sandbox.binaries.solution.sha256");
  // The element guard deleted from a report of a schema that always states it.
  json guard = g;
  guard["schema_version"] = "2.2.0";
  EXPECT_NO_THROW(validate_report(guard, "g.json"));
  guard["correctness"].erase("element_guard");
  refused(guard, "disposition Passed with correctness.element_guard null, but gemm-w4a16-nvfp4 guards each element at 0.05");
  // The device's figures behind the floors: the theoretical bandwidth is the memory clock's (this
  // H200: 2 x 3,201,000 kHz x 6016 bits / 8 = 4.8143e12 B/s by hand),
  // the weight-read floor the fastest of the probe's grids.
  json device = g;
  const double khz = g["device"]["memory_clock_khz"].get<double>(), bits = g["device"]["memory_bus_width_bits"].get<double>();
  EXPECT_DOUBLE_EQ(g["device"]["theoretical_bandwidth_Bps"].get<double>(), 2 * khz * 1e3 * bits / 8);
  EXPECT_DOUBLE_EQ(2 * 3201000.0 * 1e3 * 6016 / 8, 4814304000000.0);
  device["device"]["theoretical_bandwidth_Bps"] = g["device"]["theoretical_bandwidth_Bps"].get<double>() / 4;
  refused(device, "device.theoretical_bandwidth_Bps 1203576000000.0 is not 2 x device.memory_clock_khz");
  json read = g;
  read["device"]["read_floor"] = {{"median_us", 9.0}, {"grids", {{{"blocks_per_sm", 1}, {"median_us", 3.56}}, {{"blocks_per_sm", 2}, {"median_us", 3.7}}}}};
  refused(read, "device.read_floor.median_us 9.0 is not the fastest of its grids' medians (3.56 us)");
  read["device"]["read_floor"]["median_us"] = 3.56;
  EXPECT_NO_THROW(validate_report(read, "g.json"));
}

TEST(CompareReports, LaterMajorSchemaVersionIsBadInput) {
  json neu = unfused();
  neu["schema_version"] = "9.0.0";
  EXPECT_THROW(validate_report(neu, "new.json"), BadReport);
  neu["schema_version"] = "1.4.0";
  EXPECT_NO_THROW(validate_report(neu, "new.json"));
}

TEST(CompareReports, IdentityDifferenceOutranksCorrectness) {
  json neu = unfused();
  neu["config"] = "tiny";
  neu["disposition"] = "Incorrect";
  EXPECT_EQ(compare_json(unfused(), neu, CompareOptions{}).exit_code, kCompareNotComparable);
  CompareOptions force;
  force.force = true;
  EXPECT_EQ(compare_json(unfused(), neu, force).exit_code, kCompareCorrectness);
}

TEST(LoadReport, BadInputIsBadReport) {
  TempDir t;
  EXPECT_THROW(load_report(t.path() + "/missing.json"), BadReport);
  EXPECT_THROW(load_report(t.path()), BadReport);
  write_file_atomic(t.path() + "/notjson.json", "{\"schema\": \"nibble.report\", ");
  EXPECT_THROW(load_report(t.path() + "/notjson.json"), BadReport);
  write_file_atomic(t.path() + "/calib.json", R"({"schema": "nibble.calibration", "rows": []})");
  try {
    load_report(t.path() + "/calib.json");
    FAIL() << "a calibration table is not a report";
  } catch (const BadReport& e) {
    EXPECT_NE(std::string(e.what()).find("not a nibble report"), std::string::npos) << e.what();
  }
  json r = unfused();
  r["timing"]["gpu_span_us"]["samples"][3] = "fast";
  write_file_atomic(t.path() + "/bad-samples.json", r.dump());
  EXPECT_THROW(load_report(t.path() + "/bad-samples.json"), BadReport);
  r = unfused();
  r.erase("correctness");
  write_file_atomic(t.path() + "/no-correctness.json", r.dump());
  EXPECT_THROW(load_report(t.path() + "/no-correctness.json"), BadReport);
  r = unfused();
  r["correctness"] = json::object();  // Passed, but with no error: bad input, not a regression (exit 4)
  write_file_atomic(t.path() + "/empty-correctness.json", r.dump());
  EXPECT_THROW(load_report(t.path() + "/empty-correctness.json"), BadReport);
  EXPECT_EQ(compare_files(data("reports/h200-unfused-full.json"), t.path() + "/empty-correctness.json", CompareOptions{},
                          false),
            kCompareBadInput);
  r = unfused();
  r["task"] = "";  // no task: nothing says what was measured
  write_file_atomic(t.path() + "/task-empty.json", r.dump());
  EXPECT_THROW(load_report(t.path() + "/task-empty.json"), BadReport);
  r["task"] = "x";  // any task reads: its figures are named by the report, not by a list of tasks
  write_file_atomic(t.path() + "/task-x.json", r.dump());
  EXPECT_NO_THROW(load_report(t.path() + "/task-x.json"));
  // A report that contradicts itself, or names a disposition nibble never gives: every reader
  // refuses it (a newcomer's hand-edited "Passed" at 50x its gate was ranked by the leaderboard).
  const auto refused = [&](const json& bad, const std::string& name, const std::string& why) {
    write_file_atomic(t.path() + "/" + name, bad.dump());
    try {
      load_report(t.path() + "/" + name);
      ADD_FAILURE() << name << " was read";
    } catch (const BadReport& e) {
      EXPECT_NE(std::string(e.what()).find(why), std::string::npos) << e.what();
    }
  };
  r = unfused();
  r["correctness"]["worst_rel_err"] = 5.0 * r["correctness"]["gate"].get<double>();
  refused(r, "passed-past-gate.json", "disposition Passed with correctness.worst_rel_err");
  r["correctness"]["worst_rel_err"] = r["correctness"]["gate"];
  refused(r, "passed-at-gate.json", "at or past its own gate");
  r = unfused();
  r["disposition"] = "Awesome";
  refused(r, "awesome.json", "disposition \"Awesome\" is none nibble gives");
  r["disposition"] = "GraderFailed";
  write_file_atomic(t.path() + "/grader-failed.json", r.dump());
  EXPECT_NO_THROW(load_report(t.path() + "/grader-failed.json"));
  EXPECT_EQ(compare_files(t.path() + "/missing.json", data("reports/h200-unfused-full.json"), CompareOptions{}, false),
            kCompareBadInput);
  EXPECT_EQ(compare_files(data("reports/h200-unfused-full.json"), t.path() + "/calib.json", CompareOptions{}, true),
            kCompareBadInput);
}

TEST(CompareFiles, AReportWhoseSamplesAreNotItsFigureIsBadInput) {
  // compare tests the samples; the leaderboard ranks the stored median: halving every sample of a
  // report and leaving its median made it FASTER (-50%) here while the leaderboard set it apart
  // (a newcomer's finding). Both now read it as an edited report.
  TempDir t;
  // An edit made whole: the headline and the throughput follow the median, as grade.cpp writes them
  // (check_report refuses a partial one first).
  const auto headline = [](json& r, double us) {
    json& t = r["timing"];
    t["us_per_call"] = us;
    if (t["tflops"].is_number()) t["tflops"] = t["flops_per_call"].get<double>() / us * 1e-6;
    if (t["achieved_bandwidth_Bps"].is_number()) t["achieved_bandwidth_Bps"] = t["bytes_per_call"].get<double>() / us * 1e6;
    for (const auto& [fraction, floor] : {std::pair{"fraction_of_theoretical_bw", "theoretical_bw_us"},
                                          {"fraction_of_measured_bw", "measured_copy_bw_us"},
                                          {"fraction_of_weight_read_floor", "weight_read_us"}})
      if (t.contains(fraction)) t[fraction] = t["floors"][floor].get<double>() / us;
  };
  const std::string base = data("reports/h200-unfused-full.json");
  EXPECT_EQ(compare_files(base, base, CompareOptions{}, false), kCompareOk);
  json r = unfused();
  for (json& v : r["timing"]["gpu_span_us"]["samples"]) v = v.get<double>() / 2;
  write_file_atomic(t.path() + "/halved.json", r.dump());
  EXPECT_NE(figure_problem(load_report_view(t.path() + "/halved.json")).find("an edited report"), std::string::npos);
  EXPECT_EQ(compare_files(base, t.path() + "/halved.json", CompareOptions{}, false), kCompareBadInput);
  // The flag that throttled rounds were left out of the median relaxes its check only where some
  // were (a red-team's finding: the flag alone let a median set to the least sample rank first).
  json flagged = unfused_v2();
  flagged["timing"]["ledger"]["clocks"]["throttled_rounds_excluded_from_median"] = true;
  flagged["timing"]["gpu_span_us"]["median"] = flagged["timing"]["gpu_span_us"]["q1"];
  headline(flagged, flagged["timing"]["gpu_span_us"]["q1"].get<double>());
  flagged["timing"]["ledger"]["clocks"]["throttled_rounds"] = json::array();
  EXPECT_NE(figure_problem(view(flagged)).find("an edited report"), std::string::npos);
  flagged["timing"]["ledger"]["clocks"]["throttled_rounds"] = json::array({1});
  EXPECT_EQ(figure_problem(view(flagged)), "");
  // Samples below the theoretical bandwidth floor, consistent among themselves: the grader makes such
  // a grade InvalidTiming, so a Passed one was edited (a red-team's 1e-300 us ranked first).
  json fast = unfused_v2();
  const double floor_us = view(fast).floor_theoretical_bw_us;
  ASSERT_GT(floor_us, 0);
  for (json& v : fast["timing"]["gpu_span_us"]["samples"]) v = floor_us / 2;
  for (const char* k : {"median", "q1", "q3", "min", "max", "mean"}) fast["timing"]["gpu_span_us"][k] = floor_us / 2;
  headline(fast, floor_us / 2);
  EXPECT_NE(figure_problem(view(fast)).find("is below the theoretical bandwidth floor"), std::string::npos) << figure_problem(view(fast));
  // A Passed report of either schema states the samples its median is of.
  json bare = unfused();
  bare["timing"]["gpu_span_us"]["samples"] = json::array();
  EXPECT_NE(figure_problem(view(bare)).find("its median has no samples beside it"), std::string::npos);
  r = unfused();
  r["timing"]["gpu_span_us"]["n"] = 95;  // one sample fewer than it holds
  write_file_atomic(t.path() + "/n.json", r.dump());
  EXPECT_NE(figure_problem(load_report_view(t.path() + "/n.json")).find("does not fit"), std::string::npos);
  EXPECT_EQ(compare_files(t.path() + "/n.json", base, CompareOptions{}, false), kCompareBadInput);
  for (const json& n : {json("96"), json(96.0), json(-1)}) {  // n is a count, or the check of it is skipped
    r = unfused();
    r["timing"]["gpu_span_us"]["n"] = n;
    EXPECT_THROW(read_report_view(r, "n.json"), BadReport) << n.dump();
  }
  // Not only the graded figure: report show prints the host wall time's median too.
  r = unfused();
  r["timing"]["host_wall_us"]["median"] = 1.0;
  write_file_atomic(t.path() + "/wall.json", r.dump());
  EXPECT_NE(figure_problem(load_report_view(t.path() + "/wall.json")).find("timing.host_wall_us: its median (1 us)"),
            std::string::npos)
      << figure_problem(load_report_view(t.path() + "/wall.json"));
  // A figure the report lacks is said to be missing in the summary, never printed as nan.
  r = unfused();
  r["timing"].erase("host_wall_us");
  const std::string summary = format_summary(view(r), "r.json");
  EXPECT_NE(summary.find("no host wall time, "), std::string::npos) << summary;
  EXPECT_EQ(summary.find("nan"), std::string::npos) << summary;
  EXPECT_NE(format_summary(view(unfused()), "r.json").find("host wall 2"), std::string::npos);
}

TEST(CompareFiles, TooManySamplesForTheBootstrapIsBadInputNamingTheResamplesThatFit) {
  // 96 samples repeated 625 times: 60,000, the same median and quartiles (n follows). Twice that
  // at 2000 resamples is 2.4e8 draws, over the bound; at 1000 it is 1.2e8 and compares.
  TempDir t;
  const std::string base = data("reports/h200-unfused-full.json");
  json r = unfused();
  json& fig = r["timing"]["gpu_span_us"];
  const json one = fig["samples"];
  json many = json::array();
  for (int k = 0; k < 625; ++k)  // ReportHtmlCli below builds the same
    for (const json& v : one) many.push_back(v);
  fig["samples"] = many;
  fig["n"] = many.size();
  write_file_atomic(t.path() + "/many.json", r.dump());
  const ReportView v = load_report_view(t.path() + "/many.json");
  ASSERT_EQ(figure_problem(v), "");  // the figure is its samples': only their count is refused
  const std::string p = comparison_input_problem(v, v, CompareOptions{}, "a", "b");
  EXPECT_NE(p.find("timing.gpu_span_us: BASE holds 60000 samples and NEW 60000; 2000 bootstrap resamples"), std::string::npos) << p;
  EXPECT_NE(p.find("--resamples 1666 or fewer"), std::string::npos) << p;
  EXPECT_EQ(compare_files(t.path() + "/many.json", t.path() + "/many.json", CompareOptions{}, false), kCompareBadInput);
  CompareOptions fewer;
  fewer.resamples = 1000;
  EXPECT_EQ(comparison_input_problem(v, v, fewer, "a", "b"), "");
  // Past 2e6 samples in all, not even the least --resamples (100) fits: said so, not "49 or fewer".
  ReportView huge = v;
  huge.gpu_span_us.samples.assign(1000001, huge.gpu_span_us.median);  // its median still its samples'
  huge.gpu_span_us.n = 1000001;
  const std::string none = comparison_input_problem(huge, huge, fewer, "a", "b");
  EXPECT_NE(none.find("no --resamples fits (the least is 100)"), std::string::npos) << none;
  EXPECT_EQ(compare_files(base, t.path() + "/many.json", CompareOptions{}, false), kCompareOk);  // 60,096 x 2000
}

// ---------------------------------------------------------------------------------------------
// `nibble report show`: the grade's summary from the report

TEST(ReportShow, ReproducesTheGradeSummary) {
  // What `nibble grade` printed for this run (harness/grade.cpp, "5. The summary a person reads").
  const std::string expected =
      "\nnibble grade  megakernel-int4-weight-decode / full  on NVIDIA H200\n"
      "  solution     unfused  (/work/main/build-hopper/lib/libnibble_unfused.so)\n"
      "  disposition  Passed: worst relative error 0.000224 < gate 0.1 (0.0022x the gate)\n"
      "  seed 0       worst relative error 0.000139 over 8 steps (gate 0.1)\n"
      "  seed 1       worst relative error 0.000224 over 8 steps (gate 0.1)\n"
      "  time/token   2640.4 us median GPU span (q1 2633.3, q3 2651.7, n 96), host wall 2652.9 us, 283 kernels/step\n"
      "  roofline     1.921 GB/step; floor 458.9 us at the measured copy bandwidth 4.19 TB/s -> 17.4% of it\n"
      "  report       r.json  (8.35 s)\n";
  EXPECT_EQ(format_summary(view(unfused()), "r.json"), expected);
}

TEST(ReportShow, ControlCharactersOfAReportNeverReachTheTerminal) {
  // A report is anyone's file: an ESC, a newline or a NUL in its strings is printed as a space by
  // report show, compare and the leaderboard (a newcomer's finding: ESC[31m coloured the terminal).
  json r = unfused();
  r["solution"]["name"] = std::string("a|b\nc\x1b[31mRED\0x", 15);
  r["reason"] = "ok\rX";
  const std::string out = format_summary(view(r), "r.json");
  for (const unsigned char ch : out) EXPECT_TRUE(ch >= 0x20 || ch == '\n') << int(ch);
  EXPECT_NE(out.find("a|b c [31mRED x"), std::string::npos) << out;
  const std::string clean = format_summary(view(unfused()), "r.json");
  EXPECT_EQ(std::count(out.begin(), out.end(), '\n'), std::count(clean.begin(), clean.end(), '\n'));
}

TEST(ReportShow, TheC1ControlsAreSpacesToo) {
  // U+009B (C2 9B in UTF-8) is a terminal's CSI like ESC [ (a red-team's finding); other
  // two-byte characters stay.
  EXPECT_EQ(one_line("a\xC2\x9B" "31mb\xC2\x80" "c \xC3\xA9\xC2\xA0"), "a 31mb c \xC3\xA9\xC2\xA0");
}

TEST(ReportShow, CalibrationContextLine) {
  json r = unfused();
  r["correctness"]["calibration"] = {{"source", "reports/h200/calibration-full.json"}, {"device", "NVIDIA H200"},
                                     {"legitimate_variants_worst", 0.028604363236744437},
                                     {"dropped_feature_variants_best", 1.4203777056362472}};
  const std::string s = format_summary(view(r), "r.json");
  EXPECT_NE(s.find("  disposition  Passed: worst relative error 0.000224 < gate 0.1 (0.0022x the gate)\n"
                   "  calibration  legitimate precision variants reach 0.0286, dropped features start at 1.42 (gate 0.1)\n"
                   "  seed 0 "),
            std::string::npos)
      << s;
}

TEST(ReportShow, KernelsBetweenTimedCallsGetALineOnlyWhenSeen) {
  json r = unfused();
  r["timing"]["gaps_with_foreign_work"] = 0;
  r["timing"]["harness_records_per_gap"] = 0;
  r["timing"]["late_kernels"] = 0;
  EXPECT_EQ(format_summary(view(r), "r.json").find("between"), std::string::npos) << "nothing seen: no line";
  r["timing"]["gaps_with_foreign_work"] = 12;
  r["timing"]["foreign_work"] = "12 memcpys";
  r["timing"]["late_kernels"] = 3;
  const std::string s = format_summary(view(r), "r.json");
  EXPECT_NE(s.find("  between      12 gaps between timed calls held GPU work (12 memcpys) beyond the harness's own (0 records "
                   "per gap); 3 kernels reached the timer only after their window or gap was collected\n  report "),
            std::string::npos)
      << s;
}

TEST(ReportShow, SchemaTwoZeroKernelGapCountsStillRead) {
  json r = unfused();
  r["timing"]["gaps_with_foreign_kernels"] = 5;  // schema 2.0's name, kernels only
  r["timing"]["harness_kernels_per_gap"] = 1;
  const ReportView v = view(r);
  EXPECT_EQ(v.gaps_with_foreign_work, 5);
  EXPECT_EQ(v.harness_records_per_gap, 1);
}

TEST(ReportShow, AFailedGradeWithoutTiming) {
  json r = unfused();
  r["disposition"] = "Crashed";
  r["reason"] = "killed by signal 11 (Segmentation fault) in decode_step";
  r["correctness"]["worst_rel_err"] = nullptr;
  r.erase("timing");
  const std::string s = format_summary(view(r));
  EXPECT_NE(s.find("disposition  Crashed: killed by signal 11"), std::string::npos) << s;
  EXPECT_EQ(s.find("time/token"), std::string::npos) << s;
  EXPECT_EQ(s.find("seed 0"), std::string::npos) << "the grade prints no per-seed line when the worst error is NaN";
}

TEST(ReportShow, AGemmReportCountsCallsNotSteps) {
  // A GEMM grade on the H200 (gemm_fp4_sm90, nvfp4 m16-n3072-k3072): seed 0 checked 2 calls and the
  // timed one; 5.603 MB per call; floor 1.333 us at the measured copy bandwidth, 7.488 us median.
  const json r = load_report(data("reports/h200-gemm-nvfp4-m16-fp4_sm90.json"));
  const std::string s = format_summary(view(r), "g.json");
  EXPECT_NE(s.find("  seed 0       worst relative error 1.21e-07 over 3 calls (gate 0.01)\n"), std::string::npos) << s;
  EXPECT_NE(s.find("  time/call    7.488 us median GPU span (q1 7.424, q3 7.584, n 96), host wall 23.538 us, 1 kernels/call\n"),
            std::string::npos)
      << s;
  EXPECT_NE(s.find("  throughput   40.33 TFLOP/s, 0.748 TB/s of the 5.603 MB a call must move; floor 1.333 us at the measured "
                   "copy bandwidth -> 17.8% of it\n"),
            std::string::npos)
      << s;
  EXPECT_EQ(s.find("token"), std::string::npos) << s;
  EXPECT_EQ(s.find("nan"), std::string::npos) << s;
  EXPECT_EQ(s.find("read floor"), std::string::npos) << "that report predates the weight-read floor";
  // With the probe's weight-read floor (bench_stream_floor measured 3.56 us for these 5.3 MB):
  // 3.56 / 7.488 = 47.5%.
  json f = r;
  f["timing"]["floor_us_weight_read"] = 3.56;
  const std::string sf = format_summary(view(f), "g.json");
  EXPECT_NE(sf.find("  read floor   3.56 us for a kernel that only reads W's codes and scales (same flush, same timer) -> "
                    "47.5% of it\n"),
            std::string::npos)
      << sf;
  for (const json& bad : {json(-1.0), json(nullptr), json("3.5")}) {
    f["timing"]["floor_us_weight_read"] = bad;
    EXPECT_EQ(format_summary(view(f), "g.json").find("read floor"), std::string::npos) << bad.dump();
  }
}

// ---------------------------------------------------------------------------------------------
// Schema versions: one ReportView for 1.x and 2.x; compare refuses to mix them

TEST(ReportView, ReadsTheSameGradeFromEitherSchema) {
  const ReportView d1 = view(unfused()), d2 = view(unfused_v2());
  EXPECT_EQ(d1.schema_major, 1);
  EXPECT_EQ(d2.schema_major, 2);
  for (const ReportView* d : {&d1, &d2}) {
    EXPECT_EQ(d->task, "megakernel-int4-weight-decode");
    EXPECT_EQ(d->unit, "token");
    EXPECT_FALSE(d->host_wall_informational);
    EXPECT_DOUBLE_EQ(d->us_per_call, 2640.4035);
    EXPECT_DOUBLE_EQ(d->gpu_span_us.median, 2640.4035);
    EXPECT_EQ(d->gpu_span_us.samples.size(), 96u);
    EXPECT_EQ(d->host_wall_us.samples.size(), 96u);
    EXPECT_DOUBLE_EQ(d->kernels_per_call.median, 283);
    EXPECT_DOUBLE_EQ(d->bytes_per_call, 1920996352);
    EXPECT_NEAR(d->floor_measured_copy_bw_us, 458.86, 0.01);
    EXPECT_NEAR(d->floor_theoretical_bw_us, 399.02, 0.01);
    EXPECT_NEAR(d->fraction_of_measured_bw, 0.17378, 1e-5);
    EXPECT_TRUE(std::isnan(d->floor_weight_read_us));
    EXPECT_EQ(d->positions.size(), 96u);
    EXPECT_DOUBLE_EQ(d->calls_per_round, 32);
    EXPECT_EQ(d->stop_reason, "median stable");
    ASSERT_EQ(d->per_seed.size(), 2u);
    EXPECT_EQ(d->per_seed[1].checked, 8);
    EXPECT_DOUBLE_EQ(d->worst_rel_err, 0.00022404104408230472);
    EXPECT_TRUE(std::isnan(d->element_guard));
  }
  EXPECT_EQ(d1.rule, "");
  EXPECT_EQ(d2.rule, "passed");
  EXPECT_EQ(d2.timing_seed_from, "os");
  EXPECT_EQ(d2.verified_calls.size(), 2u);
  ASSERT_EQ(d2.worst_by_output.size(), 3u);
  EXPECT_EQ(d2.worst_by_output[1].first, "k");
  EXPECT_NEAR(d2.tflops, 2.702, 1e-3);

  const ReportView g1 = view(gemm()), g2 = view(gemm_v2());
  for (const ReportView* g : {&g1, &g2}) {
    EXPECT_EQ(g->unit, "call");
    EXPECT_TRUE(g->host_wall_informational);
    EXPECT_DOUBLE_EQ(g->us_per_call, 7.488);
    EXPECT_DOUBLE_EQ(g->kernels_per_call.median, 1);
    EXPECT_DOUBLE_EQ(g->bytes_per_call, 5603332);
    EXPECT_DOUBLE_EQ(g->flops_per_call, 301989888);
    EXPECT_NEAR(g->tflops, 40.33, 0.01);
    EXPECT_NEAR(g->fraction_of_measured_bw, 1.3331 / 7.488, 1e-4);  // version 1: the floor over the median
    ASSERT_EQ(g->per_seed.size(), 1u);
    EXPECT_EQ(g->per_seed[0].checked, 3);
    EXPECT_TRUE(g->positions.empty());
  }
  EXPECT_TRUE(std::isnan(g1.floor_weight_read_us));
  EXPECT_DOUBLE_EQ(g2.floor_weight_read_us, 3.56);
  EXPECT_DOUBLE_EQ(g2.element_guard, 0.05);
  EXPECT_EQ(g2.solution_name, "gemm-fp4-sm90");
}

TEST(ReportView, AnUnknownMajorVersionOrUnitIsBadReport) {
  json r = unfused_v2();
  r["schema_version"] = "3.0.0";
  try {
    read_report_view(r, "new.json");
    FAIL() << "a version 3 report must not read";
  } catch (const BadReport& e) {
    EXPECT_NE(std::string(e.what()).find("new.json: schema_version \"3.0.0\" is not one this nibble reads (1.x or 2.x)"),
              std::string::npos)
        << e.what();
  }
  r["schema_version"] = 2.0;  // a number: say it must be a string, not that 2.0 is an unknown version
  try {
    read_report_view(r, "new.json");
    FAIL() << "a numeric schema_version must not read";
  } catch (const BadReport& e) {
    EXPECT_NE(std::string(e.what()).find("schema_version 2.0 is a JSON number; nibble writes it as a string"),
              std::string::npos)
        << e.what();
  }
  for (const char* odd : {"2", "2.abc", "2.0.0-rc1", "2.x"}) {  // MAJOR.MINOR.PATCH as nibble writes it
    r["schema_version"] = odd;
    EXPECT_THROW(read_report_view(r, "new.json"), BadReport) << odd;
  }
  r["schema_version"] = "2.1.0";  // a minor version adds, never changes: it reads
  EXPECT_NO_THROW(read_report_view(r, "new.json"));
  for (const json& unit : {json("frame"), json(nullptr), json(3)}) {
    r["timing"]["unit"] = unit;
    EXPECT_THROW(read_report_view(r, "new.json"), BadReport) << unit.dump();
  }
  r["timing"].erase("unit");
  EXPECT_THROW(read_report_view(r, "new.json"), BadReport);
  r.erase("timing");  // a grade that stopped before timing has no unit to state
  EXPECT_EQ(read_report_view(r, "new.json").unit, "");
}

// The solution's choices the grade recorded (solution.facts) are on its line: gemm-w4a16-int4's
// layout is what the report must name.
TEST(ReportShow, TheSolutionsFactsAreNamed) {
  json r = gemm_v2();
  r["task"] = "gemm-w4a16-int4";
  r["solution"]["facts"] = {{"c_dtype", "fp32"}, {"int4_layout", "gptq_g_idx"}};
  const ReportView v = view(r);
  EXPECT_EQ(v.solution_facts, (std::vector<std::string>{"c_dtype fp32", "int4_layout gptq_g_idx"}));
  const std::string s = format_summary(v, "g.json");
  EXPECT_NE(s.find("libnibble_gemm_fp4_sm90.so)  c_dtype fp32, int4_layout gptq_g_idx\n"), std::string::npos) << s;
  r["solution"].erase("facts");
  EXPECT_TRUE(view(r).solution_facts.empty()) << "a report without facts reads as before";
}

TEST(ReportShow, AVersion2Report) {
  EXPECT_EQ(format_summary(view(gemm_v2()), "g.json"),
            "\nnibble grade  gemm-w4a16-nvfp4 / m16-n3072-k3072  on NVIDIA H200\n"
            "  solution     gemm-fp4-sm90  (/work/main/build-hopper/lib/libnibble_gemm_fp4_sm90.so)  c_dtype fp32\n"
            "  disposition  Passed: worst relative error 1.21e-07 < gate 0.01\n"
            "  seed 0       worst relative error 1.21e-07 over 3 calls (gate 0.01)\n"
            "  time/call    7.488 us median GPU span (q1 7.424, q3 7.584, n 96), host wall 23.538 us, 1 kernels/call\n"
            "  throughput   40.33 TFLOP/s, 0.748 TB/s of the 5.603 MB a call must move; floor 1.333 us at the measured copy "
            "bandwidth -> 17.8% of it\n"
            "  read floor   3.56 us for a kernel that only reads W's codes and scales (same flush, same timer) -> 47.5% of it\n"
            "  report       g.json  (1.86 s)\n");
  // The decode grade: the same lines as its version 1 report, but a report with its FLOPs shows
  // its throughput where version 1 showed GB per step.
  const std::string s = format_summary(view(unfused_v2()), "r.json");
  EXPECT_NE(s.find("  seed 1       worst relative error 0.000224 over 8 steps (gate 0.1)\n"
                   "  time/token   2640.4 us median GPU span (q1 2633.3, q3 2651.7, n 96), host wall 2652.9 us, 283 kernels/step\n"
                   "  throughput   2.702 TFLOP/s, 0.728 TB/s of the 1921 MB a step must move; floor 458.9 us at the measured copy "
                   "bandwidth -> 17.4% of it\n"),
            std::string::npos)
      << s;
}

TEST(CompareReports, Version2AgainstVersion2ComparesAsBefore) {
  const json base = unfused_v2();
  Comparison c = compare_json(base, base, CompareOptions{});
  EXPECT_EQ(c.exit_code, kCompareOk) << c.result;
  EXPECT_EQ(figure(c, "gpu_span_us").verdict, "SAME");
  json slower = base;
  for (auto& x : slower["timing"]["gpu_span_us"]["samples"]) x = x.get<double>() * 1.5;
  c = compare_json(base, slower, CompareOptions{});
  EXPECT_EQ(c.exit_code, kCompareSlower) << c.result;
  EXPECT_EQ(figure(c, "gpu_span_us").verdict, "SLOWER");
  EXPECT_EQ(comparison_json(c)["new"]["schema_version"], "2.0.0");
  // The GEMM's host wall time: informational, as the report says (timing.host_wall_informational)
  // and as its task has it; a report that says otherwise was edited (a red-team's flag set on a
  // decode report hid its host wall regression), so the flag cannot turn a verdict.
  json g = gemm_v2(), gw = gemm_v2();
  for (auto& x : gw["timing"]["host_wall_us"]["samples"]) x = x.get<double>() * 1.3;
  c = compare_json(g, gw, CompareOptions{});
  EXPECT_TRUE(figure(c, "host_wall_us").informational);
  EXPECT_EQ(c.exit_code, kCompareOk) << c.result;
  gw["timing"]["host_wall_informational"] = false;
  refused(gw, "timing.host_wall_informational is false, but gemm-w4a16-nvfp4's is true: an edited report");
  json bw = base;
  bw["timing"]["host_wall_informational"] = true;
  refused(bw, "timing.host_wall_informational is true, but megakernel-int4-weight-decode's is false");
  // Correctness regressions read the same way.
  json bad = base;
  bad["disposition"] = "Incorrect";
  bad["rule"] = "gate";
  EXPECT_EQ(compare_json(base, bad, CompareOptions{}).exit_code, kCompareCorrectness);
}

TEST(CompareReports, Version1AgainstVersion2IsRefusedEvenForced) {
  CompareOptions force;
  force.force = true;
  for (const auto& [b, n] : {std::pair<json, json>{unfused(), unfused_v2()}, {unfused_v2(), unfused()}, {gemm(), gemm_v2()}}) {
    for (const CompareOptions& opt : {CompareOptions{}, force}) {
      const Comparison c = compare_json(b, n, opt);
      EXPECT_EQ(c.exit_code, kCompareNotComparable) << c.result;
      EXPECT_TRUE(c.figures.empty());
      EXPECT_FALSE(c.forced);
      ASSERT_EQ(c.refused.size(), 1u);
      EXPECT_NE(c.result.find("version 1.0.0"), std::string::npos) << c.result;
      EXPECT_NE(c.result.find("version 2.0.0"), std::string::npos) << c.result;
      // The older report is the one to grade again, on whichever side it is.
      const std::string older = b.value("schema_version", std::string("1")).rfind("1", 0) == 0 ? "BASE" : "NEW";
      EXPECT_NE(c.result.find("Re-grade " + older + " with this nibble (nibble grade ... --out " + older + ".json)"), std::string::npos)
          << c.result;
      EXPECT_NE(c.result.find("--force does not apply"), std::string::npos) << c.result;
      EXPECT_NE(format_comparison(c).find("NOT COMPARABLE (--force does not apply)"), std::string::npos);
      EXPECT_FALSE(comparison_json(c)["comparable"].get<bool>());
    }
  }
  json old = unfused();  // version 1 before schema_version existed
  old.erase("schema_version");
  EXPECT_NE(compare_json(old, unfused_v2(), CompareOptions{}).result.find("version 1 (none written)"), std::string::npos);
}

TEST(CompareReports, SamplesOfAnotherUnitAreRefusedEvenForced) {
  CompareOptions force;
  force.force = true;
  // A task this nibble does not know (a later nibble's) may time either unit: the two reports'
  // units differ, so they are not comparable.
  json tokens = unfused_v2(), calls = unfused_v2();
  tokens["task"] = calls["task"] = "a-later-task";
  calls["timing"]["unit"] = "call";
  for (const CompareOptions& opt : {CompareOptions{}, force}) {
    const Comparison c = compare_json(tokens, calls, opt);
    EXPECT_EQ(c.exit_code, kCompareNotComparable) << c.result;
    EXPECT_NE(c.result.find("unit: a BASE sample is one token of a-later-task, a NEW sample one call of a-later-task"),
              std::string::npos)
        << c.result;
  }
  // Version 1: the unit read from the keys (a decode report against a GEMM one, forced past the task).
  const Comparison c = compare_json(unfused(), gemm(), force);
  EXPECT_EQ(c.exit_code, kCompareNotComparable) << c.result;
  EXPECT_NE(c.result.find("of gemm-w4a16-nvfp4: reports of different tasks"), std::string::npos) << c.result;
}

TEST(ReportOutputs, GbenchJsonAndHistoryReadEitherSchema) {
  for (const json& r : {unfused(), unfused_v2(), gemm(), gemm_v2()}) {
    const json g = gbench_json(r);
    EXPECT_EQ(g["context"]["gpu"], "NVIDIA H200");
    EXPECT_EQ(g["context"]["nibble_report_schema"], r["schema_version"]);
    ASSERT_EQ(g["benchmarks"].size(), 2u * (96 + 3));  // GPU span and host wall: 96 calls + 3 aggregates each
    EXPECT_EQ(g["benchmarks"][0]["real_time"], r["timing"]["gpu_span_us"]["samples"][0]);
    EXPECT_DOUBLE_EQ(g["benchmarks"][96 + 1]["real_time"].get<double>(), r["timing"]["gpu_span_us"]["median"].get<double>());
    TempDir t;
    append_history(t.path() + "/h.jsonl", r, "r.json");
    append_history(t.path() + "/h.jsonl", r, "r.json");
    std::ifstream f(t.path() + "/h.jsonl");
    std::string line;
    int lines = 0;
    while (std::getline(f, line)) {
      const json h = json::parse(line);
      EXPECT_EQ(h["task"], r["task"]);
      EXPECT_EQ(h["median_us"], r["timing"]["gpu_span_us"]["median"]);
      EXPECT_EQ(h["worst_rel_err"], r["correctness"]["worst_rel_err"]);
      ++lines;
    }
    EXPECT_EQ(lines, 2);
  }
}

// ---------------------------------------------------------------------------------------------
// Through the `nibble` binary: every exit code, the JSON, the usage errors

namespace {
std::string nibble_exe() {
  const char* b = std::getenv("NIBBLE_BINARY_DIR");
  return std::string(b ? b : NIBBLE_TEST_BINARY_DIR) + "/bin/nibble";
}
struct CliRun {
  int code;
  std::string out;
};
CliRun run_nibble(std::vector<std::string> args, const TempDir& t) {
  args.insert(args.begin(), nibble_exe());
  const std::string log = t.path() + "/out.log";
  std::error_code ec;
  fs::remove(log, ec);
  const ChildExit e = run_child(args, log, 120);
  EXPECT_EQ(e.kind, ChildExit::Exited) << e.describe();
  return {e.code, file_tail(log, 1 << 20)};
}
}  // namespace

TEST(ReportHtmlCli, WithBaseRefusesWhatCompareRefuses) {
  // report html REPORT BASE draws compare's verdicts from the same inputs (comparison_input_problem):
  // an edited report, or more samples than the bootstrap's bound, is bad input there too, no page.
  if (!fs::exists(nibble_exe())) GTEST_SKIP() << "nibble binary not built at " << nibble_exe();
  TempDir t;
  const std::string base = data("reports/h200-unfused-full.json");
  json r = unfused();
  for (json& v : r["timing"]["gpu_span_us"]["samples"]) v = v.get<double>() / 2;
  write_file_atomic(t.path() + "/halved.json", r.dump());
  r = unfused();
  json many = json::array();
  for (int k = 0; k < 625; ++k)
    for (const json& v : r["timing"]["gpu_span_us"]["samples"]) many.push_back(v);
  r["timing"]["gpu_span_us"]["samples"] = many;
  r["timing"]["gpu_span_us"]["n"] = many.size();
  write_file_atomic(t.path() + "/many.json", r.dump());
  for (const auto& [report, says] : {std::pair<std::string, std::string>{"halved.json", "an edited report"},
                                     {"many.json", "bootstrap resamples of them would draw"}}) {
    const CliRun x = run_nibble({"report", "html", t.path() + "/" + report, t.path() + "/many.json", "-o", t.path() + "/p.html"}, t);
    EXPECT_EQ(x.code, kCompareBadInput) << x.out;
    EXPECT_NE(x.out.find(says), std::string::npos) << x.out;
    EXPECT_FALSE(fs::exists(t.path() + "/p.html"));
  }
  EXPECT_EQ(run_nibble({"report", "html", base, base, "-o", t.path() + "/p.html"}, t).code, 0);
  // Another record mode, both launching graphs: the page is written, says why the times are not set
  // side by side, and draws none of BASE's (compare's 3 is for the figures, not a bad input).
  r = unfused();
  r["timing"]["graph_records"] = "graphs";
  r["timing"]["graph_launches_audited"] = 64;
  write_file_atomic(t.path() + "/whole.json", r.dump());
  const CliRun modes = run_nibble({"report", "html", t.path() + "/whole.json", base, "-o", t.path() + "/m.html"}, t);
  EXPECT_EQ(modes.code, 0) << modes.out;
  const std::string page = read_file(t.path() + "/m.html");
  EXPECT_NE(page.find("not comparable, even by nibble compare --force: graph records"), std::string::npos);
  EXPECT_EQ(page.find("BASE median per position"), std::string::npos) << "BASE's times drawn beside another mode's";
  // The --resamples the refusal names is an option of report html too, and it fits.
  const CliRun fit = run_nibble({"report", "html", t.path() + "/many.json", t.path() + "/many.json", "-o", t.path() + "/q.html",
                                 "--resamples", "1666"}, t);
  EXPECT_EQ(fit.code, 0) << fit.out;
}

TEST(CompareCli, EveryExitCode) {
  if (!fs::exists(nibble_exe())) GTEST_SKIP() << "nibble binary not built at " << nibble_exe();
  TempDir t;
  const std::string u = data("reports/h200-unfused-full.json"), r = data("reports/h200-reference-full.json");
  CliRun x = run_nibble({"compare", r, u}, t);
  EXPECT_EQ(x.code, 0) << x.out;
  EXPECT_NE(x.out.find("FASTER"), std::string::npos) << x.out;
  x = run_nibble({"compare", u, u}, t);
  EXPECT_EQ(x.code, 0) << x.out;
  EXPECT_NE(x.out.find("SAME"), std::string::npos) << x.out;
  x = run_nibble({"compare", u, r}, t);
  EXPECT_EQ(x.code, 1) << x.out;
  EXPECT_NE(x.out.find("SLOWER"), std::string::npos) << x.out;

  json bad = load_report(u);
  bad["disposition"] = "Incorrect";
  write_file_atomic(t.path() + "/incorrect.json", bad.dump());
  x = run_nibble({"compare", u, t.path() + "/incorrect.json"}, t);
  EXPECT_EQ(x.code, 2) << x.out;

  json h100 = load_report(r);
  h100["device"]["name"] = "NVIDIA H100 80GB HBM3";
  write_file_atomic(t.path() + "/h100.json", h100.dump());
  x = run_nibble({"compare", u, t.path() + "/h100.json"}, t);
  EXPECT_EQ(x.code, 3) << x.out;
  EXPECT_NE(x.out.find("GPU: BASE NVIDIA H200, NEW NVIDIA H100"), std::string::npos) << x.out;
  x = run_nibble({"compare", u, t.path() + "/h100.json", "--force"}, t);
  EXPECT_EQ(x.code, 1) << x.out;
  EXPECT_NE(x.out.find("FORCED"), std::string::npos) << x.out;

  x = run_nibble({"compare", u, t.path() + "/nonexistent.json"}, t);
  EXPECT_EQ(x.code, 4) << x.out;
  EXPECT_NE(x.out.find("no such file"), std::string::npos) << x.out;
  write_file_atomic(t.path() + "/other.json", R"({"schema": "something.else"})");
  x = run_nibble({"compare", t.path() + "/other.json", u}, t);
  EXPECT_EQ(x.code, 4) << x.out;
  EXPECT_NE(x.out.find("not a nibble report"), std::string::npos) << x.out;
  // A bad command line is bad input too: 4, never 2 (which means a correctness regression).
  x = run_nibble({"compare", u}, t);
  EXPECT_EQ(x.code, 4) << x.out;
  x = run_nibble({"compare", u, r, "--alpha", "abc"}, t);
  EXPECT_EQ(x.code, 4) << x.out;
  x = run_nibble({"compare", u, r, "--alpha", "2"}, t);
  EXPECT_EQ(x.code, 4) << x.out;
  x = run_nibble({"compare", u, r, "--frobnicate"}, t);
  EXPECT_EQ(x.code, 4) << x.out;
  x = run_nibble({"compare", "--help"}, t);
  EXPECT_EQ(x.code, 0) << x.out;
  EXPECT_NE(x.out.find("Exit codes"), std::string::npos) << x.out;
}

TEST(CompareCli, SchemaVersions) {
  if (!fs::exists(nibble_exe())) GTEST_SKIP() << "nibble binary not built at " << nibble_exe();
  TempDir t;
  const std::string u = data("reports/h200-unfused-full.json"), u2 = data("reports/v2/h200-unfused-full.json");
  CliRun x = run_nibble({"compare", u2, u2}, t);
  EXPECT_EQ(x.code, 0) << x.out;
  EXPECT_NE(x.out.find("SAME"), std::string::npos) << x.out;
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"compare", u, u2}, std::vector<std::string>{"compare", u, u2, "--force"}}) {
    x = run_nibble(args, t);
    EXPECT_EQ(x.code, 3) << x.out;
    EXPECT_NE(x.out.find("BASE is a version 1.0.0 report, NEW a version 2.0.0 one"), std::string::npos) << x.out;
    EXPECT_NE(x.out.find("Re-grade BASE with this nibble"), std::string::npos) << x.out;
  }
  json v3 = load_report(u2);
  v3["schema_version"] = "3.0.0";
  write_file_atomic(t.path() + "/v3.json", v3.dump());
  x = run_nibble({"compare", u2, t.path() + "/v3.json"}, t);
  EXPECT_EQ(x.code, 4) << x.out;
  EXPECT_NE(x.out.find("schema_version \"3.0.0\" is not one this nibble reads"), std::string::npos) << x.out;
  x = run_nibble({"report", "show", t.path() + "/v3.json"}, t);
  EXPECT_EQ(x.code, 4) << x.out;
}

TEST(CompareCli, JsonOutputParsesAndCarriesTheVerdicts) {
  if (!fs::exists(nibble_exe())) GTEST_SKIP() << "nibble binary not built at " << nibble_exe();
  TempDir t;
  const std::string u = data("reports/h200-unfused-full.json"), r = data("reports/h200-reference-full.json");
  const std::vector<std::string> args = {nibble_exe(), "compare", u, r, "--json", "--max-slowdown", "10"};
  const ChildExit e = run_child(args, t.path() + "/json.out", 120);
  ASSERT_EQ(e.kind, ChildExit::Exited);
  EXPECT_EQ(e.code, 1);
  const json j = json::parse(read_file(t.path() + "/json.out"));  // stdout only: no stderr line for a slowdown
  EXPECT_EQ(j["schema"], "nibble.compare");
  EXPECT_EQ(j["exit_code"], 1);
  EXPECT_EQ(j["options"]["max_slowdown_pct"], 10.0);
  ASSERT_EQ(j["figures"].size(), 2u);
  EXPECT_EQ(j["figures"][0]["figure"], "gpu_span_us");
  EXPECT_EQ(j["figures"][0]["verdict"], "SLOWER");
  EXPECT_NEAR(j["figures"][0]["ratio"].get<double>(), 2.3284, 1e-4);
}

TEST(ReportCli, ShowAndHtml) {
  if (!fs::exists(nibble_exe())) GTEST_SKIP() << "nibble binary not built at " << nibble_exe();
  TempDir t;
  const std::string u = data("reports/h200-unfused-full.json"), r = data("reports/h200-reference-full.json");
  CliRun x = run_nibble({"report", "show", u}, t);
  EXPECT_EQ(x.code, 0) << x.out;
  EXPECT_NE(x.out.find("time/token   2640.4 us median GPU span"), std::string::npos) << x.out;
  x = run_nibble({"report", "html", u, r, "-o", t.path() + "/r.html"}, t);
  EXPECT_EQ(x.code, 0) << x.out;
  EXPECT_GT(fs::file_size(t.path() + "/r.html"), 10000u);
  // A value nested 100,000 deep (in a report, or in a calibration table): bad input, said, never a
  // crash of the stack (printing it in the error message recursed: a newcomer's segfault).
  const std::string deep = std::string(100000, '[') + std::string(100000, ']');
  std::string deep_report = read_file(u);
  deep_report.replace(deep_report.find("\"samples\": ["), 12, "\"samples\": [" + deep + ",");
  write_file_atomic(t.path() + "/deep.json", deep_report);
  for (const std::vector<std::string>& args : {std::vector<std::string>{"report", "show", t.path() + "/deep.json"},
                                               std::vector<std::string>{"compare", u, t.path() + "/deep.json"},
                                               std::vector<std::string>{"leaderboard", t.path(), "--json", t.path() + "/lb.json"}}) {
    x = run_nibble(args, t);
    EXPECT_EQ(x.code, 4) << args[0] << ": " << x.out;
    EXPECT_NE(x.out.find("nests deeper than 64 levels"), std::string::npos) << args[0] << ": " << x.out;
  }
  fs::remove(t.path() + "/deep.json");
  for (const char* opt : {"--max-slowdown", "--alpha"}) {  // they change the comparison with BASE: refused without one
    x = run_nibble({"report", "html", u, "-o", t.path() + "/nobase.html", opt, "0.5"}, t);
    EXPECT_EQ(x.code, 4) << x.out;
    EXPECT_NE(x.out.find("requires BASE"), std::string::npos) << x.out;
  }
  // A calibration table's variants as the error chart's reference points; one for another config is refused.
  json cal = {{"schema", "nibble.calibration"}, {"task", "megakernel-int4-weight-decode"}, {"config", "full"},
              {"rows", json::array({{{"variant", "swap_nibbles_measured"}, {"worst", 1.43}, {"expected", "FAIL"}}})}};
  write_file_atomic(t.path() + "/cal.json", cal.dump());
  x = run_nibble({"report", "html", u, "--calibration", t.path() + "/cal.json", "-o", t.path() + "/c.html"}, t);
  EXPECT_EQ(x.code, 0) << x.out;
  EXPECT_NE(read_file(t.path() + "/c.html").find("swap_nibbles_measured 1.43"), std::string::npos);
  cal["config"] = "tiny";
  write_file_atomic(t.path() + "/cal-tiny.json", cal.dump());
  x = run_nibble({"report", "html", u, "--calibration", t.path() + "/cal-tiny.json", "-o", t.path() + "/c.html"}, t);
  EXPECT_EQ(x.code, 4) << x.out;
  EXPECT_NE(x.out.find("calibrated for megakernel-int4-weight-decode / tiny"), std::string::npos) << x.out;
  x = run_nibble({"report", "html", u, "--calibration", r, "-o", t.path() + "/c.html"}, t);
  EXPECT_EQ(x.code, 4) << x.out;
  x = run_nibble({"report", "html", u}, t);  // no -o
  EXPECT_EQ(x.code, 4) << x.out;
  x = run_nibble({"report", "show", t.path() + "/nonexistent.json"}, t);
  EXPECT_EQ(x.code, 4) << x.out;
  x = run_nibble({"report"}, t);
  EXPECT_EQ(x.code, 4) << x.out;
  for (const std::vector<std::string>& a : {std::vector<std::string>{"-o", ""},
                                             std::vector<std::string>{"-o", t.path() + "/e.html", "--calibration", ""}}) {
    std::vector<std::string> args = {"report", "html", u};
    args.insert(args.end(), a.begin(), a.end());
    x = run_nibble(args, t);
    EXPECT_EQ(x.code, 4) << x.out;
    EXPECT_NE(x.out.find("must not be empty"), std::string::npos) << x.out;
  }
  for (const char* n : {"0", "99", "2000000000"}) {  // --resamples: 100 .. 10^6 (memory grows with it)
    x = run_nibble({"compare", u, u, "--resamples", n}, t);
    EXPECT_EQ(x.code, 4) << n << ": " << x.out;
  }
  // A GEMM report: show and html both work (the page in the GEMM task's terms: test_html_report).
  const std::string g = data("reports/h200-gemm-nvfp4-m16-fp4_sm90.json");
  x = run_nibble({"report", "show", g}, t);
  EXPECT_EQ(x.code, 0) << x.out;
  EXPECT_NE(x.out.find("time/call    7.488 us"), std::string::npos) << x.out;
  x = run_nibble({"report", "html", g, "-o", t.path() + "/g.html"}, t);
  EXPECT_EQ(x.code, 0) << x.out;
  EXPECT_NE(read_file(t.path() + "/g.html").find("id=\"tflops\">40.3<"), std::string::npos);
  // Version 2 reports: show, html, and html with a version 2 BASE.
  const std::string g2 = data("reports/v2/h200-gemm-nvfp4-m16-fp4_sm90.json"), u2 = data("reports/v2/h200-unfused-full.json");
  x = run_nibble({"report", "show", g2}, t);
  EXPECT_EQ(x.code, 0) << x.out;
  EXPECT_NE(x.out.find("time/call    7.488 us"), std::string::npos) << x.out;
  x = run_nibble({"report", "html", u2, u2, "-o", t.path() + "/u2.html"}, t);
  EXPECT_EQ(x.code, 0) << x.out;
  EXPECT_NE(read_file(t.path() + "/u2.html").find("id=\"median-us\">2640.4<"), std::string::npos);
  EXPECT_EQ(read_file(t.path() + "/u2.html").find("4160.0 us"), std::string::npos) << "no typed-in time";
  // --beside: other reports as rows of the side by side (a report of another task listed apart);
  // a file that is not a report is bad input, no page.
  x = run_nibble({"report", "html", u2, "--beside", u2, "--beside", g2, "-o",
                  t.path() + "/side.html"},
                 t);
  EXPECT_EQ(x.code, 0) << x.out;
  EXPECT_NE(read_file(t.path() + "/side.html").find("id=\"lineup\""), std::string::npos);
  EXPECT_NE(read_file(t.path() + "/side.html").find("not ranked: another task"), std::string::npos);
  x = run_nibble({"report", "html", u2, "--beside", t.path() + "/u2.html", "-o", t.path() + "/bad.html"}, t);
  EXPECT_EQ(x.code, 4) << x.out;
  EXPECT_NE(x.out.find("--beside"), std::string::npos) << x.out;
  EXPECT_FALSE(std::filesystem::exists(t.path() + "/bad.html"));
  // A version 1 BASE beside a version 2 REPORT would be drawn as the same measurement: refused.
  x = run_nibble({"report", "html", u2, u, "-o", t.path() + "/u12.html"}, t);
  EXPECT_EQ(x.code, 4) << x.out;
  EXPECT_NE(x.out.find("Re-grade BASE with this nibble"), std::string::npos) << x.out;
  EXPECT_FALSE(std::filesystem::exists(t.path() + "/u12.html"));
  // A BASE of the other task has no figure in common with REPORT: bad input, no page.
  x = run_nibble({"report", "html", u, g, "-o", t.path() + "/ug.html"}, t);
  EXPECT_EQ(x.code, 4) << x.out;
  EXPECT_NE(x.out.find("not comparable"), std::string::npos) << x.out;
  EXPECT_FALSE(std::filesystem::exists(t.path() + "/ug.html"));
}

// `nibble leaderboard` on the committed reports (version 1 and 2, decode and GEMM): the groups,
// ranks and speedups in the JSON, the Markdown table, a balanced page; bad input exits 4.
TEST(ReportCli, Leaderboard) {
  if (!fs::exists(nibble_exe())) GTEST_SKIP() << "nibble binary not built at " << nibble_exe();
  TempDir t;
  const std::string folder = data("reports");
  json h100 = load_report(data("reports/h200-reference-full.json"));
  h100["device"]["name"] = "NVIDIA H100 80GB HBM3";
  write_file_atomic(t.path() + "/h100.json", h100.dump());
  // The folder, a report inside it named again and a byte-for-byte copy of one (one row each), and a
  // report on another GPU.
  std::filesystem::copy_file(data("reports/h200-unfused-full.json"), t.path() + "/copy-of-unfused.json");
  CliRun x = run_nibble({"leaderboard", folder, data("reports/h200-unfused-full.json"), t.path() + "/copy-of-unfused.json",
                         t.path() + "/h100.json", "-o",
                         t.path() + "/board.html", "--markdown", t.path() + "/board.md", "--json", t.path() + "/board.json"},
                        t);
  ASSERT_EQ(x.code, 0) << x.out;
  EXPECT_NE(x.out.find("leaderboard: 6 reports in 2 groups"), std::string::npos) << x.out;

  const json j = json::parse(read_file(t.path() + "/board.json"));
  EXPECT_EQ(j["schema"], "nibble.leaderboard");
  EXPECT_EQ(j["schema_version"], "1.1.0");
  EXPECT_EQ(j["unread"], json::array());
  ASSERT_EQ(j["groups"].size(), 2u);
  // GEMM: one report per schema; the newer one is ranked, the version 1 one listed apart.
  const json& gemm = j["groups"][0];
  EXPECT_EQ(gemm["task"], "gemm-w4a16-nvfp4");
  EXPECT_EQ(gemm["config"], "m16-n3072-k3072");
  EXPECT_EQ(gemm["schema_major"], 2);
  ASSERT_EQ(gemm["rows"].size(), 2u);
  EXPECT_EQ(gemm["rows"][0]["rank"], 1);
  EXPECT_EQ(gemm["rows"][0]["solution"], "gemm-fp4-sm90");
  EXPECT_EQ(gemm["rows"][0]["commit"], "4e75cdf836afc2f65798ef028e49d1453282e2b0");
  EXPECT_TRUE(gemm["rows"][1]["rank"].is_null());
  EXPECT_EQ(gemm["rows"][1]["apart"], "another report schema (1.0.0)");
  EXPECT_TRUE(gemm["baselines"].empty()) << "no GEMM baseline among the committed reports";
  // Decode: two version 1 reports on the H200 are ranked; the version 2 one and the H100 one apart.
  const json& dec = j["groups"][1];
  EXPECT_EQ(dec["task"], "megakernel-int4-weight-decode");
  EXPECT_EQ(dec["ranked"], "megakernel-int4-weight-decode / full / NVIDIA H200 / schema 1");
  ASSERT_EQ(dec["rows"].size(), 4u);
  EXPECT_EQ(dec["rows"][0]["solution"], "unfused");
  EXPECT_EQ(dec["rows"][0]["rank"], 1);
  EXPECT_EQ(dec["rows"][0]["median_us"], unfused()["timing"]["gpu_span_us"]["median"]);
  EXPECT_EQ(dec["rows"][1]["solution"], "reference-fp32-cublas");
  EXPECT_EQ(dec["rows"][1]["rank"], 2);
  ASSERT_EQ(dec["baselines"].size(), 2u);
  EXPECT_EQ(dec["baselines"][0]["solution"], "unfused");
  EXPECT_EQ(dec["baselines"][1]["solution"], "reference-fp32-cublas");
  // 6148 us / 2640.4 us, as nibble compare's ratio of the same two reports.
  EXPECT_NEAR(dec["rows"][0]["speedup_vs_baselines"]["reference-fp32-cublas"].get<double>(), 2.3284, 1e-4);
  EXPECT_DOUBLE_EQ(dec["rows"][1]["speedup_vs_baselines"]["reference-fp32-cublas"].get<double>(), 1.0);
  std::vector<std::string> apart;
  for (const json& r : dec["rows"])
    if (r["rank"].is_null()) apart.push_back(r["apart"].get<std::string>());
  EXPECT_EQ(apart, (std::vector<std::string>{"another report schema (2.0.0)", "another GPU (NVIDIA H100 80GB HBM3)"}));

  const std::string md = read_file(t.path() + "/board.md");
  EXPECT_NE(md.find("## megakernel-int4-weight-decode / full"), std::string::npos) << md;
  EXPECT_NE(md.find("| rank | solution | disposition | median us/token | q1 - q3 | of floor | vs unfused | vs reference-fp32-cublas | "
                    "worst err | gate | GPU | commit | report | note |"),
            std::string::npos)
      << md;
  EXPECT_NE(md.find("| rank | solution | disposition | median us/call | q1 - q3 | of floor | worst err | gate |"), std::string::npos) << md;
  const std::string html = read_file(t.path() + "/board.html");
  EXPECT_EQ(nibble::test::markup_problem(html), "");
  EXPECT_NE(html.find("id=\"group-1\""), std::string::npos);
  EXPECT_EQ(html.find("<script"), std::string::npos);

  // A folder holding other JSON (the leaderboard's own, a calibration table) reads as before.
  fs::create_directories(t.path() + "/mixed/deep");
  fs::copy_file(data("reports/v2/h200-unfused-full.json"), t.path() + "/mixed/deep/u2.json");
  fs::copy_file(t.path() + "/board.json", t.path() + "/mixed/board.json");
  write_file_atomic(t.path() + "/mixed/cal.json", R"({"schema": "nibble.calibration", "rows": []})");
  x = run_nibble({"leaderboard", t.path() + "/mixed", "--json", t.path() + "/mixed.json"}, t);
  EXPECT_EQ(x.code, 0) << x.out;
  const json m = json::parse(read_file(t.path() + "/mixed.json"));
  ASSERT_EQ(m["groups"].size(), 1u);
  EXPECT_EQ(m["groups"][0]["rows"].size(), 1u);
  EXPECT_EQ(m["groups"][0]["rows"][0]["label"], t.path() + "/mixed/deep/u2.json");
  // The board written inside the folder it reads is its own output, not an input: the same
  // command runs again (a newcomer's finding: the second run refused it as "the input"); other JSON
  // there stays protected.
  for (int run = 0; run < 2; ++run) {
    x = run_nibble({"leaderboard", t.path() + "/mixed", "--json", t.path() + "/mixed/board.json"}, t);
    EXPECT_EQ(x.code, 0) << run << ": " << x.out;
    EXPECT_EQ(json::parse(read_file(t.path() + "/mixed/board.json"))["groups"][0]["rows"].size(), 1u) << run;
  }
  x = run_nibble({"leaderboard", t.path() + "/mixed", "--json", t.path() + "/mixed/cal.json"}, t);
  EXPECT_EQ(x.code, 4) << x.out;
  EXPECT_NE(x.out.find("is the input " + t.path() + "/mixed/cal.json"), std::string::npos) << x.out;

  // Bad input: a file named that is not a report (no output written), a missing one, a folder
  // without reports, no output asked for, an output over an input; a file that cannot be written.
  x = run_nibble({"leaderboard", folder, t.path() + "/mixed/cal.json", "--json", t.path() + "/no.json"}, t);
  EXPECT_EQ(x.code, 4) << x.out;
  EXPECT_NE(x.out.find(t.path() + "/mixed/cal.json: not a nibble report"), std::string::npos) << x.out;
  EXPECT_FALSE(fs::exists(t.path() + "/no.json"));
  x = run_nibble({"leaderboard", t.path() + "/nonexistent.json", "--json", t.path() + "/no.json"}, t);
  EXPECT_EQ(x.code, 4) << x.out;
  // A report cut short inside a folder neither drops out unseen (exit 0) nor stops the board of the
  // others (one bad file in a shared folder): the board is written, the file listed on it with the
  // reason, and the exit is bad input's. So is one with a key twice (an edited report would read one
  // way here, another elsewhere), named with the key's path, and one that reads as JSON and not as a
  // report (Passed past its gate).
  fs::create_directories(t.path() + "/torn");
  fs::copy_file(data("reports/v2/h200-unfused-full.json"), t.path() + "/torn/good.json");
  write_file_atomic(t.path() + "/torn/cut.json", read_file(data("reports/v2/h200-unfused-full.json")).substr(0, 5000));
  std::string dup = read_file(data("reports/v2/h200-unfused-full.json"));
  dup.insert(dup.find('{') + 1, "\"disposition\": \"Passed\", ");
  write_file_atomic(t.path() + "/torn/dup.json", dup);
  json past = load_report(data("reports/v2/h200-unfused-full.json"));
  past["correctness"]["worst_rel_err"] = 2 * past["correctness"]["gate"].get<double>();
  write_file_atomic(t.path() + "/torn/past.json", past.dump());
  x = run_nibble({"leaderboard", t.path() + "/torn", "--json", t.path() + "/torn.json", "--markdown", t.path() + "/torn.md", "-o",
                  t.path() + "/torn.html"},
                 t);
  EXPECT_EQ(x.code, 4) << x.out;
  const std::string cut_why = t.path() + "/torn/cut.json is not valid JSON", dup_why = t.path() + "/torn/dup.json has the key 'disposition' twice in one object",
                    past_why = t.path() + "/torn/past.json: malformed nibble report: disposition Passed with correctness.worst_rel_err";
  for (const std::string& why : {cut_why, dup_why, past_why}) EXPECT_NE(x.out.find(why), std::string::npos) << why << "\n" << x.out;
  EXPECT_NE(x.out.find("3 files that did not read as a report"), std::string::npos) << x.out;
  const json torn = json::parse(read_file(t.path() + "/torn.json"));
  ASSERT_EQ(torn["groups"].size(), 1u) << torn.dump();
  ASSERT_EQ(torn["groups"][0]["rows"].size(), 1u) << "the good report ranked: " << torn.dump();
  EXPECT_EQ(torn["groups"][0]["rows"][0]["rank"], 1);
  ASSERT_EQ(torn["unread"].size(), 3u) << torn.dump();
  EXPECT_EQ(torn["unread"][0]["path"], t.path() + "/torn/cut.json");  // path order
  EXPECT_EQ(torn["unread"][1]["path"], t.path() + "/torn/dup.json");
  EXPECT_EQ(torn["unread"][2]["path"], t.path() + "/torn/past.json");
  EXPECT_NE(torn["unread"][1]["reason"].get<std::string>().find("twice in one object"), std::string::npos);
  for (const char* page : {"/torn.md", "/torn.html"}) {
    const std::string text = read_file(t.path() + page);
    EXPECT_NE(text.find("Files that did not read"), std::string::npos) << page;
    EXPECT_NE(text.find("past.json"), std::string::npos) << page;
  }
  // No output over a file that was read, ranked or not (a red-team's finding: --json over a torn
  // report overwrote it, and the next run skipped it as a leaderboard file).
  x = run_nibble({"leaderboard", t.path() + "/torn", "--json", t.path() + "/torn/cut.json"}, t);
  EXPECT_EQ(x.code, 4) << x.out;
  EXPECT_NE(x.out.find("is the input " + t.path() + "/torn/cut.json"), std::string::npos) << x.out;
  EXPECT_EQ(read_file(t.path() + "/torn/cut.json").size(), 5000u) << "the input is intact";
  // Bytes that are not UTF-8 in a file's name and in a torn file's text (which its parse error
  // quotes), a link to nothing and a 1 MB reason: each listed, the JSON written (a red-team's
  // finding: nlohmann's dump threw on the byte and the grader aborted, exit 134).
  write_file_atomic(t.path() + "/torn/bad\xff.json", "{\"oops\xfe");
  fs::create_symlink(t.path() + "/nowhere.json", t.path() + "/torn/dangling.json");
  write_file_atomic(t.path() + "/torn/long.json", "{\"" + std::string(1 << 20, 'a'));
  x = run_nibble({"leaderboard", t.path() + "/torn", "--json", t.path() + "/utf8.json", "-o", t.path() + "/utf8.html", "--markdown",
                  t.path() + "/utf8.md"},
                 t);
  EXPECT_EQ(x.code, 4) << x.out.substr(0, 4000);
  // The pages are UTF-8 as they declare (a newcomer's finding: the name's raw byte reached the .md
  // and the .html): a strict dump throws on any byte that is not.
  for (const char* page : {"/utf8.md", "/utf8.html"}) {
    const std::string text = read_file(t.path() + page);
    EXPECT_NO_THROW((void)json(text).dump()) << page;
    EXPECT_NE(text.find("bad\uFFFD.json"), std::string::npos) << page;
  }
  EXPECT_LT(x.out.size(), 100000u) << "a reason is capped";
  const json utf8 = json::parse(read_file(t.path() + "/utf8.json"));
  std::set<std::string> listed;
  for (const json& u : utf8["unread"]) listed.insert(u["path"].get<std::string>().substr(t.path().size() + 6));
  for (const char* name : {"bad\uFFFD.json", "dangling.json", "long.json", "cut.json"}) EXPECT_TRUE(listed.count(name)) << name << " " << utf8["unread"].dump();
  for (const json& u : utf8["unread"]) EXPECT_LT(u["reason"].get<std::string>().size(), 1000u);
  EXPECT_NE(utf8["unread"].dump().find("a link to nothing"), std::string::npos);
  fs::remove(t.path() + "/torn/bad\xff.json");
  fs::remove(t.path() + "/torn/dangling.json");
  fs::remove(t.path() + "/torn/long.json");
  // A report whose median is not its samples' is listed apart, and the exit says so as for a file
  // that did not read (a red-team's finding: exit 0).
  {
    json halved = load_report(data("reports/h200-unfused-full.json"));
    for (json& v : halved["timing"]["gpu_span_us"]["samples"]) v = v.get<double>() / 2;
    write_file_atomic(t.path() + "/halved.json", halved.dump());
    x = run_nibble({"leaderboard", data("reports/h200-unfused-full.json"), t.path() + "/halved.json"}, t);
    EXPECT_EQ(x.code, 4) << x.out;
    EXPECT_NE(x.out.find("not ranked, " + t.path() + "/halved.json: its median"), std::string::npos) << x.out;
    x = run_nibble({"report", "show", t.path() + "/halved.json"}, t);  // printed, and said (it exited 0)
    EXPECT_EQ(x.code, 4) << x.out;
    EXPECT_NE(x.out.find("halved.json: its median"), std::string::npos) << x.out;
  }
  // Nothing but unreadable files: the board still says so, exit 4.
  fs::remove(t.path() + "/torn/good.json");
  x = run_nibble({"leaderboard", t.path() + "/torn"}, t);
  EXPECT_EQ(x.code, 4) << x.out;
  EXPECT_NE(x.out.find("0 reports in 0 groups (task / config); 3 files that did not read"), std::string::npos) << x.out;
  fs::create_directories(t.path() + "/empty");
  x = run_nibble({"leaderboard", t.path() + "/empty", "--json", t.path() + "/no.json"}, t);
  EXPECT_EQ(x.code, 4) << x.out;
  EXPECT_NE(x.out.find("no nibble report"), std::string::npos) << x.out;
  x = run_nibble({"leaderboard", folder}, t);  // the table alone
  EXPECT_EQ(x.code, 0) << x.out;
  EXPECT_NE(x.out.find("leaderboard: "), std::string::npos) << x.out;
  {  // --json /dev/stdout: the JSON alone on stdout (the table goes to stderr), for a pipe
    const std::string log = t.path() + "/pipe.log";
    const ChildExit e = run_child({"/bin/sh", "-c", nibble_exe() + " leaderboard " + folder + " --json /dev/stdout 2>/dev/null"}, log, 120);
    EXPECT_EQ(e.kind, ChildExit::Exited) << e.describe();
    const std::string out = file_tail(log, 1 << 20);
    const auto j = nlohmann::json::parse(out, nullptr, false);
    ASSERT_FALSE(j.is_discarded()) << out;
    EXPECT_EQ(j.value("schema", ""), "nibble.leaderboard") << out;
  }
  x = run_nibble({"leaderboard", t.path() + "/h100.json", "--json", t.path() + "/h100.json"}, t);
  EXPECT_EQ(x.code, 4) << x.out;
  EXPECT_EQ(load_report(t.path() + "/h100.json")["device"]["name"], "NVIDIA H100 80GB HBM3") << "the input is intact";
  x = run_nibble({"leaderboard", folder, "--frobnicate"}, t);
  EXPECT_EQ(x.code, 4) << x.out;
  x = run_nibble({"leaderboard", "--help"}, t);
  EXPECT_EQ(x.code, 0) << x.out;
  EXPECT_NE(x.out.find("Exit codes"), std::string::npos) << x.out;
  x = run_nibble({"leaderboard", folder, "--markdown", t.path() + "/h100.json/board.md"}, t);  // under a file
  EXPECT_EQ(x.code, 1) << x.out;
  // Every output is probed before anything is shown or written: a good -o beside a --json that can
  // never be written leaves no page and prints no table; the error names the user's path.
  x = run_nibble({"leaderboard", folder, "-o", t.path() + "/ok.html", "--json", t.path() + "/h100.json/x.json"}, t);
  EXPECT_EQ(x.code, 1) << x.out;
  EXPECT_FALSE(fs::exists(t.path() + "/ok.html"));
  EXPECT_EQ(x.out.find("leaderboard: 6 reports"), std::string::npos) << x.out;
  EXPECT_NE(x.out.find("--json cannot write " + t.path() + "/h100.json/x.json"), std::string::npos) << x.out;
  EXPECT_EQ(x.out.find("nibble-probe"), std::string::npos) << x.out;
  // A name as long as a file name may be (255 bytes) is written, and the probe leaves nothing.
  const std::string longest = t.path() + "/" + std::string(250, 'b') + ".json";
  x = run_nibble({"leaderboard", folder, "--json", longest}, t);
  EXPECT_EQ(x.code, 0) << x.out;
  EXPECT_TRUE(fs::exists(longest));
  for (const auto& e : fs::directory_iterator(t.path()))
    EXPECT_EQ(e.path().filename().string().find("nibble-probe"), std::string::npos) << e.path();
}
