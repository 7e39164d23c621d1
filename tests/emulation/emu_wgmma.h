// emu_wgmma.h: the sm_90a warpgroup machinery for emu_core.h: the TMA tile load (a 2-D box of bf16
// with zero fill outside the tensor, written with the 128-byte swizzle: shared-address bits 4-6 XOR
// bits 7-9, completing its bytes on the mbarrier at issue), wgmma m64nNk16 with A from registers and
// B from shared memory through its descriptor (start address, stride between 8-row groups, 128-byte
// swizzle), as a collective of the warpgroup's 128 fibers (fragments from the PTX ISA's tables: each
// warp's A and D as mma.m16n8k16's, warp w holding rows 16w..16w+15), and named barriers.
#pragma once

#include <cstdint>
#include <cstring>
#include <map>
#include <utility>

#include "emu_async.h"

namespace emu {

/** What cuTensorMapEncodeTiled recorded (in the 128 bytes of a CUtensorMap). */
struct TensorMap2D {
  const unsigned char* base;
  uint64_t dims[2];     // elements: inner (k), outer (rows)
  uint64_t row_stride;  // bytes between rows
  uint32_t box[2];      // elements per box: inner, outer
  uint32_t elem_bytes;
  int swizzle128;
};

inline uint32_t swizzle128(uint32_t a) { return a ^ (((a >> 7) & 7u) << 4); }

inline void tma_load_2d(void* dst, const void* map, uint32_t bar, int k, int m) {
  TensorMap2D t;
  std::memcpy(&t, map, sizeof t);
  if (!t.swizzle128 || t.elem_bytes != 2 || t.box[0] * 2 != 128) die("TMA: only 64-element bf16 rows with the 128B swizzle are emulated");
  const uint32_t d = smem_address(dst);
  if (d % 1024 != 0) die("TMA with the 128B swizzle: the destination must be 1024-byte aligned");
  for (uint32_t r = 0; r < t.box[1]; ++r)
    for (uint32_t c = 0; c < t.box[0]; ++c) {
      const uint64_t gk = uint64_t(k) + c, gm = uint64_t(m) + r;
      uint16_t v = 0;
      if (gk < t.dims[0] && gm < t.dims[1]) {
        const unsigned char* src = t.base + gm * t.row_stride + gk * 2;
        check_load(src, 2, 2, "TMA");
        std::memcpy(&v, src, 2);
      }
      std::memcpy(smem_pointer(swizzle128(d + r * 128 + c * 2), 2), &v, 2);
    }
  MBar& b = mbar(bar);
  b.tx -= (long long)t.box[0] * t.box[1] * 2;
  ++events;
  mbar_try_complete(b);
}

inline void named_barrier_sync(int id, int threads) {
  auto it = cur_block->named_bar.find(id);
  if (it == cur_block->named_bar.end()) it = cur_block->named_bar.emplace(id, Bar{threads, 0, 0}).first;
  if (it->second.count != threads) die("bar.sync: one barrier id with two thread counts");
  bar_wait(it->second);
}

/** The warpgroup's deposit slots: A fragments and accumulators of its 128 threads. */
struct WgSlots {
  uint32_t a[128][4];
  float d[128][128];
};
inline std::map<std::pair<BlockState*, int>, WgSlots>& wg_slots() {
  static std::map<std::pair<BlockState*, int>, WgSlots> m;
  return m;
}

inline float bf16f(uint16_t h) {
  const uint32_t u = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

/** This thread's part of wgmma.mma_async m64nNk16 f32 += bf16 (A registers) x bf16 (B shared, K-major,
 *  descriptor desc), completed at once (wait_group is then a no-op). */
template <int N>
void wgmma_rs(float (&d)[N / 2], const uint32_t (&a)[4], uint64_t desc) {
  const int tid = int(g_threadIdx.x), wg = tid / 128, wt = tid % 128;
  WgSlots& s = wg_slots()[{cur_block, wg}];
  for (int i = 0; i < 4; ++i) s.a[wt][i] = a[i];
  for (int i = 0; i < N / 2; ++i) s.d[wt][i] = d[i];
  Bar& bar = cur_block->wg_bar[wg];
  bar_wait(bar);  // .sync.aligned: the whole warpgroup
  if (wt == 0) {
    if ((desc >> 62) != 1) die("wgmma: only the 128B-swizzle descriptor is emulated");
    const uint32_t start = uint32_t(desc & 0x3FFFu) << 4, sbo = uint32_t((desc >> 32) & 0x3FFFu) << 4;
    static float A[64][16], B[256][16];
    static int seen[64][16];
    std::memset(seen, 0, sizeof seen);
    for (int t128 = 0; t128 < 128; ++t128) {
      const int w = t128 / 32, lane = t128 % 32, g = lane >> 2, t = lane & 3;
      for (int r = 0; r < 4; ++r)
        for (int e = 0; e < 2; ++e) {
          const int row = 16 * w + g + 8 * (r & 1), col = 2 * t + 8 * (r >> 1) + e;
          A[row][col] = bf16f(uint16_t(s.a[t128][r] >> (16 * e)));
          ++seen[row][col];
        }
    }
    for (int r = 0; r < 64; ++r)
      for (int k = 0; k < 16; ++k)
        if (seen[r][k] != 1) die("wgmma A fragment table not a bijection");
    for (int n = 0; n < N; ++n)
      for (int k = 0; k < 16; ++k) {
        uint16_t v;
        std::memcpy(&v, smem_pointer(swizzle128(start + uint32_t(n / 8) * sbo + uint32_t(n % 8) * 128 + uint32_t(k) * 2), 2), 2);
        B[n][k] = bf16f(v);
      }
    for (int t128 = 0; t128 < 128; ++t128) {
      const int w = t128 / 32, lane = t128 % 32, g = lane >> 2, t = lane & 3;
      for (int q = 0; q < N / 8; ++q)
        for (int e = 0; e < 4; ++e) {
          const int row = 16 * w + g + 8 * (e >> 1), col = 8 * q + 2 * t + (e & 1);
          double acc = s.d[t128][4 * q + e];
          for (int k = 0; k < 16; ++k) acc += double(A[row][k]) * double(B[col][k]);
          s.d[t128][4 * q + e] = float(acc);
        }
    }
  }
  bar_wait(bar);
  for (int i = 0; i < N / 2; ++i) d[i] = s.d[wt][i];
  bar_wait(bar);
}

}  // namespace emu
