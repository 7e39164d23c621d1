// unfused.cu: the C ABI entry points of the "unfused" solution of megakernel-int4-weight-decode.
//
// A first correct baseline: one kernel per op, launched in sequence on the harness's stream
// (10 launches per layer, 283 per token in the full config; NOTES.md has the time model).
// build_model checks every tensor, keeps the harness's device pointers as they are (the GEMV reads
// the AWQ/GPTQ layout directly, nothing is repacked or dequantised), precomputes the RoPE table in
// double and allocates the fp32 activation scratch. decode_step runs, for each sequence b:
//   h = embed[token_b]
//   per layer: a = rmsnorm(h, in_norm); [q|k|v] = W_qkv a; rope(q, k); k, v -> cache slot pos;
//              attn = attention(q, cache 0..pos); h += W_o attn; a = rmsnorm(h, post_norm);
//              [g|u] = W_gate/up a; m = silu(g) * u; h += W_down m
//   logits_b = W_embed rmsnorm(h, final_norm)
// Batch > 1 runs that sequence by sequence (weights re-read per sequence; both configs have batch 1).
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "kernels.h"
#include "nibble/nibble.h"
#include "solutions/common/abi_util.h"
#include "solutions/common/export.h"

namespace nibble::unfused {
namespace {

using sol::AbiFailure;
using sol::QuantTriple;

/** One cudaMalloc'd block, freed exactly once (errors in the destructor are swallowed: teardown
 *  frees explicitly and reports). */
class DeviceAlloc {
 public:
  DeviceAlloc() = default;
  /** Allocate (once). */
  void allocate(size_t bytes) {
    if (ptr_) throw AbiFailure(NIBBLE_ERR_INTERNAL, "DeviceAlloc::allocate called twice");
    if (bytes) SOL_CUDA(cudaMalloc(&ptr_, bytes));
  }
  ~DeviceAlloc() {
    if (ptr_) cudaFree(ptr_);
  }
  DeviceAlloc(const DeviceAlloc&) = delete;
  DeviceAlloc& operator=(const DeviceAlloc&) = delete;
  void* get() const { return ptr_; }
  /** Free now, reporting a failure. */
  void release() {
    void* p = ptr_;
    ptr_ = nullptr;
    if (p) SOL_CUDA(cudaFree(p));
  }

 private:
  void* ptr_ = nullptr;
};

Int4Matrix as_matrix(const QuantTriple& t) {
  Int4Matrix m;
  m.packed = t.packed;
  m.scale = t.scale;
  m.zero = t.zero;
  m.rows = int(t.out);
  return m;
}

struct Layer {
  const uint16_t* in_norm = nullptr;
  const uint16_t* post_norm = nullptr;
  QuantTriple q, k, v, o, gate, up, down;
  uint16_t* k_cache = nullptr;  // (batch, n_kv, max_seq, hd) bf16, updated in place
  uint16_t* v_cache = nullptr;
};

struct Model {
  nibble_decode_config cfg{};
  QuantTriple embed{};
  const uint16_t* final_norm = nullptr;
  std::vector<Layer> layers;
  DeviceAlloc scratch;
  // Views into scratch (fp32 unless noted).
  float* h = nullptr;        // (d) residual stream
  float* a = nullptr;        // (max(d, ffn)) normed activation / swiglu output
  float* qkv = nullptr;      // (n_q*hd + 2*n_kv*hd)
  float* attn = nullptr;     // (n_q*hd)
  float* gu = nullptr;       // (2*ffn) [gate | up]
  float* part_o = nullptr;   // (n_q, max_chunks, hd)
  float* part_ml = nullptr;  // (n_q, max_chunks, 2)
  float2* rope = nullptr;    // (max_seq, hd/2) {cos, sin}
};

[[noreturn]] void fail(nibble_status s, const std::string& msg) { throw AbiFailure(s, msg); }

/** The config checks beyond the task's own (sol::require_decode_model): what the quantised
 *  matrices' shapes require (INVALID_ARGUMENT) and what this solution's kernels support
 *  (NOT_SUPPORTED). */
void validate_config(const nibble_decode_config& c) {
  if (c.group != kGroup)
    fail(NIBBLE_ERR_NOT_SUPPORTED, "cfg.group = " + std::to_string(c.group) +
                                       ": this solution's GEMV maps one 128-bit load to a quarter of a 128-wide group "
                                       "and supports group 128 only");
  const int64_t qdim = int64_t(c.n_q) * c.hd;
  if (c.d % c.group || c.ffn % c.group || qdim % c.group)
    fail(NIBBLE_ERR_INVALID_ARGUMENT, "d (" + std::to_string(c.d) + "), ffn (" + std::to_string(c.ffn) +
                                          ") and n_q*hd (" + std::to_string(qdim) +
                                          ") must be multiples of the group (" + std::to_string(c.group) +
                                          "): they are the input lengths of quantised matrices");
  if (c.hd % 2) fail(NIBBLE_ERR_INVALID_ARGUMENT, "cfg.hd must be even (RoPE rotates pairs (i, i + hd/2))");
  if (c.hd != 64 && c.hd != 128)
    fail(NIBBLE_ERR_NOT_SUPPORTED, "cfg.hd = " + std::to_string(c.hd) + ": the attention kernel supports hd 64 and 128");
  if (c.n_q / c.n_kv > kAttnMaxRep)
    fail(NIBBLE_ERR_NOT_SUPPORTED, "n_q / n_kv = " + std::to_string(c.n_q / c.n_kv) +
                                       ": the attention kernel supports at most " + std::to_string(kAttnMaxRep) +
                                       " query heads per kv head");
  // Row counts and vector lengths travel as int; the largest matrix has vocab rows.
  const int64_t kIntMax = 0x7FFFFFFF;
  if (c.vocab > kIntMax / 32 || qdim + 2ll * c.n_kv * c.hd > kIntMax / 4 || int64_t(c.ffn) * 2 > kIntMax / 4)
    fail(NIBBLE_ERR_NOT_SUPPORTED, "config too large for this solution's 32-bit indexing");
}

void require_aligned(const void* p, const std::string& name) {
  if (reinterpret_cast<uintptr_t>(p) % 16)
    fail(NIBBLE_ERR_INVALID_ARGUMENT, "tensor '" + name + "' is not 16-byte aligned (the GEMV reads it with 128-bit loads)");
}

QuantTriple quant(const nibble_decode_model* m, const std::string& name, int64_t out, int64_t in) {
  QuantTriple t = sol::require_quant(m, name, out, in);
  require_aligned(t.packed, name + ".packed");
  return t;
}

size_t round_up(size_t n, size_t a) { return (n + a - 1) / a * a; }

std::unique_ptr<Model> build(const nibble_decode_model* model, cudaStream_t stream) {
  sol::require_decode_model(model);
  const nibble_decode_config& c = model->cfg;
  validate_config(c);

  auto mdl = std::make_unique<Model>();
  mdl->cfg = c;
  const int64_t qdim = int64_t(c.n_q) * c.hd, kvdim = int64_t(c.n_kv) * c.hd;
  mdl->embed = quant(model, "embed", c.vocab, c.d);
  mdl->final_norm = static_cast<const uint16_t*>(sol::require_tensor(model, "final_norm", sol::kBF16, {c.d}));
  mdl->layers.resize(size_t(c.layers));
  for (int i = 0; i < c.layers; ++i) {
    const std::string p = "layers." + std::to_string(i) + ".";
    Layer& L = mdl->layers[size_t(i)];
    L.in_norm = static_cast<const uint16_t*>(sol::require_tensor(model, p + "in_norm", sol::kBF16, {c.d}));
    L.post_norm = static_cast<const uint16_t*>(sol::require_tensor(model, p + "post_norm", sol::kBF16, {c.d}));
    L.q = quant(model, p + "q", qdim, c.d);
    L.k = quant(model, p + "k", kvdim, c.d);
    L.v = quant(model, p + "v", kvdim, c.d);
    L.o = quant(model, p + "o", c.d, qdim);
    L.gate = quant(model, p + "gate", c.ffn, c.d);
    L.up = quant(model, p + "up", c.ffn, c.d);
    L.down = quant(model, p + "down", c.d, c.ffn);
    const std::string kv = "kv." + std::to_string(i) + ".";
    const std::vector<int64_t> kv_shape{c.batch, c.n_kv, c.max_seq, c.hd};
    L.k_cache = static_cast<uint16_t*>(sol::require_tensor(model, kv + "k", sol::kBF16, kv_shape));
    L.v_cache = static_cast<uint16_t*>(sol::require_tensor(model, kv + "v", sol::kBF16, kv_shape));
    require_aligned(L.k_cache, kv + "k");
    require_aligned(L.v_cache, kv + "v");
  }

  // Scratch: every activation of one sequence, the attention partials and the RoPE table, each
  // view 256-byte aligned (the GEMV reads x with 128-bit loads).
  const int max_chunks = attn_max_chunks(c.max_seq);
  const size_t n_h = size_t(c.d), n_a = size_t(std::max(c.d, c.ffn)), n_qkv = size_t(qdim + 2 * kvdim);
  const size_t n_attn = size_t(qdim), n_gu = size_t(2) * c.ffn;
  const size_t n_po = size_t(c.n_q) * max_chunks * c.hd, n_pml = size_t(c.n_q) * max_chunks * 2;
  const size_t n_rope = size_t(c.max_seq) * (c.hd / 2);
  const size_t sizes[] = {n_h * 4, n_a * 4, n_qkv * 4, n_attn * 4, n_gu * 4, n_po * 4, n_pml * 4, n_rope * 8};
  size_t total = 0;
  for (size_t s : sizes) total += round_up(s, 256);
  mdl->scratch.allocate(total);
  char* base = static_cast<char*>(mdl->scratch.get());
  size_t off = 0;
  auto take = [&](size_t bytes) {
    void* p = base + off;
    off += round_up(bytes, 256);
    return p;
  };
  mdl->h = static_cast<float*>(take(sizes[0]));
  mdl->a = static_cast<float*>(take(sizes[1]));
  mdl->qkv = static_cast<float*>(take(sizes[2]));
  mdl->attn = static_cast<float*>(take(sizes[3]));
  mdl->gu = static_cast<float*>(take(sizes[4]));
  mdl->part_o = static_cast<float*>(take(sizes[5]));
  mdl->part_ml = static_cast<float*>(take(sizes[6]));
  mdl->rope = static_cast<float2*>(take(sizes[7]));
  SOL_CUDA(cudaMemsetAsync(base, 0, total, stream));

  // RoPE table in double: angle = pos * theta^(-2i/hd); only the result is rounded to fp32.
  const int half = c.hd / 2;
  std::vector<float2> rope(n_rope);
  std::vector<double> inv_freq(static_cast<size_t>(half));
  for (int i = 0; i < half; ++i) inv_freq[size_t(i)] = std::pow(c.theta, -2.0 * i / c.hd);
  for (int pos = 0; pos < c.max_seq; ++pos)
    for (int i = 0; i < half; ++i) {
      const double ang = double(pos) * inv_freq[size_t(i)];
      rope[size_t(pos) * half + i] = make_float2(float(std::cos(ang)), float(std::sin(ang)));
    }
  SOL_CUDA(cudaMemcpyAsync(mdl->rope, rope.data(), n_rope * sizeof(float2), cudaMemcpyHostToDevice, stream));
  SOL_CUDA(cudaStreamSynchronize(stream));  // the host table goes out of scope
  return mdl;
}

void step(Model& m, const nibble_tensor* token_ids, int32_t pos, nibble_tensor* logits, cudaStream_t stream) {
  const nibble_decode_config& c = m.cfg;
  if (!token_ids || !logits) fail(NIBBLE_ERR_INVALID_ARGUMENT, "decode_step: token_ids and logits must not be NULL");
  if (token_ids->dtype.code != NIBBLE_DTYPE_INT || token_ids->dtype.bits != 64 || token_ids->ndim != 1 ||
      token_ids->shape[0] != c.batch || token_ids->device.device_type != NIBBLE_DEVICE_CUDA)
    fail(NIBBLE_ERR_INVALID_ARGUMENT, "decode_step: token_ids must be (" + std::to_string(c.batch) +
                                          ",) int64 on the GPU, got " + sol::dtype_str(token_ids->dtype) + " " +
                                          sol::shape_str(token_ids->shape, token_ids->ndim));
  if (logits->dtype.code != NIBBLE_DTYPE_FLOAT || logits->dtype.bits != 32 || logits->ndim != 2 ||
      logits->shape[0] != c.batch || logits->shape[1] != c.vocab || logits->device.device_type != NIBBLE_DEVICE_CUDA)
    fail(NIBBLE_ERR_INVALID_ARGUMENT, "decode_step: logits must be (" + std::to_string(c.batch) + ", " +
                                          std::to_string(c.vocab) + ") fp32 on the GPU, got " +
                                          sol::dtype_str(logits->dtype) + " " + sol::shape_str(logits->shape, logits->ndim));
  if (pos < 0 || pos >= c.max_seq)
    fail(NIBBLE_ERR_INVALID_ARGUMENT, "decode_step: pos " + std::to_string(pos) + " outside [0, max_seq = " +
                                          std::to_string(c.max_seq) + ")");

  const int64_t* tokens = reinterpret_cast<const int64_t*>(static_cast<const char*>(token_ids->data) + token_ids->byte_offset);
  float* out = reinterpret_cast<float*>(static_cast<char*>(logits->data) + logits->byte_offset);
  const int qdim = c.n_q * c.hd, kvdim = c.n_kv * c.hd;
  const float eps = float(c.eps);
  const size_t cache_per_seq = size_t(c.n_kv) * c.max_seq * c.hd;

  for (int b = 0; b < c.batch; ++b) {
    SOL_CUDA(launch_embed(tokens + b, as_matrix(m.embed), c.d, m.h, stream));
    for (const Layer& L : m.layers) {
      uint16_t* kc = L.k_cache + size_t(b) * cache_per_seq;
      uint16_t* vc = L.v_cache + size_t(b) * cache_per_seq;

      SOL_CUDA(launch_rmsnorm(m.h, L.in_norm, eps, c.d, m.a, stream));
      Int4Matrix qkv[3] = {as_matrix(L.q), as_matrix(L.k), as_matrix(L.v)};
      qkv[0].y = m.qkv;
      qkv[1].y = m.qkv + qdim;
      qkv[2].y = m.qkv + qdim + kvdim;
      SOL_CUDA(launch_int4_gemv(qkv, 3, m.a, c.d, stream));
      SOL_CUDA(launch_rope_kv_append(m.qkv, m.rope, c.n_q, c.n_kv, c.hd, c.max_seq, pos, kc, vc, stream));
      SOL_CUDA(launch_attention_partial(m.qkv, kc, vc, c.n_q, c.n_kv, c.hd, c.max_seq, pos, m.part_o, m.part_ml, stream));
      SOL_CUDA(launch_attention_combine(m.part_o, m.part_ml, c.n_q, c.hd, c.max_seq, pos, m.attn, stream));
      Int4Matrix o = as_matrix(L.o);
      o.y = m.h;
      o.residual = m.h;  // h += W_o attn, in place
      SOL_CUDA(launch_int4_gemv(&o, 1, m.attn, qdim, stream));

      SOL_CUDA(launch_rmsnorm(m.h, L.post_norm, eps, c.d, m.a, stream));
      Int4Matrix gu[2] = {as_matrix(L.gate), as_matrix(L.up)};
      gu[0].y = m.gu;
      gu[1].y = m.gu + c.ffn;
      SOL_CUDA(launch_int4_gemv(gu, 2, m.a, c.d, stream));
      SOL_CUDA(launch_swiglu(m.gu, m.gu + c.ffn, c.ffn, m.a, stream));
      Int4Matrix down = as_matrix(L.down);
      down.y = m.h;
      down.residual = m.h;  // h += W_down m, in place
      SOL_CUDA(launch_int4_gemv(&down, 1, m.a, c.ffn, stream));
    }
    SOL_CUDA(launch_rmsnorm(m.h, m.final_norm, eps, c.d, m.a, stream));
    Int4Matrix head = as_matrix(m.embed);  // tied LM head: logits = W_embed a
    head.y = out + size_t(b) * c.vocab;
    SOL_CUDA(launch_int4_gemv(&head, 1, m.a, c.d, stream));
  }
}

/** After the stream is drained (export.h): free the scratch, checked. */
void teardown(Model& m, cudaStream_t) { m.scratch.release(); }

}  // namespace
}  // namespace nibble::unfused

NIBBLE_DECODE_SOLUTION("unfused", nibble::unfused::build, nibble::unfused::step, nibble::unfused::teardown);
