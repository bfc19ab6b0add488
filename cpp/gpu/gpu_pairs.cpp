// GpuDevice's pair buffers of training forwards sized on the device
// (docs/gpu.md, "Pairs sized on the device"): the capacity, its growth, and
// what the host reads at a sync point. The forward that uses them is
// gpu_device.cpp (forward_pass), the kernels shaders/kernels/tile_bin.h.
#include <algorithm>
#include <cstddef>

#include "gpu_device.h"
#include "splat/limits.h"

namespace splat::gpu {

BufferRef GpuDevice::count_unlimited() {
  if (arena_[kCountUnlimited].capacity == 0) {
    const uint32_t all = 0xffffffffu;
    launcher_->upload(ensure(kCountUnlimited, sizeof(all)), &all, sizeof(all));  // new: no kernel reads it yet
  }
  return ref(kCountUnlimited);
}

void GpuDevice::grow_pair_capacity(uint64_t pairs) {
  const uint64_t want = std::min<uint64_t>(kMaxPairs, pairs + pairs / 2 + 4096);
  pair_capacity_ = std::max<size_t>(pair_capacity_, static_cast<size_t>(want));
}

Device::PairOverflow GpuDevice::take_pair_overflow() {
  std::lock_guard<std::mutex> lock(mutex_);
  PairOverflow o;
  if (!pairs_on_device_ || arena_[kPairStatus].capacity == 0) return o;
  PairStatus st{};
  begin(TimingLabel::Readback);
  launcher_->download(&st, ref(kPairStatus), sizeof(st));
  // Forgotten once read, but for the last forward's count (`live`, read by
  // debug_snapshot); ordered before the next forward's pair_total.
  launcher_->fill_zero(ref(kPairStatus, offsetof(PairStatus, overflow)), sizeof(st) - offsetof(PairStatus, overflow));
  end(TimingLabel::Readback);
  const uint64_t seen = (uint64_t{st.max_hi} << 32) | st.max_lo;
  max_pairs_seen_ = seen;
  if (st.overflow) {
    o.happened = true;
    o.first_step = st.first_step;
    o.required = seen;
    o.saturated = st.saturated != 0;
    ++pair_overflows_;
  }
  // Grown when it overflowed, and before it does: past 90% of the capacity.
  if (!o.saturated && seen <= kMaxPairs && (o.happened || seen * 10 > uint64_t{pair_capacity_} * 9))
    grow_pair_capacity(seen);
  finish_op(false);
  return o;
}

void GpuDevice::set_pair_capacity(size_t pairs) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (pairs_on_device_) pair_capacity_ = std::min<size_t>(std::max<size_t>(pairs, 1), kMaxPairs);
}

}  // namespace splat::gpu
