// test_process.cpp: child processes end as data (exit status, signal, watchdog), files atomically.
#include <gtest/gtest.h>

#include <chrono>
#include <filesystem>
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
