// compare.cpp: `nibble compare` (see compare.h for the statistics, the verdicts and the exit codes).
#include "fixtures/safetensors.h"
#include "harness/compare.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iostream>
#include <limits>
#include <sstream>
#include <stdexcept>

#include "harness/report_view.h"
#include "harness/stats.h"

namespace nibble {

using json = nlohmann::ordered_json;

// ---------------------------------------------------------------------------------------------
// Statistics

double normal_cdf(double z) { return 0.5 * std::erfc(-z / std::sqrt(2.0)); }

double normal_quantile(double p) {
  if (!(p > 0 && p < 1)) throw std::invalid_argument("normal_quantile: p must be in (0, 1), got " + fmt_g(p, 17));
  // Upper half by symmetry: 1 - p is exact there (Sterbenz), while Phi(x) - p below would cancel.
  if (p > 0.5) return -normal_quantile(1 - p);
  // P. J. Acklam, "An algorithm for computing the inverse normal cumulative distribution function"
  // (2003): rational approximations in a central region and two tails.
  static const double a[] = {-3.969683028665376e+01, 2.209460984245205e+02, -2.759285104469687e+02,
                             1.383577518672690e+02,  -3.066479806614716e+01, 2.506628277459239e+00};
  static const double b[] = {-5.447609879822406e+01, 1.615858368580409e+02, -1.556989798598866e+02,
                             6.680131188771972e+01,  -1.328068155288572e+01};
  static const double c[] = {-7.784894002430293e-03, -3.223964580411365e-01, -2.400758277161838e+00,
                             -2.549732539343734e+00, 4.374664141464968e+00,  2.938163982698783e+00};
  static const double d[] = {7.784695709041462e-03, 3.224671290700398e-01, 2.445134137142996e+00,
                             3.754408661907416e+00};
  const double p_low = 0.02425;
  double x;
  if (p < p_low) {
    const double q = std::sqrt(-2 * std::log(p));
    x = (((((c[0] * q + c[1]) * q + c[2]) * q + c[3]) * q + c[4]) * q + c[5]) /
        ((((d[0] * q + d[1]) * q + d[2]) * q + d[3]) * q + 1);
  } else if (p <= 1 - p_low) {
    const double q = p - 0.5, r = q * q;
    x = (((((a[0] * r + a[1]) * r + a[2]) * r + a[3]) * r + a[4]) * r + a[5]) * q /
        (((((b[0] * r + b[1]) * r + b[2]) * r + b[3]) * r + b[4]) * r + 1);
  } else {
    const double q = std::sqrt(-2 * std::log1p(-p));
    x = -(((((c[0] * q + c[1]) * q + c[2]) * q + c[3]) * q + c[4]) * q + c[5]) /
        ((((d[0] * q + d[1]) * q + d[2]) * q + d[3]) * q + 1);
  }
  // One Halley step on Phi(x) - p (Acklam's refinement): from 1e-9 to full double precision.
  const double e = 0.5 * std::erfc(-x / std::sqrt(2.0)) - p;
  const double u = e * std::sqrt(2 * M_PI) * std::exp(x * x / 2);
  return x - u / (1 + x * u / 2);
}

MannWhitney mann_whitney_u(const std::vector<double>& x, const std::vector<double>& y) {
  if (x.empty() || y.empty()) throw std::invalid_argument("mann_whitney_u: both samples need at least one value");
  const size_t n1 = x.size(), n2 = y.size(), n = n1 + n2;
  std::vector<std::pair<double, size_t>> all;  // (value, index into x ++ y)
  all.reserve(n);
  for (size_t i = 0; i < n1; ++i) all.push_back({x[i], i});
  for (size_t i = 0; i < n2; ++i) all.push_back({y[i], n1 + i});
  std::sort(all.begin(), all.end());
  // Average ranks of tie groups (1-based), and sum over the groups of t^3 - t.
  double r1 = 0, tie_term = 0;
  for (size_t i = 0; i < n;) {
    size_t j = i;
    while (j < n && all[j].first == all[i].first) ++j;
    const double t = double(j - i);
    const double avg_rank = (double(i + 1) + double(j)) / 2;
    for (size_t k = i; k < j; ++k)
      if (all[k].second < n1) r1 += avg_rank;
    tie_term += t * t * t - t;
    i = j;
  }
  MannWhitney m;
  const double dn1 = double(n1), dn2 = double(n2), dn = double(n);
  m.u1 = r1 - dn1 * (dn1 + 1) / 2;
  const double u = std::max(m.u1, dn1 * dn2 - m.u1);
  const double mu = dn1 * dn2 / 2;
  const double var = dn > 1 ? dn1 * dn2 / 12 * ((dn + 1) - tie_term / (dn * (dn - 1))) : 0;
  if (!(var > 0)) {  // every value equal (or n == 1... impossible with two non-empty samples): no evidence
    m.z = 0;
    m.p = 1;
    return m;
  }
  m.z = (u - mu - 0.5) / std::sqrt(var);
  // Upper tail through erfc, not 1 - Phi, so tiny p-values (1e-30 for clearly different kernels)
  // keep their digits.
  m.p = std::min(1.0, 2 * 0.5 * std::erfc(m.z / std::sqrt(2.0)));
  return m;
}

uint64_t SplitMix64::next() {
  uint64_t z = (state_ += 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  return z ^ (z >> 31);
}

uint64_t SplitMix64::below(uint64_t n) {
  if (n == 0) throw std::invalid_argument("SplitMix64::below(0)");
  // Accept r only below the largest multiple of n, so r % n is exactly uniform.
  const uint64_t limit = std::numeric_limits<uint64_t>::max() - std::numeric_limits<uint64_t>::max() % n;
  uint64_t r;
  do r = next();
  while (r >= limit);
  return r % n;
}

double median_of(std::vector<double> x) {
  if (x.empty()) throw std::invalid_argument("median of an empty sample set");
  const size_t n = x.size(), mid = n / 2;
  std::nth_element(x.begin(), x.begin() + mid, x.end());
  const double hi = x[mid];
  if (n % 2) return hi;
  const double lo = *std::max_element(x.begin(), x.begin() + mid);
  return lo + 0.5 * (hi - lo);
}

RatioCI bootstrap_ratio_of_medians(const std::vector<double>& x, const std::vector<double>& y, double alpha,
                                   int resamples, uint64_t seed) {
  if (x.empty() || y.empty()) throw std::invalid_argument("bootstrap: both samples need at least one value");
  if (!(alpha > 0 && alpha < 1)) throw std::invalid_argument("bootstrap: alpha must be in (0, 1)");
  if (resamples < 1) throw std::invalid_argument("bootstrap: resamples must be >= 1");
  RatioCI ci;
  const double mx = median_of(x), my = median_of(y);
  if (!(mx > 0) || !(my > 0)) throw std::invalid_argument("bootstrap: medians must be positive (times)");
  ci.ratio = my / mx;
  ci.level = 1 - alpha;
  ci.resamples = resamples;
  ci.seed = seed;
  SplitMix64 rng(seed);
  std::vector<double> rx(x.size()), ry(y.size()), ratios(static_cast<size_t>(resamples));
  for (int b = 0; b < resamples; ++b) {
    for (double& v : rx) v = x[rng.below(x.size())];
    for (double& v : ry) v = y[rng.below(y.size())];
    ratios[size_t(b)] = median_of(ry) / median_of(rx);
  }
  std::sort(ratios.begin(), ratios.end());
  ci.lo = quantile_sorted(ratios, alpha / 2);
  ci.hi = quantile_sorted(ratios, 1 - alpha / 2);
  return ci;
}

std::string classify(const RatioCI& ci, const MannWhitney& mwu, const CompareOptions& opt) {
  const double t = 1 + opt.max_slowdown_pct / 100;
  const bool significant = mwu.p < opt.alpha;
  if (significant && ci.lo > t) return "SLOWER";
  if (significant && ci.hi < 1 / t) return "FASTER";
  if (ci.lo >= 1 / t && ci.hi <= t) return "SAME";
  return "UNSURE";
}

std::optional<double> sample_factor(const RatioCI& ci, double threshold, double alpha, double power) {
  const double z_a = normal_quantile(1 - alpha / 2), z_b = normal_quantile(power);
  const double se = (std::log(ci.hi) - std::log(ci.lo)) / (2 * z_a);
  const double d = std::fabs(std::log(ci.ratio) - std::log(threshold));
  if (!(d > 0) || !(se > 0)) return std::nullopt;
  const double k = std::pow((z_a + z_b) * se / d, 2);
  if (!(k <= 1e4)) return std::nullopt;
  return k;
}

// ---------------------------------------------------------------------------------------------
// Comparison of two reports

namespace {

/** A report's schema version for a message: as written, or "1 (none written)". */
std::string schema_text(const ReportView& r) {
  return r.schema_version.empty() ? std::to_string(r.schema_major) + " (none written)" : r.schema_version;
}

/** "seed 0 sha256 5f78..., seed 1 ..." of fixtures[], in report order. */
std::vector<std::string> fixture_ids(const ReportView& r) {
  std::vector<std::string> ids;
  for (const FixtureView& f : r.fixtures)
    ids.push_back("seed " + f.seed + " " + (f.file_sha256.empty() ? std::string("(no SHA-256)") : f.file_sha256));
  return ids;
}

std::string join(const std::vector<std::string>& v, const std::string& sep) {
  std::string s;
  for (size_t i = 0; i < v.size(); ++i) s += (i ? sep : "") + v[i];
  return s;
}

std::string err_str(double e) { return std::isnan(e) ? "NaN" : fmt_g(e); }

json identity(const ReportView& r, const std::string& label) {
  json id;
  id["file"] = label;
  id["solution"] = r.solution_name;
  id["solution_sha256"] = r.solution_sha256;
  id["created_utc"] = r.created_utc;
  id["commit"] = r.git_commit ? json(*r.git_commit) : json(nullptr);
  id["task"] = r.task;
  id["config"] = r.config;
  id["gpu"] = r.device_name;
  id["disposition"] = r.disposition;
  id["reason"] = r.reason;
  id["worst_rel_err"] = std::isnan(r.worst_rel_err) ? json(nullptr) : json(r.worst_rel_err);
  id["gate"] = std::isnan(r.gate) ? json(nullptr) : json(r.gate);
  id["schema_version"] = schema_text(r);
  id["unit"] = r.unit;
  return id;
}

/** `v` with `decimals` decimals, or in %.4g from 1e6 on (an edited report's 1e308 printed 300
 *  digits); a '+' before it when `sign` and v >= 0. */
std::string fixed(double v, int decimals, bool sign = false) {
  char b[64];
  if (std::fabs(v) < 1e6)
    std::snprintf(b, sizeof b, "%.*f", decimals, v);
  else
    std::snprintf(b, sizeof b, "%.4g", v);
  return (sign && v >= 0 ? "+" : "") + std::string(b);
}

std::string pct(double ratio) { return fixed(100 * (ratio - 1), 1, true) + "%"; }

}  // namespace

Comparison compare_reports(const ReportView& base, const ReportView& neu, const CompareOptions& opt, const std::string& base_label,
                           const std::string& new_label) {
  Comparison c;
  c.options = opt;
  c.base_label = base_label;
  c.new_label = new_label;
  c.base_id = identity(base, base_label);
  c.new_id = identity(neu, new_label);

  // 0. Can the figures mean the same thing at all? Version 1 and version 2 reports were timed under
  // different protocols, and a token is not a call: --force cannot make these comparable.
  // Issue 19 asked for exit 2 here, but 2 is the CI contract's correctness regression (compare.h):
  // a pipeline that fails a build on 2 would blame the candidate for an old baseline. A baseline
  // that cannot be compared is what 3 means.
  if (base.schema_major != neu.schema_major) {
    // The older one is the one to grade again, whichever side it is on.
    const bool base_older = base.schema_major < neu.schema_major;
    const std::string old_side = base_older ? "BASE" : "NEW";
    c.refused.push_back("schema: BASE is a version " + schema_text(base) + " report, NEW a version " + schema_text(neu) +
                        " one; their timing protocols differ, so their figures would be misread. Re-grade " + old_side +
                        " with this nibble (nibble grade ... --out " + old_side + ".json) and compare again");
  }
  if (!base.unit.empty() && !neu.unit.empty() && base.unit != neu.unit)
    c.refused.push_back("unit: a BASE sample is one " + base.unit + " of " + base.task + ", a NEW sample one " + neu.unit + " of " +
                        neu.task + (base.task != neu.task ? ": reports of different tasks" : ""));
  // Timed in different modes: the figures are not comparable (--force does not apply), but the
  // correctness is, so a correctness regression still says 2 (below).
  // (A report without timing has no mode: it is missing timing, below.)
  std::vector<std::string> timing_refused;
  const bool both_timed = base.timed && neu.timed;
  if (both_timed && base.clock != neu.clock)
    timing_refused.push_back("clock: BASE was graded by " + std::string(base.clock == "wall" ? "the grader's clock" : "GPU span") +
                             ", NEW by " + (neu.clock == "wall" ? "the grader's clock" : "GPU span") +
                             " (nibble grade --clock): grade both with the same --clock");
  // Only where both figures depend on it: a report whose timed calls launched no CUDA graph reads the
  // same in either mode (figure_graph_records).
  if (const std::string b = figure_graph_records(base), n = figure_graph_records(neu);
      both_timed && !b.empty() && !n.empty() && b != n) {
    std::string why = "graph records: BASE recorded a CUDA graph's launch by " + b + ", NEW by " + n +
                      " (nibble grade --graph-records; per-node records add GPU time to every node): grade both with the "
                      "same --graph-records";
    for (const auto& [side, r] : {std::pair<const char*, const ReportView*>{"BASE", &base}, {"NEW", &neu}})
      if (r->graph_records == "nodes" && r->graph_launches_audited < 0)
        why += std::string(" (") + side + ", a report before schema 2.7, does not say whether its timed calls launched a "
               "CUDA graph: grade it again, or the other with --graph-records nodes)";
    timing_refused.push_back(why);
  }
  if (!c.refused.empty()) {
    c.exit_code = kCompareNotComparable;
    c.result = "not comparable: " + join(c.refused, "; ") + " (--force does not apply)";
    return c;
  }

  // 1. Same measurement? Task, config, fixture bytes and GPU model must match.
  auto differ = [&](const std::string& what, const std::string& b, const std::string& n) {
    if (b != n) c.not_comparable.push_back(what + ": BASE " + (b.empty() ? "(none)" : b) + ", NEW " + (n.empty() ? "(none)" : n));
  };
  differ("task", base.task, neu.task);
  differ("config", base.config, neu.config);
  // Each side's list in brackets: "BASE [seed 0 ..., seed 1 ...], NEW [seed 0 ...]" says whose seeds are whose.
  differ("fixtures", "[" + join(fixture_ids(base), ", ") + "]", "[" + join(fixture_ids(neu), ", ") + "]");
  differ("GPU", base.device_name, neu.device_name);

  // 2. Correctness: a pass that became a fail, or an error that crossed the gate.
  if (base.disposition == "Passed" && neu.disposition != "Passed")
    c.correctness_regressions.push_back("NEW's disposition is " + neu.disposition + " (" + neu.reason + "); BASE's was Passed");
  const double bw = base.worst_rel_err, nw = neu.worst_rel_err;
  double gate = neu.gate;
  if (std::isnan(gate)) gate = base.gate;
  if (!std::isnan(gate) && !std::isnan(bw) && bw < gate && (std::isnan(nw) || nw >= gate))
    c.correctness_regressions.push_back("NEW's worst relative error " + err_str(nw) + " is at or past the gate " + fmt_g(gate) +
                                        " (BASE: " + err_str(bw) + ")");

  if (!timing_refused.empty()) {  // no figure is compared; a correctness regression is still 2
    c.refused = timing_refused;
    c.refused_timing_only = true;
    c.forced = false;  // nothing timed is compared, forced or not
    const bool measurement_differs = !c.not_comparable.empty() && !opt.force;
    c.exit_code = !measurement_differs && !c.correctness_regressions.empty() ? kCompareCorrectness : kCompareNotComparable;
    std::vector<std::string> why = timing_refused;
    if (measurement_differs) why.insert(why.begin(), c.not_comparable.begin(), c.not_comparable.end());
    c.result = c.exit_code == kCompareCorrectness
                   ? "correctness regression: " + join(c.correctness_regressions, "; ") + " (the timing is not comparable: " +
                         join(timing_refused, "; ") + ")"
                   : "not comparable: " + join(why, "; ") +
                         (measurement_differs ? " (--force compares across the first, never across clocks or record modes)"
                                              : " (--force does not apply)");
    return c;
  }

  // 3. The timed figures.
  for (const std::string& f : timed_figures()) {
    const std::vector<double>&b = timed_figure(base, f).samples, &n = timed_figure(neu, f).samples;
    if (b.empty() || n.empty()) {
      if (!b.empty() || !n.empty() || f == timed_figures().front())
        c.missing_timing.push_back("timing." + f + ": " + (b.empty() && n.empty() ? "neither report has samples"
                                                           : b.empty()           ? "BASE has no samples"
                                                                                 : "NEW has no samples"));
      continue;
    }
    FigureComparison fc;
    fc.figure = f;
    // Judged: the graded figure (the span, or the grader's clock for --clock wall reports, whose
    // GPU span is then shown only) and host wall time where the task does not call it noise.
    fc.informational = (f == "host_wall_us" && neu.host_wall_informational) || (f == "gpu_span_us" && neu.clock == "wall");
    fc.n_base = b.size();
    fc.n_new = n.size();
    fc.median_base = median_of(b);
    fc.median_new = median_of(n);
    fc.ci = bootstrap_ratio_of_medians(b, n, opt.alpha, opt.resamples, opt.seed);
    fc.mwu = mann_whitney_u(b, n);
    fc.verdict = classify(fc.ci, fc.mwu, opt);
    const bool too_few = fc.n_base < kMinCompareSamples || fc.n_new < kMinCompareSamples;
    if (too_few) fc.verdict = "UNSURE";
    const double t = 1 + opt.max_slowdown_pct / 100;
    char line[256];
    if (too_few) {
      std::snprintf(line, sizeof line, "%zu and %zu samples: fewer than %zu on a side, too few for an interval to mean anything",
                    fc.n_base, fc.n_new, kMinCompareSamples);
      fc.samples_needed_base = std::max(fc.n_base, kMinCompareSamples);
      fc.samples_needed_new = std::max(fc.n_new, kMinCompareSamples);
    } else if (fc.verdict == "SLOWER" || fc.verdict == "FASTER") {
      const bool slower = fc.verdict == "SLOWER";
      std::snprintf(line, sizeof line, "NEW takes %s time; the whole %g%% interval [%s, %s] is %s the %s threshold and p = %.2g < %g",
                    pct(fc.ci.ratio).c_str(), 100 * fc.ci.level, pct(fc.ci.lo).c_str(), pct(fc.ci.hi).c_str(),
                    slower ? "above" : "below", pct(slower ? t : 1 / t).c_str(), fc.mwu.p, opt.alpha);
    } else if (fc.verdict == "SAME") {
      std::snprintf(line, sizeof line, "the %g%% interval [%s, %s] lies within the thresholds [%s, %s]", 100 * fc.ci.level,
                    pct(fc.ci.lo).c_str(), pct(fc.ci.hi).c_str(), pct(1 / t).c_str(), pct(t).c_str());
    } else {
      // The threshold in the way: one the interval straddles (the nearer when it straddles both);
      // when the interval clears them but the rank test finds no difference, "no change" (1).
      std::vector<double> in_way;
      for (double thr : {t, 1 / t})
        if (fc.ci.lo < thr && fc.ci.hi > thr) in_way.push_back(thr);
      double thr = 1;
      if (!in_way.empty()) {
        thr = in_way.front();
        for (double v : in_way)
          if (std::fabs(std::log(fc.ci.ratio / v)) < std::fabs(std::log(fc.ci.ratio / thr))) thr = v;
      }
      const auto k = sample_factor(fc.ci, thr, opt.alpha, opt.power);
      if (k) {
        const double kk = std::max(*k, 1.0);
        fc.samples_needed_base = size_t(std::ceil(kk * double(fc.n_base)));
        fc.samples_needed_new = size_t(std::ceil(kk * double(fc.n_new)));
      }
      if (in_way.empty())
        std::snprintf(line, sizeof line, "the %g%% interval [%s, %s] is beyond the threshold but the rank test gives p = %.2g >= %g",
                      100 * fc.ci.level, pct(fc.ci.lo).c_str(), pct(fc.ci.hi).c_str(), fc.mwu.p, opt.alpha);
      else
        std::snprintf(line, sizeof line, "the %g%% interval [%s, %s] straddles the %s threshold %s: too noisy to tell",
                      100 * fc.ci.level, pct(fc.ci.lo).c_str(), pct(fc.ci.hi).c_str(), thr > 1 ? "slowdown" : "speedup",
                      pct(thr).c_str());
    }
    fc.why = line;
    c.figures.push_back(fc);
  }

  // 4. One exit code (precedence in compare.h).
  const bool any_slower = std::any_of(c.figures.begin(), c.figures.end(),
                                      [](const FigureComparison& f) { return f.verdict == "SLOWER" && !f.informational; });
  const bool any_unsure = std::any_of(c.figures.begin(), c.figures.end(), [](const FigureComparison& f) { return f.verdict == "UNSURE"; });
  c.forced = opt.force && (!c.not_comparable.empty() || !c.missing_timing.empty());
  if (!c.not_comparable.empty() && !opt.force) {
    c.exit_code = kCompareNotComparable;
    c.result = "not comparable: " + join(c.not_comparable, "; ") + " (--force compares anyway)";
  } else if (!c.correctness_regressions.empty()) {
    c.exit_code = kCompareCorrectness;
    c.result = "correctness regression: " + join(c.correctness_regressions, "; ");
  } else if (!c.missing_timing.empty() && !opt.force) {
    c.exit_code = kCompareNotComparable;
    c.result = "not comparable: " + join(c.missing_timing, "; ") + " (--force compares what there is)";
  } else if (c.figures.empty()) {
    // --force cannot make "no slowdown" out of nothing: a CI job that lost its timing must not pass.
    c.exit_code = kCompareNotComparable;
    c.result = "nothing to compare: no timed figure is in both reports (" + join(c.missing_timing, "; ") + ")";
  } else if (any_slower) {
    c.exit_code = kCompareSlower;
    std::vector<std::string> s;
    for (const auto& f : c.figures)
      if (f.verdict == "SLOWER" && !f.informational) s.push_back(f.figure + " " + pct(f.ci.ratio));
    c.result = "slowdown beyond " + fmt_g(opt.max_slowdown_pct) + "%: " + join(s, ", ");
  } else {
    c.exit_code = kCompareOk;
    c.result = any_unsure ? "no significant slowdown shown, but some figures are UNSURE (more samples needed)"
                          : "no significant slowdown beyond " + fmt_g(opt.max_slowdown_pct) + "%";
  }
  return c;
}

std::string format_comparison(const Comparison& c) {
  std::ostringstream o;
  char line[512];  // its numbers in %g from 1e6 on (fixed): a line is never cut
  const json& b = c.base_id;
  const json& n = c.new_id;
  o << "\nnibble compare  " << b["task"].get<std::string>() << " / " << b["config"].get<std::string>() << "  on "
    << (b["gpu"].get<std::string>().empty() ? "?" : b["gpu"].get<std::string>()) << "\n";
  for (const auto* id : {&b, &n}) {
    const json& r = *id;
    o << "  " << (id == &b ? "base " : "new  ") << "  " << r["solution"].get<std::string>() << "  "
      << r["disposition"].get<std::string>() << ", worst rel err "
      << (r["worst_rel_err"].is_null() ? std::string("NaN") : fmt_g(r["worst_rel_err"].get<double>())) << "  ("
      << r["file"].get<std::string>() << (r["created_utc"].get<std::string>().empty() ? "" : ", " + r["created_utc"].get<std::string>())
      << ")\n";
  }
  if (!c.refused.empty())
    o << "\n  NOT COMPARABLE (--force does not apply):\n";
  for (const auto& s : c.refused) o << "    - " << s << "\n";
  if (c.forced)
    o << "\n  FORCED (--force): these reports are not comparable, compared anyway:\n";
  else if (!c.not_comparable.empty() || !c.missing_timing.empty())
    o << "\n  NOT COMPARABLE:\n";
  for (const auto& s : c.not_comparable) o << "    - " << s << "\n";
  for (const auto& s : c.missing_timing) o << "    - " << s << "\n";
  for (const auto& s : c.correctness_regressions) o << "\n  CORRECTNESS REGRESSION: " << s << "\n";
  if (!c.figures.empty()) {
    const double level = 100 * (1 - c.options.alpha);
    std::snprintf(line, sizeof line, "\n  %-13s %12s %12s %9s  %-22s %9s  %s\n", "figure", "base median", "new median",
                  "new/base", (fmt_g(level) + "% CI of new/base").c_str(), "p (MWU)", "verdict");
    o << line;
    o << "  " << std::string(100, '-') << "\n";
    for (const auto& f : c.figures) {
      const std::string ci = "[" + fmt_g(f.ci.lo, 4) + ", " + fmt_g(f.ci.hi, 4) + "]";
      std::snprintf(line, sizeof line, "  %-13s %9s us %9s us %8sx  %-22s %9.2g  %s (%s)\n", f.figure.c_str(),
                    fixed(f.median_base, 1).c_str(), fixed(f.median_new, 1).c_str(), fixed(f.ci.ratio, 4).c_str(), ci.c_str(), f.mwu.p,
                    f.verdict.c_str(), pct(f.ci.ratio).c_str());
      o << line;
    }
    o << "\n";
    for (const auto& f : c.figures) {
      o << "  " << f.figure << ": " << f.verdict << ": " << f.why
        << (f.informational ? " (informational for this task: launch and sync noise, not the exit code)" : "") << "\n";
      if (f.verdict == "UNSURE") {
        if (f.samples_needed_new) {
          const size_t need = std::max(*f.samples_needed_base, *f.samples_needed_new);
          const size_t rounds = (need + 31) / 32;
          o << "    about " << *f.samples_needed_base << " (BASE) and " << *f.samples_needed_new << " (NEW) samples per report would tell, "
            << "at the observed spread (now " << f.n_base << " and " << f.n_new << "; " << rounds
            << " rounds of 32 " << sample_noun(n.value("unit", "")) << "s: nibble grade --min-rounds " << rounds << ")\n";
        } else {
          o << "    the ratio sits on the threshold: no realistic number of samples would tell\n";
        }
      }
    }
    std::snprintf(line, sizeof line,
                  "\n  threshold: a slowdown must exceed %g%% and be significant at alpha %g. Interval: percentile bootstrap of the\n"
                  "  ratio of medians, %d resamples, splitmix64 seed %llu. p: two-sided Mann-Whitney U, normal approximation with\n"
                  "  tie and continuity corrections (scipy.stats.mannwhitneyu, as google/benchmark's compare.py).\n",
                  c.options.max_slowdown_pct, c.options.alpha, c.options.resamples, (unsigned long long)c.options.seed);
    o << line;
  }
  o << "\n  result: exit " << c.exit_code << ": " << c.result << (c.forced ? "  [FORCED: not comparable, compared anyway]" : "")
    << "\n";
  return o.str();
}

json comparison_json(const Comparison& c) {
  json j;
  j["schema"] = "nibble.compare";
  j["schema_version"] = "1.0.0";
  j["base"] = c.base_id;
  j["new"] = c.new_id;
  j["options"] = {{"max_slowdown_pct", c.options.max_slowdown_pct},
                  {"alpha", c.options.alpha},
                  {"bootstrap_resamples", c.options.resamples},
                  {"bootstrap_seed", c.options.seed},
                  {"power_for_samples_needed", c.options.power},
                  {"force", c.options.force}};
  j["method"] = {{"interval", "percentile bootstrap of median(NEW)/median(BASE), independent resampling, splitmix64"},
                 {"p_value", "two-sided Mann-Whitney U, normal approximation, tie and continuity corrections"},
                 {"verdicts", "SLOWER: p < alpha and interval above 1+max_slowdown; FASTER: p < alpha and interval below "
                              "1/(1+max_slowdown); SAME: interval within both; UNSURE: otherwise"}};
  j["comparable"] = c.refused.empty() && c.not_comparable.empty() && c.missing_timing.empty();
  j["refused"] = c.refused;
  j["refused_timing_only"] = c.refused_timing_only;  // the clock or record mode alone: correctness was compared
  j["not_comparable"] = c.not_comparable;
  j["missing_timing"] = c.missing_timing;
  j["forced"] = c.forced;
  j["correctness_regressions"] = c.correctness_regressions;
  json figs = json::array();
  for (const auto& f : c.figures) {
    json fj;
    fj["figure"] = f.figure;
    fj["n_base"] = f.n_base;
    fj["n_new"] = f.n_new;
    fj["median_base_us"] = f.median_base;
    fj["median_new_us"] = f.median_new;
    fj["ratio"] = f.ci.ratio;
    fj["change_pct"] = 100 * (f.ci.ratio - 1);
    fj["ci_lo"] = f.ci.lo;
    fj["ci_hi"] = f.ci.hi;
    fj["ci_level"] = f.ci.level;
    fj["mann_whitney_u"] = f.mwu.u1;
    fj["z"] = f.mwu.z;
    fj["p_value"] = f.mwu.p;
    fj["verdict"] = f.verdict;
    fj["why"] = f.why;
    fj["sets_exit_code"] = !f.informational;
    if (f.verdict == "UNSURE") {
      fj["samples_needed_base"] = f.samples_needed_base ? json(*f.samples_needed_base) : json(nullptr);
      fj["samples_needed_new"] = f.samples_needed_new ? json(*f.samples_needed_new) : json(nullptr);
    }
    figs.push_back(fj);
  }
  j["figures"] = figs;
  j["exit_code"] = c.exit_code;
  j["result"] = c.result;
  return j;
}

std::string comparison_input_problem(const ReportView& base, const ReportView& neu, const CompareOptions& opt,
                                     const std::string& base_path, const std::string& new_path) {
  // compare tests the samples: a report whose samples are not its own figure's was edited by hand.
  for (const auto& [path, r] : {std::pair<const std::string&, const ReportView&>{base_path, base}, {new_path, neu}})
    if (const std::string p = figure_problem(r); !p.empty()) return path + ": " + p + " (regrade it)";
  for (const std::string& f : timed_figures()) {
    const size_t nb = timed_figure(base, f).samples.size(), nn = timed_figure(neu, f).samples.size();
    if (double(nb + nn) * opt.resamples > kMaxBootstrapDraws) {
      const int fits = int(kMaxBootstrapDraws / double(nb + nn));
      return "timing." + f + ": BASE holds " + std::to_string(nb) + " samples and NEW " + std::to_string(nn) + "; " +
             std::to_string(opt.resamples) + " bootstrap resamples of them would draw " + fmt_g(double(nb + nn) * opt.resamples, 4) +
             " values, over the bound of " + fmt_g(kMaxBootstrapDraws, 4) + " (a grade writes ~32 a round): " +
             (fits >= 100 ? "compare reports of fewer rounds, or pass --resamples " + std::to_string(fits) + " or fewer"
                          : std::string("no --resamples fits (the least is 100): compare reports of fewer rounds"));
    }
  }
  return "";
}

int compare_files(const std::string& base_path, const std::string& new_path, const CompareOptions& opt, bool as_json) {
  auto bad = [&](const std::string& msg) {
    std::fprintf(stderr, "nibble compare: %s\n", msg.c_str());
    if (as_json)
      std::cout << json_text(json{{"schema", "nibble.compare"}, {"schema_version", "1.0.0"}, {"exit_code", int(kCompareBadInput)},
                                  {"error", msg}},
                             2)
                << "\n";
    return int(kCompareBadInput);
  };
  if (!(opt.max_slowdown_pct >= 0) || !std::isfinite(opt.max_slowdown_pct))
    return bad("--max-slowdown must be a percentage >= 0, got " + fmt_g(opt.max_slowdown_pct));
  if (!(opt.alpha > 0 && opt.alpha < 1)) return bad("--alpha must be in (0, 1), got " + fmt_g(opt.alpha));
  ReportView base, neu;
  try {
    base = load_report_view(base_path);
    neu = load_report_view(new_path);
  } catch (const BadReport& e) {
    return bad(e.what());
  }
  if (const std::string p = comparison_input_problem(base, neu, opt, base_path, new_path); !p.empty()) return bad(p);
  const Comparison c = compare_reports(base, neu, opt, base_path, new_path);
  if (as_json)
    std::cout << json_text(comparison_json(c), 2) << "\n";
  else
    std::cout << format_comparison(c);
  std::cout.flush();
  // The reason in full on stderr beside JSON or a redirected stdout; beside text on the terminal,
  // which holds it, only that it ended so.
  if (c.exit_code == kCompareNotComparable)
    std::fprintf(stderr, "nibble compare: %s\n",
                 as_json || !isatty(STDOUT_FILENO) ? c.result.c_str() : "not comparable (exit 3): the reason is above");
  else if (c.forced)
    std::fprintf(stderr, "nibble compare: --force: compared reports that are not comparable (%s)\n",
                 join(c.not_comparable.empty() ? c.missing_timing : c.not_comparable, "; ").c_str());
  return c.exit_code;
}

}  // namespace nibble
