// int4_gemm_sm90.cu: the tuned sm_90a solution of gemm-w4a16-int4 (issue 24), an ABI solution
// (include/nibble/nibble_gemm.h) built as libnibble_int4_gemm_sm90.so, taking the plain layout.
//
//   C (M, N) = A (M, K) W^T, W[n, k] = (q[n, k] - zero[n, k/128]) * fp16 scale[n, k/128]
//
// prepare picks the kernel by M and repacks W on the host into its layout (untimed; nothing is
// dequantised to memory):
//   M <= 16  the FP4 GEMM's small-M kernel (solutions/common/mma_dequant_gemm.cuh) with int4_gemm_mma's
//            format (solutions/int4_gemm/mma/int4_mma_kernel.cuh): mma.sync, the exact integers q - z
//            on the tensor cores, each chunk's sum scaled per row in fp32 (W never rounded).
//   M > 16   the wgmma kernel gemm_fp4_sm90 runs above M = 16 (solutions/common/wgmma_dequant_gemm.cuh:
//            a TMA ring of activation tiles with the tile's codes and scale records, W decoded into
//            A-fragment registers, 64 x 64 / 64 x 128 / 128 x 256 tiles by M, split-K clusters or
//            persistent blocks), with the int4 format of int4_wg_layout.h: per register a shift, a
//            LOP3, an HSUB2 (q - z exactly) and an HMUL2 by the row's bf16 scale, so
//            W = bf16((q - z) x bf16(scale)) (its error bound is in int4_wg_layout.h).
// For measuring alternatives (the GPU test forces each): NIBBLE_INT4SM90_BN (64, 128, 256: the tile
// width), NIBBLE_INT4SM90_ROWS (128 at BN 128: 128 x 128 tiles of two consumer warpgroups),
// NIBBLE_INT4SM90_SPLIT and NIBBLE_INT4SM90_GRID (sol::override_wgmma_plan); the weights always
// travel by bulk copy (the per-lane path is not built here: it lost on the FP4 tasks, NOTES.md there).
// Not supported: a device other than sm_90; A not 16-byte aligned at M > 16 (cudaMalloc'd A always is).
#include <cuda_runtime.h>

#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

#include "nibble/nibble_gemm.h"
#include "solutions/common/abi_util.h"
#include "solutions/common/export.h"
#include "solutions/common/gemm_abi_util.h"
#include "solutions/common/wgmma_dequant_gemm.cuh"
#include "solutions/int4_gemm/mma/int4_mma_kernel.cuh"
#include "solutions/int4_gemm/sm90/int4_wg_format.cuh"
#include "solutions/int4_gemm/sm90/int4_wg_layout.h"

namespace nibble::int4_sm90 {
namespace {

struct Handle {
  sol::Int4Problem g;
  bool wgmma = false;
  int4_mma::MmaWeights small;  // M <= 16
  sol::WgmmaPlan plan;         // M > 16
  sol::WgmmaWeights w;
  sol::ATensorMap amap;
  sol::DeviceAllocs mem;
};

/** The wgmma path's plan, repack and upload. */
void prepare_wgmma(Handle& h, int sms, cudaStream_t stream) {
  const sol::Int4Problem& g = h.g;
  int bn = sol::wgmma_bn_for(g.M);
  if (const auto e = sol::env_whole("NIBBLE_INT4SM90_BN", 64, 256, "64, 128 or 256")) {
    bn = int(*e);
    if (bn != 64 && bn != 128 && bn != 256)
      throw sol::AbiFailure(NIBBLE_ERR_INVALID_ARGUMENT, "NIBBLE_INT4SM90_BN=" + std::to_string(bn) + ": 64, 128 or 256");
  }
  bool rows128 = false;  // NIBBLE_INT4SM90_ROWS=128 at BN 128: 128 x 128 tiles, two consumer warpgroups
  if (const auto e = sol::env_whole("NIBBLE_INT4SM90_ROWS", 64, 128, "64 or 128 (128 only at BN 128)")) {
    rows128 = *e == 128;
    if (!rows128 && *e != 64)
      throw sol::AbiFailure(NIBBLE_ERR_INVALID_ARGUMENT, "NIBBLE_INT4SM90_ROWS=" + std::to_string(*e) + ": 64 or 128 (128 only at BN 128)");
    if (rows128 && bn != 128)
      throw sol::AbiFailure(NIBBLE_ERR_INVALID_ARGUMENT, "NIBBLE_INT4SM90_ROWS=128 needs BN 128");
  }
  const int64_t nch = g.K / kChunkK;
  h.plan = sol::plan_wgmma(bn, g.M, g.N, nch, sms, rows128);
  sol::override_wgmma_plan(h.plan, "NIBBLE_INT4SM90_", /*per_lane_built=*/false);
  if ((g.M + bn - 1) / bn > 65535) throw sol::AbiFailure(NIBBLE_ERR_NOT_SUPPORTED, "M too large for the grid");
  const int4_mma::PlainWeights p = int4_mma::download_plain(g, stream);
  const Repacked r = repack(p.packed.data(), p.scale.data(), p.zero.data(), g.N, g.K, h.plan.group());
  uint4* wq = h.mem.alloc<uint4>(r.words.size() * 4);
  uint8_t* sc = h.mem.alloc<uint8_t>(r.records.size());
  SOL_CUDA(cudaMemcpyAsync(wq, r.words.data(), r.words.size() * 4, cudaMemcpyHostToDevice, stream));
  SOL_CUDA(cudaMemcpyAsync(sc, r.records.data(), r.records.size(), cudaMemcpyHostToDevice, stream));
  SOL_CUDA(cudaStreamSynchronize(stream));  // the host copies are freed with `r`
  h.w.M = g.M;
  h.w.N = g.N;
  h.w.K = g.K;
  h.w.n_pad = r.n_pad;
  h.w.nch = r.nch;
  h.w.wq = wq;
  h.w.sc = sc;
}

/** NOT_SUPPORTED: not an sm_90 device, or M beyond the grid. */
std::unique_ptr<Handle> prepare(const nibble_gemm_problem* problem, cudaStream_t stream) {
  auto h = std::make_unique<Handle>();
  h->g = sol::parse_int4_problem(problem, NIBBLE_INT4_LAYOUT_PLAIN);
  const cudaDeviceProp prop = sol::require_sm90();
  h->wgmma = h->g.M > 16;
  if (h->wgmma)
    prepare_wgmma(*h, prop.multiProcessorCount, stream);
  else
    h->small = int4_mma::upload_mma_weights(h->g, stream, h->mem);
  return h;
}

/** One GEMM: one kernel launch on `stream`. */
void run(Handle& h, const nibble_tensor* A, nibble_tensor* C, cudaStream_t stream) {
  const sol::Int4Problem& g = h.g;
  const uint16_t* a = nullptr;
  float* c = nullptr;
  sol::check_gemm_io(g, A, C, &a, &c);
  if (h.wgmma)
    sol::launch_wgmma<Int4WgFormat, /*kPerLaneLoads=*/false>(h.plan, h.w, h.amap, a, c, stream);
  else
    int4_mma::launch_mma(h.small, a, c, g.M, g.N, g.K, stream);
}

void teardown(Handle& h, cudaStream_t) { h.mem.release(); }

}  // namespace
}  // namespace nibble::int4_sm90

NIBBLE_GEMM_SOLUTION("int4-gemm-sm90", nibble::int4_sm90::prepare, nibble::int4_sm90::run, nibble::int4_sm90::teardown);
