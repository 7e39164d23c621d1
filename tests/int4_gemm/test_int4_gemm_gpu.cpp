// test_int4_gemm_gpu.cpp: gemm-w4a16-int4 on the GPU through `nibble grade`, several solutions in one
// run: the reference, the cuBLAS bf16 comparison point and the baseline built for each weight layout,
// on the symmetric tiny config (compressed-tensors without a zero-point tensor) and on a residue shape
// (N = 3000, not a multiple of 64; K = 3200, a multiple of 128 but not of 256). Every grade passes,
// and each report names the layout its solution asked for. (Every bundled solution on tiny, the
// hostile GEMM cheats and the GPU calibration table run in test_grade_gpu for every GEMM task.)
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "test_binary_dir.h"
#include "bundled_solutions.h"
#include "gpu_test_util.h"
#include "harness/atomic_file.h"
#include "harness/process.h"

using namespace nibble;
using json = nlohmann::json;

namespace {

using test::bindir;  // tests/test_binary_dir.h

class Int4GemmGpu : public ::testing::TestWithParam<std::string> {};

TEST_P(Int4GemmGpu, EveryLayoutPassesAndIsNamed) {
  NIBBLE_REQUIRE_GPU();
  TempDir t("nibble-int4-gpu");
  setenv("NIBBLE_CACHE_DIR", (t.path() + "/cache").c_str(), 1);
  std::vector<std::string> args = {bindir() + "/bin/nibble", "grade", "--task", "gemm-w4a16-int4", "--config", GetParam(),
                                   "--seeds", "0", "--no-timing", "--out", t.path() + "/reports", "-q",
                                   "--solution", bindir() + "/lib/libnibble_int4_gemm_reference.so"};
  std::vector<std::string> expect_layout{"plain"};
  for (const test::BundledSolution& s : test::bundled_solutions("int4_gemm")) {
    args.insert(args.end(), {"--solution", s.path});
    const std::string target = s.target;
    const std::string prefix = "nibble_int4_gemm_baseline_";
    expect_layout.push_back(target.rfind(prefix, 0) == 0 ? target.substr(prefix.size()) : "plain");
  }
  const ChildExit e = run_child(args, t.path() + "/log", 900);
  const std::string log = file_tail(t.path() + "/log", 1 << 15);
  std::cout << log;
  ASSERT_EQ(e.kind, ChildExit::Exited) << e.describe();
  EXPECT_EQ(e.code, 0) << log;
  const json lineup = json::parse(read_file(t.path() + "/reports/lineup.json"));
  EXPECT_EQ(lineup["rows"].size(), expect_layout.size()) << lineup.dump(2);
  // One report per solution, named after its file (nibble grade --help: --out with several --solution).
  for (size_t i = 0, s = 0; i + 1 < args.size(); ++i) {
    if (args[i] != "--solution") continue;
    const std::string stem = std::filesystem::path(args[i + 1]).stem().string();
    const json r = json::parse(read_file(t.path() + "/reports/" + stem + ".json"));
    EXPECT_EQ(r["disposition"], "Passed") << stem << ": " << r["reason"];
    EXPECT_LT(r["correctness"]["worst_rel_err"].get<double>(), 5e-3) << stem;
    EXPECT_EQ(r["solution"]["facts"]["int4_layout"], expect_layout[s++]) << stem;
  }
}

INSTANTIATE_TEST_SUITE_P(Configs, Int4GemmGpu, ::testing::Values("tiny-sym", "m16-n3000-k3200"),
                         [](const ::testing::TestParamInfo<std::string>& i) {
                           std::string s = i.param;
                           for (char& c : s)
                             if (c == '-') c = '_';
                           return s;
                         });

}  // namespace
