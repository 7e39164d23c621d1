// process.h: run a child process with a watchdog; its end becomes data, never a dead parent.
#pragma once

#include <functional>
#include <string>
#include <vector>

namespace nibble {

/** A child stopped by a signal for longer than this is killed as TimedOut (a stopped child never
 *  finishes; the per-child timeout is minutes). */
inline constexpr double kStoppedSeconds = 2.0;

/** How a child ended. */
struct ChildExit {
  enum Kind { Exited, Signaled, TimedOut, SpawnFailed } kind = SpawnFailed;
  int code = -1;         // exit status (Exited) or signal number (Signaled)
  double seconds = 0;    // wall time from spawn to reap
  bool stopped = false;  // TimedOut because it stayed stopped by a signal (run_child's kStoppedSeconds)
  std::string describe() const;  // "exit status 3", "killed by signal 11 (Segmentation fault)", ...
};

/**
 * fork + execv(argv[0], argv) with stdout and stderr appended to `log_path`; waits at most
 * `timeout_seconds` (<= 0: no limit), then SIGKILLs the child's whole process group. `tick`, when
 * given, is called about four times a second while the child runs (progress display). When it
 * returns, nothing the child started is still running (see reap_descendants). The descriptors in
 * `pass_fds` (the parent's channels, close-on-exec elsewhere) stay open across the child's exec.
 */
ChildExit run_child(const std::vector<std::string>& argv, const std::string& log_path, double timeout_seconds,
                    const std::function<void(double elapsed_seconds)>& tick = {}, const std::vector<int>& pass_fds = {});

/** From now on SIGINT, SIGTERM and SIGHUP do not end this process at once: every run_child call
 *  kills its child's process group and returns (ChildExit::Signaled, SIGKILL), and
 *  children_stopping() is true, so the caller can finish its records and exit. */
void stop_children_on_signals();
bool children_stopping();

/** Kill and reap every process reparented to this one (run_child makes this process a child
 *  subreaper, so daemons a child left behind end up here), except the children other run_child
 *  calls of this process are waiting on. run_child calls it after every child. */
void reap_descendants();

/** The last `max_bytes` of a text file ("" when unreadable). */
std::string file_tail(const std::string& path, size_t max_bytes = 4000);

/** Path of the running executable (/proc/self/exe). */
std::string self_exe();

/** A temporary directory removed (recursively) when this object dies, unless keep() was called. */
class TempDir {
 public:
  explicit TempDir(const std::string& prefix = "nibble");
  ~TempDir();
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  const std::string& path() const { return path_; }
  void keep() { keep_ = true; }

 private:
  std::string path_;
  bool keep_ = false;
};

}  // namespace nibble
