// oracle_fp64.cpp: the fp64 CPU oracle (see oracle_fp64.h for what it defines and what it rounds).
#include "reference/decode/oracle_fp64.h"
#include "reference/sliver.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <string>
#include <thread>

#include "fixtures/bf16.h"

namespace nibble::oracle {

// ---- Pieces -----------------------------------------------------------------------------------

int unpack_code(uint8_t byte, int64_t i, ref::NibbleOrder order) {
  const bool low = (i % 2 == 0) == (order == ref::NibbleOrder::LowFirst);
  return low ? (byte & 0xF) : (byte >> 4);
}

double bf16_to_double(uint16_t bits) { return double(bf16_to_f32(bits)); }

double dequant_value(int code, int zero, uint16_t scale_bf16, ref::ZeroPoint zp) {
  const int shift = zp == ref::ZeroPoint::Subtract ? zero : zp == ref::ZeroPoint::Ignore ? 0 : zero + 1;
  return double(code - shift) * bf16_to_double(scale_bf16);
}

uint16_t double_to_bf16(double x) {
  if (std::isnan(x)) return std::signbit(x) ? 0xFFC0 : 0x7FC0;
  // Rounding to fp32 first is exact enough except when it lands exactly on a bf16 tie (low 16 bits
  // 0x8000) from a value that was not a tie: then the true value's side of the tie decides.
  const float f = static_cast<float>(x);
  const uint32_t u = f32_bits(f);
  if ((u & 0xFFFFu) == 0x8000u && std::isfinite(f) && double(f) != x) {
    const bool away_from_zero = std::fabs(x) > std::fabs(double(f));
    return uint16_t((u >> 16) + (away_from_zero ? 1u : 0u));  // +1 on the bits = one ulp larger magnitude
  }
  return f32_to_bf16(f);
}

double round_to_bf16(double x) { return bf16_to_double(double_to_bf16(x)); }

bool is_rounding_within(double x, double delta, uint16_t bits) {
  if (!(delta > 0)) delta = 0;
  const double value = bf16_to_double(bits);
  const double lo = bf16_to_double(double_to_bf16(x - delta));
  const double hi = bf16_to_double(double_to_bf16(x + delta));
  return lo <= value && value <= hi;  // false for NaN
}

double QuantWeightView::at(int64_t o, int64_t i) const {
  const int64_t groups = in / group;
  const int64_t g = o * groups + (options.grouping == ref::ScaleGrouping::PerGroup ? i / group : 0);
  const int code = unpack_code(packed[o * (in / 2) + i / 2], i, options.nibble_order);
  uint16_t s;
  std::memcpy(&s, scale + g, 2);  // a safetensors mapping does not promise 2-byte alignment
  const double w = dequant_value(code, zero[g], s, options.zero_point);
  return options.bf16_dequant ? round_to_bf16(w) : w;
}

void QuantWeightView::row(int64_t o, double* dst) const {
  for (int64_t i = 0; i < in; ++i) dst[i] = at(o, i);
}

std::vector<double> matvec(const QuantWeightView& w, const std::vector<double>& x, int threads) {
  if (int64_t(x.size()) != w.in)
    throw std::invalid_argument("matvec: x has " + std::to_string(x.size()) + " elements, W has in = " +
                                std::to_string(w.in));
  std::vector<double> y(size_t(w.out), 0.0);
  auto rows = [&](int64_t begin, int64_t end) {
    std::vector<double> wrow(size_t(w.in));
    for (int64_t o = begin; o < end; ++o) {
      w.row(o, wrow.data());
      double s = 0.0;
      for (int64_t i = 0; i < w.in; ++i) s += wrow[size_t(i)] * x[size_t(i)];
      y[size_t(o)] = s;
    }
  };
  const int64_t n = threads < 1 ? 1 : threads;
  if (n == 1 || w.out < 64) {
    rows(0, w.out);
    return y;
  }
  std::vector<std::thread> pool;
  const int64_t per = (w.out + n - 1) / n;
  for (int64_t t = 0; t < n; ++t) {
    const int64_t b = t * per, e = std::min(w.out, b + per);
    if (b < e) pool.emplace_back(rows, b, e);
  }
  for (auto& th : pool) th.join();
  return y;
}

std::vector<double> rmsnorm(const std::vector<double>& x, const std::vector<double>& gain, double eps) {
  if (x.size() != gain.size() || x.empty())
    throw std::invalid_argument("rmsnorm: x has " + std::to_string(x.size()) + " elements, gain " +
                                std::to_string(gain.size()));
  double ss = 0.0;
  for (double v : x) ss += v * v;
  const double denom = std::sqrt(ss / double(x.size()) + eps);
  std::vector<double> y(x.size());
  for (size_t i = 0; i < x.size(); ++i) y[i] = x[i] * gain[i] / denom;
  return y;
}

void rope(double* x, int hd, int64_t pos, double theta, ref::RopeStyle style) {
  if (hd % 2 != 0) throw std::invalid_argument("rope: head dim " + std::to_string(hd) + " is odd");
  const int half = hd / 2;
  for (int i = 0; i < half; ++i) {
    const double inv_freq = std::pow(theta, -2.0 * double(i) / double(hd));
    const double angle = double(pos) * inv_freq;
    const double c = std::cos(angle), s = std::sin(angle);
    const int ia = style == ref::RopeStyle::RotateHalf ? i : 2 * i;
    const int ib = style == ref::RopeStyle::RotateHalf ? i + half : 2 * i + 1;
    const double a = x[ia], b = x[ib];
    x[ia] = a * c - b * s;
    x[ib] = b * c + a * s;
  }
}

void rope_rotate_half(double* x, int hd, int64_t pos, double theta) {
  rope(x, hd, pos, theta, ref::RopeStyle::RotateHalf);
}

int gqa_kv_head(int q_head, int n_q, int n_kv, ref::GqaMap map) {
  if (n_kv <= 0 || n_q % n_kv != 0)
    throw std::invalid_argument("gqa: n_q = " + std::to_string(n_q) + " is not a multiple of n_kv = " +
                                std::to_string(n_kv));
  return map == ref::GqaMap::Block ? q_head / (n_q / n_kv) : q_head % n_kv;
}

int kv_write_slot(int pos, int max_seq, ref::KvSlot mode) {
  const int slot = mode == ref::KvSlot::AtPos ? pos : pos + 1;
  return slot < max_seq ? slot : -1;
}

double silu(double x) { return x / (1.0 + std::exp(-x)); }

std::vector<double> softmax(const std::vector<double>& scores) {
  if (scores.empty()) throw std::invalid_argument("softmax of an empty vector");
  double m = -std::numeric_limits<double>::infinity();
  for (double s : scores) m = std::max(m, s);
  std::vector<double> p(scores.size());
  double sum = 0.0;
  for (size_t t = 0; t < scores.size(); ++t) sum += (p[t] = std::exp(scores[t] - m));
  for (double& v : p) v /= sum;
  return p;
}

std::vector<double> attend(const std::vector<double>& q, const std::vector<double>& keys,
                           const std::vector<double>& vals, int64_t slots, int hd) {
  if (slots <= 0 || int64_t(q.size()) != hd || int64_t(keys.size()) != slots * hd ||
      int64_t(vals.size()) != slots * hd)
    throw std::invalid_argument("attend: inconsistent sizes (q " + std::to_string(q.size()) + ", keys " +
                                std::to_string(keys.size()) + ", vals " + std::to_string(vals.size()) +
                                ", slots " + std::to_string(slots) + ", hd " + std::to_string(hd) + ")");
  const double inv_sqrt_hd = 1.0 / std::sqrt(double(hd));
  std::vector<double> scores(static_cast<size_t>(slots));
  for (int64_t t = 0; t < slots; ++t) {
    double s = 0.0;
    for (int d = 0; d < hd; ++d) s += q[size_t(d)] * keys[size_t(t * hd + d)];
    scores[size_t(t)] = s * inv_sqrt_hd;
  }
  const std::vector<double> p = softmax(scores);
  std::vector<double> out(size_t(hd), 0.0);
  for (int64_t t = 0; t < slots; ++t)
    for (int d = 0; d < hd; ++d) out[size_t(d)] += p[size_t(t)] * vals[size_t(t * hd + d)];
  return out;
}

// ---- The model --------------------------------------------------------------------------------

namespace {

void check_entry(const SafetensorsFile& f, const TensorSpec& spec) {
  const auto& e = f.entry(spec.name);  // throws naming the tensor when missing
  if (e.dtype != spec.dtype || e.shape != spec.shape) {
    std::string want = "(", got = "(";
    for (size_t i = 0; i < spec.shape.size(); ++i) want += (i ? ", " : "") + std::to_string(spec.shape[i]);
    for (size_t i = 0; i < e.shape.size(); ++i) got += (i ? ", " : "") + std::to_string(e.shape[i]);
    throw std::runtime_error(f.path() + ": tensor '" + spec.name + "': expected " +
                             dtype_safetensors_name(spec.dtype) + " " + want + "), got " +
                             dtype_safetensors_name(e.dtype) + " " + got + ")");
  }
}

}  // namespace

DecodeOracle::DecodeOracle(const DecodeConfig& cfg, const SafetensorsFile& fixture, int threads,
                           const ref::ReferenceOptions& options)
    : cfg_(cfg), file_(fixture), threads_(threads < 1 ? 1 : threads), options_(options) {
  const auto& c = cfg_.dims;
  if (c.hd % 2 != 0 || c.n_kv <= 0 || c.n_q % c.n_kv != 0 || c.group <= 0 || c.d % c.group != 0 ||
      c.ffn % c.group != 0 || (int64_t(c.n_q) * c.hd) % c.group != 0 || c.batch < 1)
    throw std::runtime_error("DecodeOracle: config '" + cfg_.name + "' has inconsistent dimensions");
  for (const auto& spec : cfg_.tensors()) check_entry(file_, spec);

  embed_ = quant("embed", c.vocab, c.d);
  final_norm_ = norm_gain("final_norm");
  const int64_t qd = int64_t(c.n_q) * c.hd, kvd = int64_t(c.n_kv) * c.hd;
  for (int l = 0; l < c.layers; ++l) {
    const std::string p = "layers." + std::to_string(l) + ".";
    Layer L;
    L.in_norm = norm_gain(p + "in_norm");
    L.post_norm = norm_gain(p + "post_norm");
    L.q = quant(p + "q", qd, c.d);
    L.k = quant(p + "k", kvd, c.d);
    L.v = quant(p + "v", kvd, c.d);
    L.o = quant(p + "o", c.d, qd);
    L.gate = quant(p + "gate", c.ffn, c.d);
    L.up = quant(p + "up", c.ffn, c.d);
    L.down = quant(p + "down", c.d, c.ffn);
    layers_.push_back(L);

    const std::string kvp = "kv." + std::to_string(l) + ".";
    for (int which = 0; which < 2; ++which) {
      const std::string name = kvp + (which == 0 ? "k" : "v");
      const auto& e = file_.entry(name);
      std::vector<uint16_t> cache(e.nbytes() / 2);
      std::memcpy(cache.data(), file_.data(name), e.nbytes());
      (which == 0 ? k_cache_ : v_cache_).push_back(std::move(cache));
    }
  }
  written_.resize(size_t(c.layers));
}

QuantWeightView DecodeOracle::quant(const std::string& name, int64_t out, int64_t in) const {
  QuantWeightView w;
  w.packed = file_.data(name + ".packed");
  w.scale = reinterpret_cast<const uint16_t*>(file_.data(name + ".scale"));
  w.zero = file_.data(name + ".zero");
  w.out = out;
  w.in = in;
  w.group = cfg_.dims.group;
  w.options = options_;
  return w;
}

std::vector<double> DecodeOracle::norm_gain(const std::string& name) const {
  const auto& e = file_.entry(name);
  const uint8_t* p = file_.data(name);
  std::vector<double> g(e.nbytes() / 2);
  for (size_t i = 0; i < g.size(); ++i) {
    uint16_t bits;
    std::memcpy(&bits, p + 2 * i, 2);  // the mapping need not be 2-byte aligned for every tensor
    g[i] = bf16_to_double(bits);
  }
  return g;
}

std::vector<double> DecodeOracle::step(const std::vector<int64_t>& tokens, int pos, std::vector<uint16_t>* k_appended,
                                       std::vector<uint16_t>* v_appended, StepTrace* trace, const KvOffer* offer) {
  const auto& c = cfg_.dims;
  if (int64_t(tokens.size()) != c.batch)
    throw std::invalid_argument("DecodeOracle::step: " + std::to_string(tokens.size()) + " tokens for batch " +
                                std::to_string(c.batch));
  if (pos < 0 || pos >= c.max_seq)
    throw std::invalid_argument("DecodeOracle::step: pos " + std::to_string(pos) + " outside [0, " +
                                std::to_string(c.max_seq) + ")");
  for (int64_t t : tokens)
    if (t < 0 || t >= c.vocab)
      throw std::invalid_argument("DecodeOracle::step: token " + std::to_string(t) + " outside [0, " +
                                  std::to_string(c.vocab) + ")");

  const int hd = c.hd;
  const int64_t kvd = int64_t(c.n_kv) * hd;
  const int64_t appended_size = int64_t(c.layers) * c.batch * kvd;
  if (offer && (!offer->k || !offer->v || int64_t(offer->k->size()) != appended_size ||
                int64_t(offer->v->size()) != appended_size))
    throw std::invalid_argument("DecodeOracle::step: a KvOffer needs K and V of " + std::to_string(appended_size) +
                                " elements each");
  if (k_appended) k_appended->assign(size_t(appended_size), 0);
  if (v_appended) v_appended->assign(size_t(appended_size), 0);
  if (trace) {
    trace->k.assign(size_t(appended_size), 0.0);
    trace->v.assign(size_t(appended_size), 0.0);
    trace->adopted = trace->rejected = 0;
  }
  const int64_t slots = int64_t(pos) + 1;
  const ref::ReferenceOptions& opt = options_;
  const int write_slot = kv_write_slot(pos, c.max_seq, opt.kv_slot);
  std::vector<double> logits(size_t(int64_t(c.batch) * c.vocab));

  // The variants' bf16 rounding points (from double, once each).
  auto round_all = [](std::vector<double>& x) {
    for (double& e : x) e = round_to_bf16(e);
  };
  auto gemv_input = [&](std::vector<double> x) {  // bf16_activations: what a GEMV reads
    if (opt.bf16_gemv_inputs) round_all(x);
    return x;
  };
  auto residual = [&](std::vector<double>& h) {  // bf16_residual: h as stored after a write
    if (opt.bf16_residual) round_all(h);
  };

  // The bf16 value kept at appended index app of slot pos, whose exact value is x and whose current
  // content is `own`: `own`, or the offered one when it is a legitimate rounding of x (see KvOffer).
  auto offered_bits = [&](uint16_t own, double x, int64_t app, const std::vector<uint16_t>* offered, double delta) {
    if (!offered || (*offered)[size_t(app)] == own) return own;
    const uint16_t theirs = (*offered)[size_t(app)];
    const bool legitimate = is_rounding_within(x, delta, theirs);
    if (trace) ++(legitimate ? trace->adopted : trace->rejected);
    return legitimate ? theirs : own;
  };
  auto head_rms = [&](const double* x) {
    double ss = 0.0;
    for (int d = 0; d < hd; ++d) ss += x[d] * x[d];
    return std::sqrt(ss / hd);
  };
  const int64_t per_layer = int64_t(c.batch) * kvd;  // one SlotWrite vector: (batch, n_kv, hd)

  // Slot pos's exact values, before this step writes: the record of the write that put them there,
  // when this oracle made it and the grader has not read it yet (kv_slot_plus1 at the previous step).
  std::vector<SlotWrite> pos_exact(size_t(c.layers));
  for (int l = 0; l < c.layers; ++l) {
    auto& w = written_[size_t(l)];
    const auto it = w.find(pos);
    if (it != w.end()) pos_exact[size_t(l)] = std::move(it->second);
    w.erase(w.begin(), w.upper_bound(pos));  // a write at or below pos is never read back later
  }

  for (int b = 0; b < c.batch; ++b) {
    // h = dequant(embed)[token]
    std::vector<double> h(size_t(c.d));
    embed_.row(tokens[size_t(b)], h.data());
    residual(h);

    for (int l = 0; l < c.layers; ++l) {
      const Layer& L = layers_[size_t(l)];
      const std::vector<double> a = gemv_input(rmsnorm(h, L.in_norm, c.eps));
      std::vector<double> q = matvec(L.q, a, threads_);
      std::vector<double> k = matvec(L.k, a, threads_);
      const std::vector<double> v = matvec(L.v, a, threads_);
      for (int j = 0; j < c.n_q; ++j) rope(q.data() + int64_t(j) * hd, hd, pos, c.theta, opt.rope);
      for (int j = 0; j < c.n_kv; ++j) rope(k.data() + int64_t(j) * hd, hd, pos, c.theta, opt.rope);

      // Append K and V at the write slot, rounded to bf16: the cache's dtype is part of the task.
      auto& kc = k_cache_[size_t(l)];
      auto& vc = v_cache_[size_t(l)];
      auto cache_at = [&](int kvh, int slot, int d) {
        return ((int64_t(b) * c.n_kv + kvh) * c.max_seq + slot) * hd + d;
      };
      if (write_slot >= 0) {
        for (int kvh = 0; kvh < c.n_kv; ++kvh)
          for (int d = 0; d < hd; ++d) {
            const int64_t src = int64_t(kvh) * hd + d;
            kc[size_t(cache_at(kvh, write_slot, d))] = double_to_bf16(k[size_t(src)]);
            vc[size_t(cache_at(kvh, write_slot, d))] = double_to_bf16(v[size_t(src)]);
          }
        if (write_slot != pos) {  // read back (and offered) at a later step: keep the exact values
          SlotWrite& rec = written_[size_t(l)][write_slot];
          rec.k.resize(size_t(per_layer));
          rec.v.resize(size_t(per_layer));
          std::copy(k.begin(), k.end(), rec.k.begin() + int64_t(b) * kvd);
          std::copy(v.begin(), v.end(), rec.v.begin() + int64_t(b) * kvd);
        }
      }

      // Slot pos as the grader reads it back, the offer applied, before attention reads it. Its
      // exact values: this step's K/V when it wrote slot pos; else the recorded earlier write; else
      // (a slot this oracle never wrote, e.g. the fixture's zeros) the cache's own bf16 values.
      const SlotWrite& earlier = pos_exact[size_t(l)];
      for (int kvh = 0; kvh < c.n_kv; ++kvh) {
        const double* k_exact = nullptr;
        const double* v_exact = nullptr;
        if (write_slot == pos) {
          k_exact = k.data() + int64_t(kvh) * hd;
          v_exact = v.data() + int64_t(kvh) * hd;
        } else if (!earlier.k.empty()) {
          k_exact = earlier.k.data() + int64_t(b) * kvd + int64_t(kvh) * hd;
          v_exact = earlier.v.data() + int64_t(b) * kvd + int64_t(kvh) * hd;
        }
        const double k_delta = offer && k_exact ? offer->window * head_rms(k_exact) : 0.0;
        const double v_delta = offer && v_exact ? offer->window * head_rms(v_exact) : 0.0;
        for (int d = 0; d < hd; ++d) {
          const int64_t src = int64_t(kvh) * hd + d;
          const int64_t at = cache_at(kvh, pos, d);
          const int64_t app = (int64_t(l) * c.batch + b) * kvd + src;
          const double kx = k_exact ? k_exact[d] : bf16_to_double(kc[size_t(at)]);
          const double vx = v_exact ? v_exact[d] : bf16_to_double(vc[size_t(at)]);
          kc[size_t(at)] = offered_bits(kc[size_t(at)], kx, app, offer ? offer->k : nullptr, k_delta);
          vc[size_t(at)] = offered_bits(vc[size_t(at)], vx, app, offer ? offer->v : nullptr, v_delta);
          if (k_appended) (*k_appended)[size_t(app)] = kc[size_t(at)];
          if (v_appended) (*v_appended)[size_t(app)] = vc[size_t(at)];
          if (trace) {
            trace->k[size_t(app)] = k[size_t(src)];
            trace->v[size_t(app)] = v[size_t(src)];
          }
        }
      }

      // Attention over slots 0..pos, every slot (the current one included) read back from the cache.
      std::vector<double> attn(size_t(int64_t(c.n_q) * hd));
      for (int kvh = 0; kvh < c.n_kv; ++kvh) {
        std::vector<double> keys(size_t(slots * hd)), vals(size_t(slots * hd));
        const int64_t base = (int64_t(b) * c.n_kv + kvh) * c.max_seq * hd;
        for (int64_t e = 0; e < slots * hd; ++e) {
          keys[size_t(e)] = bf16_to_double(kc[size_t(base + e)]);
          vals[size_t(e)] = bf16_to_double(vc[size_t(base + e)]);
        }
        for (int j = 0; j < c.n_q; ++j) {
          if (gqa_kv_head(j, c.n_q, c.n_kv, opt.gqa) != kvh) continue;
          const std::vector<double> qj(q.begin() + int64_t(j) * hd, q.begin() + int64_t(j + 1) * hd);
          const std::vector<double> o = attend(qj, keys, vals, slots, hd);
          std::copy(o.begin(), o.end(), attn.begin() + int64_t(j) * hd);
        }
      }
      const std::vector<double> o = matvec(L.o, gemv_input(std::move(attn)), threads_);
      for (int i = 0; i < c.d; ++i) h[size_t(i)] += o[size_t(i)];
      residual(h);

      const std::vector<double> a2 = gemv_input(rmsnorm(h, L.post_norm, c.eps));
      const std::vector<double> g = matvec(L.gate, a2, threads_);
      const std::vector<double> u = matvec(L.up, a2, threads_);
      std::vector<double> m(size_t(c.ffn));
      for (int i = 0; i < c.ffn; ++i) m[size_t(i)] = silu(g[size_t(i)]) * u[size_t(i)];
      const std::vector<double> dn = matvec(L.down, gemv_input(std::move(m)), threads_);
      for (int i = 0; i < c.d; ++i) h[size_t(i)] += dn[size_t(i)];
      residual(h);
    }

    // Tied LM head: logits = (RMSNorm(h) * final_norm) dequant(embed)^T.
    const std::vector<double> x = gemv_input(rmsnorm(h, final_norm_, c.eps));
    std::vector<double> lg = matvec(embed_, x, threads_);
    if (opt.drop_sliver) std::fill(lg.end() - ref::sliver_columns(c.vocab), lg.end(), 0.0);
    std::copy(lg.begin(), lg.end(), logits.begin() + int64_t(b) * c.vocab);
  }
  return logits;
}

}  // namespace nibble::oracle
