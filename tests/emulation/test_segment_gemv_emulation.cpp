// test_segment_gemv_emulation.cpp: the dataflow megakernel's matrix-segment GEMV (solutions/decode/
// megakernel/segment_gemv.cuh) run from its source on the CPU: 2-CTA clusters, each CTA streaming
// its K half of its cluster's tiles through the page pool (page_stream.cuh), the halves summed
// through the partner's shared memory (st.async on its mbarrier), y written by the rank that
// finishes each tile. Several segments in one stream (two matrices, the first again: both peer
// buffers, each reused), rows not a multiple of 16, K halves of unequal groups, 1 to 3 clusters
// (tiles per cluster from 5 down to 1), against an fp64 W x with the v1 GEMV's bound (|y - W x| <=
// 3e-5 sum |w x|); every row written exactly once (NaN sentinels), none beyond `rows`. (Checked: a
// rank finishing the partner's tiles, or adding its own part twice, fails.)
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <limits>
#include <random>
#include <vector>

#include <cuda_runtime.h>  // first: the shim headers set up the emulation
#include <cooperative_groups.h>

#include "dataflow_plan.h"
#include "megakernel_matrix.h"
#include "segment_gemv.cuh"

namespace nibble {
namespace {

namespace v2 = megakernel::v2;
namespace df = megakernel::dataflow;
namespace cg = cooperative_groups;
using test::Matrix;
using test::make_matrix;

constexpr int kW = 3;                    // consumer warps
constexpr int kThreads = 32 * (1 + kW);  // warp 0 produces
constexpr uint32_t kPages = 6;

/** One segment's problem: its matrix's x and y (the segment's CTA-specific part is in the stream). */
struct Job {
  const float* x;
  float* y;
  int rows, k;
};

struct Args {
  const v2::StreamSegment* segs;  // CTA c's are [first[c], first[c + 1]), one per job
  const int* first;
  const Job* jobs;
  int max_k;
  uint32_t max_tiles;
};

__device__ void run_segments(Args a) {
  NIBBLE_DYNAMIC_SMEM(smem, 16);
  cg::cluster_group cluster = cg::this_cluster();
  const v2::PagePool pool = v2::page_pool_init(smem, kPages, kW);
  unsigned char* xq = smem + v2::page_pool_bytes(kPages);
  const v2::ClusterSum cs = v2::cluster_sum_init(xq + megakernel::xquant_bytes(a.max_k), a.max_tiles);
  cluster.sync();  // both CTAs' mbarriers initialised before either sends
  const int cta = int(blockIdx.z), warp = int(threadIdx.x) / 32;
  const v2::StreamSegment* mine = a.segs + a.first[cta];
  const int n = a.first[cta + 1] - a.first[cta];
  if (warp == 0) {
    if (threadIdx.x == 0) v2::produce_pages(pool, mine, n);
  } else {
    uint32_t k = 0;
    for (int s = 0; s < n; ++s) {
      const Job j = a.jobs[s];
      megakernel::build_x_limbs_warps(warp - 1, kW, j.x, j.k, xq, nullptr, 1.f, mine[s].g0, mine[s].g1);
      v2::consumers_sync<kW>();
      v2::segment_gemv<kW>(pool, mine[s], k, uint32_t(warp - 1), xq, cs, uint32_t(s), cluster.block_rank(), j.y, j.rows);
    }
  }
  cluster.sync();  // no CTA leaves while its partner may still store into it
}

/** The matrices of `order` (indices into mats) streamed by `clusters` clusters; the worst error
 *  ratio over rows and the rows that are NaN (never written) or written beyond `rows`. */
void run(const std::vector<Matrix>& mats, const std::vector<int>& order, int clusters, double* worst, int* unwritten) {
  emu::unreg_all();
  std::mt19937 rng(11);
  std::vector<std::vector<float>> xs(mats.size()), ys(order.size());
  for (size_t m = 0; m < mats.size(); ++m) {
    xs[m].resize(size_t(mats[m].k));
    for (float& v : xs[m]) v = std::uniform_real_distribution<float>(-1.f, 1.f)(rng);
    emu::reg("W", mats[m].units.data(), mats[m].units.size() * 16);
  }
  std::vector<Job> jobs;
  int max_k = 0;
  uint32_t max_tiles = 0;
  for (size_t s = 0; s < order.size(); ++s) {
    const Matrix& M = mats[size_t(order[s])];
    ys[s].assign(size_t(M.tiles) * 16 + 16, std::numeric_limits<float>::quiet_NaN());  // a guard tile beyond
    jobs.push_back(Job{xs[size_t(order[s])].data(), ys[s].data(), M.rows, M.k});
    max_k = std::max(max_k, M.k);
  }
  std::vector<v2::StreamSegment> segs;
  std::vector<int> first;
  for (int cta = 0; cta < 2 * clusters; ++cta) {
    first.push_back(int(segs.size()));
    for (int m : order) {
      const Matrix& M = mats[size_t(m)];
      int t0 = 0, t1 = 0;
      df::cluster_tiles(M.tiles, clusters, cta / 2, &t0, &t1);
      v2::StreamSegment s;
      s.w = M.units.data();
      s.tile0 = uint32_t(t0), s.tile1 = uint32_t(t1);
      s.g0 = uint16_t(M.groups * (cta % 2) / 2), s.g1 = uint16_t(M.groups * (cta % 2 + 1) / 2), s.groups = uint16_t(M.groups);
      segs.push_back(s);
      max_tiles = std::max(max_tiles, uint32_t(t1 - t0));
    }
  }
  first.push_back(int(segs.size()));
  const size_t smem = v2::page_pool_bytes(kPages) + megakernel::xquant_bytes(max_k) + v2::cluster_sum_bytes(max_tiles);
  emu::launch_cooperative(+[](Args a) { run_segments(a); }, dim3(1, 1, unsigned(2 * clusters)), dim3(kThreads), smem, 2u,
                          Args{segs.data(), first.data(), jobs.data(), max_k, max_tiles});
  *worst = 0.0;
  *unwritten = 0;
  for (size_t s = 0; s < order.size(); ++s) {
    const Matrix& M = mats[size_t(order[s])];
    const std::vector<float>& x = xs[size_t(order[s])];
    for (int r = 0; r < int(ys[s].size()); ++r) {
      if (r >= M.rows) {
        *unwritten += !std::isnan(ys[s][size_t(r)]);  // beyond rows: must stay untouched
        continue;
      }
      if (std::isnan(ys[s][size_t(r)])) {
        ++*unwritten;
        continue;
      }
      double ref = 0.0, mag = 0.0;
      for (int kk = 0; kk < M.k; ++kk) {
        ref += M.w(r, kk) * x[size_t(kk)];
        mag += std::fabs(M.w(r, kk) * x[size_t(kk)]);
      }
      *worst = std::max(*worst, std::fabs(ys[s][size_t(r)] - ref) / (3e-5 * mag));
    }
  }
}

TEST(SegmentGemvEmulation, ClusterRowsOfSeveralSegmentsMatchFp64) {
  // 200 rows (13 tiles, the last partial) x 3 groups (K halves of 1 and 2 groups); 40 rows x 6 groups.
  const std::vector<Matrix> mats{make_matrix(200, 384, 0, 1), make_matrix(40, 768, 0, 2)};
  for (int clusters : {1, 2, 3}) {
    double worst = 0.0;
    int unwritten = 0;
    run(mats, {0, 1, 0}, clusters, &worst, &unwritten);
    EXPECT_EQ(unwritten, 0) << clusters << " clusters: rows never written or written beyond the matrix";
    EXPECT_LE(worst, 1.0) << clusters << " clusters: worst |y - W x| / (3e-5 sum |w x|)";
    std::printf("%d clusters: worst error %.3g of the bound\n", clusters, worst);
  }
}

}  // namespace
}  // namespace nibble
