// test_rng.h: the tests' seeded generator (SplitMix64): the same numbers on every machine and
// standard library, so a failing case reproduces.
#pragma once

#include <cstdint>

namespace nibble::test {

struct Rng {
  uint64_t s;
  explicit Rng(uint64_t seed) : s(seed) {}
  uint64_t next() {
    uint64_t z = (s += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
  }
  /** uniform in [0, 1) with 24 bits, exact in fp32. */
  float uniform() { return float(next() >> 40) * (1.0f / 16777216.0f); }
  /** uniform in [-1, 1). */
  float symmetric() { return 2.f * uniform() - 1.f; }
  int below(int n) { return int(next() % uint64_t(n)); }
};

}  // namespace nibble::test
