// gemm_guard.h: the GEMM tasks' replay guard, the A of each call (gemm_task.cpp uses it; CPU tests
// check it: tests/test_gemm_guard.cpp).
#pragma once

#include <cstdint>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "fixtures/safetensors.h"

namespace nibble {

/** Call `call`'s A, the GEMM grader's replay guard: the fixture's A (`a0`, n bf16 bit patterns)
 *  with the sign of each element e flipped where bit e % 64 of splitmix64(seed, call, e / 64) is
 *  set (about half of them, a fresh mask per call); call 0 is `a0` unchanged. Exact (the bf16 sign
 *  bit), so the candidate, the reference and a test all rebuild the same A from (seed, call).
 *  Writes n values to `a`. */
void gemm_call_a(const uint16_t* a0, int64_t n, uint64_t seed, int64_t call, uint16_t* a);

}  // namespace nibble
