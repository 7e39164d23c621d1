// gemm_problem.h: the nibble_gemm_problem a GEMM solution's prepare receives, filled from one
// config: the grader's session and the GPU tests that call solutions directly build it here.
#pragma once

#include <cstdint>
#include <vector>

#include "fixtures/gemm_fp4/gemm_config.h"
#include "nibble/nibble_gemm.h"

namespace nibble {

/** The problem of `cfg` (M, N, K, block, scale format from its format) over `named` (W.packed,
 *  W.scale and, for NVFP4, W.global_scale; not copied: the problem points into it), with
 *  `global_scale` (NVFP4; 1 for MXFP4) and the output dtype `c_dtype` (NIBBLE_GEMM_OUTPUT_*).
 *  `cfg` must outlive the problem (task and config names point into it). */
inline nibble_gemm_problem gemm_problem(const GemmConfig& cfg, const std::vector<nibble_named_tensor>& named,
                                        float global_scale, int32_t c_dtype) {
  const bool nvfp4 = cfg.format == Fp4Format::Nvfp4;
  nibble_gemm_problem p{};
  p.struct_size = sizeof(p);
  p.task = cfg.task.c_str();
  p.config_name = cfg.name.c_str();
  p.M = cfg.M;
  p.N = cfg.N;
  p.K = cfg.K;
  p.block = cfg.block;
  p.scale_format = nvfp4 ? NIBBLE_GEMM_SCALE_E4M3FN : NIBBLE_GEMM_SCALE_E8M0;
  p.global_scale = nvfp4 ? global_scale : 1.0f;
  p.c_dtype = c_dtype;
  p.tensors = named.data();
  p.num_tensors = int32_t(named.size());
  return p;
}

}  // namespace nibble
