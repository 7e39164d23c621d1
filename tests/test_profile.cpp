// test_profile.cpp: grade --profile's pure parts (harness/profile.h): the CSV records the profilers
// export, the top kernels computed from a hand-made export whose answer is known, where the
// profile is stored, and how the profiler is found.
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstdlib>
#include <fstream>

#include "harness/process.h"
#include "harness/profile.h"

using namespace nibble;

TEST(Profile, CsvRecordsKeepQuotedCommasAndQuotes) {
  EXPECT_EQ(split_csv_record(R"csv("a","b, c","say ""hi""",,"")csv"),
            (std::vector<std::string>{"a", "b, c", "say \"hi\"", "", ""}));
  EXPECT_EQ(split_csv_record("1,2\r"), (std::vector<std::string>{"1", "2"}));
}

TEST(Profile, NcuTopKernelsByTotalTime) {
  // ncu --csv --page raw: a header, a units row, one row per launch; ncu's own messages around it.
  const std::string csv =
      "==PROF== Connected to process 123\n"
      R"csv("ID","Process ID","Kernel Name","gpu__time_duration.sum","dram__throughput.avg.pct_of_peak_sustained_elapsed","sm__warps_active.avg.pct_of_peak_sustained_active","launch__registers_per_thread")csv"
      "\n"
      R"csv("","","","usecond","%","%","register/thread")csv"
      "\n"
      R"csv("0","123","void gemv<int, 4>(float const*, int)","12.5","80","40","64")csv"
      "\n"
      R"csv("1","123","rmsnorm(float*)","3","20","10","32")csv"
      "\n"
      R"csv("2","123","void gemv<int, 4>(float const*, int)","1,007.5","90","50","64")csv"
      "\n";
  const auto top = profile_top_kernels("ncu", csv, 5);
  ASSERT_EQ(top.size(), 2u);
  EXPECT_EQ(top[0]["name"], "void gemv<int, 4>(float const*, int)");
  EXPECT_EQ(top[0]["launches"], 2);
  EXPECT_DOUBLE_EQ(top[0]["total_us"].get<double>(), 1020.0);
  EXPECT_DOUBLE_EQ(top[0]["mean_us"].get<double>(), 510.0);
  EXPECT_DOUBLE_EQ(top[0]["dram_throughput_pct"].get<double>(), 85.0);
  EXPECT_DOUBLE_EQ(top[0]["achieved_occupancy_pct"].get<double>(), 45.0);
  EXPECT_DOUBLE_EQ(top[0]["registers_per_thread"].get<double>(), 64.0);
  EXPECT_EQ(top[1]["name"], "rmsnorm(float*)");
  EXPECT_EQ(profile_top_kernels("ncu", csv, 1).size(), 1u);
  // Nanoseconds are converted.
  const std::string ns = R"csv("Kernel Name","gpu__time_duration.sum")csv"
                         "\n"
                         R"csv("","nsecond")csv"
                         "\n"
                         R"csv("k","2500")csv"
                         "\n";
  EXPECT_DOUBLE_EQ(profile_top_kernels("ncu", ns)[0]["total_us"].get<double>(), 2.5);
  EXPECT_THROW(profile_top_kernels("ncu", "==ERROR== no kernels were profiled\n"), std::runtime_error);
}

TEST(Profile, NsysKernelSummary) {
  const std::string csv =
      R"csv("Time (%)","Total Time (ns)","Instances","Avg (ns)","Med (ns)","Min (ns)","Max (ns)","StdDev (ns)","Name")csv"
      "\n"
      R"csv("75.0","30000","3","10000","10000","9000","11000","1000","megakernel(Params)")csv"
      "\n"
      R"csv("25.0","10000","10","1000","1000","900","1100","50","flush_l2(char*)")csv"
      "\n";
  const auto top = profile_top_kernels("nsys", csv);
  ASSERT_EQ(top.size(), 2u);
  EXPECT_EQ(top[0]["name"], "megakernel(Params)");
  EXPECT_EQ(top[0]["launches"], 3);
  EXPECT_DOUBLE_EQ(top[0]["total_us"].get<double>(), 30.0);
  EXPECT_DOUBLE_EQ(top[0]["mean_us"].get<double>(), 10.0);
  EXPECT_FALSE(top[0].contains("dram_throughput_pct"));
  // Newer nsys quotes only the fields with commas, and prints lines of its own before the table.
  const std::string plain = "Processing [report.sqlite] with [cuda_gpu_kern_sum.py]...\n"
                            "Time (%),Total Time (ns),Instances,Avg (ns),Med (ns),Min (ns),Max (ns),StdDev (ns),Name\n"
                            "100.0,4000,2,2000,2000,1900,2100,100,\"gemv<int, 4>(float const*)\"\n";
  const auto p = profile_top_kernels("nsys", plain);
  ASSERT_EQ(p.size(), 1u);
  EXPECT_EQ(p[0]["name"], "gemv<int, 4>(float const*)");
  EXPECT_EQ(p[0]["launches"], 2);
  EXPECT_DOUBLE_EQ(p[0]["total_us"].get<double>(), 4.0);
}

TEST(Profile, WhereItIsStoredAndHowItRuns) {
  EXPECT_EQ(profile_path("ncu", "out/r.json"), "out/r.ncu-rep");
  EXPECT_EQ(profile_path("nsys", "r"), "r.nsys-rep");
  const auto ncu = profiler_run_argv("ncu", "/x/ncu", "r.json");
  const std::string joined = [&] {
    std::string s;
    for (const auto& a : ncu) s += a + " ";
    return s;
  }();
  EXPECT_NE(joined.find("--clock-control none"), std::string::npos) << joined;
  EXPECT_NE(joined.find("--nvtx-include nibble_call/"), std::string::npos) << joined;
  EXPECT_NE(joined.find("--export r.ncu-rep"), std::string::npos) << joined;
  const auto nsys = profiler_run_argv("nsys", "/x/nsys", "d/r.json");
  EXPECT_EQ(nsys.back(), "d/r") << "nsys adds .nsys-rep itself";
  EXPECT_THROW(check_profiler("vtune"), std::invalid_argument);
  EXPECT_NO_THROW(check_profiler("nsys"));
}

TEST(Profile, FoundOnPathElseNot) {
  TempDir t;
  const std::string fake = t.path() + "/ncu";
  std::ofstream(fake) << "#!/bin/sh\n";
  chmod(fake.c_str(), 0755);
  const char* old = std::getenv("PATH");
  const std::string saved = old ? old : "";
  setenv("PATH", (t.path() + ":" + saved).c_str(), 1);
  EXPECT_EQ(find_profiler("ncu"), fake);
  setenv("PATH", "/nonexistent", 1);
  const std::string cuda = find_profiler("ncu");
  EXPECT_TRUE(cuda.empty() || cuda.find("/bin/ncu") != std::string::npos) << cuda;
  setenv("PATH", saved.c_str(), 1);
}
