// model_host.h: the host side both megakernel solutions share (megakernel.cu, v1; dataflow.cu, v2):
// the model's tensors checked and named as the kernels take them, the RoPE table, device memory
// owned exactly once, the step's token / logits tensors checked. Every failure throws sol::AbiFailure
// with a message that names the tensor or field and what was expected (abi_guard reports it).
#pragma once

#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

#include "megakernel.h"
#include "nibble/nibble.h"

namespace nibble::megakernel::host {

/** One cudaMalloc'd block, freed exactly once (release() checked, the destructor best effort). */
class DeviceAlloc {
 public:
  DeviceAlloc() = default;
  void allocate(size_t bytes);
  ~DeviceAlloc();
  DeviceAlloc(const DeviceAlloc&) = delete;
  DeviceAlloc& operator=(const DeviceAlloc&) = delete;
  char* get() const { return static_cast<char*>(ptr_); }
  size_t size() const { return size_; }
  void release();

 private:
  void* ptr_ = nullptr;
  size_t size_ = 0;
};

inline size_t round_up(size_t n, size_t a) { return (n + a - 1) / a * a; }

/** One decoder layer's source tensors: the seven AWQ/GPTQ triples, the two RMSNorm gains (d bf16)
 *  and sequence 0's K/V cache (batch, n_kv, max_seq, hd) bf16 (16-byte aligned). */
struct LayerSources {
  SourceTriple q, k, v, o, gate, up, down;
  const uint16_t* in_norm = nullptr;
  const uint16_t* post_norm = nullptr;
  uint16_t* k_cache = nullptr;
  uint16_t* v_cache = nullptr;
};

/** Every tensor the kernels read, checked by name, dtype, shape and alignment. */
struct ModelSources {
  SourceTriple embed;  ///< (vocab, d): the token's row, and the tied LM head
  const uint16_t* final_norm = nullptr;
  std::vector<LayerSources> layers;
};

/** The solution's own limits: an empty string when it supports the config, else why not. */
using UnsupportedFn = std::string (*)(const nibble_decode_config& c);

/** The model handed to build_model, checked: struct_size, the task name, the config (positive,
 *  GQA, `unsupported` (NOT_SUPPORTED with its reason), 32-bit row indexing) and every tensor. */
ModelSources model_sources(const nibble_decode_model* model, UnsupportedFn unsupported);

/** Throws NOT_SUPPORTED unless the current device is sm_90 (the kernels are sm_90a code). */
void require_sm90();

/** One matrix to repack (repack.cu): its sources stacked by `map`, K inputs, where its descriptor
 *  goes, its unit order (PackedMatrix::chunk; 0: tile-major). */
struct RepackJob {
  std::vector<SourceTriple> src;
  RowMap map = RowMap::Concat;
  int k = 0;
  PackedMatrix* dst = nullptr;
  int chunk = 0;
};

/** Every job's matrix repacked into one allocation (weights, each matrix 256-byte aligned), queued on
 *  stream; each dst filled (w, tiles, groups, rows, chunk) and checked with gemv_plan_fits
 *  (NOT_SUPPORTED: too many units for the GEMV's 32-bit counts) before its repack is queued. */
void repack_all(std::vector<RepackJob>& jobs, DeviceAlloc& weights, cudaStream_t stream);

/** One allocation of the given byte sizes, each piece 256-byte aligned: the pieces, in order. */
std::vector<char*> carve(DeviceAlloc& a, const std::vector<size_t>& sizes);

/** A trace file for writing (NIBBLE_MK_TRACE, NIBBLE_DF_TRACE: `var`), or nullptr after saying on
 *  stderr why not: under nibble grade the child's sandbox lets it write only under /dev, so a trace
 *  outside /dev/shm cannot be written there. */
FILE* open_trace(const std::string& path, const char* var);

/** (max_seq, hd/2) {cos, sin} of angle pos theta^(-2i/hd), computed in double, rounded once. */
std::vector<float2> rope_table(const nibble_decode_config& c);

/** decode_step's tensors checked against the config: token_ids (batch,) int64 and logits (batch,
 *  vocab) fp32, both on the GPU, pos in [0, max_seq). */
struct StepIo {
  const int64_t* tokens = nullptr;
  float* logits = nullptr;
};
StepIo step_io(const nibble_decode_config& c, const nibble_tensor* token_ids, int32_t pos, nibble_tensor* logits);

}  // namespace nibble::megakernel::host
