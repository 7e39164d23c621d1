// stream_layout.h: the stream kernel's weight layout (experiments/gemm_fp4_stream, M <= 16), built
// on the sm90 solution's kPerm records (solutions/gemm_fp4/sm90/fp4_frag.h: repack, the same codes,
// scale bytes and colmul).
//
// A unit is one slab-chunk of the kPerm order (16 W rows x 64 k: 512 bytes of codes, lane-major as
// in fp4_frag.h) followed by its scale record (64 bytes NVFP4, 32 MXFP4): one 576 / 544-byte record, so that
// a run of units is one contiguous byte range (one bulk copy). K is cut into `split` slices of
// chunks [c0(r), c0(r + 1)), c0(r) = nch r / split; units are ordered slice-major, then tile (16-row
// slab) t, then chunk: unit(t, c) = ntiles c0(r) + t len(r) + (c - c0(r)). A block owns slice r of a
// contiguous tile range, which is then one contiguous range of units (and each of its warps a
// contiguous sub-range). N is padded to 16 only (code 0), K to 64.
#pragma once

#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "solutions/gemm_fp4/sm90/fp4_frag.h"

namespace nibble::gemm_fp4_sm90 {

/** Bytes of one stream unit: codes then scales. */
__host__ __device__ constexpr int stream_unit_bytes(bool nvfp4) { return 512 + scale_bytes_per_chunk(nvfp4); }

/** Slices of K (chunk ranges) of the stream layout and the unit number of (tile, chunk). */
struct StreamLayout {
  int64_t ntiles = 0, nch = 0;
  int split = 1;
  /** First chunk of slice r (r = split: nch). */
  __host__ __device__ constexpr int64_t c0(int r) const { return nch * r / split; }
  /** Chunks in slice r. */
  __host__ __device__ constexpr int64_t len(int r) const { return c0(r + 1) - c0(r); }
  /** The slice that holds chunk c. */
  constexpr int slice_of(int64_t c) const {
    int r = int(c * split / nch);  // c0 is floor(nch r / split): at most one step off
    while (r > 0 && c0(r) > c) --r;
    while (r + 1 < split && c0(r + 1) <= c) ++r;
    return r;
  }
  /** The unit number of (tile t, chunk c). */
  constexpr int64_t unit(int64_t t, int64_t c) const {
    const int r = slice_of(c);
    return ntiles * c0(r) + t * len(r) + (c - c0(r));
  }
};

/** The stream layout's repacked weights, on the host. */
struct StreamRepacked {
  StreamLayout lay;
  std::vector<uint8_t> units;  // ntiles x nch records of stream_unit_bytes
  std::vector<float> colmul;   // ntiles x 16: the epilogue's factor of each W row (0 past N)
};

/**
 * Repack W (N, K/2) codes and (N, ceil(K/block)) scales into the stream layout with `split` slices
 * of K (1 <= split <= the chunks of K): the kPerm records of repack() (same codes, same scale
 * bytes, same colmul), reordered and interleaved.
 * @return an empty string, or why the weights cannot be repacked (a NaN scale, a bad split).
 */
inline std::string repack_stream(bool nvfp4, int64_t N, int64_t K, const uint8_t* packed, const uint8_t* scale,
                                 float global, int split, StreamRepacked* out) {
  Repacked r;
  const std::string why = repack(nvfp4, N, K, packed, scale, global, KOrder::kPerm, 1, &r);
  if (!why.empty()) return why;
  if (split < 1 || split > r.nch) return "split " + std::to_string(split) + " is not in 1 .. " + std::to_string(r.nch);
  StreamRepacked& o = *out;
  o.lay.ntiles = (N + kSlabRows - 1) / kSlabRows;
  o.lay.nch = r.nch;
  o.lay.split = split;
  const int sbpc = scale_bytes_per_chunk(nvfp4), ub = stream_unit_bytes(nvfp4);
  o.units.assign(size_t(o.lay.ntiles * r.nch * ub), 0u);
  for (int64_t t = 0; t < o.lay.ntiles; ++t)
    for (int64_t c = 0; c < r.nch; ++c) {
      const int64_t src = unit_index(t, c, r.nch, 1);  // group 1: slab-major
      uint8_t* dst = &o.units[size_t(o.lay.unit(t, c) * ub)];
      std::memcpy(dst, &r.w[size_t(src * 32 * kWordsPerLaneChunk)], 512);
      std::memcpy(dst + 512, &r.s[size_t(src * sbpc)], size_t(sbpc));
    }
  o.colmul.assign(r.colmul.begin(), r.colmul.begin() + o.lay.ntiles * kSlabRows);
  return {};
}

}  // namespace nibble::gemm_fp4_sm90
