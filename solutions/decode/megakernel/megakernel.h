// megakernel.h: the data layout and the launchers of the megakernel solution (NOTES.md).
//
// One persistent kernel runs the whole decode step (decode_kernel.cu). Its stages, one file each:
//   repack.cu           build time: the AWQ/GPTQ triples -> the mma-fragment layout below
//   int4_mma_gemv.cuh   the int4 GEMV stage (all seven projections and the LM head)
//   activation.cuh      what a GEMV's input vector is: RMSNorm(h) * gain, attention, silu(g) * u
//   attention.cuh       RoPE + KV append + attention split across the sequence + combine
//   grid_sync.cuh       the grid barrier between stages
//   blocks.cu           the GEMV and attention stages as kernels of their own (tests, bench)
//   megakernel.cu       the C ABI
// Launchers take the stream, validate what the kernels assume (cudaErrorInvalidValue without a
// launch otherwise) and return the launch status; the caller decides what an error means.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <string>

#if defined(__CUDACC__)
#define NIBBLE_MK_HD __host__ __device__
#else
#define NIBBLE_MK_HD
#endif

namespace nibble::megakernel {

/** Quantisation group (the seed's group) this solution supports: one group = 4 mma k-blocks of 32. */
inline constexpr int kGroup = 128;
/** Output rows per tile: the mma's M. */
inline constexpr int kTileRows = 16;
/** Threads per block of the persistent kernel: 16 warps, one block per SM. */
inline constexpr int kThreads = 512;
inline constexpr int kWarps = kThreads / 32;
/** Counters per GEMV kind of the trace (gemv_run's stats): ring wait, flush, refill, all, units. */
inline constexpr int kGemvStats = 5;
/** Most query heads per KV head the attention stage supports. */
inline constexpr int kMaxRep = 4;

/**
 * An int4 matrix repacked for mma.sync.m16n8k32 u8 x s8 (the codes are the A fragments as they are).
 *
 * Logical (rows, K), K a multiple of 128; rows padded to tiles of 16 (padding: code 0, scale 0).
 * A unit (a "tile-group": 16 rows x 128 inputs = 4 k-blocks of 32) is kUnitStride = 1088
 * contiguous bytes, its codes then its metadata (v13: one bulk copy per ring stage instead of two).
 * The codes are 64 uint4 indexed [c (2)][lane (32)]; word q of uint4 (c, lane) holds lane's A
 * register q of k-blocks 2c (even nibbles) and 2c + 1 (odd nibbles): with g = lane/4, t = lane%4,
 * nibble p (bits 4p..4p+3) is row g + 8 (q&1), input group*128 + 32 (2c + (p&1)) + 16 (q>>1) + 4t
 * + p/2. So word & 0x0F0F0F0F is register q of block 2c as four u8 codes and word & 0xF0F0F0F0 that
 * of block 2c + 1 as four u8 (16 x code): one LOP3 per four weights.
 * The metadata at byte 1024 of the unit: uint2 [g] = {row g, row g + 8}, each (scale bf16 bits <<
 * 16) | zero.
 * Units are ordered tile-major (u = tile * groups + group: a warp's range covers a few tiles whole,
 * one flush per tile) or in chunks of G groups (`chunk`: a block's range covers one chunk or two
 * of the input, so it needs only those inputs of x, and, for o-proj, only the attention heads they
 * are). Either way a warp streams its units as contiguous bytes.
 */
inline constexpr int kUnitCodeBytes = 1024, kUnitMetaBytes = 64, kUnitStride = kUnitCodeBytes + kUnitMetaBytes;

struct PackedMatrix {
  const uint4* w = nullptr;  ///< the units, kUnitStride bytes each (16-byte aligned)
  int tiles = 0;   ///< ceil(rows / 16)
  int groups = 0;  ///< K / 128
  int rows = 0;    ///< real rows: outputs at index >= rows are never written
  /** The unit order (v12): groups per chunk G, either `groups` (tile-major: u = tile * groups +
   *  group) or a power of two dividing groups: u = (c * tiles + tile) * G + (group - c G) for chunk
   *  c = group / G, i.e. chunks of G groups, tile-major inside a chunk. G = 1 is group-major (a
   *  block's range reads only one or two groups of the input: o and down); G > 1 lets a warp keep
   *  a tile's sums over G units before it flushes them. 0 means `groups`. */
  int chunk = 0;
  /** 1: a flush adds 4 rows per red.global.add.v4.f32 (4 per tile); 0: one atomicAdd per row (16).
   *  NIBBLE_MK_FLUSH=0 at build_model picks the scalar one (an A/B switch for the trace). */
  int vec_flush = 1;
};

/** M's groups per chunk (PackedMatrix::chunk, 0 meaning all). */
NIBBLE_MK_HD inline int unit_chunk(const PackedMatrix& M) { return M.chunk > 0 && M.chunk < M.groups ? M.chunk : M.groups; }

/** Whether `chunk` is a unit order of a matrix with `groups` groups: all of them, or a power of two
 *  dividing them (the GEMV steps through a chunk with a mask). */
NIBBLE_MK_HD inline bool valid_chunk(int chunk, int groups) {
  return chunk == groups || (chunk > 0 && chunk < groups && (chunk & (chunk - 1)) == 0 && groups % chunk == 0);
}

/** Tile and group of unit u of M. */
NIBBLE_MK_HD inline void unit_tile_group(const PackedMatrix& M, long long u, long long* tile, int* group) {
  const long long G = unit_chunk(M), per_chunk = (long long)M.tiles * G;
  const long long c = u / per_chunk, rem = u % per_chunk;
  *tile = rem / G;
  *group = int(c * G + rem % G);
}

/** One warp's share of a matrix: units [u0, u1) (the matrix's tiles x groups units cut into one
 *  contiguous range per warp of the grid, balanced to one unit), and where u0 starts. Computed on
 *  the host, once per model (gemv_plan), and read from shared memory by the GEMV: the divisions
 *  the split takes cost every warp ~1 us per matrix when the device computed them (NOTES.md, v9). */
struct GemvPlan {
  uint32_t u0 = 0, u1 = 0;
  uint32_t tile0 = 0;  ///< unit u0's tile
  uint16_t j0 = 0;     ///< unit u0's group
  uint16_t j_last = 0; ///< unit u1 - 1's group (when u1 > 0)
};
static_assert(sizeof(GemvPlan) == 16, "one 16-byte shared-memory load per plan");

/** Warp gw's (of nw) plan of M: units [total gw / nw, total (gw + 1) / nw), total = tiles x groups
 *  (< 2^31: the GEMV counts units in 32 bits; gemv_plan_fits checks it). */
NIBBLE_MK_HD inline GemvPlan gemv_plan(const PackedMatrix& M, int gw, int nw) {
  const long long total = (long long)M.tiles * M.groups;
  GemvPlan p;
  p.u0 = uint32_t(total * gw / nw);
  p.u1 = uint32_t(total * (gw + 1) / nw);
  long long tile = 0;
  int j = 0;
  unit_tile_group(M, p.u0, &tile, &j);
  p.tile0 = uint32_t(tile);
  p.j0 = uint16_t(j);
  if (p.u1 > 0) {  // the block split reads it from a block's last warp, whose own range may be empty
    unit_tile_group(M, (long long)p.u1 - 1, &tile, &j);
    p.j_last = uint16_t(j);
  }
  return p;
}

/** gemv_plan for the decode kernel's warp gw of nw (kWarps per block); with sync_warp the last warp
 *  of each block gets an empty range (at the end of its block's, so block_groups still sees the
 *  block's last unit) and the other kWarps - 1 share the units. */
inline GemvPlan gemv_plan_decode(const PackedMatrix& M, int gw, int nw, bool sync_warp) {
  if (!sync_warp) return gemv_plan(M, gw, nw);
  const int b = gw / kWarps, w = gw % kWarps, per = kWarps - 1, nw15 = nw / kWarps * per;
  if (w < per) return gemv_plan(M, b * per + w, nw15);
  GemvPlan p = gemv_plan(M, b * per + per - 1, nw15);  // keeps j_last: the group of the block's last unit
  p.u0 = p.u1;
  long long tile = 0;
  int j = 0;
  unit_tile_group(M, p.u0, &tile, &j);  // an empty range's coordinates are its u0's, as gemv_plan's
  p.tile0 = uint32_t(tile);
  p.j0 = uint16_t(j);
  return p;
}

/** Whether M can be planned: its units and groups fit the plan's fields (and the GEMV's 32-bit
 *  unit counts), and its chunk is a valid unit order (the GEMV's walk steps through a chunk with a
 *  mask: any other chunk would visit the wrong groups). */
inline bool gemv_plan_fits(const PackedMatrix& M) {
  return (long long)M.tiles * M.groups < (1ll << 31) && M.groups <= 65535 && valid_chunk(unit_chunk(M), M.groups);
}

/** Bytes of the repacked weights (codes and metadata) of a (rows, K) matrix. */
inline size_t packed_weight_bytes(int rows, int k) { return size_t((rows + 15) / 16) * (k / 128) * kUnitStride; }

/** One AWQ/GPTQ source triple (logical (rows, K), row-major). */
struct SourceTriple {
  const uint8_t* packed = nullptr;  ///< (rows, K/2), LOW nibble = even input index
  const uint16_t* scale = nullptr;  ///< (rows, K/128) bf16 bits
  const uint8_t* zero = nullptr;    ///< (rows, K/128)
  int rows = 0;
};

/** How the virtual matrix's rows come from the sources. */
enum class RowMap {
  Concat,      ///< sources stacked: [src0 rows | src1 rows | src2 rows] (q | k | v)
  Interleave8  ///< two sources of equal rows: tile t = src0 rows 8t..8t+7, then src1 rows 8t..8t+7
               ///< (gate | up: a lane then holds gate row r and up row r of the same tile)
};

/** repack.cu: write the repacked matrix of n_src sources (1..3) with K inputs into w (sized by
 *  packed_weight_bytes for the total rows), units in the order of `chunk` groups per chunk
 *  (PackedMatrix::chunk, which must then be the same; 0: tile-major; otherwise valid_chunk).
 *  Runs on `stream`. */
cudaError_t launch_repack(const SourceTriple* src, int n_src, RowMap map, int k, uint4* w,
                          cudaStream_t stream, int chunk = 0);

/** One decoder layer as the kernel sees it (the kernel takes its matrices from DecodeParams::mat0
 *  and layer_stride; these are build_model's record of them). */
struct LayerDev {
  PackedMatrix qkv;   ///< (n_q*hd + 2*n_kv*hd, d): [q | k | v]
  PackedMatrix o;     ///< (d, n_q*hd)
  PackedMatrix gu;    ///< (2*ffn, d), Interleave8 of gate, up
  PackedMatrix down;  ///< (d, ffn)
  const uint16_t* in_norm = nullptr;
  const uint16_t* post_norm = nullptr;
  uint16_t* k_cache = nullptr;  ///< this sequence's (n_kv, max_seq, hd) bf16
  uint16_t* v_cache = nullptr;
};

/** The GEMV kinds of DecodeParams::plans (and of the trace's GEMV counters). */
enum PlanKind : int { kPlanQkv = 0, kPlanO, kPlanGu, kPlanDown, kPlanHead, kPlanKinds };

/** Everything the persistent kernel reads. Activation buffers are fp32. */
struct DecodeParams {
  const LayerDev* layers = nullptr;  ///< device array of n_layers
  int n_layers = 0;
  int d = 0, ffn = 0, n_q = 0, n_kv = 0, hd = 0, vocab = 0, max_seq = 0;
  float eps = 0.f;
  SourceTriple embed;               ///< the original embedding triple (the token's row is read)
  PackedMatrix head;                ///< the tied LM head (vocab, d), repacked
  const uint16_t* final_norm = nullptr;
  const float2* rope = nullptr;     ///< (max_seq, hd/2) {cos, sin}
  /** Layer 0's qkv, o, gate|up and down (PlanKind order); layer li's are the same with w
   *  layer_stride * li bytes further on (one allocation, layers in order: build_model checks it). In
   *  the kernel's parameters, i.e. the constant bank: v10 read them from the layer array in global
   *  memory, and each matrix's first refill waited ~1 us on that L2 round trip (Nsight Compute). */
  PackedMatrix mat0[4];
  long long layer_stride = 0;
  /** (kPlanKinds, nw) every warp's GemvPlan of the layers' qkv, o, gate|up, down (the same shapes in
   *  every layer) and the head, for the launch's grid (nw = blocks x kWarps). */
  const GemvPlan* plans = nullptr;
  // scratch
  float* h = nullptr;        ///< (d) residual stream
  float* qkv = nullptr;      ///< (n_q*hd + 2 n_kv*hd), zero between steps
  float* attn = nullptr;     ///< (n_q*hd)
  float* gu = nullptr;       ///< (2 ffn) in Interleave8 order
  float* part = nullptr;     ///< attention partials (n_q, max_chunks, hd + 2)
  int max_chunks = 0;
  unsigned* attn_count = nullptr;  ///< (n_kv), zero between steps; attn_done follows it
  /** (n_kv) layers whose attention output of this KV head's query heads is complete (the combining
   *  block's release); o-proj waits on it instead of a grid barrier. Zero between steps. */
  unsigned* attn_done = nullptr;
  unsigned* barrier = nullptr;     ///< [count, generation, done], count and done zero between steps
  /** 0: generation barrier (fence, atomic, spin; grid_sync), 1: release/acquire counter
   *  (grid_arrive, grid_wait). NIBBLE_MK_BARRIER at build_model picks it. */
  int barrier_mode = 1;
  /** 1: a proxy fence before each weight-ring refill; 0: none (NIBBLE_MK_PFENCE=0, an A/B switch). */
  int proxy_fence = 1;
  /** After its qkv GEMV each warp prefetches into L2 its ranges of this layer's o (bit 0), gate|up
   *  (bit 1) and down (bit 2) weights, to stream during the attention (NIBBLE_MK_L2PF=mask). */
  int l2_prefetch = 0;
  /** A critical-path probe (NIBBLE_MK_DELAY=where:ns, NOTES.md): every thread spins delay_ns of
   *  GPU time at one point of every layer (1 after the attention, 2 after the qkv GEMV, 3 after
   *  gate|up's input build, 4 after the down GEMV); the step grows by n_layers x delay if that
   *  point is on the critical path, by less if the weight stream hides it. 0: off. */
  int delay_where = 0;
  int delay_ns = 0;
  /** 1 (v20, the default): each block's first K/V rows are copied in the qkv barrier's split phase,
   *  once the arrival's fence has completed (with split_barrier 2), so that the copy runs during the
   *  barrier's wait without delaying the fence (-23 us alone, -26 with o_combine, 2026-12-05); 0: by
   *  the attention stage itself (v15-v19). v8-v14 copied them before the arrival (measured ~5-10 us
   *  per token slower in v15: the release fence waited for them; that mode is gone).
   *  NIBBLE_MK_KVPF=0 for an A/B. */
  int kv_prefetch = 1;
  /** 2 (v18): the next GEMV's first ring stages that the current GEMV did not issue are issued
   *  after the release fence of the block's arrival at the grid barrier has completed (a block
   *  barrier after the arrival) and before its wait: the fence waits for every bulk copy the SM has
   *  in flight, and, by the measurement, also for those other warps issue while it runs (v18:
   *  -8 us per token against 1); 1 (v15):
   *  issued between the arrival and the wait, while the fence runs; 0: before the arrival.
   *  NIBBLE_MK_SPLIT=0/1 for an A/B. (The generation barrier, barrier_mode 0, has no split: they
   *  are issued before it.) */
  int split_barrier = 2;
  /** 0: thread 0 arrives at the grid barriers, polls the flags and releases the attention's
   *  counts; 1: lane 0 of the last warp does, and that warp has no GEMV units (the plans give its
   *  units to the other 15), so it issues no bulk copy. Measured no faster (v15): a fence waits for
   *  every copy of the SM in flight. NIBBLE_MK_SYNCWARP at build_model (the plans depend on it);
   *  the generation barrier (barrier_mode 0) still arrives from thread 0. */
  int sync_warp = 0;
  /** 1 (v20, the default): no block combines the attention's chunks; o-proj's blocks wait for every
   *  chunk of their heads (attn_count) and merge the partials in their input build, one flag hop and
   *  one fence fewer per layer (-21 us alone, -26 with kv_prefetch, 2026-12-05); 0: the last block of
   *  each KV head combines into attn and releases attn_done (v6-v19). NIBBLE_MK_OCOMB=0 for an A/B. */
  int o_combine = 1;
  /** n > 0 (a candidate after v19, not yet measured on the GPU; NIBBLE_MK_PFSM=n at build_model):
   *  the last n blocks of the grid run none of the step. They follow the grid barrier's count and
   *  pull the GEMV after the running one into L2 (cp.async.bulk.prefetch.L2), while the other
   *  blocks' rings are not chained across a barrier (the next GEMV's first stages go out in the
   *  split phase, after the arrival's fence), so a compute block's release fence has no copy of its
   *  own in flight to wait for (bench_fence_latency: ~500 against ~4,800 cycles) and its refills
   *  after the barrier come from L2. The plans, the barrier targets, the attention's items and the
   *  zeroing are over the gridDim.x - n compute blocks. Needs the counter barrier and split 2
   *  (barrier_mode 1, split_barrier 2; launch_decode refuses others). 0: every block computes (v1-v19). */
  int pf_blocks = 0;
  // this step
  const int64_t* token = nullptr;
  int pos = 0;
  float* logits = nullptr;   ///< (vocab) fp32
  /** Optional (NIBBLE_MK_TRACE): clock64() per block at every stage's arrival at and release from
   *  its barrier, trace_stride values per block (trace_marks(n_layers)). nullptr: no tracing. */
  long long* trace = nullptr;
  /** With trace: per GEMV kind (qkv, o, gate/up, down, head) kGemvStats sums over warps, layers and
   *  steps: cycles waiting on the weight ring, flushing, refilling it, in all; units. */
  unsigned long long* trace_gemv = nullptr;
};

/** Marks per layer of the attention's phases in DecodeParams::trace (attention_stage's `tr`): q
 *  rotated and the append done, every warp's scores and weighted V done, the block's partial
 *  written, the count taken, the end (after the combine for the last block), and 1 for the last
 *  block of its KV head. All 0 for a block without an item. */
constexpr int kAttnMarks = 6;
/** Values per block of DecodeParams::trace: the start, (arrival, release) for 5 stages per layer,
 *  the end, one "ready" mark per stage (input built, before the GEMV; after the attention), one
 *  "done" mark per stage (every warp of the block out of the GEMV; 0 for the attention), one
 *  "fenced" mark per stage, then kAttnMarks per layer for the attention's phases. */
NIBBLE_MK_HD inline int trace_marks(int n_layers) { return 2 + (25 + kAttnMarks) * n_layers; }
/** Index of layer li's first attention phase mark. */
NIBBLE_MK_HD inline int trace_attn(int n_layers, int li) { return 2 + 25 * n_layers + kAttnMarks * li; }
/** Index of stage s's "fenced" mark: the block's arrival at the grid barrier has completed (its
 *  release fence and the atomic's round trip; 0 for the attention, which has no barrier). */
NIBBLE_MK_HD inline int trace_fenced(int n_layers, int s) { return 2 + 20 * n_layers + s; }
/** Index of stage s's "ready" mark (s over the whole step, 5 per layer). */
NIBBLE_MK_HD inline int trace_ready(int n_layers, int s) { return 2 + 10 * n_layers + s; }
/** Index of stage s's "done" mark: the block's slowest warp has left the GEMV. */
NIBBLE_MK_HD inline int trace_done(int n_layers, int s) { return 2 + 15 * n_layers + s; }

/** Chunks per KV head the attention stage splits the sequence into, for a grid of `blocks`. */
inline int attn_max_chunks(int blocks, int n_kv) { return blocks / n_kv > 0 ? blocks / n_kv : 1; }

/** Dynamic shared memory (bytes) of the persistent kernel for GEMV inputs of at most max_k elements,
 *  model width d (the RMSNorm gains' length) and head dim hd. */
size_t decode_smem_bytes(int max_k, int d, int hd);

/** Blocks of the persistent grid on this device (SMs x co-resident blocks), 0 if it cannot run. */
cudaError_t decode_grid_blocks(int hd, size_t smem, int* blocks);

/** decode_kernel.cu: one decode step, one cooperative launch of `blocks` blocks. */
cudaError_t launch_decode(const DecodeParams& p, int blocks, size_t smem, cudaStream_t stream);

/** The config checks shared by build_model and the tests: an empty string when this solution
 *  supports the config, else why not. */
std::string unsupported_reason(int d, int ffn, int n_q, int n_kv, int hd, int group);

// ---- The stages alone (blocks.cu), for the tests and the benchmark --------------------------

/** The grid launch_gemv_blocks runs for `blocks` (0: one block per SM), 0 if there is no device. */
int gemv_blocks_grid(int blocks);

/** Most matrices per launch_gemv_blocks (each warp keeps its plans in shared memory). */
inline constexpr int kGemvBlocksMaxMats = 128;

/** ys[i] (rows_i) += W_i x for each of the n matrices in turn (fp32 x of length K; the caller zeroes
 *  the ys: the stage accumulates with atomics), with the decode kernel's stage code, one launch of
 *  `blocks` blocks (0: one per SM). Each warp prefetches its first loads of matrix i+1 before it
 *  computes the last of matrix i, as in the decode kernel. mats: n device descriptors; plans: device
 *  (n, nw) gemv_plan(mats[i], gw, nw) with nw = gemv_blocks_grid(blocks) x kWarps. n <= 128. exp: 0, or one
 *  of int4_mma_gemv.cuh's GemvExp consumer experiments (the benchmark's NIBBLE_MK_GEMV_EXP). */
cudaError_t launch_gemv_blocks(const PackedMatrix* mats, const GemvPlan* plans, float* const* ys, int n, const float* x,
                               int k, int blocks, cudaStream_t stream, int exp = 0);

/** The attention stage alone for one layer: q/k/v fp32 (pre-RoPE, [q | k | v]) -> K/V appended at
 *  pos, out (n_q*hd) fp32. part / count as in DecodeParams (count zeroed). */
cudaError_t launch_attention_blocks(const float* qkv, const float2* rope, uint16_t* k_cache, uint16_t* v_cache,
                                    int n_q, int n_kv, int hd, int max_seq, int pos, float* part, int max_chunks,
                                    unsigned* count, float* out, int blocks, cudaStream_t stream);

}  // namespace nibble::megakernel
