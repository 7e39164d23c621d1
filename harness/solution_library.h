// solution_library.h: a solution shared object opened with dlopen and checked against the ABI.
//
// Only child processes construct one: the grader's parent process never loads a candidate.
#pragma once

#include <stdexcept>
#include <string>

#include "nibble/nibble.h"
#include "nibble/nibble_gemm.h"

namespace nibble {

/** Why a solution could not be loaded; maps onto a grade disposition. */
struct LoadError : std::runtime_error {
  enum Kind { NotFound, NotLoadable, MissingSymbol, AbiMismatch } kind;
  /** The library exports the other task family's ABI instead (a GEMM solution graded under the
   *  decode task, or the reverse): the caller, which knows the tasks, names those it is for. */
  bool other_abi = false;
  LoadError(Kind k, const std::string& what, bool other = false) : std::runtime_error(what), kind(k), other_abi(other) {}
};

class SolutionLibrary {
 public:
  /** Which task family's entry points to resolve: the decode task's (nibble.h) or the FP4 GEMM
   *  tasks' (nibble_gemm.h). */
  enum class Abi { Decode, Gemm };

  /** dlopen(path, RTLD_NOW | RTLD_LOCAL), resolve the decode entry points, compare
   *  nibble_abi_version() with NIBBLE_ABI_VERSION. Throws LoadError saying what to fix. */
  explicit SolutionLibrary(const std::string& path, Abi abi = Abi::Decode);
  ~SolutionLibrary();
  SolutionLibrary(const SolutionLibrary&) = delete;
  SolutionLibrary& operator=(const SolutionLibrary&) = delete;

  const std::string& path() const { return path_; }
  /** nibble_solution_name() if exported, else the file name. */
  const std::string& name() const { return name_; }
  /** What the optional export `const char* nibble_reference_numerics(void)` says of the
   *  solution's arithmetic (the reference states its cuBLAS math mode and TF32 state); "" if absent. */
  const std::string& numerics() const { return numerics_; }

  /** Reads nibble_solution_name, nibble_reference_numerics, nibble_gemm_output_dtype and
   *  nibble_gemm_int4_layout again: a library that hosts a module (the Python shims) knows them only
   *  once the module is loaded. Throws LoadError (NotLoadable) for an output dtype other than F32 or
   *  BF16 or an int4 layout that is not one of NIBBLE_INT4_LAYOUT_*. */
  void refresh();

  /** An optional export, or nullptr (e.g. the reference's nibble_reference_set_variant). */
  void* optional_symbol(const char* name) const;

  nibble_decode_build_model_fn build_model = nullptr;
  nibble_decode_step_fn decode_step = nullptr;
  nibble_decode_teardown_fn teardown = nullptr;

  nibble_gemm_prepare_fn gemm_prepare = nullptr;
  nibble_gemm_run_fn gemm_run = nullptr;
  nibble_gemm_teardown_fn gemm_teardown = nullptr;
  int32_t gemm_output_dtype = NIBBLE_GEMM_OUTPUT_F32;  // what nibble_gemm_output_dtype() asked for
  int32_t gemm_int4_layout = NIBBLE_INT4_LAYOUT_PLAIN;  // what nibble_gemm_int4_layout() asked for

 private:
  std::string path_, name_, numerics_;
  void* handle_ = nullptr;
  Abi abi_;
};

/** A solution entry point returned something other than NIBBLE_OK. */
struct SolutionError : std::runtime_error {
  nibble_status status;
  SolutionError(nibble_status s, const std::string& what) : std::runtime_error(what), status(s) {}
};

/** "OK", "INVALID_ARGUMENT", "NOT_SUPPORTED", "CUDA", "OUT_OF_MEMORY", "INTERNAL". */
const char* status_name(nibble_status s);

/** Throws SolutionError "<call> returned <status>: <the solution's message>" unless s is NIBBLE_OK. */
void check_status(nibble_status s, const nibble_error& err, const char* call);

}  // namespace nibble
