// test_process.cpp: child processes end as data (exit status, signal, watchdog), files atomically.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <csignal>
#include <cstdio>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>

#include "harness/atomic_file.h"
#include "harness/process.h"

using namespace nibble;
namespace fs = std::filesystem;

TEST(RunChild, ExitStatusAndLog) {
  TempDir t;
  const ChildExit e = run_child({"/bin/sh", "-c", "echo hello-from-child; exit 7"}, t.path() + "/log", 10);
  EXPECT_EQ(e.kind, ChildExit::Exited);
  EXPECT_EQ(e.code, 7);
  EXPECT_NE(file_tail(t.path() + "/log").find("hello-from-child"), std::string::npos);
}

TEST(RunChild, SignalIsReportedNotPropagated) {
  TempDir t;
  const ChildExit e = run_child({"/bin/sh", "-c", "kill -SEGV $$"}, t.path() + "/log", 10);
  EXPECT_EQ(e.kind, ChildExit::Signaled);
  EXPECT_EQ(e.code, SIGSEGV);
  EXPECT_NE(e.describe().find("signal 11"), std::string::npos);
}

TEST(RunChild, WatchdogKillsAHangAndItsChildren) {
  TempDir t;
  const auto t0 = std::chrono::steady_clock::now();
  const ChildExit e = run_child({"/bin/sh", "-c", "sleep 30 & sleep 30"}, t.path() + "/log", 0.5);
  const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  EXPECT_EQ(e.kind, ChildExit::TimedOut);
  EXPECT_LT(s, 5.0);
}

// A child that stops itself (SIGSTOP) never finishes: it is found in seconds, not at the timeout.
TEST(RunChild, AStoppedChildIsKilledWithinSeconds) {
  TempDir d;
  const ChildExit e = run_child({"/bin/sh", "-c", "kill -STOP $$; echo never"}, d.path() + "/log.txt", 120);
  EXPECT_EQ(e.kind, ChildExit::TimedOut);
  EXPECT_TRUE(e.stopped);
  EXPECT_LT(e.seconds, kStoppedSeconds + 5);
  EXPECT_NE(e.describe().find("stopped"), std::string::npos) << e.describe();
  // Stopped and continued again within the limit: not a hang.
  const ChildExit c = run_child({"/bin/sh", "-c", "(sleep 0.5; kill -CONT $$) & kill -STOP $$; exit 3"}, d.path() + "/log2.txt", 60);
  EXPECT_EQ(c.kind, ChildExit::Exited) << c.describe();
  EXPECT_EQ(c.code, 3);
}

TEST(RunChild, MissingExecutableIsExit127) {
  TempDir t;
  const ChildExit e = run_child({"/nonexistent/program"}, t.path() + "/log", 10);
  EXPECT_EQ(e.kind, ChildExit::Exited);
  EXPECT_EQ(e.code, 127);
}

TEST(AtomicFile, WritesReplacesAndLeavesNoTemp) {
  TempDir t;
  const std::string p = t.path() + "/sub/report.json";
  write_file_atomic(p, "first");
  EXPECT_EQ(read_file(p), "first");
  write_file_atomic(p, "second, longer");
  EXPECT_EQ(read_file(p), "second, longer");
  int files = 0;
  for (const auto& e : fs::directory_iterator(t.path() + "/sub")) {
    (void)e;
    ++files;
  }
  EXPECT_EQ(files, 1);
}

// A name of 255 bytes (NAME_MAX) is writable: the temporary file beside it must not be longer.
TEST(AtomicFile, ALongestNameIsWritable) {
  TempDir t;
  const std::string p = t.path() + "/" + std::string(250, 'a') + ".html";
  write_file_atomic(p, "page");
  EXPECT_EQ(read_file(p), "page");
}

// The same file spelled relative and absolute, before it exists, is one output.
TEST(AtomicFile, RelativeAndAbsoluteSpellingsOfANewFileAreTheSame) {
  TempDir t;
  const fs::path here = fs::current_path();
  fs::current_path(t.path());
  EXPECT_TRUE(same_output_file("a2.json", t.path() + "/a2.json"));
  EXPECT_TRUE(same_output_file("./sub/../x.json", t.path() + "/x.json"));
  EXPECT_FALSE(same_output_file("a2.json", t.path() + "/b2.json"));
  fs::current_path(here);
}

TEST(AtomicFile, UnwritablePlaceThrowsNamingThePath) {
  try {
    write_file_atomic("/proc/nibble-cannot-write-here/x.json", "x");
    FAIL() << "expected an exception";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("/proc/nibble-cannot-write-here"), std::string::npos);
  }
}

TEST(TempDir, RemovedOnDestruction) {
  std::string p;
  {
    TempDir t;
    p = t.path();
    write_file_atomic(p + "/a", "x");
    EXPECT_TRUE(fs::exists(p));
  }
  EXPECT_FALSE(fs::exists(p));
}

TEST(RunChild, DaemonsTheChildLeftBehindAreKilled) {
  // A setsid daemon escapes the child's process group; it must still be dead when run_child
  // returns, or it could rewrite the child's results afterwards.
  TempDir t;
  const std::string marker = t.path() + "/written-after-exit";
  const ChildExit e =
      run_child({"/bin/sh", "-c", "setsid /bin/sh -c 'sleep 1; touch " + marker + "' </dev/null >/dev/null 2>&1 & exit 0"},
                t.path() + "/log", 10);
  EXPECT_EQ(e.kind, ChildExit::Exited);
  std::this_thread::sleep_for(std::chrono::milliseconds(1800));
  EXPECT_FALSE(fs::exists(marker)) << "the daemon outlived run_child";
}

// A parent killed with SIGKILL runs no cleanup: its child must not outlive it (a resumed batch would
// grade the same job beside the orphan).
TEST(RunChild, TheChildEndsWithAParentKilledOutright) {
  TempDir t;
  const std::string pid_file = t.path() + "/child.pid";
  const pid_t parent = fork();
  ASSERT_GE(parent, 0);
  if (parent == 0) {  // the "batch": runs a child that records its pid and sleeps
    (void)run_child({"/bin/sh", "-c", "echo $$ > " + pid_file + "; exec sleep 30"}, t.path() + "/log", 60);
    _exit(0);
  }
  pid_t child = 0;
  for (int i = 0; i < 200 && child <= 0; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    FILE* f = std::fopen(pid_file.c_str(), "r");
    if (f) {
      if (std::fscanf(f, "%d", &child) != 1) child = 0;
      std::fclose(f);
    }
  }
  ASSERT_GT(child, 0) << "the child never started";
  ASSERT_EQ(kill(child, 0), 0);
  kill(parent, SIGKILL);
  waitpid(parent, nullptr, 0);
  // Dead: no process, or a zombie (reparented to init or a subreaper, reaped whenever it gets to it).
  const auto dead = [&] {
    std::ifstream stat("/proc/" + std::to_string(child) + "/stat");
    std::string line;
    if (!std::getline(stat, line)) return true;
    const size_t at = line.rfind(')');
    return at != std::string::npos && at + 2 < line.size() && (line[at + 2] == 'Z' || line[at + 2] == 'X');
  };
  bool gone = false;
  for (int i = 0; i < 250 && !gone; ++i) {
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    gone = dead();
  }
  (void)waitpid(child, nullptr, WNOHANG);  // this test process may be the subreaper
  EXPECT_TRUE(gone) << "child " << child << " outlived its parent";
}

// An empty output path or a folder is refused with what to give instead, and nothing is left behind.
TEST(AtomicFile, EmptyPathOrFolderIsRefusedClearly) {
  TempDir t;
  try {
    write_file_atomic("", "x");
    ADD_FAILURE() << "an empty path was accepted";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("the output path is empty"), std::string::npos) << e.what();
  }
  try {
    write_file_atomic(t.path(), "x");
    ADD_FAILURE() << "a folder was accepted";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("it is a folder"), std::string::npos) << e.what();
  }
  write_file_atomic(t.path() + "/ok.txt", "x");
  EXPECT_EQ(read_file(t.path() + "/ok.txt"), "x");
  int entries = 0;
  for (const auto& e : std::filesystem::directory_iterator(t.path())) entries += e.is_regular_file();
  EXPECT_EQ(entries, 1) << "a temporary file was left behind";
}

// A symbolic link is written through, as a shell's `>` does: the link stays a link and its target
// (also a dangling link's, which is created) gets the content; the old target file is replaced
// atomically, so a temporary file sits beside the target, not beside the link.
TEST(AtomicFile, SymbolicLinksAreWrittenThrough) {
  TempDir t;
  fs::create_directories(t.path() + "/real");
  write_file_atomic(t.path() + "/real/target.json", "old");
  fs::create_symlink("real/target.json", t.path() + "/link.json");
  fs::create_symlink(t.path() + "/link.json", t.path() + "/link2.json");  // a link to a link
  write_file_atomic(t.path() + "/link2.json", "new");
  EXPECT_TRUE(fs::is_symlink(t.path() + "/link.json"));
  EXPECT_TRUE(fs::is_symlink(t.path() + "/link2.json"));
  EXPECT_EQ(read_file(t.path() + "/real/target.json"), "new");
  fs::create_symlink("real/missing.json", t.path() + "/dangling.json");
  write_file_atomic(t.path() + "/dangling.json", "created");
  EXPECT_TRUE(fs::is_symlink(t.path() + "/dangling.json"));
  EXPECT_EQ(read_file(t.path() + "/real/missing.json"), "created");
}

// A pipe or a device (-o /dev/stdout) gets the bytes directly: a rename would put a regular file in
// its place that nobody reads (seen: `report html ... -o /dev/stdout` replaced the /dev/stdout link).
TEST(AtomicFile, PipesAreWrittenIntoNotReplaced) {
  TempDir t;
  const std::string fifo = t.path() + "/pipe";
  ASSERT_EQ(mkfifo(fifo.c_str(), 0600), 0) << strerror(errno);
  // The read end opened first and non-blocking: the writer's open then succeeds at once, and a
  // writer that replaced the pipe instead cannot leave this test blocked.
  const int rd = open(fifo.c_str(), O_RDONLY | O_NONBLOCK);
  ASSERT_GE(rd, 0) << strerror(errno);
  write_file_atomic(fifo, "through the pipe");
  char buf[64] = {};
  const ssize_t n = read(rd, buf, sizeof buf);
  close(rd);
  EXPECT_EQ(std::string(buf, n > 0 ? size_t(n) : 0), "through the pipe");
  EXPECT_TRUE(fs::is_fifo(fifo)) << "the pipe was replaced";
  int entries = 0;
  for (const auto& e : fs::directory_iterator(t.path())) entries += e.is_regular_file();
  EXPECT_EQ(entries, 0) << "a regular file appeared beside the pipe";
}

// The replaced file keeps its permissions (a rename gives a new inode: 0644 by default), and a path
// that ends in '/' is refused before anything is created.
TEST(AtomicFile, KeepsPermissionsAndRefusesAFolderName) {
  TempDir t;
  const std::string p = t.path() + "/private.json";
  write_file_atomic(p, "old");
  ASSERT_EQ(chmod(p.c_str(), 0600), 0);
  write_file_atomic(p, "new");
  struct stat st {};
  ASSERT_EQ(stat(p.c_str(), &st), 0);
  EXPECT_EQ(st.st_mode & 0777, 0600u);
  EXPECT_EQ(read_file(p), "new");
  EXPECT_THROW(write_file_atomic(t.path() + "/newdir/", "x"), std::runtime_error);
  EXPECT_FALSE(fs::exists(t.path() + "/newdir"));
}
