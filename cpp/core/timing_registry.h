// ts_* timings: accumulated per label, in first-seen order. Backends record
// into one when BackendConfig::timing is per_kernel; a null registry records
// nothing, so untimed code pays one branch.
#pragma once
#include <chrono>
#include <mutex>
#include <vector>

#include "splat/training.h"

namespace splat {

class TimingRegistry {
 public:
  void add(const char* label, double compute_ms, double upload_ms = 0.0, double alloc_ms = 0.0,
           double readback_ms = 0.0);
  std::vector<TimingRecord> snapshot(bool reset);

 private:
  std::mutex mutex_;
  std::vector<TimingRecord> records_;
};

// Wall time of a scope, recorded as compute time of `label`.
class ScopedTiming {
 public:
  ScopedTiming(TimingRegistry* registry, const char* label)
      : registry_(registry), label_(label), start_(std::chrono::steady_clock::now()) {}
  ~ScopedTiming() {
    if (!registry_) return;
    auto ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start_).count();
    registry_->add(label_, ms);
  }
  ScopedTiming(const ScopedTiming&) = delete;
  ScopedTiming& operator=(const ScopedTiming&) = delete;

 private:
  TimingRegistry* registry_;
  const char* label_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace splat
