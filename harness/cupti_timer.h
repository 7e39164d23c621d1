// cupti_timer.h: GPU activity records (kernels, memcpy, memset, on every stream and every launch
// path) collected through CUPTI's activity API, so a timed call is measured by what the GPU did,
// not by what the candidate chose to tell us.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <functional>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace nibble {

struct ActivityRecord {
  // Graph: one launch of a CUDA graph as a whole (GRAPH_TRACE; GraphRecords::Graphs), its nodes'
  // own records not taken.
  enum Kind { Kernel, Memcpy, Memset, Graph } kind;
  uint64_t start_ns, end_ns;  // CUPTI timestamps (same clock as CuptiTimer::now)
  uint32_t stream_id;
  uint32_t correlation_id = 0;  // the launching API call's (CUPTI's correlation id)
};

/** How a CUDA graph's launch is recorded. Nodes: a record per kernel, copy and memset node
 *  (CONCURRENT_KERNEL, MEMCPY, MEMSET), as for work outside a graph. Graphs: one record per launch
 *  (CUPTI's GRAPH_TRACE, from its first node's start to its last node's end), as Nsight Systems'
 *  --cuda-graph-trace=graph: CUPTI documents it as the record that spares the per-node tracing
 *  overhead, which a graph of ~2,000 small kernels (a PyTorch decode step) pays on every node
 *  (probe_cupti_launches measures both). Work outside graphs is recorded per kernel either way. */
enum class GraphRecords { Nodes, Graphs };

/** Under GraphRecords::Graphs, graphs launched from the GPU (a kernel's cudaGraphLaunch into a tail
 *  or sibling launch) have records of their own (DEVICE_GRAPH_TRACE, taken as Graph records): the
 *  host-launched graph's record need not span them. CUPTI takes this switch only before CUDA starts
 *  in the process (cuptiActivityEnableDeviceGraph), so the child calls it first. Throws
 *  std::runtime_error with CUPTI's message when CUPTI refuses. */
void enable_device_graph_records();

/** The mode a name ("nodes", "graphs") says; std::nullopt for any other. Pure. */
std::optional<GraphRecords> parse_graph_records(const std::string& name);

/** Whether `r` has no timestamps: CUPTI writes 0 for both of a graph record's when it could not
 *  take them. */
inline bool untimed(const ActivityRecord& r) { return r.start_ns == 0 && r.end_ns == 0; }

/** The launches of an audit (CuptiTimer::start_launch_audit) matched with the GPU's records. */
struct LaunchAudit {
  int launches = 0;            // kernel and graph launches that returned success, outside a stream capture
  int unrecorded = 0;          // of those, launches whose work is not on the record (launch_recorded)
  std::string first_unrecorded;  // the API of the first, e.g. "cudaLaunchKernel_v7000"
  bool callbacks_lost = false;   // the harness's own launch at the end was not seen (TimedCalls::launch_audit)
  int64_t dropped_records = 0;   // activity records CUPTI dropped (no buffer): the span and the audit incomplete
  // Copy and memset calls (the driver's cuMemcpy* and cuMemset*), audited the same way (those issued
  // on a capturing stream left out): every driver copy leaves a record, host to host included.
  int copies = 0;
  int unrecorded_copies = 0;
  std::string first_unrecorded_copy;
  // Graphs instantiated for launch from the GPU (cudaGraphInstantiateFlagDeviceLaunch) since the
  // timer started, build included: a kernel's launch of one has no host call, so no callback sees it.
  int device_launch_graphs = 0;
  // Of `launches`, the graph launches (cuGraphLaunch): 0 says the figure does not depend on how a
  // graph's launch is recorded (--graph-records).
  int graph_launches = 0;
};

/** One launch as the audit keeps it: the driver call's correlation id, which every record of its
 *  work carries (a runtime launch's too: it calls the driver inside, with the same id). */
struct AuditedLaunch {
  uint32_t id;
  const char* api;           // CUPTI's name of the driver call (a static string)
  bool needs_kernel = true;   // a kernel launch, or a graph with kernel nodes: a kernel record must carry the id
  bool needs_memcpy = false;  // a graph with memcpy nodes: a memcpy record must carry it too
  bool needs_memset = false;  // a graph with memset nodes: a memset record must carry it too
  bool whole_graph = false;   // a graph launch under GraphRecords::Graphs: its own record vouches for its nodes
};

/** The records a correlation id got so far. */
struct Recorded {
  bool any = false;     // a record of any kind
  bool kernel = false;  // a kernel record among them
  bool memcpy = false;  // a memcpy record among them
  bool memset = false;  // a memset record among them
  bool graph = false;   // a graph launch's own record (GRAPH_TRACE) among them
};

/** Whether `l`'s work is on the record: under GraphRecords::Graphs a graph launch's own record
 *  (GRAPH_TRACE: it spans every node, and CUPTI then writes none per node), else a kernel record
 *  when it launched kernels (a graph whose memset node left a record while its kernels' records
 *  were off is not), a memcpy record when it ran copy nodes (a graph whose kernel left a record
 *  while the copy records were off is not), and some record always. A graph record vouches for
 *  nothing under GraphRecords::Nodes: a solution that turned GRAPH_TRACE on itself (sparing its
 *  nodes' tracing) would otherwise pass as recorded. */
inline bool launch_recorded(const AuditedLaunch& l, Recorded r) {
  if (r.graph && l.whole_graph) return true;
  return r.any && (r.kernel || !l.needs_kernel) && (r.memcpy || !l.needs_memcpy) && (r.memset || !l.needs_memset);
}

/** Drops from `launches` every launch on the record (launch_recorded, with `recorded` saying what
 *  its id got) and returns how many it dropped; what stays is in its order. Pure. */
int drop_recorded_launches(std::vector<AuditedLaunch>& launches, const std::function<Recorded(uint32_t)>& recorded);

/** What the copy audit reads of one driver copy or memset call: `known` when `cbid` (a CUPTI driver
 *  callback id) is one of CUDA 13.0's 104 cuMemcpy* / cuMemset* calls; `async` when it takes a stream;
 *  `size` the bytes it moves (a batch: its copies; 1 where the size cannot be read). `params` is the
 *  callback's functionParams. Pure. */
struct CopyCallView {
  bool known = false, async = false;
  uint64_t size = 1;
};
CopyCallView copy_call_view(uint32_t cbid, const void* params);

/** How to walk a CUDA graph (the driver's cuGraphGetNodes, cuGraphNodeGetType and
 *  cuGraphChildGraphNodeGetGraph in the timer; fakes in the tests). */
struct GraphWalk {
  std::function<std::vector<void*>(void* graph)> nodes;  // empty when the driver refuses
  std::function<int(void* node)> type;                   // a CUgraphNodeType, -1 when refused
  std::function<void*(void* node)> child;                // a child graph node's graph, nullptr when refused
  /** Whether a kernel node may be enabled from the device (CU_LAUNCH_ATTRIBUTE_DEVICE_UPDATABLE_KERNEL_NODE;
   *  true when refused or unset: such a node never counts as disabled). */
  std::function<bool(void* node)> device_updatable;
};

/** Whether `graph` holds a kernel node, in it or in its child graphs. Past a depth of 8 child graphs
 *  it says yes, and so for a conditional node (both fail closed: a kernel hidden deeper, or in a
 *  conditional node's body, which the driver of CUDA 13.0 does not hand out, would otherwise need no
 *  kernel record, and a memset beside it would vouch for it); what the driver will not list counts as
 *  no kernel (the audit then asks for any record, as for a graph of copies). Pure but for `walk`. */
bool graph_has_kernel(void* graph, const GraphWalk& walk, int depth = 0);

/** Whether `graph` holds a node of `type` (CU_GRAPH_NODE_TYPE_MEMCPY or _MEMSET), in it or in its
 *  child graphs (past a depth of 8: yes). A conditional node's body, which the driver does not hand
 *  out, counts as none: an honest graph with a copy in a body would otherwise need a record whose
 *  correlation id is 0 (a limit, said in docs/architecture.md). Pure but for `walk`. */
bool graph_has_copy_node(void* graph, const GraphWalk& walk, int type, int depth = 0);

/** One kind of copy node (memcpy or memset) of an executable graph as the audit tracks them: the
 *  top-level nodes, those a cuGraphNodeSetEnabled call disabled, and whether a child graph holds one. */
struct CopyNodes {
  std::vector<void*> nodes, disabled;
  bool nested = false;
  /** Whether a launch runs one: a child graph's, or a top-level one not disabled. */
  bool run() const { return nested || nodes.size() > disabled.size(); }
};

/** The kernels of one executable graph as the audit tracks them: its top-level kernel nodes, those of
 *  them a cuGraphNodeSetEnabled call disabled, and whether a child graph or a conditional node may run
 *  a kernel (graph_has_kernel; their nodes cannot be disabled in an executable graph). A kernel node
 *  the device may enable again (GraphWalk::device_updatable) never counts as disabled: a kernel of
 *  the solution's could switch it on after the host disabled it. */
struct GraphKernels {
  std::vector<void*> kernel_nodes;
  std::vector<void*> updatable;  // a subset of kernel_nodes: enabled from the device, never disabled here
  std::vector<void*> disabled;   // a subset of kernel_nodes less updatable, no repeats
  bool nested = false;
  // The memcpy and memset nodes the same way (no device-updatable copy node exists): a launch that
  // runs one needs a record of its kind (its records alone may be switched off).
  CopyNodes memcpy, memset;
  /** Whether a launch runs a kernel: a child graph's, or a top-level one not disabled. */
  bool launches_kernel() const { return nested || kernel_nodes.size() > disabled.size(); }
  /** cuGraphNodeSetEnabled(node, enabled): tracked for kernel nodes the device cannot enable and for
   *  memcpy and memset nodes. */
  void set_enabled(void* node, bool enabled);
  /** What a launch may run of either view of a graph (the walks at an instantiate call's entry and
   *  exit): every kernel, memcpy and memset node of both, nested when either is, none disabled. */
  void merge(const GraphKernels& other);
};

/** `graph`'s kernels (graph_has_kernel for its child graphs). Pure but for `walk`. */
GraphKernels graph_kernels(void* graph, const GraphWalk& walk);

/** What the GPU did inside one timed window. */
struct SpanStats {
  uint64_t span_ns = 0;  // last record's end - first record's start (the GPU span)
  uint64_t busy_ns = 0;  // length of the union of the records' intervals
  int kernels = 0, memcpys = 0, memsets = 0;
  bool valid = false;    // false when no record fell in the window or a record had end <= start
  std::string invalid_reason;
  int graphs = 0;        // graph launches recorded whole (GraphRecords::Graphs)
};

/** Summarise the records of one window. */
SpanStats span_of(const std::vector<ActivityRecord>& records);

/** How far an activity record's timestamps may read off the host's reading of CUPTI's clock: a GPU
 *  timestamp converted to it against cuptiGetTimestamp (a Python solution's first copy, issued
 *  right after a window opened, read as starting before it in 9 of 96 steps on an H100 on
 *  2026-12-06). */
inline constexpr uint64_t kActivitySkewNs = 20000;

/** Whether record `r` (collected up to at most c1 + kActivitySkewNs) belongs to the timed window
 *  opened at c0 and closed at c1 (CuptiTimer::now), else to the gap before it. Any other stream's
 *  than `harness_stream` from c0 - kActivitySkewNs on, so a solution's record near the edges counts
 *  in its span, which can only lengthen it, never as gap work. The harness's own by what they are,
 *  not by their timestamps alone (which read off by as much): a timed window holds none of them
 *  (staging ends before c0, the digest starts after c1), a calibration window (`calibration`) its
 *  one kernel: a kernel from c0 - kActivitySkewNs on (its staging is copies and memsets; the
 *  previous window's digest kernels ran before the flush, the seed's round trip and the staging,
 *  each longer than the skew: counted in, they made every calibration span the whole gap, 2026-12-06
 *  on an H100). Pure. */
inline bool in_window(const ActivityRecord& r, uint64_t c0, uint32_t harness_stream, bool calibration) {
  if (untimed(r)) return true;  // span_of: invalid, with the reason
  const bool from_c0 = r.start_ns + kActivitySkewNs >= c0;
  if (r.stream_id == harness_stream) return calibration && r.kind == ActivityRecord::Kernel && from_c0;
  return from_c0;
}

/**
 * Owns the process's CUPTI activity subscription (CUPTI's callbacks are process-global, so at most
 * one instance may exist). Constructing enables CONCURRENT_KERNEL, MEMCPY, MEMCPY2 (peer) and MEMSET records
 * (and GRAPH_TRACE with GraphRecords::Graphs),
 * and subscribes to the driver's kernel and graph launch calls (the process's one
 * CUPTI callback subscriber: a solution's own profiler cannot subscribe while it exists); destroying
 * undoes both. Throws std::runtime_error with CUPTI's message on failure.
 *
 * Why the launches: the records are switches the solution shares a process with (tests/hostile row
 * hide_from_cupti turns them off for part of its call); every launch the driver accepted must leave a
 * record carrying its correlation id, so a launch without one is GPU work hidden from the span,
 * however short (the grader's own clock bounds the rest only to verdict.h's allowance).
 */
class CuptiTimer {
 public:
  explicit CuptiTimer(GraphRecords graphs = GraphRecords::Nodes);
  ~CuptiTimer();
  CuptiTimer(const CuptiTimer&) = delete;
  CuptiTimer& operator=(const CuptiTimer&) = delete;

  /** Enable the record kinds again (a solution may have disabled one: CUPTI's switches are
   *  process-wide); called before each timed window. Throws as the constructor. */
  void reenable();
  /** CUPTI's id of `s`, the stream_id its records carry. Throws std::runtime_error. */
  uint32_t stream_id(cudaStream_t s) const;
  /** CUPTI's timestamp in ns. */
  uint64_t now() const;
  /** Flush CUPTI's buffers and return (and forget) every record whose start lies in [t0, t1], and
   *  every record without timestamps (a graph's CUPTI could not time: it belongs to no time, and the
   *  window that collects it makes its sample invalid, span_of);
   *  records that started after t1 are kept for the next collect (so the work between two windows
   *  can be collected too); those that started before t0 are dropped, or moved to *late when given
   *  (a record CUPTI delivers only now although it started before the previous collect's end: work
   *  still running then, on a stream the harness did not synchronise). Call after the device is
   *  synchronised. */
  std::vector<ActivityRecord> collect(uint64_t t0, uint64_t t1, std::vector<ActivityRecord>* late = nullptr);
  /** From now on, every successful kernel or graph launch (the driver call inside any runtime
   *  launch, or a direct one, on any thread; launches into a stream capture run nothing and are
   *  skipped) is kept for launch_audit(); earlier ones are forgotten. */
  void start_launch_audit();
  /** The correlation id of the calling thread's last kernel or graph launch that ran (not into a
   *  capture), audited or not (0: none): a harness kernel's, to find its record. */
  static uint32_t this_thread_last_launch();
  /** The correlation id of the last launch kept since start_launch_audit() (0: none). */
  uint32_t last_launch() const;
  /** The launches since start_launch_audit() up to the one of id `last` (read before the device
   *  synchronisation: a launch made after it, by a thread of the solution's, may have no record
   *  yet) and how many have no record of their correlation id. Call after the device is
   *  synchronised (it flushes CUPTI's buffers). Throws std::runtime_error. */
  LaunchAudit launch_audit(uint32_t last);
  /** CUPTI's API version. */
  static uint32_t version();
};

}  // namespace nibble
