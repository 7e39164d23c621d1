/*
 * nibble.h: the C ABI between the nibble grader and a solution shared object.
 *
 * This is the only header a solution author includes. It is self-contained C99 (and valid C++),
 * carries no CUDA types (streams travel as void*, device pointers as void*), and no ownership of
 * any allocation crosses it: the harness allocates every tensor it passes, the solution frees
 * whatever it allocated itself in its teardown.
 *
 * A solution for the task "megakernel-int4-weight-decode" exports, with C linkage:
 *
 *   int32_t        nibble_abi_version(void);                             required
 *   nibble_status  nibble_decode_build_model(...);                       required, untimed
 *   nibble_status  nibble_decode_step(...);                              required, timed
 *   nibble_status  nibble_decode_teardown(...);                          required
 *   const char*    nibble_solution_name(void);                           optional
 *
 * The contract follows the task's seed (build_model / decode_step / teardown): build_model may
 * repack the weights into any layout (it is not timed); decode_step computes one decode step for
 * every sequence of the batch, appends this position's K and V into the KV cache tensors it was
 * given at build time (in place: the next call attends over them) and writes the logits into the
 * buffer the harness passes. Every call runs its GPU work on the stream it is handed.
 *
 * Tensors are passed by name, using the fixture's tensor names (see the README's task section):
 *   embed.packed|scale|zero, final_norm, layers.{i}.in_norm, layers.{i}.post_norm,
 *   layers.{i}.{q,k,v,o,gate,up,down}.packed|scale|zero, kv.{i}.k, kv.{i}.v
 *
 * Versioning: a solution returns NIBBLE_ABI_VERSION from nibble_abi_version(); the grader refuses
 * (disposition AbiMismatch) a solution built against another version.
 */
#ifndef NIBBLE_NIBBLE_H
#define NIBBLE_NIBBLE_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/** ABI version. Bumped on any change to a struct layout or an entry point's signature. */
#define NIBBLE_ABI_VERSION 1

/** Status returned by every entry point. Anything but NIBBLE_OK ends the grade of the solution. */
typedef enum nibble_status {
  NIBBLE_OK = 0,
  NIBBLE_ERR_INVALID_ARGUMENT = 1, /**< a tensor is missing or has the wrong dtype/shape */
  NIBBLE_ERR_NOT_SUPPORTED = 2,    /**< the solution declines this config (disposition NotSupported) */
  NIBBLE_ERR_CUDA = 3,             /**< a CUDA/cuBLAS call failed; the message says which */
  NIBBLE_ERR_OUT_OF_MEMORY = 4,
  NIBBLE_ERR_INTERNAL = 5
} nibble_status;

/* ---- Tensor descriptor, laid out exactly like DLPack's DLTensor (dlpack.h v0.8+) ---------------
 * A DLPack user may reinterpret a nibble_tensor* as a DLTensor*. */

/** DLDeviceType values used here. */
enum { NIBBLE_DEVICE_CPU = 1, NIBBLE_DEVICE_CUDA = 2 };
/** DLDataTypeCode values used here. */
enum { NIBBLE_DTYPE_INT = 0, NIBBLE_DTYPE_UINT = 1, NIBBLE_DTYPE_FLOAT = 2, NIBBLE_DTYPE_BFLOAT = 4 };

typedef struct nibble_device {
  int32_t device_type; /**< NIBBLE_DEVICE_CUDA for every tensor the harness passes */
  int32_t device_id;   /**< CUDA ordinal */
} nibble_device;

typedef struct nibble_dtype {
  uint8_t code;   /**< NIBBLE_DTYPE_* */
  uint8_t bits;   /**< 8 for uint8, 16 for bf16, 32 for fp32, 64 for int64 */
  uint16_t lanes; /**< always 1 */
} nibble_dtype;

typedef struct nibble_tensor {
  void* data;            /**< device pointer (already includes no offset; see byte_offset) */
  nibble_device device;
  int32_t ndim;
  nibble_dtype dtype;
  int64_t* shape;        /**< ndim extents */
  int64_t* strides;      /**< ndim strides in elements; the harness always passes row-major */
  uint64_t byte_offset;  /**< always 0 from the harness */
} nibble_tensor;

/** A tensor with its fixture name. */
typedef struct nibble_named_tensor {
  const char* name;
  nibble_tensor tensor;
} nibble_named_tensor;

/** Fixed-size buffer an entry point may fill with a NUL-terminated message when it fails. */
typedef struct nibble_error {
  char message[1024];
} nibble_error;

/* ---- Task megakernel-int4-weight-decode --------------------------------------------------------
 * Math (Llama convention, the seed's reference): h = dequant(embed)[token]; per layer
 * a = RMSNorm(h)*in_norm; q,k,v = a W^T; RoPE rotate-half (pairs i, i+hd/2) at position pos on q
 * and k; k,v appended at cache slot pos; attention over slots 0..pos with GQA (query head j reads
 * kv head j / (n_q/n_kv)), softmax(q k^T / sqrt(hd)); h += o-proj; a = RMSNorm(h)*post_norm;
 * h += down(silu(gate a) * up a); logits = (RMSNorm(h)*final_norm) dequant(embed)^T.
 *
 * Weight format of every 2-D weight W (out, in), the AWQ/GPTQ asymmetric layout:
 *   packed (out, in/2)      uint8  two 4-bit codes per byte, LOW nibble = EVEN input index
 *   scale  (out, in/group)  bf16
 *   zero   (out, in/group)  uint8  0..15
 *   W[o,i] = (code[o,i] - zero[o,i/group]) * scale[o,i/group]
 * Norm gains (d,) bf16. KV cache kv.{i}.k / kv.{i}.v: (batch, n_kv, max_seq, hd) bf16. */

/** Model dimensions; the seed's CFG plus batch and max_seq. */
typedef struct nibble_decode_config {
  int32_t layers;   /**< decoder layers (28 full) */
  int32_t d;        /**< model width (3072) */
  int32_t ffn;      /**< MLP width (8192) */
  int32_t n_q;      /**< query heads (24) */
  int32_t n_kv;     /**< key/value heads (8) */
  int32_t hd;       /**< head dimension (128) */
  int32_t vocab;    /**< vocabulary, also the tied LM head's rows (128256) */
  int32_t group;    /**< quantisation group along the input dimension (128) */
  int32_t batch;    /**< sequences per step (1) */
  int32_t max_seq;  /**< KV cache capacity in slots (4096); pos < max_seq always */
  double eps;       /**< RMSNorm epsilon (1e-5) */
  double theta;     /**< RoPE base (500000) */
} nibble_decode_config;

/** Everything build_model receives. Weights are read-only; kv.{i}.k/v are updated in place by
 * every decode_step and stay valid until teardown. Pointers are valid until teardown returns. */
typedef struct nibble_decode_model {
  uint32_t struct_size;             /**< sizeof(nibble_decode_model) as the harness built it */
  const char* task;                 /**< "megakernel-int4-weight-decode" */
  const char* config_name;          /**< "full" or "tiny" */
  nibble_decode_config cfg;
  const nibble_named_tensor* tensors;
  int32_t num_tensors;
} nibble_decode_model;

/**
 * Build the model (untimed). May allocate, repack and upload; must not launch work that is still
 * running when it returns unless it is on `stream`.
 * @param model   the config and every named tensor (device memory)
 * @param stream  cudaStream_t to use
 * @param handle  out: an opaque pointer passed back to decode_step and teardown
 * @param err     out: a message on failure
 * @return NIBBLE_OK, or NIBBLE_ERR_NOT_SUPPORTED to decline the config, or another error.
 */
typedef nibble_status (*nibble_decode_build_model_fn)(const nibble_decode_model* model, void* stream,
                                                      void** handle, nibble_error* err);

/**
 * One decode step (timed: the GPU span of all work it causes, on any stream, counts).
 * @param handle     from build_model
 * @param token_ids  (batch,) int64 on the GPU: this step's input token of every sequence
 * @param pos        the cache slot this call writes; attention covers slots 0..pos
 * @param logits     (batch, vocab) fp32 on the GPU, harness-allocated and filled with NaN before
 *                   the call: every element must be written
 * @param stream     cudaStream_t to use
 */
typedef nibble_status (*nibble_decode_step_fn)(void* handle, const nibble_tensor* token_ids, int32_t pos,
                                               nibble_tensor* logits, void* stream, nibble_error* err);

/** Free everything build_model allocated. Called once, after the last decode_step. */
typedef nibble_status (*nibble_decode_teardown_fn)(void* handle, void* stream, nibble_error* err);

typedef int32_t (*nibble_abi_version_fn)(void);
typedef const char* (*nibble_solution_name_fn)(void);

/* ---- The entry points a solution exports (declared here so a solution's definitions are
 * checked against the typedefs above). Mark them visible when building with hidden visibility. */
#if defined(__GNUC__)
#define NIBBLE_EXPORT __attribute__((visibility("default")))
#else
#define NIBBLE_EXPORT
#endif
NIBBLE_EXPORT int32_t nibble_abi_version(void);
NIBBLE_EXPORT const char* nibble_solution_name(void);
NIBBLE_EXPORT nibble_status nibble_decode_build_model(const nibble_decode_model* model, void* stream,
                                                      void** handle, nibble_error* err);
NIBBLE_EXPORT nibble_status nibble_decode_step(void* handle, const nibble_tensor* token_ids, int32_t pos,
                                               nibble_tensor* logits, void* stream, nibble_error* err);
NIBBLE_EXPORT nibble_status nibble_decode_teardown(void* handle, void* stream, nibble_error* err);

/* ---- Helpers for solution authors (header-only) ------------------------------------------------ */

/** Look a tensor up by its fixture name; NULL when absent. */
static inline const nibble_tensor* nibble_find_tensor(const nibble_decode_model* model, const char* name) {
  int32_t i;
  for (i = 0; i < model->num_tensors; ++i) {
    const char* a = model->tensors[i].name;
    const char* b = name;
    while (*a && *a == *b) { ++a; ++b; }
    if (*a == 0 && *b == 0) return &model->tensors[i].tensor;
  }
  return NULL;
}

/** Number of elements of a tensor. */
static inline int64_t nibble_numel(const nibble_tensor* t) {
  int64_t n = 1;
  int32_t i;
  for (i = 0; i < t->ndim; ++i) n *= t->shape[i];
  return n;
}

#ifdef __cplusplus
}
#endif

#endif /* NIBBLE_NIBBLE_H */
