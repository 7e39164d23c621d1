// test_python_shim.cpp: the Python shims (solutions/python) on the CPU, no GPU and no torch needed.
//
// Each case runs in a forked process, as the grader's child does: the shim is loaded like any .so
// (SolutionLibrary), the module tests/python/shim_probe.py named to it through the child's own
// load_python_module under the child's CallWatchdog, then the ABI's entry points are called with
// host tensors (kDLCPU). The probe reads each tensor through its DLPack capsule (a ctypes reader,
// and numpy.from_dlpack) and writes what it saw to a JSON file: the ABI-to-DLPack mapping is
// checked field by field for every dtype, strides, byte_offset and shapes. Each bug kind
// ($NIBBLE_TEST_BUG) ends in the error record (kind, load kind, status, call) that the grade turns
// into its disposition, with the traceback's last lines as the reason.
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "harness/atomic_file.h"
#include "harness/child_support.h"
#include "harness/process.h"
#include "harness/protocol.h"
#include "harness/python_solution.h"

using namespace nibble;
using nibble::child::CallWatchdog;
using nibble::child::load_python_module;
using nibble::child::python_facts;
using nibble::child::ResultWriter;
using json = nlohmann::json;

namespace {

std::string env_or(const char* k, const char* fallback) {
  const char* v = std::getenv(k);
  return v && *v ? v : fallback;
}
std::string shim(SolutionLibrary::Abi abi) {
  return python_shim_path(env_or("NIBBLE_BINARY_DIR", ".") + "/bin/nibble", abi);
}
std::string probe_module() { return env_or("NIBBLE_SOURCE_DIR", ".") + "/tests/python/shim_probe.py"; }

/** A host tensor the test owns: bytes, shape, strides and the nibble_tensor over them. */
struct HostTensor {
  std::string name;
  std::vector<uint8_t> bytes;
  std::vector<int64_t> shape, strides;
  nibble_tensor t{};
  HostTensor(std::string n, nibble_dtype dt, std::vector<int64_t> sh, std::vector<int64_t> st = {}, size_t extra = 0,
             uint64_t byte_offset = 0)
      : name(std::move(n)), shape(std::move(sh)), strides(std::move(st)) {
    // Elements from the first to the last one the layout reaches.
    int64_t span = 1;
    for (size_t i = 0; i < shape.size(); ++i) span = strides.empty() ? span * shape[i] : span + (shape[i] - 1) * strides[i];
    bytes.resize(size_t(span) * dt.bits / 8 + extra + byte_offset);
    for (size_t i = 0; i < bytes.size(); ++i) bytes[i] = uint8_t(i * 7 + 3);
    t.data = bytes.data();
    t.device = {NIBBLE_DEVICE_CPU, 0};
    t.ndim = int32_t(shape.size());
    t.dtype = dt;
    t.shape = shape.data();
    t.strides = strides.empty() ? nullptr : strides.data();
    t.byte_offset = byte_offset;
  }
};

constexpr nibble_dtype kU8{NIBBLE_DTYPE_UINT, 8, 1}, kBF16{NIBBLE_DTYPE_BFLOAT, 16, 1}, kF32{NIBBLE_DTYPE_FLOAT, 32, 1},
    kI64{NIBBLE_DTYPE_INT, 64, 1};

/** What a forked case returns: its exit, the child's Result (as the real child writes it) and the
 *  probe's record. */
struct CaseResult {
  int exit_code = -1;
  Result result;
  json record, extra;
};

/** Runs `body(lib, out, watchdog)` in a forked process after loading the shim of `abi` and naming
 *  the probe to it (with NIBBLE_TEST_BUG=`bug`); body returns JSON of its own. */
// What the child appends for a module of the other task family (child.cpp: the registry's tasks).
constexpr const char* kOtherTasks = ": grade it with --task the-other-family-tasks";

CaseResult run_case(SolutionLibrary::Abi abi, const std::string& bug,
                    const std::function<json(SolutionLibrary&, ResultWriter&, CallWatchdog&)>& body) {
  TempDir dir("nibble-pyshim");
  const std::string record = dir.path() + "/record.json", extra = dir.path() + "/extra.json";
  const int result_fd = make_channel("result");
  const pid_t pid = fork();
  if (pid == 0) {
    setenv("NIBBLE_TEST_BUG", bug.c_str(), 1);
    setenv("NIBBLE_TEST_OUT", record.c_str(), 1);
    ResultWriter out{result_fd, Result{}, {}};
    try {
      SolutionLibrary lib(shim(abi), abi);
      CallWatchdog watchdog(&out);
      if (const int code = load_python_module(out, watchdog, lib, probe_module(), 5, kOtherTasks)) std::_Exit(code);
      out.r.solution_name = lib.name();
      const json j = body(lib, out, watchdog);
      write_file_atomic(extra, j.dump());
      out.phase("done");
    } catch (const std::exception& e) {
      std::fprintf(stderr, "case: %s\n", e.what());
      std::_Exit(3);
    }
    std::_Exit(0);
  }
  int status = 0;
  waitpid(pid, &status, 0);
  CaseResult r;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  const std::string text = read_channel(result_fd);
  close(result_fd);
  if (!text.empty()) r.result = json::parse(text).get<Result>();
  if (std::filesystem::exists(record)) r.record = json::parse(read_file(record));
  if (std::filesystem::exists(extra)) r.extra = json::parse(read_file(extra));
  return r;
}

/** The decode model the mapping case hands build_model: every dtype, strides, byte_offset, ndim 0..3. */
struct ProbeModel {
  std::vector<HostTensor> tensors;
  std::vector<nibble_named_tensor> named;
  nibble_decode_model model{};
  ProbeModel() {
    tensors.emplace_back("w.packed", kU8, std::vector<int64_t>{3, 4});
    tensors.emplace_back("w.scale", kBF16, std::vector<int64_t>{3, 2}, std::vector<int64_t>{2, 1});
    tensors.emplace_back("norm", kF32, std::vector<int64_t>{5});
    tensors.emplace_back("ids", kI64, std::vector<int64_t>{2});
    tensors.emplace_back("transposed", kF32, std::vector<int64_t>{4, 3}, std::vector<int64_t>{1, 4});
    tensors.emplace_back("offset", kU8, std::vector<int64_t>{6}, std::vector<int64_t>{}, 0, 10);
    tensors.emplace_back("scalar", kF32, std::vector<int64_t>{});
    tensors.emplace_back("cube", kBF16, std::vector<int64_t>{2, 3, 4});
    tensors.emplace_back("scratch.u8", kU8, std::vector<int64_t>{8});
    for (HostTensor& h : tensors) named.push_back({h.name.c_str(), h.t});
    model.struct_size = sizeof model;
    model.task = "megakernel-int4-weight-decode";
    model.config_name = "probe";
    model.cfg = {2, 8, 16, 2, 1, 4, 11, 4, 1, 32, 1e-5, 500000.0};
    model.tensors = named.data();
    model.num_tensors = int32_t(named.size());
  }
};

std::string hex(const uint8_t* p, size_t n) {
  static const char* d = "0123456789abcdef";
  std::string s;
  for (size_t i = 0; i < n; ++i) s += {d[p[i] >> 4], d[p[i] & 15]};
  return s;
}

/** Every DLPack field of `seen` (the probe's view of one capsule) against the tensor the test passed. */
void expect_mapping(const json& seen, const nibble_tensor& t, const std::string& name) {
  SCOPED_TRACE(name);
  EXPECT_EQ(seen.at("data").get<uint64_t>(), uint64_t(reinterpret_cast<uintptr_t>(t.data))) << "zero-copy: the same buffer";
  EXPECT_EQ(seen.at("device"), json({t.device.device_type, t.device.device_id}));
  EXPECT_EQ(seen.at("ndim").get<int>(), t.ndim);
  EXPECT_EQ(seen.at("dtype"), json({t.dtype.code, t.dtype.bits, t.dtype.lanes}));
  std::vector<int64_t> shape(t.shape, t.shape + t.ndim), strides(size_t(t.ndim), 1);
  if (t.strides) strides.assign(t.strides, t.strides + t.ndim);
  else
    for (int i = t.ndim - 1; i > 0; --i) strides[size_t(i - 1)] = strides[size_t(i)] * shape[size_t(i)];
  EXPECT_EQ(seen.at("shape").get<std::vector<int64_t>>(), shape);
  EXPECT_EQ(seen.at("strides").get<std::vector<int64_t>>(), strides) << "strides in elements; row-major when NULL";
  EXPECT_EQ(seen.at("byte_offset").get<uint64_t>(), t.byte_offset);
  EXPECT_FALSE(seen.contains("not_refused")) << seen["not_refused"] << " should raise BufferError";
}

}  // namespace

TEST(PythonShim, BuiltWithThisNibble) {
  if (!python_shims_built()) GTEST_SKIP() << "built without Python's development files: no shims to test";
  EXPECT_TRUE(std::filesystem::exists(shim(SolutionLibrary::Abi::Decode))) << shim(SolutionLibrary::Abi::Decode);
  EXPECT_TRUE(std::filesystem::exists(shim(SolutionLibrary::Abi::Gemm))) << shim(SolutionLibrary::Abi::Gemm);
  EXPECT_TRUE(is_python_solution("a/b.py"));
  EXPECT_FALSE(is_python_solution("a/b.so"));
  EXPECT_FALSE(is_python_solution(".py"));
}

TEST(PythonShim, DecodeTensorsReachTheModuleAsDlpackOverTheSameMemory) {
  if (!python_shims_built()) GTEST_SKIP() << "no Python shims in this build";
  ProbeModel pm;
  HostTensor tok("token_ids", kI64, {1}), logits("logits", kF32, {1, 11});
  reinterpret_cast<int64_t*>(tok.bytes.data())[0] = 7;
  int64_t cuda_shape[1] = {1};
  const CaseResult r = run_case(SolutionLibrary::Abi::Decode, "", [&](SolutionLibrary& lib, ResultWriter&, CallWatchdog&) {
    json j;
    nibble_error err{};
    void* h = nullptr;
    j["build"] = lib.build_model(&pm.model, reinterpret_cast<void*>(0x1234), &h, &err);
    j["build_err"] = err.message;
    j["step"] = lib.decode_step(h, &tok.t, 5, &logits.t, reinterpret_cast<void*>(0x1234), &err);
    j["step_err"] = err.message;
    // A device tensor (a pointer never dereferenced): its capsule says kDLCUDA and the ordinal.
    nibble_tensor dev = tok.t;
    dev.data = reinterpret_cast<void*>(0x7f0000001000);
    dev.device = {NIBBLE_DEVICE_CUDA, 3};
    dev.shape = cuda_shape;
    j["step_cuda"] = lib.decode_step(h, &dev, 6, &logits.t, nullptr, &err);
    j["logits"] = std::vector<float>(reinterpret_cast<float*>(logits.bytes.data()), reinterpret_cast<float*>(logits.bytes.data()) + 11);
    j["scratch"] = std::vector<int>(pm.tensors[8].bytes.begin(), pm.tensors[8].bytes.end());
    j["teardown"] = lib.teardown(h, nullptr, &err);
    j["teardown_err"] = err.message;
    j["facts"] = python_facts(lib);
    return j;
  });
  ASSERT_EQ(r.exit_code, 0) << (r.result.error ? r.result.error->message : "");
  EXPECT_EQ(r.result.solution_name, "shim-probe") << "the module's NAME";
  const json& x = r.extra;
  ASSERT_EQ(x["build"], 0) << x["build_err"];
  ASSERT_EQ(x["step"], 0) << x["step_err"];
  ASSERT_EQ(x["step_cuda"], 0) << x["step_err"];
  ASSERT_EQ(x["teardown"], 0) << x["teardown_err"];
  const json& b = r.record.at("build");
  EXPECT_EQ(b["task"], "megakernel-int4-weight-decode");
  EXPECT_EQ(b["cfg"]["vocab"], 11);
  EXPECT_EQ(b["cfg"]["max_seq"], 32);
  EXPECT_DOUBLE_EQ(b["cfg"]["theta"].get<double>(), 500000.0);
  EXPECT_EQ(b["stream"], 0x1234) << "the stream as an integer";
  ASSERT_EQ(b["tensors"].size(), pm.tensors.size());
  const std::map<std::string, std::string> names = {{"w.packed", "uint8"}, {"w.scale", "bfloat16"}, {"norm", "float32"},
                                                    {"ids", "int64"},     {"cube", "bfloat16"}};
  for (size_t i = 0; i < pm.tensors.size(); ++i) {
    const HostTensor& h = pm.tensors[i];
    const json& seen = b["tensors"][i];
    ASSERT_EQ(seen["name"], h.name);
    expect_mapping(seen, h.t, h.name);
    if (names.count(h.name)) {
      EXPECT_EQ(seen["dtype_name"], names.at(h.name)) << h.name;
    }
    // The bytes the capsule reaches (bf16 included) are the test's, from byte_offset on.
    if (h.name != "scratch.u8") {
      const std::string got = seen["bytes"];
      EXPECT_EQ(got, hex(h.bytes.data() + h.t.byte_offset, got.size() / 2)) << h.name;
      EXPECT_FALSE(got.empty() && h.name != "scalar") << h.name;
    }
    // numpy's view of the host tensors starts at the same address (no copy) with the same strides.
    if (seen.contains("numpy")) {
      const json& np = seen["numpy"];
      EXPECT_EQ(np["address"].get<uint64_t>(), uint64_t(reinterpret_cast<uintptr_t>(h.bytes.data()) + h.t.byte_offset)) << h.name;
      const std::vector<int64_t> st = seen["strides"];
      std::vector<int64_t> bytes_st;
      for (int64_t s : st) bytes_st.push_back(s * h.t.dtype.bits / 8);
      EXPECT_EQ(np["strides"].get<std::vector<int64_t>>(), bytes_st) << h.name;
    } else {
      EXPECT_TRUE(h.t.dtype.code == NIBBLE_DTYPE_BFLOAT) << h.name << ": numpy reads every dtype but bf16";
    }
  }
  // The module's writes went to the harness's buffers.
  for (int i = 0; i < 8; ++i) EXPECT_EQ(x["scratch"][i], 100 + i);
  for (int i = 0; i < 11; ++i) EXPECT_FLOAT_EQ(x["logits"][i].get<float>(), 7 * 1000.0f + 5 + float(i));
  const json& steps = r.record.at("steps");
  ASSERT_EQ(steps.size(), 2u);
  expect_mapping(steps[0]["token_ids"], tok.t, "token_ids");
  expect_mapping(steps[0]["logits"], logits.t, "logits");
  EXPECT_EQ(steps[0]["pos"], 5);
  EXPECT_EQ(steps[1]["token_ids"]["device"], json({NIBBLE_DEVICE_CUDA, 3}));
  EXPECT_EQ(steps[1]["token_ids"]["data"].get<uint64_t>(), 0x7f0000001000ull);
  EXPECT_EQ(r.record.at("teardown")["calls"], 2);
  // The report's facts: the interpreter, and the libraries the module imported.
  EXPECT_FALSE(x["facts"].value("python", "").empty()) << x["facts"];
  EXPECT_NE(x["facts"].value("numpy", ""), "not imported") << x["facts"];
  EXPECT_TRUE(x["facts"].contains("torch") && x["facts"].contains("triton")) << x["facts"];
}

TEST(PythonShim, GemmProblemAndOutputDtype) {
  if (!python_shims_built()) GTEST_SKIP() << "no Python shims in this build";
  HostTensor packed("W.packed", kU8, {4, 8}), scale("W.scale", kU8, {4, 1}), gs("W.global_scale", kF32, {1});
  HostTensor A("A", kBF16, {2, 16}), C("C", kBF16, {2, 4});
  std::vector<nibble_named_tensor> named = {{"W.packed", packed.t}, {"W.scale", scale.t}, {"W.global_scale", gs.t}};
  nibble_gemm_problem p{};
  p.struct_size = sizeof p;
  p.task = "gemm-w4a16-nvfp4";
  p.config_name = "probe";
  p.M = 2, p.N = 4, p.K = 16;
  p.block = 16;
  p.scale_format = NIBBLE_GEMM_SCALE_E4M3FN;
  p.global_scale = 0.5f;
  p.c_dtype = NIBBLE_GEMM_OUTPUT_BF16;
  p.tensors = named.data();
  p.num_tensors = 3;
  const CaseResult r = run_case(SolutionLibrary::Abi::Gemm, "", [&](SolutionLibrary& lib, ResultWriter&, CallWatchdog&) {
    json j;
    nibble_error err{};
    void* h = nullptr;
    j["output_dtype"] = lib.gemm_output_dtype;
    j["int4_layout"] = lib.gemm_int4_layout;
    j["prepare"] = lib.gemm_prepare(&p, nullptr, &h, &err);
    j["run"] = lib.gemm_run(h, &A.t, &C.t, nullptr, &err);
    j["err"] = err.message;
    j["C"] = std::vector<uint16_t>(reinterpret_cast<uint16_t*>(C.bytes.data()), reinterpret_cast<uint16_t*>(C.bytes.data()) + 8);
    j["teardown"] = lib.gemm_teardown(h, nullptr, &err);
    if (j["teardown"] != 0) j["err"] = err.message;
    return j;
  });
  ASSERT_EQ(r.exit_code, 0) << (r.result.error ? r.result.error->message : "");
  EXPECT_EQ(r.extra["output_dtype"], NIBBLE_GEMM_OUTPUT_BF16) << "OUTPUT_DTYPE = 'bfloat16' read after the import";
  EXPECT_EQ(r.extra["int4_layout"], NIBBLE_INT4_LAYOUT_AWQ) << "INT4_LAYOUT = 'awq' read after the import";
  ASSERT_EQ(r.extra["prepare"], 0) << r.extra["err"];
  ASSERT_EQ(r.extra["run"], 0) << r.extra["err"];
  EXPECT_EQ(r.extra["teardown"], 0) << r.extra["err"];
  EXPECT_EQ(r.record.at("teardown")["calls"], 1);
  const json& pr = r.record.at("prepare");
  EXPECT_EQ(pr["M"], 2);
  EXPECT_EQ(pr["scale_format"], "e4m3fn");
  EXPECT_EQ(pr["c_dtype"], "bfloat16");
  EXPECT_DOUBLE_EQ(pr["global_scale"].get<double>(), 0.5);
  expect_mapping(pr["tensors"][0], packed.t, "W.packed");
  expect_mapping(pr["tensors"][2], gs.t, "W.global_scale");
  expect_mapping(r.record.at("runs")[0]["A"], A.t, "A");
  expect_mapping(r.record.at("runs")[0]["C"], C.t, "C");
  for (int i = 0; i < 8; ++i) EXPECT_EQ(r.extra["C"][i], 0x3f80) << "written through to the harness's C";
}

// ---- Each bug kind: the error record the grade's verdict reads (child_evidence, judge) ----------

TEST(PythonShim, ImportErrorIsNotLoadableWithTheTraceback) {
  if (!python_shims_built()) GTEST_SKIP() << "no Python shims in this build";
  const CaseResult r = run_case(SolutionLibrary::Abi::Decode, "import_error", [](auto&, auto&, auto&) { return json(); });
  EXPECT_EQ(r.exit_code, 4);
  ASSERT_TRUE(r.result.error);
  EXPECT_EQ(r.result.error->kind, kErrLoad);
  EXPECT_EQ(r.result.error->load_kind, "NotLoadable");  // judge(): disposition NotLoadable, rule load
  EXPECT_NE(r.result.error->message.find("ModuleNotFoundError: No module named 'nibble_no_such_module'"), std::string::npos)
      << r.result.error->message;
  EXPECT_NE(r.result.error->message.find("shim_probe.py\", line"), std::string::npos) << r.result.error->message;
}

TEST(PythonShim, AnUnknownInt4LayoutIsNotLoadable) {
  if (!python_shims_built()) GTEST_SKIP() << "no Python shims in this build";
  const CaseResult r = run_case(SolutionLibrary::Abi::Gemm, "bad_layout", [](auto&, auto&, auto&) { return json(); });
  EXPECT_EQ(r.exit_code, 4);
  ASSERT_TRUE(r.result.error);
  EXPECT_EQ(r.result.error->load_kind, "NotLoadable");
  EXPECT_NE(r.result.error->message.find("INT4_LAYOUT must be one of"), std::string::npos) << r.result.error->message;
}

TEST(PythonShim, MissingEntryPointIsMissingSymbol) {
  if (!python_shims_built()) GTEST_SKIP() << "no Python shims in this build";
  const CaseResult r = run_case(SolutionLibrary::Abi::Decode, "missing_entry", [](auto&, auto&, auto&) { return json(); });
  EXPECT_EQ(r.exit_code, 4);
  ASSERT_TRUE(r.result.error);
  EXPECT_EQ(r.result.error->load_kind, "MissingSymbol");
  EXPECT_NE(r.result.error->message.find("defines no callable decode_step"), std::string::npos) << r.result.error->message;
  // The probe module defines prepare, run and teardown too: a GEMM module given to the decode shim.
  EXPECT_NE(r.result.error->message.find(std::string("it defines every entry point of a gemm solution") + kOtherTasks),
            std::string::npos)
      << r.result.error->message;
}

TEST(PythonShim, HangAtImportEndsThroughTheWatchdog) {
  if (!python_shims_built()) GTEST_SKIP() << "no Python shims in this build";
  const CaseResult r = run_case(SolutionLibrary::Abi::Decode, "hang_import", [](auto&, auto&, auto&) { return json(); });
  EXPECT_EQ(r.exit_code, 9);
  ASSERT_TRUE(r.result.error);
  EXPECT_EQ(r.result.error->kind, kErrTimeout);  // disposition TimedOut
  EXPECT_EQ(r.result.error->call, "import");
}

namespace {
/** build_model's status and message for a bug, then (when it built) one step's. */
json build_and_step(SolutionLibrary& lib, ResultWriter& out, CallWatchdog& watchdog) {
  static ProbeModel pm;
  static HostTensor tok("token_ids", kI64, {1}), logits("logits", kF32, {1, 11});
  json j;
  nibble_error err{};
  void* h = nullptr;
  j["build"] = lib.build_model(&pm.model, nullptr, &h, &err);
  j["build_err"] = std::string(err.message);
  if (j["build"] != 0) return j;
  // As the child calls a step: under the watchdog, whose limit ends a hang (exit 9).
  watchdog.arm("decode_step", 1.0);
  j["step"] = lib.decode_step(h, &tok.t, 0, &logits.t, nullptr, &err);
  watchdog.disarm();
  j["step_err"] = std::string(err.message);
  (void)out;
  return j;
}
}  // namespace

TEST(PythonShim, ExceptionInBuildKeepsTheTracebackTail) {
  if (!python_shims_built()) GTEST_SKIP() << "no Python shims in this build";
  const CaseResult r = run_case(SolutionLibrary::Abi::Decode, "build_raises", build_and_step);
  ASSERT_EQ(r.exit_code, 0);
  EXPECT_EQ(r.extra["build"], NIBBLE_ERR_INTERNAL);  // the child: error kind solution, call build_model: Crashed (rule build)
  const std::string m = r.extra["build_err"];
  EXPECT_LT(m.size(), sizeof(nibble_error::message));
  EXPECT_EQ(m.rfind("...", 0), 0u) << "a 40-frame traceback is cut from the front: " << m;
  EXPECT_NE(m.find("ValueError: bad weights in layer 0 (a deliberate bug)"), std::string::npos) << m;
  EXPECT_NE(m.find("in _deep"), std::string::npos) << m;
  // The cut's head names the exception and its last frame (a long message would push both out).
  EXPECT_EQ(m.rfind("... [ValueError, File ", 0), 0u) << m;
}

TEST(PythonShim, NotSupportedDeclines) {
  if (!python_shims_built()) GTEST_SKIP() << "no Python shims in this build";
  const CaseResult r = run_case(SolutionLibrary::Abi::Decode, "not_supported", build_and_step);
  EXPECT_EQ(r.extra["build"], NIBBLE_ERR_NOT_SUPPORTED);  // disposition NotSupported
  EXPECT_NE(r.extra["build_err"].get<std::string>().find("declines every config"), std::string::npos) << r.extra;
}

TEST(PythonShim, ExceptionInAStepIsAFailedCall) {
  if (!python_shims_built()) GTEST_SKIP() << "no Python shims in this build";
  const CaseResult r = run_case(SolutionLibrary::Abi::Decode, "step_raises", build_and_step);
  ASSERT_EQ(r.extra["build"], 0) << r.extra;
  EXPECT_EQ(r.extra["step"], NIBBLE_ERR_INTERNAL);  // Crashed (rule crash) with this reason
  const std::string m = r.extra["step_err"];
  EXPECT_NE(m.find("RuntimeError: step 0 failed (a deliberate bug)"), std::string::npos) << m;
  EXPECT_NE(m.find("in decode_step"), std::string::npos) << m;
}

TEST(PythonShim, ReturningAResultOfAnotherDtypeIsRefused) {
  if (!python_shims_built()) GTEST_SKIP() << "no Python shims in this build";
  const CaseResult r = run_case(SolutionLibrary::Abi::Decode, "wrong_dtype", build_and_step);
  ASSERT_EQ(r.extra["build"], 0) << r.extra;
  EXPECT_EQ(r.extra["step"], NIBBLE_ERR_INVALID_ARGUMENT);
  const std::string m = r.extra["step_err"];
  EXPECT_NE(m.find("decode_step returned a ndarray (dtype float64, shape (1, 11))"), std::string::npos) << m;
  EXPECT_NE(m.find("write the result into `logits` (float32, shape (1, 11)) in place"), std::string::npos) << m;
}

TEST(PythonShim, HangInAStepEndsThroughTheWatchdog) {
  if (!python_shims_built()) GTEST_SKIP() << "no Python shims in this build";
  const CaseResult r = run_case(SolutionLibrary::Abi::Decode, "hang_step", build_and_step);
  EXPECT_EQ(r.exit_code, 9);
  ASSERT_TRUE(r.result.error);
  EXPECT_EQ(r.result.error->kind, kErrTimeout);  // disposition TimedOut
  EXPECT_EQ(r.result.error->call, "decode_step");
  EXPECT_EQ(r.result.error->during_phase, "start") << "this case writes no phases before the step";
}
