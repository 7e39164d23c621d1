// cli_errors.h: how a command of the nibble CLI turns what it throws into its exit code.
#pragma once

#include <cstdio>
#include <exception>
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

}  // namespace nibble
