// test_int4_gemm_gpu.cpp: gemm-w4a16-int4 on the GPU through `nibble grade`, several solutions in one
// run: the reference, the cuBLAS bf16 comparison point and the baseline built for each weight layout,
// on the symmetric tiny config (compressed-tensors without a zero-point tensor) and on a residue shape
// (N = 3000, not a multiple of 64; K = 3200, a multiple of 128 but not of 256). Every grade passes,
// and each report names the layout its solution asked for. (Every bundled solution on tiny, the
// hostile GEMM cheats and the GPU calibration table run in test_grade_gpu for every GEMM task.) A
// solution not built for this GPU is left out with a line saying so. The tuned sm_90a solution on
// each of its kernels and plans: Int4GemmSm90 below.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <ostream>
#include <string>
#include <vector>

#include "test_binary_dir.h"
#include "bundled_solutions.h"
#include "gpu_test_util.h"
#include "harness/atomic_file.h"
#include "harness/process.h"
#include "test_env.h"

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
    std::string why;
    if (!test::runs_on_this_device(s.cuda_architectures, &why)) {
      std::cout << "not graded here: " << s.target << ": " << why << "\n";
      continue;
    }
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

// ---- the tuned sm_90a solution ------------------------------------------------------------------

// libnibble_int4_gemm_sm90.so on every path prepare picks by M and on the wgmma variants it does not
// pick by itself at these shapes (NIBBLE_INT4SM90_BN / _SPLIT / _GRID, read by its prepare in the
// graded child, which inherits the environment), each graded against the reference on a residue
// shape (N = 3000: the last 128-row tile partial; K = 3200: 50 chunks, 25 groups, not a multiple of
// 256) or a small one: M = 1 and 16 (the mma.sync kernel, one and two n8 tiles), M = 17 (64 x 64
// tiles, the smallest M of the wgmma path), 128 (64 x 128, K split by the plan), 200 (64 x 128, a
// partial tile), 300 (128 x 256, a partial tile in M, split 2), then 64 x 64 split 8, 64 x 128 on 5
// persistent blocks (several tiles each: the ring's phases carry across tiles), 128 x 128 of two
// consumer warpgroups (NIBBLE_INT4SM90_ROWS=128) split 2 and on 3 persistent blocks, 128 x 256 on 2
// persistent blocks (24 tiles each), the odd K splits (clusters of 3, 5 and 6 over 50 chunks: 17,
// 17, 16 and 9 x 5, 5 at 3 and 6; 64 x 128 split 3 and 6, 64 x 64 split 5, 128 x 128 split 3), and
// K = 256 (4 chunks: too few to split).
struct Sm90Case {
  const char* config;
  const char* bn;     // "": prepare's choice
  const char* split;  // "": prepare's choice
  const char* grid;   // "": prepare's choice
  const char* rows = "";  // NIBBLE_INT4SM90_ROWS ("": prepare's choice, 64 W rows below BN 256)
};

void PrintTo(const Sm90Case& c, std::ostream* os) {
  *os << c.config << " bn " << (*c.bn ? c.bn : "auto") << " split " << (*c.split ? c.split : "auto") << " grid "
      << (*c.grid ? c.grid : "auto") << (*c.rows ? std::string(" rows ") + c.rows : std::string());
}

class Int4GemmSm90 : public ::testing::TestWithParam<Sm90Case> {};

/** Set NIBBLE_INT4SM90_<name> to v, or unset it when v is empty. */
void set_or_unset(const char* name, const char* v) {
  ASSERT_TRUE(test::set_or_unset_env(std::string("NIBBLE_INT4SM90_") + name, v)) << name;
}

TEST_P(Int4GemmSm90, PassesOnEveryPath) {
  NIBBLE_REQUIRE_GPU();
  const test::BundledSolution sol = test::bundled_solution("nibble_int4_gemm_sm90");
  if (std::string why; !test::runs_on_this_device(sol.cuda_architectures, &why)) GTEST_SKIP() << why;
  const Sm90Case c = GetParam();
  TempDir t("nibble-int4-sm90");
  setenv("NIBBLE_CACHE_DIR", (t.path() + "/cache").c_str(), 1);
  set_or_unset("BN", c.bn);
  set_or_unset("SPLIT", c.split);
  set_or_unset("GRID", c.grid);
  set_or_unset("ROWS", c.rows);
  const std::vector<std::string> args = {bindir() + "/bin/nibble", "grade", "--task", "gemm-w4a16-int4", "--config",
                                         c.config, "--seeds", "0", "--no-timing", "--out", t.path() + "/r.json", "-q",
                                         "--solution", sol.path};
  const ChildExit e = run_child(args, t.path() + "/log", 600);
  for (const char* v : {"BN", "SPLIT", "GRID", "ROWS"}) set_or_unset(v, "");
  const std::string log = file_tail(t.path() + "/log", 1 << 14);
  std::cout << log;
  ASSERT_EQ(e.kind, ChildExit::Exited) << e.describe();
  EXPECT_EQ(e.code, 0) << log;
  const json r = json::parse(read_file(t.path() + "/r.json"));
  EXPECT_EQ(r["disposition"], "Passed") << r["reason"];
  // The wgmma path's weights are rounded twice (int4_wg_layout.h: at most 2^-7 + 2^-16 each, RMS
  // about 2e-3 in C); the mma path is exact up to fp32 sums.
  EXPECT_LT(r["correctness"]["worst_rel_err"].get<double>(), 5e-3);
}

INSTANTIATE_TEST_SUITE_P(
    Paths, Int4GemmSm90,
    ::testing::Values(Sm90Case{"m1-n3000-k3200", "", "", ""}, Sm90Case{"m16-n3000-k3200", "", "", ""},
                      Sm90Case{"m17-n3000-k3200", "", "", ""}, Sm90Case{"m128-n3000-k3200", "", "", ""},
                      Sm90Case{"m200-n3000-k3200", "", "", ""}, Sm90Case{"m300-n3000-k3200", "", "", ""},
                      Sm90Case{"m128-n3000-k3200", "64", "8", ""}, Sm90Case{"m128-n3000-k3200", "128", "1", "5"},
                      Sm90Case{"m128-n3000-k3200", "128", "2", "", "128"}, Sm90Case{"m200-n3000-k3200", "128", "1", "3", "128"},
                      Sm90Case{"m300-n3000-k3200", "256", "1", "2"},
                      Sm90Case{"m128-n3000-k3200", "128", "3", ""}, Sm90Case{"m128-n3000-k3200", "64", "5", ""},
                      Sm90Case{"m128-n3000-k3200", "128", "6", ""}, Sm90Case{"m128-n3000-k3200", "128", "3", "", "128"},
                      Sm90Case{"m40-n256-k256", "", "", ""}),
    [](const ::testing::TestParamInfo<Sm90Case>& i) {
      std::string s = std::string(i.param.config) + "_bn" + (*i.param.bn ? i.param.bn : "auto") + "_split" +
                      (*i.param.split ? i.param.split : "auto") + "_grid" + (*i.param.grid ? i.param.grid : "auto") +
                      (*i.param.rows ? std::string("_rows") + i.param.rows : std::string());
      for (char& ch : s)
        if (ch == '-') ch = '_';
      return s;
    });

}  // namespace
