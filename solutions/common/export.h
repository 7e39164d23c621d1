// export.h: a solution's C ABI exports, written by one macro from three C++ functions.
//
//   NIBBLE_DECODE_SOLUTION("unfused", build, step, teardown);          // include/nibble/nibble.h
//   NIBBLE_GEMM_SOLUTION("gemm-baseline", prepare, run, teardown);     // include/nibble/nibble_gemm.h
//
// The functions are plain C++ over the solution's own handle type: they may throw (AbiFailure with
// a status, SOL_CUDA's CUDA errors, std::bad_alloc, any std::exception) and never see a void*. The
// macro writes the extern "C" entry points around them, each body inside abi_guard() (abi_util.h),
// so no exception crosses the boundary, and does once what every solution wrote by hand: a NULL
// handle on any failure of build/prepare, a NULL handle refused by step/run, teardown of NULL a
// no-op, and the stream synchronised before the handle's buffers are freed.
//
// Use each macro once, at global scope, in the one .cu file of the .so that holds the entry
// points, after the three functions. The library must be built with hidden visibility
// (nibble_add_solution in cmake/nibble_solution.cmake does it): only NIBBLE_EXPORT symbols are
// exported. Optional exports (nibble_gemm_output_dtype, a reference's nibble_reference_*) are
// written by hand beside the macro.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <memory>

#include "nibble/nibble.h"
#include "nibble/nibble_gemm.h"
#include "solutions/common/abi_util.h"

namespace nibble::sol {

/** build_model / prepare: *handle stays NULL unless `make` returns a handle, which it then owns.
 *  The messages are whole literals: a message built here would instantiate std::string templates
 *  that the .so exports (libstdc++'s are not hidden). */
template <class Handle, class Make>
nibble_status export_handle(const void* input, void** handle, nibble_error* err, const char* null_message,
                            const char* empty_message, Make&& make) {
  return abi_guard(err, [&] {
    if (handle) *handle = nullptr;
    if (!input || !handle) throw AbiFailure(NIBBLE_ERR_INVALID_ARGUMENT, null_message);
    std::unique_ptr<Handle> h = make();
    if (!h) throw AbiFailure(NIBBLE_ERR_INTERNAL, empty_message);
    *handle = h.release();
  });
}

/** decode_step / run: the handle, refused when NULL. */
template <class Handle, class Call>
nibble_status export_call(void* handle, nibble_error* err, const char* null_message, Call&& call) {
  return abi_guard(err, [&] {
    if (!handle) throw AbiFailure(NIBBLE_ERR_INVALID_ARGUMENT, null_message);
    call(*static_cast<Handle*>(handle));
  });
}

/** teardown: nothing for NULL; else wait for the stream (queued work may still read the buffers),
 *  run the solution's teardown, and delete the handle whatever it threw. */
template <class Handle>
nibble_status export_teardown(void (*teardown)(Handle&, cudaStream_t), void* handle, void* stream, nibble_error* err) {
  return abi_guard(err, [&] {
    std::unique_ptr<Handle> h(static_cast<Handle*>(handle));
    if (!h) return;
    SOL_CUDA(cudaStreamSynchronize(static_cast<cudaStream_t>(stream)));
    teardown(*h, static_cast<cudaStream_t>(stream));
  });
}

/** A decode solution's three functions and its entry points' bodies (NIBBLE_DECODE_SOLUTION). */
template <class Handle>
struct DecodeSolution {
  std::unique_ptr<Handle> (*build)(const nibble_decode_model* model, cudaStream_t stream);
  void (*step)(Handle& h, const nibble_tensor* token_ids, int32_t pos, nibble_tensor* logits, cudaStream_t stream);
  void (*teardown)(Handle& h, cudaStream_t stream);

  nibble_status build_model_entry(const nibble_decode_model* model, void* stream, void** handle,
                                  nibble_error* err) const {
    return export_handle<Handle>(model, handle, err, "build_model: NULL model or handle pointer",
                                 "build_model: the solution returned no handle",
                                 [&] { return build(model, static_cast<cudaStream_t>(stream)); });
  }
  nibble_status step_entry(void* handle, const nibble_tensor* token_ids, int32_t pos, nibble_tensor* logits,
                           void* stream, nibble_error* err) const {
    return export_call<Handle>(handle, err, "decode_step: NULL handle", [&](Handle& h) {
      step(h, token_ids, pos, logits, static_cast<cudaStream_t>(stream));
    });
  }
  nibble_status teardown_entry(void* handle, void* stream, nibble_error* err) const {
    return export_teardown(teardown, handle, stream, err);
  }
};
template <class Handle>
DecodeSolution(std::unique_ptr<Handle> (*)(const nibble_decode_model*, cudaStream_t),
               void (*)(Handle&, const nibble_tensor*, int32_t, nibble_tensor*, cudaStream_t),
               void (*)(Handle&, cudaStream_t)) -> DecodeSolution<Handle>;

/** A GEMM solution's three functions and its entry points' bodies (NIBBLE_GEMM_SOLUTION). */
template <class Handle>
struct GemmSolution {
  std::unique_ptr<Handle> (*prepare)(const nibble_gemm_problem* problem, cudaStream_t stream);
  void (*run)(Handle& h, const nibble_tensor* A, nibble_tensor* C, cudaStream_t stream);
  void (*teardown)(Handle& h, cudaStream_t stream);

  nibble_status prepare_entry(const nibble_gemm_problem* problem, void* stream, void** handle,
                              nibble_error* err) const {
    return export_handle<Handle>(problem, handle, err, "prepare: NULL problem or handle pointer",
                                 "prepare: the solution returned no handle",
                                 [&] { return prepare(problem, static_cast<cudaStream_t>(stream)); });
  }
  nibble_status run_entry(void* handle, const nibble_tensor* A, nibble_tensor* C, void* stream,
                          nibble_error* err) const {
    return export_call<Handle>(handle, err, "run: NULL handle",
                               [&](Handle& h) { run(h, A, C, static_cast<cudaStream_t>(stream)); });
  }
  nibble_status teardown_entry(void* handle, void* stream, nibble_error* err) const {
    return export_teardown(teardown, handle, stream, err);
  }
};
template <class Handle>
GemmSolution(std::unique_ptr<Handle> (*)(const nibble_gemm_problem*, cudaStream_t),
             void (*)(Handle&, const nibble_tensor*, nibble_tensor*, cudaStream_t),
             void (*)(Handle&, cudaStream_t)) -> GemmSolution<Handle>;

}  // namespace nibble::sol

// nibble_abi_version and nibble_solution_name, which both ABIs require; `name` must be a non-empty
// string literal (the static_assert also takes the ';' after the macro's use).
#define NIBBLE_EXPORT_NAME_AND_VERSION_(name)                                  \
  NIBBLE_EXPORT int32_t nibble_abi_version(void) { return NIBBLE_ABI_VERSION; } \
  NIBBLE_EXPORT const char* nibble_solution_name(void) { return name; }

/**
 * The decode task's exports (include/nibble/nibble.h) from three functions over one Handle type.
 *
 * @param name         string literal: nibble_solution_name(), the name reports show ("unfused")
 * @param build_fn     std::unique_ptr<Handle> (const nibble_decode_model* model, cudaStream_t stream):
 *                     check the model, repack the weights, return the state step needs (untimed)
 * @param step_fn      void (Handle&, const nibble_tensor* token_ids, int32_t pos, nibble_tensor* logits,
 *                     cudaStream_t stream): one decode step, its GPU work on `stream` (timed)
 * @param teardown_fn  void (Handle&, cudaStream_t stream): free what build allocated, checked; it
 *                     runs after the stream is synchronised, and the handle is deleted after it
 *
 * Exports, with C linkage: nibble_abi_version (NIBBLE_ABI_VERSION), nibble_solution_name,
 * nibble_decode_build_model, nibble_decode_step, nibble_decode_teardown.
 *
 * Errors: each entry point returns NIBBLE_OK or abi_guard()'s status: an AbiFailure's own, a CUDA
 * error's (NIBBLE_ERR_CUDA, NIBBLE_ERR_OUT_OF_MEMORY), NIBBLE_ERR_OUT_OF_MEMORY for bad_alloc,
 * NIBBLE_ERR_INTERNAL for another std::exception, with the message in err. A NULL model or handle
 * pointer to build_model, or a NULL handle to step, is NIBBLE_ERR_INVALID_ARGUMENT; build_fn
 * returning an empty pointer is NIBBLE_ERR_INTERNAL; a failed build_model leaves *handle NULL;
 * teardown of NULL returns NIBBLE_OK. A mismatch between the functions' Handle types, or a
 * signature other than the above, fails to compile at the macro.
 */
#define NIBBLE_DECODE_SOLUTION(name, build_fn, step_fn, teardown_fn)                                          \
  static constexpr ::nibble::sol::DecodeSolution nibble_decode_solution_{build_fn, step_fn, teardown_fn};      \
  extern "C" {                                                                                                \
  NIBBLE_EXPORT_NAME_AND_VERSION_(name)                                                                       \
  NIBBLE_EXPORT nibble_status nibble_decode_build_model(const nibble_decode_model* model, void* stream,        \
                                                        void** handle, nibble_error* err) {                   \
    return nibble_decode_solution_.build_model_entry(model, stream, handle, err);                             \
  }                                                                                                           \
  NIBBLE_EXPORT nibble_status nibble_decode_step(void* handle, const nibble_tensor* token_ids, int32_t pos,    \
                                                 nibble_tensor* logits, void* stream, nibble_error* err) {    \
    return nibble_decode_solution_.step_entry(handle, token_ids, pos, logits, stream, err);                   \
  }                                                                                                           \
  NIBBLE_EXPORT nibble_status nibble_decode_teardown(void* handle, void* stream, nibble_error* err) {          \
    return nibble_decode_solution_.teardown_entry(handle, stream, err);                                       \
  }                                                                                                           \
  }                                                                                                           \
  static_assert(sizeof(name) > 1, "a solution's name is a non-empty string literal")

/**
 * The FP4 GEMM tasks' exports (include/nibble/nibble_gemm.h) from three functions over one Handle.
 *
 * @param name         string literal: nibble_solution_name(), the name reports show ("gemm-baseline")
 * @param prepare_fn   std::unique_ptr<Handle> (const nibble_gemm_problem* problem, cudaStream_t stream):
 *                     check the problem (parse_gemm_problem, gemm_abi_util.h), repack the weights,
 *                     return the state run needs (untimed); NIBBLE_ERR_NOT_SUPPORTED declines a shape
 * @param run_fn       void (Handle&, const nibble_tensor* A, nibble_tensor* C, cudaStream_t stream):
 *                     one GEMM, its GPU work on `stream` (timed)
 * @param teardown_fn  void (Handle&, cudaStream_t stream): free what prepare allocated, checked; it
 *                     runs after the stream is synchronised, and the handle is deleted after it
 *
 * Exports, with C linkage: nibble_abi_version (NIBBLE_ABI_VERSION), nibble_gemm_abi_version
 * (NIBBLE_GEMM_ABI_VERSION), nibble_solution_name, nibble_gemm_prepare, nibble_gemm_run,
 * nibble_gemm_teardown. Not nibble_gemm_output_dtype: C is fp32 unless the solution exports that
 * itself.
 *
 * Errors: as NIBBLE_DECODE_SOLUTION's, with prepare for build_model (a NULL problem or handle
 * pointer: NIBBLE_ERR_INVALID_ARGUMENT) and run for step.
 */
#define NIBBLE_GEMM_SOLUTION(name, prepare_fn, run_fn, teardown_fn)                                           \
  static constexpr ::nibble::sol::GemmSolution nibble_gemm_solution_{prepare_fn, run_fn, teardown_fn};         \
  extern "C" {                                                                                                \
  NIBBLE_EXPORT_NAME_AND_VERSION_(name)                                                                       \
  NIBBLE_EXPORT int32_t nibble_gemm_abi_version(void) { return NIBBLE_GEMM_ABI_VERSION; }                     \
  NIBBLE_EXPORT nibble_status nibble_gemm_prepare(const nibble_gemm_problem* problem, void* stream,            \
                                                  void** handle, nibble_error* err) {                         \
    return nibble_gemm_solution_.prepare_entry(problem, stream, handle, err);                                 \
  }                                                                                                           \
  NIBBLE_EXPORT nibble_status nibble_gemm_run(void* handle, const nibble_tensor* A, nibble_tensor* C,          \
                                              void* stream, nibble_error* err) {                              \
    return nibble_gemm_solution_.run_entry(handle, A, C, stream, err);                                        \
  }                                                                                                           \
  NIBBLE_EXPORT nibble_status nibble_gemm_teardown(void* handle, void* stream, nibble_error* err) {            \
    return nibble_gemm_solution_.teardown_entry(handle, stream, err);                                         \
  }                                                                                                           \
  }                                                                                                           \
  static_assert(sizeof(name) > 1, "a solution's name is a non-empty string literal")
