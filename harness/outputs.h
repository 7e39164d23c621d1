// outputs.h: one comparison of a candidate's outputs with the reference's, for every task.
#pragma once

#include <map>
#include <nlohmann/json.hpp>
#include <string>

#include "fixtures/safetensors.h"

namespace nibble {

/** Worst errors over everything compared so far. NaN sticks (a NaN/Inf output). */
struct ErrorTally {
  int compared = 0;                       // tensors compared
  int nonfinite = 0;                      // candidate tensors holding NaN/Inf
  double worst = 0, worst_elem = 0;
  std::map<std::string, double> by_output;       // output name (after "<call>.") -> worst relative error
  std::map<std::string, double> elem_by_output;  // output name -> worst element error
  void add(const std::string& output, double rel_err, double elem_err);
  /** Everything `o` saw, as if added here. */
  void merge(const ErrorTally& o);
  /** "logits 0.12, k 0.003, v 0.002": the worst per output, for a reason line. */
  std::string where() const;
};

/** Relative and element error of one tensor pair (fp64): ||c - r||_2 / ||r||_2 and
 *  max |c - r| / max |r|; both NaN when c holds a non-finite value. Tensors are F32 or BF16. */
struct TensorErrors {
  double rel_err = 0, elem_err = 0;
};
TensorErrors tensor_errors(const SafetensorsFile& cand, const SafetensorsFile& ref, const std::string& name);

/**
 * Every tensor of `ref` named `<call>.<output>` whose call starts with `call_prefix` ("call" for
 * the checked calls, "timed" for the re-checked timed ones) against the candidate's tensor of the
 * same name: same dtype and shape, else std::runtime_error naming the tensor. Returns
 * [{call, rel_err (the worst of its outputs), outputs: {output: {rel_err, elem_err}}}] (null for
 * NaN), each added to `tally`.
 */
nlohmann::ordered_json compare_outputs(const SafetensorsFile& cand, const SafetensorsFile& ref, const std::string& call_prefix,
                                       ErrorTally& tally);

/** NaN as JSON null (a report's spelling of a non-finite error). */
nlohmann::ordered_json num_or_null(double v);

}  // namespace nibble
