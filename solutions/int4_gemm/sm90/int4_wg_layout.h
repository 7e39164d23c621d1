// int4_wg_layout.h: the repacked weight layout of int4_gemm_sm90's wgmma path (gemm-w4a16-int4 at
// M > 16), its scale records and the register decode, as the shared wgmma kernel's format
// (Int4WgFormat, solutions/common/wgmma_dequant_gemm.cuh). Host and device: prepare repacks on the
// host, the kernel decodes in registers, and the CPU test (tests/int4_gemm/test_int4_sm90_layout.cpp)
// runs this same decode on the host against every weight.
//
// Codes: solutions/int4_gemm/int4_frag.h, units in groups of G slabs (the rows of one wgmma tile:
// G = 4 for 64-row tiles, 8 for 128), N padded to 128 with code 0. Records: 64 bytes per unit (the
// group of 128 k spans two chunks, so each chunk carries its group's record: one bulk copy per stage
// with the codes); lane group g's 8 bytes at 8 g are two bf16 pairs:
//   word 0  {scale of row g, scale of row g + 8}, each the fp16 scale rounded to bf16 (RNE)
//   word 1  {128 + zero of row g, 128 + zero of row g + 8}
// Decode of register r (row g + 8 (r & 1)): biased_pair minus the row's {128 + z} is q - z exactly,
// times the row's bf16 scale, rounded once: W = bf16((q - z) x bf16(scale)). Two roundings of the
// exact weight (the scale's, the product's; bf16's unit roundoff u = 2^-8): |error| <= (2^-7 + 2^-16) |W|
// per weight, twice what the oracle's must-pass bf16_dequant row (one rounding) allows. Why not
// exact: wgmma needs bf16 A, and one accumulator set per tile leaves no registers to scale each
// group's sum in fp32 as int4_gemm_mma does.
// Padded rows: scale 0, zero 0: weight 0 (never written).
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "fixtures/bf16.h"
#include "fixtures/fp16.h"
#include "solutions/int4_gemm/int4_frag.h"

namespace nibble::int4_sm90 {

using int4_frag::biased_pair;
using int4_frag::kChunkK;
using int4_frag::kGroupK;
using int4_frag::kSlabRows;

inline constexpr int kRecordBytes = 64;  // per unit: 8 lane groups x {scale pair, 128 + zero pair}

/** Register r of a step word for the broadcast pairs zz = {128 + z, 128 + z} and s = {scale, scale}
 *  of its row: bf16((q - z) x scale) per half. */
NIBBLE_FRAG_HD uint32_t decode_reg(uint32_t word, int r, uint32_t zz, uint32_t s) {
  return sol::bf16x2_mul(sol::bf16x2_sub(biased_pair(word, r), zz), s);
}

/** A lane's 16 code bytes q of one chunk and its record part {scale pair, 128 + zero pair} -> the
 *  4 k16 steps' A fragments fr[j][r]. */
NIBBLE_FRAG_HD void decode_chunk(const uint32_t (&q)[4], uint32_t scales, uint32_t zeros, uint32_t (&fr)[4][4]) {
  const uint32_t s_lo = sol::bf16x2_broadcast(scales, 0), s_hi = sol::bf16x2_broadcast(scales, 1);
  const uint32_t z_lo = sol::bf16x2_broadcast(zeros, 0), z_hi = sol::bf16x2_broadcast(zeros, 1);
  for (int j = 0; j < 4; ++j) {  // constant trip count: unrolled by nvcc
    fr[j][0] = decode_reg(q[j], 0, z_lo, s_lo);
    fr[j][1] = decode_reg(q[j], 1, z_hi, s_hi);
    fr[j][2] = decode_reg(q[j], 2, z_lo, s_lo);
    fr[j][3] = decode_reg(q[j], 3, z_hi, s_hi);
  }
}

/** The repacked weights of one problem, on the host. */
struct Repacked {
  int64_t n_pad = 0, nch = 0;
  int group = 1;
  std::vector<uint32_t> words;   // (n_pad / 16) x nch units of 32 lanes x 4 words, sol::unit_index order
  std::vector<uint8_t> records;  // the same units x kRecordBytes
};

/** The byte offset of lane group g's record part in a unit's record. */
NIBBLE_FRAG_HD constexpr int record_offset(int g) { return 8 * g; }

/**
 * Repack an (N, K) plain int4 triple (packed (N, K/2), the low nibble holding the even k; scale
 * (N, K/128) fp16 bits; zero (N, K/128) in 0..15) into units of `group` slabs (4 or 8).
 * Throws std::invalid_argument for K not a positive multiple of 128 or a group other than 4 or 8.
 */
inline Repacked repack(const uint8_t* packed, const uint16_t* scale, const uint8_t* zero, int64_t N, int64_t K,
                       int group) {
  if (group != 4 && group != 8)
    throw std::invalid_argument("int4_sm90: group " + std::to_string(group) + " (4 or 8 slabs per tile)");
  Repacked r;
  r.n_pad = (N + sol::kRowAlign - 1) / sol::kRowAlign * sol::kRowAlign;
  r.nch = K / kChunkK;
  r.group = group;
  r.words = int4_frag::repack_codes(packed, N, K, r.n_pad, group);  // checks N and K
  r.records.assign(size_t(r.n_pad / kSlabRows * r.nch * kRecordBytes), 0u);
  const int64_t G = K / kGroupK;
  const auto put16 = [](uint8_t* p, uint16_t v) {
    p[0] = uint8_t(v & 0xFF);
    p[1] = uint8_t(v >> 8);
  };
  for (int64_t n = 0; n < r.n_pad; ++n) {
    const int64_t slab = n / kSlabRows;
    const int row = int(n % kSlabRows), g = row % 8, h = row / 8;
    for (int64_t c = 0; c < r.nch; ++c) {
      const int64_t grp = c * kChunkK / kGroupK;
      uint8_t* rec = &r.records[size_t(sol::unit_index(slab, c, r.nch, group) * kRecordBytes + record_offset(g))];
      const uint16_t s = n < N ? f32_to_bf16(f16_to_f32(scale[n * G + grp])) : 0;
      const uint16_t zz = uint16_t(int4_frag::bf16_128_plus(n < N ? zero[n * G + grp] : 0u));
      put16(rec + 2 * h, s);       // word 0, half h
      put16(rec + 4 + 2 * h, zz);  // word 1, half h
    }
  }
  return r;
}

}  // namespace nibble::int4_sm90
