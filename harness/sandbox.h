// sandbox.h: what the grader's child gives up before it loads a solution (docs/architecture.md
// "The sandbox").
//
// Every child (candidate, reference, variant, device probe) calls enter_sandbox() once, first
// thing after reading its job, while it still has a single thread and before the CUDA driver is
// initialised: the namespaces need one thread, and Landlock binds the calling thread and the
// threads it starts later, so every thread the driver and the solution create is inside. Each
// layer is what Linux gives an unprivileged process; one the system lacks is recorded, not fatal,
// and the grade's report lists the state of every layer.
#pragma once

#include <functional>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

namespace nibble {

/** The largest file a child may write (RLIMIT_FSIZE; beyond it the write fails with EFBIG, or
 *  SIGXFSZ ends the child): no output or log can fill the machine. The channels are memory files
 *  and count too, so it stays far above the largest outputs of a full-size grade. */
inline constexpr unsigned long long kChildMaxFileBytes = 16ull << 30;

/** One protection and whether it is in force. state: kApplied, kNotAvailable (the system refused
 *  it: why in detail), kNotBuiltIn (this nibble was built without it), kSkipped (the grader chose
 *  to go without it, e.g. a probe found the CUDA driver fails inside it). */
struct SandboxLayer {
  std::string name, state, detail;
};
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(SandboxLayer, name, state, detail)

inline constexpr const char* kApplied = "applied";
inline constexpr const char* kNotAvailable = "not available";
inline constexpr const char* kNotBuiltIn = "not built in";
inline constexpr const char* kSkipped = "skipped";

/** What the parent asks of a child's sandbox (part of the Job). */
struct SandboxSpec {
  // Layers the child goes without ("namespaces", "landlock", "seccomp"), and why (recorded as each
  // skipped layer's detail): the device probe found the GPU driver fails inside them here.
  std::vector<std::string> skip;
  std::string skip_why;
  std::vector<std::string> readable;  // files or folders the child reads besides the system's (fixture, solution)
  // Folders the child may create, write and remove files in (a Python solution's scratch, made and
  // removed by the parent): the only ones. Under /dev it may only open what exists (device nodes).
  std::vector<std::string> writable;
  // A Python solution's child: seccomp lets it start processes (fork, vfork, clone, exec), because
  // Triton runs ptxas and ldconfig in subprocesses; every other rule stays, and the processes it
  // starts inherit the whole sandbox (docs/architecture.md "Python solutions").
  bool allow_processes = false;
  // The child's channels to the parent (the call ledger's socket and pipe, the result and outputs
  // files): seccomp refuses to close, replace (dup2, dup3), close_range over or shut down these
  // descriptors, so that the harness's messages go where the parent reads them, not through a
  // descriptor a solution put in their place (and could hold back or time as it likes).
  std::vector<int> kept_fds;
  bool skips(const std::string& layer) const;
};
NLOHMANN_DEFINE_TYPE_NON_INTRUSIVE_WITH_DEFAULT(SandboxSpec, skip, skip_why, readable, writable, allow_processes, kept_fds)

/** The layers a probe may leave out to find a sandbox the GPU driver works in, in the order it
 *  tries them (each a set; the first that works is kept): the fewest layers first. */
inline const std::vector<std::vector<std::string>>& sandbox_fallbacks() {
  static const std::vector<std::vector<std::string>> f = {
      {"namespaces"}, {"landlock"}, {"namespaces", "landlock"}, {"seccomp"}, {"namespaces", "landlock", "seccomp"}};
  return f;
}

/**
 * Applies every layer to this process, in order: rlimits (file size, no core files), user + network
 * + IPC namespaces, no_new_privs, Landlock (read the system's libraries and driver files and
 * `spec.readable`; read and write the files under /dev that exist (the driver's device nodes) but
 * create none there; create, write and remove files only in `spec.writable`; no TCP; no signals out of the domain where
 * the kernel has those), seccomp (no ptrace, process_vm_*, signals to other processes, new
 * processes and exec unless `spec.allow_processes`, kernel keyrings, modules, mounts, namespaces,
 * perf, bpf, io_uring; `spec.kept_fds` never closed, replaced or shut down). Call it with
 * one thread, before CUDA. Never throws: a layer that cannot be applied is reported, and the
 * process goes on without it. Also sets CUDA_CACHE_DISABLE=1 (the JIT cache lives in $HOME, which
 * the child cannot write, and is a cache a candidate could poison for the next grade).
 */
std::vector<SandboxLayer> enter_sandbox(const SandboxSpec& spec);

/** One try of a sandbox by a probe child: whether the GPU driver worked in it, whether the child
 *  refused it (--require-sandbox and a gap), and why not. */
struct SandboxTrial {
  bool ok = false, refused = false;
  std::string why;
};

/** The sandbox a run's children get, settled by `probe` (a probe child run in that sandbox):
 *  *spec as given when the probe works in it, refuses it, or *spec already skips layers; else the
 *  first of sandbox_fallbacks() the probe works with, *spec then skipping those layers with the
 *  first failure as the reason; else *spec unchanged. With `required` (--require-sandbox) *spec is
 *  never lowered: a fallback that works is only named, in a refusal that says which layers the
 *  driver fails inside. Returns the settled trial: ok, refused (with why), or the first failure. */
SandboxTrial settle_sandbox(SandboxSpec* spec, bool required, const std::function<SandboxTrial(const SandboxSpec&)>& probe);

/** The layers not applied, as "landlock (not available: ...); seccomp (...)"; "" when all are. */
std::string sandbox_gaps(const std::vector<SandboxLayer>& layers);

/** NIBBLE_SANDBOX_DISABLE (the operator's switch, enter_sandbox): throws std::invalid_argument
 *  naming the accepted names when it holds one that is not namespaces, landlock or seccomp (a
 *  misspelt name would otherwise leave the sandbox whole while the operator thinks a layer off). */
void check_sandbox_disable_env();

/** Whether this nibble was built with libseccomp (the seccomp layer). */
bool seccomp_built_in();

}  // namespace nibble
