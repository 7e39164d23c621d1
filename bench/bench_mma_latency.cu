// bench_mma_latency.cu: latency and throughput of the two mma.sync shapes the int4 GEMVs use
// (issue 6; solutions/decode/megakernel/NOTES.md "not yet checked (3)"): IMMA m16n8k32 u8 x s8 -> s32
// (the megakernel since v5) and HMMA m16n8k16 bf16 -> fp32 (v4, the unfused solution).
//
//   BM_MmaLatency/<0 int8 | 1 bf16>      one warp, one dependent chain of 8192 mma (each waits for
//                                        the previous C): counter cycles_per_mma = the latency
//   BM_MmaThroughput/<kind>/<chains>     one block of 16 warps per SM (the megakernel's shape),
//                                        `chains` independent accumulators per warp: counter
//                                        mma_per_cycle_per_sm = issue rate the tensor cores sustain
// Cycles come from clock64() inside the kernel (the SM clock, per block; max over blocks), the
// benchmark's time from CUDA events around the launch (UseManualTime). The operands are arbitrary
// registers (the timing does not depend on their values); the results are kept live in `sink`.
//
// Run: build-hopper/bin/bench_mma_latency [--benchmark_format=json]
#include <benchmark/benchmark.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "bench_util.h"

namespace {

constexpr int kIters = 8192;
constexpr int kMaxChains = 8;

__device__ __forceinline__ void mma_int8(uint32_t (&c)[4], uint32_t a, uint32_t b) {
  asm("mma.sync.aligned.m16n8k32.row.col.s32.u8.s8.s32 {%0,%1,%2,%3}, {%4,%4,%4,%4}, {%5,%5}, {%0,%1,%2,%3};"
      : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
      : "r"(a), "r"(b));
}

__device__ __forceinline__ void mma_bf16(uint32_t (&c)[4], uint32_t a, uint32_t b) {
  asm("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%4,%4,%4}, {%5,%5}, {%0,%1,%2,%3};"
      : "+r"(c[0]), "+r"(c[1]), "+r"(c[2]), "+r"(c[3])
      : "r"(a), "r"(b));
}

/** CHAINS independent accumulators per warp, kIters mma each; block 0's thread 0 and every block's
 *  cycles (max) go to cycles[blockIdx.x]. */
template <bool kInt8, int CHAINS>
__global__ void mma_kernel(long long* cycles, uint32_t* sink) {
  const uint32_t a = 0x01010101u * (threadIdx.x & 7), b = 0x3F803F80u ^ threadIdx.x;
  uint32_t c[CHAINS][4] = {};
  __syncthreads();
  const long long t0 = clock64();
#pragma unroll 4
  for (int i = 0; i < kIters; ++i)
#pragma unroll
    for (int k = 0; k < CHAINS; ++k) {
      if constexpr (kInt8)
        mma_int8(c[k], a, b);
      else
        mma_bf16(c[k], a, b);
    }
  __syncthreads();
  const long long t1 = clock64();
  uint32_t x = 0;
#pragma unroll
  for (int k = 0; k < CHAINS; ++k) x ^= c[k][0] ^ c[k][1] ^ c[k][2] ^ c[k][3];
  sink[blockIdx.x * blockDim.x + threadIdx.x] = x;
  if (threadIdx.x == 0) cycles[blockIdx.x] = t1 - t0;
}

template <bool kInt8>
void launch(int chains, int blocks, int threads, long long* cycles, uint32_t* sink) {
  switch (chains) {
    case 1: mma_kernel<kInt8, 1><<<blocks, threads>>>(cycles, sink); break;
    case 2: mma_kernel<kInt8, 2><<<blocks, threads>>>(cycles, sink); break;
    case 4: mma_kernel<kInt8, 4><<<blocks, threads>>>(cycles, sink); break;
    case 8: mma_kernel<kInt8, 8><<<blocks, threads>>>(cycles, sink); break;
    default: throw std::invalid_argument("chains must be 1, 2, 4 or 8");
  }
  BENCH_CUDA(cudaGetLastError());
}

/** Runs the kernel `state` asks for; returns the max cycles over blocks of the last launch. */
long long run(benchmark::State& state, bool int8, int chains, int blocks, int threads) {
  long long *cycles = nullptr;
  uint32_t* sink = nullptr;
  cudaEvent_t e0, e1;
  BENCH_CUDA(cudaMalloc(&cycles, sizeof(long long) * size_t(blocks)));
  BENCH_CUDA(cudaMalloc(&sink, sizeof(uint32_t) * size_t(blocks) * threads));
  BENCH_CUDA(cudaEventCreate(&e0));
  BENCH_CUDA(cudaEventCreate(&e1));
  auto go = [&] { int8 ? launch<true>(chains, blocks, threads, cycles, sink) : launch<false>(chains, blocks, threads, cycles, sink); };
  go();  // warm-up
  BENCH_CUDA(cudaDeviceSynchronize());
  for (auto _ : state) {
    BENCH_CUDA(cudaEventRecord(e0));
    go();
    BENCH_CUDA(cudaEventRecord(e1));
    BENCH_CUDA(cudaEventSynchronize(e1));
    float ms = 0;
    BENCH_CUDA(cudaEventElapsedTime(&ms, e0, e1));
    state.SetIterationTime(ms / 1e3);
  }
  std::vector<long long> h(static_cast<size_t>(blocks));
  BENCH_CUDA(cudaMemcpy(h.data(), cycles, h.size() * sizeof(long long), cudaMemcpyDeviceToHost));
  long long worst = 0;
  for (long long v : h) worst = v > worst ? v : worst;
  cudaEventDestroy(e0);
  cudaEventDestroy(e1);
  cudaFree(cycles);
  cudaFree(sink);
  return worst;
}

void BM_MmaLatency(benchmark::State& state) {
  try {
    const long long cyc = run(state, state.range(0) == 0, 1, 1, 32);
    state.counters["cycles_per_mma"] = double(cyc) / kIters;
    state.SetLabel(state.range(0) == 0 ? "IMMA m16n8k32 u8 x s8" : "HMMA m16n8k16 bf16");
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
  }
}

void BM_MmaThroughput(benchmark::State& state) {
  try {
    int dev = 0, sms = 0;
    BENCH_CUDA(cudaGetDevice(&dev));
    BENCH_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    const int chains = int(state.range(1)), warps = 16;
    const long long cyc = run(state, state.range(0) == 0, chains, sms, 32 * warps);
    state.counters["mma_per_cycle_per_sm"] = double(warps) * chains * kIters / double(cyc);
    state.SetLabel(state.range(0) == 0 ? "IMMA m16n8k32 u8 x s8" : "HMMA m16n8k16 bf16");
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
  }
}

}  // namespace

BENCHMARK(BM_MmaLatency)->Arg(0)->Arg(1)->UseManualTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_MmaThroughput)
    ->ArgsProduct({{0, 1}, {1, 2, 4, kMaxChains}})
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond);
BENCHMARK_MAIN();
