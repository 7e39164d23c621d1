// device_model.cpp: upload a fixture to the GPU and describe it through the C ABI.
#include "harness/decode/device_model.h"

#include <cstring>
#include <stdexcept>

#include "harness/cuda_check.h"

namespace nibble {


DeviceModel::DeviceModel(const DecodeConfig& cfg, const SafetensorsFile& fixture) : cfg_(cfg) {
  for (const TensorSpec& spec : cfg.tensors()) {
    const auto& e = fixture.entry(spec.name);  // throws naming the missing tensor
    if (e.dtype != spec.dtype || e.shape != spec.shape)
      throw std::runtime_error("fixture " + fixture.path() + ": tensor '" + spec.name +
                               "' has the wrong dtype or shape for config '" + cfg.name +
                               "'; rebuild it with `nibble fixture build`");
    if (spec.name == "tokens") {
      tokens_.resize(size_t(spec.numel()));
      std::memcpy(tokens_.data(), fixture.data(spec.name), e.nbytes());
      continue;
    }
    auto slot = std::make_unique<Slot>();
    slot->name = spec.name;
    slot->shape = spec.shape;
    slot->strides = row_major_strides(spec.shape);
    slot->buf = DeviceBuffer(e.nbytes());
    NIBBLE_CUDA_CALL(cudaMemcpy(slot->buf.get(), fixture.data(spec.name), e.nbytes(), cudaMemcpyHostToDevice));
    total_bytes_ += e.nbytes();
    by_name_[spec.name] = slot.get();
    named_.push_back({slot->name.c_str(), describe_tensor(slot->buf.get(), spec.dtype, slot->shape, slot->strides)});
    slots_.push_back(std::move(slot));
  }
  model_.struct_size = sizeof(nibble_decode_model);
  model_.task = kDecodeTask;
  model_.config_name = cfg_.name.c_str();
  model_.cfg = cfg_.dims;
  model_.tensors = named_.data();
  model_.num_tensors = int32_t(named_.size());
}

void* DeviceModel::device_ptr(const std::string& name) const {
  auto it = by_name_.find(name);
  if (it == by_name_.end()) throw std::runtime_error("no device tensor named '" + name + "'");
  return it->second->buf.get();
}

}  // namespace nibble
