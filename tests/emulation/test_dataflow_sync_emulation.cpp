// test_dataflow_sync_emulation.cpp: the dataflow megakernel's publish / wait (solutions/decode/
// megakernel/dataflow_sync.cuh) run from its source on the CPU: 2-CTA clusters each own a block of
// rows of a vector per layer; in every layer each CTA waits for the previous layer's publication of
// every cluster, checks that it sees every row of it, then writes its rows (later CTAs later, so a
// wait that lets a CTA through early reads a stale row) and publishes. Two launches (decode steps)
// of three layers each on the same counters, never reset: the publication numbers go on across
// launches. The kernel is tests/decode/dataflow_cases.cuh, shared with the GPU test. (Checked: a wait
// for one publisher fewer than the cluster's two reads stale rows: the second test.)
#include <gtest/gtest.h>

#include <vector>

#include <cuda_runtime.h>  // first: the shim headers set up the emulation

#include "decode/dataflow_cases.cuh"

namespace nibble {
namespace {

using namespace test::dataflow_cases;

/** Stale rows seen over two steps with `clusters` clusters. */
unsigned run(int clusters, int shortfall) {
  const int ctas = 2 * clusters;
  std::vector<float> v(size_t(2) * ctas * kRowsPerCta, -1.f);
  std::vector<unsigned> counter(size_t(clusters), 0u), stale(size_t(ctas), 0u);
  for (unsigned step = 0; step < 2; ++step)
    emu::launch_cooperative(+[](SyncArgs a) { sync_layers(a); }, dim3(1, 1, unsigned(ctas)), dim3(kThreads), 0, 2u,
                            SyncArgs{v.data(), counter.data(), stale.data(), step, shortfall});
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
