#include "timing_registry.h"

namespace splat {

void TimingRegistry::add(const char* label, double compute_ms, double upload_ms, double alloc_ms,
                         double readback_ms) {
  std::lock_guard<std::mutex> lock(mutex_);
  TimingRecord* rec = nullptr;
  for (TimingRecord& r : records_)
    if (r.label == label) rec = &r;
  if (!rec) {
    records_.push_back(TimingRecord{});
    rec = &records_.back();
    rec->label = label;
  }
  ++rec->calls;
  rec->compute_ms += compute_ms;
  rec->upload_ms += upload_ms;
  rec->alloc_ms += alloc_ms;
  rec->readback_ms += readback_ms;
}

std::vector<TimingRecord> TimingRegistry::snapshot(bool reset) {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<TimingRecord> out = records_;
  if (reset) records_.clear();
  return out;
}

}  // namespace splat
