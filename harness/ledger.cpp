// ledger.cpp: see ledger.h.
#include "harness/ledger.h"

#include <dlfcn.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstring>
#include <fstream>
#include <sstream>
#include <stdexcept>
#include <utility>

namespace nibble {

namespace {

int64_t realtime_ns() {
  timespec t{};
  clock_gettime(CLOCK_REALTIME, &t);
  return int64_t(t.tv_sec) * 1000000000 + t.tv_nsec;
}


void make_pipe(int fds[2]) {
  if (pipe2(fds, O_CLOEXEC) != 0) throw std::runtime_error(std::string("the call ledger's pipe: ") + std::strerror(errno));
}

void close_fd(int& fd) {
  if (fd >= 0) close(fd);
  fd = -1;
}

// NVML's C API as in nvml.h (the driver's libnvidia-ml.so.1), loaded at run time: no link-time
// dependency, so nibble runs where there is no driver.
using nvml_ret = int;  // nvmlReturn_t; 0 = NVML_SUCCESS
using nvml_init_fn = nvml_ret (*)();
using nvml_by_uuid_fn = nvml_ret (*)(const char*, void**);
using nvml_by_index_fn = nvml_ret (*)(unsigned, void**);
using nvml_shutdown_fn = nvml_ret (*)();
constexpr int kNvmlClockSm = 1, kNvmlClockMem = 2;  // nvmlClockType_t
constexpr int kNvmlInsufficientSize = 7;               // NVML_ERROR_INSUFFICIENT_SIZE

}  // namespace

NvmlDevice::NvmlDevice(const std::string& uuid) {
  lib_ = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  if (!lib_) {
    why_ = "libnvidia-ml.so.1 not found (no NVIDIA driver here)";
    return;
  }
  auto init = reinterpret_cast<nvml_init_fn>(dlsym(lib_, "nvmlInit_v2"));
  auto by_uuid = reinterpret_cast<nvml_by_uuid_fn>(dlsym(lib_, "nvmlDeviceGetHandleByUUID"));
  auto by_index = reinterpret_cast<nvml_by_index_fn>(dlsym(lib_, "nvmlDeviceGetHandleByIndex_v2"));
  if (!init || !by_uuid || !by_index) {
    why_ = "libnvidia-ml.so.1 lacks nvmlInit_v2 or the device lookups";
    return;
  }
  if (const nvml_ret r = init(); r != 0) {
    why_ = "nvmlInit_v2 failed (NVML error " + std::to_string(r) + ")";
    return;
  }
  initialized_ = true;
  void* dev = nullptr;
  const nvml_ret r = uuid.empty() ? by_index(0, &dev) : by_uuid(uuid.c_str(), &dev);
  if (r != 0) {
    why_ = "NVML does not know the GPU " + (uuid.empty() ? std::string("of index 0") : uuid) + " (NVML error " +
           std::to_string(r) + ")";
    return;
  }
  dev_ = dev;
  clock_ = reinterpret_cast<clock_fn>(dlsym(lib_, "nvmlDeviceGetClockInfo"));
  // The newer name first; drivers before 535 have only the older one.
  reasons_ = reinterpret_cast<reasons_fn>(dlsym(lib_, "nvmlDeviceGetCurrentClocksEventReasons"));
  if (!reasons_) reasons_ = reinterpret_cast<reasons_fn>(dlsym(lib_, "nvmlDeviceGetCurrentClocksThrottleReasons"));
  // nvmlProcessInfo_v2 and _v3 share one layout: {pid, usedGpuMemory, gpuInstanceId, computeInstanceId}.
  processes_ = reinterpret_cast<processes_fn>(dlsym(lib_, "nvmlDeviceGetComputeRunningProcesses_v3"));
  if (!processes_) processes_ = reinterpret_cast<processes_fn>(dlsym(lib_, "nvmlDeviceGetComputeRunningProcesses_v2"));
}

NvmlDevice::~NvmlDevice() {
  if (!lib_) return;
  if (initialized_)  // every successful nvmlInit_v2 is matched, a failed lookup after it included
    if (auto shutdown = reinterpret_cast<nvml_shutdown_fn>(dlsym(lib_, "nvmlShutdown"))) shutdown();
  dlclose(lib_);
}

void NvmlDevice::sample(LedgerCall& c) const {
  if (!dev_) return;
  unsigned mhz = 0;
  if (clock_ && clock_(dev_, kNvmlClockSm, &mhz) == 0) c.sm_mhz = mhz;
  if (clock_ && clock_(dev_, kNvmlClockMem, &mhz) == 0) c.mem_mhz = mhz;
  unsigned long long mask = 0;
  if (reasons_ && reasons_(dev_, &mask) == 0) c.clock_events = mask;
}

std::vector<GpuProcess> NvmlDevice::compute_processes(bool* listed) const {
  if (listed) *listed = false;
  struct Info {
    unsigned pid;
    unsigned long long used;
    unsigned gpu_instance, compute_instance;
  };
  std::vector<GpuProcess> out;
  if (!dev_ || !processes_) return out;
  std::vector<Info> info(64);
  unsigned n = unsigned(info.size());
  int r = processes_(dev_, &n, info.data());
  if (r == kNvmlInsufficientSize) {  // more than 64: NVML said how many
    info.resize(n + 8);
    n = unsigned(info.size());
    r = processes_(dev_, &n, info.data());
  }
  if (r != 0) return out;
  if (listed) *listed = true;
  for (unsigned i = 0; i < n && i < info.size(); ++i) out.push_back({info[i].pid, info[i].used});
  return out;
}

int NvmlDevice::device_count(std::string* why) {
  void* lib = dlopen("libnvidia-ml.so.1", RTLD_NOW | RTLD_LOCAL);
  auto fail = [&](const std::string& w) {
    if (why) *why = w;
    if (lib) dlclose(lib);
    return 0;
  };
  if (!lib) return fail("libnvidia-ml.so.1 not found (no NVIDIA driver here)");
  auto init = reinterpret_cast<nvml_init_fn>(dlsym(lib, "nvmlInit_v2"));
  auto count = reinterpret_cast<int (*)(unsigned*)>(dlsym(lib, "nvmlDeviceGetCount_v2"));
  auto shutdown = reinterpret_cast<nvml_shutdown_fn>(dlsym(lib, "nvmlShutdown"));
  if (!init || !count || !shutdown) return fail("libnvidia-ml.so.1 lacks nvmlInit_v2 or nvmlDeviceGetCount_v2");
  if (const nvml_ret r = init(); r != 0) return fail("nvmlInit_v2 failed (NVML error " + std::to_string(r) + ")");
  unsigned n = 0;
  const nvml_ret r = count(&n);
  shutdown();
  dlclose(lib);
  if (r != 0) {
    if (why) *why = "nvmlDeviceGetCount_v2 failed (NVML error " + std::to_string(r) + ")";
    return 0;
  }
  return int(n);
}

bool descends_from(pid_t pid, pid_t ancestor, const std::string& proc) {
  if (pid <= 1 || ancestor <= 0) return false;
  // Every generation up to init (a chain of a parent's parents cannot loop): a bound on the depth
  // would let a solution hide a helper below that many forks. pid_max is at most 2^22.
  for (int depth = 0; depth < (1 << 22) && pid > 1; ++depth) {
    std::ifstream stat(proc + "/" + std::to_string(pid) + "/stat");
    std::string line;
    if (!std::getline(stat, line)) return false;  // gone, or not in this pid namespace
    // "pid (comm) state ppid ...": comm may hold spaces and parentheses; the last ')' ends it.
    const size_t close = line.rfind(')');
    if (close == std::string::npos) return false;
    std::istringstream rest(line.substr(close + 1));
    std::string state;
    long ppid = 0;
    if (!(rest >> state >> ppid)) return false;
    if (pid_t(ppid) == ancestor) return true;
    pid = pid_t(ppid);
  }
  return false;
}

uint32_t ledger_check(uint32_t kind, int32_t round, int32_t call, const uint8_t* digest) {
  uint32_t h = kind ^ uint32_t(round) ^ (uint32_t(call) * 2654435761u) ^ kLedgerSalt;
  for (int i = 0; i < 32; ++i) h = (h ^ digest[i]) * 16777619u;  // FNV-1a over the digest
  return h;
}

uint64_t LedgerDraws::next() {
  if (mt_) return (*mt_)();
  return (uint64_t(dev_()) << 32) ^ uint64_t(dev_());  // random_device yields 32-bit words
}

CallLedger::CallLedger(int calls_per_round, int picks_per_round, std::optional<uint64_t> seed, const std::string& gpu_uuid,
                       int calibration_windows)
    : calls_per_round_(std::max(1, calls_per_round)),
      picks_per_round_(std::clamp(picks_per_round, 1, std::max(1, calls_per_round))),
      calibration_windows_(std::max(0, calibration_windows)),
      inputs_(seed, 0x696e70757473ull),  // "inputs"
      picks_rng_(seed, 0x6c6564676572ull),  // "ledger"
      gpu_uuid_(gpu_uuid) {
  // Child -> parent: a packet socket, so that the kernel stamps each message as the child sends it
  // (SO_TIMESTAMPNS): a window ends at the child's send of "done", whenever this thread gets to
  // read it (a loaded host wakes a thread late: stamps taken on receipt made windows ~10x too
  // short); it starts as this thread sends the seed.
  if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, to_parent_) != 0)
    throw std::runtime_error(std::string("the call ledger's socket: ") + std::strerror(errno));
  const int on = 1;
  try {
    if (setsockopt(to_parent_[0], SOL_SOCKET, SO_TIMESTAMPNS, &on, sizeof on) != 0)
      throw std::runtime_error(std::string("the call ledger's socket: SO_TIMESTAMPNS: ") + std::strerror(errno));
    // The sender's pid with every message (the kernel's word, in this process's pid namespace): the
    // child's own, and no other process's.
    if (setsockopt(to_parent_[0], SOL_SOCKET, SO_PASSCRED, &on, sizeof on) != 0)
      throw std::runtime_error(std::string("the call ledger's socket: SO_PASSCRED: ") + std::strerror(errno));
    make_pipe(to_child_);
    // The answers never block this thread: a child that does not read them cannot stall finish().
    if (fcntl(to_child_[1], F_SETFL, O_NONBLOCK) != 0)
      throw std::runtime_error(std::string("the call ledger's pipe: O_NONBLOCK: ") + std::strerror(errno));
  } catch (...) {
    close_fd(to_parent_[0]);
    close_fd(to_parent_[1]);
    throw;
  }
  thread_ = std::thread([this] { serve(); });
}

CallLedger::~CallLedger() { finish(); }

void CallLedger::finish() {
  stop_ = true;
  if (thread_.joinable()) thread_.join();
  for (int* fd : {&to_parent_[0], &to_parent_[1], &to_child_[0], &to_child_[1]}) close_fd(*fd);
}

void CallLedger::serve() {
  // NVML is opened on this thread, beside the child's start: its first use costs ~0.1 s.
  NvmlDevice nvml(gpu_uuid_);
  nvml_available_ = nvml.available();
  nvml_why_ = nvml.why();
  nvml_ = &nvml;
  LedgerMessage m{};
  // Until finish(), then until the socket is empty (for a second at most: a writer that never
  // stops cannot hold finish()): what the child sent before it ended is read.
  std::optional<std::chrono::steady_clock::time_point> drain_until;
  for (;;) {
    if (stop_ && !drain_until) drain_until = std::chrono::steady_clock::now() + std::chrono::seconds(1);
    if (drain_until && std::chrono::steady_clock::now() > *drain_until) break;
    pollfd p{to_parent_[0], POLLIN, 0};
    if (poll(&p, 1, drain_until ? 0 : 50) <= 0 || !(p.revents & POLLIN)) {
      if (drain_until) break;
      continue;
    }
    alignas(cmsghdr) char control[CMSG_SPACE(sizeof(timespec)) + CMSG_SPACE(sizeof(ucred))];
    iovec iov{&m, sizeof m};
    msghdr h{};
    h.msg_iov = &iov;
    h.msg_iovlen = 1;
    h.msg_control = control;
    h.msg_controllen = sizeof control;
    const ssize_t n = recvmsg(to_parent_[0], &h, MSG_TRUNC);  // MSG_TRUNC: n is the packet's real length
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) break;
    // n == 0 is an empty packet, not an end: this process holds the child's end until finish().
    int64_t sent_ns = realtime_ns();  // no stamp (never on Linux): the receipt is the bound
    pid_t sender = 0;
    for (cmsghdr* c = CMSG_FIRSTHDR(&h); c; c = CMSG_NXTHDR(&h, c))
      if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_TIMESTAMPNS) {
        timespec ts{};
        std::memcpy(&ts, CMSG_DATA(c), sizeof ts);
        sent_ns = int64_t(ts.tv_sec) * 1000000000 + ts.tv_nsec;
      } else if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_CREDENTIALS) {
        ucred cr{};
        std::memcpy(&cr, CMSG_DATA(c), sizeof cr);
        sender = cr.pid;
      }
    if (!violation_.empty()) continue;  // after a violation nothing is answered: the child stops
    if (child_pid_ == 0) child_pid_ = sender;
    if (size_t(n) != sizeof m || (h.msg_flags & (MSG_TRUNC | MSG_CTRUNC)))
      violation_ = "a message of " + std::to_string(n) + " bytes, not the harness's " + std::to_string(sizeof m);
    else if (sender != child_pid_)
      violation_ = "a message from process " + std::to_string(sender) + ", not the child (" + std::to_string(child_pid_) + ")";
    else
      handle(m, sent_ns);
    // The child's wait for an answer ends at once (the pipe's end), not at its timeout.
    if (!violation_.empty()) close_fd(to_child_[1]);
  }
  nvml_ = nullptr;
}

void CallLedger::handle(const LedgerMessage& m, int64_t t) {
  auto violate = [&](const std::string& why) {
    violation_ = why + " (round " + std::to_string(m.round) + ", call " + std::to_string(m.call) + ")";
  };
  if (m.check != ledger_check(m.kind, m.round, m.call, m.digest) ||
      (m.kind != LedgerMessage::Open && m.kind != LedgerMessage::Done && m.kind != LedgerMessage::Span &&
       m.kind != LedgerMessage::Audit && m.kind != LedgerMessage::Host))
    return violate("a message that is not the harness's");
  const bool first_message = !any_message_;
  any_message_ = true;
  if (m.kind == LedgerMessage::Host) {
    // The first message only: sent before the solution is loaded, nothing it does can change it.
    if (!first_message) return violate("a host launch time after the first message");
    if (m.round != -1 || m.call != -1) return violate("a host launch time for a call (it belongs to none: round -1, call -1)");
    double us = 0;
    std::memcpy(&us, m.digest, sizeof us);
    if (!std::isfinite(us) || us <= 0) return violate("a host launch time that is no duration");
    host_launch_us_ = us;
    return;
  }
  if (audit_) return violate("a message after the timed phase's audit");
  if (m.kind == LedgerMessage::Audit) {
    // Once, after the last timed call's span.
    if (is_open_ || calls_.empty() || !span_sent_ || m.round != last_round_ || m.call != last_call_)
      return violate("an audit out of sequence");
    TimingAudit a;
    std::memcpy(&a, m.digest, sizeof a);
    audit_ = a;
    return;
  }
  if (m.kind == LedgerMessage::Span) {
    // Once per call, after its "done" and before anything else.
    std::vector<LedgerCall>& calls = m.round < 0 ? calibration_ : calls_;
    const char* what = m.round < 0 ? "a calibration span" : "a timed call's span";
    if (is_open_ || m.round != last_round_ || m.call != last_call_ || calls.empty() || span_sent_)
      return violate(std::string(what) + " out of sequence");
    double us = 0;
    std::memcpy(&us, m.digest, sizeof us);
    if (!std::isfinite(us) || us < 0 || m.digest[8] > 1) return violate(std::string(what) + " that is no duration");
    calls.back().span_us = us;
    calls.back().span_valid = m.digest[8] == 1;
    calls.back().span_committed = true;
    span_sent_ = true;
    return;
  }
  span_sent_ = false;
  if (m.kind == LedgerMessage::Open) {
    if (is_open_) return violate("a call opened while another was open");
    // Calibration windows (round -1) first, then rounds 0, 1, ... of calls_per_round calls each.
    const bool first = last_round_ == -2 && (m.round == -1 || m.round == 0) && m.call == 0;
    const bool next_call = m.round == last_round_ && m.call == last_call_ + 1 &&
                           m.call < (m.round < 0 ? calibration_windows_ : calls_per_round_);
    const bool next_round = m.round == last_round_ + 1 && m.call == 0 &&
                            (last_round_ < 0 || last_call_ == calls_per_round_ - 1);
    if (m.round < 0 && m.call >= calibration_windows_)
      return violate("a calibration window beyond the harness's " + std::to_string(calibration_windows_));
    if (!first && !next_call && !next_round) return violate("a call out of sequence");
    if (m.round >= 0 && m.call == 0) picks_left_ = picks_per_round_;
    // The call's inputs exist from now on, and its window opens as their seed is sent: nothing can
    // be computed before, and the wait for this thread to wake is no part of the call.
    char reveal[1 + sizeof(uint64_t)] = {'R'};
    open_seed_ = inputs_.next();
    std::memcpy(reveal + 1, &open_seed_, sizeof open_seed_);
    open_ns_ = realtime_ns();
    if (const std::string why = answer(reveal, sizeof reveal, "the seed"); !why.empty()) return violate(why);
    is_open_ = true;
    open_round_ = m.round;
    open_call_ = m.call;
    return;
  }
  if (!is_open_ || m.round != open_round_ || m.call != open_call_) return violate("a call done that was not open");
  LedgerCall c;
  c.round = m.round;
  c.call = m.call;
  c.window_us = double(t - open_ns_) / 1e3;
  // Kept or not, decided now that the call is done: picks_left_ of the calls_left calls still to
  // come, each as likely (sequential sampling: exactly picks_per_round_ of every round, every subset
  // of that size as likely).
  if (m.round >= 0) {
    const uint64_t calls_left = uint64_t(calls_per_round_ - m.call);
    c.kept = picks_rng_.next() % calls_left < uint64_t(picks_left_);
    picks_left_ -= c.kept;
  }
  c.seed = open_seed_;
  std::memcpy(c.digest.data(), m.digest, sizeof m.digest);
  // Before the answer: the child waits for it, so the sample never delays the next "open" stamp.
  if (m.round >= 0) {
    nvml_->sample(c);
    // Every process with a context on this GPU now: one the child started (a helper process, whose
    // GPU work is in none of the child's records) is found while the child still runs.
    bool listed = false;
    const std::vector<GpuProcess> on_gpu = nvml_->compute_processes(&listed);
    c.gpu_processes = listed ? int(on_gpu.size()) : -1;
    for (const GpuProcess& p : on_gpu)
      if (pid_t(p.pid) != child_pid_ && descends_from(pid_t(p.pid), child_pid_) &&
          std::find(started_on_gpu_.begin(), started_on_gpu_.end(), p.pid) == started_on_gpu_.end())
        started_on_gpu_.push_back(p.pid);
  }
  const char kept = c.kept ? 'K' : 'S';
  if (const std::string why = answer(&kept, 1, "the answer"); !why.empty()) return violate(why);
  (m.round < 0 ? calibration_ : calls_).push_back(c);
  is_open_ = false;
  last_round_ = m.round;
  last_call_ = m.call;
}

std::string CallLedger::answer(const void* bytes, size_t n, const char* what) {
  for (;;) {
    const ssize_t w = write(to_child_[1], bytes, n);  // atomic: under PIPE_BUF
    if (w == ssize_t(n)) return "";
    if (w < 0 && errno == EINTR) continue;
    // The harness reads every answer before its next message: a full pipe is a child that does not.
    return std::string(what) + " could not be sent: " +
           (w < 0 && errno == EAGAIN ? std::string("the child left the answers to its earlier messages unread")
            : w < 0                  ? std::string(std::strerror(errno))
                                     : std::string("short write"));
  }
}

void LedgerClient::send(LedgerMessage::Kind k, int round, int call, const Digest& digest) {
  LedgerMessage m{k, round, call, ledger_check(k, round, call, digest.data()), {}};
  std::memcpy(m.digest, digest.data(), sizeof m.digest);
  for (;;) {
    const ssize_t n = write(wfd_, &m, sizeof m);  // one packet of the SOCK_SEQPACKET socket
    if (n == ssize_t(sizeof m)) return;
    if (n < 0 && errno == EINTR) continue;
    throw std::runtime_error(std::string("the grader's call ledger cannot be written: ") +
                             (n < 0 ? std::strerror(errno) : "short write"));
  }
}

char LedgerClient::answer(const char* tags, void* rest, size_t n, int round, int call) {
  std::vector<char> buf(1 + n);
  size_t got = 0;
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(timeout_);
  // The seed's answer falls inside the call's window, and a thread asleep in poll wakes only when
  // the scheduler gets to it (hundreds of us on a loaded host): its first 2 ms spin (poll without
  // waiting). A "done" answer is outside the window: it sleeps.
  const auto spin_until = std::chrono::steady_clock::now() + std::chrono::milliseconds(tags[0] == 'R' ? 2 : 0);
  while (got < buf.size()) {
    const auto now = std::chrono::steady_clock::now();
    const double left_ms = std::chrono::duration<double, std::milli>(deadline - now).count();
    if (left_ms <= 0) break;
    pollfd p{rfd_, POLLIN, 0};
    const int r = poll(&p, 1, now < spin_until ? 0 : int(std::ceil(left_ms)));
    if (r == 0 && now < spin_until) continue;
    if (r == 0) break;  // the deadline passed
    if (r < 0) {
      if (errno == EINTR) continue;
      break;
    }
    const ssize_t k = read(rfd_, buf.data() + got, buf.size() - got);
    if (k < 0 && errno == EINTR) continue;
    if (k <= 0) break;
    got += size_t(k);
  }
  if (got < buf.size() || !std::strchr(tags, buf[0]) || buf[0] == 0)
    throw std::runtime_error("the grader's call ledger did not answer for round " + std::to_string(round) + ", call " +
                             std::to_string(call) + " (its pipe was read or closed by someone else, or a call was out of sequence)");
  if (n) std::memcpy(rest, buf.data() + 1, n);
  return buf[0];
}

uint64_t LedgerClient::open(int round, int call) {
  send(LedgerMessage::Open, round, call, Digest{});
  uint64_t seed = 0;
  (void)answer("R", &seed, sizeof seed, round, call);
  return seed;
}

void LedgerClient::audit(const TimingAudit& a) {
  static_assert(sizeof(TimingAudit) <= sizeof(Digest), "an audit fits a message");
  Digest d{};
  std::memcpy(d.data(), &a, sizeof a);
  send(LedgerMessage::Audit, last_round_, last_call_, d);
}

namespace {
/** TimingAudit's counts by name, for comparing and saying them. */
constexpr std::pair<const char*, int32_t TimingAudit::*> kTimingAuditFields[] = {
    {"invalid_samples", &TimingAudit::invalid_samples},
    {"gaps_with_foreign_work", &TimingAudit::gaps_with_foreign_work},
    {"late_kernels", &TimingAudit::late_kernels},
    {"unrecorded_launches", &TimingAudit::unrecorded_launches},
    {"unrecorded_copies", &TimingAudit::unrecorded_copies},
    {"launch_callbacks_lost", &TimingAudit::launch_callbacks_lost},
    {"device_launch_graphs", &TimingAudit::device_launch_graphs},
    {"dropped_records", &TimingAudit::dropped_records}};
static_assert(sizeof(TimingAudit) == sizeof(kTimingAuditFields) / sizeof(kTimingAuditFields[0]) * sizeof(int32_t),
              "every count of TimingAudit is in kTimingAuditFields");
}  // namespace

bool TimingAudit::operator==(const TimingAudit& o) const {
  for (const auto& [name, field] : kTimingAuditFields)
    if (this->*field != o.*field) return false;
  return true;
}

std::string TimingAudit::text() const {
  std::string s;
  for (const auto& [name, field] : kTimingAuditFields) s += (s.empty() ? "" : ", ") + std::string(name) + " " + std::to_string(this->*field);
  return s;
}

void LedgerClient::host(double launch_us) {
  Digest d{};
  std::memcpy(d.data(), &launch_us, sizeof launch_us);
  send(LedgerMessage::Host, -1, -1, d);
}

void LedgerClient::span(int round, int call, double span_us, bool valid) {
  Digest d{};
  std::memcpy(d.data(), &span_us, sizeof span_us);
  d[8] = valid ? 1 : 0;
  send(LedgerMessage::Span, round, call, d);
  last_round_ = round;
  last_call_ = call;
}

std::string uncommitted_timing(const std::vector<LedgerCall>& calls, const std::optional<TimingAudit>& audit,
                               const std::vector<double>& spans_us, const TimingAudit& reported) {
  if (calls.size() != spans_us.size()) return "";  // the count's own finding (verdict.cpp)
  std::string first;
  int differ = 0, invalid = 0;
  for (size_t i = 0; i < calls.size(); ++i) {
    const LedgerCall& c = calls[i];
    invalid += c.span_committed && !c.span_valid;
    // Both sides are the same double (JSON round-trips it exactly): any difference is a rewrite.
    if (c.span_committed && c.span_us == spans_us[i]) continue;
    if (++differ == 1)
      first = "round " + std::to_string(c.round) + ", call " + std::to_string(c.call) + ": " +
              (c.span_committed ? std::to_string(c.span_us) + " us committed, " + std::to_string(spans_us[i]) + " us reported"
                                : "no span committed as it closed");
  }
  if (differ) return first + (differ > 1 ? " (and " + std::to_string(differ - 1) + " more)" : "");
  if (invalid != reported.invalid_samples)
    return std::to_string(invalid) + " calls committed as without a valid GPU record, " + std::to_string(reported.invalid_samples) +
           " reported";
  if (!audit) return "the timed phase's audit was never committed";
  if (*audit != reported) return "the audit committed " + audit->text() + "; the result reports " + reported.text();
  return "";
}

bool LedgerClient::done(int round, int call, const Digest& digest) {
  send(LedgerMessage::Done, round, call, digest);
  return answer("KS", nullptr, 0, round, call) == 'K';
}

}  // namespace nibble
