// gemm_fp4_sm90.cu: the tuned sm_90a solution of both FP4 dequant-GEMM tasks (issue 7), an ABI
// solution (include/nibble/nibble_gemm.h) built as libnibble_gemm_fp4_sm90.so.
//
//   gemm-w4a16-nvfp4  C (M, N) = A (M, K) W^T, W[n, k] = e2m1(code) * e4m3fn(scale[n, k/16]) * global
//   gemm-bf16-mxfp4   C (M, N) = A (M, K) W^T, W[n, k] = e2m1(code) * 2^(e8m0(scale[n, k/32]) - 127)
//
// Computed as C^T = W A^T: W's rows are the tensor cores' M side, decoded from the repacked codes
// straight into A-fragment registers (fp4_frag.h: the code's bits placed in a bf16 and one bf16x2
// multiply by the re-encoded block scale, exact), A's rows the N side. prepare repacks the codes
// and scales on the host (untimed; nothing is dequantised to memory) into the layout of the kernel
// it picks by M (H200 figures: NOTES.md):
//   M <= 16  the shared small-M kernel (solutions/common/mma_dequant_gemm.cuh, also int4_gemm_sm90's;
//            the FP4 formats in mma_format.cuh): mma.sync m16n8k16 (not wgmma: at N-side 8 or 16 the kernel is a weight
//            stream, and mma.sync needs no shared memory or warpgroup sync). One block per 16-row
//            slab, 8 warps splitting K (summed in shared memory at the end); each lane issues the
//            loads of 6 (M <= 8) or 4 chunks of 64 k (codes 16 bytes, evict-first: W is read once;
//            scales; its activations) before decoding any. The kPerm k order gives a lane its B
//            fragments as two 16-byte loads per chunk (A is 96 KB at M = 16: L1/L2). Bytes:
//            N K / 2 + N K / 16 (NVFP4); at M = 16, N = K = 3072, 5.3 MB: measured 7.6 us against
//            3.6 us for a kernel that only reads those bytes under the grader's flush (M = 1: 5.7).
//            Also the fallback for any M when K % 8 != 0 (kStd order, 4-byte activation loads,
//            16 rows of A per block row).
//            mma_tma_kernel (NIBBLE_FP4SM90_KIND=mmatma): the same math fed by bulk copies into
//            shared memory; slower as measured (9.6 us), kept selectable for tuning.
//            The stream kernel of v4-v5 (one block per SM streaming bulk copies through per-warp
//            rings; measured slower) is an experiment now: experiments/gemm_fp4_stream.
//   M > 16   the shared wgmma kernel (solutions/common/wgmma_dequant_gemm.cuh, also int4_gemm_sm90's;
//            the FP4 formats in wgmma_format.cuh): one producer warp (TMA of the 64-k activation
//            tile, 128B swizzle, plus bulk copies of the block's codes and scales, into a ring of
//            stages on full/empty mbarriers) and NCONS consumer warpgroups, each 64 W rows x BN
//            activation rows: per chunk, decode 16 registers per thread from the stage, then 4 x
//            wgmma m64nBNk16 with A from registers and B from the stage; the chunk's group runs
//            while the next chunk decodes (wait_group 1).
//            128 x 256 tiles (NCONS = 2, setmaxnreg 40 / 232) on persistent blocks, one per SM, for
//            M > 256 (276.6 us at m4096-n8192-k3072, cuBLAS bf16 280.1); 64 x 64 tiles for
//            16 < M <= 64 and 64 x 128 up to 256 (M = 128 in one row of tiles: sol::wgmma_bn_for),
//            K split over a cluster of blocks summed through distributed shared memory when the
//            tiles alone do not fill the SMs (sol::wgmma_split_wave).
//   the tail: where M % 256 is 1..16 and those rows would cost the 128 x 256 tiles a whole extra
//            round (tail_rows: M = 4097), they run after the wgmma launch on the M <= 16 kernel,
//            with the weights repacked a second time for it (NIBBLE_FP4SM90_TAIL=0: off).
// The epilogue multiplies row n of C^T by colmul[n] (NVFP4: global x 2^8; MXFP4: 2^sh(n), fp4_frag.h).
// Residues: N padded to 128 with zero codes (rows past N never written), K padded to 64 (zero codes;
// the TMA zero-fills A past K and past M), the partial last scale block is an ordinary block.
// Not supported: a NaN block scale; A not 16-byte aligned when K % 8 == 0 (the vector loads and
// the TMA need it; cudaMalloc'd A always is); M or K beyond the grid / one block's shared memory.
#include <cooperative_groups.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>

#include "nibble/nibble_gemm.h"
#include "solutions/common/abi_util.h"
#include "solutions/common/export.h"
#include "solutions/common/gemm_abi_util.h"
#include "solutions/common/mma_dequant_gemm.cuh"
#include "solutions/common/sm90_async.cuh"
#include "solutions/common/wgmma_dequant_gemm.cuh"
#include "solutions/gemm_fp4/sm90/fp4_frag.h"
#include "solutions/gemm_fp4/sm90/host_common.h"
// The kernel families, one file each, in this order (they share device_common.cuh):
#include "solutions/gemm_fp4/sm90/device_common.cuh"
#include "solutions/gemm_fp4/sm90/mma_tma_kernel.cuh"
#include "solutions/gemm_fp4/sm90/mma_format.cuh"
#include "solutions/gemm_fp4/sm90/wgmma_format.cuh"

namespace nibble::gemm_fp4_sm90 {
namespace {

// ---- Host side ----------------------------------------------------------------------------------

enum class Kind { kMmaTma, kMma, kWgmma };

using sol::launch_cluster;

struct Handle {
  sol::GemmProblem g;   // what this handle's kernel computes: its rows of A and C (g.M), all of N and K
  sol::GemmProblem io;  // what run checks A and C against: g, or the whole problem when there is a tail
  Kind kind = Kind::kMma;
  int split = 1;      // mma_tma: blocks (a cluster) splitting K
  sol::WgmmaPlan wg;  // wgmma: tile, split-K, weight path, persistent blocks
  int group = 1;      // the layout's slabs per group
  int smem_optin = 0;
  KOrder order = KOrder::kStd;
  int64_t n_pad = 0, nch = 0;
  uint4* wq = nullptr;
  uint8_t* sc = nullptr;
  float* colmul = nullptr;
  std::string trace_path;  // NIBBLE_FP4SM90_TRACE: the mma kernel's timeline, written at teardown
  unsigned long long* mma_trace = nullptr;  // the mma kernel's marks (kMmaMarks per block), when traced
  sol::DeviceAllocs mem;
  sol::ATensorMap amap;  // wgmma: the tensor map of the last A seen (run may get another pointer)
  // The last rows of the problem, from row g.M on, by the small-M kernel on weights repacked for it,
  // where the wgmma tiles would spend a whole round on them (tail_rows); null otherwise.
  std::unique_ptr<Handle> tail;
};

/** Shared memory of mma_tma_kernel at (per, M, format); NT from M. */
int mma_tma_smem(int per, int M, bool nv) { return MmaTmaSmem(per, M, nv, M <= 8 ? 1 : 2).total; }

template <int NT, bool NV, int SPLIT>
void launch_mma_tma_split(const Handle& h, const uint16_t* A, float* C, cudaStream_t stream) {
  const auto kernel = mma_tma_kernel<NT, NV, SPLIT>;
  static bool attr_set = false;  // per instantiation; prepare/run are called from one thread at a time
  if (!attr_set) {
    SOL_CUDA(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, h.smem_optin));
    attr_set = true;
  }
  const int per = int((h.nch + SPLIT - 1) / SPLIT);
  const dim3 grid(unsigned(h.n_pad / (16 * kTmaSlabs)), 1, unsigned(SPLIT));
  launch_cluster(kernel, grid, dim3(kTmaSlabs * 32), mma_tma_smem(per, int(h.g.M), NV), SPLIT, stream,
                 reinterpret_cast<const uint8_t*>(h.wq), static_cast<const uint8_t*>(h.sc),
                 static_cast<const float*>(h.colmul), A, C, int(h.g.M), int(h.g.N), int(h.g.K), int(h.nch), per);
}

template <int NT, bool NV>
void launch_mma_tma(const Handle& h, const uint16_t* A, float* C, cudaStream_t stream) {
  if (reinterpret_cast<uintptr_t>(A) % 16 != 0)
    throw sol::AbiFailure(NIBBLE_ERR_NOT_SUPPORTED, "A is not 16-byte aligned (the bulk copies need it)");
  switch (h.split) {
    case 1: launch_mma_tma_split<NT, NV, 1>(h, A, C, stream); break;
    case 2: launch_mma_tma_split<NT, NV, 2>(h, A, C, stream); break;
    case 4: launch_mma_tma_split<NT, NV, 4>(h, A, C, stream); break;
    case 8: launch_mma_tma_split<NT, NV, 8>(h, A, C, stream); break;
    default: throw sol::AbiFailure(NIBBLE_ERR_INTERNAL, "bad split " + std::to_string(h.split));
  }
}

/** The wgmma path's operands: the problem and the repacked weights. */
sol::WgmmaWeights wgmma_weights(const Handle& h) {
  sol::WgmmaWeights w;
  w.M = h.g.M;
  w.N = h.g.N;
  w.K = h.g.K;
  w.n_pad = h.n_pad;
  w.nch = h.nch;
  w.wq = h.wq;
  w.sc = h.sc;
  w.colmul = h.colmul;
  return w;
}

template <bool NV>
void launch(Handle& h, const uint16_t* A, float* C, cudaStream_t stream) {
  switch (h.kind) {
    case Kind::kMmaTma:
      if (h.g.M <= 8)
        launch_mma_tma<1, NV>(h, A, C, stream);
      else
        launch_mma_tma<2, NV>(h, A, C, stream);
      break;
    case Kind::kMma:
      sol::launch_mma_dequant<Fp4MmaFormat<NV>>(h.order == KOrder::kPerm, h.n_pad / kSlabRows, h.wq, h.sc, h.colmul, A, C,
                                                h.g.M, h.g.N, h.g.K, h.nch, h.mma_trace, stream);
      break;
    case Kind::kWgmma: sol::launch_wgmma<Fp4Format<NV>>(h.wg, wgmma_weights(h), h.amap, A, C, stream); break;
  }
}

/** Kernel, split-K and weight path for (M, N, K): see the file header. For measuring alternatives:
 *  NIBBLE_FP4SM90_KIND (mmatma, mma, wg64, wg128, wg128x2: 128 x 128 tiles of two consumer
 *  warpgroups, wg256), NIBBLE_FP4SM90_SPLIT (mmatma: 1, 2, 4, 8; mma: no K split, so a value
 *  from 1 to 8 is ignored there and anything else refused, as everywhere; wgmma: 1 to 8 but 7, 3, 5 and 6
 *  with bulk-copied weights only, at most 4 with wg128x2 and 2 with wg256: sol::wgmma_split_built), NIBBLE_FP4SM90_WTMA (0: wgmma's weights by 16-byte loads per lane, 1: by bulk copy) and
 *  NIBBLE_FP4SM90_GRID (wgmma without split: at most this many persistent blocks; 0: one
 *  block per tile). The stream kernel is libnibble_gemm_fp4_stream.so (experiments/gemm_fp4_stream). */
void choose_kernel(Handle& h, int sms) {
  const sol::GemmProblem& g = h.g;
  const bool k8 = g.K % 8 == 0;
  // Measured on the H200 (NOTES.md, v3): at M <= 16 the per-lane-load mma kernel beats the
  // bulk-copy one (7.5 against 9.6 us at m16-n3072-k3072); the tile width by M: sol::wgmma_bn_for.
  h.kind = !k8 || g.M <= 16 ? Kind::kMma : Kind::kWgmma;
  int bn = sol::wgmma_bn_for(g.M);
  bool rows128 = false;
  if (const char* e = std::getenv("NIBBLE_FP4SM90_KIND")) {
    const std::string k = e;
    if (k == "stream")
      throw sol::AbiFailure(NIBBLE_ERR_INVALID_ARGUMENT,
                            "NIBBLE_FP4SM90_KIND=stream: the stream kernel is an experiment now, libnibble_gemm_fp4_stream.so "
                            "(experiments/gemm_fp4_stream)");
    if (k == "mmatma") h.kind = Kind::kMmaTma;
    else if (k == "mma") h.kind = Kind::kMma;
    else if (k == "wg64" || k == "wg128" || k == "wg256") h.kind = Kind::kWgmma, bn = std::atoi(k.c_str() + 2);
    else if (k == "wg128x2") h.kind = Kind::kWgmma, bn = 128, rows128 = true;
    else throw sol::AbiFailure(NIBBLE_ERR_INVALID_ARGUMENT, "NIBBLE_FP4SM90_KIND: mmatma, mma, wg64, wg128, wg128x2 or wg256");
    if (h.kind != Kind::kMma && !k8) throw sol::AbiFailure(NIBBLE_ERR_NOT_SUPPORTED, "K % 8 != 0 needs kind mma");
    if (h.kind == Kind::kMmaTma && g.M > 16) throw sol::AbiFailure(NIBBLE_ERR_NOT_SUPPORTED, "mmatma needs M <= 16");
  }
  h.order = (h.kind == Kind::kMmaTma || (h.kind == Kind::kMma && g.M <= 16 && k8)) ? KOrder::kPerm : KOrder::kStd;
  const int64_t nch = (g.K + kChunkK - 1) / kChunkK;
  h.split = 1;
  if (h.kind == Kind::kMma) {
    sol::env_whole("NIBBLE_FP4SM90_SPLIT", 1, 8, "1 to 8 (the M <= 16 mma kernel has no K split: ignored there)");
    h.group = 1;
    return;
  }
  if (h.kind == Kind::kMmaTma) {
    h.group = kTmaSlabs;
    // Two blocks per SM or more (each warp's decode is a chain of dependent steps: the SM needs
    // several to hide it), and at most ~72 KB of shared memory each (three per SM), so that the
    // whole weight matrix is in flight at once at these shapes.
    const int64_t groups = (g.N + 16 * kTmaSlabs - 1) / (16 * kTmaSlabs);
    const auto smem = [&](int s) { return mma_tma_smem(int((nch + s - 1) / s), int(g.M), g.nvfp4); };
    while (h.split < 8 && (groups * h.split < 2 * sms || smem(h.split) > 72 * 1024) && nch / (2 * h.split) >= 2)
      h.split *= 2;
    if (const auto e = sol::env_whole("NIBBLE_FP4SM90_SPLIT", 1, 8, "1, 2, 4 or 8")) {
      h.split = int(*e);
      if (h.split != 1 && h.split != 2 && h.split != 4 && h.split != 8)
        throw sol::AbiFailure(NIBBLE_ERR_INVALID_ARGUMENT, "NIBBLE_FP4SM90_SPLIT=" + std::to_string(h.split) + ": 1, 2, 4 or 8");
    }
    if (smem(h.split) > h.smem_optin)
      throw sol::AbiFailure(NIBBLE_ERR_NOT_SUPPORTED, "K too large for the shared memory of one block");
    return;
  }
  // wgmma: the shared plan (sol::plan_wgmma has its measurements), then the overrides.
  h.wg = sol::plan_wgmma(bn, g.M, g.N, nch, sms, rows128);
  h.group = h.wg.group();
  sol::override_wgmma_plan(h.wg, "NIBBLE_FP4SM90_");
}

/** Rounds of persistent blocks the wgmma plan of h takes (its tiles and K splits over its grid). */
int64_t wgmma_rounds(const Handle& h, int sms) {
  const int64_t tiles = sol::wgmma_tiles(h.wg, h.g.M, h.g.N) * h.wg.split;
  const int64_t grid = h.wg.split == 1 && h.wg.grid_cap > 0 ? h.wg.grid_cap : std::max<int64_t>(tiles, 1);
  const int64_t per_round = std::min<int64_t>(grid, int64_t(sms) * sol::wgmma_blocks_per_sm(h.wg));  // resident at once
  return (tiles + per_round - 1) / per_round;
}

/** How many of g's last rows run as a tail on the small-M kernel: M % 256 when it is 1..16 and the
 *  128 x 256 wgmma tiles of all M take one more round than those of M without them (at M = 4097 on
 *  n3072-k3080 a 17th tile row of 24 nearly empty tiles: 147 us against cuBLAS's 129, H200
 *  2026-12-05, where the M = 16 kernel reads the weights once in ~7 us); 0 otherwise, or with
 *  NIBBLE_FP4SM90_TAIL=0 or a forced NIBBLE_FP4SM90_KIND (measuring one kernel alone). */
int64_t tail_rows(const sol::GemmProblem& g, const cudaDeviceProp& prop) {
  const int sms = prop.multiProcessorCount;
  if (!sol::env_switch("NIBBLE_FP4SM90_TAIL", true, "the tail rows on the small-M kernel, the default", "none")) return 0;
  if (std::getenv("NIBBLE_FP4SM90_KIND")) return 0;
  Handle whole, bulk;
  whole.g = bulk.g = g;
  whole.smem_optin = bulk.smem_optin = int(prop.sharedMemPerBlockOptin);
  choose_kernel(whole, sms);
  const int64_t tail = g.M % 256;
  if (whole.kind != Kind::kWgmma || whole.wg.bn != 256 || tail == 0 || tail > 16) return 0;
  bulk.g.M = g.M - tail;
  choose_kernel(bulk, sms);
  if (bulk.kind != Kind::kWgmma) return 0;
  return wgmma_rounds(whole, sms) > wgmma_rounds(bulk, sms) ? tail : 0;
}

/** The mma kernel's grid blocks (launch_mma's grid). */
int mma_blocks(const Handle& h, int nt) { return int(h.n_pad / kSlabRows) * int((h.g.M + 8 * nt - 1) / (8 * nt)); }

void write_mma_trace(const Handle& h) {
  char title[160];
  std::snprintf(title, sizeof title, "mma kernel trace: M %lld N %lld K %lld, %d blocks of %d warps, %d chunks per lane batch",
                (long long)h.g.M, (long long)h.g.N, (long long)h.g.K, mma_blocks(h, h.g.M <= 8 ? 1 : 2), kMmaWarps,
                h.order == KOrder::kPerm && h.g.M <= 8 ? mma_batch<1>() : mma_batch<2>());
  write_trace(h.trace_path, h.mma_trace, mma_blocks(h, h.g.M <= 8 ? 1 : 2),
              {"entry", "warp 0 first codes landed", "warp 0 K loop done", "all warps done", "C written"}, title);
}

/** The handle of rows g.M of the problem: its kernel picked by M, the codes and scales (packed,
 *  scale: the whole matrix, downloaded) repacked into that kernel's layout and uploaded on `stream`
 *  (the caller synchronises before the host vectors go). trace: NIBBLE_FP4SM90_TRACE applies. */
std::unique_ptr<Handle> prepare_rows(const sol::GemmProblem& g, const cudaDeviceProp& prop, const std::vector<uint8_t>& packed,
                                     const std::vector<uint8_t>& scale, cudaStream_t stream, bool trace) {
  auto h = std::make_unique<Handle>();
  h->g = h->io = g;
  h->smem_optin = int(prop.sharedMemPerBlockOptin);
  choose_kernel(*h, prop.multiProcessorCount);
  const int64_t m_tile = h->kind == Kind::kWgmma ? h->wg.bn : 16;
  if ((g.M + m_tile - 1) / m_tile > 65535) throw sol::AbiFailure(NIBBLE_ERR_NOT_SUPPORTED, "M too large for the grid");
  Repacked r;
  const std::string why = repack(g.nvfp4, g.N, g.K, packed.data(), scale.data(), g.global_scale, h->order, h->group, &r);
  if (!why.empty()) throw sol::AbiFailure(NIBBLE_ERR_NOT_SUPPORTED, why);
  h->n_pad = r.n_pad;
  h->nch = r.nch;
  h->wq = h->mem.alloc<uint4>(r.w.size() * 4);
  h->sc = h->mem.alloc<uint8_t>(r.s.size());
  h->colmul = h->mem.alloc<float>(r.colmul.size() * 4);
  SOL_CUDA(cudaMemcpyAsync(h->wq, r.w.data(), r.w.size() * 4, cudaMemcpyHostToDevice, stream));
  SOL_CUDA(cudaMemcpyAsync(h->sc, r.s.data(), r.s.size(), cudaMemcpyHostToDevice, stream));
  SOL_CUDA(cudaMemcpyAsync(h->colmul, r.colmul.data(), r.colmul.size() * 4, cudaMemcpyHostToDevice, stream));
  if (const char* tp = std::getenv("NIBBLE_FP4SM90_TRACE"); trace && tp && *tp && h->kind == Kind::kMma) {
    h->trace_path = tp;
    const size_t n = size_t(mma_blocks(*h, g.M <= 8 ? 1 : 2)) * kMmaMarks;
    h->mma_trace = h->mem.alloc<unsigned long long>(n * 8);
    SOL_CUDA(cudaMemsetAsync(h->mma_trace, 0, n * 8, stream));
  }
  SOL_CUDA(cudaStreamSynchronize(stream));  // r's vectors go out of scope
  return h;
}

/** Check the problem, pick the kernel by M (and a tail: tail_rows), repack codes and scales into
 *  its layout (host, untimed). NOT_SUPPORTED: not an sm_90 device, a NaN block scale, or M beyond
 *  the grid. */
std::unique_ptr<Handle> prepare(const nibble_gemm_problem* problem, cudaStream_t stream) {
  const sol::GemmProblem g = sol::parse_gemm_problem(problem);
  const cudaDeviceProp prop = require_sm90();
  // Repack on the host: copy the codes and scales down, rearrange, upload.
  std::vector<uint8_t> packed, scale;
  download_weights(g, stream, &packed, &scale);
  const int64_t tail = tail_rows(g, prop);
  sol::GemmProblem bulk = g;
  bulk.M = g.M - tail;
  auto h = prepare_rows(bulk, prop, packed, scale, stream, /*trace=*/true);
  h->io = g;
  if (tail > 0) {
    sol::GemmProblem t = g;
    t.M = tail;
    h->tail = prepare_rows(t, prop, packed, scale, stream, /*trace=*/false);
  }
  return h;
}

/** One GEMM on `stream`: one kernel launch (mma.sync for M <= 16, wgmma above), then the tail's
 *  (its rows of A and C from row h.g.M on) when there is one. */
void run(Handle& h, const nibble_tensor* A, nibble_tensor* C, cudaStream_t stream) {
  const uint16_t* a = nullptr;
  float* c = nullptr;
  sol::check_gemm_io(h.io, A, C, &a, &c);
  for (Handle* part = &h; part; part = part->tail.get()) {
    const int64_t row0 = part == &h ? 0 : h.g.M;
    if (h.io.nvfp4)
      launch<true>(*part, a + row0 * h.io.K, c + row0 * h.io.N, stream);
    else
      launch<false>(*part, a + row0 * h.io.K, c + row0 * h.io.N, stream);
  }
}

/** After the stream is drained (export.h): write the trace if one was asked for, free the repacked
 *  weights, checked. */
void teardown(Handle& h, cudaStream_t) {
  if (h.mma_trace && h.kind == Kind::kMma) write_mma_trace(h);
  if (h.tail) h.tail->mem.release();
  h.mem.release();
}

}  // namespace
}  // namespace nibble::gemm_fp4_sm90

NIBBLE_GEMM_SOLUTION("gemm-fp4-sm90", nibble::gemm_fp4_sm90::prepare, nibble::gemm_fp4_sm90::run,
                     nibble::gemm_fp4_sm90::teardown);
