// repack.cu: build time (untimed) -- AWQ/GPTQ int4 triples -> the mma-fragment layout (megakernel.h).
//
// Spec (seed contract): "You may repack the weights into any layout you like there -- interleaved
// nibbles, pre-swizzled for your MMA fragment, scales hoisted into a separate stream ... What you
// may not do is dequantise to bf16 once in build_model". The output holds the same 4-bit codes
// (moved, never dequantised) and the same bf16 scales and uint8 zeros, 4 bytes per row-group.
// Shapes: a virtual matrix of sum(rows) x K from 1..3 sources (RowMap). Bytes: reads the source
// once, writes packed_weight_bytes.
// Source code of element (r, k): byte packed[r, k/2], LOW nibble = EVEN k (the seed's order).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "megakernel.h"

namespace nibble::megakernel {
namespace {

struct RepackArgs {
  SourceTriple src[3];
  int n_src;
  RowMap map;
  int k;       // inputs
  int rows;    // virtual rows (sum of the sources')
  int tiles;   // ceil(rows / 16)
  int groups;  // k / 128
  int chunk;   // groups per chunk of the unit order (PackedMatrix::chunk; here never 0)
};

/** Tile and group of unit u: megakernel.h's unit_tile_group, the order the GEMV walks. */
__device__ void unit_coords(const RepackArgs& a, size_t u, int* tile, int* group) {
  PackedMatrix m;
  m.tiles = a.tiles;
  m.groups = a.groups;
  m.chunk = a.chunk;
  long long t = 0;
  unit_tile_group(m, (long long)u, &t, group);
  *tile = int(t);
}

/** Virtual row v -> (source, source row); false for padding. */
__device__ bool source_row(const RepackArgs& a, int v, int* s, int* r) {
  if (v >= a.rows) return false;
  if (a.map == RowMap::Interleave8) {
    const int tile = v / kTileRows, in_tile = v % kTileRows;
    *s = in_tile < 8 ? 0 : 1;
    *r = tile * 8 + (in_tile & 7);
    return *r < a.src[*s].rows;
  }
  int base = 0;
  for (int i = 0; i < a.n_src; ++i) {
    if (v < base + a.src[i].rows) {
      *s = i;
      *r = v - base;
      return true;
    }
    base += a.src[i].rows;
  }
  return false;
}

__device__ uint32_t code_at(const RepackArgs& a, int v, int k) {
  int s, r;
  if (!source_row(a, v, &s, &r)) return 0u;
  const uint8_t byte = a.src[s].packed[size_t(r) * (a.k / 2) + k / 2];
  return (k & 1) ? uint32_t(byte >> 4) : uint32_t(byte & 0xFu);
}

__device__ uint32_t meta_at(const RepackArgs& a, int v, int group) {
  int s, r;
  if (!source_row(a, v, &s, &r)) return 0u;  // scale 0, zero 0: padding rows contribute 0
  const size_t i = size_t(r) * a.groups + group;
  return (uint32_t(a.src[s].scale[i]) << 16) | uint32_t(a.src[s].zero[i]);
}

// One thread per output word: unit u (unit_coords: its tile and group), word index (c, lane, q); see
// megakernel.h (PackedMatrix) for the layout.
__global__ void repack_weights_kernel(const RepackArgs a, unsigned char* w) {
  const size_t n = size_t(a.tiles) * a.groups * 256;
  for (size_t idx = size_t(blockIdx.x) * blockDim.x + threadIdx.x; idx < n; idx += size_t(gridDim.x) * blockDim.x) {
    const size_t u = idx / 256;
    const int in_unit = int(idx % 256);
    const int c = in_unit / 128, lane = (in_unit / 4) % 32, q = in_unit % 4;
    int tile, group;
    unit_coords(a, u, &tile, &group);
    const int g = lane >> 2, t = lane & 3;
    const int row = tile * kTileRows + g + 8 * (q & 1);
    uint32_t word = 0;
#pragma unroll
    for (int p = 0; p < 8; ++p) {
      const int block = 2 * c + (p & 1);  // even nibbles: k-block 2c, odd nibbles: k-block 2c + 1
      const int k = group * kGroup + 32 * block + 16 * (q >> 1) + 4 * t + (p >> 1);
      word |= code_at(a, row, k) << (4 * p);
    }
    reinterpret_cast<uint32_t*>(w + u * kUnitStride)[in_unit] = word;
  }
}

__global__ void repack_meta_kernel(const RepackArgs a, unsigned char* w) {
  const size_t n = size_t(a.tiles) * a.groups * 8;
  for (size_t idx = size_t(blockIdx.x) * blockDim.x + threadIdx.x; idx < n; idx += size_t(gridDim.x) * blockDim.x) {
    const size_t u = idx / 8;
    const int g = int(idx % 8);
    int tile, group;
    unit_coords(a, u, &tile, &group);
    const int row = tile * kTileRows + g;
    reinterpret_cast<uint2*>(w + u * kUnitStride + kUnitCodeBytes)[g] =
        make_uint2(meta_at(a, row, group), meta_at(a, row + 8, group));
  }
}

}  // namespace

cudaError_t launch_repack(const SourceTriple* src, int n_src, RowMap map, int k, uint4* w,
                          cudaStream_t stream, int chunk) {
  if (!src || n_src < 1 || n_src > 3 || k <= 0 || k % kGroup != 0 || !w) return cudaErrorInvalidValue;
  if (map == RowMap::Interleave8 && (n_src != 2 || src[0].rows != src[1].rows || src[0].rows % 8 != 0))
    return cudaErrorInvalidValue;
  RepackArgs a{};
  a.n_src = n_src;
  a.map = map;
  a.k = k;
  a.groups = k / kGroup;
  a.chunk = chunk > 0 ? chunk : a.groups;
  if (!valid_chunk(a.chunk, a.groups)) return cudaErrorInvalidValue;
  long long rows = 0;
  for (int i = 0; i < n_src; ++i) {
    if (!src[i].packed || !src[i].scale || !src[i].zero || src[i].rows < 1) return cudaErrorInvalidValue;
    a.src[i] = src[i];
    rows += src[i].rows;
  }
  if (rows > (1ll << 30)) return cudaErrorInvalidValue;
  a.rows = int(rows);
  a.tiles = (a.rows + kTileRows - 1) / kTileRows;
  const int threads = 256;
  const size_t words = size_t(a.tiles) * a.groups * 256;
  const unsigned blocks = unsigned(std::min<size_t>((words + threads - 1) / threads, 65535u * 8));
  // cudaLaunchKernelEx rather than <<< >>>: plain C++, so that the CPU emulation (tests/emulation)
  // builds this file as it is.
  cudaLaunchConfig_t cfg{};
  cfg.gridDim = dim3(blocks);
  cfg.blockDim = dim3(threads);
  cfg.stream = stream;
  cudaError_t e = cudaLaunchKernelEx(&cfg, repack_weights_kernel, a, reinterpret_cast<unsigned char*>(w));
  if (e != cudaSuccess) return e;
  const size_t metas = size_t(a.tiles) * a.groups * 8;
  cfg.gridDim = dim3(unsigned(std::min<size_t>((metas + threads - 1) / threads, 65535u * 8)));
  return cudaLaunchKernelEx(&cfg, repack_meta_kernel, a, reinterpret_cast<unsigned char*>(w));
}

}  // namespace nibble::megakernel
