// host_common.h: host steps the sm90 solution and the stream experiment
// (experiments/gemm_fp4_stream) share: the device check (sol::require_sm90), the weights copied down
// for repacking, the NIBBLE_FP4SM90_TRACE timeline file.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdio>
#include <string>
#include <vector>

#include "solutions/common/abi_util.h"
#include "solutions/common/gemm_abi_util.h"
#include "solutions/common/wgmma_dequant_gemm.cuh"

namespace nibble::gemm_fp4_sm90 {

/** NOT_SUPPORTED unless the device is sm_90 (the kernels are sm_90a). */
using sol::require_sm90;

/** W's codes (N, K/2) and scales (N, scale_cols) copied to the host for repacking (prepare, untimed). */
inline void download_weights(const sol::GemmProblem& g, cudaStream_t stream, std::vector<uint8_t>* packed,
                             std::vector<uint8_t>* scale) {
  packed->resize(size_t(g.N * (g.K / 2)));
  scale->resize(size_t(g.N * g.scale_cols));
  SOL_CUDA(cudaMemcpyAsync(packed->data(), g.packed, packed->size(), cudaMemcpyDeviceToHost, stream));
  SOL_CUDA(cudaMemcpyAsync(scale->data(), g.scale, scale->size(), cudaMemcpyDeviceToHost, stream));
  SOL_CUDA(cudaStreamSynchronize(stream));
}

/** NIBBLE_FP4SM90_TRACE: the last run's timeline of `blocks` blocks x `names.size()` %globaltimer
 *  marks at `trace`, per mark the first, mean and latest block (us after the first block's entry),
 *  into `path` under the line `title` (teardown; best effort: a file that cannot be written is
 *  skipped, the solution's result does not depend on it). */
inline void write_trace(const std::string& path, const unsigned long long* trace, int blocks,
                        const std::vector<const char*>& names, const std::string& title) {
  const size_t nm = names.size();
  std::vector<unsigned long long> t(size_t(blocks) * nm);
  SOL_CUDA(cudaMemcpy(t.data(), trace, t.size() * 8, cudaMemcpyDeviceToHost));
  unsigned long long t0 = ~0ull;
  for (int b = 0; b < blocks; ++b) t0 = std::min(t0, t[size_t(b) * nm]);
  FILE* f = std::fopen(path.c_str(), "w");
  if (!f) return;
  std::fprintf(f, "%s\n%-26s %10s %10s %10s   (us after the first block's entry)\n", title.c_str(), "mark", "first", "mean",
               "last");
  for (size_t k = 0; k < nm; ++k) {
    double sum = 0, lo = 1e30, hi = 0;
    for (int b = 0; b < blocks; ++b) {
      const double v = double(t[size_t(b) * nm + k] - t0) / 1000.0;
      sum += v, lo = std::min(lo, v), hi = std::max(hi, v);
    }
    std::fprintf(f, "%-26s %10.2f %10.2f %10.2f\n", names[k], lo, sum / blocks, hi);
  }
  std::fclose(f);
}

}  // namespace nibble::gemm_fp4_sm90
