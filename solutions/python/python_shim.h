// python_shim.h: what the grader's child asks of libnibble_python_{decode,gemm}.so beyond the ABI.
//
// The shims are ABI solutions (nibble.h / nibble_gemm.h) that embed CPython and forward every entry
// point to a Python module (solutions/python/nibble_abi.py says what the module defines and what it
// is handed). The child loads a shim like any solution .so and, before the build call, names the
// module with nibble_python_load_module, under the watchdog; after the build it asks
// nibble_python_facts for the interpreter and library versions the report records.
#pragma once

#include <stdint.h>

#include "nibble/nibble.h"

#ifdef __cplusplus
extern "C" {
#endif

/** nibble_python_load_module's results: the module is ready; it could not be imported (syntax
 *  error, ImportError, an exception at import, a bad OUTPUT_DTYPE); it lacks an entry point; it
 *  lacks one and defines every entry point of the other family (a GEMM module given to the decode
 *  shim, or the reverse: the caller names the tasks it is for). */
enum {
  NIBBLE_PYTHON_LOADED = 0,
  NIBBLE_PYTHON_NOT_LOADABLE = 1,
  NIBBLE_PYTHON_MISSING_ENTRY = 2,
  NIBBLE_PYTHON_OTHER_FAMILY = 3
};

/**
 * Start the embedded interpreter (once per process) and import the solution module at `path`
 * (a .py file; its folder goes first on sys.path). Every later entry point calls into it.
 * @param path  the module's file
 * @param err   out: the traceback's last lines, or which entry point is missing
 * @return NIBBLE_PYTHON_LOADED, NIBBLE_PYTHON_NOT_LOADABLE, NIBBLE_PYTHON_MISSING_ENTRY or
 *         NIBBLE_PYTHON_OTHER_FAMILY
 */
typedef int32_t (*nibble_python_load_module_fn)(const char* path, nibble_error* err);

/** The interpreter (version, executable) and the versions of torch, triton, numpy and cupy the
 *  module imported ("not imported" otherwise), as one JSON object; "{}" before a module is loaded.
 *  The text stays valid until the next call. */
typedef const char* (*nibble_python_facts_fn)(void);

NIBBLE_EXPORT int32_t nibble_python_load_module(const char* path, nibble_error* err);
NIBBLE_EXPORT const char* nibble_python_facts(void);

#ifdef __cplusplus
}
#endif
