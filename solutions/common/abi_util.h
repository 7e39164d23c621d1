// abi_util.h: what every bundled solution (and the reference) needs at the C ABI boundary.
//
// Exceptions never cross the boundary: each entry point runs its body inside abi_guard(), which
// turns a thrown AbiFailure / CUDA error / bad_alloc into a status and a message. Tensor lookups
// check name, dtype and shape and say exactly what was expected.
#pragma once

#include <cuda_runtime.h>

#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <new>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "nibble/nibble.h"

namespace nibble::sol {

/** A failure to report through the ABI with this status. */
struct AbiFailure : std::runtime_error {
  nibble_status status;
  AbiFailure(nibble_status s, const std::string& what) : std::runtime_error(what), status(s) {}
};

inline void set_error(nibble_error* err, const std::string& msg) {
  if (!err) return;
  std::snprintf(err->message, sizeof(err->message), "%s", msg.c_str());
}

/** Run an entry point's body; map exceptions onto statuses. */
template <class F>
nibble_status abi_guard(nibble_error* err, F&& body) {
  try {
    body();
    return NIBBLE_OK;
  } catch (const AbiFailure& e) {
    set_error(err, e.what());
    return e.status;
  } catch (const std::bad_alloc&) {
    set_error(err, "host allocation failed");
    return NIBBLE_ERR_OUT_OF_MEMORY;
  } catch (const std::exception& e) {
    set_error(err, e.what());
    return NIBBLE_ERR_INTERNAL;
  }
}

/** s as a whole number in [lo, hi] (decimal, an optional sign, nothing before or after it), or
 *  nullopt. */
inline std::optional<long> parse_whole(const std::string& s, long lo, long hi) {
  if (s.empty() || std::isspace(static_cast<unsigned char>(s[0]))) return std::nullopt;
  char* end = nullptr;
  errno = 0;
  const long v = std::strtol(s.c_str(), &end, 10);
  if (end == s.c_str() || *end != '\0' || errno == ERANGE || v < lo || v > hi) return std::nullopt;
  return v;
}

/** A solution's measurement switch from the environment (an A/B or a plan override): nullopt when
 *  `name` is unset or empty, else its value, a whole number in [lo, hi]. Anything else throws
 *  AbiFailure INVALID_ARGUMENT "NAME=value: <meaning>", so that a typo is refused where the
 *  solution prepares instead of read as 0 (atoi's answer) and graded as the default. */
inline std::optional<long> env_whole(const char* name, long lo, long hi, const std::string& meaning) {
  const char* e = std::getenv(name);
  if (!e || !*e) return std::nullopt;
  if (const auto v = parse_whole(e, lo, hi)) return v;
  throw AbiFailure(NIBBLE_ERR_INVALID_ARGUMENT, std::string(name) + "=" + e + ": " + meaning);
}

/** An on / off switch from the environment: `dflt` when `name` is unset or empty, else exactly 1
 *  or 0; anything else (01, on, yes) throws AbiFailure INVALID_ARGUMENT saying what 1 and 0 mean. */
inline bool env_switch(const char* name, bool dflt, const std::string& one, const std::string& zero) {
  const char* e = std::getenv(name);
  if (!e || !*e) return dflt;
  if (std::strcmp(e, "1") != 0 && std::strcmp(e, "0") != 0)
    throw AbiFailure(NIBBLE_ERR_INVALID_ARGUMENT, std::string(name) + "=" + e + ": 1 (" + one + ") or 0 (" + zero + ")");
  return e[0] == '1';
}

[[noreturn]] inline void throw_cuda(cudaError_t e, const char* call, const char* file, int line) {
  throw AbiFailure(e == cudaErrorMemoryAllocation ? NIBBLE_ERR_OUT_OF_MEMORY : NIBBLE_ERR_CUDA,
                   std::string(file) + ":" + std::to_string(line) + ": " + call + ": " +
                       cudaGetErrorName(e) + " (" + cudaGetErrorString(e) + ")");
}

}  // namespace nibble::sol

/** Checked CUDA call inside a solution: throws AbiFailure (caught by abi_guard). */
#define SOL_CUDA(call)                                                              \
  do {                                                                              \
    const cudaError_t sol_e_ = (call);                                              \
    if (sol_e_ != cudaSuccess) ::nibble::sol::throw_cuda(sol_e_, #call, __FILE__, __LINE__); \
  } while (0)

/** After every kernel launch. */
#define SOL_CHECK_LAUNCH() SOL_CUDA(cudaGetLastError())

namespace nibble::sol {

inline std::string shape_str(const int64_t* s, int n) {
  std::string r = "(";
  for (int i = 0; i < n; ++i) r += (i ? ", " : "") + std::to_string(s[i]);
  return r + ")";
}

inline const char* dtype_str(nibble_dtype d) {
  if (d.code == NIBBLE_DTYPE_UINT && d.bits == 8) return "uint8";
  if (d.code == NIBBLE_DTYPE_BFLOAT && d.bits == 16) return "bf16";
  if (d.code == NIBBLE_DTYPE_FLOAT && d.bits == 32) return "fp32";
  if (d.code == NIBBLE_DTYPE_INT && d.bits == 64) return "int64";
  return "unknown";
}

/** The named tensor's device pointer after checking its dtype and shape (row-major, CUDA). */
inline void* require_tensor(const nibble_decode_model* m, const std::string& name, nibble_dtype dtype,
                            const std::vector<int64_t>& shape) {
  const nibble_tensor* t = nibble_find_tensor(m, name.c_str());
  if (!t) throw AbiFailure(NIBBLE_ERR_INVALID_ARGUMENT, "tensor '" + name + "' is missing from the model");
  const bool dtype_ok = t->dtype.code == dtype.code && t->dtype.bits == dtype.bits && t->dtype.lanes == 1;
  bool shape_ok = t->ndim == int(shape.size());
  for (int i = 0; shape_ok && i < t->ndim; ++i) shape_ok = t->shape[i] == shape[i];
  if (!dtype_ok || !shape_ok)
    throw AbiFailure(NIBBLE_ERR_INVALID_ARGUMENT,
                     "tensor '" + name + "': expected " + dtype_str(dtype) + " " +
                         shape_str(shape.data(), int(shape.size())) + ", got " + dtype_str(t->dtype) +
                         " " + shape_str(t->shape, t->ndim));
  if (t->device.device_type != NIBBLE_DEVICE_CUDA)
    throw AbiFailure(NIBBLE_ERR_INVALID_ARGUMENT, "tensor '" + name + "' is not in CUDA device memory");
  return static_cast<char*>(t->data) + t->byte_offset;
}

/** Threads per block, and blocks (capped at 8192; the loop covers the rest), of a grid-stride loop
 *  over n elements: the one-off element-wise kernels of prepare and of the references. */
inline constexpr int kGridStrideThreads = 256;
inline unsigned grid_stride_blocks(int64_t n) {
  const int64_t b = (n + kGridStrideThreads - 1) / kGridStrideThreads;
  return unsigned(b < 8192 ? b : 8192);
}

inline constexpr nibble_dtype kU8{NIBBLE_DTYPE_UINT, 8, 1};
inline constexpr nibble_dtype kBF16{NIBBLE_DTYPE_BFLOAT, 16, 1};
inline constexpr nibble_dtype kF32{NIBBLE_DTYPE_FLOAT, 32, 1};
inline constexpr nibble_dtype kI64{NIBBLE_DTYPE_INT, 64, 1};

/** The int4 triple of weight `name` (logical (out, in)), checked. */
struct QuantTriple {
  const uint8_t* packed;  // (out, in/2)
  const uint16_t* scale;  // (out, in/group) bf16 bits
  const uint8_t* zero;    // (out, in/group)
  int64_t out, in;
};

/** The decode task's own requirements of a model (nibble.h), before any solution's: struct_size at
 *  least this build's, every count of cfg positive, eps and theta positive and finite, n_q a
 *  multiple of n_kv (grouped-query attention): else AbiFailure INVALID_ARGUMENT; another task than
 *  megakernel-int4-weight-decode: NOT_SUPPORTED. */
inline void require_decode_model(const nibble_decode_model* m) {
  if (m->struct_size < sizeof(nibble_decode_model))
    throw AbiFailure(NIBBLE_ERR_INVALID_ARGUMENT, "build_model: nibble_decode_model.struct_size is smaller than this solution's");
  if (!m->task || std::strcmp(m->task, "megakernel-int4-weight-decode") != 0)
    throw AbiFailure(NIBBLE_ERR_NOT_SUPPORTED, std::string("this solution implements task megakernel-int4-weight-decode, not '") +
                                                   (m->task ? m->task : "(null)") + "'");
  const nibble_decode_config& c = m->cfg;
  const std::pair<int64_t, const char*> counts[] = {{c.layers, "layers"}, {c.d, "d"},         {c.ffn, "ffn"},
                                                    {c.n_q, "n_q"},       {c.n_kv, "n_kv"},   {c.hd, "hd"},
                                                    {c.vocab, "vocab"},   {c.group, "group"}, {c.batch, "batch"},
                                                    {c.max_seq, "max_seq"}};
  for (const auto& [v, name] : counts)
    if (v <= 0)
      throw AbiFailure(NIBBLE_ERR_INVALID_ARGUMENT, std::string("cfg.") + name + " must be positive, got " + std::to_string(v));
  if (!(c.eps > 0) || !std::isfinite(c.eps))
    throw AbiFailure(NIBBLE_ERR_INVALID_ARGUMENT, "cfg.eps must be a positive finite number");
  if (!(c.theta > 0) || !std::isfinite(c.theta))
    throw AbiFailure(NIBBLE_ERR_INVALID_ARGUMENT, "cfg.theta must be a positive finite number");
  if (c.n_q % c.n_kv)
    throw AbiFailure(NIBBLE_ERR_INVALID_ARGUMENT, "cfg.n_q (" + std::to_string(c.n_q) + ") must be a multiple of cfg.n_kv (" +
                                                      std::to_string(c.n_kv) + ") for grouped-query attention");
}

inline QuantTriple require_quant(const nibble_decode_model* m, const std::string& name, int64_t out, int64_t in) {
  const int64_t g = m->cfg.group;
  QuantTriple q;
  q.packed = static_cast<const uint8_t*>(require_tensor(m, name + ".packed", kU8, {out, in / 2}));
  q.scale = static_cast<const uint16_t*>(require_tensor(m, name + ".scale", kBF16, {out, in / g}));
  q.zero = static_cast<const uint8_t*>(require_tensor(m, name + ".zero", kU8, {out, in / g}));
  q.out = out;
  q.in = in;
  return q;
}

}  // namespace nibble::sol
