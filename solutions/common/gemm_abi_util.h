// gemm_abi_util.h: the GEMM twin of abi_util.h's tensor checks, for the FP4 dequant-GEMM tasks
// (issue 7; include/nibble/nibble_gemm.h is the contract).
//
// parse_gemm_problem() checks everything prepare receives (struct size, task, block and scale
// format, shape, the weight tensors' dtype/shape/device/row-major strides) and returns the
// borrowed device pointers; check_gemm_io() checks run's A and C. Every failure is an AbiFailure
// with a message that says what was expected, so abi_guard() turns it into a status.
// Host-only; usable from .cu and .cpp files of a solution.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <string>
#include <vector>

#include "nibble/nibble_gemm.h"
#include "solutions/common/abi_util.h"

namespace nibble::sol {

inline constexpr const char* kGemmNvfp4TaskName = "gemm-w4a16-nvfp4";  // = fixtures/gemm_task.h kGemmNvfp4Task
inline constexpr const char* kGemmMxfp4TaskName = "gemm-bf16-mxfp4";   // = kGemmMxfp4Task
inline constexpr const char* kInt4GemmTaskName = "gemm-w4a16-int4";   // = fixtures/int4_gemm kInt4GemmTask
inline constexpr nibble_dtype kF16{NIBBLE_DTYPE_FLOAT, 16, 1};
inline constexpr nibble_dtype kI32{NIBBLE_DTYPE_INT, 32, 1};

/** What prepare needs to know, checked. Pointers are the harness's (borrowed, read-only). */
struct GemmProblem {
  bool nvfp4 = true;            // gemm-w4a16-nvfp4 (e4m3fn per 16, global) or gemm-bf16-mxfp4 (e8m0 per 32)
  int64_t M = 0, N = 0, K = 0;
  int block = 16;               // 16 (NVFP4) or 32 (MXFP4)
  int64_t scale_cols = 0;       // ceil(K / block)
  float global_scale = 1.0f;    // NVFP4: problem->global_scale; MXFP4: 1
  const uint8_t* packed = nullptr;  // (N, K/2) device
  const uint8_t* scale = nullptr;   // (N, scale_cols) device
};

/** True when t is laid out row-major contiguous (strides absent or the packed ones). */
inline bool is_row_major(const nibble_tensor* t) {
  if (!t->strides) return true;
  int64_t expect = 1;
  for (int i = t->ndim - 1; i >= 0; --i) {
    if (t->shape[i] != 1 && t->strides[i] != expect) return false;
    expect *= t->shape[i];
  }
  return true;
}

/** The tensor's device pointer after checking dtype, shape, device and layout; `what` names it
 *  in messages. */
inline void* require_gemm_tensor_ptr(const nibble_tensor* t, const std::string& what, nibble_dtype dtype,
                                     const std::vector<int64_t>& shape) {
  if (!t) throw AbiFailure(NIBBLE_ERR_INVALID_ARGUMENT, "tensor '" + what + "' is missing");
  const bool dtype_ok = t->dtype.code == dtype.code && t->dtype.bits == dtype.bits && t->dtype.lanes == 1;
  bool shape_ok = t->ndim == int(shape.size());
  for (int i = 0; shape_ok && i < t->ndim; ++i) shape_ok = t->shape[i] == shape[i];
  if (!dtype_ok || !shape_ok)
    throw AbiFailure(NIBBLE_ERR_INVALID_ARGUMENT, "tensor '" + what + "': expected " + dtype_str(dtype) + " " +
                                                      shape_str(shape.data(), int(shape.size())) + ", got " +
                                                      dtype_str(t->dtype) + " " + shape_str(t->shape, t->ndim));
  if (t->device.device_type != NIBBLE_DEVICE_CUDA)
    throw AbiFailure(NIBBLE_ERR_INVALID_ARGUMENT, "tensor '" + what + "' is not in CUDA device memory");
  if (!is_row_major(t))
    throw AbiFailure(NIBBLE_ERR_INVALID_ARGUMENT, "tensor '" + what + "' is not row-major contiguous");
  if (!t->data) throw AbiFailure(NIBBLE_ERR_INVALID_ARGUMENT, "tensor '" + what + "' has a null data pointer");
  return static_cast<char*>(t->data) + t->byte_offset;
}

/** The GEMM twin of require_tensor(): the named weight tensor of the problem, checked. */
inline void* require_gemm_tensor(const nibble_gemm_problem* p, const std::string& name, nibble_dtype dtype,
                                 const std::vector<int64_t>& shape) {
  return require_gemm_tensor_ptr(nibble_gemm_find_tensor(p, name.c_str()), name, dtype, shape);
}

/**
 * Check prepare's problem and return its shape and weight pointers.
 * @throws AbiFailure NIBBLE_ERR_NOT_SUPPORTED for another task, a C dtype other than fp32, or a
 *         dimension beyond int32 (cuBLAS and the kernels' grid math); NIBBLE_ERR_INVALID_ARGUMENT
 *         for anything inconsistent.
 */
inline GemmProblem parse_gemm_problem(const nibble_gemm_problem* p) {
  if (!p) throw AbiFailure(NIBBLE_ERR_INVALID_ARGUMENT, "prepare: null problem");
  if (p->struct_size < sizeof(nibble_gemm_problem))
    throw AbiFailure(NIBBLE_ERR_INVALID_ARGUMENT, "nibble_gemm_problem.struct_size " + std::to_string(p->struct_size) +
                                                      " < " + std::to_string(sizeof(nibble_gemm_problem)));
  GemmProblem g;
  if (p->task && std::strcmp(p->task, kGemmNvfp4TaskName) == 0)
    g.nvfp4 = true;
  else if (p->task && std::strcmp(p->task, kGemmMxfp4TaskName) == 0)
    g.nvfp4 = false;
  else
    throw AbiFailure(NIBBLE_ERR_NOT_SUPPORTED,
                     std::string("task '") + (p->task ? p->task : "(null)") + "' is not supported");
  g.M = p->M;
  g.N = p->N;
  g.K = p->K;
  if (g.M <= 0 || g.N <= 0 || g.K <= 0 || g.K % 2 != 0)
    throw AbiFailure(NIBBLE_ERR_INVALID_ARGUMENT, "bad shape M " + std::to_string(g.M) + ", N " + std::to_string(g.N) +
                                                      ", K " + std::to_string(g.K) + " (all > 0, K even)");
  if (g.M > INT32_MAX || g.N > INT32_MAX || g.K > INT32_MAX)
    throw AbiFailure(NIBBLE_ERR_NOT_SUPPORTED, "dimensions beyond int32 are not supported");
  const int want_block = g.nvfp4 ? 16 : 32;
  const int want_format = g.nvfp4 ? NIBBLE_GEMM_SCALE_E4M3FN : NIBBLE_GEMM_SCALE_E8M0;
  if (p->block != want_block || p->scale_format != want_format)
    throw AbiFailure(NIBBLE_ERR_INVALID_ARGUMENT, std::string(p->task) + ": expected block " +
                                                      std::to_string(want_block) + " and scale format " +
                                                      std::to_string(want_format) + ", got " +
                                                      std::to_string(p->block) + " and " +
                                                      std::to_string(p->scale_format));
  if (p->c_dtype != NIBBLE_GEMM_OUTPUT_F32)
    throw AbiFailure(NIBBLE_ERR_NOT_SUPPORTED, "only an fp32 C is supported (c_dtype " + std::to_string(p->c_dtype) + ")");
  g.block = want_block;
  g.scale_cols = (g.K + g.block - 1) / g.block;
  g.packed = static_cast<const uint8_t*>(require_gemm_tensor(p, "W.packed", kU8, {g.N, g.K / 2}));
  g.scale = static_cast<const uint8_t*>(require_gemm_tensor(p, "W.scale", kU8, {g.N, g.scale_cols}));
  if (g.nvfp4) {
    require_gemm_tensor(p, "W.global_scale", kF32, {1});
    g.global_scale = p->global_scale;
    if (!std::isfinite(g.global_scale) || g.global_scale <= 0.0f)
      throw AbiFailure(NIBBLE_ERR_INVALID_ARGUMENT,
                       "global_scale " + std::to_string(g.global_scale) + " is not a positive finite value");
  }
  return g;
}

/** run's A (M, K) bf16 and C (M, N) fp32, checked; returns their device pointers. */
inline void check_gemm_io(int64_t M, int64_t N, int64_t K, const nibble_tensor* A, nibble_tensor* C,
                          const uint16_t** a_ptr, float** c_ptr) {
  *a_ptr = static_cast<const uint16_t*>(require_gemm_tensor_ptr(A, "A", kBF16, {M, K}));
  *c_ptr = static_cast<float*>(require_gemm_tensor_ptr(C, "C", kF32, {M, N}));
}
/** The same for a parsed problem (GemmProblem, Int4Problem: anything with M, N, K). */
template <class Problem>
void check_gemm_io(const Problem& g, const nibble_tensor* A, nibble_tensor* C, const uint16_t** a_ptr, float** c_ptr) {
  check_gemm_io(g.M, g.N, g.K, A, C, a_ptr, c_ptr);
}

/**
 * What prepare of gemm-w4a16-int4 needs (include/nibble/nibble_gemm.h), checked; trivially copyable
 * (a kernel argument). Which pointers are set depends on the layout:
 *   PLAIN               packed (N, K/2), scale (N, G), zero (N, G)
 *   AWQ, GPTQ(_G_IDX)   qweight (AWQ (K, N/8), GPTQ (K/8, N)), qzeros (G, N/8), scale = scales (G, N),
 *                       g_idx (K) for GPTQ_G_IDX
 *   COMPRESSED_TENSORS  qweight = weight_packed (N, K/8), scale = weight_scale (N, G),
 *                       qzeros = weight_zero_point (N/8, G), nullptr when symmetric (zero 8)
 */
struct Int4Problem {
  int32_t layout = NIBBLE_INT4_LAYOUT_PLAIN;
  int64_t M = 0, N = 0, K = 0, groups = 0;  // groups = K / 128
  const uint8_t* packed = nullptr;
  const uint16_t* scale = nullptr;  // fp16 bits
  const uint8_t* zero = nullptr;
  const int32_t* qweight = nullptr;
  const int32_t* qzeros = nullptr;
  const int32_t* g_idx = nullptr;
};

/**
 * Check prepare's problem for gemm-w4a16-int4 in `layout` (the one the solution's
 * nibble_gemm_int4_layout returns) and return its shape and weight pointers.
 * @throws AbiFailure NIBBLE_ERR_NOT_SUPPORTED for another task, a C dtype other than fp32 or a
 *         dimension beyond int32; NIBBLE_ERR_INVALID_ARGUMENT for anything inconsistent
 */
inline Int4Problem parse_int4_problem(const nibble_gemm_problem* p, int32_t layout) {
  if (!p) throw AbiFailure(NIBBLE_ERR_INVALID_ARGUMENT, "prepare: null problem");
  if (p->struct_size < sizeof(nibble_gemm_problem))
    throw AbiFailure(NIBBLE_ERR_INVALID_ARGUMENT, "nibble_gemm_problem.struct_size " + std::to_string(p->struct_size) +
                                                      " < " + std::to_string(sizeof(nibble_gemm_problem)));
  if (!p->task || std::strcmp(p->task, kInt4GemmTaskName) != 0)
    throw AbiFailure(NIBBLE_ERR_NOT_SUPPORTED,
                     std::string("task '") + (p->task ? p->task : "(null)") + "' is not supported");
  Int4Problem g;
  g.layout = layout;
  g.M = p->M;
  g.N = p->N;
  g.K = p->K;
  if (g.M <= 0 || g.N <= 0 || g.K <= 0 || g.K % 128 != 0 || g.N % 8 != 0)
    throw AbiFailure(NIBBLE_ERR_INVALID_ARGUMENT, "bad shape M " + std::to_string(g.M) + ", N " + std::to_string(g.N) +
                                                      ", K " + std::to_string(g.K) + " (all > 0, K % 128 == 0, N % 8 == 0)");
  if (g.M > INT32_MAX || g.N > INT32_MAX || g.K > INT32_MAX)
    throw AbiFailure(NIBBLE_ERR_NOT_SUPPORTED, "dimensions beyond int32 are not supported");
  if (p->block != 128 || p->scale_format != NIBBLE_GEMM_SCALE_F16)
    throw AbiFailure(NIBBLE_ERR_INVALID_ARGUMENT, "gemm-w4a16-int4: expected block 128 and scale format F16 (3), got " +
                                                      std::to_string(p->block) + " and " + std::to_string(p->scale_format));
  if (p->c_dtype != NIBBLE_GEMM_OUTPUT_F32)
    throw AbiFailure(NIBBLE_ERR_NOT_SUPPORTED, "only an fp32 C is supported (c_dtype " + std::to_string(p->c_dtype) + ")");
  const int64_t N = g.N, K = g.K, G = K / 128;
  g.groups = G;
  switch (layout) {
    case NIBBLE_INT4_LAYOUT_PLAIN:
      g.packed = static_cast<const uint8_t*>(require_gemm_tensor(p, "W.packed", kU8, {N, K / 2}));
      g.scale = static_cast<const uint16_t*>(require_gemm_tensor(p, "W.scale", kF16, {N, G}));
      g.zero = static_cast<const uint8_t*>(require_gemm_tensor(p, "W.zero", kU8, {N, G}));
      break;
    case NIBBLE_INT4_LAYOUT_AWQ:
      g.qweight = static_cast<const int32_t*>(require_gemm_tensor(p, "W.qweight", kI32, {K, N / 8}));
      g.qzeros = static_cast<const int32_t*>(require_gemm_tensor(p, "W.qzeros", kI32, {G, N / 8}));
      g.scale = static_cast<const uint16_t*>(require_gemm_tensor(p, "W.scales", kF16, {G, N}));
      break;
    case NIBBLE_INT4_LAYOUT_GPTQ:
    case NIBBLE_INT4_LAYOUT_GPTQ_G_IDX:
      g.qweight = static_cast<const int32_t*>(require_gemm_tensor(p, "W.qweight", kI32, {K / 8, N}));
      g.qzeros = static_cast<const int32_t*>(require_gemm_tensor(p, "W.qzeros", kI32, {G, N / 8}));
      g.scale = static_cast<const uint16_t*>(require_gemm_tensor(p, "W.scales", kF16, {G, N}));
      if (layout == NIBBLE_INT4_LAYOUT_GPTQ_G_IDX)
        g.g_idx = static_cast<const int32_t*>(require_gemm_tensor(p, "W.g_idx", kI32, {K}));
      break;
    case NIBBLE_INT4_LAYOUT_COMPRESSED_TENSORS:
      g.qweight = static_cast<const int32_t*>(require_gemm_tensor(p, "W.weight_packed", kI32, {N, K / 8}));
      g.scale = static_cast<const uint16_t*>(require_gemm_tensor(p, "W.weight_scale", kF16, {N, G}));
      if (nibble_gemm_find_tensor(p, "W.weight_zero_point"))
        g.qzeros = static_cast<const int32_t*>(require_gemm_tensor(p, "W.weight_zero_point", kI32, {(N + 7) / 8, G}));
      require_gemm_tensor(p, "W.weight_shape", kI64, {2});
      break;
    default:
      throw AbiFailure(NIBBLE_ERR_INVALID_ARGUMENT, "unknown int4 layout " + std::to_string(layout));
  }
  return g;
}

/** The device allocations of one prepared handle: each freed exactly once, by release() (checked,
 *  throws the first failure) or, after a failed prepare, by the destructor (errors to stderr). */
class DeviceAllocs {
 public:
  DeviceAllocs() = default;
  DeviceAllocs(const DeviceAllocs&) = delete;
  DeviceAllocs& operator=(const DeviceAllocs&) = delete;
  ~DeviceAllocs() {
    for (void* p : owned_) {
      const cudaError_t e = cudaFree(p);
      if (e != cudaSuccess) std::fprintf(stderr, "nibble gemm solution: cudaFree: %s\n", cudaGetErrorName(e));
    }
  }
  /** cudaMalloc `bytes`, owned here. */
  template <class T>
  T* alloc(size_t bytes) {
    owned_.reserve(owned_.size() + 1);  // so the push_back below cannot throw and leak
    void* p = nullptr;
    SOL_CUDA(cudaMalloc(&p, bytes));
    owned_.push_back(p);
    return static_cast<T*>(p);
  }
  /** Free everything; attempts every free, then throws the first failure. */
  void release() {
    cudaError_t first = cudaSuccess;
    for (void* p : owned_) {
      const cudaError_t e = cudaFree(p);
      if (first == cudaSuccess) first = e;
    }
    owned_.clear();
    SOL_CUDA(first);
  }

 private:
  std::vector<void*> owned_;
};

}  // namespace nibble::sol
