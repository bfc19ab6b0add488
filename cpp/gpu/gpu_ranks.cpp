// The gradients of several views a step (accumulate_gradients), and what
// data-parallel ranks exchange with a GpuDevice (python/splat/parallel;
// docs/architecture.md, "Data-parallel training"): the last step's gradients,
// exposure gradients and screen radii, and the densification statistics, read
// back and replaced through the host, or reduced in place on the device through
// NCCL (join_ranks, reduce_*).
#include <string>
#include <vector>

#include "gpu_device.h"
#include "../../shaders/common/exposure.h"
#include "grid.h"
#include "splat/errors.h"

namespace splat::gpu {

void GpuDevice::get_gradients(std::vector<float> (&grads)[5]) {
  std::lock_guard<std::mutex> lock(mutex_);
  const size_t n = count_;
  begin(TimingLabel::Readback);
  ensure_full_sh_grad();  // as set_gradients gives it back (Adam then reads it so)
  for (int a = 0; a < 5; ++a) {
    grads[a].resize(n * param_width(a, sh_stride_));
    if (n) launcher_->download(grads[a].data(), ref(kGrad0 + a), 4 * grads[a].size());
  }
  end(TimingLabel::Readback);
  finish_op(true);
}

void GpuDevice::set_gradients(const std::vector<float> (&grads)[5]) {
  std::lock_guard<std::mutex> lock(mutex_);
  const size_t n = count_;
  for (int a = 0; a < 5; ++a)
    if (grads[a].size() != n * param_width(a, sh_stride_))
      throw ConfigError("[gpu] set_gradients: array " + std::to_string(a) + " has " + std::to_string(grads[a].size()) +
                        " values, expected " + std::to_string(n * param_width(a, sh_stride_)));
  // After get_gradients' read-back the device reads none of these buffers.
  begin(TimingLabel::Upload);
  for (int a = 0; a < 5; ++a)
    if (n) launcher_->upload(ensure(kGrad0 + a, 4 * grads[a].size(), true), grads[a].data(), 4 * grads[a].size());
  end(TimingLabel::Upload);
  sh_grad_full_ = true;
  finish_op(false);
}

void GpuDevice::get_step_radii(std::vector<int32_t>& radii) {
  std::lock_guard<std::mutex> lock(mutex_);
  radii.resize(count_);
  begin(TimingLabel::Readback);
  if (count_) launcher_->download(radii.data(), ref(kRadius), 4 * count_);
  end(TimingLabel::Readback);
  finish_op(true);
}

void GpuDevice::set_step_radii(const std::vector<int32_t>& radii) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (radii.size() != count_)
    throw ConfigError("[gpu] step radii: " + std::to_string(radii.size()) + " values, expected " +
                      std::to_string(count_) + " (one per Gaussian)");
  begin(TimingLabel::Upload);
  if (count_) launcher_->upload(ref(kRadius), radii.data(), 4 * count_);
  end(TimingLabel::Upload);
  finish_op(false);
}

void GpuDevice::get_exposure_gradients(std::vector<float>& grads) {
  std::lock_guard<std::mutex> lock(mutex_);
  grads.clear();
  if (!options_.exposure) return;
  const size_t len = kExposureFloats * images_.views.size();
  begin(TimingLabel::Readback);
  if (exposure_grad_views_set_) {
    grads.resize(len);
    launcher_->download(grads.data(), ref(kExposureGradViews), 4 * len);
  } else {
    grads.assign(len, 0.f);
    if (exposure_view_ >= 0)
      launcher_->download(grads.data() + kExposureFloats * exposure_view_, ref(kExposureGrad), 4 * kExposureFloats);
  }
  end(TimingLabel::Readback);
  finish_op(true);
}

void GpuDevice::set_exposure_gradients(const std::vector<float>& grads) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!options_.exposure)
    throw ConfigError("[gpu] gradients: exposure given, but this run has no exposure compensation");
  const size_t len = kExposureFloats * images_.views.size();
  if (grads.size() != len)
    throw ConfigError("[gpu] gradients: exposure has " + std::to_string(grads.size()) + " values, expected " +
                      std::to_string(len) + " (12 per training view)");
  begin(TimingLabel::Upload);
  launcher_->upload(ref(kExposureGradViews), grads.data(), 4 * len);
  end(TimingLabel::Upload);
  exposure_grad_views_set_ = true;
  finish_op(false);
}

void GpuDevice::accumulate_gradients(uint32_t k, uint32_t views) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (views < 2 || k >= views) throw ConfigError("[gpu] accumulate_gradients: view " + std::to_string(k) + " of " +
                                                 std::to_string(views));
  accumulate_view_gradients(k, views, true);
  finish_op(false);
}

void GpuDevice::accumulate_view_gradients(uint32_t k, uint32_t views, bool with_loss, bool with_sh) {
  const size_t n = count_;
  if (!n) return;
  if (with_sh) ensure_full_sh_grad();  // a sum of views' rank-one SH factors is not rank one
  begin(TimingLabel::Adam);
  for (int a = 0; a < (with_sh ? 5 : 4); ++a) {
    const size_t len = n * param_width(a, sh_stride_);
    if (len >= (size_t{1} << 32)) throw BackendError("[gpu] accumulate_gradients: too many values for one dispatch");
    // The means' launch also sums the views' losses (the batch's loss is their mean).
    const AccumulateParams p{static_cast<uint32_t>(len), k, views, a == 0 && with_loss ? 1u : 0u};
    launch(Kernel::GradAccumulate, div_up(len, kGroup),
           {KernelArg::value(p), KernelArg::buf(ref(kGrad0 + a)), KernelArg::buf(ensure(kGradSum0 + a, 4 * len, true)),
            KernelArg::buf(ref(kRadius)), KernelArg::buf(ref(kLoss))});
  }
  end(TimingLabel::Adam);
  if (with_sh && k + 1 == views) sh_grad_full_ = true;  // the next adam_step reads the mean, sh in full
}

void GpuDevice::join_ranks(const std::string& unique_id, int rank, int ranks) {
  std::lock_guard<std::mutex> lock(mutex_);
  launcher_->join_ranks(unique_id, rank, ranks);
}

void GpuDevice::reduce_gradients() {
  std::lock_guard<std::mutex> lock(mutex_);
  const size_t n = count_;
  if (!n) return;
  ensure_full_sh_grad();  // a sum of the ranks' rank-one factors is not rank one
  BufferRef buffers[5];
  size_t counts[5];
  for (int a = 0; a < 5; ++a) {
    buffers[a] = ref(kGrad0 + a);
    counts[a] = n * param_width(a, sh_stride_);
  }
  launcher_->all_reduce(buffers, counts, 5, Launcher::ReduceOp::Mean);
  sh_grad_full_ = true;
  finish_op(false);
}

void GpuDevice::reduce_densify_stats() {
  std::lock_guard<std::mutex> lock(mutex_);
  const size_t n = count_;
  if (!n) return;
  const BufferRef sums[2] = {ref(kGradAccum), ref(kGradCount)}, radii[1] = {ref(kMaxRadii)};
  const size_t counts[2] = {n, n};
  launcher_->all_reduce(sums, counts, 2, Launcher::ReduceOp::Sum);
  launcher_->all_reduce(radii, counts, 1, Launcher::ReduceOp::Max);
  finish_op(false);
}

void GpuDevice::get_densify_stats(std::vector<float>& accum, std::vector<float>& count, std::vector<float>& max_radii) {
  std::lock_guard<std::mutex> lock(mutex_);
  const size_t n = count_;
  std::vector<float>* dst[3] = {&accum, &count, &max_radii};
  const int slots[3] = {kGradAccum, kGradCount, kMaxRadii};
  begin(TimingLabel::Readback);
  for (int k = 0; k < 3; ++k) {
    dst[k]->resize(n);
    if (n) launcher_->download(dst[k]->data(), ref(slots[k]), 4 * n);
  }
  end(TimingLabel::Readback);
  finish_op(true);
}

void GpuDevice::set_densify_stats(const std::vector<float>& accum, const std::vector<float>& count,
                                  const std::vector<float>& max_radii) {
  std::lock_guard<std::mutex> lock(mutex_);
  const size_t n = count_;
  const std::vector<float>* src[3] = {&accum, &count, &max_radii};
  const int slots[3] = {kGradAccum, kGradCount, kMaxRadii};
  for (int k = 0; k < 3; ++k)
    if (src[k]->size() != n)
      throw ConfigError("[gpu] set_densify_stats: " + std::to_string(src[k]->size()) + " values for " +
                        std::to_string(n) + " Gaussians");
  // Read by the statistics kernel of a step: the caller has synchronized (get_densify_stats).
  begin(TimingLabel::Upload);
  for (int k = 0; k < 3; ++k)
    if (n) launcher_->upload(ref(slots[k]), src[k]->data(), 4 * n);
  end(TimingLabel::Upload);
  finish_op(false);
}

}  // namespace splat::gpu
