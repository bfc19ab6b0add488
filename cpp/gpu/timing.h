// A process-wide record of the GPU backends' ts_* timings, so tools (the
// benchmark, the trainer's stats) can read them without a handle on a device.
#pragma once
#include <string>
#include <utility>
#include <vector>

namespace splat::gpu {

struct TimingEntry {
  std::string label;
  double total_ms = 0.0;  // summed over calls
  double last_ms = 0.0;
  size_t calls = 0;
};

// Adds one measurement of `label` (milliseconds).
void record_timing(const std::string& label, double ms);
// All labels recorded so far, in first-seen order; optionally clears them.
std::vector<TimingEntry> timings(bool reset);

// Device memory of the GPU backends (bytes), process-wide: the resident
// arenas now and at their high-water mark, and the driver's view of the
// device (used = total - free; 0 when the launcher cannot tell). The start
// figure is the driver's used memory when the process's first GPU device was
// made: its context exists then, no arena buffer does, so peak - start is
// what the process allocated beyond the context (and other processes' use).
struct MemoryStats {
  size_t arena_bytes = 0;
  size_t arena_peak_bytes = 0;
  size_t driver_used_bytes = 0;
  size_t driver_peak_used_bytes = 0;
  size_t driver_total_bytes = 0;
  size_t driver_start_used_bytes = 0;
};
// A device's arena changed by `delta` bytes (negative when released).
void record_arena_bytes(long long delta);
// The driver reported `used` of `total` bytes.
void record_driver_memory(size_t used, size_t total);
// A GPU device was made and the driver reported `used` bytes; kept from the
// first call only.
void record_driver_start(size_t used);
MemoryStats memory_stats(bool reset_peaks);

}  // namespace splat::gpu
