// frag_units.h: the unit in which the tensor-core dequantising GEMMs (gemm_fp4_sm90 for NVFP4/MXFP4,
// int4_gemm_sm90 for int4) store their repacked weights. Host and device, no CUDA headers needed.
//
// C^T = W A^T: W's rows are the MMA's M side, 16 per warp (a "slab"). mma.sync m16n8k16 and wgmma
// m64nNk16 with A from registers give a warp the same A fragment per k16 step: 4 registers of two
// bf16 each, register r (0..3) of lane (g = lane / 4, t = lane % 4) holding row g + 8 (r & 1) and
// k 2t + 8 (r >> 1) + {0, 1} of the step (PTX ISA, "Matrix fragments for mma.m16n8k16" and
// "wgmma: register fragments"). A unit is one slab's 64-k chunk: 32 lanes x 16 bytes, lane-major,
// word j of a lane = step j (8 codes of 4 bits), so one 16-byte load per lane fetches a chunk. Each
// format places the 8 codes inside a word and keeps a record of scales per unit (fp4_frag.h,
// int4_wg_layout.h).
#pragma once

#include <cstdint>

#if defined(__CUDACC__)
#define NIBBLE_FRAG_HD __host__ __device__ __forceinline__
#else
#define NIBBLE_FRAG_HD inline
#endif

namespace nibble::sol {

inline constexpr int kChunkK = 64;            // k per chunk: one 16-byte load per lane
inline constexpr int kSlabRows = 16;          // W rows per warp
inline constexpr int kRowAlign = 128;         // N padding: the widest wgmma tile (two warpgroups of 64 rows)
inline constexpr int kWordsPerLaneChunk = 4;  // k16 steps per chunk
inline constexpr int kUnitBytes = 32 * 16;    // one unit: 32 lanes x 16 bytes

/** The unit number of (slab, chunk c) with groups of G slabs: ((slab / G) nch + c) G + slab % G, so
 *  the G slabs' chunk c, and a block's run of chunks, are one contiguous range (one bulk copy). */
NIBBLE_FRAG_HD constexpr int64_t unit_index(int64_t slab, int64_t c, int64_t nch, int G) {
  return ((slab / G) * nch + c) * G + slab % G;
}

/** The A-fragment row (within the slab) of lane group g, register r. */
NIBBLE_FRAG_HD constexpr int frag_row(int g, int r) { return g + 8 * (r & 1); }

/** The k (within the chunk, plain order) of lane group t, step j, register r, element e. */
NIBBLE_FRAG_HD constexpr int frag_k(int t, int j, int r, int e) { return 16 * j + 2 * t + 8 * (r >> 1) + e; }

/**
 * Two orders of k inside a chunk (a solution picks one per kernel):
 *   kStd   step j = physical k 16j .. 16j+15, logical k = physical (frag_k): wgmma reads B (the
 *          activations) from shared memory in plain k order.
 *   kPerm  step j of lane (g, t): physical k 16t + 4j + {0..3} (logical 2t, 2t+1 -> +0, +1;
 *          2t+8, 2t+9 -> +2, +3). The MMA sums over k, so any permutation applied to both operands
 *          gives the same C; this one lets a lane fetch its activations as two 16-byte loads per
 *          chunk (k 16t .. 16t+15 of its row) for mma.sync.
 */
enum class KOrder { kStd, kPerm };

/** Physical k (relative to the chunk) of element (register r, half h) of step j for lane group t. */
NIBBLE_FRAG_HD constexpr int chunk_k(KOrder order, int t, int j, int r, int h) {
  return order == KOrder::kStd ? frag_k(t, j, r, h) : 16 * t + 4 * j + 2 * (r >> 1) + h;
}

}  // namespace nibble::sol
