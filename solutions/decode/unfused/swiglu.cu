// swiglu.cu: out = silu(gate) * up = gate / (1 + exp(-gate)) * up, the Llama MLP's activation.
//
// Spec (seed / nibble.h): h += down(silu(gate a) * up a). fp32 in, fp32 out.
// Shapes: gate, up, out (ffn) fp32 (8192 in the full config).
// Bytes moved: 3 * ffn * 4 (98 KB; latency-bound).
#include <cuda_runtime.h>

#include <cmath>

#include "kernels.h"

namespace nibble::unfused {
namespace {

constexpr int kThreads = 256;

__global__ void __launch_bounds__(kThreads)
    swiglu_kernel(const float* __restrict__ gate, const float* __restrict__ up, int n, float* __restrict__ out) {
  for (int i = blockIdx.x * kThreads + threadIdx.x; i < n; i += gridDim.x * kThreads) {
    const float g = gate[i];
    // expf(-g) overflows to +inf for g < -88: g / inf = -0, the limit of silu.
    out[i] = g / (1.0f + expf(-g)) * up[i];
  }
}

}  // namespace

cudaError_t launch_swiglu(const float* gate, const float* up, int n, float* out, cudaStream_t stream) {
  if (!gate || !up || !out || n <= 0) return cudaErrorInvalidValue;
  const int blocks = (n + kThreads - 1) / kThreads;
  swiglu_kernel<<<blocks, kThreads, 0, stream>>>(gate, up, n, out);
  return cudaGetLastError();
}

}  // namespace nibble::unfused
