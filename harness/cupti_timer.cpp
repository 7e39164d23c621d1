// cupti_timer.cpp
#include "harness/cupti_timer.h"

#include <cupti.h>

#include <cuda.h>
#include <cudaTypedefs.h>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <iterator>
#include <set>
#include <stdexcept>
#include <type_traits>
#include <unordered_map>
#include <utility>

namespace nibble {

namespace {

std::mutex g_mutex;
std::vector<ActivityRecord> g_records;
bool g_active = false;
GraphRecords g_graph_records = GraphRecords::Nodes;  // the live timer's; set before its first record
// The record kinds the timer takes of every launch (GRAPH_TRACE besides under GraphRecords::Graphs),
// in the order they are enabled, with what a failure says.
struct RecordKind {
  CUpti_ActivityKind kind;
  const char* enable;
};
constexpr RecordKind kRecordKinds[] = {{CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL, "enable CONCURRENT_KERNEL"},
                                       {CUPTI_ACTIVITY_KIND_MEMCPY, "enable MEMCPY"},
                                       {CUPTI_ACTIVITY_KIND_MEMSET, "enable MEMSET"},
                                       {CUPTI_ACTIVITY_KIND_MEMCPY2, "enable MEMCPY2"}};

constexpr size_t kBufferBytes = 8 << 20;

// The launch audit (CuptiTimer::start_launch_audit), under g_mutex.
// Each collect() drops the launches its records matched, and the ids of records delivered more than
// kIdGenerations collects ago, unless a launch call still in flight may own them: memory stays
// bounded by a few windows' launches (an unfused full-config grade makes ~500k). A launch registers
// at its callback's exit, which a preempted thread may reach after its kernel's record came in;
// correlation ids grow, so no id at or above the oldest call in flight is aged out.
constexpr uint32_t kIdGenerations = 4;
bool g_auditing = false;
std::vector<AuditedLaunch> g_launches;                 // not matched yet
int g_matched = 0;                                     // launches matched and dropped
int g_graph_launches = 0;                              // of the launches kept, graph launches (LaunchAudit)
// Copy and memset calls: those not matched yet, with the collect they came in; one still unmatched
// kIdGenerations collects later is counted unrecorded and dropped (they must not pile up over a
// long timed phase).
struct AuditedCopy {
  AuditedLaunch call;
  uint32_t generation;
};
std::vector<AuditedCopy> g_copies;
int g_copies_matched = 0, g_copies_unrecorded = 0;
std::string g_first_unrecorded_copy;
std::vector<bool> g_copy_cbids;  // by driver cbid: a cuMemcpy* or cuMemset* call (set before the subscription)
int g_device_launch_graphs = 0;  // graphs instantiated for device launch since the timer started (LaunchAudit)
// By driver cbid: 1 a cuStreamBeginCapture* call, 2 a cuStreamEndCapture* call. A copy issued while a
// capture is open may be a graph's node, which runs (and leaves its record) only when the graph is
// launched: the copy audit leaves those copies out (the launch audit checks a launch's own stream).
std::vector<uint8_t> g_capture_cbids;
int g_open_captures = 0;  // captures begun and not ended, every stream of the process
uint32_t g_generation = 0;                             // collects since the audit started
struct RecordSeen {
  uint32_t generation;  // the collect it came in
  bool kernel;          // a kernel record among them
  bool memcpy;          // a memcpy record among them
  bool memset;          // a memset record among them
  bool graph;           // a graph launch's own record among them
};
std::unordered_map<uint32_t, RecordSeen> g_record_ids;  // correlation id -> what its records were
std::multiset<uint32_t> g_in_flight;                   // correlation ids of the launch calls under way
uint64_t g_dropped_records = 0;                        // records CUPTI dropped while auditing
uint32_t g_last_launch = 0;                            // the correlation id of the last launch kept

/** The audit's state emptied, auditing or not. Under g_mutex. */
void reset_audit(bool auditing) {
  g_auditing = auditing;
  g_launches.clear();
  g_matched = 0;
  g_graph_launches = 0;
  g_copies.clear();
  g_copies_matched = g_copies_unrecorded = 0;
  g_first_unrecorded_copy.clear();
  g_generation = 0;
  g_record_ids.clear();
  g_dropped_records = 0;
  g_last_launch = 0;
}

/** Drops the launches a record matched and the ids too old to match one. Under g_mutex. */
void prune_launches() {
  const auto recorded = [](uint32_t id) {
    const auto it = g_record_ids.find(id);
    return it == g_record_ids.end() ? Recorded{}
                                    : Recorded{true, it->second.kernel, it->second.memcpy, it->second.memset, it->second.graph};
  };
  g_matched += drop_recorded_launches(g_launches, recorded);
  const uint32_t oldest_in_flight = g_in_flight.empty() ? UINT32_MAX : *g_in_flight.begin();
  g_copies.erase(std::remove_if(g_copies.begin(), g_copies.end(),
                                [&](const AuditedCopy& c) {
                                  if (recorded(c.call.id).any) return ++g_copies_matched, true;
                                  if (g_generation - c.generation < kIdGenerations || c.call.id >= oldest_in_flight)
                                    return false;
                                  if (g_copies_unrecorded++ == 0) g_first_unrecorded_copy = c.call.api ? c.call.api : "?";
                                  return true;
                                }),
                 g_copies.end());
  ++g_generation;
  for (auto it = g_record_ids.begin(); it != g_record_ids.end();)
    it = g_generation - it->second.generation > kIdGenerations && it->first < oldest_in_flight ? g_record_ids.erase(it)
                                                                                     : std::next(it);
}

// cuStreamGetCaptureInfo as of CUDA 11.3 (the entry point's version 12000 gives this signature).
PFN_cuStreamGetCaptureInfo_v11030 g_capture_info = nullptr;
/** The id of the active capture sequence stream `s` is in, 0 when it is in none (or does not
 *  answer: a stream destroyed meanwhile). Only an ACTIVE capture's id is valid (cuda.h); an
 *  invalidated one takes no work either (a launch into it fails), so it counts as none: two
 *  invalidated captures must not read as one. */
uint64_t capture_id(CUstream s) {
  CUstreamCaptureStatus status = CU_STREAM_CAPTURE_STATUS_NONE;
  cuuint64_t id = 0;
  if (!g_capture_info || g_capture_info(s, &status, &id, nullptr, nullptr, nullptr) != CUDA_SUCCESS ||
      status != CU_STREAM_CAPTURE_STATUS_ACTIVE || id == 0)
    return 0;
  return id;
}
// The capture a launch or copy call's stream was in at the call's entry, read again at its exit:
// a call is left out as captured only when its stream was in one capture sequence throughout. A
// check at the exit alone left out a call whose work ran, when another thread began a capture on
// its stream between the enqueue and the exit (a reviewer's reading: a race, but one a solution
// can try as often as it likes).
struct CallEntry {
  uint32_t correlation = 0;
  uint64_t capture = 0;
  CUstream stream = nullptr;  // as the call's parameters named it at the entry (cuLaunchKernelEx's are the caller's memory)
};
thread_local CallEntry t_entry;
thread_local uint32_t t_last_launch = 0;  // the calling thread's last launch that ran (audited or not)
// The graph walk's driver calls (from the driver entry point, as cuStreamGetCaptureInfo).
CUresult (*g_graph_get_nodes)(CUgraph, CUgraphNode*, size_t*) = nullptr;
CUresult (*g_exec_get_flags)(CUgraphExec, cuuint64_t*) = nullptr;  // how a graph was instantiated
CUresult (*g_node_get_type)(CUgraphNode, CUgraphNodeType*) = nullptr;
CUresult (*g_child_graph)(CUgraphNode, CUgraph*) = nullptr;
CUresult (*g_kernel_node_attr)(CUgraphNode, CUkernelNodeAttrID, CUkernelNodeAttrValue*) = nullptr;
// The kernels of each executable graph instantiated since the subscription (a launch that runs one
// must leave a kernel record); under g_mutex.
std::unordered_map<CUgraphExec, GraphKernels> g_exec_kernels;
bool g_graph_view = false;  // every graph call the audit follows subscribed, the walk's driver calls found; under g_mutex

/** graph_kernels over the driver's graph. */
GraphKernels driver_graph_kernels(CUgraph graph) {
  if (!g_graph_get_nodes || !g_node_get_type || !g_child_graph) return {};
  GraphWalk walk;
  walk.nodes = [](void* g) {
    size_t n = 0;
    std::vector<void*> out;
    if (g_graph_get_nodes(static_cast<CUgraph>(g), nullptr, &n) != CUDA_SUCCESS || n == 0) return out;
    std::vector<CUgraphNode> nodes(n);
    if (g_graph_get_nodes(static_cast<CUgraph>(g), nodes.data(), &n) != CUDA_SUCCESS) return out;
    out.assign(nodes.begin(), nodes.begin() + std::ptrdiff_t(std::min(n, nodes.size())));
    return out;
  };
  walk.type = [](void* node) {
    CUgraphNodeType t{};
    return g_node_get_type(static_cast<CUgraphNode>(node), &t) == CUDA_SUCCESS ? int(t) : -1;
  };
  walk.child = [](void* node) -> void* {
    CUgraph g = nullptr;
    return g_child_graph(static_cast<CUgraphNode>(node), &g) == CUDA_SUCCESS ? g : nullptr;
  };
  if (g_kernel_node_attr)  // without it every kernel node counts as one the device may enable
    walk.device_updatable = [](void* node) {
      CUkernelNodeAttrValue v{};
      return g_kernel_node_attr(static_cast<CUgraphNode>(node), CU_LAUNCH_ATTRIBUTE_DEVICE_UPDATABLE_KERNEL_NODE, &v) !=
                 CUDA_SUCCESS ||
             v.deviceUpdatableKernelNode.deviceUpdatable != 0;
    };
  return graph_kernels(graph, walk);
}

/** Every instantiate call's parameters begin with these two (generated_cuda_meta.h). */
struct InstantiateParams {
  CUgraphExec* phGraphExec;
  CUgraph hGraph;
};
constexpr CUpti_CallbackId kInstantiateCalls[] = {
    CUPTI_DRIVER_TRACE_CBID_cuGraphInstantiate, CUPTI_DRIVER_TRACE_CBID_cuGraphInstantiate_v2,
    CUPTI_DRIVER_TRACE_CBID_cuGraphInstantiateWithFlags, CUPTI_DRIVER_TRACE_CBID_cuGraphInstantiateWithParams,
    CUPTI_DRIVER_TRACE_CBID_cuGraphInstantiateWithParams_ptsz};
/** The update calls' parameters begin with these two (generated_cuda_meta.h): the executable graph
 *  takes hGraph's parameters, node for node. */
struct ExecUpdateParams {
  CUgraphExec hGraphExec;
  CUgraph hGraph;
};
constexpr CUpti_CallbackId kExecUpdateCalls[] = {CUPTI_DRIVER_TRACE_CBID_cuGraphExecUpdate,
                                                 CUPTI_DRIVER_TRACE_CBID_cuGraphExecUpdate_v2};
// The graph calls the audit follows; without one of them every graph launch needs a kernel record
// (an executable graph it has not seen instantiated does).
constexpr CUpti_CallbackId kGraphViewCalls[] = {CUPTI_DRIVER_TRACE_CBID_cuGraphExecDestroy,
                                                CUPTI_DRIVER_TRACE_CBID_cuGraphNodeSetEnabled};
// An instantiate call's graph walked at its entry, merged with the walk at its exit (a thread that
// changes the graph while the driver instantiates it cannot hide a node from both).
thread_local GraphKernels t_instantiating;

// The driver's launch calls and the stream each names. The driver's alone: every runtime launch
// calls one of them inside it, with the same correlation id (probe_cupti_launches, H100 2026-12-05:
// <<<>>>, cudaLaunchKernel, cudaLaunchKernelExC, cudaGraphLaunch), and a solution can call them
// directly (Triton, a driver-API .so).
struct LaunchCall {
  CUpti_CallbackId cbid;
  CUstream (*stream)(const void* params);
  bool legacy = false;  // deprecated or pre-4.0: audited where CUPTI takes the callback, never required
  CUgraphExec (*graph)(const void* params) = nullptr;  // a graph launch's executable graph
};
template <class P>
CUstream h_stream(const void* p) {
  return static_cast<const P*>(p)->hStream;
}
// cuGraphLaunch's parameter is named hGraph, its _ptsz twin's hGraphExec (generated_cuda_meta.h).
CUgraphExec graph_launch_exec(const void* p) { return static_cast<const cuGraphLaunch_params*>(p)->hGraph; }
CUgraphExec graph_launch_ptsz_exec(const void* p) { return static_cast<const cuGraphLaunch_ptsz_params*>(p)->hGraphExec; }
template <class P>
CUstream config_h_stream(const void* p) {
  return static_cast<const P*>(p)->config->hStream;
}
// A _ptsz call's stream 0 is the calling thread's per-thread stream, not the legacy one.
template <CUstream (*F)(const void*)>
CUstream per_thread(const void* p) {
  const CUstream s = F(p);
  return s ? s : CU_STREAM_PER_THREAD;
}
CUstream legacy_stream(const void*) { return nullptr; }  // cuLaunch, cuLaunchGrid
CUstream first_device_stream(const void* p) {             // cooperative multi-device: the first launch's
  const auto* m = static_cast<const cuLaunchCooperativeKernelMultiDevice_params*>(p);
  return m->numDevices > 0 && m->launchParamsList ? m->launchParamsList[0].hStream : nullptr;
}
const LaunchCall kLaunchCalls[] = {
    {CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel, h_stream<cuLaunchKernel_params>},
    {CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel_ptsz, per_thread<h_stream<cuLaunchKernel_ptsz_params>>},
    {CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx, config_h_stream<cuLaunchKernelEx_params>},
    {CUPTI_DRIVER_TRACE_CBID_cuLaunchKernelEx_ptsz, per_thread<config_h_stream<cuLaunchKernelEx_ptsz_params>>},
    {CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel, h_stream<cuLaunchCooperativeKernel_params>},
    {CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernel_ptsz, per_thread<h_stream<cuLaunchCooperativeKernel_ptsz_params>>},
    {CUPTI_DRIVER_TRACE_CBID_cuLaunchCooperativeKernelMultiDevice, first_device_stream, true},
    {CUPTI_DRIVER_TRACE_CBID_cuLaunch, legacy_stream, true},  // the pre-4.0 launch calls, still exported
    {CUPTI_DRIVER_TRACE_CBID_cuLaunchGrid, legacy_stream, true},
    {CUPTI_DRIVER_TRACE_CBID_cuLaunchGridAsync, h_stream<cuLaunchGridAsync_params>, true},
    {CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch, h_stream<cuGraphLaunch_params>, false, graph_launch_exec},
    {CUPTI_DRIVER_TRACE_CBID_cuGraphLaunch_ptsz, per_thread<h_stream<cuGraphLaunch_ptsz_params>>, false,
     graph_launch_ptsz_exec},
};

// Every copy and memset call of CUDA 13.0's generated_cuda_meta.h that has a CUPTI callback id (104),
// with what the copy audit asks of one: its stream (the asynchronous ones: one issued on a capturing
// stream is a graph node that runs, and leaves its record, only when its graph is launched; the
// synchronous ones are never captured, a capture refuses them) and its size (a zero-size call moves
// nothing, and whether one that reaches the driver leaves a record is not measured: it is left out).
// The members are found by name, as the generated structs spell them.
template <class P, class = void> struct HasHStream : std::false_type {};
template <class P> struct HasHStream<P, std::void_t<decltype(std::declval<P>().hStream)>> : std::true_type {};
template <class P, class = void> struct HasByteCount : std::false_type {};
template <class P> struct HasByteCount<P, std::void_t<decltype(std::declval<P>().ByteCount)>> : std::true_type {};
template <class P, class = void> struct HasN : std::false_type {};
template <class P> struct HasN<P, std::void_t<decltype(std::declval<P>().N)>> : std::true_type {};
template <class P, class = void> struct HasWidthHeight : std::false_type {};
template <class P>
struct HasWidthHeight<P, std::void_t<decltype(std::declval<P>().Width), decltype(std::declval<P>().Height)>> : std::true_type {};
template <class P, class = void> struct HasCount : std::false_type {};
template <class P> struct HasCount<P, std::void_t<decltype(std::declval<P>().count)>> : std::true_type {};
template <class P, class = void> struct HasNumOps : std::false_type {};
template <class P> struct HasNumOps<P, std::void_t<decltype(std::declval<P>().numOps)>> : std::true_type {};

/** Bytes (or, for a batch, copies) a call of parameters P moves, from the values it was passed; 1
 *  where its size cannot be read that way. */
template <class P>
uint64_t copy_size(const void* v) {
  const P& p = *static_cast<const P*>(v);
  if constexpr (HasByteCount<P>::value) {
    return p.ByteCount;
  } else if constexpr (HasN<P>::value) {
    return p.N;
  } else if constexpr (HasWidthHeight<P>::value) {
    return uint64_t(p.Width) * p.Height;
  } else if constexpr (HasCount<P>::value) {
    return p.count;
  } else if constexpr (HasNumOps<P>::value) {
    return p.numOps;
  } else {
    // The 2D and 3D copies: their size sits in the caller's struct (pCopy), which another thread may
    // zero while a synchronous copy runs (read at the callback's exit: a reviewer's reading), and a 0
    // there may mean 1 to the driver; never read as zero.
    return 1;
  }
}
template <class P, bool PTSZ>
CUstream copy_stream(const void* v) {
  const CUstream s = static_cast<const P*>(v)->hStream;
  return PTSZ && !s ? CU_STREAM_PER_THREAD : s;  // a _ptsz call's stream 0 is the thread's own
}
struct CopyCall {
  CUpti_CallbackId cbid;
  CUstream (*stream)(const void* params);  // nullptr: a synchronous call
  uint64_t (*size)(const void* params);
};
template <class P, bool PTSZ>
constexpr CopyCall copy_call(CUpti_CallbackId cbid) {
  if constexpr (HasHStream<P>::value)
    return {cbid, copy_stream<P, PTSZ>, copy_size<P>};
  else
    return {cbid, nullptr, copy_size<P>};
}
#define NIBBLE_COPY_CALL(name) copy_call<name##_params, false>(CUPTI_DRIVER_TRACE_CBID_##name)
#define NIBBLE_COPY_CALL_PTSZ(name) copy_call<name##_params, true>(CUPTI_DRIVER_TRACE_CBID_##name)
const CopyCall kCopyCalls[] = {
    NIBBLE_COPY_CALL(cuMemcpy),
    NIBBLE_COPY_CALL(cuMemcpy2D),
    NIBBLE_COPY_CALL(cuMemcpy2DAsync),
    NIBBLE_COPY_CALL(cuMemcpy2DAsync_v2),
    NIBBLE_COPY_CALL_PTSZ(cuMemcpy2DAsync_v2_ptsz),
    NIBBLE_COPY_CALL(cuMemcpy2DUnaligned),
    NIBBLE_COPY_CALL(cuMemcpy2DUnaligned_v2),
    NIBBLE_COPY_CALL(cuMemcpy2DUnaligned_v2_ptds),
    NIBBLE_COPY_CALL(cuMemcpy2D_v2),
    NIBBLE_COPY_CALL(cuMemcpy2D_v2_ptds),
    NIBBLE_COPY_CALL(cuMemcpy3D),
    NIBBLE_COPY_CALL(cuMemcpy3DAsync),
    NIBBLE_COPY_CALL(cuMemcpy3DAsync_v2),
    NIBBLE_COPY_CALL_PTSZ(cuMemcpy3DAsync_v2_ptsz),
    NIBBLE_COPY_CALL(cuMemcpy3DBatchAsync),
    NIBBLE_COPY_CALL_PTSZ(cuMemcpy3DBatchAsync_ptsz),
    NIBBLE_COPY_CALL(cuMemcpy3DBatchAsync_v2),
    NIBBLE_COPY_CALL_PTSZ(cuMemcpy3DBatchAsync_v2_ptsz),
    NIBBLE_COPY_CALL(cuMemcpy3DPeer),
    NIBBLE_COPY_CALL(cuMemcpy3DPeerAsync),
    NIBBLE_COPY_CALL_PTSZ(cuMemcpy3DPeerAsync_ptsz),
    NIBBLE_COPY_CALL(cuMemcpy3DPeer_ptds),
    NIBBLE_COPY_CALL(cuMemcpy3D_v2),
    NIBBLE_COPY_CALL(cuMemcpy3D_v2_ptds),
    NIBBLE_COPY_CALL(cuMemcpyAsync),
    NIBBLE_COPY_CALL_PTSZ(cuMemcpyAsync_ptsz),
    NIBBLE_COPY_CALL(cuMemcpyAtoA),
    NIBBLE_COPY_CALL(cuMemcpyAtoA_v2),
    NIBBLE_COPY_CALL(cuMemcpyAtoA_v2_ptds),
    NIBBLE_COPY_CALL(cuMemcpyAtoD),
    NIBBLE_COPY_CALL(cuMemcpyAtoD_v2),
    NIBBLE_COPY_CALL(cuMemcpyAtoD_v2_ptds),
    NIBBLE_COPY_CALL(cuMemcpyAtoH),
    NIBBLE_COPY_CALL(cuMemcpyAtoHAsync),
    NIBBLE_COPY_CALL(cuMemcpyAtoHAsync_v2),
    NIBBLE_COPY_CALL_PTSZ(cuMemcpyAtoHAsync_v2_ptsz),
    NIBBLE_COPY_CALL(cuMemcpyAtoH_v2),
    NIBBLE_COPY_CALL(cuMemcpyAtoH_v2_ptds),
    NIBBLE_COPY_CALL(cuMemcpyBatchAsync),
    NIBBLE_COPY_CALL_PTSZ(cuMemcpyBatchAsync_ptsz),
    NIBBLE_COPY_CALL(cuMemcpyBatchAsync_v2),
    NIBBLE_COPY_CALL_PTSZ(cuMemcpyBatchAsync_v2_ptsz),
    NIBBLE_COPY_CALL(cuMemcpyDtoA),
    NIBBLE_COPY_CALL(cuMemcpyDtoA_v2),
    NIBBLE_COPY_CALL(cuMemcpyDtoA_v2_ptds),
    NIBBLE_COPY_CALL(cuMemcpyDtoD),
    NIBBLE_COPY_CALL(cuMemcpyDtoDAsync),
    NIBBLE_COPY_CALL(cuMemcpyDtoDAsync_v2),
    NIBBLE_COPY_CALL_PTSZ(cuMemcpyDtoDAsync_v2_ptsz),
    NIBBLE_COPY_CALL(cuMemcpyDtoD_v2),
    NIBBLE_COPY_CALL(cuMemcpyDtoD_v2_ptds),
    NIBBLE_COPY_CALL(cuMemcpyDtoH),
    NIBBLE_COPY_CALL(cuMemcpyDtoHAsync),
    NIBBLE_COPY_CALL(cuMemcpyDtoHAsync_v2),
    NIBBLE_COPY_CALL_PTSZ(cuMemcpyDtoHAsync_v2_ptsz),
    NIBBLE_COPY_CALL(cuMemcpyDtoH_v2),
    NIBBLE_COPY_CALL(cuMemcpyDtoH_v2_ptds),
    NIBBLE_COPY_CALL(cuMemcpyHtoA),
    NIBBLE_COPY_CALL(cuMemcpyHtoAAsync),
    NIBBLE_COPY_CALL(cuMemcpyHtoAAsync_v2),
    NIBBLE_COPY_CALL_PTSZ(cuMemcpyHtoAAsync_v2_ptsz),
    NIBBLE_COPY_CALL(cuMemcpyHtoA_v2),
    NIBBLE_COPY_CALL(cuMemcpyHtoA_v2_ptds),
    NIBBLE_COPY_CALL(cuMemcpyHtoD),
    NIBBLE_COPY_CALL(cuMemcpyHtoDAsync),
    NIBBLE_COPY_CALL(cuMemcpyHtoDAsync_v2),
    NIBBLE_COPY_CALL_PTSZ(cuMemcpyHtoDAsync_v2_ptsz),
    NIBBLE_COPY_CALL(cuMemcpyHtoD_v2),
    NIBBLE_COPY_CALL(cuMemcpyHtoD_v2_ptds),
    NIBBLE_COPY_CALL(cuMemcpyPeer),
    NIBBLE_COPY_CALL(cuMemcpyPeerAsync),
    NIBBLE_COPY_CALL_PTSZ(cuMemcpyPeerAsync_ptsz),
    NIBBLE_COPY_CALL(cuMemcpyPeer_ptds),
    NIBBLE_COPY_CALL(cuMemcpy_ptds),
    NIBBLE_COPY_CALL(cuMemsetD16),
    NIBBLE_COPY_CALL(cuMemsetD16Async),
    NIBBLE_COPY_CALL_PTSZ(cuMemsetD16Async_ptsz),
    NIBBLE_COPY_CALL(cuMemsetD16_v2),
    NIBBLE_COPY_CALL(cuMemsetD16_v2_ptds),
    NIBBLE_COPY_CALL(cuMemsetD2D16),
    NIBBLE_COPY_CALL(cuMemsetD2D16Async),
    NIBBLE_COPY_CALL_PTSZ(cuMemsetD2D16Async_ptsz),
    NIBBLE_COPY_CALL(cuMemsetD2D16_v2),
    NIBBLE_COPY_CALL(cuMemsetD2D16_v2_ptds),
    NIBBLE_COPY_CALL(cuMemsetD2D32),
    NIBBLE_COPY_CALL(cuMemsetD2D32Async),
    NIBBLE_COPY_CALL_PTSZ(cuMemsetD2D32Async_ptsz),
    NIBBLE_COPY_CALL(cuMemsetD2D32_v2),
    NIBBLE_COPY_CALL(cuMemsetD2D32_v2_ptds),
    NIBBLE_COPY_CALL(cuMemsetD2D8),
    NIBBLE_COPY_CALL(cuMemsetD2D8Async),
    NIBBLE_COPY_CALL_PTSZ(cuMemsetD2D8Async_ptsz),
    NIBBLE_COPY_CALL(cuMemsetD2D8_v2),
    NIBBLE_COPY_CALL(cuMemsetD2D8_v2_ptds),
    NIBBLE_COPY_CALL(cuMemsetD32),
    NIBBLE_COPY_CALL(cuMemsetD32Async),
    NIBBLE_COPY_CALL_PTSZ(cuMemsetD32Async_ptsz),
    NIBBLE_COPY_CALL(cuMemsetD32_v2),
    NIBBLE_COPY_CALL(cuMemsetD32_v2_ptds),
    NIBBLE_COPY_CALL(cuMemsetD8),
    NIBBLE_COPY_CALL(cuMemsetD8Async),
    NIBBLE_COPY_CALL_PTSZ(cuMemsetD8Async_ptsz),
    NIBBLE_COPY_CALL(cuMemsetD8_v2),
    NIBBLE_COPY_CALL(cuMemsetD8_v2_ptds),
};
#undef NIBBLE_COPY_CALL
#undef NIBBLE_COPY_CALL_PTSZ


/** The callback of the launch calls (kept when the call returned success on a stream that was not
 *  capturing: a captured launch runs nothing, its graph launch does), of the copy and memset calls
 *  (kept when they returned success, unless issued on a capturing stream), of the
 *  calls that begin and end a capture, and of the graph calls that say which executable graphs run
 *  kernels (instantiate, destroy, node enable). */
void CUPTIAPI on_launch(void*, CUpti_CallbackDomain, CUpti_CallbackId cbid, const void* data) {
  const auto* d = static_cast<const CUpti_CallbackData*>(data);
  const bool succeeded =
      d->callbackSite == CUPTI_API_EXIT && *static_cast<const CUresult*>(d->functionReturnValue) == CUDA_SUCCESS;
  if (cbid == CUPTI_DRIVER_TRACE_CBID_cuGraphExecDestroy) {
    if (succeeded) {
      std::lock_guard<std::mutex> lock(g_mutex);
      g_exec_kernels.erase(static_cast<const cuGraphExecDestroy_params*>(d->functionParams)->hGraphExec);
    }
    return;
  }
  if (std::find(std::begin(kExecUpdateCalls), std::end(kExecUpdateCalls), cbid) != std::end(kExecUpdateCalls)) {
    // The executable graph now runs hGraph's parameters: what it may run is both graphs' kernels,
    // every node enabled again (fails closed on what the driver keeps of the old enable state).
    if (succeeded) {
      const auto* p = static_cast<const ExecUpdateParams*>(d->functionParams);
      GraphKernels kernels = driver_graph_kernels(p->hGraph);
      std::lock_guard<std::mutex> lock(g_mutex);
      GraphKernels& k = g_exec_kernels[p->hGraphExec];
      k.merge(kernels);
    }
    return;
  }
  if (cbid == CUPTI_DRIVER_TRACE_CBID_cuGraphNodeSetEnabled) {
    if (succeeded) {
      const auto* p = static_cast<const cuGraphNodeSetEnabled_params*>(d->functionParams);
      std::lock_guard<std::mutex> lock(g_mutex);
      if (auto it = g_exec_kernels.find(p->hGraphExec); it != g_exec_kernels.end())
        it->second.set_enabled(p->hNode, p->isEnabled != 0);
    }
    return;
  }
  if (std::find(std::begin(kInstantiateCalls), std::end(kInstantiateCalls), cbid) != std::end(kInstantiateCalls)) {
    const auto* p = static_cast<const InstantiateParams*>(d->functionParams);
    if (d->callbackSite == CUPTI_API_ENTER) {
      t_instantiating = driver_graph_kernels(p->hGraph);
    } else if (succeeded) {
      GraphKernels kernels = driver_graph_kernels(p->hGraph);
      kernels.merge(t_instantiating);
      // Whatever call instantiated it, the executable graph says how (cuGraphExecGetFlags).
      cuuint64_t flags = 0;
      // A graph whose flags cannot be read counts as one for device launch (fails closed).
      const bool device_launch = g_exec_get_flags(*p->phGraphExec, &flags) != CUDA_SUCCESS ||
                                 (flags & CUDA_GRAPH_INSTANTIATE_FLAG_DEVICE_LAUNCH) != 0;
      std::lock_guard<std::mutex> lock(g_mutex);
      g_exec_kernels[*p->phGraphExec] = std::move(kernels);
      g_device_launch_graphs += device_launch;
    }
    return;
  }
  if (cbid < g_capture_cbids.size() && g_capture_cbids[cbid]) {
    if (d->callbackSite == CUPTI_API_EXIT) {
      std::lock_guard<std::mutex> lock(g_mutex);
      if (g_capture_cbids[cbid] == 1 && succeeded) ++g_open_captures;
      const CUresult r = *static_cast<const CUresult*>(d->functionReturnValue);
      // An invalidated or unjoined capture ends with its error; a call from the wrong thread does not.
      if (g_capture_cbids[cbid] == 2 && g_open_captures > 0 &&
          (r == CUDA_SUCCESS || r == CUDA_ERROR_STREAM_CAPTURE_INVALIDATED || r == CUDA_ERROR_STREAM_CAPTURE_UNJOINED))
        --g_open_captures;
    }
    return;
  }
  const bool copy = cbid < g_copy_cbids.size() && g_copy_cbids[cbid];  // a copy or memset
  // The call's stream (launches, asynchronous copies), whose capture decides whether it runs now.
  bool streamed = false;
  CUstream stream = nullptr;
  for (const LaunchCall& c : kLaunchCalls)
    if (c.cbid == cbid) streamed = true, stream = c.stream(d->functionParams);
  if (copy)
    for (const CopyCall& c : kCopyCalls)
      if (c.cbid == cbid && c.stream) streamed = true, stream = c.stream(d->functionParams);
  if (d->callbackSite == CUPTI_API_ENTER) {
    t_entry = {d->correlationId, streamed ? capture_id(stream) : 0, stream};
    std::lock_guard<std::mutex> lock(g_mutex);
    g_in_flight.insert(d->correlationId);
    return;
  }
  // The exit (the entry returned above): captured when in the capture it was in at the entry, its
  // parameters naming the same stream (another thread may rewrite a launch's config meanwhile; what
  // the driver read in between cannot be known: a race the solution must win at every call).
  const bool same_call = t_entry.correlation == d->correlationId && t_entry.stream == stream;
  const uint64_t entry_capture = same_call ? t_entry.capture : 0;
  const bool captured = streamed && entry_capture != 0 && capture_id(stream) == entry_capture;
  bool keep = succeeded;
  CUgraphExec graph = nullptr;
  for (const LaunchCall& c : kLaunchCalls)
    if (keep && c.cbid == cbid) {
      keep = !captured;
      if (c.graph) graph = c.graph(d->functionParams);
    }
  // A copy's own stream decides, not whether any capture is open: a solution holding a capture open
  // on a side stream would otherwise exempt every copy of the process from the audit.
  int copy_left_out = -1;  // 1 on a capturing stream or of zero size, 0 audited, -1 not known (any open capture then counts)
  if (keep && copy) {
    copy_left_out = std::strstr(d->functionName ? d->functionName : "", "Async") ? -1 : 0;
    for (const CopyCall& c : kCopyCalls)
      if (c.cbid == cbid) {
        // A stream that does not answer (destroyed meanwhile by another thread) is audited: a failed
        // query must not fall back to "any capture open", which a capture held open on a side
        // stream would satisfy (a reviewer's reading).
        copy_left_out = c.size(d->functionParams) == 0 || captured ? 1 : 0;
        break;
      }
  }
  if (keep && !copy) t_last_launch = d->correlationId;
  std::lock_guard<std::mutex> lock(g_mutex);
  if (auto it = g_in_flight.find(d->correlationId); it != g_in_flight.end()) g_in_flight.erase(it);
  if (keep && g_auditing && copy && (copy_left_out == 0 || (copy_left_out < 0 && g_open_captures == 0)))
    g_copies.push_back({{d->correlationId, d->functionName, false}, g_generation});
  if (keep && g_auditing && !copy) {
    // A graph needs a kernel record when it was seen instantiated with kernel nodes (or conditional
    // ones), and when it was not seen instantiated at all or the audit cannot follow graphs (fails
    // closed: the timer exists before a solution loads, so each of its graphs was instantiated since).
    const auto it = graph ? g_exec_kernels.find(graph) : g_exec_kernels.end();
    const bool needs_kernel = !graph || !g_graph_view || it == g_exec_kernels.end() || it->second.launches_kernel();
    // Copy nodes ask for a memcpy record where the graph was seen (a graph of a kernel and a 64 MiB
    // copy, launched with the copy records off, left the kernel's record alone: a reviewer's reading).
    const bool seen = graph && g_graph_view && it != g_exec_kernels.end();
    g_launches.push_back({d->correlationId, d->functionName, needs_kernel, seen && it->second.memcpy.run(),
                          seen && it->second.memset.run(), graph != nullptr && g_graph_records == GraphRecords::Graphs});
    g_last_launch = std::max(g_last_launch, d->correlationId);
    g_graph_launches += graph != nullptr;
  }
}

CUpti_SubscriberHandle g_subscriber = nullptr;

// Completed buffers are kept for reuse: CUPTI asks for a buffer at the first activity after a flush,
// which is often a timed launch; an 8 MB allocation (mmap, then page faults as CUPTI writes it) there
// cost ~0.45 ms of host time inside the window and split a two-kernel cuBLAS call by that much
// (measured on the H200 at 87c58e5..6cbfdbe: cuBLAS bf16 m1-n3072-k3072 12 -> 330 us).
std::vector<uint8_t*> g_free;  // under g_mutex
constexpr size_t kMaxFreeBuffers = 8;

void CUPTIAPI buffer_requested(uint8_t** buffer, size_t* size, size_t* max_records) {
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    if (!g_free.empty()) {
      *buffer = g_free.back();
      g_free.pop_back();
      *size = kBufferBytes;
      *max_records = 0;
      return;
    }
  }
  *buffer = static_cast<uint8_t*>(std::aligned_alloc(8, kBufferBytes));
  if (*buffer) std::memset(*buffer, 0, kBufferBytes);  // its pages faulted in now, not as records land
  *size = *buffer ? kBufferBytes : 0;
  *max_records = 0;
}

void CUPTIAPI buffer_completed(CUcontext ctx, uint32_t stream_id, uint8_t* buffer, size_t, size_t valid) {
  CUpti_Activity* rec = nullptr;
  std::vector<ActivityRecord> got;
  while (cuptiActivityGetNextRecord(buffer, valid, &rec) == CUPTI_SUCCESS) {
    switch (rec->kind) {
      case CUPTI_ACTIVITY_KIND_KERNEL:
      case CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL: {
        auto* k = reinterpret_cast<CUpti_ActivityKernel10*>(rec);
        got.push_back({ActivityRecord::Kernel, k->start, k->end, k->streamId, k->correlationId});
        break;
      }
      case CUPTI_ACTIVITY_KIND_MEMCPY: {
        auto* m = reinterpret_cast<CUpti_ActivityMemcpy6*>(rec);
        got.push_back({ActivityRecord::Memcpy, m->start, m->end, m->streamId, m->correlationId});
        break;
      }
      case CUPTI_ACTIVITY_KIND_MEMCPY2: {  // peer-to-peer: work a solution could start too
        auto* m = reinterpret_cast<CUpti_ActivityMemcpyPtoP4*>(rec);
        got.push_back({ActivityRecord::Memcpy, m->start, m->end, m->streamId, m->correlationId});
        break;
      }
      case CUPTI_ACTIVITY_KIND_MEMSET: {
        auto* m = reinterpret_cast<CUpti_ActivityMemset4*>(rec);
        got.push_back({ActivityRecord::Memset, m->start, m->end, m->streamId, m->correlationId});
        break;
      }
      case CUPTI_ACTIVITY_KIND_GRAPH_TRACE: {  // a whole graph launch (GraphRecords::Graphs, or a solution's switch)
        auto* g = reinterpret_cast<CUpti_ActivityGraphTrace2*>(rec);
        got.push_back({ActivityRecord::Graph, g->start, g->end, g->streamId, g->correlationId});
        break;
      }
      case CUPTI_ACTIVITY_KIND_DEVICE_GRAPH_TRACE: {  // a graph a kernel launched (enable_device_graph_records): no host call
        auto* g = reinterpret_cast<CUpti_ActivityDeviceGraphTrace*>(rec);
        got.push_back({ActivityRecord::Graph, g->start, g->end, uint32_t(g->streamId), 0});
        break;
      }
      default: break;
    }
  }
  size_t dropped = 0;
  (void)cuptiActivityGetNumDroppedRecords(ctx, stream_id, &dropped);  // records with no buffer to go to
  std::lock_guard<std::mutex> lock(g_mutex);
  if (g_auditing) {
    g_dropped_records += dropped;
    for (const ActivityRecord& r : got) {
      RecordSeen& seen = g_record_ids.try_emplace(r.correlation_id, RecordSeen{g_generation, false, false, false, false}).first->second;
      seen.generation = g_generation;
      seen.kernel = seen.kernel || r.kind == ActivityRecord::Kernel;
      seen.memcpy = seen.memcpy || r.kind == ActivityRecord::Memcpy;
      seen.memset = seen.memset || r.kind == ActivityRecord::Memset;
      seen.graph = seen.graph || r.kind == ActivityRecord::Graph;
    }
  }
  g_records.insert(g_records.end(), got.begin(), got.end());
  if (g_free.size() < kMaxFreeBuffers)
    g_free.push_back(buffer);
  else
    std::free(buffer);
}

void check(CUptiResult r, const char* call) {
  if (r == CUPTI_SUCCESS) return;
  const char* msg = nullptr;
  cuptiGetResultString(r, &msg);
  throw std::runtime_error(std::string("CUPTI ") + call + " failed: " + (msg ? msg : "unknown error"));
}

}  // namespace

CopyCallView copy_call_view(uint32_t cbid, const void* params) {
  for (const CopyCall& c : kCopyCalls)
    if (c.cbid == cbid) return {true, c.stream != nullptr, c.size(params)};
  return {};
}

int drop_recorded_launches(std::vector<AuditedLaunch>& launches, const std::function<Recorded(uint32_t)>& recorded) {
  const auto kept = std::remove_if(launches.begin(), launches.end(),
                                   [&](const AuditedLaunch& l) { return launch_recorded(l, recorded(l.id)); });
  const int dropped = int(launches.end() - kept);
  launches.erase(kept, launches.end());
  return dropped;
}

namespace {

/** Whether `graph` or its child graphs hold a node of `type` (or, for kernels, a conditional node);
 *  past a depth of 8, yes. */
bool graph_has_node(void* graph, const GraphWalk& walk, int type, int depth) {
  if (!graph) return false;
  if (depth > 8) return true;
  for (void* node : walk.nodes(graph)) {
    const int t = walk.type(node);
    if (t == type || (type == CU_GRAPH_NODE_TYPE_KERNEL && t == CU_GRAPH_NODE_TYPE_CONDITIONAL)) return true;
    if (t == CU_GRAPH_NODE_TYPE_GRAPH && graph_has_node(walk.child(node), walk, type, depth + 1)) return true;
  }
  return false;
}

/** `disabled` (a subset of `nodes` less `never`) after cuGraphNodeSetEnabled(node, enabled). */
void track_enabled(const std::vector<void*>& nodes, const std::vector<void*>& never, std::vector<void*>& disabled,
                   void* node, bool enabled) {
  if (std::find(nodes.begin(), nodes.end(), node) == nodes.end()) return;
  if (std::find(never.begin(), never.end(), node) != never.end()) return;
  const auto it = std::find(disabled.begin(), disabled.end(), node);
  if (enabled && it != disabled.end()) disabled.erase(it);
  if (!enabled && it == disabled.end()) disabled.push_back(node);
}

void add_missing(std::vector<void*>& to, const std::vector<void*>& from) {
  for (void* n : from)
    if (std::find(to.begin(), to.end(), n) == to.end()) to.push_back(n);
}

}  // namespace

bool graph_has_kernel(void* graph, const GraphWalk& walk, int depth) {
  return graph_has_node(graph, walk, CU_GRAPH_NODE_TYPE_KERNEL, depth);
}

bool graph_has_copy_node(void* graph, const GraphWalk& walk, int type, int depth) {
  return graph_has_node(graph, walk, type, depth);
}

void GraphKernels::set_enabled(void* node, bool enabled) {
  track_enabled(kernel_nodes, updatable, disabled, node, enabled);
  for (CopyNodes* c : {&memcpy, &memset}) track_enabled(c->nodes, {}, c->disabled, node, enabled);
}

void GraphKernels::merge(const GraphKernels& other) {
  add_missing(kernel_nodes, other.kernel_nodes);
  add_missing(updatable, other.updatable);
  disabled.clear();  // a fresh executable graph: every node enabled
  nested = nested || other.nested;
  for (auto [to, from] : {std::pair{&memcpy, &other.memcpy}, {&memset, &other.memset}}) {
    add_missing(to->nodes, from->nodes);
    to->disabled.clear();
    to->nested = to->nested || from->nested;
  }
}

GraphKernels graph_kernels(void* graph, const GraphWalk& walk) {
  GraphKernels k;
  if (!graph) return k;
  for (void* node : walk.nodes(graph)) {
    const int type = walk.type(node);
    if (type == CU_GRAPH_NODE_TYPE_KERNEL) {
      k.kernel_nodes.push_back(node);
      if (!walk.device_updatable || walk.device_updatable(node)) k.updatable.push_back(node);
    }
    if (type == CU_GRAPH_NODE_TYPE_MEMCPY) k.memcpy.nodes.push_back(node);
    if (type == CU_GRAPH_NODE_TYPE_MEMSET) k.memset.nodes.push_back(node);
    if (type == CU_GRAPH_NODE_TYPE_CONDITIONAL ||
        (type == CU_GRAPH_NODE_TYPE_GRAPH && graph_has_kernel(walk.child(node), walk, 1)))
      k.nested = true;
    if (type == CU_GRAPH_NODE_TYPE_GRAPH) {
      k.memcpy.nested |= graph_has_copy_node(walk.child(node), walk, CU_GRAPH_NODE_TYPE_MEMCPY, 1);
      k.memset.nested |= graph_has_copy_node(walk.child(node), walk, CU_GRAPH_NODE_TYPE_MEMSET, 1);
    }
  }
  return k;
}

SpanStats span_of(const std::vector<ActivityRecord>& records) {
  SpanStats s;
  if (records.empty()) {
    s.invalid_reason = "no GPU activity recorded during the call";
    return s;
  }
  // The counts cover every record, valid or not: the graders count kernels between timed calls
  // from them, and one zero-length record must not hide the kernels after it.
  for (const auto& r : records)
    (r.kind == ActivityRecord::Kernel   ? s.kernels
     : r.kind == ActivityRecord::Memcpy ? s.memcpys
     : r.kind == ActivityRecord::Memset ? s.memsets
                                        : s.graphs)++;
  std::vector<std::pair<uint64_t, uint64_t>> iv;
  uint64_t first = UINT64_MAX, last = 0;
  for (const auto& r : records) {
    if (r.end_ns <= r.start_ns) {
      // CUPTI writes 0 for both of a graph record's timestamps when it could not take them.
      s.invalid_reason = r.kind == ActivityRecord::Graph && untimed(r)
                             ? "a graph launch's record has no timestamps (CUPTI could not take them): grade with "
                               "--graph-records nodes"
                             : "an activity record has zero or negative duration";
      return s;
    }
    first = std::min(first, r.start_ns);
    last = std::max(last, r.end_ns);
    iv.emplace_back(r.start_ns, r.end_ns);
  }
  std::sort(iv.begin(), iv.end());
  uint64_t cur_s = iv[0].first, cur_e = iv[0].second;
  for (size_t i = 1; i < iv.size(); ++i) {
    if (iv[i].first > cur_e) {
      s.busy_ns += cur_e - cur_s;
      cur_s = iv[i].first;
      cur_e = iv[i].second;
    } else {
      cur_e = std::max(cur_e, iv[i].second);
    }
  }
  s.busy_ns += cur_e - cur_s;
  s.span_ns = last - first;
  s.valid = true;
  return s;
}

void enable_device_graph_records() { check(cuptiActivityEnableDeviceGraph(1), "cuptiActivityEnableDeviceGraph"); }

std::optional<GraphRecords> parse_graph_records(const std::string& name) {
  if (name == "nodes") return GraphRecords::Nodes;
  if (name == "graphs") return GraphRecords::Graphs;
  return std::nullopt;
}

CuptiTimer::CuptiTimer(GraphRecords graphs) {
  if (g_active) throw std::runtime_error("only one CuptiTimer may exist per process");
  g_graph_records = graphs;
  check(cuptiActivityRegisterCallbacks(buffer_requested, buffer_completed), "cuptiActivityRegisterCallbacks");
  reenable();
  auto entry = [](const char* name) -> void* {
    void* f = nullptr;
    cudaDriverEntryPointQueryResult r{};
    if (cudaGetDriverEntryPointByVersion(name, &f, 12000, cudaEnableDefault, &r) == cudaSuccess &&
        r == cudaDriverEntryPointSuccess)
      return f;
    (void)cudaGetLastError();  // not left for the next launch check to find
    return nullptr;
  };
  g_capture_info = reinterpret_cast<PFN_cuStreamGetCaptureInfo_v11030>(entry("cuStreamGetCaptureInfo"));
  if (!g_capture_info) throw std::runtime_error("the CUDA driver has no cuStreamGetCaptureInfo");
  g_exec_get_flags = reinterpret_cast<decltype(g_exec_get_flags)>(entry("cuGraphExecGetFlags"));
  if (!g_exec_get_flags) throw std::runtime_error("the CUDA driver has no cuGraphExecGetFlags (CUDA 12.0 or later)");
  // The graph walk's calls: without one, a graph launch needs any record (the audit as before).
  g_graph_get_nodes = reinterpret_cast<decltype(g_graph_get_nodes)>(entry("cuGraphGetNodes"));
  g_node_get_type = reinterpret_cast<decltype(g_node_get_type)>(entry("cuGraphNodeGetType"));
  g_child_graph = reinterpret_cast<decltype(g_child_graph)>(entry("cuGraphChildGraphNodeGetGraph"));
  g_kernel_node_attr = reinterpret_cast<decltype(g_kernel_node_attr)>(entry("cuGraphKernelNodeGetAttribute"));
  // The copy and memset calls, by CUPTI's own names (every cuMemcpy* and cuMemset* the driver has),
  // known before any callback can read the table.
  g_copy_cbids.assign(CUPTI_DRIVER_TRACE_CBID_SIZE, false);
  g_capture_cbids.assign(CUPTI_DRIVER_TRACE_CBID_SIZE, 0);
  for (uint32_t cbid = 1; cbid < CUPTI_DRIVER_TRACE_CBID_SIZE; ++cbid) {
    const char* name = nullptr;
    if (cuptiGetCallbackName(CUPTI_CB_DOMAIN_DRIVER_API, cbid, &name) != CUPTI_SUCCESS || !name) continue;
    const std::string n = name;
    g_copy_cbids[cbid] = n.rfind("cuMemcpy", 0) == 0 || n.rfind("cuMemset", 0) == 0;
    g_capture_cbids[cbid] = n.rfind("cuStreamBeginCapture", 0) == 0 ? 1 : (n.rfind("cuStreamEndCapture", 0) == 0 ? 2 : 0);
  }
  check(cuptiSubscribe(&g_subscriber, on_launch, nullptr),
        "cuptiSubscribe for the launch audit (the process's one callback subscriber: is a profiler such as Nsight "
        "Systems injected into the grader? Grade without it; nibble grade --profile runs one after the graded run)");
  for (const LaunchCall& c : kLaunchCalls) {
    const CUptiResult r = cuptiEnableCallback(1, g_subscriber, CUPTI_CB_DOMAIN_DRIVER_API, c.cbid);
    if (!c.legacy) check(r, "cuptiEnableCallback (a launch call)");
  }
  for (uint32_t cbid = 1; cbid < CUPTI_DRIVER_TRACE_CBID_SIZE; ++cbid)
    if (g_copy_cbids[cbid] || g_capture_cbids[cbid]) (void)cuptiEnableCallback(1, g_subscriber, CUPTI_CB_DOMAIN_DRIVER_API, cbid);
  // Not required: without them (or the walk's driver calls) every graph launch needs a kernel record.
  bool view = g_graph_get_nodes && g_node_get_type && g_child_graph;
  for (const CUpti_CallbackId cbid : kInstantiateCalls)  // the pre-12.0 cuGraphInstantiate may be refused
    view = (cuptiEnableCallback(1, g_subscriber, CUPTI_CB_DOMAIN_DRIVER_API, cbid) == CUPTI_SUCCESS ||
            cbid == CUPTI_DRIVER_TRACE_CBID_cuGraphInstantiate) &&
           view;
  for (const CUpti_CallbackId cbid : kExecUpdateCalls)
    view = cuptiEnableCallback(1, g_subscriber, CUPTI_CB_DOMAIN_DRIVER_API, cbid) == CUPTI_SUCCESS && view;
  for (const CUpti_CallbackId cbid : kGraphViewCalls)
    view = cuptiEnableCallback(1, g_subscriber, CUPTI_CB_DOMAIN_DRIVER_API, cbid) == CUPTI_SUCCESS && view;
  {
    std::lock_guard<std::mutex> lock(g_mutex);
    g_graph_view = view;
  }
  g_active = true;
}

void CuptiTimer::reenable() {
  // GRAPH_TRACE first. Under GraphRecords::Nodes it is left as it is: a solution that turned it on
  // (sparing its graphs' per-node tracing) has its graph launches found unrecorded by the audit
  // (launch_recorded), and the per-node path stays the one measured.
  if (g_graph_records == GraphRecords::Graphs) check(cuptiActivityEnable(CUPTI_ACTIVITY_KIND_GRAPH_TRACE), "enable GRAPH_TRACE");
  for (const RecordKind& k : kRecordKinds) check(cuptiActivityEnable(k.kind), k.enable);
}

uint32_t CuptiTimer::stream_id(cudaStream_t s) const {
  uint32_t id = 0;
  check(cuptiGetStreamIdEx(nullptr, s, 0, &id), "cuptiGetStreamIdEx");
  return id;
}

CuptiTimer::~CuptiTimer() {
  if (g_subscriber) cuptiUnsubscribe(g_subscriber);
  g_subscriber = nullptr;
  for (const RecordKind& k : kRecordKinds) cuptiActivityDisable(k.kind);
  if (g_graph_records == GraphRecords::Graphs) cuptiActivityDisable(CUPTI_ACTIVITY_KIND_GRAPH_TRACE);
  cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED);
  std::lock_guard<std::mutex> lock(g_mutex);
  g_records.clear();
  reset_audit(false);
  g_exec_kernels.clear();
  g_device_launch_graphs = 0;
  for (uint8_t* b : g_free) std::free(b);
  g_free.clear();
  g_active = false;
}

uint64_t CuptiTimer::now() const {
  uint64_t t = 0;
  check(cuptiGetTimestamp(&t), "cuptiGetTimestamp");
  return t;
}

std::vector<ActivityRecord> CuptiTimer::collect(uint64_t t0, uint64_t t1, std::vector<ActivityRecord>* late) {
  check(cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED), "cuptiActivityFlushAll");
  std::lock_guard<std::mutex> lock(g_mutex);
  if (g_auditing) prune_launches();
  std::vector<ActivityRecord> out, later;
  for (const auto& r : g_records)
    if ((r.start_ns >= t0 && r.start_ns <= t1) || untimed(r))
      out.push_back(r);
    else if (r.start_ns > t1)
      later.push_back(r);  // after the window: the next collect's (the work between two windows)
    else if (late)
      late->push_back(r);  // before t0 but delivered only now: still running at the last collect
  g_records.swap(later);
  return out;
}

void CuptiTimer::start_launch_audit() {
  std::lock_guard<std::mutex> lock(g_mutex);
  reset_audit(true);
}

uint32_t CuptiTimer::this_thread_last_launch() { return t_last_launch; }

uint32_t CuptiTimer::last_launch() const {
  std::lock_guard<std::mutex> lock(g_mutex);
  return g_last_launch;
}

LaunchAudit CuptiTimer::launch_audit(uint32_t last) {
  check(cuptiActivityFlushAll(CUPTI_ACTIVITY_FLAG_FLUSH_FORCED), "cuptiActivityFlushAll");
  std::lock_guard<std::mutex> lock(g_mutex);
  prune_launches();
  LaunchAudit a;
  for (const AuditedLaunch& l : g_launches)
    if (l.id <= last && a.unrecorded++ == 0) a.first_unrecorded = l.api ? l.api : "?";
  a.launches = g_matched + a.unrecorded;
  a.dropped_records = int64_t(g_dropped_records);
  a.unrecorded_copies = g_copies_unrecorded;
  a.first_unrecorded_copy = g_first_unrecorded_copy;
  for (const AuditedCopy& c : g_copies)
    if (c.call.id <= last && a.unrecorded_copies++ == 0) a.first_unrecorded_copy = c.call.api ? c.call.api : "?";
  a.copies = g_copies_matched + a.unrecorded_copies;
  a.device_launch_graphs = g_device_launch_graphs;
  a.graph_launches = g_graph_launches;
  return a;
}

uint32_t CuptiTimer::version() {
  uint32_t v = 0;
  cuptiGetVersion(&v);
  return v;
}

}  // namespace nibble
