// batch_cli.cpp: `nibble batch` (see batch.h): the command line, the fixtures built once, the real
// runner (one nibble process per job), Slurm's sbatch.
#include <CLI/CLI.hpp>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <set>
#include <stdexcept>
#include <sstream>
#include <tuple>

#include "fixtures/fixture.h"
#include "fixtures/safetensors.h"
#include "harness/atomic_file.h"
#include "harness/batch.h"
#include "harness/cli_errors.h"
#include "harness/grade_common.h"
#include "harness/ledger.h"
#include "harness/process.h"
#include "harness/report_cli.h"
#include "harness/report_view.h"
#include "harness/task.h"

namespace nibble {

namespace fs = std::filesystem;
using json = nlohmann::ordered_json;

namespace {

int exit_of(const std::vector<BatchOutcome>& outcomes) {
  for (const BatchOutcome& o : outcomes)
    if (!batch_disposition_passed(o.disposition)) return 1;
  return 0;
}

/** Runs `job` as its own nibble process, its output appended to the job's log. */
int run_job_process(const BatchJob& job, int device, double timeout) {
  if (children_stopping()) return kBatchNotRun;
  std::vector<std::string> argv = {self_exe()};
  for (const std::string& a : batch_job_argv(job, device)) argv.push_back(a);
  const ChildExit e = run_child(argv, job.log, timeout);
  if (children_stopping()) return kBatchNotRun;  // killed by the stop, not by itself
  if (e.kind == ChildExit::TimedOut) return kBatchTimedOut;
  return e.kind == ChildExit::Exited ? e.code : 128 + (e.kind == ChildExit::Signaled ? e.code : 9);
}

/** Each distinct command line of the manifest (command and args) through that command's own parser
 *  (`nibble COMMAND ... --check-args`, which parses and does nothing else), before any job: "" or
 *  the refusal naming the manifest's run and the job, with the command's own message. */
std::string check_job_args(const BatchManifest& m) {
  std::set<std::pair<std::string, std::vector<std::string>>> seen;
  for (const BatchJob& j : m.jobs) {
    if (!seen.insert({j.command, j.args}).second) continue;
    std::vector<std::string> argv = {self_exe()};
    for (const std::string& a : batch_job_argv(j, -1)) argv.push_back(a);
    argv.insert(argv.begin() + 2, kCheckArgsFlag);  // after the command word: a last option left without its value takes no flag
    std::error_code tmp_ec;  // TMPDIR missing or a file: /tmp, as mkstemp's callers do
    fs::path tmp = fs::temp_directory_path(tmp_ec);
    if (tmp_ec || !fs::is_directory(tmp)) tmp = "/tmp";
    std::string tmpl = (tmp / "nibble-batch-args-XXXXXX").string();
    const int fd = mkstemp(tmpl.data());
    if (fd < 0) return "";  // no scratch file: the jobs say it themselves
    close(fd);
    const ChildExit e = run_child(argv, tmpl, 60);
    std::string said = file_tail(tmpl, 2000);
    std::error_code ec;
    fs::remove(tmpl, ec);
    if (e.kind == ChildExit::Exited && e.code == 0) continue;
    said = one_line(said);
    // CLI11's closing hint is for a command line typed by hand, not for a manifest's args.
    const std::string hint = "Run with --help for more information";
    if (const size_t at = said.rfind(hint); at != std::string::npos) said.erase(at);
    while (!said.empty() && (said.back() == ' ' || said.back() == '.')) said.pop_back();
    std::string args;
    for (const std::string& a : j.args) args += " " + a;
    // The command line is the run's own keys (task, config, seed, solution, out) and its "args": the
    // command's message names the option, so the fix is said for both.
    return m.path + ": runs[" + std::to_string(j.run) + "] (job " + j.id + "): nibble " + j.command +
           " refuses its command line (its args:" + (args.empty() ? " none" : args) + "): " +
           (said.empty() ? e.describe() : said) +
           "; fix that run's \"args\", or the key the message names (the run's \"solutions\", \"task\", \"configs\" or "
           "\"seeds\", the manifest's \"out\")";
  }
  return "";
}

/** Every fixture a grade job reads, into the cache, once, before any job starts: grades running
 *  side by side then only read them. */
int build_fixtures(const BatchManifest& m, const Log& log) {
  std::set<std::tuple<std::string, std::string, uint64_t>> need;
  for (const BatchJob& j : m.jobs)
    if (j.command == "grade" && !batch_job_done(j))
      for (uint64_t s : j.seeds) need.insert({j.task, j.config, s});
  for (const auto& [task, config, seed] : need) {
    std::string dir;
    FixtureManifest fm;
    try {
      ensure_fixture(find_task(task), config, seed, "", 0, true, log, &dir, &fm);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "nibble batch: fixture %s / %s seed %llu: %s\n", task.c_str(), config.c_str(), (unsigned long long)seed,
                   e.what());
      // A fixture found broken or foreign is bad input (as for grade: exit 2); one that could not be
      // built, the batch could not run.
      return dynamic_cast<const std::invalid_argument*>(&e) ? 2 : 3;
    }
  }
  return 0;
}

/** The results folder's `<manifest name>.<kind>.json` (batch_results_file) and its leaderboard;
 *  returns the exit code (3 when a file cannot be written). */
int write_results(const BatchManifest& m, const std::string& kind, const json& summary) {
  return run_command("nibble batch", [&] {
    const std::string file = batch_results_file(m, kind + ".json");
    write_file_atomic(file, json_text(summary, 2) + "\n");
    std::printf("  %s: %s\n", kind.c_str(), file.c_str());
    if (write_batch_leaderboard(m) > 0) std::printf("  leaderboard: %s (and .md)\n", batch_results_file(m, "leaderboard.html").c_str());
    return 0;
  }, /*bad_input=*/3);
}

}  // namespace

int batch_command(std::vector<std::string> args) {
  CLI::App app{"Run a manifest's grades over every GPU of this host (one grade per GPU at a time), or as a Slurm job array",
               "nibble batch"};
  std::string manifest_path, devices_text, partition, time_limit;
  int element = -1;
  bool slurm = false, no_submit = false, collect = false, quiet = false;
  app.add_option("MANIFEST", manifest_path, "The manifest (JSON; README \"Grading many solutions\")")->required();
  app.add_option("--devices", devices_text, "GPUs to use, e.g. 0,1, numbered as nibble grade --device numbers them "
                 "(CUDA_VISIBLE_DEVICES's entries when it is set, else nvidia-smi -L's; default: every one)")->check(kNonEmptyValue);
  app.add_flag("--slurm", slurm, "Write a Slurm job array (one element per job) into <out>/slurm/ and submit it with sbatch");
  app.add_flag("--no-submit", no_submit, "With --slurm: write the script, do not submit it");
  app.add_option("--partition", partition, "With --slurm: the partition");
  app.add_option("--time", time_limit, "With --slurm: the time limit per element (sbatch --time)");
  app.add_option("--element", element, "Run only job I (what an array element runs; Slurm's GPU is CUDA's first)")
      ->check(CLI::Validator(
          [](std::string& s) -> std::string {
            return s.empty() || s.size() > 9 || s.find_first_not_of("0123456789") != std::string::npos
                       ? "a job's index is 0, 1, ... (the Slurm array index), not '" + s + "'"
                       : "";
          },
          "INDEX"));
  app.add_flag("--collect", collect, "Read the results folder: jobs done, failed and missing, and the resubmit command");
  app.add_flag("-q,--quiet", quiet, "No progress lines");
  app.footer("Exit codes: 0 every job passed; 1 a job did not pass, failed or is missing; 2 bad input (or no GPU for a job "
             "that needs one); 3 the batch could not run; 130 stopped (Ctrl-C or a kill: the next run resumes).");
  if (const int rc = parse_own_args(app, std::move(args), 2); rc >= 0) return rc;
  if (int(slurm) + int(collect) + int(element >= 0) > 1) {
    std::fprintf(stderr, "nibble batch: --slurm, --collect and --element are three ways to run a batch: give one\n");
    return 2;
  }
  if (!slurm && (no_submit || !partition.empty() || !time_limit.empty())) {
    std::fprintf(stderr, "nibble batch: --no-submit, --partition and --time go with --slurm\n");
    return 2;
  }
  if (!devices_text.empty() && (slurm || collect || element >= 0)) {
    std::fprintf(stderr, "nibble batch: --devices names this host's GPUs for a batch run here; %s\n",
                 slurm     ? "under --slurm each element gets its GPU from Slurm (--gres=gpu:1)"
                 : collect ? "--collect runs nothing"
                           : "--element runs on the GPU Slurm gave it (CUDA's first)");
    return 2;
  }
  BatchManifest m;
  if (const int rc = run_command("nibble batch", [&] {
        m = read_batch_manifest(manifest_path);
        return 0;
      }))
    return rc;
  if (!collect)
    if (const std::string bad = check_job_args(m); !bad.empty()) {
      std::fprintf(stderr, "nibble batch: %s\n", bad.c_str());
      return 2;
    }
  std::error_code ec;
  if (collect && !fs::is_directory(m.out)) {
    std::fprintf(stderr, "nibble batch --collect: the results folder %s does not exist: the batch has not run (nibble batch %s "
                 "--slurm submits it)\n", m.out.c_str(), manifest_path.c_str());
    return 2;
  }
  // The results folder, made where a run is about to write into it (a refused batch leaves none).
  const auto make_out = [&] {
    fs::create_directories(m.out, ec);
    if (fs::is_directory(m.out)) return 0;
    std::fprintf(stderr, "nibble batch: the results folder %s cannot be made (%s)\n", m.out.c_str(), ec.message().c_str());
    return 2;
  };

  if (collect) {
    const json c = collect_batch(m);
    std::printf("nibble batch --collect: %d done (%d of them not passed), %d failed, %d missing of %zu\n", c["done"].get<int>(),
                c["not_passed"].get<int>(), c["failed"].get<int>(), c["missing"].get<int>(), m.jobs.size());
    for (const json& r : c["rows"])
      if (r["state"] != "done" || !r["why"].get<std::string>().empty())
        std::printf("  %-8s %s: %s%s\n", r["state"].get<std::string>().c_str(), r["id"].get<std::string>().c_str(),
                    r["disposition"].get<std::string>().empty() ? "" : (r["disposition"].get<std::string>() + ": ").c_str(),
                    r["why"].get<std::string>().c_str());
    if (!c["resubmit"].is_null()) std::printf("  resubmit: %s\n", c["resubmit"].get<std::string>().c_str());
    if (const int rc = write_results(m, "collect", c)) return rc;
    return c["failed"].get<int>() + c["missing"].get<int>() + c["not_passed"].get<int>() == 0 ? 0 : 1;
  }

  if (element >= 0) {
    if (size_t(element) >= m.jobs.size()) {
      std::fprintf(stderr, "nibble batch: --element %d: the manifest has %zu jobs (0 to %zu)\n", element, m.jobs.size(), m.jobs.size() - 1);
      return 2;
    }
    if (const int rc = make_out()) return rc;
    stop_children_on_signals();  // Slurm's scancel or time limit: the grade goes with the element
    BatchManifest one = m;
    one.jobs = {m.jobs[size_t(element)]};
    const Log log{true, false};
    if (const int rc = build_fixtures(one, log)) return rc;
    const auto outcomes = run_batch(one, {-1}, [&](const BatchJob& j, int) { return run_job_process(j, -1, m.timeout_seconds); }, {});
    std::printf("nibble batch: element %d (%s): %s%s\n", element, one.jobs[0].id.c_str(), outcomes[0].disposition.c_str(),
                outcomes[0].reason.empty() ? "" : (": " + outcomes[0].reason).c_str());
    // The footer's codes: 2 when the job's own command said bad input or no GPU (CUDA's answer, not
    // NVML's: a container may run CUDA without NVML), else 1 when the job did not pass.
    return outcomes[0].exit_code == 2 ? 2 : exit_of(outcomes);
  }

  if (slurm) {
    // The script first: a path it refuses (a space, a shell character) leaves no folder behind.
    std::string text;
    if (const int rc = run_command("nibble batch --slurm", [&] {
          text = slurm_array_script(m, self_exe(), partition, time_limit);
          return 0;
        }))
      return rc;
    if (const int rc = make_out()) return rc;
    const std::string script = slurm_script_path(m);
    const fs::path dir = fs::path(script).parent_path();
    fs::create_directories(dir, ec);
    if (const int rc = run_command("nibble batch --slurm", [&] {
          write_file_atomic(script, text);
          return 0;
        }))
      return rc;
    std::printf("nibble batch: %zu jobs -> %s\n", m.jobs.size(), script.c_str());
    if (no_submit) return 0;
    const std::string log = (dir / (m.name + ".sbatch.log")).string();
    fs::remove(log, ec);
    const ChildExit e = run_child({"/usr/bin/env", "sbatch", "--parsable", script}, log, 120);
    const std::string said = file_tail(log, 2000);
    if (e.kind != ChildExit::Exited || e.code != 0) {
      std::fprintf(stderr, "nibble batch: sbatch failed (%s): %s\n  Is Slurm's client installed and a cluster reachable (sinfo)? "
                   "The script is %s\n", e.describe().c_str(), said.c_str(), script.c_str());
      return 3;
    }
    std::printf("nibble batch: submitted job array %s; `nibble batch %s --collect` gathers the results\n",
                said.substr(0, said.find_first_of("\n;")).c_str(), manifest_path.c_str());
    return 0;
  }

  // This host: one grade per GPU at a time.
  std::vector<int> devices;
  const auto gpu_jobs = std::count_if(m.jobs.begin(), m.jobs.end(), [](const BatchJob& j) { return j.needs_gpu; });
  std::string why_none;
  const int visible = gpu_jobs > 0 || devices_text.empty() ? visible_device_count(&why_none) : 0;  // as a grade's --device numbers them
  if (gpu_jobs > 0 && visible <= 0) {
    // Each such job would build its fixtures and then fail the same way, one after another.
    std::fprintf(stderr, "nibble batch: no GPU found (%s), and %ld of the %zu jobs need one (every grade, and a calibrate "
                 "without --path cpu): nothing was run. Run the batch on a machine with a GPU, or with --slurm.\n",
                 why_none.c_str(), long(gpu_jobs), m.jobs.size());
    return 2;
  }
  if (!devices_text.empty()) {
    std::stringstream ss(devices_text);
    for (std::string d; std::getline(ss, d, ',');) {
      if (d.empty() || d.size() > 6 || d.find_first_not_of("0123456789") != std::string::npos) {
        std::fprintf(stderr, "nibble batch: --devices takes GPU numbers separated by commas, e.g. 0,1; not '%s'\n", devices_text.c_str());
        return 2;
      }
      devices.push_back(std::stoi(d));
      if (std::count(devices.begin(), devices.end(), devices.back()) > 1) {
        std::fprintf(stderr, "nibble batch: --devices names GPU %d twice; timings never share a GPU: name each once\n",
                     devices.back());
        return 2;
      }
    }
    // Each number must name a GPU as a grade's --device does (select_device), where a job needs one
    // (for jobs without a GPU, a calibrate --path cpu, the numbers are only how many run at once).
    for (const int d : devices)
      if (const std::string p = gpu_jobs > 0 ? device_number_problem(d, visible) : ""; !p.empty()) {
        std::fprintf(stderr, "nibble batch: --devices names GPU %d, but %s\n", d, p.c_str());
        return 2;
      }
  } else {
    for (int d = 0; d < visible; ++d) devices.push_back(d);
    if (devices.empty()) {
      devices.push_back(-1);  // one slot: the jobs run one at a time on the CPU
      if (!quiet) std::fprintf(stderr, "nibble batch: no GPU found (%s): one job at a time, none on a GPU\n", why_none.c_str());
    }
  }
  if (const int rc = make_out()) return rc;
  // One batch at a time per results folder: two would run every job twice, on shared GPUs, each
  // removing the other's reports before its own run. (Slurm's elements are one job each: no lock.)
  const FolderLock lock(m.out, {}, /*wait=*/false);
  if (lock.busy()) {
    std::fprintf(stderr, "nibble batch: another nibble batch is running on the results folder %s; wait for it, or give this "
                 "manifest another \"out\"\n", m.out.c_str());
    return 2;
  }
  const Log log{quiet, isatty(STDERR_FILENO) != 0};
  if (const int rc = build_fixtures(m, log)) return rc;
  stop_children_on_signals();  // Ctrl-C or a kill: the running grades are stopped, the records kept
  const auto outcomes = run_batch(
      m, devices, [&](const BatchJob& j, int d) { return run_job_process(j, d, m.timeout_seconds); },
      [&](const std::string& line) {
        if (!quiet) std::fprintf(stderr, "%s\n", line.c_str());
      });
  const json summary = batch_summary(m, outcomes);
  std::cout << format_batch_summary(summary);
  if (const int rc = write_results(m, "batch-summary", summary)) return rc;
  if (children_stopping()) {
    std::fprintf(stderr, "nibble batch: stopped; the jobs that were running were killed and run again on the next `nibble batch %s`\n",
                 manifest_path.c_str());
    return 130;
  }
  return exit_of(outcomes);
}

}  // namespace nibble
