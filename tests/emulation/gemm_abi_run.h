// gemm_abi_run.h: a GEMM solution's run through its C ABI as the grader drives it (prepared once,
// run twice), each run's C checked against an fp64 reference, for the ABI-level emulation tests.
#pragma once

#include <gtest/gtest.h>

#include <cstdint>
#include <vector>

#include "emu_core.h"
#include "guarded_output.h"
#include "nibble/nibble_gemm.h"

namespace nibble::test {

/** Run the prepared handle h twice on A (M, K) and check each C (M, N) fp32 against ref (fp64):
 *  relative error below tol, every element written, nothing outside C. */
inline void run_twice_and_check(void* h, const nibble_tensor& A, int64_t M, int64_t N, const std::vector<double>& ref,
                                double tol) {
  nibble_error err{};
  for (int call = 0; call < 2; ++call) {
    GuardedOutput out(size_t(M * N));
    std::vector<int64_t> cshape{M, N}, cstrides{N, 1};
    nibble_tensor ct{out.data(), {NIBBLE_DEVICE_CUDA, 0}, 2, {NIBBLE_DTYPE_FLOAT, 32, 1}, cshape.data(), cstrides.data(), 0};
    emu::reg("C", out.data(), size_t(M * N) * 4);
    ASSERT_EQ(nibble_gemm_run(h, &A, &ct, nullptr, &err), NIBBLE_OK) << err.message;
    emu::unreg(out.data());
    const GuardedOutput::Check chk = out.check(ref);
    EXPECT_LT(chk.rel_err, tol) << "call " << call;
    EXPECT_EQ(chk.unwritten + chk.guard_written, 0) << "call " << call;
    if (call == 0) std::printf("relative error %.2e\n", chk.rel_err);
  }
}

}  // namespace nibble::test
