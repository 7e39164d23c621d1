// batch.cpp: see batch.h (the manifest, the scheduler, the summary, Slurm's script and collection;
// the command line is batch_cli.cpp).
#include "harness/batch.h"
#include "fixtures/safetensors.h"

#include <algorithm>
#include <cstdint>
#include <chrono>
#include <condition_variable>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <regex>
#include <sstream>
#include <stdexcept>
#include <thread>

#include "fixtures/fixture.h"
#include "fixtures/sha256.h"
#include "harness/atomic_file.h"
#include "harness/grade_common.h"  // kMaxTimeoutSeconds
#include "harness/lineup.h"
#include "harness/report_view.h"
#include "harness/task_anchors.h"
#include "harness/task.h"
#include "harness/verdict.h"

namespace nibble {

namespace fs = std::filesystem;
using json = nlohmann::ordered_json;

namespace {

std::string safe(const std::string& s) {
  std::string o;
  for (char c : s) o += (std::isalnum(static_cast<unsigned char>(c)) || c == '.' || c == '_' || c == '-') ? c : '_';
  return o;
}

std::string seeds_text(const std::vector<uint64_t>& seeds) {
  std::string s;
  for (uint64_t x : seeds) s += (s.empty() ? "" : ",") + std::to_string(x);
  return s;
}

std::string absolute_from(const std::string& base, const std::string& p) {
  return fs::weakly_canonical(fs::path(p).is_absolute() ? fs::path(p) : fs::path(base) / p).string();
}

template <class T>
T get_or(const json& j, const char* key, const T& fallback, const std::string& where) {
  if (!j.contains(key)) return fallback;
  try {
    return j.at(key).get<T>();
  } catch (const std::exception&) {
    throw std::invalid_argument(where + ": '" + key + "' has the wrong type (" + j.at(key).dump() + ")");
  }
}

}  // namespace

BatchManifest read_batch_manifest(const std::string& path) {
  if (fs::is_directory(path)) throw std::invalid_argument(path + " is a folder: name the manifest file in it (nibble batch MANIFEST)");
  json j;
  try {
    j = parse_ordered_json_bounded(read_file(path), "manifest " + path);
  } catch (const std::exception& e) {
    throw std::invalid_argument(e.what());  // says which: unreadable, not JSON, a key twice
  }
  if (!j.is_object() || !j.contains("runs") || !j["runs"].is_array() || j["runs"].empty())
    throw std::invalid_argument(path + ": a manifest is an object with a non-empty \"runs\" list (nibble batch --help)");
  for (const auto& [k, v] : j.items())
    if (k != "name" && k != "out" && k != "timeout_seconds" && k != "runs")
      throw std::invalid_argument(path + ": unknown key '" + k + "' (name, out, timeout_seconds, runs)");
  const std::string base = fs::absolute(path).parent_path().string();
  BatchManifest m;
  m.path = fs::absolute(path).string();
  // A name given is used as it is (refused if a file name could not be it: "sub/x" and "sub_x" would
  // both be written as sub_x); the default, the manifest's file name, is made safe.
  const std::string given = get_or<std::string>(j, "name", "", path);
  if (j.contains("name") && safe(given) != given)
    throw std::invalid_argument(path + ": 'name' " + json_text(json(given)) +
                                " names the batch's files; use letters, digits, '.', '_' and '-' only (e.g. \"" + safe(given) + "\")");
  m.name = j.contains("name") ? given : safe(fs::path(path).stem().string());
  constexpr size_t kMaxName = 100;  // <name>.batch-summary.json and the job ids' folder stay well inside a file name's 255 bytes
  if (m.name.size() > kMaxName)
    throw std::invalid_argument(path + ": the batch's name (" + (j.contains("name") ? "'name'" : "the manifest's file name") + ") is " +
                                std::to_string(m.name.size()) + " characters; at most " + std::to_string(kMaxName) +
                                " (it names the batch's files): give a shorter 'name'");
  if (m.name.empty() || m.name.front() == '.')
    throw std::invalid_argument(path + ": 'name' is empty or starts with a dot; name the batch (default: the manifest's file name)");
  const std::string out = get_or<std::string>(j, "out", "results", path);
  if (out.empty()) throw std::invalid_argument(path + ": 'out' is empty; name the results folder (default: results)");
  m.out = absolute_from(base, out);
  m.timeout_seconds = get_or<double>(j, "timeout_seconds", 3600, path);
  if (!(m.timeout_seconds > 0 && m.timeout_seconds <= kMaxTimeoutSeconds))
    throw std::invalid_argument(path + ": timeout_seconds must be positive, at most " + std::to_string(long(kMaxTimeoutSeconds)));
  for (size_t r = 0; r < j["runs"].size(); ++r) {
    const json& run = j["runs"][r];
    const std::string where = path + ": runs[" + std::to_string(r) + "]";
    if (!run.is_object()) throw std::invalid_argument(where + " is not an object");
    for (const auto& [k, v] : run.items())
      if (k != "command" && k != "task" && k != "configs" && k != "seeds" && k != "split_seeds" && k != "solutions" && k != "args")
        throw std::invalid_argument(where + ": unknown key '" + k + "' (command, task, configs, seeds, split_seeds, solutions, args)");
    const std::string command = get_or<std::string>(run, "command", "grade", where);
    if (command != "grade" && command != "calibrate")
      throw std::invalid_argument(where + ": command must be grade or calibrate, not '" + command + "'");
    const std::string task_name = get_or<std::string>(run, "task", "", where);
    const Task* task = task_or_null(task_name);
    if (task_name.empty()) throw std::invalid_argument(where + ": 'task' is required (nibble configs lists the tasks)");
    if (!task) throw std::invalid_argument(where + ": unknown task '" + task_name + "' (nibble configs lists them)");
    const auto configs = get_or<std::vector<std::string>>(run, "configs", {}, where);
    if (configs.empty()) throw std::invalid_argument(where + ": 'configs' must list at least one config");
    for (const std::string& c : configs) {
      try {
        task->check_config(c);
      } catch (const std::exception& e) {
        throw std::invalid_argument(where + ": " + e.what());
      }
    }
    std::vector<uint64_t> seeds{0, 1};
    if (run.contains("seeds")) {
      // Whole, non-negative numbers only: nlohmann would turn -1 into 2^64 - 1 and 1.7 into 1.
      if (!run["seeds"].is_array() || run["seeds"].empty())
        throw std::invalid_argument(where + ": 'seeds' must be a non-empty list of seeds, e.g. [0, 1]");
      seeds.clear();
      for (const json& s : run["seeds"]) {
        // The bound `nibble grade --seeds` takes: every seed here must be one it runs.
        if (!s.is_number_unsigned() || s.get<uint64_t>() >= kSeedLimit)
          throw std::invalid_argument(where + ": " + seed_text_problem(s.dump()));
        if (std::find(seeds.begin(), seeds.end(), s.get<uint64_t>()) != seeds.end())
          throw std::invalid_argument(where + ": seed " + s.dump() + " is listed twice in 'seeds'");
        seeds.push_back(s.get<uint64_t>());
      }
    }
    const bool split = get_or<bool>(run, "split_seeds", false, where);
    auto solutions = get_or<std::vector<std::string>>(run, "solutions", {}, where);
    if (command == "grade" && solutions.empty()) throw std::invalid_argument(where + ": a grade run needs 'solutions'");
    if (command == "calibrate" && !solutions.empty()) throw std::invalid_argument(where + ": a calibrate run takes no 'solutions'");
    for (std::string& s : solutions) {
      if (s.empty()) throw std::invalid_argument(where + ": an empty solution path");
      s = absolute_from(base, s);
      if (!fs::exists(s)) throw std::invalid_argument(where + ": solution " + s + " does not exist (build it first)");
      if (!fs::is_regular_file(s)) throw std::invalid_argument(where + ": solution " + s + " is not a file (a folder?)");
    }
    if (solutions.empty()) solutions.push_back("");
    const auto args = get_or<std::vector<std::string>>(run, "args", {}, where);
    for (const std::string& a : args) {
      const std::string opt = a.substr(0, a.find('='));  // --profile=ncu is --profile
      // Each would end every job with its text and no report (exit 0: "NoReport" for every job).
      for (const char* no_job : {"--help", "-h", "--help-all", "--version", kCheckArgsFlag})
        if (opt == no_job)
          throw std::invalid_argument(where + ": 'args' must not hold " + opt + ": every job would print it and write no report");
      // A profiled run goes without Landlock (profile.h) and could rewrite other jobs' results here.
      if (opt == "--profile")
        throw std::invalid_argument(where + ": --profile is not for a batch (the profiled run is less sandboxed): grade that solution alone");
      // What every job sets itself (batch_job_argv): given twice, each job would end without a report.
      for (const char* own : {"--task", "--config", "--seeds", "--out", "-q", "--quiet", "--solution", "--device", "--fixture"})
        if (opt == own)
          throw std::invalid_argument(where + ": 'args' must not set " + opt + ": the batch sets it for each job (the manifest's " +
                                      "task, configs, seeds, solutions, its results folder and the GPU)");
    }
    std::vector<std::vector<uint64_t>> seed_sets;
    if (split)
      for (uint64_t s : seeds) seed_sets.push_back({s});
    else
      seed_sets.push_back(seeds);
    // `--path cpu` or `--path=cpu`, the last one given (as CLI11 takes it): a calibration on the CPU.
    std::string path_arg;
    for (size_t a = 0; a < args.size(); ++a) {
      if (args[a] == "--path" && a + 1 < args.size()) path_arg = args[a + 1];
      if (args[a].rfind("--path=", 0) == 0) path_arg = args[a].substr(7);
    }
    const bool cpu_path = path_arg == "cpu";
    for (const std::string& config : configs)
      for (const std::string& solution : solutions)
        for (const auto& ss : seed_sets) {
          BatchJob b;
          b.index = int(m.jobs.size());
          b.command = command;
          b.task = task_name;
          b.config = config;
          b.seeds = ss;
          b.solution = solution;
          b.args = args;
          b.needs_gpu = !(command == "calibrate" && cpu_path);
          json spec = {{"command", command}, {"task", task_name}, {"config", config}, {"seeds", ss}, {"solution", solution}, {"args", args}};
          // The readable part, cut to stay a file name, then 8 hex digits of the spec (command line and
          // solution path, not its bytes): manifests sharing a results folder share a job only when it
          // is the same job (other args or another a.so of the same name are another job).
          std::string readable = safe(command + "-" + task_name + "-" + config +
                                      (solution.empty() ? "" : "-" + fs::path(solution).stem().string()) + "-s" + seeds_text(ss));
          if (readable.size() > 160) readable.resize(160);
          const std::string spec_text = json_text(spec);
          b.id = readable + "-" + sha256_hex(spec_text.data(), spec_text.size()).substr(0, 8);
          for (const BatchJob& o : m.jobs)
            if (o.id == b.id) b.id += "-" + std::to_string(b.index);  // a solution listed twice is graded twice
          b.run = int(r);
          b.report = (fs::path(m.out) / (b.id + ".json")).string();
          b.sidecar = (fs::path(m.out) / (b.id + ".job.json")).string();
          b.log = (fs::path(m.out) / (b.id + ".log")).string();
          if (!solution.empty()) {
            try {
              b.solution_sha256 = sha256_file_hex(solution);
              spec["solution_sha256"] = b.solution_sha256;
            } catch (const std::exception& e) {
              throw std::invalid_argument(where + ": solution " + solution + " cannot be read (" + e.what() + ")");
            }
          }
          const std::string text = json_text(spec);
          b.hash = sha256_hex(text.data(), text.size());
          m.jobs.push_back(std::move(b));
        }
  }
  // Where the manifest sits among the files a batch writes (its results folder is the manifest's own,
  // say, and its name the manifest's stem), a run would overwrite it with its own summary.
  const fs::path self = fs::weakly_canonical(m.path);
  const auto same = [&](const std::string& a) { return fs::weakly_canonical(a) == self; };
  std::vector<std::string> outputs = {slurm_script_path(m)};
  for (const char* kind : {"batch-summary.json", "collect.json", "leaderboard.html", "leaderboard.md"})
    outputs.push_back(batch_results_file(m, kind));
  for (const BatchJob& j : m.jobs) outputs.insert(outputs.end(), {j.report, j.sidecar, j.log});
  for (const std::string& o : outputs)
    if (same(o))
      throw std::invalid_argument("the manifest " + m.path + " is also a file the batch writes (" + o +
                                  "): give the manifest another 'name' or 'out', or move it");
  return m;
}

std::vector<std::string> batch_job_argv(const BatchJob& job, int device) {
  std::vector<std::string> a = {job.command, "--task", job.task, "--config", job.config, "--seeds", seeds_text(job.seeds), "--out",
                                job.report, "-q"};
  if (!job.solution.empty()) a.insert(a.end(), {"--solution", job.solution});
  if (device >= 0 && job.needs_gpu) a.insert(a.end(), {"--device", std::to_string(device)});
  a.insert(a.end(), job.args.begin(), job.args.end());
  return a;
}

bool batch_job_done(const BatchJob& job) {
  try {
    const json side = parse_ordered_json_bounded(read_file(job.sidecar), job.sidecar);
    if (side.value("hash", "") != job.hash) return false;
    // The report must be this job's (its command's schema, task, config, seeds and solution's bytes),
    // not another's copied to its path.
    const json r = parse_ordered_json_bounded(read_file(job.report), job.report);
    if (!r.is_object() || r.value("schema", "") != (job.command == "calibrate" ? "nibble.calibration" : "nibble.report") ||
        r.value("task", "") != job.task || r.value("config", "") != job.config || r.value("seeds", json()) != json(job.seeds))
      return false;
    // ... and one that reads as a report (an edited one, say Passed past its gate, is no result).
    if (job.command != "calibrate") validate_report(r, job.report);
    if (job.solution.empty()) return true;
    const json sol = r.value("solution", json::object());
    if (!sol.is_object()) return false;
    // A grader failure's report names the solution's path only (what failed may be reading it): it is
    // this job's result as any verdict is, and a resume does not run it again.
    if (r.value("disposition", "") == kGraderFailedDisposition && !sol.contains("sha256")) return sol.value("path", "") == job.solution;
    return sol.value("sha256", "") == job.solution_sha256;
  } catch (const std::exception&) {
    return false;
  }
}

namespace {

/** The first line of a job's log from byte `from` on (the log is appended to by every run of the
 *  job: what this run wrote starts where the log ended before it) that is nibble's own message
 *  ("nibble grade: ..."); else its first line that is not a progress line ("[nibble] ...": a
 *  command-line error, "The following argument was not expected: --bogus"), or "". At most 64 KB are
 *  read, and a line at most 1 KB of it. */
std::string first_message(const std::string& log, std::uintmax_t from) {
  std::ifstream in(log, std::ios::binary);
  if (!in.seekg(std::streamoff(from))) return "";
  std::string chunk(65536, '\0');
  in.read(chunk.data(), std::streamsize(chunk.size()));
  chunk.resize(size_t(in.gcount()));
  std::string other;
  for (size_t at = 0; at < chunk.size();) {
    const size_t end = std::min(chunk.find('\n', at), chunk.size());
    const std::string line = chunk.substr(at, std::min<size_t>(end - at, 1024));
    if (line.rfind("nibble ", 0) == 0 && line.find(": ") != std::string::npos) return line;
    if (other.empty() && line.find_first_not_of(" \t\r") != std::string::npos && line.rfind("[", 0) != 0) other = line;
    at = end + 1;
  }
  return other;
}

/** The outcome of a finished job from its report; log_from: the job's log size before this run
 *  (first_message). */
constexpr const char* kNoReport = "none";

/** The SHA-256 of a job's report as it is now, or kNoReport where there is none to read. */
std::string report_state(const BatchJob& job) {
  try {
    return sha256_file_hex(job.report);
  } catch (const std::exception&) {
    return kNoReport;
  }
}

BatchOutcome outcome_of(const BatchJob& job, int code, double seconds, int device, std::uintmax_t log_from = 0) {
  BatchOutcome o;
  o.exit_code = code;
  o.seconds = seconds;
  o.device = job.needs_gpu ? device : -1;  // a CPU job's slot is no GPU (batch_job_argv gives it none)
  try {
    const json r = parse_ordered_json_bounded(read_file(job.report), job.report);
    if (job.command == "calibrate") {
      o.disposition = r.value("healthy", false) ? "Healthy" : "Unhealthy";
      o.reason = r.value("health_rule", "");
    } else {
      o.disposition = r.value("disposition", "NoReport");
      o.reason = r.value("reason", "");
    }
  } catch (const std::exception&) {
    o.disposition = "NoReport";
    o.reason = code == kBatchTimedOut
                   ? "killed at the manifest's timeout_seconds without a readable report (" + job.log + ")"
                   : "exit " + std::to_string(code) + " without a readable report (" + job.log + ")";
    if (const std::string said = first_message(job.log, log_from); !said.empty()) o.reason += ": " + said;
  }
  return o;
}

}  // namespace

std::vector<BatchOutcome> run_batch(const BatchManifest& m, const std::vector<int>& devices, const BatchRunner& run,
                                    const BatchProgress& progress) {
  std::vector<BatchOutcome> out(m.jobs.size());
  std::vector<size_t> queue;
  for (size_t i = 0; i < m.jobs.size(); ++i) {
    if (batch_job_done(m.jobs[i])) {
      out[i] = outcome_of(m.jobs[i], 0, 0, -1);
      out[i].skipped = true;
      out[i].report_sha256 = report_state(m.jobs[i]);
      try {
        // what the run that did it recorded: its exit code, time and GPU
        const json side = parse_ordered_json_bounded(read_file(m.jobs[i].sidecar), m.jobs[i].sidecar);
        out[i].exit_code = side.value("exit_code", 0);
        out[i].seconds = side.value("seconds", 0.0);
        out[i].device = side.value("device", -1);
      } catch (const std::exception&) {
      }
    } else {
      queue.push_back(i);
    }
  }
  std::mutex mu;
  size_t next = 0, done = m.jobs.size() - queue.size(), not_run = 0;
  bool stopping = false;               // a runner said NotRun: the batch is stopping, nothing more starts
  std::map<int, std::string> running;  // slot -> "gpuN: job id", or "host: job id" for a job without a GPU
  auto line = [&] {                    // under mu
    std::string s = "[batch] done " + std::to_string(done) + " | running " + std::to_string(running.size()) + " | left " +
                    std::to_string(queue.size() - next) + (not_run ? " | not run " + std::to_string(not_run) : "");
    for (const auto& [slot, what] : running) s += " | " + what;
    if (progress) progress(s);
  };
  const auto not_run_outcome = [&](size_t i, int slot) {
    BatchOutcome o = outcome_of(m.jobs[i], kBatchNotRun, 0, slot);
    o.disposition = "NotRun";
    o.reason = "the batch was stopped before this job ran to its end: it runs again next time";
    return o;
  };
  {
    std::lock_guard<std::mutex> lock(mu);
    line();
  }
  auto worker = [&](int slot) {
    for (;;) {
      size_t i;
      {
        std::lock_guard<std::mutex> lock(mu);
        if (stopping && next < queue.size()) {  // the rest is not started: NotRun, in one line
          for (; next < queue.size(); ++next, ++not_run) out[queue[next]] = not_run_outcome(queue[next], -1);
          line();
        }
        if (next >= queue.size()) return;
        i = queue[next++];
        running[slot] = (m.jobs[i].needs_gpu && slot >= 0 ? "gpu" + std::to_string(slot) : std::string("host")) + ": " + m.jobs[i].id;
        line();
      }
      const BatchJob& job = m.jobs[i];
      // Not done: what lies at its paths belongs to another job (other bytes or arguments), and must
      // not stand for this one's result if it writes none.
      std::error_code ec;
      fs::remove(job.report, ec);
      fs::remove(job.sidecar, ec);
      std::uintmax_t log_from = fs::file_size(job.log, ec);  // the runner appends this run's output
      if (ec) log_from = 0;
      const auto t0 = std::chrono::steady_clock::now();
      // A job that cannot even start (its log not writable, a name too long for the file system) is
      // a line of the summary, never an exception out of this thread (std::terminate).
      int code = 0;
      std::string not_started;
      try {
        code = run(job, slot);
      } catch (const std::exception& e) {
        code = kBatchCouldNotStart;
        not_started = e.what();
      }
      const double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      BatchOutcome o = outcome_of(job, code, sec, slot, log_from);
      if (!not_started.empty()) o.reason = "the job could not be started: " + not_started;
      o.report_sha256 = report_state(job);
      if (code == kBatchNotRun) {
        std::lock_guard<std::mutex> lock(mu);
        out[i] = not_run_outcome(i, slot);
        out[i].seconds = sec;
        running.erase(slot);
        ++not_run;
        stopping = true;
        line();
        continue;
      }
      try {
        write_file_atomic(job.sidecar, json_text(json({{"hash", job.hash},
                                                       {"index", job.index},
                                                       {"argv", batch_job_argv(job, slot)},
                                                       {"exit_code", code},
                                                       {"disposition", o.disposition},
                                                       {"seconds", sec},
                                                       {"device", o.device}}),
                                                 2) +
                                           "\n");
      } catch (const std::exception& e) {
        o.reason += std::string(" (its sidecar could not be written: ") + e.what() + ")";
      }
      std::lock_guard<std::mutex> lock(mu);
      out[i] = o;
      running.erase(slot);
      ++done;
      line();
    }
  };
  std::vector<std::thread> threads;
  for (int d : devices) threads.emplace_back(worker, d);
  for (auto& t : threads) t.join();
  // Every report as its job left it: a candidate of a later job runs as this user, and where its
  // sandbox lacks Landlock (a kernel without it) it could rewrite the results folder. A changed
  // report is no result, and its sidecar goes so that the next run grades the job again.
  for (size_t i = 0; i < out.size(); ++i) {
    if (out[i].disposition == "NotRun") continue;  // its sidecar was never written: it runs again anyway
    const std::string before = out[i].report_sha256, now = report_state(m.jobs[i]);
    if (now == before) continue;
    out[i].disposition = "ReportChanged";
    out[i].reason = "its report (" + m.jobs[i].report + ") was " +
                    (now == kNoReport ? "removed" : before == kNoReport ? "put there" : "changed") +
                    " after its job ended, while other jobs ran: no result (it runs again next time)";
    std::error_code ec;
    fs::remove(m.jobs[i].sidecar, ec);
  }
  return out;
}

json batch_summary(const BatchManifest& m, const std::vector<BatchOutcome>& outcomes) {
  json counts = json::object(), rows = json::array();
  for (size_t i = 0; i < m.jobs.size() && i < outcomes.size(); ++i) {
    const BatchOutcome& o = outcomes[i];
    counts[o.disposition] = counts.value(o.disposition, 0) + 1;
    rows.push_back({{"index", m.jobs[i].index},
                    {"id", m.jobs[i].id},
                    {"report", m.jobs[i].report},
                    {"disposition", o.disposition},
                    {"reason", o.reason},
                    {"exit_code", o.exit_code},
                    {"seconds", o.seconds},
                    {"device", o.device},
                    {"resumed", o.skipped}});
  }
  return {{"schema", "nibble.batch"}, {"manifest", m.path}, {"jobs", m.jobs.size()}, {"counts", counts}, {"rows", rows}};
}

std::string format_batch_summary(const json& s) {
  std::ostringstream o;
  o << "nibble batch: " << s["jobs"].get<size_t>() << " jobs:";
  for (const auto& [k, v] : s["counts"].items()) o << " " << v.get<int>() << " " << k;
  const auto resumed = std::count_if(s["rows"].begin(), s["rows"].end(), [](const json& r) { return r.value("resumed", false); });
  if (resumed > 0) o << " (" << resumed << " of them done by an earlier run: not run again)";
  o << "\n";
  for (const json& r : s["rows"]) {
    const std::string d = r["disposition"];
    if (batch_disposition_passed(d)) continue;
    o << "  " << r["id"].get<std::string>() << ": " << d << ": " << r["reason"].get<std::string>().substr(0, 300) << "\n";
  }
  return o.str();
}

std::string batch_results_file(const BatchManifest& m, const std::string& kind) {
  return (fs::path(m.out) / (m.name + "." + kind)).string();
}

std::string slurm_script_path(const BatchManifest& m) { return (fs::path(m.out) / "slurm" / (m.name + ".sbatch")).string(); }

std::string slurm_array_script(const BatchManifest& m, const std::string& nibble, const std::string& partition,
                               const std::string& time_limit) {
  // sbatch reads its #SBATCH lines itself and bash the exec line: paths and values that either would
  // split, expand or end early are refused rather than quoted for one and not the other.
  auto plain_path = [](const std::string& what, const std::string& p) {
    if (p.find_first_of(" \t\n\r'\"$`\\;&|<>*?!") != std::string::npos)
      throw std::invalid_argument(what + " " + p + " has a space or a shell character; Slurm's script needs a plain path: move it");
  };
  auto plain_value = [](const std::string& what, const std::string& v) {
    for (char c : v)
      if (!std::isalnum(static_cast<unsigned char>(c)) && c != '_' && c != '-' && c != '.' && c != ':' && c != ',')
        throw std::invalid_argument(what + " '" + v + "' may hold letters, digits and _ - . : , only");
  };
  plain_path("the results folder", m.out);
  plain_path("the manifest", m.path);
  plain_path("nibble", nibble);
  plain_value("--partition", partition);
  plain_value("--time", time_limit);
  // sbatch's forms (its --time): a bad one would be found only at submission, after the script is written.
  static const std::regex slurm_time(R"((\d+(:\d+){0,2}|\d+-\d+(:\d+){0,2}|UNLIMITED|INFINITE|unlimited|infinite))");
  if (!time_limit.empty() && !std::regex_match(time_limit, slurm_time))
    throw std::invalid_argument("--time '" + time_limit + "' is none of sbatch's forms: minutes, minutes:seconds, "
                                "hours:minutes:seconds, days-hours, days-hours:minutes, days-hours:minutes:seconds or UNLIMITED");
  const bool gpu = std::any_of(m.jobs.begin(), m.jobs.end(), [](const BatchJob& j) { return j.needs_gpu; });
  std::ostringstream o;
  o << "#!/bin/bash\n"
    << "# Written by nibble batch --slurm: one array element per job of " << m.path << "\n"
    << "#SBATCH --job-name=nibble-" << m.name << "\n"
    << "#SBATCH --array=0-" << (m.jobs.empty() ? 0 : m.jobs.size() - 1) << "\n"
    << "#SBATCH --ntasks=1\n"
    << "#SBATCH --output=" << (fs::path(m.out) / "slurm" / (m.name + "-%A_%a.out")).string() << "\n";
  if (gpu) o << "#SBATCH --gres=gpu:1\n";
  if (!partition.empty()) o << "#SBATCH --partition=" << partition << "\n";
  if (!time_limit.empty()) o << "#SBATCH --time=" << time_limit << "\n";
  o << "exec \"" << nibble << "\" batch \"" << m.path << "\" --element \"$SLURM_ARRAY_TASK_ID\"\n";
  return o.str();
}

json collect_batch(const BatchManifest& m) {
  json rows = json::array();
  std::vector<int> again;
  int done = 0, failed = 0, missing = 0, not_passed = 0;
  for (const BatchJob& j : m.jobs) {
    std::string state, why, disposition;
    if (batch_job_done(j)) {
      // A report is a result whatever its verdict: grading an Incorrect solution again changes nothing.
      const BatchOutcome o = outcome_of(j, 0, 0, -1);
      state = "done";
      disposition = o.disposition;
      const bool good = batch_disposition_passed(o.disposition);
      if (!good) ++not_passed;
      why = good ? "" : o.reason;
    } else {
      std::string side_hash;
      try {
        side_hash = parse_ordered_json_bounded(read_file(j.sidecar), j.sidecar).value("hash", "");
      } catch (const std::exception&) {
      }
      if (side_hash == j.hash) {
        state = "failed";
        std::error_code ec;
        why = fs::exists(j.report, ec)
                  ? "its element ran and left a report that is not this job's or does not read (" + j.report + "; " + j.log + ")"
                  : "its element ran and left no report (" + j.log + ")";
      } else if (!side_hash.empty()) {
        state = "missing";
        why = "stale: its element ran for another version of the job (the solution's bytes or the arguments changed)";
      } else {
        state = "missing";
        why = "no result: its element has not run (or was cut off)";
      }
    }
    (state == "done" ? done : state == "failed" ? failed : missing)++;
    if (state != "done") again.push_back(j.index);
    rows.push_back({{"index", j.index}, {"id", j.id}, {"state", state}, {"disposition", disposition}, {"why", why}});
  }
  std::string list;
  for (int i : again) list += (list.empty() ? "" : ",") + std::to_string(i);
  const std::string script = slurm_script_path(m);
  json resubmit = nullptr;
  // No array script: the batch ran on this host, where running it again runs just those jobs.
  if (!again.empty())
    resubmit = fs::exists(script) ? "sbatch --array=" + list + " " + script
                                  : "nibble batch " + m.path + "  (on this host; or --slurm to submit the whole array)";
  return {{"schema", "nibble.batch.collect"},
          {"manifest", m.path},
          {"done", done},
          {"not_passed", not_passed},
          {"failed", failed},
          {"missing", missing},
          {"rows", rows},
          {"resubmit", resubmit}};
}

int write_batch_leaderboard(const BatchManifest& m) {
  std::vector<ReportView> reports;
  std::vector<std::string> labels;
  for (const BatchJob& j : m.jobs) {
    if (j.command != "grade" || !batch_job_done(j)) continue;
    try {
      reports.push_back(load_report_view(j.report));
      labels.push_back(j.report);
    } catch (const BadReport&) {
      // a grader failure's report without figures: the summary lists it
    }
  }
  const std::string html = batch_results_file(m, "leaderboard.html"), md = batch_results_file(m, "leaderboard.md");
  if (reports.empty()) {  // an earlier page would rank reports that no longer stand (a rebuilt solution's)
    std::error_code ec;
    fs::remove(html, ec);
    fs::remove(md, ec);
    return 0;
  }
  const auto groups = make_leaderboard(reports, labels, task_baseline_solutions);
  write_file_atomic(html, leaderboard_html(groups));
  write_file_atomic(md, leaderboard_markdown(groups));
  return int(reports.size());
}

}  // namespace nibble
