// child.cpp: the grader's child processes (see child.h).
#include "harness/child.h"

#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <nlohmann/json.hpp>
#include <random>

#include "fixtures/safetensors.h"
#include "fixtures/task.h"
#include "harness/atomic_file.h"
#include "harness/cuda_check.h"
#include "harness/cupti_timer.h"
#include "harness/decode_session.h"
#include "harness/device_model.h"
#include "harness/solution_library.h"
#include "harness/stats.h"

namespace nibble {

namespace {

using json = nlohmann::ordered_json;

double seconds_since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

const char* load_kind_name(LoadError::Kind k) {
  switch (k) {
    case LoadError::NotFound: return "NotFound";
    case LoadError::NotLoadable: return "NotLoadable";
    case LoadError::MissingSymbol: return "MissingSymbol";
    case LoadError::AbiMismatch: return "AbiMismatch";
  }
  return "?";
}

const char* status_name(nibble_status s) {
  switch (s) {
    case NIBBLE_OK: return "OK";
    case NIBBLE_ERR_INVALID_ARGUMENT: return "INVALID_ARGUMENT";
    case NIBBLE_ERR_NOT_SUPPORTED: return "NOT_SUPPORTED";
    case NIBBLE_ERR_CUDA: return "CUDA";
    case NIBBLE_ERR_OUT_OF_MEMORY: return "OUT_OF_MEMORY";
    case NIBBLE_ERR_INTERNAL: return "INTERNAL";
  }
  return "?";
}

/** Writes result.json after every phase, so a crash later still leaves what was learnt. */
struct ResultWriter {
  std::string path;
  json j;
  void phase(const char* p) {
    j["phase"] = p;
    write_file_atomic(path, j.dump(1));
  }
  int fail(const char* kind, const std::string& msg, int code, json extra = json::object()) {
    json e;
    e["kind"] = kind;
    e["message"] = msg;
    for (auto& [k, v] : extra.items()) e[k] = v;
    j["error"] = e;
    phase("failed");
    std::fprintf(stderr, "nibble child: %s error: %s\n", kind, msg.c_str());
    return code;
  }
};

/** An L2-sized scratch written before every timed call, so each call starts with a cold L2
 *  (weights cannot stay resident between calls). Twice the L2: the replacement policy is not LRU. */
class L2Flusher {
 public:
  L2Flusher() {
    int dev = 0, l2 = 0;
    NIBBLE_CUDA_CALL(cudaGetDevice(&dev));
    NIBBLE_CUDA_CALL(cudaDeviceGetAttribute(&l2, cudaDevAttrL2CacheSize, dev));
    buf_ = DeviceBuffer(size_t(std::max(l2, 1 << 20)) * 2);
  }
  void flush(cudaStream_t s) {
    NIBBLE_CUDA_CALL(cudaCtxResetPersistingL2Cache());
    NIBBLE_CUDA_CALL(cudaMemsetAsync(buf_.get(), int(++n_ & 0xff), buf_.bytes(), s));
  }

 private:
  DeviceBuffer buf_;
  unsigned n_ = 0;
};

}  // namespace

int child_run_main(const RunOptions& opt) {
  ResultWriter out{opt.out_dir + "/result.json", json::object()};
  out.j["solution"] = opt.solution;
  const auto t_start = std::chrono::steady_clock::now();
  json secs = json::object();

  DecodeConfig cfg;
  std::unique_ptr<SafetensorsFile> fixture;
  std::unique_ptr<DeviceModel> model;
  try {
    cfg = decode_config(opt.config);
    NIBBLE_CUDA_CALL(cudaSetDevice(0));
    NIBBLE_CUDA_CALL(cudaFree(nullptr));  // create the context before anything is timed
    fixture = std::make_unique<SafetensorsFile>(opt.fixture_dir + "/model.safetensors");
    model = std::make_unique<DeviceModel>(cfg, *fixture);
  } catch (const std::exception& e) {
    return out.fail(kErrHarness, e.what(), 3);
  }
  secs["load_fixture"] = seconds_since(t_start);
  out.phase("loaded");

  std::unique_ptr<SolutionLibrary> lib;
  try {
    lib = std::make_unique<SolutionLibrary>(opt.solution);
  } catch (const LoadError& e) {
    return out.fail(kErrLoad, e.what(), 4, json{{"load_kind", load_kind_name(e.kind)}});
  }
  out.j["solution_name"] = lib->name();
  out.j["numerics"] = lib->numerics();

  cudaStream_t stream = nullptr;
  std::unique_ptr<DecodeSession> session;
  const auto& d = cfg.dims;
  std::vector<std::string> names;
  std::vector<std::vector<uint8_t>> blobs;
  std::vector<TensorView> views;
  try {
    NIBBLE_CUDA_CALL(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    auto t = std::chrono::steady_clock::now();
    try {
      session = std::make_unique<DecodeSession>(*lib, *model, stream);
    } catch (const SolutionError& e) {
      return out.fail(kErrSolution, e.what(), 5, json{{"call", "build_model"}, {"status", status_name(e.status)}});
    }
    secs["build_model"] = seconds_since(t);
    out.phase("built");

    // Checked steps: the fixture's tokens, consecutive positions from prefill, outputs kept.
    t = std::chrono::steady_clock::now();
    json checked = json::array();
    std::vector<int64_t> positions;
    for (int s = 0; s < opt.checked_steps; ++s) {
      const int32_t pos = cfg.prefill + s;
      std::vector<int64_t> tok(model->tokens().begin() + int64_t(s) * d.batch,
                               model->tokens().begin() + int64_t(s + 1) * d.batch);
      StepOutputs so;
      try {
        so = session->run_step(tok, pos);
      } catch (const SolutionError& e) {
        return out.fail(kErrSolution, e.what(), 5, json{{"call", "decode_step"}, {"status", status_name(e.status)}, {"pos", pos}});
      }
      positions.push_back(pos);
      checked.push_back({{"step", s}, {"pos", pos}, {"token", tok}});
      const std::string p = "step" + std::to_string(s) + ".";
      auto keep = [&](const std::string& name, DType dt, std::vector<int64_t> shape, const void* data, size_t n) {
        blobs.emplace_back(static_cast<const uint8_t*>(data), static_cast<const uint8_t*>(data) + n);
        names.push_back(name);
        views.push_back({name, dt, std::move(shape), nullptr, n});
      };
      keep(p + "logits", DType::F32, {d.batch, d.vocab}, so.logits.data(), so.logits.size() * 4);
      keep(p + "k", DType::BF16, {d.layers, d.batch, d.n_kv, d.hd}, so.k_appended.data(), so.k_appended.size() * 2);
      keep(p + "v", DType::BF16, {d.layers, d.batch, d.n_kv, d.hd}, so.v_appended.data(), so.v_appended.size() * 2);
    }
    for (size_t i = 0; i < views.size(); ++i) views[i].data = blobs[i].data();
    views.push_back({"positions", DType::I64, {int64_t(positions.size())}, positions.data(), positions.size() * 8});
    write_safetensors(opt.out_dir + "/outputs.safetensors", views, {{"solution", lib->name()}});
    secs["checked_steps"] = seconds_since(t);
    out.j["checked"] = checked;
    out.phase("checked");

    if (opt.timing) {
      t = std::chrono::steady_clock::now();
      L2Flusher flusher;
      CuptiTimer timer;
      std::mt19937_64 rng(opt.timing_seed);
      std::uniform_int_distribution<int64_t> token_dist(0, d.vocab - 1);
      std::vector<double> span_us, busy_us, wall_us;
      std::vector<int> kernels, memcpys, memsets, positions_t;
      int invalid = 0, nonfinite = 0;
      std::string invalid_reason, stop_reason = "max rounds";
      double prev_median = -1;
      int rounds = 0;
      for (int r = 0; r < opt.max_rounds; ++r) {
        for (int s = 0; s < opt.steps_per_round; ++s) {
          const int32_t pos = cfg.prefill + s;
          std::vector<int64_t> tok(size_t(d.batch));
          for (auto& x : tok) x = token_dist(rng);
          session->prepare_step(tok);
          flusher.flush(stream);
          NIBBLE_CUDA_CALL(cudaDeviceSynchronize());
          const uint64_t c0 = timer.now();
          const auto w0 = std::chrono::steady_clock::now();
          try {
            session->call_step(pos);
          } catch (const SolutionError& e) {
            return out.fail(kErrSolution, e.what(), 5, json{{"call", "decode_step"}, {"status", status_name(e.status)}, {"pos", pos}, {"timed", true}});
          }
          // All work the call caused, on any stream, is inside the window: sync the device.
          NIBBLE_CUDA_CALL(cudaDeviceSynchronize());
          const double wall = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - w0).count();
          const uint64_t c1 = timer.now();
          const SpanStats st = span_of(timer.collect(c0, c1));
          if (!st.valid) {
            ++invalid;
            invalid_reason = st.invalid_reason;
          }
          span_us.push_back(double(st.span_ns) / 1e3);
          busy_us.push_back(double(st.busy_ns) / 1e3);
          wall_us.push_back(wall);
          kernels.push_back(st.kernels);
          memcpys.push_back(st.memcpys);
          memsets.push_back(st.memsets);
          positions_t.push_back(pos);
          const auto logits = session->read_logits();
          if (!all_finite(logits.data(), logits.size())) ++nonfinite;
        }
        ++rounds;
        const double med = summarize(span_us).median;
        if (rounds >= opt.min_rounds && prev_median > 0 && std::fabs(med - prev_median) < opt.stable_fraction * med) {
          stop_reason = "median stable";
          break;
        }
        prev_median = med;
        if (seconds_since(t) > opt.max_timing_seconds) {
          stop_reason = "time budget";
          break;
        }
      }
      json tj;
      tj["token_seed"] = opt.timing_seed;
      tj["steps_per_round"] = opt.steps_per_round;
      tj["rounds"] = rounds;
      tj["stop_reason"] = stop_reason;
      tj["invalid_samples"] = invalid;
      tj["invalid_reason"] = invalid_reason;
      tj["nonfinite_outputs"] = nonfinite;
      tj["pos"] = positions_t;
      tj["gpu_span_us"] = span_us;
      tj["busy_us"] = busy_us;
      tj["host_wall_us"] = wall_us;
      tj["kernels"] = kernels;
      tj["memcpys"] = memcpys;
      tj["memsets"] = memsets;
      out.j["timing"] = tj;
      secs["timing"] = seconds_since(t);
      out.phase("timed");
    }
    try {
      session->close();
    } catch (const SolutionError& e) {
      return out.fail(kErrSolution, e.what(), 5, json{{"call", "teardown"}, {"status", status_name(e.status)}});
    }
    session.reset();
  } catch (const CudaError& e) {
    return out.fail(kErrCuda, e.what(), 6);
  } catch (const std::exception& e) {
    return out.fail(kErrHarness, e.what(), 3);
  }
  secs["total"] = seconds_since(t_start);
  out.j["seconds"] = secs;
  out.phase("done");
  return 0;
}

int child_probe_main(const std::string& out_file, bool measure_bandwidth) {
  json j;
  try {
    int dev = 0;
    NIBBLE_CUDA_CALL(cudaSetDevice(dev));
    cudaDeviceProp p{};
    NIBBLE_CUDA_CALL(cudaGetDeviceProperties(&p, dev));
    auto attr = [&](cudaDeviceAttr a) {
      int v = 0;
      NIBBLE_CUDA_CALL(cudaDeviceGetAttribute(&v, a, dev));
      return v;
    };
    int drv = 0, rt = 0;
    NIBBLE_CUDA_CALL(cudaDriverGetVersion(&drv));
    NIBBLE_CUDA_CALL(cudaRuntimeGetVersion(&rt));
    int cb_major = 0, cb_minor = 0, cb_patch = 0;
    cublasGetProperty(MAJOR_VERSION, &cb_major);
    cublasGetProperty(MINOR_VERSION, &cb_minor);
    cublasGetProperty(PATCH_LEVEL, &cb_patch);
    const int mem_khz = attr(cudaDevAttrMemoryClockRate);
    const int bus_bits = attr(cudaDevAttrGlobalMemoryBusWidth);
    j["name"] = p.name;
    j["compute_capability"] = std::to_string(p.major) + "." + std::to_string(p.minor);
    j["sms"] = p.multiProcessorCount;
    j["l2_bytes"] = p.l2CacheSize;
    j["persisting_l2_max_bytes"] = p.persistingL2CacheMaxSize;
    j["shared_memory_per_block_optin"] = p.sharedMemPerBlockOptin;
    j["memory_bytes"] = p.totalGlobalMem;
    j["sm_clock_khz"] = attr(cudaDevAttrClockRate);
    j["memory_clock_khz"] = mem_khz;
    j["memory_bus_width_bits"] = bus_bits;
    // Double data rate: two transfers per memory clock across the whole bus.
    j["theoretical_bandwidth_Bps"] = 2.0 * double(mem_khz) * 1e3 * double(bus_bits) / 8.0;
    j["driver_version"] = drv;
    j["runtime_version"] = rt;
    j["cublas_version"] = std::to_string(cb_major) + "." + std::to_string(cb_minor) + "." + std::to_string(cb_patch);
    j["cupti_api_version"] = CuptiTimer::version();
    if (measure_bandwidth) {
      // Device-to-device copy of 1 GiB, bytes read + written counted, 20 times: the bandwidth a
      // streaming kernel can expect on this GPU now (clocks and all), used for the floor.
      const size_t bytes = size_t(1) << 30;
      DeviceBuffer a(bytes), b(bytes);
      NIBBLE_CUDA_CALL(cudaMemset(a.get(), 1, bytes));
      NIBBLE_CUDA_CALL(cudaMemset(b.get(), 2, bytes));
      cudaEvent_t e0, e1;
      NIBBLE_CUDA_CALL(cudaEventCreate(&e0));
      NIBBLE_CUDA_CALL(cudaEventCreate(&e1));
      std::vector<double> bw;
      for (int i = 0; i < 23; ++i) {
        NIBBLE_CUDA_CALL(cudaEventRecord(e0));
        NIBBLE_CUDA_CALL(cudaMemcpyAsync(i % 2 ? a.get() : b.get(), i % 2 ? b.get() : a.get(), bytes, cudaMemcpyDeviceToDevice));
        NIBBLE_CUDA_CALL(cudaEventRecord(e1));
        NIBBLE_CUDA_CALL(cudaEventSynchronize(e1));
        float ms = 0;
        NIBBLE_CUDA_CALL(cudaEventElapsedTime(&ms, e0, e1));
        if (i >= 3) bw.push_back(2.0 * double(bytes) / (double(ms) * 1e-3));  // 3 warm-ups
      }
      NIBBLE_CUDA_CALL(cudaEventDestroy(e0));
      NIBBLE_CUDA_CALL(cudaEventDestroy(e1));
      const Summary s = summarize(bw);
      j["copy_bandwidth"] = {{"method", "cudaMemcpyAsync device-to-device, 1 GiB, read+write counted, events"},
                             {"median_Bps", s.median}, {"max_Bps", s.max}, {"n", s.n}};
    }
    j["ok"] = true;
  } catch (const std::exception& e) {
    j["ok"] = false;
    j["error"] = e.what();
    write_file_atomic(out_file, j.dump(1));
    std::fprintf(stderr, "nibble probe: %s\n", e.what());
    return 3;
  }
  write_file_atomic(out_file, j.dump(1));
  return 0;
}

}  // namespace nibble
