// bench_python_shim.cpp: the host time a Python GEMM solution's call costs in the shim alone
// (solutions/python/python_shim.cpp: the GIL, the A and C Tensor objects, the module's `run`, the
// return check), with bench/python/noop_gemm.py, whose run does only what dequant_matmul.py does
// before its graph replay. No GPU: host tensors. Beside the grader's clock (a Python FP4 GEMM at the
// tiny configs: ~140 us per call beyond its GPU span on the H100 and H200, 2026-12-05) it says how
// much of that is ours and how much the module's own (PyTorch's stream context and graph replay:
// reports/h200/next/python-call-cost.py measures those on a GPU).
//
//   BM_ShimRun   one nibble_gemm_run through the shim, M = 2, N = 4, K = 16 (the shapes do not matter:
//                nothing is read)
//
// Run: build-hopper/bin/bench_python_shim (exits 77 without Python's development files)
#include <benchmark/benchmark.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "harness/child_support.h"
#include "harness/python_solution.h"

namespace {

using nibble::SolutionLibrary;

struct Shim {
  nibble::child::ResultWriter out{-1, nibble::Result{}, {}};
  SolutionLibrary lib;
  nibble::child::CallWatchdog watchdog{&out};
  std::vector<uint8_t> a = std::vector<uint8_t>(2 * 16 * 2), c = std::vector<uint8_t>(2 * 4 * 2);
  int64_t a_shape[2] = {2, 16}, c_shape[2] = {2, 4};
  nibble_tensor A{}, C{};
  void* handle = nullptr;

  explicit Shim(const std::string& nibble_exe)
      : lib(nibble::python_shim_path(nibble_exe, SolutionLibrary::Abi::Gemm), SolutionLibrary::Abi::Gemm) {
    if (nibble::child::load_python_module(out, watchdog, lib, NIBBLE_BENCH_SOURCE_DIR "/bench/python/noop_gemm.py", 30))
      throw std::runtime_error("noop_gemm.py did not import: " + (out.r.error ? out.r.error->message : std::string()));
    A.data = a.data();
    A.device = {NIBBLE_DEVICE_CPU, 0};
    A.ndim = 2;
    A.dtype = {NIBBLE_DTYPE_BFLOAT, 16, 1};
    A.shape = a_shape;
    C = A;
    C.data = c.data();
    C.shape = c_shape;
    nibble_gemm_problem p{};
    p.struct_size = sizeof p;
    p.task = "gemm-w4a16-nvfp4";
    p.config_name = "bench";
    p.M = 2, p.N = 4, p.K = 16;
    p.block = 16;
    p.scale_format = NIBBLE_GEMM_SCALE_E4M3FN;
    p.c_dtype = NIBBLE_GEMM_OUTPUT_BF16;
    nibble_error err{};
    if (lib.gemm_prepare(&p, nullptr, &handle, &err) != NIBBLE_OK) throw std::runtime_error(std::string("prepare: ") + err.message);
  }
};

Shim* g_shim = nullptr;

void BM_ShimRun(benchmark::State& state) {
  nibble_error err{};
  for (auto _ : state)
    if (g_shim->lib.gemm_run(g_shim->handle, &g_shim->A, &g_shim->C, nullptr, &err) != NIBBLE_OK) {
      state.SkipWithError(err.message);
      break;
    }
}
BENCHMARK(BM_ShimRun);

}  // namespace

int main(int argc, char** argv) {
  if (!nibble::python_shims_built()) {
    std::printf("bench_python_shim: built without Python's development files: no shim to time\n");
    return 77;
  }
  benchmark::Initialize(&argc, argv);
  try {
    static Shim shim(NIBBLE_BENCH_BINARY_DIR "/bin/nibble");
    g_shim = &shim;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_python_shim: %s\n", e.what());
    return 1;
  }
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
