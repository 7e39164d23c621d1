// compare.h: `nibble compare BASE.json NEW.json`: is NEW slower than BASE beyond noise?
//
// Per timed figure (timing.gpu_span_us, timing.host_wall_us: both keep their raw samples) the ratio
// of medians NEW/BASE, a bootstrap confidence interval of that ratio, and a Mann-Whitney U p-value,
// the pair google/benchmark's tools/compare.py reports (it calls scipy.stats.mannwhitneyu; C++ has
// no such library here, so both are implemented below and tested against scipy's numbers).
//
// Exit codes (the CI contract):
//   0  no significant slowdown beyond --max-slowdown (SAME, FASTER, or UNSURE)
//   1  a figure is SLOWER
//   2  a correctness regression: BASE Passed and NEW not, or NEW's worst relative error at or past
//      the gate while BASE's was below it
//   3  not comparable: different task, config, fixture SHA-256 (fixtures[].file_sha256), GPU model
//      (device.name), or one report has no timing; --force compares anyway and says so. Also, and
//      --force does not change it: a schema version 1 report against a version 2 one (their timing
//      protocols differ: re-grade the baseline), samples of different units (token, call), figures
//      of different clocks (timing.clock), or of different graph-record modes where both reports'
//      figures depend on the mode (figure_graph_records: a report whose timed calls launched no CUDA
//      graph is compared with either)
//   4  bad input: a missing file, not JSON, not a nibble report (schema != "nibble.report"), a
//      schema version this nibble does not read, or a bad command line
// Precedence: 4, then 3 for a different schema version or unit, then 3 for a different
// task/config/fixture/GPU, then 2, then 3 for a different clock or graph-record mode, then 3 for
// missing timing, then 1. A correctness regression outranks missing timing because a crashed NEW has
// none, and the modes a time was taken in because correctness does not depend on them.
//
// Both reports are read through ReportView (report_view.h): nothing here depends on the task.
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>
#include <vector>

#include "harness/report_view.h"

namespace nibble {

/** Exit codes of `nibble compare` (see the file comment). */
enum CompareExit : int {
  kCompareOk = 0,
  kCompareSlower = 1,
  kCompareCorrectness = 2,
  kCompareNotComparable = 3,
  kCompareBadInput = 4,
};

// ---------------------------------------------------------------------------------------------
// Statistics

/** Result of a two-sided Mann-Whitney U test. */
struct MannWhitney {
  double u1 = 0;      // U statistic of the first sample (scipy's `statistic`)
  double z = 0;       // normal deviate, continuity-corrected
  double p = 1;       // two-sided p-value
};

/**
 * Two-sided Mann-Whitney U test, normal approximation with tie correction and continuity
 * correction, exactly as scipy.stats.mannwhitneyu(x, y, alternative="two-sided",
 * method="asymptotic", use_continuity=True) computes it (Mann & Whitney 1947; the tie-corrected
 * variance is in Hollander, Wolfe & Chicken, Nonparametric Statistical Methods, 3rd ed., sec. 4.1):
 *   ranks of x ++ y (ties get their average rank), R1 = sum of x's ranks,
 *   U1 = R1 - n1 (n1 + 1) / 2,  U2 = n1 n2 - U1,  U = max(U1, U2),
 *   sigma = sqrt(n1 n2 / 12 * ((n + 1) - sum_t (t^3 - t) / (n (n - 1)))), t = size of each tie group,
 *   z = (U - n1 n2 / 2 - 0.5) / sigma,  p = min(1, 2 * (1 - Phi(z))).
 * google/benchmark's compare.py calls scipy with method "auto", which is this for n >= 8 per side
 * (the exact distribution below that, without ties). sigma == 0 (every value equal) gives p = 1.
 * Throws std::invalid_argument when either sample is empty.
 */
MannWhitney mann_whitney_u(const std::vector<double>& x, const std::vector<double>& y);

/** Standard normal CDF, Phi(z) = erfc(-z / sqrt 2) / 2. */
double normal_cdf(double z);

/**
 * Standard normal quantile Phi^-1(p) for p in (0, 1): Acklam's rational approximation (relative
 * error 1.15e-9) refined by one Halley step on erfc, which leaves it at double precision.
 * Throws std::invalid_argument outside (0, 1).
 */
double normal_quantile(double p);

/** splitmix64 (Steele, Lea & Flood 2014): a fixed, portable sequence, so a bootstrap's interval is
 *  the same on every machine and compiler (std::uniform_int_distribution is not). */
class SplitMix64 {
 public:
  explicit SplitMix64(uint64_t seed) : state_(seed) {}
  uint64_t next();
  /** Uniform integer in [0, n), n > 0, by rejection (no modulo bias). */
  uint64_t below(uint64_t n);

 private:
  uint64_t state_;
};

/** Median (type 7: the mean of the two middle values for an even count). Copies and partially
 *  sorts; throws std::invalid_argument for an empty set. */
double median_of(std::vector<double> x);

/** Bootstrap confidence interval of median(y) / median(x). */
struct RatioCI {
  double ratio = 0;  // median(y) / median(x) of the samples themselves
  double lo = 0, hi = 0;
  double level = 0.95;
  int resamples = 0;
  uint64_t seed = 0;
};

/**
 * Percentile bootstrap (Efron & Tibshirani, An Introduction to the Bootstrap, 1993, ch. 13) of the
 * ratio of medians median(y) / median(x) for two independent samples: `resamples` times, draw n_x
 * values from x and n_y from y with replacement (SplitMix64(seed), x's draws then y's each round),
 * take the ratio of the two medians; the interval is the alpha/2 and 1 - alpha/2 quantiles (type 7)
 * of those ratios. The percentile interval is invariant under monotone maps, so it is also the
 * interval of the log ratio, where the verdicts and the sample-size estimate work.
 * Throws std::invalid_argument for an empty sample, a non-positive median, alpha outside (0, 1)
 * or resamples < 1.
 */
RatioCI bootstrap_ratio_of_medians(const std::vector<double>& x, const std::vector<double>& y, double alpha,
                                   int resamples = 2000, uint64_t seed = 0x6e6962626c65ull /* "nibble" */);

// ---------------------------------------------------------------------------------------------
// Comparison of two reports

/** Fewer timed samples than this on either side: the verdict is UNSURE whatever the interval says (a
 *  percentile bootstrap of one or two samples has no spread to speak of, so its interval would
 *  claim a precision the data does not have). The grader writes at least 32. */
inline constexpr size_t kMinCompareSamples = 5;
/** Most bootstrap resamples `compare --resamples` accepts (memory grows with them). */
inline constexpr int kMaxResamples = 1000000;

struct CompareOptions {
  double max_slowdown_pct = 5;  // a slowdown must exceed this (and be significant) to fail
  double alpha = 0.05;          // significance level; the bootstrap interval is at 1 - alpha
  int resamples = 2000;
  uint64_t seed = 0x6e6962626c65ull;
  bool force = false;           // compare reports that are not comparable, and say so
  double power = 0.8;           // for the UNSURE sample-size estimate
};

/** One timed figure's comparison. */
struct FigureComparison {
  std::string figure;           // "gpu_span_us", "host_wall_us"
  size_t n_base = 0, n_new = 0;
  double median_base = 0, median_new = 0;
  RatioCI ci;
  MannWhitney mwu;
  std::string verdict;          // SAME, FASTER, SLOWER, UNSURE
  std::string why;              // one line: why that verdict
  // Shown, but its verdict does not set the exit code: host wall time where NEW's report says it is
  // informational (ReportView::host_wall_informational: a small GEMM's call is a few us of kernel
  // inside tens of us of launch and synchronisation, mostly the host's noise), and the GPU span of
  // a --clock wall report (graded by grader_clock_us).
  bool informational = false;
  // UNSURE only: samples per report that would settle it (both reports at that count), at the
  // observed spread, for the interval to clear the threshold with probability `power`. Empty when
  // no count would (the ratio sits on the threshold).
  std::optional<size_t> samples_needed_base, samples_needed_new;
};

/** Everything `nibble compare` decides. */
struct Comparison {
  CompareOptions options;
  std::string base_label, new_label;       // file paths as given
  std::vector<std::string> refused;        // schema version, unit, clock or graph-record mode differ: not comparable, even forced
  bool refused_timing_only = false;        // refused for the clock or graph-record mode alone: correctness was compared
  std::vector<std::string> not_comparable; // identity differences (task, config, fixture, GPU)
  std::vector<std::string> missing_timing; // "BASE has no timing" ...
  bool forced = false;                     // not comparable, compared anyway (--force)
  std::vector<std::string> correctness_regressions;
  std::vector<FigureComparison> figures;
  int exit_code = 0;
  std::string result;                      // one line: the exit code's meaning for these reports
  nlohmann::ordered_json base_id, new_id;  // solution, disposition, worst error, created_utc, schema_version, unit, ...
};

/**
 * Verdict for one ratio interval, given a slowdown threshold T = 1 + max_slowdown_pct / 100:
 *   SLOWER  p < alpha and the whole interval above T (a slowdown beyond the threshold, for sure);
 *   FASTER  p < alpha and the whole interval below 1 / T (a speedup beyond the same margin);
 *   SAME    the whole interval inside [1 / T, T]: any change is within the threshold;
 *   UNSURE  anything else: the interval straddles T or 1 / T, or it lies beyond one of them while
 *           the rank test does not find a difference; more samples are needed to tell.
 */
std::string classify(const RatioCI& ci, const MannWhitney& mwu, const CompareOptions& opt);

/**
 * Samples per report that would settle an UNSURE figure: the standard two-sample size formula on
 * the log ratio (e.g. Chow, Shao & Wang, Sample Size Calculations in Clinical Research, sec. 3.2).
 * The bootstrap interval gives the standard error, se = (log hi - log lo) / (2 z_{1-alpha/2}); the
 * distance to the threshold in the way is d = |log ratio - log threshold|. For the interval to
 * clear the threshold with probability `power`, d must be (z_{1-alpha/2} + z_power) standard errors,
 * and se shrinks as 1/sqrt(n), so n' = n ((z_{1-alpha/2} + z_power) se / d)^2. Returns the factor
 * n'/n, or nullopt when d is 0 or the factor is over 10^4 (no realistic run settles it).
 */
std::optional<double> sample_factor(const RatioCI& ci, double threshold, double alpha, double power);

/** Values the bootstrap may draw for one figure (resamples x both reports' samples): a grade writes
 *  ~32 samples a round, so 2000 resamples over 100,000 samples is far beyond any honest pair, and a
 *  million-sample report (a newcomer's, 2026-12-06) took 129 s to compare. */
inline constexpr double kMaxBootstrapDraws = 2e8;

/**
 * Why `base` and `neu` cannot be compared as given, "" when they can: a figure whose median is not
 * its samples' (figure_problem: an edited report), or more samples than the bootstrap's bound
 * (kMaxBootstrapDraws at `opt.resamples`). The paths only name the reports in the message. Shared
 * by `nibble compare` and `nibble report html REPORT BASE`, which draw the same verdicts.
 */
std::string comparison_input_problem(const ReportView& base, const ReportView& neu, const CompareOptions& opt,
                                     const std::string& base_path, const std::string& new_path);

/** Compares two reports (read_report_view). Never throws for report content. */
Comparison compare_reports(const ReportView& base, const ReportView& neu, const CompareOptions& opt,
                           const std::string& base_label = "BASE", const std::string& new_label = "NEW");

/** The table `nibble compare` prints: identity of both reports, one row per figure, the result. */
std::string format_comparison(const Comparison& c);

/** The same as JSON (schema "nibble.compare"), what `nibble compare --json` prints. */
nlohmann::ordered_json comparison_json(const Comparison& c);

/**
 * `nibble compare` itself: loads both files, compares, prints the table (or the JSON with
 * `as_json`) on stdout and problems on stderr, and returns a CompareExit.
 */
int compare_files(const std::string& base_path, const std::string& new_path, const CompareOptions& opt, bool as_json);

}  // namespace nibble
