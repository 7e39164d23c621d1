// test_cli.cpp: the `nibble` command's answers to bad input: a clear message, the documented exit
// code, nothing half-written.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>

#include "fixtures/fixture.h"
#include "fixtures/safetensors.h"
#include "fixtures/sha256.h"
#include "gpu_test_util.h"
#include "harness/atomic_file.h"
#include "harness/process.h"

using namespace nibble;
namespace fs = std::filesystem;

namespace {
std::string bindir() {
  const char* b = std::getenv("NIBBLE_BINARY_DIR");
  return b ? b : ".";
}
std::string nibble_exe() { return bindir() + "/bin/nibble"; }

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

TEST(Cli, GradeOnAMachineWithoutAGpuSaysSoAndExits2) {
  std::string why;
  if (test::gpu_available(&why)) GTEST_SKIP() << "a GPU is present: the no-GPU answer cannot be observed here";
  TempDir t;
  const Result r = run_nibble({"grade", "--config", "tiny", "--solution", bindir() + "/tests/lib/libbad_nothing.so",
                           "--out", t.path() + "/r.json"}, t);
  EXPECT_EQ(r.code, 2);
  EXPECT_NE(r.output.find("no usable NVIDIA GPU"), std::string::npos) << r.output;
  EXPECT_FALSE(fs::exists(t.path() + "/r.json"));
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
      {{"--seeds", "-1"}, "non-negative integer"},
      {{"--seeds", "0,,1"}, "has an empty element"},  // not read as 0,1
      {{"--seeds", "0,"}, "has an empty element"},    // not read as 0
      {{"--threads", ""}, "--threads"},              // not read as 0, all cores
      {{"--min-rounds", "5", "--max-rounds", "2"}, "--min-rounds"},
      {{"--timeout", "-5"}, "positive"},
      {{"--history", t.path()}, "--history"},
      {{"--threads", "100000"}, "--threads"},
      {{"--timeout", "inf"}, "finite"},
      {{"--max-timing-seconds", "-1"}, "--max-timing-seconds"},
      {{"--calibration", t.path() + "/none.json"}, "not a readable JSON file"},
      {{"--calibration", t.path() + "/cal-full.json"}, "calibrated for megakernel-int4-weight-decode / full"},
      // Outputs that collide: each later write would destroy the earlier file, or the input.
      {{"--gbench-json", t.path() + "/r.json"}, "--out and --gbench-json name the same file"},
      {{"--history", t.path() + "/sub/../r.json"}, "--out and --history name the same file"},
      {{"--gbench-json", t.path() + "/alias.json"}, "--out and --gbench-json name the same file"},
      {{"--out", so}, "is the grade's input --solution"},
      {{"--history", so}, "is the grade's input --solution"},
  };
  fs::create_directories(t.path() + "/sub");
  fs::create_symlink(t.path() + "/r.json", t.path() + "/alias.json");  // dangling: r.json is not written yet
  // A real table of another config: refused before any work (it would chart the wrong variants).
  write_file_atomic(t.path() + "/cal-full.json",
                    R"({"schema": "nibble.calibration", "task": "megakernel-int4-weight-decode", "config": "full", "rows": []})");
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

TEST(Cli, CalibrateTimeoutMustBePositiveAndFinite) {
  TempDir t;
  for (const char* v : {"-1", "0", "inf", "nan"}) {
    const Result r = run_nibble({"calibrate", "--config", "tiny", "--path", "cpu", "--timeout", v, "--out", t.path() + "/c.json"}, t);
    EXPECT_EQ(r.code, 2) << v << ": " << r.output;
    EXPECT_NE(r.output.find("--timeout must be a positive, finite number"), std::string::npos) << v << ": " << r.output;
    EXPECT_FALSE(fs::exists(t.path() + "/c.json")) << v;
  }
}

TEST(Cli, UnknownCommandEmptyValuesAndNotAFolderAreUsageErrors) {
  TempDir t;
  Result r = run_nibble({"bogus"}, t);
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("unknown command 'bogus'"), std::string::npos) << r.output;
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
  EXPECT_NE(r.output.find("1.24e+12 multiply-adds"), std::string::npos) << r.output;  // 4096 8192 3072 x 6 x 2
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

TEST(Cli, GemmCalibrateOnTheGpuWithoutOneSaysSo) {
  std::string why;
  if (test::gpu_available(&why)) GTEST_SKIP() << "a GPU is present: the no-GPU answer cannot be observed here";
  TempDir t;
  const Result r = run_nibble({"calibrate", "--task", "gemm-w4a16-nvfp4", "--config", "tiny", "--path", "gpu", "--out",
                               t.path() + "/c.json", "-q"},
                              t);
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("--path gpu, but no usable NVIDIA GPU"), std::string::npos) << r.output;
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
/** Rewrite <dir>'s fixture without tensor `drop`, its manifest rehashed to match: the hashes then
 *  verify, only the tensor set tells it is not a fixture of its config. */
void drop_tensor_and_rehash(const std::string& dir, const std::string& drop) {
  const std::string model = dir + "/model.safetensors";
  {
    const SafetensorsFile f(model);
    std::vector<TensorView> keep;
    for (const auto& e : f.entries())
      if (e.name != drop) keep.push_back({e.name, e.dtype, e.shape, f.data(e.name), e.nbytes()});
    write_safetensors(dir + "/new.safetensors", keep, f.metadata());
  }
  fs::rename(dir + "/new.safetensors", model);
  FixtureManifest m = read_manifest(dir);
  m.file_sha256 = sha256_file_hex(model);
  m.file_bytes = int64_t(fs::file_size(model));
  m.tensor_sha256.erase(drop);
  write_file_atomic(dir + "/manifest.json", manifest_to_json(m).dump(2) + "\n");
}
}  // namespace

// The grader checks a fixture's tensors as `fixture verify` does: hashes that match a manifest
// rewritten for a file without `tokens` say nothing of whether it is a tiny fixture.
TEST(Cli, GradeChecksTheFixturesTensorsNotOnlyItsHashes) {
  TempDir t;
  const std::string dir = t.path() + "/fx";
  Result r = run_nibble({"fixture", "build", "--config", "tiny", "--seed", "3", "--out", dir, "-q"}, t);
  ASSERT_EQ(r.code, 0) << r.output;
  drop_tensor_and_rehash(dir, "tokens");
  r = run_nibble({"fixture", "verify", dir}, t);
  EXPECT_EQ(r.code, 1) << r.output;
  EXPECT_NE(r.output.find("has no tensor 'tokens'"), std::string::npos) << r.output;
  r = run_nibble({"grade", "--config", "tiny", "--seeds", "3", "--fixture", dir, "--solution",
                  bindir() + "/tests/lib/libbad_nothing.so", "--out", t.path() + "/r.json"},
                 t);
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("has no tensor 'tokens'"), std::string::npos) << r.output;
  EXPECT_EQ(r.output.find("probing the GPU"), std::string::npos) << "checked after other work:\n" << r.output;
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
  const std::string dec = t.path() + "/decode";
  r = run_nibble({"fixture", "build", "--config", "tiny", "--seed", "7", "--out", dec, "-q"}, t);
  ASSERT_EQ(r.code, 0) << r.output;
  const std::string before = sha256_file_hex(dec + "/model.safetensors");
  r = run_nibble({"grade", "--task", "gemm-w4a16-nvfp4", "--config", "tiny", "--seeds", "7", "--solution", so, "--fixture",
                  dec, "--out", t.path() + "/r.json"},
                 t);
  EXPECT_EQ(r.code, 2) << r.output;
  EXPECT_NE(r.output.find("is for task megakernel-int4-weight-decode"), std::string::npos) << r.output;
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

// The manifest's per-tensor hashes (what names the differing tensors later) are checked by
// `fixture verify`: a wrong value, a missing entry and an entry for no tensor each fail it.
TEST(Cli, FixtureVerifyChecksThePerTensorHashes) {
  TempDir t;
  const std::string dir = t.path() + "/fx";
  Result r = run_nibble({"fixture", "build", "--config", "tiny", "--seed", "2", "--out", dir, "-q"}, t);
  ASSERT_EQ(r.code, 0) << r.output;
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
