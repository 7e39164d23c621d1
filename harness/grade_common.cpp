// grade_common.cpp: see grade_common.h.
#include "harness/grade_common.h"
#include "harness/python_solution.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <cerrno>
#include <ctime>
#include <filesystem>
#include <sstream>

#include "fixtures/fixture.h"
#include "fixtures/rng.h"
#include "fixtures/safetensors.h"
#include "fixtures/sha256.h"
#include "harness/atomic_file.h"
#include "harness/calibrate.h"
#include "harness/child.h"
#include "harness/grade.h"
#include "harness/ledger.h"
#include "harness/provenance.h"
#include "harness/stats.h"
#include "harness/task.h"

namespace nibble {

namespace fs = std::filesystem;
using json = nlohmann::ordered_json;

double since(std::chrono::steady_clock::time_point t0) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
}

Channel::Channel(const std::string& name) : fd_(make_channel(name)) {}
Channel::~Channel() { ::close(fd_); }
bool Channel::empty() const { return ::lseek(fd_, 0, SEEK_END) <= 0; }

std::string ChildRun::describe_failure() const {
  if (result && result->error) return result->error->message;
  return exit.describe() + (log_tail.empty() ? "" : "\n" + log_tail);
}

void BinaryPins::pin(const std::string& what, const std::string& path) {
  pins_.push_back({what, path, sha256_file_hex(path)});
}

std::string BinaryPins::changed() const {
  for (const Pin& p : pins_) {
    std::string now;
    try {
      now = sha256_file_hex(p.path);
    } catch (const std::exception& e) {
      return p.what + " " + p.path + " is no longer readable (" + e.what() + ") since the grade began";
    }
    if (now != p.sha256)
      return p.what + " " + p.path + " changed since the grade began (SHA-256 " + p.sha256 + ", now " + now + ")";
  }
  return "";
}

std::string BinaryPins::sha256(const std::string& path) const {
  for (const Pin& p : pins_)
    if (p.path == path) return p.sha256;
  return "";
}

json BinaryPins::to_json() const {
  json j = json::object();
  for (const Pin& p : pins_) j[p.what] = {{"path", p.path}, {"sha256", p.sha256}};
  return j;
}

namespace {
/** CUDA_VISIBLE_DEVICES's entries, in order ("" lists none). */
std::vector<std::string> visible_list(const char* env) {
  std::vector<std::string> listed;
  std::stringstream ss(env);
  for (std::string e; std::getline(ss, e, ',');) listed.push_back(e);
  return listed;
}
}  // namespace

int visible_device_count(std::string* why) {
  if (const char* env = std::getenv("CUDA_VISIBLE_DEVICES")) {
    const int n = int(visible_list(env).size());
    if (n == 0 && why) *why = "CUDA_VISIBLE_DEVICES is set and lists none";
    return n;
  }
  return NvmlDevice::device_count(why);
}

std::string device_number_problem(int device, int n) {
  if (device < n) return "";
  if (const char* env = std::getenv("CUDA_VISIBLE_DEVICES"))
    return "CUDA_VISIBLE_DEVICES=" + std::string(env) + " lists " + std::to_string(n) + " GPU(s), numbered from 0";
  return n > 0 ? "this host has " + std::to_string(n) + " GPU(s), numbered from 0 (nvidia-smi -L lists them)" : "";
}

nlohmann::ordered_json select_device(int device) {
  nlohmann::ordered_json d = {{"index", device < 0 ? 0 : device}};
  const char* env = std::getenv("CUDA_VISIBLE_DEVICES");
  if (device < 0) {
    d["cuda_visible_devices"] = env ? json(env) : json(nullptr);
    return d;
  }
  if (const std::string p = device_number_problem(device, visible_device_count()); !p.empty())
    throw std::invalid_argument("--device " + std::to_string(device) + ": " + p);
  const std::vector<std::string> listed = env ? visible_list(env) : std::vector<std::string>{};
  const std::string pick = env ? listed[size_t(device)] : std::to_string(device);
  // nvidia-smi (and NVML) number GPUs in PCI bus order; CUDA by default puts the fastest first.
  if (!std::getenv("CUDA_DEVICE_ORDER")) setenv("CUDA_DEVICE_ORDER", "PCI_BUS_ID", 1);
  setenv("CUDA_VISIBLE_DEVICES", pick.c_str(), 1);
  d["cuda_visible_devices"] = pick;
  return d;
}

nlohmann::ordered_json device_at_start(const std::string& uuid) {
  nlohmann::ordered_json d = nlohmann::ordered_json::object();
  const NvmlDevice nv(uuid);
  if (!nv.available()) {
    d["nvml"] = nv.why();
    return d;
  }
  LedgerCall c;
  nv.sample(c);
  d["sm_mhz"] = c.sm_mhz;
  d["memory_mhz"] = c.mem_mhz;
  nlohmann::ordered_json others = nlohmann::ordered_json::array();
  for (const GpuProcess& p : nv.compute_processes())
    if (p.pid != unsigned(getpid())) others.push_back({{"pid", p.pid}, {"used_memory_bytes", p.used_memory_bytes}});
  d["other_processes"] = others;
  return d;
}

ChildRun run_job_child(Job job, double timeout, const Log* log, const std::string& what, const BinaryPins* pins,
                       const std::vector<std::string>& wrapper) {
  ChildRun r;
  if (pins) {
    r.refused = pins->changed();
    if (!r.refused.empty()) {
      r.exit.kind = ChildExit::SpawnFailed;
      r.log_tail = "not started: " + r.refused;
      return r;
    }
  }
  try {
    // The child's stdout and stderr go to a memory file too: the grader writes nothing on disk for a
    // child, so nothing a candidate puts in a folder can stand in the way of a grade.
    Channel job_ch("job"), result_ch("result"), log_ch("log");
    r.outputs = std::make_shared<Channel>("outputs");
    r.timed_outputs = std::make_shared<Channel>("timed-outputs");
    job.result_fd = result_ch.fd();
    job.outputs_fd = r.outputs->fd();
    job.timed_outputs_fd = r.timed_outputs->fd();
    std::vector<int> fds = {job_ch.fd(), result_ch.fd(), r.outputs->fd(), r.timed_outputs->fd()};
    if (job.timing) {
      r.ledger = std::make_shared<CallLedger>(job.timing->calls_per_round, job.timing->kept_per_round, job.timing->seed,
                                              job.timing->gpu_uuid);
      job.ledger_read_fd = r.ledger->child_read_fd();
      job.ledger_write_fd = r.ledger->child_write_fd();
      fds.insert(fds.end(), {job.ledger_read_fd, job.ledger_write_fd});
    }
    write_channel(job_ch.fd(), nlohmann::json(job).dump());
    std::function<void(double)> tick;
    if (log) tick = [&](double sec) { log->progress(what + "  " + fmt(sec, 3) + " s"); };
    std::vector<std::string> argv = wrapper;
    argv.insert(argv.end(), {self_exe(), "__child", std::to_string(job_ch.fd())});
    r.exit = run_child(argv, log_ch.path(), timeout, tick, fds);
    if (r.ledger) r.ledger->finish();
    r.log_tail = file_tail(log_ch.path(), 3000);
    try {
      r.result = parse_child_result(read_channel(result_ch.fd()));
    } catch (const std::exception&) {
      r.result.reset();  // nothing readable: the child died before its first phase, or wrote garbage
    }
  } catch (const std::exception& e) {
    if (r.ledger) r.ledger->finish();
    r.exit.kind = ChildExit::SpawnFailed;
    r.log_tail = std::string("the grader could not start the child: ") + e.what();
  }
  return r;
}

const Task* checked_task(const char* command, const std::string& task, const std::string& config,
                         const std::function<void()>& check_options) {
  try {
    const Task& t = find_task(task);
    t.check_config(config);
    check_options();
    return &t;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "nibble %s: %s\n", command, e.what());
    return nullptr;
  }
}

std::string crash_site(const ChildExit& exit, const std::string& log_tail) {
  // Only the signals the child's handler writes frames for: a marker before any other end is the
  // solution's own text.
  if (exit.kind != ChildExit::Signaled ||
      std::find(std::begin(kCrashSignals), std::end(kCrashSignals), exit.code) == std::end(kCrashSignals))
    return "";
  const size_t m = log_tail.rfind(kCrashFramesMarker);
  if (m == std::string::npos) return "";
  // The first frame outside libc: an abort() or raise() starts in libc's pthread_kill, whoever called it.
  std::string frame;
  for (size_t from = log_tail.find('\n', m); from != std::string::npos && from + 1 < log_tail.size();
       from = log_tail.find('\n', from + 1)) {
    const std::string line = log_tail.substr(from + 1, log_tail.find('\n', from + 1) - from - 1);
    if (line.empty()) break;
    if (frame.empty()) frame = line;  // all in libc: the first
    if (line.find("/libc.so") == std::string::npos) {
      frame = line;
      break;
    }
  }
  // "/lib/x.so(sym+0x1f) [0x7f...]": the absolute address says nothing across runs (ASLR).
  if (const size_t b = frame.rfind('['); b != std::string::npos && b > 0) frame.resize(frame[b - 1] == ' ' ? b - 1 : b);
  // The child's stderr is the solution's too: what it wrote there reaches the reason only as plain text.
  if (frame.size() > 300) frame = frame.substr(0, 300) + "...";
  for (char& ch : frame)
    if (static_cast<unsigned char>(ch) < 0x20 || ch == 0x7f) ch = '?';
  return frame;
}

void child_evidence(const ChildRun& c, const Task& task, Evidence* e) {
  if (c.completed()) {
    e->end = ChildEnd::Completed;
    return;
  }
  // A violation is why the child's next wait on the ledger failed: its cause, told in the verdict.
  if (c.ledger) e->ledger_violation = c.ledger->violation();
  const std::string phase = c.phase();
  if (c.exit.kind == ChildExit::TimedOut) {
    e->end = ChildEnd::TimedOut;
    e->end_message = "the candidate's process " + c.exit.describe() + " (phase reached: " + phase + ")";
    e->failed_in_build = phase == "start" || phase == "opened";
    return;
  }
  if (phase == "done") {
    // Sealed before the solution's teardown (harness/child.cpp): the teardown, or the session's end
    // after it, failed, hung (the watchdog) or ended the process. The error went to stderr only.
    std::string said;
    if (const size_t at = c.log_tail.rfind("nibble child: "); at != std::string::npos)
      said = c.log_tail.substr(at, c.log_tail.find('\n', at) - at);
    e->end = said.find(std::string(" ") + kErrTimeout + " error") != std::string::npos ? ChildEnd::CallTimedOut
             : c.exit.kind == ChildExit::Signaled                                       ? ChildEnd::Died
                                                                                        : ChildEnd::CallFailed;
    const std::string at = c.exit.kind == ChildExit::Signaled ? crash_site(c.exit, c.log_tail) : "";
    e->end_message = "the candidate's process ended (" + c.exit.describe() + ") in its teardown, after its results were sealed" +
                     (at.empty() ? "" : ", at " + at + " (its frames: the report's solution.log_tail)") +
                     (said.empty() ? std::string() : ": " + said);
    return;
  }
  if (c.result && c.result->error) {
    const ChildError& err = *c.result->error;
    e->end_message = err.message;
    e->failed_in_build = err.call == task.build_call();
    if (err.kind == "load") {
      e->end = ChildEnd::LoadFailed;
      e->load_kind = err.load_kind;
    } else if (err.kind == "timeout") {
      e->end = ChildEnd::CallTimedOut;
    } else if (err.kind == "input_modified") {
      e->end = ChildEnd::InputModified;
    } else if (err.kind == "solution") {
      e->end = ChildEnd::CallFailed;
      e->call_status = err.status;
    } else if (err.kind == "cuda") {
      e->end = ChildEnd::CudaError;
    } else {
      e->end = ChildEnd::HarnessError;
    }
    return;
  }
  e->end = ChildEnd::Died;
  if (c.exit.kind == ChildExit::Signaled) {
    const std::string at = crash_site(c.exit, c.log_tail);
    e->end_message = "the candidate's process was " + c.exit.describe() + " (phase reached: " + phase + ")" +
                     (at.empty() ? "" : ", at " + at + " (its frames: the report's solution.log_tail)");
  }
  else
    e->end_message = "the candidate's process ended (" + c.exit.describe() + ") during phase '" + phase +
                     "', before the grade finished: a solution must not end the process";
}

std::string fixture_trust(const Task& task, const std::string& config, uint64_t seed, const std::string& dir,
                          const std::string& given_dir, const FixtureManifest& m, bool verified, bool built_now, int threads,
                          const Log& log, ordered_json* entry) {
  const std::string which = task.name() + " / " + config + " seed " + std::to_string(seed);
  auto changed = [&](const std::string& what) {
    return std::invalid_argument("fixture " + dir + " (" + which + ") " + what + ": its bytes were changed; remove it and " +
                                 "rebuild it with `" + fixture_build_command(task.name(), config, seed, given_dir) + "`");
  };
  // An imported fixture (nibble fixture import) has no seed to rebuild it from: it is trusted as the
  // folder the user named, its file checked against its own manifest; never as a cache entry, which
  // would stand in for the seed's generated fixture.
  if (m.imported()) {
    if (given_dir.empty())
      throw std::invalid_argument("the cached fixture " + dir + " (" + which + ") says it was imported (" +
                                  m.source.value("format", std::string("?")) + " checkpoint): the cache holds only "
                                  "fixtures generated from their seed; remove it, and pass an imported fixture with --fixture");
    const std::string from = m.source.value("format", std::string("?")) + " checkpoint " +
                             m.source.value("checkpoint", std::string("?")) + " (SHA-256 " +
                             m.source.value("checkpoint_sha256", std::string("?")) + ")";
    return verified ? "imported from a " + from + ": the file's SHA-256, recomputed, is its manifest's (an imported fixture "
                      "cannot be rebuilt from a seed)"
                    : "imported from a " + from + ", unverified (--no-verify-fixture)";
  }
  // A fixture whose (task, config, seed) the source pins must be those bytes, whatever its
  // manifest says (a cache someone rewrote, manifest and all, is refused, not used).
  if (const std::optional<std::string> pinned = task.pinned_fixture_sha256(config, seed)) {
    if (m.file_sha256 != *pinned)
      throw changed("has SHA-256 " + m.file_sha256 + ", not " + *pinned + ", which the generator makes and the source pins");
    return built_now || verified
               ? "pinned: the file's SHA-256, recomputed, is the one the source pins"
               : "pinned, unverified: the manifest's SHA-256 is the one the source pins (--no-verify-fixture)";
  }
  if (built_now) return "built: no SHA-256 pinned for this config and seed; this command's generator made the file";
  if (!verified)
    return "manifest, unverified: no SHA-256 pinned for this config and seed, and --no-verify-fixture skips both the "
           "re-hash and the rebuild-and-compare";
  // No pin: the generator is run again, in memory, and its bytes' SHA-256 compared with the file's
  // (just recomputed against the manifest). As costly as building the fixture, less the write; no
  // file is made, so there is nothing to remove on any path.
  log("rebuilding fixture " + config + " seed " + std::to_string(seed) + " in memory to compare with " + dir +
      " (no SHA-256 pinned for it)");
  const auto t0 = std::chrono::steady_clock::now();
  const FixtureManifest g = task.generate_fixture_manifest(config, seed, threads, [&](const std::string& phase, double f) {
    log.progress("rebuild: " + phase + "  " + fmt(100 * f, 3) + "%");
  });
  (*entry)["rebuild_seconds"] = since(t0);
  if (g.file_sha256 != m.file_sha256 || g.file_bytes != m.file_bytes)
    throw changed("has " + std::to_string(m.file_bytes) + " bytes and SHA-256 " + m.file_sha256 + ", but the generator, rerun now, makes " +
                  std::to_string(g.file_bytes) + " bytes and SHA-256 " + g.file_sha256 +
                  " (no SHA-256 is pinned for this config and seed, so it was rebuilt in memory and compared" +
                  tensors_that_differ((fs::path(dir) / m.file).string(), g.tensor_sha256) + ")");
  return "rebuilt and compared: no SHA-256 pinned for this config and seed; the generator, rerun in memory (as costly as "
         "building it, less the write), makes the file's SHA-256, recomputed";
}

json ensure_fixture(const Task& task, const std::string& config, uint64_t seed, const std::string& given_dir, int threads,
                    bool verify, const Log& log, std::string* dir_out, FixtureManifest* manifest_out) {
  const std::string dir = given_dir.empty() ? made_cache_fixture_dir(task.name(), config, seed) : given_dir;
  *dir_out = dir;
  json j;
  j["seed"] = seed;
  j["dir"] = dir;
  // One process at a time checks and builds a folder (FolderLock); the cache's folder is made
  // for its lock (made_cache_fixture_dir), a given folder is never made here.
  std::error_code ec;
  // A given folder without a fixture is refused before the lock leaves its file there; one that has
  // a lock file may be another nibble's build under way: wait for it, then judge.
  if (!given_dir.empty() && !fs::exists(fs::path(dir) / kFolderLockFile, ec))
    (void)fixture_present(dir, task.name(), config, seed, true);
  const FolderLock lock(dir, [&] { log("waiting for another nibble building " + dir); });
  const bool have = fixture_present(dir, task.name(), config, seed, !given_dir.empty());
  FixtureManifest m;
  if (!have) {
    log("building fixture " + config + " seed " + std::to_string(seed) + " into " + dir);
    const auto t0 = std::chrono::steady_clock::now();
    m = task.build_fixture(config, seed, dir, threads, [&](const std::string& phase, double f) {
      log.progress(phase + "  " + fmt(100 * f, 3) + "%");
    });
    j["built_now"] = true;
    j["build_seconds"] = since(t0);
  } else {
    if (verify) log("verifying fixture " + dir + " (SHA-256)");
    const auto t0 = std::chrono::steady_clock::now();
    m = check_fixture(dir, task.name(), config, seed, task.tensors(config), verify);
    if (verify) j["verify_seconds"] = since(t0);
    j["built_now"] = false;
  }
  j["generator_version"] = m.generator_version;
  j["file_sha256"] = m.file_sha256;
  j["file_bytes"] = m.file_bytes;
  j["verified"] = verify || !have;
  j["trust"] = fixture_trust(task, config, seed, dir, given_dir, m, verify, !have, threads, log, &j);
  if (m.imported()) j["source"] = m.source;
  *manifest_out = m;
  return j;
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
  j["environment"] = nibble_environment();
  j["task"] = task;
  j["config"] = config;
  return j;
}

std::string bundled_reference(const std::string& exe, const Task& task, const std::string& given) {
  return given.empty() ? (fs::path(exe).parent_path().parent_path() / "lib" / task.reference_library()).string() : given;
}

namespace {

/** Whether the file starts with the ELF magic (a shared object's first check, before dlopen). */
bool has_elf_header(const std::string& path) {
  char magic[4] = {};
  FILE* f = std::fopen(path.c_str(), "rb");
  const bool elf = f && std::fread(magic, 1, 4, f) == 4 && magic[0] == 0x7f && magic[1] == 'E' && magic[2] == 'L' && magic[3] == 'F';
  if (f) std::fclose(f);
  return elf;
}

/** A library the user named (`what`: how the messages name it): it exists and is a file (`fix`:
 *  what to pass instead), and, unless `python_ok` and it is a Python module, it has an ELF header
 *  (`build`: how to make one). Throws std::invalid_argument. */
void check_library_file(const std::string& path, const std::string& what, const std::string& fix, const std::string& build,
                        bool python_ok) {
  if (!fs::exists(path)) throw std::invalid_argument(what + " does not exist; " + fix);
  if (!fs::is_regular_file(path)) throw std::invalid_argument(what + " is not a file (a folder?); " + fix);
  if (python_ok && is_python_solution(path)) {
    if (!python_shims_built()) check_python_grade("");  // says which package the build lacked
    return;
  }
  if (!has_elf_header(path)) throw std::invalid_argument(what + " is not a shared object (no ELF header)" + build);
}

/** An option's time limit, s: positive and at most kMaxTimeoutSeconds. Throws std::invalid_argument. */
void check_time_limit(const std::string& option, double v) {
  if (!(v > 0 && v <= kMaxTimeoutSeconds))
    throw std::invalid_argument(option + " must be a positive number of seconds, at most " + fmt(kMaxTimeoutSeconds, 6) +
                                ", not " + fmt(v, 6));
}

}  // namespace

void check_solution_file(const std::string& path) {
  if (path.empty()) throw std::invalid_argument("--solution is required");
  check_library_file(path, "solution '" + path + "'", "pass the path of a built .so or of a Python module (.py)",
                     "; build it with nvcc -shared -fPIC", /*python_ok=*/true);
}

void check_reference_file(const std::string& path) {
  check_library_file(path, "--reference " + path,
                     "pass a built reference library (build/lib/libnibble_reference.so or the task's), or leave --reference "
                     "out for the bundled one",
                     "", /*python_ok=*/false);
}

namespace {

/** The folders above `p` (p itself included when `self`) that do not exist yet, deepest first: what
 *  a probe creates and must remove again, so a check that fails, or a run refused later, leaves
 *  nothing behind. */
std::vector<fs::path> missing_folders(const std::string& p, bool self) {
  std::vector<fs::path> v;
  std::error_code ec;
  fs::path f = fs::absolute(p, ec);
  if (!self) f = f.parent_path();
  for (; !f.empty() && f != f.root_path() && !fs::exists(f, ec); f = f.parent_path()) v.push_back(f);
  return v;
}

void remove_folders(const std::vector<fs::path>& v) {
  std::error_code ec;
  for (const fs::path& f : v) fs::remove(f, ec);  // deepest first; a folder something else filled stays
}

using NamedPaths = std::vector<std::pair<std::string, std::string>>;

/** What a run reads besides its options' own files: the grader itself, the reference (given or
 *  every task's bundled one), each seed's fixture files (the given folder or the cache's). */
NamedPaths run_inputs(const std::string& reference, const std::string& fixture_dir, const std::string& task,
                      const std::string& config, const std::vector<uint64_t>& seeds) {
  NamedPaths ins{{"the grader itself", self_exe()}};
  if (!reference.empty()) {
    ins.emplace_back("--reference", reference);
  } else {  // every task's bundled reference, beside this executable
    for (const Task* t : all_tasks()) ins.emplace_back("the bundled reference", bundled_reference(self_exe(), *t, ""));
  }
  for (uint64_t seed : seeds) {
    std::string dir = fixture_dir;
    if (dir.empty()) {
      try {
        dir = default_fixture_dir(task, config, seed);
      } catch (const std::exception&) {
        continue;  // no cache folder: refused later, with its reason
      }
    }
    for (const char* f : {"model.safetensors", "manifest.json"})
      ins.emplace_back("the fixture's " + std::string(f), (fs::path(dir) / f).string());
  }
  return ins;
}

/** The outputs name different files, none of them an input: a later write would destroy the
 *  earlier one (a report under another output) or the input (the candidate .so under its own
 *  report, a fixture under a calibration table). std::invalid_argument naming both; `run`: "grade"
 *  or "calibrate". */
void check_outputs_spare_inputs(const NamedPaths& outs, const NamedPaths& ins, const std::string& run) {
  for (size_t i = 0; i < outs.size(); ++i) {
    for (size_t j = i + 1; j < outs.size(); ++j)
      if (same_output_file(outs[i].second, outs[j].second))
        throw std::invalid_argument(outs[i].first + " and " + outs[j].first + " name the same file (" + outs[i].second +
                                    "): give each output a file of its own");
    for (const auto& [what, path] : ins)
      if (same_output_file(outs[i].second, path))
        throw std::invalid_argument(outs[i].first + " " + outs[i].second + " is the " + run + "'s input (" + what +
                                    "): writing it would destroy that input; choose another " + outs[i].first);
  }
}

/** The grade's outputs (--out, --gbench-json, --history) against each other and its inputs
 *  (run_inputs, the solution, the calibration table, the --dump files). */
void check_distinct_outputs(const GradeOptions& opt) {
  NamedPaths outs{{"--out", opt.out}};
  if (!opt.gbench_json.empty()) outs.emplace_back("--gbench-json", opt.gbench_json);
  if (!opt.history.empty()) outs.emplace_back("--history", opt.history);
  NamedPaths ins = run_inputs(opt.reference, opt.fixture_dir, opt.task, opt.config, opt.seeds);
  ins.emplace_back("--solution", opt.solution);
  const std::string cal = !opt.calibration.empty() ? opt.calibration : committed_calibration(opt.task, opt.config);
  if (!cal.empty()) ins.emplace_back(opt.calibration.empty() ? "the committed calibration table" : "--calibration", cal);
  if (!opt.dump_dir.empty())
    for (uint64_t seed : opt.seeds)
      for (const char* who : {"reference", "candidate"})
        ins.emplace_back("a --dump file", (fs::path(opt.dump_dir) / ("seed" + std::to_string(seed) + "-" + who + ".safetensors")).string());
  check_outputs_spare_inputs(outs, ins, "grade");
}

}  // namespace

std::ostream& summary_stream(const std::string& out) {
  return standard_stream_fd(out) == STDOUT_FILENO ? std::cerr : std::cout;
}

void check_writable(const std::string& path) {
  check_output_name(path);
  if (const int fd = standard_stream_fd(path); fd >= 0) {
    if (fcntl(fd, F_GETFL) < 0) throw std::runtime_error(path + " is not open in this process");
    return;
  }
  // Where the write lands (a link's target, not beside the link), probed there: a pipe or device
  // must be writable, a file's folder must take a new file.
  const std::string target = write_target(path);
  std::error_code ec;
  const fs::file_status st = fs::status(target, ec);
  if (fs::exists(st) && !fs::is_regular_file(st)) {
    if (access(target.c_str(), W_OK) != 0) throw std::runtime_error("cannot write " + path + ": " + std::strerror(errno));
    return;
  }
  const std::vector<fs::path> made = missing_folders(target, false);
  // A trial file of its own in the target's folder (the atomic write's temp file goes there too):
  // a short name (a target's name may be NAME_MAX long), made new (O_EXCL: nothing there is
  // truncated, a link is not followed); its error names the path the user gave.
  const fs::path folder = fs::path(target).parent_path().empty() ? fs::path(".") : fs::path(target).parent_path();
  const std::string probe = (folder / (".nibble-probe-" + std::to_string(getpid()))).string();
  std::error_code mk;
  if (!made.empty()) fs::create_directories(folder, mk);  // as the write will
  const int fd = ::open(probe.c_str(), O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  const int err = errno;
  if (fd >= 0) {
    ::close(fd);
    ::unlink(probe.c_str());
  }
  remove_folders(made);  // the report's write creates them again, after the work
  // The error is the folder's (e.g. /proc takes no new file, though /proc/version exists): say which.
  if (fd < 0 && err != EEXIST) {
    if (!made.empty() && mk) throw std::runtime_error("cannot write " + path + ": its folder cannot be made (" + mk.message() + ")");
    if (err == ENOTDIR) throw std::runtime_error("cannot write " + path + ": a part of " + folder.string() + " is not a folder");
    throw std::runtime_error("cannot write " + path + ": its folder " + folder.string() + " does not take a new file (" +
                             std::strerror(err) + "; the write goes through a file there, renamed over it)");
  }
}

void check_grade_options(const GradeOptions& opt) {
  check_sandbox_disable_env();
  if (!opt.profile.empty() && opt.require_sandbox)
    throw std::invalid_argument("--profile runs the solution once more without the namespaces and Landlock (the profiler "
                                "needs them off), which --require-sandbox forbids: drop one of the two");
  if (!opt.profile.empty() && opt.out.rfind("/dev/", 0) == 0)
    throw std::invalid_argument("--profile stores the profile next to the report: give --out a file, not " + opt.out);
  check_solution_file(opt.solution);
  if (!opt.reference.empty()) check_reference_file(opt.reference);
  check_distinct_outputs(opt);
  if (opt.seeds.empty()) throw std::invalid_argument("--seeds needs at least one seed");
  if (!opt.fixture_dir.empty() && opt.seeds.size() != 1)
    throw std::invalid_argument("--fixture names one fixture, so give exactly one seed with --seeds");
  try {
    check_writable(opt.out);
  } catch (const std::exception& e) {
    throw std::invalid_argument(std::string("the report cannot be written: ") + e.what() + "; choose another --out");
  }
  if (!opt.gbench_json.empty()) {
    try {
      check_writable(opt.gbench_json);
    } catch (const std::exception& e) {
      throw std::invalid_argument(std::string("--gbench-json cannot be written: ") + e.what());
    }
  }
  // --history /dev/stdout appends to the stream as it is; any other history is a regular file
  // (through a link; a dangling link's target is created after the grade).
  if (!opt.history.empty() && standard_stream_fd(opt.history) < 0) {
    if (opt.history == "-") throw std::invalid_argument("--history -: for standard output give /dev/stdout");
    if (fs::is_directory(opt.history)) throw std::invalid_argument("--history " + opt.history + " is a folder; name a file");
    std::string target;
    try {
      target = write_target(opt.history);
    } catch (const std::exception& e) {
      throw std::invalid_argument("--history: " + std::string(e.what()));
    }
    std::error_code ec;
    const fs::file_status st = fs::status(target, ec);
    if (fs::exists(st) && !fs::is_regular_file(st))
      throw std::invalid_argument("--history " + opt.history +
                                  " is not a regular file (a pipe or a device): the grade appends one line to a file");
    FILE* f = std::fopen(target.c_str(), "a");
    const int err = errno;
    if (f) std::fclose(f);
    if (!fs::exists(st)) fs::remove(target, ec);  // appended to after the grade, created then
    if (!f) throw std::invalid_argument("--history " + opt.history + " cannot be appended to: " + std::strerror(err));
  }
  if (!opt.dump_dir.empty()) {
    const std::vector<fs::path> made = missing_folders(opt.dump_dir, true);
    std::error_code ec;
    fs::create_directories(opt.dump_dir, ec);
    const bool ok = !ec && fs::is_directory(opt.dump_dir);
    remove_folders(made);  // created again when the dump is written
    if (!ok) throw std::invalid_argument("--dump " + opt.dump_dir + " is not a folder that can be created or written");
  }
  check_seeds(opt.seeds);
  if (opt.max_rounds < 1) throw std::invalid_argument("--max-rounds must be at least 1, not " + std::to_string(opt.max_rounds));
  if (opt.min_rounds < 1 || opt.max_rounds < opt.min_rounds)
    throw std::invalid_argument("--min-rounds (" + std::to_string(opt.min_rounds) + ") must be at least 1 and at most --max-rounds (" +
                                std::to_string(opt.max_rounds) + ")");
  for (const auto& [option, v] : {std::pair{"--timeout", opt.timeout_seconds}, {"--step-timeout", opt.step_timeout_seconds},
                                  {"--build-timeout", opt.build_timeout_seconds}, {"--max-timing-seconds", opt.max_timing_seconds}})
    check_time_limit(option, v);
  if (!opt.calibration.empty()) check_calibration_file(opt.calibration, opt.task, opt.config);
}

std::string committed_calibration(const std::string& task, const std::string& config) {
  std::string cal;
  std::error_code ec;
  const fs::path reports = fs::path(NIBBLE_SOURCE_DIR) / "reports";
  if (fs::is_directory(reports, ec))
    for (const auto& dir : fs::directory_iterator(reports, ec)) {
      const fs::path f = dir.path() / ("calibration-" + config + ".json");
      if (!fs::exists(f, ec)) continue;
      try {  // only a table of this task and config
        check_calibration_file(f.string(), task, config);
        cal = f.string();
      } catch (const std::exception&) {
      }
    }
  return cal;
}

void check_calibration_file(const std::string& path, const std::string& task, const std::string& config) {
  json c;
  try {
    if (fs::is_directory(path)) throw std::runtime_error(path + " is a folder: name the table's file in it");
    c = parse_ordered_json_bounded(read_file(path), path);
  } catch (const std::exception& e) {
    throw std::invalid_argument(std::string("--calibration: ") + e.what());  // says which: unreadable, not JSON, a key twice
  }
  if (!c.is_object() || c.value("schema", "") != "nibble.calibration" || !c.contains("rows") || !c["rows"].is_array())
    throw std::invalid_argument("--calibration " + path +
                                " is not a nibble calibrate table (schema \"nibble.calibration\" with \"rows\")");
  if (c.value("task", "") != task || c.value("config", "") != config)
    throw std::invalid_argument("--calibration " + path + " was calibrated for " + c.value("task", "?") + " / " +
                                c.value("config", "?") + ", this grade is " + task + " / " + config);
}

void check_seeds(const std::vector<uint64_t>& seeds) {
  if (seeds.empty()) throw std::invalid_argument("--seeds needs at least one seed");
  std::vector<uint64_t> seen;
  for (uint64_t s : seeds) {
    if (std::find(seen.begin(), seen.end(), s) != seen.end())
      throw std::invalid_argument("seed " + std::to_string(s) + " is given twice in --seeds");
    seen.push_back(s);
  }
}

bool run_variant_children(const Job& job, const std::vector<std::string>& variants,
                          double timeout_seconds, const Log& log,
                          const std::function<void(size_t, const ChildRun&, const ChildRun&)>& compare,
                          const BinaryPins* pins) {
  log("the exact reference");
  const ChildRun exact = run_job_child(job, timeout_seconds, &log, "exact reference", pins);
  if (!exact.completed()) {
    std::fprintf(stderr, "nibble calibrate: the reference failed: %s\n", exact.describe_failure().c_str());
    return false;
  }
  for (size_t i = 0; i < variants.size(); ++i) {
    Job v = job;
    v.variant = variants[i];
    v.police = false;  // our own reference, measured for its error (kv_slot_plus1 writes slot pos + 1)
    log("variant " + variants[i]);
    const ChildRun c = run_job_child(v, timeout_seconds, &log, variants[i], pins);
    if (!c.completed()) {
      std::fprintf(stderr, "nibble calibrate: variant %s failed to run: %s\n", variants[i].c_str(), c.describe_failure().c_str());
      return false;
    }
    compare(i, c, exact);
  }
  return true;
}

json sandbox_section(const std::vector<SandboxLayer>& layers, const std::string& layers_from, bool required,
                     const BinaryPins& pins) {
  json l = json::array();
  for (const SandboxLayer& x : layers) l.push_back({{"name", x.name}, {"state", x.state}, {"detail", x.detail}});
  return {{"required", required},
          {"complete", !layers.empty() && sandbox_gaps(layers).empty()},
          {"layers_from", layers_from},
          {"layers", l},
          {"binaries", pins.to_json()},
          {"binaries_rule", "hashed at the start of the grade and again before every child is started; a child runs only these bytes"}};
}

void check_calibrate_options(const CalibrateOptions& opt) {
  check_sandbox_disable_env();
  check_seeds(opt.seeds);
  check_time_limit("--timeout", opt.timeout_seconds);
  if (opt.path != "auto" && opt.path != "gpu" && opt.path != "cpu")
    throw std::invalid_argument("--path must be gpu, cpu or auto, not '" + opt.path + "'");
  if (!opt.reference.empty()) {
    if (opt.path == "cpu")
      throw std::invalid_argument("--reference is the GPU path's (--path gpu or auto); --path cpu computes with the CPU oracle: "
                                  "drop one of the two");
    check_reference_file(opt.reference);
  }
  check_outputs_spare_inputs({{"--out", opt.out}}, run_inputs(opt.reference, opt.fixture_dir, opt.task, opt.config, opt.seeds),
                             "calibration");
  check_writable(opt.out);
}

Probe probe_device(bool measure_bandwidth, uint64_t read_floor_bytes, SandboxSpec* sandbox, bool require_sandbox,
                   const BinaryPins* pins) {
  Job job;
  job.kind = "probe";
  job.measure_bandwidth = measure_bandwidth;
  job.read_floor_bytes = read_floor_bytes;
  Probe first, last;
  const SandboxTrial settled = settle_sandbox(sandbox, require_sandbox, [&](const SandboxSpec& spec) {
    job.sandbox = spec;
    // A fallback tried under --require-sandbox only finds what the driver needs (the grade refuses).
    job.require_sandbox = require_sandbox && spec.skip.empty();
    Probe p;
    const ChildRun c = run_job_child(job, 120, nullptr, "", pins);
    if (c.result) p.layers = c.result->sandbox;
    p.ok = c.completed();
    if (p.ok) p.device = c.result->probe;
    else p.why = c.describe_failure();
    p.sandbox_refused = c.result && c.result->error && c.result->error->kind == "sandbox";
    if (first.why.empty() && !first.ok && !p.ok) first = p;
    last = p;
    return SandboxTrial{p.ok, p.sandbox_refused, p.why};
  });
  if (settled.refused) {
    Probe p = first.why.empty() ? last : first;
    p.ok = false;
    p.sandbox_refused = true;
    p.why = settled.why;
    return p;
  }
  return last.ok || first.why.empty() ? last : first;  // no GPU in any sandbox: the first failure says why
}

std::string calibration_path(const std::string& want, const Log& log, json* device, SandboxSpec* sandbox,
                             const BinaryPins* pins) {
  if (want == "cpu") return "cpu";
  log("probing the GPU");
  const Probe p = probe_device(false, 0, sandbox, false, pins);
  if (p.ok) {
    *device = p.device;
    return "gpu";
  }
  if (want == "gpu") {
    std::fprintf(stderr,
                 "nibble calibrate: --path gpu, but no usable NVIDIA GPU: %s\n  calibrate on the CPU with --path cpu (the fp64 "
                 "oracle), or --path auto (the GPU where there is one, else the CPU)\n",
                 p.why.c_str());
    return "";
  }
  log("no GPU: using the fp64 CPU oracle");
  return "cpu";
}

}  // namespace nibble
