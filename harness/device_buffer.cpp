// device_buffer.cpp: see device_buffer.h.
#include "harness/device_buffer.h"

#include "harness/cuda_check.h"

namespace nibble {

DeviceBuffer::DeviceBuffer(size_t bytes) : bytes_(bytes) {
  if (bytes) NIBBLE_CUDA_CALL(cudaMalloc(&ptr_, bytes));
}

DeviceBuffer::~DeviceBuffer() {
  if (ptr_) NIBBLE_CUDA_CALL_NOEXCEPT(cudaFree(ptr_));
}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
  if (this != &o) {
    if (ptr_) NIBBLE_CUDA_CALL_NOEXCEPT(cudaFree(ptr_));
    ptr_ = o.ptr_;
    bytes_ = o.bytes_;
    o.ptr_ = nullptr;
    o.bytes_ = 0;
  }
  return *this;
}

std::vector<int64_t> row_major_strides(const std::vector<int64_t>& shape) {
  std::vector<int64_t> s(shape.size(), 1);
  for (int i = int(shape.size()) - 2; i >= 0; --i) s[i] = s[i + 1] * shape[i + 1];
  return s;
}

nibble_tensor describe_tensor(void* data, DType dtype, std::vector<int64_t>& shape, std::vector<int64_t>& strides) {
  nibble_tensor t{};
  int dev = 0;
  NIBBLE_CUDA_CALL(cudaGetDevice(&dev));
  t.data = data;
  t.device = {NIBBLE_DEVICE_CUDA, dev};
  t.ndim = int32_t(shape.size());
  t.dtype = dtype_to_abi(dtype);
  t.shape = shape.data();
  t.strides = strides.data();
  t.byte_offset = 0;
  return t;
}

DeviceTensor::DeviceTensor(DType dtype, std::vector<int64_t> shp)
    : shape(std::move(shp)) {
  strides = row_major_strides(shape);
  int64_t n = 1;
  for (auto s : shape) n *= s;
  buf = DeviceBuffer(size_t(n) * dtype_size(dtype));
  desc = describe_tensor(buf.get(), dtype, shape, strides);
}

}  // namespace nibble
