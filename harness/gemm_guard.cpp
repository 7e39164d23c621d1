// gemm_guard.cpp: see gemm_guard.h.
#include "harness/gemm_guard.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <stdexcept>
#include <string>

namespace nibble {

void gemm_call_a(const uint16_t* a0, int64_t n, uint64_t seed, int64_t call, uint16_t* a) {
  if (call == 0) {
    std::memcpy(a, a0, size_t(n) * 2);
    return;
  }
  for (int64_t w = 0; w * 64 < n; ++w) {
    uint64_t x = seed * 0x9e3779b97f4a7c15ull + uint64_t(call) * 0xbf58476d1ce4e5b9ull + uint64_t(w) * 0x94d049bb133111ebull;
    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ull;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebull;
    x ^= x >> 31;
    const int64_t e1 = std::min(n, w * 64 + 64);
    for (int64_t e = w * 64; e < e1; ++e) a[e] = uint16_t(a0[e] ^ (((x >> (e & 63)) & 1u) << 15));
  }
}

double gemm_rel_err(const float* c, const float* r, size_t n) {
  double num = 0, den = 0;
  for (size_t i = 0; i < n; ++i) {
    if (!std::isfinite(c[i])) return NAN;
    const double d = double(c[i]) - double(r[i]);
    num += d * d;
    den += double(r[i]) * double(r[i]);
  }
  return den > 0 ? std::sqrt(num / den) : (num == 0 ? 0.0 : INFINITY);
}

int64_t gemm_stored_call(const SafetensorsFile& f, const std::string& name) {
  if (!f.has(name + ".call") || f.entry(name + ".call").nbytes() != 8) return -1;
  int64_t call = -1;
  std::memcpy(&call, f.data(name + ".call"), 8);
  return call;
}

bool gemm_stored_seed(const SafetensorsFile& f, const std::string& name, uint64_t* seed) {
  if (!f.has(name + ".seed") || f.entry(name + ".seed").nbytes() != 8) return false;
  std::memcpy(seed, f.data(name + ".seed"), 8);
  return true;
}

nlohmann::ordered_json compare_gemm_outputs(const SafetensorsFile& cand, const SafetensorsFile& ref,
                                            const std::vector<std::string>& names, int64_t M, int64_t N, double* worst) {
  using json = nlohmann::ordered_json;
  json out = json::array();
  for (const std::string& p : names) {
    const int64_t call = gemm_stored_call(cand, p);
    if (p == "timed" && call <= 1000)  // the reference's call comes from the candidate's file: check it is a timed one
      throw std::runtime_error("timed: the candidate's kept output names call " + std::to_string(call) +
                               ", not a timed call (1001 on)");
    if (call != gemm_stored_call(ref, p))
      throw std::runtime_error(p + ": the candidate's output is of call " + std::to_string(call) + ", the reference's of call " +
                               std::to_string(gemm_stored_call(ref, p)));
    uint64_t sc = 0, sr = 0;
    if (!gemm_stored_seed(cand, p, &sc) || !gemm_stored_seed(ref, p, &sr) || sc != sr)
      throw std::runtime_error(p + ": the candidate's and the reference's A masks have different seeds (or none)");
    for (const SafetensorsFile* f : {&cand, &ref})
      if (f->entry(p + ".C").nbytes() != size_t(M * N) * 4)
        throw std::runtime_error(f->path() + ": " + p + ".C holds " + std::to_string(f->entry(p + ".C").nbytes()) +
                                 " bytes, not M x N fp32 (" + std::to_string(M * N * 4) + ")");
    const double e = gemm_rel_err(reinterpret_cast<const float*>(cand.data(p + ".C")),
                                  reinterpret_cast<const float*>(ref.data(p + ".C")), size_t(M * N));
    *worst = std::isnan(e) || std::isnan(*worst) ? NAN : std::max(*worst, e);
    out.push_back({{"name", p}, {"call", call}, {"rel_err", std::isnan(e) ? json(nullptr) : json(e)}});
  }
  return out;
}

}  // namespace nibble
