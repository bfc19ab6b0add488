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

}  // namespace splat::gpu
