/* hostile_c.c: the hostile solutions that need no GPU code, one per compile definition
 * (tests/hostile/expectations.json lists them with the disposition each must get):
 *
 *   HOSTILE_SEGFAULT_BUILD   writes through a NULL pointer in build_model          -> Crashed
 *   HOSTILE_ABORT_STEP       abort() in decode_step                                -> Crashed
 *   HOSTILE_EXIT_IN_CALL     exit(0) in decode_step: status 0, but during a call   -> Crashed
 *   HOSTILE_STOP_SELF        raise(SIGSTOP) in decode_step: stopped, never ends      -> TimedOut
 *   HOSTILE_MISSING_SYMBOL   exports no nibble_decode_step                          -> MissingSymbol
 *   HOSTILE_ABI_VERSION      nibble_abi_version() = NIBBLE_ABI_VERSION + 1           -> AbiMismatch
 *   HOSTILE_NOT_SUPPORTED    build_model declines with NIBBLE_ERR_NOT_SUPPORTED      -> NotSupported
 *   HOSTILE_BAD_MESSAGE      the same, with a message of 1024 bytes, no NUL, not UTF-8 -> NotSupported
 *
 * Plain C99, no CUDA: the load-time cases also run in CI (tests/test_hostile_cpu.cpp). */
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "nibble/nibble.h"

int32_t nibble_abi_version(void) {
#ifdef HOSTILE_ABI_VERSION
  return NIBBLE_ABI_VERSION + 1;
#else
  return NIBBLE_ABI_VERSION;
#endif
}

const char* nibble_solution_name(void) { return HOSTILE_NAME; }

nibble_status nibble_decode_build_model(const nibble_decode_model* model, void* stream, void** handle,
                                        nibble_error* err) {
  (void)stream;
  *handle = NULL;
#ifdef HOSTILE_SEGFAULT_BUILD
  {
    /* volatile: the compiler may not prove the store away or turn it into a trap instruction. */
    int* volatile p = NULL;
    *p = model->cfg.layers;
    /* Seen on the H200 machine: that store did not fault (page 0 mapped there?), so make sure. */
    raise(SIGSEGV);
  }
#endif
#ifdef HOSTILE_BAD_MESSAGE
  {
    /* Every byte of the buffer used, none of them NUL; after the words, bytes no UTF-8 decoder
     * accepts (0xFF, 0xFE, a lone continuation byte, a truncated sequence). */
    static const char head[] = "hostile-bad_message declines this config: ";
    static const unsigned char bad[] = {0xFF, 0xFE, 0x80, 0xC3, 0x28, 0xE2, 0x82, 0x1B, '[', '2', 'J'};
    size_t i;
    memcpy(err->message, head, sizeof head - 1);
    for (i = sizeof head - 1; i < sizeof err->message; ++i) err->message[i] = (char)bad[i % sizeof bad];
    (void)model;
    return NIBBLE_ERR_NOT_SUPPORTED;
  }
#endif
#ifdef HOSTILE_NOT_SUPPORTED
  snprintf(err->message, sizeof err->message,
           "hostile-not_supported declines config '%s': it only runs batch 64", model->config_name);
  return NIBBLE_ERR_NOT_SUPPORTED;
#else
  (void)model;
  (void)err;
  return NIBBLE_OK;
#endif
}

#ifndef HOSTILE_MISSING_SYMBOL
nibble_status nibble_decode_step(void* handle, const nibble_tensor* token_ids, int32_t pos, nibble_tensor* logits,
                                 void* stream, nibble_error* err) {
  (void)handle; (void)token_ids; (void)pos; (void)logits; (void)stream; (void)err;
#ifdef HOSTILE_ABORT_STEP
  abort();
#endif
#ifdef HOSTILE_STOP_SELF
  raise(SIGSTOP);  /* nothing but a SIGCONT or SIGKILL ends this */
#endif
#ifdef HOSTILE_EXIT_IN_CALL
  /* exit, not _exit: atexit handlers and stdio flushing run, as in a library that "exits cleanly". */
  exit(0);
#endif
  return NIBBLE_OK;
}
#endif

nibble_status nibble_decode_teardown(void* handle, void* stream, nibble_error* err) {
  (void)handle; (void)stream; (void)err;
  return NIBBLE_OK;
}
