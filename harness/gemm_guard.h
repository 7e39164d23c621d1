// gemm_guard.h: the GEMM grader's replay guard, the A of each call, and the comparison of a
// candidate's outputs with the reference's call by call (gemm_grade.cpp uses them; CPU tests check
// them: tests/test_gemm_guard.cpp).
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

/** ||c - r||_F / ||r||_F over n floats, in fp64; NaN when c holds a non-finite value; 0 when both are
 *  zero, +inf when only r is. */
double gemm_rel_err(const float* c, const float* r, size_t n);

/** The call number stored beside `name`.C (an I64 tensor `name`.call), or -1 when absent or not 8
 *  bytes. */
int64_t gemm_stored_call(const SafetensorsFile& f, const std::string& name);

/** The mask seed stored beside `name`.C (an I64 tensor `name`.seed holding a uint64's bits) into
 *  *seed; false when absent or not 8 bytes. */
bool gemm_stored_seed(const SafetensorsFile& f, const std::string& name, uint64_t* seed);

/**
 * The candidate's outputs `names` (each `name`.C, fp32 M x N, with `name`.call and `name`.seed)
 * against the reference's of the same names: both must be of the same call and mask seed (the same
 * A), "timed" must name a timed call (1001 on), and each C must hold M x N floats; any of these
 * failing throws std::runtime_error saying which. Returns [{name, call, rel_err (null for NaN)}]
 * and raises *worst to the largest error (NaN sticks).
 */
nlohmann::ordered_json compare_gemm_outputs(const SafetensorsFile& cand, const SafetensorsFile& ref,
                                            const std::vector<std::string>& names, int64_t M, int64_t N, double* worst);

}  // namespace nibble
