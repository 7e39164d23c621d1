// outputs.cpp: see outputs.h.
#include "harness/outputs.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <stdexcept>
#include <vector>

#include "fixtures/bf16.h"
#include "harness/protocol.h"
#include "harness/stats.h"
#include "harness/task.h"

namespace nibble {

using json = nlohmann::ordered_json;

namespace {


std::vector<double> as_doubles(const SafetensorsFile& f, const std::string& name) {
  const auto& e = f.entry(name);
  const uint8_t* p = f.data(name);
  std::vector<double> v;
  if (e.dtype == DType::F32) {
    v.resize(e.nbytes() / 4);
    for (size_t i = 0; i < v.size(); ++i) {
      float x;
      std::memcpy(&x, p + 4 * i, 4);
      v[i] = x;
    }
  } else if (e.dtype == DType::BF16) {
    v.resize(e.nbytes() / 2);
    for (size_t i = 0; i < v.size(); ++i) v[i] = bf16_to_f32(uint16_t(p[2 * i] | (p[2 * i + 1] << 8)));
  } else {
    throw std::runtime_error("output '" + name + "' has dtype " + dtype_safetensors_name(e.dtype) + ", not F32 or BF16");
  }
  return v;
}

}  // namespace

void OutputFile::add(const std::string& name, DType dt, std::vector<int64_t> shape, const void* data, size_t n) {
  blobs.emplace_back(static_cast<const uint8_t*>(data), static_cast<const uint8_t*>(data) + n);
  views.push_back({name, dt, std::move(shape), nullptr, n});
}

void OutputFile::write(int fd, const std::string& solution) {
  for (size_t i = 0; i < views.size(); ++i) views[i].data = blobs[i].data();
  write_safetensors_fd(fd, views, {{"solution", solution}}, "the outputs channel");
  seal_channel(fd);  // written once: no solution code that runs later (teardown, exit) may change it
}

json num_or_null(double v) { return std::isnan(v) ? json(nullptr) : json(v); }

void ErrorTally::add(const std::string& output, double rel_err, double elem_err) {
  ++compared;
  if (std::isnan(rel_err)) ++nonfinite;
  worst = nan_max(worst, rel_err);
  worst_elem = nan_max(worst_elem, elem_err);
  auto it = by_output.find(output);
  by_output[output] = it == by_output.end() ? rel_err : nan_max(it->second, rel_err);
  auto ie = elem_by_output.find(output);
  elem_by_output[output] = ie == elem_by_output.end() ? elem_err : nan_max(ie->second, elem_err);
}

void ErrorTally::merge(const ErrorTally& o) {
  compared += o.compared;
  nonfinite += o.nonfinite;
  worst = nan_max(worst, o.worst);
  worst_elem = nan_max(worst_elem, o.worst_elem);
  for (const auto& [name, e] : o.by_output) {
    auto it = by_output.find(name);
    by_output[name] = it == by_output.end() ? e : nan_max(it->second, e);
  }
  for (const auto& [name, e] : o.elem_by_output) {
    auto it = elem_by_output.find(name);
    elem_by_output[name] = it == elem_by_output.end() ? e : nan_max(it->second, e);
  }
}

std::string ErrorTally::where() const {
  std::string s;
  for (const auto& [name, e] : by_output) {
    char b[64];
    std::snprintf(b, sizeof b, "%s %.3g", name.c_str(), e);
    s += (s.empty() ? "" : ", ") + std::string(std::isnan(e) ? name + " NaN" : b);
  }
  return s;
}

TensorErrors tensor_errors(const SafetensorsFile& cand, const SafetensorsFile& ref, const std::string& name) {
  if (!cand.has(name)) throw std::runtime_error("the candidate's outputs have no '" + name + "'");
  const auto &ce = cand.entry(name), &re = ref.entry(name);
  if (ce.dtype != re.dtype || ce.shape != re.shape)
    throw std::runtime_error("the candidate's '" + name + "' has another dtype or shape than the reference's");
  const std::vector<double> c = as_doubles(cand, name), r = as_doubles(ref, name);
  return {relative_error(c.data(), r.data(), c.size()), element_error(c.data(), r.data(), c.size())};
}

json compare_outputs(const SafetensorsFile& cand, const SafetensorsFile& ref, const std::string& call_prefix,
                     ErrorTally& tally) {
  json calls = json::array();
  std::string current;
  for (const auto& e : ref.entries()) {
    const size_t dot = e.name.find('.');
    if (dot == std::string::npos || e.name.compare(0, call_prefix.size(), call_prefix) != 0) continue;
    const std::string call = e.name.substr(0, dot), output = e.name.substr(dot + 1);
    const TensorErrors t = tensor_errors(cand, ref, e.name);
    tally.add(output, t.rel_err, t.elem_err);
    if (calls.empty() || calls.back()["call"] != call)
      calls.push_back({{"call", call}, {"rel_err", 0.0}, {"outputs", json::object()}});
    json& c = calls.back();
    c["outputs"][output] = {{"rel_err", num_or_null(t.rel_err)}, {"elem_err", num_or_null(t.elem_err)}};
    // The call's worst over its outputs (null once any is NaN).
    if (!c["rel_err"].is_null()) c["rel_err"] = std::isnan(t.rel_err) ? json(nullptr) : json(std::max(c["rel_err"].get<double>(), t.rel_err));
  }
  return calls;
}

}  // namespace nibble
