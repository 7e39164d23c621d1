// test_cli.cpp: the `nibble` command's answers to bad input: a clear message, the documented exit
// code, nothing half-written.
#include <gtest/gtest.h>
#include <nlohmann/json.hpp>
#include <sys/stat.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <sys/wait.h>
#include <filesystem>
#include <fstream>
#include <functional>
#include <thread>

#include "test_binary_dir.h"
#include "fixtures/fixture.h"
#include "fixtures/safetensors.h"
#include "fixtures/sha256.h"
#include "gpu_test_util.h"
#include "harness/atomic_file.h"
#include "harness/ledger.h"
#include "harness/process.h"
#include "harness/python_solution.h"

using namespace nibble;
namespace fs = std::filesystem;

namespace {
using test::bindir;  // tests/test_binary_dir.h
std::string nibble_exe() { return bindir() + "/bin/nibble"; }
/** A committed report of the source tree (report html's input in the output tests). */
std::string source_report() {
  const char* src = std::getenv("NIBBLE_SOURCE_DIR");
  return std::string(src ? src : "..") + "/reports/h200/unfused-full.json";
}

struct Result {
  int code;
  std::string output;
};

/** `nibble args...`, with extra environment variables (KEY=VALUE, through env(1)) when env is not
 *  empty; its exit code and the tail of its output. */
Result run_nibble_env(const std::vector<std::string>& env, std::vector<std::string> args, const TempDir& t) {
  args.insert(args.begin(), nibble_exe());
  if (!env.empty()) {
    args.insert(args.begin(), env.begin(), env.end());
    args.insert(args.begin(), "/usr/bin/env");
  }
  const std::string log = t.path() + "/cli.log";
  std::error_code ec;
  fs::remove(log, ec);
  const ChildExit e = run_child(args, log, 120);
  EXPECT_EQ(e.kind, ChildExit::Exited) << e.describe();
  return {e.code, file_tail(log, 1 << 16)};
}
Result run_nibble(std::vector<std::string> args, const TempDir& t) { return run_nibble_env({}, std::move(args), t); }
}  // namespace

TEST(Cli, MissingSolutionIsAUsageError) {
  TempDir t;
  const Result r = run_nibble({"grade", "--solution", "/nonexistent/libmine.so", "--out", t.path() + "/r.json"}, t);
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.output.find("does not exist"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(t.path() + "/r.json"));
}

// Several solutions: --out is a folder; a grade that leaves no report is a row of the side by side
// (lineup.txt / lineup.json; none when no grade left one), and the exit status is the worst grade's.
TEST(Cli, SeveralSolutionsAreGradedSideBySide) {
  TempDir t;
  Result r = run_nibble({"grade", "--config", "tiny", "--solution", "/nonexistent/a.so", "--solution", "/nonexistent/b.so", "--out",
                         t.path() + "/r.json"},
                        t);
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.output.find("--out names a folder"), std::string::npos) << r.output;
  r = run_nibble({"grade", "--config", "tiny", "--solution", "/nonexistent/a.so", "--solution", "/nonexistent/b.so", "--dump",
                  t.path() + "/d"},
                 t);
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.output.find("grade that solution alone"), std::string::npos) << r.output;
  r = run_nibble({"grade", "--config", "tiny", "--solution", "/nonexistent/a.so", "--solution", "/nonexistent/b.so", "--profile",
                  "ncu", "--out", t.path() + "/p"},
                 t);
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.output.find("--profile goes with one solution"), std::string::npos) << r.output;
  // A missing solution is refused before any grade.
  const std::string dir = t.path() + "/side";
  r = run_nibble({"grade", "--config", "tiny", "--solution", nibble_exe(), "--solution", "/nonexistent/b.so", "--out", dir}, t);
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("'/nonexistent/b.so' does not exist"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(dir + "/lineup.json"));
  // Grades that leave no report (nibble itself is no solution .so) are rows; an old report in the
  // folder does not stand for them (it is kept: nothing of this run replaced it); a solution named
  // lineup does not take the side by side's name.
  fs::create_directories(t.path() + "/sol");
  fs::copy_file(nibble_exe(), t.path() + "/sol/lineup.so");
  fs::create_directories(dir);
  std::ofstream(dir + "/nibble.json") << read_file(source_report());
  std::ofstream(dir + "/lineup.html") << "an old page";
  r = run_nibble({"grade", "--config", "tiny", "--solution", nibble_exe(), "--solution", nibble_exe(), "--solution",
                  t.path() + "/sol/lineup.so", "--out", dir},
                 t);
  EXPECT_NE(r.code, 0) << r.output;
  EXPECT_NE(r.output.find(" -> " + dir + "/nibble.json"), std::string::npos) << r.output;
  if (r.output.find("no usable GPU: none of the 3 solutions is graded") != std::string::npos) {
    // Without a GPU every grade stops at the probe, each saying whether its solution opens here (a
    // newcomer's finding: the second and later were not even opened); no side by side, and nothing
    // graded, so the folder is as it was (the old report and page kept whole).
    EXPECT_EQ(r.code, 2) << r.output;
    EXPECT_NE(r.output.find("nibble grade: " + t.path() + "/sol/lineup.so: The solution does not open"), std::string::npos)
        << r.output;
    EXPECT_EQ(r.output.find("no usable NVIDIA GPU, so nothing can be graded here", r.output.find("nibble-2.json")),
              std::string::npos) << "the no-GPU paragraph once, not per solution\n" << r.output;
    EXPECT_FALSE(fs::exists(dir + "/lineup.json"));
    EXPECT_EQ(read_file(dir + "/nibble.json"), read_file(source_report())) << "an earlier run's report was lost";
    EXPECT_EQ(read_file(dir + "/lineup.html"), "an old page");
    // ... and a folder this call made is not left behind empty.
    const std::string fresh = t.path() + "/fresh";
    r = run_nibble({"grade", "--config", "tiny", "--solution", nibble_exe(), "--solution", nibble_exe(), "--out", fresh}, t);
    EXPECT_EQ(r.code, 2) << r.output;
    EXPECT_FALSE(fs::exists(fresh)) << r.output;
    return;
  }
  // Each grade's report is named after its solution's file, the same stem twice gets a second name,
  // and lineup.json stays the side by side's.
  for (const char* name : {"/nibble.json", "/nibble-2.json", "/lineup-2.json"})
    EXPECT_NE(r.output.find(" -> " + dir + name), std::string::npos) << name << "\n" << r.output;
  if (!fs::exists(dir + "/lineup.json")) {
    // No grade wrote a report: no side by side, and the old page is gone.
    EXPECT_NE(r.output.find("none of the 3 grades wrote a report"), std::string::npos) << r.output;
    EXPECT_FALSE(fs::exists(dir + "/lineup.html")) << "an old page would stand for this run";
    EXPECT_EQ(read_file(dir + "/nibble.json"), read_file(source_report())) << "an earlier run's report was lost";
    return;
  }
  const auto j = nlohmann::json::parse(read_file(dir + "/lineup.json"));
  ASSERT_EQ(j["rows"].size(), 3u);
  // With a GPU, nibble's own binary is no solution (MissingSymbol).
  EXPECT_NE(j["rows"][0]["disposition"], "Passed") << "an old report stood for this grade";
  EXPECT_NE(j["rows"][0]["schema_version"], "1.0.0") << "an old report stood for this grade";
  EXPECT_EQ(j["rows"][0]["label"], dir + "/nibble.json");
  EXPECT_EQ(j["rows"][1]["label"], dir + "/nibble-2.json") << "the same stem twice: a second name";
  EXPECT_EQ(j["rows"][2]["label"], dir + "/lineup-2.json") << "lineup.json is the side by side's";
  if (j["rows"][0]["disposition"] == "NoReport")
    EXPECT_FALSE(fs::exists(dir + "/lineup.html")) << "no first report: no page (an old one removed)";
  else
    EXPECT_EQ(read_file(dir + "/lineup.html").find("an old page"), std::string::npos);
}

// --device N counts the GPUs CUDA_VISIBLE_DEVICES lists when it is set: one beyond them is a usage
// error before any work, on any machine.
TEST(Cli, DeviceBeyondTheVisibleGpusIsAUsageError) {
  TempDir t;
  for (const char* command : {"grade", "calibrate"}) {
    std::vector<std::string> args = {command, "--config", "tiny", "--device", "2", "--out", t.path() + "/r.json"};
    if (std::string(command) == "grade") args.insert(args.end(), {"--solution", nibble_exe()});
    const Result r = run_nibble_env({"CUDA_VISIBLE_DEVICES=0,1"}, args, t);
    EXPECT_EQ(r.code, 2) << command << ": " << r.output;
    EXPECT_NE(r.output.find("--device 2: CUDA_VISIBLE_DEVICES=0,1 lists 2 GPU(s), numbered from 0"), std::string::npos)
        << command << ": " << r.output;
  }
  const Result r = run_nibble({"grade", "--solution", nibble_exe(), "--device", "-1"}, t);
  EXPECT_EQ(r.code, 2) << r.output;
}

TEST(Cli, AMisspeltSandboxLayerOrAFolderAsSolutionIsAUsageError) {
  TempDir t;
  Result r = run_nibble_env({"NIBBLE_SANDBOX_DISABLE=landlok"}, {"grade", "--solution", nibble_exe(), "--out", t.path() + "/r.json"}, t);
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("'landlok' is not a layer it can leave out"), std::string::npos) << r.output;
  fs::create_directories(t.path() + "/mod.py");
  r = run_nibble({"grade", "--solution", t.path() + "/mod.py", "--out", t.path() + "/r.json"}, t);
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("is not a file (a folder?)"), std::string::npos) << r.output;
}

// --version: the version reports carry (nibble_version) and the commit the binary was built at.
TEST(Cli, VersionSaysWhatReportsSay) {
  TempDir t;
  const Result r = run_nibble({"--version"}, t);
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(r.output.rfind("nibble " NIBBLE_TEST_VERSION, 0), 0u) << r.output;
  // After any command, however deep, the same line (not the options that command lacks).
  for (const std::vector<std::string>& cmd : std::vector<std::vector<std::string>>{
           {"grade"}, {"calibrate"}, {"fixture", "build"}, {"batch"}, {"compare"}, {"report", "show"}, {"leaderboard"}}) {
    std::vector<std::string> args = cmd;
    args.push_back("--version");
    const Result c = run_nibble(args, t);
    EXPECT_EQ(c.code, 0) << cmd[0] << ": " << c.output;
    EXPECT_EQ(c.output, r.output) << cmd[0];
  }
}

TEST(Cli, FixtureBuildNeverOverwritesAnotherFixture) {
  TempDir t;
  const std::string dir = t.path() + "/fx";
  Result r = run_nibble({"fixture", "build", "--config", "tiny", "--seed", "0", "--out", dir, "-q"}, t);
  ASSERT_EQ(r.code, 0) << r.output;
  r = run_nibble({"fixture", "build", "--config", "tiny", "--seed", "1", "--out", dir, "-q"}, t);
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("holds the fixture of megakernel-int4-weight-decode / tiny seed 0"), std::string::npos) << r.output;
  r = run_nibble({"fixture", "build", "--config", "tiny", "--seed", "0", "--out", dir, "-q"}, t);
  EXPECT_EQ(r.code, 0) << "the same fixture again is fine\n" << r.output;
  // Its model file cut short: verify names the rebuild, and that command rebuilds it (it refused:
  // "not a safetensors file", a newcomer's finding).
  std::filesystem::resize_file(dir + "/model.safetensors", 3000);
  r = run_nibble({"fixture", "verify", dir}, t);
  EXPECT_NE(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("nibble fixture build --task megakernel-int4-weight-decode --config tiny --seed 0 --out " + dir),
            std::string::npos)
      << r.output;
  r = run_nibble({"fixture", "build", "--task", "megakernel-int4-weight-decode", "--config", "tiny", "--seed", "0", "--out", dir,
                  "-q"},
                 t);
  EXPECT_EQ(r.code, 0) << r.output;
  r = run_nibble({"fixture", "verify", dir}, t);
  EXPECT_EQ(r.code, 0) << r.output;
  // A model file without a manifest (someone's checkpoint) is left as it is.
  const std::string theirs = t.path() + "/theirs";
  std::filesystem::create_directories(theirs);
  std::ofstream(theirs + "/model.safetensors") << "not a fixture";
  r = run_nibble({"fixture", "build", "--config", "tiny", "--seed", "0", "--out", theirs, "-q"}, t);
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("that is not a safetensors file (not a fixture nibble built)"), std::string::npos) << r.output;
  // ... and with any manifest beside it that nibble cannot read (another tool's, or none at all).
  for (const char* manifest : {R"({"hello": 1})", "not json"}) {
    std::ofstream(theirs + "/manifest.json") << manifest;
    r = run_nibble({"fixture", "build", "--config", "tiny", "--seed", "0", "--out", theirs, "-q"}, t);
    EXPECT_EQ(r.code, 2) << manifest << "\n" << r.output;
  }
  std::ifstream in(theirs + "/model.safetensors");
  EXPECT_EQ(std::string(std::istreambuf_iterator<char>(in), {}), "not a fixture");
  // A file where the folder should be is bad input (exit 2), left as it is.
  std::ofstream(t.path() + "/a-file") << "mine";
  r = run_nibble({"fixture", "build", "--config", "tiny", "--seed", "0", "--out", t.path() + "/a-file", "-q"}, t);
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("is a file, not a folder"), std::string::npos) << r.output;
  // A fixture of this seed with a broken manifest is nibble's own: rebuilt in place.
  std::ofstream(dir + "/manifest.json") << "broken";
  r = run_nibble({"fixture", "build", "--config", "tiny", "--seed", "0", "--out", dir, "-q"}, t);
  EXPECT_EQ(r.code, 0) << r.output;
  // ... but not as another seed: the model file says whose it is.
  std::ofstream(dir + "/manifest.json") << "broken";
  r = run_nibble({"fixture", "build", "--config", "tiny", "--seed", "5", "--out", dir, "-q"}, t);
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("holds the fixture of megakernel-int4-weight-decode / tiny seed 0"), std::string::npos) << r.output;
}

// nibble batch with two slots runs two nibble processes at once: each run_child reaps only what is
// its own (a newcomer's batch once died of the other's waitpid), and every job gets its report.
TEST(Cli, BatchRunsJobsSideBySide) {
  TempDir t;
  std::ofstream(t.path() + "/m.json") << R"({"out": "res", "runs": [{"command": "calibrate", "task": "megakernel-int4-weight-decode",
      "configs": ["tiny"], "seeds": [0, 1, 2, 3], "split_seeds": true, "args": ["--path", "cpu", "--threads", "1"]}]})";
  Result r = run_nibble_env({"NIBBLE_CACHE_DIR=" + t.path() + "/cache"}, {"batch", t.path() + "/m.json", "--devices", "0,1", "-q"}, t);
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("nibble batch: 4 jobs: 4 Healthy"), std::string::npos) << r.output;
  // A second manifest on the same results folder keeps its summary beside the first's.
  std::ofstream(t.path() + "/n.json") << R"({"out": "res", "runs": [{"command": "calibrate", "task": "megakernel-int4-weight-decode",
      "configs": ["tiny"], "seeds": [0], "args": ["--path", "cpu", "--threads", "1"]}]})";
  r = run_nibble_env({"NIBBLE_CACHE_DIR=" + t.path() + "/cache"}, {"batch", t.path() + "/n.json", "-q"}, t);
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(nlohmann::json::parse(std::ifstream(t.path() + "/res/m.batch-summary.json"))["jobs"], 4);
  EXPECT_EQ(nlohmann::json::parse(std::ifstream(t.path() + "/res/n.batch-summary.json"))["jobs"], 1);
  r = run_nibble({"batch", t.path() + "/m.json", "--devices", "99999999999"}, t);
  EXPECT_EQ(r.code, 2) << r.output;
  r = run_nibble({"batch", t.path() + "/m.json", "--devices", "0,1,0"}, t);  // two grades on one GPU at once
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("names GPU 0 twice"), std::string::npos) << r.output;
  // A job killed at timeout_seconds says so; --element exits 1 for a job that did not pass.
  std::ofstream(t.path() + "/slow.json") << R"({"out": "slow", "timeout_seconds": 0.3, "runs": [{"command": "calibrate",
      "task": "megakernel-int4-weight-decode", "configs": ["tiny"], "seeds": [0], "args": ["--path", "cpu"]}]})";
  r = run_nibble_env({"NIBBLE_CACHE_DIR=" + t.path() + "/cache"}, {"batch", t.path() + "/slow.json", "-q"}, t);
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_NE(r.output.find("killed at the manifest's timeout_seconds"), std::string::npos) << r.output;
  r = run_nibble_env({"NIBBLE_CACHE_DIR=" + t.path() + "/cache"}, {"batch", t.path() + "/slow.json", "--element", "0"}, t);
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_NE(r.output.find("killed at the manifest's timeout_seconds"), std::string::npos) << "the element's reason\n" << r.output;
  // An element whose job needs a GPU, where there is none: exit 2, with the grade's own words.
  if (NvmlDevice::device_count() == 0) {
    std::ofstream(t.path() + "/g.json") << R"({"out": "g", "runs": [{"task": "megakernel-int4-weight-decode", "configs": ["tiny"],
        "seeds": [0], "solutions": [")" + std::filesystem::absolute(nibble_exe()).string() + R"("]}]})";
    r = run_nibble({"batch", t.path() + "/g.json", "--element", "0"}, t);
    EXPECT_EQ(r.code, 2) << r.output;
    EXPECT_NE(r.output.find("NoReport: exit 2 without a readable report"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("no usable NVIDIA GPU"), std::string::npos) << r.output;
    // GPUs named where there is none: refused before anything is built, as without --devices (a
    // newcomer's batch built every fixture, then failed every job).
    for (const std::vector<std::string>& devices : {std::vector<std::string>{}, std::vector<std::string>{"--devices", "0,1"}}) {
      std::vector<std::string> args = {"batch", t.path() + "/g.json"};
      args.insert(args.end(), devices.begin(), devices.end());
      r = run_nibble_env({"NIBBLE_CACHE_DIR=" + t.path() + "/nogpu-cache", "CUDA_VISIBLE_DEVICES="}, args, t);
      EXPECT_EQ(r.code, 2) << r.output;
      EXPECT_NE(r.output.find("nothing was run"), std::string::npos) << r.output;
      EXPECT_FALSE(std::filesystem::exists(t.path() + "/nogpu-cache")) << "a fixture was built";
    }
  }
  {
    const FolderLock other(t.path() + "/res");  // another batch running on the results folder
    ASSERT_TRUE(other.held());
    r = run_nibble({"batch", t.path() + "/m.json", "-q"}, t);
    EXPECT_EQ(r.code, 2) << r.output;
    EXPECT_NE(r.output.find("another nibble batch is running on the results folder"), std::string::npos) << r.output;
  }
  r = run_nibble({"batch", t.path() + "/m.json", "--partition", "gpu"}, t);
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("go with --slurm"), std::string::npos) << r.output;
  // A run's args are parsed by its command's own parser before any job (here --path with no value,
  // then an option calibrate does not have): refused at once, no results folder, nothing run.
  // Values are checked as the command checks them before its work, not only their syntax.
  for (const auto& [args, says] : {std::pair<std::string, std::string>{R"(["--path"])", "--path: 1 required"},
                                   {R"(["--path", "cpu", "--bogus"])", "--bogus"},
                                   {R"(["--path", "CPU"])", "--path must be gpu, cpu or auto, not 'CPU'"},
                                   {R"(["--path", "cpu", "--timeout", "-5"])", "--timeout"}}) {
    // The second run is the bad one: the message names it as the manifest does.
    std::ofstream(t.path() + "/bad.json") << R"({"out": "bad", "runs": [{"command": "calibrate", "task": "megakernel-int4-weight-decode",
        "configs": ["tiny"], "seeds": [0], "args": ["--path", "cpu"]}, {"command": "calibrate", "task": "megakernel-int4-weight-decode",
        "configs": ["tiny"], "seeds": [1], "args": )" + args + "}]}";
    for (const char* how : {"", "--element", "--slurm"}) {
      std::vector<std::string> cmd = {"batch", t.path() + "/bad.json"};
      if (*how) cmd.push_back(how);
      if (std::string(how) == "--element") cmd.push_back("0");
      r = run_nibble(cmd, t);
      EXPECT_EQ(r.code, 2) << how << "\n" << r.output;
      EXPECT_NE(r.output.find("nibble calibrate refuses its command line (its args:"), std::string::npos) << r.output;
      EXPECT_NE(r.output.find("bad.json: runs[1] (job calibrate-"), std::string::npos) << r.output;
      EXPECT_NE(r.output.find(says), std::string::npos) << r.output;
      EXPECT_EQ(r.output.find("Run with --help"), std::string::npos) << "CLI11's hint for a typed command line\n" << r.output;
      EXPECT_FALSE(std::filesystem::exists(t.path() + "/bad")) << how;
    }
  }
  // A TMPDIR that is not a folder: the check's scratch file goes to /tmp, the batch runs.
  r = run_nibble_env({"NIBBLE_CACHE_DIR=" + t.path() + "/cache", "TMPDIR=" + t.path() + "/none"}, {"batch", t.path() + "/n.json", "-q"}, t);
  EXPECT_EQ(r.code, 0) << r.output;
}

TEST(Cli, ProfileTakesNcuOrNsys) {
  TempDir t;
  Result r = run_nibble({"grade", "--solution", "/nonexistent/a.so", "--profile", "vtune"}, t);
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.output.find("--profile takes ncu (Nsight Compute) or nsys (Nsight Systems), not 'vtune'"), std::string::npos) << r.output;
  r = run_nibble({"grade", "--solution", nibble_exe(), "--profile", "ncu", "--require-sandbox", "--out", t.path() + "/r.json"}, t);
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("which --require-sandbox forbids"), std::string::npos) << r.output;
  r = run_nibble({"grade", "--solution", nibble_exe(), "--profile", "nsys", "--out", "/dev/stdout"}, t);
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("give --out a file"), std::string::npos) << r.output;
}

TEST(Cli, GraphRecordsTakesNodesOrGraphs) {
  TempDir t;
  const Result r = run_nibble({"grade", "--solution", "/nonexistent/a.so", "--graph-records", "kernels"}, t);
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.output.find("--graph-records"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("kernels"), std::string::npos) << r.output;
}

TEST(Cli, UnknownTaskListsTheValidOnes) {
  TempDir t;
  const Result r = run_nibble({"grade", "--task", "matmul-fp8", "--solution", nibble_exe()}, t);
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.output.find("unknown task 'matmul-fp8'"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("megakernel-int4-weight-decode"), std::string::npos) << r.output;
}

TEST(Cli, UnknownConfigListsTheValidOnes) {
  TempDir t;
  const Result r = run_nibble({"grade", "--config", "huge", "--solution", nibble_exe()}, t);
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.output.find("valid configs: full, tiny"), std::string::npos) << r.output;
}

TEST(Cli, MissingRequiredOptionIsAUsageError) {
  TempDir t;
  const Result r = run_nibble({"grade"}, t);
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.output.find("--solution"), std::string::npos) << r.output;
}

TEST(Cli, FixtureBuildVerifyAndDetectCorruption) {
  TempDir t;
  const std::string dir = t.path() + "/fx";
  Result r = run_nibble({"fixture", "build", "--config", "tiny", "--seed", "3", "--out", dir, "--quiet"}, t);
  ASSERT_EQ(r.code, 0) << r.output;
  r = run_nibble({"fixture", "verify", dir}, t);
  EXPECT_EQ(r.code, 0) << r.output;
  {
    // Flip one byte deep in the data section.
    std::fstream f(dir + "/model.safetensors", std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(500000);
    char c = 0;
    f.read(&c, 1);
    f.seekp(500000);
    c = char(c ^ 0x5a);
    f.write(&c, 1);
  }
  r = run_nibble({"fixture", "verify", dir}, t);
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.output.find("nibble fixture build"), std::string::npos) << "the message should say how to rebuild: " << r.output;
}

// A batch whose jobs need a GPU, on a machine without one, runs nothing (it built every fixture and
// then failed each grade the same way, one after another).
TEST(Cli, BatchWithoutAGpuRunsNothing) {
  std::string why;
  if (test::gpu_available(&why)) GTEST_SKIP() << "a GPU is present: the no-GPU answer cannot be observed here";
  TempDir t;
  std::ofstream(t.path() + "/m.json") << R"({"out": "res", "runs": [{"task": "megakernel-int4-weight-decode", "configs": ["tiny"],
      "solutions": [")" + fs::absolute(bindir() + "/tests/lib/libbad_nothing.so").string() + R"("]}, {"command": "calibrate",
      "task": "megakernel-int4-weight-decode", "configs": ["tiny"], "seeds": [0], "args": ["--path", "cpu"]}]})";
  const Result r = run_nibble_env({"NIBBLE_CACHE_DIR=" + t.path() + "/cache"}, {"batch", t.path() + "/m.json"}, t);
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("1 of the 2 jobs need one"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(t.path() + "/cache")) << "fixtures were built for jobs that cannot run";
  EXPECT_FALSE(fs::exists(t.path() + "/res")) << "a refused batch made its results folder";
  // Three ways to run a batch: one at a time.
  const Result both = run_nibble({"batch", t.path() + "/m.json", "--slurm", "--collect"}, t);
  EXPECT_EQ(both.code, 2) << both.output;
  EXPECT_NE(both.output.find("give one"), std::string::npos) << both.output;
}

TEST(Cli, GradeOnAMachineWithoutAGpuSaysSoAndExits2) {
  std::string why;
  if (test::gpu_available(&why)) GTEST_SKIP() << "a GPU is present: the no-GPU answer cannot be observed here";
  TempDir t;
  const Result r = run_nibble({"grade", "--config", "tiny", "--solution", bindir() + "/tests/lib/libbad_nothing.so",
                           "--out", t.path() + "/r.json"}, t);
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.output.find("no usable NVIDIA GPU"), std::string::npos) << r.output;
  // The solution is opened anyway (a load job, no CUDA): what a GPU would find of it first.
  EXPECT_NE(r.output.find("The solution opens here ('bad-nothing')"), std::string::npos) << r.output;
  // Through a link from another folder: the sandbox lets the child read the link's target folder too.
  fs::create_directories(t.path() + "/links");
  fs::create_symlink(fs::absolute(bindir() + "/tests/lib/libbad_nothing.so"), t.path() + "/links/mine.so");
  const Result l = run_nibble({"grade", "--config", "tiny", "--solution", t.path() + "/links/mine.so", "--out",
                               t.path() + "/r.json"}, t);
  EXPECT_NE(l.output.find("The solution opens here ('bad-nothing')"), std::string::npos) << l.output;
  EXPECT_FALSE(fs::exists(t.path() + "/r.json"));
  for (const auto& [so, kind, what] :
       {std::tuple<std::string, std::string, std::string>{"libbad_missing_teardown.so", "MissingSymbol", "nibble_decode_teardown"},
        {"libbad_abi_version.so", "AbiMismatch", "ABI version 42"}}) {
    const Result b = run_nibble({"grade", "--config", "tiny", "--solution", bindir() + "/tests/lib/" + so, "--out",
                                 t.path() + "/r.json"}, t);
    EXPECT_EQ(b.code, 2) << so;
    EXPECT_NE(b.output.find("does not open here or on a GPU (" + kind + ")"), std::string::npos) << b.output;
    EXPECT_NE(b.output.find(what), std::string::npos) << b.output;
  }
  // A library whose constructor faults: the crash and where, its library and the constructor by name.
  const Result crash = run_nibble({"grade", "--config", "tiny", "--solution", bindir() + "/tests/lib/libbad_load_segfault.so",
                                   "--out", t.path() + "/r.json"}, t);
  EXPECT_EQ(crash.code, 2) << crash.output;
  EXPECT_NE(crash.output.find("ended the process (killed by signal 11"), std::string::npos) << crash.output;
  EXPECT_NE(crash.output.find("at " + bindir() + "/tests/lib/libbad_load_segfault.so(bad_load_segfault+"), std::string::npos)
      << crash.output;
  // An abort() starts in libc (raise, pthread_kill): the site is its caller's frame.
  const Result abort_run = run_nibble({"grade", "--config", "tiny", "--solution", bindir() + "/tests/lib/libbad_load_abort.so",
                                       "--out", t.path() + "/r.json"}, t);
  EXPECT_NE(abort_run.output.find("ended the process (killed by signal 6"), std::string::npos) << abort_run.output;
  // (its offset only: abort() returns nowhere, so the return address lies past the function's end)
  EXPECT_NE(abort_run.output.find("at " + bindir() + "/tests/lib/libbad_load_abort.so("), std::string::npos)
      << abort_run.output;
  // A GEMM solution under the decode task: the tasks it is for are named, every GEMM task and no other.
  const Result g = run_nibble({"grade", "--config", "tiny", "--solution", bindir() + "/lib/libnibble_gemm_baseline.so",
                               "--out", t.path() + "/r.json"}, t);
  EXPECT_EQ(g.code, 2) << g.output;
  const auto hint = g.output.find("it exports the GEMM ABI (nibble_gemm_abi_version): grade it with --task ");
  ASSERT_NE(hint, std::string::npos) << g.output;
  const std::string named = g.output.substr(hint, g.output.find('\n', hint) - hint);
  for (const char* task : {"gemm-w4a16-nvfp4", "gemm-bf16-mxfp4", "gemm-w4a16-int4"})
    EXPECT_NE(named.find(task), std::string::npos) << named;
  EXPECT_EQ(named.find("megakernel-int4-weight-decode"), std::string::npos) << named;
}

TEST(Cli, APythonSolutionIsAcceptedUpToTheGpu) {
  std::string why;
  if (test::gpu_available(&why)) GTEST_SKIP() << "a GPU is present: the no-GPU answer cannot be observed here";
  TempDir t;
  const std::string src = std::getenv("NIBBLE_SOURCE_DIR") ? std::getenv("NIBBLE_SOURCE_DIR") : "..";
  Result r = run_nibble({"grade", "--config", "tiny", "--solution", src + "/tests/python/shim_probe.py", "--out",
                         t.path() + "/r.json"}, t);
  EXPECT_EQ(r.code, 2);
  // With the shims built, the .py passes every check before the GPU's; without, the message names the package.
  EXPECT_NE(r.output.find(python_shims_built() ? "no usable NVIDIA GPU" : "python3-dev"), std::string::npos) << r.output;
  if (python_shims_built()) {
    // Its module imported (a load job): the shim's probe opens; a syntax error is said, with the line.
    EXPECT_NE(r.output.find("The solution opens here ('shim-probe')"), std::string::npos) << r.output;
    // Under a folder named cuda_kernels: the hint about the driver is not added for a SyntaxError
    // (a newcomer's and a reviewer's finding), but is for an import that needs the driver.
    std::filesystem::create_directories(t.path() + "/cuda_kernels");
    std::ofstream(t.path() + "/cuda_kernels/syntax.py") << "def build_model(model, stream:\n    return None\n";
    r = run_nibble({"grade", "--config", "tiny", "--solution", t.path() + "/cuda_kernels/syntax.py", "--out", t.path() + "/r.json"}, t);
    EXPECT_EQ(r.code, 2);
    EXPECT_NE(r.output.find("does not open here (NotLoadable)"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("SyntaxError"), std::string::npos) << r.output;
    EXPECT_EQ(r.output.find("without the NVIDIA driver"), std::string::npos) << r.output;
    std::ofstream(t.path() + "/needs_driver.py") << "raise RuntimeError('Found no NVIDIA driver on your system')\n";
    r = run_nibble({"grade", "--config", "tiny", "--solution", t.path() + "/needs_driver.py", "--out", t.path() + "/r.json"}, t);
    EXPECT_NE(r.output.find("without the NVIDIA driver, a library linked to libcuda.so.1"), std::string::npos) << r.output;
    // A module that forks a process which outlives its import: the child cannot signal it (seccomp),
    // and waited for it until the parent's 45 s limit; it is ended with the child's process group.
    std::ofstream(t.path() + "/forks.py") << "import os, time\nNAME = 'forks'\nif os.fork() == 0:\n    time.sleep(300)\n"
                                             "    os._exit(0)\ndef build_model(model, stream): return None\n"
                                             "def decode_step(handle, token_ids, pos, logits, stream): return None\n"
                                             "def teardown(handle, stream): return None\n";
    const auto t0 = std::chrono::steady_clock::now();
    r = run_nibble({"grade", "--config", "tiny", "--solution", t.path() + "/forks.py", "--out", t.path() + "/r.json"}, t);
    EXPECT_NE(r.output.find("The solution opens here ('forks')"), std::string::npos) << r.output;
    EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 30.0);
    // A GEMM module under the decode task: the tasks it is for are named.
    std::ofstream(t.path() + "/gemm_shaped.py") << "NAME = 'gemm-shaped'\ndef prepare(problem, stream): return None\n"
                                                   "def run(handle, A, C, stream): return None\n"
                                                   "def teardown(handle, stream): return None\n";
    r = run_nibble({"grade", "--config", "tiny", "--solution", t.path() + "/gemm_shaped.py", "--out", t.path() + "/r.json"}, t);
    EXPECT_EQ(r.code, 2);
    EXPECT_NE(r.output.find("does not open here or on a GPU (MissingSymbol)"), std::string::npos) << r.output;
    EXPECT_NE(r.output.find("it defines every entry point of a gemm solution: grade it with --task gemm-w4a16-nvfp4"),
              std::string::npos)
        << r.output;
    // An import that does not return: the check keeps to the grade's --build-timeout (its own 30 s at most).
    std::ofstream(t.path() + "/slow.py") << "import time\nNAME = 'slow'\ntime.sleep(60)\n";
    r = run_nibble({"grade", "--config", "tiny", "--build-timeout", "2", "--solution", t.path() + "/slow.py", "--out",
                    t.path() + "/r.json"}, t);
    EXPECT_EQ(r.code, 2);
    EXPECT_NE(r.output.find("import did not return within 2 s"), std::string::npos) << r.output;
  }
  r = run_nibble({"grade", "--solution", t.path() + "/missing.py", "--out", t.path() + "/r.json"}, t);
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.output.find("or of a Python module (.py)"), std::string::npos) << r.output;
}

TEST(Cli, SeedThatIsNotANumber) {
  TempDir t;
  const Result r = run_nibble({"grade", "--seeds", "0,one", "--solution", nibble_exe()}, t);
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.output.find("--seeds"), std::string::npos) << r.output;
}

TEST(Cli, UnwritableReportPathIsRefusedBeforeAnyWork) {
  TempDir t;
  const Result r = run_nibble({"grade", "--config", "tiny", "--solution", nibble_exe(), "--out",
                               "/proc/nibble-no-such-dir/report.json"}, t);
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.output.find("report cannot be written"), std::string::npos) << r.output;
}

TEST(Cli, TruncatedFixtureIsNamed) {
  TempDir t;
  const std::string dir = t.path() + "/fx";
  Result r = run_nibble({"fixture", "build", "--config", "tiny", "--seed", "4", "--out", dir, "--quiet"}, t);
  ASSERT_EQ(r.code, 0) << r.output;
  fs::resize_file(dir + "/model.safetensors", 4000);
  r = run_nibble({"fixture", "verify", dir}, t);
  EXPECT_EQ(r.code, 1);
  EXPECT_NE(r.output.find("model.safetensors"), std::string::npos) << r.output;
}

TEST(Cli, CalibrateUnknownPathIsAUsageError) {
  TempDir t;
  const Result r = run_nibble({"calibrate", "--config", "tiny", "--path", "tpu"}, t);
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.output.find("--path must be gpu, cpu or auto"), std::string::npos) << r.output;
}

TEST(Cli, SolutionThatIsNotASharedObject) {
  TempDir t;
  write_file_atomic(t.path() + "/libfake.so", "#!/bin/sh\necho not a library\n");
  const Result r = run_nibble({"grade", "--solution", t.path() + "/libfake.so", "--out", t.path() + "/r.json"}, t);
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.output.find("not a shared object"), std::string::npos) << r.output;
}

TEST(Cli, OutputsAndOptionsAreCheckedBeforeAnyWork) {
  TempDir t;
  const std::string so = bindir() + "/tests/lib/libbad_nothing.so";
  struct Case {
    std::vector<std::string> args;
    const char* says;
  } cases[] = {
      {{"--out", t.path()}, "is a folder"},
      {{"--seeds", "0,0"}, "given twice"},
      {{"--seeds", "-1"}, "a seed is a whole number from 0 to 10^19 - 1"},
      {{"--seeds", "0,,1"}, "has an empty element"},  // not read as 0,1
      {{"--seeds", "0,"}, "has an empty element"},    // not read as 0
      {{"--threads", ""}, "--threads"},              // not read as 0, all cores
      {{"--min-rounds", "5", "--max-rounds", "2"}, "--min-rounds"},
      {{"--max-rounds", "0"}, "--max-rounds must be at least 1, not 0"},  // it blamed --min-rounds
      {{"--timeout", "-5"}, "positive"},
      {{"--history", t.path()}, "--history"},
      {{"--threads", "100000"}, "--threads"},
      {{"--timeout", "inf"}, "at most 1e+06"},
      {{"--max-timing-seconds", "-1"}, "--max-timing-seconds"},
      {{"--calibration", t.path() + "/none.json"}, "--calibration: cannot read "},
      {{"--calibration", t.path() + "/twice.json"}, "has the key 'schema' twice"},
      {{"--calibration", t.path() + "/cal-full.json"}, "calibrated for megakernel-int4-weight-decode / full"},
      // Outputs that collide: each later write would destroy the earlier file, or the input.
      {{"--gbench-json", t.path() + "/r.json"}, "--out and --gbench-json name the same file"},
      {{"--history", t.path() + "/sub/../r.json"}, "--out and --history name the same file"},
      {{"--gbench-json", t.path() + "/alias.json"}, "--out and --gbench-json name the same file"},
      {{"--out", so}, "is the grade's input (--solution"},
      {{"--history", so}, "is the grade's input (--solution"},
  };
  fs::create_directories(t.path() + "/sub");
  fs::create_symlink(t.path() + "/r.json", t.path() + "/alias.json");  // dangling: r.json is not written yet
  // A real table of another config: refused before any work (it would chart the wrong variants).
  write_file_atomic(t.path() + "/cal-full.json",
                    R"({"schema": "nibble.calibration", "task": "megakernel-int4-weight-decode", "config": "full", "rows": []})");
  write_file_atomic(t.path() + "/twice.json", R"({"schema": "nibble.calibration", "schema": "x", "rows": []})");
  for (const auto& c : cases) {
    std::vector<std::string> args = {"grade", "--config", "tiny", "--solution", so};
    if (std::string(c.args[0]) != "--out") args.insert(args.end(), {"--out", t.path() + "/r.json"});
    args.insert(args.end(), c.args.begin(), c.args.end());
    const Result r = run_nibble(args, t);
    EXPECT_EQ(r.code, 2) << c.args[0] << ": " << r.output;
    EXPECT_NE(r.output.find(c.says), std::string::npos) << c.args[0] << ": " << r.output;
  }
}

TEST(Cli, ARefusedGradeLeavesNothingBehind) {
  // The output checks create what they probe (folders of --out, the --history file, the --dump
  // folder); a grade refused by a later check must remove them again.
  TempDir t;
  const std::string so = bindir() + "/tests/lib/libbad_nothing.so";
  const Result r = run_nibble({"grade", "--config", "tiny", "--solution", so, "--out", t.path() + "/a/b/r.json", "--history",
                               t.path() + "/h.jsonl", "--dump", t.path() + "/d/e", "--gbench-json", t.path() + "/g/x.json",
                               "--timeout", "-1"},
                              t);
  EXPECT_EQ(r.code, 2) << r.output;
  for (const char* p : {"/a", "/h.jsonl", "/d", "/g"}) EXPECT_FALSE(fs::exists(t.path() + p)) << p;
  const Result c = run_nibble({"calibrate", "--config", "tiny", "--path", "cpu", "--timeout", "0", "--out", t.path() + "/q/r/t.json"}, t);
  EXPECT_EQ(c.code, 2) << c.output;
  EXPECT_FALSE(fs::exists(t.path() + "/q"));
}

// calibrate's --out may not be a file it reads: the fixture (given or the cache's), the reference,
// the grader itself; the fixture stays intact.
TEST(Cli, CalibrateRefusesToWriteOverItsInputs) {
  TempDir t;
  const std::string fx = t.path() + "/fx";
  ASSERT_EQ(run_nibble({"fixture", "build", "--config", "tiny", "--seed", "8", "--out", fx, "-q"}, t).code, 0);
  for (const std::string& out : {fx + "/model.safetensors", fx + "/manifest.json", fx + "/../fx/manifest.json", nibble_exe()}) {
    const Result r = run_nibble({"calibrate", "--fixture", fx, "--path", "cpu", "--out", out}, t);
    EXPECT_EQ(r.code, 2) << out << ": " << r.output;
    EXPECT_NE(r.output.find("is the calibration's input"), std::string::npos) << out << ": " << r.output;
  }
  EXPECT_EQ(run_nibble({"fixture", "verify", fx}, t).code, 0);
}

// Builds of one fixture folder at once (two grades of a seed, Slurm elements sharing the cache)
// take turns (FolderLock): each used to remove the other's temporary file mid-write.
TEST(Cli, ConcurrentBuildsOfOneFixtureFolderTakeTurns) {
  TempDir t;
  const std::string fx = t.path() + "/race";
  std::vector<ChildExit> exits(3);
  std::vector<std::thread> builds;
  for (size_t i = 0; i < exits.size(); ++i)
    builds.emplace_back([&, i] {
      exits[i] = run_child({nibble_exe(), "fixture", "build", "--task", "gemm-w4a16-int4", "--config", "m4096-n3072-k3072",
                            "--seed", "1", "--out", fx},
                           t.path() + "/build" + std::to_string(i) + ".log", 120);
    });
  for (std::thread& b : builds) b.join();
  for (size_t i = 0; i < exits.size(); ++i)
    EXPECT_TRUE(exits[i].kind == ChildExit::Exited && exits[i].code == 0)
        << exits[i].describe() << ": " << file_tail(t.path() + "/build" + std::to_string(i) + ".log");
  EXPECT_EQ(run_nibble({"fixture", "verify", fx}, t).code, 0);
}

TEST(Cli, CalibrateTimeoutMustBePositiveAndFinite) {
  TempDir t;
  for (const char* v : {"-1", "0", "inf", "nan", "1e7"}) {
    const Result r = run_nibble({"calibrate", "--config", "tiny", "--path", "cpu", "--timeout", v, "--out", t.path() + "/c.json"}, t);
    EXPECT_EQ(r.code, 2) << v << ": " << r.output;
    EXPECT_NE(r.output.find("--timeout must be a positive number of seconds, at most 1e+06"), std::string::npos)
        << v << ": " << r.output;
    EXPECT_FALSE(fs::exists(t.path() + "/c.json")) << v;
  }
}

// A time limit past kMaxTimeoutSeconds would overflow the child's watchdog deadline (int64 ns, and
// the reference's replay runs under 64x the step limit) into one in the past: the first call would
// be killed as TimedOut. Refused before any work, as every other bad limit.
TEST(Cli, GradeTimeLimitsHaveAnUpperBound) {
  TempDir t;
  const std::string so = bindir() + "/tests/lib/libbad_nothing.so";
  for (const char* opt : {"--timeout", "--step-timeout", "--build-timeout", "--max-timing-seconds"})
    for (const char* v : {"2e8", "1e10", "1e300"}) {
      const Result r = run_nibble({"grade", "--config", "tiny", "--solution", so, opt, v, "--out", t.path() + "/r.json"}, t);
      EXPECT_EQ(r.code, 2) << opt << " " << v << ": " << r.output;
      EXPECT_NE(r.output.find(std::string(opt) + " must be a positive number of seconds, at most 1e+06"), std::string::npos)
          << opt << " " << v << ": " << r.output;
      EXPECT_FALSE(fs::exists(t.path() + "/r.json"));
    }
}

// --reference is the user's input like --solution: a missing or non-ELF file is a usage error (exit
// 2, before any work, no report), not a grader failure; calibrate's CPU path has no use for one.
TEST(Cli, AWrongReferenceIsAUsageError) {
  TempDir t;
  const std::string so = bindir() + "/tests/lib/libbad_nothing.so";
  write_file_atomic(t.path() + "/empty.so", "");
  fs::create_directories(t.path() + "/dir.so");
  for (const auto& [ref, says] : {std::pair<std::string, std::string>{t.path() + "/nope.so", "does not exist"},
                                  {t.path() + "/empty.so", "is not a shared object (no ELF header)"},
                                  {t.path() + "/dir.so", "is not a file"}}) {
    const Result r =
        run_nibble({"grade", "--config", "tiny", "--solution", so, "--reference", ref, "--out", t.path() + "/r.json"}, t);
    EXPECT_EQ(r.code, 2) << ref << ": " << r.output;
    EXPECT_NE(r.output.find("--reference " + ref + " " + says), std::string::npos) << r.output;
    EXPECT_FALSE(fs::exists(t.path() + "/r.json")) << ref;
  }
  const Result c = run_nibble(
      {"calibrate", "--config", "tiny", "--path", "cpu", "--reference", so, "--out", t.path() + "/c.json"}, t);
  EXPECT_EQ(c.code, 2) << c.output;
  EXPECT_NE(c.output.find("--reference is the GPU path's"), std::string::npos) << c.output;
  EXPECT_FALSE(fs::exists(t.path() + "/c.json"));
}

// "-" is standard output to most tools; nibble's outputs take /dev/stdout for that, and a file
// literally named "-" beside the user's files is never what was meant: refused, before any work.
TEST(Cli, DashAsAnOutputIsRefused) {
  TempDir t;
  const std::string so = bindir() + "/tests/lib/libbad_nothing.so";
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"grade", "--config", "tiny", "--solution", so, "--out", "-"},
        std::vector<std::string>{"grade", "--config", "tiny", "--solution", so, "--out", t.path() + "/r.json", "--history", "-"},
        std::vector<std::string>{"calibrate", "--config", "tiny", "--path", "cpu", "--out", "-"},
        std::vector<std::string>{"report", "html", source_report(), "-o", "-"},
        std::vector<std::string>{"leaderboard", source_report(), "--json", "-"}}) {
    const Result r = run_nibble_env({}, args, t);
    EXPECT_EQ(r.code, args[0] == "report" || args[0] == "leaderboard" ? 4 : 2) << args[0] << ": " << r.output;
    EXPECT_NE(r.output.find("give /dev/stdout"), std::string::npos) << args[0] << ": " << r.output;
  }
  EXPECT_FALSE(fs::exists("-"));  // the tests' working folder
}

// Standard output that cannot be written (a full disk behind a redirection) is a failure of its own,
// exit 74, whatever the command: `compare --json > out.json` exited 0 with an empty file.
TEST(Cli, StandardOutputLostIsExit74) {
  if (!std::filesystem::exists("/dev/full")) GTEST_SKIP() << "no /dev/full here";
  const std::string report = source_report();
  // An output file named /dev/stdout too (a newcomer's finding: report html and leaderboard exited 1).
  for (const std::string& args : {std::string("configs"), std::string("--version"), "compare " + report + " " + report + " --json",
                                  "report show " + report, "report html " + report + " -o /dev/stdout",
                                  "leaderboard " + report + " --json /dev/stdout"}) {
    const int status = std::system((nibble_exe() + " " + args + " > /dev/full 2>/dev/null").c_str());
    ASSERT_TRUE(WIFEXITED(status)) << args;
    EXPECT_EQ(WEXITSTATUS(status), 74) << args;
    EXPECT_EQ(WEXITSTATUS(std::system((nibble_exe() + " " + args + " > /dev/null 2>&1").c_str())), 0) << args;
  }
}

TEST(Cli, UnknownCommandEmptyValuesAndNotAFolderAreUsageErrors) {
  TempDir t;
  Result r = run_nibble({"bogus"}, t);
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("unknown command 'bogus'"), std::string::npos) << r.output;
  // An option before the command, and an unknown command of a command that has commands, are named.
  r = run_nibble({"--bogus"}, t);
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("nibble: unknown option '--bogus' before the command"), std::string::npos) << r.output;
  // An unknown option of a command is named before a missing required one (a newcomer's finding:
  // `grade --bogus` read "--solution is required"); a negative number is a value, not an option.
  r = run_nibble({"grade", "--bogus"}, t);
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("nibble grade: unknown option '--bogus' (nibble grade --help lists its options)"), std::string::npos) << r.output;
  r = run_nibble({"grade", "--seeds", "-1"}, t);
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_EQ(r.output.find("unknown option"), std::string::npos) << r.output;
  r = run_nibble({"fixture", "bogus"}, t);
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("nibble fixture: unknown command 'bogus'; the commands are build, verify, import (nibble fixture --help)"),
            std::string::npos)
      << r.output;
  r = run_nibble({"report", "bogus", "x.json"}, t);  // a command's own commands likewise (report's bad input: 4)
  EXPECT_EQ(r.code, 4) << r.output;
  EXPECT_NE(r.output.find("nibble report: unknown command 'bogus'; the commands are show, html"), std::string::npos) << r.output;
  // "" would otherwise read as "not given": the fixture cache, every task, no dump.
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"fixture", "build", "--config", "tiny", "--seed", "1", "--out", ""},
        std::vector<std::string>{"configs", "--task", ""},
        std::vector<std::string>{"grade", "--config", "tiny", "--solution", "x.so", "--dump", ""},
        std::vector<std::string>{"grade", "--config", "tiny", "--solution", "x.so", "--history", ""}}) {
    r = run_nibble(args, t);
    EXPECT_EQ(r.code, 2) << args[0] << ": " << r.output;
    EXPECT_NE(r.output.find("must not be empty"), std::string::npos) << r.output;
  }
  // A GEMM task without --config: the decode default "full" is not one of its configs.
  for (const char* cmd : {"grade", "calibrate"}) {
    std::vector<std::string> args = {cmd, "--task", "gemm-bf16-mxfp4", "--out", t.path() + "/g.json"};
    if (std::string(cmd) == "grade") args.insert(args.end(), {"--solution", "x.so"});
    r = run_nibble(args, t);
    EXPECT_EQ(r.code, 2) << cmd << ": " << r.output;
    EXPECT_NE(r.output.find("--config is required for gemm-bf16-mxfp4"), std::string::npos) << r.output;
  }
  // A number given as "" is not 0 (compare and report html exit 4 on a bad command line).
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"compare", "--max-slowdown", "", "a.json", "b.json"},
        std::vector<std::string>{"compare", "--alpha", "", "a.json", "b.json"},
        std::vector<std::string>{"report", "html", "a.json", "-o", t.path() + "/p.html", "--max-slowdown", ""}}) {
    r = run_nibble(args, t);
    EXPECT_EQ(r.code, 4) << args[1] << ": " << r.output;
    EXPECT_NE(r.output.find("must not be empty"), std::string::npos) << r.output;
  }
  write_file_atomic(t.path() + "/file", "x");
  for (const std::string& dir : {t.path() + "/none", std::string(), t.path() + "/file"}) {
    r = run_nibble({"fixture", "verify", dir}, t);
    EXPECT_EQ(r.code, 2) << dir << ": " << r.output;
    EXPECT_NE(r.output.find("is not a folder"), std::string::npos) << r.output;
  }
}

TEST(Cli, FixtureBuildCapsThreadsAndRejectsBadSeeds) {
  TempDir t;
  Result r = run_nibble({"fixture", "build", "--config", "tiny", "--seed", "0", "--threads", "4096", "--out", t.path() + "/a", "-q"}, t);
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("2fd5f4c4149c4943560b4c31a53b31c6705b47f93271719132701b6a160a0489"), std::string::npos) << r.output;
  r = run_nibble({"fixture", "build", "--config", "tiny", "--seed", "18446744073709551616", "--out", t.path() + "/b"}, t);
  EXPECT_EQ(r.code, 2) << r.output;
}

// A cache that cannot be made says where it came from (a newcomer's finding: "cannot create folder",
// no word of NIBBLE_CACHE_DIR); a command that reads the cache says the same (CalibrateOnTheCpu...).
TEST(Cli, AFixtureCacheThatCannotBeMadeNamesItsVariable) {
  TempDir t;
  write_file_atomic(t.path() + "/a-file", "not a folder");
  const Result r = run_nibble_env({"NIBBLE_CACHE_DIR=" + t.path() + "/a-file/cache"},
                                  {"fixture", "build", "--config", "tiny", "--seed", "0", "-q"}, t);
  EXPECT_NE(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("cannot create the fixture cache's folder '" + t.path() + "/a-file/cache/fixtures/"), std::string::npos)
      << r.output;
  EXPECT_NE(r.output.find("set NIBBLE_CACHE_DIR to a folder you can write"), std::string::npos) << r.output;
}

TEST(Cli, FixtureVerifyChecksTheTaskItClaims) {
  TempDir t;
  const std::string dir = t.path() + "/fx";
  Result r = run_nibble({"fixture", "build", "--config", "tiny", "--seed", "5", "--out", dir, "-q"}, t);
  ASSERT_EQ(r.code, 0) << r.output;
  // A manifest that claims another task over the same bytes (hashes still match).
  std::string m = read_file(dir + "/manifest.json");
  const auto at = m.find("megakernel-int4-weight-decode");
  ASSERT_NE(at, std::string::npos);
  m.replace(at, std::string("megakernel-int4-weight-decode").size(), "gemm-w4a16-nvfp4");
  write_file_atomic(dir + "/manifest.json", m);
  r = run_nibble({"fixture", "verify", dir}, t);
  EXPECT_EQ(r.code, 1) << r.output;
}

// `nibble configs` lists every task's official configs (scripts/gemm-all.sh grades them all): the
// decode task's two and, per GEMM task, tiny plus the 28 shapes (M in {1, 16, 128, 4096} x 7 (N, K)).
TEST(Cli, ConfigsListsEveryOfficialConfig) {
  TempDir t;
  const Result r = run_nibble({"configs"}, t);
  EXPECT_EQ(r.code, 0) << r.output;
  EXPECT_NE(r.output.find("megakernel-int4-weight-decode full\n"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("megakernel-int4-weight-decode tiny\n"), std::string::npos) << r.output;
  for (const char* task : {"gemm-w4a16-nvfp4", "gemm-bf16-mxfp4"}) {
    const Result g = run_nibble({"configs", "--task", task}, t);
    EXPECT_EQ(g.code, 0) << g.output;
    int lines = 0;
    for (char ch : g.output) lines += ch == '\n';
    EXPECT_EQ(lines, 29) << g.output;
    for (const char* c : {"tiny", "m1-n3072-k3072", "m4096-n4096-k4096", "m16-n3000-k3080", "m128-n3072-k8192"})
      EXPECT_NE(g.output.find(std::string(task) + " " + c + "\n"), std::string::npos) << c << "\n" << g.output;
  }
  const Result bad = run_nibble({"configs", "--task", "gemm-fp8"}, t);
  EXPECT_EQ(bad.code, 2);
  EXPECT_NE(bad.output.find("unknown task 'gemm-fp8'"), std::string::npos) << bad.output;
}

// GEMM calibration has a GPU path now: demanding it without a GPU is refused like the decode task's.
TEST(Cli, GemmCalibrateAutoWithoutAGpuRefusesAnHoursLongCpuOracle) {
  std::string why;
  if (test::gpu_available(&why)) GTEST_SKIP() << "a GPU is present: --path auto takes it";
  TempDir t;
  const Result r = run_nibble({"calibrate", "--task", "gemm-bf16-mxfp4", "--config", "m4096-n8192-k3072", "--out",
                               t.path() + "/c.json", "-q"},
                              t);
  EXPECT_EQ(r.code, 2) << r.output;
  // 4096 8192 3072 x (7 variants + the exact oracle) x 2 checked calls x 2 seeds
  EXPECT_NE(r.output.find("3.3e+12 multiply-adds"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("--path cpu"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(t.path() + "/c.json"));
}

// The decode task's full config likewise: without a GPU, --path auto (the README's first calibrate
// command) refuses the hours-long CPU oracle before building the 2 GB fixture.
TEST(Cli, DecodeCalibrateAutoWithoutAGpuRefusesTheFullConfigsCpuOracle) {
  std::string why;
  if (test::gpu_available(&why)) GTEST_SKIP() << "a GPU is present: --path auto takes it";
  TempDir t;
  const Result r = run_nibble_env({"NIBBLE_CACHE_DIR=" + t.path() + "/cache"},
                                  {"calibrate", "--config", "full", "--out", t.path() + "/c.json", "-q"}, t);
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("multiply-adds"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("--config tiny"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(t.path() + "/cache")) << "a fixture was built before the refusal";
  EXPECT_FALSE(fs::exists(t.path() + "/c.json"));
}

// --path cpu runs the oracle whatever it costs, but says so before it starts (here the run stops at
// once: the fixture cache is a file, so no fixture can be built). Needs no GPU either way.
TEST(Cli, CalibrateOnTheCpuSaysWhatTheOracleCosts) {
  TempDir t;
  std::ofstream(t.path() + "/not-a-folder") << "x";
  const Result r = run_nibble_env({"NIBBLE_CACHE_DIR=" + t.path() + "/not-a-folder"},
                                  {"calibrate", "--config", "full", "--path", "cpu", "--seeds", "0", "--out", t.path() + "/c.json", "-q"}, t);
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("--path cpu at full: the fp64 oracle is 3.34e+11 multiply-adds"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("expect a long run"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("nibble calibrate: fixture: cannot create the fixture cache's folder"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("set NIBBLE_CACHE_DIR to a folder you can write"), std::string::npos) << r.output;
}

TEST(Cli, GemmCalibrateOnTheGpuWithoutOneSaysSo) {
  std::string why;
  if (test::gpu_available(&why)) GTEST_SKIP() << "a GPU is present: the no-GPU answer cannot be observed here";
  TempDir t;
  const Result r = run_nibble({"calibrate", "--task", "gemm-w4a16-nvfp4", "--config", "tiny", "--path", "gpu", "--out",
                               t.path() + "/c.json", "-q"},
                              t);
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("--path gpu, but no usable NVIDIA GPU"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("calibrate on the CPU with --path cpu"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(t.path() + "/c.json"));
}

// A GEMM shape too large for one GPU is bad input (exit 2, the operand named), not an allocation
// failure later (std::bad_alloc, exit 3).
TEST(Cli, HugeGemmShapeIsRefusedUpFront) {
  TempDir t;
  const Result r = run_nibble({"fixture", "build", "--task", "gemm-w4a16-nvfp4", "--config", "m99999999-n99999999-k99999998",
                               "--seed", "0", "--out", t.path() + "/f"},
                              t);
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("is too large: A (M x K) has 99999999 x 99999998 elements"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(t.path() + "/f"));
}

namespace {
/** `nibble fixture build` of the tiny decode config, seed `seed`, into <t>/fx; its folder. */
std::string tiny_fixture(const TempDir& t, int seed) {
  const std::string dir = t.path() + "/fx";
  const Result r = run_nibble({"fixture", "build", "--config", "tiny", "--seed", std::to_string(seed), "--out", dir, "-q"}, t);
  EXPECT_EQ(r.code, 0) << r.output;
  return dir;
}

/** `fixture verify` (exit 1) and a grade naming the fixture (exit 2, before any other work) both
 *  refuse the tiny fixture of `seed` in <dir>, saying `says`. */
void expect_fixture_refused(const TempDir& t, const std::string& dir, int seed, const std::string& says) {
  Result r = run_nibble({"fixture", "verify", dir}, t);
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_NE(r.output.find(says), std::string::npos) << r.output;
  r = run_nibble({"grade", "--config", "tiny", "--seeds", std::to_string(seed), "--fixture", dir, "--solution",
                  bindir() + "/tests/lib/libbad_nothing.so", "--out", t.path() + "/r.json"},
                 t);
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find(says), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("probing the GPU"), std::string::npos) << "checked after other work:\n" << r.output;
}

/** Rewrite <dir>'s fixture with `edit` applied to its tensor list, the manifest rehashed to match
 *  (whole file, size, every tensor): the hashes then verify, only the tensor set tells it is not a
 *  fixture of its config. */
void rewrite_and_rehash(const std::string& dir, const std::function<void(std::vector<TensorView>&)>& edit) {
  const std::string model = dir + "/model.safetensors";
  FixtureManifest m = read_manifest(dir);
  {
    const SafetensorsFile f(model);
    std::vector<TensorView> views;
    for (const auto& e : f.entries()) views.push_back({e.name, e.dtype, e.shape, f.data(e.name), e.nbytes()});
    edit(views);
    m.tensor_sha256.clear();
    for (const TensorView& v : views) m.tensor_sha256[v.name] = sha256_hex(v.data, v.nbytes);
    write_safetensors(dir + "/new.safetensors", views, f.metadata());
  }
  fs::rename(dir + "/new.safetensors", model);
  m.file_sha256 = sha256_file_hex(model);
  m.file_bytes = int64_t(fs::file_size(model));
  write_file_atomic(dir + "/manifest.json", manifest_to_json(m).dump(2) + "\n");
}
}  // namespace

// The grader checks a fixture's tensors as `fixture verify` does: hashes that match a manifest
// rewritten for a file without `tokens` say nothing of whether it is a tiny fixture.
TEST(Cli, GradeChecksTheFixturesTensorsNotOnlyItsHashes) {
  TempDir t;
  const std::string dir = tiny_fixture(t, 3);
  rewrite_and_rehash(dir, [](std::vector<TensorView>& v) {
    v.erase(std::remove_if(v.begin(), v.end(), [](const TensorView& x) { return x.name == "tokens"; }), v.end());
  });
  expect_fixture_refused(t, dir, 3, "has no tensor 'tokens'");
}

// A tensor of the right name and bytes but another dtype or shape: the message says which.
TEST(Cli, GradeNamesAFixtureTensorsWrongDtypeAndShape) {
  TempDir t;
  const std::string dir = tiny_fixture(t, 3);
  std::string want;
  rewrite_and_rehash(dir, [&](std::vector<TensorView>& v) {
    for (TensorView& x : v)
      if (x.name == "tokens") {
        want = "tensor 'tokens' is U8 [" + std::to_string(x.nbytes) + "], but megakernel-int4-weight-decode / tiny expects " +
               dtype_shape_str(x.dtype, x.shape);
        x.dtype = DType::U8;  // the same bytes read as bytes
        x.shape = {int64_t(x.nbytes)};
      }
  });
  ASSERT_FALSE(want.empty());
  EXPECT_NE(want.find("expects I64 ["), std::string::npos) << want;
  expect_fixture_refused(t, dir, 3, want);
}

// A GEMM grade checks a fixture folder it was given before any other work, as the decode grade
// does, and never rebuilds into it.
TEST(Cli, GemmGradeChecksANamedFixtureFirstAndNeverRebuildsIt) {
  TempDir t;
  const std::string so = bindir() + "/lib/libnibble_gemm_baseline.so";
  Result r = run_nibble({"grade", "--task", "gemm-w4a16-nvfp4", "--config", "tiny", "--seeds", "7", "--solution", so,
                         "--fixture", t.path() + "/none", "--out", t.path() + "/r.json"},
                        t);
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("no fixture in " + t.path() + "/none"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("nibble fixture build --task gemm-w4a16-nvfp4 --config tiny --seed 7"), std::string::npos)
      << r.output;
  EXPECT_FALSE(fs::exists(t.path() + "/none"));
  // Without --seeds the missing fixture is said first (not "give exactly one seed").
  r = run_nibble({"grade", "--task", "gemm-w4a16-nvfp4", "--config", "tiny", "--solution", so, "--fixture", t.path() + "/none",
                  "--out", t.path() + "/r.json"},
                 t);
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("--fixture " + t.path() + "/none holds no readable fixture"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(t.path() + "/none"));
  // A folder of the user's own files: refused, nothing left in it, and the build it suggests goes
  // into a new folder.
  const std::string mine = t.path() + "/mine";
  fs::create_directories(mine);
  write_file_atomic(mine + "/notes.txt", "mine");
  r = run_nibble({"grade", "--task", "gemm-w4a16-nvfp4", "--config", "tiny", "--seeds", "7", "--solution", so, "--fixture",
                  mine, "--out", t.path() + "/r.json"},
                 t);
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("--out NEW_FOLDER` (into a new folder: " + mine + " holds other files)"), std::string::npos)
      << r.output;
  EXPECT_FALSE(fs::exists(mine + "/.nibble.lock")) << "a refused folder keeps no lock file";
  const std::string dec = t.path() + "/decode";
  r = run_nibble({"fixture", "build", "--config", "tiny", "--seed", "7", "--out", dec, "-q"}, t);
  ASSERT_EQ(r.code, 0) << r.output;
  const std::string before = sha256_file_hex(dec + "/model.safetensors");
  r = run_nibble({"grade", "--task", "gemm-w4a16-nvfp4", "--config", "tiny", "--seeds", "7", "--solution", so, "--fixture",
                  dec, "--out", t.path() + "/r.json"},
                 t);
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("is a fixture of task megakernel-int4-weight-decode, not gemm-w4a16-nvfp4"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("probing the GPU"), std::string::npos) << "checked after other work:\n" << r.output;
  EXPECT_EQ(sha256_file_hex(dec + "/model.safetensors"), before) << "the folder was rebuilt";
}

// A cached GEMM fixture that fails its hash is reported (exit 2, the tensor and the rebuild command
// named), not silently rebuilt over, as the decode task's cache.
TEST(Cli, CorruptCachedGemmFixtureIsReportedNotRebuilt) {
  TempDir t;
  const std::vector<std::string> env = {"NIBBLE_CACHE_DIR=" + t.path() + "/cache"};
  const std::vector<std::string> cal = {"calibrate", "--task", "gemm-w4a16-nvfp4", "--config", "tiny", "--seeds", "0",
                                        "--path", "cpu", "--out", t.path() + "/c.json", "-q"};
  Result r = run_nibble_env(env, cal, t);
  ASSERT_EQ(r.code, 0) << r.output;
  const std::string model = t.path() + "/cache/fixtures/gemm-w4a16-nvfp4/tiny/seed0-g1/model.safetensors";
  ASSERT_TRUE(fs::exists(model)) << "the cache layout changed: " << model;
  std::string bytes = read_file(model);
  bytes[bytes.size() - 3] ^= 0x40;  // in the last tensor's data
  write_file_atomic(model, bytes);
  r = run_nibble_env(env, cal, t);
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("does not match its manifest"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("nibble fixture build"), std::string::npos) << r.output;
  EXPECT_EQ(read_file(model), bytes) << "the corrupt file was rebuilt instead of reported";
}

namespace {
/** What a poisoner of the cache does: flips a byte in the last tensor's data of <dir>'s fixture and
 *  rewrites its manifest's hashes (whole file and per tensor) to match, so that the fixture is
 *  consistent with its manifest (`fixture verify` passes) but not what the generator makes. */
void poison_consistently(const std::string& dir) {
  std::string bytes = read_file(dir + "/model.safetensors");
  bytes[bytes.size() - 3] ^= 0x40;
  write_file_atomic(dir + "/model.safetensors", bytes);
  FixtureManifest m = read_manifest(dir);
  m.file_sha256 = sha256_hex(bytes.data(), bytes.size());
  {
    SafetensorsFile f(dir + "/model.safetensors");
    for (const auto& e : f.entries()) m.tensor_sha256[e.name] = sha256_hex(f.data(e.name), e.nbytes());
  }
  write_file_atomic(dir + "/manifest.json", manifest_to_json(m).dump(2) + "\n");
}

/** The report's fixtures[0] of a calibration written to `path`. */
nlohmann::json first_fixture(const std::string& path) {
  return nlohmann::json::parse(read_file(path)).at("fixtures").at(0);
}
}  // namespace

// A cache someone rewrote consistently (a flipped byte, the manifest's hashes recomputed to match) is
// refused for a fixture whose SHA-256 the source pins: it is trusted by its bytes, not its manifest.
TEST(Cli, APoisonedCacheWithARewrittenManifestIsRefused) {
  TempDir t;
  const std::vector<std::string> env = {"NIBBLE_CACHE_DIR=" + t.path() + "/cache"};
  const std::vector<std::string> cal = {"calibrate", "--task", "gemm-w4a16-nvfp4", "--config", "tiny", "--seeds", "0",
                                        "--path", "cpu", "--out", t.path() + "/c.json", "-q"};
  Result r = run_nibble_env(env, cal, t);
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(first_fixture(t.path() + "/c.json").at("trust").get<std::string>().rfind("pinned: ", 0), 0u);
  const std::string dir = t.path() + "/cache/fixtures/gemm-w4a16-nvfp4/tiny/seed0-g1";
  poison_consistently(dir);
  ASSERT_EQ(run_nibble({"fixture", "verify", dir}, t).code, 0) << "the poisoned fixture must be consistent with its manifest";
  r = run_nibble_env(env, cal, t);
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("the source pins"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("nibble fixture build"), std::string::npos) << r.output;
}

// Fixtures the source pins no SHA-256 for (a parsed GEMM shape, a seed other than the pinned ones)
// are trusted by content too: the generator is rerun in memory and its bytes' SHA-256 compared with
// the cached file's, by calibrate and by a grade, and the report says so.
struct Unpinned {
  const char* task;
  const char* config;
  int seed;
  const char* last_tensor;  // what poison_consistently changes, which the refusal must name
};

void PrintTo(const Unpinned& u, std::ostream* os) { *os << u.task << " / " << u.config << " seed " << u.seed; }

class CliUnpinned : public ::testing::TestWithParam<Unpinned> {};

TEST_P(CliUnpinned, APoisonedFixtureIsRefusedAnIntactOneRebuiltAndCompared) {
  const Unpinned p = GetParam();
  TempDir t;
  const std::string seed = std::to_string(p.seed);
  const std::vector<std::string> env = {"NIBBLE_CACHE_DIR=" + t.path() + "/cache"};
  const std::string out = t.path() + "/c.json";
  const std::vector<std::string> cal = {"calibrate", "--task", p.task, "--config", p.config, "--seeds", seed,
                                        "--path", "cpu", "--out", out, "-q"};
  Result r = run_nibble_env(env, cal, t);
  ASSERT_EQ(r.code, 0) << r.output;
  EXPECT_EQ(first_fixture(out).at("trust").get<std::string>().rfind("built: ", 0), 0u) << first_fixture(out).dump(2);

  // Intact: used, after the generator made the same bytes again.
  r = run_nibble_env(env, cal, t);
  ASSERT_EQ(r.code, 0) << r.output;
  const nlohmann::json f = first_fixture(out);
  EXPECT_EQ(f.at("trust").get<std::string>().rfind("rebuilt and compared: ", 0), 0u) << f.dump(2);
  EXPECT_TRUE(f.contains("rebuild_seconds")) << f.dump(2);
  EXPECT_FALSE(f.at("built_now").get<bool>());

  // Poisoned, manifest and all: refused by calibrate and by a grade naming the folder, with what
  // differs and the command that rebuilds it.
  const std::string dir = t.path() + "/cache/fixtures/" + p.task + "/" + p.config + "/seed" + seed + "-g1";
  poison_consistently(dir);
  ASSERT_EQ(run_nibble({"fixture", "verify", dir}, t).code, 0) << "the poisoned fixture must be consistent with its manifest";
  fs::remove(out);
  r = run_nibble_env(env, cal, t);
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("nibble calibrate: fixture: fixture " + dir), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("but the generator, rerun now, makes"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("tensors that differ: " + std::string(p.last_tensor) + ")"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("`nibble fixture build --task " + std::string(p.task) + " --config " + p.config + " --seed " +
                          seed + "`"),
            std::string::npos)
      << r.output;
  EXPECT_FALSE(fs::exists(out)) << "a calibration was written from a poisoned fixture";
  r = run_nibble({"grade", "--task", p.task, "--config", p.config, "--seeds", seed, "--fixture", dir, "--solution",
                  bindir() + "/tests/lib/libbad_nothing.so", "--out", t.path() + "/r.json"},
                 t);
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("nibble grade: fixture: fixture " + dir), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("rebuild it with `nibble fixture build --task " + std::string(p.task) + " --config " + p.config +
                          " --seed " + seed + " --out " + dir + "`"),
            std::string::npos)
      << r.output;
  EXPECT_EQ(r.output.find("probing the GPU"), std::string::npos) << "checked after other work:\n" << r.output;
}

INSTANTIATE_TEST_SUITE_P(
    Fixtures, CliUnpinned,
    ::testing::Values(Unpinned{"gemm-w4a16-nvfp4", "m1-n256-k256", 0, "W.global_scale"},  // a parsed shape
                      Unpinned{"gemm-bf16-mxfp4", "m3-n128-k96", 2, "W.scale"},
                      Unpinned{"gemm-w4a16-nvfp4", "tiny", 5, "W.global_scale"},  // a seed not pinned
                      Unpinned{"megakernel-int4-weight-decode", "tiny", 3, "tokens"}),
    [](const ::testing::TestParamInfo<Unpinned>& i) {
      std::string n = std::string(i.param.task) + "_" + i.param.config + "_seed" + std::to_string(i.param.seed);
      std::replace(n.begin(), n.end(), '-', '_');
      return n;
    });

// The manifest's per-tensor hashes (what names the differing tensors later) are checked by
// `fixture verify`: a wrong value, a missing entry and an entry for no tensor each fail it.
TEST(Cli, FixtureVerifyChecksThePerTensorHashes) {
  TempDir t;
  const std::string dir = tiny_fixture(t, 2);
  Result r{};
  const FixtureManifest good = read_manifest(dir);
  struct Case {
    const char* what;
    std::function<void(FixtureManifest&)> edit;
    const char* says;
  } cases[] = {
      {"wrong value", [](FixtureManifest& m) { m.tensor_sha256["tokens"] = std::string(64, '0'); },
       "tensor_sha256['tokens'] does not match the tensor's bytes"},
      {"missing", [](FixtureManifest& m) { m.tensor_sha256.erase("tokens"); }, "has no tensor_sha256 for tensor 'tokens'"},
      {"extra", [](FixtureManifest& m) { m.tensor_sha256["nope"] = std::string(64, 'a'); }, "a tensor its file does not have"},
  };
  for (const Case& c : cases) {
    FixtureManifest m = good;
    c.edit(m);
    write_file_atomic(dir + "/manifest.json", manifest_to_json(m).dump(2) + "\n");
    r = run_nibble({"fixture", "verify", dir}, t);
    EXPECT_EQ(r.code, 1) << c.what << ": " << r.output;
    EXPECT_NE(r.output.find(c.says), std::string::npos) << c.what << ": " << r.output;
  }
  write_file_atomic(dir + "/manifest.json", manifest_to_json(good).dump(2) + "\n");
  r = run_nibble({"fixture", "verify", dir}, t);
  EXPECT_EQ(r.code, 0) << r.output;
}

// A named fixture folder whose manifest cannot be read, or that is a file, or of another seed:
// exit 2 before any work, each with the command that would make the right fixture.
TEST(Cli, BadNamedFixturesSayHowToMakeTheRightOne) {
  TempDir t;
  const std::string dir = tiny_fixture(t, 3);
  Result r{};
  const std::string so = bindir() + "/tests/lib/libbad_nothing.so";
  const auto grade = [&](const std::string& fixture, const std::string& seed) {
    return run_nibble({"grade", "--config", "tiny", "--seeds", seed, "--fixture", fixture, "--solution", so, "--out",
                       t.path() + "/r.json"},
                      t);
  };
  r = grade(dir, "4");  // a fixture of seed 3
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("seed 3, not megakernel-int4-weight-decode / tiny seed 4"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("nibble fixture build --task megakernel-int4-weight-decode --config tiny --seed 4"), std::string::npos)
      << r.output;
  r = grade(dir + "/manifest.json", "3");  // a file, not a folder
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("is not a folder"), std::string::npos) << r.output;
  write_file_atomic(dir + "/manifest.json", "{ not json");
  r = grade(dir, "3");
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("rebuild it with `nibble fixture build --task megakernel-int4-weight-decode --config tiny --seed 3 --out " + dir),
            std::string::npos)
      << r.output;
  EXPECT_EQ(r.output.find("probing the GPU"), std::string::npos) << r.output;
}

// Outputs that are links, pipes or standard streams, checked where the write lands (second newcomer
// review): a link into a place that cannot be written is refused before the work, not after it;
// "dir/" is a folder; a --history link survives the check; a --history pipe is refused, not
// waited on; the grade's outputs never land on the bundled reference, a cached fixture or a --dump
// file; a page never replaces its own report.
TEST(Cli, OutputsAreCheckedWhereTheWriteLands) {
  TempDir t;
  write_file_atomic(t.path() + "/a.json", "{}");
  fs::create_symlink(t.path() + "/a.json/x.json", t.path() + "/into-a-file");  // its folder is a file
  const std::string so = bindir() + "/tests/lib/libbad_nothing.so";
  const std::vector<std::string> grade = {"grade", "--config", "tiny", "--seeds", "0", "--solution", so};
  const auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> a = grade;
    a.insert(a.end(), extra.begin(), extra.end());
    return a;
  };
  Result r = run_nibble({"calibrate", "--config", "tiny", "--seeds", "0", "--path", "cpu", "-q", "--out", t.path() + "/into-a-file"}, t);
  EXPECT_EQ(r.code, 2) << "refused after the work, or not at all: " << r.output;
  r = run_nibble(with({"--out", t.path() + "/into-a-file"}), t);
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("report cannot be written"), std::string::npos) << r.output;
  r = run_nibble(with({"--out", t.path() + "/newdir/"}), t);
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("ends in '/'"), std::string::npos) << r.output;
  r = run_nibble({"report", "html", source_report(), "-o", t.path() + "/newdir2/"}, t);
  EXPECT_EQ(r.code, 4) << "a name that can never take the page is bad input, found before the work: " << r.output;
  EXPECT_NE(r.output.find("ends in '/'"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(t.path() + "/newdir2")) << "a folder was left behind";
  // --history through a dangling link: the link stays, and a grade refused after the option checks
  // (here: --fixture names no fixture, on any machine, GPU or not) leaves no file behind.
  fs::create_symlink(t.path() + "/hist-target.jsonl", t.path() + "/hist-link");
  r = run_nibble(with({"--out", t.path() + "/r.json", "--history", t.path() + "/hist-link", "--fixture", t.path() + "/none"}), t);
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_FALSE(fs::exists(t.path() + "/r.json")) << "a refused grade wrote a report";
  EXPECT_TRUE(fs::is_symlink(t.path() + "/hist-link")) << r.output;
  EXPECT_FALSE(fs::exists(t.path() + "/hist-target.jsonl")) << "the probe's file was left behind";
  // --history on a pipe with no reader: refused at once (run_nibble's watchdog is 120 s).
  ASSERT_EQ(mkfifo((t.path() + "/pipe").c_str(), 0600), 0);
  r = run_nibble(with({"--out", t.path() + "/r.json", "--history", t.path() + "/pipe"}), t);
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("not a regular file"), std::string::npos) << r.output;
  // A pipe or a device given as a report: refused at once, never read without end (a newcomer's
  // `report show /dev/zero` grew to 1.6 GB; a pipe with no writer hung show, compare and leaderboard).
  for (const std::vector<std::string>& args :
       {std::vector<std::string>{"report", "show", t.path() + "/pipe"}, {"report", "show", "/dev/zero"},
        {"compare", source_report(), t.path() + "/pipe"}, {"leaderboard", t.path() + "/pipe"}}) {
    r = run_nibble(args, t);
    EXPECT_EQ(r.code, 4) << args[0] << " " << args.back() << ": " << r.output;
    EXPECT_NE(r.output.find("not a regular file"), std::string::npos) << args[0] << " " << args.back() << ": " << r.output;
  }
  // Files the grade reads or writes besides its outputs.
  r = run_nibble(with({"--out", bindir() + "/lib/libnibble_reference.so"}), t);
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("the bundled reference"), std::string::npos) << r.output;
  r = run_nibble(with({"--out", t.path() + "/d/seed0-candidate.safetensors", "--dump", t.path() + "/d"}), t);
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("a --dump file"), std::string::npos) << r.output;
  r = run_nibble_env({"NIBBLE_CACHE_DIR=" + t.path() + "/cache"},
                     with({"--out", t.path() + "/cache/fixtures/megakernel-int4-weight-decode/tiny/seed0-g1/manifest.json"}), t);
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("the fixture's manifest.json"), std::string::npos) << r.output;
  // A page over its own report.
  write_file_atomic(t.path() + "/rep.json", read_file(source_report()));
  r = run_nibble({"report", "html", t.path() + "/rep.json", "-o", t.path() + "/rep.json"}, t);
  EXPECT_EQ(r.code, 4) << r.output;
  EXPECT_EQ(read_file(t.path() + "/rep.json"), read_file(source_report())) << "the report was replaced";
  // A report whose median is not its samples' draws no page, as `report show` says it (a red-team's
  // edited median was drawn with no mark when no BASE was given).
  nlohmann::json edited = nlohmann::json::parse(read_file(source_report()));
  for (auto& v : edited["timing"]["gpu_span_us"]["samples"]) v = v.get<double>() * 2;
  write_file_atomic(t.path() + "/edited.json", edited.dump());
  r = run_nibble({"report", "html", t.path() + "/edited.json", "-o", t.path() + "/edited.html"}, t);
  EXPECT_EQ(r.code, 4) << r.output;
  EXPECT_NE(r.output.find("an edited report"), std::string::npos) << r.output;
  EXPECT_FALSE(std::filesystem::exists(t.path() + "/edited.html"));
}

// -o /dev/stdout behaves as the shell's own redirection: `>> log` appends after what is there, the
// page (or table) alone is on stdout, the status line on stderr.
TEST(Cli, DevStdoutIsTheStreamTheShellGave) {
  TempDir t;
  const std::string log = t.path() + "/log.txt";
  write_file_atomic(log, "PRIOR\n");
  const ChildExit e = run_child({"/bin/sh", "-c", "'" + nibble_exe() + "' report html '" + source_report() +
                                                      "' -o /dev/stdout >> '" + log + "' 2>/dev/null; echo AFTER >> '" + log + "'"},
                                t.path() + "/sh.log", 120);
  ASSERT_EQ(e.kind, ChildExit::Exited);
  EXPECT_EQ(e.code, 0) << file_tail(t.path() + "/sh.log", 4096);
  const std::string got = read_file(log);
  EXPECT_EQ(got.rfind("PRIOR\n<!DOCTYPE html>", 0), 0u) << got.substr(0, 80);
  EXPECT_NE(got.find("</html>"), std::string::npos);
  EXPECT_EQ(got.substr(got.size() - 6), "AFTER\n") << got.substr(got.size() - 80);
  EXPECT_EQ(got.find("nibble report html: wrote"), std::string::npos) << "the status line went to stdout";
}

// --timing-seed is a seed like --seeds: "", -1 and 2^64 are refused, not read as another seed.
TEST(Cli, TimingSeedIsCheckedAsASeed) {
  TempDir t;
  for (const char* v : {"", "-1", "18446744073709551616"}) {
    const Result r = run_nibble({"grade", "--config", "tiny", "--solution", bindir() + "/tests/lib/libbad_nothing.so",
                                 "--out", t.path() + "/r.json", "--timing-seed", v},
                                t);
    EXPECT_EQ(r.code, 2) << "'" << v << "': " << r.output;
    EXPECT_NE(r.output.find("--timing-seed"), std::string::npos) << r.output;
  }
}

// A fixture with a tensor its config does not have, or whose manifest names another file, is not a
// fixture of that config: fixture verify and the grade both refuse it.
TEST(Cli, ExtraTensorsAndAnotherFileNameAreRefused) {
  TempDir t;
  const std::string dir = tiny_fixture(t, 1);
  const std::vector<uint8_t> extra(8, 0);
  rewrite_and_rehash(dir, [&](std::vector<TensorView>& v) { v.push_back({"extra.tensor", DType::U8, {8}, extra.data(), extra.size()}); });
  expect_fixture_refused(t, dir, 1, "has a tensor 'extra.tensor'");
  Result r{};
  std::string m = read_file(dir + "/manifest.json");
  const auto at = m.find("\"model.safetensors\"");
  ASSERT_NE(at, std::string::npos);
  m.replace(at, std::string("\"model.safetensors\"").size(), "\"weights.bin\"");
  fs::rename(dir + "/model.safetensors", dir + "/weights.bin");
  write_file_atomic(dir + "/manifest.json", m);
  r = run_nibble({"fixture", "verify", dir}, t);
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_NE(r.output.find("field 'file'"), std::string::npos) << r.output;
}

namespace nibble {
namespace {

// A build that waited for another build of its folder judges the folder holding its lock: what the
// other left there (another seed's fixture) is refused, not overwritten (it was judged empty before
// the wait).
TEST(Cli, FixtureBuildJudgesTheFolderHoldingItsLock) {
  TempDir t;
  const std::string made = tiny_fixture(t, 0);  // the fixture the other build "writes"
  const std::string dir = t.path() + "/shared";
  fs::create_directories(dir);
  Result r;
  auto held = std::make_unique<FolderLock>(dir);
  std::thread build([&] { r = run_nibble({"fixture", "build", "--config", "tiny", "--seed", "1", "--out", dir}, t); });
  for (int i = 0; i < 1200 && file_tail(t.path() + "/cli.log", 1 << 12).find("waiting for another nibble") == std::string::npos; ++i)
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  for (const char* f : {"model.safetensors", "manifest.json"}) fs::copy_file(made + "/" + f, dir + "/" + f);
  held.reset();
  build.join();
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("waiting for another nibble building"), std::string::npos) << r.output;
  EXPECT_NE(r.output.find("holds the fixture of megakernel-int4-weight-decode / tiny seed 0"), std::string::npos) << r.output;
  EXPECT_EQ(read_manifest(dir).seed, 0u) << "the other build's fixture was overwritten";
}

}  // namespace
}  // namespace nibble
