// test_protocol.cpp: the parent-child protocol (Job, Result, memory-file channels) and the one
// comparison of outputs, checked against values computed by hand.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cmath>
#include <cstring>
#include <string>
#include <tuple>
#include <vector>

#include "fixtures/bf16.h"
#include "fixtures/decode/decode_config.h"
#include "fixtures/rng.h"
#include "fixtures/safetensors.h"
#include "harness/hash.h"
#include "harness/ledger.h"
#include "harness/outputs.h"
#include "harness/process.h"
#include "harness/protocol.h"
#include "harness/task.h"

using namespace nibble;

TEST(Protocol, JobRoundTripsThroughJson) {
  Job j;
  j.task = "gemm-w4a16-nvfp4";
  j.config = "tiny";
  j.solution = "/x/lib.so";
  j.checked_calls = 2;
  j.check_seed = 0xfedcba9876543210ull;  // above 2^63: must survive as a uint64
  TimingJob t;
  t.seed = 7;
  t.max_rounds = 5;
  t.graph_records = "graphs";
  j.timing = t;
  j.replay = {{"calls", {{{"n", 3}, {"call", 1004}, {"seed", 99}}}}};
  const Job back = nlohmann::json::parse(nlohmann::json(j).dump()).get<Job>();
  EXPECT_EQ(back.task, j.task);
  EXPECT_EQ(back.check_seed, j.check_seed);
  ASSERT_TRUE(back.timing.has_value());
  EXPECT_EQ(back.timing->seed, std::optional<uint64_t>(7));
  EXPECT_EQ(back.timing->max_rounds, 5);
  EXPECT_EQ(back.timing->graph_records, "graphs");
  EXPECT_EQ(TimingJob{}.graph_records, std::string(kDefaultGraphRecords)) << "the grader's default unless asked";
  EXPECT_EQ(std::string(kDefaultGraphRecords), "graphs");
  EXPECT_EQ(back.replay, j.replay);
  EXPECT_EQ(back.protocol, kProtocolVersion);
  // No timing, no timing seed: absent stays absent.
  Job plain;
  const Job p = nlohmann::json::parse(nlohmann::json(plain).dump()).get<Job>();
  EXPECT_FALSE(p.timing.has_value());
}

TEST(Protocol, MissingFieldsTakeTheirDefaults) {
  const Result r = nlohmann::json::parse(R"({"phase": "checked", "checked_calls_done": 8})").get<Result>();
  EXPECT_EQ(r.phase, "checked");
  EXPECT_EQ(r.checked_calls_done, 8);
  EXPECT_FALSE(r.error.has_value());
  EXPECT_FALSE(r.timing.has_value());
}

TEST(Protocol, ResultWithErrorAndTiming) {
  Result r;
  ChildError e;
  e.kind = "solution";
  e.call = "prepare";
  e.status = "NOT_SUPPORTED";
  r.error = e;
  TimingResult t;
  t.gpu_span_us = {1.5, 2.5};
  t.kept = {"timed0-3"};
  t.copies_audited = 12;
  t.unrecorded_copies = 1;
  t.first_unrecorded_copy = "cuMemcpyAsync";
  r.timing = t;
  r.replay = nlohmann::json::array({{{"prefix", "timed0-"}, {"spec", {{"tokens", {1, 2, 3}}}}}});
  const Result back = parse_child_result(nlohmann::json(r).dump());  // what the parent reads
  ASSERT_TRUE(back.error && back.timing);
  EXPECT_EQ(back.replay, r.replay);
  EXPECT_EQ(back.error->status, "NOT_SUPPORTED");
  EXPECT_EQ(back.timing->gpu_span_us, t.gpu_span_us);
  EXPECT_EQ(back.timing->kept, t.kept);
  EXPECT_EQ(back.timing->copies_audited, 12);
  EXPECT_EQ(back.timing->unrecorded_copies, 1);
  EXPECT_EQ(back.timing->first_unrecorded_copy, "cuMemcpyAsync");
}

// The result channel is the child's, and the candidate shares the child's process: it can write the
// channel itself before the harness seals it. A document nested 200,000 deep (400 KB, under the
// channel's cap) overflowed the parent's stack in nlohmann's recursive copy (SIGSEGV, no report);
// the parent's parse refuses it as not a Result instead.
TEST(Protocol, ADeeplyNestedResultIsRefusedNotACrash) {
  for (const char* field : {"facts", "replay", "probe"}) {
    SCOPED_TRACE(field);
    const int depth = 200000;
    const std::string text = std::string(R"({"protocol":6,"phase":"failed",")") + field + "\":" + std::string(depth, '[') +
                             std::string(depth, ']') + "}";
    EXPECT_THROW(parse_child_result(text), std::exception);
  }
  // 20 levels (deeper than anything the harness writes) still parse.
  const Result ok = parse_child_result(R"({"phase":"done","facts":)" + std::string(20, '[') + std::string(20, ']') + "}");
  EXPECT_EQ(ok.phase, "done");
}

// The replay spec (Result::replay) is the candidate's child's to write, so the candidate can write it:
// the parent refuses one the reference cannot replay safely, or that replays other inputs than the
// ledger revealed. By hand on the tiny decode config and a GEMM task.
TEST(Protocol, ReplaySpecsOutsideTheRoundAreRefused) {
  const Task& decode = find_task("megakernel-int4-weight-decode");
  const DecodeConfig cfg = decode_config("tiny");
  const int64_t b = cfg.dims.batch, calls = decode.calls_per_round();
  std::vector<uint64_t> seeds;
  for (int64_t n = 0; n < calls; ++n) seeds.push_back(0x5eed0000ull + uint64_t(n) * 7919);
  // A step's ids from its revealed seed, as the task's docs state it: id b = draw(seed, b) mod vocab.
  const auto revealed = [&](int64_t n_steps) {
    std::vector<int64_t> t;
    for (int64_t st = 0; st < n_steps; ++st)
      for (int64_t i = 0; i < b; ++i) t.push_back(int64_t(rng::draw(seeds[size_t(st)], uint64_t(i)) % uint64_t(cfg.dims.vocab)));
    return t;
  };
  const auto steps = [&](int64_t n, int64_t token) { return std::vector<int64_t>(size_t(n * b), token); };
  const auto spec = [](const std::vector<int64_t>& tokens, const std::vector<int64_t>& kept) {
    return nlohmann::json{{"tokens", tokens}, {"kept", kept}};
  };
  // What the harness's own replay_spec writes: the round's tokens up to the last pick, the picks.
  EXPECT_EQ(decode.replay_spec_error("tiny", spec(revealed(3), {0, 2}), int(calls), {0, 2}, seeds), "");
  EXPECT_EQ(decode.replay_spec_error("tiny", spec(revealed(calls), {calls - 1}), int(calls), {int(calls) - 1}, seeds), "");
  std::vector<int64_t> edited = revealed(3);
  edited[size_t(2 * b)] = (edited[size_t(2 * b)] + 1) % cfg.dims.vocab;  // step 2's first id, one off
  for (const auto& [bad, picks, says] : std::vector<std::tuple<nlohmann::json, std::vector<int>, std::string>>{
           {spec(steps(calls + 1, 0), {0}), {0}, "steps, more than"},
           {spec(steps(2, cfg.dims.vocab), {0}), {0}, "outside the vocabulary"},
           {spec(steps(2, -1), {1}), {1}, "outside the vocabulary"},
           {spec(steps(2, 0), {2}), {2}, "not among its 2 steps"},
           {spec(steps(2, 0), {1, 1}), {1}, "repeated"},
           {spec(steps(2, 0), {-1}), {1}, "not among"},
           {spec(steps(2, 0), {1}), {0}, "not the 1 the grader picked"},      // another call than the pick
           {spec(steps(3, 0), {1}), {1}, "not the 1 the grader picked"},      // steps past the last pick
           {spec(steps(2, 0), {1}), {0, 1}, "not the 2 the grader picked"},   // a pick left out
           {spec(edited, {2}), {2}, "step 2's token ids are not the ones the grader revealed"},
           {spec(steps(1, 0), {0}), {0}, "step 0's token ids are not the ones the grader revealed"},
           {nlohmann::json{{"tokens", "x"}, {"kept", {0}}}, {0}, "not a decode replay spec"},
           {nlohmann::json::array(), {0}, "not a decode replay spec"}}) {
    const std::string why = decode.replay_spec_error("tiny", bad, int(calls), picks, seeds);
    EXPECT_NE(why.find(says), std::string::npos) << bad.dump().substr(0, 80) << ": " << why;
  }
  const Task& gemm = find_task("gemm-w4a16-nvfp4");
  const nlohmann::json call = {{"n", 3}, {"seed", seeds[3]}};
  EXPECT_EQ(gemm.replay_spec_error("tiny", {{"calls", {call}}}, 32, {3}, seeds), "");
  EXPECT_NE(gemm.replay_spec_error("tiny", {{"calls", {call}}}, 32, {4}, seeds).find("not the 1 the grader picked"), std::string::npos);
  EXPECT_NE(gemm.replay_spec_error("tiny", {{"calls", {call, call}}}, 32, {3}, seeds).find("not the 1 the grader picked"),
            std::string::npos);
  EXPECT_NE(gemm.replay_spec_error("tiny", {{"calls", {{{"n", 3}, {"seed", seeds[3] + 1}}}}}, 32, {3}, seeds)
                .find("call 3's seed is not the one the grader revealed"),
            std::string::npos);
  EXPECT_NE(gemm.replay_spec_error("tiny", {{"calls", {{{"n", 32}, {"seed", 1}}}}}, 32, {31}, seeds).find("not among"),
            std::string::npos);
  EXPECT_NE(gemm.replay_spec_error("tiny", {{"calls", {{{"n", 1}}}}}, 32, {1}, seeds).find("not a GEMM replay spec"), std::string::npos);
}

// The whole check the parent makes before the reference runs, against a real ledger played by its
// client here: 2 rounds of 4 calls, 1 kept each. The spec the harness itself would write passes; a
// round missing, one round too many, another call than the pick, another seed than the one
// revealed, a wrong prefix are refused.
TEST(Protocol, TheReplaySpecMustBeTheLedgersPicks) {
  const Task& gemm = find_task("gemm-w4a16-nvfp4");
  CallLedger l(4, 1, std::nullopt, "");
  LedgerClient c(l.child_read_fd(), l.child_write_fd());
  std::vector<int> kept;
  std::vector<std::vector<uint64_t>> seeds(2);
  for (int r = 0; r < 2; ++r)
    for (int n = 0; n < 4; ++n) {
      seeds[size_t(r)].push_back(c.open(r, n));
      if (c.done(r, n, Digest{})) kept.push_back(n);
    }
  l.finish();
  ASSERT_EQ(l.violation(), "");
  ASSERT_EQ(kept.size(), 2u);
  const auto round = [&](int r, int n, uint64_t add = 0) {
    return nlohmann::json{{"prefix", timed_round_prefix(r)},
                          {"spec", {{"calls", {{{"n", n}, {"seed", seeds[size_t(r % 2)][size_t(n)] + add}}}}}}};
  };
  EXPECT_EQ(replay_error(gemm, "tiny", {round(0, kept[0]), round(1, kept[1])}, l), "");
  EXPECT_NE(replay_error(gemm, "tiny", {round(0, kept[0])}, l).find("not one per timed round (the ledger saw 2)"), std::string::npos);
  EXPECT_NE(replay_error(gemm, "tiny", {round(0, kept[0]), round(1, kept[1]), round(2, 0)}, l).find("not one per timed round"),
            std::string::npos);
  EXPECT_NE(replay_error(gemm, "tiny", {round(0, kept[0]), round(1, (kept[1] + 1) % 4)}, l).find("round 1 is refused"),
            std::string::npos);
  EXPECT_NE(replay_error(gemm, "tiny", {round(0, kept[0]), round(1, kept[1], 1)}, l).find("not the one the grader revealed"),
            std::string::npos);
  EXPECT_NE(replay_error(gemm, "tiny", {round(1, kept[0]), round(1, kept[1])}, l).find("no round 0 of the harness's form"),
            std::string::npos);
  EXPECT_NE(replay_error(gemm, "tiny", nlohmann::json::object(), l).find("not one per timed round"), std::string::npos);
}

// BLAKE3 on the host against the reference implementation (the Python package blake3 1.0.11, the
// official test vectors' input: byte i is i % 251), across the chunk and tree boundaries.
TEST(Protocol, Blake3KnownAnswers) {
  for (const auto& [n, hex] : std::vector<std::pair<size_t, std::string>>{
           {0, "af1349b9f5f9a1a6a0404dea36dcc9499bcb25c9adc112b7cc9a93cae41f3262"},
           {1, "2d3adedff11b61f14c886e35afa036736dcd87a74d27b5c1510225d0f592e213"},
           {64, "4eed7141ea4a5cd4b788606bd23f46e212af9cacebacdc7d1f4c6dc7f2511b98"},
           {1023, "10108970eeda3eb932baac1428c7a2163b0e924c9a9e25b35bba72b28f70bd11"},
           {1024, "42214739f095a406f3fc83deb889744ac00df831c10daa55189b5d121c855af7"},
           {1025, "d00278ae47eb27b34faecf67b4fe263f82d5412916c1ffd97c8cb7fb814b8444"},
           {2048, "e776b6028c7cd22a4d0ba182a8bf62205d2ef576467e838ed6f2529b85fba24a"},
           {3072, "b98cb0ff3623be03326b373de6b9095218513e64f1ee2edd2525c7ad1e5cffd2"},
           {3073, "7124b49501012f81cc7f11ca069ec9226cecb8a2c850cfe644e327d22d3e1cd3"},
           {5127, "80155bfcdc40aa0d13634d590494a0b992bd79865e55ad6ef25b005746808607"},
           {31744, "62b6960e1a44bcc1eb1a611a8d6235b6b4b78f32e7abc4fb4c6cdcce94895c47"},
           {102400, "bc3e3d41a1146b069abffad3c0d44860cf664390afce4d9661f7902e7943e085"}}) {
    std::vector<uint8_t> in(n);
    for (size_t i = 0; i < n; ++i) in[i] = uint8_t(i % 251);
    EXPECT_EQ(digest_hex(host_blake3(in.data(), n)), hex) << n << " bytes";
  }
}

// The input checksum (device_checksum), by hand: one zero word is splitmix64's first output from state 0
// (0xe220a8397b1dcdaf); a ninth byte is folded FNV-style; words are little-endian at any alignment.
TEST(Protocol, HostChecksumByHand) {
  const uint8_t zeros[9] = {0, 0, 0, 0, 0, 0, 0, 0, 5};
  EXPECT_EQ(host_checksum_bytes(zeros, 8), 0xe220a8397b1dcdafull);
  EXPECT_EQ(host_checksum_bytes(zeros, 9), 0xe220a8397b1dcdafull * 1099511628211ull + 6);
  EXPECT_EQ(host_checksum_bytes(zeros, 0), 0u);
  uint8_t buf[17] = {};
  const uint64_t v = 0x0123456789abcdefull;
  std::memcpy(buf + 1, &v, 8);
  std::memcpy(buf + 9, &v, 8);
  EXPECT_EQ(host_checksum_bytes(buf + 1, 16), checksum_term(v, 0) + checksum_term(v, 1));
  EXPECT_NE(checksum_term(v, 0), checksum_term(v, 1)) << "a word's place counts";
}

TEST(Protocol, ChannelsAreRewrittenWhole) {
  const int fd = make_channel("test");
  write_channel(fd, std::string(100000, 'a'));
  EXPECT_EQ(read_channel(fd).size(), 100000u);
  write_channel(fd, "short");  // a later phase's shorter result leaves nothing of the earlier one
  EXPECT_EQ(read_channel(fd), "short");
  close(fd);
}

TEST(Protocol, AChildRefusesAJobOfAnotherVersion) {
  const char* bin = std::getenv("NIBBLE_BINARY_DIR");
  if (!bin) GTEST_SKIP() << "NIBBLE_BINARY_DIR is not set (run through ctest)";
  const int job = make_channel("job");
  Job j;
  j.protocol = kProtocolVersion + 1;
  write_channel(job, nlohmann::json(j).dump());
  TempDir dir("nibble-test-protocol");
  const ChildExit e = run_child({std::string(bin) + "/bin/nibble", "__child", std::to_string(job)}, dir.path() + "/log.txt", 30,
                                {}, {job});
  EXPECT_EQ(e.kind, ChildExit::Exited);
  EXPECT_EQ(e.code, 2);
  EXPECT_NE(file_tail(dir.path() + "/log.txt").find("protocol"), std::string::npos);
  close(job);
}

namespace {

/** A safetensors file of F32 tensors in a temporary folder. */
std::string write_f32(const TempDir& d, const std::string& file, const std::vector<std::pair<std::string, std::vector<float>>>& ts) {
  std::vector<TensorView> v;
  for (const auto& [name, data] : ts) v.push_back({name, DType::F32, {int64_t(data.size())}, data.data(), data.size() * 4});
  const std::string path = d.path() + "/" + file;
  write_safetensors(path, v);
  return path;
}

}  // namespace

TEST(Outputs, ErrorsByHand) {
  TempDir d("nibble-test-outputs");
  // ref (3, 4): ||r|| = 5. cand (3, 4.5) on call0.a: ||c - r|| = 0.5 -> 0.1; element error 0.5 / 4.
  // call1.a identical -> 0. timed0.a: not a "call" tensor, skipped by the checked comparison.
  const std::string r = write_f32(d, "r.safetensors", {{"call0.a", {3, 4}}, {"call1.a", {1, 0}}, {"timed0.a", {1, 1}}});
  const std::string c = write_f32(d, "c.safetensors", {{"call0.a", {3, 4.5f}}, {"call1.a", {1, 0}}, {"timed0.a", {9, 9}}});
  SafetensorsFile rf(r), cf(c);
  ErrorTally t;
  const auto calls = compare_outputs(cf, rf, "call", t);
  ASSERT_EQ(calls.size(), 2u);
  EXPECT_NEAR(calls[0]["outputs"]["a"]["rel_err"].get<double>(), 0.1, 1e-12);
  EXPECT_NEAR(calls[0]["rel_err"].get<double>(), 0.1, 1e-12);  // the call's worst output
  EXPECT_NEAR(calls[0]["outputs"]["a"]["elem_err"].get<double>(), 0.125, 1e-12);
  EXPECT_EQ(calls[1]["outputs"]["a"]["rel_err"].get<double>(), 0.0);
  EXPECT_NEAR(t.worst, 0.1, 1e-12);
  EXPECT_EQ(t.compared, 2);
  EXPECT_EQ(t.where(), "a 0.1");
  ErrorTally timed;
  compare_outputs(cf, rf, "timed", timed);
  EXPECT_NEAR(timed.worst, std::sqrt(128.0) / std::sqrt(2.0), 1e-12);  // (8, 8) against (1, 1)
}

TEST(Outputs, NaNSticksAndMissingTensorsAreNamed) {
  TempDir d("nibble-test-outputs");
  const std::string r = write_f32(d, "r.safetensors", {{"call0.x", {1, 2}}, {"call0.y", {1}}});
  const std::string c = write_f32(d, "c.safetensors", {{"call0.x", {NAN, 2}}});
  SafetensorsFile rf(r), cf(c);
  ErrorTally t;
  try {
    compare_outputs(cf, rf, "call", t);
    FAIL() << "a missing output must throw";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("call0.y"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(std::isnan(t.worst));  // call0.x was compared before call0.y was missed
  EXPECT_EQ(t.nonfinite, 1);
}

TEST(Outputs, Bf16TensorsCompareAsTheirValues) {
  TempDir d("nibble-test-outputs");
  const std::vector<uint16_t> rv{f32_to_bf16(3), f32_to_bf16(4)}, cv{f32_to_bf16(3), f32_to_bf16(4.5f)};
  write_safetensors(d.path() + "/r.safetensors", {{"call0.k", DType::BF16, {2}, rv.data(), 4}});
  write_safetensors(d.path() + "/c.safetensors", {{"call0.k", DType::BF16, {2}, cv.data(), 4}});
  SafetensorsFile rf(d.path() + "/r.safetensors"), cf(d.path() + "/c.safetensors");
  const TensorErrors e = tensor_errors(cf, rf, "call0.k");
  EXPECT_NEAR(e.rel_err, 0.1, 1e-12);  // 3, 4, 4.5 are exact in bf16
}

TEST(Registry, EveryTaskIsFoundByItsNameAndUnknownNamesListThem) {
  for (const Task* t : all_tasks()) {
    EXPECT_EQ(&find_task(t->name()), t);
    EXPECT_FALSE(t->official_configs().empty()) << t->name();
    EXPECT_FALSE(t->outputs().empty()) << t->name();
    EXPECT_GT(t->gate(t->official_configs().front()), 0) << t->name();
  }
  try {
    find_task("no-such-task");
    FAIL();
  } catch (const std::invalid_argument& e) {
    for (const Task* t : all_tasks()) EXPECT_NE(std::string(e.what()).find(t->name()), std::string::npos);
  }
}

// "done" commits a digest of the call's outputs; what the child reads back for a kept call later must
// have it (a candidate computing its outputs after the window closed cannot know it in time). A
// real ledger played by its client: 1 round of 4 calls, 1 kept; the kept C read back as fp32.
TEST(Protocol, KeptOutputsMustHaveTheDigestTheirDoneCommitted) {
  const Task& gemm = find_task("gemm-w4a16-nvfp4");
  const std::vector<float> c = {1.5f, -2.0f, 0.25f, 3.0f, 7.0f};  // bf16-exact values; 20 bytes: a tail too
  std::vector<uint16_t> c_bf16;
  for (float x : c) c_bf16.push_back(f32_to_bf16(x));
  for (const bool bf16 : {false, true}) {
    const Digest digest = bf16 ? host_blake3(c_bf16.data(), c_bf16.size() * 2) : host_blake3(c.data(), c.size() * 4);
    CallLedger l(4, 1, 5, "");
    LedgerClient cl(l.child_read_fd(), l.child_write_fd());
    int kept = -1;
    for (int n = 0; n < 4; ++n) {
      (void)cl.open(0, n);
      if (cl.done(0, n, digest)) kept = n;
    }
    l.finish();
    ASSERT_GE(kept, 0);
    const nlohmann::json facts = {{"c_dtype", bf16 ? "bf16" : "fp32"}};
    TempDir d("nibble-test-digest");
    SafetensorsFile same(write_f32(d, "same.safetensors", {{timed_call_name(0, kept) + ".C", c}}));
    EXPECT_EQ(kept_digest_error(gemm, same, l, facts), "") << bf16;
    std::vector<float> later = c;
    later[4] = 7.5f;  // the last element changed after "done"
    SafetensorsFile changed(write_f32(d, "changed.safetensors", {{timed_call_name(0, kept) + ".C", later}}));
    EXPECT_NE(kept_digest_error(gemm, changed, l, facts).find("not the ones its \"done\" committed"), std::string::npos) << bf16;
    SafetensorsFile other(write_f32(d, "other.safetensors", {{timed_call_name(0, (kept + 1) % 4) + ".C", c}}));
    EXPECT_NE(kept_digest_error(gemm, other, l, facts).find("cannot be checked"), std::string::npos) << bf16;
    // Read as the other dtype: the bytes the device held are not these.
    const nlohmann::json wrong = {{"c_dtype", bf16 ? "fp32" : "bf16"}};
    EXPECT_NE(kept_digest_error(gemm, same, l, wrong), "") << bf16;
    if (bf16) {  // fp32 values with low bits set, read as a bf16 C: not what the device held
      std::vector<float> fine = c;
      fine[0] = 1.5f + 1.0f / 4096;
      SafetensorsFile f(write_f32(d, "fine.safetensors", {{timed_call_name(0, kept) + ".C", fine}}));
      EXPECT_NE(kept_digest_error(gemm, f, l, facts).find("is no bf16 value"), std::string::npos);
    }
  }
}

TEST(Protocol, TheLedgerCreditsTheCalibrationWindowsOfTheSolutionsOwnWindowWork) {
  const Task& gemm = find_task("gemm-w4a16-nvfp4");
  const std::string config = "m128-n4096-k4096";
  // By hand: staging reads A0 and writes A (2 x 128 x 4096 x 2 bytes) and NaN-fills C; the digest reads C.
  const nlohmann::json fp32 = {{"c_dtype", "fp32"}}, bf16 = {{"c_dtype", "bf16"}};
  const WindowWork w32 = gemm.window_work(config, fp32), w16 = gemm.window_work(config, bf16);
  EXPECT_EQ(w32.digested_bytes, 128u * 4096u * 4u);
  EXPECT_EQ(w32.staged_bytes, 4u * 128u * 4096u + 128u * 4096u * 4u);
  EXPECT_EQ(w16.digested_bytes, 128u * 4096u * 2u);
  EXPECT_EQ(w16.staged_bytes, 4u * 128u * 4096u + 128u * 4096u * 2u);
  EXPECT_EQ(w32.masked_bytes, 2u * 128u * 4096u);  // A, written by launch_sign_mask from A0 (read as much)
  EXPECT_EQ(w16.masked_bytes, w32.masked_bytes);
  EXPECT_EQ(gemm.window_work(config, nlohmann::json()), w32);  // no facts: fp32, as GemmSession's default C
  ASSERT_EQ(gemm.window_work_forms(config).size(), 2u);  // windows alternate fp32, bf16
  // Windows 0 and 1 warm up (each form's first); window 5's span is none (0), window 6's longer than its window.
  const std::vector<double> window = {900, 800, 110, 60, 112, 62, 114, 64, 116, 66},
                            span = {10, 10, 10, 10, 10, 0, 120, 10, 10, 10};
  EXPECT_EQ(calibration_overheads_us(gemm, config, fp32, window, span), (std::vector<double>{100, 102, 106}));
  EXPECT_EQ(calibration_overheads_us(gemm, config, bf16, window, span), (std::vector<double>{50, 54, 56}));
  // The child's list must pair with the ledger's windows one to one.
  EXPECT_TRUE(calibration_overheads_us(gemm, config, fp32, window, std::vector<double>(span.begin(), span.end() - 1)).empty());
  const Task& decode = find_task("megakernel-int4-weight-decode");  // a task of one form
  EXPECT_EQ(calibration_overheads_us(decode, "tiny", nlohmann::json::object(), {90, 30, 31, 32}, {1, 1, 1, 1}),
            (std::vector<double>{29, 30, 31}));
}
