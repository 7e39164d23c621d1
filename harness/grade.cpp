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
#include <cstdio>
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
#include "harness/process.h"
#include "harness/provenance.h"
#include "harness/stats.h"

namespace nibble {

namespace fs = std::filesystem;
using json = nlohmann::ordered_json;

namespace {

double since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

struct Log {
  bool quiet;
  void operator()(const std::string& msg) const {
    if (!quiet) std::fprintf(stderr, "[nibble] %s\n", msg.c_str());
  }
};

/** A child's end plus the result.json it left (null when it left none). */
struct ChildRun {
  ChildExit exit;
  json result;
  std::string log_tail;
  bool completed() const { return exit.kind == ChildExit::Exited && exit.code == 0 && result.value("phase", "") == "done"; }
};

ChildRun run_child_in(const std::vector<std::string>& argv, const std::string& dir, double timeout) {
  fs::create_directories(dir);
  ChildRun r;
  r.exit = run_child(argv, dir + "/log.txt", timeout);
  try {
    r.result = json::parse(read_file(dir + "/result.json"));
  } catch (const std::exception&) {
    r.result = json();
  }
  r.log_tail = file_tail(dir + "/log.txt", 3000);
  return r;
}

/** Disposition and reason for a candidate child that did not complete. */
std::pair<std::string, std::string> failure_disposition(const ChildRun& c) {
  if (c.exit.kind == ChildExit::TimedOut)
    return {kTimedOut, "the candidate's process " + c.exit.describe() + " (phase reached: " +
                           c.result.value("phase", std::string("start")) + ")"};
  if (c.result.is_object() && c.result.contains("error")) {
    const json& e = c.result["error"];
    const std::string kind = e.value("kind", "");
    const std::string msg = e.value("message", "");
    if (kind == "load") {
      const std::string lk = e.value("load_kind", "");
      if (lk == "AbiMismatch") return {kAbiMismatch, msg};
      if (lk == "MissingSymbol") return {kMissingSymbol, msg};
      return {kNotLoadable, msg};
    }
    if (kind == "solution" && e.value("status", "") == "NOT_SUPPORTED") return {kNotSupported, msg};
    if (kind == "solution") return {kCrashed, msg};
    if (kind == "cuda") return {kCrashed, "CUDA error after a solution call: " + msg};
    return {kCrashed, "harness error in the candidate's process: " + msg};
  }
  if (c.exit.kind == ChildExit::Signaled)
    return {kCrashed, "the candidate's process was " + c.exit.describe() + " (phase reached: " +
                          c.result.value("phase", std::string("start")) + ")"};
  return {kCrashed, "the candidate's process ended with " + c.exit.describe() + " without a result"};
}

/** The fixture for (config, seed): given, cached, or built now. */
json ensure_fixture(const DecodeConfig& cfg, uint64_t seed, const std::string& given_dir, const GradeOptions& opt,
                    const Log& log, std::string* dir_out) {
  const std::string dir = given_dir.empty() ? default_fixture_dir(kDecodeTask, cfg.name, seed) : given_dir;
  *dir_out = dir;
  json j;
  j["seed"] = seed;
  j["dir"] = dir;
  const bool have = fs::exists(dir + "/manifest.json") && fs::exists(dir + "/model.safetensors");
  FixtureManifest m;
  if (!have) {
    if (!given_dir.empty())
      throw std::invalid_argument("no fixture in " + dir + " (manifest.json and model.safetensors expected); build one with `nibble fixture build --task " +
                                  std::string(kDecodeTask) + " --config " + cfg.name + " --seed " + std::to_string(seed) + " --out " + dir + "`");
    log("building fixture " + cfg.name + " seed " + std::to_string(seed) + " into " + dir);
    const auto t0 = std::chrono::steady_clock::now();
    m = build_decode_fixture(cfg, seed, dir, opt.threads, {});
    j["built_now"] = true;
    j["build_seconds"] = since(t0);
  } else {
    m = read_manifest(dir);
    if (m.task != kDecodeTask || m.config != cfg.name || m.seed != seed)
      throw std::invalid_argument("fixture " + dir + " is for task " + m.task + ", config " + m.config + ", seed " +
                                  std::to_string(m.seed) + ", not " + cfg.name + " seed " + std::to_string(seed));
    if (m.generator_version != kGeneratorVersion)
      throw std::invalid_argument("fixture " + dir + " was made by generator version " + std::to_string(m.generator_version) +
                                  "; this nibble makes version " + std::to_string(kGeneratorVersion) + ": rebuild it with `" +
                                  fixture_build_command(kDecodeTask, cfg.name, seed, dir) + "`");
    if (opt.verify_fixture) {
      log("verifying fixture " + dir + " (SHA-256)");
      const auto t0 = std::chrono::steady_clock::now();
      verify_fixture(dir, m);
      j["verify_seconds"] = since(t0);
    }
    j["built_now"] = false;
  }
  j["generator_version"] = m.generator_version;
  j["file_sha256"] = m.file_sha256;
  j["file_bytes"] = m.file_bytes;
  j["verified"] = opt.verify_fixture || !have;
  return j;
}

/** Errors of the candidate's checked steps against the reference's, for one seed. */
json compare_outputs(const DecodeConfig& cfg, const std::string& ref_file, const std::string& cand_file, double* worst,
                     bool* all_finite_out) {
  SafetensorsFile ref(ref_file), cand(cand_file);
  json steps = json::array();
  for (int s = 0; s < cfg.checked_steps; ++s) {
    const std::string p = "step" + std::to_string(s) + ".";
    const auto& re = ref.entry(p + "logits");
    const size_t n = re.nbytes() / 4;
    const auto* r = reinterpret_cast<const float*>(ref.data(p + "logits"));
    const auto* c = reinterpret_cast<const float*>(cand.data(p + "logits"));
    const bool finite = all_finite(c, n);
    const double err = relative_error(c, r, n);
    const size_t nk = ref.entry(p + "k").nbytes() / 2;
    const double kerr = relative_error_bf16(reinterpret_cast<const uint16_t*>(cand.data(p + "k")),
                                            reinterpret_cast<const uint16_t*>(ref.data(p + "k")), nk);
    const double verr = relative_error_bf16(reinterpret_cast<const uint16_t*>(cand.data(p + "v")),
                                            reinterpret_cast<const uint16_t*>(ref.data(p + "v")), nk);
    const double kv = std::isnan(kerr) || std::isnan(verr) ? NAN : std::max(kerr, verr);
    *all_finite_out = *all_finite_out && finite;
    for (double e : {err, kv}) *worst = std::isnan(e) || std::isnan(*worst) ? NAN : std::max(*worst, e);
    steps.push_back({{"step", s}, {"pos", cfg.prefill + s}, {"logits_rel_err", std::isnan(err) ? json(nullptr) : json(err)},
                     {"kv_appended_rel_err", std::isnan(kv) ? json(nullptr) : json(kv)}, {"finite", finite}});
  }
  return steps;
}

std::string fmt(double v, int prec = 3) {
  char b[64];
  std::snprintf(b, sizeof b, "%.*g", prec, v);
  return b;
}

std::string utc_now() {
  char b[32];
  const std::time_t t = std::time(nullptr);
  std::strftime(b, sizeof b, "%Y-%m-%dT%H:%M:%SZ", std::gmtime(&t));
  return b;
}

}  // namespace

int grade_main(const GradeOptions& opt) {
  const auto t_start = std::chrono::steady_clock::now();
  const Log log{opt.quiet};
  DecodeConfig cfg;
  try {
    check_task(opt.task);
    cfg = decode_config(opt.config);
    if (opt.solution.empty()) throw std::invalid_argument("--solution is required");
    if (!fs::exists(opt.solution))
      throw std::invalid_argument("solution '" + opt.solution + "' does not exist; pass the path of a built .so");
    if (opt.seeds.empty()) throw std::invalid_argument("--seeds needs at least one seed");
    if (!opt.fixture_dir.empty() && opt.seeds.size() != 1)
      throw std::invalid_argument("--fixture names one fixture, so give exactly one seed with --seeds");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "nibble grade: %s\n", e.what());
    return kExitUsage;
  }
  const std::string exe = self_exe();
  const std::string reference =
      opt.reference.empty() ? (fs::path(exe).parent_path().parent_path() / "lib" / "libnibble_reference.so").string()
                            : opt.reference;
  const std::string solution = fs::absolute(opt.solution).string();
  TempDir work("nibble-grade");

  json report;
  report["schema"] = "nibble.report";
  report["schema_version"] = "1.0.0";
  report["nibble_version"] = NIBBLE_VERSION;
  report["created_utc"] = utc_now();
  report["argv"] = opt.argv;
  report["git"] = git_provenance();
  report["host"] = host_provenance();
  report["task"] = opt.task;
  report["config"] = cfg.name;
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

  // 2. Fixtures.
  std::vector<std::string> fixture_dirs;
  json fixtures = json::array();
  try {
    for (uint64_t seed : opt.seeds) {
      std::string dir;
      fixtures.push_back(ensure_fixture(cfg, seed, opt.fixture_dir, opt, log, &dir));
      fixture_dirs.push_back(dir);
    }
  } catch (const std::invalid_argument& e) {
    std::fprintf(stderr, "nibble grade: %s\n", e.what());
    return kExitUsage;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "nibble grade: fixture: %s\n", e.what());
    return kExitGraderFailed;
  }
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

  const uint64_t timing_seed = opt.timing_seed ? *opt.timing_seed : std::random_device{}();
  std::string disposition, reason;
  json correctness;
  correctness["gate"] = cfg.gate;
  correctness["metric"] = "||out - ref||_2 / ||ref||_2 in fp64 over (batch, vocab) logits; K/V appended at slot pos likewise";
  correctness["checked_steps"] = cfg.checked_steps;
  json per_seed = json::array();
  double worst = 0;
  bool finite = true;
  json timing_raw;
  json wall;
  auto run_args = [&](const std::string& so, const std::string& fdir, const std::string& odir, bool timed) {
    std::vector<std::string> a = {exe, "__run", "--solution", so, "--fixture", fdir, "--config", cfg.name,
                                  "--out", odir, "--checked-steps", std::to_string(cfg.checked_steps)};
    if (timed) {
      a.insert(a.end(), {"--timing", "--timing-seed", std::to_string(timing_seed), "--min-rounds",
                         std::to_string(opt.min_rounds), "--max-rounds", std::to_string(opt.max_rounds),
                         "--max-timing-seconds", fmt(opt.max_timing_seconds, 10)});
    }
    return a;
  };

  // 3. Per seed: the reference, then the candidate, each in its own process.
  for (size_t i = 0; i < opt.seeds.size() && disposition.empty(); ++i) {
    const uint64_t seed = opt.seeds[i];
    const std::string sd = work.path() + "/seed" + std::to_string(seed);
    log("seed " + std::to_string(seed) + ": running the reference");
    auto t0 = std::chrono::steady_clock::now();
    ChildRun r = run_child_in(run_args(reference, fixture_dirs[i], sd + "/reference", false), sd + "/reference",
                              opt.timeout_seconds);
    wall["reference_seed" + std::to_string(seed)] = since(t0);
    if (!r.completed()) {
      std::fprintf(stderr, "nibble grade: the reference failed on seed %llu (%s); the grader cannot judge without it.\n%s\n",
                   (unsigned long long)seed, r.exit.describe().c_str(),
                   r.result.is_object() && r.result.contains("error") ? r.result["error"].dump().c_str() : r.log_tail.c_str());
      return kExitGraderFailed;
    }
    ref["name"] = r.result.value("solution_name", "");
    ref["numerics"] = r.result.value("numerics", "");
    const bool timed = opt.timing && i == 0;
    log("seed " + std::to_string(seed) + ": running the candidate" + (timed ? " (checked, then timed)" : ""));
    t0 = std::chrono::steady_clock::now();
    ChildRun c = run_child_in(run_args(solution, fixture_dirs[i], sd + "/candidate", timed), sd + "/candidate",
                              opt.timeout_seconds);
    wall["candidate_seed" + std::to_string(seed)] = since(t0);
    if (c.result.is_object()) sol["name"] = c.result.value("solution_name", sol.value("name", std::string()));
    json seed_j;
    seed_j["seed"] = seed;
    if (c.result.is_object() && c.result.contains("seconds")) seed_j["candidate_seconds"] = c.result["seconds"];
    if (!opt.dump_dir.empty()) {
      fs::create_directories(opt.dump_dir);
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
        seed_j["steps"] = compare_outputs(cfg, sd + "/reference/outputs.safetensors", sd + "/candidate/outputs.safetensors", &w, &f);
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
    if (timed && c.result.is_object() && c.result.contains("timing")) timing_raw = c.result["timing"];
  }
  report["solution"] = sol;
  report["reference"] = ref;
  correctness["per_seed"] = per_seed;
  correctness["worst_rel_err"] = std::isnan(worst) ? json(nullptr) : json(worst);
  correctness["ratio_to_gate"] = std::isnan(worst) ? json(nullptr) : json(worst / cfg.gate);
  const bool within_gate = !std::isnan(worst) && finite && worst < cfg.gate;
  correctness["verdict"] = per_seed.empty() || !per_seed.back().contains("steps") ? "not run" : within_gate ? "pass" : "fail";
  if (disposition.empty() && !within_gate) {
    disposition = kIncorrect;
    reason = !finite || std::isnan(worst) ? "NaN or Inf in the candidate's logits or appended K/V"
                                          : "worst relative error " + fmt(worst) + " is above the gate " + fmt(cfg.gate);
  }
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
        {"tokens", "fresh ids per call from token_seed"},
        {"positions", "pos = prefill .. prefill + steps_per_round - 1, repeated per round"},
        {"timed_seed", opt.seeds.front()}};
    for (const char* k : {"token_seed", "steps_per_round", "rounds", "stop_reason", "invalid_samples", "nonfinite_outputs"})
      t[k] = timing_raw[k];
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
      if (disposition.empty() && w.median < 0.9 * s.median) {
        disposition = kInvalidTiming;
        reason = "host wall time (" + fmt(w.median) + " us) is below the CUPTI GPU span (" + fmt(s.median) + " us): the clocks disagree";
      }
      t["us_per_token"] = s.median;
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
    write_file_atomic(opt.out, report.dump(2) + "\n");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "nibble grade: %s\n", e.what());
    return kExitGraderFailed;
  }

  // 5. The summary a person reads.
  std::ostringstream o;
  o << "\nnibble grade  " << opt.task << " / " << cfg.name << "  on " << device.value("name", "?") << "\n";
  o << "  solution     " << sol.value("name", std::string("?")) << "  (" << solution << ")\n";
  o << "  disposition  " << disposition << ": " << reason << "\n";
  if (!std::isnan(worst) && !per_seed.empty()) {
    for (const auto& s : per_seed)
      if (s.contains("worst_rel_err"))
        o << "  seed " << s["seed"].get<uint64_t>() << "       worst relative error "
          << (s["worst_rel_err"].is_null() ? std::string("NaN") : fmt(s["worst_rel_err"].get<double>())) << " over "
          << cfg.checked_steps << " steps (gate " << fmt(cfg.gate) << ")\n";
  }
  if (report.contains("timing") && report["timing"].contains("gpu_span_us")) {
    const json& t = report["timing"];
    const json& s = t["gpu_span_us"];
    o << "  time/token   " << fmt(s["median"].get<double>(), 5) << " us median GPU span (q1 " << fmt(s["q1"].get<double>(), 5)
      << ", q3 " << fmt(s["q3"].get<double>(), 5) << ", n " << s["n"].get<size_t>() << "), host wall "
      << fmt(t["host_wall_us"]["median"].get<double>(), 5) << " us, " << fmt(t["kernels_per_step"]["median"].get<double>(), 4)
      << " kernels/step\n";
    if (t.contains("floor_us_measured_copy_bw"))
      o << "  roofline     " << fmt(double(bytes) / 1e9, 4) << " GB/step; floor " << fmt(t["floor_us_measured_copy_bw"].get<double>(), 4)
        << " us at the measured copy bandwidth " << fmt(copy_bw / 1e12, 3) << " TB/s -> "
        << fmt(100 * t["fraction_of_measured_bw"].get<double>(), 3) << "% of it\n";
  }
  o << "  report       " << opt.out << "  (" << fmt(since(t_start), 3) << " s)\n";
  std::cout << o.str() << std::flush;
  return disposition == kPassed ? kExitPassed : kExitNotPassed;
}

}  // namespace nibble
