// test_page_stream_emulation.cpp: the dataflow megakernel's weight stream (solutions/decode/
// megakernel/page_stream.cuh) run from its source on the CPU, on the segments of the real schedule
// (dataflow_plan.h) of a small model: one producer lane streams every CTA's segments of every layer
// through a pool of a few pages (so slots are reused many times), consumer warps check each page
// against the weights in global memory and count each unit. Every unit of every matrix of every
// layer must arrive exactly once, intact, at the CTA the plan gives it to, with 1 to P producer lanes
// issuing pages at once. (Checked: a consumer that waits for the wrong phase of full, a producer
// that does not wait for empty, a pool of pages the consumers do not divide, or producer lanes that
// do not converge between their batches, fails.)
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <random>
#include <vector>

#include <cuda_runtime.h>  // first: the shim headers set up the emulation

#include "dataflow_plan.h"
#include "page_stream.cuh"

namespace nibble {
namespace {

namespace df = megakernel::dataflow;
namespace v2 = megakernel::v2;
using megakernel::kUnitStride;

constexpr int kConsumers = 3;
constexpr int kThreads = 32 * (1 + kConsumers);  // warp 0 produces

/** Every CTA's segments and where each unit's count goes. */
struct Streams {
  std::vector<v2::StreamSegment> segs;  // CTA c's are [first[c], first[c + 1])
  std::vector<int> first;
  std::vector<unsigned> unit_base;      // per segment: its matrix's first count slot
};

__device__ void stream_and_check(const v2::StreamSegment* segs, const int* first, const unsigned* unit_base,
                                 unsigned* seen, unsigned* bad, int n_pages, int lanes) {
  NIBBLE_DYNAMIC_SMEM(smem, 16);
  const v2::PagePool pool = v2::page_pool_init(smem, uint32_t(n_pages), kConsumers);
  __syncthreads();
  const int cta = int(blockIdx.x), warp = int(threadIdx.x) / 32, lane = int(threadIdx.x) % 32;
  const v2::StreamSegment* mine = segs + first[cta];
  const int n = first[cta + 1] - first[cta];
  if (warp == 0) {
    v2::produce_pages(pool, mine, n, uint32_t(lanes));
    return;
  }
  uint32_t k = 0;
  for (int s = 0; s < n; ++s) {
    const v2::StreamSegment& sg = mine[s];
    v2::consume_segment(pool, sg, k, uint32_t(warp - 1), [&](uint32_t t, uint32_t g, uint32_t units, uint32_t i, const unsigned char* page) {
      // i: the page's number within the segment, tile-major (the page sums' slot in segment_gemv)
      if (lane == 0 && i != (t - sg.tile0) * v2::tile_pages(sg.g0, sg.g1) + (g - sg.g0) / v2::kPageUnits) atomicAdd(bad, 1u);
      const auto* src = reinterpret_cast<const unsigned char*>(sg.w) + (size_t(t) * sg.groups + g) * kUnitStride;
      for (uint32_t u = 0; u < units; ++u) {
        for (uint32_t b = uint32_t(lane) * 4; b < kUnitStride; b += 128)
          if (std::memcmp(page + u * kUnitStride + b, src + u * kUnitStride + b, 4) != 0) atomicAdd(bad, 1u);
        if (lane == 0) atomicAdd(&seen[unit_base[first[cta] + s] + t * sg.groups + g + u], 1u);
      }
    });
  }
}

TEST(PageStreamEmulation, EveryUnitOfEveryLayerArrivesOnceIntactAtItsCta) {
  const df::ModelShape shape{3, 256, 512, 4, 2, 64, 300};  // 3 layers of the tiny shape, a small head
  for (int clusters : {1, 2}) {
    for (int n_pages : {3, 6}) {
      ASSERT_TRUE(v2::page_pool_fits(uint32_t(n_pages), kConsumers));
      const df::Plan plan = df::make_plan(shape, clusters);
      // The repacked matrices (random bytes: the stream moves units, whatever they hold), per kind
      // and layer, tile-major, and their count slots.
      std::mt19937 rng(7);
      emu::unreg_all();
      std::vector<std::vector<uint4>> mats;  // 16-byte aligned, as the bulk copies need
      std::vector<unsigned> base;
      unsigned slots = 0;
      std::vector<std::vector<int>> mat_of(df::kSegKinds, std::vector<int>(size_t(shape.n_layers), -1));
      for (df::SegKind k : {df::kQkv, df::kO, df::kGu, df::kDown, df::kHead})
        for (int l = 0; l < shape.n_layers; ++l) {
          if (k == df::kHead && l != shape.n_layers - 1) continue;
          const unsigned units = unsigned((plan.rows(k) + 15) / 16 * (plan.inputs(k) / 128));
          std::vector<uint4> m(size_t(units) * kUnitStride / 16);
          for (uint4& q : m) q = make_uint4(rng(), rng(), rng(), rng());
          emu::reg("W", m.data(), m.size() * 16);
          mat_of[size_t(k)][size_t(l)] = int(mats.size());
          mats.push_back(std::move(m));
          base.push_back(slots);
          slots += units;
        }
      Streams st;
      for (const auto& segs : plan.segments) {
        st.first.push_back(int(st.segs.size()));
        for (const df::Segment& g : segs) {
          if (g.kind == df::kAttn) continue;
          const int m = mat_of[size_t(g.kind)][size_t(g.layer)];
          v2::StreamSegment s;
          s.w = mats[size_t(m)].data();
          s.tile0 = uint32_t(g.tile0), s.tile1 = uint32_t(g.tile1);
          s.g0 = uint16_t(g.g0), s.g1 = uint16_t(g.g1), s.groups = uint16_t(plan.inputs(g.kind) / 128);
          st.segs.push_back(s);
          st.unit_base.push_back(base[size_t(m)]);
        }
      }
      st.first.push_back(int(st.segs.size()));
      for (int lanes : {1, 2, 4, n_pages}) {
        if (!v2::producer_lanes_fit(uint32_t(lanes), uint32_t(n_pages))) continue;
        const std::string where = std::to_string(clusters) + " clusters, " + std::to_string(n_pages) + " pages, " +
                                  std::to_string(lanes) + " producer lanes";
        std::vector<unsigned> seen(slots, 0u), bad(1, 0u);
        emu::launch_cooperative(+[](const v2::StreamSegment* s, const int* f, const unsigned* b, unsigned* sn, unsigned* bd,
                                    int np, int nl) { stream_and_check(s, f, b, sn, bd, np, nl); },
                                dim3(unsigned(plan.segments.size())), dim3(kThreads), v2::page_pool_bytes(uint32_t(n_pages)),
                                1u, st.segs.data(), st.first.data(), st.unit_base.data(), seen.data(), bad.data(), n_pages,
                                lanes);
        EXPECT_EQ(bad[0], 0u) << where;
        for (unsigned u = 0; u < slots; ++u) ASSERT_EQ(seen[u], 1u) << "unit slot " << u << ", " << where;
      }
    }
  }
}

}  // namespace
}  // namespace nibble
