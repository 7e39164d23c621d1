// bundled_solutions.h: the bundled solutions the GPU tests run, as nibble_add_solution registered
// them (cmake/nibble_solution.cmake: the global properties NIBBLE_SOLUTIONS_<family>), so a new
// solution is tested by the tests that iterate over its family without editing them.
// tests/CMakeLists.txt writes the rows into bundled_solutions.inc (build tree) at configure time.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <ostream>
#include <stdexcept>
#include <string>
#include <vector>

namespace nibble::test {

/** One bundled solution: its CMake target, task family, .so and the CUDA architectures it was built
 *  for (CMake's CUDA_ARCHITECTURES, e.g. "80;90a"). */
struct BundledSolution {
  const char* target;
  const char* family;
  std::string path;  // under $NIBBLE_BINARY_DIR (CTest sets it), else the build tree it was configured in
  const char* cuda_architectures;
};

/** GoogleTest prints a parameter by its target. */
inline void PrintTo(const BundledSolution& s, std::ostream* os) { *os << s.target; }

/** Every bundled solution, in registration order. */
inline const std::vector<BundledSolution>& bundled_solutions() {
  struct Row {
    const char* target;
    const char* family;
    const char* file;  // relative to the build tree
    const char* cuda_architectures;
  };
  static const Row rows[] = {
#include "bundled_solutions.inc"
  };
  static const std::vector<BundledSolution> all = [] {
    const char* bin = std::getenv("NIBBLE_BINARY_DIR");
    const std::string dir = bin && *bin ? bin : NIBBLE_BUNDLED_BINARY_DIR;
    std::vector<BundledSolution> out;
    for (const Row& r : rows) out.push_back({r.target, r.family, dir + "/" + r.file, r.cuda_architectures});
    return out;
  }();
  return all;
}

/** The bundled solutions of one family ("decode", "gemm_fp4"), in registration order. */
inline std::vector<BundledSolution> bundled_solutions(const std::string& family) {
  std::vector<BundledSolution> out;
  for (const BundledSolution& s : bundled_solutions())
    if (family == s.family) out.push_back(s);
  return out;
}

/** The bundled solution built by CMake target `target`; throws when there is none. */
inline BundledSolution bundled_solution(const std::string& target) {
  for (const BundledSolution& s : bundled_solutions())
    if (target == s.target) return s;
  throw std::runtime_error("no bundled solution '" + target + "' (nibble_add_solution registers them)");
}

/**
 * True when code built for `archs` (CMake's CUDA_ARCHITECTURES, entries separated by ';') runs on
 * the current device; otherwise *why says why not. An arch-specific entry (90a) runs on exactly
 * that compute capability; a family one (100f) or SASS only (80-real) on its major version from its
 * minor up; any other (80, 80-virtual) on that capability and later, its PTX compiled at load.
 * all, all-major, native and an empty list count as running anywhere.
 */
inline bool runs_on_this_device(const std::string& archs, std::string* why) {
  if (archs.empty()) return true;
  int dev = 0;
  cudaDeviceProp prop{};
  if (cudaGetDevice(&dev) != cudaSuccess || cudaGetDeviceProperties(&prop, dev) != cudaSuccess) {
    cudaGetLastError();
    *why = "cannot read the device's compute capability";
    return false;
  }
  const int cc = prop.major * 10 + prop.minor;
  for (size_t begin = 0; begin <= archs.size();) {
    const size_t end = std::min(archs.find(';', begin), archs.size());
    const std::string a = archs.substr(begin, end - begin);
    begin = end + 1;
    if (a == "all" || a == "all-major" || a == "native") return true;
    size_t digits = 0;
    while (digits < a.size() && std::isdigit(static_cast<unsigned char>(a[digits]))) ++digits;
    if (digits == 0) continue;
    const int arch = std::stoi(a.substr(0, digits));
    const std::string suffix = a.substr(digits);
    const bool same_major_up = cc / 10 == arch / 10 && cc >= arch;
    if (suffix == "a" ? cc == arch : suffix == "f" || suffix == "-real" ? same_major_up : cc >= arch) return true;
  }
  *why = "built for CUDA architectures " + archs + "; this GPU is sm_" + std::to_string(cc);
  return false;
}

}  // namespace nibble::test
