// test_megakernel_decode_emulation.cpp: the whole megakernel solution (solutions/decode/megakernel:
// megakernel.cu's build_model / decode_step through the C ABI, repack.cu's repack kernels and
// decode_kernel.cu's persistent kernel, compiled from their sources as C++) on the CPU emulation,
// every block resident at once (the grid barriers, the per-head flags, the rings' bulk copies and
// mbarriers, the integer GEMV and the attention all running as written), on the tiny config against
// the fp64 oracle, 8 steps as the GPU test (tests/decode/test_solution_decode_tiny.cpp): logits within
// 1e-3, appended K/V roundings of the oracle's, no other cache row touched. The model is handed over by
// the harness's own DeviceModel (harness/decode/device_model.cpp, compiled here too); its "device"
// memory is host memory registered with the emulation, so every load the kernels make is
// bounds-checked. What this cannot see: timing and the memory model (the emulation is sequentially
// consistent: the GPU tests and the litmus test judge fences).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "megakernel.h"  // first: the shim headers set up the emulation
#include "fixtures/decode/decode_config.h"
#include "fixtures/decode/decode_fixture.h"
#include "fixtures/fixture.h"
#include "fixtures/safetensors.h"
#include "harness/decode/device_model.h"
#include "nibble/nibble.h"
#include "reference/decode/oracle_fp64.h"
#include "test_env.h"
#include "test_fixture_util.h"

namespace nibble {
namespace {

/** The solution through its C ABI on `cfg` over `sms` emulated SMs (one block each), cfg.checked_steps
 *  steps from cfg.prefill, against the fp64 oracle: the logits (every sequence) within 1e-3, appended K/V
 *  roundings of the oracle's, no other cache row touched. Every step's logits, in order, into
 *  *logits_out when given. */
void run_against_the_oracle(const DecodeConfig& cfg, int sms, std::vector<float>* logits_out = nullptr) {
  emu::sm_count = sms;
  const auto& d = cfg.dims;
  test::TempDir dir;
  build_decode_fixture(cfg, /*seed=*/0, dir.path(), /*threads=*/2, {});
  const SafetensorsFile file(dir / kFixtureModelFile);
  emu::unreg_all();
  emu::fiber_stack_bytes = 128 * 1024;  // 4 blocks x 512 threads
  DeviceModel model(cfg, file);  // the harness's own hand-over, here into emulated device memory
  oracle::DecodeOracle oracle(cfg, file, /*threads=*/2);
  void* handle = nullptr;
  nibble_error err{};
  ASSERT_EQ(nibble_decode_build_model(model.abi(), nullptr, &handle, &err), NIBBLE_OK) << err.message;

  std::vector<int64_t> tok_shape{d.batch}, tok_strides{1}, log_shape{d.batch, d.vocab}, log_strides{d.vocab, 1};
  void* tok_mem = nullptr;
  void* log_mem = nullptr;
  cudaMalloc(&tok_mem, size_t(d.batch) * 8);
  cudaMalloc(&log_mem, size_t(d.batch) * d.vocab * 4);
  nibble_tensor tok{tok_mem, {NIBBLE_DEVICE_CUDA, 0}, 1, {NIBBLE_DTYPE_INT, 64, 1}, tok_shape.data(), tok_strides.data(), 0};
  nibble_tensor logits{log_mem, {NIBBLE_DEVICE_CUDA, 0}, 2, {NIBBLE_DTYPE_FLOAT, 32, 1}, log_shape.data(), log_strides.data(), 0};
  const size_t kv_row = size_t(d.hd);
  for (int s = 0; s < cfg.checked_steps; ++s) {
    const int pos = cfg.prefill + s;
    const std::vector<int64_t> tokens(model.tokens().begin() + size_t(s) * d.batch, model.tokens().begin() + size_t(s + 1) * d.batch);
    std::memcpy(tok_mem, tokens.data(), tokens.size() * 8);
    ASSERT_EQ(nibble_decode_step(handle, &tok, pos, &logits, nullptr, &err), NIBBLE_OK) << err.message;
    // Our K/V at slot pos, offered to the oracle as the GPU test does (ties adopted, not luck).
    std::vector<uint16_t> k_ours, v_ours;
    for (int l = 0; l < d.layers; ++l)
      for (int b = 0; b < d.batch; ++b)
        for (int h = 0; h < d.n_kv; ++h) {
          const size_t row = ((size_t(b) * d.n_kv + h) * d.max_seq + pos) * kv_row;
          const auto* k = static_cast<const uint16_t*>(model.device_ptr("kv." + std::to_string(l) + ".k")) + row;
          const auto* v = static_cast<const uint16_t*>(model.device_ptr("kv." + std::to_string(l) + ".v")) + row;
          k_ours.insert(k_ours.end(), k, k + kv_row);
          v_ours.insert(v_ours.end(), v, v + kv_row);
        }
    oracle::KvOffer offer;
    offer.k = &k_ours;
    offer.v = &v_ours;
    offer.window = 1e-3;
    oracle::StepTrace trace;
    std::vector<uint16_t> k_ref, v_ref;
    const std::vector<double> ref = oracle.step(tokens, pos, &k_ref, &v_ref, &trace, &offer);
    const auto* out = static_cast<const float*>(log_mem);
    if (logits_out) logits_out->insert(logits_out->end(), out, out + ref.size());
    double num = 0, den = 0;
    int nonfinite = 0;
    for (size_t i = 0; i < ref.size(); ++i) {
      if (!std::isfinite(out[i])) {
        ++nonfinite;
        continue;
      }
      num += (out[i] - ref[i]) * (out[i] - ref[i]);
      den += ref[i] * ref[i];
    }
    const double rel = std::sqrt(num / den);
    std::printf("step %d pos %d: logits relerr %.3e; K/V offer: %lld adopted, %lld rejected\n", s, pos, rel,
                (long long)trace.adopted, (long long)trace.rejected);
    EXPECT_EQ(nonfinite, 0) << "step " << s;
    EXPECT_LT(rel, 1e-3) << "step " << s << " (the GPU runs at ~5e-4 on full; the gate is " << cfg.gate << ")";
    EXPECT_EQ(trace.rejected, 0) << "step " << s << ": appended K/V that are not a rounding of the oracle's";
  }
  ASSERT_EQ(nibble_decode_teardown(handle, nullptr, &err), NIBBLE_OK) << err.message;
  // Nothing but slots [prefill, prefill + steps) may have changed.
  for (int l = 0; l < d.layers; ++l)
    for (const char* kv : {".k", ".v"}) {
      const std::string name = "kv." + std::to_string(l) + kv;
      const auto* live = static_cast<const uint16_t*>(model.device_ptr(name));
      const auto* orig = reinterpret_cast<const uint16_t*>(file.data(name));
      int stray = 0;
      for (size_t r = 0; r < size_t(d.batch) * d.n_kv * d.max_seq; ++r) {
        const int slot = int(r % size_t(d.max_seq));
        if (slot >= cfg.prefill && slot < cfg.prefill + cfg.checked_steps) continue;
        stray += std::memcmp(live + r * kv_row, orig + r * kv_row, kv_row * 2) != 0;
      }
      EXPECT_EQ(stray, 0) << name << ": cache rows outside the appended slots changed";
    }
  cudaFree(tok_mem);
  cudaFree(log_mem);
  // NIBBLE_DF_TRACE (the dataflow solution's trace, written at teardown): one row per segment kind,
  // each with as many segments as the schedule gives it on this grid (one CTA per emulated SM, in
  // clusters of 2; an attention item per (KV head, chunk), chunks = CTAs / n_kv).
  if (const char* tp = std::getenv("NIBBLE_DF_TRACE"); tp && *tp) {
    std::ifstream in(tp);
    ASSERT_TRUE(in) << "no trace at " << tp;
    const std::string text((std::istreambuf_iterator<char>(in)), {});
    const int ctas = emu::sm_count / 2 * 2, items = d.n_kv * std::max(1, ctas / int(d.n_kv));
    const std::pair<const char*, int> rows[] = {{"qkv", ctas * d.layers},       {"attention", items * d.layers},
                                                {"o", ctas * d.layers},         {"gate|up", ctas * d.layers},
                                                {"down", ctas * d.layers},      {"head", ctas}};
    for (const auto& [kind, n] : rows) {
      const size_t at = text.find(" " + std::string(kind) + " ");
      ASSERT_NE(at, std::string::npos) << kind << "\n" << text;
      std::istringstream row(text.substr(at + std::strlen(kind) + 2));
      double wait = -1, build = -1, run = -1, consume = -1, sum = -1, send = -1, partner = -1, write = -1, publish = -1,
             pages = -1, pages_max = -1, last_warp = -1, count = -1;
      row >> wait >> build >> run >> consume >> sum >> send >> partner >> write >> publish >> pages >> pages_max >> last_warp >>
          count;
      EXPECT_EQ(count, n) << kind << "\n" << text;
      EXPECT_TRUE(wait >= 0 && build >= 0 && run > 0 && consume > 0 && sum >= 0 && send >= 0 && partner >= 0 &&
                  write > 0 && publish >= 0 && pages >= 0 && pages <= consume && pages_max >= pages)
          << kind << "\n" << text;
      // Every warp is past its pages before the barrier that ends consume (printed to 0.01 us).
      EXPECT_TRUE(last_warp > 0 && last_warp <= consume + 0.01) << kind << "\n" << text;
      // An attention item has no partner: its sum, send and partner marks are its consume's end.
      if (std::string(kind) == "attention") {
        EXPECT_TRUE(sum == 0 && send == 0 && partner == 0) << text;
      }
      // The run's six parts are consecutive marks: they add up to it (each printed to 0.01 us).
      EXPECT_NEAR(consume + sum + send + partner + write + publish, run, 0.045) << kind << "\n" << text;
    }
    EXPECT_NE(text.find("waiting for a free page"), std::string::npos) << text;
  }
}

TEST(MegakernelDecodeEmulation, TinyMatchesTheOracle) { run_against_the_oracle(decode_config("tiny"), 4); }

#ifdef NIBBLE_EMU_EXPECT_BITWISE
/** A solution that promises the same logits bit for bit run to run (the dataflow kernel: no fp32
 *  atomics; issue 21's stress test checks it on the GPU) gives them under two other interleavings of
 *  its warps (emu::schedule_seed). ffn 2304: down's K half is 9 groups, three pages per tile, so the
 *  order in which warps add a tile's pages matters (two addends onto zero commute exactly). */
TEST(MegakernelDecodeEmulation, BitwiseUnderTwoSchedules) {
  DecodeConfig cfg = decode_config("tiny");
  cfg.dims.ffn = 2304;
  cfg.checked_steps = 2;
  std::vector<float> first, second;
  const uint64_t outer = emu::schedule_seed;
  emu::schedule_seed = outer + 1;
  run_against_the_oracle(cfg, 4, &first);
  emu::schedule_seed = outer + 2;
  run_against_the_oracle(cfg, 4, &second);
  emu::schedule_seed = outer;
  ASSERT_EQ(first.size(), second.size());
  size_t differ = 0, at = first.size();
  for (size_t i = 0; i < first.size(); ++i)
    if (std::memcmp(&first[i], &second[i], sizeof(float)) != 0) {
      ++differ;
      at = std::min(at, i);
    }
  EXPECT_EQ(differ, 0u) << "of " << first.size() << " logits differ between the warp schedules of seeds " << outer + 1
                        << " and " << outer + 2 << ", the first at " << at << ": " << first[at] << " against " << second[at];
}
#endif

#ifdef NIBBLE_EMU_DATAFLOW
/** The dataflow kernel's bench modes (NIBBLE_DF_MODE, bench/bench_dataflow.cu): every matrix
 *  segment streamed and multiplied without waits, input builds or attention items (gemv), and the
 *  same with pages completed without a copy (consumer; and its parts, consumer-nomath and
 *  consumer-noflush), on tiny with hd 128 (the modes are built for
 *  it only): both run to the end (the emulation dies on a deadlock) and write no logit (the harness's
 *  NaN stays: a bench's launch computes nothing anyone reads); hd 64 is refused. */
TEST(MegakernelDecodeEmulation, BenchModesRunToTheEnd) {
  DecodeConfig cfg = decode_config("tiny");
  cfg.dims.hd = 128;
  cfg.dims.n_q = 2;
  cfg.dims.n_kv = 1;
  const auto& d = cfg.dims;
  emu::sm_count = 4;
  test::TempDir dir;
  build_decode_fixture(cfg, /*seed=*/0, dir.path(), /*threads=*/2, {});
  const SafetensorsFile file(dir / kFixtureModelFile);
  emu::unreg_all();
  emu::fiber_stack_bytes = 128 * 1024;
  DeviceModel model(cfg, file);
  void* tok_mem = nullptr;
  void* log_mem = nullptr;
  cudaMalloc(&tok_mem, size_t(d.batch) * 8);
  cudaMalloc(&log_mem, size_t(d.batch) * d.vocab * 4);
  std::vector<int64_t> tok_shape{d.batch}, tok_strides{1}, log_shape{d.batch, d.vocab}, log_strides{d.vocab, 1};
  nibble_tensor tok{tok_mem, {NIBBLE_DEVICE_CUDA, 0}, 1, {NIBBLE_DTYPE_INT, 64, 1}, tok_shape.data(), tok_strides.data(), 0};
  nibble_tensor logits{log_mem, {NIBBLE_DEVICE_CUDA, 0}, 2, {NIBBLE_DTYPE_FLOAT, 32, 1}, log_shape.data(), log_strides.data(), 0};
  std::memcpy(tok_mem, model.tokens().data(), size_t(d.batch) * 8);
  for (const char* mode : {"gemv", "consumer", "consumer-nomath", "consumer-noflush"}) {
    SCOPED_TRACE(mode);
    ASSERT_TRUE(test::set_or_unset_env("NIBBLE_DF_MODE", mode));
    void* handle = nullptr;
    nibble_error err{};
    ASSERT_EQ(nibble_decode_build_model(model.abi(), nullptr, &handle, &err), NIBBLE_OK) << err.message;
    auto* out = static_cast<float*>(log_mem);
    for (int s = 0; s < 2; ++s) {
      std::fill(out, out + size_t(d.batch) * d.vocab, std::nanf(""));
      ASSERT_EQ(nibble_decode_step(handle, &tok, cfg.prefill + s, &logits, nullptr, &err), NIBBLE_OK) << err.message;
      for (int64_t i = 0; i < int64_t(d.batch) * d.vocab; ++i) ASSERT_TRUE(std::isnan(out[i])) << "logit " << i << " written";
    }
    ASSERT_EQ(nibble_decode_teardown(handle, nullptr, &err), NIBBLE_OK) << err.message;
  }
  ASSERT_TRUE(test::set_or_unset_env("NIBBLE_DF_MODE", "gemv"));
  {  // not built for hd 64: refused at build, saying so
    DecodeConfig c64 = decode_config("tiny");
    test::TempDir d64;
    build_decode_fixture(c64, 0, d64.path(), 2, {});
    const SafetensorsFile f64(d64 / kFixtureModelFile);
    DeviceModel m64(c64, f64);
    void* handle = nullptr;
    nibble_error err{};
    EXPECT_EQ(nibble_decode_build_model(m64.abi(), nullptr, &handle, &err), NIBBLE_ERR_INVALID_ARGUMENT);
    EXPECT_NE(std::string(err.message).find("built for hd 128 only (this config has hd 64)"), std::string::npos) << err.message;
  }
  ASSERT_TRUE(test::set_or_unset_env("NIBBLE_DF_MODE", ""));
  cudaFree(tok_mem);
  cudaFree(log_mem);
}

/** NIBBLE_DF_PRODUCERS with a lane count outside 1..min(32, pages), not a number, or a kind the trace
 *  does not name: refused at build_model, naming the variable, the range and the pool (the accepted
 *  forms run in the tests above: "8", "30,gate|up=4,head=1" and the default). */
TEST(MegakernelDecodeEmulation, ProducerLanesOutOfRangeAreRefused) {
  const DecodeConfig cfg = decode_config("tiny");
  emu::sm_count = 4;
  test::TempDir dir;
  build_decode_fixture(cfg, /*seed=*/0, dir.path(), /*threads=*/2, {});
  const SafetensorsFile file(dir / kFixtureModelFile);
  emu::unreg_all();
  DeviceModel model(cfg, file);
  const char* outer = std::getenv("NIBBLE_DF_PRODUCERS");  // the CTest variant's value, put back after
  const std::string kept = outer ? outer : "";
  for (const char* v : {"0", "33", "-1", "8x", "eight", "1,head=0", "1,head=", "1,,2", "1,ffn=2", "head=33", "1,"}) {
    SCOPED_TRACE(v);
    ASSERT_TRUE(test::set_or_unset_env("NIBBLE_DF_PRODUCERS", v));
    void* handle = nullptr;
    nibble_error err{};
    EXPECT_EQ(nibble_decode_build_model(model.abi(), nullptr, &handle, &err), NIBBLE_ERR_INVALID_ARGUMENT);
    const std::string m = err.message;
    EXPECT_NE(m.find(std::string("NIBBLE_DF_PRODUCERS=") + v + ": "), std::string::npos) << m;
    EXPECT_NE(m.find("producer lanes (this pool has "), std::string::npos) << m;
  }
  ASSERT_TRUE(test::set_or_unset_env("NIBBLE_DF_PRODUCERS", kept.c_str()));
  // NIBBLE_DF_ORDER and NIBBLE_DF_SEGPF, the on/off A/B switches, take 0 or 1 (an empty value is the default).
  for (const char* name : {"NIBBLE_DF_ORDER", "NIBBLE_DF_SEGPF"})
    for (const char* v : {"2", "on", "yes", "-1", "01"}) {
      SCOPED_TRACE(std::string(name) + "=" + v);
      ASSERT_TRUE(test::set_or_unset_env(name, v));
      void* handle = nullptr;
      nibble_error err{};
      EXPECT_EQ(nibble_decode_build_model(model.abi(), nullptr, &handle, &err), NIBBLE_ERR_INVALID_ARGUMENT);
      EXPECT_NE(std::string(err.message).find(std::string(name) + "=" + v + ": 1 ("), std::string::npos) << err.message;
      ASSERT_TRUE(test::set_or_unset_env(name, ""));
    }
}
#endif

/** Shapes at the edges of what the solutions accept (a helper's review of the dataflow kernel,
 *  2026-12-05): one group per matrix, so a K half is empty; more clusters than a matrix has tiles;
 *  a vocabulary that is no multiple of 16; pos 0 and the cache's last slots; three sequences; GQA
 *  ratios 1 to 4 with n_kv not a power of two; one layer; one cluster. */
struct OddShape {
  const char* name;
  int sms;
  void (*change)(DecodeConfig&);
};
class OddShapes : public ::testing::TestWithParam<OddShape> {};

TEST_P(OddShapes, MatchTheOracle) {
  DecodeConfig cfg = decode_config("tiny");
  cfg.checked_steps = 2;
  GetParam().change(cfg);
  run_against_the_oracle(cfg, GetParam().sms);
}

INSTANTIATE_TEST_SUITE_P(
    Emulated, OddShapes,
    ::testing::Values(
        OddShape{"one_group", 8, [](DecodeConfig& c) { c.dims.d = 128, c.dims.ffn = 128, c.dims.n_q = 2, c.dims.n_kv = 1; }},
        OddShape{"empty_clusters_vocab17", 18,
                 [](DecodeConfig& c) {
                   c.dims.d = 128, c.dims.ffn = 128, c.dims.n_q = 1, c.dims.n_kv = 1, c.dims.hd = 128, c.dims.vocab = 17;
                 }},
        OddShape{"pos0_batch3", 6, [](DecodeConfig& c) { c.dims.batch = 3, c.prefill = 0; }},
        OddShape{"gqa3_vocab33", 6, [](DecodeConfig& c) { c.dims.n_q = 3, c.dims.n_kv = 3, c.dims.hd = 128, c.dims.vocab = 33; }},
        OddShape{"rep4", 4, [](DecodeConfig& c) { c.dims.n_q = 8, c.dims.n_kv = 2, c.prefill = 3; }},
        OddShape{"one_layer", 4, [](DecodeConfig& c) { c.dims.layers = 1, c.dims.n_q = 4, c.dims.n_kv = 1, c.dims.hd = 128; }},
        OddShape{"one_cluster_last_slots", 2, [](DecodeConfig& c) { c.prefill = c.dims.max_seq - 2; }}),
    [](const ::testing::TestParamInfo<OddShape>& p) { return std::string(p.param.name); });

}  // namespace
}  // namespace nibble
