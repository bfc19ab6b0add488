#include "timing.h"

#include <mutex>

#include "launcher.h"

namespace splat::gpu {
namespace {

std::mutex& timing_mutex() {
  static std::mutex m;
  return m;
}

std::vector<TimingEntry>& timing_table() {
  static std::vector<TimingEntry> t;
  return t;
}

}  // namespace

const char* timing_label_name(TimingLabel l) {
  static const char* const names[kTimingLabelCount] = {
      "ts_fwd_upload",      "ts_fwd_project", "ts_fwd_emit_pairs", "ts_fwd_radix_sort", "ts_fwd_rasterize",
      "ts_fwd_readback",    "ts_bwd_upload",  "ts_backward_raster", "ts_project_back",  "ts_bwd_readback",
      "ts_ssim",            "ts_zero_grads",  "ts_adam",            "ts_densify",       "ts_upload",
      "ts_readback",        "ts_densify_stats",
  };
  size_t i = static_cast<size_t>(l);
  return i < kTimingLabelCount ? names[i] : "ts_unknown";
}

void record_timing(const std::string& label, double ms) {
  std::lock_guard<std::mutex> lock(timing_mutex());
  for (auto& e : timing_table()) {
    if (e.label == label) {
      e.total_ms += ms;
      e.last_ms = ms;
      ++e.calls;
      return;
    }
  }
  timing_table().push_back(TimingEntry{label, ms, ms, 1});
}

std::vector<TimingEntry> timings(bool reset) {
  std::lock_guard<std::mutex> lock(timing_mutex());
  std::vector<TimingEntry> out = timing_table();
  if (reset) timing_table().clear();
  return out;
}

namespace {

MemoryStats& memory_table() {
  static MemoryStats m;
  return m;
}

}  // namespace

void record_arena_bytes(long long delta) {
  std::lock_guard<std::mutex> lock(timing_mutex());
  MemoryStats& m = memory_table();
  long long now = static_cast<long long>(m.arena_bytes) + delta;
  m.arena_bytes = now > 0 ? static_cast<size_t>(now) : 0;
  if (m.arena_bytes > m.arena_peak_bytes) m.arena_peak_bytes = m.arena_bytes;
}

void record_driver_memory(size_t used, size_t total) {
  std::lock_guard<std::mutex> lock(timing_mutex());
  MemoryStats& m = memory_table();
  m.driver_used_bytes = used;
  m.driver_total_bytes = total;
  if (used > m.driver_peak_used_bytes) m.driver_peak_used_bytes = used;
}

void record_driver_start(size_t used) {
  std::lock_guard<std::mutex> lock(timing_mutex());
  MemoryStats& m = memory_table();
  if (m.driver_start_used_bytes == 0) m.driver_start_used_bytes = used;
}

MemoryStats memory_stats(bool reset_peaks) {
  std::lock_guard<std::mutex> lock(timing_mutex());
  MemoryStats out = memory_table();
  if (reset_peaks) {
    memory_table().arena_peak_bytes = memory_table().arena_bytes;
    memory_table().driver_peak_used_bytes = memory_table().driver_used_bytes;
  }
  return out;
}

}  // namespace splat::gpu
