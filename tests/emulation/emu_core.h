// emu_core.h: CPU execution of a CUDA kernel's own source, for tests that cannot have a GPU: one
// ucontext fiber per CUDA thread, the blocks of a grid one after another, __syncthreads and the warp
// collectives (mma.sync) as fiber barriers (a barrier some thread never reaches is a deadlock, reported),
// every global load checked against the registered allocations (bounds and alignment). The mma.sync
// m16n8k16 bf16 model reads and writes the lanes' fragments through the PTX ISA's tables ("Matrix
// fragments for mma.m16n8k16", checked to be bijections on every call) and sums the 16 exact
// products and C in double, rounded once to fp32 (the hardware's fp32 accumulation is within a few
// fp32 ulps of it). Used through the shim headers in tests/emulation/shim/, which the test puts
// ahead of the real ones on its include path.
#pragma once
#include <ucontext.h>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <algorithm>
#include <functional>
#include <map>
#include <numeric>
#include <random>
#include <string>
#include <vector>
#include <cmath>

struct uint3 { unsigned x = 0, y = 0, z = 0; };
struct dim3 {
  unsigned x = 1, y = 1, z = 1;
  dim3(unsigned a = 1, unsigned b = 1, unsigned c = 1) : x(a), y(b), z(c) {}
};

namespace emu {

[[noreturn]] inline void die(const std::string& s) {
  std::fprintf(stderr, "EMU FATAL: %s\n", s.c_str());
  std::abort();
}

// ---- registered memory regions (the "device" allocations); every load is checked against them
struct Region { const char* name; uintptr_t base; size_t bytes; };
inline std::vector<Region>& regions() { static std::vector<Region> r; return r; }
inline void reg(const char* name, const void* p, size_t bytes) { regions().push_back({name, uintptr_t(p), bytes}); }
inline void unreg_all() { regions().clear(); }
inline void unreg(const void* p) {
  auto& r = regions();
  for (size_t i = 0; i < r.size(); ++i)
    if (r[i].base == uintptr_t(p)) {
      r.erase(r.begin() + long(i));
      return;
    }
}
inline long long& load_count() { static long long n = 0; return n; }
/** Dies unless [p, p + bytes) is `align`-aligned and inside one region (what: the access, for the message). */
inline void check_range(const void* p, size_t bytes, size_t align, const char* what) {
  const uintptr_t a = uintptr_t(p);
  if (a % align != 0) die(std::string(what) + ": misaligned load");
  for (const Region& r : regions())
    if (a >= r.base && a + bytes <= r.base + r.bytes) return;
  char buf[256];
  std::snprintf(buf, sizeof buf, "%s: load of %zu bytes at %p outside every region", what, bytes, p);
  for (const Region& r : regions())
    std::fprintf(stderr, "  region %s [%p, +%zu) offset %lld\n", r.name, (void*)r.base, r.bytes, (long long)(a - r.base));
  die(buf);
}

inline void check_load(const void* p, size_t bytes, size_t align, const char* what) {
  check_range(p, bytes, align, what);
  ++load_count();
}

// ---- fibers and blocks
struct Bar {
  int count = 0, arrived = 0;
  long long gen = 0;
};
struct MBar {
  int count = 0, pending = 0;
  long long tx = 0;
  unsigned phases = 0;  // completed phases: the current phase's parity is phases & 1
};
struct WarpMmaSlots {
  uint32_t a[32][4], b0[32], b1[32];
  float c[32][4], d[32][4];
};
struct WarpImmaSlots {
  uint32_t a[32][4], b0[32], b1[32];
  int c[32][4];
};
struct WarpExchange {
  uint64_t v[32];
};
/** What a block owns: its dynamic shared memory (filled with 0xCD: the GPU's is uninitialised),
 *  its mbarriers, its block and warp barriers and the warps' exchange slots. */
struct BlockState {
  uint3 idx;
  std::vector<BlockState*> cluster;  // the blocks of this block's cluster, by rank (itself alone if none)
  unsigned cluster_rank = 0;
  Bar* cluster_bar = nullptr;        // every thread of the cluster
  std::vector<unsigned char> smem_storage;  // 2048 bytes more than smem_bytes
  unsigned char* window = nullptr;          // 1024-byte aligned: shared address kSmemWindow (swizzle bits kept)
  unsigned char* smem = nullptr;            // the dynamic shared memory: window + kSmemOffset
  size_t smem_bytes = 0;
  std::map<int, Bar> named_bar;             // bar.sync id, n (id 0 is block_bar)
  Bar wg_bar[8];                            // the warpgroups' (4 warps) barriers: wgmma
  std::map<uint32_t, MBar> mbars;
  Bar block_bar;
  Bar warp_bar[32];
  int warp_op[32][32];  // the collective each lane of a warp is in (warp_collective): they must match
  WarpMmaSlots mma[32];
  WarpImmaSlots imma[32];
  WarpExchange xchg[32];
};
struct Fiber {
  uint3 tid;
  BlockState* block = nullptr;
  ucontext_t ctx;
  bool done = false;
  std::vector<char> stack;
};
inline ucontext_t sched_ctx;
inline Fiber* cur = nullptr;
inline BlockState* cur_block = nullptr;
inline uint3 g_blockIdx, g_gridDim, g_blockDim;
inline uint3 g_threadIdx;  // the running fiber's: set by the scheduler before it resumes one
inline long long events = 0;  // barrier arrivals and thread exits: progress
inline std::function<void()> body;
inline size_t fiber_stack_bytes = 256 * 1024;
inline constexpr long long kMaxIdlePasses = 20000;
/** 0 (the default, or $NIBBLE_EMU_SCHEDULE_SEED): each pass of the scheduler runs the fibers in
 *  thread order. Otherwise the warps in a random order each pass, drawn from this seed (a warp's lanes stay in order): another interleaving the
 *  GPU could take, so that a result that depends on which warp gets somewhere first shows up as a
 *  difference between two seeds. */
inline uint64_t schedule_seed = []() -> uint64_t {
  const char* e = std::getenv("NIBBLE_EMU_SCHEDULE_SEED");  // a whole test binary under another schedule
  if (!e || !*e) return 0ull;
  char* end = nullptr;
  errno = 0;
  const unsigned long long v = std::strtoull(e, &end, 10);
  if (*end != '\0' || errno != 0 || *e == '-') {
    std::fprintf(stderr, "NIBBLE_EMU_SCHEDULE_SEED=%s: a seed is a number from 0 to 2^64 - 1 (0: thread order)\n", e);
    std::exit(2);
  }
  return uint64_t(v);
}();

inline void yield() { swapcontext(&cur->ctx, &sched_ctx); }

inline void bar_wait(Bar& b) {
  const long long my = b.gen;
  ++events;
  if (++b.arrived == b.count) {
    b.arrived = 0;
    ++b.gen;
    return;
  }
  while (b.gen == my) yield();
}
inline Bar& warp_bar(int w) { return cur_block->warp_bar[w]; }

/** The collectives a warp's lanes can meet in; all 32 lanes must be in the same one. */
enum WarpOp { kOpSyncwarp = 1, kOpShuffle, kOpMma, kOpImma };
/** Enter warp collective `op`: the warp's barrier, where the last lane to arrive checks, before any
 *  leaves, that every lane came for the same op (lanes of a divergent warp pairing different
 *  collectives would otherwise exchange stale data). */
inline void warp_collective(WarpOp op) {
  const int w = int(g_threadIdx.x) / 32, lane = int(g_threadIdx.x) % 32;
  cur_block->warp_op[w][lane] = op;
  Bar& b = warp_bar(w);
  if (b.arrived + 1 == b.count)
    for (int l = 0; l < 32; ++l)
      if (cur_block->warp_op[w][l] != op) {
        std::string ops;
        for (int m = 0; m < 32; ++m) ops += char('0' + cur_block->warp_op[w][m]);
        die("warp collective: the lanes of warp " + std::to_string(w) + " are in different collectives (divergence; "
            "per lane, 1 __syncwarp, 2 shuffle, 3 mma, 4 integer mma: " + ops + ")");
      }
  bar_wait(b);
}
inline unsigned char* smem_base() { return cur_block->smem; }
inline size_t smem_size() { return cur_block->smem_bytes; }
inline std::map<uint32_t, MBar>& mbars() { return cur_block->mbars; }
inline constexpr uint32_t kSmemWindow = 0x400;  // shared addresses start here (0 is never valid; 18 bits as descriptors take)
/** Where the dynamic shared memory starts after a 1024-byte boundary: 128 (its declared alignments
 *  hold, a kernel that needs 1024 must round up itself, as on the GPU, where nothing promises more). */
inline constexpr size_t kSmemOffset = 128;
inline constexpr size_t kMaxSmemBytes = 227 * 1024;

inline void fiber_entry() {
  body();
  cur->done = true;
  ++events;
  // uc_link returns to the scheduler
}

/** Run `fn` on every thread of `blocks`, all their fibers scheduled together, each block given
 *  `dyn_smem_bytes` of dynamic shared memory. */
inline void run_blocks(std::vector<BlockState>& blocks, unsigned nthreads, size_t dyn_smem_bytes,
                       const std::function<void()>& fn) {
  if (nthreads % 32 != 0) die("block not a whole number of warps");
  static std::vector<Fiber> fibers;
  const size_t n = blocks.size() * nthreads;
  if (fibers.size() < n) fibers.resize(n);
  body = fn;
  for (BlockState& b : blocks) {
    if (dyn_smem_bytes > kMaxSmemBytes) die("dynamic shared memory above sm_90's 227 KB per block");
    b.smem_storage.assign(dyn_smem_bytes + 2048, 0xCD);
    b.window = reinterpret_cast<unsigned char*>((reinterpret_cast<uintptr_t>(b.smem_storage.data()) + 1023) & ~uintptr_t(1023));
    b.smem = b.window + kSmemOffset;
    b.smem_bytes = dyn_smem_bytes;
    b.named_bar.clear();
    for (unsigned w = 0; w < nthreads / 128; ++w) b.wg_bar[w] = Bar{128, 0, 0};
    b.mbars.clear();
    b.block_bar = Bar{int(nthreads), 0, 0};
    for (unsigned w = 0; w < nthreads / 32; ++w) b.warp_bar[w] = Bar{32, 0, 0};
  }
  for (size_t i = 0; i < n; ++i) {
    Fiber& f = fibers[i];
    f.tid = uint3{unsigned(i % nthreads), 0, 0};
    f.block = &blocks[i / nthreads];
    f.done = false;
    if (f.stack.size() != fiber_stack_bytes) f.stack.assign(fiber_stack_bytes, 0);
    getcontext(&f.ctx);
    f.ctx.uc_stack.ss_sp = f.stack.data();
    f.ctx.uc_stack.ss_size = f.stack.size();
    f.ctx.uc_link = &sched_ctx;
    makecontext(&f.ctx, fiber_entry, 0);
  }
  long long idle_passes = 0;
  static bool said = false;  // once per process: which schedule the run used
  if (schedule_seed != 0 && !said) {
    std::fprintf(stderr, "emu: warps in a random order each pass, seed %llu\n", (unsigned long long)schedule_seed);
    said = true;
  }
  std::vector<size_t> warps(n / 32);
  std::iota(warps.begin(), warps.end(), size_t(0));
  std::mt19937_64 rng(schedule_seed);
  for (;;) {
    bool all = true;
    const long long before = events;
    if (schedule_seed != 0) std::shuffle(warps.begin(), warps.end(), rng);
    for (size_t i_ = 0; i_ < n; ++i_) {
      const size_t i = warps[i_ / 32] * 32 + i_ % 32;
      Fiber& f = fibers[i];
      if (f.done) continue;
      all = false;
      cur = &f;
      cur_block = f.block;
      g_threadIdx = f.tid;
      g_blockIdx = f.block->idx;
      swapcontext(&sched_ctx, &f.ctx);
    }
    if (all) break;
    // A fiber polling memory (an acquire load, an mbarrier wait) yields without progress; a run of
    // kMaxIdlePasses passes with no barrier arrival, mbarrier completion or exit is a deadlock.
    idle_passes = events == before ? idle_passes + 1 : 0;
    if (idle_passes == kMaxIdlePasses) {
      int waiting = 0;
      for (size_t i = 0; i < n; ++i) waiting += !fibers[i].done;
      die("deadlock: " + std::to_string(waiting) + " threads waiting, no progress in " + std::to_string(kMaxIdlePasses) +
          " passes (a barrier that cannot complete, or a flag nobody sets)");
    }
  }
  cur = nullptr;
  cur_block = nullptr;
}

/** Run the grid one block after another (blocks that never wait for each other: any order is one
 *  the GPU could take). */
template <class... P, class... Args>
void launch(void (*kernel)(P...), dim3 grid, dim3 block, size_t dyn_smem_bytes, Args... args) {
  if (block.y != 1 || block.z != 1 || grid.z != 1) die("emu: 1-D blocks, 2-D grids only");
  g_gridDim = uint3{grid.x, grid.y, 1};
  g_blockDim = uint3{block.x, 1, 1};
  std::vector<BlockState> one(1);
  for (unsigned by = 0; by < grid.y; ++by)
    for (unsigned bx = 0; bx < grid.x; ++bx) {
      one[0].idx = uint3{bx, by, 0};
      run_blocks(one, block.x, dyn_smem_bytes, [&] { kernel(P(args)...); });
    }
}

/** Run the grid with every block resident at once: cudaLaunchCooperativeKernel (blocks that wait for
 *  each other through global memory) and thread-block clusters of cluster_z consecutive blocks along
 *  z (cluster barriers, each other's shared memory). */
template <class... P, class... Args>
void launch_cooperative(void (*kernel)(P...), dim3 grid, dim3 block, size_t dyn_smem_bytes, unsigned cluster_z,
                        Args... args) {
  if (block.y != 1 || block.z != 1) die("emu: 1-D blocks only");
  if (cluster_z < 1 || grid.z % cluster_z != 0) die("emu: the grid's z must be a multiple of the cluster's");
  if (cluster_z > 8) die("a thread-block cluster of more than 8 blocks (the portable limit)");
  g_gridDim = uint3{grid.x, grid.y, grid.z};
  g_blockDim = uint3{block.x, 1, 1};
  std::vector<BlockState> all(size_t(grid.x) * grid.y * grid.z);
  std::vector<Bar> cluster_bars(all.size() / cluster_z, Bar{int(cluster_z * block.x), 0, 0});
  size_t i = 0;
  for (unsigned z = 0; z < grid.z; ++z)
    for (unsigned y = 0; y < grid.y; ++y)
      for (unsigned x = 0; x < grid.x; ++x) all[i++].idx = uint3{x, y, z};
  for (BlockState& b : all) {
    const size_t base_z = b.idx.z / cluster_z * cluster_z;
    b.cluster_rank = b.idx.z - unsigned(base_z);
    for (unsigned r = 0; r < cluster_z; ++r)
      b.cluster.push_back(&all[((base_z + r) * grid.y + b.idx.y) * grid.x + b.idx.x]);
    b.cluster_bar = &cluster_bars[((b.idx.z / cluster_z) * grid.y + b.idx.y) * grid.x + b.idx.x];
  }
  run_blocks(all, block.x, dyn_smem_bytes, [&] { kernel(P(args)...); });
}

/** Die unless a fragment table put every element of an R x C operand in exactly one lane slot. */
template <int R, int C>
void check_once(const int (&seen)[R][C], const char* what) {
  for (int r = 0; r < R; ++r)
    for (int c = 0; c < C; ++c)
      if (seen[r][c] != 1) die(std::string(what) + " fragment table not a bijection");
}

/** Where lane (g = lane / 4, t = lane % 4) keeps element e of register r of an m16n8 mma operand
 *  (PTX ISA, the mma.m16n8k16 .bf16 and m16n8k32 .s8 fragment tables, which differ only in the
 *  elements per 32-bit register, `per`: 2 or 4). A: 16 x 8 per, row-major; B: 8 per x 8 (k, column);
 *  C and D: 16 x 8, one element per register. */
struct FragPos {
  int row, col;
};
inline FragPos mma_a_pos(int lane, int r, int e, int per) {
  return {(lane >> 2) + 8 * (r & 1), per * (lane & 3) + 4 * per * (r >> 1) + e};
}
inline FragPos mma_b_pos(int lane, int r, int e, int per) { return {per * (lane & 3) + 4 * per * r + e, lane >> 2}; }
inline FragPos mma_c_pos(int lane, int i) { return {(lane >> 2) + 8 * (i >> 1), 2 * (lane & 3) + (i & 1)}; }

// ---- mma.sync m16n8k16 row.col f32.bf16.bf16.f32, warp collective
inline int mma_mode = 0;  // 0: exact sum of the 16 products + C, rounded once to fp32; 1: sequential fp32 in k order
inline long long mma_count = 0;
inline float bf(uint16_t h) { uint32_t u = uint32_t(h) << 16; float f; std::memcpy(&f, &u, 4); return f; }

/** D = A B + C from the 32 lanes' fragments (PTX ISA, mma.m16n8k16 .bf16 fragment tables). */
inline void mma_warp(const uint32_t (*a)[4], const uint32_t* b0, const uint32_t* b1, const float (*c)[4], float (*d)[4]) {
  float Am[16][16], Bm[16][8], Cm[16][8];
  int seenA[16][16] = {}, seenB[16][8] = {}, seenC[16][8] = {};
  for (int lane = 0; lane < 32; ++lane) {
    const uint32_t b[2] = {b0[lane], b1[lane]};
    for (int r = 0; r < 4; ++r)
      for (int e = 0; e < 2; ++e) {
        const FragPos p = mma_a_pos(lane, r, e, 2);
        Am[p.row][p.col] = bf(uint16_t(a[lane][r] >> (16 * e)));
        ++seenA[p.row][p.col];
      }
    for (int r = 0; r < 2; ++r)
      for (int e = 0; e < 2; ++e) {
        const FragPos p = mma_b_pos(lane, r, e, 2);
        Bm[p.row][p.col] = bf(uint16_t(b[r] >> (16 * e)));
        ++seenB[p.row][p.col];
      }
    for (int i = 0; i < 4; ++i) {
      const FragPos p = mma_c_pos(lane, i);
      Cm[p.row][p.col] = c[lane][i];
      ++seenC[p.row][p.col];
    }
  }
  check_once(seenA, "mma A");
  check_once(seenB, "mma B");
  check_once(seenC, "mma C");
  float Dm[16][8];
  for (int r = 0; r < 16; ++r)
    for (int n = 0; n < 8; ++n) {
      if (mma_mode == 0) {
        double s = Cm[r][n];
        for (int k = 0; k < 16; ++k) s += double(Am[r][k]) * double(Bm[k][n]);
        Dm[r][n] = float(s);
      } else {
        float s = Cm[r][n];
        for (int k = 0; k < 16; ++k) s += Am[r][k] * Bm[k][n];
        Dm[r][n] = s;
      }
    }
  for (int lane = 0; lane < 32; ++lane)
    for (int i = 0; i < 4; ++i) {
      const FragPos p = mma_c_pos(lane, i);
      d[lane][i] = Dm[p.row][p.col];
    }
  ++mma_count;
}


/** This fiber's lane of mma.sync.aligned m16n8k16 (d += a b): all 32 lanes of the warp must arrive. */
void mma_sync(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1);

/** This fiber's lane of mma.sync.aligned m16n8k32 u8 x s8 -> s32 (c += a b), exact: lane (g, t)
 *  holds A rows g (a0, a2) / g + 8 (a1, a3) at k 4t..4t+3 (a0, a1) and 16 + 4t.. (a2, a3), B column
 *  g at k 4t.. (b0) and 16 + 4t.. (b1), the lowest k in the lowest byte; c as m16n8k16's d. */
void imma_sync(int (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1);

}  // namespace emu

// The kernel's built-in variables: references to the scheduler's state (not macros: the launch
// configuration has fields of the same names).
inline const uint3& threadIdx = ::emu::g_threadIdx;
inline const uint3& blockIdx = ::emu::g_blockIdx;
inline const uint3& gridDim = ::emu::g_gridDim;
inline const uint3& blockDim = ::emu::g_blockDim;
inline void __syncthreads() { ::emu::bar_wait(::emu::cur_block->block_bar); }

inline void emu::mma_sync(float (&d)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  const int w = int(threadIdx.x) / 32, lane = int(threadIdx.x) % 32;
  WarpMmaSlots& s = cur_block->mma[w];
  for (int i = 0; i < 4; ++i) s.a[lane][i] = a[i], s.c[lane][i] = d[i];
  s.b0[lane] = b0, s.b1[lane] = b1;
  warp_collective(kOpMma);  // .aligned: the whole warp, converged
  if (lane == 0) mma_warp(s.a, s.b0, s.b1, s.c, s.d);
  bar_wait(warp_bar(w));
  for (int i = 0; i < 4; ++i) d[i] = s.d[lane][i];
  bar_wait(warp_bar(w));
}


inline void emu::imma_sync(int (&c)[4], const uint32_t (&a)[4], uint32_t b0, uint32_t b1) {
  const int w = int(threadIdx.x) / 32, lane = int(threadIdx.x) % 32;
  WarpImmaSlots& s = cur_block->imma[w];
  for (int i = 0; i < 4; ++i) s.a[lane][i] = a[i], s.c[lane][i] = c[i];
  s.b0[lane] = b0, s.b1[lane] = b1;
  warp_collective(kOpImma);
  if (lane == 0) {
    int A[16][32], B[32][8], seenA[16][32] = {}, seenB[32][8] = {};
    for (int l = 0; l < 32; ++l) {
      const uint32_t b[2] = {s.b0[l], s.b1[l]};
      for (int r = 0; r < 4; ++r)
        for (int e = 0; e < 4; ++e) {
          const FragPos p = mma_a_pos(l, r, e, 4);
          A[p.row][p.col] = int((s.a[l][r] >> (8 * e)) & 0xFFu);  // u8
          ++seenA[p.row][p.col];
        }
      for (int r = 0; r < 2; ++r)
        for (int e = 0; e < 4; ++e) {
          const FragPos p = mma_b_pos(l, r, e, 4);
          B[p.row][p.col] = int(int8_t((b[r] >> (8 * e)) & 0xFFu));  // s8
          ++seenB[p.row][p.col];
        }
    }
    check_once(seenA, "m16n8k32 A");
    check_once(seenB, "m16n8k32 B");
    for (int l = 0; l < 32; ++l)
      for (int i = 0; i < 4; ++i) {
        const FragPos p = mma_c_pos(l, i);
        long long sum = s.c[l][i];
        for (int kk = 0; kk < 32; ++kk) sum += (long long)A[p.row][kk] * B[kk][p.col];
        s.c[l][i] = int(sum);  // s32 (the GEMV's sums stay far below 2^31)
      }
  }
  bar_wait(warp_bar(w));
  for (int i = 0; i < 4; ++i) c[i] = s.c[lane][i];
  bar_wait(warp_bar(w));
}
