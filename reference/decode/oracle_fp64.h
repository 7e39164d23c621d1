// oracle_fp64.h: the fp64 CPU oracle of megakernel-int4-weight-decode, the task's definition.
//
// One decode step of the seed's model (megakernel_int4_weight_decode_spec.txt; the math is also
// in include/nibble/nibble.h), computed in double precision on the CPU from the fixture's packed
// bytes, written for clarity only. The fp32 cuBLAS reference (reference/decode/reference_abi.cu) is
// checked against it on the `tiny` config (tests/decode/test_reference_gpu.cpp); nothing here is fast.
//
// What is exact and what is rounded:
//   - dequantised weights (code - zero) * scale: exact in double (the bf16 scale converts exactly);
//   - residual stream and every intermediate (norms, projections, RoPE, softmax, attention): double;
//   - the KV cache is bf16, as the task's cache tensors are: the K and V a step computes are rounded
//     to bf16 (round to nearest, ties to even, directly from double) when written at slot pos, and
//     attention, at this step and every later one, reads those rounded values back. The rounding is
//     part of the task's definition, not an approximation of the oracle.
//
// Variants (reference_options.h, named in variants.h): the oracle takes the same ReferenceOptions
// as the fp32 reference, default = the task. Each feature switch is read by the piece of the same
// name (unpack_code, dequant_value / QuantWeightView, rope, kv_write_slot, gqa_kv_head), and the
// bf16 rounding points by DecodeOracle::step; a rounding variant rounds from double, once.
//
// The pieces are free functions so tests can check each one against values worked out by hand.
#pragma once

#include <cstdint>
#include <map>
#include <vector>

#include "fixtures/safetensors.h"
#include "fixtures/decode/decode_config.h"
#include "reference/decode/reference_options.h"

namespace nibble::oracle {

/**
 * The 4-bit code of input index `i` from the byte that holds it (byte = packed[o, i / 2]).
 * Seed: "LOW nibble is the EVEN input index": i even -> byte & 0xF, i odd -> byte >> 4.
 * @param order  HighFirst (mutant nibble_swap) reads the high nibble for the even index instead.
 * @return the code, 0..15.
 */
int unpack_code(uint8_t byte, int64_t i, ref::NibbleOrder order = ref::NibbleOrder::LowFirst);

/**
 * value = (code - zero) * scale, exact in double (scale is bf16 bits; bf16 -> double is exact).
 * @param code        0..15
 * @param zero        the group's zero point, 0..15 (stored uint8)
 * @param scale_bf16  the group's scale as bf16 bits
 * @param zp          Ignore (mutant no_zero): code * scale; SubtractPlusOne (mutant
 *                    zero_off_by_one): (code - zero - 1) * scale. Exact in double either way.
 */
double dequant_value(int code, int zero, uint16_t scale_bf16, ref::ZeroPoint zp = ref::ZeroPoint::Subtract);

/** bf16 bits -> double (exact). */
double bf16_to_double(uint16_t bits);

/**
 * double -> bf16 bits, correctly rounded: round to nearest, ties to even, in one rounding (no
 * double rounding through fp32). NaN gives a quiet NaN; overflow gives +-inf.
 */
uint16_t double_to_bf16(double x);

/** x rounded to the nearest bf16 value (double_to_bf16, then back to double): the oracle's one
 *  rounding for the bf16 variants (bf16_dequant, bf16_activations, bf16_residual). */
double round_to_bf16(double x);

/**
 * True when `bits` is the correct bf16 rounding (round to nearest even) of some value within
 * `delta` of x, i.e. bf16(x - delta) <= bits <= bf16(x + delta) as values (rounding is monotonic).
 * This is what a correct implementation that computes x with an absolute error up to delta may
 * append to the bf16 cache: near a rounding tie it may land on either neighbour. delta <= 0 accepts
 * only bf16(x). NaN bits are never accepted.
 */
bool is_rounding_within(double x, double delta, uint16_t bits);

/**
 * A read-only view of one int4 weight triple, logical shape (out, in), AWQ/GPTQ layout:
 *   packed (out, in/2) uint8, scale (out, in/group) bf16 bits, zero (out, in/group) uint8;
 *   W[o, i] = (code[o, i] - zero[o, i/group]) * scale[o, i/group].
 * The pointers are borrowed (typically from a SafetensorsFile's mapping).
 */
struct QuantWeightView {
  const uint8_t* packed = nullptr;
  const uint16_t* scale = nullptr;
  const uint8_t* zero = nullptr;
  int64_t out = 0, in = 0, group = 0;
  /** The dequantisation switches read by at(): nibble_order, grouping (PerRow: every element of
   *  row o uses group (o, 0)), zero_point, bf16_dequant (W rounded to bf16). Default = the task. */
  ref::ReferenceOptions options{};

  /** W[o, i], exact under the default options. No bounds check beyond an assert-free contract:
   *  0 <= o < out, 0 <= i < in. */
  double at(int64_t o, int64_t i) const;
  /** The dequantised row o into dst[0, in). */
  void row(int64_t o, double* dst) const;
};

/**
 * y = W x (y[o] = sum_i W[o, i] x[i]), the seed's `h @ W.T`, in double, summed in index order.
 * @param x        length w.in
 * @param threads  worker threads over output rows (>= 1); the result does not depend on it
 * @return length w.out. Throws std::invalid_argument if x has the wrong length.
 */
std::vector<double> matvec(const QuantWeightView& w, const std::vector<double>& x, int threads = 1);

/**
 * RMSNorm (Llama): y_i = x_i * gain_i / sqrt(mean_j(x_j^2) + eps).
 * @param x, gain  same length (throws std::invalid_argument otherwise)
 */
std::vector<double> rmsnorm(const std::vector<double>& x, const std::vector<double>& gain, double eps);

/**
 * RoPE, rotate-half convention (Llama / HF), in place on one head vector x[0, hd), hd even:
 * for i < hd/2, inv_freq_i = theta^(-2i/hd), angle = pos * inv_freq_i, and the pair
 * (x_i, x_{i+hd/2}) -> (x_i cos - x_{i+hd/2} sin, x_{i+hd/2} cos + x_i sin).
 * Angles are computed in double with libm (pos 0 is the identity).
 */
void rope_rotate_half(double* x, int hd, int64_t pos, double theta);

/**
 * RoPE of either pairing, in place on one head vector x[0, hd), hd even (throws otherwise): pair i
 * (i < hd/2) is rotated by angle pos * theta^(-2i/hd) as in rope_rotate_half; the pair is
 * (i, i + hd/2) for RotateHalf (the task; identical to rope_rotate_half) and (2i, 2i + 1) for
 * Interleaved (mutant rope_interleaved: same frequency per pair index, GPT-J pairing).
 */
void rope(double* x, int hd, int64_t pos, double theta, ref::RopeStyle style);

/** GQA: query head j reads kv head j / (n_q / n_kv) (Block, the task) or j % n_kv (Modulo, mutant
 *  gqa_modulo). Requires n_q % n_kv == 0 (throws otherwise). */
int gqa_kv_head(int q_head, int n_q, int n_kv, ref::GqaMap map = ref::GqaMap::Block);

/** The cache slot a step at position pos writes its K and V to: pos (AtPos, the task) or pos + 1
 *  (AtPosPlusOne, mutant kv_slot_plus1); -1 (nothing written) when that slot is not below max_seq. */
int kv_write_slot(int pos, int max_seq, ref::KvSlot mode);

/** SiLU: x / (1 + exp(-x)) = x * sigmoid(x). */
double silu(double x);

/** Softmax with the maximum subtracted first (so large scores do not overflow). */
std::vector<double> softmax(const std::vector<double>& scores);

/**
 * One query head's attention over `slots` cache slots:
 *   s_t = (q . k_t) / sqrt(hd), p = softmax(s), out = sum_t p_t v_t.
 * @param q     hd values
 * @param keys  (slots, hd) row-major, values already read from the bf16 cache
 * @param vals  (slots, hd) row-major
 * @return hd values. Throws std::invalid_argument on inconsistent sizes or slots == 0.
 */
std::vector<double> attend(const std::vector<double>& q, const std::vector<double>& keys,
                           const std::vector<double>& vals, int64_t slots, int hd);

/** Intermediate values of the last step, for tests: the K and V this step computed, before they
 *  were rounded to bf16 (and wherever they were written), and what happened to a KvOffer. */
struct StepTrace {
  std::vector<double> k;  // (layers, batch, n_kv, hd): after RoPE, before bf16 rounding
  std::vector<double> v;  // (layers, batch, n_kv, hd)
  int64_t adopted = 0;    // offered elements that differed from the oracle's rounding and were taken
  int64_t rejected = 0;   // offered elements that differed and were not legitimate roundings (kept the oracle's)
};

/**
 * The K and V another implementation holds at cache slot pos after the same step (what the grader
 * reads back as "appended"), offered to the oracle in place of its own bf16 rounding. Why: the cache is bf16, so a value within ~1e-7 of a rounding tie lands on
 * either neighbour depending on the last bit of fp32 arithmetic, and a one-ulp difference of one
 * cache element (up to 2^-8 of it) then moves the logits of this and every later step by up to
 * ~1e-4 (measured on `tiny`): far above the fp32 reference's own error (~2e-6), so without this a
 * 1e-5 comparison measures tie luck, not arithmetic. Each offered element is taken when it is a
 * legitimate rounding (is_rounding_within) of the oracle's exact value with
 * delta = window * RMS(that head's K or V vector); otherwise the oracle keeps its own and counts it
 * as rejected (a real disagreement, which a test should fail on). Under the default options the
 * exact value of slot pos is this step's K/V. Under kv_slot_plus1 it is the previous step's (which
 * wrote slot pos and which attention reads first at this step), or, when this oracle did not write
 * slot pos, the cache's own content (delta 0: only the identical value is accepted).
 */
struct KvOffer {
  const std::vector<uint16_t>* k = nullptr;  // (layers, batch, n_kv, hd) bf16 bits
  const std::vector<uint16_t>* v = nullptr;  // same for V
  double window = 1e-5;                      // relative to the head vector's RMS
};

/**
 * The whole model, one decode step at a time, with its own copy of the KV cache, under the task's
 * definition or one of its variants (ReferenceOptions; variants.h names them).
 *
 * The fixture must outlive the oracle (weights are read through its memory mapping). The
 * constructor checks every tensor's dtype and shape against cfg.tensors() and copies the KV
 * caches (prefix slots [0, prefill) and the zeros after them). Each step writes its K and V at slot
 * pos of that copy, so consecutive steps pos, pos+1, ... see the earlier ones, as a solution's
 * in-place cache does.
 */
class DecodeOracle {
 public:
  /** @param threads  worker threads for the projections (>= 1); results do not depend on it.
   *  @param options  the variant computed; default = the task (exact).
   *  Throws std::runtime_error naming a missing or mis-shaped tensor. */
  DecodeOracle(const DecodeConfig& cfg, const SafetensorsFile& fixture, int threads = 1,
               const ref::ReferenceOptions& options = {});

  /**
   * One decode step for every sequence of the batch.
   * @param tokens      (batch,) token ids, each in [0, vocab)
   * @param pos         the cache slot written; attention covers slots 0..pos; 0 <= pos < max_seq
   * @param k_appended  optional out: (layers, batch, n_kv, hd) bf16 bits at cache slot pos after
   *                    the step (what the grader reads back; this step's K unless kv_slot_plus1)
   * @param v_appended  optional out: same for V
   * @param trace       optional out: K and V before rounding, the offer's adopted/rejected counts
   * @param offer       optional: another implementation's appended K/V (see KvOffer); k_appended and
   *                    v_appended then hold what the oracle stored, adopted elements included
   * @return logits (batch, vocab), double. Throws std::invalid_argument on a bad token or pos, or
   *         an offer of the wrong size.
   */
  std::vector<double> step(const std::vector<int64_t>& tokens, int pos, std::vector<uint16_t>* k_appended = nullptr,
                           std::vector<uint16_t>* v_appended = nullptr, StepTrace* trace = nullptr,
                           const KvOffer* offer = nullptr);

  /** The oracle's K cache of a layer: (batch, n_kv, max_seq, hd) bf16 bits. */
  const std::vector<uint16_t>& k_cache(int layer) const { return k_cache_.at(size_t(layer)); }
  /** The oracle's V cache of a layer. */
  const std::vector<uint16_t>& v_cache(int layer) const { return v_cache_.at(size_t(layer)); }
  const DecodeConfig& config() const { return cfg_; }
  /** The variant this oracle computes. */
  const ref::ReferenceOptions& options() const { return options_; }

 private:
  struct Layer {
    std::vector<double> in_norm, post_norm;
    QuantWeightView q, k, v, o, gate, up, down;
  };
  QuantWeightView quant(const std::string& name, int64_t out, int64_t in) const;
  std::vector<double> norm_gain(const std::string& name) const;

  /** The exact (pre-rounding) K and V this oracle wrote at one cache slot of one layer,
   *  (batch, n_kv, hd) each: what a KvOffer of that slot is judged against. */
  struct SlotWrite {
    std::vector<double> k, v;
  };

  DecodeConfig cfg_;
  const SafetensorsFile& file_;
  int threads_;
  ref::ReferenceOptions options_;
  QuantWeightView embed_;
  std::vector<double> final_norm_;
  std::vector<Layer> layers_;
  std::vector<std::vector<uint16_t>> k_cache_, v_cache_;
  // Per layer, slot -> the exact values written there by a step whose slot the grader has not read
  // yet (kv_slot_plus1 writes pos + 1, read back at the next step); pruned to slots > pos.
  std::vector<std::map<int, SlotWrite>> written_;
};

}  // namespace nibble::oracle
