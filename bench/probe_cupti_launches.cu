// probe_cupti_launches: what CUPTI tells an in-process grader about each launch, the ground a
// launch-versus-record check would stand on.
//
// Why: a solution can turn CUPTI's kernel records off for part of its call (tests/hostile row
// hide_from_cupti); today only the parent's clock bounds what it hides, to 100 us + 10% of the span
// (harness/verdict.h), ~17% of a full decode step and most of a small GEMM. If every launch the
// driver sees (a CUPTI driver-API callback, with its correlation id) can be matched to a kernel record
// of the same correlation id, a hidden launch is caught whatever its length. Whether that holds is
// what this program asks the driver, per launch path:
//   1. which driver- and runtime-domain callbacks fire (a runtime launch: one driver callback too?),
//      and whether the kernel records carry the callback's correlation id;
//   2. launches inside a stream capture (callbacks, no records: a check must skip them), a graph
//      launch (one callback, several records), cuBLAS, memset and memcpy, copies captured into a
//      graph, zero-byte, host-to-host and pageable copies (the copy audit's ground);
//   3. the trick: CONCURRENT_KERNEL disabled around launches (callbacks without records?);
//   4. the host cost of the subscription: empty launches timed without it, with the launch callbacks
//      only, and with the whole driver domain;
//   5. the GPU cost of the records inside a CUDA graph: a graph of 2000 kernel nodes (a PyTorch decode
//      step in a graph has ~1900-2000) timed by CUDA events without any record kind on, with
//      CONCURRENT_KERNEL (a record per node: --graph-records nodes), with GRAPH_TRACE alone
//      (one record per launch) and with both, and which records each leaves (the anchors graded
//      2.3x their untraced times on the H200, ~3 us a kernel more); last, graphs instantiated before
//      GRAPH_TRACE was switched on, launched with it on (a SIGSEGV in libcupti on an H100).
// Usage: probe_cupti_launches [--launches N]   (sm_90 not needed; prints a table, exit 0 on success,
// 77 without a GPU, 1 on a CUDA/CUPTI error)
#include <cublas_v2.h>
#include <cuda.h>
#include <cuda_runtime.h>
#include <cupti.h>

#include <execinfo.h>
#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <stdexcept>
#include <vector>

#include "harness/cuda_check.h"
#include "harness/gpu_checks.h"
#include "harness/verdict.h"

namespace {

// CUPTI and cuBLAS errors throw as NIBBLE_CUDA_CALL does; main() prints them and exits 1.
void cupti_ok(CUptiResult r, const char* call) {
  if (r == CUPTI_SUCCESS) return;
  const char* m = nullptr;
  cuptiGetResultString(r, &m);
  throw std::runtime_error(std::string(call) + ": " + (m ? m : "unknown CUPTI error"));
}
void cublas_ok(cublasStatus_t r, const char* call) {
  if (r != CUBLAS_STATUS_SUCCESS) throw std::runtime_error(std::string(call) + ": cuBLAS status " + std::to_string(int(r)));
}
#define CHECK_CUDA(x) NIBBLE_CUDA_CALL(x)
#define CHECK_CUPTI(x) cupti_ok((x), #x)
#define CHECK_CUBLAS(x) cublas_ok((x), #x)

__global__ void empty_kernel(int* p) {
  if (p && threadIdx.x == 0) atomicAdd(p, 1);
}

struct Callback {
  const char* domain;
  std::string name;
  uint32_t correlation;
  std::string capture;  // driver kernel launches: the stream's capture status, asked inside the callback
};
struct Record {
  const char* kind;
  uint32_t correlation;
};

std::mutex g_mutex;
std::vector<Callback> g_callbacks;
std::vector<Record> g_records;
bool g_keep_callbacks = true;
using IsCapturingFn = CUresult (*)(CUstream, CUstreamCaptureStatus*);
IsCapturingFn g_is_capturing = nullptr;  // cuStreamIsCapturing, from the driver entry point

/** Whether a check could skip launches into a capture from the callback alone: the launch's stream
 *  asked inside the callback (the driver entry point, not the runtime, to stay out of its locks). */
std::string capture_status(CUpti_CallbackDomain domain, CUpti_CallbackId cbid, const void* params) {
  CUstream st = nullptr;
  if (domain == CUPTI_CB_DOMAIN_DRIVER_API) {
    if (cbid == CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel || cbid == CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel_ptsz)
      st = static_cast<const cuLaunchKernel_params*>(params)->hStream;
    else if (cbid == CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx || cbid == CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx_ptsz)
      st = static_cast<const cuLaunchKernelEx_params*>(params)->config->hStream;
    else
      return "";
  } else {
    if (cbid == CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernel_v7000)
      st = static_cast<const cudaLaunchKernel_v7000_params*>(params)->stream;
    else if (cbid == CUPTI_RUNTIME_TRACE_CBID_cudaLaunchKernelExC_v11060)
      st = static_cast<const cudaLaunchKernelExC_v11060_params*>(params)->config->stream;
    else if (cbid == CUPTI_RUNTIME_TRACE_CBID_cudaGraphLaunch_v10000)
      st = static_cast<const cudaGraphLaunch_v10000_params*>(params)->stream;
    else
      return "";
  }
  CUstreamCaptureStatus c = CU_STREAM_CAPTURE_STATUS_NONE;
  const CUresult r = g_is_capturing(st, &c);
  if (r != CUDA_SUCCESS) return "capture? error " + std::to_string(int(r));
  return c == CU_STREAM_CAPTURE_STATUS_ACTIVE ? "capturing" : c == CU_STREAM_CAPTURE_STATUS_NONE ? "not capturing" : "capture invalidated";
}

void CUPTIAPI on_api(void*, CUpti_CallbackDomain domain, CUpti_CallbackId cbid, const void* data) {
  const auto* d = static_cast<const CUpti_CallbackData*>(data);
  if (d->callbackSite != CUPTI_API_EXIT || !g_keep_callbacks) return;
  const std::string name = d->functionName ? d->functionName : "?";
  // Only what starts or records GPU work: the rest (attribute queries, ...) is noise here.
  if (name.find("aunch") == std::string::npos && name.find("Memcpy") == std::string::npos &&
      name.find("Memset") == std::string::npos && name.find("Capture") == std::string::npos &&
      name.find("Instantiate") == std::string::npos)
    return;
  const bool driver = domain == CUPTI_CB_DOMAIN_DRIVER_API;
  const std::string capture = capture_status(domain, cbid, d->functionParams);
  std::lock_guard<std::mutex> lock(g_mutex);
  g_callbacks.push_back({driver ? "driver" : "runtime", name, d->correlationId, capture});
}

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  *size = 8 << 20;
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, *size));
  *max_records = 0;
}

void CUPTIAPI buffer_completed(CUcontext, uint32_t, uint8_t* buffer, size_t, size_t valid) {
  CUpti_Activity* rec = nullptr;
  std::lock_guard<std::mutex> lock(g_mutex);
  while (cuptiActivityGetNextRecord(buffer, valid, &rec) == CUPTI_SUCCESS) {
    switch (rec->kind) {
      case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL:
        g_records.push_back({"kernel", reinterpret_cast<CUpti_ActivityKernel10*>(rec)->correlationId});
        break;
      case CUPTI_ACTIVITY_KIND_MEMCPY:
        g_records.push_back({"memcpy", reinterpret_cast<CUpti_ActivityMemcpy6*>(rec)->correlationId});
        break;
      case CUPTI_ACTIVITY_KIND_MEMSET:
        g_records.push_back({"memset", reinterpret_cast<CUpti_ActivityMemset4*>(rec)->correlationId});
        break;
      case CUPTI_ACTIVITY_KIND_GRAPH_TRACE:
        g_records.push_back({"graph", reinterpret_cast<CUpti_ActivityGraphTrace2*>(rec)->correlationId});
        break;
      default: break;
    }
  }
  std::free(buffer);
}

/** Runs `body`, then prints the callbacks it fired and the records it left, matched by correlation id. */
template <class F>
void probe(const char* what, F body) {
  CHECK_CUDA(cudaDeviceSynchronize());
  CHECK_CUPTI(cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED));
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    g_callbacks.clear();
    g_records.clear();
  }
  body();
  CHECK_CUDA(cudaDeviceSynchronize());
  CHECK_CUPTI(cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED));
  std::lock_guard<std::mutex> lock(g_mutex);
  std::map<uint32_t, std::map<std::string, int>> by_corr;
  for (const Record& r : g_records) by_corr[r.correlation][r.kind]++;
  std::printf("\n== %s\n", what);
  int unmatched_driver_launches = 0;
  for (const Callback& c : g_callbacks) {
    std::string recs;
    auto it = by_corr.find(c.correlation);
    if (it != by_corr.end())
      for (const auto& [kind, n] : it->second) recs += std::to_string(n) + " " + kind + " ";
    const bool launch = std::strcmp(c.domain, "driver") == 0 && c.name.find("aunch") != std::string::npos &&
                        c.name.find("HostFunc") == std::string::npos;
    if (launch && recs.empty()) ++unmatched_driver_launches;
    std::printf("  %-7s %-34s corr %6u -> %s%s%s\n", c.domain, c.name.c_str(), c.correlation,
                recs.empty() ? "(no record)" : recs.c_str(), c.capture.empty() ? "" : " | ", c.capture.c_str());
  }
  int orphan_records = 0;
  for (const auto& [corr, kinds] : by_corr) {
    bool seen = false;
    for (const Callback& c : g_callbacks) seen |= c.correlation == corr;
    if (!seen) {
      for (const auto& [kind, n] : kinds) std::printf("  record without callback: corr %u, %d %s\n", corr, n, kind.c_str());
      ++orphan_records;
    }
  }
  std::printf("  => %zu callbacks, %zu records, driver launches without a record: %d, correlation ids "
              "of records without a callback: %d\n",
              g_callbacks.size(), g_records.size(), unmatched_driver_launches, orphan_records);
}

using LaunchFn = CUresult (*)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                              CUstream, void**, void**);

double time_launches(cudaStream_t s, int n) {
  CHECK_CUDA(cudaStreamSynchronize(s));
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < n; ++i) empty_kernel<<<1, 32, 0, s>>>(nullptr);
  NIBBLE_CHECK_LAUNCH();
  const auto t1 = std::chrono::steady_clock::now();
  CHECK_CUDA(cudaStreamSynchronize(s));
  return std::chrono::duration<double, std::micro>(t1 - t0).count() / n;
}

/** The same for 4-byte memsets into `p` (the copy audit's calls: cuMemsetD8Async and the like). */
double time_memsets(cudaStream_t s, void* p, int n) {
  CHECK_CUDA(cudaStreamSynchronize(s));
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < n; ++i) CHECK_CUDA(cudaMemsetAsync(p, i & 0xff, 4, s));
  const auto t1 = std::chrono::steady_clock::now();
  CHECK_CUDA(cudaStreamSynchronize(s));
  return std::chrono::duration<double, std::micro>(t1 - t0).count() / n;
}

/** A captured graph of `nodes` empty kernels in a chain on `s`. */
cudaGraphExec_t chain_graph(cudaStream_t s, int nodes) {
  cudaGraph_t g;
  cudaGraphExec_t exec;
  CHECK_CUDA(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
  for (int i = 0; i < nodes; ++i) empty_kernel<<<1, 32, 0, s>>>(nullptr);
  NIBBLE_CHECK_LAUNCH();
  CHECK_CUDA(cudaStreamEndCapture(s, &g));
  CHECK_CUDA(cudaGraphInstantiate(&exec, g, 0));
  CHECK_CUDA(cudaGraphDestroy(g));
  return exec;
}

/** The median over 15 launches (3 warm-ups first) of one launch of `exec`, in us of CUDA events. */
double time_graph(cudaStream_t s, cudaGraphExec_t exec) {
  cudaEvent_t e0, e1;
  CHECK_CUDA(cudaEventCreate(&e0));
  CHECK_CUDA(cudaEventCreate(&e1));
  std::vector<float> ms;
  for (int i = 0; i < 18; ++i) {
    CHECK_CUDA(cudaEventRecord(e0, s));
    CHECK_CUDA(cudaGraphLaunch(exec, s));
    CHECK_CUDA(cudaEventRecord(e1, s));
    CHECK_CUDA(cudaEventSynchronize(e1));
    float t = 0;
    CHECK_CUDA(cudaEventElapsedTime(&t, e0, e1));
    if (i >= 3) ms.push_back(t);
  }
  CHECK_CUDA(cudaEventDestroy(e0));
  CHECK_CUDA(cudaEventDestroy(e1));
  std::sort(ms.begin(), ms.end());
  return 1e3 * ms[ms.size() / 2];
}

}  // namespace

int run(int launches);

/** A crash inside CUPTI or the driver (a graph instantiated before GRAPH_TRACE was switched on ended
 *  the process at its launch, in libcupti: H100, 2026-12-07): the frames, so that the library it
 *  happened in is named. */
void on_crash(int sig) {
  void* frames[64];
  const int n = backtrace(frames, 64);
  const char head[] = "\nprobe_cupti_launches: fatal signal; the frames:\n";
  (void)!write(2, head, sizeof head - 1);
  backtrace_symbols_fd(frames, n, 2);
  signal(sig, SIG_DFL);
  raise(sig);
}

int main(int argc, char** argv) {
  std::setvbuf(stdout, nullptr, _IOLBF, 0);  // what was printed before a crash stays printed
  signal(SIGSEGV, on_crash);
  signal(SIGABRT, on_crash);
  int launches = 20000;
  for (int i = 1; i < argc; ++i)
    if (std::strcmp(argv[i], "--launches") == 0 && i + 1 < argc) launches = std::atoi(argv[++i]);
  try {
    return run(launches);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "probe_cupti_launches: %s\n", e.what());
    return 1;
  }
}

int run(int launches) {
  int devices = 0;
  if (cudaGetDeviceCount(&devices) != cudaSuccess || devices == 0) {
    std::printf("probe_cupti_launches: no CUDA device: skipped\n");
    return 77;
  }
  CHECK_CUDA(cudaSetDevice(0));
  {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult q{};
    CHECK_CUDA(cudaGetDriverEntryPointByVersion("cuStreamIsCapturing", &fn, 12000, cudaEnableDefault, &q));
    g_is_capturing = reinterpret_cast<IsCapturingFn>(fn);
  }
  cudaStream_t s;
  CHECK_CUDA(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  int* counter = nullptr;
  CHECK_CUDA(cudaMalloc(&counter, 1 << 20));

  // Host cost first, before anything is subscribed (CUPTI's activity API loaded or not is part of it).
  for (int i = 0; i < 2; ++i) time_launches(s, launches / 10);
  const double bare_us = time_launches(s, launches);
  // The grader child's own measure (host_launch_us), beside this one on the same idle host: the
  // hidden-time allowance's reference (kReferenceHostLaunchUs) must be in its terms.
  const double child_us = nibble::host_launch_us(s);
  std::printf("host time per launch as the grader's child measures it (host_launch_us: %d x %d launches, median): %.3f us, "
              "slowdown %.2f against the %.1f us reference\n",
              nibble::kHostLaunchBatches, nibble::kHostLaunchBatch, child_us, nibble::host_slowdown(child_us),
              nibble::kReferenceHostLaunchUs);
  for (int i = 0; i < 2; ++i) time_memsets(s, counter, launches / 10);
  const double bare_memset_us = time_memsets(s, counter, launches);
  constexpr int kGraphNodes = 2000;
  cudaGraphExec_t chain = chain_graph(s, kGraphNodes);
  const double graph_bare_us = time_graph(s, chain);

  CHECK_CUPTI(cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed));
  CHECK_CUPTI(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL));
  CHECK_CUPTI(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMCPY));
  CHECK_CUPTI(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMSET));
  const double graph_nodes_us = time_graph(s, chain);
  const double activity_us = time_launches(s, launches);
  const double activity_memset_us = time_memsets(s, counter, launches);

  CUpti_SubscriberHandle sub;
  CHECK_CUPTI(cuptiSubscribe(&sub, on_api, nullptr));
  for (CUpti_CallbackId id :
       {CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel_ptsz,
        CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx, CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx_ptsz,
        CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel, CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel_ptsz,
        CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch, CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch_ptsz})
    CHECK_CUPTI(cuptiEnableCallback(1, sub, CUPTI_CB_DOMAIN_DRIVER_API, id));
  g_keep_callbacks = false;
  const double launch_cbs_us = time_launches(s, launches);
  CHECK_CUPTI(cuptiEnableDomain(1, sub, CUPTI_CB_DOMAIN_DRIVER_API));
  const double driver_domain_us = time_launches(s, launches);
  const double driver_domain_memset_us = time_memsets(s, counter, launches);
  CHECK_CUPTI(cuptiEnableDomain(1, sub, CUPTI_CB_DOMAIN_RUNTIME_API));
  const double both_domains_us = time_launches(s, launches);
  g_keep_callbacks = true;

  probe("runtime <<<>>> x2", [&] {
    empty_kernel<<<1, 32, 0, s>>>(counter);
    empty_kernel<<<1, 32, 0, s>>>(counter);
    NIBBLE_CHECK_LAUNCH();
  });
  probe("cudaLaunchKernel", [&] {
    void* args[] = {&counter};
    CHECK_CUDA(cudaLaunchKernel(reinterpret_cast<const void*>(empty_kernel), dim3(1), dim3(32), args, 0, s));
  });
  probe("cuLaunchKernel (driver entry point)", [&] {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult q{};
    CHECK_CUDA(cudaGetDriverEntryPointByVersion("cuLaunchKernel", &fn, 12000, cudaEnableDefault, &q));
    cudaFunction_t f;
    CHECK_CUDA(cudaGetFuncBySymbol(&f, reinterpret_cast<const void*>(empty_kernel)));
    void* args[] = {&counter};
    const CUresult r = reinterpret_cast<LaunchFn>(fn)(reinterpret_cast<CUfunction>(f), 1, 1, 1, 32, 1, 1, 0,
                                                      reinterpret_cast<CUstream>(s), args, nullptr);
    if (r != CUDA_SUCCESS) std::printf("  cuLaunchKernel returned %d\n", int(r));
  });
  cudaGraphExec_t exec;
  probe("stream capture of 3 launches (no execution)", [&] {
    cudaGraph_t g;
    CHECK_CUDA(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    for (int i = 0; i < 3; ++i) empty_kernel<<<1, 32, 0, s>>>(counter);
    NIBBLE_CHECK_LAUNCH();
    CHECK_CUDA(cudaStreamEndCapture(s, &g));
    CHECK_CUDA(cudaGraphInstantiate(&exec, g, 0));
    CHECK_CUDA(cudaGraphDestroy(g));
  });
  probe("cudaGraphLaunch of the 3-kernel graph", [&] { CHECK_CUDA(cudaGraphLaunch(exec, s)); });
  // The copy audit's ground (harness/cupti_timer.cpp leaves out copies issued while a capture is
  // open): a memset and a copy captured (callbacks, no records?) and the graph launched (records with
  // the launch's id?); then zero-byte copies and memsets outside any capture (a record or not: an
  // honest solution may issue one, and a copy rule must not fail it).
  cudaGraphExec_t copies;
  probe("stream capture of a memset and a device-to-device copy (no execution)", [&] {
    cudaGraph_t g;
    CHECK_CUDA(cudaStreamBeginCapture(s, cudaStreamCaptureModeThreadLocal));
    CHECK_CUDA(cudaMemsetAsync(counter, 0, 4096, s));
    CHECK_CUDA(cudaMemcpyAsync(reinterpret_cast<char*>(counter) + 4096, counter, 4096, cudaMemcpyDeviceToDevice, s));
    CHECK_CUDA(cudaStreamEndCapture(s, &g));
    CHECK_CUDA(cudaGraphInstantiate(&copies, g, 0));
    CHECK_CUDA(cudaGraphDestroy(g));
  });
  probe("cudaGraphLaunch of the captured memset and copy", [&] { CHECK_CUDA(cudaGraphLaunch(copies, s)); });
  CHECK_CUDA(cudaGraphExecDestroy(copies));
  probe("zero-byte cudaMemsetAsync and cudaMemcpyAsync (device to device, device to host)", [&] {
    static char host[16];
    CHECK_CUDA(cudaMemsetAsync(counter, 0, 0, s));
    CHECK_CUDA(cudaMemcpyAsync(reinterpret_cast<char*>(counter) + 4096, counter, 0, cudaMemcpyDeviceToDevice, s));
    CHECK_CUDA(cudaMemcpyAsync(host, counter, 0, cudaMemcpyDeviceToHost, s));
  });
  // The same through the driver's own entry points (Numba, a driver-API .so): does a zero-byte
  // cuMemcpyDtoDAsync or cuMemsetD8Async reach the driver's callback, and leave a record? The copy
  // audit is judged: one that reaches the callback and leaves none would fail an honest solution.
  probe("zero-byte cuMemcpyDtoDAsync_v2 and cuMemsetD8Async (driver entry points)", [&] {
    void *cp = nullptr, *ms = nullptr;
    cudaDriverEntryPointQueryResult q{};
    CHECK_CUDA(cudaGetDriverEntryPointByVersion("cuMemcpyDtoDAsync", &cp, 12000, cudaEnableDefault, &q));
    CHECK_CUDA(cudaGetDriverEntryPointByVersion("cuMemsetD8Async", &ms, 12000, cudaEnableDefault, &q));
    using CopyFn = CUresult (*)(CUdeviceptr, CUdeviceptr, size_t, CUstream);
    using SetFn = CUresult (*)(CUdeviceptr, unsigned char, size_t, CUstream);
    const CUdeviceptr d = CUdeviceptr(counter);
    const CUresult r1 = reinterpret_cast<CopyFn>(cp)(d + 4096, d, 0, s);
    const CUresult r2 = reinterpret_cast<SetFn>(ms)(d, 0, 0, s);
    if (r1 != CUDA_SUCCESS || r2 != CUDA_SUCCESS) std::printf("  returned %d, %d\n", int(r1), int(r2));
  });
  // What a judged copy rule must not fail (an honest solution may copy between host buffers, or
  // through pageable memory, inside a timed call): does a host-to-host copy reach the driver, and
  // leave a record? Pageable and pinned, synchronous and not, by cudaMemcpy's kind and by
  // cudaMemcpyDefault (unified addressing), and the driver's own cuMemcpy on host pointers.
  probe("host-to-host copies: cudaMemcpy / cudaMemcpyAsync, pageable and pinned, by kind and by cudaMemcpyDefault, cuMemcpy", [&] {
    static char a[4096], b[4096];
    void *pa = nullptr, *pb = nullptr;
    CHECK_CUDA(cudaMallocHost(&pa, 4096));
    CHECK_CUDA(cudaMallocHost(&pb, 4096));
    CHECK_CUDA(cudaMemcpy(b, a, 4096, cudaMemcpyHostToHost));
    CHECK_CUDA(cudaMemcpyAsync(b, a, 4096, cudaMemcpyHostToHost, s));
    CHECK_CUDA(cudaMemcpyAsync(b, a, 4096, cudaMemcpyDefault, s));
    CHECK_CUDA(cudaMemcpyAsync(pb, pa, 4096, cudaMemcpyHostToHost, s));
    CHECK_CUDA(cudaMemcpyAsync(pb, pa, 4096, cudaMemcpyDefault, s));
    CHECK_CUDA(cudaStreamSynchronize(s));
    void* fn = nullptr;  // the driver's cuMemcpy (this program links the runtime only)
    cudaDriverEntryPointQueryResult q{};
    CHECK_CUDA(cudaGetDriverEntryPointByVersion("cuMemcpy", &fn, 12000, cudaEnableDefault, &q));
    using MemcpyFn = CUresult (*)(CUdeviceptr, CUdeviceptr, size_t);
    const CUresult r = reinterpret_cast<MemcpyFn>(fn)(CUdeviceptr(pb), CUdeviceptr(pa), 4096);
    if (r != CUDA_SUCCESS) std::printf("  cuMemcpy returned %d\n", int(r));
    CHECK_CUDA(cudaFreeHost(pa));
    CHECK_CUDA(cudaFreeHost(pb));
  });
  probe("pageable host memory: 4 KiB cudaMemcpyAsync host to device and device to host", [&] {
    static char h[4096];
    CHECK_CUDA(cudaMemcpyAsync(counter, h, 4096, cudaMemcpyHostToDevice, s));
    CHECK_CUDA(cudaMemcpyAsync(h, counter, 4096, cudaMemcpyDeviceToHost, s));
  });
  // The launch audit's graph rule: a graph with kernel nodes must leave a kernel record. Which records
  // a graph of a memset, a copy, a kernel and a child graph's kernel leaves, with every kind on and
  // with the kernel records off (hostile row hide_in_graph): whether the memset runs as a kernel,
  // whether the copy's and the child's records carry the launch's id, and the instantiate callback.
  // The explicit graphs' nodes: a 4 KiB memset of counter, empty_kernel(counter) on one warp.
  cudaMemsetParams ms{};
  ms.dst = counter;
  ms.elementSize = 4;
  ms.width = 1024;
  ms.height = 1;
  ms.pitch = 4096;
  void* args[] = {&counter};
  cudaKernelNodeParams k{};
  k.func = reinterpret_cast<void*>(empty_kernel);
  k.gridDim = dim3(1);
  k.blockDim = dim3(32);
  k.kernelParams = args;
  cudaGraphExec_t mixed;
  probe("explicit graph: memset -> device-to-device copy -> kernel, + a child graph's kernel (instantiate)", [&] {
    cudaGraph_t g, child;
    CHECK_CUDA(cudaGraphCreate(&g, 0));
    CHECK_CUDA(cudaGraphCreate(&child, 0));
    cudaGraphNode_t n_set, n_copy, n_kernel, n_child, n_child_kernel;
    CHECK_CUDA(cudaGraphAddMemsetNode(&n_set, g, nullptr, 0, &ms));
    CHECK_CUDA(cudaGraphAddMemcpyNode1D(&n_copy, g, &n_set, 1, reinterpret_cast<char*>(counter) + (1 << 19), counter,
                                        1 << 19, cudaMemcpyDeviceToDevice));
    CHECK_CUDA(cudaGraphAddKernelNode(&n_kernel, g, &n_copy, 1, &k));
    CHECK_CUDA(cudaGraphAddKernelNode(&n_child_kernel, child, nullptr, 0, &k));
    CHECK_CUDA(cudaGraphAddChildGraphNode(&n_child, g, &n_kernel, 1, child));
    CHECK_CUDA(cudaGraphInstantiate(&mixed, g, 0));
    CHECK_CUDA(cudaGraphDestroy(child));
    CHECK_CUDA(cudaGraphDestroy(g));
  });
  // A graph launched with every record kind on, then with the kernel records off around the launch.
  const auto launch_both_ways = [&](const std::string& name, cudaGraphExec_t exec) {
    probe(("cudaGraphLaunch of the " + name + ", every record kind on").c_str(), [&] { CHECK_CUDA(cudaGraphLaunch(exec, s)); });
    probe(("cudaGraphLaunch of the " + name + ", CONCURRENT_KERNEL off around the launch").c_str(), [&] {
      CHECK_CUPTI(cuptiActivityDisable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL));
      CHECK_CUDA(cudaGraphLaunch(exec, s));
      CHECK_CUPTI(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL));
    });
  };
  launch_both_ways("mixed graph", mixed);
  // The reverse: the copy records off around the launch (hostile row hide_copy_in_graph). The audit
  // asks a graph with copy nodes for a memcpy record: this row shows the kernel's and memset's
  // records are all such a launch leaves.
  probe("cudaGraphLaunch of the mixed graph, MEMCPY off around the launch", [&] {
    CHECK_CUPTI(cuptiActivityDisable(CUPTI_ACTIVITY_KIND_MEMCPY));
    CHECK_CUDA(cudaGraphLaunch(mixed, s));
    CHECK_CUPTI(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_MEMCPY));
  });
  // A conditional node's body is not handed out by CUDA 13.0's driver, so the audit's graph walk
  // cannot see its kernels and counts a conditional node as running one (fails closed). Which records
  // an IF node (default 1) with a body kernel beside a memset node leaves, with every kind on and
  // with the kernel records off: whether the body's kernel record carries the launch's id.
  cudaGraphExec_t cond = nullptr;
  probe("explicit graph: memset + IF conditional node (default true) whose body runs a kernel (instantiate)", [&] {
    cudaGraph_t g;
    CHECK_CUDA(cudaGraphCreate(&g, 0));
    cudaGraphConditionalHandle handle;
    CHECK_CUDA(cudaGraphConditionalHandleCreate(&handle, g, 1, cudaGraphCondAssignDefault));
    cudaGraphNodeParams cp{};
    cp.type = cudaGraphNodeTypeConditional;
    cp.conditional.handle = handle;
    cp.conditional.type = cudaGraphCondTypeIf;
    cp.conditional.size = 1;
    cudaGraphNode_t n_cond, n_set, n_body_kernel;
    CHECK_CUDA(cudaGraphAddNode(&n_cond, g, nullptr, nullptr, 0, &cp));
    CHECK_CUDA(cudaGraphAddKernelNode(&n_body_kernel, cp.conditional.phGraph_out[0], nullptr, 0, &k));
    CHECK_CUDA(cudaGraphAddMemsetNode(&n_set, g, &n_cond, 1, &ms));
    cudaGraphNodeType t{};
    CHECK_CUDA(cudaGraphNodeGetType(n_cond, &t));
    std::printf("  the conditional node's type: %d (cudaGraphNodeTypeConditional %d)\n", int(t),
                int(cudaGraphNodeTypeConditional));
    CHECK_CUDA(cudaGraphInstantiate(&cond, g, 0));
    CHECK_CUDA(cudaGraphDestroy(g));
  });
  launch_both_ways("conditional graph", cond);
  probe("cudaMemsetAsync + cudaMemcpyAsync (device to device)", [&] {
    CHECK_CUDA(cudaMemsetAsync(counter, 0, 1 << 19, s));
    CHECK_CUDA(cudaMemcpyAsync(reinterpret_cast<char*>(counter) + (1 << 19), counter, 1 << 19,
                               cudaMemcpyDeviceToDevice, s));
  });
  cublasHandle_t h;
  CHECK_CUBLAS(cublasCreate(&h));
  CHECK_CUBLAS(cublasSetStream(h, s));
  float* m = nullptr;
  CHECK_CUDA(cudaMalloc(&m, 3 * 512 * 512 * sizeof(float)));
  CHECK_CUDA(cudaMemset(m, 0, 3 * 512 * 512 * sizeof(float)));
  const float one = 1, zero = 0;
  CHECK_CUBLAS(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 512, 512, 512, &one, m, 512, m + 512 * 512, 512, &zero,
                           m + 2 * 512 * 512, 512));  // warm-up: cuBLAS loads its kernels
  probe("cublasSgemm 512^3", [&] {
    CHECK_CUBLAS(cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, 512, 512, 512, &one, m, 512, m + 512 * 512, 512, &zero,
                             m + 2 * 512 * 512, 512));
  });
  probe("the trick: CONCURRENT_KERNEL disabled around 2 launches, then 1 launch with it on", [&] {
    CHECK_CUPTI(cuptiActivityDisable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL));
    empty_kernel<<<1, 32, 0, s>>>(counter);
    empty_kernel<<<1, 32, 0, s>>>(counter);
    NIBBLE_CHECK_LAUNCH();
    CHECK_CUPTI(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL));
    empty_kernel<<<1, 32, 0, s>>>(counter);
    NIBBLE_CHECK_LAUNCH();
  });
  probe("the trick, disabled across the launch and the kernel's end (enabled again before the sync)", [&] {
    CHECK_CUPTI(cuptiActivityDisable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL));
    empty_kernel<<<1, 32, 0, s>>>(counter);
    NIBBLE_CHECK_LAUNCH();
    CHECK_CUDA(cudaStreamSynchronize(s));
    CHECK_CUPTI(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL));
  });

  // 5. Graph-level records: GRAPH_TRACE beside CONCURRENT_KERNEL (what --graph-records graphs does),
  // then GRAPH_TRACE alone. On an H100 with CUDA 13.0 (2026-12-07) the first launch of a graph
  // instantiated before GRAPH_TRACE was switched on ended the process by SIGSEGV in libcupti (under
  // cudaGraphLaunch, CONCURRENT_KERNEL on or off), as it did a solution doing the same (hostile row
  // graph_trace_self): graphs instantiated after the switch go first, those instantiated before it
  // last, after every summary line, so a crash there places itself and loses nothing. The steps are marked.
  // Which records a graph launch leaves in each state, a 2000-node graph timed in each.
  CHECK_CUPTI(cuptiActivityDisable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL));
  std::printf("\n-- 5: the 2000-node graph timed, no record kind on\n");
  const double graph_off_us = time_graph(s, chain);
  CHECK_CUPTI(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL));
  std::printf("-- 5: enabling GRAPH_TRACE beside CONCURRENT_KERNEL\n");
  const CUptiResult graph_trace_on = cuptiActivityEnable(CUPTI_ACTIVITY_KIND_GRAPH_TRACE);
  const char* graph_trace_msg = nullptr;
  cuptiGetResultString(graph_trace_on, &graph_trace_msg);
  std::printf("\n== cuptiActivityEnable(GRAPH_TRACE), CONCURRENT_KERNEL on: %s\n", graph_trace_msg ? graph_trace_msg : "?");
  double graph_trace_us = -1, graph_both_us = -1;
  cudaGraphExec_t chain_after = nullptr, three_after = nullptr;
  // Which records the 3-kernel graph `g3` and two launches outside a graph leave in `state` (the mixed
  // graph's copy and memset nodes: only in the last step, instantiated before the switch).
  const auto probe_graph_records = [&](cudaGraphExec_t g3, const std::string& state) {
    probe(("cudaGraphLaunch of a 3-kernel graph, " + state).c_str(), [&] { CHECK_CUDA(cudaGraphLaunch(g3, s)); });
    probe(("runtime <<<>>> x2 (outside a graph), " + state).c_str(), [&] {
      empty_kernel<<<1, 32, 0, s>>>(counter);
      empty_kernel<<<1, 32, 0, s>>>(counter);
      NIBBLE_CHECK_LAUNCH();
    });
  };
  if (graph_trace_on == CUPTI_SUCCESS) {
    std::printf("-- 5: graphs instantiated after GRAPH_TRACE was switched on (2000 and 3 kernel nodes)\n");
    chain_after = chain_graph(s, kGraphNodes);
    three_after = chain_graph(s, 3);
    std::printf("-- 5: the 2000-node graph instantiated after the switch timed, GRAPH_TRACE and CONCURRENT_KERNEL on\n");
    graph_both_us = time_graph(s, chain_after);
    probe_graph_records(three_after, "instantiated after the switch, GRAPH_TRACE and CONCURRENT_KERNEL on");
    std::printf("-- 5: disabling CONCURRENT_KERNEL, GRAPH_TRACE left on\n");
    CHECK_CUPTI(cuptiActivityDisable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL));
    std::printf("-- 5: the 2000-node graph instantiated after the switch timed, GRAPH_TRACE alone\n");
    graph_trace_us = time_graph(s, chain_after);
    probe_graph_records(three_after, "instantiated after the switch, GRAPH_TRACE on, CONCURRENT_KERNEL off");
    CHECK_CUPTI(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL));
  }
  std::printf("\ngraph of %d empty kernel nodes, GPU time per launch (CUDA events, median of 15, us): no records %.1f, "
              "CONCURRENT_KERNEL (a record per node) %.1f, records off again %.1f, GRAPH_TRACE alone %.1f, GRAPH_TRACE + "
              "CONCURRENT_KERNEL %.1f (-1: not enabled); per node over no records: %.2f / %.2f / %.2f us\n",
              kGraphNodes, graph_bare_us, graph_nodes_us, graph_off_us, graph_trace_us, graph_both_us,
              (graph_nodes_us - graph_bare_us) / kGraphNodes, (graph_trace_us - graph_bare_us) / kGraphNodes,
              (graph_both_us - graph_bare_us) / kGraphNodes);
  std::printf("\nhost time per empty launch (%d launches, us): bare %.3f, activity records on %.3f, + launch "
              "callbacks %.3f, + whole driver domain %.3f, + runtime domain %.3f\n",
              launches, bare_us, activity_us, launch_cbs_us, driver_domain_us, both_domains_us);
  std::printf("host time per 4-byte cudaMemsetAsync (%d calls, us): bare %.3f, activity records on %.3f, + a callback on "
              "every driver call (the copy audit's cost is below it) %.3f\n",
              launches, bare_memset_us, activity_memset_us, driver_domain_memset_us);
  if (graph_trace_on == CUPTI_SUCCESS) {
    std::printf("-- 5: graphs instantiated before GRAPH_TRACE was switched on, launched with it on (SIGSEGV in "
                "libcupti on an H100, 2026-12-07)\n");
    probe("cudaGraphLaunch of the 3-kernel graph, instantiated before the switch, GRAPH_TRACE and CONCURRENT_KERNEL on",
          [&] { CHECK_CUDA(cudaGraphLaunch(exec, s)); });
    probe("cudaGraphLaunch of the mixed graph, instantiated before the switch", [&] { CHECK_CUDA(cudaGraphLaunch(mixed, s)); });
    std::printf("-- 5: the graphs instantiated before the switch ran\n");
    (void)cuptiActivityDisable(CUPTI_ACTIVITY_KIND_GRAPH_TRACE);
    CHECK_CUDA(cudaGraphExecDestroy(chain_after));
    CHECK_CUDA(cudaGraphExecDestroy(three_after));
  }
  CHECK_CUDA(cudaGraphExecDestroy(chain));

  CHECK_CUBLAS(cublasDestroy(h));
  CHECK_CUDA(cudaGraphExecDestroy(exec));
  CHECK_CUDA(cudaGraphExecDestroy(mixed));
  CHECK_CUDA(cudaGraphExecDestroy(cond));
  CHECK_CUPTI(cuptiUnsubscribe(sub));
  CHECK_CUDA(cudaFree(m));
  CHECK_CUDA(cudaFree(counter));
  CHECK_CUDA(cudaStreamDestroy(s));
  return 0;
}
