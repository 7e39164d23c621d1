// test_binary_dir.h: where a test finds the built nibble, the bundled .so's and the test libraries.
#pragma once

#include <cstdlib>
#include <string>

namespace nibble::test {

/** The build tree: $NIBBLE_BINARY_DIR (CTest sets it for every test), else the working directory. */
inline std::string bindir() {
  const char* b = std::getenv("NIBBLE_BINARY_DIR");
  return b ? b : ".";
}

}  // namespace nibble::test
