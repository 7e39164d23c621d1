// test_decode_stress_gpu.cpp: the stress test of a decode solution that promises bitwise-equal
// results run to run (issue 21 step 4: the dataflow megakernel's relaxed publish / wait protocol is
// judged by its output, not only argued). Compiled per such solution (tests/decode/solutions.cmake)
// with NIBBLE_SOLUTION_TARGET its CMake target.
//
// On the full config, for fixture seeds 0 and 1 (in the grader's cache, built when missing): the
// solution runs every position from prefill to the cache's end (2048 steps; NIBBLE_STRESS_STEPS
// fewer), through the grader's own DecodeSession, with token ids drawn from a fixed generator, and
// the SHA-256 of each step's logits and appended K/V is kept. Then the model is handed over afresh
// (the cache back to the fixture's bytes) and the run repeated. Every step's digest must match the
// first run's, and every logit be finite. A race between a publication and its reader (a missing
// fence, a counter read too early) shows as a step whose logits differ between the two runs, at
// some step of thousands. A solution whose sums are fp32 atomics (v1's split-K) differs run to run
// by design (on the CPU emulation's two warp schedules, every logit), so it is not run here.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "bundled_solutions.h"
#include "fixtures/decode/decode_config.h"
#include "fixtures/decode/decode_fixture.h"
#include "fixtures/fixture.h"
#include "fixtures/safetensors.h"
#include "fixtures/sha256.h"
#include "gpu_test_util.h"
#include "harness/decode/decode_session.h"
#include "harness/decode/device_model.h"
#include "harness/solution_library.h"

namespace {

/** splitmix64 (Steele, Lea, Flood 2014): the token ids of step s, independent of the logits so that
 *  the two runs read the same tokens even where their logits differ. */
uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

struct RunDigests {
  std::vector<std::string> steps;  // SHA-256 of (logits, K appended, V appended) per step
  long long nonfinite = 0;         // non-finite logits over all steps
  int first_nonfinite_step = -1;
};

/** One run: a fresh hand-over of the fixture, build_model, `steps` steps from cfg.prefill. */
RunDigests run_once(const nibble::SolutionLibrary& lib, const nibble::DecodeConfig& cfg, const nibble::SafetensorsFile& file,
                    uint64_t seed, int steps) {
  using namespace nibble;
  const auto& d = cfg.dims;
  RunDigests out;
  DeviceModel dev(cfg, file);
  cudaStream_t stream = nullptr;
  EXPECT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
  {
    DecodeSession session(lib, dev, stream, stream);
    std::vector<int64_t> tokens(size_t(d.batch));
    for (int s = 0; s < steps; ++s) {
      for (int b = 0; b < d.batch; ++b)
        tokens[size_t(b)] = int64_t(splitmix64(seed * 1000003ull + uint64_t(s) * 131ull + uint64_t(b)) % uint64_t(d.vocab));
      const StepOutputs o = session.run_step(tokens, cfg.prefill + s);
      Sha256 h;
      h.update(o.logits.data(), o.logits.size() * sizeof(float));
      h.update(o.k_appended.data(), o.k_appended.size() * 2);
      h.update(o.v_appended.data(), o.v_appended.size() * 2);
      out.steps.push_back(h.final_hex());
      for (float v : o.logits)
        if (!std::isfinite(v)) {
          ++out.nonfinite;
          if (out.first_nonfinite_step < 0) out.first_nonfinite_step = s;
        }
    }
    session.close();
  }
  EXPECT_EQ(cudaStreamDestroy(stream), cudaSuccess);
  return out;
}

TEST(DecodeStress, FullConfigBitwiseRunToRun) {
  NIBBLE_REQUIRE_GPU();
  using namespace nibble;
  const test::BundledSolution sol = test::bundled_solution(NIBBLE_SOLUTION_TARGET);
  std::string why;
  if (!test::runs_on_this_device(sol.cuda_architectures, &why)) GTEST_SKIP() << sol.target << ": " << why;
  const DecodeConfig cfg = decode_config("full");
  int steps = cfg.dims.max_seq - cfg.prefill;
  if (const char* e = std::getenv("NIBBLE_STRESS_STEPS"); e && *e) {
    const int n = std::atoi(e);
    ASSERT_TRUE(n >= 1 && n <= steps) << "NIBBLE_STRESS_STEPS=" << e << ": 1 to " << steps << " (prefill to the cache's end)";
    steps = n;
  }
  const SolutionLibrary lib(sol.path);
  for (const uint64_t seed : {0ull, 1ull}) {
    // The grader's cache folder, so that a grade's fixtures serve here too; built when missing.
    const std::string dir = default_fixture_dir(kDecodeTask, cfg.name, seed);
    std::filesystem::create_directories(dir);
    {
      const FolderLock lock(dir);
      if (!fixture_present(dir, kDecodeTask, cfg.name, seed, /*given=*/false))
        build_decode_fixture(cfg, seed, dir, /*threads=*/0, {});
    }
    const SafetensorsFile file(dir + "/" + kFixtureModelFile);
    const RunDigests a = run_once(lib, cfg, file, seed, steps);
    const RunDigests b = run_once(lib, cfg, file, seed, steps);
    ASSERT_EQ(a.steps.size(), size_t(steps));
    ASSERT_EQ(b.steps.size(), size_t(steps));
    int differ = 0, first = -1;
    for (int s = 0; s < steps; ++s)
      if (a.steps[size_t(s)] != b.steps[size_t(s)]) {
        ++differ;
        if (first < 0) first = s;
      }
    std::printf("%s, seed %llu: %d steps (pos %d..%d) run twice: %d steps differ; %lld non-finite logits\n",
                lib.name().c_str(), (unsigned long long)seed, steps, cfg.prefill, cfg.prefill + steps - 1, differ,
                a.nonfinite + b.nonfinite);
    EXPECT_EQ(differ, 0) << "seed " << seed << ": the first differing step is " << first << " (pos " << cfg.prefill + first
                         << "); logits or appended K/V not bitwise equal between two runs of the same inputs";
    EXPECT_EQ(a.nonfinite + b.nonfinite, 0) << "seed " << seed << ": non-finite logits, first at step "
                                             << (a.first_nonfinite_step >= 0 ? a.first_nonfinite_step : b.first_nonfinite_step);
  }
}

}  // namespace
