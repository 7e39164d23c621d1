// decode_bench.h: what the bench/ programs that run a decode solution share: the grader's cached
// fixture of a decode config (seed 0), built there when missing, a bundled solution's library in
// this build, and its decode steps timed one at a time.
#pragma once

#include <cstdio>
#include <cstdlib>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "fixtures/decode/decode_config.h"
#include "fixtures/decode/decode_fixture.h"
#include "fixtures/fixture.h"
#include "fixtures/safetensors.h"
#include "harness/decode/decode_session.h"
#include "harness/decode/device_model.h"
#include "harness/solution_library.h"
#include "bench_util.h"

namespace nibble {

/** The grader's cached fixture of cfg, seed 0 (made_cache_fixture_dir, $NIBBLE_CACHE_DIR), built there
 *  when missing (~6 s on 16 cores for full, 2 GB), opened once per process (one config per process:
 *  a second config is std::logic_error). */
inline const SafetensorsFile& cached_decode_fixture(const DecodeConfig& cfg) {
  static std::string name = cfg.name;
  if (cfg.name != name) throw std::logic_error("cached_decode_fixture: one config per process (" + name + " opened)");
  static std::unique_ptr<SafetensorsFile> file = [&] {
    const std::string dir = made_cache_fixture_dir(kDecodeTask, cfg.name, 0);
    {
      const FolderLock lock(dir);
      if (!fixture_present(dir, kDecodeTask, cfg.name, 0, /*given=*/false)) build_decode_fixture(cfg, 0, dir, 0, {});
    }
    return std::make_unique<SafetensorsFile>(dir + "/" + kFixtureModelFile);
  }();
  return *file;
}

/** lib/libnibble_<name>.so of the build this program was built in ($NIBBLE_BINARY_DIR: another). */
inline std::string bench_solution_path(const std::string& name) {
  const char* bin = std::getenv("NIBBLE_BINARY_DIR");
  return std::string(bin && *bin ? bin : NIBBLE_BENCH_BINARY_DIR) + "/lib/libnibble_" + name + ".so";
}

/**
 * A solution's DecodeSession on `model` (its own non-blocking stream), at the config's prefill
 * position with the model's first tokens, warmed up by one step (module load, first-launch setup).
 * step(): one decode step timed by CUDA events around the solution's decode_step (the harness's token
 * upload outside them), in ms; each step rewrites the same K/V slot. Throws std::runtime_error
 * (BENCH_CUDA) on a CUDA error; close() before it goes (the solution's teardown, checked).
 */
class TimedDecodeSteps {
 public:
  TimedDecodeSteps(const SolutionLibrary& lib, DeviceModel& model, const DecodeConfig& cfg)
      : tokens_(model.tokens().begin(), model.tokens().begin() + cfg.dims.batch), pos_(cfg.prefill) {
    BENCH_CUDA(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
    BENCH_CUDA(cudaEventCreate(&a_));
    BENCH_CUDA(cudaEventCreate(&b_));
    session_ = std::make_unique<DecodeSession>(lib, model, stream_, stream_);
    session_->prepare_step(tokens_);
    session_->call_step(pos_);
    BENCH_CUDA(cudaStreamSynchronize(stream_));
  }
  /** Close the session (the solution's teardown), checked; the destructor's close is best effort only. */
  void close() {
    if (session_) session_->close();
    session_.reset();
  }
  ~TimedDecodeSteps() {
    try {
      close();
    } catch (const std::exception& e) {  // an exception already on its way out, or close() not called
      std::fprintf(stderr, "TimedDecodeSteps: closing the session: %s\n", e.what());
    }
    cudaEventDestroy(a_);
    cudaEventDestroy(b_);
    cudaStreamDestroy(stream_);
  }
  TimedDecodeSteps(const TimedDecodeSteps&) = delete;
  TimedDecodeSteps& operator=(const TimedDecodeSteps&) = delete;

  float step() {
    session_->prepare_step(tokens_);
    BENCH_CUDA(cudaEventRecord(a_, stream_));
    session_->call_step(pos_);
    BENCH_CUDA(cudaEventRecord(b_, stream_));
    BENCH_CUDA(cudaEventSynchronize(b_));
    float ms = 0;
    BENCH_CUDA(cudaEventElapsedTime(&ms, a_, b_));
    return ms;
  }

 private:
  std::vector<int64_t> tokens_;
  int pos_;
  cudaStream_t stream_ = nullptr;
  cudaEvent_t a_ = nullptr, b_ = nullptr;
  std::unique_ptr<DecodeSession> session_;
};

}  // namespace nibble
