// test_grid_sync_emulation.cpp: the megakernel's grid barriers (solutions/decode/megakernel/
// grid_sync.cuh: the generation barrier grid_sync, the split-phase release/acquire barrier
// grid_arrive / grid_wait and kernel_done's reset) run from their source on the CPU with every block
// resident at once (emu::launch_cooperative). Each block writes its slot of a vector in every round,
// meets the others at the barrier, and checks that it sees every block's value of that round; the
// counters must be back at zero at the end (the next launch starts from them). Later blocks write
// later (write_late), so a barrier that let a block through early shows as a stale slot (checked:
// a split-barrier target one short fails); one that never opens, as a reported deadlock.
#include <gtest/gtest.h>

#include <vector>

#include <cuda_runtime.h>  // first: the shim headers set up the emulation

#include "grid_sync.cuh"

namespace nibble {
namespace {

namespace mk = megakernel;

constexpr int kRounds = 6;

/** Block b's slot: what round r writes there. */
__device__ __forceinline__ unsigned value(int r, unsigned b) { return unsigned(r) * 100u + b; }

/** Block b's writer lets the others run 40 b times first (each acquire poll yields in the emulation),
 *  so that later blocks write later and a barrier that let a block through early shows as a stale
 *  slot (without the skew every writer runs before anyone reads). */
__device__ __forceinline__ void write_late(unsigned* s, int r) {
  if (threadIdx.x != 0) return;
  for (unsigned i = 0; i < 40 * blockIdx.x; ++i) (void)nibble::sol::ld_acquire_gpu(s);
  s[blockIdx.x] = value(r, blockIdx.x);
}

/** Thread 32 (another warp than the writer's) counts the slots that do not hold round r's values. */
__device__ __forceinline__ void count_stale(const unsigned* s, unsigned* bad, int r) {
  if (threadIdx.x == 32)
    for (unsigned b = 0; b < gridDim.x; ++b) bad[blockIdx.x] += s[b] != value(r, b);
}

/** The split barrier as the decode kernel uses it: block barrier, arrive, wait for the count of
 *  `phase` barriers, block barrier; kernel_done resets the counters at the end. */
struct SplitBarrier {
  static constexpr size_t kWords = 3;
  __device__ static void meet(unsigned* barrier, unsigned phase) {
    __syncthreads();
    mk::grid_arrive(barrier, 0);
    mk::grid_wait(barrier, phase * gridDim.x, 0);
    __syncthreads();
  }
  __device__ static void done(unsigned* barrier) { mk::kernel_done(barrier, nullptr, 0); }
};

/** The generation barrier: count and generation; nothing to do at the end. */
struct GenerationBarrier {
  static constexpr size_t kWords = 2;
  __device__ static void meet(unsigned* barrier, unsigned) { mk::grid_sync(barrier); }
  __device__ static void done(unsigned*) {}
};

/** kRounds of write, barrier, read, barrier in `blocks` blocks (the second barrier: nobody writes
 *  round r + 1 before all have read r); expects no stale slot and returns the barrier's words. */
template <class Barrier>
std::vector<unsigned> expect_every_block_sees_every_round(unsigned blocks) {
  std::vector<unsigned> slots(blocks, 0u), bar(Barrier::kWords, 0u), stale(blocks, 0u);
  emu::launch_cooperative(
      +[](unsigned* s, unsigned* barrier, unsigned* bad) {
        for (int r = 1; r <= kRounds; ++r) {
          write_late(s, r);
          Barrier::meet(barrier, unsigned(2 * r - 1));
          count_stale(s, bad, r);
          Barrier::meet(barrier, unsigned(2 * r));
        }
        Barrier::done(barrier);
      },
      dim3(blocks), dim3(64), 0, 1u, slots.data(), bar.data(), stale.data());
  for (unsigned b = 0; b < blocks; ++b) EXPECT_EQ(stale[b], 0u) << blocks << " blocks: block " << b;
  return bar;
}

TEST(GridSyncEmulation, SplitBarrierEveryBlockSeesEveryRoundsWrites) {
  for (const unsigned blocks : {1u, 3u, 5u}) {
    const std::vector<unsigned> bar = expect_every_block_sees_every_round<SplitBarrier>(blocks);
    EXPECT_EQ(bar[0], 0u) << blocks << " blocks: kernel_done resets the count";
    EXPECT_EQ(bar[2], 0u) << blocks << " blocks: and its own";
  }
}

TEST(GridSyncEmulation, GenerationBarrierEveryBlockSeesEveryRoundsWrites) {
  for (const unsigned blocks : {1u, 3u, 5u}) {
    const std::vector<unsigned> bar = expect_every_block_sees_every_round<GenerationBarrier>(blocks);
    EXPECT_EQ(bar[0], 0u) << blocks << " blocks: the count is back at zero";
    EXPECT_EQ(bar[1], unsigned(2 * kRounds)) << blocks << " blocks: one generation per barrier";
  }
}

}  // namespace
}  // namespace nibble
