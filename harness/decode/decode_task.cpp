// decode_task.cpp: the whole-model W4A16 decode step (megakernel-int4-weight-decode) as a Task.
//
// A checked call is one decode step at pos = prefill + i with the fixture's tokens; its outputs are
// the (batch, vocab) fp32 logits and the K and V it appended at slot pos (bf16, every layer). A
// timed call is a step with fresh token ids at pos = prefill + n; the reference re-checks the kept
// ones by replaying the round's tokens from prefill (a step reads the cache up to pos, so the
// replay must run every step up to the last kept one).
#include <algorithm>
#include <cmath>
#include <memory>
#include <thread>

#include "fixtures/decode/decode_fixture.h"
#include "fixtures/fixture.h"
#include "fixtures/rng.h"
#include "fixtures/decode/decode_config.h"
#include "harness/cuda_check.h"
#include "harness/decode/decode_session.h"
#include "harness/decode/device_model.h"
#include "harness/gpu_checks.h"
#include "harness/hash.h"
#include "harness/stats.h"
#include "harness/task.h"
#include "reference/decode/oracle_fp64.h"
#include "reference/decode/variants.h"

namespace nibble {

namespace {

/** The decode task's per-element guard: max |out - ref| / max |ref| of every output (logits, K and V
 *  appended) must stay at or below it, so that a sliver of the output cannot be anything while the
 *  relative error stays under the gate (the logits_sliver variant: the last 0.8% of the vocabulary
 *  left 0). Chosen with `nibble calibrate --path cpu` on the tiny config, seeds 0 and 1 (2026-12-02,
 *  reports/cpu/calibration-decode-tiny.json): the precision variants reach 0.0078, logits_sliver
 *  0.916; 0.2 keeps both on the right side by 2x and more. The full config's GPU calibration is
 *  still to be run against it. */
constexpr double kDecodeElementGuard = 0.2;

using json = nlohmann::json;

/** GPU checksums of everything a candidate may read but not write: every weight and norm, and the
 *  KV prefix (slots [0, prefill) of every cache). */
class InputGuard {
 public:
  InputGuard(const DeviceModel& m, cudaStream_t s) : stream_(s) {
    const auto& c = m.config();
    const size_t slot = size_t(c.dims.hd) * 2;
    for (const TensorSpec& t : c.tensors()) {
      if (t.name == "tokens") continue;
      Region r{t.name, m.device_ptr(t.name), 1, 0, size_t(t.nbytes())};
      if (t.name.rfind("kv.", 0) == 0) {
        r.name += " (prefix slots 0.." + std::to_string(c.prefill - 1) + ")";
        r.blocks = size_t(c.dims.batch) * c.dims.n_kv;
        r.stride = size_t(c.dims.max_seq) * slot;
        r.bytes = size_t(c.prefill) * slot;
      }
      r.stride = r.stride ? r.stride : r.bytes;
      r.sum = sum(r);
      regions_.push_back(r);
    }
  }
  /** "" when every region is unchanged, else the first changed tensor's name. */
  std::string first_changed() const {
    for (const auto& r : regions_)
      if (sum(r) != r.sum) return r.name;
    return "";
  }

 private:
  struct Region {
    std::string name;
    void* ptr;
    size_t blocks, stride, bytes;
    uint64_t sum = 0;
  };
  uint64_t sum(const Region& r) const {
    // A whole tensor of any size; the KV prefix's blocks are whole slots (hd bf16 values: 8-byte
    // multiples, which device_checksum refuses otherwise).
    return r.blocks == 1 ? device_checksum_bytes(r.ptr, r.bytes, stream_)
                         : device_checksum(r.ptr, r.blocks, r.stride, r.bytes, stream_);
  }
  cudaStream_t stream_;
  std::vector<Region> regions_;
};

/** Name of the first KV cache holding a non-zero word in slots (pos, max_seq): nothing may be
 *  written there (the fixture leaves them zero and no call before this one had reason to). */
std::string first_written_above(const DeviceModel& m, int32_t pos, cudaStream_t s) {
  const auto& d = m.config().dims;
  if (pos + 1 >= d.max_seq) return "";
  const size_t slot = size_t(d.hd) * 2;
  for (int l = 0; l < d.layers; ++l)
    for (const char* kv : {".k", ".v"}) {
      const std::string name = "kv." + std::to_string(l) + kv;
      const auto* base = static_cast<const uint8_t*>(m.device_ptr(name));
      if (device_count_nonzero(base + size_t(pos + 1) * slot, size_t(d.batch) * d.n_kv, size_t(d.max_seq) * slot,
                               size_t(d.max_seq - pos - 1) * slot, s) != 0)
        return name;
    }
  return "";
}

/** Timed decode steps per round (DecodeTask::calls_per_round). */
constexpr int kDecodeCallsPerRound = 32;

/** A timed step's token ids (one per sequence of the batch) from the seed the call ledger revealed
 *  for it: id b is draw(seed, b) mod vocab (fixtures/rng.h; the bias, vocab / 2^64, is nil). */
std::vector<int64_t> timed_tokens(uint64_t seed, int64_t batch, int64_t vocab) {
  std::vector<int64_t> t(static_cast<size_t>(batch));
  for (int64_t b = 0; b < batch; ++b) t[size_t(b)] = int64_t(rng::draw(seed, uint64_t(b)) % uint64_t(vocab));
  return t;
}

/** DecodeTask::replay_spec_error for a config's dims: {"tokens": batch x (steps) ids in [0, vocab),
 *  steps <= calls and prefill + steps <= max_seq, "kept": distinct steps below steps}; with `picks`
 *  and `seeds` (the reference's own check has neither), kept == picks, steps == the last pick + 1
 *  and step s's ids are timed_tokens(seeds[s]). */
std::string decode_replay_spec_error(const DecodeConfig& cfg, const nlohmann::json& spec, int calls,
                                     const std::vector<int>* picks = nullptr, const std::vector<uint64_t>* seeds = nullptr) {
  try {
    const auto tokens = spec.at("tokens").get<std::vector<int64_t>>();
    const auto kept = spec.at("kept").get<std::vector<int64_t>>();
    const int64_t b = cfg.dims.batch, steps = int64_t(tokens.size()) / b;
    if (int64_t(tokens.size()) % b != 0) return "its tokens are not whole steps of batch " + std::to_string(b);
    if (steps > calls || cfg.prefill + steps > cfg.dims.max_seq)
      return std::to_string(steps) + " steps, more than the round's " + std::to_string(calls) + " calls or the KV cache's " +
             std::to_string(cfg.dims.max_seq - cfg.prefill) + " free slots";
    for (int64_t t : tokens)
      if (t < 0 || t >= cfg.dims.vocab) return "token " + std::to_string(t) + " is outside the vocabulary";
    std::vector<int64_t> seen;
    for (int64_t k : kept) {
      if (k < 0 || k >= steps || std::find(seen.begin(), seen.end(), k) != seen.end())
        return "kept step " + std::to_string(k) + " is repeated or not among its " + std::to_string(steps) + " steps";
      seen.push_back(k);
    }
    if (picks && (std::vector<int64_t>(picks->begin(), picks->end()) != kept || steps != (picks->empty() ? 0 : picks->back() + 1)))
      return "it replays " + std::to_string(kept.size()) + " steps of " + std::to_string(steps) + ", not the " +
             std::to_string(picks->size()) + " the grader picked";
    for (int64_t st = 0; seeds && st < steps; ++st)
      if (size_t(st) >= seeds->size() ||
          !std::equal(tokens.begin() + st * b, tokens.begin() + (st + 1) * b, timed_tokens((*seeds)[size_t(st)], b, cfg.dims.vocab).begin()))
        return "step " + std::to_string(st) + "'s token ids are not the ones the grader revealed for it";
    return "";
  } catch (const nlohmann::json::exception& e) {
    return std::string("it is not a decode replay spec: ") + e.what();
  }
}

class DecodeRun final : public Session {
 public:
  DecodeRun(const Job& job, const SolutionLibrary& lib, const SafetensorsFile& fixture, cudaStream_t stream,
            cudaStream_t harness_stream)
      : cfg_(decode_config(job.config)),
        lib_(lib),
        model_(cfg_, fixture),
        stream_(stream),
        harness_stream_(harness_stream),
        police_(job.police),
        guard_(model_, harness_stream) {}

  void build() override {
    session_ = std::make_unique<DecodeSession>(lib_, model_, stream_, harness_stream_);
    NIBBLE_CUDA_CALL(cudaDeviceSynchronize());
  }

  std::string checked_call(int i, OutputFile& out) override {
    const auto& d = cfg_.dims;
    const int32_t pos = cfg_.prefill + i;
    const std::vector<int64_t> tok(model_.tokens().begin() + int64_t(i) * d.batch,
                                   model_.tokens().begin() + int64_t(i + 1) * d.batch);
    const StepOutputs so = session_->run_step(tok, pos);
    max_pos_ = std::max(max_pos_, pos);
    if (!session_->tokens_intact()) return "the candidate modified the token_ids buffer at pos " + std::to_string(pos);
    // Variants of our own reference are measured, not policed: kv_slot_plus1 must be allowed to
    // write slot pos + 1 so that its error can be measured.
    if (police_) {
      const std::string above = first_written_above(model_, pos, harness_stream_);
      if (!above.empty())
        return "the candidate wrote into '" + above + "' beyond slot pos = " + std::to_string(pos) +
               " (only slot pos may be appended)";
    }
    const std::string p = "call" + std::to_string(i) + ".";
    out.add(p + "logits", DType::F32, {d.batch, d.vocab}, so.logits.data(), so.logits.size() * 4);
    out.add(p + "k_appended", DType::BF16, {d.layers, d.batch, d.n_kv, d.hd}, so.k_appended.data(), so.k_appended.size() * 2);
    out.add(p + "v_appended", DType::BF16, {d.layers, d.batch, d.n_kv, d.hd}, so.v_appended.data(), so.v_appended.size() * 2);
    return "";
  }

  void stage_timed(int n, uint64_t seed) override {
    if (n == 0) round_tokens_.clear();
    const std::vector<int64_t> tok = timed_tokens(seed, cfg_.dims.batch, cfg_.dims.vocab);
    round_tokens_.insert(round_tokens_.end(), tok.begin(), tok.end());
    session_->prepare_step(tok);
    pos_ = cfg_.prefill + n;
    positions_.push_back(pos_);
  }

  void call() override { session_->call_step(pos_); }

  Digest timed_digest() override { return session_->logits_digest(); }

  bool timed_outputs(const std::string& call_name, bool keep, OutputFile& out) override {
    const auto logits = session_->read_logits();
    if (keep)
      out.add(call_name + ".logits", DType::F32, {cfg_.dims.batch, cfg_.dims.vocab}, logits.data(),
              logits.size() * 4);
    return all_finite(logits.data(), logits.size());
  }

  std::string after_timed_call(bool audit) override {
    if (!session_->tokens_intact())
      return "the candidate modified the token_ids buffer at pos " + std::to_string(pos_) + " (a timed step)";
    max_pos_ = std::max(max_pos_, pos_);
    return audit ? written_above("a timed step at pos = " + std::to_string(pos_)) : "";
  }

  std::string after_timing() override { return written_above("the timed steps"); }

  json replay_spec(const std::vector<int>& kept) const override {
    const int last = kept.empty() ? -1 : *std::max_element(kept.begin(), kept.end());
    const std::vector<int64_t> tokens(round_tokens_.begin(), round_tokens_.begin() + int64_t(last + 1) * cfg_.dims.batch);
    return {{"tokens", tokens}, {"kept", kept}};
  }

  void replay(const json& spec, const std::string& prefix, OutputFile& out) override {
    if (const std::string why = decode_replay_spec_error(cfg_, spec, kDecodeCallsPerRound); !why.empty())
      throw std::invalid_argument("the replay spec " + prefix + ": " + why);
    const auto tokens = spec.at("tokens").get<std::vector<int64_t>>();
    const auto kept = spec.at("kept").get<std::vector<int>>();
    const int64_t b = cfg_.dims.batch;
    for (int64_t s = 0; s < int64_t(tokens.size()) / b; ++s) {
      session_->launch_step({tokens.begin() + s * b, tokens.begin() + (s + 1) * b}, cfg_.prefill + int32_t(s));
      NIBBLE_CUDA_CALL(cudaDeviceSynchronize());
      if (std::find(kept.begin(), kept.end(), int(s)) == kept.end()) continue;
      const auto logits = session_->read_logits();
      out.add(prefix + std::to_string(s) + ".logits", DType::F32, {b, cfg_.dims.vocab}, logits.data(), logits.size() * 4);
    }
  }

  std::string inputs_changed() override { return guard_.first_changed(); }
  // prepare_step and the logits read are a memset and copies; the digest's kernels need the
  // session's logits, which exist from the build on: the dry gap holds the flush alone, so
  // harness_records_per_gap (reported, never judged) leaves the digest's records out.
  void dry_gap() override {}
  void teardown() override { session_->close(); }
  json timing_figures() const override { return {{"positions", positions_}}; }

 private:
  DecodeConfig cfg_;
  const SolutionLibrary& lib_;
  DeviceModel model_;
  cudaStream_t stream_, harness_stream_;
  bool police_;
  InputGuard guard_;
  std::unique_ptr<DecodeSession> session_;
  std::vector<int64_t> round_tokens_;
  std::vector<int> positions_;
  int32_t pos_ = 0, max_pos_ = 0;  // the timed step's position; the highest any timed step wrote

  /** "" or the cache written beyond every slot a timed step has appended so far (each round
   *  rewrites slots prefill .. prefill + calls - 1; nothing above them is ever written). */
  std::string written_above(const std::string& when) const {
    if (!police_) return "";
    const std::string above = first_written_above(model_, max_pos_, harness_stream_);
    return above.empty() ? "" : "the candidate wrote into '" + above + "' beyond slot " + std::to_string(max_pos_) +
                                    ", the highest a timed step appended, during " + when +
                                    " (only slot pos may be appended)";
  }
};

class DecodeTask final : public Task {
 public:
  std::string name() const override { return kDecodeTask; }
  std::string family() const override { return "decode"; }
  std::string description() const override {
    return "one decode step of a Llama-3.2-3B-shaped decoder, int4 weights with group-128 scale and zero point";
  }
  std::vector<std::string> official_configs() const override { return decode_config_names(); }
  std::string default_config() const override { return "full"; }
  std::string config_syntax() const override { return "full | tiny"; }
  void check_config(const std::string& config) const override { (void)decode_config(config); }
  nlohmann::ordered_json config_dims(const std::string& config) const override {
    const DecodeConfig cfg = decode_config(config);
    const auto& d = cfg.dims;
    return {{"layers", d.layers}, {"d", d.d}, {"ffn", d.ffn}, {"n_q", d.n_q}, {"n_kv", d.n_kv}, {"hd", d.hd},
            {"vocab", d.vocab}, {"group", d.group}, {"batch", d.batch}, {"max_seq", d.max_seq}, {"eps", d.eps},
            {"theta", d.theta}, {"prefill", cfg.prefill}};
  }
  std::vector<TensorSpec> tensors(const std::string& config) const override { return decode_config(config).tensors(); }
  FixtureManifest build_fixture(const std::string& config, uint64_t seed, const std::string& dir, int threads,
                                const ProgressFn& progress) const override {
    return build_decode_fixture(decode_config(config), seed, dir, threads, progress);
  }
  FixtureManifest generate_fixture_manifest(const std::string& config, uint64_t seed, int threads,
                                            const ProgressFn& progress) const override {
    return decode_fixture_manifest(decode_config(config), seed, threads, progress);
  }
  std::optional<std::string> pinned_fixture_sha256(const std::string& config, uint64_t seed) const override {
    return find_pinned(decode_pinned_fixtures(), name(), config, seed);
  }
  double gate(const std::string& config) const override { return decode_config(config).gate; }
  std::optional<double> element_guard(const std::string&) const override { return kDecodeElementGuard; }
  std::string error_metric() const override {
    return "||out - ref||_2 / ||ref||_2 in fp64 per output of every checked step: (batch, vocab) logits, and the K and V "
           "appended at slot pos (every layer)";
  }
  std::vector<std::string> outputs() const override { return {"logits", "k_appended", "v_appended"}; }
  std::string unit() const override { return "token"; }
  std::string build_call() const override { return "build_model"; }
  std::string timed_call() const override { return "decode_step"; }
  int checked_calls(const std::string& config) const override { return decode_config(config).checked_steps; }
  std::string replay_spec_error(const std::string& config, const nlohmann::json& spec, int calls,
                                const std::vector<int>& picks, const std::vector<uint64_t>& seeds) const override {
    return decode_replay_spec_error(decode_config(config), spec, calls, &picks, &seeds);
  }
  /** host_blake3 of the kept step's fp32 logits, the bytes the device held. */
  Digest kept_digest(const SafetensorsFile& timed, const std::string& call_name, const json&) const override {
    const std::string name = call_name + ".logits";
    if (!timed.has(name) || timed.entry(name).dtype != DType::F32)
      throw std::runtime_error("the kept step " + call_name + " has no fp32 logits");
    return host_blake3(timed.data(name), timed.entry(name).nbytes());
  }
  /** Staging NaN-fills the logits and uploads the ids; the digest reads the logits. */
  WindowWork window_work(const std::string& config, const json&) const override {
    const auto& d = decode_config(config).dims;
    const uint64_t logits = uint64_t(d.batch) * uint64_t(d.vocab) * 4;
    return {logits + uint64_t(d.batch) * 8, uint64_t(d.batch) * 8, logits};
  }
  int calls_per_round() const override { return kDecodeCallsPerRound; }
  Roofline roofline(const std::string& config, const json&) const override {
    const DecodeConfig cfg = decode_config(config);
    const auto& d = cfg.dims;
    // Multiply-adds: every projection and the LM head (the tied embedding read once more), and
    // attention's QK^T and PV over prefill + decode_steps slots.
    double macs = 0;
    for (const QuantWeight& w : cfg.quant_weights()) macs += double(w.out) * double(w.in);
    macs += 2.0 * d.layers * d.n_q * d.hd * double(cfg.prefill + cfg.decode_steps);
    return {double(cfg.bytes_per_step()), 2.0 * macs * d.batch,
            "packed codes + scales + zeros of every weight, norm gains, K and V at prefill + 32 slots, fp32 logits"};
  }
  nlohmann::ordered_json timing_protocol() const override {
    return {{"inputs", "fresh token ids per step from a seed the grader's parent draws (--timing-seed, or the OS) and "
                       "reveals as the step's window opens, uploaded inside the window"},
            {"positions", "pos = prefill .. prefill + 31, repeated per round"},
            {"outputs", "logits read back and checked finite after every step, outside the window"}};
  }
  std::string reference_library() const override { return "libnibble_reference.so"; }
  SolutionLibrary::Abi abi() const override { return SolutionLibrary::Abi::Decode; }
  std::unique_ptr<Session> open_session(const Job& job, const SolutionLibrary& lib, const SafetensorsFile& fixture,
                                        cudaStream_t stream, cudaStream_t harness_stream) const override {
    return std::make_unique<DecodeRun>(job, lib, fixture, stream, harness_stream);
  }
  std::vector<TaskVariant> variants() const override {
    std::vector<TaskVariant> v;
    for (const auto& x : ref::decode_variants()) v.push_back({x.name, x.description, x.must_pass, x.caught_by});
    return v;
  }
  double oracle_macs(const std::string& config) const override {
    const DecodeConfig cfg = decode_config(config);
    double per_step = 0;
    for (const QuantWeight& w : cfg.quant_weights()) per_step += double(w.out) * double(w.in);
    return per_step * cfg.checked_steps * double(ref::decode_variants().size() + 1);
  }
  OracleErrors oracle_errors(const std::string& config, const SafetensorsFile& f, uint64_t, int threads) const override {
    const DecodeConfig cfg = decode_config(config);
    const auto& d = cfg.dims;
    struct Run {
      std::vector<std::vector<double>> logits;
      std::vector<std::vector<uint16_t>> k, v;
    };
    auto run = [&](const ref::ReferenceOptions& o) {
      oracle::DecodeOracle orc(cfg, f, threads, o);
      const auto* all = reinterpret_cast<const int64_t*>(f.data("tokens"));
      Run r;
      for (int s = 0; s < cfg.checked_steps; ++s) {
        std::vector<uint16_t> ka, va;
        r.logits.push_back(orc.step({all + int64_t(s) * d.batch, all + int64_t(s + 1) * d.batch}, cfg.prefill + s, &ka, &va));
        r.k.push_back(std::move(ka));
        r.v.push_back(std::move(va));
      }
      return r;
    };
    const Run exact = run(ref::variant_options(ref::kDefaultVariant));
    OracleErrors out{outputs(), {}, {}};
    for (const auto& var : ref::decode_variants()) {
      const Run r = run(var.options);
      std::vector<double> e(3, 0.0), m(3, 0.0);
      for (int s = 0; s < cfg.checked_steps; ++s) {
        const size_t nl = r.logits[s].size(), nk = r.k[s].size();
        e[0] = nan_max(e[0], relative_error(r.logits[s].data(), exact.logits[s].data(), nl));
        e[1] = nan_max(e[1], relative_error_bf16(r.k[s].data(), exact.k[s].data(), nk));
        e[2] = nan_max(e[2], relative_error_bf16(r.v[s].data(), exact.v[s].data(), nk));
        m[0] = nan_max(m[0], element_error(r.logits[s].data(), exact.logits[s].data(), nl));
        m[1] = nan_max(m[1], element_error_bf16(r.k[s].data(), exact.k[s].data(), nk));
        m[2] = nan_max(m[2], element_error_bf16(r.v[s].data(), exact.v[s].data(), nk));
      }
      out.per_variant.push_back(e);
      out.elem_per_variant.push_back(m);
    }
    return out;
  }
  std::vector<ErrorAnchor> error_anchors(const std::string&) const override {
    // The task specification's drop-the-feature table, for context only.
    return {{"most precise legitimate variant", 4.9e-2, true},
            {"nibble order swapped", 1.43, false},
            {"one scale/zero per row", 1.51, false},
            {"zero point ignored", 10.2, false}};
  }
  // solutions/decode/unfused and reference/decode (NIBBLE_DECODE_SOLUTION's names).
  std::vector<std::string> baseline_solutions() const override { return {"unfused", "reference-fp32-cublas"}; }
};

}  // namespace

const Task& decode_task() {
  static const DecodeTask t;
  return t;
}

}  // namespace nibble
