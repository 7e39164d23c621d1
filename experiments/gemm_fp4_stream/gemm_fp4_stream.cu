// gemm_fp4_stream.cu: an experiment, not a shipped solution: the stream kernel of
// solutions/gemm_fp4/sm90 (NOTES.md v4-v5, measured slower than its mma kernel at every M <= 16
// shape: 8.0 against 6.4 us at m1-n3072-k3072 MXFP4, for one), kept buildable and tested so that
// its ideas can be measured again. An ABI solution of both FP4 GEMM tasks
// (include/nibble/nibble_gemm.h) for M <= 16 only, built as libnibble_gemm_fp4_stream.so.
//
// One block of 16 warps per SM, clusters of `split` blocks; a cluster owns a range of whole 16-row
// tiles, its blocks the K slices of them, each warp a contiguous run of 576-byte units (codes +
// scales, repack_stream: stream_layout.h) streamed through a per-warp ring of bulk copies, the
// block's A slice in shared memory; partial tiles summed in shared memory and across the cluster
// through distributed shared memory, in a fixed order (no atomics, C written once). Switches for
// measuring: NIBBLE_FP4SM90_SPLIT, _GRID, _STAGES, _PREFETCH, _TRACE (plan_stream).
#include <cuda.h>  // CUtensorMap, which device_common.cuh names
#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <climits>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include "nibble/nibble_gemm.h"
#include "solutions/common/abi_util.h"
#include "solutions/common/export.h"
#include "solutions/common/gemm_abi_util.h"
#include "solutions/common/sm90_async.cuh"
#include "solutions/gemm_fp4/sm90/fp4_frag.h"
#include "solutions/gemm_fp4/sm90/host_common.h"
#include "solutions/gemm_fp4/sm90/device_common.cuh"
#include "experiments/gemm_fp4_stream/stream_kernel.cuh"

namespace nibble::gemm_fp4_sm90 {
namespace {

struct Handle {
  sol::GemmProblem g;
  int split = 1;
  int smem_optin = 0;
  int64_t nch = 0;
  float* colmul = nullptr;
  // The repacked units, the launch's shape (StreamArgs) and its shared memory.
  uint8_t* units = nullptr;
  StreamArgs sa{};
  int stream_smem = 0;
  std::string trace_path;  // NIBBLE_FP4SM90_TRACE: the kernel's timeline, written at teardown
  sol::DeviceAllocs mem;
};

/** The cudaLaunchConfig of stream_kernel: grid clusters x split, a (split, 1, 1) cluster when
 *  split > 1; `attr` must outlive the config. */
cudaLaunchConfig_t stream_config(const StreamArgs& a, int smem, cudaStream_t stream, cudaLaunchAttribute* attr) {
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(unsigned(a.clusters * a.split));
  cfg.blockDim = dim3(kStreamWarps * 32);
  cfg.dynamicSmemBytes = size_t(smem);
  cfg.stream = stream;
  *attr = cudaLaunchAttribute{};
  attr->id = cudaLaunchAttributeClusterDimension;
  attr->val.clusterDim.x = unsigned(a.split);
  attr->val.clusterDim.y = 1;
  attr->val.clusterDim.z = 1;
  cfg.attrs = attr;
  cfg.numAttrs = a.split > 1 ? 1 : 0;
  return cfg;
}

/** stream_kernel's instantiation for (M, format). */
template <bool NV>
auto stream_kernel_for(int M) {
  return M <= 8 ? stream_kernel<1, NV> : stream_kernel<2, NV>;
}

/** One stream_kernel launch on `stream` (prepare set its shape and shared memory); NOT_SUPPORTED
 *  when A is not 16-byte aligned (its bulk copies need it). */
template <bool NV>
void launch_stream(const Handle& h, const uint16_t* A, float* C, cudaStream_t stream) {
  if (reinterpret_cast<uintptr_t>(A) % 16 != 0)
    throw sol::AbiFailure(NIBBLE_ERR_NOT_SUPPORTED, "A is not 16-byte aligned (the stream kernel's bulk copies need it)");
  StreamArgs a = h.sa;
  a.A = A;
  a.C = C;
  cudaLaunchAttribute attr{};
  const cudaLaunchConfig_t cfg = stream_config(a, h.stream_smem, stream, &attr);
  SOL_CUDA(cudaLaunchKernelEx(&cfg, stream_kernel_for<NV>(int(h.g.M)), a));
  SOL_CHECK_LAUNCH();
}

/** A launch of stream_kernel: its arguments (pointers unset), shared memory, and the estimated
 *  bytes of the busiest SM (its weights plus half its A slice: L2 reads cost less than DRAM ones). */
struct StreamPlan {
  StreamArgs a{};
  int smem = 0;
  double cost = 0.0;
};

/**
 * The stream kernel's plan with `split` blocks per cluster (1, 2, 4 or 8): clusters = SMs / split
 * tile ranges (at most ntiles, at most `clusters_cap` when > 0, at most what fits on the GPU at once:
 * clusters live inside a GPC, and a second wave would double the time), ring slots per warp enough
 * for the longest warp range (at most `stages_cap` when > 0) as far as shared memory allows.
 * @return false when the split does not apply (more slices than chunks of K) or nothing fits.
 */
template <bool NV>
bool plan_stream_split(const Handle& h, int split, int sms, int clusters_cap, int stages_cap, StreamPlan* out) {
  const sol::GemmProblem& g = h.g;
  const int ub = stream_unit_bytes(NV), nt = g.M <= 8 ? 1 : 2;
  StreamArgs a{};
  a.M = int(g.M);
  a.N = int(g.N);
  a.K = int(g.K);
  a.ntiles = int((g.N + kSlabRows - 1) / kSlabRows);
  a.nch = int((g.K + kChunkK - 1) / kChunkK);
  a.split = split;
  if (split < 1 || split > 8 || split > a.nch || split > sms) return false;
  if (int64_t(a.ntiles) * sms > INT32_MAX || int64_t(a.ntiles) * a.nch * kStreamWarps > INT32_MAX)
    return false;  // the kernel's int math (tile ranges, unit ranges x 16)
  a.len_max = (a.nch + split - 1) / split;  // c0(r) = floor(nch r / split): slices differ by at most one
  // Ring slots for (clusters): the longest warp range's stages, fewer if shared memory runs out; 0: none fit.
  const auto fit = [&](int clusters) {
    a.clusters = clusters;
    a.dt_max = (a.ntiles + clusters - 1) / clusters;
    const int per_warp = (a.dt_max * a.len_max + kStreamWarps - 1) / kStreamWarps;
    int stages = std::max(1, (per_warp + kStreamStageUnits - 1) / kStreamStageUnits);
    if (stages_cap > 0) stages = std::min(stages, stages_cap);
    const auto bytes = [&](int st) { return StreamSmem(st, ub, a.M, nt, a.len_max, a.dt_max, split).total; };
    while (stages > 1 && bytes(stages) > h.smem_optin) --stages;
    a.stages = bytes(stages) <= h.smem_optin ? stages : 0;
    return a.stages;
  };
  int clusters = std::min(sms / split, a.ntiles);
  if (clusters_cap > 0) clusters = std::min(clusters, clusters_cap);
  if (!fit(clusters)) return false;
  // At least half of the SM's shared memory: one block per SM, never two sharing one while another idles.
  const auto request = [&] {
    return std::max(StreamSmem(a.stages, ub, a.M, nt, a.len_max, a.dt_max, split).total, h.smem_optin / 2 + 1024);
  };
  if (split > 1) {
    cudaLaunchAttribute attr{};
    const cudaLaunchConfig_t cfg = stream_config(a, request(), nullptr, &attr);
    int fits = 0;
    // An error here (a cluster shape this device cannot run) rules the split out, not the kernel.
    if (cudaOccupancyMaxActiveClusters(&fits, stream_kernel_for<NV>(a.M), &cfg) != cudaSuccess) {
      (void)cudaGetLastError();  // not sticky: clear it so the next call does not report it
      return false;
    }
    if (fits < 1) return false;
    if (fits < clusters && !fit(fits)) return false;
  }
  out->a = a;
  out->smem = request();
  out->cost = double(a.dt_max) * a.len_max * ub + 0.5 * a.M * a.len_max * kChunkK * 2;
  return true;
}

/** Pick the stream kernel's split (NIBBLE_FP4SM90_SPLIT, else the cheapest of 1, 2, 4, 8 by
 *  StreamPlan::cost, ties to the smaller), grid and ring; fills h.sa, h.stream_smem and h.split.
 *  Switches for measuring: NIBBLE_FP4SM90_GRID (at most this many clusters), NIBBLE_FP4SM90_STAGES
 *  (at most this many ring slots per warp). NOT_SUPPORTED when K % 8 != 0 or nothing fits. */
template <bool NV>
void plan_stream(Handle& h, int sms) {
  if (h.g.K % 8 != 0)
    throw sol::AbiFailure(NIBBLE_ERR_NOT_SUPPORTED, "the stream kernel needs K % 8 == 0 (16-byte rows of A)");
  for (const auto& kernel : {stream_kernel<1, NV>, stream_kernel<2, NV>})
    SOL_CUDA(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, h.smem_optin));
  const int clusters_cap = int(sol::env_whole("NIBBLE_FP4SM90_GRID", 0, 1 << 20, "at most this many clusters, 0 for no cap").value_or(0));
  const int stages_cap = int(sol::env_whole("NIBBLE_FP4SM90_STAGES", 0, 1 << 20, "at most this many ring slots per warp, 0 for no cap").value_or(0));
  StreamPlan best, p;
  bool found = false;
  if (const auto e = sol::env_whole("NIBBLE_FP4SM90_SPLIT", 1, 8, "1, 2, 4 or 8")) {
    const int v = int(*e);
    if (v != 1 && v != 2 && v != 4 && v != 8)
      throw sol::AbiFailure(NIBBLE_ERR_INVALID_ARGUMENT, "NIBBLE_FP4SM90_SPLIT=" + std::to_string(v) + ": 1, 2, 4 or 8");
    found = plan_stream_split<NV>(h, v, sms, clusters_cap, stages_cap, &best);
  } else {
    for (const int split : {1, 2, 4, 8})
      if (plan_stream_split<NV>(h, split, sms, clusters_cap, stages_cap, &p) && (!found || p.cost < best.cost)) {
        best = p;
        found = true;
      }
  }
  if (!found) throw sol::AbiFailure(NIBBLE_ERR_NOT_SUPPORTED, "the stream kernel does not fit this shape");
  h.sa = best.a;
  h.sa.prefetch = sol::env_switch("NIBBLE_FP4SM90_PREFETCH", true, "colmul prefetched into L2, the default", "none") ? 1 : 0;
  h.stream_smem = best.smem;
  h.split = best.a.split;
}

/** The stream kernel's weights: repack_stream on the host, uploaded (prepare). */
void upload_stream(Handle& h, const std::vector<uint8_t>& packed, const std::vector<uint8_t>& scale,
                   cudaStream_t stream) {
  const sol::GemmProblem& g = h.g;
  StreamRepacked r;
  const std::string why =
      repack_stream(g.nvfp4, g.N, g.K, packed.data(), scale.data(), g.global_scale, h.sa.split, &r);
  if (!why.empty()) throw sol::AbiFailure(NIBBLE_ERR_NOT_SUPPORTED, why);
  h.nch = r.lay.nch;
  h.units = h.mem.alloc<uint8_t>(r.units.size());
  h.colmul = h.mem.alloc<float>(r.colmul.size() * 4);
  SOL_CUDA(cudaMemcpyAsync(h.units, r.units.data(), r.units.size(), cudaMemcpyHostToDevice, stream));
  SOL_CUDA(cudaMemcpyAsync(h.colmul, r.colmul.data(), r.colmul.size() * 4, cudaMemcpyHostToDevice, stream));
  SOL_CUDA(cudaStreamSynchronize(stream));  // the host vectors go out of scope
  h.sa.units = h.units;
  h.sa.colmul = h.colmul;
  h.sa.trace = nullptr;
  if (const char* tp = std::getenv("NIBBLE_FP4SM90_TRACE"); tp && *tp) {
    h.trace_path = tp;
    const size_t n = size_t(h.sa.clusters) * h.sa.split * kStreamMarks;
    h.sa.trace = h.mem.alloc<unsigned long long>(n * 8);
    SOL_CUDA(cudaMemsetAsync(h.sa.trace, 0, n * 8, stream));
  }
}

void write_stream_trace(const Handle& h) {
  char title[160];
  std::snprintf(title, sizeof title, "stream kernel trace: M %lld N %lld K %lld, %d clusters x split %d, %d ring slots per warp",
                (long long)h.g.M, (long long)h.g.N, (long long)h.g.K, h.sa.clusters, h.sa.split, h.sa.stages);
  write_trace(h.trace_path, h.sa.trace, h.sa.clusters * h.sa.split,
              {"entry", "A landed", "warp 0 units done", "all units done", "cluster start barrier", "C written"}, title);
}

/** Check the problem (M <= 16, K % 8 == 0, sm_90), plan the kernel, repack and upload the weights. */
std::unique_ptr<Handle> prepare(const nibble_gemm_problem* problem, cudaStream_t stream) {
  auto h = std::make_unique<Handle>();
  h->g = sol::parse_gemm_problem(problem);
  const cudaDeviceProp prop = require_sm90();
  if (h->g.M > 16) throw sol::AbiFailure(NIBBLE_ERR_NOT_SUPPORTED, "the stream kernel is for M <= 16");
  h->smem_optin = int(prop.sharedMemPerBlockOptin);
  if (h->g.nvfp4)
    plan_stream<true>(*h, prop.multiProcessorCount);
  else
    plan_stream<false>(*h, prop.multiProcessorCount);
  std::vector<uint8_t> packed, scale;
  download_weights(h->g, stream, &packed, &scale);
  upload_stream(*h, packed, scale, stream);
  return h;
}

/** One GEMM: one stream_kernel launch on `stream`. */
void run(Handle& h, const nibble_tensor* A, nibble_tensor* C, cudaStream_t stream) {
  const uint16_t* a = nullptr;
  float* c = nullptr;
  sol::check_gemm_io(h.g, A, C, &a, &c);
  if (h.g.nvfp4)
    launch_stream<true>(h, a, c, stream);
  else
    launch_stream<false>(h, a, c, stream);
}

/** After the stream is drained (export.h): the trace if one was asked for, the weights freed. */
void teardown(Handle& h, cudaStream_t) {
  if (h.sa.trace) write_stream_trace(h);
  h.mem.release();
}

}  // namespace
}  // namespace nibble::gemm_fp4_sm90

NIBBLE_GEMM_SOLUTION("gemm-fp4-stream", nibble::gemm_fp4_sm90::prepare, nibble::gemm_fp4_sm90::run,
                     nibble::gemm_fp4_sm90::teardown);
