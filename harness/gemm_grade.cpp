// gemm_grade.cpp: the FP4 dequant-GEMM tasks through the same machinery as the decode task
// (issue 7): a child process per solution, the reference in its own, relative Frobenius error in
// fp64 against kGemmGate, CUPTI GPU span per call, one disposition, an atomic report.
//
// Replay guard: a GEMM solution always sees the same shapes and weights, so a cached C would pass.
// Every call after the first flips the signs of a seeded half of A's elements (call 0: the
// fixture's A), a fresh mask per call, and the reference runs each checked call (and the kept timed
// call) on the same A. Per-element signs, not per-row ones: a row's sign is read off one element of
// A, so a solution that kept the first call's C could re-sign its rows and pass; no cached C says
// anything about a new mixture of the signs within a row (that is a new GEMM). Each timed call's
// mask seed is drawn from the OS when needed, after prepare (unless --timing-seed fixes the run),
// so neither prepare nor an earlier call can compute a timed call's C ahead.
#include "harness/gemm_grade.h"
#include "harness/gemm_guard.h"

#include <sys/prctl.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <iostream>
#include <random>
#include <sstream>

#include "fixtures/bf16.h"
#include "fixtures/fixture.h"
#include "fixtures/gemm_fixture.h"
#include "fixtures/gemm_task.h"
#include "fixtures/sha256.h"
#include "harness/calibrate.h"
#include "harness/child_support.h"
#include "harness/cupti_timer.h"
#include "harness/gpu_checks.h"
#include "harness/grade_common.h"
#include "harness/report_view.h"
#include "harness/stats.h"
#include "reference/gemm_oracle.h"

namespace nibble {

namespace fs = std::filesystem;
using json = nlohmann::ordered_json;
using namespace nibble::child;

namespace {

std::string gemm_fixture_dir(const GemmConfig& cfg, uint64_t seed, const std::string& given) {
  return given.empty() ? default_fixture_dir(cfg.task, cfg.name, seed) : given;
}

/** The GEMM reference .so: `given`, or the bundled one beside the nibble executable. */
std::string gemm_reference_path(const std::string& exe, const std::string& given) {
  return given.empty() ? (fs::path(exe).parent_path().parent_path() / "lib" / "libnibble_gemm_reference.so").string()
                       : given;
}

}  // namespace

int child_gemm_main(const GemmRunOptions& opt) {
  prctl(PR_SET_CHILD_SUBREAPER, 1);
  ResultWriter out{opt.out_dir + "/result.json", json::object(), {}};
  out.j["solution"] = opt.solution;
  const auto t_start = std::chrono::steady_clock::now();
  json secs = json::object();
  GemmConfig cfg;
  std::unique_ptr<SafetensorsFile> fixture;
  GemmFixtureView view;
  try {
    cfg = gemm_config(opt.task, opt.config);
    NIBBLE_CUDA_CALL(cudaSetDevice(0));
    NIBBLE_CUDA_CALL(cudaFree(nullptr));
    fixture = std::make_unique<SafetensorsFile>(opt.fixture_dir + "/model.safetensors");
    view = gemm_fixture_view(cfg, *fixture);
  } catch (const std::exception& e) {
    return out.fail(kErrHarness, e.what(), 3);
  }
  const bool nvfp4 = cfg.format == Fp4Format::Nvfp4;
  const int64_t M = cfg.M, N = cfg.N, K = cfg.K, SC = cfg.scale_cols();

  std::unique_ptr<SolutionLibrary> lib;
  try {
    lib = std::make_unique<SolutionLibrary>(opt.solution, SolutionLibrary::Abi::Gemm);
  } catch (const LoadError& e) {
    return out.fail(kErrLoad, e.what(), 4, json{{"load_kind", load_kind_name(e.kind)}});
  }
  out.j["solution_name"] = lib->name();
  out.j["numerics"] = lib->numerics();
  out.j["c_dtype"] = lib->gemm_output_dtype == NIBBLE_GEMM_OUTPUT_BF16 ? "bf16" : "fp32";
  out.phase("opened");
  if (!opt.variant.empty())
    if (const int code = select_variant(out, *lib, opt.solution, opt.variant)) return code;

  CallWatchdog watchdog(&out);
  OutputFile outputs;
  try {
    cudaStream_t stream = nullptr;
    NIBBLE_CUDA_CALL(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
    // Device copies of the fixture, described for the ABI.
    DeviceTensor A(DType::BF16, {M, K}), packed(DType::U8, {N, K / 2}), scale(DType::U8, {N, SC}),
        global(DType::F32, {1});
    const bool c_bf16 = lib->gemm_output_dtype == NIBBLE_GEMM_OUTPUT_BF16;
    DeviceTensor C(c_bf16 ? DType::BF16 : DType::F32, {M, N});
    NIBBLE_CUDA_CALL(cudaMemcpy(packed.buf.get(), view.packed, size_t(N * K / 2), cudaMemcpyHostToDevice));
    NIBBLE_CUDA_CALL(cudaMemcpy(scale.buf.get(), view.scale, size_t(N * SC), cudaMemcpyHostToDevice));
    NIBBLE_CUDA_CALL(cudaMemcpy(global.buf.get(), &view.global_scale, 4, cudaMemcpyHostToDevice));
    std::vector<nibble_named_tensor> named = {{"W.packed", packed.desc}, {"W.scale", scale.desc}};
    if (nvfp4) named.push_back({"W.global_scale", global.desc});
    nibble_gemm_problem problem{};
    problem.struct_size = sizeof(problem);
    problem.task = cfg.task.c_str();
    problem.config_name = cfg.name.c_str();
    problem.M = M;
    problem.N = N;
    problem.K = K;
    problem.block = cfg.block;
    problem.scale_format = nvfp4 ? NIBBLE_GEMM_SCALE_E4M3FN : NIBBLE_GEMM_SCALE_E8M0;
    problem.global_scale = view.global_scale;
    problem.c_dtype = lib->gemm_output_dtype;
    problem.tensors = named.data();
    problem.num_tensors = int32_t(named.size());
    // The weights are read-only: checksums before prepare, compared after every phase.
    auto weights_sum = [&] {
      return device_checksum_bytes(packed.buf.get(), size_t(N * K / 2), stream) * 3 +
             device_checksum_bytes(scale.buf.get(), size_t(N * SC), stream);
    };
    const uint64_t w_sum = weights_sum();
    auto weights_intact = [&](const char* when) -> bool {
      if (weights_sum() == w_sum) return true;
      out.fail(kErrInputModified, std::string("the candidate modified the weights (W.packed or W.scale) ") + when, 7,
               json{{"tensor", "W"}});
      return false;
    };

    // One call: call `call`'s A (gemm_call_a) uploaded, C NaN-filled (untimed); returns A's checksum.
    std::vector<uint16_t> a_call(size_t(M * K));
    auto stage = [&](int64_t call, uint64_t seed) {
      gemm_call_a(view.A, M * K, seed, call, a_call.data());
      NIBBLE_CUDA_CALL(cudaMemcpy(A.buf.get(), a_call.data(), a_call.size() * 2, cudaMemcpyHostToDevice));
      NIBBLE_CUDA_CALL(cudaMemset(C.buf.get(), 0xFF, C.buf.bytes()));  // NaN in fp32 and in bf16
      NIBBLE_CUDA_CALL(cudaDeviceSynchronize());
      return device_checksum_bytes(A.buf.get(), size_t(M * K * 2), stream);
    };

    // Timing's flush and CUPTI subscription from here, before prepare: the harness's own work
    // between two timed calls (stage + flush) is counted before the candidate has run at all.
    std::unique_ptr<TimedCalls> timed;
    if (opt.timing) timed = std::make_unique<TimedCalls>(stream, [&] { stage(1000, opt.timing_seed); });  // 1000: never timed

    void* handle = nullptr;
    nibble_error err{};
    auto t = std::chrono::steady_clock::now();
    watchdog.arm("prepare", opt.prepare_timeout_seconds);
    nibble_status st = lib->gemm_prepare(&problem, stream, &handle, &err);
    if (st == NIBBLE_OK) NIBBLE_CUDA_CALL(cudaDeviceSynchronize());
    watchdog.disarm();
    auto status_fail = [&](const char* what, nibble_status s) {
      return out.fail(kErrSolution, std::string(what) + " returned " + status_name(s) + ": " +
                                        std::string(err.message, strnlen(err.message, sizeof err.message)),
                      5, json{{"call", what}, {"status", status_name(s)}});
    };
    if (st != NIBBLE_OK) return status_fail("prepare", st);
    secs["prepare"] = seconds_since(t);
    if (!weights_intact("in prepare")) return 7;
    out.phase("built");

    auto run = [&](const std::string& what) -> nibble_status {
      watchdog.arm(what, opt.call_timeout_seconds);
      const nibble_status s = lib->gemm_run(handle, &A.desc, &C.desc, stream, &err);
      if (s == NIBBLE_OK) NIBBLE_CUDA_CALL(cudaDeviceSynchronize());
      watchdog.disarm();
      return s;
    };
    auto read_c = [&] {
      std::vector<float> c(size_t(M * N));
      if (c_bf16) {
        std::vector<uint16_t> h(c.size());
        NIBBLE_CUDA_CALL(cudaMemcpy(h.data(), C.buf.get(), h.size() * 2, cudaMemcpyDeviceToHost));
        for (size_t i = 0; i < h.size(); ++i) c[i] = bf16_to_f32(h[i]);
      } else {
        NIBBLE_CUDA_CALL(cudaMemcpy(c.data(), C.buf.get(), c.size() * 4, cudaMemcpyDeviceToHost));
      }
      return c;
    };

    t = std::chrono::steady_clock::now();
    // Checked calls 0 .. checked_calls - 1, then (the reference, for the candidate's kept timed
    // call) call `extra_call` with extra_seed's mask under the name "timed".
    struct Checked {
      int64_t call;
      uint64_t seed;
      std::string name;
    };
    std::vector<Checked> checked;
    for (int i = 0; i < opt.checked_calls; ++i) checked.push_back({i, opt.timing_seed, "call" + std::to_string(i)});
    if (opt.extra_call >= 0) checked.push_back({opt.extra_call, opt.extra_seed, "timed"});
    for (const auto& [call, seed, name] : checked) {
      const uint64_t a_sum = stage(call, seed);
      const nibble_status s = run("run");
      if (s != NIBBLE_OK) return status_fail("run", s);
      if (device_checksum_bytes(A.buf.get(), size_t(M * K * 2), stream) != a_sum)
        return out.fail(kErrInputModified, "the candidate modified A during run (inputs are read-only)", 7,
                        json{{"tensor", "A"}});
      const auto c = read_c();
      outputs.add(name + ".C", DType::F32, {M, N}, c.data(), c.size() * 4);
      outputs.add(name + ".call", DType::I64, {1}, &call, 8);
      outputs.add(name + ".seed", DType::I64, {1}, &seed, 8);  // the bits of the uint64
    }
    if (!weights_intact("during the checked calls")) return 7;
    outputs.write(opt.out_dir + "/outputs.safetensors", lib->name());
    secs["checked_calls"] = seconds_since(t);
    out.phase("checked");

    if (opt.timing) {
      t = std::chrono::steady_clock::now();
      // Each timed call's mask seed and each round's kept call are fresh draws (TimedRandom): a
      // candidate can recover a call's seed from its A (the mask is an invertible mix), but no draw
      // says anything about the next one unless --timing-seed made the run reproducible.
      TimedRandom rng(opt.timed_seed);
      std::vector<double> span_us, busy_us, wall_us;
      std::vector<int> kernels;
      int invalid = 0, nonfinite = 0, rounds = 0;
      int64_t call_no = 1000;  // timed calls 1001, 1002, ...: masks unlike the checked calls'
      std::string invalid_reason, stop_reason = "max rounds";
      double prev = -1;
      OutputFile kept;
      // Work between timed calls is in no window: a candidate's thread could, say, read W back into
      // L2 after the flush (TimedCalls judges every gap).
      timed->begin();
      for (int r = 0; r < opt.max_rounds; ++r) {
        const int keep = int(rng() % uint64_t(opt.calls_per_round));
        OutputFile round_kept;
        for (int s = 0; s < opt.calls_per_round; ++s) {
          const uint64_t cseed = rng();
          stage(++call_no, cseed);
          const uint64_t c0 = timed->open();
          const auto w0 = std::chrono::steady_clock::now();
          const nibble_status st2 = run("run");
          const double wall = std::chrono::duration<double, std::micro>(std::chrono::steady_clock::now() - w0).count();
          if (st2 != NIBBLE_OK) return status_fail("run", st2);
          const SpanStats ss = timed->close(c0);
          if (!ss.valid) {
            ++invalid;
            invalid_reason = ss.invalid_reason;
          }
          span_us.push_back(double(ss.span_ns) / 1e3);
          busy_us.push_back(double(ss.busy_ns) / 1e3);
          wall_us.push_back(wall);
          kernels.push_back(ss.kernels);
          if (s == keep) {
            const auto c = read_c();
            if (!all_finite(c.data(), c.size())) ++nonfinite;
            round_kept.add("timed.C", DType::F32, {M, N}, c.data(), c.size() * 4);
            round_kept.add("timed.call", DType::I64, {1}, &call_no, 8);
            round_kept.add("timed.seed", DType::I64, {1}, &cseed, 8);
          }
        }
        ++rounds;
        kept = std::move(round_kept);
        const double med = summarize(span_us).median;
        if (rounds >= opt.min_rounds && prev > 0 && std::fabs(med - prev) < 0.005 * med) {
          stop_reason = "median stable";
          break;
        }
        prev = med;
        if (rounds >= opt.min_rounds && seconds_since(t) > opt.max_timing_seconds) {
          stop_reason = "time budget";
          break;
        }
      }
      kept.write(opt.out_dir + "/timed_outputs.safetensors", lib->name());
      if (!weights_intact("during the timed calls")) return 7;
      json tj;
      tj["flip_seed"] = opt.timed_seed ? json(*opt.timed_seed) : json(nullptr);
      tj["flip_seed_from"] = opt.timed_seed ? "nibble grade --timing-seed"
                                            : "none: each call's mask seed drawn from the OS after prepare, when needed";
      tj["calls_per_round"] = opt.calls_per_round;
      tj["rounds"] = rounds;
      tj["stop_reason"] = stop_reason;
      tj["invalid_samples"] = invalid;
      tj["invalid_reason"] = invalid_reason;
      tj["gaps_with_foreign_kernels"] = timed->gaps_with_foreign_kernels();
      tj["harness_kernels_per_gap"] = timed->harness_kernels_per_gap();
      tj["late_kernels"] = timed->late_kernels();
      tj["nonfinite_outputs"] = nonfinite;
      tj["gpu_span_us"] = span_us;
      tj["busy_us"] = busy_us;
      tj["host_wall_us"] = wall_us;
      tj["kernels"] = kernels;
      {
        std::lock_guard<std::mutex> lock(out.mu);
        out.j["timing"] = tj;
      }
      secs["timing"] = seconds_since(t);
      out.phase("timed");
    }
    watchdog.arm("teardown", opt.prepare_timeout_seconds);
    st = lib->gemm_teardown(handle, stream, &err);
    watchdog.disarm();
    if (st != NIBBLE_OK) return status_fail("teardown", st);
    NIBBLE_CUDA_CALL(cudaDeviceSynchronize());
  } catch (const CudaError& e) {
    return out.fail(kErrCuda, e.what(), 6);
  } catch (const std::exception& e) {
    return out.fail(kErrHarness, e.what(), 3);
  }
  secs["total"] = seconds_since(t_start);
  {
    std::lock_guard<std::mutex> lock(out.mu);
    out.j["seconds"] = secs;
  }
  out.phase("done");
  return 0;
}

namespace {

std::vector<std::string> gemm_run_args(const std::string& exe, const std::string& so, const GemmConfig& cfg,
                                       const std::string& fixture_dir, const std::string& out_dir, int checked,
                                       bool timed, uint64_t seed, const GradeOptions* g) {
  std::vector<std::string> a = {exe, "__run-gemm", "--solution", so, "--fixture", fixture_dir, "--task", cfg.task,
                                "--config", cfg.name, "--out", out_dir, "--checked-calls", std::to_string(checked),
                                "--timing-seed", std::to_string(seed)};
  if (g) a.insert(a.end(), {"--call-timeout", fmt(g->step_timeout_seconds, 10), "--prepare-timeout", fmt(g->build_timeout_seconds, 10)});
  if (timed && g) {
    a.insert(a.end(), {"--timing", "--min-rounds", std::to_string(g->min_rounds), "--max-rounds",
                       std::to_string(g->max_rounds), "--max-timing-seconds", fmt(g->max_timing_seconds, 10)});
    // Without --timing-seed the child draws the timed calls' seed itself once prepare has returned.
    if (g->timing_seed) a.insert(a.end(), {"--timed-seed", std::to_string(*g->timing_seed)});
  }
  return a;
}

}  // namespace

int grade_gemm_main(const GradeOptions& opt) {
  const auto t_start = std::chrono::steady_clock::now();
  const Log log{opt.quiet, isatty(STDERR_FILENO) != 0};
  GemmConfig cfg;
  try {
    cfg = gemm_config(opt.task, opt.config);
    check_grade_options(opt);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "nibble grade: %s\n", e.what());
    return kExitUsage;
  }
  if (!opt.calibration.empty())
    std::fprintf(stderr, "nibble grade: --calibration is used by the decode task only; ignored for %s\n", opt.task.c_str());
  const std::string exe = self_exe();
  const std::string reference = gemm_reference_path(exe, opt.reference);
  const std::string solution = fs::absolute(opt.solution).string();
  if (!fs::exists(reference)) {
    std::fprintf(stderr, "nibble grade: the reference %s does not exist; build the project (scripts/test.sh) or pass --reference\n",
                 reference.c_str());
    return kExitGraderFailed;
  }
  TempDir work("nibble-grade-gemm");
  // A fixture the user named is checked before anything else, as the decode grade does (never
  // rebuilt in place: ensure_gemm_fixture's `given`); the cache is filled after the GPU probe.
  std::vector<std::string> dirs;
  std::vector<FixtureManifest> manifests;  // as read before any candidate ran
  json fixtures = json::array();
  auto fixtures_stage = [&] {
    return fixture_stage(opt.seeds, [&](uint64_t seed) {
      const std::string dir = gemm_fixture_dir(cfg, seed, opt.fixture_dir);
      const auto t0 = std::chrono::steady_clock::now();
      const FixtureManifest m =
          ensure_gemm_fixture(cfg, seed, dir, opt.threads, opt.verify_fixture, {}, !opt.fixture_dir.empty());
      fixtures.push_back({{"seed", seed}, {"dir", dir}, {"file_sha256", m.file_sha256}, {"file_bytes", m.file_bytes},
                          {"generator_version", m.generator_version}, {"seconds", since(t0)}});
      dirs.push_back(dir);
      manifests.push_back(m);
    });
  };
  if (!opt.fixture_dir.empty())
    if (const int code = fixtures_stage()) return code;
  json report = document_header("nibble.report", opt.argv, opt.task, cfg.name);
  report["config_dims"] = {{"M", cfg.M}, {"N", cfg.N}, {"K", cfg.K}, {"block", cfg.block}};
  report["seeds"] = opt.seeds;

  log("probing the GPU");
  // The probe also times the shape's weight-read floor (a kernel that only reads W's codes and
  // scales, under this grader's flush and CUPTI window): at M <= 16 the floor that matters.
  ChildRun probe = run_child_in({exe, "__probe", "--out", work.path() + "/probe/result.json", "--read-floor-bytes",
                                 std::to_string(cfg.weight_bytes())},
                                work.path() + "/probe", 120);
  if (!probe.result.is_object() || !probe.result.value("ok", false)) {
    std::fprintf(stderr,
                 "nibble grade: no usable NVIDIA GPU, so nothing can be graded here.\n  %s\n"
                 "  Run nibble grade on a machine with a CUDA GPU and driver; the tests (scripts/test.sh) run without one.\n",
                 probe.result.is_object() ? probe.result.value("error", std::string()).c_str() : probe.log_tail.c_str());
    return kExitUsage;
  }
  json device = probe.result;
  device.erase("ok");
  report["device"] = device;

  // 2. Fixtures (the cache, when none was named: a named one was checked before the probe).
  if (opt.fixture_dir.empty())
    if (const int code = fixtures_stage()) return code;
  report["fixtures"] = fixtures;
  json sol = {{"path", solution}, {"sha256", sha256_file_hex(solution)}};
  json ref = {{"path", reference}};
  const uint64_t seed_t = opt.timing_seed ? *opt.timing_seed : std::random_device{}();

  std::string disposition, reason;
  double worst = 0;
  json per_seed = json::array();
  json timing_raw;
  bool checked_any = false;
  for (size_t i = 0; i < opt.seeds.size() && disposition.empty(); ++i) {
    const std::string sd = work.path() + "/seed" + std::to_string(opt.seeds[i]);
    const bool timed = opt.timing && i == 0;
    log("seed " + std::to_string(opt.seeds[i]) + ": running the candidate");
    ChildRun c = run_child_in(gemm_run_args(exe, solution, cfg, dirs[i], sd + "/candidate", 2, timed, seed_t, &opt),
                              sd + "/candidate", opt.timeout_seconds, &log, "candidate");
    if (opt.verify_fixture) {
      const std::string changed = fixture_changed(dirs[i], manifests[i]);
      if (!changed.empty()) {
        disposition = kIncorrect;
        reason = changed;
        per_seed.push_back({{"seed", opt.seeds[i]}});
        break;
      }
    }
    // The reference runs the same checked calls and, when the candidate kept a timed output, that
    // call too (its A is a function of the timing seed and the call number alone).
    int64_t timed_call = -1;
    uint64_t timed_seed = 0;
    const std::string timed_file = sd + "/candidate/timed_outputs.safetensors";
    if (timed && fs::exists(timed_file)) try {
        SafetensorsFile tf(timed_file);
        timed_call = gemm_stored_seed(tf, "timed", &timed_seed) ? gemm_stored_call(tf, "timed") : -1;
      } catch (const std::exception&) {
        // unreadable: reported as such below
      }
    log("seed " + std::to_string(opt.seeds[i]) + ": running the reference");
    auto ref_args = gemm_run_args(exe, reference, cfg, dirs[i], sd + "/reference", 2, false, seed_t, nullptr);
    if (timed_call >= 0)
      ref_args.insert(ref_args.end(), {"--extra-call", std::to_string(timed_call), "--extra-seed", std::to_string(timed_seed)});
    ChildRun r = run_child_in(ref_args, sd + "/reference", opt.timeout_seconds, &log, "reference");
    if (!r.completed()) {
      std::fprintf(stderr, "nibble grade: the reference failed (%s)\n%s\n", r.exit.describe().c_str(), r.log_tail.c_str());
      return kExitGraderFailed;
    }
    ref["name"] = r.result.value("solution_name", "");
    ref["numerics"] = r.result.value("numerics", "");
    if (c.result.is_object()) {
      sol["name"] = c.result.value("solution_name", std::string());
      sol["c_dtype"] = c.result.value("c_dtype", std::string());
    }
    if (!opt.dump_dir.empty())
      for (const char* who : {"reference", "candidate"}) {
        const std::string src = sd + "/" + who + "/outputs.safetensors";
        if (fs::exists(src))
          fs::copy_file(src, opt.dump_dir + "/seed" + std::to_string(opt.seeds[i]) + "-" + who + ".safetensors",
                        fs::copy_options::overwrite_existing);
      }
    json sj = {{"seed", opt.seeds[i]}};
    const std::string phase = c.result.is_object() ? c.result.value("phase", "") : "";
    if (fs::exists(sd + "/candidate/outputs.safetensors") && (phase == "checked" || phase == "timed" || phase == "done")) {
      try {
        SafetensorsFile cf(sd + "/candidate/outputs.safetensors"), rf(sd + "/reference/outputs.safetensors");
        double w = 0;
        sj["calls"] = compare_gemm_outputs(cf, rf, {"call0", "call1"}, cfg.M, cfg.N, &w);
        if (timed && fs::exists(timed_file)) {
          SafetensorsFile tf(timed_file);
          sj["timed_call"] = compare_gemm_outputs(tf, rf, {"timed"}, cfg.M, cfg.N, &w);
        }
        sj["worst_rel_err"] = std::isnan(w) ? json(nullptr) : json(w);
        worst = std::isnan(w) || std::isnan(worst) ? NAN : std::max(worst, w);
        checked_any = true;
      } catch (const std::exception& e) {
        disposition = kCrashed;
        reason = std::string("the candidate's outputs could not be read: ") + e.what();
      }
    }
    per_seed.push_back(sj);
    if (!c.completed() && disposition.empty()) {
      auto [d, why] = failure_disposition(c);
      disposition = d;
      reason = why;
    }
    if (timed && c.result.is_object() && c.result.contains("timing")) timing_raw = c.result["timing"];
  }
  report["solution"] = sol;
  report["reference"] = ref;
  json corr = {{"gate", kGemmGate},
               {"metric", "||C - C_ref||_F / ||C_ref||_F in fp64, per call against the reference's C of the same A; every call after "
                          "the first flips the signs of a seeded half of A's elements"},
               {"per_seed", per_seed},
               {"worst_rel_err", std::isnan(worst) ? json(nullptr) : json(worst)},
               {"ratio_to_gate", std::isnan(worst) ? json(nullptr) : json(worst / kGemmGate)}};
  const bool within = checked_any && !std::isnan(worst) && worst < kGemmGate;
  corr["verdict"] = !checked_any ? "not run" : within ? "pass" : "fail";
  report["correctness"] = corr;
  if (disposition.empty() && !within) {
    disposition = kIncorrect;
    reason = std::isnan(worst) ? "NaN or Inf in C" : "worst relative error " + fmt(worst) + " is above the gate " + fmt(kGemmGate);
  }
  const int c_bytes = sol.value("c_dtype", std::string("fp32")) == "bf16" ? 2 : 4;
  const double bytes = double(cfg.bytes_per_call(c_bytes)), flops = double(cfg.flops());
  const double copy_bw = device.contains("copy_bandwidth") ? device["copy_bandwidth"].value("median_Bps", 0.0) : 0.0;
  const double peak_bw = device.value("theoretical_bandwidth_Bps", 0.0);
  if (timing_raw.is_object() && !timing_raw["gpu_span_us"].empty()) {
    const auto span = timing_raw["gpu_span_us"].get<std::vector<double>>();
    const auto wall = timing_raw["host_wall_us"].get<std::vector<double>>();
    std::vector<double> kern;
    for (int k : timing_raw["kernels"]) kern.push_back(k);
    const Summary s = summarize(span), w = summarize(wall);
    json t;
    t["protocol"] = "GPU span of all CUPTI records per run call (all streams), L2 flushed and persisting L2 reset before each, a fresh sign mask on A per call (each call's mask seed from the OS after prepare, or from flip_seed when --timing-seed fixed it)";
    for (const char* k : {"flip_seed", "flip_seed_from", "calls_per_round", "rounds", "stop_reason", "invalid_samples",
                          "nonfinite_outputs", "gaps_with_foreign_kernels", "harness_kernels_per_gap", "late_kernels"})
      t[k] = timing_raw[k];
    t["gpu_span_us"] = summary_json(s, &span);
    t["host_wall_us"] = summary_json(w, &wall);
    t["kernels_per_call"] = summary_json(summarize(kern));
    t["bytes_per_call"] = bytes;
    t["flops_per_call"] = flops;
    t["tflops"] = flops / (s.median * 1e-6) / 1e12;
    t["achieved_bandwidth_Bps"] = bytes / (s.median * 1e-6);
    if (copy_bw > 0) t["floor_us_measured_copy_bw"] = bytes / copy_bw * 1e6;
    if (device.contains("read_floor") && device["read_floor"].value("median_us", 0.0) > 0) {
      const double rf = device["read_floor"]["median_us"].get<double>();
      t["floor_us_weight_read"] = rf;
      t["fraction_of_weight_read_floor"] = rf / s.median;
    }
    if (peak_bw > 0) {
      t["floor_us_theoretical_bw"] = bytes / peak_bw * 1e6;
      if (disposition.empty() && s.min < bytes / peak_bw * 1e6) {
        disposition = kInvalidTiming;
        reason = "a timed call took " + fmt(s.min) + " us, below the bandwidth floor " + fmt(bytes / peak_bw * 1e6) + " us";
      }
    }
    if (disposition.empty() && timing_raw.value("gaps_with_foreign_kernels", 0) > 0) {
      disposition = kInvalidTiming;
      reason = "the GPU ran kernels that were not the harness's between timed calls (in " +
               std::to_string(timing_raw.value("gaps_with_foreign_kernels", 0)) +
               " gaps), outside every timing window: work a timed call may depend on was not timed";
    }
    if (disposition.empty() && timing_raw.value("invalid_samples", 0) > 0) {
      disposition = kInvalidTiming;
      reason = timing_raw.value("invalid_reason", std::string("invalid GPU records"));
    }
    if (disposition.empty() && w.median > 2.0 * s.median && w.median - s.median > 1000.0) {
      disposition = kInvalidTiming;
      reason = "host wall time per call (" + fmt(w.median) + " us) is far above the GPU span (" + fmt(s.median) + " us)";
    }
    t["us_per_call"] = s.median;
    report["timing"] = t;
  }
  if (disposition.empty()) {
    disposition = kPassed;
    reason = "worst relative error " + fmt(worst) + " < gate " + fmt(kGemmGate);
  }
  report["disposition"] = disposition;
  report["reason"] = reason;
  report["wall_seconds"] = {{"total", since(t_start)}};
  try {
    write_file_atomic(opt.out, report.dump(2, ' ', false, json::error_handler_t::replace) + "\n");
    if (!opt.gbench_json.empty())
      write_file_atomic(opt.gbench_json, gbench_json(report).dump(2, ' ', false, json::error_handler_t::replace) + "\n");
    if (!opt.history.empty()) append_history(opt.history, report, opt.out);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "nibble grade: %s\n", e.what());
    return kExitGraderFailed;
  }
  summary_stream(opt.out) << format_summary(graded_report_view(report), opt.out) << std::flush;  // what `nibble report show` prints
  return disposition == kPassed ? kExitPassed : kExitNotPassed;
}

int calibrate_gemm_main(const CalibrateOptions& opt) {
  const auto t_start = std::chrono::steady_clock::now();
  const Log log{opt.quiet, isatty(STDERR_FILENO) != 0};
  GemmConfig cfg;
  try {
    cfg = gemm_config(opt.task, opt.config);
    check_calibrate_options(opt);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "nibble calibrate: %s\n", e.what());
    return 2;
  }
  const std::string exe = self_exe();
  const std::string reference = gemm_reference_path(exe, opt.reference);
  TempDir work("nibble-calibrate-gemm");
  json report = document_header("nibble.calibration", opt.argv, opt.task, cfg.name);
  report["seeds"] = opt.seeds;
  report["gate"] = kGemmGate;

  // The GPU (the reference .so and its variants, each in a child process, as any candidate runs)
  // when one answers or is demanded; the fp64 oracle otherwise (slow beyond small shapes:
  // M N K multiply-adds per variant).
  json device;
  const std::string path = calibration_path(opt.path, exe, work.path(), log, &device);
  if (path.empty()) return 2;
  if (path == "gpu" && !fs::exists(reference)) {
    std::fprintf(stderr, "nibble calibrate: the reference %s does not exist; build the project (scripts/test.sh) or pass --reference\n",
                 reference.c_str());
    return 3;
  }
  // `auto` found no GPU: the fp64 oracle costs M N K multiply-adds per variant and seed, hours at the
  // large shapes. Fall back on it silently only where that is minutes at most.
  const double macs = double(cfg.M) * double(cfg.N) * double(cfg.K) * double(oracle::gemm_variants_for(opt.task).size()) *
                      double(opt.seeds.size());
  if (refuse_slow_cpu_oracle(opt, path, macs,
                             "M N K x " + std::to_string(oracle::gemm_variants_for(opt.task).size()) + " variants x " +
                                 std::to_string(opt.seeds.size()) + " seeds",
                             ""))
    return 2;
  report["path"] = path == "gpu" ? "gpu: bundled GEMM reference .so per variant, child processes" : "cpu: fp64 oracle per variant";
  if (path == "gpu") report["device"] = device;
  const auto variants = oracle::gemm_variants_for(opt.task);
  json rows = json::array();
  std::vector<std::vector<double>> errs(variants.size());
  for (uint64_t seed : opt.seeds) {
    const std::string dir = gemm_fixture_dir(cfg, seed, "");
    try {
      ensure_gemm_fixture(cfg, seed, dir, opt.threads, true, {});
    } catch (const std::exception& e) {
      // a corrupt or foreign cached fixture: bad input, as the decode task's calibrate says
      std::fprintf(stderr, "nibble calibrate: fixture: %s\n", e.what());
      return 2;
    }
    if (path == "cpu") {
      try {
        SafetensorsFile f(dir + "/model.safetensors");
        const int threads = opt.threads > 0 ? opt.threads : int(std::max(1u, std::thread::hardware_concurrency()));
        log("seed " + std::to_string(seed) + ": fp64 oracle, " + std::to_string(variants.size()) + " variants");
        const auto exact = oracle::gemm_fixture(cfg, f, {}, threads);
        for (size_t v = 0; v < variants.size(); ++v)
          errs[v].push_back(oracle::relative_error(oracle::gemm_fixture(cfg, f, variants[v].options, threads), exact));
      } catch (const std::exception& e) {
        std::fprintf(stderr, "nibble calibrate: %s\n", e.what());
        return 3;
      }
      continue;
    }
    // GPU: one checked call (unflipped A) of the exact reference and of each variant.
    const std::string sd = work.path() + "/seed" + std::to_string(seed);
    auto args = [&](const std::string& variant, const std::string& odir) {
      auto a = gemm_run_args(exe, reference, cfg, dir, odir, 1, false, seed, nullptr);
      if (!variant.empty()) a.insert(a.end(), {"--variant", variant});
      return a;
    };
    std::vector<std::string> names;
    for (const auto& v : variants) names.push_back(v.name);
    log("seed " + std::to_string(seed) + ": the reference and " + std::to_string(names.size()) + " variants");
    try {
      const bool ran = run_variant_children(args, names, sd, opt.timeout_seconds, log,
                                            [&](size_t i, const std::string& vd, const std::string& ed) {
                                              SafetensorsFile vf(vd + "/outputs.safetensors"), ef(ed + "/outputs.safetensors");
                                              double w = 0;
                                              compare_gemm_outputs(vf, ef, {"call0"}, cfg.M, cfg.N, &w);
                                              errs[i].push_back(w);
                                            });
      if (!ran) return 3;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "nibble calibrate: the reference's outputs could not be read: %s\n", e.what());
      return 3;
    }
  }
  bool healthy = true;
  std::ostringstream o;
  char line[256];
  o << "\nnibble calibrate  " << opt.task << " / " << cfg.name << "  ("
    << (path == "gpu" ? device.value("name", std::string("GPU")) : std::string("fp64 CPU oracle")) << "), gate " << fmt(kGemmGate)
    << "\n\n";
  std::snprintf(line, sizeof line, "  %-22s %-6s  %-9s %-8s %s\n", "variant", "expect", "worst", "x gate", "verdict");
  o << line;
  for (size_t v = 0; v < variants.size(); ++v) {
    double w = 0;
    for (double e : errs[v]) w = std::isnan(e) || std::isnan(w) ? NAN : std::max(w, e);
    const bool passes = !std::isnan(w) && w < kGemmGate;
    const bool ok = variants[v].must_pass ? (!std::isnan(w) && w <= kGemmGate / 2) : (std::isnan(w) || w >= 2 * kGemmGate);
    healthy = healthy && ok;
    std::snprintf(line, sizeof line, "  %-22s %-6s  %-9s %-8s %s%s\n", variants[v].name, variants[v].must_pass ? "PASS" : "FAIL",
                  fmt(w).c_str(), fmt(w / kGemmGate).c_str(), passes ? "PASS" : "FAIL", ok ? "" : "  <-- margin below 2x");
    o << line;
    rows.push_back({{"variant", variants[v].name}, {"description", variants[v].description},
                    {"expected", variants[v].must_pass ? "PASS" : "FAIL"}, {"per_seed", errs[v]},
                    {"worst", std::isnan(w) ? json(nullptr) : json(w)}, {"verdict", passes ? "PASS" : "FAIL"}, {"healthy", ok}});
  }
  o << "\n  gate health: " << (healthy ? "OK" : "NOT OK") << "\n";
  report["rows"] = rows;
  report["healthy"] = healthy;
  report["wall_seconds"] = since(t_start);
  try {
    write_file_atomic(opt.out, report.dump(2, ' ', false, json::error_handler_t::replace) + "\n");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "nibble calibrate: %s\n", e.what());
    return 3;
  }
  summary_stream(opt.out) << o.str() << "  report: " << opt.out << "\n" << std::flush;
  return healthy ? 0 : 1;
}

}  // namespace nibble
