// reference_abi.cu: the fp32 cuBLAS reference of megakernel-int4-weight-decode, as an ABI solution.
//
// Built as libnibble_reference.so and run by the grader in a child process exactly like a
// candidate. fp32 throughout (DESIGN.md "Reference"):
//   build_model  dequantises every int4 weight exactly to fp32 into its own buffers (12.8 GB for
//                the full config) and keeps pointers to the live KV caches;
//   decode_step  embedding row -> per layer: RMSNorm, q/k/v (cuBLAS), RoPE (fp64 angles), K/V
//                appended to the bf16 cache at slot pos, split attention over slots 0..pos, o-proj
//                + residual, RMSNorm, gate/up (cuBLAS), silu * up, down + residual -> final RMSNorm
//                -> tied LM head (cuBLAS) into the harness's fp32 logits.
// cuBLAS: cublasSgemm (fp32 in, fp32 compute) under CUBLAS_PEDANTIC_MATH, so no TF32 or other
// reduced-precision path can be chosen; nibble_reference_numerics() says so for the report.
// The residual adds are the GEMMs' beta = 1 (h += W x), in fp32.
//
// Variants (reference/decode/variants.h): nibble_reference_set_variant(name) before build_model selects
// one of the drop-the-feature mutants or precision variants, a ReferenceOptions value the kernels
// read (reference_kernels.cuh); the default "fp32" is the task, bit for bit the same as without
// the call. The grader runs every variant through this same .so and child-process path.
#include <cublas_v2.h>
#include <cuda_runtime.h>

#include <atomic>
#include <cstdio>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "nibble/nibble.h"
#include "reference/decode/reference_kernels.cuh"
#include "reference/decode/reference_options.h"
#include "reference/decode/variants.h"
#include "reference/sliver.h"
#include "reference/variant_exports.h"
#include "solutions/common/abi_util.h"
#include "solutions/common/export.h"

namespace nibble::ref {
namespace {

using sol::AbiFailure;

[[noreturn]] void throw_cublas(cublasStatus_t st, const char* call, const char* file, int line) {
  throw AbiFailure(st == CUBLAS_STATUS_ALLOC_FAILED ? NIBBLE_ERR_OUT_OF_MEMORY : NIBBLE_ERR_CUDA,
                   std::string(file) + ":" + std::to_string(line) + ": " + call + ": " + cublasGetStatusName(st) +
                       " (" + cublasGetStatusString(st) + ")");
}

#define REF_CUBLAS(call)                                                                   \
  do {                                                                                     \
    const cublasStatus_t ref_st_ = (call);                                                 \
    if (ref_st_ != CUBLAS_STATUS_SUCCESS) throw_cublas(ref_st_, #call, __FILE__, __LINE__); \
  } while (0)

// Pedantic: "forces compute in the precision requested", so no TF32 or other reduced-precision
// algorithm can be picked for the fp32 GEMMs. nibble_reference_numerics() names this mode.
constexpr cublasMath_t kMathMode = CUBLAS_PEDANTIC_MATH;

/** The variant the next build_model builds: an index into decode_variants(), whose row 0 is the
 *  default "fp32" (tests/decode/test_variants.cpp pins that). Process-wide; atomic so a selection racing a
 *  build is at worst applied to the next build. */
std::atomic<size_t> g_variant{0};

const VariantInfo& selected_variant() { return decode_variants().at(g_variant.load()); }

struct Layer {
  float *q = nullptr, *k = nullptr, *v = nullptr, *o = nullptr;  // dequantised fp32, (out, in) row-major
  float *gate = nullptr, *up = nullptr, *down = nullptr;
  const uint16_t* in_norm = nullptr;    // (d,) bf16, the harness's tensor
  const uint16_t* post_norm = nullptr;
  uint16_t* k_cache = nullptr;          // (batch, n_kv, max_seq, hd) bf16, the live cache (updated in place)
  uint16_t* v_cache = nullptr;
};

/** The handle: owns every device buffer it allocated and the cuBLAS handle. */
class Reference {
 public:
  nibble_decode_config cfg{};
  ReferenceOptions opt;
  cublasHandle_t blas = nullptr;
  float* embed = nullptr;  // (vocab, d) fp32: the embedding table and the tied LM head
  const uint16_t* final_norm = nullptr;
  std::vector<Layer> layers;
  // Activations, (batch, n) each.
  float *h = nullptr, *a = nullptr, *q = nullptr, *k = nullptr, *v = nullptr, *attn = nullptr;
  float *gate = nullptr, *up = nullptr, *act = nullptr;
  AttnWorkspace attn_ws;

  Reference() = default;
  Reference(const Reference&) = delete;
  Reference& operator=(const Reference&) = delete;
  /** Frees whatever release() did not (after a failed build); errors go to stderr. */
  ~Reference() {
    for (void* p : owned_) {
      const cudaError_t e = cudaFree(p);
      if (e != cudaSuccess) std::fprintf(stderr, "nibble_reference: cudaFree: %s\n", cudaGetErrorName(e));
    }
    if (blas) cublasDestroy(blas);
  }

  /** cudaMalloc n floats, owned by this handle. */
  float* alloc_f32(int64_t n) {
    owned_.reserve(owned_.size() + 1);  // so the push_back below cannot throw and leak
    void* p = nullptr;
    SOL_CUDA(cudaMalloc(&p, size_t(n) * sizeof(float)));
    owned_.push_back(p);
    return static_cast<float*>(p);
  }

  /** Free everything, checked: attempts every free, then throws the first failure. */
  void release() {
    cudaError_t first = cudaSuccess;
    for (void* p : owned_) {
      const cudaError_t e = cudaFree(p);
      if (first == cudaSuccess) first = e;
    }
    owned_.clear();
    cublasStatus_t st = CUBLAS_STATUS_SUCCESS;
    if (blas) st = cublasDestroy(blas);
    blas = nullptr;
    SOL_CUDA(first);
    REF_CUBLAS(st);
  }

 private:
  std::vector<void*> owned_;
};

/** Y (batch, out) = X (batch, in) W^T + beta Y, W (out, in) row-major fp32; i.e. y = W x per sequence.
 *  In cuBLAS's column-major terms W is an (in, out) matrix with ld = in, used transposed. With
 *  beta = 0, Y is not read (the harness's NaN-filled logits are fine). */
void linear(const Reference& r, const float* W, int64_t out, int64_t in, const float* X, float* Y, float beta) {
  const float alpha = 1.0f;
  REF_CUBLAS(cublasSgemm(r.blas, CUBLAS_OP_T, CUBLAS_OP_N, int(out), r.cfg.batch, int(in), &alpha, W, int(in), X,
                         int(in), &beta, Y, int(out)));
}

void check_config(const nibble_decode_model* model) {
  sol::require_decode_model(model);
  const nibble_decode_config& c = model->cfg;
  if (c.hd % 2 != 0 || c.group % 2 != 0 || c.d % c.group != 0 || c.ffn % c.group != 0 ||
      (int64_t(c.n_q) * c.hd) % c.group != 0)
    throw AbiFailure(NIBBLE_ERR_INVALID_ARGUMENT,
                     "inconsistent config: layers " + std::to_string(c.layers) + ", d " + std::to_string(c.d) +
                         ", ffn " + std::to_string(c.ffn) + ", n_q " + std::to_string(c.n_q) + ", n_kv " +
                         std::to_string(c.n_kv) + ", hd " + std::to_string(c.hd) + ", group " +
                         std::to_string(c.group) + ", batch " + std::to_string(c.batch));
  // cuBLAS takes int dimensions.
  if (int64_t(c.n_q) * c.hd > INT32_MAX || int64_t(c.batch) * c.vocab > INT32_MAX)
    throw AbiFailure(NIBBLE_ERR_NOT_SUPPORTED, "dimensions exceed cuBLAS's int range");
}

float* dequantise(Reference& r, const nibble_decode_model* model, const std::string& name, int64_t out, int64_t in,
                  cudaStream_t stream) {
  const sol::QuantTriple t = sol::require_quant(model, name, out, in);
  float* w = r.alloc_f32(out * in);
  launch_dequant(QuantTripleDev{t.packed, t.scale, t.zero, out, in, model->cfg.group}, r.opt, w, stream);
  return w;
}

std::unique_ptr<Reference> build(const nibble_decode_model* model, cudaStream_t stream) {
  check_config(model);
  auto r = std::make_unique<Reference>();
  r->cfg = model->cfg;
  r->opt = selected_variant().options;  // "fp32" (the task) unless nibble_reference_set_variant chose another
  const nibble_decode_config& c = r->cfg;
  const int64_t qd = int64_t(c.n_q) * c.hd, kvd = int64_t(c.n_kv) * c.hd;

  REF_CUBLAS(cublasCreate(&r->blas));
  REF_CUBLAS(cublasSetMathMode(r->blas, kMathMode));
  REF_CUBLAS(cublasSetStream(r->blas, stream));

  r->embed = dequantise(*r, model, "embed", c.vocab, c.d, stream);
  r->final_norm = static_cast<const uint16_t*>(sol::require_tensor(model, "final_norm", sol::kBF16, {c.d}));
  for (int l = 0; l < c.layers; ++l) {
    const std::string p = "layers." + std::to_string(l) + ".";
    Layer L;
    L.in_norm = static_cast<const uint16_t*>(sol::require_tensor(model, p + "in_norm", sol::kBF16, {c.d}));
    L.post_norm = static_cast<const uint16_t*>(sol::require_tensor(model, p + "post_norm", sol::kBF16, {c.d}));
    L.q = dequantise(*r, model, p + "q", qd, c.d, stream);
    L.k = dequantise(*r, model, p + "k", kvd, c.d, stream);
    L.v = dequantise(*r, model, p + "v", kvd, c.d, stream);
    L.o = dequantise(*r, model, p + "o", c.d, qd, stream);
    L.gate = dequantise(*r, model, p + "gate", c.ffn, c.d, stream);
    L.up = dequantise(*r, model, p + "up", c.ffn, c.d, stream);
    L.down = dequantise(*r, model, p + "down", c.d, c.ffn, stream);
    const std::vector<int64_t> kv_shape{c.batch, c.n_kv, c.max_seq, c.hd};
    const std::string kp = "kv." + std::to_string(l) + ".";
    L.k_cache = static_cast<uint16_t*>(sol::require_tensor(model, kp + "k", sol::kBF16, kv_shape));
    L.v_cache = static_cast<uint16_t*>(sol::require_tensor(model, kp + "v", sol::kBF16, kv_shape));
    r->layers.push_back(L);
  }

  const int64_t B = c.batch;
  r->h = r->alloc_f32(B * c.d);
  r->a = r->alloc_f32(B * c.d);
  r->q = r->alloc_f32(B * qd);
  r->k = r->alloc_f32(B * kvd);
  r->v = r->alloc_f32(B * kvd);
  r->attn = r->alloc_f32(B * qd);
  r->gate = r->alloc_f32(B * c.ffn);
  r->up = r->alloc_f32(B * c.ffn);
  r->act = r->alloc_f32(B * c.ffn);
  r->attn_ws.max_splits = attn_num_splits(c.max_seq);
  r->attn_ws.m = r->alloc_f32(B * c.n_q * r->attn_ws.max_splits);
  r->attn_ws.l = r->alloc_f32(B * c.n_q * r->attn_ws.max_splits);
  r->attn_ws.acc = r->alloc_f32(B * qd * r->attn_ws.max_splits);

  // Untimed: wait for the dequantisation so a fault is reported by build_model, not the first step.
  SOL_CUDA(cudaStreamSynchronize(stream));
  return r;
}

void check_io(const nibble_decode_config& c, const nibble_tensor* token_ids, const nibble_tensor* logits) {
  if (!token_ids || !logits) throw AbiFailure(NIBBLE_ERR_INVALID_ARGUMENT, "decode_step: null token_ids or logits");
  const auto is = [](const nibble_tensor* t, nibble_dtype d) {
    return t->dtype.code == d.code && t->dtype.bits == d.bits && t->dtype.lanes == 1;
  };
  if (!is(token_ids, sol::kI64) || token_ids->ndim != 1 || token_ids->shape[0] != c.batch ||
      token_ids->device.device_type != NIBBLE_DEVICE_CUDA)
    throw AbiFailure(NIBBLE_ERR_INVALID_ARGUMENT, "token_ids: expected int64 (" + std::to_string(c.batch) +
                                                      ") in CUDA memory");
  const bool row_major = !logits->strides || (logits->strides[1] == 1 && logits->strides[0] == c.vocab);
  if (!is(logits, sol::kF32) || logits->ndim != 2 || logits->shape[0] != c.batch || logits->shape[1] != c.vocab ||
      !row_major || logits->device.device_type != NIBBLE_DEVICE_CUDA)
    throw AbiFailure(NIBBLE_ERR_INVALID_ARGUMENT, "logits: expected fp32 (" + std::to_string(c.batch) + ", " +
                                                      std::to_string(c.vocab) + ") row-major in CUDA memory");
}

void step(Reference& r, const nibble_tensor* token_ids, int32_t pos, nibble_tensor* logits, cudaStream_t stream) {
  const nibble_decode_config& c = r.cfg;
  check_io(c, token_ids, logits);
  if (pos < 0 || pos >= c.max_seq)
    throw AbiFailure(NIBBLE_ERR_INVALID_ARGUMENT,
                     "pos " + std::to_string(pos) + " outside [0, " + std::to_string(c.max_seq) + ")");
  // -1 only for kv_slot_plus1 at pos = max_seq - 1: that mutant then writes nothing rather than
  // past the cache (the configs never get there: prefill + decode_steps < max_seq).
  const int slot = kv_write_slot(pos, c.max_seq, r.opt.kv_slot);
  const auto* tokens =
      reinterpret_cast<const int64_t*>(static_cast<const char*>(token_ids->data) + token_ids->byte_offset);
  float* out = reinterpret_cast<float*>(static_cast<char*>(logits->data) + logits->byte_offset);
  const int64_t qd = int64_t(c.n_q) * c.hd, kvd = int64_t(c.n_kv) * c.hd;
  const bool round_in = r.opt.bf16_gemv_inputs;
  // bf16_residual: h is rounded wherever it is written (the embedding row, each residual add).
  const auto residual_written = [&] {
    if (r.opt.bf16_residual) launch_round_bf16(r.h, int64_t(c.batch) * c.d, stream);
  };

  REF_CUBLAS(cublasSetStream(r.blas, stream));
  launch_embed_rows(r.embed, c.vocab, c.d, tokens, c.batch, r.h, stream);
  residual_written();
  for (const Layer& L : r.layers) {
    launch_rmsnorm(r.h, L.in_norm, c.d, c.batch, c.eps, round_in, r.a, stream);
    linear(r, L.q, qd, c.d, r.a, r.q, 0.0f);
    linear(r, L.k, kvd, c.d, r.a, r.k, 0.0f);
    linear(r, L.v, kvd, c.d, r.a, r.v, 0.0f);
    launch_rope(r.q, c.batch, c.n_q, c.hd, pos, c.theta, r.opt.rope, stream);
    launch_rope(r.k, c.batch, c.n_kv, c.hd, pos, c.theta, r.opt.rope, stream);
    if (slot >= 0) launch_kv_append(r.k, r.v, L.k_cache, L.v_cache, c.batch, c.n_kv, c.hd, c.max_seq, slot, stream);
    launch_attention(r.q, L.k_cache, L.v_cache, c.batch, c.n_q, c.n_kv, c.hd, c.max_seq, pos + 1, r.opt.gqa,
                     r.attn_ws, round_in, r.attn, stream);
    linear(r, L.o, c.d, qd, r.attn, r.h, 1.0f);  // h += o-proj
    residual_written();
    launch_rmsnorm(r.h, L.post_norm, c.d, c.batch, c.eps, round_in, r.a, stream);
    linear(r, L.gate, c.ffn, c.d, r.a, r.gate, 0.0f);
    linear(r, L.up, c.ffn, c.d, r.a, r.up, 0.0f);
    launch_silu_mul(r.gate, r.up, int64_t(c.batch) * c.ffn, round_in, r.act, stream);
    linear(r, L.down, c.d, c.ffn, r.act, r.h, 1.0f);  // h += down
    residual_written();
  }
  launch_rmsnorm(r.h, r.final_norm, c.d, c.batch, c.eps, round_in, r.a, stream);
  linear(r, r.embed, c.vocab, c.d, r.a, out, 0.0f);  // tied LM head
  if (r.opt.drop_sliver) {
    const int64_t n = sliver_columns(c.vocab);
    SOL_CUDA(cudaMemset2DAsync(out + (c.vocab - n), size_t(c.vocab) * 4, 0, size_t(n) * 4, size_t(c.batch), stream));
  }
}

/** After the stream is drained (export.h): the dequantised weights, scratch and cuBLAS, checked. */
void teardown(Reference& r, cudaStream_t) { r.release(); }

}  // namespace
}  // namespace nibble::ref

// ---- The C ABI --------------------------------------------------------------------------------

NIBBLE_DECODE_SOLUTION("reference-fp32-cublas", nibble::ref::build, nibble::ref::step, nibble::ref::teardown);

// The reference's own exports (reference/variant_exports.h): the variant and the numerics sentence.
namespace nibble::ref {
namespace {
const std::vector<VariantRow>& variant_rows() {
  static const std::vector<VariantRow> rows = [] {
    std::vector<VariantRow> r;
    for (const auto& v : decode_variants()) r.push_back({v.name, v.description, v.must_pass, v.options.is_default()});
    return r;
  }();
  return rows;
}
constexpr const char* kNumerics =
    "cublasSgemm fp32 (CUBLAS_COMPUTE_32F), math mode CUBLAS_PEDANTIC_MATH, TF32 off; weights dequantised "
    "exactly to fp32; fp32 RMSNorm, softmax, residual; RoPE angles and cos/sin in fp64";
}  // namespace
}  // namespace nibble::ref

NIBBLE_REFERENCE_VARIANT_EXPORTS(nibble::ref::kNumerics, nibble::ref::variant_rows(), nibble::ref::g_variant)
