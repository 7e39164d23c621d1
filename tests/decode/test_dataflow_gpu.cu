// test_dataflow_gpu.cu: the dataflow megakernel's pieces on the GPU (label gpu), the same kernels
// and checks as their CPU emulation (tests/decode/dataflow_cases.cuh): the segment GEMV (page
// stream, st.async cluster sum) against fp64, the attention items against the fp64 attention, and
// the publish / wait counters. Here the memory
// model is the hardware's, which the emulation cannot be: the sync case runs many launches on
// counters never reset, so a missing release, acquire or cumulativity shows as stale rows.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <vector>

#include "decode/dataflow_cases.cuh"
#include "gpu_test_util.h"
#include "harness/cuda_check.h"
#include "harness/device_buffer.h"

namespace nibble {
namespace {

using namespace test::dataflow_cases;
using test::Matrix;
using test::make_matrix;

__global__ void __launch_bounds__(kThreads) segments_kernel(SegArgs a) { run_segments(a); }
__global__ void __launch_bounds__(kThreads) sync_kernel(SyncArgs a) { sync_layers(a); }

/** Skip unless the device is sm_90 (clusters, st.async, bulk copies). */
bool hopper(std::string* why) {
  int dev = 0, major = 0;
  NIBBLE_CUDA_CALL(cudaGetDevice(&dev));
  NIBBLE_CUDA_CALL(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, dev));
  *why = "the dataflow pieces need sm_90 (compute capability " + std::to_string(major) + ".x here)";
  return major == 9;
}

/** `ctas` CTAs (z) in clusters of 2, kThreads each, smem bytes of dynamic shared memory. */
template <class Args>
void launch_clusters(void (*kernel)(Args), int ctas, size_t smem, Args a) {
  NIBBLE_CUDA_CALL(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(1, 1, unsigned(ctas));
  cfg.blockDim = dim3(kThreads);
  cfg.dynamicSmemBytes = smem;
  cudaLaunchAttribute attr[1];
  attr[0].id = cudaLaunchAttributeClusterDimension;
  attr[0].val.clusterDim.x = 1;
  attr[0].val.clusterDim.y = 1;
  attr[0].val.clusterDim.z = 2;
  cfg.attrs = attr;
  cfg.numAttrs = 1;
  NIBBLE_CUDA_CALL(cudaLaunchKernelEx(&cfg, kernel, a));
  NIBBLE_CHECK_LAUNCH();
}

template <class T>
DeviceBuffer upload(const std::vector<T>& v) {
  DeviceBuffer b(v.size() * sizeof(T));
  NIBBLE_CUDA_CALL(cudaMemcpy(b.get(), v.data(), v.size() * sizeof(T), cudaMemcpyHostToDevice));
  return b;
}
template <class T>
std::vector<T> download(const DeviceBuffer& b, size_t n) {
  std::vector<T> v(n);
  NIBBLE_CUDA_CALL(cudaMemcpy(v.data(), b.get(), n * sizeof(T), cudaMemcpyDeviceToHost));
  return v;
}

TEST(DataflowGpu, SegmentGemvClusterRowsMatchFp64) {
  NIBBLE_REQUIRE_GPU();
  if (std::string why; !hopper(&why)) GTEST_SKIP() << why;
  // As the emulation's case, and the full config's shapes: o-proj (3072 x 3072) on the attention
  // merged from 16 chunks of 24 heads, down (3072 x 8192) on silu(gate) * up, qkv (5120 x 3072) on
  // RMSNorm(h), on 66 clusters.
  const std::vector<Matrix> mats{make_matrix(200, 384, 0, 1),   make_matrix(40, 768, 0, 2),    make_matrix(64, 384, 0, 3),
                                 make_matrix(24, 256, 0, 4),    make_matrix(3072, 3072, 0, 5), make_matrix(3072, 8192, 0, 6),
                                 make_matrix(5120, 3072, 0, 7)};
  const std::vector<InputSpec> specs{{kInputNorm}, {kInputSwiglu}, {kInputAttn, 6, 64, 3}, {kInputX},
                                     {kInputAttn, 24, 128, 16}, {kInputSwiglu}, {kInputNorm}};
  for (auto [order, clusters] : {std::pair<std::vector<int>, int>{{0, 1, 2, 3, 0}, 1}, {{0, 1, 2, 3, 0}, 3}, {{6, 4, 5, 6}, 66}}) {
    std::vector<DeviceBuffer> w;
    for (const Matrix& m : mats) w.push_back(upload(m.units));
    SegmentCase c =
        make_segment_case(mats, order, clusters, [&](int m) { return static_cast<const uint4*>(w[size_t(m)].get()); }, specs);
    std::vector<DeviceBuffer> srcs, gains, ys;
    for (const Input& in : c.inputs) {
      srcs.push_back(upload(in.src));
      gains.push_back(upload(in.gain.empty() ? std::vector<uint16_t>(1) : in.gain));
    }
    std::vector<Job> jobs;
    for (int m : order) {
      ys.push_back(upload(nan_output(mats[size_t(m)])));
      jobs.push_back(make_job(mats[size_t(m)], c.inputs[size_t(m)], static_cast<const float*>(srcs[size_t(m)].get()),
                              static_cast<const uint16_t*>(gains[size_t(m)].get()), static_cast<float*>(ys.back().get())));
    }
    DeviceBuffer segs = upload(c.segs), first = upload(c.first), jobs_d = upload(jobs);
    launch_clusters(segments_kernel, 2 * clusters, c.smem,
                    SegArgs{static_cast<const megakernel::v2::StreamSegment*>(segs.get()), static_cast<const int*>(first.get()),
                            static_cast<const Job*>(jobs_d.get()), c.max_k, c.max_tiles, c.max_pages, true, c.attn_weights});
    NIBBLE_CUDA_CALL(cudaDeviceSynchronize());
    double worst = 0.0;
    int unwritten = 0;
    for (size_t s = 0; s < order.size(); ++s) {
      const Matrix& M = mats[size_t(order[s])];
      worst = std::max(worst, check_segment(M, c.inputs[size_t(order[s])].x, download<float>(ys[s], size_t(M.tiles) * 16 + 16),
                                            &unwritten));
    }
    EXPECT_EQ(unwritten, 0) << clusters << " clusters: rows never written or written beyond the matrix";
    EXPECT_LE(worst, 1.0) << clusters << " clusters: worst |y - W x| / (3e-5 sum |w x|)";
    std::printf("%d clusters: worst error %.3g of the bound\n", clusters, worst);
  }
}

/** Launch `blocks` CTAs (x) of kThreads, no cluster. */
template <class Args>
void launch_blocks(void (*kernel)(Args), int blocks, size_t smem, Args a) {
  NIBBLE_CUDA_CALL(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  kernel<<<blocks, kThreads, smem>>>(a);
  NIBBLE_CHECK_LAUNCH();
}

template <int HD>
__global__ void __launch_bounds__(kThreads) items_kernel(ItemArgs a) { attention_items<HD>(a); }

template <int HD>
void run_items(const AttnCase& t, int chunks) {
  const test::AttnInputs in = test::attention_inputs(t);
  DeviceBuffer kc = upload(in.kc), vc = upload(in.vc), qkv = upload(in.qkv), rope = upload(in.rope);
  const size_t part_n = size_t(t.n_q) * chunks * megakernel::v2::partial_floats(HD);
  DeviceBuffer part = upload(std::vector<float>(part_n, std::nanf("")));
  std::vector<megakernel::v2::StreamSegment> segs;
  std::vector<megakernel::v2::AttnItem> items;
  make_item_case(t, chunks, static_cast<uint16_t*>(kc.get()), static_cast<uint16_t*>(vc.get()), static_cast<const float*>(qkv.get()),
                 static_cast<const float2*>(rope.get()), static_cast<float*>(part.get()), &segs, &items);
  DeviceBuffer segs_d = upload(segs), items_d = upload(items);
  launch_blocks(items_kernel<HD>, t.n_kv * chunks, item_smem<HD>(),
                ItemArgs{static_cast<const megakernel::v2::StreamSegment*>(segs_d.get()),
                         static_cast<const megakernel::v2::AttnItem*>(items_d.get())});
  NIBBLE_CUDA_CALL(cudaDeviceSynchronize());
  test::check_attention(t, in, download<uint16_t>(kc, in.kc.size()), download<uint16_t>(vc, in.vc.size()),
                        merge_chunks(download<float>(part, part_n), t.n_q, chunks, HD), std::vector<unsigned>(size_t(t.n_kv), 0u));
}

TEST(DataflowGpu, AttentionItemsMergeToTheFp64Attention) {
  NIBBLE_REQUIRE_GPU();
  if (std::string why; !hopper(&why)) GTEST_SKIP() << why;
  // As the emulation, and the full config's shape at a long position (24 query heads over 8 KV
  // heads, 16 chunks each, 2000 cached rows).
  for (int pos : {0, 17, 40})
    for (int chunks : {1, 3}) {
      run_items<128>(AttnCase{128, 8, 2, 64, pos, 0}, chunks);
      run_items<64>(AttnCase{64, 6, 2, 64, pos, 0}, chunks);
    }
  run_items<128>(AttnCase{128, 24, 8, 2048, 2000, 0}, 16);
}

/** Stale rows over `steps` launches of `clusters` clusters on counters never reset. */
unsigned run_sync(int clusters, int steps, int shortfall) {
  const int ctas = 2 * clusters;
  DeviceBuffer v = upload(std::vector<float>(size_t(2) * ctas * kRowsPerCta, -1.f));
  DeviceBuffer counter = upload(std::vector<unsigned>(size_t(clusters), 0u)), stale = upload(std::vector<unsigned>(size_t(ctas), 0u));
  for (int step = 0; step < steps; ++step)
    launch_clusters(sync_kernel, ctas, 0,
                    SyncArgs{static_cast<float*>(v.get()), static_cast<unsigned*>(counter.get()), static_cast<unsigned*>(stale.get()),
                             unsigned(step), shortfall});
  NIBBLE_CUDA_CALL(cudaDeviceSynchronize());
  for (unsigned c : download<unsigned>(counter, size_t(clusters))) EXPECT_EQ(c, 2u * unsigned(steps) * kLayers);
  unsigned total = 0;
  for (unsigned s : download<unsigned>(stale, size_t(ctas))) total += s;
  return total;
}

TEST(DataflowGpu, PublishWaitSeesEveryRowOverManyLaunches) {
  NIBBLE_REQUIRE_GPU();
  if (std::string why; !hopper(&why)) GTEST_SKIP() << why;
  // 8 CTAs stay co-resident (the waits spin), far below the GPU's SMs.
  for (int clusters : {1, 4}) EXPECT_EQ(run_sync(clusters, 500, 0), 0u) << clusters << " clusters";
}

}  // namespace
}  // namespace nibble
