/*
 * nibble_gemm.h: the C ABI of the weight-only GEMM tasks (FP4 and int4), beside nibble.h (which it includes: a GEMM
 * solution includes this header; a decode solution only nibble.h).
 *
 * Self-contained C99 (and valid C++) on top of nibble.h, whose tensor descriptor (DLPack layout),
 * status codes, error buffer and NIBBLE_EXPORT it reuses. Nothing in nibble.h changes: the decode
 * task's ABI stays at NIBBLE_ABI_VERSION, and this header carries its own version.
 *
 * Tasks:
 *   gemm-w4a16-nvfp4   C (M, N) = A (M, K) * W^T; W[n, k] = e2m1(code) * e4m3fn(scale[n, k/16]) * global
 *   gemm-bf16-mxfp4    C (M, N) = A (M, K) * W^T; W[n, k] = e2m1(code) * 2^(e8m0(scale[n, k/32]) - 127)
 *   gemm-w4a16-int4    C (M, N) = A (M, K) * W^T; W[n, k] = (q[n, k] - zero[n, k/128]) * fp16 scale[n, k/128]
 *                      (the AWQ/GPTQ group quantisation; the layouts: see "gemm-w4a16-int4" below)
 *
 * FP4 tensors (fixture names; every one a device pointer, row-major, contiguous):
 *   A               (M, K)            bf16    passed to every run call (not to prepare)
 *   W.packed        (N, K/2)          uint8   two e2m1 codes per byte, LOW nibble = EVEN k
 *   W.scale         (N, ceil(K/B))    uint8   B = 16: float8_e4m3fn bits; B = 32: e8m0 bits (0xFF NaN,
 *                                             never in a fixture)
 *   W.global_scale  (1,)              fp32    NVFP4 only (also given on the host: problem.global_scale)
 *   C               (M, N)            fp32    by default; bf16 if the solution asks (see below)
 * e2m1 decodes to {0, 0.5, 1, 1.5, 2, 3, 4, 6} with sign bit 3 (0x1/0x9 = +-0.5, 0x8 = -0). K need
 * not be a multiple of B: the last block of a row is partial (it covers K - B * (ceil(K/B) - 1)
 * elements). K is always even; the official configs also have K % 8 == 0 (A rows 16-byte aligned),
 * but a W.packed row is K/2 bytes (1540 for K = 3080: 4-byte aligned only) and a W.scale row
 * ceil(K/B) bytes (193 for K = 3080, NVFP4): repack in prepare if your loads need wider alignment.
 * The stored layout is plain; prepare may repack (nibble's fixtures/fp4.h converts to the tilelang
 * seed's bit-twiddled layout, which needs K % 4 == 0).
 *
 * gemm-w4a16-int4 (block = 128, scale_format = NIBBLE_GEMM_SCALE_F16, global_scale = 1): the same
 * weights handed over in the layout the solution asks for with nibble_gemm_int4_layout() (default
 * NIBBLE_INT4_LAYOUT_PLAIN), converted by moving bits only: the same codes, zero points and fp16
 * scales in every layout. q and zero are 0..15; a `-sym` config has every zero point 8. N % 8 == 0
 * and K % 128 == 0 in every config (the packers' 8 outputs per int32 word). Tensors per layout:
 *   PLAIN (nibble's, the decode task's):
 *     W.packed (N, K/2) uint8 LOW nibble = EVEN k; W.scale (N, K/128) fp16; W.zero (N, K/128) uint8
 *   AWQ (AutoAWQ WQLinear_GEMM): W.qweight (K, N/8) int32, word [k, c] holds output 8c + order[i]
 *     at bits 4i..4i+3, order = {0, 2, 4, 6, 1, 3, 5, 7}; W.qzeros (K/128, N/8) int32, the zero
 *     points packed the same way; W.scales (K/128, N) fp16
 *   GPTQ (AutoGPTQ v1): W.qweight (K/8, N) int32, word [r, n] holds k = 8r + j at bits 4j;
 *     W.qzeros (K/128, N/8) int32, word [g, c] holds zero[8c + j] - 1 at bits 4j (add 1 back);
 *     W.scales (K/128, N) fp16
 *   GPTQ_G_IDX: GPTQ plus W.g_idx (K,) int32, the scale/qzeros row of input k. The rows are
 *     permuted (a group's row is not k / 128): a kernel that ignores g_idx reads the wrong scales.
 *   COMPRESSED_TENSORS (pack-quantized): W.weight_packed (N, K/8) int32, word [n, c] holds
 *     k = 8c + i at bits 4i; W.weight_scale (N, K/128) fp16; W.weight_zero_point (N/8, K/128)
 *     int32, word [r, g] holds zero[8r + i] at bits 4i (absent in a `-sym` config: zero 8);
 *     W.weight_shape (2,) int64 {N, K} (as compressed-tensors writes it)
 * The report names the layout; the grader checksums every tensor handed over after every call.
 *
 * A solution exports, with C linkage:
 *   int32_t        nibble_abi_version(void);        required, returns NIBBLE_ABI_VERSION (nibble.h)
 *   int32_t        nibble_gemm_abi_version(void);   required, returns NIBBLE_GEMM_ABI_VERSION
 *   nibble_status  nibble_gemm_prepare(...);        required, untimed
 *   nibble_status  nibble_gemm_run(...);            required, timed
 *   nibble_status  nibble_gemm_teardown(...);       required
 *   int32_t        nibble_gemm_output_dtype(void);  optional: NIBBLE_GEMM_OUTPUT_F32 (the default when
 *                                                   absent) or NIBBLE_GEMM_OUTPUT_BF16
 *   int32_t        nibble_gemm_int4_layout(void);   optional, gemm-w4a16-int4: NIBBLE_INT4_LAYOUT_*
 *                                                   (PLAIN when absent); another value is refused
 *   const char*    nibble_solution_name(void);      optional (nibble.h)
 *
 * Output: C is (M, N) fp32 unless the solution exports nibble_gemm_output_dtype() returning
 * NIBBLE_GEMM_OUTPUT_BF16, in which case the harness passes a bf16 C (the issue: "Output bf16 (fp32
 * accepted)"). Either way the harness allocates C and fills it with NaN before every run call, so
 * every element must be written; it widens a bf16 C to fp32 before grading, and the report records
 * the dtype. A bf16 C rounds once more (2^-9 relative), which a must-pass row of each task's table
 * covers (FP4: bf16_dequant_fp32_acc; int4: bf16_output). The roofline counts C at its dtype's size.
 *
 * Grading is relative Frobenius error ||C - C_ref|| / ||C_ref|| against the fp32 reference on the
 * same bytes (nibble calibrate measures the gate). A solution may decline a shape with
 * NIBBLE_ERR_NOT_SUPPORTED from prepare (disposition NotSupported, reported as such); from run, any
 * status but NIBBLE_OK is a failed call (the grade records the solution's error and stops).
 *
 * Buffers and lifetime: A and C are device allocations of the harness (cudaMalloc, so 256-byte
 * aligned), the same two buffers on every run call of a handle; A's contents change between calls
 * (the signs of a fresh half of its elements flipped, see the README), the weights never do (they are checksummed after every call, A
 * during each). The weights given to prepare stay valid until teardown. One process runs one
 * prepare, its run calls and one teardown; after a failed prepare or run the process ends without
 * teardown, so nothing needs freeing then. Calls are serialised on the given stream; prepare and
 * each run have their own timeouts (nibble grade --help).
 */
#ifndef NIBBLE_NIBBLE_GEMM_H
#define NIBBLE_NIBBLE_GEMM_H

#include "nibble/nibble.h"

#ifdef __cplusplus
extern "C" {
#endif

/** Version of this header's structs and entry points. Bumped on any layout or signature change. */
#define NIBBLE_GEMM_ABI_VERSION 1

/** Scale formats (nibble_gemm_problem.scale_format): FP4's e4m3fn and e8m0 bytes, int4's fp16. */
enum { NIBBLE_GEMM_SCALE_E4M3FN = 1, NIBBLE_GEMM_SCALE_E8M0 = 2, NIBBLE_GEMM_SCALE_F16 = 3 };

/** The int4 weight layouts of gemm-w4a16-int4 (nibble_gemm_int4_layout; see the header comment). */
enum {
  NIBBLE_INT4_LAYOUT_PLAIN = 0,
  NIBBLE_INT4_LAYOUT_AWQ = 1,
  NIBBLE_INT4_LAYOUT_GPTQ = 2,
  NIBBLE_INT4_LAYOUT_GPTQ_G_IDX = 3,
  NIBBLE_INT4_LAYOUT_COMPRESSED_TENSORS = 4
};

/** Output dtypes a solution may ask for (nibble_gemm_output_dtype). */
enum { NIBBLE_GEMM_OUTPUT_F32 = 0, NIBBLE_GEMM_OUTPUT_BF16 = 1 };

/** Everything prepare receives. The pointers are valid until teardown returns; the weight tensors
 *  are read-only (a solution that repacks copies them into memory it allocates). */
typedef struct nibble_gemm_problem {
  uint32_t struct_size;      /**< sizeof(nibble_gemm_problem) as the harness built it */
  const char* task;          /**< "gemm-w4a16-nvfp4", "gemm-bf16-mxfp4" or "gemm-w4a16-int4" */
  const char* config_name;   /**< "tiny", "m16-n3072-k3072", ... */
  int64_t M, N, K;           /**< C (M, N) = A (M, K) W^T; K even; every run call uses this M */
  int32_t block;             /**< elements of K per scale: 16 (NVFP4), 32 (MXFP4), 128 (int4's group) */
  int32_t scale_format;      /**< NIBBLE_GEMM_SCALE_E4M3FN, _E8M0 or _F16 (int4) */
  float global_scale;        /**< NVFP4: the value of W.global_scale (host copy); otherwise 1 */
  int32_t c_dtype;           /**< the C every run call gets: NIBBLE_GEMM_OUTPUT_F32 or _BF16 */
  const nibble_named_tensor* tensors; /**< FP4: W.packed, W.scale and, for NVFP4, W.global_scale;
                                           int4: the layout's tensors (header comment) */
  int32_t num_tensors;
} nibble_gemm_problem;

/**
 * Prepare (untimed): may allocate, repack the weights (e.g. to a twiddled or MMA-fragment layout),
 * pick kernels for (M, N, K). Work must be on `stream` or finished when it returns.
 * @param problem  shape, formats and the weight tensors (device memory)
 * @param stream   cudaStream_t to use
 * @param handle   out: an opaque pointer passed back to run and teardown
 * @param err      out: a message on failure
 * @return NIBBLE_OK; NIBBLE_ERR_NOT_SUPPORTED to decline the shape; another status on failure.
 */
typedef nibble_status (*nibble_gemm_prepare_fn)(const nibble_gemm_problem* problem, void* stream, void** handle,
                                                nibble_error* err);

/**
 * One GEMM (timed: the GPU span of all the work it causes, on any stream, counts).
 * @param handle  from prepare
 * @param A       (M, K) bf16, device; its contents may change between calls (the harness may vary
 *                A from call to call so a result cannot be replayed)
 * @param C       (M, N) fp32 (or bf16, see nibble_gemm_output_dtype), device, NaN-filled by the
 *                harness: every element must be written
 * @param stream  cudaStream_t to use
 */
typedef nibble_status (*nibble_gemm_run_fn)(void* handle, const nibble_tensor* A, nibble_tensor* C, void* stream,
                                            nibble_error* err);

/** Free everything prepare allocated. Called once, after the last run. */
typedef nibble_status (*nibble_gemm_teardown_fn)(void* handle, void* stream, nibble_error* err);

typedef int32_t (*nibble_gemm_abi_version_fn)(void);
typedef int32_t (*nibble_gemm_output_dtype_fn)(void);
typedef int32_t (*nibble_gemm_int4_layout_fn)(void);

NIBBLE_EXPORT int32_t nibble_gemm_abi_version(void);
NIBBLE_EXPORT int32_t nibble_gemm_output_dtype(void);
NIBBLE_EXPORT int32_t nibble_gemm_int4_layout(void);
NIBBLE_EXPORT nibble_status nibble_gemm_prepare(const nibble_gemm_problem* problem, void* stream, void** handle,
                                                nibble_error* err);
NIBBLE_EXPORT nibble_status nibble_gemm_run(void* handle, const nibble_tensor* A, nibble_tensor* C, void* stream,
                                            nibble_error* err);
NIBBLE_EXPORT nibble_status nibble_gemm_teardown(void* handle, void* stream, nibble_error* err);

/** Look a weight tensor up by its name ("W.packed", "W.scale", "W.global_scale", "W.qweight", ...); NULL
 *  when absent. */
static inline const nibble_tensor* nibble_gemm_find_tensor(const nibble_gemm_problem* problem, const char* name) {
  int32_t i;
  for (i = 0; i < problem->num_tensors; ++i) {
    const char* a = problem->tensors[i].name;
    const char* b = name;
    while (*a && *a == *b) { ++a; ++b; }
    if (*a == 0 && *b == 0) return &problem->tensors[i].tensor;
  }
  return NULL;
}

#ifdef __cplusplus
}
#endif

#endif /* NIBBLE_NIBBLE_GEMM_H */
