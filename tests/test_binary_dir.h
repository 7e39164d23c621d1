// test_binary_dir.h: where a test finds the built nibble, the bundled .so's and the test libraries.
#pragma once

#include <unistd.h>

#include <cstdlib>
#include <string>

namespace nibble::test {

/** The build tree: $NIBBLE_BINARY_DIR (CTest sets it for every test), else the tree this test binary
 *  was built in (its folder's parent: build/tests/test_x), so that a test run by hand from any folder
 *  finds bin/nibble; else the working directory. */
inline std::string bindir() {
  if (const char* b = std::getenv("NIBBLE_BINARY_DIR")) return b;
  char exe[4096];
  const ssize_t n = ::readlink("/proc/self/exe", exe, sizeof exe - 1);
  if (n > 0) {
    std::string p(exe, size_t(n));
    for (int up = 0; up < 2 && p.find('/') != std::string::npos; ++up) p.erase(p.rfind('/'));
    if (!p.empty() && ::access((p + "/bin/nibble").c_str(), X_OK) == 0) return p;
  }
  return ".";
}

}  // namespace nibble::test
