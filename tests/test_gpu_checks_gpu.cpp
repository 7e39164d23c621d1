// test_gpu_checks_gpu.cpp: the harness kernels whose results the host recomputes, against their host
// twins (harness/hash.h): the BLAKE3 digest a timed call's "done" commits (the parent checks kept
// outputs with host_blake3, itself checked against the reference implementation in test_protocol),
// the input checksum, and the GEMM replay guard's A staged on the GPU (the fp64 oracle and a reader
// of the docs build it with gemm_call_a).
#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "harness/cuda_check.h"
#include "harness/device_buffer.h"
#include "harness/gemm_session.h"
#include "harness/gpu_checks.h"
#include "harness/hash.h"
#include "gpu_test_util.h"

using namespace nibble;

TEST(GpuChecks, DeviceChecksumIsTheHostChecksum) {
  NIBBLE_REQUIRE_GPU();
  // Sizes with and without a tail, one past a grid of 4096 x 256 words.
  for (const size_t bytes : {size_t(8), size_t(13), size_t(4096 * 256 * 8 + 8), size_t(1003)}) {
    std::vector<uint8_t> h(bytes);
    for (size_t i = 0; i < bytes; ++i) h[i] = uint8_t((i * 2654435761u) >> 13);
    DeviceBuffer d(bytes);
    NIBBLE_CUDA_CALL(cudaMemcpy(d.get(), h.data(), bytes, cudaMemcpyHostToDevice));
    EXPECT_EQ(device_checksum_bytes(d.get(), bytes, nullptr), host_checksum_bytes(h.data(), bytes)) << bytes;
  }
}

TEST(GpuChecks, DeviceBlake3IsTheHostBlake3) {
  NIBBLE_REQUIRE_GPU();
  // One chunk (the host's), up to 64 (no merge on the GPU), 65 (one merge level and a partial group),
  // 64^2 + 1 (two merge levels), the decode logits of the full config, a 4096 x 3072 fp32 C; 16-byte
  // aligned and not.
  for (const size_t bytes : {size_t(0), size_t(1000), size_t(64 * 1024), size_t(65 * 1024 + 4), size_t(4097 * 1024 + 12),
                             size_t(128256 * 4), size_t(4096) * 3072 * 4})
    for (const size_t offset : {size_t(0), size_t(4)}) {
      std::vector<uint8_t> h(bytes);
      for (size_t i = 0; i < bytes; ++i) h[i] = uint8_t(i % 251);
      DeviceBuffer d(bytes + 16);
      uint8_t* p = static_cast<uint8_t*>(d.get()) + offset;
      if (bytes) NIBBLE_CUDA_CALL(cudaMemcpy(p, h.data(), bytes, cudaMemcpyHostToDevice));
      EXPECT_EQ(digest_hex(device_blake3(p, bytes, nullptr)), digest_hex(host_blake3(h.data(), bytes)))
          << bytes << " bytes at offset " << offset;
    }
}

TEST(GpuChecks, SignMaskIsGemmCallA) {
  NIBBLE_REQUIRE_GPU();
  // Lengths that end mid-vector and mid-word; the vector path and (offset by one element) the scalar one.
  for (const int64_t n : {int64_t(1), int64_t(8), int64_t(77), int64_t(128 * 3080 + 5)})
    for (const int64_t offset : {int64_t(0), int64_t(1)})
      for (const int64_t call : {int64_t(0), int64_t(1), int64_t(1000)}) {
        std::vector<uint16_t> a0(static_cast<size_t>(n));
        for (int64_t i = 0; i < n; ++i) a0[size_t(i)] = uint16_t(0x3F80 + (i * 37) % 0x0A00);
        std::vector<uint16_t> want(static_cast<size_t>(n)), got(static_cast<size_t>(n));
        gemm_call_a(a0.data(), n, 0xfeedull, call, want.data());
        DeviceBuffer d0(size_t(n + 1) * 2), d1(size_t(n + 1) * 2);
        uint16_t* p0 = static_cast<uint16_t*>(d0.get()) + offset;
        uint16_t* p1 = static_cast<uint16_t*>(d1.get()) + offset;
        NIBBLE_CUDA_CALL(cudaMemcpy(p0, a0.data(), size_t(n) * 2, cudaMemcpyHostToDevice));
        launch_sign_mask(p0, p1, n, 0xfeedull, call, nullptr);
        NIBBLE_CUDA_CALL(cudaMemcpy(got.data(), p1, size_t(n) * 2, cudaMemcpyDeviceToHost));
        ASSERT_EQ(got, want) << "n " << n << ", offset " << offset << ", call " << call;
      }
}
