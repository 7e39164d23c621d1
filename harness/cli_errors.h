// cli_errors.h: how a command of the nibble CLI turns what it throws into its exit code.
#pragma once

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <exception>
#include <iostream>
#include <stdexcept>

#include "harness/atomic_file.h"

namespace nibble {

/** The exit code of every command whose standard output could not be written (sysexits.h's
 *  EX_IOERR: no command gives it another meaning), an output named /dev/stdout included. */
inline constexpr int kExitStdoutLost = 74;

/** The exit code of an output file that could not be written: kExitStdoutLost for standard
 *  output (StdoutLost: `-o /dev/stdout` to a full disk), else `otherwise`. */
inline int write_failed_code(const std::exception& e, int otherwise) {
  return dynamic_cast<const StdoutLost*>(&e) ? kExitStdoutLost : otherwise;
}

/**
 * Runs `body` (returning the command's exit code) and maps what it throws: std::invalid_argument,
 * the CLI's "bad input" (a wrong name, a folder that is someone else's), to `bad_input`; any other
 * std::exception (a file that cannot be written, a child that failed) to `failed` (standard output
 * named as an output file, StdoutLost, to kExitStdoutLost). The message goes
 * to stderr after "<command>: ", so every command words its errors the same way.
 */
template <class Body>
int run_command(const char* command, Body&& body, int bad_input = 2, int failed = 3) {
  try {
    return body();
  } catch (const std::invalid_argument& e) {
    std::fprintf(stderr, "%s: %s\n", command, e.what());
    return bad_input;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: %s\n", command, e.what());
    return write_failed_code(e, failed);
  }
}

/**
 * `code`, or kExitStdoutLost when what the command printed on standard output did not all get there
 * (a full disk behind a redirection: `nibble compare A B --json > out.json` exited 0 with an empty
 * file), said on stderr. Call it last, after every print.
 */
inline int stdout_checked(int code) {
  std::cout.flush();
  errno = 0;
  if (std::fflush(stdout) == 0 && !std::ferror(stdout) && std::cout.good()) return code;
  std::fprintf(stderr, "nibble: standard output could not be written (%s): what it printed is incomplete\n",
               errno ? std::strerror(errno) : "write error");
  return kExitStdoutLost;
}

}  // namespace nibble
