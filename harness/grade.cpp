// grade.cpp: `nibble grade`, the parent side (see DESIGN.md "Data flow").
//
// probe child -> fixtures (cached, verified by SHA-256) -> per seed: reference child, candidate
// child -> relative errors in fp64 -> timing stats -> one disposition -> report (atomic) + summary.
// The parent holds no CUDA context and never dlopens a candidate.
#include "harness/grade.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <iostream>
#include <nlohmann/json.hpp>
#include <random>
#include <sstream>

#include "fixtures/fixture.h"
#include "fixtures/rng.h"
#include "fixtures/safetensors.h"
#include "fixtures/sha256.h"
#include "fixtures/task.h"
#include "harness/atomic_file.h"
#include "harness/gemm_grade.h"
#include "harness/grade_common.h"
#include "fixtures/gemm_task.h"
#include "harness/report_view.h"
#include "harness/process.h"
#include "harness/stats.h"

namespace nibble {

namespace fs = std::filesystem;
using json = nlohmann::ordered_json;

int grade_main(const GradeOptions& opt) {
  if (is_gemm_task(opt.task)) return grade_gemm_main(opt);
  const auto t_start = std::chrono::steady_clock::now();
  const Log log{opt.quiet, isatty(STDERR_FILENO) != 0};
  DecodeConfig cfg;
  try {
    check_task(opt.task);
    cfg = decode_config(opt.config);
    check_grade_options(opt);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "nibble grade: %s\n", e.what());
    return kExitUsage;
  }
  const std::string exe = self_exe();
  const std::string reference = bundled_reference(exe, opt.reference);
  const std::string solution = fs::absolute(opt.solution).string();
  if (!fs::exists(reference)) {
    std::fprintf(stderr, "nibble grade: the reference %s does not exist; build the project (scripts/test.sh) or pass --reference\n",
                 reference.c_str());
    return kExitGraderFailed;
  }
  TempDir work("nibble-grade");
  // A fixture the user named is checked before anything else (the cache is filled after the GPU
  // probe, so a machine without a GPU never builds 2 GB for nothing).
  std::vector<std::string> fixture_dirs;
  std::vector<FixtureManifest> manifests;  // as read before any candidate ran
  json fixtures = json::array();
  auto fixtures_stage = [&] {
    return fixture_stage(opt.seeds, [&](uint64_t seed) {
      std::string dir;
      fixtures.push_back(ensure_fixture(cfg, seed, opt.fixture_dir, opt.threads, opt.verify_fixture, log, &dir));
      fixture_dirs.push_back(dir);
      manifests.push_back(read_manifest(dir));
    });
  };
  if (!opt.fixture_dir.empty())
    if (const int code = fixtures_stage()) return code;

  json report = document_header("nibble.report", opt.argv, opt.task, cfg.name);
  const auto& d = cfg.dims;
  report["config_dims"] = {{"layers", d.layers}, {"d", d.d}, {"ffn", d.ffn}, {"n_q", d.n_q}, {"n_kv", d.n_kv},
                           {"hd", d.hd}, {"vocab", d.vocab}, {"group", d.group}, {"batch", d.batch},
                           {"max_seq", d.max_seq}, {"eps", d.eps}, {"theta", d.theta}, {"prefill", cfg.prefill}};
  report["seeds"] = opt.seeds;

  // 1. The device: facts and copy bandwidth, in a child (the parent stays CUDA-free).
  log("probing the GPU");
  ChildRun probe = run_child_in({exe, "__probe", "--out", work.path() + "/probe/result.json"}, work.path() + "/probe", 120);
  if (!probe.result.is_object() || !probe.result.value("ok", false)) {
    std::string why = probe.result.is_object() ? probe.result.value("error", std::string()) : probe.log_tail;
    std::fprintf(stderr,
                 "nibble grade: no usable NVIDIA GPU, so nothing can be graded here.\n  %s\n"
                 "  Run nibble grade on a machine with a CUDA GPU and driver; the tests (scripts/test.sh) run without one.\n",
                 why.c_str());
    return kExitUsage;
  }
  json device = probe.result;
  device.erase("ok");
  report["device"] = device;

  // 2. Fixtures (the cache, when none was named).
  if (opt.fixture_dir.empty())
    if (const int code = fixtures_stage()) return code;
  report["fixtures"] = fixtures;

  json sol;
  sol["path"] = solution;
  try {
    sol["sha256"] = sha256_file_hex(solution);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "nibble grade: %s\n", e.what());
    return kExitUsage;
  }
  json ref;
  ref["path"] = reference;
  try {
    ref["sha256"] = sha256_file_hex(reference);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "nibble grade: the reference %s cannot be read (%s); build the project or pass --reference\n",
                 reference.c_str(), e.what());
    return kExitGraderFailed;
  }

  std::string disposition, reason;
  json correctness;
  correctness["gate"] = cfg.gate;
  correctness["metric"] = "||out - ref||_2 / ||ref||_2 in fp64 over (batch, vocab) logits; K/V appended at slot pos likewise";
  correctness["checked_steps"] = cfg.checked_steps;
  json per_seed = json::array();
  double worst = 0, worst_logits = 0, worst_kv = 0;
  bool finite = true;
  json timing_raw;
  json wall;
  auto run_args = [&](const std::string& so, const std::string& fdir, const std::string& odir, bool timed) {
    std::vector<std::string> a = {exe, "__run", "--solution", so, "--fixture", fdir, "--config", cfg.name,
                                  "--out", odir, "--checked-steps", std::to_string(cfg.checked_steps),
                                  "--step-timeout", fmt(opt.step_timeout_seconds, 10),
                                  "--build-timeout", fmt(opt.build_timeout_seconds, 10)};
    if (timed) {
      a.insert(a.end(), {"--timing", "--min-rounds", std::to_string(opt.min_rounds), "--max-rounds",
                         std::to_string(opt.max_rounds), "--max-timing-seconds", fmt(opt.max_timing_seconds, 10)});
      // Without --timing-seed the child draws the token seed itself once build_model has returned.
      if (opt.timing_seed) a.insert(a.end(), {"--timing-seed", std::to_string(*opt.timing_seed)});
    }
    return a;
  };

  // 3. Per seed: the reference, then the candidate, each in its own process.
  for (size_t i = 0; i < opt.seeds.size() && disposition.empty(); ++i) {
    const uint64_t seed = opt.seeds[i];
    const std::string sd = work.path() + "/seed" + std::to_string(seed);
    // The candidate runs first: the reference's outputs do not exist while it (or anything it
    // left running, which run_child kills) could read or rewrite them.
    const bool timed = opt.timing && i == 0;
    log("seed " + std::to_string(seed) + ": running the candidate" + (timed ? " (checked, then timed)" : ""));
    auto t0 = std::chrono::steady_clock::now();
    ChildRun c = run_child_in(run_args(solution, fixture_dirs[i], sd + "/candidate", timed), sd + "/candidate",
                              opt.timeout_seconds, &log, timed ? "candidate: checked steps, then timing" : "candidate: checked steps");
    wall["candidate_seed" + std::to_string(seed)] = since(t0);
    // The candidate runs as this user and could rewrite the cached fixture so that the reference
    // computes from the same wrong inputs: the files are re-hashed against the manifest read
    // before it ran (the manifest on disk could be rewritten too) before the reference reads them.
    if (opt.verify_fixture) {
      t0 = std::chrono::steady_clock::now();
      const std::string changed = fixture_changed(fixture_dirs[i], manifests[i]);
      wall["fixture_recheck_seed" + std::to_string(seed)] = since(t0);
      if (!changed.empty()) {
        disposition = kIncorrect;
        reason = changed;
        per_seed.push_back({{"seed", seed}});
        break;
      }
    }
    log("seed " + std::to_string(seed) + ": running the reference");
    t0 = std::chrono::steady_clock::now();
    ChildRun r = run_child_in(run_args(reference, fixture_dirs[i], sd + "/reference", false), sd + "/reference",
                              opt.timeout_seconds, &log, "reference");
    wall["reference_seed" + std::to_string(seed)] = since(t0);
    if (!r.completed()) {
      std::fprintf(stderr, "nibble grade: the reference failed on seed %llu (%s); the grader cannot judge without it.\n%s\n",
                   (unsigned long long)seed, r.exit.describe().c_str(),
                   r.result.is_object() && r.result.contains("error") ? r.result["error"].dump(-1, ' ', false, nlohmann::json::error_handler_t::replace).c_str() : r.log_tail.c_str());
      return kExitGraderFailed;
    }
    ref["name"] = r.result.value("solution_name", "");
    ref["numerics"] = r.result.value("numerics", "");
    if (c.result.is_object()) sol["name"] = c.result.value("solution_name", sol.value("name", std::string()));
    json seed_j;
    seed_j["seed"] = seed;
    if (c.result.is_object() && c.result.contains("seconds")) seed_j["candidate_seconds"] = c.result["seconds"];
    if (!opt.dump_dir.empty()) {
      fs::create_directories(opt.dump_dir);  // checked up front, created only now that there is something to dump
      for (const char* who : {"reference", "candidate"}) {
        const std::string src = sd + "/" + who + "/outputs.safetensors";
        if (fs::exists(src))
          fs::copy_file(src, opt.dump_dir + "/seed" + std::to_string(seed) + "-" + who + ".safetensors",
                        fs::copy_options::overwrite_existing);
      }
    }
    // Checked outputs are compared even when a later phase (timing) failed.
    const std::string phase = c.result.is_object() ? c.result.value("phase", "") : "";
    const bool have_outputs = fs::exists(sd + "/candidate/outputs.safetensors") &&
                              (phase == "checked" || phase == "timed" || phase == "done" || c.completed() ||
                               (phase == "failed" && c.result.contains("checked")));
    if (have_outputs) {
      double w = 0;
      bool f = true;
      try {
        seed_j["steps"] = compare_outputs(cfg, sd + "/reference/outputs.safetensors", sd + "/candidate/outputs.safetensors", &w, &f,
                                          &worst_logits, &worst_kv);
      } catch (const std::exception& e) {
        disposition = kCrashed;
        reason = std::string("the candidate's outputs could not be read: ") + e.what();
      }
      seed_j["worst_rel_err"] = std::isnan(w) ? json(nullptr) : json(w);
      worst = std::isnan(w) || std::isnan(worst) ? NAN : std::max(worst, w);
      finite = finite && f;
    }
    per_seed.push_back(seed_j);
    if (!c.completed()) {
      auto [disp, why] = failure_disposition(c);
      disposition = disp;
      reason = why;
      if (!c.log_tail.empty()) sol["log_tail"] = c.log_tail;
    }
    if (timed && c.result.is_object() && c.result.contains("timing")) {
      timing_raw = c.result["timing"];
      // The timed calls' outputs are checked too: the reference replays the last timed round's
      // tokens from the fixture's state and the kept calls are compared with it.
      if (disposition.empty() && timing_raw.contains("replay")) {
        write_file_atomic(sd + "/replay.json", timing_raw["replay"].dump());
        auto args = run_args(reference, fixture_dirs[i], sd + "/replay", false);
        args.insert(args.end(), {"--replay", sd + "/replay.json"});
        log("seed " + std::to_string(seed) + ": the reference replays the last timed round");
        ChildRun rr = run_child_in(args, sd + "/replay", opt.timeout_seconds, &log, "reference replay");
        if (!rr.completed()) {
          std::fprintf(stderr, "nibble grade: the reference failed to replay the timed calls (%s)\n%s\n", rr.exit.describe().c_str(),
                       rr.log_tail.c_str());
          return kExitGraderFailed;
        }
        json checks = json::array();
        double worst_timed = 0;
        try {
          SafetensorsFile rf(sd + "/replay/outputs.safetensors"), cf(sd + "/candidate/timed_outputs.safetensors");
          for (int s : timing_raw["replay"]["keep_steps"]) {
            const std::string name = "timed" + std::to_string(s) + ".logits";
            const size_t n = rf.entry(name).nbytes() / 4;
            const double e = relative_error(reinterpret_cast<const float*>(cf.data(name)),
                                            reinterpret_cast<const float*>(rf.data(name)), n);
            checks.push_back({{"step", s}, {"pos", cfg.prefill + s}, {"logits_rel_err", std::isnan(e) ? json(nullptr) : json(e)}});
            if (std::isnan(e) || !(e < cfg.gate)) {
              if (disposition.empty()) {
                disposition = kIncorrect;
                reason = "timed call at pos " + std::to_string(cfg.prefill + s) + " returned logits with relative error " +
                         (std::isnan(e) ? std::string("NaN") : fmt(e)) + " against the reference replaying the same tokens";
              }
            }
            worst_timed = std::isnan(e) || std::isnan(worst_timed) ? NAN : std::max(worst_timed, e);
          }
        } catch (const std::exception& e) {
          disposition = kCrashed;
          reason = std::string("the candidate's timed outputs could not be read: ") + e.what();
        }
        timing_raw["verified_calls"] = checks;
        timing_raw["verified_worst_rel_err"] = std::isnan(worst_timed) ? json(nullptr) : json(worst_timed);
      }
    }
  }
  report["solution"] = sol;
  report["reference"] = ref;
  correctness["per_seed"] = per_seed;
  correctness["worst_rel_err"] = std::isnan(worst) ? json(nullptr) : json(worst);
  correctness["worst_logits_rel_err"] = std::isnan(worst_logits) ? json(nullptr) : json(worst_logits);
  correctness["worst_kv_appended_rel_err"] = std::isnan(worst_kv) ? json(nullptr) : json(worst_kv);
  correctness["ratio_to_gate"] = std::isnan(worst) ? json(nullptr) : json(worst / cfg.gate);
  const bool within_gate = !std::isnan(worst) && finite && worst < cfg.gate;
  correctness["verdict"] = per_seed.empty() || !per_seed.back().contains("steps") ? "not run" : within_gate ? "pass" : "fail";
  if (disposition.empty() && !within_gate) {
    disposition = kIncorrect;
    reason = !finite || std::isnan(worst) ? "NaN or Inf in the candidate's logits or appended K/V"
                                          : "worst relative error " + fmt(worst) + " (" +
                                                (!(worst_kv < cfg.gate) ? "appended K/V " + fmt(worst_kv) + ", logits " + fmt(worst_logits)
                                                                        : "logits " + fmt(worst_logits) + ", appended K/V " + fmt(worst_kv)) +
                                                ") is above the gate " + fmt(cfg.gate);
  }
  // Where the candidate sits in the drop-the-feature table: the newest committed calibration of
  // this config (or --calibration FILE), so a reader sees whether a pass is comfortable or marginal.
  json calib_ctx;
  {
    const std::string cal = opt.calibration.empty() ? committed_calibration(opt.task, cfg.name) : opt.calibration;
    if (!cal.empty()) {
      try {
        const json c = json::parse(read_file(cal));
        double legit = 0, dropped = INFINITY;
        for (const auto& row : c.at("rows")) {
          if (row.at("worst").is_null()) continue;
          const double w = row.at("worst").get<double>();
          if (row.at("expected") == "PASS") legit = std::max(legit, w);
          else dropped = std::min(dropped, w);
        }
        json rows = json::array();
        for (const auto& row : c.at("rows"))
          rows.push_back({{"variant", row.at("variant")}, {"worst", row.at("worst")}, {"expected", row.at("expected")}});
        calib_ctx = {{"source", cal}, {"device", c.contains("device") ? c["device"].value("name", "") : "cpu oracle"},
                     {"legitimate_variants_worst", legit}, {"dropped_feature_variants_best", dropped}, {"rows", rows}};
        if (!std::isnan(worst)) {
          calib_ctx["candidate_worst"] = worst;
          calib_ctx["candidate_over_legitimate_worst"] = legit > 0 ? worst / legit : INFINITY;
        }
      } catch (const std::exception& e) {
        calib_ctx = {{"source", cal}, {"error", e.what()}};
      }
    }
  }
  if (!calib_ctx.is_null()) correctness["calibration"] = calib_ctx;
  report["correctness"] = correctness;

  // 4. Timing against the roofline floor.
  const int64_t bytes = cfg.bytes_per_step();
  const double copy_bw = device.contains("copy_bandwidth") ? device["copy_bandwidth"].value("median_Bps", 0.0) : 0.0;
  const double peak_bw = device.value("theoretical_bandwidth_Bps", 0.0);
  if (timing_raw.is_object()) {
    json t;
    const auto span = timing_raw["gpu_span_us"].get<std::vector<double>>();
    const auto wall_us = timing_raw["host_wall_us"].get<std::vector<double>>();
    const auto busy = timing_raw["busy_us"].get<std::vector<double>>();
    std::vector<double> kernels;
    for (int k : timing_raw["kernels"]) kernels.push_back(k);
    t["protocol"] = {
        {"metric", "GPU span: first activity record's start to the last one's end (CUPTI CONCURRENT_KERNEL, MEMCPY, MEMSET; all streams), per decode_step call"},
        {"before_each_call", "persisting L2 reset, L2 flushed (2x its size written), device synchronised; outside the window"},
        {"after_each_call", "device synchronised inside the window; logits checked finite outside it"},
        {"between_calls", "a kernel between two timed steps beyond the harness's own (counted before build_model) makes the grade InvalidTiming (gaps_with_foreign_kernels)"},
        {"tokens", "fresh ids per call: from token_seed when --timing-seed fixed it, else from the OS (token_seed_from)"},
        {"positions", "pos = prefill .. prefill + steps_per_round - 1, repeated per round"},
        {"timed_seed", opt.seeds.front()}};
    for (const char* k : {"token_seed", "token_seed_from", "steps_per_round", "rounds", "stop_reason", "invalid_samples", "nonfinite_outputs",
                          "gaps_with_foreign_kernels", "harness_kernels_per_gap", "late_kernels", "verified_calls", "verified_worst_rel_err"})
      if (timing_raw.contains(k)) t[k] = timing_raw[k];
    if (!span.empty()) {
      const Summary s = summarize(span), w = summarize(wall_us), b = summarize(busy), kk = summarize(kernels);
      t["gpu_span_us"] = summary_json(s, &span);
      t["host_wall_us"] = summary_json(w, &wall_us);
      t["busy_us"] = summary_json(b);
      t["kernels_per_step"] = summary_json(kk);
      t["positions"] = timing_raw["pos"];
      t["wall_over_span_median"] = w.median / s.median;
      t["bytes_per_step"] = bytes;
      t["bytes_per_step_note"] = "packed codes + scales + zeros of every weight, norm gains, K and V at prefill + 32 slots, fp32 logits";
      t["achieved_bandwidth_Bps"] = double(bytes) / (s.median * 1e-6);
      if (copy_bw > 0) {
        t["floor_us_measured_copy_bw"] = double(bytes) / copy_bw * 1e6;
        t["fraction_of_measured_bw"] = double(bytes) / (s.median * 1e-6) / copy_bw;
      }
      if (peak_bw > 0) {
        const double floor_peak = double(bytes) / peak_bw * 1e6;
        t["floor_us_theoretical_bw"] = floor_peak;
        t["fraction_of_theoretical_bw"] = floor_peak / s.median;
        if (disposition.empty() && s.min < floor_peak) {
          disposition = kInvalidTiming;
          reason = "a timed step took " + fmt(s.min) + " us, below the physical floor " + fmt(floor_peak) +
                   " us (bytes per step / theoretical bandwidth): not a record";
        }
      }
      // Host time the GPU never saw (a CPU-side computation, a sleep) is work the span would hide.
      // Launch-bound work legitimately shows some host time beyond the span (seen on the tiny
      // config: 377 us wall for a 75 us span); hidden work worth hiding is far more than 1 ms.
      if (disposition.empty() && w.median > 2.0 * s.median && w.median - s.median > 1000.0) {
        disposition = kInvalidTiming;
        reason = "host wall time per call (" + fmt(w.median) + " us median) is far above the CUPTI GPU span (" + fmt(s.median) +
                 " us): the call spends time the GPU timer cannot see";
      }
      if (disposition.empty() && w.median < 0.9 * s.median) {
        disposition = kInvalidTiming;
        reason = "host wall time (" + fmt(w.median) + " us) is below the CUPTI GPU span (" + fmt(s.median) + " us): the clocks disagree";
      }
      t["us_per_token"] = s.median;
    }
    if (disposition.empty() && timing_raw.value("gaps_with_foreign_kernels", 0) > 0) {
      disposition = kInvalidTiming;
      reason = "the GPU ran kernels that were not the harness's between timed steps (in " +
               std::to_string(timing_raw.value("gaps_with_foreign_kernels", 0)) +
               " gaps), outside every timing window: work a timed step may depend on was not timed";
    }
    if (disposition.empty() && timing_raw.value("invalid_samples", 0) > 0) {
      disposition = kInvalidTiming;
      reason = std::to_string(timing_raw.value("invalid_samples", 0)) + " timed call(s) had no valid GPU record: " +
               timing_raw.value("invalid_reason", std::string());
    }
    if (disposition.empty() && timing_raw.value("nonfinite_outputs", 0) > 0) {
      disposition = kIncorrect;
      reason = std::to_string(timing_raw.value("nonfinite_outputs", 0)) + " timed call(s) left NaN/Inf in the logits";
    }
    report["timing"] = t;
  }
  if (disposition.empty()) {
    disposition = kPassed;
    reason = "worst relative error " + fmt(worst) + " < gate " + fmt(cfg.gate) + " (" + fmt(worst / cfg.gate, 2) + "x the gate)";
  }
  report["disposition"] = disposition;
  report["reason"] = reason;
  wall["total"] = since(t_start);
  report["wall_seconds"] = wall;

  try {
    write_file_atomic(opt.out, report.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
    if (!opt.gbench_json.empty()) write_file_atomic(opt.gbench_json, gbench_json(report).dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
    if (!opt.history.empty()) append_history(opt.history, report, opt.out);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "nibble grade: %s\n", e.what());
    return kExitGraderFailed;
  }

  // 5. The summary a person reads (the same text `nibble report show` prints from the JSON).
  summary_stream(opt.out) << format_summary(graded_report_view(report), opt.out) << std::flush;
  return disposition == kPassed ? kExitPassed : kExitNotPassed;
}

}  // namespace nibble
