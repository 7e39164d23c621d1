// device_tensor.h: a row-major nibble_tensor over emulated device memory (cudaMalloc of the shim:
// registered, so the emulated kernels' loads from it are bounds-checked), for the ABI-level tests.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <cstring>
#include <utility>
#include <vector>

#include "nibble/nibble.h"

namespace nibble::test {

/** `bytes` from `src` (or uninitialised when null) as an (shape) tensor of dtype dt. */
struct DeviceTensor {
  std::vector<int64_t> shape, strides;
  void* data = nullptr;
  nibble_tensor t{};
  DeviceTensor(const void* src, size_t bytes, std::vector<int64_t> shp, nibble_dtype dt) : shape(std::move(shp)) {
    strides.assign(shape.size(), 1);
    for (int i = int(shape.size()) - 2; i >= 0; --i) strides[size_t(i)] = strides[size_t(i) + 1] * shape[size_t(i) + 1];
    cudaMalloc(&data, bytes);
    if (src) std::memcpy(data, src, bytes);
    t = nibble_tensor{data, {NIBBLE_DEVICE_CUDA, 0}, int32_t(shape.size()), dt, shape.data(), strides.data(), 0};
  }
  ~DeviceTensor() { cudaFree(data); }
  DeviceTensor(const DeviceTensor&) = delete;
  DeviceTensor& operator=(const DeviceTensor&) = delete;
};

}  // namespace nibble::test
