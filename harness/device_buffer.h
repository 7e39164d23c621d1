// device_buffer.h: device memory owned once, and tensors described as the C ABI passes them.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

#include "fixtures/tensor.h"
#include "nibble/nibble.h"

namespace nibble {

/** One cudaMalloc'd buffer, freed exactly once. */
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  explicit DeviceBuffer(size_t bytes);
  ~DeviceBuffer();
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  DeviceBuffer(DeviceBuffer&& o) noexcept : ptr_(o.ptr_), bytes_(o.bytes_) { o.ptr_ = nullptr; o.bytes_ = 0; }
  DeviceBuffer& operator=(DeviceBuffer&& o) noexcept;
  void* get() const { return ptr_; }
  size_t bytes() const { return bytes_; }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
};

/** A describing nibble_tensor over a device buffer (row-major strides filled in). */
struct DeviceTensor {
  DeviceBuffer buf;
  std::vector<int64_t> shape, strides;
  nibble_tensor desc{};
  DeviceTensor(DType dtype, std::vector<int64_t> shape);
};

/** Row-major strides (in elements) of `shape`. */
std::vector<int64_t> row_major_strides(const std::vector<int64_t>& shape);
/** A nibble_tensor over `data` (shape and strides in elements, kept alive by the caller). */
nibble_tensor describe_tensor(void* data, DType dtype, std::vector<int64_t>& shape, std::vector<int64_t>& strides);

}  // namespace nibble
