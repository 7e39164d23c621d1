// gpu_checks.cu: the harness's own kernels (checksums, zero scans, the read-floor stream). Each
// reads each byte once: memory-bound, a few hundred microseconds for the full fixture's 2 GB.
#include "harness/gpu_checks.h"

#include <algorithm>
#include <stdexcept>

#include "harness/cuda_check.h"
#include "harness/hash.h"

namespace nibble {

namespace {

template <bool kCountNonzero>
__global__ void strided_reduce_kernel(const uint8_t* base, size_t blocks, size_t stride, size_t words_per_block,
                                      unsigned long long* out) {
  const size_t total = blocks * words_per_block;
  uint64_t acc = 0;
  for (size_t w = blockIdx.x * size_t(blockDim.x) + threadIdx.x; w < total; w += size_t(gridDim.x) * blockDim.x) {
    const size_t b = w / words_per_block, i = w % words_per_block;
    const uint64_t v = reinterpret_cast<const uint64_t*>(base + b * stride)[i];
    if (kCountNonzero)
      acc += v != 0;
    else
      acc += checksum_term(v, w);
  }
  for (int o = 16; o > 0; o >>= 1) acc += __shfl_down_sync(0xffffffffu, acc, o);
  if ((threadIdx.x & 31) == 0) atomicAdd(out, static_cast<unsigned long long>(acc));
}

template <bool kCountNonzero>
uint64_t strided_reduce(const void* base, size_t blocks, size_t stride, size_t bytes_per_block, cudaStream_t s) {
  if (bytes_per_block % 8 != 0 || reinterpret_cast<uintptr_t>(base) % 8 != 0 || stride % 8 != 0)
    throw std::invalid_argument("device checksum: ranges must be 8-byte multiples, 8-byte aligned");
  if (blocks == 0 || bytes_per_block == 0) return 0;
  unsigned long long* d = nullptr;
  NIBBLE_CUDA_CALL(cudaMallocAsync(&d, sizeof(*d), s));
  NIBBLE_CUDA_CALL(cudaMemsetAsync(d, 0, sizeof(*d), s));
  const size_t words = blocks * (bytes_per_block / 8);
  const int threads = 256;
  const int grid = int(std::min<size_t>((words + threads - 1) / threads, 4096));
  strided_reduce_kernel<kCountNonzero><<<grid, threads, 0, s>>>(static_cast<const uint8_t*>(base), blocks, stride,
                                                                bytes_per_block / 8, d);
  NIBBLE_CHECK_LAUNCH();
  unsigned long long h = 0;
  NIBBLE_CUDA_CALL(cudaMemcpyAsync(&h, d, sizeof(h), cudaMemcpyDeviceToHost, s));
  NIBBLE_CUDA_CALL(cudaFreeAsync(d, s));
  NIBBLE_CUDA_CALL(cudaStreamSynchronize(s));
  return h;
}

constexpr int kReadThreads = 512;
constexpr int kReadLoads = 4;  // 16-byte loads in flight per thread per iteration

__device__ uint32_t g_read_sink;  // written only when the fold equals `never`: keeps the loads

__global__ void __launch_bounds__(kReadThreads) read_stream_kernel(const uint4* __restrict__ p, size_t n16, uint32_t never) {
  uint32_t acc = 0;
  const size_t stride = size_t(gridDim.x) * kReadThreads;
  // kReadLoads predicated loads per iteration, all issued before any is used: a thread whose share
  // ends mid-iteration still has its last loads in flight together (a serial tail loop cost ~0.5 us
  // of DRAM round trips at sizes that are not a multiple of the grid).
  for (size_t i = size_t(blockIdx.x) * kReadThreads + threadIdx.x; i < n16; i += kReadLoads * stride) {
    uint4 v[kReadLoads];
#pragma unroll
    for (int j = 0; j < kReadLoads; ++j) {
      v[j] = make_uint4(0, 0, 0, 0);
      if (i + j * stride < n16)
        asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
                     : "=r"(v[j].x), "=r"(v[j].y), "=r"(v[j].z), "=r"(v[j].w)
                     : "l"(p + i + j * stride));
    }
#pragma unroll
    for (int j = 0; j < kReadLoads; ++j) acc ^= v[j].x ^ v[j].y ^ v[j].z ^ v[j].w;
  }
  if (acc == never) g_read_sink = acc;
}

constexpr int kMaskThreads = 256;

/** One thread per 8 elements (16 bytes): a 64-element mask word serves 8 threads. */
__global__ void sign_mask_kernel(const uint16_t* __restrict__ a0, uint16_t* __restrict__ a, int64_t n, uint64_t seed,
                                 int64_t call, bool vector) {
  const int64_t e0 = (int64_t(blockIdx.x) * kMaskThreads + threadIdx.x) * 8;
  if (e0 >= n) return;
  const uint64_t m = sign_mask_word(seed, call, e0 / 64) >> (e0 & 63);
  if (vector && e0 + 8 <= n) {
    uint4 v = *reinterpret_cast<const uint4*>(a0 + e0);
    uint32_t* w = &v.x;
#pragma unroll
    for (int j = 0; j < 4; ++j)
      w[j] ^= uint32_t((m >> (2 * j)) & 1u) << 15 | uint32_t((m >> (2 * j + 1)) & 1u) << 31;
    *reinterpret_cast<uint4*>(a + e0) = v;
    return;
  }
  for (int64_t e = e0; e < n && e < e0 + 8; ++e) a[e] = uint16_t(a0[e] ^ (((m >> (e - e0)) & 1u) << 15));
}

}  // namespace

void launch_sign_mask(const uint16_t* a0, uint16_t* a, int64_t n, uint64_t seed, int64_t call, cudaStream_t s) {
  if (n <= 0) return;
  if (call == 0) {
    NIBBLE_CUDA_CALL(cudaMemcpyAsync(a, a0, size_t(n) * 2, cudaMemcpyDeviceToDevice, s));
    return;
  }
  const bool vector = reinterpret_cast<uintptr_t>(a0) % 16 == 0 && reinterpret_cast<uintptr_t>(a) % 16 == 0;
  const int64_t threads = (n + 7) / 8;
  sign_mask_kernel<<<unsigned((threads + kMaskThreads - 1) / kMaskThreads), kMaskThreads, 0, s>>>(a0, a, n, seed, call, vector);
  NIBBLE_CHECK_LAUNCH();
}

void launch_read_stream(const void* p, size_t bytes, cudaStream_t s, int blocks_per_sm) {
  if (reinterpret_cast<uintptr_t>(p) % 16 != 0) throw std::invalid_argument("read stream: the buffer must be 16-byte aligned");
  const size_t n16 = bytes / 16;
  if (n16 == 0) return;
  int dev = 0, sms = 0;
  NIBBLE_CUDA_CALL(cudaGetDevice(&dev));
  NIBBLE_CUDA_CALL(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, dev));
  // Every SM busy from the start, the same share on each: blocks_per_sm blocks per SM (fewer only
  // when there are fewer than one 16-byte word per thread).
  const size_t want = (n16 + kReadThreads - 1) / kReadThreads;
  const unsigned grid = unsigned(std::min(want, size_t(sms) * size_t(std::max(1, blocks_per_sm))));
  read_stream_kernel<<<grid, kReadThreads, 0, s>>>(static_cast<const uint4*>(p), n16, 0xFFFFFFFFu);
  NIBBLE_CHECK_LAUNCH();
}

uint64_t device_checksum(const void* base, size_t blocks, size_t stride, size_t bytes_per_block, cudaStream_t s) {
  return strided_reduce<false>(base, blocks, stride, bytes_per_block, s);
}

uint64_t device_checksum_bytes(const void* p, size_t bytes, cudaStream_t s) {
  const size_t whole = bytes / 8 * 8;
  uint64_t h = whole ? device_checksum(p, whole, s) : 0;
  if (whole != bytes) {
    uint8_t tail[8] = {};
    // On `s` like the rest: the timer tells the harness's work by its stream (TimedCalls).
    NIBBLE_CUDA_CALL(cudaMemcpyAsync(tail, static_cast<const uint8_t*>(p) + whole, bytes - whole, cudaMemcpyDeviceToHost, s));
    NIBBLE_CUDA_CALL(cudaStreamSynchronize(s));
    h = checksum_fold_tail(h, tail, bytes - whole);
  }
  return h;
}

uint64_t device_count_nonzero(const void* base, size_t blocks, size_t stride, size_t bytes_per_block, cudaStream_t s) {
  return strided_reduce<true>(base, blocks, stride, bytes_per_block, s);
}

}  // namespace nibble
