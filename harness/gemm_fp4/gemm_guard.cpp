// gemm_guard.cpp: see gemm_guard.h.
#include "harness/gemm_fp4/gemm_guard.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>

namespace nibble {

void gemm_call_a(const uint16_t* a0, int64_t n, uint64_t seed, int64_t call, uint16_t* a) {
  if (call == 0) {
    std::memcpy(a, a0, size_t(n) * 2);
    return;
  }
  for (int64_t w = 0; w * 64 < n; ++w) {
    uint64_t x = seed * 0x9e3779b97f4a7c15ull + uint64_t(call) * 0xbf58476d1ce4e5b9ull + uint64_t(w) * 0x94d049bb133111ebull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    x ^= x >> 31;
    const int64_t e1 = std::min(n, w * 64 + 64);
    for (int64_t e = w * 64; e < e1; ++e) a[e] = uint16_t(a0[e] ^ (((x >> (e & 63)) & 1u) << 15));
  }
}

}  // namespace nibble
