// process.cpp: child processes for the grader (each solution runs in its own).
#include "harness/process.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/prctl.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <climits>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>

namespace nibble {

std::string ChildExit::describe() const {
  switch (kind) {
    case Exited: return "exit status " + std::to_string(code);
    case Signaled: return "killed by signal " + std::to_string(code) + " (" + strsignal(code) + ")";
    case TimedOut:
      return stopped ? "was stopped by a signal (SIGSTOP or SIGTSTP) for more than " + std::to_string(int(kStoppedSeconds)) +
                           " s and was killed"
                     : "timed out after " + std::to_string(int(seconds)) + " s and was killed";
    case SpawnFailed: return "could not be started";
  }
  return "?";
}

namespace {

/** Every process whose parent is this one (orphans reparent here once we are a subreaper). */
std::vector<pid_t> own_children() {
  std::vector<pid_t> out;
  DIR* d = opendir("/proc");
  if (!d) return out;
  while (dirent* e = readdir(d)) {
    char* end = nullptr;
    const long pid = std::strtol(e->d_name, &end, 10);
    if (!end || *end != '\0' || pid <= 0) continue;
    char path[64];
    std::snprintf(path, sizeof path, "/proc/%ld/stat", pid);
    FILE* f = std::fopen(path, "r");
    if (!f) continue;
    char buf[512] = {};
    const size_t n = std::fread(buf, 1, sizeof buf - 1, f);
    std::fclose(f);
    // "pid (comm) state ppid ...": comm may hold spaces or ')', so parse after the last ')'.
    const char* rp = std::strrchr(buf, ')');
    if (!rp || n == 0) continue;
    char state = 0;
    long ppid = 0;
    if (std::sscanf(rp + 1, " %c %ld", &state, &ppid) == 2 && ppid == long(getpid())) out.push_back(pid_t(pid));
  }
  closedir(d);
  return out;
}

// The children a run_child call in this process is waiting on (threads may run several at once, as
// nibble batch does): reap_descendants leaves them to their own call.
std::mutex g_live_mu;
std::set<pid_t> g_live;
std::atomic<bool> g_stop{false};

void stop_handler(int) { g_stop = true; }

}  // namespace

void stop_children_on_signals() {
  struct sigaction sa {};
  sa.sa_handler = stop_handler;
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, nullptr);
  sigaction(SIGTERM, &sa, nullptr);
  sigaction(SIGHUP, &sa, nullptr);
}

bool children_stopping() { return g_stop; }

void reap_descendants() {
  // A daemon a solution started (setsid, double fork) outlives its process group. As a child
  // subreaper, every such orphan is reparented to us: kill and reap all of them, repeatedly,
  // until none is left, so nothing a candidate started can touch files after it ended.
  for (int round = 0; round < 50; ++round) {
    auto kids = own_children();
    {
      std::lock_guard<std::mutex> lock(g_live_mu);
      kids.erase(std::remove_if(kids.begin(), kids.end(), [](pid_t k) { return g_live.count(k) > 0; }), kids.end());
    }
    if (kids.empty()) return;
    // Only those the signal reached are waited for: inside the child's sandbox seccomp refuses a kill
    // of any other pid, and a blocking wait on a live grandchild (a Python module's fork) held the
    // child until its parent's timeout (a newcomer's finding, 2026-12-07); the parent's group kill
    // and its own reap end them once the child has exited.
    std::vector<pid_t> signalled;
    for (pid_t k : kids)
      if (kill(k, SIGKILL) == 0) signalled.push_back(k);
    if (signalled.empty()) return;
    for (pid_t k : signalled) waitpid(k, nullptr, 0);
  }
}

ChildExit run_child(const std::vector<std::string>& argv, const std::string& log_path, double timeout_seconds,
                    const std::function<void(double)>& tick, const std::vector<int>& pass_fds) {
  static const bool subreaper = prctl(PR_SET_CHILD_SUBREAPER, 1) == 0;
  (void)subreaper;
  ChildExit r;
  const auto t0 = std::chrono::steady_clock::now();
  std::vector<char*> args;
  for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  const int log_fd = open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (log_fd < 0) throw std::runtime_error("cannot open child log " + log_path + ": " + strerror(errno));
  // The live set is locked across the fork: another thread's reap_descendants must not see this
  // child before it is in the set (it would kill and reap it under this call's waitpid).
  std::unique_lock<std::mutex> live_lock(g_live_mu);
  const pid_t parent = getpid();
  const pid_t pid = fork();
  if (pid < 0) {
    live_lock.unlock();
    close(log_fd);
    return r;
  }
  if (pid == 0) {
    setpgid(0, 0);  // own process group: the watchdog kills whatever the solution spawned too
    // A parent killed outright (SIGKILL, the OOM killer, Slurm past its grace period) runs none of
    // the cleanup above: the child goes with it (its own children through theirs), so that no
    // orphaned grade keeps a GPU busy while a resumed batch grades the same job again.
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);  // it died before the line above
    dup2(log_fd, STDOUT_FILENO);
    dup2(log_fd, STDERR_FILENO);
    for (const int fd : pass_fds) fcntl(fd, F_SETFD, fcntl(fd, F_GETFD) & ~FD_CLOEXEC);
    execv(args[0], args.data());
    // Only async-signal-safe calls between fork and exec in a threaded parent: write(2), not stdio.
    const char* what = strerror(errno);
    (void)!write(STDERR_FILENO, "execv ", 6);
    (void)!write(STDERR_FILENO, args[0], strlen(args[0]));
    (void)!write(STDERR_FILENO, " failed: ", 9);
    (void)!write(STDERR_FILENO, what, strlen(what));
    (void)!write(STDERR_FILENO, "\n", 1);
    _exit(127);
  }
  g_live.insert(pid);
  live_lock.unlock();
  close(log_fd);
  setpgid(pid, pid);
  struct Forget {
    pid_t pid;
    ~Forget() {
      std::lock_guard<std::mutex> lock(g_live_mu);
      g_live.erase(pid);
    }
  } forget{pid};
  int status = 0;
  double last_tick = 0, stopped_at = -1;
  for (;;) {
    // WUNTRACED/WCONTINUED: a child stopped by a signal (SIGSTOP, SIGTSTP) is a hang the per-child
    // timeout would only notice after minutes; a stop that lasts kStoppedSeconds ends it.
    const pid_t w = waitpid(pid, &status, WNOHANG | WUNTRACED | WCONTINUED);
    const double el = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (w == pid && WIFSTOPPED(status)) {
      stopped_at = el;
      continue;
    }
    if (w == pid && WIFCONTINUED(status)) {
      stopped_at = -1;
      continue;
    }
    if (w == pid) {
      r.seconds = el;
      if (WIFEXITED(status)) {
        r.kind = ChildExit::Exited;
        r.code = WEXITSTATUS(status);
      } else {
        r.kind = ChildExit::Signaled;
        r.code = WTERMSIG(status);
      }
      kill(-pid, SIGKILL);  // stragglers the solution left in the group
      reap_descendants();
      return r;
    }
    if (w < 0 && errno != EINTR) throw std::runtime_error(std::string("waitpid: ") + strerror(errno));
    const bool stuck = stopped_at >= 0 && el - stopped_at > kStoppedSeconds;
    if (g_stop) {  // this process was told to stop (stop_children_on_signals): its children go first
      kill(-pid, SIGKILL);
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      reap_descendants();  // what the child left in other process groups, reparented here
      r.kind = ChildExit::Signaled;
      r.code = SIGKILL;
      r.seconds = el;
      return r;
    }
    if (stuck || (timeout_seconds > 0 && el > timeout_seconds)) {  // a hang: the child and all it started go
      kill(-pid, SIGKILL);
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      reap_descendants();
      r.kind = ChildExit::TimedOut;
      r.stopped = stuck;
      r.seconds = el;
      return r;
    }

    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    if (tick && el - last_tick >= 0.25) {
      last_tick = el;
      tick(el);
    }
  }
}

std::string file_tail(const std::string& path, size_t max_bytes) {
  std::ifstream f(path, std::ios::binary | std::ios::ate);
  if (!f) return "";
  const std::streamoff size = f.tellg();
  const std::streamoff start = size > std::streamoff(max_bytes) ? size - std::streamoff(max_bytes) : 0;
  f.seekg(start);
  std::string s(size_t(size - start), '\0');
  f.read(s.data(), std::streamsize(s.size()));
  return s;
}

std::string self_exe() {
  char buf[PATH_MAX];
  const ssize_t n = readlink("/proc/self/exe", buf, sizeof(buf) - 1);
  if (n <= 0) throw std::runtime_error("cannot resolve /proc/self/exe");
  return std::string(buf, size_t(n));
}

TempDir::TempDir(const std::string& prefix) {
  const char* base = std::getenv("TMPDIR");
  std::string tmpl = std::string(base && *base ? base : "/tmp") + "/" + prefix + "-XXXXXX";
  std::vector<char> buf(tmpl.begin(), tmpl.end());
  buf.push_back('\0');
  if (!mkdtemp(buf.data())) throw std::runtime_error("mkdtemp " + tmpl + ": " + strerror(errno));
  path_ = buf.data();
}

TempDir::~TempDir() {
  if (keep_) return;
  std::error_code ec;
  std::filesystem::remove_all(path_, ec);
}

}  // namespace nibble
