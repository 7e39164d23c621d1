// decode_session.h: drive one solution through build_model / decode_step / teardown on a DeviceModel.
//
// Shared by the grader's child process and by the GPU tests, so both exercise a solution exactly
// the same way: NaN-filled logits before every call, token ids on the GPU, the appended K/V read
// back from the live cache after the call.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "harness/decode/device_model.h"
#include "harness/hash.h"
#include "harness/solution_library.h"

namespace nibble {


/** What one checked step produced. */
struct StepOutputs {
  std::vector<float> logits;        // (batch, vocab) fp32
  std::vector<uint16_t> k_appended; // (layers, batch, n_kv, hd) bf16 bits, cache slot pos
  std::vector<uint16_t> v_appended; // same for V
};

class DecodeSession {
 public:
  /** Calls build_model on `stream` (the solution's); the harness's own staging and read-backs run
   *  on `harness_stream`, so that the timer can tell them from the solution's work between timed
   *  calls (TimedCalls). Throws SolutionError (status and the solution's message). */
  DecodeSession(const SolutionLibrary& lib, DeviceModel& model, cudaStream_t stream, cudaStream_t harness_stream);
  /** Calls teardown (errors are reported to stderr: destructors do not throw). */
  ~DecodeSession();
  DecodeSession(const DecodeSession&) = delete;
  DecodeSession& operator=(const DecodeSession&) = delete;

  /** Fill logits with NaN, upload tokens (batch values), call decode_step(pos). Does not sync. */
  void launch_step(const std::vector<int64_t>& tokens, int32_t pos);
  /** The untimed half of launch_step: NaN-fill the logits, upload the tokens, synchronise. */
  void prepare_step(const std::vector<int64_t>& tokens);
  /** The timed half: decode_step(pos) only. */
  void call_step(int32_t pos);
  /** launch_step, synchronise the device, read back logits and the K/V appended at pos. */
  StepOutputs run_step(const std::vector<int64_t>& tokens, int32_t pos);
  /** Read back the current logits (after a sync). */
  std::vector<float> read_logits() const;
  /** device_blake3 of the logits on the device (harness stream, synchronised): the commitment a
   *  timed step sends with "done". */
  Digest logits_digest() const;
  /** True when the token_ids buffer still holds what prepare_step uploaded (it is read-only). */
  bool tokens_intact() const;
  /** Close the session now (teardown); throws SolutionError on failure. Idempotent. */
  void close();

 private:
  const SolutionLibrary& lib_;
  DeviceModel& model_;
  cudaStream_t stream_, harness_stream_;
  void* handle_ = nullptr;
  bool open_ = false;
  DeviceTensor tokens_;
  std::vector<int64_t> last_tokens_;
  DeviceTensor logits_;
};

}  // namespace nibble
