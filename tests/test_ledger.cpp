// test_ledger.cpp: the call ledger (harness/ledger.h) over its real pipes, the child's side played
// by a LedgerClient in this process: the parent's clock, its picks, and what it calls tampering.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>
#include <set>
#include <thread>
#include <vector>

#include "harness/ledger.h"

using namespace nibble;

namespace {

// The slow call's stall: far above the scheduling noise of a machine running the suite 16 tests
// at a time (a 3 ms stall once read 6.1 ms on an unslowed call there).
constexpr int kSlowMs = 50;

/** A digest whose first 8 bytes are `v`. */
Digest digest_of(uint64_t v) {
  Digest d{};
  std::memcpy(d.data(), &v, sizeof v);
  return d;
}

/** Calibration windows, then `rounds` full rounds, each "done" committing digest_of(r * 1000 + n);
 *  returns the kept answers in order, and the revealed seeds into `seeds` when given. */
std::vector<bool> run_rounds(LedgerClient& c, int rounds, int calls, int slow_call = -1, std::vector<uint64_t>* seeds = nullptr) {
  for (int i = 0; i < 3; ++i) {
    (void)c.open(-1, i);
    EXPECT_FALSE(c.done(-1, i, Digest{})) << "a calibration window is never kept";
  }
  std::vector<bool> kept;
  for (int r = 0; r < rounds; ++r)
    for (int n = 0; n < calls; ++n) {
      const uint64_t seed = c.open(r, n);
      if (seeds) seeds->push_back(seed);
      if (r == 0 && n == slow_call) std::this_thread::sleep_for(std::chrono::milliseconds(kSlowMs));
      kept.push_back(c.done(r, n, digest_of(uint64_t(r) * 1000 + uint64_t(n))));
    }
  return kept;
}

}  // namespace

TEST(Ledger, EveryRoundHasItsPicksAndEveryCallItsWindow) {
  CallLedger l(8, 2, std::nullopt, "");
  LedgerClient c(l.child_read_fd(), l.child_write_fd());
  std::vector<uint64_t> seeds;
  const std::vector<bool> answers = run_rounds(c, 3, 8, 5, &seeds);
  l.finish();
  EXPECT_EQ(l.violation(), "");
  ASSERT_EQ(l.calls().size(), 24u);
  EXPECT_EQ(l.calibration().size(), 3u);
  for (int r = 0; r < 3; ++r) {
    int kept = 0;
    for (int n = 0; n < 8; ++n) {
      const LedgerCall& k = l.calls()[size_t(r * 8 + n)];
      EXPECT_EQ(k.round, r);
      EXPECT_EQ(k.call, n);
      EXPECT_EQ(k.kept, answers[size_t(r * 8 + n)]) << "the ledger records what it answered";
      EXPECT_EQ(k.seed, seeds[size_t(r * 8 + n)]) << "and the seed it revealed";
      EXPECT_EQ(k.digest, digest_of(uint64_t(r) * 1000 + uint64_t(n))) << "and the digest the call committed";
      kept += k.kept;
    }
    EXPECT_EQ(kept, 2) << "round " << r;
  }
  // The parent's clock saw the stall the child spent inside call 5 of round 0, and only there.
  EXPECT_GE(l.calls()[5].window_us, kSlowMs * 1000.0);
  // 24 seeds of 64 bits from the OS-seeded generator: all distinct (a repeat has p ~ 2^-55).
  EXPECT_EQ(std::set<uint64_t>(seeds.begin(), seeds.end()).size(), seeds.size());
  EXPECT_LT(l.calls()[4].window_us, kSlowMs * 1000.0);
  // No driver here, or one: either way the reason is said when NVML is not used.
  if (!l.nvml_available()) {
    EXPECT_FALSE(l.nvml_why().empty());
  }
}

TEST(Ledger, PicksAndInputSeedsComeFromTheSeedWhenGivenElseFromTheOs) {
  auto draws = [](std::optional<uint64_t> seed) {
    CallLedger l(16, 2, seed, "");
    LedgerClient c(l.child_read_fd(), l.child_write_fd());
    std::vector<uint64_t> seeds;
    const std::vector<bool> a = run_rounds(c, 4, 16, -1, &seeds);
    l.finish();
    return std::make_pair(a, seeds);
  };
  EXPECT_EQ(draws(42), draws(42)) << "--timing-seed: reproducible";
  // Four rounds of 2 picks out of 16: two OS-seeded runs agree by chance with p = (1/120)^4.
  const auto a = draws(std::nullopt), b = draws(std::nullopt);
  EXPECT_NE(a.first, b.first);
  EXPECT_NE(a.second, b.second);
}

// Picks are drawn as each call is done (sequential sampling): exactly the round's number, and every
// call of a round as likely as any other to be one. 800 rounds of 8 calls, 1 kept: each place ~100
// times (sd 9.4; the bounds are 4.3 sd).
TEST(Ledger, EveryCallOfARoundIsAsLikelyKept) {
  CallLedger l(8, 1, 3, "");
  LedgerClient c(l.child_read_fd(), l.child_write_fd());
  std::vector<int> per_call(8, 0);
  for (int r = 0; r < 800; ++r) {
    int kept = 0;
    for (int n = 0; n < 8; ++n) {
      (void)c.open(r, n);
      const bool k = c.done(r, n, Digest{});
      kept += k;
      per_call[size_t(n)] += k;
    }
    ASSERT_EQ(kept, 1) << "round " << r;
  }
  l.finish();
  for (int n = 0; n < 8; ++n) {
    EXPECT_GT(per_call[size_t(n)], 60) << "call " << n;
    EXPECT_LT(per_call[size_t(n)], 140) << "call " << n;
  }
}

TEST(Ledger, ACallOutOfSequenceIsTamperingAndGetsNoAnswer) {
  CallLedger l(8, 1, 1, "");
  LedgerClient c(l.child_read_fd(), l.child_write_fd(), 0.3);
  (void)c.open(0, 0);
  (void)c.done(0, 0, Digest{});
  EXPECT_THROW((void)c.open(0, 2), std::runtime_error) << "call 1 skipped: no seed is revealed";
  l.finish();
  EXPECT_NE(l.violation().find("out of sequence (round 0, call 2)"), std::string::npos) << l.violation();
  EXPECT_EQ(l.calls().size(), 1u);
}

TEST(Ledger, AForeignWriteAndADoneWithoutOpenAreTampering) {
  {
    CallLedger l(8, 1, 1, "");
    const char junk[16] = "not a message!!";
    ASSERT_EQ(write(l.child_write_fd(), junk, sizeof junk), ssize_t(sizeof junk));
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    l.finish();
    EXPECT_NE(l.violation().find("not the harness's"), std::string::npos) << l.violation();
  }
  {
    CallLedger l(8, 1, 1, "");
    LedgerClient c(l.child_read_fd(), l.child_write_fd(), 0.3);
    EXPECT_THROW((void)c.done(0, 0, Digest{}), std::runtime_error);
    l.finish();
    EXPECT_NE(l.violation().find("done that was not open"), std::string::npos) << l.violation();
  }
  // A "done" whose digest is not the one its check was made for (a torn or edited commitment).
  {
    CallLedger l(8, 1, 1, "");
    LedgerClient c(l.child_read_fd(), l.child_write_fd(), 0.3);
    (void)c.open(0, 0);
    // Check words 0 and 1, neither that of this digest (the check folds the digest in).
    LedgerMessage m{LedgerMessage::Done, 0, 0, 0, {}};
    for (uint32_t check : {0u, 1u}) {
      m.check = check;
      m.digest[5] = 7;
      ASSERT_EQ(write(l.child_write_fd(), &m, sizeof m), ssize_t(sizeof m));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    l.finish();
    EXPECT_NE(l.violation().find("not the harness's"), std::string::npos) << l.violation();
  }
  // Packets of the wrong size, an empty one included (recvmsg's 0 is not an end here): tampering.
  for (const size_t bytes : {size_t(0), size_t(3), size_t(16), size_t(24), size_t(49)}) {  // 16, 24: the sizes before BLAKE3
    CallLedger l(8, 1, 1, "");
    const std::vector<char> packet(bytes, 'x');
    ASSERT_EQ(write(l.child_write_fd(), packet.data(), bytes), ssize_t(bytes));
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    l.finish();
    EXPECT_NE(l.violation().find("a message of " + std::to_string(bytes) + " bytes"), std::string::npos)
        << bytes << ": " << l.violation();
  }
}

TEST(Ledger, ARoundMustBeCompleteBeforeTheNext) {
  CallLedger l(4, 1, 1, "");
  LedgerClient c(l.child_read_fd(), l.child_write_fd(), 0.3);
  for (int n = 0; n < 3; ++n) {
    (void)c.open(0, n);
    (void)c.done(0, n, Digest{});
  }
  EXPECT_THROW((void)c.open(1, 0), std::runtime_error) << "round 0 had 4 calls; the fourth never ran";
  l.finish();
  EXPECT_NE(l.violation().find("out of sequence"), std::string::npos) << l.violation();
}

TEST(Ledger, ACalibrationWindowsSpanComesOnceAfterItsDone) {
  {
    CallLedger l(4, 1, 1, "");
    LedgerClient c(l.child_read_fd(), l.child_write_fd());
    for (int i = 0; i < 3; ++i) {
      (void)c.open(-1, i);
      (void)c.done(-1, i, Digest{});
      if (i != 1) c.span(-1, i, 2.25 + i, true);  // window 1 sends none: 0, which the grader drops
    }
    (void)c.open(0, 0);
    (void)c.done(0, 0, Digest{});
    l.finish();
    EXPECT_EQ(l.violation(), "");
    ASSERT_EQ(l.calibration().size(), 3u);
    EXPECT_EQ(l.calibration()[0].span_us, 2.25);
    EXPECT_EQ(l.calibration()[1].span_us, 0.0);
    EXPECT_EQ(l.calibration()[2].span_us, 4.25);
  }
  // Out of sequence: a second span, one while a window is open, one for a timed call, one that is
  // no duration. Each is tampering.
  const auto tampered = [](const std::function<void(LedgerClient&)>& f) {
    CallLedger l(4, 1, 1, "");
    LedgerClient c(l.child_read_fd(), l.child_write_fd(), 0.3);
    try {
      f(c);
    } catch (const std::runtime_error&) {
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(200));
    l.finish();
    return l.violation();
  };
  EXPECT_NE(tampered([](LedgerClient& c) {
              (void)c.open(-1, 0);
              (void)c.done(-1, 0, Digest{});
              c.span(-1, 0, 2, true);
              c.span(-1, 0, 1, true);
            }).find("calibration span out of sequence"),
            std::string::npos);
  EXPECT_NE(tampered([](LedgerClient& c) {
              (void)c.open(-1, 0);
              c.span(-1, 0, 2, true);
            }).find("calibration span out of sequence"),
            std::string::npos);
  EXPECT_NE(tampered([](LedgerClient& c) {
              (void)c.open(0, 0);
              (void)c.done(0, 0, Digest{});
              c.span(-1, 0, 2, true);
            }).find("calibration span out of sequence"),
            std::string::npos);
  EXPECT_NE(tampered([](LedgerClient& c) {
              (void)c.open(-1, 0);
              (void)c.done(-1, 0, Digest{});
              c.span(-1, 0, -5, true);
            }).find("no duration"),
            std::string::npos);
}

// The parent takes the harness's calibration windows and no more: windows opened after them (by a
// solution's load-time code, before round 0) would each add a slow window to the overhead credited to
// every timed call.
TEST(Ledger, NoCalibrationWindowBeyondTheHarnesss) {
  CallLedger l(4, 1, 1, "", 3);
  LedgerClient c(l.child_read_fd(), l.child_write_fd(), 0.3);
  for (int i = 0; i < 3; ++i) {
    (void)c.open(-1, i);
    (void)c.done(-1, i, Digest{});
    c.span(-1, i, 1.0, true);
  }
  EXPECT_THROW((void)c.open(-1, 3), std::runtime_error) << "a fourth window gets no seed";
  l.finish();
  EXPECT_NE(l.violation().find("a calibration window beyond the harness's 3 (round -1, call 3)"), std::string::npos)
      << l.violation();
  EXPECT_EQ(l.calibration().size(), 3u);
}

// A child that sends without reading the answers fills their pipe (64 KiB: ~6,600 calls): the
// ledger calls it tampering and finish() still returns at once (the answers never block its thread).
TEST(Ledger, AChildThatNeverReadsItsAnswersCannotStallTheParent) {
  CallLedger l(4, 1, 1, "", 1 << 20);
  const auto t0 = std::chrono::steady_clock::now();
  std::thread flood([&] {
    LedgerMessage m{};
    for (int i = 0; i < 20000; ++i)
      for (const LedgerMessage::Kind k : {LedgerMessage::Open, LedgerMessage::Done}) {
        m = LedgerMessage{k, -1, i, ledger_check(k, -1, i, Digest{}.data()), {}};
        if (write(l.child_write_fd(), &m, sizeof m) != ssize_t(sizeof m)) return;  // the socket is full: enough
      }
  });
  flood.join();
  std::this_thread::sleep_for(std::chrono::milliseconds(300));
  l.finish();
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 20.0);
  EXPECT_NE(l.violation().find("unread"), std::string::npos) << l.violation();
}

// After a violation the answers' pipe closes: the harness's next wait ends at once with the ledger's
// error, not at its timeout (30 s in the child).
TEST(Ledger, AfterAViolationTheChildsWaitEndsAtOnce) {
  CallLedger l(4, 1, 1, "");
  LedgerClient c(l.child_read_fd(), l.child_write_fd(), 20);
  const char junk[16] = "not a message!!";
  ASSERT_EQ(write(l.child_write_fd(), junk, sizeof junk), ssize_t(sizeof junk));
  const auto t0 = std::chrono::steady_clock::now();
  EXPECT_THROW((void)c.open(0, 0), std::runtime_error);
  EXPECT_LT(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count(), 10.0);
  l.finish();
  EXPECT_NE(l.violation().find("not the harness's"), std::string::npos) << l.violation();
}

// A timed call's span is committed as it closes; the result must report the same (uncommitted_timing).
TEST(Ledger, ATimedCallsSpanIsCommittedAsItClosesAndTheResultMustAgree) {
  CallLedger l(2, 1, 1, "");
  LedgerClient c(l.child_read_fd(), l.child_write_fd(), 0.3);
  const std::vector<double> spans = {12.5, 0.1 + 0.2, 7.0, 0.0};
  for (int r = 0; r < 2; ++r)
    for (int n = 0; n < 2; ++n) {
      (void)c.open(r, n);
      (void)c.done(r, n, Digest{});
      const size_t i = size_t(2 * r + n);
      if (i != 2) c.span(r, n, spans[i], i != 3);  // call (1, 0) commits none; (1, 1) an invalid one
    }
  l.finish();  // the last span is read although it came just before
  EXPECT_EQ(l.violation(), "");
  ASSERT_EQ(l.calls().size(), 4u);
  EXPECT_TRUE(l.calls()[1].span_committed);
  EXPECT_EQ(l.calls()[1].span_us, 0.1 + 0.2) << "the double itself, bit for bit";
  EXPECT_FALSE(l.calls()[2].span_committed);
  EXPECT_TRUE(l.calls()[3].span_committed);
  EXPECT_FALSE(l.calls()[3].span_valid);

  std::vector<LedgerCall> calls = l.calls();
  calls[2].span_us = spans[2];
  calls[2].span_committed = calls[2].span_valid = true;
  TimingAudit audit;
  audit.invalid_samples = 1;
  audit.gaps_with_foreign_work = 4;
  EXPECT_EQ(uncommitted_timing(calls, audit, spans, audit), "");
  EXPECT_EQ(uncommitted_timing(l.calls(), audit, spans, audit), "round 1, call 0: no span committed as it closed");
  std::vector<double> halved = spans;
  for (double& v : halved) v /= 2;
  const std::string h = uncommitted_timing(calls, audit, halved, audit);
  EXPECT_EQ(h.rfind("round 0, call 0: 12.500000 us committed, 6.250000 us reported (and 2 more)", 0), 0u) << h;
  TimingAudit none_invalid = audit;
  none_invalid.invalid_samples = 0;
  EXPECT_NE(uncommitted_timing(calls, audit, spans, none_invalid).find("1 calls committed as without a valid GPU record, 0 reported"),
            std::string::npos);
  EXPECT_EQ(uncommitted_timing(calls, audit, {1.0}, audit), "") << "a count that differs is its own finding";
  // The audit counts: as committed after the last call, or none committed at all.
  TimingAudit cleaned = audit;
  cleaned.gaps_with_foreign_work = 0;
  const std::string a = uncommitted_timing(calls, audit, spans, cleaned);
  EXPECT_NE(a.find("the audit committed invalid_samples 1, gaps_with_foreign_work 4"), std::string::npos) << a;
  EXPECT_NE(a.find("the result reports invalid_samples 1, gaps_with_foreign_work 0"), std::string::npos) << a;
  EXPECT_EQ(uncommitted_timing(calls, std::nullopt, spans, audit), "the timed phase's audit was never committed");
}

// The audit comes once, after the last call's span; nothing comes after it.
TEST(Ledger, TheAuditComesOnceAfterTheLastSpan) {
  TimingAudit a;
  a.late_kernels = 2;
  a.dropped_records = 7;
  {
    CallLedger l(2, 1, 1, "");
    LedgerClient c(l.child_read_fd(), l.child_write_fd(), 0.3);
    for (int n = 0; n < 2; ++n) {
      (void)c.open(0, n);
      (void)c.done(0, n, Digest{});
      c.span(0, n, 1.0 + n, true);
    }
    c.audit(a);
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    EXPECT_THROW((void)c.open(1, 0), std::runtime_error) << "a call after the audit";
    l.finish();
    ASSERT_TRUE(l.audit().has_value());
    EXPECT_EQ(*l.audit(), a);
    EXPECT_NE(l.violation().find("a message after the timed phase's audit"), std::string::npos) << l.violation();
  }
  {  // before the last call's span: out of sequence
    CallLedger l(2, 1, 1, "");
    LedgerClient c(l.child_read_fd(), l.child_write_fd(), 0.3);
    (void)c.open(0, 0);
    (void)c.done(0, 0, Digest{});
    c.audit(a);
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    l.finish();
    EXPECT_FALSE(l.audit().has_value());
    EXPECT_NE(l.violation().find("an audit out of sequence"), std::string::npos) << l.violation();
  }
}

TEST(Ledger, ATimedCallsSpanOutOfSequenceIsTampering) {
  CallLedger l(4, 1, 1, "");
  LedgerClient c(l.child_read_fd(), l.child_write_fd(), 0.3);
  (void)c.open(0, 0);
  (void)c.done(0, 0, Digest{});
  c.span(0, 0, 3.0, true);
  c.span(0, 0, 1.0, true);  // a second one: a solution's, after the harness's
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  l.finish();
  EXPECT_NE(l.violation().find("a timed call's span out of sequence (round 0, call 0)"), std::string::npos) << l.violation();
  EXPECT_EQ(l.calls()[0].span_us, 3.0);
}

TEST(Ledger, TheHostLaunchTimeIsTheFirstMessageOnly) {
  {  // first: taken, and the calls go on
    CallLedger l(1, 1, 1, "");
    LedgerClient c(l.child_read_fd(), l.child_write_fd(), 0.3);
    c.host(5.38);
    (void)c.open(-1, 0);
    (void)c.done(-1, 0, Digest{});
    (void)c.open(0, 0);
    (void)c.done(0, 0, Digest{});
    l.finish();
    EXPECT_EQ(l.violation(), "");
    ASSERT_TRUE(l.host_launch_us().has_value());
    EXPECT_EQ(*l.host_launch_us(), 5.38);
    EXPECT_EQ(l.calls().size(), 1u);
  }
  {  // none sent: none taken (the allowance's host part stays 1x)
    CallLedger l(1, 1, 1, "");
    LedgerClient c(l.child_read_fd(), l.child_write_fd(), 0.3);
    (void)c.open(0, 0);
    (void)c.done(0, 0, Digest{});
    l.finish();
    EXPECT_EQ(l.violation(), "");
    EXPECT_FALSE(l.host_launch_us().has_value());
  }
  // After any other message (a solution's, to raise the allowance), a second one, or no duration:
  // tampering, and the figure is not taken.
  for (const int when : {0, 1, 2, 3}) {
    CallLedger l(2, 1, 1, "");
    LedgerClient c(l.child_read_fd(), l.child_write_fd(), 0.3);
    if (when == 1) c.host(2.6);
    if (when == 0) {
      (void)c.open(-1, 0);
      (void)c.done(-1, 0, Digest{});
      (void)c.open(0, 0);
      (void)c.done(0, 0, Digest{});
    }
    c.host(when == 2 ? std::nan("") : when == 3 ? -1.0 : 50.0);
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    l.finish();
    const char* want = when <= 1 ? "a host launch time after the first message (round -1, call -1)"
                                 : "a host launch time that is no duration";
    EXPECT_NE(l.violation().find(want), std::string::npos) << when << ": " << l.violation();
    if (when == 1) EXPECT_EQ(l.host_launch_us().value_or(0), 2.6);
    else EXPECT_FALSE(l.host_launch_us().has_value()) << when;
  }
  {  // first, but named for a call (a well-formed message no harness sends): tampering
    CallLedger l(1, 1, 1, "");
    Digest d{};
    const double us = 50.0;
    std::memcpy(d.data(), &us, sizeof us);
    LedgerMessage m{LedgerMessage::Host, 0, 0, ledger_check(LedgerMessage::Host, 0, 0, d.data()), {}};
    std::memcpy(m.digest, d.data(), sizeof m.digest);
    ASSERT_EQ(write(l.child_write_fd(), &m, sizeof m), ssize_t(sizeof m));
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    l.finish();
    EXPECT_NE(l.violation().find("a host launch time for a call (it belongs to none: round -1, call -1) (round 0, call 0)"),
              std::string::npos) << l.violation();
    EXPECT_FALSE(l.host_launch_us().has_value());
  }
}

// descends_from over a real process tree: this test, a child, the child's child.
TEST(Ledger, AProcessDescendsFromItsParentsParent) {
  int ready[2];
  ASSERT_EQ(pipe(ready), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    const pid_t grandchild = fork();
    if (grandchild == 0) {
      pause();
      _exit(0);
    }
    (void)!write(ready[1], &grandchild, sizeof grandchild);
    int st = 0;
    waitpid(grandchild, &st, 0);
    _exit(0);
  }
  pid_t grandchild = 0;
  ASSERT_EQ(read(ready[0], &grandchild, sizeof grandchild), ssize_t(sizeof grandchild));
  EXPECT_TRUE(descends_from(grandchild, getpid()));
  EXPECT_TRUE(descends_from(grandchild, child));
  EXPECT_TRUE(descends_from(child, getpid()));
  EXPECT_FALSE(descends_from(getpid(), child));
  EXPECT_FALSE(descends_from(child, grandchild));
  EXPECT_FALSE(descends_from(1, getpid())) << "init descends from nothing";
  EXPECT_FALSE(descends_from(grandchild, getpid(), "/nonexistent")) << "a pid not to be found is not a descendant";
  kill(grandchild, SIGKILL);
  int st = 0;
  waitpid(child, &st, 0);
  close(ready[0]);
  close(ready[1]);
}

// Every message comes from the child: one another process sends (a helper the solution forked,
// holding the socket) is tampering.
TEST(Ledger, AMessageFromAnotherProcessIsTampering) {
  CallLedger l(4, 1, 1, "");
  LedgerClient c(l.child_read_fd(), l.child_write_fd(), 0.3);
  (void)c.open(0, 0);
  (void)c.done(0, 0, Digest{});
  const pid_t helper = fork();
  ASSERT_GE(helper, 0);
  if (helper == 0) {
    const LedgerMessage m{LedgerMessage::Open, 0, 1, ledger_check(LedgerMessage::Open, 0, 1, Digest{}.data()), {}};
    _exit(write(l.child_write_fd(), &m, sizeof m) == ssize_t(sizeof m) ? 0 : 1);
  }
  int st = 0;
  waitpid(helper, &st, 0);
  ASSERT_TRUE(WIFEXITED(st) && WEXITSTATUS(st) == 0);
  std::this_thread::sleep_for(std::chrono::milliseconds(200));
  l.finish();
  EXPECT_NE(l.violation().find("a message from process " + std::to_string(helper) + ", not the child (" + std::to_string(getpid()) + ")"),
            std::string::npos)
      << l.violation();
}

// finish() reads what the child sent before it ended: a burst of 3000 calibration windows sent
// without waiting (the answers fit the pipe) and finish() at once still finds every one.
TEST(Ledger, FinishReadsWhatWasSentBeforeIt) {
  CallLedger l(4, 1, 1, "", 1 << 20);
  for (int i = 0; i < 3000; ++i)
    for (const LedgerMessage::Kind k : {LedgerMessage::Open, LedgerMessage::Done}) {
      const LedgerMessage m{k, -1, i, ledger_check(k, -1, i, Digest{}.data()), {}};
      ASSERT_EQ(write(l.child_write_fd(), &m, sizeof m), ssize_t(sizeof m));
    }
  l.finish();
  EXPECT_EQ(l.violation(), "");
  EXPECT_EQ(l.calibration().size(), 3000u);
}
