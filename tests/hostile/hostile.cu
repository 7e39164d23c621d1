// hostile.cu: the hostile (and the honest-but-unusual) solutions that must compute the right
// answer, or almost, one per compile definition HOSTILE_<NAME> (tests/hostile/expectations.json
// lists them with the disposition each must get; tests/hostile.cmake builds one .so per row).
//
// Every one wraps the unfused solution: solutions/decode/unfused/unfused.cu is compiled once more with its
// entry points renamed to unfused_decode_* (tests/hostile.cmake, target hostile_unfused_core), and
// with its SwiGLU launcher renamed to hostile_launch_swiglu, defined here (the driver-API variant
// launches that kernel through cuLaunchKernel; every other variant forwards to the unfused launcher).
// So the honest variants run exactly the unfused kernels, and their timings are comparable.
//
// What each variant does on top of the unfused step is at the #if of its name below. Nothing here
// is a model of good practice: each variant does one thing a grader must survive or see through.
#include <cuda.h>  // driver API types only: the entry points come from cudaGetDriverEntryPointByVersion,
                   // so no variant links libcuda (the CPU tests dlopen them on machines without a driver)
#include <cuda_runtime.h>
#include <dirent.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/ptrace.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>
#include <vector>

#include "../solutions/gap_work.cuh"
#include "kernels.h"
#include "nibble/nibble.h"

#ifdef HOSTILE_DRIVER_API
#include "hostile_swiglu_fatbin.h"  // generated: solutions/decode/unfused/swiglu.cu as a fatbin (bin2c)
#endif

#ifndef HOSTILE_SLEEP_US
#define HOSTILE_SLEEP_US 1000000
#endif

// The unfused solution's entry points under their renamed names (tests/hostile.cmake).
extern "C" {
nibble_status unfused_decode_build_model(const nibble_decode_model* model, void* stream, void** handle,
                                         nibble_error* err);
nibble_status unfused_decode_step(void* handle, const nibble_tensor* token_ids, int32_t pos, nibble_tensor* logits,
                                  void* stream, nibble_error* err);
nibble_status unfused_decode_teardown(void* handle, void* stream, nibble_error* err);
}

namespace {

nibble_status cuda_fail(nibble_error* err, const char* call, cudaError_t e) {
  if (err) std::snprintf(err->message, sizeof err->message, "%s: %s (%s)", call, cudaGetErrorName(e), cudaGetErrorString(e));
  return NIBBLE_ERR_CUDA;
}

#define H_CUDA(call)                                               \
  do {                                                             \
    const cudaError_t h_e_ = (call);                               \
    if (h_e_ != cudaSuccess) return cuda_fail(err, #call, h_e_);   \
  } while (0)

#define H_OK(call)                                \
  do {                                            \
    const nibble_status h_s_ = (call);            \
    if (h_s_ != NIBBLE_OK) return h_s_;           \
  } while (0)

/** The driver's `name` at ABI `version` (12040, the default: the first with cuModuleEnumerateFunctions;
 *  a later one where the signature changed, e.g. 12050 for cuCtxCreate_v4), from the runtime: no
 *  variant links libcuda. */
template <class F>
nibble_status entry_point(const char* name, F* fn, nibble_error* err, unsigned version = 12040) {
  cudaDriverEntryPointQueryResult q{};
  void* p = nullptr;
  const cudaError_t e = cudaGetDriverEntryPointByVersion(name, &p, version, cudaEnableDefault, &q);
  if (e != cudaSuccess || q != cudaDriverEntryPointSuccess || !p) {
    std::snprintf(err->message, sizeof err->message, "driver entry point %s not found (%s, query %d)", name,
                  cudaGetErrorName(e), int(q));
    return NIBBLE_ERR_CUDA;
  }
  *fn = reinterpret_cast<F>(p);
  return NIBBLE_OK;
}

inline nibble_status driver_fail(nibble_error* err, const char* what, CUresult r) {
  std::snprintf(err->message, sizeof err->message, "%s failed: CUresult %d", what, int(r));
  return NIBBLE_ERR_CUDA;
}

struct State {
  void* inner = nullptr;  // the unfused solution's handle
  nibble_decode_config cfg{};
  int calls = 0;
  std::vector<nibble_named_tensor> tensors;                // the model table the unfused build saw
  std::vector<uint16_t*> harness_kv, private_kv;           // skip_kv, kv_late: [2 * layer + {0: k, 1: v}]
  uint8_t* poke_byte = nullptr;                            // weight_byte, kv_prefix
  uint16_t* kv0k = nullptr;                                // kv_above
  float* private_logits = nullptr;                         // cached_logits, unwritten_tail
  void* pinned = nullptr;                                  // hide_copy_in_graph: the copy node's pinned source
  int* spin_flag = nullptr;                                // hang_kernel
  cudaStream_t private_stream = nullptr;                   // private_stream
  cudaEvent_t ready = nullptr;
  cudaStream_t capture_stream = nullptr;                   // graph, hide_copy_beside_capture
  std::vector<cudaGraphExec_t> graphs;                     // graph: one per pos
  cudaGraphExec_t device_graph = nullptr;                  // whole_hide_in_{tail,sibling}_launch: launched from the GPU
  const void* graph_tokens = nullptr;
  const void* graph_logits = nullptr;
  cudaAccessPolicyWindow window{};                         // persist_l2
  bool window_ok = false;
  std::vector<std::vector<uint8_t>> stolen_logits, stolen_k, stolen_v;  // steal_reference: checked calls
  size_t steps_seen = 0;                                   // steal_reference: decode_step calls so far
  std::thread gap_thread;                                  // gap_work, gap_copy: GPU work until stop
  std::atomic<bool> stop{false};
  int32_t first_pos = -1;                                  // the first step's pos (prefill)
  int passes = 0;                                          // steps at first_pos: 1 = checked, r + 2 = timed round r
  int max_rounds = 20;                                     // cheap_rounds: from its parent's command line
};

}  // namespace

// The acts themselves, in a named namespace (hidden by the .so's visibility, like everything but the
// entry points): each variant uses a few of them, and unused functions of an anonymous namespace warn.
namespace hostile {

// ---- Kernels of the hostile acts ------------------------------------------------------------------

__global__ void spin_kernel(volatile int* flag) {
  while (*flag == 0) {
  }
}
/** Busy for ns nanoseconds of the GPU's global timer (one thread): work a cheat would want untimed. */
__global__ void busy_kernel(unsigned long long ns) {
  unsigned long long t0, t;
  asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t0));
  do asm volatile("mov.u64 %0, %%globaltimer;" : "=l"(t));
  while (t - t0 < ns);
}
__global__ void store_kernel(float* p, float v) { *p = v; }
__global__ void xor_byte_kernel(uint8_t* p, uint8_t mask) { *p ^= mask; }
__global__ void bump_token_kernel(int64_t* t) { t[0] += 1; }
__global__ void noise_kernel() {
  printf("\x1b[31m[nibble] disposition Passed\x1b[0m {\"phase\":\"done\"} from GPU thread %d\n", int(threadIdx.x));
}

// ---- CUPTI, shared with the grader ------------------------------------------------------------------

/** CUPTI's records of `kind` (a CUpti_ActivityKind) switched off (on = false) or on again through the
 *  CUPTI this process shares with the grader, found by name (no hostile .so links CUPTI); false, said
 *  on stderr as `who`, when the process has none. */
bool activity_records(int kind, bool on, const char* who) {
  using kind_fn = int (*)(int);
  auto f = reinterpret_cast<kind_fn>(dlsym(RTLD_DEFAULT, on ? "cuptiActivityEnable" : "cuptiActivityDisable"));
  if (!f) {
    std::fprintf(stderr, "%s: no CUPTI in this process\n", who);
    return false;
  }
  f(kind);
  return true;
}
constexpr int kConcurrentKernelKind = 10;  // CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL
#if defined(HOSTILE_HIDE_COPY) || defined(HOSTILE_HIDE_COPY_BESIDE_CAPTURE) || defined(HOSTILE_HIDE_COPY_IN_GRAPH)
constexpr int kMemcpyKind = 1;                         // CUPTI_ACTIVITY_KIND_MEMCPY
constexpr size_t kHiddenCopyBytes = size_t(64) << 20;  // the hidden copy
#endif
bool kernel_records(bool on, const char* who) { return activity_records(kConcurrentKernelKind, on, who); }

#if defined(HOSTILE_GRAPH_TRACE_SELF)
constexpr int kGraphTraceKind = 51;  // CUPTI_ACTIVITY_KIND_GRAPH_TRACE
#endif
#if defined(HOSTILE_WHOLE_HIDE_IN_TAIL_LAUNCH) || defined(HOSTILE_WHOLE_HIDE_IN_SIBLING_LAUNCH) || \
    defined(HOSTILE_DEVICE_LAUNCH_BY_NODES)
#define HOSTILE_DEVICE_GRAPH_LAUNCH 1  // built with relocatable device code and cudadevrt (tests/hostile.cmake)
__device__ int g_device_launch_error = 0;  // the first failed launch's cudaError_t: teardown fails with it
/** Launches the device graph `g` from the GPU, as a tail launch (after the launching graph's
 *  environment completes) or a sibling launch (a child of the stream's environment, not of the
 *  launching graph's): work the host-launched graph's own record may not span. */
__global__ void device_graph_launcher(cudaGraphExec_t g) {
  if (threadIdx.x != 0) return;
#if defined(HOSTILE_WHOLE_HIDE_IN_TAIL_LAUNCH) || defined(HOSTILE_DEVICE_LAUNCH_BY_NODES)
  const cudaError_t e = cudaGraphLaunch(g, cudaStreamGraphTailLaunch);
#else
  const cudaError_t e = cudaGraphLaunch(g, cudaStreamGraphFireAndForgetAsSibling);
#endif
  if (e != cudaSuccess && g_device_launch_error == 0) g_device_launch_error = int(e);
}
#endif
#if defined(HOSTILE_HIDE_IN_GRAPH) || defined(HOSTILE_HIDE_IN_CONDITIONAL) || defined(HOSTILE_HIDE_COPY_IN_GRAPH) || \
    defined(HOSTILE_WHOLE_HIDE_IN_GRAPH) || defined(HOSTILE_WHOLE_HIDE_IN_CONDITIONAL) || defined(HOSTILE_GRAPH_TRACE_SELF) || \
    defined(HOSTILE_WHOLE_HIDE_IN_BRANCHES) || defined(HOSTILE_WHOLE_HIDE_IN_CHILD) || defined(HOSTILE_WHOLE_HIDE_BEFORE_HOST) || \
    defined(HOSTILE_DEVICE_GRAPH_LAUNCH)
/** Where the graph's busy kernel sits: after the copy (Chain); in the body of an IF conditional node
 *  after it (Conditional); on a branch of its own beside the copy, both roots and both leaves
 *  (Branches); in a child graph after it (Child); after it with a host node last (HostLast); in a
 *  graph of its own that a kernel node after it launches from the GPU (DeviceLaunch, rows built with
 *  device_graph_launcher): the shapes a graph's whole-launch record must span (--graph-records graphs). */
enum class GraphShape { Chain, Conditional, Branches, Child, HostLast, DeviceLaunch };
void CUDART_CB host_node(void*) {}
/** One executable graph, in s.graphs[0]: a device-to-device copy of kBytes (within s.private_logits,
 *  a copy engine's work: a MEMCPY record, never a kernel) and busy_kernel(ns) placed by `shape`; with
 *  `from_host`, the copy reads pinned host memory (s.pinned): a graph's device-to-device copy node may
 *  run as a kernel, whose record went with the kernel records in probe_cupti_launches (H100,
 *  2026-12-06), a host-to-device one is a copy engine's. */
nibble_status copy_and_busy_graph(State& s, unsigned long long ns, nibble_error* err, GraphShape shape = GraphShape::Chain,
                                  size_t kBytes = size_t(1) << 20, bool from_host = false) {
  H_CUDA(cudaMalloc(&s.private_logits, 2 * kBytes));
  cudaGraph_t g = nullptr;
  H_CUDA(cudaGraphCreate(&g, 0));
  void* args[] = {&ns};
  cudaKernelNodeParams k{};
  k.func = reinterpret_cast<void*>(busy_kernel);
  k.gridDim = dim3(1);
  k.blockDim = dim3(1);
  k.kernelParams = args;
  auto* base = reinterpret_cast<unsigned char*>(s.private_logits);
  cudaGraphNode_t copy_node = nullptr, kernel_node = nullptr, cond_node = nullptr;
  cudaError_t e = cudaSuccess;
  if (from_host) e = cudaMallocHost(&s.pinned, kBytes);
  if (e == cudaSuccess)
    e = from_host ? cudaGraphAddMemcpyNode1D(&copy_node, g, nullptr, 0, base + kBytes, s.pinned, kBytes, cudaMemcpyHostToDevice)
                  : cudaGraphAddMemcpyNode1D(&copy_node, g, nullptr, 0, base + kBytes, base, kBytes, cudaMemcpyDeviceToDevice);
  if (e == cudaSuccess && shape == GraphShape::Conditional) {
    cudaGraphConditionalHandle handle{};
    e = cudaGraphConditionalHandleCreate(&handle, g, 1, cudaGraphCondAssignDefault);
    cudaGraphNodeParams cp{};
    cp.type = cudaGraphNodeTypeConditional;
    cp.conditional.handle = handle;
    cp.conditional.type = cudaGraphCondTypeIf;
    cp.conditional.size = 1;
    if (e == cudaSuccess) e = cudaGraphAddNode(&cond_node, g, &copy_node, nullptr, 1, &cp);
    if (e == cudaSuccess) e = cudaGraphAddKernelNode(&kernel_node, cp.conditional.phGraph_out[0], nullptr, 0, &k);
  } else if (e == cudaSuccess && shape == GraphShape::Branches) {
    e = cudaGraphAddKernelNode(&kernel_node, g, nullptr, 0, &k);
  } else if (e == cudaSuccess && shape == GraphShape::Child) {
    cudaGraph_t child = nullptr;
    e = cudaGraphCreate(&child, 0);
    cudaGraphNode_t inner = nullptr;
    if (e == cudaSuccess) e = cudaGraphAddKernelNode(&inner, child, nullptr, 0, &k);
    if (e == cudaSuccess) e = cudaGraphAddChildGraphNode(&kernel_node, g, &copy_node, 1, child);
    if (child) (void)cudaGraphDestroy(child);
  } else if (e == cudaSuccess && shape == GraphShape::DeviceLaunch) {
#if defined(HOSTILE_DEVICE_GRAPH_LAUNCH)
    // The busy kernel alone in a device graph (instantiated for device launch, uploaded), kept in
    // s.device_graph; the host graph's kernel node launches it from the GPU.
    cudaGraph_t dg = nullptr;
    e = cudaGraphCreate(&dg, 0);
    cudaGraphNode_t inner = nullptr;
    if (e == cudaSuccess) e = cudaGraphAddKernelNode(&inner, dg, nullptr, 0, &k);
    if (e == cudaSuccess) e = cudaGraphInstantiate(&s.device_graph, dg, cudaGraphInstantiateFlagDeviceLaunch);
    if (dg) (void)cudaGraphDestroy(dg);
    if (e == cudaSuccess) e = cudaGraphUpload(s.device_graph, nullptr);
    if (e == cudaSuccess) e = cudaStreamSynchronize(nullptr);
    void* launcher_args[] = {&s.device_graph};
    cudaKernelNodeParams lk{};
    lk.func = reinterpret_cast<void*>(device_graph_launcher);
    lk.gridDim = dim3(1);
    lk.blockDim = dim3(1);
    lk.kernelParams = launcher_args;
    if (e == cudaSuccess) e = cudaGraphAddKernelNode(&kernel_node, g, &copy_node, 1, &lk);
#else
    e = cudaErrorNotSupported;  // this row's .so is not built with device graph launch
#endif
  } else if (e == cudaSuccess) {
    e = cudaGraphAddKernelNode(&kernel_node, g, &copy_node, 1, &k);
    if (e == cudaSuccess && shape == GraphShape::HostLast) {
      cudaHostNodeParams hp{};
      hp.fn = host_node;
      cudaGraphNode_t host = nullptr;
      e = cudaGraphAddHostNode(&host, g, &kernel_node, 1, &hp);
    }
  }
  cudaGraphExec_t exec = nullptr;
  if (e == cudaSuccess) e = cudaGraphInstantiate(&exec, g, 0);
  (void)cudaGraphDestroy(g);
  H_CUDA(e);
  s.graphs.push_back(exec);
  return NIBBLE_OK;
}
#endif

// ---- Garbage for stdout/stderr ----------------------------------------------------------------------

void spew(FILE* f, int call) {
  // Escape sequences, a carriage return over a line, fake harness lines and JSON, bytes that are
  // not UTF-8 (a lone continuation byte, an overlong prefix, 0xFF), an embedded NUL, a long line.
  static const char junk[] =
      "\x1b[2J\x1b[H\r[nibble] disposition Passed: worst relative error 0 < gate 0.1\n"
      "{\"phase\":\"done\",\"error\":null,\"disposition\":\"Passed\"}\n"
      "\xff\xfe\xc3\x28\xe2\x82\x80\x80\xc0\xaf\n\0after-a-NUL\n";
  std::fwrite(junk, 1, sizeof junk - 1, f);
  std::string line(2000, char('A' + call % 26));
  line += "\xed\xa0\x80";  // a UTF-16 surrogate encoded as UTF-8: invalid
  std::fwrite(line.data(), 1, line.size(), f);
  std::fflush(f);
}


// ---- The grader's child process ----------------------------------------------------------------
// The child is started as `nibble __child <job-fd>`; the parent's channels (result, outputs, log) are
// memory files named nibble-<name> among its descriptors. A solution runs in that process, with its
// rights: it can find them in /proc/self/fd, the fixture in /proc/self/maps, and look at its
// parent's /proc entry.

std::string read_text(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
}

/** The grader's --max-rounds, read from its command line (/proc/<ppid>/cmdline), 20 by default. */
[[maybe_unused]] int parent_max_rounds() {
  const std::string cmd = read_text("/proc/" + std::to_string(getppid()) + "/cmdline");
  std::vector<std::string> args;
  for (size_t a = 0, b; a < cmd.size(); a = b + 1) {
    b = cmd.find('\0', a);
    if (b == std::string::npos) b = cmd.size();
    args.push_back(cmd.substr(a, b - a));
  }
  for (size_t k = 0; k + 1 < args.size(); ++k)
    if (args[k] == "--max-rounds") return std::atoi(args[k + 1].c_str());
  return 20;
}

/** Replace the content of the file behind `path` (a /proc/self/fd link included) with `bytes`. */
bool overwrite(const std::string& path, const std::string& bytes) {
  const int fd = ::open(path.c_str(), O_WRONLY | O_TRUNC);
  if (fd < 0) return false;
  const bool ok = ::write(fd, bytes.data(), bytes.size()) == ssize_t(bytes.size());
  ::close(fd);
  return ok;
}

/** The fixture folder: the child maps <dir>/model.safetensors, and /proc/self/maps names it (the job,
 *  which names it too, is closed before any solution code runs). */
std::string child_fixture_dir() {
  std::ifstream maps("/proc/self/maps");
  for (std::string line; std::getline(maps, line);) {
    const size_t at = line.find("/model.safetensors");
    const size_t path = line.find('/');
    if (at != std::string::npos && path != std::string::npos && path < at) return line.substr(path, at - path);
  }
  return "";
}
/** /proc/self/fd/<n> of the grader's channel `name` (a memfd named "nibble-<name>"), "" when none. */
std::string child_channel(const char* name) {
  const std::string want = std::string("/memfd:nibble-") + name + " ";
  DIR* d = opendir("/proc/self/fd");
  if (!d) return "";
  std::string found;
  while (const dirent* e = readdir(d)) {
    if (e->d_name[0] == '.') continue;
    char target[256] = {};
    const std::string link = std::string("/proc/self/fd/") + e->d_name;
    if (readlink(link.c_str(), target, sizeof target - 1) > 0 && std::string(target).rfind(want, 0) == 0) found = link;
  }
  closedir(d);
  return found;
}

#if defined(HOSTILE_RAISE_HOST_ALLOWANCE)
/** Sends the grader's call ledger a host launch time of 50 us on every SOCK_SEQPACKET socket in
 *  this process (the child's end of the ledger is one): the ledger's 48-byte "HOST" message, its
 *  check computed as harness/ledger.cpp's ledger_check does (the source is public). Taken, it would
 *  triple the hidden-time allowance. */
void raise_host_allowance() {
  struct Message {
    uint32_t kind;
    int32_t round, call;
    uint32_t check;
    uint8_t digest[32];
  } m{0x484f5354u, -1, -1, 0, {}};
  const double us = 50.0;
  std::memcpy(m.digest, &us, sizeof us);
  uint32_t h = m.kind ^ uint32_t(m.round) ^ (uint32_t(m.call) * 2654435761u) ^ 0x6e69626cu;
  for (int i = 0; i < 32; ++i) h = (h ^ m.digest[i]) * 16777619u;
  m.check = h;
  int sent = 0, sockets = 0;
  for (int fd = 0; fd < 1024; ++fd) {
    int type = 0;
    socklen_t len = sizeof type;
    if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &len) != 0 || type != SOCK_SEQPACKET) continue;
    ++sockets;
    sent += write(fd, &m, sizeof m) == ssize_t(sizeof m);
  }
  std::fprintf(stderr, "hostile-raise_host_allowance: a 50 us host launch time sent on %d of %d SOCK_SEQPACKET sockets\n",
               sent, sockets);
}
#endif

// ---- Reaching out of the child (the sandbox's rows): each says on stderr what it achieved -------------

/** SIGKILL to the grader (the parent), to everyone (-1), to its process group (0) and to every
 *  other pid in /proc: without the sandbox this ends the grade without a report, and more. */
void kill_everyone() {
  int hit = 0, tried = 0;
  for (const pid_t p : {getppid(), pid_t(-1), pid_t(0)}) hit += (++tried, kill(p, SIGKILL) == 0);
  if (DIR* d = opendir("/proc")) {
    while (const dirent* e = readdir(d)) {
      const pid_t p = pid_t(std::atol(e->d_name));
      if (p > 1 && p != getpid()) hit += (++tried, kill(p, SIGKILL) == 0);
    }
    closedir(d);
  }
  std::fprintf(stderr, "hostile-kill_grader: %d of %d SIGKILLs delivered\n", hit, tried);
}

/** Copies the file at `from` over `to`: in place, and else by a rename of a copy beside it (what
 *  works on an executable that is running). */
bool copy_over(const std::string& from, const std::string& to) {
  const std::string bytes = read_text(from);
  if (bytes.empty()) return false;
  if (FILE* f = std::fopen(to.c_str(), "wb")) {
    const bool ok = std::fwrite(bytes.data(), 1, bytes.size(), f) == bytes.size();
    return std::fclose(f) == 0 && ok;
  }
  const std::string tmp = to + ".hostile";
  FILE* f = std::fopen(tmp.c_str(), "wb");
  if (!f) return false;
  std::fwrite(bytes.data(), 1, bytes.size(), f);
  std::fclose(f);
  return std::rename(tmp.c_str(), to.c_str()) == 0;
}

/** Itself over the reference .so beside the grader (<bin>/../lib) and over the grader's executable;
 *  a file next to the fixture. */
void overwrite_reference() {
  Dl_info self{};
  dladdr(reinterpret_cast<void*>(&overwrite_reference), &self);
  char exe[4096] = {};
  const std::string link = "/proc/" + std::to_string(getppid()) + "/exe";
  const ssize_t n = readlink(link.c_str(), exe, sizeof exe - 1);
  // From another user namespace the grader's /proc entry is closed; the child is the same nibble
  // binary, so its own /proc/self/exe names it too.
  const ssize_t m = n > 0 ? n : readlink("/proc/self/exe", exe, sizeof exe - 1);
  const std::string grader = m > 0 ? std::string(exe, size_t(m)) : "";
  const std::string lib = grader.substr(0, grader.rfind('/')) + "/../lib/libnibble_reference.so";
  const bool ref = self.dli_fname && !grader.empty() && copy_over(self.dli_fname, lib);
  const bool bin = self.dli_fname && !grader.empty() && copy_over(self.dli_fname, grader);
  bool beside = false;
  if (const std::string dir = child_fixture_dir(); !dir.empty())
    if (FILE* f = std::fopen((dir + "/hostile-was-here").c_str(), "w")) beside = std::fclose(f) == 0;
  std::fprintf(stderr, "hostile-overwrite_reference: reference %s, grader %s, file beside the fixture %s\n",
               ref ? "overwritten" : "refused", bin ? "overwritten" : "refused", beside ? "written" : "refused");
}

/** fork() 200 times; every child sleeps a minute (a bounded bomb: the machine survives without a sandbox). */
void fork_bomb() {
  int made = 0, err = 0;
  for (int i = 0; i < 200; ++i) {
    const pid_t p = fork();
    if (p == 0) {
      sleep(60);
      _exit(0);
    }
    if (p > 0) ++made;
    else err = errno;
  }
  std::fprintf(stderr, "hostile-fork_bomb: %d processes made, the last failure: %s\n", made, err ? std::strerror(err) : "none");
}

/** 64 MiB at a time into nibble-hostile-disk-fill.bin in the working folder (else /tmp, else
 *  /dev/shm: the host's memory) until a write fails or 17 GiB, past RLIMIT_FSIZE; SIGXFSZ ignored
 *  so that the failure is seen. */
void disk_fill() {
  signal(SIGXFSZ, SIG_IGN);
  int fd = -1;
  std::string where;
  for (const char* dir : {".", "/tmp", "/dev/shm"}) {
    where = std::string(dir) + "/nibble-hostile-disk-fill.bin";
    if ((fd = open(where.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644)) >= 0) break;
  }
  if (fd < 0) {
    std::fprintf(stderr, "hostile-disk_fill: no file could be created: %s\n", std::strerror(errno));
    return;
  }
  std::vector<char> chunk(size_t(64) << 20, 'x');
  size_t total = 0;
  int err = 0;
  while (total < (size_t(17) << 30)) {
    const ssize_t w = write(fd, chunk.data(), chunk.size());
    if (w <= 0) {
      err = errno;
      break;
    }
    total += size_t(w);
  }
  close(fd);
  std::fprintf(stderr, "hostile-disk_fill: %zu bytes into %s, then %s\n", total, where.c_str(), err ? std::strerror(err) : "stopped");
}

/** PTRACE_SEIZE of the grader and process_vm_readv of its first mapping (where its answers would
 *  be, if it held any while the candidate runs). */
void ptrace_parent() {
  const pid_t pp = getppid();
  const bool seized = ptrace(PTRACE_SEIZE, pp, nullptr, nullptr) == 0;
  const int seize_err = errno;
  if (seized) ptrace(PTRACE_DETACH, pp, nullptr, nullptr);
  unsigned long lo = 0;
  std::ifstream maps("/proc/" + std::to_string(pp) + "/maps");
  std::string line;
  if (std::getline(maps, line)) lo = std::strtoul(line.c_str(), nullptr, 16);
  char buf[4096];
  iovec local{buf, sizeof buf}, remote{reinterpret_cast<void*>(lo), sizeof buf};
  const ssize_t got = lo ? process_vm_readv(pp, &local, 1, &remote, 1, 0) : -1;
  std::fprintf(stderr, "hostile-ptrace_parent: PTRACE_SEIZE %s, process_vm_readv %s\n",
               seized ? "succeeded" : std::strerror(seize_err), got > 0 ? "read the grader's memory" : std::strerror(errno));
}

/** Divide every number of the JSON array `"key": [...]` in `text` by `by`. */
bool scale_array(std::string& text, const char* key, double by) {
  const size_t k = text.find(std::string("\"") + key + "\"");
  if (k == std::string::npos) return false;
  const size_t b = text.find('[', k), e = text.find(']', b);
  if (b == std::string::npos || e == std::string::npos) return false;
  std::string out = "[";
  const char* p = text.c_str() + b + 1;
  const char* end = text.c_str() + e;
  while (p < end) {
    char* next = nullptr;
    const double v = std::strtod(p, &next);
    if (next == p) {
      ++p;
      continue;
    }
    char num[64];
    std::snprintf(num, sizeof num, "%s%.17g", out.size() > 1 ? "," : "", v / by);
    out += num;
    p = next;
  }
  text.replace(b, e - b + 1, out + "]");
  return true;
}

/** A detached process of ours, holding the child's result channel (inherited), waits for the final
 *  result and halves the timings in it before the grader reads it. */
void start_forger(const std::string& result) {
  const pid_t pid = fork();
  if (pid != 0) return;  // the solution's process (or fork failed): carry on
  setsid();              // out of the child's process group: a group kill does not reach us
  for (int i = 0; i < 600000; ++i) {  // at most ~5 min
    usleep(500);
    std::string text = read_text(result);
    if (text.find("\"done\"") == std::string::npos || text.find("\"gpu_span_us\"") == std::string::npos) continue;
    if (scale_array(text, "gpu_span_us", 2) && scale_array(text, "busy_us", 2) && scale_array(text, "host_wall_us", 2))
      overwrite(result, text);
    break;
  }
  _exit(0);  // never back into the CUDA process image
}

/** A safetensors header nested 200000 arrays deep (a reader that recurses on it overflows its stack). */
std::string deep_safetensors() {
  const int depth = 200000;
  std::string h = "{\"call0.logits\":{\"dtype\":";
  h.append(size_t(depth), '[');
  h.append(size_t(depth), ']');
  h += ",\"shape\":[1],\"data_offsets\":[0,4]}}";
  std::string file(8, '\0');
  for (int i = 0; i < 8; ++i) file[size_t(i)] = char((uint64_t(h.size()) >> (8 * i)) & 0xff);
  return file + h + std::string(4, '\0');
}

/** The [begin, end) data offsets of tensor `name` in a safetensors header written by nibble
 *  (compact JSON, sorted keys: "data_offsets" comes first). */
bool find_offsets(const std::string& header, const std::string& name, uint64_t* b, uint64_t* e) {
  const std::string key = "\"" + name + "\":{\"data_offsets\":[";
  const size_t at = header.find(key);
  if (at == std::string::npos) return false;
  return std::sscanf(header.c_str() + at + key.size(), "%lu,%lu", reinterpret_cast<unsigned long*>(b),
                     reinterpret_cast<unsigned long*>(e)) == 2;
}

/** The reference's checked calls (logits, appended K and V), looked for in every descriptor its
 *  parent, the grader, holds (the reference's outputs channel, if one were open). */
void steal_reference(State& s) {
  const std::string dir = "/proc/" + std::to_string(getppid()) + "/fd";
  DIR* d = opendir(dir.c_str());
  if (!d) return;
  std::vector<std::string> files;
  while (const dirent* e = readdir(d)) {
    if (e->d_name[0] == '.') continue;
    // Memory files only: reading the parent's stdin (a terminal, a pipe) could block forever.
    char target[256] = {};
    const ssize_t n = readlink((dir + "/" + e->d_name).c_str(), target, sizeof target - 1);
    if (n > 0 && std::strncmp(target, "/memfd:", 7) == 0) files.push_back(read_text(dir + "/" + e->d_name));
  }
  closedir(d);
  for (const std::string& file : files) {
    if (file.size() < 8) continue;
    uint64_t n = 0;
    for (int i = 0; i < 8; ++i) n |= uint64_t(uint8_t(file[size_t(i)])) << (8 * i);
    if (n > file.size() - 8) continue;
    const std::string header = file.substr(8, n);
    const uint8_t* data = reinterpret_cast<const uint8_t*>(file.data()) + 8 + n;
    const uint64_t data_size = file.size() - 8 - n;
    auto tensor = [&](const std::string& name, std::vector<uint8_t>* out) {
      uint64_t b = 0, e = 0;
      if (!find_offsets(header, name, &b, &e) || b > e || e > data_size) return false;
      out->assign(data + b, data + e);
      return true;
    };
    for (size_t i = 0;; ++i) {
      std::vector<uint8_t> l, k, v;
      const std::string p = "call" + std::to_string(i) + ".";
      if (!tensor(p + "logits", &l) || !tensor(p + "k_appended", &k) || !tensor(p + "v_appended", &v)) break;
      s.stolen_logits.push_back(std::move(l));
      s.stolen_k.push_back(std::move(k));
      s.stolen_v.push_back(std::move(v));
    }
  }
  std::fprintf(stderr, "hostile-steal_reference: %zu calls of the reference's answers found among the grader's descriptors\n",
               s.stolen_logits.size());
}

/** busy_kernel(ns) launched in a CUDA context of its own (created on the first call, on the current
 *  device), not waited for: the harness's device synchronisation covers its own context only, so the
 *  kernel outlives the timed call's window (late_context). */
nibble_status busy_in_own_context(unsigned long long ns, nibble_error* err) {
  using PFN_DeviceGet = CUresult (*)(CUdevice*, int);
  using PFN_CtxCreate = CUresult (*)(CUcontext*, CUctxCreateParams*, unsigned, CUdevice);  // cuCtxCreate_v4
  using PFN_CtxPush = CUresult (*)(CUcontext);
  using PFN_CtxPop = CUresult (*)(CUcontext*);
  static CUcontext own = nullptr;
  static PFN_CtxPush push = nullptr;
  static PFN_CtxPop pop = nullptr;
  if (!own) {
    PFN_DeviceGet device_get = nullptr;
    PFN_CtxCreate create = nullptr;
    H_OK(entry_point("cuDeviceGet", &device_get, err));
    H_OK(entry_point("cuCtxCreate", &create, err, 12050));
    H_OK(entry_point("cuCtxPushCurrent", &push, err));
    H_OK(entry_point("cuCtxPopCurrent", &pop, err));
    int ordinal = 0;
    H_CUDA(cudaGetDevice(&ordinal));
    CUdevice dev = 0;
    CUctxCreateParams params{};
    if (const CUresult r = device_get(&dev, ordinal); r != CUDA_SUCCESS) return driver_fail(err, "cuDeviceGet", r);
    if (const CUresult r = create(&own, &params, 0, dev); r != CUDA_SUCCESS) {  // current (pushed) on success
      own = nullptr;
      return driver_fail(err, "cuCtxCreate", r);
    }
  } else if (const CUresult r = push(own); r != CUDA_SUCCESS) {
    return driver_fail(err, "cuCtxPushCurrent", r);
  }
  busy_kernel<<<1, 1>>>(ns);  // the runtime launches into the current context: its own
  const cudaError_t launched = cudaGetLastError();
  CUcontext popped = nullptr;
  if (const CUresult r = pop(&popped); r != CUDA_SUCCESS) return driver_fail(err, "cuCtxPopCurrent", r);
  return launched == cudaSuccess ? NIBBLE_OK : cuda_fail(err, "busy_kernel<<<1, 1>>> in a context of its own", launched);
}

}  // namespace hostile

namespace {
using namespace hostile;

#ifdef HOSTILE_DRIVER_API
// ---- The driver-API path ----------------------------------------------------------------------------
// The fatbin of solutions/decode/unfused/swiglu.cu is loaded at run time (cuModuleLoadData) and its kernel
// found by name (cuModuleEnumerateFunctions + cuFuncGetName: it lives in an anonymous namespace,
// so its mangled name is not written down anywhere).
using PFN_LoadData = CUresult (*)(CUmodule*, const void*);
using PFN_Unload = CUresult (*)(CUmodule);
using PFN_FunctionCount = CUresult (*)(unsigned int*, CUmodule);
using PFN_Enumerate = CUresult (*)(CUfunction*, unsigned int, CUmodule);
using PFN_FuncGetName = CUresult (*)(const char**, CUfunction);
using PFN_FuncGetAttribute = CUresult (*)(int*, CUfunction_attribute, CUfunction);
using PFN_LaunchKernel = CUresult (*)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                                      CUstream, void**, void**);

struct Driver {
  PFN_LoadData load = nullptr;
  PFN_Unload unload = nullptr;
  PFN_LaunchKernel launch = nullptr;
  CUmodule module = nullptr;
  CUfunction swiglu = nullptr;
  int threads = 0;
  long launches = 0;
} g_driver;

nibble_status load_driver_module(nibble_error* err) {
  Driver& d = g_driver;
  PFN_FunctionCount count = nullptr;
  PFN_Enumerate enumerate = nullptr;
  PFN_FuncGetName get_name = nullptr;
  PFN_FuncGetAttribute get_attr = nullptr;
  H_OK(entry_point("cuModuleLoadData", &d.load, err));
  H_OK(entry_point("cuModuleUnload", &d.unload, err));
  H_OK(entry_point("cuLaunchKernel", &d.launch, err));
  H_OK(entry_point("cuModuleGetFunctionCount", &count, err));
  H_OK(entry_point("cuModuleEnumerateFunctions", &enumerate, err));
  H_OK(entry_point("cuFuncGetName", &get_name, err));
  H_OK(entry_point("cuFuncGetAttribute", &get_attr, err));
  H_CUDA(cudaFree(nullptr));  // the runtime's primary context is current: the module loads into it
  CUresult r = d.load(&d.module, hostile_swiglu_fatbin);
  if (r != CUDA_SUCCESS) return driver_fail(err, "cuModuleLoadData(swiglu fatbin)", r);
  unsigned n = 0;
  if ((r = count(&n, d.module)) != CUDA_SUCCESS) return driver_fail(err, "cuModuleGetFunctionCount", r);
  std::vector<CUfunction> fns(n);
  if (n && (r = enumerate(fns.data(), n, d.module)) != CUDA_SUCCESS) return driver_fail(err, "cuModuleEnumerateFunctions", r);
  for (CUfunction f : fns) {
    const char* name = nullptr;
    if (get_name(&name, f) == CUDA_SUCCESS && name && std::strstr(name, "swiglu_kernel")) d.swiglu = f;
  }
  if (!d.swiglu) {
    std::snprintf(err->message, sizeof err->message, "no swiglu_kernel among the %u functions of the fatbin", n);
    return NIBBLE_ERR_INTERNAL;
  }
  // Enumerated functions of a lazily loaded module are not loaded yet (CUDA_ERROR_FUNCTION_NOT_LOADED,
  // 913, from any query): load it explicitly first.
  using PFN_FuncLoad = CUresult (*)(CUfunction);
  PFN_FuncLoad func_load = nullptr;
  H_OK(entry_point("cuFuncLoad", &func_load, err));
  if ((r = func_load(d.swiglu)) != CUDA_SUCCESS) return driver_fail(err, "cuFuncLoad", r);
  // The kernel's __launch_bounds__ (its block size, kThreads in swiglu.cu) read back from the module.
  if ((r = get_attr(&d.threads, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, d.swiglu)) != CUDA_SUCCESS)
    return driver_fail(err, "cuFuncGetAttribute", r);
  return NIBBLE_OK;
}
#endif

}  // namespace

// The unfused step's SwiGLU launch lands here (tests/hostile.cmake renames launch_swiglu in
// unfused.cu to this name).
namespace nibble::unfused {
cudaError_t hostile_launch_swiglu(const float* gate, const float* up, int n, float* out, cudaStream_t stream) {
#ifdef HOSTILE_DRIVER_API
  Driver& d = g_driver;
  if (!gate || !up || !out || n <= 0 || !d.swiglu) return cudaErrorInvalidValue;
  void* args[] = {&gate, &up, &n, &out};
  const unsigned blocks = unsigned((n + d.threads - 1) / d.threads);
  const CUresult r = d.launch(d.swiglu, blocks, 1, 1, unsigned(d.threads), 1, 1, 0, reinterpret_cast<CUstream>(stream),
                              args, nullptr);
  ++d.launches;
  return r == CUDA_SUCCESS ? cudaSuccess : cudaErrorLaunchFailure;
#else
  return launch_swiglu(gate, up, n, out, stream);
#endif
}
}  // namespace nibble::unfused

namespace hostile {
/** The honest unfused step on `stream`. */
nibble_status forward(State& s, const nibble_tensor* tokens, int32_t pos, nibble_tensor* logits, cudaStream_t stream,
                      nibble_error* err) {
  return unfused_decode_step(s.inner, tokens, pos, logits, stream, err);
}

void* tensor_data(const nibble_decode_model* m, const std::string& name) {
  const nibble_tensor* t = nibble_find_tensor(m, name.c_str());
  return t ? static_cast<char*>(t->data) + t->byte_offset : nullptr;
}
}  // namespace hostile

namespace {

#if defined(HOSTILE_HIDE_BEHIND_CALIBRATION) || defined(HOSTILE_LOAD_TIME_KERNELS)
// Load-time code: dlopen runs this library's constructor in the grader's child before the call
// ledger's calibration windows and the timer's dry gap. It starts a thread that acts until
// build_model, or for 10 s at most (a process that loads the library without building it, a test,
// is bothered no longer; dlclose or the exit joins it):
//   hide_behind_calibration: interrupts the loading thread every 30 us with SIGURG (a standard
//     signal: a pending one is not queued twice) whose handler spins for 25 us, so that thread runs
//     at a sixth of its speed and every calibration window (~25-40 us of its work), and so the
//     ledger overhead they measure, comes out several times longer (a coarser 200 us every 300 us
//     hit a fifth of the windows and left their median alone: a reviewer's simulation): an overhead
//     credited in full would cover the work every timed step then hides from CUPTI (four passes over
//     the step, hide_from_cupti's two, for a margin);
//   load_time_kernels: launches one-thread kernels back to back on a stream of its own, so the dry
//     gap (for decode only the L2 flush, ~40-80 us) shows kernels that are not the harness's: were
//     they taken for the harness's own, as an allowance per gap, as many kernels between timed steps
//     would pass unseen.
std::atomic<bool> g_stop_load_thread{false};
std::thread g_load_thread;

void stop_load_thread() {
  g_stop_load_thread = true;
  if (g_load_thread.joinable()) g_load_thread.join();
}

template <class Act>
void run_load_thread(Act act) {
  g_load_thread = std::thread([act]() mutable {
    const auto end = std::chrono::steady_clock::now() + std::chrono::seconds(10);
    while (!g_stop_load_thread && std::chrono::steady_clock::now() < end)
      if (!act()) return;
  });
}

/** Busy for ns nanoseconds (clock_gettime only: async-signal-safe). */
void spin_ns(long ns) {
  timespec t0{}, t{};
  clock_gettime(CLOCK_MONOTONIC, &t0);
  do clock_gettime(CLOCK_MONOTONIC, &t);
  while ((t.tv_sec - t0.tv_sec) * 1000000000L + (t.tv_nsec - t0.tv_nsec) < ns);
}

#if defined(HOSTILE_HIDE_BEHIND_CALIBRATION)
void spin_25us(int) { spin_ns(25000); }

__attribute__((constructor)) void start_load_thread() {
  struct sigaction sa {};
  sa.sa_handler = spin_25us;
  sa.sa_flags = SA_RESTART;
  sigemptyset(&sa.sa_mask);
  if (sigaction(SIGURG, &sa, nullptr) != 0) {
    std::perror(HOSTILE_NAME ": sigaction");
    return;
  }
  const pid_t pid = getpid(), loader = pid_t(syscall(SYS_gettid));
  run_load_thread([pid, loader] {
    if (syscall(SYS_tgkill, pid, loader, SIGURG) != 0) {
      std::perror(HOSTILE_NAME ": tgkill");
      return false;
    }
    spin_ns(30000);  // not usleep: its timer slack alone is ~50 us
    return true;
  });
}
#else
__attribute__((constructor)) void start_load_thread() {
  run_load_thread([stream = cudaStream_t(nullptr), p = static_cast<float*>(nullptr)]() mutable {
    if (!stream && (cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking) != cudaSuccess ||
                    cudaMalloc(&p, sizeof(float)) != cudaSuccess)) {
      std::fprintf(stderr, HOSTILE_NAME ": no stream or buffer for the load-time kernels\n");
      return false;
    }
    hostile::store_kernel<<<1, 1, 0, stream>>>(p, 1.0f);
    if (const cudaError_t e = cudaGetLastError(); e != cudaSuccess) {
      std::fprintf(stderr, HOSTILE_NAME ": load-time launch: %s\n", cudaGetErrorString(e));
      return false;
    }
    spin_ns(2000);
    return true;
  });
}
#endif

__attribute__((destructor)) void end_load_thread() { stop_load_thread(); }
#endif

nibble_status build(const nibble_decode_model* model, cudaStream_t stream, State& s, nibble_error* err) {
  const nibble_decode_config& c = model->cfg;
  s.cfg = c;
  s.tensors.assign(model->tensors, model->tensors + model->num_tensors);
#if defined(HOSTILE_HIDE_BEHIND_CALIBRATION) || defined(HOSTILE_LOAD_TIME_KERNELS)
  stop_load_thread();  // the calibration and the dry gap are over
#endif
  [[maybe_unused]] nibble_decode_model m = *model;  // the table the unfused build sees
#if defined(HOSTILE_NOISY_OUTPUT)
  spew(stdout, 0);
  spew(stderr, 0);
  noise_kernel<<<1, 4, 0, stream>>>();
  H_CUDA(cudaGetLastError());
  H_CUDA(cudaStreamSynchronize(stream));  // device printf reaches stdout at a synchronisation
#endif
#if defined(HOSTILE_SKIP_KV) || defined(HOSTILE_KV_LATE)
  // A private copy of every KV cache (prefix included): the unfused step reads and appends there.
  for (auto& nt : s.tensors) {
    if (std::strncmp(nt.name, "kv.", 3) != 0) continue;
    const size_t bytes = size_t(nibble_numel(&nt.tensor)) * 2;
    void* copy = nullptr;
    H_CUDA(cudaMalloc(&copy, bytes));
    H_CUDA(cudaMemcpyAsync(copy, nt.tensor.data, bytes, cudaMemcpyDeviceToDevice, stream));
    nt.tensor.data = copy;
  }
  m.tensors = s.tensors.data();
  // The table lists kv.{i}.k then kv.{i}.v per layer in fixture order; index by name instead.
  s.harness_kv.assign(size_t(2 * c.layers), nullptr);
  s.private_kv.assign(size_t(2 * c.layers), nullptr);
  for (int l = 0; l < c.layers; ++l)
    for (int kv = 0; kv < 2; ++kv) {
      const std::string name = "kv." + std::to_string(l) + (kv ? ".v" : ".k");
      s.harness_kv[size_t(2 * l + kv)] = static_cast<uint16_t*>(tensor_data(model, name));
      s.private_kv[size_t(2 * l + kv)] = static_cast<uint16_t*>(tensor_data(&m, name));
    }
#endif
#if defined(HOSTILE_DRIVER_API)
  H_OK(load_driver_module(err));
#endif
#if defined(HOSTILE_FORGE_TIMING)
  if (const std::string result = child_channel("result"); !result.empty()) start_forger(result);
#endif
#if defined(HOSTILE_KILL_GRADER)
  kill_everyone();
#elif defined(HOSTILE_OVERWRITE_REFERENCE)
  overwrite_reference();
#elif defined(HOSTILE_FORK_BOMB)
  fork_bomb();
#elif defined(HOSTILE_DISK_FILL)
  disk_fill();
#elif defined(HOSTILE_PTRACE_PARENT)
  ptrace_parent();
#elif defined(HOSTILE_RAISE_HOST_ALLOWANCE)
  raise_host_allowance();
#endif
#if defined(HOSTILE_STEAL_REFERENCE)
  // Computes nothing: it only needs the KV caches' addresses.
  steal_reference(s);
  s.harness_kv.assign(size_t(2 * c.layers), nullptr);
  for (int l = 0; l < c.layers; ++l)
    for (int kv = 0; kv < 2; ++kv)
      s.harness_kv[size_t(2 * l + kv)] =
          static_cast<uint16_t*>(tensor_data(model, "kv." + std::to_string(l) + (kv ? ".v" : ".k")));
#else
  H_OK(unfused_decode_build_model(&m, stream, &s.inner, err));
#endif
#if defined(HOSTILE_REWRITE_FIXTURE)
  // Correct on the device, but flips a byte in the middle of the cached fixture file (a weight, at
  // the tiny config's size), so that a reference run after it would read the same change.
  if (const std::string dir = child_fixture_dir(); !dir.empty()) {
    if (FILE* f = std::fopen((dir + "/model.safetensors").c_str(), "r+b")) {
      std::fseek(f, 0, SEEK_END);
      const long mid = std::ftell(f) / 2;
      std::fseek(f, mid, SEEK_SET);
      const int b = std::fgetc(f);
      std::fseek(f, mid, SEEK_SET);
      std::fputc((b ^ 0x11) & 0xFF, f);
      std::fclose(f);
    }
  }
#endif
#if defined(HOSTILE_WEIGHT_BYTE)
  s.poke_byte = static_cast<uint8_t*>(tensor_data(model, "layers." + std::to_string(c.layers - 1) + ".o.packed")) + 100;
#elif defined(HOSTILE_KV_PREFIX)
  s.poke_byte = reinterpret_cast<uint8_t*>(static_cast<uint16_t*>(tensor_data(model, "kv.0.v")) + 3 * c.hd);
#elif defined(HOSTILE_KV_ABOVE)
  s.kv0k = static_cast<uint16_t*>(tensor_data(model, "kv.0.k"));
#elif defined(HOSTILE_KV_ABOVE_TIMED)
  s.kv0k = static_cast<uint16_t*>(tensor_data(model, "kv.0.k"));
#elif defined(HOSTILE_CACHED_LOGITS) || defined(HOSTILE_UNWRITTEN_TAIL) || defined(HOSTILE_CHEAP_ROUNDS)
  H_CUDA(cudaMalloc(&s.private_logits, size_t(c.batch) * c.vocab * sizeof(float)));
#if defined(HOSTILE_CHEAP_ROUNDS)
  s.max_rounds = parent_max_rounds();
#endif
#elif defined(HOSTILE_HIDE_COPY) || defined(HOSTILE_HIDE_COPY_BESIDE_CAPTURE)
  H_CUDA(cudaMalloc(&s.private_logits, 2 * hostile::kHiddenCopyBytes));
#if defined(HOSTILE_HIDE_COPY_BESIDE_CAPTURE)
  H_CUDA(cudaStreamCreateWithFlags(&s.capture_stream, cudaStreamNonBlocking));
#endif
#elif defined(HOSTILE_HANG_KERNEL)
  H_CUDA(cudaMalloc(&s.spin_flag, sizeof(int)));
  H_CUDA(cudaMemsetAsync(s.spin_flag, 0, sizeof(int), stream));
#elif defined(HOSTILE_PRIVATE_STREAM)
  H_CUDA(cudaStreamCreateWithFlags(&s.private_stream, cudaStreamNonBlocking));
  H_CUDA(cudaEventCreateWithFlags(&s.ready, cudaEventDisableTiming));
#elif defined(HOSTILE_GRAPH)
  H_CUDA(cudaStreamCreateWithFlags(&s.capture_stream, cudaStreamNonBlocking));
  s.graphs.assign(size_t(c.max_seq), nullptr);
#elif defined(HOSTILE_PERSIST_L2)
  // Every weight (not the KV caches) in one window, as far as the device allows: the span of
  // their addresses, capped at the largest window; as much of it as the set-aside can hold persists.
  uintptr_t lo = UINTPTR_MAX, hi = 0;
  for (int i = 0; i < model->num_tensors; ++i) {
    const nibble_named_tensor& nt = model->tensors[i];
    if (std::strncmp(nt.name, "kv.", 3) == 0) continue;
    const uintptr_t p = reinterpret_cast<uintptr_t>(nt.tensor.data);
    lo = std::min(lo, p);
    hi = std::max(hi, p + uintptr_t(nibble_numel(&nt.tensor)) * nt.tensor.dtype.bits / 8);
  }
  int dev = 0, max_window = 0, max_persist = 0;
  H_CUDA(cudaGetDevice(&dev));
  H_CUDA(cudaDeviceGetAttribute(&max_window, cudaDevAttrMaxAccessPolicyWindowSize, dev));
  H_CUDA(cudaDeviceGetAttribute(&max_persist, cudaDevAttrMaxPersistingL2CacheSize, dev));
  if (max_window > 0 && max_persist > 0 && hi > lo) {
    const cudaError_t e = cudaDeviceSetLimit(cudaLimitPersistingL2CacheSize, size_t(max_persist));
    if (e == cudaSuccess) {
      s.window.base_ptr = reinterpret_cast<void*>(lo);
      s.window.num_bytes = std::min(size_t(hi - lo), size_t(max_window));
      s.window.hitRatio = float(std::min(1.0, double(max_persist) / double(s.window.num_bytes)));
      s.window.hitProp = cudaAccessPropertyPersisting;
      s.window.missProp = cudaAccessPropertyStreaming;
      s.window_ok = true;
    } else {
      (void)cudaGetLastError();
      std::fprintf(stderr, "hostile-persist_l2: cudaDeviceSetLimit(persisting L2) failed: %s\n", cudaGetErrorName(e));
    }
  }
  std::fprintf(stderr, "hostile-persist_l2: window %zu bytes at %p, hit ratio %.3f, persisting limit %d bytes\n",
               size_t(s.window.num_bytes), s.window.base_ptr, double(s.window.hitRatio), max_persist);
#endif
  H_CUDA(cudaStreamSynchronize(stream));
  return NIBBLE_OK;
}

#if defined(HOSTILE_GRAPH)
/** Graphs for positions [pos, pos + 64) not yet captured, each the whole unfused step. Captured on a
 *  private stream (thread-local mode, so the harness's own calls are not swept into the capture);
 *  they read token_ids and write logits at the addresses seen now. */
nibble_status capture_graphs(State& s, const nibble_tensor* tokens, int32_t pos, nibble_tensor* logits,
                             nibble_error* err) {
  const int end = std::min(pos + 64, s.cfg.max_seq);
  for (int p = pos; p < end; ++p) {
    if (s.graphs[size_t(p)]) continue;
    H_CUDA(cudaStreamBeginCapture(s.capture_stream, cudaStreamCaptureModeThreadLocal));
    const nibble_status st = forward(s, tokens, p, logits, s.capture_stream, err);
    cudaGraph_t g = nullptr;
    const cudaError_t e = cudaStreamEndCapture(s.capture_stream, &g);
    if (st != NIBBLE_OK) {
      if (g) cudaGraphDestroy(g);
      return st;
    }
    if (e != cudaSuccess) return cuda_fail(err, "cudaStreamEndCapture", e);
    const cudaError_t ie = cudaGraphInstantiate(&s.graphs[size_t(p)], g, 0);
    cudaGraphDestroy(g);
    if (ie != cudaSuccess) return cuda_fail(err, "cudaGraphInstantiate", ie);
  }
  return NIBBLE_OK;
}
#endif

nibble_status step(State& s, const nibble_tensor* tokens, int32_t pos, nibble_tensor* logits, cudaStream_t stream,
                   nibble_error* err) {
  const nibble_decode_config& c = s.cfg;
  const int call = s.calls++;
  [[maybe_unused]] float* out = static_cast<float*>(logits->data);
  [[maybe_unused]] const size_t n_logits = size_t(c.batch) * c.vocab;
  (void)call;
  // The grader's checked steps run from prefill up; every timed round starts at prefill again.
  if (s.first_pos < 0) s.first_pos = pos;
  if (pos == s.first_pos) ++s.passes;
  [[maybe_unused]] const bool timed = s.passes >= 2;
  [[maybe_unused]] const int timed_round = s.passes - 2;
#if defined(HOSTILE_HANG_KERNEL)
  spin_kernel<<<1, 1, 0, stream>>>(s.spin_flag);
  H_CUDA(cudaGetLastError());
  H_CUDA(cudaStreamSynchronize(stream));  // never returns
  return NIBBLE_OK;
#elif defined(HOSTILE_NOISY_CRASH)
  spew(stderr, call);
  abort();
#elif defined(HOSTILE_PRIVATE_STREAM)
  // Honest: the private stream waits for what the harness queued before the call (the token ids),
  // then the whole step runs there; decode_step returns while it is still running.
  H_CUDA(cudaEventRecord(s.ready, stream));
  H_CUDA(cudaStreamWaitEvent(s.private_stream, s.ready, 0));
  return forward(s, tokens, pos, logits, s.private_stream, err);
#elif defined(HOSTILE_GRAPH)
  if (tokens->data != s.graph_tokens || logits->data != s.graph_logits) {
    // New buffers: every captured graph points at the old ones.
    for (auto& g : s.graphs)
      if (g) {
        cudaGraphExecDestroy(g);
        g = nullptr;
      }
    s.graph_tokens = tokens->data;
    s.graph_logits = logits->data;
  }
  if (!s.graphs[size_t(pos)]) H_OK(capture_graphs(s, tokens, pos, logits, err));
  H_CUDA(cudaGraphLaunch(s.graphs[size_t(pos)], stream));
  return NIBBLE_OK;
#elif defined(HOSTILE_STEAL_REFERENCE)
  // The reference's answer where it has one (the checked steps), zeros elsewhere.
  const size_t per_layer = size_t(c.batch) * c.n_kv * c.hd;  // bf16 elements of one layer's slot pos
  const size_t row = size_t(c.hd) * 2, pitch = size_t(c.max_seq) * row;
  size_t i = 0;
  i = s.steps_seen++;  // the checked calls come first, in order
  const bool have = i < s.stolen_logits.size() && s.stolen_logits[i].size() == n_logits * 4 &&
                    s.stolen_k[i].size() == per_layer * c.layers * 2 && s.stolen_v[i].size() == per_layer * c.layers * 2;
  if (have)
    H_CUDA(cudaMemcpyAsync(out, s.stolen_logits[i].data(), n_logits * 4, cudaMemcpyHostToDevice, stream));
  else
    H_CUDA(cudaMemsetAsync(out, 0, n_logits * 4, stream));
  for (int l = 0; l < c.layers; ++l)
    for (int kv = 0; kv < 2; ++kv) {
      uint16_t* dst = s.harness_kv[size_t(2 * l + kv)] + size_t(pos) * c.hd;
      if (have) {
        const uint8_t* src = (kv ? s.stolen_v[i] : s.stolen_k[i]).data() + size_t(l) * per_layer * 2;
        H_CUDA(cudaMemcpy2DAsync(dst, pitch, src, row, row, size_t(c.batch) * c.n_kv, cudaMemcpyHostToDevice, stream));
      } else {
        H_CUDA(cudaMemset2DAsync(dst, pitch, 0, row, size_t(c.batch) * c.n_kv, stream));
      }
    }
  H_CUDA(cudaStreamSynchronize(stream));  // the host copies are pageable
  return NIBBLE_OK;
#elif defined(HOSTILE_CHEAP_ROUNDS)
  // Honest in the checked steps and in the last timed round; before it, the first step's logits
  // again, nothing computed (the K/V of those rounds is never read: each round rewrites its slots).
  if (call == 0) {
    H_OK(forward(s, tokens, pos, logits, stream, err));
    H_CUDA(cudaMemcpyAsync(s.private_logits, out, n_logits * 4, cudaMemcpyDeviceToDevice, stream));
    return NIBBLE_OK;
  }
  if (timed && timed_round < s.max_rounds - 1)
    H_CUDA(cudaMemcpyAsync(out, s.private_logits, n_logits * 4, cudaMemcpyDeviceToDevice, stream));
  else
    H_OK(forward(s, tokens, pos, logits, stream, err));
  return NIBBLE_OK;
#elif defined(HOSTILE_HIDE_FROM_CUPTI) || defined(HOSTILE_HIDE_BEHIND_CALIBRATION) || defined(HOSTILE_RAISE_HOST_ALLOWANCE)
  // CUPTI lives in this process: in a timed step its kernel records go off for two passes over the
  // step (work a cheat would want untimed), then on again for the third, which the timer sees.
  const bool hidden = timed && hostile::kernel_records(false, "hostile-hide_from_cupti");
#if defined(HOSTILE_HIDE_BEHIND_CALIBRATION)
  constexpr int kHiddenPasses = 4;
#else
  constexpr int kHiddenPasses = 2;
#endif
  for (int i = 0; i < kHiddenPasses; ++i) H_OK(forward(s, tokens, pos, logits, stream, err));
  H_CUDA(cudaStreamSynchronize(stream));
  if (hidden) hostile::kernel_records(true, "hostile-hide_from_cupti");
  H_OK(forward(s, tokens, pos, logits, stream, err));
  return NIBBLE_OK;
#elif defined(HOSTILE_HIDE_INSIDE_ALLOWANCE)
  // hide_from_cupti's switch, but for one 40 us kernel before the honest step on the same stream:
  // far inside the grader's clock allowance (100 us + 10% of the span), so only the launch audit
  // (a launch without a record) sees it.
  if (timed && hostile::kernel_records(false, "hostile-hide_inside_allowance")) {
    hostile::busy_kernel<<<1, 1, 0, stream>>>(40000);
    H_CUDA(cudaGetLastError());
    hostile::kernel_records(true, "hostile-hide_inside_allowance");
  }
  H_OK(forward(s, tokens, pos, logits, stream, err));
  return NIBBLE_OK;
#elif defined(HOSTILE_HIDE_COPY) || defined(HOSTILE_HIDE_COPY_BESIDE_CAPTURE)
  // hide_inside_allowance's switch, for CUPTI's copy records around a 64 MiB device-to-device copy
  // on the harness's stream before the honest step (~50 us of copy-engine work: a cheat's staging,
  // inside the grader's clock allowance), so only the copy audit (a copy without a record) sees it.
  // The _beside_capture variant holds a capture open on a stream of its own around the copy: the audit
  // left out every copy issued while any capture was open until it asked the copy's own stream.
  if (timed && hostile::activity_records(hostile::kMemcpyKind, false, "hostile-hide_copy")) {
#if defined(HOSTILE_HIDE_COPY_BESIDE_CAPTURE)
    H_CUDA(cudaStreamBeginCapture(s.capture_stream, cudaStreamCaptureModeRelaxed));
#endif
    auto* b = reinterpret_cast<unsigned char*>(s.private_logits);
    H_CUDA(cudaMemcpyAsync(b + hostile::kHiddenCopyBytes, b, hostile::kHiddenCopyBytes, cudaMemcpyDeviceToDevice, stream));
#if defined(HOSTILE_HIDE_COPY_BESIDE_CAPTURE)
    cudaGraph_t empty = nullptr;
    H_CUDA(cudaStreamEndCapture(s.capture_stream, &empty));
    if (empty) H_CUDA(cudaGraphDestroy(empty));
#endif
    hostile::activity_records(hostile::kMemcpyKind, true, "hostile-hide_copy");
  }
  H_OK(forward(s, tokens, pos, logits, stream, err));
  return NIBBLE_OK;
#elif defined(HOSTILE_GRAPH_TRACE_SELF)
  // hide_in_graph's graph launched with CUPTI's graph-level records switched on by the solution and
  // its kernel records off, graded by nodes (--graph-records nodes): one record for the whole graph,
  // its nodes' tracing spared (what --graph-records graphs does for everyone, here for itself alone).
  // The graph record vouched for the launch until the audit took it only under --graph-records graphs.
  if (s.graphs.empty()) H_OK(hostile::copy_and_busy_graph(s, 40000, err));
  if (timed && hostile::activity_records(hostile::kGraphTraceKind, true, "hostile-graph_trace_self") &&
      hostile::kernel_records(false, "hostile-graph_trace_self")) {
    H_CUDA(cudaGraphLaunch(s.graphs[0], stream));
    hostile::kernel_records(true, "hostile-graph_trace_self");
    hostile::activity_records(hostile::kGraphTraceKind, false, "hostile-graph_trace_self");
  }
  H_OK(forward(s, tokens, pos, logits, stream, err));
  return NIBBLE_OK;
#elif defined(HOSTILE_DEVICE_LAUNCH_BY_NODES)
  // whole_hide_in_tail_launch's graphs with every record left on, graded by nodes: the 40 us kernel
  // runs in a graph the GPU launches, which no host call, callback or launch audit sees.
  if (s.graphs.empty()) H_OK(hostile::copy_and_busy_graph(s, 40000, err, hostile::GraphShape::DeviceLaunch));
  if (timed) H_CUDA(cudaGraphLaunch(s.graphs[0], stream));
  H_OK(forward(s, tokens, pos, logits, stream, err));
  return NIBBLE_OK;
#elif defined(HOSTILE_WHOLE_HIDE_IN_BRANCHES) || defined(HOSTILE_WHOLE_HIDE_IN_CHILD) || defined(HOSTILE_WHOLE_HIDE_BEFORE_HOST) || \
    defined(HOSTILE_DEVICE_GRAPH_LAUNCH)
  // whole_hide_in_graph's 40 us kernel, launched with the kernel records off under --graph-records
  // graphs, in the graph shapes whose whole-launch record must span it too: a branch beside the copy
  // (two roots, two leaves), a child graph, a host node last; or the record of the graph it is
  // launched in from the GPU (a tail or sibling launch: device graph records, DEVICE_GRAPH_TRACE).
  if (s.graphs.empty()) {
#if defined(HOSTILE_WHOLE_HIDE_IN_BRANCHES)
    H_OK(hostile::copy_and_busy_graph(s, 40000, err, hostile::GraphShape::Branches));
#elif defined(HOSTILE_WHOLE_HIDE_IN_CHILD)
    H_OK(hostile::copy_and_busy_graph(s, 40000, err, hostile::GraphShape::Child));
#elif defined(HOSTILE_DEVICE_GRAPH_LAUNCH)
    H_OK(hostile::copy_and_busy_graph(s, 40000, err, hostile::GraphShape::DeviceLaunch));
#else
    H_OK(hostile::copy_and_busy_graph(s, 40000, err, hostile::GraphShape::HostLast));
#endif
  }
  if (timed && hostile::kernel_records(false, "hostile-whole_hide")) {
    H_CUDA(cudaGraphLaunch(s.graphs[0], stream));
    hostile::kernel_records(true, "hostile-whole_hide");
  }
  H_OK(forward(s, tokens, pos, logits, stream, err));
  return NIBBLE_OK;
#elif defined(HOSTILE_HIDE_IN_GRAPH) || defined(HOSTILE_WHOLE_HIDE_IN_GRAPH)
  // hide_inside_allowance's 40 us kernel, but in a graph behind a copy node (built in the first,
  // checked call), launched with the kernel records off and the copy records on: the copy's record
  // carries the graph launch's correlation id, which vouched for the whole graph until the audit
  // asked a graph with kernel nodes for a kernel record. whole_hide_in_graph: the same under
  // --graph-records graphs, where the graph's own record must hold the 40 us.
  if (s.graphs.empty()) H_OK(hostile::copy_and_busy_graph(s, 40000, err));
  if (timed && hostile::kernel_records(false, "hostile-hide_in_graph")) {
    H_CUDA(cudaGraphLaunch(s.graphs[0], stream));
    hostile::kernel_records(true, "hostile-hide_in_graph");
  }
  H_OK(forward(s, tokens, pos, logits, stream, err));
  return NIBBLE_OK;
#elif defined(HOSTILE_HIDE_COPY_IN_GRAPH)
  // hide_in_graph reversed: a graph of a 64 MiB host-to-device copy node and a 1 us kernel launched with the copy
  // records off and the kernel's on: the kernel's record carries the launch's id, which vouched for
  // the copy until a graph with copy nodes needed a memcpy record too.
  if (s.graphs.empty())
    H_OK(hostile::copy_and_busy_graph(s, 1000, err, hostile::GraphShape::Chain, hostile::kHiddenCopyBytes, /*from_host=*/true));
  if (timed && hostile::activity_records(hostile::kMemcpyKind, false, "hostile-hide_copy_in_graph")) {
    H_CUDA(cudaGraphLaunch(s.graphs[0], stream));
    hostile::activity_records(hostile::kMemcpyKind, true, "hostile-hide_copy_in_graph");
  }
  H_OK(forward(s, tokens, pos, logits, stream, err));
  return NIBBLE_OK;
#elif defined(HOSTILE_HIDE_IN_CONDITIONAL) || defined(HOSTILE_WHOLE_HIDE_IN_CONDITIONAL)
  // hide_in_graph's graph with its kernel in a conditional node's body, which the audit's graph walk
  // cannot open: a conditional node counts as a kernel, so the copy's record no longer vouches.
  // whole_hide_in_conditional: the same under --graph-records graphs (the body's 40 us in the record?).
  if (s.graphs.empty()) H_OK(hostile::copy_and_busy_graph(s, 40000, err, hostile::GraphShape::Conditional));
  if (timed && hostile::kernel_records(false, "hostile-hide_in_conditional")) {
    H_CUDA(cudaGraphLaunch(s.graphs[0], stream));
    hostile::kernel_records(true, "hostile-hide_in_conditional");
  }
  H_OK(forward(s, tokens, pos, logits, stream, err));
  return NIBBLE_OK;
#elif defined(HOSTILE_UNWRITTEN_TAIL)
  nibble_tensor priv = *logits;
  priv.data = s.private_logits;
  H_OK(forward(s, tokens, pos, &priv, stream, err));
  const size_t row = size_t(c.vocab) * sizeof(float);
  H_CUDA(cudaMemcpy2DAsync(out, row, s.private_logits, row, row - 64 * sizeof(float), size_t(c.batch),
                           cudaMemcpyDeviceToDevice, stream));
  return NIBBLE_OK;
#else
#if defined(HOSTILE_PERSIST_L2)
  if (s.window_ok) {
    cudaStreamAttrValue v{};
    v.accessPolicyWindow = s.window;
    const cudaError_t e = cudaStreamSetAttribute(stream, cudaStreamAttributeAccessPolicyWindow, &v);
    if (e != cudaSuccess) {
      (void)cudaGetLastError();
      std::fprintf(stderr, "hostile-persist_l2: cudaStreamSetAttribute(access policy window): %s\n", cudaGetErrorName(e));
    }
  }
#endif
#if defined(HOSTILE_NOISY_OUTPUT)
  spew(stdout, call);
  spew(stderr, call);
#endif
  H_OK(forward(s, tokens, pos, logits, stream, err));
#if defined(HOSTILE_SLOW)
  H_OK(forward(s, tokens, pos, logits, stream, err));  // the same step again: same K/V, same logits
#elif defined(HOSTILE_OOB_WRITE)
  // 1 TiB past the logits: no allocation there, so the store faults and the context is poisoned.
  store_kernel<<<1, 1, 0, stream>>>(out + (size_t(1) << 40) / sizeof(float), 1.0f);
  H_CUDA(cudaGetLastError());
#elif defined(HOSTILE_WEIGHT_BYTE) || defined(HOSTILE_KV_PREFIX)
  if (call == 0) {
    xor_byte_kernel<<<1, 1, 0, stream>>>(s.poke_byte, 0x01);  // the lowest bit: the error stays tiny
    H_CUDA(cudaGetLastError());
  }
#elif defined(HOSTILE_TOKEN_WRITE) || defined(HOSTILE_TOKEN_WRITE_TIMED)
#if defined(HOSTILE_TOKEN_WRITE_TIMED)
  if (timed)
#endif
  {
    bump_token_kernel<<<1, 1, 0, stream>>>(static_cast<int64_t*>(tokens->data));
    H_CUDA(cudaGetLastError());
  }
#elif defined(HOSTILE_KV_ABOVE_TIMED)
  if (timed) H_CUDA(cudaMemsetAsync(s.kv0k + size_t(c.max_seq - 1) * c.hd, 0x3C, size_t(c.hd) * 2, stream));
#elif defined(HOSTILE_KV_ABOVE)
  if (call == 0) H_CUDA(cudaMemsetAsync(s.kv0k + size_t(c.max_seq - 1) * c.hd, 0x3C, size_t(c.hd) * 2, stream));
#elif defined(HOSTILE_KV_LATE)
  // This step's K/V, computed into the private cache at slot pos, copied to the harness's slot pos + 1.
  if (pos + 1 < c.max_seq) {
    const size_t row = size_t(c.hd) * 2, pitch = size_t(c.max_seq) * row;
    for (size_t i = 0; i < s.harness_kv.size(); ++i)
      H_CUDA(cudaMemcpy2DAsync(s.harness_kv[i] + size_t(pos + 1) * c.hd, pitch, s.private_kv[i] + size_t(pos) * c.hd, pitch,
                               row, size_t(c.batch) * c.n_kv, cudaMemcpyDeviceToDevice, stream));
  }
#elif defined(HOSTILE_CACHED_LOGITS)
  if (call == 0)
    H_CUDA(cudaMemcpyAsync(s.private_logits, out, n_logits * 4, cudaMemcpyDeviceToDevice, stream));
  else
    H_CUDA(cudaMemcpyAsync(out, s.private_logits, n_logits * 4, cudaMemcpyDeviceToDevice, stream));
#elif defined(HOSTILE_NAN_LOGIT)
  H_CUDA(cudaMemsetAsync(out + c.vocab / 2, 0xFF, sizeof(float), stream));
#elif defined(HOSTILE_DEVICE_RESET)
  H_CUDA(cudaStreamSynchronize(stream));
  H_CUDA(cudaDeviceReset());
#elif defined(HOSTILE_HOST_SLEEP)
  usleep(HOSTILE_SLEEP_US);  // host time the GPU never sees
#elif defined(HOSTILE_GAP_WORK)
  // From the first (checked) step on, kernels of its own between the harness's timed steps, where a
  // real cheat would read the next step's weights back into L2 after the harness's flush.
  if (call == 0) s.gap_thread = std::thread(nibble_hostile::launch_forever, &s.stop, false);
#elif defined(HOSTILE_GAP_COPY)
  // The same with copies (a copy engine's work, no kernel): a cheat could stage the next step's
  // weights with them.
  if (call == 0) s.gap_thread = std::thread(nibble_hostile::launch_forever, &s.stop, true);
#elif defined(HOSTILE_LATE_CONTEXT)
  // 300 us of GPU work in a context of its own, not waited for: it runs past the window's device
  // synchronisation (where a cheat would write the call's outputs after its window).
  H_OK(busy_in_own_context(300000, err));
#endif
  return NIBBLE_OK;
#endif
}

nibble_status teardown(State& s, cudaStream_t stream, nibble_error* err) {
  if (s.gap_thread.joinable()) {
    s.stop = true;
    s.gap_thread.join();
  }
#if defined(HOSTILE_NOISY_OUTPUT)
  spew(stdout, -1);
  spew(stderr, -1);
#endif
  if (s.private_stream) {
    H_CUDA(cudaStreamSynchronize(s.private_stream));
    H_CUDA(cudaStreamDestroy(s.private_stream));
    H_CUDA(cudaEventDestroy(s.ready));
  }
  for (auto& g : s.graphs)
    if (g) H_CUDA(cudaGraphExecDestroy(g));
  if (s.device_graph) H_CUDA(cudaGraphExecDestroy(s.device_graph));
#if defined(HOSTILE_DEVICE_GRAPH_LAUNCH)
  // A device launch that failed would leave the row's 40 us out unnoticed: the grade says so instead.
  int launch_error = 0;
  H_CUDA(cudaMemcpyFromSymbol(&launch_error, g_device_launch_error, sizeof launch_error));
  if (launch_error != 0) H_CUDA(cudaError_t(launch_error));
#endif
  if (s.capture_stream) H_CUDA(cudaStreamDestroy(s.capture_stream));
#if defined(HOSTILE_FORGE_OUTPUTS)
  // The checked calls' outputs are in the parent's channel by now; the grader parses them after we exit.
  if (!overwrite(child_channel("outputs"), deep_safetensors()))
    std::fprintf(stderr, "hostile-forge_outputs: could not replace the outputs channel\n");
#endif
#if defined(HOSTILE_FORGE_TIMING_IN_TEARDOWN)
  // Its own last code: the result channel holds every figure of the timed steps; halve them, call
  // the grade done, and leave before the harness could write again.
  if (const std::string result = child_channel("result"); !result.empty()) {
    std::string text = read_text(result);
    const std::string timed = "\"phase\":\"timed\"";
    if (const size_t at = text.find(timed); at != std::string::npos) text.replace(at, timed.size(), "\"phase\":\"done\"");
    const bool halved = scale_array(text, "gpu_span_us", 2) && scale_array(text, "busy_us", 2) &&
                        scale_array(text, "host_wall_us", 2) && overwrite(result, text);
    std::fprintf(stderr, "hostile-forge_timing_in_teardown: %s\n", halved ? "timings halved" : "the result channel took no write");
  }
  std::fflush(nullptr);
  std::_Exit(0);
#endif
  if (s.inner) H_OK(unfused_decode_teardown(s.inner, stream, err));
  H_CUDA(cudaStreamSynchronize(stream));
  for (uint16_t* p : s.private_kv) H_CUDA(cudaFree(p));
  if (s.private_logits) H_CUDA(cudaFree(s.private_logits));
  if (s.pinned) H_CUDA(cudaFreeHost(s.pinned));
  if (s.spin_flag) H_CUDA(cudaFree(s.spin_flag));
#if defined(HOSTILE_PERSIST_L2)
  if (s.window_ok) {
    cudaStreamAttrValue v{};
    v.accessPolicyWindow.num_bytes = 0;  // leave the harness's stream as it was given
    (void)cudaStreamSetAttribute(stream, cudaStreamAttributeAccessPolicyWindow, &v);
    (void)cudaCtxResetPersistingL2Cache();
    (void)cudaGetLastError();
  }
#endif
#if defined(HOSTILE_DRIVER_API)
  if (g_driver.module) {
    std::fprintf(stderr, "hostile-driver_api: %ld SwiGLU launches through cuLaunchKernel\n", g_driver.launches);
    g_driver.unload(g_driver.module);
    g_driver.module = nullptr;
    g_driver.swiglu = nullptr;
  }
#endif
  return NIBBLE_OK;
}

}  // namespace

extern "C" {

NIBBLE_EXPORT int32_t nibble_abi_version(void) { return NIBBLE_ABI_VERSION; }

#ifdef HOSTILE_BAD_NAME
// The name, then bytes that are not UTF-8: whoever writes it into JSON must escape or replace them.
NIBBLE_EXPORT const char* nibble_solution_name(void) { return HOSTILE_NAME "\xff\xfe\xc3\x28\x80"; }
#else
NIBBLE_EXPORT const char* nibble_solution_name(void) { return HOSTILE_NAME; }
#endif

NIBBLE_EXPORT nibble_status nibble_decode_build_model(const nibble_decode_model* model, void* stream, void** handle,
                                                      nibble_error* err) {
  if (!model || !handle) return NIBBLE_ERR_INVALID_ARGUMENT;
  *handle = nullptr;
  auto* s = new State;
  const nibble_status st = build(model, static_cast<cudaStream_t>(stream), *s, err);
  if (st != NIBBLE_OK) {
    delete s;  // what it allocated leaks: the process ends with this failure
    return st;
  }
  *handle = s;
  return NIBBLE_OK;
}

NIBBLE_EXPORT nibble_status nibble_decode_step(void* handle, const nibble_tensor* token_ids, int32_t pos,
                                               nibble_tensor* logits, void* stream, nibble_error* err) {
  if (!handle || !token_ids || !logits) return NIBBLE_ERR_INVALID_ARGUMENT;
  return step(*static_cast<State*>(handle), token_ids, pos, logits, static_cast<cudaStream_t>(stream), err);
}

NIBBLE_EXPORT nibble_status nibble_decode_teardown(void* handle, void* stream, nibble_error* err) {
  if (!handle) return NIBBLE_OK;
  State* s = static_cast<State*>(handle);
  const nibble_status st = teardown(*s, static_cast<cudaStream_t>(stream), err);
  delete s;
  return st;
}

}  // extern "C"
