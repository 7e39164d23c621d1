// megakernel_matrix.h: a random int4 matrix packed into the megakernel's unit layout by the tests
// themselves, from megakernel.h's description of it (an independent packer: the repack kernel is
// not used), with its fp64 weights for the reference.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "fixtures/bf16.h"
#include "megakernel.h"

namespace nibble::test {

namespace mk = megakernel;

/** A random int4 matrix (rows, K) with its bf16 scales and zeros, packed as megakernel.h says. */
struct Matrix {
  int rows = 0, k = 0, tiles = 0, groups = 0;
  std::vector<uint8_t> code, zero;  // (rows, K), (rows, groups)
  std::vector<uint16_t> scale;      // (rows, groups) bf16 bits
  std::vector<uint4> units;         // tiles x groups x kUnitStride bytes
  double w(int r, int kk) const {
    const int g = kk / mk::kGroup;
    return (double(code[size_t(r) * k + kk]) - zero[size_t(r) * groups + g]) * bf16_to_f32(scale[size_t(r) * groups + g]);
  }
};

inline Matrix make_matrix(int rows, int k, int chunk, uint32_t seed) {
  Matrix m;
  m.rows = rows, m.k = k, m.tiles = (rows + 15) / 16, m.groups = k / mk::kGroup;
  std::mt19937 rng(seed);
  m.code.resize(size_t(rows) * k);
  m.zero.resize(size_t(rows) * m.groups);
  m.scale.resize(size_t(rows) * m.groups);
  for (auto& c : m.code) c = uint8_t(rng() & 15);
  for (auto& z : m.zero) z = uint8_t(rng() & 15);
  for (auto& s : m.scale) s = f32_to_bf16(std::ldexp(1.0f + float(rng() % 128) / 128.0f, -6 - int(rng() % 3)));
  m.units.assign(size_t(m.tiles) * m.groups * mk::kUnitStride / 16, uint4{0, 0, 0, 0});
  mk::PackedMatrix pm;
  pm.tiles = m.tiles, pm.groups = m.groups, pm.chunk = chunk;
  auto* bytes = reinterpret_cast<unsigned char*>(m.units.data());
  for (long long u = 0; u < (long long)m.tiles * m.groups; ++u) {
    long long tile = 0;
    int group = 0;
    mk::unit_tile_group(pm, u, &tile, &group);
    unsigned char* unit = bytes + size_t(u) * mk::kUnitStride;
    // Codes: uint4 (c, lane) word q, nibble p = row g + 8 (q & 1), input 32 (2c + (p & 1)) + 16 (q >> 1) + 4t + p / 2.
    for (int c = 0; c < 2; ++c)
      for (int lane = 0; lane < 32; ++lane)
        for (int q = 0; q < 4; ++q) {
          uint32_t word = 0;
          for (int p = 0; p < 8; ++p) {
            const int r = int(tile) * 16 + lane / 4 + 8 * (q & 1);
            const int kk = group * mk::kGroup + 32 * (2 * c + (p & 1)) + 16 * (q >> 1) + 4 * (lane % 4) + p / 2;
            if (r < rows) word |= uint32_t(m.code[size_t(r) * k + kk]) << (4 * p);
          }
          std::memcpy(unit + (size_t(c) * 32 + lane) * 16 + 4 * q, &word, 4);
        }
    // Metadata at byte 1024: uint2 [g] = {row g, row g + 8}, each (scale bf16 bits << 16) | zero.
    for (int g = 0; g < 8; ++g)
      for (int h = 0; h < 2; ++h) {
        const int r = int(tile) * 16 + g + 8 * h;
        const uint32_t meta = r < rows ? (uint32_t(m.scale[size_t(r) * m.groups + group]) << 16) | m.zero[size_t(r) * m.groups + group] : 0u;
        std::memcpy(unit + mk::kUnitCodeBytes + 8 * g + 4 * h, &meta, 4);
      }
  }
  return m;
}

}  // namespace nibble::test
