// gpu_checks.cu: the harness's own kernels (checksums, zero scans, the read-floor stream). Each
// reads each byte once: memory-bound, a few hundred microseconds for the full fixture's 2 GB.
#include "harness/gpu_checks.h"

#include <algorithm>
#include <chrono>
#include <vector>
#include <stdexcept>

#include "harness/cuda_check.h"
#include "harness/hash.h"
#include "harness/stats.h"

namespace nibble {

namespace {

/** A buffer of at least `bytes` (device, or pinned host), kept for the thread and grown when asked
 *  for more. Allocating and freeing in every call cost ~100 us each inside the ledger's windows
 *  (240 us of overhead per window on an H100, 2026-12-06): the stream-ordered pool hands freed
 *  memory back to the driver at each synchronisation and maps it again at the next allocation. */
struct Scratch {
  void* p = nullptr;
  size_t bytes = 0;
};
void* grown(Scratch& s, size_t bytes, bool pinned) {
  if (s.bytes < bytes) {
    if (s.p) NIBBLE_CUDA_CALL(pinned ? cudaFreeHost(s.p) : cudaFree(s.p));
    s.p = nullptr;
    s.bytes = 0;
    NIBBLE_CUDA_CALL(pinned ? cudaMallocHost(&s.p, bytes) : cudaMalloc(&s.p, bytes));
    s.bytes = bytes;
  }
  return s.p;
}
enum ScratchSlot { kSumSlot, kCvSlotA, kCvSlotB, kSlots };
void* device_scratch(ScratchSlot slot, size_t bytes) {
  thread_local Scratch s[kSlots];
  return grown(s[slot], bytes, false);
}
void* pinned_scratch(ScratchSlot slot, size_t bytes) {
  thread_local Scratch s[kSlots];
  return grown(s[slot], bytes, true);
}

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
  auto* d = static_cast<unsigned long long*>(device_scratch(kSumSlot, sizeof(unsigned long long)));
  NIBBLE_CUDA_CALL(cudaMemsetAsync(d, 0, sizeof(*d), s));
  const size_t words = blocks * (bytes_per_block / 8);
  const int threads = 256;
  const int grid = int(std::min<size_t>((words + threads - 1) / threads, 4096));
  strided_reduce_kernel<kCountNonzero><<<grid, threads, 0, s>>>(static_cast<const uint8_t*>(base), blocks, stride,
                                                                bytes_per_block / 8, d);
  NIBBLE_CHECK_LAUNCH();
  auto* h = static_cast<unsigned long long*>(pinned_scratch(kSumSlot, sizeof(unsigned long long)));
  NIBBLE_CUDA_CALL(cudaMemcpyAsync(h, d, sizeof(*h), cudaMemcpyDeviceToHost, s));
  NIBBLE_CUDA_CALL(cudaStreamSynchronize(s));
  return *h;
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

constexpr int kBlake3Group = 64;  // chunks (or CVs) one block merges: a complete subtree of 64 leaves

/** A full 1024-byte chunk's CV from 16-byte loads (p 16-byte aligned): blake3_chunk_cv's words. */
__device__ void blake3_full_chunk_cv(const uint4* p, uint64_t index, uint32_t* cv) {
  for (int i = 0; i < 8; ++i) cv[i] = blake3_iv(i);
  for (int b = 0; b < 16; ++b) {
    uint32_t m[16];
#pragma unroll
    for (int q = 0; q < 4; ++q) {
      const uint4 w = p[b * 4 + q];
      m[4 * q] = w.x, m[4 * q + 1] = w.y, m[4 * q + 2] = w.z, m[4 * q + 3] = w.w;
    }
    blake3_compress(cv, m, index, 64, (b == 0 ? kBlake3ChunkStart : 0) | (b == 15 ? kBlake3ChunkEnd : 0));
  }
}

/** Merges the block's `n` CVs in `cv` pairwise, level by level, an odd last one carried up (the
 *  BLAKE3 tree of an aligned group: a complete subtree, or the input's last one), into out[0..8). */
__device__ void blake3_group_merge(uint32_t (*cv)[8], int n, uint32_t* out) {
  while (n > 1) {
    const int pairs = n / 2, t = int(threadIdx.x);
    uint32_t merged[8];
    if (t < pairs) blake3_parent_cv(cv[2 * t], cv[2 * t + 1], false, merged);
    __syncthreads();
    if (t < pairs)
      for (int i = 0; i < 8; ++i) cv[t][i] = merged[i];
    if (t == 0 && n % 2)
      for (int i = 0; i < 8; ++i) cv[pairs][i] = cv[n - 1][i];
    __syncthreads();
    n = pairs + n % 2;
  }
  if (threadIdx.x < 8) out[threadIdx.x] = cv[0][threadIdx.x];
}

/** Level 0: thread i of block g the CV of chunk 64 g + i; with `merge`, the block's 64 merged into
 *  out[g], else each chunk's CV into out[chunk]. */
__global__ void __launch_bounds__(kBlake3Group) blake3_chunks_kernel(const uint8_t* p, size_t bytes, size_t chunks, bool merge,
                                                                     bool vector, uint32_t* out) {
  __shared__ uint32_t cv[kBlake3Group][8];
  const size_t first = size_t(blockIdx.x) * kBlake3Group, c = first + threadIdx.x;
  const int n = int(chunks - first < size_t(kBlake3Group) ? chunks - first : size_t(kBlake3Group));
  if (int(threadIdx.x) < n) {
    const size_t off = c * kBlake3ChunkBytes, len = bytes - off < kBlake3ChunkBytes ? bytes - off : kBlake3ChunkBytes;
    if (vector && len == kBlake3ChunkBytes)
      blake3_full_chunk_cv(reinterpret_cast<const uint4*>(p + off), c, cv[threadIdx.x]);
    else
      blake3_chunk_cv(p + off, len, c, false, cv[threadIdx.x]);
    if (!merge)
      for (int i = 0; i < 8; ++i) out[8 * c + i] = cv[threadIdx.x][i];
  }
  if (!merge) return;
  __syncthreads();
  blake3_group_merge(cv, n, out + 8 * size_t(blockIdx.x));
}

/** A level above: block g merges CVs 64 g .. 64 g + 63 of `in` into out[g]. */
__global__ void __launch_bounds__(kBlake3Group) blake3_merge_kernel(const uint32_t* in, size_t count, uint32_t* out) {
  __shared__ uint32_t cv[kBlake3Group][8];
  const size_t first = size_t(blockIdx.x) * kBlake3Group;
  const int n = int(count - first < size_t(kBlake3Group) ? count - first : size_t(kBlake3Group));
  if (int(threadIdx.x) < n)
    for (int i = 0; i < 8; ++i) cv[threadIdx.x][i] = in[8 * (first + threadIdx.x) + i];
  __syncthreads();
  blake3_group_merge(cv, n, out + 8 * size_t(blockIdx.x));
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

Digest device_blake3(const void* p, size_t bytes, cudaStream_t s) {
  const size_t chunks = bytes <= kBlake3ChunkBytes ? 1 : (bytes + kBlake3ChunkBytes - 1) / kBlake3ChunkBytes;
  if (chunks == 1) {  // one chunk is its own root: on the host
    std::vector<uint8_t> h(bytes);
    if (bytes) NIBBLE_CUDA_CALL(cudaMemcpyAsync(h.data(), p, bytes, cudaMemcpyDeviceToHost, s));
    NIBBLE_CUDA_CALL(cudaStreamSynchronize(s));
    return host_blake3(h.data(), bytes);
  }
  // The GPU merges whole groups while at least two CVs come out (the root's merge is the host's,
  // with its flag); the host finishes from at most 64.
  const bool merge = chunks > size_t(kBlake3Group);
  size_t count = merge ? (chunks + kBlake3Group - 1) / kBlake3Group : chunks;
  auto* a = static_cast<uint32_t*>(device_scratch(kCvSlotA, count * 32));
  auto* b = static_cast<uint32_t*>(device_scratch(kCvSlotB, count * 32));
  const bool vector = reinterpret_cast<uintptr_t>(p) % 16 == 0;
  blake3_chunks_kernel<<<unsigned((chunks + kBlake3Group - 1) / kBlake3Group), kBlake3Group, 0, s>>>(
      static_cast<const uint8_t*>(p), bytes, chunks, merge, vector, a);
  NIBBLE_CHECK_LAUNCH();
  while (count > size_t(kBlake3Group)) {
    const size_t next = (count + kBlake3Group - 1) / kBlake3Group;
    blake3_merge_kernel<<<unsigned(next), kBlake3Group, 0, s>>>(a, count, b);
    NIBBLE_CHECK_LAUNCH();
    std::swap(a, b);
    count = next;
  }
  // At most 64 CVs come back, however many bytes: the pinned buffer is sized once for all.
  auto* h = static_cast<uint32_t*>(pinned_scratch(kCvSlotA, size_t(kBlake3Group) * 32));
  NIBBLE_CUDA_CALL(cudaMemcpyAsync(h, a, count * 32, cudaMemcpyDeviceToHost, s));
  NIBBLE_CUDA_CALL(cudaStreamSynchronize(s));
  return blake3_finish(std::vector<uint32_t>(h, h + count * 8));
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

namespace {
__global__ void empty_kernel() {}
}  // namespace

double host_launch_us(cudaStream_t s) {
  std::vector<double> means;
  for (int b = 0; b <= kHostLaunchBatches; ++b) {
    const auto t0 = std::chrono::steady_clock::now();
    for (int i = 0; i < kHostLaunchBatch; ++i) {
      empty_kernel<<<1, 1, 0, s>>>();
      NIBBLE_CHECK_LAUNCH();
    }
    const auto t1 = std::chrono::steady_clock::now();
    NIBBLE_CUDA_CALL(cudaStreamSynchronize(s));
    if (b > 0) means.push_back(std::chrono::duration<double, std::micro>(t1 - t0).count() / kHostLaunchBatch);
  }
  return summarize(means).median;
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
