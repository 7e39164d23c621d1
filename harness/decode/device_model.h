// device_model.h: a fixture's tensors on the GPU, described as the C ABI passes them.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "fixtures/safetensors.h"
#include "fixtures/decode/decode_config.h"
#include "harness/device_buffer.h"
#include "nibble/nibble.h"

namespace nibble {

/**
 * Every fixture tensor except `tokens` uploaded to the GPU (weights, norms, the KV caches), with
 * the nibble_decode_model that build_model receives. The KV caches are the live ones a solution
 * updates in place; restore_kv() copies the fixture's prefix back.
 */
class DeviceModel {
 public:
  DeviceModel(const DecodeConfig& cfg, const SafetensorsFile& fixture);
  DeviceModel(const DeviceModel&) = delete;
  DeviceModel& operator=(const DeviceModel&) = delete;

  const nibble_decode_model* abi() const { return &model_; }
  const DecodeConfig& config() const { return cfg_; }
  /** Device pointer of a tensor; throws std::runtime_error for an unknown name. */
  void* device_ptr(const std::string& name) const;
  /** The fixture's token ids (decode_steps, batch), host side. */
  const std::vector<int64_t>& tokens() const { return tokens_; }
  /** Total bytes uploaded. */
  size_t bytes() const { return total_bytes_; }

 private:
  struct Slot {
    std::string name;
    DeviceBuffer buf;
    std::vector<int64_t> shape, strides;
  };
  DecodeConfig cfg_;
  std::vector<std::unique_ptr<Slot>> slots_;
  std::map<std::string, Slot*> by_name_;
  std::vector<nibble_named_tensor> named_;
  std::vector<int64_t> tokens_;
  nibble_decode_model model_{};
  size_t total_bytes_ = 0;
};

}  // namespace nibble
