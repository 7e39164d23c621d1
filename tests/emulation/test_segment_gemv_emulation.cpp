// test_segment_gemv_emulation.cpp: the dataflow megakernel's matrix-segment GEMV (solutions/decode/
// megakernel/segment_gemv.cuh) run from its source on the CPU: 2-CTA clusters, each CTA streaming
// its K half of its cluster's tiles through the page pool (page_stream.cuh), the halves summed
// through the partner's shared memory (st.async on its mbarrier), y written by the rank that
// finishes each tile, each segment's input built by the consumer warps (x itself, RMSNorm(h) * gain,
// silu(gate) * up, the attention merged from chunk partials: dataflow_inputs.cuh). Several segments
// in one stream (four matrices, the first again: both peer buffers, each reused), rows not a multiple of 16, K halves of unequal groups, 1 to 3 clusters
// (tiles per cluster from 5 down to 1), against an fp64 W x with the v1 GEMV's bound (|y - W x| <=
// 3e-5 sum |w x|); every row written exactly once (NaN sentinels), none beyond `rows`. The kernel and
// the checks are tests/decode/dataflow_cases.cuh, shared with the GPU test. (Checked: a rank
// finishing the partner's tiles, adding its own part twice, or one peer buffer, fails.)
#include <gtest/gtest.h>

#include <cstdio>
#include <vector>

#include <cuda_runtime.h>  // first: the shim headers set up the emulation

#include "decode/dataflow_cases.cuh"

namespace nibble {
namespace {

using namespace test::dataflow_cases;
using test::Matrix;
using test::make_matrix;

TEST(SegmentGemvEmulation, ClusterRowsOfSeveralSegmentsMatchFp64) {
  // 200 rows (13 tiles, the last partial) x 3 groups (K halves of 1 and 2 groups) on RMSNorm(h);
  // 40 rows x 6 groups on silu(gate) * up; 64 rows x 3 groups on the attention merged from 3 chunks
  // (6 query heads of hd 64); 24 rows x 2 groups on x itself; 32 rows x 8 groups on the attention
  // merged from 40 chunks (8 heads of hd 128: more chunks than a warp's lanes and than one batch of
  // attn_input's loads, and more float4s of a K half than the consumer threads). Then the pages'
  // sums: 48 rows x 1 group (rank 0 has no group: no page, sums of zero), x 9 groups (K halves of 4
  // and 5 groups: 1 and 2 pages a tile) and x 18 groups (9 each: 3 pages a tile, the last of one
  // unit), where a tile's page sums are added in page order (a sum that drops page 2 or later fails
  // by ~1900x the bound, a reviewer's check).
  const std::vector<Matrix> mats{make_matrix(200, 384, 0, 1),  make_matrix(40, 768, 0, 2),  make_matrix(64, 384, 0, 3),
                                 make_matrix(24, 256, 0, 4),   make_matrix(32, 1024, 0, 5), make_matrix(48, 128, 0, 6),
                                 make_matrix(48, 1152, 0, 7), make_matrix(48, 2304, 0, 8)};
  const std::vector<InputSpec> specs{{kInputNorm}, {kInputSwiglu}, {kInputAttn, 6, 64, 3}, {kInputX}, {kInputAttn, 8, 128, 40},
                                     {kInputX},    {kInputX},      {kInputX}};
  const std::vector<int> order{0, 1, 2, 3, 4, 0, 5, 6, 7};
  // Both ways of adding a tile's pages: in page order (the default), and with atomics
  // (NIBBLE_DF_ORDER=0, the A/B switch: not bitwise run to run, as correct).
  for (const bool ordered : {true, false})
  for (int clusters : {1, 2, 3}) {
    emu::unreg_all();
    for (const Matrix& m : mats) emu::reg("W", m.units.data(), m.units.size() * 16);
    SegmentCase c = make_segment_case(mats, order, clusters, [&](int m) { return mats[size_t(m)].units.data(); }, specs);
    for (const Input& in : c.inputs) emu::reg("src", in.src.data(), in.src.size() * 4);
    std::vector<std::vector<float>> ys;
    std::vector<Job> jobs;
    for (int m : order) ys.push_back(nan_output(mats[size_t(m)]));
    for (size_t s = 0; s < order.size(); ++s) {
      const Input& in = c.inputs[size_t(order[s])];
      jobs.push_back(make_job(mats[size_t(order[s])], in, in.src.data(), in.gain.data(), ys[s].data()));
    }
    emu::launch_cooperative(+[](SegArgs a) { run_segments(a); }, dim3(1, 1, unsigned(2 * clusters)), dim3(kThreads), c.smem, 2u,
                            SegArgs{c.segs.data(), c.first.data(), jobs.data(), c.max_k, c.max_tiles, c.max_pages, ordered, c.attn_weights});
    double worst = 0.0;
    int unwritten = 0;
    for (size_t s = 0; s < order.size(); ++s)
      worst = std::max(worst, check_segment(mats[size_t(order[s])], c.inputs[size_t(order[s])].x, ys[s], &unwritten));
    EXPECT_EQ(unwritten, 0) << clusters << " clusters: rows never written or written beyond the matrix";
    EXPECT_LE(worst, 1.0) << clusters << " clusters: worst |y - W x| / (3e-5 sum |w x|)";
    std::printf("%d clusters%s: worst error %.3g of the bound\n", clusters, ordered ? "" : " (atomics)", worst);
  }
}

}  // namespace
}  // namespace nibble
