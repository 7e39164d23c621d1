// emu_wgmma.h: the sm_90a warpgroup machinery for emu_core.h: the TMA tile load (a 2-D box of bf16
// with zero fill outside the tensor, written with the 128-byte swizzle: shared-address bits 4-6 XOR
// bits 7-9, completing its bytes on the mbarrier at issue), wgmma m64nNk16 with A from registers and
// B from shared memory through its descriptor (start address, stride between 8-row groups, 128-byte
// swizzle), asynchronous as on the GPU: recorded at issue, run by the wgmma.wait_group that retires
// its commit group, reading its operands then (fragments from the PTX ISA's tables: each warp's A
// and D as mma.m16n8k16's, warp w holding rows 16w..16w+15), and named barriers.
#pragma once

#include <cstdint>
#include <algorithm>
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
      const uint32_t at = swizzle128(d + r * 128 + c * 2);
      check_not_mbarrier(at, 2, "TMA");
      std::memcpy(smem_pointer(at, 2), &v, 2);
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

/** One wgmma.mma_async of a warpgroup: each thread's A registers and accumulators (by address: the
 *  instruction reads and writes them when it runs, not when it is issued) and descriptor. */
struct WgmmaOp {
  int n = 0, filled = 0;
  uint64_t desc[128];
  const uint32_t* a[128];
  float* d[128];
};
/** A warpgroup's wgmma state: its ops by commit group, what each thread has issued and committed. */
struct WarpgroupState {
  std::map<long long, std::vector<WgmmaOp>> groups;  // commit group -> its ops in issue order
  long long committed[128] = {};                      // groups each thread has committed
  int issued[128] = {};                               // ops each thread has issued into its open group
  long long done = 0;                                 // groups executed
};
inline std::map<std::pair<BlockState*, int>, WarpgroupState>& wg_state() {
  static std::map<std::pair<BlockState*, int>, WarpgroupState> m;
  return m;
}

inline float bf16f(uint16_t h) {
  const uint32_t u = uint32_t(h) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

/** Run one op: D (64 x n) += A (64 x 16, the threads' registers now) x B (n x 16 from shared memory,
 *  K-major, through the descriptor), fragments from the PTX ISA (warp w: rows 16w..16w+15). */
inline void wgmma_execute(const WgmmaOp& op) {
  if (op.filled != 128) die("wgmma: an instruction not issued by all 128 threads of the warpgroup");
  for (int t = 1; t < 128; ++t)
    if (op.desc[t] != op.desc[0]) die("wgmma: the matrix descriptor differs across the warpgroup");
  const uint64_t desc = op.desc[0];
  if ((desc >> 62) != 1) die("wgmma: only the 128B-swizzle descriptor is emulated");
  if (((desc >> 49) & 7) != 0) die("wgmma: a nonzero matrix base offset is not emulated");
  const uint32_t start = uint32_t(desc & 0x3FFFu) << 4, sbo = uint32_t((desc >> 32) & 0x3FFFu) << 4;
  static float A[64][16], B[256][16];
  for (int t128 = 0; t128 < 128; ++t128) {
    const int w = t128 / 32, lane = t128 % 32, g = lane >> 2, t = lane & 3;
    for (int r = 0; r < 4; ++r)
      for (int e = 0; e < 2; ++e) A[16 * w + g + 8 * (r & 1)][2 * t + 8 * (r >> 1) + e] = bf16f(uint16_t(op.a[t128][r] >> (16 * e)));
  }
  for (int n = 0; n < op.n; ++n)
    for (int k = 0; k < 16; ++k) {
      uint16_t v;
      std::memcpy(&v, smem_pointer(swizzle128(start + uint32_t(n / 8) * sbo + uint32_t(n % 8) * 128 + uint32_t(k) * 2), 2), 2);
      B[n][k] = bf16f(v);
    }
  for (int t128 = 0; t128 < 128; ++t128) {
    const int w = t128 / 32, lane = t128 % 32, g = lane >> 2, t = lane & 3;
    for (int q = 0; q < op.n / 8; ++q)
      for (int e = 0; e < 4; ++e) {
        const int row = 16 * w + g + 8 * (e >> 1), col = 8 * q + 2 * t + (e & 1);
        double acc = op.d[t128][4 * q + e];
        for (int k = 0; k < 16; ++k) acc += double(A[row][k]) * double(B[col][k]);
        op.d[t128][4 * q + e] = float(acc);
      }
  }
}

/** This thread's wgmma.mma_async m64nNk16 f32 += bf16 (A registers) x bf16 (B shared): recorded into
 *  the thread's open commit group; it runs at the wgmma.wait_group that retires the group, reading
 *  A, the accumulators and B then (so a stage or register reused too early shows). */
template <int N>
void wgmma_rs(float (&d)[N / 2], const uint32_t (&a)[4], uint64_t desc) {
  const int tid = int(g_threadIdx.x), wg = tid / 128, wt = tid % 128;
  WarpgroupState& s = wg_state()[{cur_block, wg}];
  std::vector<WgmmaOp>& ops = s.groups[s.committed[wt]];
  const int k = s.issued[wt]++;
  if (int(ops.size()) <= k) ops.resize(size_t(k) + 1);
  WgmmaOp& op = ops[size_t(k)];
  if (op.filled > 0 && op.n != N) die("wgmma: the warpgroup's threads issued different shapes");
  op.n = N;
  op.desc[wt] = desc;
  op.a[wt] = a;
  op.d[wt] = d;
  ++op.filled;
}
inline void wgmma_commit() {
  const int tid = int(g_threadIdx.x), wt = tid % 128;
  WarpgroupState& s = wg_state()[{cur_block, tid / 128}];
  ++s.committed[wt];
  s.issued[wt] = 0;
}
/** wgmma.wait_group N (warpgroup-collective): every committed group but the N most recent has run. */
inline void wgmma_wait(int pending) {
  const int tid = int(g_threadIdx.x), wg = tid / 128, wt = tid % 128;
  Bar& bar = cur_block->wg_bar[wg];
  bar_wait(bar);
  if (wt == 0) {
    WarpgroupState& s = wg_state()[{cur_block, wg}];
    long long committed = s.committed[0];
    for (int t = 1; t < 128; ++t) committed = std::min(committed, s.committed[t]);
    for (; s.done < committed - pending; ++s.done) {
      for (const WgmmaOp& op : s.groups[s.done]) wgmma_execute(op);
      s.groups.erase(s.done);
    }
  }
  bar_wait(bar);
}

}  // namespace emu
