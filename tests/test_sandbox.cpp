// test_sandbox.cpp: the child's sandbox (harness/sandbox.h) on the CPU (label cpu).
//
// enter_sandbox() runs in a forked copy of this test, which then tries what a hostile solution
// would (signal its parent, fork, ptrace, read its parent's memory, write outside, read a file it
// was not given) and reports each outcome through a pipe; the test asserts on the outcomes. A
// layer this machine cannot apply skips its assertions with the reason the layer gave. Then
// `nibble __child` itself: every child reports its layers, and --require-sandbox refuses a gap.
#include <gtest/gtest.h>

#include <fcntl.h>
#include <signal.h>
#include <sys/ptrace.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <thread>

#include "harness/atomic_file.h"
#include "harness/process.h"
#include "harness/protocol.h"
#include "harness/sandbox.h"

using namespace nibble;
using json = nlohmann::json;

namespace {

/** errno of a call that returned < 0, else 0. */
int err_of(long rc) { return rc < 0 ? errno : 0; }

/** 0 when `path` opens with `flags` (mode 0644 if it is made), else the errno. */
int open_errno(const std::string& path, int flags) {
  const int fd = open(path.c_str(), flags | O_CLOEXEC, 0644);
  if (fd < 0) return errno;
  close(fd);
  return 0;
}

/** enter_sandbox(spec) in a forked process, then `probe` there; returns {"layers": [...], "probe": {...}}. */
template <class F>
json in_sandbox(const SandboxSpec& spec, F&& probe) {
  int p[2];
  if (pipe(p) != 0) return nullptr;
  const pid_t pid = fork();
  if (pid == 0) {
    close(p[0]);
    json j;
    j["layers"] = enter_sandbox(spec);
    j["probe"] = probe();
    const std::string s = j.dump();
    (void)!write(p[1], s.data(), s.size());
    _exit(0);
  }
  close(p[1]);
  std::string s;
  char buf[4096];
  for (ssize_t n; (n = read(p[0], buf, sizeof buf)) > 0;) s.append(buf, size_t(n));
  close(p[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  if (s.empty()) return {{"died", status}};
  return json::parse(s);
}

std::map<std::string, SandboxLayer> by_name(const json& j) {
  std::map<std::string, SandboxLayer> m;
  for (const auto& l : j.at("layers")) m[l.at("name")] = l.get<SandboxLayer>();
  return m;
}

std::string describe(const SandboxLayer& l) { return l.name + ": " + l.state + ": " + l.detail; }

}  // namespace

TEST(Sandbox, EveryLayerIsReportedWithAState) {
  const json j = in_sandbox({}, [] { return json::object(); });
  ASSERT_TRUE(j.contains("layers")) << j.dump();
  const auto m = by_name(j);
  for (const char* name : {"rlimits", "user_namespace", "network_namespace", "ipc_namespace", "no_new_privs", "landlock", "seccomp"}) {
    ASSERT_EQ(m.count(name), 1u) << name << " missing from " << j.dump();
    const SandboxLayer& l = m.at(name);
    EXPECT_TRUE(l.state == kApplied || l.state == kNotAvailable || l.state == kNotBuiltIn) << describe(l);
    EXPECT_FALSE(l.detail.empty()) << describe(l);
    std::printf("  %s\n", describe(l).c_str());
  }
  EXPECT_EQ(m.at("seccomp").state == kNotBuiltIn, !seccomp_built_in());
  EXPECT_EQ(m.at("rlimits").state, kApplied);
}

TEST(Sandbox, RlimitsHold) {
  const json j = in_sandbox({}, [] {
    rlimit f{}, c{};
    getrlimit(RLIMIT_FSIZE, &f);
    getrlimit(RLIMIT_CORE, &c);
    return json{{"fsize", f.rlim_cur}, {"core", c.rlim_cur}, {"cache", std::getenv("CUDA_CACHE_DISABLE") ? 1 : 0}};
  });
  EXPECT_EQ(j["probe"]["fsize"].get<unsigned long long>(), kChildMaxFileBytes);
  EXPECT_EQ(j["probe"]["core"].get<unsigned long long>(), 0u);
  EXPECT_EQ(j["probe"]["cache"], 1) << "CUDA_CACHE_DISABLE must be set: the JIT cache is in $HOME";
}

TEST(Sandbox, SeccompKeepsTheChildToItself) {
  const pid_t parent = getpid();
  const json j = in_sandbox({}, [parent] {
    json r;
    r["kill_parent"] = err_of(kill(parent, 0));  // signal 0: a permission check, harmless without the filter
    r["kill_all"] = err_of(kill(-1, 0));
    r["kill_group"] = err_of(kill(0, 0));
    r["kill_self"] = err_of(kill(getpid(), 0));
    r["tgkill_parent"] = err_of(syscall(SYS_tgkill, parent, parent, 0));
    r["ptrace_attach"] = err_of(ptrace(PTRACE_SEIZE, parent, nullptr, nullptr));
    char buf[8];
    iovec local{buf, sizeof buf}, remote{reinterpret_cast<void*>(&r), sizeof buf};
    r["process_vm_readv"] = err_of(process_vm_readv(parent, &local, 1, &remote, 1, 0));
    const pid_t f = fork();
    if (f == 0) _exit(0);
    if (f > 0) waitpid(f, nullptr, 0);
    r["fork"] = f < 0 ? errno : 0;
    r["exec"] = err_of(execl("/bin/true", "true", static_cast<char*>(nullptr)));
    r["unshare"] = err_of(unshare(CLONE_NEWNS));
    // What a solution and the driver need keep working: threads, signals to itself.
    bool ran = false;
    std::thread t([&] { ran = true; });
    t.join();
    r["thread"] = ran;
    static volatile sig_atomic_t got = 0;
    signal(SIGUSR1, [](int) { got = 1; });
    raise(SIGUSR1);
    r["raise"] = int(got);
    return r;
  });
  const auto m = by_name(j);
  const SandboxLayer& s = m.at("seccomp");
  if (s.state != kApplied) GTEST_SKIP() << "the seccomp layer is not in force here: " << describe(s);
  const json& r = j["probe"];
  for (const char* k : {"kill_parent", "kill_all", "kill_group", "tgkill_parent", "ptrace_attach", "process_vm_readv", "fork", "exec", "unshare"})
    EXPECT_EQ(r[k], EPERM) << k << ": " << r.dump();
  EXPECT_EQ(r["kill_self"], 0);
  EXPECT_EQ(r["thread"], true);
  EXPECT_EQ(r["raise"], 1);
}

// The parent's channels (SandboxSpec::kept_fds: the call ledger's, the result files): a solution
// cannot close, replace or shut one down to put a descriptor of its own in its place; every other
// descriptor it may.
TEST(Sandbox, TheParentsChannelsStayTheirs) {
  int sv[2], other[2];
  ASSERT_EQ(socketpair(AF_UNIX, SOCK_SEQPACKET, 0, sv), 0);
  ASSERT_EQ(pipe(other), 0);
  SandboxSpec spec;
  spec.kept_fds = {sv[1]};
  const int kept = sv[1], mine = other[0], spare = other[1];
  const json j = in_sandbox(spec, [kept, mine, spare] {
    json r;
    r["dup2"] = err_of(dup2(mine, kept));
    r["dup3"] = err_of(dup3(mine, kept, O_CLOEXEC));
    r["close"] = err_of(close(kept));
    r["close_range"] = err_of(syscall(SYS_close_range, kept, kept, 0));
    r["close_range_all"] = err_of(syscall(SYS_close_range, 3, ~0u, 0));  // every descriptor from 3 on
    r["shutdown"] = err_of(shutdown(kept, SHUT_WR));
    // The same with bits above 32 set: the kernel reads a descriptor's 32 bits, a filter all 64.
    const unsigned long long hi = (1ull << 32) | unsigned(kept);
    r["close_hi"] = err_of(syscall(SYS_close, hi));
    r["dup2_hi"] = err_of(syscall(SYS_dup2, mine, hi));
    r["dup3_hi"] = err_of(syscall(SYS_dup3, mine, hi, 0));
    r["shutdown_hi"] = err_of(syscall(SYS_shutdown, hi, SHUT_WR));
    r["close_range_hi"] = err_of(syscall(SYS_close_range, (1ull << 32) | 3u, ~0u, 0));
    r["still_open"] = fcntl(kept, F_GETFD) >= 0;
    r["dup2_other"] = err_of(dup2(mine, spare));  // any other descriptor: as ever
    r["close_other"] = err_of(close(spare));
    return r;
  });
  close(sv[0]);
  close(sv[1]);
  close(other[0]);
  close(other[1]);
  const auto m = by_name(j);
  const SandboxLayer& s = m.at("seccomp");
  if (s.state != kApplied) GTEST_SKIP() << "the seccomp layer is not in force here: " << describe(s);
  EXPECT_NE(s.detail.find("1 descriptors"), std::string::npos) << s.detail;
  const json& r = j["probe"];
  for (const char* k : {"dup2", "dup3", "close", "close_range", "close_range_all", "shutdown", "close_hi", "dup2_hi", "dup3_hi",
                        "shutdown_hi", "close_range_hi"})
    EXPECT_EQ(r[k], EPERM) << k << ": " << r.dump();
  EXPECT_EQ(r["still_open"], true) << r.dump();
  EXPECT_EQ(r["dup2_other"], 0) << r.dump();
  EXPECT_EQ(r["close_other"], 0) << r.dump();
}

TEST(Sandbox, APythonChildMayStartProcessesAndNothingElse) {
  // Triton runs ptxas in a subprocess: a Python solution's child (allow_processes) may fork and
  // exec; the rest of the filter holds, and the process it starts is inside the same sandbox.
  const pid_t parent = getpid();
  SandboxSpec spec;
  spec.allow_processes = true;
  const json j = in_sandbox(spec, [parent] {
    json r;
    r["kill_parent"] = err_of(kill(parent, 0));
    r["ptrace_attach"] = err_of(ptrace(PTRACE_SEIZE, parent, nullptr, nullptr));
    // The started process runs a shell that tries to signal the grader (this test's process).
    const std::string script = "kill -0 " + std::to_string(parent) + " 2>/dev/null && exit 3; exit 0";
    const pid_t f = fork();
    if (f == 0) {
      execl("/bin/sh", "sh", "-c", script.c_str(), static_cast<char*>(nullptr));
      _exit(127);
    }
    int status = -1;
    if (f > 0) waitpid(f, &status, 0);
    r["fork"] = f < 0 ? errno : 0;
    r["exec_status"] = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
    return r;
  });
  const auto m = by_name(j);
  const SandboxLayer& s = m.at("seccomp");
  if (s.state != kApplied) GTEST_SKIP() << "the seccomp layer is not in force here: " << describe(s);
  EXPECT_NE(s.detail.find("fork, vfork, clone and exec ALLOWED"), std::string::npos) << describe(s);
  const json& r = j["probe"];
  EXPECT_EQ(r["fork"], 0) << r.dump();
  EXPECT_EQ(r["exec_status"], 0) << "the exec'd shell ran, and could not signal the grader: " << r.dump();
  EXPECT_EQ(r["kill_parent"], EPERM) << r.dump();
  EXPECT_EQ(r["ptrace_attach"], EPERM) << r.dump();
}

TEST(Sandbox, LandlockReadsOnlyWhatItWasGivenAndWritesNowhere) {
  TempDir given("nibble-test-sandbox-given"), other("nibble-test-sandbox-other");
  write_file_atomic(given.path() + "/fixture.bin", "fixture");
  write_file_atomic(other.path() + "/secret.bin", "secret");
  SandboxSpec spec;
  spec.readable = {given.path()};
  const json j = in_sandbox(spec, [&] {
    json r;
    r["read_given"] = open_errno(given.path() + "/fixture.bin", O_RDONLY);
    r["read_other"] = open_errno(other.path() + "/secret.bin", O_RDONLY);
    r["write_given"] = open_errno(given.path() + "/fixture.bin", O_WRONLY);
    r["create_given"] = open_errno(given.path() + "/next-to-the-fixture", O_WRONLY | O_CREAT);
    r["create_other"] = open_errno(other.path() + "/new", O_WRONLY | O_CREAT);
    r["read_system"] = open_errno("/etc/passwd", O_RDONLY);
    r["write_devnull"] = open_errno("/dev/null", O_WRONLY);
    return r;
  });
  const auto m = by_name(j);
  const SandboxLayer& l = m.at("landlock");
  if (l.state != kApplied) GTEST_SKIP() << "the Landlock layer is not in force here: " << describe(l);
  const json& r = j["probe"];
  EXPECT_EQ(r["read_given"], 0) << r.dump();
  EXPECT_EQ(r["read_system"], 0) << r.dump();
  EXPECT_EQ(r["write_devnull"], 0) << r.dump();
  for (const char* k : {"read_other", "write_given", "create_given", "create_other"}) EXPECT_EQ(r[k], EACCES) << k << ": " << r.dump();
  EXPECT_FALSE(std::filesystem::exists(given.path() + "/next-to-the-fixture"));
  EXPECT_FALSE(std::filesystem::exists(other.path() + "/new"));
}

// /dev: the files there may be opened for writing (the driver's device nodes), but none made or
// removed (/dev/shm is the host's memory, and a file there outlives the child); the one folder a
// child may make files in is its scratch (SandboxSpec::writable: a Python solution's, under /dev/shm).
TEST(Sandbox, LandlockMakesNoFileUnderDevButInTheScratch) {
  if (!std::filesystem::is_directory("/dev/shm")) GTEST_SKIP() << "this machine has no /dev/shm";
  char tmpl[] = "/dev/shm/nibble-test-scratch-XXXXXX";
  ASSERT_NE(mkdtemp(tmpl), nullptr) << std::strerror(errno);
  const std::string scratch = tmpl, outside = "/dev/shm/nibble-test-sandbox-shm-" + std::to_string(getpid());
  write_file_atomic(scratch + "/old", "x");
  SandboxSpec spec;
  spec.writable = {scratch};
  const json j = in_sandbox(spec, [&] {
    json r;
    r["create_shm"] = open_errno(outside, O_WRONLY | O_CREAT);
    r["mkdir_shm"] = mkdir((outside + "-dir").c_str(), 0755) == 0 ? 0 : errno;
    r["write_devnull"] = open_errno("/dev/null", O_WRONLY);
    r["write_devzero"] = open_errno("/dev/zero", O_RDWR);
    r["create_scratch"] = open_errno(scratch + "/new", O_WRONLY | O_CREAT);
    r["mkdir_scratch"] = mkdir((scratch + "/cache").c_str(), 0755) == 0 ? 0 : errno;
    r["remove_scratch"] = unlink((scratch + "/old").c_str()) == 0 ? 0 : errno;
    return r;
  });
  const SandboxLayer& l = by_name(j).at("landlock");
  const bool applied = l.state == kApplied;
  const json r = j["probe"];
  std::error_code ec;
  std::filesystem::remove(outside, ec);
  std::filesystem::remove(outside + "-dir", ec);
  std::filesystem::remove_all(scratch, ec);
  if (!applied) GTEST_SKIP() << "the Landlock layer is not in force here: " << describe(l);
  for (const char* k : {"create_shm", "mkdir_shm"}) EXPECT_EQ(r[k], EACCES) << k << ": " << r.dump();
  for (const char* k : {"write_devnull", "write_devzero", "create_scratch", "mkdir_scratch", "remove_scratch"})
    EXPECT_EQ(r[k], 0) << k << ": " << r.dump();
  EXPECT_NE(l.detail.find("none made there"), std::string::npos) << l.detail;
  EXPECT_NE(l.detail.find("makes files only in its scratch folder"), std::string::npos) << l.detail;
}

// A file rule (the child's rule for its fixture) opens that file only: not the folder's other
// files, such as the fixture's lock, which a child holding it would make other grades wait on.
TEST(Sandbox, LandlockFileRuleReadsThatFileOnly) {
  TempDir given("nibble-test-sandbox-file");
  write_file_atomic(given.path() + "/model.safetensors", "fixture");
  write_file_atomic(given.path() + "/.nibble.lock", "");
  SandboxSpec spec;
  spec.readable = {given.path() + "/model.safetensors"};
  const json j = in_sandbox(spec, [&] {
    json r;
    r["read_file"] = open_errno(given.path() + "/model.safetensors", O_RDONLY);
    r["read_lock"] = open_errno(given.path() + "/.nibble.lock", O_RDONLY);
    r["list_folder"] = open_errno(given.path(), O_RDONLY | O_DIRECTORY);
    return r;
  });
  const SandboxLayer& l = by_name(j).at("landlock");
  if (l.state != kApplied) GTEST_SKIP() << "the Landlock layer is not in force here: " << describe(l);
  const json& r = j["probe"];
  EXPECT_EQ(r["read_file"], 0) << r.dump();
  EXPECT_EQ(r["read_lock"], EACCES) << r.dump();
  EXPECT_EQ(r["list_folder"], EACCES) << r.dump();
}

TEST(Sandbox, NamespacesKeepTheIds) {
  const uid_t uid = getuid();
  const json j = in_sandbox({}, [] { return json{{"uid", getuid()}, {"gid", getgid()}}; });
  const auto m = by_name(j);
  if (m.at("user_namespace").state != kApplied) GTEST_SKIP() << describe(m.at("user_namespace"));
  EXPECT_EQ(j["probe"]["uid"].get<uid_t>(), uid) << "the uid is mapped to itself: files and device nodes look as before";
}

TEST(Sandbox, AnOperatorCanLeaveLayersOut) {
  setenv("NIBBLE_SANDBOX_DISABLE", "namespaces,landlock", 1);
  const json j = in_sandbox({}, [] { return json::object(); });
  unsetenv("NIBBLE_SANDBOX_DISABLE");
  const auto m = by_name(j);
  EXPECT_EQ(m.size(), 7u) << "the same layers, whichever are left out";
  for (const char* n : {"user_namespace", "network_namespace", "ipc_namespace", "landlock"}) {
    EXPECT_EQ(m.at(n).state, kSkipped) << n;
    EXPECT_NE(m.at(n).detail.find("NIBBLE_SANDBOX_DISABLE"), std::string::npos) << n;
  }
  EXPECT_NE(m.at("seccomp").state, kSkipped);
  EXPECT_NE(m.at("rlimits").state, kSkipped);
}

TEST(Sandbox, SkippedLayersSayWhy) {
  SandboxSpec spec;
  spec.skip = {"namespaces", "landlock"};
  spec.skip_why = "the CUDA driver failed inside them (probe)";
  const auto m = by_name(in_sandbox(spec, [] { return json::object(); }));
  for (const char* n : {"user_namespace", "network_namespace", "ipc_namespace", "landlock"}) {
    EXPECT_EQ(m.at(n).state, kSkipped) << n;
    EXPECT_EQ(m.at(n).detail, spec.skip_why) << n;
  }
  EXPECT_NE(m.at("seccomp").state, kSkipped) << "a layer not named is tried";
  EXPECT_NE(sandbox_gaps({m.at("user_namespace")}).find("CUDA driver failed"), std::string::npos);
  EXPECT_EQ(sandbox_gaps({SandboxLayer{"x", kApplied, "fine"}}), "");
}

namespace {

/** `nibble __child` on a probe job (no GPU needed: the sandbox comes before CUDA); its Result. */
Result child_probe(const Job& j, ChildExit* exit) {
  const char* bin = std::getenv("NIBBLE_BINARY_DIR");
  const int job = make_channel("job"), result = make_channel("result");
  Job job_spec = j;
  job_spec.kind = "probe";
  job_spec.measure_bandwidth = false;
  job_spec.result_fd = result;
  write_channel(job, json(job_spec).dump());
  TempDir dir("nibble-test-sandbox");
  *exit = run_child({std::string(bin) + "/bin/nibble", "__child", std::to_string(job)}, dir.path() + "/log.txt", 60, {},
                    {job, result});
  Result r = json::parse(read_channel(result)).get<Result>();
  close(job);
  close(result);
  return r;
}

}  // namespace

TEST(Sandbox, EveryChildReportsItsLayers) {
  if (!std::getenv("NIBBLE_BINARY_DIR")) GTEST_SKIP() << "NIBBLE_BINARY_DIR is not set (run through ctest)";
  ChildExit e;
  const Result r = child_probe(Job{}, &e);
  ASSERT_EQ(r.sandbox.size(), 7u) << json(r).dump();
  for (const SandboxLayer& l : r.sandbox) std::printf("  %s\n", describe(l).c_str());
  if (r.error) {
    EXPECT_NE(r.error->kind, "sandbox") << "no --require-sandbox: a gap is reported, not refused";
  }
}

TEST(Sandbox, RequireSandboxRefusesAGap) {
  if (!std::getenv("NIBBLE_BINARY_DIR")) GTEST_SKIP() << "NIBBLE_BINARY_DIR is not set (run through ctest)";
  Job j;
  j.require_sandbox = true;
  j.sandbox.skip = {"namespaces"};  // a gap on every machine
  j.sandbox.skip_why = "test";
  ChildExit e;
  const Result r = child_probe(j, &e);
  ASSERT_TRUE(r.error) << json(r).dump();
  EXPECT_EQ(r.error->kind, "sandbox");
  EXPECT_NE(r.error->message.find("user_namespace (skipped: test)"), std::string::npos) << r.error->message;
  EXPECT_EQ(r.phase, "failed");
  EXPECT_EQ(e.kind, ChildExit::Exited);
  EXPECT_NE(e.code, 0);
}

// The probe's fallback (settle_sandbox) with a fake probe: a driver that works only without Landlock
// gets a run without Landlock and the first failure as the reason; one that works nowhere leaves the
// sandbox whole; one that works at once costs one probe.
TEST(SandboxProbe, TheFewestLayersThatLetTheDriverWorkAreLeftOut) {
  int calls = 0;
  auto driver_needs_no = [&calls](const std::string& layer) {
    return [&calls, layer](const SandboxSpec& s) {
      ++calls;
      SandboxTrial t;
      t.ok = layer.empty() || s.skips(layer);
      if (!t.ok) t.why = "cudaErrorOperatingSystem";
      return t;
    };
  };
  SandboxSpec spec;
  EXPECT_TRUE(settle_sandbox(&spec, false, driver_needs_no("landlock")).ok);
  EXPECT_EQ(spec.skip, std::vector<std::string>{"landlock"}) << "namespaces were tried first, then landlock alone";
  EXPECT_NE(spec.skip_why.find("cudaErrorOperatingSystem"), std::string::npos) << spec.skip_why;
  EXPECT_EQ(calls, 3);

  calls = 0;
  SandboxSpec none;
  EXPECT_FALSE(settle_sandbox(&none, false, driver_needs_no("nothing works")).ok);
  EXPECT_TRUE(none.skip.empty()) << "no GPU at all: the sandbox stays whole";
  EXPECT_EQ(calls, 1 + int(sandbox_fallbacks().size()));

  calls = 0;
  SandboxSpec whole;
  EXPECT_TRUE(settle_sandbox(&whole, false, driver_needs_no("")).ok);
  EXPECT_EQ(calls, 1);
  EXPECT_TRUE(whole.skip.empty());

  calls = 0;
  SandboxSpec required;
  EXPECT_FALSE(settle_sandbox(&required, true, [&](const SandboxSpec&) {
    ++calls;
    return SandboxTrial{false, true, "--require-sandbox: landlock (not available)"};
  }).ok);
  EXPECT_EQ(calls, 1) << "a sandbox the grade requires is never lowered";

  // Required, and the driver fails inside Landlock: the run is refused, naming the layer, and the
  // sandbox stays whole.
  calls = 0;
  SandboxSpec strict;
  const SandboxTrial t = settle_sandbox(&strict, true, driver_needs_no("landlock"));
  EXPECT_FALSE(t.ok);
  EXPECT_TRUE(t.refused);
  EXPECT_NE(t.why.find("--require-sandbox"), std::string::npos) << t.why;
  EXPECT_NE(t.why.find("only without landlock"), std::string::npos) << t.why;
  EXPECT_TRUE(strict.skip.empty()) << "a required sandbox is never lowered";
}
