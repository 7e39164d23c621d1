// test_dataflow_sync_emulation.cpp: the dataflow megakernel's publish / wait (solutions/decode/
// megakernel/dataflow_sync.cuh) run from its source on the CPU: 2-CTA clusters each own a block of
// rows of a vector per layer; in every layer each CTA waits for the previous layer's publication of
// every cluster, checks that it sees every row of it, then writes its rows (later CTAs later, so a
// wait that lets a CTA through early reads a stale row) and publishes. Two launches (decode steps)
// of three layers each on the same counters, never reset: the publication numbers go on across
// launches. (Checked: a wait for one publisher fewer than the cluster's two reads stale rows.)
#include <gtest/gtest.h>

#include <vector>

#include <cuda_runtime.h>  // first: the shim headers set up the emulation
#include <cooperative_groups.h>

#include "dataflow_sync.cuh"

namespace nibble {
namespace {

namespace v2 = megakernel::v2;
namespace cg = cooperative_groups;

constexpr int kW = 3, kThreads = 32 * (1 + kW), kRowsPerCta = 16, kLayers = 3;

__host__ __device__ inline float value(unsigned seq, int row) { return float(seq) * 1000.f + float(row); }

struct Args {
  float* v;           // (2, rows): the vector of each layer parity
  unsigned* counter;  // (clusters): publications x 2
  unsigned* stale;    // per CTA: rows read before they held the previous layer's value
  unsigned step;
  int shortfall;      // 0; 1 waits for one publisher fewer (the check's own test)
};

__device__ void layers(Args a) {
  cg::cluster_group cluster = cg::this_cluster();
  const int cta = int(blockIdx.z), clusters = int(gridDim.z) / 2, rows = int(gridDim.z) * kRowsPerCta;
  const int warp = int(threadIdx.x) / 32;
  if (warp > 0) {
    const uint32_t w = uint32_t(warp - 1);
    for (int l = 0; l < kLayers; ++l) {
      const unsigned seq = v2::publication(a.step, kLayers, unsigned(l));
      if (seq > 1) {  // the previous publication: layer l - 1, or the last layer of the previous step
        v2::wait_published<kW>(a.counter, 0, clusters, 2 * (seq - 1) - unsigned(a.shortfall), w);
        const float* prev = a.v + size_t((seq - 1) & 1) * rows;
        for (int r = int(w) * 32 + int(threadIdx.x & 31); r < rows; r += 32 * kW)
          if (prev[r] != value(seq - 1, r)) atomicAdd(&a.stale[cta], 1u);
      }
      // Later CTAs write later: each poll yields in the emulation.
      for (int i = 0; i < 30 * cta; ++i) (void)nibble::sol::ld_acquire_gpu(a.counter);
      float* cur = a.v + size_t(seq & 1) * rows;
      for (int r = int(w) * 32 + int(threadIdx.x & 31); r < kRowsPerCta; r += 32 * kW)
        cur[cta * kRowsPerCta + r] = value(seq, cta * kRowsPerCta + r);
      v2::publish<kW>(a.counter + cta / 2, w);
    }
  }
  cluster.sync();
}

/** Stale rows seen over two steps with `clusters` clusters. */
unsigned run(int clusters, int shortfall) {
  const int ctas = 2 * clusters;
  std::vector<float> v(size_t(2) * ctas * kRowsPerCta, -1.f);
  std::vector<unsigned> counter(size_t(clusters), 0u), stale(size_t(ctas), 0u);
  for (unsigned step = 0; step < 2; ++step)
    emu::launch_cooperative(+[](Args a) { layers(a); }, dim3(1, 1, unsigned(ctas)), dim3(kThreads), 0, 2u,
                            Args{v.data(), counter.data(), stale.data(), step, shortfall});
  for (unsigned c : counter) EXPECT_EQ(c, 2u * 2u * kLayers) << "every rank published once per layer and step";
  unsigned total = 0;
  for (unsigned s : stale) total += s;
  return total;
}

TEST(DataflowSyncEmulation, EveryCtaSeesEveryRowOfThePreviousLayerAcrossSteps) {
  for (int clusters : {1, 2, 4}) EXPECT_EQ(run(clusters, 0), 0u) << clusters << " clusters";
}

TEST(DataflowSyncEmulation, WaitingForOnePublisherFewerReadsStaleRows) { EXPECT_GT(run(4, 1), 0u); }

}  // namespace
}  // namespace nibble
