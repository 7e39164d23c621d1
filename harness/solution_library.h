// solution_library.h: a solution shared object opened with dlopen and checked against the ABI.
//
// Only child processes construct one: the grader's parent process never loads a candidate.
#pragma once

#include <stdexcept>
#include <string>

#include "nibble/nibble.h"

namespace nibble {

/** Why a solution could not be loaded; maps onto a grade disposition. */
struct LoadError : std::runtime_error {
  enum Kind { NotFound, NotLoadable, MissingSymbol, AbiMismatch } kind;
  LoadError(Kind k, const std::string& what) : std::runtime_error(what), kind(k) {}
};

class SolutionLibrary {
 public:
  /** dlopen(path, RTLD_NOW | RTLD_LOCAL), resolve the decode entry points, compare
   *  nibble_abi_version() with NIBBLE_ABI_VERSION. Throws LoadError saying what to fix. */
  explicit SolutionLibrary(const std::string& path);
  ~SolutionLibrary();
  SolutionLibrary(const SolutionLibrary&) = delete;
  SolutionLibrary& operator=(const SolutionLibrary&) = delete;

  const std::string& path() const { return path_; }
  /** nibble_solution_name() if exported, else the file name. */
  const std::string& name() const { return name_; }
  /** What the optional export `const char* nibble_reference_numerics(void)` says of the
   *  solution's arithmetic (the reference states its cuBLAS math mode and TF32 state); "" if absent. */
  const std::string& numerics() const { return numerics_; }

  /** An optional export, or nullptr (e.g. the reference's nibble_reference_set_variant). */
  void* optional_symbol(const char* name) const;

  nibble_decode_build_model_fn build_model = nullptr;
  nibble_decode_step_fn decode_step = nullptr;
  nibble_decode_teardown_fn teardown = nullptr;

 private:
  std::string path_, name_, numerics_;
  void* handle_ = nullptr;
};

}  // namespace nibble
