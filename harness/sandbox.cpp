// sandbox.cpp: see sandbox.h. Each layer is one function that returns its SandboxLayer.
#include "harness/sandbox.h"

#include <fcntl.h>
#include <sched.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <sstream>
#include <stdexcept>

#ifdef NIBBLE_HAVE_SECCOMP
#include <seccomp.h>
#endif

namespace nibble {

namespace {

SandboxLayer layer(const char* name, const char* state, std::string detail) { return {name, state, std::move(detail)}; }

std::string errno_text(const char* call, int err) { return std::string(call) + ": " + std::strerror(err); }

SandboxLayer rlimits() {
  // A candidate's process makes no file of its own (its log and channels are the parent's memory
  // files), so the cap only bounds what it writes where nothing else stops it.
  const rlimit fsize{kChildMaxFileBytes, kChildMaxFileBytes}, no_core{0, 0};
  if (setrlimit(RLIMIT_FSIZE, &fsize) != 0) return layer("rlimits", kNotAvailable, errno_text("setrlimit(RLIMIT_FSIZE)", errno));
  // A crashing candidate leaves no core file (a GPU context makes them gigabytes).
  if (setrlimit(RLIMIT_CORE, &no_core) != 0) return layer("rlimits", kNotAvailable, errno_text("setrlimit(RLIMIT_CORE)", errno));
  return layer("rlimits", kApplied, "RLIMIT_FSIZE 16 GiB (no file the child writes grows past it), RLIMIT_CORE 0 (no core files)");
}

bool write_proc(const char* path, const std::string& text) {
  const int fd = open(path, O_WRONLY | O_CLOEXEC);
  if (fd < 0) return false;
  const bool ok = write(fd, text.data(), text.size()) == ssize_t(text.size());
  close(fd);
  return ok;
}

/** User (our uid and gid mapped to themselves, so files and device nodes look as before), network
 *  (no interface but a down loopback) and IPC (no System V objects of other processes). */
std::vector<SandboxLayer> namespaces(const SandboxSpec& spec) {
  const char* names[] = {"user_namespace", "network_namespace", "ipc_namespace"};
  std::vector<SandboxLayer> out;
  if (spec.skips("namespaces")) {
    for (const char* n : names) out.push_back(layer(n, kSkipped, spec.skip_why));
    return out;
  }
  const uid_t uid = getuid();
  const gid_t gid = getgid();
  if (unshare(CLONE_NEWUSER) == 0) {
    const bool mapped = write_proc("/proc/self/setgroups", "deny") &&
                        write_proc("/proc/self/uid_map", std::to_string(uid) + " " + std::to_string(uid) + " 1") &&
                        write_proc("/proc/self/gid_map", std::to_string(gid) + " " + std::to_string(gid) + " 1");
    out.push_back(layer(names[0], kApplied,
                        mapped ? "own user namespace, uid and gid mapped to themselves: no capability outside it"
                               : "own user namespace (uid/gid map not written: ids show as the overflow id); no capability outside it"));
  } else {
    out.push_back(layer(names[0], kNotAvailable, errno_text("unshare(CLONE_NEWUSER)", errno)));
  }
  // Inside a new user namespace these need no privilege; without one, they need CAP_SYS_ADMIN.
  out.push_back(unshare(CLONE_NEWNET) == 0 ? layer(names[1], kApplied, "own network namespace: only a loopback that is down")
                                           : layer(names[1], kNotAvailable, errno_text("unshare(CLONE_NEWNET)", errno)));
  out.push_back(unshare(CLONE_NEWIPC) == 0 ? layer(names[2], kApplied, "own IPC namespace: no System V IPC object of another process")
                                           : layer(names[2], kNotAvailable, errno_text("unshare(CLONE_NEWIPC)", errno)));
  return out;
}

SandboxLayer no_new_privs() {
  if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) return layer("no_new_privs", kNotAvailable, errno_text("prctl(PR_SET_NO_NEW_PRIVS)", errno));
  return layer("no_new_privs", kApplied, "no exec can gain privileges (setuid, file capabilities)");
}

// ---- Landlock: the kernel's ABI (include/uapi/linux/landlock.h), spelled out here so that a build
// against older kernel headers still uses what a newer kernel offers.
namespace ll {
constexpr uint32_t kCreateRulesetVersion = 1u << 0;
constexpr int kRulePathBeneath = 1;
constexpr uint64_t kExecute = 1ull << 0, kWriteFile = 1ull << 1, kReadFile = 1ull << 2, kReadDir = 1ull << 3,
                   kRemoveDir = 1ull << 4, kRemoveFile = 1ull << 5, kMakeChar = 1ull << 6, kMakeDir = 1ull << 7,
                   kMakeReg = 1ull << 8, kMakeSock = 1ull << 9, kMakeFifo = 1ull << 10, kMakeBlock = 1ull << 11,
                   kMakeSym = 1ull << 12, kRefer = 1ull << 13 /* ABI 2 */, kTruncate = 1ull << 14 /* ABI 3 */;
constexpr uint64_t kNetBindTcp = 1ull << 0, kNetConnectTcp = 1ull << 1;  // ABI 4
constexpr uint64_t kScopeSignal = 1ull << 1;                             // ABI 6
struct RulesetAttr {
  uint64_t handled_access_fs = 0, handled_access_net = 0, scoped = 0;
};
struct __attribute__((packed)) PathBeneathAttr {
  uint64_t allowed_access;
  int32_t parent_fd;
};
#ifdef SYS_landlock_create_ruleset
constexpr long kSysCreate = SYS_landlock_create_ruleset, kSysAdd = SYS_landlock_add_rule, kSysRestrict = SYS_landlock_restrict_self;
#else
constexpr long kSysCreate = 444, kSysAdd = 445, kSysRestrict = 446;  // the same number on every architecture
#endif
}  // namespace ll

/** The folders every child reads: the system's libraries, the CUDA toolkit and driver files
 *  (/usr/local/cuda, /usr/local/nvidia, /proc/driver/nvidia, /sys), configuration; then what the
 *  environment adds (LD_LIBRARY_PATH, CUDA_HOME, CUDA_PATH) and the job's own files. */
std::vector<std::string> readable_paths(const SandboxSpec& spec) {
  std::vector<std::string> v = {"/usr", "/lib", "/lib32", "/lib64", "/libx32", "/bin", "/sbin", "/etc", "/opt", "/proc", "/sys",
                                "/run", "/proc/self/exe"};
  for (const char* var : {"LD_LIBRARY_PATH", "CUDA_HOME", "CUDA_PATH"}) {
    const char* s = std::getenv(var);
    if (!s) continue;
    std::stringstream ss(s);
    for (std::string p; std::getline(ss, p, ':');)
      if (!p.empty() && p[0] == '/') v.push_back(p);
  }
  v.insert(v.end(), spec.readable.begin(), spec.readable.end());
  return v;
}

SandboxLayer landlock(const SandboxSpec& spec) {
  const long abi = syscall(ll::kSysCreate, nullptr, 0, ll::kCreateRulesetVersion);
  if (abi < 0) {
    const int err = errno;
    return layer("landlock", kNotAvailable,
                 errno_text("landlock_create_ruleset", err) +
                     (err == ENOSYS ? " (the kernel has no Landlock, e.g. gVisor or a kernel before 5.13)"
                                    : err == EOPNOTSUPP ? " (Landlock is built in but not enabled: lsm= on the kernel command line)" : ""));
  }
  ll::RulesetAttr attr;
  attr.handled_access_fs = ll::kExecute | ll::kWriteFile | ll::kReadFile | ll::kReadDir | ll::kRemoveDir | ll::kRemoveFile |
                           ll::kMakeChar | ll::kMakeDir | ll::kMakeReg | ll::kMakeSock | ll::kMakeFifo | ll::kMakeBlock |
                           ll::kMakeSym;
  if (abi >= 2) attr.handled_access_fs |= ll::kRefer;
  if (abi >= 3) attr.handled_access_fs |= ll::kTruncate;
  if (abi >= 4) attr.handled_access_net = ll::kNetBindTcp | ll::kNetConnectTcp;  // no rule: no TCP at all
  if (abi >= 6) attr.scoped = ll::kScopeSignal;  // no signal to a process outside this domain (the grader)
  const size_t attr_size = abi >= 6 ? 24 : abi >= 4 ? 16 : 8;
  const int ruleset = int(syscall(ll::kSysCreate, &attr, attr_size, 0));
  if (ruleset < 0) return layer("landlock", kNotAvailable, errno_text("landlock_create_ruleset", errno));
  const uint64_t read_file = ll::kReadFile | ll::kExecute, read_dir = read_file | ll::kReadDir;
  std::string why_not;
  // What a rule grants beneath its path: read; also write the files that exist (nothing made or
  // removed); everything.
  enum class Access { Read, WriteExisting, Full };
  auto allow = [&](const std::string& path, Access access) {
    const int fd = open(path.c_str(), O_PATH | O_CLOEXEC);
    if (fd < 0) return;  // a folder this system does not have
    struct stat st{};
    fstat(fd, &st);
    // A rule on a file may only name the rights a file has.
    const uint64_t read = S_ISDIR(st.st_mode) ? read_dir : read_file;
    const uint64_t rights = access == Access::Full            ? attr.handled_access_fs
                            : access == Access::WriteExisting ? read | ll::kWriteFile | ll::kTruncate
                                                              : read;
    const ll::PathBeneathAttr rule{rights & attr.handled_access_fs, fd};
    if (syscall(ll::kSysAdd, ruleset, ll::kRulePathBeneath, &rule, 0) != 0 && why_not.empty())
      why_not = errno_text(("landlock_add_rule " + path).c_str(), errno);
    close(fd);
  };
  for (const std::string& p : readable_paths(spec)) allow(p, Access::Read);
  // The driver names its threads (pthread_setname_np writes /proc/self/task/<tid>/comm) and fails
  // with cudaErrorOperatingSystem when it cannot (the H200, 2026-12-04: reports/h200/sandbox-ledger):
  // the child may write files of its own /proc entry, which reach nothing but itself.
  allow("/proc/self", Access::WriteExisting);
  // The driver opens its device nodes read-write (/dev/nvidia*, /dev/nvidia-uvm): the files under
  // /dev that exist may be read and written, but nothing made or removed there: /dev/shm is memory
  // (a child that filled it would take the host's memory, and its files outlive the child).
  allow("/dev", Access::WriteExisting);
  // A Python solution's scratch (its TMPDIR and Triton's cache), made and removed by the parent.
  for (const std::string& p : spec.writable) allow(p, Access::Full);
  if (why_not.empty() && prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0) why_not = errno_text("prctl(PR_SET_NO_NEW_PRIVS)", errno);
  if (why_not.empty() && syscall(ll::kSysRestrict, ruleset, 0) != 0) why_not = errno_text("landlock_restrict_self", errno);
  close(ruleset);
  if (!why_not.empty()) return layer("landlock", kNotAvailable, why_not);
  std::string d = "ABI " + std::to_string(abi) + ": reads only the system's libraries, driver and configuration folders, the "
                  "executable and the job's files (fixture, solution); writes only the files under /dev that exist (device "
                  "nodes: none made there) and its own /proc/self" +
                  (spec.writable.empty() ? std::string() : ", and makes files only in its scratch folder") + "; nowhere else";
  if (abi >= 4) d += "; no TCP bind or connect";
  if (abi >= 6) d += "; no signal to a process outside the sandbox";
  if (abi < 6) d += " (ABI 6 would also scope signals)";
  return layer("landlock", kApplied, d);
}

#ifdef NIBBLE_HAVE_SECCOMP
/** `allow_processes`: fork, vfork, clone and exec allowed (a Python solution's child); `kept`:
 *  descriptors nothing may close, replace or shut down (SandboxSpec::kept_fds). */
SandboxLayer seccomp(bool allow_processes, const std::vector<int>& kept) {
  scmp_filter_ctx ctx = seccomp_init(SCMP_ACT_ALLOW);
  if (!ctx) return layer("seccomp", kNotAvailable, "seccomp_init failed");
  std::string why_not;
  auto check = [&](int rc, const std::string& what) {
    if (rc < 0 && why_not.empty()) why_not = what + ": " + std::strerror(-rc);
  };
  // Every thread, also any the process has already (none, when called as sandbox.h asks).
  check(seccomp_attr_set(ctx, SCMP_FLTATR_CTL_TSYNC, 1), "seccomp_attr_set(TSYNC)");
  const uint64_t self = uint64_t(getpid());
  // EPERM, not a kill: a solution that tries sees a failed call, and the grade goes on.
  const int eperm = SCMP_ACT_ERRNO(EPERM);
  int denied = 0;
  // Reaching other processes, the kernel's state, or a way around this filter or Landlock.
  for (const char* name :
       {"ptrace", "process_vm_readv", "process_vm_writev", "kcmp", "pidfd_open", "pidfd_getfd", "pidfd_send_signal", "tkill",
        "perf_event_open", "bpf", "userfaultfd", "io_uring_setup", "io_uring_enter", "io_uring_register", "mount", "umount",
        "umount2", "pivot_root", "chroot", "move_mount", "open_tree", "fsopen", "fsmount", "fsconfig", "fspick",
        "mount_setattr", "setns", "unshare", "keyctl", "add_key", "request_key", "init_module", "finit_module",
        "delete_module", "kexec_load", "kexec_file_load", "reboot", "swapon", "swapoff", "acct", "quotactl",
        "open_by_handle_at", "name_to_handle_at", "lookup_dcookie", "syslog", "settimeofday", "clock_settime",
        "clock_adjtime", "adjtimex", "iopl", "ioperm", "uselib", "vhangup",
        // No new process: a daemon would outlive the child's last word, and exec would leave the harness.
        "fork", "vfork", "execve", "execveat"}) {
    const bool process_call = std::strcmp(name, "fork") == 0 || std::strcmp(name, "vfork") == 0 ||
                              std::strcmp(name, "execve") == 0 || std::strcmp(name, "execveat") == 0;
    if (allow_processes && process_call) continue;
    const int nr = seccomp_syscall_resolve_name(name);
    if (nr == __NR_SCMP_ERROR) continue;  // not a system call on this architecture
    check(seccomp_rule_add(ctx, eperm, nr, 0), std::string("seccomp_rule_add ") + name);
    ++denied;
  }
  // Signals: only to this process (pid <= 0, a group or everyone, is another process too).
  for (const char* name : {"kill", "tgkill", "rt_sigqueueinfo", "rt_tgsigqueueinfo"})
    check(seccomp_rule_add(ctx, eperm, seccomp_syscall_resolve_name(name), 1, SCMP_A0(SCMP_CMP_NE, self)),
          std::string("seccomp_rule_add ") + name);
  // Threads only: clone without CLONE_THREAD makes a process. clone3 passes its flags in memory a
  // filter cannot read: ENOSYS, and glibc falls back to clone.
  if (!allow_processes)
    check(seccomp_rule_add(ctx, eperm, SCMP_SYS(clone), 1, SCMP_A0(SCMP_CMP_MASKED_EQ, uint64_t(CLONE_THREAD), 0)),
          "seccomp_rule_add clone");
  check(seccomp_rule_add(ctx, SCMP_ACT_ERRNO(ENOSYS), seccomp_syscall_resolve_name("clone3"), 0), "seccomp_rule_add clone3");
  // The parent's channels stay the descriptors the parent made (SandboxSpec::kept_fds). A forked
  // Python subprocess closing its descriptors gets EPERM for these and goes on (CPython falls back
  // from close_range to close, ignoring errors): the process it execs keeps them open, nothing else.
  // The kernel reads these arguments as 32-bit descriptors, the filter sees 64 bits: the comparisons
  // take the low 32 bits (MASKED_EQ), or refuse a value with high bits set outright (close_range's
  // first; its last can only over-refuse), else fd | 1 << 32 would pass the filter and reach fd.
  const int close_range = seccomp_syscall_resolve_name("close_range");
  if (close_range != __NR_SCMP_ERROR && !kept.empty())
    check(seccomp_rule_add(ctx, eperm, close_range, 1, SCMP_A0(SCMP_CMP_GT, 0xffffffffull)), "seccomp_rule_add close_range");
  for (const int fd : kept) {
    if (fd < 0) continue;
    const uint64_t f = uint64_t(fd), low = 0xffffffffull;
    check(seccomp_rule_add(ctx, eperm, SCMP_SYS(close), 1, SCMP_A0(SCMP_CMP_MASKED_EQ, low, f)), "seccomp_rule_add close");
    check(seccomp_rule_add(ctx, eperm, SCMP_SYS(dup2), 1, SCMP_A1(SCMP_CMP_MASKED_EQ, low, f)), "seccomp_rule_add dup2");
    check(seccomp_rule_add(ctx, eperm, SCMP_SYS(dup3), 1, SCMP_A1(SCMP_CMP_MASKED_EQ, low, f)), "seccomp_rule_add dup3");
    check(seccomp_rule_add(ctx, eperm, SCMP_SYS(shutdown), 1, SCMP_A0(SCMP_CMP_MASKED_EQ, low, f)),
          "seccomp_rule_add shutdown");
    if (close_range != __NR_SCMP_ERROR)
      check(seccomp_rule_add(ctx, eperm, close_range, 2, SCMP_A0(SCMP_CMP_LE, f), SCMP_A1(SCMP_CMP_GE, f)),
            "seccomp_rule_add close_range");
  }
  // personality: reading it is fine; changing it (no ASLR, READ_IMPLIES_EXEC) is not.
  check(seccomp_rule_add(ctx, eperm, SCMP_SYS(personality), 1, SCMP_A0(SCMP_CMP_NE, 0xffffffffull)),
        "seccomp_rule_add personality");
  if (why_not.empty()) check(seccomp_load(ctx), "seccomp_load");
  seccomp_release(ctx);
  if (!why_not.empty()) return layer("seccomp", kNotAvailable, why_not);
  if (allow_processes)
    return layer("seccomp", kApplied,
                 std::to_string(denied) + " system calls refused with EPERM (ptrace, process_vm_readv/writev, pidfd_*, "
                 "kcmp, perf_event_open, bpf, io_uring, mounts, setns/unshare, keyrings, modules, ...); "
                 "kill/tgkill/rt_sigqueueinfo only to its own pid; clone3: ENOSYS; personality read-only; "
                 "fork, vfork, clone and exec ALLOWED (a Python solution: Triton runs ptxas in a subprocess), each "
                 "process inside this same sandbox and killed with the child; the parent's channels (" +
                     std::to_string(kept.size()) + " descriptors) never closed, replaced or shut down");
  return layer("seccomp", kApplied,
               std::to_string(denied) + " system calls refused with EPERM (ptrace, process_vm_readv/writev, pidfd_*, "
               "kcmp, perf_event_open, bpf, io_uring, mounts, setns/unshare, keyrings, modules, fork, vfork, exec, ...); "
               "kill/tgkill/rt_sigqueueinfo only to its own pid; clone only for threads (clone3: ENOSYS); personality read-only; "
               "the parent's channels (" + std::to_string(kept.size()) + " descriptors) never closed, replaced or shut down");
}
#endif

}  // namespace

void check_sandbox_disable_env() {
  const char* env = std::getenv("NIBBLE_SANDBOX_DISABLE");
  if (!env) return;
  std::stringstream ss(env);
  for (std::string name; std::getline(ss, name, ',');)
    if (name != "namespaces" && name != "landlock" && name != "seccomp" && !name.empty())
      throw std::invalid_argument(std::string("NIBBLE_SANDBOX_DISABLE=") + env + ": '" + name +
                                  "' is not a layer it can leave out (namespaces, landlock, seccomp, comma separated)");
}

bool seccomp_built_in() {
#ifdef NIBBLE_HAVE_SECCOMP
  return true;
#else
  return false;
#endif
}

std::vector<SandboxLayer> enter_sandbox(const SandboxSpec& spec) {
  setenv("CUDA_CACHE_DISABLE", "1", 1);
  // The machine's operator may leave layers out (NIBBLE_SANDBOX_DISABLE=landlock,seccomp,namespaces):
  // to find which one a GPU driver fails inside. The report lists them as skipped.
  const char* off_env = std::getenv("NIBBLE_SANDBOX_DISABLE");
  const std::string off = off_env ? std::string(",") + off_env + "," : "";
  auto wanted = [&](const char* name) {
    return !spec.skips(name) && off.find(std::string(",") + name + ",") == std::string::npos;
  };
  auto skipped = [&](const char* name) {
    return layer(name, kSkipped, spec.skips(name) ? spec.skip_why : "NIBBLE_SANDBOX_DISABLE names it");
  };
  std::vector<SandboxLayer> out{rlimits()};
  // Namespaces first: unshare(CLONE_NEWUSER) needs a single thread, and the uid map is written
  // through /proc, which Landlock makes read-only.
  SandboxSpec ns = spec;
  if (!wanted("namespaces") && !spec.skips("namespaces")) {  // left out by the operator: the same three layers, skipped
    ns.skip.push_back("namespaces");
    ns.skip_why = skipped("namespaces").detail;
  }
  for (SandboxLayer& l : namespaces(ns)) out.push_back(std::move(l));
  out.push_back(no_new_privs());
  out.push_back(wanted("landlock") ? landlock(spec) : skipped("landlock"));
  // Last: it forbids unshare and would refuse the calls the layers above make.
#ifdef NIBBLE_HAVE_SECCOMP
  out.push_back(wanted("seccomp") ? seccomp(spec.allow_processes, spec.kept_fds) : skipped("seccomp"));
#else
  out.push_back(layer("seccomp", kNotBuiltIn, "libseccomp-dev missing at build time"));
#endif
  return out;
}

bool SandboxSpec::skips(const std::string& layer) const { return std::find(skip.begin(), skip.end(), layer) != skip.end(); }

SandboxTrial settle_sandbox(SandboxSpec* spec, bool required, const std::function<SandboxTrial(const SandboxSpec&)>& probe) {
  const SandboxTrial first = probe(*spec);
  if (first.ok || first.refused || !spec->skip.empty()) return first;
  // A layer the driver cannot work in on this machine (namespaces: device nodes and /proc seen from
  // another user namespace; Landlock: a file the driver opens that the rules do not name): the
  // probe is tried without the fewest layers that make it work, and every child of the run goes
  // without those, the report saying why.
  for (const auto& skip : sandbox_fallbacks()) {
    SandboxSpec s = *spec;
    s.skip = skip;
    std::string names;
    for (const auto& n : skip) names += (names.empty() ? "" : ", ") + n;
    const std::string failed = "the device probe failed inside the whole sandbox (" + first.why.substr(0, 300) + ")";
    s.skip_why = failed + " and worked without " + names + "; every child of this run goes without " + (skip.size() > 1 ? "them" : "it");
    if (!probe(s).ok) continue;
    if (required)
      return {false, true, "--require-sandbox: " + failed + "; it works only without " + names + " on this machine"};
    *spec = s;
    return {true, false, ""};
  }
  return first;
}

std::string sandbox_gaps(const std::vector<SandboxLayer>& layers) {
  std::string s;
  for (const SandboxLayer& l : layers)
    if (l.state != kApplied) s += (s.empty() ? "" : "; ") + l.name + " (" + l.state + (l.detail.empty() ? "" : ": " + l.detail) + ")";
  return s;
}

}  // namespace nibble
