// calibrate.cpp: `nibble calibrate` (issue 3; the seed's "Where the tolerance comes from").
//
// Every variant of reference/variants.h is graded like a candidate against the exact task: on the
// GPU path the bundled reference .so runs each variant in its own child process (the same ABI
// path as any candidate); on the CPU path the fp64 oracle computes each variant in this process
// (tiny config, for CI). The worst relative error of each (over 8 steps, logits and appended K/V,
// every seed) against the gate decides the verdict; the table is the gate's health check.
#include "harness/calibrate.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <sstream>
#include <thread>
#include <unistd.h>

#include "fixtures/safetensors.h"
#include "fixtures/task.h"
#include "harness/atomic_file.h"
#include "fixtures/gemm_task.h"
#include "harness/gemm_grade.h"
#include "harness/grade_common.h"
#include "harness/process.h"
#include "harness/stats.h"
#include "reference/oracle_fp64.h"
#include "reference/variants.h"

namespace nibble {

namespace fs = std::filesystem;
using json = nlohmann::ordered_json;

namespace {

/** Worst logits and appended-K/V errors of one variant on one seed. */
struct SeedErrors {
  double logits = 0, kv = 0;
  double worst() const { return std::isnan(logits) || std::isnan(kv) ? NAN : std::max(logits, kv); }
};

double nan_max(double a, double b) { return std::isnan(a) || std::isnan(b) ? NAN : std::max(a, b); }

/** The CPU path: the exact oracle and each variant's oracle on the same fixture and tokens. */
std::vector<SeedErrors> cpu_seed(const DecodeConfig& cfg, const std::string& fixture_dir, int threads,
                                 const std::vector<ref::VariantInfo>& variants) {
  SafetensorsFile f(fixture_dir + "/model.safetensors");
  const auto& d = cfg.dims;
  const int nthreads = threads > 0 ? threads : int(std::max(1u, std::thread::hardware_concurrency()));
  auto run = [&](const ref::ReferenceOptions& o, std::vector<std::vector<double>>* logits,
                 std::vector<std::vector<uint16_t>>* k, std::vector<std::vector<uint16_t>>* v) {
    oracle::DecodeOracle orc(cfg, f, nthreads, o);
    std::vector<int64_t> toks;
    SafetensorsFile::Entry e = f.entry("tokens");
    const auto* all = reinterpret_cast<const int64_t*>(f.data("tokens"));
    for (int s = 0; s < cfg.checked_steps; ++s) {
      std::vector<int64_t> tok(all + int64_t(s) * d.batch, all + int64_t(s + 1) * d.batch);
      std::vector<uint16_t> ka, va;
      logits->push_back(orc.step(tok, cfg.prefill + s, &ka, &va));
      k->push_back(std::move(ka));
      v->push_back(std::move(va));
    }
    (void)e;
  };
  std::vector<std::vector<double>> ref_l;
  std::vector<std::vector<uint16_t>> ref_k, ref_v;
  run(ref::variant_options(ref::kDefaultVariant), &ref_l, &ref_k, &ref_v);
  std::vector<SeedErrors> out;
  for (const auto& var : variants) {
    std::vector<std::vector<double>> l;
    std::vector<std::vector<uint16_t>> k, v;
    run(var.options, &l, &k, &v);
    SeedErrors e;
    for (int s = 0; s < cfg.checked_steps; ++s) {
      e.logits = nan_max(e.logits, relative_error(l[s].data(), ref_l[s].data(), l[s].size()));
      e.kv = nan_max(e.kv, nan_max(relative_error_bf16(k[s].data(), ref_k[s].data(), k[s].size()),
                                   relative_error_bf16(v[s].data(), ref_v[s].data(), v[s].size())));
    }
    out.push_back(e);
  }
  return out;
}

/** Errors of one compare_outputs() step list, split into logits and K/V. */
SeedErrors errors_of(const json& steps) {
  SeedErrors e;
  for (const auto& s : steps) {
    const double l = s["logits_rel_err"].is_null() ? NAN : s["logits_rel_err"].get<double>();
    const double k = s["kv_appended_rel_err"].is_null() ? NAN : s["kv_appended_rel_err"].get<double>();
    e.logits = nan_max(e.logits, l);
    e.kv = nan_max(e.kv, k);
  }
  return e;
}

std::string cell(double v) { return std::isnan(v) ? "NaN" : fmt(v, 3); }

}  // namespace

bool refuse_slow_cpu_oracle(const CalibrateOptions& opt, const std::string& path, double macs, const std::string& breakdown,
                            const std::string& instead) {
  if (path != "cpu" || opt.path != "auto" || !(macs > kAutoCpuOracleMaxMacs)) return false;
  std::fprintf(stderr,
               "nibble calibrate: no usable GPU, and the fp64 CPU oracle at %s is %.3g multiply-adds (%s), far beyond "
               "what --path auto runs on the CPU (%.3g); run it on a GPU, %sor pass --path cpu to run the oracle anyway\n",
               opt.config.c_str(), macs, breakdown.c_str(), kAutoCpuOracleMaxMacs,
               instead.empty() ? "" : (instead + " here, ").c_str());
  return true;
}

int calibrate_main(const CalibrateOptions& opt) {
  if (is_gemm_task(opt.task)) return calibrate_gemm_main(opt);
  const auto t_start = std::chrono::steady_clock::now();
  const Log log{opt.quiet, isatty(STDERR_FILENO) != 0};
  DecodeConfig cfg;
  try {
    check_task(opt.task);
    cfg = decode_config(opt.config);
    check_calibrate_options(opt);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "nibble calibrate: %s\n", e.what());
    return 2;
  }
  const std::string exe = self_exe();
  const std::string reference = bundled_reference(exe, opt.reference);
  TempDir work("nibble-calibrate");

  json report = document_header("nibble.calibration", opt.argv, opt.task, cfg.name);
  report["seeds"] = opt.seeds;
  report["gate"] = cfg.gate;

  // GPU when one answers (or is demanded); the CPU oracle otherwise.
  json device;
  const std::string path = calibration_path(opt.path, exe, work.path(), log, &device);
  if (path.empty()) return 2;
  // `auto` found no GPU: the fp64 oracle costs about one multiply-add per weight and step (the LM
  // head included, the tied embedding counted once more), for the reference and every variant, per
  // seed: hours at the full config. Fall back on it silently only where that is minutes at most,
  // as the GEMM tasks do.
  double per_step = 0;
  for (const QuantWeight& w : cfg.quant_weights()) per_step += double(w.out) * double(w.in);
  const double macs = per_step * double(cfg.checked_steps) * double(ref::decode_variants().size() + 1) *
                      double(opt.seeds.size());
  if (refuse_slow_cpu_oracle(opt, path, macs,
                             fmt(per_step) + " per step x " + std::to_string(cfg.checked_steps) + " steps x " +
                                 std::to_string(ref::decode_variants().size() + 1) + " runs x " +
                                 std::to_string(opt.seeds.size()) + " seeds",
                             cfg.name == "tiny" ? "fewer seeds" : "--config tiny"))
    return 2;
  if (path == "cpu" && cfg.name == "full")
    log("warning: the fp64 oracle on the full config takes a long time per step");
  report["path"] = path == "gpu" ? "gpu: bundled reference .so per variant, child processes" : "cpu: fp64 oracle per variant";
  if (path == "gpu") report["device"] = device;

  const auto& variants = ref::decode_variants();
  std::vector<std::vector<SeedErrors>> errs(variants.size());  // [variant][seed]
  json fixtures = json::array();
  for (uint64_t seed : opt.seeds) {
    std::string dir;
    try {
      fixtures.push_back(ensure_fixture(cfg, seed, "", opt.threads, true, log, &dir));
    } catch (const std::exception& e) {
      std::fprintf(stderr, "nibble calibrate: fixture: %s\n", e.what());
      return 2;
    }
    if (path == "cpu") {
      log("seed " + std::to_string(seed) + ": fp64 oracle, " + std::to_string(variants.size()) + " variants");
      try {
        const auto e = cpu_seed(cfg, dir, opt.threads, variants);
        for (size_t i = 0; i < variants.size(); ++i) errs[i].push_back(e[i]);
      } catch (const std::exception& e) {
        std::fprintf(stderr, "nibble calibrate: oracle: %s\n", e.what());
        return 3;
      }
      continue;
    }
    const std::string sd = work.path() + "/seed" + std::to_string(seed);
    auto args = [&](const std::string& variant, const std::string& odir) {
      std::vector<std::string> a = {exe, "__run", "--solution", reference, "--fixture", dir, "--config", cfg.name,
                                    "--out", odir, "--checked-steps", std::to_string(cfg.checked_steps)};
      if (!variant.empty()) a.insert(a.end(), {"--variant", variant});
      return a;
    };
    std::vector<std::string> names;
    for (const auto& v : variants) names.push_back(v.name);
    log("seed " + std::to_string(seed) + ": the reference and " + std::to_string(names.size()) + " variants");
    try {
      const bool ran = run_variant_children(args, names, sd, opt.timeout_seconds, log,
                                            [&](size_t i, const std::string& vd, const std::string& ed) {
                                              double w = 0;
                                              bool finite = true;
                                              errs[i].push_back(errors_of(compare_outputs(
                                                  cfg, ed + "/outputs.safetensors", vd + "/outputs.safetensors", &w, &finite)));
                                            });
      if (!ran) return 3;
    } catch (const std::exception& e) {
      std::fprintf(stderr, "nibble calibrate: the reference's outputs could not be read: %s\n", e.what());
      return 3;
    }
  }
  report["fixtures"] = fixtures;

  // The table and the health check.
  bool healthy = true;
  json rows = json::array();
  std::ostringstream o;
  char line[512];
  o << "\nnibble calibrate  " << opt.task << " / " << cfg.name << "  (" << (path == "gpu" ? device.value("name", "GPU") : "fp64 CPU oracle")
    << "), gate " << fmt(cfg.gate) << ", worst over " << cfg.checked_steps << " steps of logits and appended K/V\n\n";
  // The header uses the rows' own widths, so the columns line up for any number of seeds.
  std::snprintf(line, sizeof line, "  %-18s %-6s", "variant", "expect");
  std::string hdr = line;
  for (uint64_t s : opt.seeds) {
    std::snprintf(line, sizeof line, "  %-9s", ("seed " + std::to_string(s)).c_str());
    hdr += line;
  }
  std::snprintf(line, sizeof line, "  %-9s %-8s %-14s %s", "worst", "x gate", "caught by", "verdict");
  hdr += line;
  o << hdr << "\n  " << std::string(hdr.size() - 2, '-') << "\n";
  for (size_t i = 0; i < variants.size(); ++i) {
    const auto& v = variants[i];
    double worst = 0, worst_logits = 0, worst_kv = 0;
    json per_seed = json::array();
    for (size_t s = 0; s < opt.seeds.size(); ++s) {
      const SeedErrors& e = errs[i][s];
      per_seed.push_back({{"seed", opt.seeds[s]}, {"logits_rel_err", std::isnan(e.logits) ? json(nullptr) : json(e.logits)},
                          {"kv_appended_rel_err", std::isnan(e.kv) ? json(nullptr) : json(e.kv)},
                          {"worst", std::isnan(e.worst()) ? json(nullptr) : json(e.worst())}});
      worst = nan_max(worst, e.worst());
      worst_logits = nan_max(worst_logits, e.logits);
      worst_kv = nan_max(worst_kv, e.kv);
    }
    // Verdict as the grader would give it; health demands a factor-2 margin on the right side.
    const bool passes = !std::isnan(worst) && worst < cfg.gate;
    const bool ok = v.must_pass ? (!std::isnan(worst) && worst <= cfg.gate / 2) : (std::isnan(worst) || worst >= 2 * cfg.gate);
    healthy = healthy && ok;
    // Which check actually rejects it: logits, appended K/V, or both.
    std::string caught = "-";
    if (!v.must_pass) {
      const bool by_l = std::isnan(worst_logits) || worst_logits >= cfg.gate, by_kv = std::isnan(worst_kv) || worst_kv >= cfg.gate;
      caught = by_l && by_kv ? "both" : by_l ? "logits" : by_kv ? "appended K/V" : "none";
    }
    std::string seeds_cells;
    for (size_t s = 0; s < opt.seeds.size(); ++s) {
      std::snprintf(line, sizeof line, "  %-9s", cell(errs[i][s].worst()).c_str());
      seeds_cells += line;
    }
    std::snprintf(line, sizeof line, "  %-18s %-6s%s  %-9s %-8s %-14s %s%s\n", v.name, v.must_pass ? "PASS" : "FAIL",
                  seeds_cells.c_str(), cell(worst).c_str(), cell(worst / cfg.gate).c_str(), caught.c_str(),
                  passes ? "PASS" : "FAIL", ok ? "" : "  <-- margin below 2x");
    o << line;
    rows.push_back({{"variant", v.name},
                    {"description", v.description},
                    {"expected", v.must_pass ? "PASS" : "FAIL"},
                    {"per_seed", per_seed},
                    {"worst", std::isnan(worst) ? json(nullptr) : json(worst)},
                    {"worst_logits", std::isnan(worst_logits) ? json(nullptr) : json(worst_logits)},
                    {"worst_kv_appended", std::isnan(worst_kv) ? json(nullptr) : json(worst_kv)},
                    {"ratio_to_gate", std::isnan(worst) ? json(nullptr) : json(worst / cfg.gate)},
                    {"verdict", passes ? "PASS" : "FAIL"},
                    {"caught_by", caught},
                    {"expected_caught_by", v.caught_by},
                    {"healthy", ok}});
  }
  o << "\n  gate health: " << (healthy ? "OK" : "NOT OK")
    << " (must-pass rows at most half the gate, must-fail rows at least twice it)\n";
  report["rows"] = rows;
  report["healthy"] = healthy;
  report["health_rule"] = "every must-pass variant <= gate/2 and every must-fail variant >= 2*gate (worst over steps, seeds, logits and appended K/V)";
  report["wall_seconds"] = since(t_start);
  try {
    write_file_atomic(opt.out, report.dump(2, ' ', false, nlohmann::json::error_handler_t::replace) + "\n");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "nibble calibrate: %s\n", e.what());
    return 3;
  }
  o << "  report: " << opt.out << "  (" << fmt(since(t_start), 3) << " s)\n";
  summary_stream(opt.out) << o.str() << std::flush;
  return healthy ? 0 : 1;
}

}  // namespace nibble
