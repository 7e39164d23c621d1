// calibrate.cpp: `nibble calibrate`, the drop-the-feature table of any task.
//
// Every variant of the task's reference is measured like a candidate against the exact task: on
// the GPU path the bundled reference .so runs each variant in its own child process (the same ABI
// path as any candidate); on the CPU path the task's fp64 oracle computes each variant in this
// process (small configs, for CI). The worst relative error of each (over the checked calls and
// outputs, every seed) against the gate decides the verdict; the table is the gate's health check.
#include "harness/calibrate.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <map>
#include <optional>
#include <sstream>
#include <thread>
#include <unistd.h>

#include "fixtures/safetensors.h"
#include "harness/atomic_file.h"
#include "harness/grade_common.h"
#include "harness/outputs.h"
#include "harness/stats.h"
#include "harness/process.h"
#include "harness/task.h"

namespace nibble {

namespace fs = std::filesystem;
using json = nlohmann::ordered_json;

namespace {


std::string cell(double v) { return std::isnan(v) ? "NaN" : fmt(v, 3); }

}  // namespace

bool refuse_slow_cpu_oracle(const CalibrateOptions& opt, const std::string& path, double macs, const std::string& breakdown,
                            const std::string& instead) {
  if (path != "cpu" || !(macs > kAutoCpuOracleMaxMacs)) return false;
  if (opt.path == "cpu") {  // asked for: run it, but say what it costs before it starts
    std::fprintf(stderr,
                 "nibble calibrate: --path cpu at %s: the fp64 oracle is %.3g multiply-adds (%s), %.3g times the most "
                 "--path auto runs on the CPU (%.3g, minutes): expect a long run; a GPU does it in seconds\n",
                 opt.config.c_str(), macs, breakdown.c_str(), macs / kAutoCpuOracleMaxMacs, kAutoCpuOracleMaxMacs);
    return false;
  }
  std::fprintf(stderr,
               "nibble calibrate: no usable GPU, and the fp64 CPU oracle at %s is %.3g multiply-adds (%s), far beyond "
               "what --path auto runs on the CPU (%.3g); run it on a GPU, %sor pass --path cpu to run the oracle anyway\n",
               opt.config.c_str(), macs, breakdown.c_str(), kAutoCpuOracleMaxMacs,
               instead.empty() ? "" : (instead + " here, ").c_str());
  return true;
}

int calibrate_main(const CalibrateOptions& opt) {
  const auto t_start = std::chrono::steady_clock::now();
  const Log log{opt.quiet, isatty(STDERR_FILENO) != 0};
  nlohmann::ordered_json device_choice;
  const Task* task = checked_task("calibrate", opt.task, opt.config, [&] {
    check_calibrate_options(opt);
    device_choice = select_device(opt.device);
  });
  if (!task) return 2;
  const std::string& config = opt.config;
  const double gate = task->gate(config);
  const std::optional<double> guard = task->element_guard(config);
  const std::string reference = bundled_reference(self_exe(), *task, opt.reference);

  json report = document_header("nibble.calibration", opt.argv, task->name(), config);
  report["seeds"] = opt.seeds;
  report["gate"] = gate;

  // GPU when one answers (or is demanded); the fp64 oracle otherwise.
  json device;
  SandboxSpec sandbox;  // every child's; the probe may find layers the driver cannot work in
  // What every GPU child runs, pinned by content before the first (as a grade does).
  BinaryPins pins;
  const bool have_reference = fs::exists(reference);
  try {
    pins.pin("nibble", self_exe());
    if (have_reference) pins.pin("reference", reference);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "nibble calibrate: the grader's own binaries cannot be read (%s)\n", e.what());
    return 3;
  }
  const std::string path = calibration_path(opt.path, log, &device, &sandbox, &pins);
  if (path.empty()) return 2;
  if (path == "gpu" && !have_reference) {
    std::fprintf(stderr, "nibble calibrate: the reference %s does not exist; build the project (scripts/test.sh) or pass --reference\n",
                 reference.c_str());
    return 3;
  }
  // `auto` found no GPU: fall back on the fp64 oracle silently only where that is minutes at most.
  const double macs = task->oracle_macs(config) * double(opt.seeds.size());
  std::string instead = "fewer seeds";  // or an official config the oracle runs in minutes
  for (const std::string& c : task->official_configs())
    if (task->oracle_macs(c) * double(opt.seeds.size()) <= kAutoCpuOracleMaxMacs) {
      instead = "--config " + c;
      break;
    }
  if (refuse_slow_cpu_oracle(opt, path, macs, fmt(task->oracle_macs(config)) + " per seed x " + std::to_string(opt.seeds.size()) + " seeds",
                             instead))
    return 2;
  report["path"] = path == "gpu" ? "gpu: bundled reference .so per variant, child processes" : "cpu: fp64 oracle per variant";
  if (path == "gpu") {
    report["device"] = device;
    for (const auto& [k, v] : device_choice.items()) report["device"][k] = v;
    report["binaries"] = pins.to_json();  // re-hashed before every child
  }

  const auto variants = task->variants();
  const auto outputs = task->outputs();
  // errs[variant][seed][output]: worst relative error over the checked calls; elems: the same for
  // the element error (max |out - ref| / max |ref|), the measure a per-element guard bounds.
  std::vector<std::vector<std::map<std::string, double>>> errs(variants.size()), elems(variants.size());
  json fixtures = json::array();
  for (uint64_t seed : opt.seeds) {
    std::string dir;
    FixtureManifest m;
    try {
      if (!opt.fixture_dir.empty() && opt.seeds.size() != 1)
        throw std::invalid_argument("--fixture names one fixture, so give exactly one seed with --seeds");
      fixtures.push_back(ensure_fixture(*task, config, seed, opt.fixture_dir, opt.threads, true, log, &dir, &m));
    } catch (const std::exception& e) {
      std::fprintf(stderr, "nibble calibrate: fixture: %s\n", e.what());
      return 2;
    }
    if (path == "cpu") {
      log("seed " + std::to_string(seed) + ": fp64 oracle, " + std::to_string(variants.size()) + " variants");
      try {
        const SafetensorsFile f(dir + "/model.safetensors");
        const int threads = opt.threads > 0 ? opt.threads : int(std::max(1u, std::thread::hardware_concurrency()));
        const OracleErrors e = task->oracle_errors(config, f, seed, threads);
        for (size_t v = 0; v < variants.size(); ++v) {
          std::map<std::string, double> by, el;
          for (size_t o = 0; o < e.outputs.size(); ++o) {
            by[e.outputs[o]] = e.per_variant[v][o];
            el[e.outputs[o]] = e.elem_per_variant[v][o];
          }
          errs[v].push_back(by);
          elems[v].push_back(el);
        }
      } catch (const std::exception& e) {
        std::fprintf(stderr, "nibble calibrate: oracle: %s\n", e.what());
        return 3;
      }
      continue;
    }
    Job job;
    job.task = task->name();
    job.config = config;
    job.solution = reference;
    job.fixture_dir = dir;
    job.checked_calls = task->checked_calls(config);
    job.check_seed = seed;
    job.police = false;
    job.sandbox = sandbox;
    std::vector<std::string> names;
    for (const auto& v : variants) names.push_back(v.name);
    log("seed " + std::to_string(seed) + ": the reference and " + std::to_string(names.size()) + " variants");
    try {
      const bool ran = run_variant_children(job, names, opt.timeout_seconds, log,
                                            [&](size_t i, const ChildRun& var, const ChildRun& exact) {
                                              const SafetensorsFile vf(var.outputs->path()), ef(exact.outputs->path());
                                              ErrorTally t;
                                              compare_outputs(vf, ef, "call", t);
                                              errs[i].push_back(t.by_output);
                                              elems[i].push_back(t.elem_by_output);
                                            },
                                            &pins);
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
  char line[2048];
  o << "\nnibble calibrate  " << task->name() << " / " << config << "  ("
    << (path == "gpu" ? device.value("name", std::string("GPU")) : std::string("fp64 CPU oracle")) << "), gate " << fmt(gate)
    << ", worst over " << task->checked_calls(config) << " checked calls of every output\n\n";
  // The header uses the rows' own widths, so the columns line up for any number of seeds.
  std::snprintf(line, sizeof line, "  %-22s %-6s", "variant", "expect");
  std::string hdr = line;
  for (uint64_t s : opt.seeds) {
    std::snprintf(line, sizeof line, "  %-9s", ("seed " + std::to_string(s)).c_str());
    hdr += line;
  }
  // "caught by" as wide as its longest entry: every output and the per-element guard.
  std::string all_caught;
  for (const std::string& name : outputs) all_caught += (all_caught.empty() ? "" : "+") + name;
  const int caught_width = int(std::max<size_t>(all_caught.size() + std::string("+element_guard").size(), 9));
  std::snprintf(line, sizeof line, "  %-9s %-8s %-9s %-*s %s", "worst", "x gate", "element", caught_width, "caught by", "verdict");
  hdr += line;
  o << hdr << "\n  " << std::string(hdr.size() - 2, '-') << "\n";
  for (size_t i = 0; i < variants.size(); ++i) {
    const auto& v = variants[i];
    double worst = 0, worst_elem = 0;
    std::map<std::string, double> worst_by;
    json per_seed = json::array();
    std::string seeds_cells;
    for (size_t s = 0; s < opt.seeds.size(); ++s) {
      double w = 0;
      json by = json::object();
      for (const auto& [name, e] : errs[i][s]) {
        w = nan_max(w, e);
        by[name] = num_or_null(e);
        worst_by[name] = worst_by.count(name) ? nan_max(worst_by[name], e) : e;
      }
      double we = 0;
      for (const auto& [name, e] : elems[i][s]) we = nan_max(we, e);
      worst_elem = nan_max(worst_elem, we);
      per_seed.push_back({{"seed", opt.seeds[s]}, {"worst", num_or_null(w)}, {"by_output", by}, {"worst_elem", num_or_null(we)}});
      worst = nan_max(worst, w);
      std::snprintf(line, sizeof line, "  %-9s", cell(w).c_str());
      seeds_cells += line;
    }
    // Verdict as the grader would give it (the gate, then the per-element guard); health demands a
    // factor-2 margin on the right side of each: a must-pass row under half of both, a must-fail row
    // at least twice either.
    const bool within_guard = !guard || (!std::isnan(worst_elem) && worst_elem <= *guard);
    const bool passes = !std::isnan(worst) && worst < gate && within_guard;
    // A dropped feature whose outputs are the exact reference's at this config (K one group: no
    // g_idx to ignore, no second scale to confuse) has nothing to catch here: not applicable, and no
    // sign of a weak gate (a small custom shape was "NOT OK" for it).
    const bool no_effect = !v.must_pass && worst == 0 && worst_elem == 0;
    const bool ok = no_effect || (v.must_pass ? (!std::isnan(worst) && worst <= gate / 2 && (!guard || worst_elem <= *guard / 2))
                                              : (std::isnan(worst) || worst >= 2 * gate || (guard && !(worst_elem < 2 * *guard))));
    healthy = healthy && ok;
    // Which outputs actually reject it.
    std::string caught;
    json worst_by_j = json::object();
    for (const std::string& name : outputs) {
      if (!worst_by.count(name)) continue;
      worst_by_j[name] = num_or_null(worst_by[name]);
      if (!v.must_pass && !(worst_by[name] < gate)) caught += (caught.empty() ? "" : "+") + name;
    }
    if (!v.must_pass && !within_guard) caught += (caught.empty() ? "" : "+") + std::string("element_guard");
    if (v.must_pass) caught = "-";
    else if (caught.empty()) caught = "none";
    std::snprintf(line, sizeof line, "  %-22s %-6s%s  %-9s %-8s %-9s %-*s %s%s\n", v.name.c_str(), v.must_pass ? "PASS" : "FAIL",
                  seeds_cells.c_str(), cell(worst).c_str(), cell(worst / gate).c_str(), cell(worst_elem).c_str(), caught_width,
                  caught.c_str(),
                  passes ? "PASS" : "FAIL", no_effect ? "  (no effect at this config: not applicable)" : ok ? "" : "  <-- margin below 2x");
    o << line;
    rows.push_back({{"variant", v.name},
                    {"description", v.description},
                    {"expected", v.must_pass ? "PASS" : "FAIL"},
                    {"per_seed", per_seed},
                    {"worst", num_or_null(worst)},
                    {"worst_by_output", worst_by_j},
                    {"ratio_to_gate", num_or_null(worst / gate)},
                    {"worst_elem", num_or_null(worst_elem)},
                    {"verdict", passes ? "PASS" : "FAIL"},
                    {"caught_by", caught},
                    {"expected_caught_by", v.caught_by},
                    {"applicable", !no_effect},
                    {"healthy", ok}});
  }
  o << "\n  gate health: " << (healthy ? "OK" : "NOT OK")
    << (guard ? " (must-pass rows at most half the gate and half the per-element guard " + fmt(*guard) +
                    ", must-fail rows at least twice either)\n"
              : std::string(" (must-pass rows at most half the gate, must-fail rows at least twice it; no per-element guard)\n"));
  report["rows"] = rows;
  report["healthy"] = healthy;
  report["element_guard"] = guard ? json(*guard) : json(nullptr);
  report["health_rule"] = "every must-pass variant <= gate/2 (and its element error <= guard/2) and every must-fail variant "
                          ">= 2*gate or its element error >= 2*guard (worst over calls, seeds and outputs); a must-fail variant whose "
                          "outputs equal the exact reference's at this config is not applicable (applicable: false) and not counted";
  report["wall_seconds"] = since(t_start);
  try {
    write_file_atomic(opt.out, json_text(report, 2) + "\n");
  } catch (const std::exception& e) {
    std::fprintf(stderr, "nibble calibrate: %s\n", e.what());
    return 3;
  }
  o << "  report: " << opt.out << "  (" << fmt(since(t_start), 3) << " s)\n";
  summary_stream(opt.out) << o.str() << std::flush;
  return healthy ? 0 : 1;
}

}  // namespace nibble
