// Each resident Gaussian's blend weight over a set of views
// (Device::blend_weights): per view the forward, then the raster backward
// under d_image = 1, whose colour gradient is the Gaussian's alpha T summed
// over the view's pixels, whatever its colour. The per-Gaussian (or, in the
// deterministic variant, per pair slot) gradients come back and are summed on
// the host in a fixed order: a once-a-run pass, not a step's.
#include <algorithm>
#include <vector>

#include "gpu_device.h"

namespace splat::gpu {

void GpuDevice::blend_weights(const CameraParams* cams, uint32_t count, std::vector<float>& weights) {
  std::lock_guard<std::mutex> lock(mutex_);
  have_train_step_ = false;  // the binning buffers now hold these renders'
  const size_t n = count_;
  weights.assign(n, 0.f);
  if (n == 0 || count == 0) return;
  size_t max_pixels = 0;
  for (uint32_t v = 0; v < count; ++v)
    max_pixels = std::max(max_pixels, static_cast<size_t>(cams[v].width) * cams[v].height);
  begin(TimingLabel::Upload);
  const std::vector<float> ones(3 * max_pixels, 1.f);
  const BufferRef d_image = ensure(kDImage, 12 * max_pixels);
  launcher_->upload(d_image, ones.data(), 12 * max_pixels);
  end(TimingLabel::Upload);
  const float black[3] = {0.f, 0.f, 0.f};
  const bool det = config_.deterministic;
  std::vector<double> sum(n, 0.0);
  std::vector<float> grads;
  std::vector<uint32_t> ranges;
  for (uint32_t v = 0; v < count; ++v) {
    forward_pass(state_params(), n, sh_stride_, cams[v], 0, black);
    backward_raster(d_image, nullptr, BufferRef{});
    begin(TimingLabel::Readback);
    // Colour is entry 6 of SPLAT_PAIR_GRAD per Gaussian, or per pair slot.
    const size_t items = det ? pair_slots_ : n;
    grads.resize(SPLAT_PAIR_GRAD * items);
    if (items) launcher_->download(grads.data(), ref(kGrads), sizeof(float) * grads.size());
    if (det) {
      ranges.resize(2 * n);
      launcher_->download(ranges.data(), ref(kPairRanges), sizeof(uint32_t) * ranges.size());
    }
    end(TimingLabel::Readback);
    for (size_t i = 0; i < n; ++i) {
      if (!det) {
        sum[i] += grads[SPLAT_PAIR_GRAD * i + 6];
        continue;
      }
      for (uint32_t s = ranges[2 * i], e = s + ranges[2 * i + 1]; s < e && s < items; ++s)
        sum[i] += grads[SPLAT_PAIR_GRAD * static_cast<size_t>(s) + 6];
    }
  }
  for (size_t i = 0; i < n; ++i) weights[i] = static_cast<float>(sum[i]);
  finish_op(true);
}

}  // namespace splat::gpu
