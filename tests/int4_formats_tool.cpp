// int4_formats_tool.cpp: writes one random plain int4 triple and its AWQ, GPTQ (with and without
// g_idx) and compressed-tensors (asymmetric and symmetric) images to a safetensors file, for
// tests/python/check_int4_formats.py, which packs the plain triple again in numpy (and with
// compressed_tensors' own pack_to_int32 where that package imports) and compares every word.
//
//   int4_formats_tool <out.safetensors>
// Shape: N = 24, K = 384, groups of 128 (3 groups), g_idx labels {2, 0, 1}; zeros 1..15 (GPTQ v1),
// a symmetric copy with every zero 8. Deterministic (std::mt19937, seed 24).
#include <cstdint>
#include <exception>
#include <iostream>
#include <random>
#include <string>
#include <vector>

#include "fixtures/int4_formats.h"
#include "fixtures/safetensors.h"

using namespace nibble;

namespace {

template <typename T>
TensorView view(const std::string& name, DType dt, std::vector<int64_t> shape, const std::vector<T>& v) {
  return {name, dt, std::move(shape), v.data(), v.size() * sizeof(T)};
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 2) {
    std::cerr << "usage: int4_formats_tool <out.safetensors>\n";
    return 2;
  }
  try {
    const int64_t N = 24, K = 384, G = 3;
    std::mt19937 rng(24);
    Int4Plain p;
    p.N = N;
    p.K = K;
    p.group = 128;
    p.packed.resize(size_t(N * K / 2));
    for (auto& b : p.packed) b = uint8_t(rng());
    p.scale.resize(size_t(N * G));
    for (auto& s : p.scale) s = uint16_t(0x2000 + rng() % 0x2000);  // finite fp16 bit patterns
    p.zero.resize(size_t(N * G));
    for (auto& z : p.zero) z = uint8_t(1 + rng() % 15);
    Int4Plain sym = p;
    sym.zero.assign(sym.zero.size(), 8);

    const AwqWeights awq = to_awq(p);
    const GptqWeights gptq = to_gptq(p);
    const GptqWeights gidx = to_gptq(p, {2, 0, 1});
    const CompressedTensorsWeights ct = to_compressed_tensors(p, false);
    const CompressedTensorsWeights cts = to_compressed_tensors(sym, true);
    write_safetensors(argv[1], {
        view("plain.packed", DType::U8, {N, K / 2}, p.packed),
        view("plain.scale", DType::F16, {N, G}, p.scale),
        view("plain.zero", DType::U8, {N, G}, p.zero),
        view("awq.qweight", DType::I32, {K, N / 8}, awq.qweight),
        view("awq.qzeros", DType::I32, {G, N / 8}, awq.qzeros),
        view("awq.scales", DType::F16, {G, N}, awq.scales),
        view("gptq.qweight", DType::I32, {K / 8, N}, gptq.qweight),
        view("gptq.qzeros", DType::I32, {G, N / 8}, gptq.qzeros),
        view("gptq.scales", DType::F16, {G, N}, gptq.scales),
        view("gptq_g_idx.qweight", DType::I32, {K / 8, N}, gidx.qweight),
        view("gptq_g_idx.qzeros", DType::I32, {G, N / 8}, gidx.qzeros),
        view("gptq_g_idx.scales", DType::F16, {G, N}, gidx.scales),
        view("gptq_g_idx.g_idx", DType::I32, {K}, gidx.g_idx),
        view("ct.weight_packed", DType::I32, {N, K / 8}, ct.weight_packed),
        view("ct.weight_scale", DType::F16, {N, G}, ct.weight_scale),
        view("ct.weight_zero_point", DType::I32, {N / 8, G}, ct.weight_zero_point),
        view("ct.weight_shape", DType::I64, {2}, ct.weight_shape),
        view("ct_sym.weight_packed", DType::I32, {N, K / 8}, cts.weight_packed),
    });
    return 0;
  } catch (const std::exception& e) {
    std::cerr << "int4_formats_tool: " << e.what() << "\n";
    return 1;
  }
}
