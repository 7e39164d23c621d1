// grade_common.cpp: see grade_common.h.
#include "harness/grade_common.h"

#include <cmath>
#include <ctime>
#include <filesystem>

#include "fixtures/fixture.h"
#include "fixtures/rng.h"
#include "fixtures/safetensors.h"
#include "harness/atomic_file.h"
#include "harness/grade.h"
#include "harness/provenance.h"
#include "harness/stats.h"

namespace nibble {

namespace fs = std::filesystem;
using json = nlohmann::ordered_json;

double since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

ChildRun run_child_in(const std::vector<std::string>& argv, const std::string& dir, double timeout, const Log* log,
                      const std::string& what) {
  fs::create_directories(dir);
  ChildRun r;
  std::function<void(double)> tick;
  if (log) tick = [&](double s) { log->progress(what + "  " + fmt(s, 3) + " s"); };
  r.exit = run_child(argv, dir + "/log.txt", timeout, tick);
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
    if (kind == "timeout") return {kTimedOut, msg};
    if (kind == "input_modified") return {kIncorrect, msg};
    if (kind == "solution" && e.value("status", "") == "NOT_SUPPORTED") return {kNotSupported, msg};
    if (kind == "solution") return {kCrashed, msg};
    if (kind == "cuda") return {kCrashed, "CUDA error after a solution call: " + msg};
    return {kCrashed, "harness error in the candidate's process: " + msg};
  }
  if (c.exit.kind == ChildExit::Signaled)
    return {kCrashed, "the candidate's process was " + c.exit.describe() + " (phase reached: " +
                          c.result.value("phase", std::string("start")) + ")"};
  return {kCrashed, "the candidate's process ended (" + c.exit.describe() + ") during phase '" +
                        (c.result.is_object() ? c.result.value("phase", std::string("start")) : std::string("start")) +
                        "', before the grade finished: a solution must not end the process"};
}

/** The fixture for (config, seed): given, cached, or built now. */
json ensure_fixture(const DecodeConfig& cfg, uint64_t seed, const std::string& given_dir, int threads, bool verify,
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
    m = build_decode_fixture(cfg, seed, dir, threads, [&](const std::string& phase, double f) {
      log.progress(phase + "  " + fmt(100 * f, 3) + "%");
    });
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
    if (verify) {
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
  j["verified"] = verify || !have;
  return j;
}

/** Errors of the candidate's checked steps against the reference's, for one seed. */
json compare_outputs(const DecodeConfig& cfg, const std::string& ref_file, const std::string& cand_file, double* worst,
                     bool* all_finite_out, double* worst_logits, double* worst_kv) {
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
    auto acc = [](double* w, double e) {
      if (w) *w = std::isnan(e) || std::isnan(*w) ? NAN : std::max(*w, e);
    };
    acc(worst, err);
    acc(worst, kv);
    acc(worst_logits, err);
    acc(worst_kv, kv);
    steps.push_back({{"step", s}, {"pos", cfg.prefill + s}, {"logits_rel_err", std::isnan(err) ? json(nullptr) : json(err)},
                     {"kv_appended_rel_err", std::isnan(kv) ? json(nullptr) : json(kv)}, {"finite", finite}});
  }
  return steps;
}

std::string fmt(double v, int prec) {
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


json document_header(const std::string& schema, const std::vector<std::string>& argv, const std::string& task,
                     const std::string& config) {
  json j;
  j["schema"] = schema;
  j["schema_version"] = "1.0.0";
  j["nibble_version"] = NIBBLE_VERSION;
  j["created_utc"] = utc_now();
  j["argv"] = argv;
  j["git"] = git_provenance();
  j["host"] = host_provenance();
  j["task"] = task;
  j["config"] = config;
  return j;
}

std::string bundled_reference(const std::string& exe, const std::string& given) {
  return given.empty() ? (fs::path(exe).parent_path().parent_path() / "lib" / "libnibble_reference.so").string() : given;
}

void check_solution_file(const std::string& path) {
  if (path.empty()) throw std::invalid_argument("--solution is required");
  if (!fs::exists(path)) throw std::invalid_argument("solution '" + path + "' does not exist; pass the path of a built .so");
  char magic[4] = {};
  FILE* f = std::fopen(path.c_str(), "rb");
  const bool elf = f && std::fread(magic, 1, 4, f) == 4 && magic[0] == 0x7f && magic[1] == 'E' && magic[2] == 'L' && magic[3] == 'F';
  if (f) std::fclose(f);
  if (!elf)
    throw std::invalid_argument("solution '" + path + "' is not a shared object (no ELF header); build it with nvcc -shared -fPIC");
}

void check_writable(const std::string& path) {
  write_file_atomic(path + ".nibble-probe", "");
  fs::remove(path + ".nibble-probe");
}

}  // namespace nibble
