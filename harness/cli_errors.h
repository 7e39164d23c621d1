// cli_errors.h: how a command of the nibble CLI turns what it throws into its exit code.
#pragma once

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <exception>
#include <iostream>
#include <stdexcept>

namespace nibble {

/**
 * Runs `body` (returning the command's exit code) and maps what it throws: std::invalid_argument,
 * the CLI's "bad input" (a wrong name, a folder that is someone else's), to `bad_input`; any other
 * std::exception (a file that cannot be written, a child that failed) to `failed`. The message goes
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
    return failed;
  }
}

/** The exit code of every command whose standard output could not be written (sysexits.h's
 *  EX_IOERR: no command gives it another meaning). */
inline constexpr int kExitStdoutLost = 74;

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
