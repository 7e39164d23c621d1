// cupti_timer.h: GPU activity records (kernels, memcpy, memset, on every stream and every launch
// path) collected through CUPTI's activity API, so a timed call is measured by what the GPU did,
// not by what the candidate chose to tell us.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

namespace nibble {

struct ActivityRecord {
  enum Kind { Kernel, Memcpy, Memset } kind;
  uint64_t start_ns, end_ns;  // CUPTI timestamps (same clock as CuptiTimer::now)
  uint32_t stream_id;
};

/** What the GPU did inside one timed window. */
struct SpanStats {
  uint64_t span_ns = 0;  // last record's end - first record's start (the GPU span)
  uint64_t busy_ns = 0;  // length of the union of the records' intervals
  int kernels = 0, memcpys = 0, memsets = 0;
  bool valid = false;    // false when no record fell in the window or a record had end <= start
  std::string invalid_reason;
};

/** Summarise the records of one window. */
SpanStats span_of(const std::vector<ActivityRecord>& records);

/**
 * Owns the process's CUPTI activity subscription (CUPTI's callbacks are process-global, so at most
 * one instance may exist). Constructing enables CONCURRENT_KERNEL, MEMCPY, MEMCPY2 (peer) and MEMSET records;
 * destroying disables them. Throws std::runtime_error with CUPTI's message on failure.
 */
class CuptiTimer {
 public:
  CuptiTimer();
  ~CuptiTimer();
  CuptiTimer(const CuptiTimer&) = delete;
  CuptiTimer& operator=(const CuptiTimer&) = delete;

  /** Enable the record kinds again (a solution may have disabled one: CUPTI's switches are
   *  process-wide); called before each timed window. Throws as the constructor. */
  void reenable();
  /** CUPTI's id of `s`, the stream_id its records carry. Throws std::runtime_error. */
  uint32_t stream_id(cudaStream_t s) const;
  /** CUPTI's timestamp in ns. */
  uint64_t now() const;
  /** Flush CUPTI's buffers and return (and forget) every record whose start lies in [t0, t1];
   *  records that started after t1 are kept for the next collect (so the work between two windows
   *  can be collected too); those that started before t0 are dropped, or moved to *late when given
   *  (a record CUPTI delivers only now although it started before the previous collect's end: work
   *  still running then, on a stream the harness did not synchronise). Call after the device is
   *  synchronised. */
  std::vector<ActivityRecord> collect(uint64_t t0, uint64_t t1, std::vector<ActivityRecord>* late = nullptr);
  /** CUPTI's API version. */
  static uint32_t version();
};

}  // namespace nibble
