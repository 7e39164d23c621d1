// test_stats.cpp: summary statistics, relative error and GPU-span arithmetic, checked by hand.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <vector>

#include "fixtures/bf16.h"
#include <cuda.h>
#include <cupti.h>

#include "harness/cupti_timer.h"
#include "harness/stats.h"

using namespace nibble;

TEST(Stats, QuartilesOfFourValuesByHand) {
  // Type-7 quantiles of {1,2,3,4}: h = 3p; q1 = 1 + 0.75 = 1.75, median 2.5, q3 = 3.25.
  const Summary s = summarize({4, 1, 3, 2});
  EXPECT_EQ(s.n, 4u);
  EXPECT_DOUBLE_EQ(s.median, 2.5);
  EXPECT_DOUBLE_EQ(s.q1, 1.75);
  EXPECT_DOUBLE_EQ(s.q3, 3.25);
  EXPECT_DOUBLE_EQ(s.min, 1);
  EXPECT_DOUBLE_EQ(s.max, 4);
  EXPECT_DOUBLE_EQ(s.mean, 2.5);
  EXPECT_NEAR(s.stdev, std::sqrt(5.0 / 3.0), 1e-15);  // sum of squares 5, n-1 = 3
}

TEST(Stats, OddCountMedianIsTheMiddleValue) {
  const Summary s = summarize({10, 30, 20, 50, 40});
  EXPECT_DOUBLE_EQ(s.median, 30);
  EXPECT_DOUBLE_EQ(s.q1, 20);
  EXPECT_DOUBLE_EQ(s.q3, 40);
}

TEST(Stats, EmptySampleSetIsAnError) { EXPECT_THROW(summarize({}), std::invalid_argument); }

TEST(RelativeError, ByHand) {
  const float out[3] = {1, 2, 2};
  const float ref[3] = {1, 2, 3};
  EXPECT_NEAR(relative_error(out, ref, 3), 1.0 / std::sqrt(14.0), 1e-15);
  const double refd[3] = {1, 2, 3};
  EXPECT_NEAR(relative_error(out, refd, 3), 1.0 / std::sqrt(14.0), 1e-15);
  EXPECT_EQ(relative_error(ref, ref, 3), 0.0);
}

TEST(RelativeError, NaNOrInfAnywhereFails) {
  const float ref[3] = {1, 2, 3};
  float out[3] = {1, 2, 3};
  out[2] = std::numeric_limits<float>::quiet_NaN();
  EXPECT_TRUE(std::isnan(relative_error(out, ref, 3)));
  out[2] = std::numeric_limits<float>::infinity();
  EXPECT_TRUE(std::isnan(relative_error(out, ref, 3)));
  EXPECT_FALSE(all_finite(out, 3));
}

TEST(RelativeError, ZeroReferenceGivesInfUnlessOutIsZeroToo) {
  const float zero[2] = {0, 0}, one[2] = {1, 0};
  EXPECT_TRUE(std::isinf(relative_error(one, zero, 2)));
  EXPECT_EQ(relative_error(zero, zero, 2), 0.0);
}

TEST(RelativeError, Bf16BitPatterns) {
  // 1.0 = 0x3F80, 2.0 = 0x4000, 3.0 = 0x4040: same numbers as the fp32 case above.
  const uint16_t out[3] = {0x3F80, 0x4000, 0x4000}, ref[3] = {0x3F80, 0x4000, 0x4040};
  EXPECT_NEAR(relative_error_bf16(out, ref, 3), 1.0 / std::sqrt(14.0), 1e-15);
}

TEST(Bf16, RoundToNearestEven) {
  EXPECT_EQ(f32_to_bf16(1.0f), 0x3F80);
  // 1 + 2^-8 is exactly half way between bf16 1.0 and 1 + 2^-7: ties go to the even mantissa (1.0).
  EXPECT_EQ(f32_to_bf16(1.0f + 1.0f / 256), 0x3F80);
  // 1 + 3*2^-8 is half way between 1 + 2^-7 (odd) and 1 + 2^-6 (even): rounds up to even.
  EXPECT_EQ(f32_to_bf16(1.0f + 3.0f / 256), 0x3F82);
  EXPECT_TRUE(std::isnan(bf16_to_f32(f32_to_bf16(std::numeric_limits<float>::quiet_NaN()))));
}

TEST(GpuSpan, UnionAndSpanByHand) {
  std::vector<ActivityRecord> r = {{ActivityRecord::Kernel, 100, 110, 7},
                                   {ActivityRecord::Memcpy, 105, 112, 8},
                                   {ActivityRecord::Kernel, 120, 130, 7}};
  const SpanStats s = span_of(r);
  ASSERT_TRUE(s.valid);
  EXPECT_EQ(s.span_ns, 30u);  // 100 .. 130
  EXPECT_EQ(s.busy_ns, 22u);  // [100,112] + [120,130]
  EXPECT_EQ(s.kernels, 2);
  EXPECT_EQ(s.memcpys, 1);
  EXPECT_EQ(s.memsets, 0);
}

// A window opened at c0 = 1'000'000 ns, the harness on stream 7: its records by what they are (a
// timed window holds none, a calibration window its kernel from c0 - 20 us on, never its staging's
// copies); the solution's (stream 8) from c0 - 20 us on, so a copy whose timestamp reads 5 us early
// is the window's, not gap work; 30 us early is the gap's.
TEST(GpuSpan, TheWindowsEdges) {
  const uint64_t c0 = 1'000'000;
  const auto rec = [](ActivityRecord::Kind k, uint64_t start, uint32_t stream) { return ActivityRecord{k, start, start + 1000, stream}; };
  const auto copy = ActivityRecord::Memcpy, kernel = ActivityRecord::Kernel;
  EXPECT_FALSE(in_window(rec(copy, c0 + 2'000, 7), c0, 7, false)) << "the harness's staging, read late";
  EXPECT_FALSE(in_window(rec(kernel, c0 + 10, 7), c0, 7, false)) << "a timed window holds no harness work";
  EXPECT_TRUE(in_window(rec(kernel, c0 - 3'000, 7), c0, 7, true)) << "the calibration's kernel, read early";
  EXPECT_FALSE(in_window(rec(copy, c0 + 2'000, 7), c0, 7, true)) << "the calibration's staging";
  EXPECT_FALSE(in_window(rec(kernel, c0 - 300'000, 7), c0, 7, true)) << "the previous calibration window's digest";
  EXPECT_FALSE(in_window(rec(kernel, c0 - kActivitySkewNs - 1, 7), c0, 7, true));
  EXPECT_TRUE(in_window(rec(copy, c0 - 5'000, 8), c0, 7, false)) << "the solution's first copy, read 5 us early";
  EXPECT_TRUE(in_window(rec(copy, c0 - kActivitySkewNs, 8), c0, 7, false));
  EXPECT_FALSE(in_window(rec(copy, c0 - kActivitySkewNs - 1, 8), c0, 7, false)) << "gap work";
  // A record without timestamps (a graph CUPTI could not time) is the window's, whatever its
  // stream: its sample is invalid (span_of), not gap work or a late kernel.
  EXPECT_TRUE(in_window(ActivityRecord{ActivityRecord::Graph, 0, 0, 8}, c0, 7, false));
  EXPECT_TRUE(in_window(ActivityRecord{ActivityRecord::Graph, 0, 0, 7}, c0, 7, false));
}

// --graph-records graphs: a graph launch's one record (GRAPH_TRACE) spans its nodes; counted apart
// from kernels, and in the span and busy time like any record.
TEST(GpuSpan, AGraphRecordedWholeCountsInTheSpan) {
  const SpanStats s = span_of({{ActivityRecord::Graph, 100, 4100, 7, 9}, {ActivityRecord::Kernel, 4200, 4300, 7, 10}});
  ASSERT_TRUE(s.valid);
  EXPECT_EQ(s.span_ns, 4200u);  // 100 .. 4300
  EXPECT_EQ(s.busy_ns, 4100u);  // [100,4100] + [4200,4300]
  EXPECT_EQ(s.graphs, 1);
  EXPECT_EQ(s.kernels, 1);
  // CUPTI writes 0 for both timestamps when it could not take them: invalid, and the reason says
  // what to do.
  const SpanStats z = span_of({{ActivityRecord::Graph, 0, 0, 7, 9}});
  EXPECT_FALSE(z.valid);
  EXPECT_NE(z.invalid_reason.find("--graph-records nodes"), std::string::npos) << z.invalid_reason;
  EXPECT_EQ(z.graphs, 1);
}

TEST(GpuSpan, GraphRecordsModesByName) {
  EXPECT_EQ(parse_graph_records("nodes"), GraphRecords::Nodes);
  EXPECT_EQ(parse_graph_records("graphs"), GraphRecords::Graphs);
  EXPECT_FALSE(parse_graph_records("graph").has_value());
  EXPECT_FALSE(parse_graph_records("").has_value());
}

TEST(GpuSpan, NoRecordOrZeroDurationIsInvalid) {
  EXPECT_FALSE(span_of({}).valid);
  const SpanStats s = span_of({{ActivityRecord::Kernel, 100, 100, 1}});
  EXPECT_FALSE(s.valid);
  EXPECT_NE(s.invalid_reason.find("zero"), std::string::npos);
  // The counts still cover every record (the graders count kernels between timed calls from them):
  // a zero-length copy first must not hide the two kernels after it.
  const SpanStats z = span_of({{ActivityRecord::Memcpy, 50, 50, 1},
                               {ActivityRecord::Kernel, 60, 70, 1},
                               {ActivityRecord::Kernel, 80, 90, 2}});
  EXPECT_FALSE(z.valid);
  EXPECT_EQ(z.kernels, 2);
  EXPECT_EQ(z.memcpys, 1);
}

// What a correlation id's records were: a kernel's, a memset's (or any but a kernel and a copy), a copy's.
constexpr Recorded kKernelRecord{true, true, false, false}, kOtherRecord{true, false, false, false},
    kCopyRecord{true, false, true, false};

TEST(LaunchAudit, ALaunchIsRecordedWhenARecordCarriesItsId) {
  // Three launches: a kernel (its record carries 7), a graph (two records of 9), and a kernel with
  // none (records off); 10 and 11 are the harness's copies, no launch of the audit's.
  const std::vector<AuditedLaunch> all = {{7, "cuLaunchKernel"}, {9, "cuGraphLaunch"}, {12, "cuLaunchKernelEx"}};
  const std::vector<uint32_t> records = {7, 9, 9, 10, 11};
  const auto has = [&](uint32_t id) {
    return std::find(records.begin(), records.end(), id) != records.end() ? kKernelRecord : Recorded{};
  };
  std::vector<AuditedLaunch> launches = all;
  EXPECT_EQ(drop_recorded_launches(launches, has), 2);
  ASSERT_EQ(launches.size(), 1u);
  EXPECT_STREQ(launches[0].api, "cuLaunchKernelEx");
  launches = all;
  EXPECT_EQ(drop_recorded_launches(launches, [](uint32_t) { return Recorded{}; }), 0);
  ASSERT_EQ(launches.size(), 3u);  // in their order: the first unrecorded is the first made
  EXPECT_STREQ(launches[0].api, "cuLaunchKernel");
}

TEST(LaunchAudit, ALaunchOfKernelsNeedsAKernelRecord) {
  // A graph of a memset and kernels, launched with the kernel records off and the memset's on: its
  // id has a memset record only, which vouches for a graph of copies, never for one with kernels.
  const AuditedLaunch kernels{9, "cuGraphLaunch", true}, copies{10, "cuGraphLaunch", false}, kernel{11, "cuLaunchKernel"};
  EXPECT_TRUE(kernel.needs_kernel);  // the default: a kernel launch
  EXPECT_FALSE(launch_recorded(kernels, kOtherRecord));
  EXPECT_TRUE(launch_recorded(kernels, kKernelRecord));
  EXPECT_TRUE(launch_recorded(copies, kOtherRecord));
  EXPECT_TRUE(launch_recorded(copies, kKernelRecord));
  EXPECT_FALSE(launch_recorded(copies, Recorded{}));
  EXPECT_FALSE(launch_recorded(kernel, kOtherRecord));
  std::vector<AuditedLaunch> launches = {kernels, copies, kernel};
  EXPECT_EQ(drop_recorded_launches(launches, [](uint32_t) { return kOtherRecord; }), 1);
  ASSERT_EQ(launches.size(), 2u);
  EXPECT_EQ(launches[0].id, 9u);
  EXPECT_EQ(launches[1].id, 11u);
}

TEST(LaunchAudit, AGraphHoldsAKernelInItOrItsChildGraphs) {
  // Fake graphs: node ids are pointers into `ids`; a child graph node's graph is `children`'s.
  // Types as CUgraphNodeType: 0 kernel, 1 memcpy, 2 memset, 4 child graph, 13 conditional.
  std::map<void*, std::vector<void*>> graphs;
  std::map<void*, int> types;
  std::map<void*, void*> children;
  int ids[64];
  auto node = [&](int i, int type) {
    types[&ids[i]] = type;
    return static_cast<void*>(&ids[i]);
  };
  auto graph = [](uintptr_t id) { return reinterpret_cast<void*>(id); };
  GraphWalk walk;
  walk.nodes = [&](void* g) { return graphs.count(g) ? graphs[g] : std::vector<void*>{}; };
  walk.type = [&](void* n) { return types.count(n) ? types[n] : -1; };
  walk.child = [&](void* n) { return children.count(n) ? children[n] : nullptr; };
  graphs[graph(0x100)] = {node(0, 1), node(1, 2)};  // copies
  graphs[graph(0x200)] = {node(2, 2), node(3, 0)};  // a memset and a kernel
  graphs[graph(0x300)] = {node(4, 1), node(5, 4)};  // a copy and a child graph holding the kernel
  children[&ids[5]] = graph(0x200);
  graphs[graph(0x400)] = {node(6, 4), node(8, 1)};   // a child node the driver will not open, a copy
  graphs[graph(0x500)] = {node(9, 2), node(7, 13)};  // a memset and a conditional node
  EXPECT_FALSE(graph_has_kernel(graph(0x100), walk));
  EXPECT_TRUE(graph_has_kernel(graph(0x200), walk));
  EXPECT_TRUE(graph_has_kernel(graph(0x300), walk));
  EXPECT_FALSE(graph_has_kernel(graph(0x400), walk));
  // A conditional node's body is not handed out by the driver: it counts as a kernel (fails closed:
  // else the memset's record would vouch for a body kernel whose record was switched off).
  EXPECT_TRUE(graph_has_kernel(graph(0x500), walk));
  EXPECT_TRUE(graph_kernels(graph(0x500), walk).launches_kernel());
  EXPECT_TRUE(graph_kernels(graph(0x500), walk).kernel_nodes.empty());
  EXPECT_FALSE(graph_has_kernel(nullptr, walk));
  // A chain of child graphs: a kernel at depth 8 is found; below the bound the walk stops and says
  // yes (fails closed), whether or not a kernel is there: a chain of copies 10 deep needs a kernel
  // record too.
  for (int depth : {8, 9, 12}) {
    const uintptr_t base = 0x1000 * uintptr_t(depth);
    for (int d = 0; d < depth; ++d) {
      graphs[graph(base + d)] = {node(10 + d, 4)};
      children[&ids[10 + d]] = graph(base + d + 1);
    }
    graphs[graph(base + depth)] = {node(40, 1), node(41, 0)};
    EXPECT_TRUE(graph_has_kernel(graph(base), walk)) << depth;
  }
  graphs[graph(0x20000 + 10)] = {node(42, 1)};
  for (int d = 0; d < 10; ++d) {
    graphs[graph(0x20000 + d)] = {node(43 + d, 4)};
    children[&ids[43 + d]] = graph(0x20000 + d + 1);
  }
  EXPECT_TRUE(graph_has_kernel(graph(0x20000), walk));
  graphs[graph(0x20000 + 10)] = {node(42, 1)};
  graphs[graph(0x20000 + 5)] = {node(42, 1)};  // the same chain cut at depth 5: copies only
  EXPECT_FALSE(graph_has_kernel(graph(0x20000), walk));
  // What the driver refuses counts as no kernel: the audit then asks for any record.
  walk.type = [](void*) { return -1; };
  EXPECT_FALSE(graph_has_kernel(graph(0x200), walk));
}

TEST(LaunchAudit, DisabledKernelNodesRunNoKernel) {
  // An executable graph of a memset and two kernels: it runs a kernel until both are disabled
  // (cuGraphNodeSetEnabled); a child graph's kernel cannot be disabled; nodes not kernels are ignored.
  std::map<void*, int> types;
  int ids[8];
  for (int i = 0; i < 8; ++i) types[&ids[i]] = i < 2 ? 0 : i == 2 ? 2 : 4;
  GraphWalk walk;
  walk.nodes = [&](void*) { return std::vector<void*>{&ids[2], &ids[0], &ids[1]}; };
  walk.type = [&](void* n) { return types[n]; };
  walk.child = [](void*) { return nullptr; };
  walk.device_updatable = [](void*) { return false; };
  GraphKernels k = graph_kernels(reinterpret_cast<void*>(0x10), walk);
  ASSERT_EQ(k.kernel_nodes.size(), 2u);
  EXPECT_TRUE(k.updatable.empty());
  EXPECT_FALSE(k.nested);
  EXPECT_TRUE(k.launches_kernel());
  k.set_enabled(&ids[0], false);
  k.set_enabled(&ids[0], false);  // twice: still one of two
  EXPECT_TRUE(k.launches_kernel());
  k.set_enabled(&ids[2], false);  // the memset: not a kernel
  EXPECT_TRUE(k.launches_kernel());
  k.set_enabled(&ids[1], false);
  EXPECT_FALSE(k.launches_kernel());  // both off: a launch runs the memset alone
  k.set_enabled(&ids[1], true);
  EXPECT_TRUE(k.launches_kernel());
  k.nested = true;
  k.set_enabled(&ids[1], false);
  EXPECT_TRUE(k.launches_kernel());  // a child graph's kernel always runs
  // A kernel node the device may enable (CU_LAUNCH_ATTRIBUTE_DEVICE_UPDATABLE_KERNEL_NODE), or one the
  // driver will not say of, never counts as disabled: a kernel could switch it on after the host
  // switched it off.
  walk.device_updatable = [&](void* n) { return n == &ids[1]; };
  GraphKernels u = graph_kernels(reinterpret_cast<void*>(0x10), walk);
  ASSERT_EQ(u.updatable.size(), 1u);
  u.set_enabled(&ids[0], false);
  u.set_enabled(&ids[1], false);
  EXPECT_TRUE(u.launches_kernel());
  walk.device_updatable = nullptr;  // the driver has no cuGraphKernelNodeGetAttribute: none disabled
  GraphKernels none = graph_kernels(reinterpret_cast<void*>(0x10), walk);
  none.set_enabled(&ids[0], false);
  none.set_enabled(&ids[1], false);
  EXPECT_TRUE(none.launches_kernel());
}

TEST(LaunchAudit, AGraphOfCopyNodesNeedsACopyRecord) {
  // A graph of a kernel and a 64 MiB copy, launched with the copy records off: the kernel's record
  // alone carries the launch's id, which vouched for the copy until copy nodes asked for a memcpy
  // record of their own (a reviewer's reading, 2026-12-06).
  const AuditedLaunch both{9, "cuGraphLaunch", true, true}, copy_only{10, "cuGraphLaunch", false, true};
  EXPECT_FALSE(launch_recorded(both, kKernelRecord));
  EXPECT_FALSE(launch_recorded(both, kCopyRecord));
  EXPECT_TRUE(launch_recorded(both, Recorded{true, true, true}));
  EXPECT_FALSE(launch_recorded(copy_only, kOtherRecord));  // a memset's record does not vouch for the copy
  EXPECT_TRUE(launch_recorded(copy_only, kCopyRecord));
  EXPECT_FALSE(launch_recorded(copy_only, Recorded{}));
  // Memset nodes the same way: a kernel's record does not vouch for a memset node run with its
  // records off.
  const AuditedLaunch with_memset{11, "cuGraphLaunch", true, false, true};
  EXPECT_FALSE(launch_recorded(with_memset, kKernelRecord));
  EXPECT_TRUE(launch_recorded(with_memset, Recorded{true, true, false, true}));
  // A graph launch recorded whole (--graph-records graphs, GRAPH_TRACE: CUPTI then writes no record
  // per node): its own record vouches for every node, kernels, copies and memsets alike; without
  // it, nothing does. In the default mode a graph record vouches for nothing: a solution that turned
  // GRAPH_TRACE on itself, sparing its nodes' tracing, left its graph unrecorded (a reviewer's
  // reading, 2026-12-07).
  constexpr Recorded kGraphRecord{true, false, false, false, true};
  const AuditedLaunch every{12, "cuGraphLaunch", true, true, true, true};
  EXPECT_TRUE(launch_recorded(every, kGraphRecord));
  EXPECT_FALSE(launch_recorded(every, Recorded{}));
  EXPECT_FALSE(launch_recorded(every, kOtherRecord));
  EXPECT_FALSE(launch_recorded(both, kGraphRecord)) << "by nodes, the graph record is no node's";
  EXPECT_FALSE(launch_recorded(AuditedLaunch{13, "cuGraphLaunch", true}, kGraphRecord));
  EXPECT_TRUE(launch_recorded(AuditedLaunch{13, "cuGraphLaunch", true}, Recorded{true, true, false, false, true}));
  // The walk: a memcpy node at the top (type 1), one in a child graph (type 4), one only in a
  // conditional node's body (type 13: the driver does not hand the body out, so it counts as none).
  std::map<void*, std::vector<void*>> nodes;
  std::map<void*, int> types;
  std::map<void*, void*> child;
  int n[8];
  const auto graph = [](uintptr_t g) { return reinterpret_cast<void*>(g); };
  nodes[graph(0x10)] = {&n[0], &n[1]};  // a kernel and a copy
  types[&n[0]] = 0;
  types[&n[1]] = 1;
  nodes[graph(0x20)] = {&n[2], &n[3]};  // a kernel and a child graph holding a copy
  types[&n[2]] = 0;
  types[&n[3]] = 4;
  child[&n[3]] = graph(0x30);
  nodes[graph(0x30)] = {&n[4]};
  types[&n[4]] = 1;
  nodes[graph(0x40)] = {&n[5], &n[6]};  // a kernel and a conditional node
  types[&n[5]] = 0;
  types[&n[6]] = 13;
  GraphWalk walk;
  walk.nodes = [&](void* g) { return nodes[g]; };
  walk.type = [&](void* x) { return types[x]; };
  walk.child = [&](void* x) { return child[x]; };
  walk.device_updatable = [](void*) { return false; };
  GraphKernels top = graph_kernels(graph(0x10), walk);
  ASSERT_EQ(top.memcpy.nodes.size(), 1u);
  EXPECT_TRUE(top.memcpy.run());
  top.set_enabled(&n[1], false);  // the copy node disabled: a launch runs the kernel alone
  EXPECT_FALSE(top.memcpy.run());
  EXPECT_TRUE(top.launches_kernel());
  top.set_enabled(&n[1], true);
  EXPECT_TRUE(top.memcpy.run());
  top.set_enabled(&n[1], false);
  top.merge(GraphKernels{});  // an update enables every node again
  EXPECT_TRUE(top.memcpy.run());
  GraphKernels nested = graph_kernels(graph(0x20), walk);
  EXPECT_TRUE(nested.memcpy.nodes.empty());
  EXPECT_TRUE(nested.memcpy.nested);
  EXPECT_TRUE(nested.memcpy.run());
  EXPECT_TRUE(graph_has_copy_node(graph(0x20), walk, 1));
  EXPECT_FALSE(graph_has_copy_node(graph(0x40), walk, 1));
  EXPECT_FALSE(graph_kernels(graph(0x40), walk).memcpy.run());
  types[&n[1]] = 2;  // the copy node a memset node instead: tracked as one, disabled the same way
  GraphKernels ms = graph_kernels(graph(0x10), walk);
  EXPECT_FALSE(ms.memcpy.run());
  EXPECT_TRUE(ms.memset.run());
  ms.set_enabled(&n[1], false);
  EXPECT_FALSE(ms.memset.run());
  EXPECT_TRUE(graph_kernels(graph(0x40), walk).launches_kernel());
}

TEST(CopyAudit, EachCopyCallsSizeAndStreamAreRead) {
  // Hand-made parameters of a few of the 104 calls: the size each moves (a zero-size call is left
  // out of the audit) and whether it takes a stream (only those may be captured).
  const cuMemcpyAsync_params a{0x1000, 0x2000, 4096, nullptr};
  EXPECT_EQ(copy_call_view(CUPTI_DRIVER_TRACE_CBID_cuMemcpyAsync, &a).size, 4096u);
  EXPECT_TRUE(copy_call_view(CUPTI_DRIVER_TRACE_CBID_cuMemcpyAsync, &a).async);
  const cuMemcpyDtoDAsync_v2_params z{0x1000, 0x2000, 0, nullptr};
  EXPECT_EQ(copy_call_view(CUPTI_DRIVER_TRACE_CBID_cuMemcpyDtoDAsync_v2, &z).size, 0u);
  const cuMemcpy_params sync{0x1000, 0x2000, 64};
  EXPECT_FALSE(copy_call_view(CUPTI_DRIVER_TRACE_CBID_cuMemcpy, &sync).async);
  EXPECT_EQ(copy_call_view(CUPTI_DRIVER_TRACE_CBID_cuMemcpy, &sync).size, 64u);
  const cuMemsetD32Async_params m{0x1000, 7, 100, nullptr};
  EXPECT_EQ(copy_call_view(CUPTI_DRIVER_TRACE_CBID_cuMemsetD32Async, &m).size, 100u);  // elements: zero or not is what counts
  const cuMemsetD2D8_v2_params m2{0x1000, 256, 0, 128, 3};
  EXPECT_EQ(copy_call_view(CUPTI_DRIVER_TRACE_CBID_cuMemsetD2D8_v2, &m2).size, 384u);
  CUDA_MEMCPY2D c2{};
  c2.WidthInBytes = 10;
  c2.Height = 0;
  const cuMemcpy2DAsync_v2_params p2{&c2, nullptr};
  EXPECT_EQ(copy_call_view(CUPTI_DRIVER_TRACE_CBID_cuMemcpy2DAsync_v2, &p2).size, 1u);  // through a pointer: never zero
  CUDA_MEMCPY3D c3{};
  c3.WidthInBytes = 10;
  c3.Height = 2;
  c3.Depth = 3;
  const cuMemcpy3D_v2_params p3{&c3};
  EXPECT_EQ(copy_call_view(CUPTI_DRIVER_TRACE_CBID_cuMemcpy3D_v2, &p3).size, 1u);
  const cuMemcpyBatchAsync_v2_params b{nullptr, nullptr, nullptr, 0, nullptr, nullptr, 0, nullptr};
  EXPECT_EQ(copy_call_view(CUPTI_DRIVER_TRACE_CBID_cuMemcpyBatchAsync_v2, &b).size, 0u);
  EXPECT_TRUE(copy_call_view(CUPTI_DRIVER_TRACE_CBID_cuMemcpyBatchAsync_v2, &b).async);
  EXPECT_FALSE(copy_call_view(CUPTI_DRIVER_TRACE_CBID_cuLaunchKernel, &a).known);  // not a copy
}

TEST(LaunchAudit, AnUpdatedGraphMayRunEitherGraphsKernels) {
  // cuGraphExecUpdate: the executable graph of a copy and a disabled kernel takes a graph of a copy
  // and another kernel node: both kernels count, and neither is disabled any more (fails closed on
  // the enable state the driver keeps); merging never drops a child graph's kernel.
  int ids[4];
  GraphKernels before, after;
  before.kernel_nodes = {&ids[0]};
  before.set_enabled(&ids[0], false);
  EXPECT_FALSE(before.launches_kernel());
  after.kernel_nodes = {&ids[1]};
  before.merge(after);
  EXPECT_EQ(before.kernel_nodes.size(), 2u);
  EXPECT_TRUE(before.disabled.empty());
  EXPECT_TRUE(before.launches_kernel());
  GraphKernels copies, nested;
  nested.nested = true;
  copies.merge(nested);
  EXPECT_TRUE(copies.launches_kernel());
  copies.merge(GraphKernels{});
  EXPECT_TRUE(copies.launches_kernel());
}

TEST(Stats, ElementErrorByHand) {
  // ref (3, -4): max |ref| = 4; out (3, -3): max |diff| = 1 -> 0.25. One element zeroed of a long
  // vector keeps the relative error small but the element error is that element over the largest.
  const double ref[] = {3, -4}, out[] = {3, -3};
  EXPECT_DOUBLE_EQ(element_error(out, ref, 2), 0.25);
  std::vector<double> r(1000, 1.0), o(1000, 1.0);
  r[7] = 2.0;
  o[7] = 0.0;  // the sliver: one element set to zero
  EXPECT_LT(relative_error(o.data(), r.data(), r.size()), 0.07);
  EXPECT_DOUBLE_EQ(element_error(o.data(), r.data(), r.size()), 1.0);
  const double zero[] = {0, 0}, nan_out[] = {NAN, 0};
  EXPECT_EQ(element_error(zero, zero, 2), 0.0);
  EXPECT_TRUE(std::isinf(element_error(ref, zero, 2)));
  EXPECT_TRUE(std::isnan(element_error(nan_out, ref, 2)));
  const float f[] = {3.0f, -3.0f};
  EXPECT_DOUBLE_EQ(element_error(f, ref, 2), 0.25);
  const uint16_t bo[] = {f32_to_bf16(3), f32_to_bf16(-3)}, br[] = {f32_to_bf16(3), f32_to_bf16(-4)};
  EXPECT_DOUBLE_EQ(element_error_bf16(bo, br, 2), 0.25);
}
