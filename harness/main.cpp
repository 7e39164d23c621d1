// main.cpp: the `nibble` command line (CLI11).
//
//   nibble grade --task T --solution X.so [--solution Y.py ...] [--config full|tiny] [--seeds 0,1] [--fixture DIR] [--out R.json] [--dump DIR]
//   nibble calibrate --task T [--config full|tiny] [--seeds 0,1] [--out T.json] [--path gpu|cpu|auto]
//   nibble fixture build --task T --config C --seed S [--out DIR] [--threads N]
//   nibble fixture verify DIR
//   nibble compare BASE.json NEW.json [--max-slowdown PCT] [--alpha A] [--force] [--json]
//   nibble report show R.json | nibble report html R.json [BASE.json] [--beside X.json ...] -o R.html
//   nibble leaderboard RESULTS... [-o board.html] [--markdown board.md] [--json board.json]
//                                 reports or folders of them, ranked per task and config
//   nibble configs [--task T]     the tasks and their official configs, one "task config" per line
//   nibble batch MANIFEST [--devices 0,1] [--slurm [--partition P] [--time T] [--no-submit]] [--element I] [--collect]
// Hidden: `nibble __child <job-fd>`, the grader's child process (harness/protocol.h).
#include <CLI/CLI.hpp>

#include <chrono>
#include <cstdlib>
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <unistd.h>

#include "fixtures/fixture.h"
#include "fixtures/safetensors.h"
#include "harness/batch.h"
#include "harness/calibrate.h"
#include "harness/child.h"
#include "harness/cli_errors.h"
#include "fixtures/decode/decode_config.h"
#include "harness/decode/decode_import.h"
#include "harness/process.h"
#include "harness/provenance.h"
#include "harness/grade_common.h"
#include "harness/grade.h"
#include "harness/profile.h"
#include "harness/report_cli.h"
#include "harness/task.h"

using namespace nibble;

namespace {

/** `nibble fixture build --out DIR` writes only over what is provably its own: nothing, or the
 *  fixture of this (task, config, seed) (readable, or broken: a model file carrying nibble's
 *  metadata for it). Another seed's fixture, an imported one (no seed rebuilds it), a manifest or
 *  model file nibble did not write is someone's: refused (std::invalid_argument) with what it is,
 *  the folder called `named` ("--out DIR", or the cache's folder where no --out was given). */
void refuse_foreign_fixture_dir(const std::string& out, const std::string& named, const std::string& task,
                                const std::string& config, uint64_t seed) {
  const std::filesystem::path dir(out);
  const auto another = [&](const std::string& t, const std::string& c, const std::string& s) {
    return std::invalid_argument(named + " holds the fixture of " + t + " / " + c + " seed " + s +
                                 "; choose another folder, or remove that one first");
  };
  const auto theirs = [&](const std::string& what) {
    return std::invalid_argument(named + " holds " + what + " (not a fixture nibble built); choose another folder, "
                                 "or move it first");
  };
  const bool has_manifest = std::filesystem::exists(dir / kFixtureManifestFile),
             has_model = std::filesystem::exists(dir / kFixtureModelFile);
  bool own_manifest = false;  // nibble's manifest of this very (task, config, seed), generated
  if (has_manifest) {
    FixtureManifest old;
    try {
      old = read_manifest(out);
    } catch (const std::runtime_error&) {
      if (!has_model) throw theirs(std::string("a ") + kFixtureManifestFile + " nibble cannot read and no " + kFixtureModelFile);
      // an unreadable manifest beside a model file: a broken fixture if the file is nibble's (below)
    }
    if (!old.task.empty()) {
      if (old.task != task || old.config != config || old.seed != seed)
        throw another(old.task, old.config, std::to_string(old.seed));
      if (!old.source.is_null())
        throw std::invalid_argument(named + " holds an imported fixture (nibble fixture import), which a build "
                                    "from a seed would destroy; choose another folder");
      own_manifest = true;  // the model file beside it: nibble's too when readable (checked below)
    }
  }
  if (!has_model) return;
  std::map<std::string, std::string> meta;
  try {
    meta = SafetensorsFile((dir / kFixtureModelFile).string()).metadata();
  } catch (const std::exception&) {
    // Beside this seed's own manifest, an unreadable model file is that fixture's, broken (cut short,
    // say): rebuilding it is what verify's message asks for.
    if (own_manifest) return;
    throw theirs(std::string("a ") + kFixtureModelFile + " that is not a safetensors file");
  }
  if (!meta.count("task") || !meta.count("generator_version"))
    throw theirs(std::string("a ") + kFixtureModelFile + " without nibble's metadata");
  if (meta.count("source_sha256"))
    throw std::invalid_argument(named + " holds an imported fixture's file (nibble fixture import), which a "
                                "build from a seed would destroy; choose another folder");
  if (meta["task"] != task || meta["config"] != config || meta["seed"] != std::to_string(seed))
    throw another(meta["task"], meta["config"], meta["seed"]);
}

int fixture_build(const std::string& task, const std::string& config, uint64_t seed, std::string out, int threads,
                  bool quiet) {
  return run_command("nibble fixture build", [&] {
    const Task& t = find_task(task);
    t.check_config(config);
    const bool cache = out.empty();
    if (cache) out = made_cache_fixture_dir(task, config, seed);
    const std::string named = (cache ? "the fixture cache's folder " : "--out ") + out;
    if (std::error_code e; std::filesystem::exists(out, e) && !std::filesystem::is_directory(out, e))
      throw std::invalid_argument(named + " is a file, not a folder; give a folder for the fixture");
    const bool tty = !quiet && isatty(STDERR_FILENO);
    ProgressFn progress;
    if (tty) {
      progress = [](const std::string& phase, double f) {
        std::fprintf(stderr, "\r  %-24s %5.1f%%", phase.c_str(), 100.0 * f);
        std::fflush(stderr);
      };
    }
    const auto t0 = std::chrono::steady_clock::now();
    std::error_code ec;
    std::filesystem::create_directories(out, ec);  // for its lock: another build of this folder waits
    const FolderLock lock(out, [&] {
      if (!quiet) std::fprintf(stderr, "nibble fixture build: waiting for another nibble building %s\n", out.c_str());
    });
    // What the folder holds is judged holding its lock: a build that waited for another finds that
    // one's fixture there (another seed's: refused), not the empty folder it saw before.
    refuse_foreign_fixture_dir(out, named, task, config, seed);
    const FixtureManifest m = t.build_fixture(config, seed, out, threads, progress);
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (tty) std::fprintf(stderr, "\n");
    std::printf("fixture %s / %s seed %llu -> %s\n  %lld bytes, SHA-256 %s, built in %.2f s with %d threads\n",
                task.c_str(), config.c_str(), (unsigned long long)seed, out.c_str(), (long long)m.file_bytes,
                m.file_sha256.c_str(), s, m.threads);
    return 0;
  });
}

int fixture_verify(const std::string& dir) {
  std::error_code ec;
  if (dir.empty() || !std::filesystem::is_directory(dir, ec)) {
    std::fprintf(stderr, "nibble fixture verify: '%s' is not a folder; pass a fixture folder (nibble fixture build --out DIR)\n",
                 dir.c_str());
    return 2;
  }
  try {
    FixtureManifest m;
    try {
      m = read_manifest(dir);
    } catch (const std::runtime_error& e) {  // no task, config or seed to name: the general command
      throw std::runtime_error(std::string(e.what()) +
                               "; rebuild the fixture with `nibble fixture build --task T --config C --seed S --out " + dir + "`");
    }
    verify_fixture(dir, m);
    // The hashes only say the bytes are the ones the manifest names: check they are a fixture of
    // the task and config it claims (every tensor present with its dtype and shape), and that the
    // manifest's per-tensor hashes, which name the tensors that differ in later checks, are right.
    check_fixture_tensors(dir, m, find_task(m.task).tensors(m.config));
    verify_fixture_tensors(dir, m);
    std::printf("fixture %s: %s / %s seed %llu, generator %d, SHA-256 %s: OK\n", dir.c_str(), m.task.c_str(),
                m.config.c_str(), (unsigned long long)m.seed, m.generator_version, m.file_sha256.c_str());
    if (m.imported())
      std::printf("  imported from a %s checkpoint %s (SHA-256 %s): not rebuildable from its seed\n",
                  m.source.value("format", std::string("?")).c_str(), m.source.value("checkpoint", std::string("?")).c_str(),
                  m.source.value("checkpoint_sha256", std::string("?")).c_str());
    return 0;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "nibble fixture verify: %s\n", e.what());
    return 1;
  }
}

int fixture_import(ImportOptions opt, bool quiet) {
  return run_command("nibble fixture import", [&] {
    if (opt.reference.empty()) opt.reference = bundled_reference(self_exe(), find_task(kDecodeTask), "");
    const FixtureManifest m = import_decode_fixture(opt, [quiet](const std::string& line) {
      if (!quiet) std::fprintf(stderr, "[nibble] %s\n", line.c_str());
    });
    std::printf("fixture %s / %s imported from %s (%s, SHA-256 %s) -> %s\n  %lld bytes, SHA-256 %s\n"
                "  grade it: nibble grade --fixture %s --seeds 0 --config %s --solution X.so\n",
                m.task.c_str(), m.config.c_str(), opt.checkpoint.c_str(), opt.format.c_str(),
                m.source.value("checkpoint_sha256", std::string()).c_str(), opt.out.c_str(), (long long)m.file_bytes,
                m.file_sha256.c_str(), opt.out.c_str(), m.config.c_str());
    return 0;
  });
}

}  // namespace

/** One seed (fixtures/fixture.h: seed_text_problem). */
const CLI::Validator kSeed([](std::string& s) { return seed_text_problem(s); }, "SEED");

/** A comma-separated list of seeds, every element one kSeed ("0,,1" or "0," is an error, not 0,1
 *  or 0: CLI11's own delimiter drops empty elements). */
std::vector<std::string> split_commas(const std::string& s) {
  std::vector<std::string> out(1);
  for (char ch : s) {
    if (ch == ',')
      out.emplace_back();
    else
      out.back() += ch;
  }
  return out;
}
const CLI::Validator kSeedList(
    [](std::string& s) -> std::string {
      if (s.empty()) return "must not be empty (leave --seeds out for its default, 0,1)";
      for (std::string w : split_commas(s)) {
        if (w.empty()) return "'" + s + "' has an empty element: give seeds separated by single commas";
        if (const std::string why = kSeed(w); !why.empty()) return why;
      }
      return "";
    },
    "SEED[,SEED...]");
std::vector<uint64_t> parse_seed_list(const std::string& s) {
  std::vector<uint64_t> v;
  for (const std::string& w : split_commas(s)) v.push_back(std::stoull(w));
  return v;
}

/** `nibble configs`: one "task config" line per official config of `task` (all tasks when empty),
 *  for scripts that grade every shape (scripts/gemm-all.sh). Exit 2 for an unknown task. */
int list_configs(const std::string& task) {
  return run_command("nibble configs", [&] {
    std::vector<const Task*> tasks = all_tasks();
    if (!task.empty()) tasks = {&find_task(task)};
    for (const Task* t : tasks)
      for (const std::string& c : t->official_configs()) std::printf("%s %s\n", t->name().c_str(), c.c_str());
    return 0;
  });
}

/** A GPU's number (--device): 0, 1, ... as nvidia-smi -L lists them. */
const CLI::Validator kGpuIndex(
    [](std::string& s) -> std::string {
      if (s.empty() || s.size() > 4 || s.find_first_not_of("0123456789") != std::string::npos)
        return "a GPU is numbered 0, 1, ... as nvidia-smi -L lists it, not '" + s + "'";
      return "";
    },
    "GPU");

static int nibble_main(int argc, char** argv) {  // main: its code, standard output checked
  CLI::App app{"nibble: grade low-bit weight-only GPU kernels against an fp32 reference, timed with CUPTI", "nibble"};
  app.require_subcommand(1);

  // What --task and --config accept, from the registry.
  std::string config_help = "Task config (default: the task's default";
  for (const Task* t : all_tasks())
    config_help += "; " + t->name() + ": " + t->config_syntax() + (t->default_config().empty() ? ", required" : ", default " + t->default_config());
  config_help += ")";
  GradeOptions g;
  g.task = all_tasks().front()->name();
  for (int i = 0; i < argc; ++i) g.argv.push_back(argv[i]);
  auto* grade = app.add_subcommand("grade", "Check a solution .so against the reference and time it; write a JSON report");
  grade->footer("Exit codes: 0 Passed; 1 graded, any other disposition (the report says which and why); 2 bad input, or no "
                "GPU: nothing graded; 3 the grader itself could not finish (the reference failed, a report could not be written).");
  grade->add_option("--task", g.task, "Task to grade")->capture_default_str();
  std::vector<std::string> solutions;
  grade->add_option("--solution", solutions,
                    "Solution: a shared object (C ABI of include/nibble/nibble.h) or a Python module (.py); repeat it to "
                    "grade several on the same fixtures, side by side (then --out is a folder)")
      ->required()
      ->check(kNonEmptyValue);
  grade->add_option("--config", g.config, config_help);
  grade->add_option_function<std::string>("--seeds", [&g](const std::string& s) { g.seeds = parse_seed_list(s); },
                                          "Fixture seeds, comma separated (default 0,1)")
      ->check(kSeedList);
  grade->add_option("--fixture", g.fixture_dir, "Fixture folder (one seed); default: the cache, built when missing")->check(kNonEmptyValue);
  grade->add_option("--out", g.out, "Report path (written atomically); with several --solution, a folder (default nibble-reports)")
      ->capture_default_str()
      ->check(kNonEmptyValue);
  grade->add_option("--dump", g.dump_dir, "Write reference and candidate logits + appended K/V of every checked step here")->check(kNonEmptyValue);
  grade->add_option("--gbench-json", g.gbench_json, "Also write the timing in Google Benchmark's JSON format")->check(kNonEmptyValue);
  grade->add_option("--calibration", g.calibration, "nibble calibrate JSON giving the report its context (default: the committed one)")->check(kNonEmptyValue);
  grade->add_option("--history", g.history, "Append one JSON line (commit, date, GPU, solution, median, worst error)")->check(kNonEmptyValue);
  grade->add_option("--reference", g.reference, "Reference .so (default: the bundled fp32 cuBLAS reference)")->check(kNonEmptyValue);
  grade->add_option("--timeout", g.timeout_seconds, "Watchdog per child process, seconds")->capture_default_str()->check(kNonEmptyValue);
  grade->add_option("--step-timeout", g.step_timeout_seconds, "Watchdog per decode_step call (+ device sync), seconds")
      ->capture_default_str()->check(kNonEmptyValue);
  grade->add_option("--build-timeout", g.build_timeout_seconds, "Watchdog of build_model and teardown, seconds")
      ->capture_default_str()->check(kNonEmptyValue);
  grade->add_option("--timing-seed", g.timing_seed, "Seed of the timed calls' input seeds (decode: token ids; GEMM: A's sign masks) and of which calls each round keeps, for a reproducible run; default: no seed, every draw from the OS by the grader's parent, each call's input seed revealed only as its window opens, so a candidate can neither learn nor predict them")
      ->check(kSeed);  // as a fixture seed: "", -1 or 2^64 would otherwise become another seed silently
  grade->add_option("--min-rounds", g.min_rounds, "Rounds of timed calls (a decode step is one call) at least")->capture_default_str()->check(kNonEmptyValue);
  grade->add_option("--max-rounds", g.max_rounds, "Rounds of timed calls at most")->capture_default_str()->check(kNonEmptyValue);
  grade->add_option("--max-timing-seconds", g.max_timing_seconds, "Stop timing after this long")->capture_default_str()->check(kNonEmptyValue);
  grade->add_option("--threads", g.threads, "Threads for building fixtures (0 = all cores)")->check(CLI::Range(0, 4096))->capture_default_str()->check(kNonEmptyValue);
  bool no_timing = false, no_verify = false;
  grade->add_flag("--no-timing", no_timing, "Check correctness only");
  grade->add_flag("--no-verify-fixture", no_verify, "Skip re-hashing the fixtures (before the candidate runs and again before the reference reads them)");
  grade->add_flag("--require-sandbox", g.require_sandbox,
                  "Refuse to grade (exit 2, or 3 with a report when only a child finds it) unless every layer of the "
                  "child's sandbox (rlimits, namespaces, no_new_privs, Landlock, seccomp) is in force on this machine");
  grade->add_option("--profile", g.profile,
                    "After the graded run, run the timed calls once more under a profiler: ncu (Nsight Compute, "
                    "--clock-control none) or nsys (Nsight Systems); the profile is stored next to the report, its top "
                    "kernels' figures go into it")
      ->check([](const std::string& v) {
        try {
          check_profiler(v);
          return std::string();
        } catch (const std::invalid_argument& e) {
          return std::string(e.what());
        }
      });
  grade->add_option("--clock", g.clock,
                    "The time a call is graded by: span (the CUPTI GPU span of its work, the default) or wall (the "
                    "grader's own clock around the call, less the call ledger's calibrated overhead: for host-bound "
                    "solutions, a Python call at a small GEMM, whose host time then counts in the figure; the rule on "
                    "time beyond the GPU span is off, as nothing can hide from that clock; reports of the two clocks "
                    "are never ranked or compared together)")
      ->capture_default_str()
      ->check(CLI::IsMember({"span", "wall"}));
  grade->add_option("--graph-records", g.graph_records,
                    "How a CUDA graph's launch is timed: graphs (one record per launch, CUPTI's GRAPH_TRACE, as Nsight "
                    "Systems' --cuda-graph-trace=graph, the default) or nodes (a CUPTI record per kernel, copy and memset "
                    "node: per-node records add GPU time to every node, which a graph of thousands of small kernels pays "
                    "thousands of times; a graph instantiated for launch from the GPU is then InvalidTiming). Work "
                    "outside graphs is recorded per kernel either way; reports of the two modes are set apart (never ranked "
                    "or compared together) only where both launched CUDA graphs or cannot say they did not (a report "
                    "with timing.graph_launches_audited 0 goes with either)")
      ->capture_default_str()
      ->check(CLI::IsMember({"nodes", "graphs"}));
  grade->add_option("--device", g.device,
                    "GPU of this host to grade on, numbered as nvidia-smi -L (or as CUDA_VISIBLE_DEVICES lists them when set); "
                    "default: CUDA's first")
      ->check(kGpuIndex);
  grade->add_flag("-q,--quiet", g.quiet, "No progress lines");

  CalibrateOptions c;
  c.task = g.task;
  c.argv = g.argv;
  auto* calibrate = app.add_subcommand("calibrate", "Measure the drop-the-feature table: every reference variant against the gate");
  calibrate->footer("Exit codes: 0 healthy (every legitimate variant within half the gate, every dropped feature beyond twice "
                    "it); 1 unhealthy; 2 bad input, or --path gpu without a GPU; 3 the calibration could not finish.");
  calibrate->add_option("--task", c.task, "Task")->capture_default_str();
  calibrate->add_option("--config", c.config, config_help);
  calibrate->add_option_function<std::string>("--seeds", [&c](const std::string& s) { c.seeds = parse_seed_list(s); },
                                              "Fixture seeds, comma separated (default 0,1)")
      ->check(kSeedList);
  calibrate->add_option("--out", c.out, "Table as JSON (written atomically)")->capture_default_str();
  calibrate->add_option("--fixture", c.fixture_dir, "Fixture folder (one seed; an imported one, say); default: the cache")
      ->check(kNonEmptyValue);
  calibrate->add_option("--path", c.path, "gpu: the reference .so per variant; cpu: the fp64 oracle; auto: gpu if present")
      ->capture_default_str();
  calibrate->add_option("--reference", c.reference, "Reference .so (default: the bundled one)")->check(kNonEmptyValue);
  calibrate->add_option("--threads", c.threads, "Threads for fixtures and the CPU oracle (0 = all cores)")->check(CLI::Range(0, 4096))->capture_default_str()->check(kNonEmptyValue);
  calibrate->add_option("--timeout", c.timeout_seconds,
                        "Watchdog per child process (the GPU path; the CPU oracle runs in this process, unwatched), seconds")->capture_default_str()->check(kNonEmptyValue);
  calibrate->add_option("--device", c.device, "GPU of this host, as nibble grade --device")->check(kGpuIndex);
  calibrate->add_flag("-q,--quiet", c.quiet, "No progress lines");

  // nibble compare BASE.json NEW.json | nibble report show|html REPORT.json | nibble leaderboard
  // RESULTS...: they parse their own arguments and exit from their callbacks with their own codes
  // (compare exits 4 on a bad command line, not 2, which is its "correctness regression"); see
  // harness/report_cli.h.
  add_report_commands(app);
  auto* batch = app.add_subcommand("batch", "Run a manifest of grades over every GPU of this host, or as a Slurm job array (batch --help)");
  batch->prefix_command();  // its own parser (batch_cli.cpp), as report and compare
  batch->set_help_flag();
  batch->callback([batch] {
    const int code = batch_command(batch->remaining());
    std::fflush(nullptr);
    std::exit(code);
  });

  auto* fixture = app.add_subcommand("fixture", "Build, verify or import task fixtures");
  fixture->require_subcommand(1);
  std::string f_task = all_tasks().front()->name(), f_config = "tiny", f_out;
  uint64_t f_seed = 0;
  int f_threads = 0;
  bool f_quiet = false;
  auto* fbuild = fixture->add_subcommand("build", "Build a fixture: same (task, config, seed) -> same bytes on any machine");
  fbuild->footer("Exit codes: 0 built (or already there); 2 bad arguments; 3 the fixture could not be written.");
  fbuild->add_option("--task", f_task, "Task")->capture_default_str();
  std::string build_config_help = "Task config (default tiny, whatever the task";
  for (const Task* t : all_tasks()) build_config_help += "; " + t->name() + ": " + t->config_syntax();
  fbuild->add_option("--config", f_config, build_config_help + ")")->capture_default_str();
  fbuild->add_option("--seed", f_seed, "Seed")->required()->check(kSeed);
  fbuild->add_option("--out", f_out, "Output folder (default: the fixture cache)")->check(kNonEmptyValue);
  fbuild->add_option("--threads", f_threads, "Threads (0 = all cores)")->check(CLI::Range(0, 4096))->capture_default_str()->check(kNonEmptyValue);
  fbuild->add_flag("-q,--quiet", f_quiet, "No progress");
  std::string v_dir;
  auto* fverify = fixture->add_subcommand("verify", "Re-hash a fixture and compare with its manifest");
  fverify->footer("Exit codes: 0 every byte and tensor matches its manifest; 1 not (the message names the tensor and the "
                  "rebuild command); 2 bad arguments.");
  fverify->add_option("DIR", v_dir, "Fixture folder")->required();
  ImportOptions imp;
  auto* fimport = fixture->add_subcommand(
      "import", "A decode fixture from a real int4 checkpoint (AWQ, GPTQ v1, compressed-tensors) and real token ids; "
                "the KV prefix computed by running the model over the first ids");
  fimport->footer("Exit codes: 0 imported; 2 a refused checkpoint, token file or command line (the message says what and "
                  "why); 3 a failure of the machine (I/O, the GPU).");
  fimport->add_option("--format", imp.format, "awq | gptq | compressed-tensors")->required()->check(
      CLI::IsMember({"awq", "gptq", "compressed-tensors"}));
  fimport->add_option("checkpoint", imp.checkpoint, "Checkpoint folder: config.json + safetensors shards")->required();
  fimport->add_option("--tokens", imp.tokens, "Token ids (whitespace or comma separated, or a JSON array): the KV prefix's, "
                                              "then the decode steps' (prefill + 32 of them)")->required()->check(CLI::ExistingFile);
  fimport->add_option("--out", imp.out, "Fixture folder to write")->required()->check(kNonEmptyValue);
  fimport->add_option("--config", imp.config, "Decode config (default: the one the checkpoint's dimensions match)")->check(kNonEmptyValue);
  fimport->add_option("--path", imp.path, "KV prefix by gpu (the bundled fp32 reference), cpu (the fp64 oracle) or auto")
      ->capture_default_str()->check(CLI::IsMember({"cpu", "gpu", "auto"}));
  fimport->add_option("--reference", imp.reference,
                      "Decode reference .so for --path gpu (default: the bundled one); it runs in this process, "
                      "outside the sandbox: give only a library you trust")->check(kNonEmptyValue);
  fimport->add_option("--threads", imp.threads, "Threads for the CPU path (0 = all cores)")->check(CLI::Range(0, 4096))->capture_default_str();
  bool imp_quiet = false;
  fimport->add_flag("-q,--quiet", imp_quiet, "No progress lines");

  std::string cf_task;
  auto* configs = app.add_subcommand("configs", "List the tasks and their official configs, one `task config` per line");
  configs->footer("Exit codes: 0 listed; 2 an unknown task.");
  configs->add_option("--task", cf_task, "Only this task's configs")->check(kNonEmptyValue);
  int job_fd = -1;
  auto* child = app.add_subcommand("__child", "(internal) run one job of the grader in this process");
  child->group("");
  child->add_option("job_fd", job_fd)->required();

  // `nibble batch` parses each run's args with the command's own parser before any job starts: a
  // manifest's "--path" with no value is refused then, not once per job hours later.
  bool check_args = false;
  for (CLI::App* sub : {grade, calibrate})
    sub->add_flag(kCheckArgsFlag, check_args, "(internal) parse the command line, do nothing else")->group("");
  add_version_flags(app);

  // The first word, and a command's first word where it has commands (fixture), must be a command
  // (or, first, nibble's own --help / --version): CLI11 alone would say "A subcommand is required"
  // for `nibble bogus`, `nibble --bogus` and `nibble fixture bogus` without naming the word.
  CLI::App* at = &app;  // the command the words name (nibble, grade, fixture build, ...)
  std::string path = "nibble";
  {
    for (int i = 1; i < argc && !at->get_subcommands([](const CLI::App*) { return true; }).empty(); ++i) {
      const std::string word = argv[i];
      if (!word.empty() && word[0] == '-') {
        if (at == &app && !app.get_option_no_throw(word.substr(0, word.find('=')))) {
          std::fprintf(stderr, "nibble: unknown option '%s' before the command: options go after it, `nibble COMMAND "
                       "[OPTIONS]` (nibble --help lists the commands)\n", word.c_str());
          return 2;
        }
        break;
      }
      if (const std::string e = unknown_command(*at, word, path); !e.empty()) {
        std::fprintf(stderr, "%s: %s\n", path.c_str(), e.c_str());
        return 2;
      }
      at = at->get_subcommand(word);
      path += " " + word;
    }
  }
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    // CLI11 checks required options before it finds words it does not know: `grade --bogus` read
    // "--solution is required" (a newcomer's finding). An option word the command does not have is
    // said first; a value that looks like one is only looked at when CLI11 found an option missing.
    if (dynamic_cast<const CLI::RequiredError*>(&e) && at != &app)
      for (int i = 1; i < argc; ++i) {
        const std::string word = argv[i];
        if (word.size() < 2 || word[0] != '-' || std::isdigit(static_cast<unsigned char>(word[1])) || word[1] == '.') continue;
        const std::string name = word.substr(0, word.find('='));
        if (!at->get_option_no_throw(name) && name != "--help" && name != "-h") {
          std::fprintf(stderr, "%s: unknown option '%s' (%s --help lists its options)\n", path.c_str(), name.c_str(), path.c_str());
          return 2;
        }
      }
    app.exit(e);
    return 2;
  }

  // --fixture names one fixture: what it is for (task, config, seed) is what was not given.
  for (auto [sub, task, config, seeds, dir] :
       {std::tuple<CLI::App*, std::string*, std::string*, std::vector<uint64_t>*, const std::string*>{
            grade, &g.task, &g.config, &g.seeds, &g.fixture_dir},
        {calibrate, &c.task, &c.config, &c.seeds, &c.fixture_dir}}) {
    if (!sub->parsed() || dir->empty()) continue;
    FixtureManifest m;
    try {
      m = read_manifest(*dir);
    } catch (const std::exception& e) {
      // With its seed given, the fixture check says it later, with the command that remakes it; without,
      // "one seed per --fixture" would speak first and hide it.
      if (sub->get_option("--seeds")->count() != 0) continue;
      std::fprintf(stderr, "nibble %s: --fixture %s holds no readable fixture (%s); give a fixture folder, e.g. one made by "
                   "`nibble fixture build --task T --config C --seed S --out NEW_FOLDER`\n",
                   sub->get_name().c_str(), dir->c_str(), e.what());
      return 2;
    }
    if (sub->get_option("--task")->count() == 0 && task_or_null(m.task)) *task = m.task;
    if (*task != m.task) {
      std::fprintf(stderr, "nibble %s: --fixture %s is a fixture of task %s, not %s: leave --task out or give a fixture of %s\n",
                   sub->get_name().c_str(), dir->c_str(), m.task.c_str(), task->c_str(), task->c_str());
      return 2;
    }
    if (sub->get_option("--config")->count() == 0 && *task == m.task) *config = m.config;
    if (sub->get_option("--seeds")->count() == 0) *seeds = {m.seed};
  }
  // A task without a default config must be given one.
  for (auto [sub, task, config] : {std::tuple<CLI::App*, const std::string*, std::string*>{grade, &g.task, &g.config},
                                   {calibrate, &c.task, &c.config}}) {
    const Task* t = task_or_null(*task);
    if (!sub->parsed() || sub->get_option("--config")->count() != 0 || !t || !config->empty()) continue;
    *config = t->default_config();
    if (config->empty()) {
      std::fprintf(stderr, "nibble %s: --config is required for %s: %s (`nibble configs --task %s` lists the official ones)\n",
                   sub->get_name().c_str(), task->c_str(), t->config_syntax().c_str(), task->c_str());
      return 2;
    }
  }
  // What grade and calibrate check of their options before any work (the values too, not only their
  // syntax), and nothing else: `nibble batch`'s check of each run's args.
  g.timing = !no_timing;
  g.verify_fixture = !no_verify;
  if (check_args)
    return run_command(grade->parsed() ? "nibble grade" : "nibble calibrate", [&] {
      if (grade->parsed()) {
        GradeOptions one = g;
        if (!solutions.empty()) one.solution = solutions.front();
        check_grade_options(one);
      } else {
        check_calibrate_options(c);
      }
      return 0;
    });
  if (grade->parsed()) {
    if (solutions.size() > 1 && grade->get_option("--out")->count() == 0) g.out = "nibble-reports";
    return grade_lineup_main(g, solutions);
  }
  if (calibrate->parsed()) return calibrate_main(c);
  if (configs->parsed()) return list_configs(cf_task);
  if (fbuild->parsed()) return fixture_build(f_task, f_config, f_seed, f_out, f_threads, f_quiet);
  if (fverify->parsed()) return fixture_verify(v_dir);
  if (fimport->parsed()) return fixture_import(imp, imp_quiet);
  if (child->parsed()) {
    // No exit handlers or static destructors after the result is sealed: a solution's atexit() or
    // library destructor gets no last word (and cannot hang the exit).
    int code = 3;
    try {  // the parent reads the failure from the exit status and the log, never from an abort
      code = child_main(job_fd);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "nibble __child: %s\n", e.what());
    }
    std::fflush(nullptr);
    std::_Exit(code);
  }
  return 2;
}

int main(int argc, char** argv) { return stdout_checked(nibble_main(argc, argv)); }
