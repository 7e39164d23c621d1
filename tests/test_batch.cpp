// test_batch.cpp: nibble batch (harness/batch.h) with a fake grade: the manifest and its errors,
// the jobs it expands to, one job per GPU at a time, resume after an interruption, the summary,
// Slurm's array script and --collect.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <filesystem>
#include <fstream>
#include <map>
#include <mutex>
#include <thread>

#include "harness/atomic_file.h"
#include "harness/batch.h"
#include "harness/process.h"

using namespace nibble;
namespace fs = std::filesystem;

namespace {

std::string write(const TempDir& t, const std::string& name, const std::string& text) {
  const std::string p = t.path() + "/" + name;
  std::ofstream(p) << text;
  return p;
}

/** Two decode solutions (files whose bytes the hash reads) and a manifest over them. */
std::string two_solutions(const TempDir& t, const std::string& runs_extra = "") {
  write(t, "a.so", "solution a");
  write(t, "b.so", "solution b");
  return write(t, "m.json", R"({"name": "t", "out": "res", "runs": [
    {"task": "megakernel-int4-weight-decode", "configs": ["tiny", "full"], "seeds": [0, 1], "solutions": ["a.so", "b.so"]},
    {"command": "calibrate", "task": "gemm-w4a16-nvfp4", "configs": ["tiny"], "seeds": [3, 4], "split_seeds": true,
     "args": ["--path", "cpu"]})" + runs_extra + "]}");
}

/** A fake grade: writes a report with `disposition`, remembers which device ran what, and checks
 *  that no device ever runs two jobs at once. */
struct FakeGrade {
  std::mutex mu;
  std::map<int, int> busy;
  std::atomic<int> calls{0}, overlaps{0};
  std::vector<std::string> ran;
  std::string disposition = "Passed";
  int operator()(const BatchJob& j, int device) {
    {
      std::lock_guard<std::mutex> l(mu);
      if (busy[device]++ > 0) ++overlaps;
      ran.push_back(j.id);
    }
    ++calls;
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
    // What a real report records of its job: task, config, seeds and the solution's bytes.
    const std::string whose = R"("task": ")" + j.task + R"(", "config": ")" + j.config + R"(", "seeds": )" +
                              nlohmann::json(j.seeds).dump() + R"(, "solution": {"sha256": ")" + j.solution_sha256 + R"("}, )";
    write_file_atomic(j.report, j.command == "calibrate" ? R"({"schema": "nibble.calibration", )" + whose + R"("healthy": true})"
                                                         : R"({"schema": "nibble.report", )" + whose + R"("disposition": ")" + disposition +
                                                               R"(", "reason": "r", "correctness": {"worst_rel_err": )" +
                                                               (disposition == "Passed" ? "0.001" : "0.5") + R"(, "gate": 0.1}})");
    std::lock_guard<std::mutex> l(mu);
    --busy[device];
    return disposition == "Passed" ? 0 : 1;
  }
};

}  // namespace

TEST(Batch, TheManifestExpandsToItsProduct) {
  TempDir t;
  const BatchManifest m = read_batch_manifest(two_solutions(t));
  ASSERT_EQ(m.jobs.size(), 2u * 2u + 2u) << "2 configs x 2 solutions, seeds together; then one calibrate per seed";
  EXPECT_EQ(m.out, fs::weakly_canonical(t.path() + "/res").string());
  // The readable part, then 8 hex digits of the job's spec.
  EXPECT_EQ(m.jobs[0].id.substr(0, m.jobs[0].id.size() - 9), "grade-megakernel-int4-weight-decode-tiny-a-s0_1");
  EXPECT_EQ(m.jobs[5].id.substr(0, m.jobs[5].id.size() - 9), "calibrate-gemm-w4a16-nvfp4-tiny-s4");
  EXPECT_EQ(m.jobs[0].id.find_first_not_of("0123456789abcdef", m.jobs[0].id.size() - 8), std::string::npos) << m.jobs[0].id;
  EXPECT_TRUE(m.jobs[0].needs_gpu);
  EXPECT_FALSE(m.jobs[4].needs_gpu) << "calibrate --path cpu";
  const auto argv = batch_job_argv(m.jobs[1], 3);
  const std::vector<std::string> want = {"grade", "--task", "megakernel-int4-weight-decode", "--config", "tiny", "--seeds", "0,1", "--out",
                                         m.jobs[1].report, "-q", "--solution", fs::weakly_canonical(t.path() + "/b.so").string(),
                                         "--device", "3"};
  EXPECT_EQ(argv, want);
  EXPECT_EQ(batch_job_argv(m.jobs[4], 3).back(), "cpu") << "no --device for a job without a GPU";
  EXPECT_NE(m.jobs[0].hash, m.jobs[2].hash);
}

// Manifests sharing a results folder share a job only when it is the same job: other arguments,
// or another solution file of the same name, are another job with files of its own.
TEST(Batch, JobIdsSayWhichJob) {
  TempDir t;
  fs::create_directories(t.path() + "/x");
  fs::create_directories(t.path() + "/y");
  write(t, "x/a.so", "solution a");
  write(t, "y/a.so", "another a");
  auto one = [&](const std::string& file, const std::string& solution, const std::string& args) {
    return read_batch_manifest(write(t, file, R"({"out": "res", "runs": [{"task": "megakernel-int4-weight-decode", "configs": ["tiny"],
        "seeds": [0], "solutions": [")" + solution + R"("], "args": [)" + args + "]}]}")).jobs.at(0);
  };
  const BatchJob nightly = one("nightly.json", "x/a.so", ""), weekly = one("weekly.json", "x/a.so", "");
  EXPECT_EQ(nightly.id, weekly.id) << "the same job in two manifests is one job";
  EXPECT_NE(one("w2.json", "x/a.so", R"("--max-rounds", "5")").id, nightly.id);
  EXPECT_NE(one("w3.json", "y/a.so", "").id, nightly.id);
  // 60 seeds together: the id stays a file name.
  std::string seeds;
  for (int s = 0; s < 60; ++s) seeds += (s ? "," : "") + std::to_string(1000000 + s);
  const BatchManifest many = read_batch_manifest(write(t, "many.json", R"({"runs": [{"task": "megakernel-int4-weight-decode",
      "configs": ["tiny"], "seeds": [)" + seeds + R"(], "solutions": ["x/a.so"]}]})"));
  EXPECT_LE(many.jobs.at(0).id.size(), 200u);
  // --path=cpu is --path cpu: a calibration that needs no GPU.
  const BatchManifest cal = read_batch_manifest(write(t, "cal.json", R"({"runs": [{"command": "calibrate",
      "task": "megakernel-int4-weight-decode", "configs": ["tiny"], "seeds": [0], "args": ["--path=cpu"]}]})"));
  EXPECT_FALSE(cal.jobs.at(0).needs_gpu);
}

TEST(Batch, ManifestErrorsNameTheKey) {
  TempDir t;
  write(t, "a.so", "x");
  auto error = [&](const std::string& body) {
    try {
      read_batch_manifest(write(t, "bad.json", body));
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("(accepted)");
  };
  EXPECT_NE(error("[]").find("non-empty \"runs\""), std::string::npos);
  const std::string run = R"({"task": "megakernel-int4-weight-decode", "configs": ["tiny"], "solutions": ["a.so"]})";
  EXPECT_NE(error(R"({"outt": "x", "runs": [)" + run + "]}").find("unknown key 'outt'"), std::string::npos);
  EXPECT_NE(error(R"({"out": "", "runs": [)" + run + "]}").find("'out' is empty"), std::string::npos);
  for (const char* t : {"0", "-1", "2e6"})
    EXPECT_NE(error(std::string(R"({"timeout_seconds": )") + t + R"(, "runs": [)" + run + "]}").find("timeout_seconds must be positive, at most 1000000"),
              std::string::npos)
        << t;
  EXPECT_NE(error(R"({"name": "", "runs": [)" + run + "]}").find("'name' is empty"), std::string::npos);
  // A name given that a file name cannot be (two names made the same file: "sub/x" and "sub_x").
  for (const char* name : {"sub/x", "a b", "x\\ny"})
    EXPECT_NE(error(std::string(R"({"name": ")") + name + R"(", "runs": [)" + run + "]}")
                  .find("names the batch's files; use letters, digits, '.', '_' and '-' only"),
              std::string::npos)
        << name;
  EXPECT_NE(error(R"({"name": ".hidden", "runs": [)" + run + "]}").find("starts with a dot"), std::string::npos);
  EXPECT_NE(error(R"({"name": ")" + std::string(101, 'n') + R"(", "runs": [)" + run + "]}").find("is 101 characters; at most 100"),
            std::string::npos);
  // A NUL in the name is shown, not an end of the message.
  EXPECT_NE(error(R"({"name": "x\u0000y", "runs": [)" + run + "]}").find(R"("x\u0000y" names the batch's files)"), std::string::npos)
      << error(R"({"name": "x\u0000y", "runs": [)" + run + "]}");
  EXPECT_NE(error(R"({"runs": [{"task": "megakernel-int4-weight-decode", "configs": ["tiny"], "solutions": ["a.so"], "seeds": [0, 0]}]})")
                .find("seed 0 is listed twice"),
            std::string::npos);
  EXPECT_NE(error(R"({"runs": [{"task": "megakernel-int4-weight-decode", "configs": ["tiny"], "solutions": ["a.so"], "args": ["--profile", "ncu"]}]})")
                .find("--profile is not for a batch"),
            std::string::npos);
  // --profile=ncu is --profile; the options each job sets itself may not be given again.
  for (const char* arg : {R"("--profile=ncu")", R"("--out", "x.json")", R"("--seeds", "5")", R"("--task=gemm-w4a16-nvfp4")", R"("-q")"})
    EXPECT_NE(error(R"({"runs": [{"task": "megakernel-int4-weight-decode", "configs": ["tiny"], "solutions": ["a.so"], "args": [)" +
                    std::string(arg) + "]}]}")
                  .find(std::string(arg).find("profile") != std::string::npos ? "--profile is not for a batch" : "'args' must not set"),
              std::string::npos)
        << arg;
  // Help, a version or the internal argument check: every job would print it and write no report (a
  // newcomer's batch exited 0 per job, NoReport each).
  for (const char* arg : {"--help", "-h", "--version", "--check-args", "--check-args=true"})
    EXPECT_NE(error(R"({"runs": [{"task": "megakernel-int4-weight-decode", "configs": ["tiny"], "solutions": ["a.so"], "args": [")" +
                    std::string(arg) + "\"]}]}")
                  .find("'args' must not hold " + std::string(arg).substr(0, std::string(arg).find('=')) + ": every job would print it"),
              std::string::npos)
        << arg;
  // Seeds as `nibble grade --seeds` takes them: below 10^19 (2^64 - 1 would be a job that cannot run).
  for (const char* seed : {"-1", "1.7", "18446744073709551616", "1e30", "18446744073709551615", "10000000000000000000"})
    EXPECT_NE(error(R"({"runs": [{"task": "megakernel-int4-weight-decode", "configs": ["tiny"], "solutions": ["a.so"], "seeds": [)" +
                    std::string(seed) + "]}]}")
                  .find("a seed is a whole number from 0 to 10^19 - 1"),
              std::string::npos)
        << seed;
  EXPECT_EQ(error(R"({"runs": [{"task": "megakernel-int4-weight-decode", "configs": ["tiny"], "solutions": ["a.so"], "seeds": [9999999999999999999]}]})"),
            "(accepted)");
  EXPECT_NE(error(R"({"runs": [{"task": "megakernel-int4-weight-decode", "configs": ["tiny"], "solutions": ["."]}]})").find("is not a file"),
            std::string::npos);
  EXPECT_NE(error("{oops").find(".json is not valid JSON: "), std::string::npos) << error("{oops");
  // Valid JSON with a key twice: said as that, not as "not JSON".
  EXPECT_NE(error(R"({"runs": [], "runs": []})").find("has the key 'runs' twice"), std::string::npos)
      << error(R"({"runs": [], "runs": []})");
  // A manifest where the batch writes its summary (named as that file, in the results folder) would be
  // overwritten by the run: refused before it starts.
  const std::string run_a = R"({"task": "megakernel-int4-weight-decode", "configs": ["tiny"], "solutions": ["a.so"]})";
  for (const char* kind : {"m.batch-summary.json", "m.collect.json", "m.leaderboard.md"}) {
    const std::string self = write(t, kind, R"({"name": "m", "out": ".", "runs": [)" + run_a + "]}");
    try {
      read_batch_manifest(self);
      ADD_FAILURE() << kind << ": a manifest the batch would overwrite was accepted";
    } catch (const std::invalid_argument& e) {
      EXPECT_NE(std::string(e.what()).find("is also a file the batch writes"), std::string::npos) << e.what();
    }
  }
  EXPECT_NE([&] {
    try {
      read_batch_manifest(t.path());
    } catch (const std::invalid_argument& e) {
      return std::string(e.what());
    }
    return std::string("(accepted)");
  }().find("is a folder"), std::string::npos);
  EXPECT_NE(error(R"({"runs": [{"configs": ["tiny"], "solutions": ["a.so"]}]})").find("'task' is required"), std::string::npos);
  EXPECT_NE(error(R"({"runs": [{"task": "matmul", "configs": ["tiny"], "solutions": ["a.so"]}]})").find("unknown task 'matmul'"),
            std::string::npos);
  EXPECT_NE(error(R"({"runs": [{"task": "megakernel-int4-weight-decode", "configs": ["huge"], "solutions": ["a.so"]}]})")
                .find("runs[0]"),
            std::string::npos);
  EXPECT_NE(error(R"({"runs": [{"task": "megakernel-int4-weight-decode", "configs": ["tiny"]}]})").find("needs 'solutions'"),
            std::string::npos);
  EXPECT_NE(error(R"({"runs": [{"task": "megakernel-int4-weight-decode", "configs": ["tiny"], "solutions": ["nope.so"]}]})")
                .find("does not exist"),
            std::string::npos);
  EXPECT_NE(error(R"({"runs": [{"task": "megakernel-int4-weight-decode", "configs": ["tiny"], "solution": ["a.so"]}]})")
                .find("unknown key 'solution'"),
            std::string::npos);
  EXPECT_NE(error(R"({"runs": [{"task": "megakernel-int4-weight-decode", "configs": "tiny", "solutions": ["a.so"]}]})")
                .find("'configs' has the wrong type"),
            std::string::npos);
}

TEST(Batch, OneJobPerGpuAtATimeAndResume) {
  TempDir t;
  const BatchManifest m = read_batch_manifest(two_solutions(t));
  FakeGrade fake;
  std::vector<std::string> lines;
  auto outcomes = run_batch(m, {0, 1, 2}, std::ref(fake), [&](const std::string& l) { lines.push_back(l); });
  EXPECT_EQ(fake.calls.load(), 6);
  EXPECT_EQ(fake.overlaps.load(), 0) << "a GPU ran two jobs at once";
  ASSERT_EQ(outcomes.size(), 6u);
  for (const auto& o : outcomes) EXPECT_TRUE(o.disposition == "Passed" || o.disposition == "Healthy") << o.disposition;
  EXPECT_EQ(lines.back(), "[batch] done 6 | running 0 | left 0");
  const auto summary = batch_summary(m, outcomes);
  EXPECT_EQ(summary["counts"]["Passed"], 4);
  EXPECT_EQ(summary["counts"]["Healthy"], 2);

  // Interrupted: two jobs lost their sidecars (cut off before the end); a solution was rebuilt.
  fs::remove(m.jobs[0].sidecar);
  fs::remove(m.jobs[5].sidecar);
  write(t, "b.so", "solution b, rebuilt");
  const BatchManifest again = read_batch_manifest(m.path);
  FakeGrade second;
  outcomes = run_batch(again, {0}, std::ref(second), {});
  std::vector<std::string> want = {again.jobs[0].id, again.jobs[1].id, again.jobs[3].id, again.jobs[5].id};
  std::sort(second.ran.begin(), second.ran.end());
  std::sort(want.begin(), want.end());
  EXPECT_EQ(second.ran, want)
      << "the cut-off jobs and b's (its bytes changed) run again, the rest are done";
  EXPECT_TRUE(outcomes[2].skipped);
  EXPECT_GT(outcomes[2].seconds, 0.0) << "a resumed job keeps the time of the run that did it";
  EXPECT_NE(format_batch_summary(batch_summary(again, outcomes)).find("(2 of them done by an earlier run: not run again)"), std::string::npos)
      << format_batch_summary(batch_summary(again, outcomes));
  // A report at a job's path that is another config's (copied there) is not that job's result.
  std::string other = read_file(again.jobs[2].report);
  other.replace(other.find(R"("config": "full")"), 16, R"("config": "tiny")");
  write_file_atomic(again.jobs[2].report, other);
  EXPECT_FALSE(batch_job_done(again.jobs[2]));
  // ... nor one of another solution, or of other seeds, with this job's task and config.
  const std::string mine = read_file(again.jobs[3].report);
  std::string foreign = mine;
  foreign.replace(foreign.find(again.jobs[3].solution_sha256), 64, std::string(64, '0'));
  write_file_atomic(again.jobs[3].report, foreign);
  EXPECT_FALSE(batch_job_done(again.jobs[3])) << "another solution's report counted as this job's";
  std::string reseeded = mine;
  reseeded.replace(reseeded.find(R"("seeds": [0,1])"), 15, R"("seeds": [0,2])");
  write_file_atomic(again.jobs[3].report, reseeded);
  EXPECT_FALSE(batch_job_done(again.jobs[3])) << "a report of other seeds counted as this job's";
  write_file_atomic(again.jobs[3].report, mine);
  EXPECT_TRUE(batch_job_done(again.jobs[3]));
  // The job's own report, edited to pass past its gate, is no result (collect counted it as passed).
  nlohmann::json edited = nlohmann::json::parse(mine);
  edited["correctness"]["worst_rel_err"] = 0.5;
  write_file_atomic(again.jobs[3].report, edited.dump());
  EXPECT_FALSE(batch_job_done(again.jobs[3]));
  write_file_atomic(again.jobs[3].report, mine);
  // A grader failure's report names the solution's path, not its hash: it is this job's result all
  // the same (a resume does not run it again), and another path's is not.
  const BatchJob& j3 = again.jobs[3];
  nlohmann::json failed = {{"schema", "nibble.report"}, {"task", j3.task},      {"config", j3.config},
                           {"seeds", j3.seeds},         {"solution", {{"path", j3.solution}}}, {"disposition", "GraderFailed"},
                           {"correctness", nlohmann::json::object()}};
  write_file_atomic(j3.report, failed.dump());
  EXPECT_TRUE(batch_job_done(j3));
  failed["solution"]["path"] = j3.solution + ".other";
  write_file_atomic(j3.report, failed.dump());
  EXPECT_FALSE(batch_job_done(j3));
  write_file_atomic(j3.report, mine);

  // b rebuilt again, and this time its grade writes no report: its old Passed report is not its result.
  write(t, "b.so", "solution b, rebuilt twice");
  const BatchManifest third = read_batch_manifest(m.path);
  outcomes = run_batch(third, {0}, [](const BatchJob&, int) { return 2; }, {});
  EXPECT_EQ(outcomes[1].disposition, "NoReport") << "an old report stood in for a grade that wrote none";
  EXPECT_EQ(collect_batch(third)["rows"][1]["state"], "failed");
  // A stopped batch: the job it did not finish has no sidecar, and is missing, not failed.
  write(t, "b.so", "solution b, rebuilt a third time");
  const BatchManifest fourth = read_batch_manifest(m.path);
  outcomes = run_batch(fourth, {0}, [](const BatchJob&, int) { return kBatchNotRun; }, {});
  EXPECT_EQ(outcomes[1].disposition, "NotRun");
  EXPECT_EQ(collect_batch(fourth)["rows"][1]["state"], "missing");
}

TEST(Batch, AStoppedBatchStartsNothingMoreAndSaysSo) {
  // The runner of the first job says the batch is stopping (Ctrl-C killed its grade): the other five
  // are not started, every one is NotRun, and the progress says so rather than "done 6" (a newcomer's
  // finding: the jobs never run were shown running, then done).
  TempDir t;
  const BatchManifest m = read_batch_manifest(two_solutions(t));
  std::atomic<int> calls{0};
  std::vector<std::string> lines;
  const auto outcomes = run_batch(m, {0}, [&](const BatchJob&, int) { ++calls; return kBatchNotRun; },
                                  [&](const std::string& l) { lines.push_back(l); });
  EXPECT_EQ(calls.load(), 1) << "jobs were started after the batch stopped";
  for (const auto& o : outcomes) EXPECT_EQ(o.disposition, "NotRun");
  ASSERT_FALSE(lines.empty());
  EXPECT_EQ(lines.back(), "[batch] done 0 | running 0 | left 0 | not run 6");
  for (const std::string& l : lines) EXPECT_EQ(l.find("done 6"), std::string::npos) << l;
}

TEST(Batch, FailuresAreLinesAndCollectSaysWhatToResubmit) {
  TempDir t;
  const BatchManifest m = read_batch_manifest(two_solutions(t));
  // Jobs 0-1 graded Incorrect (a result), job 2 crashed without a report, 3-5 never ran.
  FakeGrade fake;
  fake.disposition = "Incorrect";
  BatchManifest first = m;
  first.jobs = {m.jobs[0], m.jobs[1], m.jobs[2]};
  fs::create_directories(fs::path(m.jobs[2].log).parent_path());
  write_file_atomic(m.jobs[2].log, "nibble grade: an earlier run's message\n");
  const auto outcomes = run_batch(first, {-1}, [&](const BatchJob& j, int d) {
    if (j.index == 2) {  // no report, and what the grade said in its log, after what an earlier run said
      std::ofstream(j.log, std::ios::app) << "[nibble] probing the GPU\nnibble grade: no usable NVIDIA GPU, so nothing can be graded here.\n";
      return 3;
    }
    return fake(j, d);
  }, {});
  EXPECT_EQ(outcomes[1].disposition, "Incorrect");
  EXPECT_EQ(outcomes[2].disposition, "NoReport");
  EXPECT_NE(outcomes[2].reason.find("): nibble grade: no usable NVIDIA GPU"), std::string::npos) << outcomes[2].reason;
  // A job that cannot start (the runner throws: an unwritable log) is a line, the others still run.
  BatchManifest again = first;
  again.out = (fs::path(t.path()) / "again").string();
  for (BatchJob& j : again.jobs)
    for (std::string* p : {&j.report, &j.sidecar, &j.log}) *p = (fs::path(again.out) / fs::path(*p).filename()).string();
  fs::create_directories(again.out);
  const auto started = run_batch(again, {-1}, [&](const BatchJob& j, int d) {
    if (j.index == 1) throw std::runtime_error("cannot open child log x: File name too long");
    return fake(j, d);
  }, {});
  EXPECT_EQ(started[0].disposition, "Incorrect");
  EXPECT_EQ(started[1].disposition, "NoReport");
  EXPECT_EQ(started[1].exit_code, kBatchCouldNotStart);
  EXPECT_NE(started[1].reason.find("could not be started: cannot open child log x"), std::string::npos) << started[1].reason;
  EXPECT_EQ(started[2].disposition, "Incorrect");
  // A command-line error (an argument of the manifest's that the command does not take) is named.
  BatchManifest cli = again;
  cli.jobs = {again.jobs[0]};
  fs::remove(cli.jobs[0].sidecar);  // not done: it runs
  const auto refused = run_batch(cli, {-1}, [&](const BatchJob& j, int) {
    std::ofstream(j.log, std::ios::app) << "[nibble] a progress line\nThe following argument was not expected: --bogus\nRun with --help\n";
    return 2;
  }, {});
  EXPECT_NE(refused[0].reason.find("): The following argument was not expected: --bogus"), std::string::npos) << refused[0].reason;
  EXPECT_NE(format_batch_summary(batch_summary(first, outcomes)).find("NoReport: exit 3 without a readable report"), std::string::npos);
  const auto c = collect_batch(m);
  EXPECT_EQ(c["done"], 2);
  EXPECT_EQ(c["failed"], 1);
  EXPECT_EQ(c["missing"], 3);
  EXPECT_EQ(c["rows"][1]["disposition"], "Incorrect");
  EXPECT_EQ(c["not_passed"], 2);
  EXPECT_EQ(c["resubmit"], "nibble batch " + m.path + "  (on this host; or --slurm to submit the whole array)")
      << "no array script: the batch ran on this host";
  fs::create_directories(fs::path(slurm_script_path(m)).parent_path());
  write_file_atomic(slurm_script_path(m), slurm_array_script(m, "/opt/nibble/bin/nibble", "", ""));
  EXPECT_EQ(collect_batch(m)["resubmit"], "sbatch --array=2,3,4,5 " + (fs::path(m.out) / "slurm" / "t.sbatch").string());

  EXPECT_THROW(slurm_array_script(m, "/opt/nibble/bin/nibble", "gpu\n#SBATCH --foo", ""), std::invalid_argument);
  BatchManifest spaced = m;
  spaced.out = "/tmp/sp ace/res";
  EXPECT_THROW(slurm_array_script(spaced, "/opt/nibble/bin/nibble", "", ""), std::invalid_argument);
  const std::string script = slurm_array_script(m, "/opt/nibble/bin/nibble", "gpu", "30:00");
  for (const char* want : {"#SBATCH --array=0-5\n", "#SBATCH --gres=gpu:1\n", "#SBATCH --partition=gpu\n", "#SBATCH --time=30:00\n",
                           "--element \"$SLURM_ARRAY_TASK_ID\""})
    EXPECT_NE(script.find(want), std::string::npos) << want << "\n" << script;
  // sbatch's time forms, and what it would refuse only at submission.
  for (const char* ok : {"30", "30:00", "1:30:00", "2-0", "2-12", "2-12:30", "2-12:30:00", "UNLIMITED"})
    EXPECT_NO_THROW(slurm_array_script(m, "/opt/nibble/bin/nibble", "", ok)) << ok;
  for (const char* bad : {"abc", "1h", "30:", "1:2:3:4", "-5", "2-", "1.5"})
    EXPECT_THROW(slurm_array_script(m, "/opt/nibble/bin/nibble", "", bad), std::invalid_argument) << bad;
}

// After a run, the grade reports that exist make the batch's leaderboard (its page and Markdown).
TEST(Batch, TheReportsMakeALeaderboard) {
  TempDir t;
  write(t, "a.so", "solution a");
  write(t, "b.so", "solution b");
  const BatchManifest m = read_batch_manifest(write(t, "m.json", R"({"out": "res", "runs": [
    {"task": "megakernel-int4-weight-decode", "configs": ["full"], "seeds": [0, 1], "solutions": ["a.so", "b.so"]}]})"));
  EXPECT_EQ(write_batch_leaderboard(m), 0) << "no report yet: no leaderboard";
  const std::string graded = read_file(std::string(NIBBLE_TEST_SOURCE_DIR) + "/tests/data/reports/v2/h200-unfused-full.json");
  run_batch(m, {0}, [&](const BatchJob& j, int) {
    nlohmann::json r = nlohmann::json::parse(graded);  // a real grade's report, made this job's
    r["seeds"] = j.seeds;
    r["solution"]["sha256"] = j.solution_sha256;
    write_file_atomic(j.report, r.dump());
    return 0;
  }, {});
  EXPECT_EQ(write_batch_leaderboard(m), 2);
  const std::string md = read_file(m.out + "/m.leaderboard.md");
  EXPECT_NE(md.find("megakernel-int4-weight-decode / full"), std::string::npos) << md;
  EXPECT_NE(read_file(m.out + "/m.leaderboard.html").find("<html"), std::string::npos);
  // Both solutions rebuilt, their next grades left no report: the page ranks nothing that stands.
  for (const BatchJob& j : m.jobs) fs::remove(j.report);
  EXPECT_EQ(write_batch_leaderboard(m), 0);
  EXPECT_FALSE(fs::exists(m.out + "/m.leaderboard.md"));
  EXPECT_FALSE(fs::exists(m.out + "/m.leaderboard.html"));
}

TEST(Batch, AReportChangedByALaterJobIsNoResult) {
  // Job 0's report is rewritten while job 3 runs (its candidate, as this user, where Landlock was not
  // in force): job 0 ends ReportChanged, its sidecar goes, and a resume grades it again.
  TempDir t;
  const BatchManifest m = read_batch_manifest(two_solutions(t));
  FakeGrade fake;
  const auto outcomes = run_batch(
      m, {0},
      [&](const BatchJob& job, int slot) {
        const int code = fake(job, slot);
        if (job.index == 3) {
          std::ofstream(m.jobs[0].report) << R"({"schema": "nibble.report", "disposition": "Passed", "forged": true})";
          fs::remove(m.jobs[1].report);
          std::ofstream(m.jobs[2].report) << "planted";  // job 2 wrote none
        }
        return job.index == 2 ? (fs::remove(job.report), 3) : code;
      },
      {});
  ASSERT_EQ(outcomes.size(), 6u);
  EXPECT_EQ(outcomes[0].disposition, "ReportChanged");
  EXPECT_NE(outcomes[0].reason.find("was changed after its job ended"), std::string::npos) << outcomes[0].reason;
  EXPECT_EQ(outcomes[1].disposition, "ReportChanged");
  EXPECT_NE(outcomes[1].reason.find("was removed"), std::string::npos) << outcomes[1].reason;
  EXPECT_EQ(outcomes[2].disposition, "ReportChanged");
  EXPECT_NE(outcomes[2].reason.find("was put there after its job ended"), std::string::npos) << outcomes[2].reason;
  for (size_t i = 3; i < 6; ++i) EXPECT_TRUE(batch_disposition_passed(outcomes[i].disposition)) << i << " " << outcomes[i].disposition;
  EXPECT_FALSE(fs::exists(m.jobs[0].sidecar));
  EXPECT_FALSE(batch_job_done(m.jobs[0]));
  EXPECT_TRUE(batch_job_done(m.jobs[3]));

  // Resumed: a job done before is hashed as the resume found it; a report changed while the rest
  // ran is no result either.
  const auto again = run_batch(
      m, {0},
      [&](const BatchJob& job, int slot) {
        const int code = fake(job, slot);
        if (job.index == 0) std::ofstream(m.jobs[4].report, std::ios::app) << " ";
        return code;
      },
      {});
  EXPECT_TRUE(again[4].skipped);
  EXPECT_EQ(again[4].disposition, "ReportChanged") << again[4].reason;
  EXPECT_TRUE(batch_disposition_passed(again[5].disposition)) << again[5].disposition;
}
