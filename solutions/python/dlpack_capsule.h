// dlpack_capsule.h: a nibble_tensor as a DLPack DLManagedTensor that borrows the harness's buffer.
//
// DLPack (dmlc/dlpack, include/dlpack/dlpack.h) is spelled out here: the shim needs these structs
// and nothing else of it. Two capsules: the legacy "dltensor" (DLManagedTensor, v0.8), which every
// consumer reads, and "dltensor_versioned" (DLManagedTensorVersioned, v1.0) for a consumer that asks
// for it (__dlpack__(max_version=(1, 0)): numpy 2, torch 2.6+); numpy marks an array made from a
// legacy capsule read-only, so an output written through numpy needs the versioned one. nibble_tensor (nibble.h) is already laid
// out like DLTensor and uses DLPack's device and dtype codes, so the mapping is a copy of the fields;
// what the copy adds is ownership: the DLManagedTensor owns its own shape and stride arrays (the
// harness's arrays live only as long as one call), and its deleter frees exactly those, never the
// data, which stays the harness's.
#pragma once

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

namespace nibble::py {

struct DLDevice {
  int32_t device_type;  // kDLCPU 1, kDLCUDA 2 (DLDeviceType; an enum of int size)
  int32_t device_id;
};
struct DLDataType {
  uint8_t code;  // kDLInt 0, kDLUInt 1, kDLFloat 2, kDLBfloat 4
  uint8_t bits;
  uint16_t lanes;
};
struct DLTensor {
  void* data;
  DLDevice device;
  int32_t ndim;
  DLDataType dtype;
  int64_t* shape;
  int64_t* strides;  // in elements
  uint64_t byte_offset;
};
struct DLManagedTensor {
  DLTensor dl_tensor;
  void* manager_ctx;
  void (*deleter)(DLManagedTensor* self);
};

struct DLPackVersion {
  uint32_t major, minor;
};
/** DLPack 1.0's managed tensor: the version first, flags (bit 0 read-only, bit 1 is-copied) before
 *  the tensor. */
struct DLManagedTensorVersioned {
  DLPackVersion version;
  void* manager_ctx;
  void (*deleter)(DLManagedTensorVersioned* self);
  uint64_t flags;
  DLTensor dl_tensor;
};

/** What a capsule describes: a borrowed buffer and its layout. */
struct TensorView {
  uint64_t data = 0;  // the buffer's address (byte_offset not added)
  int32_t device_type = 0, device_id = 0;
  uint8_t code = 0, bits = 0;
  uint16_t lanes = 1;
  std::vector<int64_t> shape, strides;  // strides in elements; empty: row-major
  uint64_t byte_offset = 0;
};

/** Row-major strides, in elements, of `shape`. */
inline std::vector<int64_t> row_major_strides(const std::vector<int64_t>& shape) {
  std::vector<int64_t> s(shape.size(), 1);
  for (size_t i = shape.size(); i-- > 1;) s[i - 1] = s[i] * shape[i];
  return s;
}

/** A managed tensor (DLManagedTensor or DLManagedTensorVersioned) with the arrays it points to;
 *  manager_ctx is the owner itself. */
template <class Managed>
struct OwnedDLTensor {
  Managed managed{};
  std::vector<int64_t> shape, strides;
};

/** The deleter of every tensor make_dl_tensor returns: frees the descriptor, not the data. */
template <class Managed>
void delete_dl_tensor(Managed* self) {
  if (self) delete static_cast<OwnedDLTensor<Managed>*>(self->manager_ctx);
}

/** A DLManagedTensor (or, with Managed = DLManagedTensorVersioned, a DLPack 1.0 one with no flags)
 *  over `v`'s buffer; the consumer calls its deleter, or the capsule's destructor does when it was
 *  never consumed. Throws std::invalid_argument when shape and strides disagree in length, an
 *  extent is negative or lanes is 0. */
template <class Managed = DLManagedTensor>
Managed* make_dl_tensor(const TensorView& v) {
  if (!v.strides.empty() && v.strides.size() != v.shape.size())
    throw std::invalid_argument("DLPack: " + std::to_string(v.shape.size()) + " extents but " +
                                std::to_string(v.strides.size()) + " strides");
  for (int64_t e : v.shape)
    if (e < 0) throw std::invalid_argument("DLPack: a negative extent");
  if (v.lanes == 0) throw std::invalid_argument("DLPack: dtype with 0 lanes");
  auto owned = std::make_unique<OwnedDLTensor<Managed>>();
  owned->shape = v.shape;
  // Always explicit strides: DLPack 1.x consumers may refuse NULL.
  owned->strides = v.strides.empty() ? row_major_strides(v.shape) : v.strides;
  DLTensor& t = owned->managed.dl_tensor;
  t.data = reinterpret_cast<void*>(static_cast<uintptr_t>(v.data));
  t.device = {v.device_type, v.device_id};
  t.ndim = int32_t(v.shape.size());
  t.dtype = {v.code, v.bits, v.lanes};
  t.shape = owned->shape.data();
  t.strides = owned->strides.data();
  t.byte_offset = v.byte_offset;
  owned->managed.manager_ctx = owned.get();
  owned->managed.deleter = delete_dl_tensor<Managed>;
  if constexpr (std::is_same_v<Managed, DLManagedTensorVersioned>) {
    owned->managed.version = {1, 0};
    owned->managed.flags = 0;  // writable (outputs are written through it), not a copy
  }
  return &owned.release()->managed;
}

}  // namespace nibble::py
