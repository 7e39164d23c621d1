// decode_session.cpp: one solution's build_model / decode_step / teardown on a DeviceModel.
#include "harness/decode/decode_session.h"

#include <cmath>
#include <cstdio>
#include <cstring>
#include <limits>

#include "harness/cuda_check.h"
#include "harness/gpu_checks.h"

namespace nibble {

DecodeSession::DecodeSession(const SolutionLibrary& lib, DeviceModel& model, cudaStream_t stream,
                             cudaStream_t harness_stream)
    : lib_(lib),
      model_(model),
      stream_(stream),
      harness_stream_(harness_stream),
      tokens_(DType::I64, {model.config().dims.batch}),
      logits_(DType::F32, {model.config().dims.batch, model.config().dims.vocab}) {
  nibble_error err{};
  const nibble_status s = lib_.build_model(model_.abi(), stream_, &handle_, &err);
  check_status(s, err, "build_model");
  open_ = true;
  NIBBLE_CUDA_CALL(cudaDeviceSynchronize());
}

DecodeSession::~DecodeSession() {
  try {
    close();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "teardown failed: %s\n", e.what());
  }
}

void DecodeSession::close() {
  if (!open_) return;
  open_ = false;
  nibble_error err{};
  const nibble_status s = lib_.teardown(handle_, stream_, &err);
  check_status(s, err, "teardown");
  NIBBLE_CUDA_CALL(cudaDeviceSynchronize());
}

void DecodeSession::launch_step(const std::vector<int64_t>& tokens, int32_t pos) {
  prepare_step(tokens);
  call_step(pos);
}

void DecodeSession::prepare_step(const std::vector<int64_t>& tokens) {
  const auto& d = model_.config().dims;
  if (int64_t(tokens.size()) != d.batch) throw std::invalid_argument("launch_step: one token per sequence expected");
  // 0xFF bytes are an fp32 NaN: an element the solution leaves unwritten fails the check.
  NIBBLE_CUDA_CALL(cudaMemsetAsync(logits_.buf.get(), 0xFF, logits_.buf.bytes(), harness_stream_));
  last_tokens_ = tokens;
  NIBBLE_CUDA_CALL(cudaMemcpyAsync(tokens_.buf.get(), tokens.data(), tokens.size() * sizeof(int64_t),
                                   cudaMemcpyHostToDevice, harness_stream_));
  NIBBLE_CUDA_CALL(cudaStreamSynchronize(harness_stream_));
}

void DecodeSession::call_step(int32_t pos) {
  nibble_error err{};
  const nibble_status s = lib_.decode_step(handle_, &tokens_.desc, pos, &logits_.desc, stream_, &err);
  check_status(s, err, "decode_step");
}

bool DecodeSession::tokens_intact() const {
  std::vector<int64_t> now(last_tokens_.size());
  NIBBLE_CUDA_CALL(cudaMemcpyAsync(now.data(), tokens_.buf.get(), now.size() * sizeof(int64_t), cudaMemcpyDeviceToHost,
                                   harness_stream_));
  NIBBLE_CUDA_CALL(cudaStreamSynchronize(harness_stream_));
  return now == last_tokens_;
}

std::vector<float> DecodeSession::read_logits() const {
  std::vector<float> out(logits_.buf.bytes() / sizeof(float));
  NIBBLE_CUDA_CALL(cudaMemcpyAsync(out.data(), logits_.buf.get(), logits_.buf.bytes(), cudaMemcpyDeviceToHost,
                                   harness_stream_));
  NIBBLE_CUDA_CALL(cudaStreamSynchronize(harness_stream_));
  return out;
}

Digest DecodeSession::logits_digest() const {
  return device_blake3(logits_.buf.get(), logits_.buf.bytes(), harness_stream_);
}

StepOutputs DecodeSession::run_step(const std::vector<int64_t>& tokens, int32_t pos) {
  launch_step(tokens, pos);
  NIBBLE_CUDA_CALL(cudaDeviceSynchronize());
  StepOutputs out;
  out.logits = read_logits();
  const auto& d = model_.config().dims;
  const size_t per_layer = size_t(d.batch) * d.n_kv * d.hd;
  out.k_appended.resize(per_layer * d.layers);
  out.v_appended.resize(per_layer * d.layers);
  // Slot pos of (batch, n_kv, max_seq, hd): one hd-long row per (b, head), strided by max_seq rows.
  for (int l = 0; l < d.layers; ++l) {
    for (int kv = 0; kv < 2; ++kv) {
      const auto* base = static_cast<const uint16_t*>(
          model_.device_ptr("kv." + std::to_string(l) + (kv == 0 ? ".k" : ".v")));
      uint16_t* dst = (kv == 0 ? out.k_appended : out.v_appended).data() + per_layer * l;
      NIBBLE_CUDA_CALL(cudaMemcpy2DAsync(dst, size_t(d.hd) * 2, base + size_t(pos) * d.hd, size_t(d.max_seq) * d.hd * 2,
                                         size_t(d.hd) * 2, size_t(d.batch) * d.n_kv, cudaMemcpyDeviceToHost,
                                         harness_stream_));
    }
  }
  NIBBLE_CUDA_CALL(cudaStreamSynchronize(harness_stream_));
  return out;
}

}  // namespace nibble
