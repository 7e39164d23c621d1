// test_ledger.cpp: the call ledger (harness/ledger.h) over its real pipes, the child's side played
// by a LedgerClient in this process: the parent's clock, its picks, and what it calls tampering.
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <set>
#include <thread>
#include <vector>

#include "harness/ledger.h"

using namespace nibble;

namespace {

/** Calibration windows, then `rounds` full rounds; returns the kept answers in order. */
std::vector<bool> run_rounds(LedgerClient& c, int rounds, int calls, int slow_call = -1) {
  for (int i = 0; i < 3; ++i) {
    c.open(-1, i);
    EXPECT_FALSE(c.done(-1, i)) << "a calibration window is never kept";
  }
  std::vector<bool> kept;
  for (int r = 0; r < rounds; ++r)
    for (int n = 0; n < calls; ++n) {
      c.open(r, n);
      if (r == 0 && n == slow_call) std::this_thread::sleep_for(std::chrono::milliseconds(3));
      kept.push_back(c.done(r, n));
    }
  return kept;
}

}  // namespace

TEST(Ledger, EveryRoundHasItsPicksAndEveryCallItsWindow) {
  CallLedger l(8, 2, std::nullopt, "");
  LedgerClient c(l.child_read_fd(), l.child_write_fd());
  const std::vector<bool> answers = run_rounds(c, 3, 8, 5);
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
      kept += k.kept;
    }
    EXPECT_EQ(kept, 2) << "round " << r;
  }
  // The parent's clock saw the 3 ms the child spent inside call 5 of round 0.
  EXPECT_GE(l.calls()[5].window_us, 3000.0);
  EXPECT_LT(l.calls()[4].window_us, 3000.0);
  // No driver here, or one: either way the reason is said when NVML is not used.
  if (!l.nvml_available()) {
    EXPECT_FALSE(l.nvml_why().empty());
  }
}

TEST(Ledger, PicksComeFromTheSeedWhenGivenElseFromTheOs) {
  auto picks = [](std::optional<uint64_t> seed) {
    CallLedger l(16, 2, seed, "");
    LedgerClient c(l.child_read_fd(), l.child_write_fd());
    const std::vector<bool> a = run_rounds(c, 4, 16);
    l.finish();
    return a;
  };
  EXPECT_EQ(picks(42), picks(42)) << "--timing-seed: reproducible";
  // Four rounds of 2 picks out of 16: two OS-seeded runs agree by chance with p = (1/120)^4.
  EXPECT_NE(picks(std::nullopt), picks(std::nullopt));
}

TEST(Ledger, ACallOutOfSequenceIsTamperingAndGetsNoAnswer) {
  CallLedger l(8, 1, 1, "");
  LedgerClient c(l.child_read_fd(), l.child_write_fd(), 0.3);
  c.open(0, 0);
  (void)c.done(0, 0);
  c.open(0, 2);  // call 1 skipped
  EXPECT_THROW((void)c.done(0, 2), std::runtime_error);
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
    EXPECT_THROW((void)c.done(0, 0), std::runtime_error);
    l.finish();
    EXPECT_NE(l.violation().find("done that was not open"), std::string::npos) << l.violation();
  }
  // Packets of the wrong size, an empty one included (recvmsg's 0 is not an end here): tampering.
  for (const size_t bytes : {size_t(0), size_t(3), size_t(40)}) {
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
    c.open(0, n);
    (void)c.done(0, n);
  }
  c.open(1, 0);  // round 0 had 4 calls; the fourth never ran
  EXPECT_THROW((void)c.done(1, 0), std::runtime_error);
  l.finish();
  EXPECT_NE(l.violation().find("out of sequence"), std::string::npos) << l.violation();
}
