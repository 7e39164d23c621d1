// bench_megakernel_blocks.cu: the megakernel's building blocks in isolation (issue 6).
//
//   BM_Int4GemvAllLayers   the int4 GEMV stage (solutions/decode/megakernel/int4_mma_gemv.cuh) over every
//                          projection of all 28 layers at full size (qkv 5120x3072, o 3072x3072,
//                          gate|up 16384x3072, down 3072x8192): 1.476 GB of codes + 92 MB of
//                          metadata per iteration (o and down in the decode kernel's chunked unit
//                          orders), one launch of one block per SM, the stage code
//                          the decode kernel runs (prefetching matrix i+1 before finishing i).
//   BM_Attention2048       the attention stage (attention.cuh): RoPE + KV append + attention of
//                          24 query / 8 KV heads of 128 over 2049 slots, one layer, L2 flushed
//                          before each launch: 8.4 MB of cache per launch.
// Timed with CUDA events around the launch (UseManualTime); counters: bytes per iteration and
// TB/s (bytes / manual time). The weights are random bytes in the repacked layout (the timing
// does not depend on their values, only that they are not zeros: METHOD.md).
//
// Run: build-hopper/bin/bench_megakernel_blocks [--benchmark_format=json] [--benchmark_min_time=0.2s]
#include <benchmark/benchmark.h>
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstdio>
#include <stdexcept>
#include <string>
#include <vector>

#include "megakernel.h"

#include "bench_util.h"

namespace mk = nibble::megakernel;

namespace {

/** Fill n words with a hash of their index; with `units`, as repacked units (kUnitStride bytes
 *  each): varied, non-zero codes in each unit's first 1024 bytes, and in its metadata words a bf16
 *  scale in [2^-8, 2^-7) and a zero point 0..15. */
__global__ void fill_kernel(uint32_t* p, size_t n, uint32_t seed, bool units) {
  constexpr size_t kWords = mk::kUnitStride / 4, kCodeWords = mk::kUnitCodeBytes / 4;
  for (size_t i = size_t(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += size_t(gridDim.x) * blockDim.x) {
    uint32_t x = uint32_t(i) * 0x9E3779B1u ^ seed;
    x ^= x >> 15;
    x *= 0x2C1B3C6Du;
    x ^= x >> 12;
    p[i] = units && i % kWords >= kCodeWords ? ((0x3B80u | (x >> 25)) << 16) | (x & 0xFu) : x;
  }
}

void fill(void* p, size_t bytes, uint32_t seed, bool units) {
  fill_kernel<<<1024, 256>>>(static_cast<uint32_t*>(p), bytes / 4, seed, units);
  BENCH_CUDA(cudaGetLastError());
}

struct Events {
  cudaEvent_t a = nullptr, b = nullptr;
  Events() {
    BENCH_CUDA(cudaEventCreate(&a));
    BENCH_CUDA(cudaEventCreate(&b));
  }
  ~Events() {
    cudaEventDestroy(a);
    cudaEventDestroy(b);
  }
  double seconds() {
    BENCH_CUDA(cudaEventSynchronize(b));
    float ms = 0;
    BENCH_CUDA(cudaEventElapsedTime(&ms, a, b));
    return ms * 1e-3;
  }
};

constexpr int kLayers = 28, kD = 3072, kFfn = 8192, kNq = 24, kNkv = 8, kHd = 128, kMaxSeq = 4096;

void BM_Int4GemvAllLayers(benchmark::State& state) {
  struct Shape {
    int rows, k, chunk;  // chunk: the unit order build_model gives it (PackedMatrix::chunk)
  };
  const Shape shapes[4] = {
      {kNq * kHd + 2 * kNkv * kHd, kD, 0}, {kD, kNq * kHd, 2}, {2 * kFfn, kD, 0}, {kD, kFfn, 4}};
  size_t wbytes = 0;
  for (const Shape& s : shapes) wbytes += mk::packed_weight_bytes(s.rows, s.k);
  Device w(wbytes * kLayers), x(size_t(kFfn) * 4), y(size_t(2 * kFfn) * 4 * 4 * kLayers);
  fill(w.p, wbytes * kLayers, 1u, true);
  std::vector<float> hx(kFfn);
  for (int i = 0; i < kFfn; ++i) hx[size_t(i)] = std::sin(0.37f * float(i));
  BENCH_CUDA(cudaMemcpy(x.p, hx.data(), hx.size() * 4, cudaMemcpyHostToDevice));

  std::vector<mk::PackedMatrix> mats;
  std::vector<float*> ys;
  size_t wo = 0, yo = 0;
  for (int l = 0; l < kLayers; ++l)
    for (const Shape& s : shapes) {
      mk::PackedMatrix pm;
      pm.w = reinterpret_cast<const uint4*>(static_cast<char*>(w.p) + wo);
      pm.rows = s.rows;
      pm.chunk = s.chunk;
      pm.tiles = (s.rows + 15) / 16;
      pm.groups = s.k / 128;
      mats.push_back(pm);
      ys.push_back(static_cast<float*>(y.p) + yo);
      wo += mk::packed_weight_bytes(s.rows, s.k);
      yo += size_t(s.rows);
    }
  // Every warp's plan of every matrix, as build_model computes the decode kernel's.
  const int nw = mk::gemv_blocks_grid(0) * mk::kWarps;
  std::vector<mk::GemvPlan> plans(mats.size() * size_t(nw));
  for (size_t i = 0; i < mats.size(); ++i)
    for (int gw = 0; gw < nw; ++gw) plans[i * size_t(nw) + size_t(gw)] = mk::gemv_plan(mats[i], gw, nw);
  Device dm(mats.size() * sizeof(mk::PackedMatrix)), dy(ys.size() * sizeof(float*)),
      dp(plans.size() * sizeof(mk::GemvPlan));
  BENCH_CUDA(cudaMemcpy(dm.p, mats.data(), mats.size() * sizeof(mk::PackedMatrix), cudaMemcpyHostToDevice));
  BENCH_CUDA(cudaMemcpy(dp.p, plans.data(), plans.size() * sizeof(mk::GemvPlan), cudaMemcpyHostToDevice));
  // NIBBLE_MK_GEMV_EXP: one of the consumer experiments of int4_mma_gemv.cuh (GemvExp; NOTES.md, v9).
  const char* exp_env = std::getenv("NIBBLE_MK_GEMV_EXP");
  const int exp = exp_env ? std::atoi(exp_env) : 0;
  if (exp != 0) state.SetLabel("NIBBLE_MK_GEMV_EXP=" + std::to_string(exp) + " (an experiment, not the GEMV)");
  BENCH_CUDA(cudaMemcpy(dy.p, ys.data(), ys.size() * sizeof(float*), cudaMemcpyHostToDevice));
  BENCH_CUDA(cudaDeviceSynchronize());

  Events ev;
  const auto launch = [&] {
    BENCH_CUDA(mk::launch_gemv_blocks(static_cast<const mk::PackedMatrix*>(dm.p),
                                      static_cast<const mk::GemvPlan*>(dp.p), static_cast<float* const*>(dy.p),
                                      int(mats.size()), static_cast<const float*>(x.p), kFfn, 0, nullptr, exp));
  };
  launch();  // warm-up: module load, attribute setting
  BENCH_CUDA(cudaDeviceSynchronize());
  for (auto _ : state) {
    BENCH_CUDA(cudaEventRecord(ev.a));
    launch();
    BENCH_CUDA(cudaEventRecord(ev.b));
    state.SetIterationTime(ev.seconds());
  }
  const double bytes = double(wbytes) * kLayers;
  state.counters["bytes"] = bytes;
  state.counters["TB/s"] = benchmark::Counter(bytes * 1e-12, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["matrices"] = double(mats.size());
}

void BM_Attention2048(benchmark::State& state) {
  const int pos = 2048;
  const size_t cache = size_t(kNkv) * kMaxSeq * kHd;  // one layer's K (or V), bf16
  int sms = 0;
  BENCH_CUDA(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, 0));
  const int max_chunks = mk::attn_max_chunks(sms, kNkv);
  const int qkv_n = (kNq + 2 * kNkv) * kHd;
  Device k(cache * 2), v(cache * 2), qkv(size_t(qkv_n) * 4), rope(size_t(kMaxSeq) * kHd / 2 * 8),
      part(size_t(kNq) * max_chunks * (kHd + 2) * 4), cnt(kNkv * 4), out(size_t(kNq) * kHd * 4),
      flush(size_t(256) << 20);
  // bf16 cache values in [-1, 1): the hash's top bits as a bf16 mantissa under exponent 2^-1.
  fill(k.p, cache * 2, 3u, false);
  fill(v.p, cache * 2, 4u, false);
  const auto sanitize = [&](void* p) {  // make every bf16 a finite value of magnitude < 1
    std::vector<uint16_t> h(cache);
    BENCH_CUDA(cudaMemcpy(h.data(), p, cache * 2, cudaMemcpyDeviceToHost));
    for (auto& b : h) b = uint16_t((b & 0x807Fu) | 0x3E80u);
    BENCH_CUDA(cudaMemcpy(p, h.data(), cache * 2, cudaMemcpyHostToDevice));
  };
  sanitize(k.p);
  sanitize(v.p);
  std::vector<float> hq(static_cast<size_t>(qkv_n));
  for (int i = 0; i < qkv_n; ++i) hq[size_t(i)] = std::cos(0.11f * float(i));
  BENCH_CUDA(cudaMemcpy(qkv.p, hq.data(), hq.size() * 4, cudaMemcpyHostToDevice));
  std::vector<float2> hr(size_t(kMaxSeq) * kHd / 2);
  for (int p = 0; p < kMaxSeq; ++p)
    for (int i = 0; i < kHd / 2; ++i) {
      const double a = double(p) * std::pow(500000.0, -2.0 * i / kHd);
      hr[size_t(p) * kHd / 2 + i] = make_float2(float(std::cos(a)), float(std::sin(a)));
    }
  BENCH_CUDA(cudaMemcpy(rope.p, hr.data(), hr.size() * 8, cudaMemcpyHostToDevice));
  BENCH_CUDA(cudaMemset(cnt.p, 0, kNkv * 4));

  Events ev;
  const auto launch = [&] {
    BENCH_CUDA(mk::launch_attention_blocks(static_cast<const float*>(qkv.p), static_cast<const float2*>(rope.p),
                                           static_cast<uint16_t*>(k.p), static_cast<uint16_t*>(v.p), kNq, kNkv, kHd,
                                           kMaxSeq, pos, static_cast<float*>(part.p), max_chunks,
                                           static_cast<unsigned*>(cnt.p), static_cast<float*>(out.p), sms, nullptr));
  };
  launch();
  BENCH_CUDA(cudaDeviceSynchronize());
  for (auto _ : state) {
    BENCH_CUDA(cudaMemsetAsync(flush.p, int(state.iterations() & 0xFF), size_t(256) << 20));  // evict the cache
    BENCH_CUDA(cudaEventRecord(ev.a));
    launch();
    BENCH_CUDA(cudaEventRecord(ev.b));
    state.SetIterationTime(ev.seconds());
  }
  const double bytes = 2.0 * kNkv * (pos + 1) * kHd * 2;
  state.counters["bytes"] = bytes;
  state.counters["TB/s"] = benchmark::Counter(bytes * 1e-12, benchmark::Counter::kIsIterationInvariantRate);
}

}  // namespace

BENCHMARK(BM_Int4GemvAllLayers)->UseManualTime()->Unit(benchmark::kMicrosecond);
BENCHMARK(BM_Attention2048)->UseManualTime()->Unit(benchmark::kMicrosecond);

BENCHMARK_MAIN();
