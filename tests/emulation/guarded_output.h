// guarded_output.h: an emulated kernel's output C with guard bands, and its check against a reference.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

namespace nibble::test {

/** C (n floats) between two guard bands, every float a NaN sentinel no computation produces. */
class GuardedOutput {
 public:
  struct Check {
    double rel_err = 0;     // ||C - ref||_2 / ||ref||_2
    int unwritten = 0;      // elements of C still holding the sentinel
    int guard_written = 0;  // guard floats changed (writes outside C)
  };
  explicit GuardedOutput(size_t n) : n_(n), buf_(n + 2 * kGuard) {
    for (float& f : buf_) std::memcpy(&f, &kSentinel, 4);
  }
  float* data() { return buf_.data() + kGuard; }
  Check check(const std::vector<double>& ref) const {
    Check c;
    double num = 0, den = 0;
    for (size_t i = 0; i < n_; ++i) {
      const float v = buf_[kGuard + i];
      c.unwritten += is_sentinel(v);
      num += (double(v) - ref[i]) * (double(v) - ref[i]);
      den += ref[i] * ref[i];
    }
    c.rel_err = std::sqrt(num / den);
    for (size_t i = 0; i < kGuard; ++i) c.guard_written += !is_sentinel(buf_[i]) + !is_sentinel(buf_[kGuard + n_ + i]);
    return c;
  }

 private:
  static constexpr uint32_t kSentinel = 0x7fc0deadu;
  static constexpr size_t kGuard = 1024;
  static bool is_sentinel(float f) {
    uint32_t u;
    std::memcpy(&u, &f, 4);
    return u == kSentinel;
  }
  size_t n_;
  std::vector<float> buf_;
};

}  // namespace nibble::test
