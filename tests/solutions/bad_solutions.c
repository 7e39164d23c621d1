/* bad_solutions.c: deliberately broken solutions, one per compile definition, that the grader
 * must turn into the right disposition (never a crashed grader). Plain C99: no CUDA needed. */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <unistd.h>

#include "nibble/nibble.h"

int32_t nibble_abi_version(void) {
#ifdef BAD_ABI_VERSION
  return NIBBLE_ABI_VERSION + 41;
#else
  return NIBBLE_ABI_VERSION;
#endif
}

const char* nibble_solution_name(void) { return BAD_NAME; }

#ifdef BAD_LOAD_SEGFAULT
/* A fault in the library's constructor, at dlopen: before any entry point is called (exported, so
 * that the crash's frame names it). */
__attribute__((constructor)) void bad_load_segfault(void) {
  volatile int* volatile nowhere = NULL;
  *nowhere = 1;
}
#endif
#ifdef BAD_LOAD_ABORT
/* abort() in the library's constructor: the crash is placed at the caller, not in libc. */
__attribute__((constructor)) void bad_load_abort(void) { abort(); }
#endif

nibble_status nibble_decode_build_model(const nibble_decode_model* model, void* stream, void** handle,
                                        nibble_error* err) {
  (void)model; (void)stream;
#ifdef BAD_NOT_SUPPORTED
  snprintf(err->message, sizeof err->message, "this solution only supports batch 64");
  return NIBBLE_ERR_NOT_SUPPORTED;
#else
  (void)err;
  *handle = NULL;
  return NIBBLE_OK;
#endif
}

nibble_status nibble_decode_step(void* handle, const nibble_tensor* token_ids, int32_t pos, nibble_tensor* logits,
                                 void* stream, nibble_error* err) {
  (void)handle; (void)token_ids; (void)pos; (void)logits; (void)stream; (void)err;
#ifdef BAD_SEGFAULT
  raise(SIGSEGV);
#endif
#ifdef BAD_HANG
  for (;;) sleep(1);
#endif
  /* BAD_NOTHING: writes nothing, so the NaN-filled logits stay NaN. */
  return NIBBLE_OK;
}

#ifndef BAD_MISSING_TEARDOWN
nibble_status nibble_decode_teardown(void* handle, void* stream, nibble_error* err) {
  (void)handle; (void)stream; (void)err;
#ifdef BAD_TEARDOWN_FAILS
  snprintf(err->message, sizeof err->message, "teardown could not free its buffers");
  return NIBBLE_ERR_INTERNAL;
#endif
#ifdef BAD_TEARDOWN_SEGFAULT
  raise(SIGSEGV);
#endif
  return NIBBLE_OK;
}
#endif
