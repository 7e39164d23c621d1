// probe_wgmma_occupancy.cu: how many blocks of the shared wgmma GEMM kernel (solutions/common/
// wgmma_dequant_gemm.cuh, NVFP4 weights by bulk copy) the GPU holds at once, per tile width and K
// split: blocks per SM from cudaOccupancyMaxActiveBlocksPerMultiprocessor and, for a split (a
// cluster of SPLIT blocks), clusters from cudaOccupancyMaxActiveClusters. Why: on an H100 at
// M = 128, 64 x 128 tiles split into 256 blocks (two per SM on nearly every SM) ran slower than half
// as many, 192 faster than 96 (solutions/gemm_fp4/sm90/NOTES.md, 2026-12-06); if fewer clusters fit
// at once than sol::plan_wgmma assumes, a split plan runs in two waves, and the planner should ask
// this API instead of wgmma_split_wave. Prints one line per (tile, split); exit 1 on a CUDA error.
//   build-hopper/bin/probe_wgmma_occupancy
#include <cstdio>

#include "solutions/gemm_fp4/sm90/device_common.cuh"
#include "solutions/gemm_fp4/sm90/wgmma_format.cuh"

namespace {

using nibble::gemm_fp4_sm90::Fp4Format;

bool ok(cudaError_t e, const char* what) {
  if (e == cudaSuccess) return true;
  std::fprintf(stderr, "probe_wgmma_occupancy: %s: %s\n", what, cudaGetErrorString(e));
  return false;
}

/** One line: the kernel of 64 NCONS x BN tiles at split SPLIT, its shared memory and threads, the
 *  blocks an SM holds, the clusters the GPU holds (SPLIT > 1) and so the blocks resident at once. */
template <int BN, int NCONS, int SPLIT>
bool probe(int sms) {
  using F = Fp4Format<true>;
  using Cfg = nibble::sol::WgCfg<BN, NCONS, F, true>;
  const auto kernel = nibble::sol::wgmma_kernel<BN, NCONS, SPLIT, F, true>;
  if (!ok(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, Cfg::kSmem), "smem attribute")) return false;
  int per_sm = 0;
  if (!ok(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, kernel, Cfg::kThreads, Cfg::kSmem), "blocks per SM"))
    return false;
  int clusters = per_sm * sms;  // split 1: no cluster
  if (SPLIT > 1) {
    cudaLaunchConfig_t cfg{};
    cudaLaunchAttribute attr{};
    attr.id = cudaLaunchAttributeClusterDimension;
    attr.val.clusterDim.x = 1;
    attr.val.clusterDim.y = 1;
    attr.val.clusterDim.z = unsigned(SPLIT);
    cfg.gridDim = dim3(1, 1, unsigned(SPLIT));
    cfg.blockDim = dim3(unsigned(Cfg::kThreads));
    cfg.dynamicSmemBytes = size_t(Cfg::kSmem);
    cfg.attrs = &attr;
    cfg.numAttrs = 1;
    if (!ok(cudaOccupancyMaxActiveClusters(&clusters, kernel, &cfg), "clusters")) return false;
  }
  nibble::sol::WgmmaPlan plan;
  plan.bn = BN;
  plan.rows128 = BN == 128 && NCONS == 2;
  std::printf("%3d x %-3d split %d  smem %6d B  threads %3d  blocks/SM %d  clusters %4d  blocks at once %4d  (wave assumed by "
              "plan_wgmma's split rule: %lld)\n",
              64 * NCONS, BN, SPLIT, Cfg::kSmem, Cfg::kThreads, per_sm, clusters, clusters * SPLIT,
              static_cast<long long>(nibble::sol::wgmma_split_wave(plan, sms)));
  return true;
}

}  // namespace

int main() {
  int dev = 0, sms = 0;
  cudaDeviceProp prop{};
  if (!ok(cudaGetDevice(&dev), "device") || !ok(cudaGetDeviceProperties(&prop, dev), "properties")) return 1;
  sms = prop.multiProcessorCount;
  std::printf("%s, %d SMs, %zu B shared memory per SM (%zu per block opt-in)\n", prop.name, sms,
              prop.sharedMemPerMultiprocessor, prop.sharedMemPerBlockOptin);
  // The odd splits (kWgmmaOddSplits) after the planner's own.
  const bool all = probe<64, 1, 1>(sms) && probe<64, 1, 2>(sms) && probe<64, 1, 4>(sms) && probe<64, 1, 8>(sms) &&
                   probe<128, 1, 1>(sms) && probe<128, 1, 2>(sms) && probe<128, 1, 4>(sms) && probe<128, 1, 8>(sms) &&
                   probe<128, 2, 1>(sms) && probe<128, 2, 2>(sms) && probe<128, 2, 4>(sms) && probe<256, 2, 1>(sms) &&
                   probe<256, 2, 2>(sms) && probe<64, 1, 3>(sms) && probe<64, 1, 5>(sms) && probe<64, 1, 6>(sms) &&
                   probe<128, 1, 3>(sms) && probe<128, 1, 5>(sms) && probe<128, 1, 6>(sms) && probe<128, 2, 3>(sms);
  return all ? 0 : 1;
}
