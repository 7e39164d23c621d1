// stats.cpp
#include "harness/stats.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <stdexcept>

#include "fixtures/bf16.h"

namespace nibble {

double quantile_sorted(const std::vector<double>& s, double p) {
  if (s.empty()) throw std::invalid_argument("quantile of an empty sample set");
  const double h = (double(s.size()) - 1.0) * p;
  const size_t lo = size_t(std::floor(h));
  const size_t hi = std::min(lo + 1, s.size() - 1);
  return s[lo] + (h - double(lo)) * (s[hi] - s[lo]);
}

Summary summarize(std::vector<double> x) {
  if (x.empty()) throw std::invalid_argument("summary of an empty sample set");
  std::sort(x.begin(), x.end());
  Summary s;
  s.n = x.size();
  s.min = x.front();
  s.max = x.back();
  s.median = quantile_sorted(x, 0.5);
  s.q1 = quantile_sorted(x, 0.25);
  s.q3 = quantile_sorted(x, 0.75);
  s.mean = std::accumulate(x.begin(), x.end(), 0.0) / double(x.size());
  if (x.size() > 1) {
    double ss = 0;
    for (double v : x) ss += (v - s.mean) * (v - s.mean);
    s.stdev = std::sqrt(ss / double(x.size() - 1));
  }
  return s;
}

nlohmann::ordered_json summary_json(const Summary& s, const std::vector<double>* samples) {
  nlohmann::ordered_json j;
  j["median"] = s.median;
  j["q1"] = s.q1;
  j["q3"] = s.q3;
  j["min"] = s.min;
  j["max"] = s.max;
  j["mean"] = s.mean;
  j["stdev"] = s.stdev;
  j["n"] = s.n;
  if (samples) j["samples"] = *samples;
  return j;
}

namespace {
template <class Out, class Ref>
double rel_err(const Out& out, const Ref& ref, size_t n) {
  double num = 0, den = 0;
  for (size_t i = 0; i < n; ++i) {
    const double o = out(i), r = ref(i);
    if (!std::isfinite(o)) return std::numeric_limits<double>::quiet_NaN();
    num += (o - r) * (o - r);
    den += r * r;
  }
  if (den == 0) return num == 0 ? 0.0 : std::numeric_limits<double>::infinity();
  return std::sqrt(num) / std::sqrt(den);
}
}  // namespace

double relative_error(const float* out, const double* ref, size_t n) {
  return rel_err([&](size_t i) { return double(out[i]); }, [&](size_t i) { return ref[i]; }, n);
}

double relative_error(const float* out, const float* ref, size_t n) {
  return rel_err([&](size_t i) { return double(out[i]); }, [&](size_t i) { return double(ref[i]); }, n);
}

double relative_error(const double* out, const double* ref, size_t n) {
  return rel_err([&](size_t i) { return out[i]; }, [&](size_t i) { return ref[i]; }, n);
}

double relative_error_bf16(const uint16_t* out, const uint16_t* ref, size_t n) {
  return rel_err([&](size_t i) { return double(bf16_to_f32(out[i])); },
                 [&](size_t i) { return double(bf16_to_f32(ref[i])); }, n);
}

namespace {
template <class Out, class Ref>
double elem_err(const Out& out, const Ref& ref, size_t n) {
  double diff = 0, top = 0;
  for (size_t i = 0; i < n; ++i) {
    const double o = out(i), r = ref(i);
    if (!std::isfinite(o)) return std::numeric_limits<double>::quiet_NaN();
    diff = std::max(diff, std::fabs(o - r));
    top = std::max(top, std::fabs(r));
  }
  if (top == 0) return diff == 0 ? 0.0 : std::numeric_limits<double>::infinity();
  return diff / top;
}
}  // namespace

double element_error(const double* out, const double* ref, size_t n) {
  return elem_err([&](size_t i) { return out[i]; }, [&](size_t i) { return ref[i]; }, n);
}

double element_error(const float* out, const double* ref, size_t n) {
  return elem_err([&](size_t i) { return double(out[i]); }, [&](size_t i) { return ref[i]; }, n);
}

double element_error_bf16(const uint16_t* out, const uint16_t* ref, size_t n) {
  return elem_err([&](size_t i) { return double(bf16_to_f32(out[i])); }, [&](size_t i) { return double(bf16_to_f32(ref[i])); }, n);
}

bool all_finite(const float* x, size_t n) {
  for (size_t i = 0; i < n; ++i)
    if (!std::isfinite(x[i])) return false;
  return true;
}

}  // namespace nibble
