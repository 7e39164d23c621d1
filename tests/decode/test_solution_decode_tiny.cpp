// test_solution_decode_tiny.cpp: a bundled solution .so through the C ABI against the fp64 oracle.
// Compiled once per bundled decode solution (tests/decode/solutions.cmake) with
// NIBBLE_SOLUTION_TARGET = its CMake target ("nibble_unfused"), whose .so and architectures come
// from bundled_solutions.h; skipped, with the reason, on a GPU the .so is not built for.
//
// The tiny config (2 layers, d 256, ffn 512, 4 q / 2 kv heads, hd 64, vocab 1000), fixture seed 0,
// run exactly as the grader's child runs a solution (SolutionLibrary + DeviceModel + DecodeSession:
// NaN-filled logits, token ids on the GPU), 8 consecutive steps from pos = prefill. Per step:
//   - logits: relative error ||out - oracle|| / ||oracle|| below the task's gate (1e-1; an int4
//     GEMV in fp32 should land near 1e-3 or below, printed), every element finite;
//   - the K and V appended at slot pos of every layer: every element a legitimate bf16 rounding of
//     the oracle's exact value (KvOffer, window 1e-3 of the head's RMS; the oracle adopts ours at
//     near-ties) and within 1e-2 relative (L2) of what the oracle stored.
// After the last step, every other slot of every cache must still hold the fixture's bytes.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "fixtures/decode/decode_fixture.h"
#include "bundled_solutions.h"
#include "fixtures/fixture.h"
#include "fixtures/safetensors.h"
#include "fixtures/decode/decode_config.h"
#include "fixtures/bf16.h"
#include "gpu_test_util.h"
#include "harness/decode/decode_session.h"
#include "harness/decode/device_model.h"
#include "harness/solution_library.h"
#include "reference/decode/oracle_fp64.h"
#include "test_fixture_util.h"

namespace {

using nibble::bf16_to_f32;  // fixtures/bf16.h

/** ||a - b|| / ||b|| over bf16 values; counts elements that differ and non-finite ones in a. */
double bf16_relerr(const std::vector<uint16_t>& a, const std::vector<uint16_t>& b, int* differ, int* nonfinite) {
  double num = 0, den = 0;
  *differ = 0;
  *nonfinite = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double x = bf16_to_f32(a[i]), y = bf16_to_f32(b[i]);
    if (!std::isfinite(x)) {
      ++*nonfinite;
      continue;
    }
    if (a[i] != b[i]) ++*differ;
    num += (x - y) * (x - y);
    den += y * y;
  }
  return den > 0 ? std::sqrt(num / den) : std::sqrt(num);
}

TEST(SolutionDecodeTiny, MatchesOracleFor8Steps) {
  NIBBLE_REQUIRE_GPU();
  const nibble::test::BundledSolution sol = nibble::test::bundled_solution(NIBBLE_SOLUTION_TARGET);
  std::string why;
  if (!nibble::test::runs_on_this_device(sol.cuda_architectures, &why)) GTEST_SKIP() << sol.target << ": " << why;
  using namespace nibble;
  const DecodeConfig cfg = decode_config("tiny");
  const auto& d = cfg.dims;
  test::TempDir dir;
  build_decode_fixture(cfg, /*seed=*/0, dir.path(), /*threads=*/0, {});
  const SafetensorsFile file(dir / kFixtureModelFile);
  DeviceModel dev(cfg, file);
  oracle::DecodeOracle oracle(cfg, file, /*threads=*/2);

  const SolutionLibrary lib(sol.path);
  EXPECT_FALSE(lib.name().empty()) << sol.path << ": nibble_solution_name";
  std::printf("%s: %s\n", sol.target, lib.name().c_str());
  cudaStream_t stream = nullptr;
  ASSERT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);

  const int steps = cfg.checked_steps;
  {
    DecodeSession session(lib, dev, stream, stream);
    for (int s = 0; s < steps; ++s) {
      const int pos = cfg.prefill + s;
      const std::vector<int64_t> tokens(dev.tokens().begin() + size_t(s) * d.batch,
                                        dev.tokens().begin() + size_t(s + 1) * d.batch);
      const StepOutputs out = session.run_step(tokens, pos);
      // Our appended K/V are offered to the oracle: where an element sits so close to a bf16
      // rounding tie (within 1e-3 of its head's RMS) that fp32 and fp64 may round it apart, the
      // oracle adopts ours, so later steps compare arithmetic, not tie luck. A rejected element is
      // a real disagreement.
      oracle::KvOffer offer;
      offer.k = &out.k_appended;
      offer.v = &out.v_appended;
      offer.window = 1e-3;
      oracle::StepTrace trace;
      std::vector<uint16_t> k_ref, v_ref;
      const std::vector<double> ref = oracle.step(tokens, pos, &k_ref, &v_ref, &trace, &offer);

      ASSERT_EQ(out.logits.size(), ref.size());
      double num = 0, den = 0;
      int nonfinite = 0;
      for (size_t i = 0; i < ref.size(); ++i) {
        if (!std::isfinite(out.logits[i])) {
          ++nonfinite;
          continue;
        }
        const double e = double(out.logits[i]) - ref[i];
        num += e * e;
        den += ref[i] * ref[i];
      }
      const double rel = std::sqrt(num / den);
      int k_diff = 0, k_nf = 0, v_diff = 0, v_nf = 0;
      const double k_rel = bf16_relerr(out.k_appended, k_ref, &k_diff, &k_nf);
      const double v_rel = bf16_relerr(out.v_appended, v_ref, &v_diff, &v_nf);
      std::printf("step %d pos %d: logits relerr %.3e; K relerr %.3e (%d of %zu bf16 differ), "
                  "V relerr %.3e (%d differ); offer: %lld adopted, %lld rejected\n",
                  s, pos, rel, k_rel, k_diff, k_ref.size(), v_rel, v_diff, (long long)trace.adopted,
                  (long long)trace.rejected);
      EXPECT_EQ(nonfinite, 0) << "step " << s << ": non-finite logits";
      EXPECT_LT(rel, cfg.gate) << "step " << s << " pos " << pos;
      ASSERT_EQ(out.k_appended.size(), k_ref.size());
      ASSERT_EQ(out.v_appended.size(), v_ref.size());
      EXPECT_EQ(k_nf + v_nf, 0) << "step " << s << ": non-finite K/V appended";
      EXPECT_LT(k_rel, 1e-2) << "step " << s << ": appended K";
      EXPECT_LT(v_rel, 1e-2) << "step " << s << ": appended V";
      EXPECT_EQ(trace.rejected, 0) << "step " << s << ": appended K/V elements that are not a rounding of the "
                                   << "oracle's value";
    }
    session.close();
  }
  ASSERT_EQ(cudaStreamDestroy(stream), cudaSuccess);

  // Nothing but slots [prefill, prefill + steps) may have changed.
  const size_t row = size_t(d.hd), rows_per_head = size_t(d.max_seq);
  for (int l = 0; l < d.layers; ++l) {
    for (const char* kv : {".k", ".v"}) {
      const std::string name = "kv." + std::to_string(l) + kv;
      const size_t n = size_t(d.batch) * d.n_kv * d.max_seq * d.hd;
      std::vector<uint16_t> live(n);
      ASSERT_EQ(cudaMemcpy(live.data(), dev.device_ptr(name), n * 2, cudaMemcpyDeviceToHost), cudaSuccess);
      const auto* orig = reinterpret_cast<const uint16_t*>(file.data(name));
      int stray = 0;
      for (size_t r = 0; r < n / row; ++r) {
        const int slot = int(r % rows_per_head);
        if (slot >= cfg.prefill && slot < cfg.prefill + steps) continue;
        if (std::memcmp(live.data() + r * row, orig + r * row, row * 2) != 0) ++stray;
      }
      EXPECT_EQ(stray, 0) << name << ": " << stray << " cache rows outside the appended slots changed";
    }
  }
}

}  // namespace
