// bench_fence_latency.cu: what a bulk-copy weight stream in flight does to the latency of the small
// synchronising operations of the megakernel (issue 6; solutions/decode/megakernel/NOTES.md "v15"): the
// grid barrier's release (red.release.gpu), a fence, an L2 load, an atomic, a cp.async wait.
//
// One block of 16 warps per SM (the megakernel's shape). Each round, every warp but the last
// issues `stages` bulk copies (cp.async.bulk, 2176 bytes each: one ring stage of the megakernel,
// from fresh DRAM addresses, L2 evict-first) into its own shared memory, as the weight ring does
// when a GEMV ends; after a block barrier (every copy issued), lane 0 of warp `who` (0: a warp that
// issued copies, 15: one that did not) times one operation with clock64(); then every warp waits
// for its copies. Counters (means over blocks and rounds, SM cycles): op_cycles = the operation;
// land_cycles = from the issue to warp 1's last copy landing (how long the stream in flight takes
// to arrive; warp 1 is never `who`).
//
// The stream may also be (kind 1) cp.async.cg 16-byte copies from every lane of the issuing warps
// (LDGSTS, L2 only, completing per thread) or (kind 2) 16-byte ld.global.nc loads into
// registers, consumed after the timed operation: does a fence from a warp that issued nothing wait
// for those too, as it does for the copy engine's bulk copies (kind 0)?
//
//   BM_OpUnderStream/<op>/<stages>/<who>/<kind>
//     op 0 nothing, 1 red.release.gpu (the barrier's arrival), 2 fence.acq_rel.gpu,
//        3 ld.acquire.gpu of an L2-resident word (the barrier's poll), 4 ld.global.cg.v4 16 bytes
//        (L2-resident; the input builds' loads), 5 cp.async 16 bytes (L2-resident) + wait_all
//        (the gains' copy), 6 atomicAdd with its return value (L2 round trip), 7 every warp's
//        lanes 28..31 add a float4 into one shared 12 KB vector (red.global.add.v4.f32, as the
//        GEMV flushes do), then __syncthreads and red.release.gpu by lane 0 of warp `who` (the
//        barrier after a GEMV stage), 8 the same without the adds
//
// Run: build-hopper/bin/bench_fence_latency [--benchmark_format=json]
#include <benchmark/benchmark.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

#include "bench_util.h"
#include "sm90_stream.cuh"

namespace {

namespace sol = nibble::sol;
namespace bench = nibble::bench;

constexpr int kWarps = 16;
constexpr int kMaxStages = 3;
constexpr uint32_t kStageBytes = 2176;  // the megakernel's ring stage: 2 units of 1088 bytes
constexpr int kRounds = 32;
constexpr size_t kSrcBytes = size_t(1) << 30;  // larger than L2: every round reads DRAM

struct Probe {
  long long op = 0, land = 0;
};

__global__ void __launch_bounds__(kWarps * 32, 1)
    probe_kernel(const unsigned char* src, unsigned* hot, Probe* out, int op, int stages, int who, int kind) {
  extern __shared__ __align__(16) unsigned char smem[];
  __shared__ __align__(8) uint64_t bars[kWarps * kMaxStages];
  __shared__ uint4 sink_s[kWarps];
  const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31;
  if (lane == 0)
    for (int s = 0; s < kMaxStages; ++s) sol::mbar_init(&bars[warp * kMaxStages + s], 1);
  sol::mbar_init_fence();
  __syncthreads();
  const uint64_t policy = sol::policy_evict_first();
  const bool issues = warp != kWarps - 1 && stages > 0;
  long long op_sum = 0, land_sum = 0;
  uint32_t acc = 0;
  constexpr int kVecs = int(kStageBytes / 16);           // 136 16-byte pieces per stage
  constexpr int kPerLane = (kVecs + 31) / 32;            // 5 (the last round 8 lanes)
  uint4 regs[kMaxStages][kPerLane];                      // kind 2's loads
  for (int r = 0; r < kRounds; ++r) {
    __syncthreads();
    const long long t_issue = clock64();
    if (issues && kind != 0) {
      for (int s = 0; s < kMaxStages; ++s) {
        if (s >= stages) break;
        const size_t stage_id = ((size_t(r) * gridDim.x + blockIdx.x) * kWarps + warp) * kMaxStages + s;
        const size_t off = bench::stream_offset(stage_id, kStageBytes, kSrcBytes);
#pragma unroll
        for (int i = 0; i < kPerLane; ++i) {
          const int v = i * 32 + lane;
          if (v >= kVecs) break;
          if (kind == 1) {
            asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(sol::smem_addr(
                             smem + (size_t(warp) * kMaxStages + s) * kStageBytes + 16 * v)),
                         "l"(src + off + 16 * v)
                         : "memory");
          } else {
            const uint4* p = reinterpret_cast<const uint4*>(src + off) + v;
            asm volatile("ld.global.nc.v4.u32 {%0, %1, %2, %3}, [%4];"
                         : "=r"(regs[s][i].x), "=r"(regs[s][i].y), "=r"(regs[s][i].z), "=r"(regs[s][i].w)
                         : "l"(p));
          }
        }
      }
      if (kind == 1) asm volatile("cp.async.commit_group;" ::: "memory");
    }
    if (issues && kind == 0 && lane == 0) {
      for (int s = 0; s < stages; ++s) {
        const size_t stage_id = ((size_t(r) * gridDim.x + blockIdx.x) * kWarps + warp) * kMaxStages + s;
        bench::stream_issue(sol::smem_addr(smem + (size_t(warp) * kMaxStages + s) * kStageBytes),
                            sol::smem_addr(&bars[warp * kMaxStages + s]), src, stage_id, kStageBytes, kSrcBytes, policy);
      }
    }
    __syncthreads();  // every warp's copies issued before the timed operation
    if (op >= 7) {
      // The end of a GEMV stage: (op 7) lanes 28..31 of every warp add one float4 into a vector
      // every block adds into (768 float4: the decode step's h, as the flushes do), then the block
      // meets and lane 0 of warp `who` releases, as grid_arrive does.
      if (op == 7 && lane >= 28) {
        float* h = reinterpret_cast<float*>(hot + 1024);
        const int i = ((int(blockIdx.x) * kWarps + warp) * 4 + lane - 28) % 768;
        asm volatile("red.global.add.v4.f32 [%0], {%1, %2, %3, %4};" ::"l"(h + 4 * i), "f"(1.f), "f"(1.f), "f"(1.f),
                     "f"(1.f)
                     : "memory");
      }
      __syncthreads();
      if (warp == who && lane == 0) {
        const long long t0 = clock64();
        asm volatile("red.release.gpu.global.add.u32 [%0], 1;" ::"l"(hot + 32 * (blockIdx.x % 16)) : "memory");
        op_sum += clock64() - t0;
      }
    } else if (warp == who && lane == 0) {
      unsigned* w = hot + 32 * (blockIdx.x % 16);  // a 128-byte line shared by every 16th block, L2-resident
      const long long t0 = clock64();
      switch (op) {
        case 1:
          asm volatile("red.release.gpu.global.add.u32 [%0], 1;" ::"l"(w) : "memory");
          break;
        case 2:
          asm volatile("fence.acq_rel.gpu;" ::: "memory");
          break;
        case 3: {
          unsigned v;
          asm volatile("ld.acquire.gpu.global.u32 %0, [%1];" : "=r"(v) : "l"(w) : "memory");
          acc += v;
          break;
        }
        case 4: {
          uint32_t a, b, c, d;
          asm volatile("ld.global.cg.v4.u32 {%0, %1, %2, %3}, [%4];"
                       : "=r"(a), "=r"(b), "=r"(c), "=r"(d)
                       : "l"(w + 4)
                       : "memory");
          acc += a ^ b ^ c ^ d;
          break;
        }
        case 5:
          asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(sol::smem_addr(&sink_s[warp])), "l"(w + 8)
                       : "memory");
          asm volatile("cp.async.commit_group;" ::: "memory");
          asm volatile("cp.async.wait_all;" ::: "memory");
          acc += sink_s[warp].x;
          break;
        case 6:
          acc += atomicAdd(w + 12, 1u);
          break;
        default:
          break;
      }
      op_sum += clock64() - t0;
    }
    if (issues && kind == 0)
      for (int s = 0; s < stages; ++s)
        sol::mbar_wait(sol::smem_addr(&bars[warp * kMaxStages + s]), uint32_t(r & 1));
    if (issues && kind == 1) {
      asm volatile("cp.async.wait_all;" ::: "memory");
      __syncwarp();
    }
    if (issues && kind == 2) {
      for (int s = 0; s < kMaxStages; ++s) {
        if (s >= stages) break;
#pragma unroll
        for (int i = 0; i < kPerLane; ++i)
          if (i * 32 + lane < kVecs) acc += regs[s][i].x ^ regs[s][i].y ^ regs[s][i].z ^ regs[s][i].w;
      }
      __syncwarp();
    }
    if (warp == 1 && lane == 0) land_sum += clock64() - t_issue;
  }
  __syncthreads();
  if (warp == 1 && lane == 0) out[blockIdx.x].land = stages > 0 ? land_sum / kRounds : 0;
  if (warp == who && lane == 0) out[blockIdx.x].op = op_sum / kRounds;
  if (acc == 0x12345678u) hot[1023] = acc;  // keeps the probed values live
}

void BM_OpUnderStream(benchmark::State& state) {
  const int op = int(state.range(0)), stages = int(state.range(1)), who = int(state.range(2)),
            kind = int(state.range(3));
  try {
    int dev = 0, sms = 0;
    BENCH_CUDA(cudaGetDevice(&dev));
    BENCH_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
    Device src(kSrcBytes), hot(4096 + 768 * 16), out(size_t(sms) * sizeof(Probe));
    BENCH_CUDA(cudaMemset(src.p, 1, kSrcBytes));
    BENCH_CUDA(cudaMemset(hot.p, 0, 4096 + 768 * 16));
    // more than half of the SM's 228 KB, so that one block runs per SM (the megakernel's shape)
    const size_t smem = std::max(size_t(kWarps) * kMaxStages * kStageBytes, size_t(116) * 1024);
    BENCH_CUDA(cudaFuncSetAttribute(probe_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
    cudaEvent_t e0, e1;
    BENCH_CUDA(cudaEventCreate(&e0));
    BENCH_CUDA(cudaEventCreate(&e1));
    std::vector<Probe> host(sms);
    double op_c = 0, land_c = 0;
    int n = 0;
    for (auto _ : state) {
      BENCH_CUDA(cudaEventRecord(e0));
      probe_kernel<<<sms, kWarps * 32, smem>>>(static_cast<const unsigned char*>(src.p), static_cast<unsigned*>(hot.p),
                                               static_cast<Probe*>(out.p), op, stages, who, kind);
      BENCH_CUDA(cudaGetLastError());
      BENCH_CUDA(cudaEventRecord(e1));
      BENCH_CUDA(cudaEventSynchronize(e1));
      float ms = 0;
      BENCH_CUDA(cudaEventElapsedTime(&ms, e0, e1));
      state.SetIterationTime(ms * 1e-3);
      BENCH_CUDA(cudaMemcpy(host.data(), out.p, host.size() * sizeof(Probe), cudaMemcpyDeviceToHost));
      for (const Probe& p : host) {
        op_c += double(p.op);
        land_c += double(p.land);
      }
      n += sms;
    }
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    state.counters["op_cycles"] = op_c / n;
    state.counters["land_cycles"] = land_c / n;
    state.counters["inflight_kb_per_sm"] = double(stages) * (kWarps - 1) * kStageBytes / 1024.0;
  } catch (const std::exception& e) {
    state.SkipWithError(e.what());
  }
}

}  // namespace

BENCHMARK(BM_OpUnderStream)
    ->ArgsProduct({{0, 1, 2, 3, 4, 5, 6, 7, 8}, {0, 1, 3}, {0, 15}, {0}})
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond)
    ->Iterations(20);
// the other stream kinds, for the operations that matter at a stage boundary
BENCHMARK(BM_OpUnderStream)
    ->ArgsProduct({{0, 1, 2, 4}, {3}, {0, 15}, {1, 2}})
    ->UseManualTime()
    ->Unit(benchmark::kMicrosecond)
    ->Iterations(20);
BENCHMARK_MAIN();
