// int4_test_matrix.h: what the decode kernels' GPU tests build their int4 weights from: a random
// matrix in the task's plain layout (packed (rows, in/2) uint8, LOW nibble = even index; a bf16
// scale and a uint8 zero point per group of 128), its fp64 weights for the reference, and its copy
// in device memory.
#pragma once

#include <cuda_runtime.h>

#include <cmath>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "fixtures/bf16.h"
#include "test_rng.h"

namespace nibble::test {

/** A device allocation freed once (p null when cudaMalloc failed: the test checks). */
struct DevBuf {
  void* p = nullptr;
  explicit DevBuf(size_t bytes) {
    if (cudaMalloc(&p, bytes ? bytes : 1) != cudaSuccess) p = nullptr;
  }
  ~DevBuf() {
    if (p) cudaFree(p);
  }
  DevBuf(const DevBuf&) = delete;
  DevBuf& operator=(const DevBuf&) = delete;
  template <class T>
  T* as() const {
    return static_cast<T*>(p);
  }
};

/** A random int4 matrix (rows, in) on the host and its fp64 dequantised values. */
struct HostMatrix {
  int rows, in;
  std::vector<uint8_t> packed, zero;
  std::vector<uint16_t> scale;
  HostMatrix(int rows_, int in_, Rng& rng) : rows(rows_), in(in_) {
    const int groups = in / 128;
    packed.resize(size_t(rows) * in / 2);
    zero.resize(size_t(rows) * groups);
    scale.resize(size_t(rows) * groups);
    for (auto& b : packed) b = uint8_t(rng.below(256));
    for (auto& z : zero) z = uint8_t(rng.below(16));
    // Scales over a few binades and both signs (the kernel must not assume positive scales).
    for (auto& s : scale) {
      const float u = rng.uniform();  // the draws in a fixed order (a product's operands have none)
      const float mag = (0.5f + u) * std::ldexp(1.0f, -4 - rng.below(4));
      s = f32_to_bf16(rng.below(8) == 0 ? -mag : mag);
    }
  }
  /** W[o, i] = (code - zero) * scale, LOW nibble = even index. */
  double at(int o, int i) const {
    const uint8_t byte = packed[size_t(o) * in / 2 + i / 2];
    const int code = (i % 2 == 0) ? (byte & 0xF) : (byte >> 4);
    const size_t g = size_t(o) * (in / 128) + i / 128;
    return double(code - int(zero[g])) * bf16_to_f32(scale[g]);
  }
};

/** A HostMatrix's three arrays in device memory. */
struct DeviceMatrix {
  DevBuf packed, scale, zero;
  explicit DeviceMatrix(const HostMatrix& h) : packed(h.packed.size()), scale(h.scale.size() * 2), zero(h.zero.size()) {
    cudaMemcpy(packed.p, h.packed.data(), h.packed.size(), cudaMemcpyHostToDevice);
    cudaMemcpy(scale.p, h.scale.data(), h.scale.size() * 2, cudaMemcpyHostToDevice);
    cudaMemcpy(zero.p, h.zero.data(), h.zero.size(), cudaMemcpyHostToDevice);
  }
};

}  // namespace nibble::test
