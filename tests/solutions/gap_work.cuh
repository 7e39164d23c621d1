// gap_work.cuh: the work a hostile solution does between the grader's timed calls (the decode rows
// `gap_work` and `gap_copy` in tests/hostile/hostile.cu, the GEMM one in gemm_hostile.cu): a thread of its own
// that launches a small kernel on a private stream every ~20 us until told to stop, so some of its
// kernels land between timed calls, outside every timing window, where a real cheat would read the
// next call's weights back into L2 after the grader's flush. The graders must grade it InvalidTiming.
#pragma once

#include <cuda_runtime.h>

#include <atomic>
#include <chrono>
#include <thread>

namespace nibble_hostile {

__global__ void gap_kernel(unsigned* p) {
  if (threadIdx.x == 0) atomicAdd(p, 1u);
}

/** Until *stop: one gap_kernel (or, with `copies`, a 1 MiB device-to-device cudaMemcpyAsync: a
 *  copy engine's work, no kernel) on a private stream every ~20 us (errors end the loop quietly:
 *  the grader's checks, not this thread, decide the grade). Run it on a std::thread. */
inline void launch_forever(std::atomic<bool>* stop, bool copies = false) {
  constexpr size_t kCopyBytes = size_t(1) << 20;
  cudaStream_t st = nullptr;
  unsigned* counter = nullptr;
  char* buf = nullptr;
  if (cudaStreamCreateWithFlags(&st, cudaStreamNonBlocking) != cudaSuccess) return;
  if (cudaMalloc(&counter, sizeof(unsigned)) == cudaSuccess && (!copies || cudaMalloc(&buf, 2 * kCopyBytes) == cudaSuccess)) {
    while (!stop->load()) {
      if (copies) {
        if (cudaMemcpyAsync(buf + kCopyBytes, buf, kCopyBytes, cudaMemcpyDeviceToDevice, st) != cudaSuccess) break;
      } else {
        gap_kernel<<<1, 32, 0, st>>>(counter);
        if (cudaGetLastError() != cudaSuccess) break;
      }
      std::this_thread::sleep_for(std::chrono::microseconds(20));
    }
    cudaStreamSynchronize(st);
  }
  cudaFree(counter);
  cudaFree(buf);
  cudaStreamDestroy(st);
}

}  // namespace nibble_hostile
