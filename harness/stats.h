// stats.h: summary statistics of timing samples and the relative error the gate uses.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace nibble {

/** Summary of a sample set. Quantiles use linear interpolation between order statistics
 *  (Hyndman & Fan type 7, numpy.percentile's default). stdev is the sample standard deviation
 *  (n - 1 denominator); 0 for n < 2. */
struct Summary {
  size_t n = 0;
  double median = 0, q1 = 0, q3 = 0, min = 0, max = 0, mean = 0, stdev = 0;
};

/** Throws std::invalid_argument for an empty sample set. */
Summary summarize(std::vector<double> samples);
/** Quantile p in [0, 1] of sorted samples (type 7). */
double quantile_sorted(const std::vector<double>& sorted, double p);
/** {"median":..,"q1":..,...,"n":..} plus "samples" when given. */
nlohmann::ordered_json summary_json(const Summary& s, const std::vector<double>* samples = nullptr);

/** ||out - ref||_2 / ||ref||_2 accumulated in fp64. Returns NaN when any element of `out` is NaN
 *  or Inf (that must fail the gate), +Inf when ref is all zeros and out is not. */
/** max(a, b), NaN when either is: a worst error over outputs that never hides a NaN one. */
inline double nan_max(double a, double b) { return std::isnan(a) || std::isnan(b) ? NAN : std::max(a, b); }

double relative_error(const float* out, const double* ref, size_t n);
double relative_error(const float* out, const float* ref, size_t n);
double relative_error(const double* out, const double* ref, size_t n);
/** Same for bf16 bit patterns (appended K/V). */
double relative_error_bf16(const uint16_t* out, const uint16_t* ref, size_t n);
/** The per-element error max_i |out_i - ref_i| / max_i |ref_i| in fp64: what the per-element guard
 *  bounds (a sliver of the output set to anything moves it, however small the relative error).
 *  NaN when any element of `out` is NaN or Inf; 0 when both are zero, +Inf when only ref is. */
double element_error(const double* out, const double* ref, size_t n);
double element_error(const float* out, const double* ref, size_t n);
double element_error_bf16(const uint16_t* out, const uint16_t* ref, size_t n);
/** True when every element is finite. */
bool all_finite(const float* x, size_t n);

}  // namespace nibble
