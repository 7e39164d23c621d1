// gemm_hostile.cu: GEMM cheats the grader must catch, one .so per behaviour (tests/harness.cmake), on
// top of each GEMM task's baseline, compiled again with its exports renamed: the FP4 tasks'
// (solutions/gemm_fp4/baseline, gemm_baseline_*) and gemm-w4a16-int4's plain-layout one
// (solutions/int4_gemm/baseline, int4_baseline_*), picked by the problem's task. test_grade_gpu's
// GradeGemmGpu cases grade them on every GEMM task.
//   HOSTILE_GEMM_REPLAY    (libhostile_gemm_replay.so) runs the baseline on its first call only,
//                          keeps that C and A, and answers every later call from them: row m of C
//                          is the kept row, negated when the first nonzero element of A's row m
//                          changed sign. Exact whenever a call's A is the first one's with some rows
//                          negated (the grader's replay guard before it flipped single elements),
//                          and it costs one read of A instead of the GEMM. Expected: Incorrect.
//   HOSTILE_GEMM_GAP_WORK  (libhostile_gemm_gap_work.so) computes every call honestly, but from its
//                          first call on a thread of its own launches a small kernel on a private
//                          stream every ~20 us until teardown, so some run between timed calls,
//                          outside every timing window (where a real cheat would read W back into L2
//                          after the flush). Expected: InvalidTiming.
#include <cuda_runtime.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <memory>
#include <thread>

#include "nibble/nibble_gemm.h"
#include "solutions/common/abi_util.h"
#include "solutions/common/gemm_abi_util.h"
#include "gap_work.cuh"

extern "C" {
nibble_status gemm_baseline_prepare(const nibble_gemm_problem*, void*, void**, nibble_error*);
nibble_status gemm_baseline_run(void*, const nibble_tensor*, nibble_tensor*, void*, nibble_error*);
nibble_status gemm_baseline_teardown(void*, void*, nibble_error*);
nibble_status int4_baseline_prepare(const nibble_gemm_problem*, void*, void**, nibble_error*);
nibble_status int4_baseline_run(void*, const nibble_tensor*, nibble_tensor*, void*, nibble_error*);
nibble_status int4_baseline_teardown(void*, void*, nibble_error*);
}

namespace {

struct CudaFree {
  void operator()(void* p) const { cudaFree(p); }
};
using DevicePtr = std::unique_ptr<void, CudaFree>;

DevicePtr device_alloc(size_t bytes) {
  void* p = nullptr;
  SOL_CUDA(cudaMalloc(&p, bytes));
  return DevicePtr(p);
}

struct Hostile {
  void* inner = nullptr;
  // The task's baseline: the FP4 one unless prepare saw gemm-w4a16-int4.
  nibble_status (*inner_run)(void*, const nibble_tensor*, nibble_tensor*, void*, nibble_error*) = gemm_baseline_run;
  nibble_status (*inner_teardown)(void*, void*, nibble_error*) = gemm_baseline_teardown;
  int64_t M = 0, N = 0, K = 0;
  int calls = 0;
  DevicePtr a0, c0;  // the first call's A (bf16) and C (fp32)
  // HOSTILE_GEMM_GAP_WORK: the launching thread and its stop flag.
  std::thread gap_thread;
  std::atomic<bool> stop{false};
};

#ifndef HOSTILE_GEMM_GAP_WORK
/** C[m, :] = +-C0[m, :], the sign from the first nonzero element of A's row m against A0's. One
 *  block per row. */
__global__ void replay_kernel(const uint16_t* A, const uint16_t* A0, const float* C0, float* C, int64_t N, int64_t K) {
  const int64_t m = blockIdx.x;
  __shared__ float sign;
  if (threadIdx.x == 0) {
    sign = 1.0f;
    for (int64_t k = 0; k < K; ++k)
      if (A0[m * K + k] & 0x7FFF) {
        sign = (A[m * K + k] ^ A0[m * K + k]) & 0x8000 ? -1.0f : 1.0f;
        break;
      }
  }
  __syncthreads();
  for (int64_t n = threadIdx.x; n < N; n += blockDim.x) C[m * N + n] = sign * C0[m * N + n];
}
#endif

}  // namespace

extern "C" {

NIBBLE_EXPORT int32_t nibble_abi_version(void) { return NIBBLE_ABI_VERSION; }
NIBBLE_EXPORT int32_t nibble_gemm_abi_version(void) { return NIBBLE_GEMM_ABI_VERSION; }
NIBBLE_EXPORT const char* nibble_solution_name(void) { return HOSTILE_NAME; }

NIBBLE_EXPORT nibble_status nibble_gemm_prepare(const nibble_gemm_problem* problem, void* stream, void** handle,
                                                nibble_error* err) {
  return nibble::sol::abi_guard(err, [&] {
    auto r = std::make_unique<Hostile>();
    if (problem && problem->task && std::strcmp(problem->task, nibble::sol::kInt4GemmTaskName) == 0) {
      const nibble::sol::Int4Problem g = nibble::sol::parse_int4_problem(problem, NIBBLE_INT4_LAYOUT_PLAIN);
      r->M = g.M;
      r->N = g.N;
      r->K = g.K;
      r->inner_run = int4_baseline_run;
      r->inner_teardown = int4_baseline_teardown;
    } else {
      const nibble::sol::GemmProblem g = nibble::sol::parse_gemm_problem(problem);
      r->M = g.M;
      r->N = g.N;
      r->K = g.K;
    }
    const nibble_status s = (r->inner_run == int4_baseline_run ? int4_baseline_prepare : gemm_baseline_prepare)(
        problem, stream, &r->inner, err);
    if (s != NIBBLE_OK) throw nibble::sol::AbiFailure(s, "baseline prepare failed");
    r->a0 = device_alloc(size_t(r->M * r->K) * 2);
    r->c0 = device_alloc(size_t(r->M * r->N) * 4);
    *handle = r.release();
  });
}

NIBBLE_EXPORT nibble_status nibble_gemm_run(void* handle, const nibble_tensor* A, nibble_tensor* C, void* stream,
                                            nibble_error* err) {
  return nibble::sol::abi_guard(err, [&] {
    auto* r = static_cast<Hostile*>(handle);
#ifdef HOSTILE_GEMM_GAP_WORK
    if (r->calls++ == 0) r->gap_thread = std::thread(nibble_hostile::launch_forever, &r->stop, false);
    const nibble_status st = r->inner_run(r->inner, A, C, stream, err);
    if (st != NIBBLE_OK) throw nibble::sol::AbiFailure(st, "baseline run failed");
#else
    auto s = static_cast<cudaStream_t>(stream);
    if (r->calls++ == 0) {
      const nibble_status st = r->inner_run(r->inner, A, C, stream, err);
      if (st != NIBBLE_OK) throw nibble::sol::AbiFailure(st, "baseline run failed");
      SOL_CUDA(cudaMemcpyAsync(r->a0.get(), A->data, size_t(r->M * r->K) * 2, cudaMemcpyDeviceToDevice, s));
      SOL_CUDA(cudaMemcpyAsync(r->c0.get(), C->data, size_t(r->M * r->N) * 4, cudaMemcpyDeviceToDevice, s));
      return;
    }
    replay_kernel<<<unsigned(r->M), 256, 0, s>>>(static_cast<const uint16_t*>(A->data),
                                                  static_cast<const uint16_t*>(r->a0.get()),
                                                  static_cast<const float*>(r->c0.get()), static_cast<float*>(C->data),
                                                  r->N, r->K);
    SOL_CHECK_LAUNCH();
#endif
  });
}

NIBBLE_EXPORT nibble_status nibble_gemm_teardown(void* handle, void* stream, nibble_error* err) {
  std::unique_ptr<Hostile> r(static_cast<Hostile*>(handle));
  if (!r) return NIBBLE_OK;
  r->stop = true;
  if (r->gap_thread.joinable()) r->gap_thread.join();
  return r->inner_teardown(r->inner, stream, err);
}

}  // extern "C"
