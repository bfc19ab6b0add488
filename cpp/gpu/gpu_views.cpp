// Several views a step rasterized together (docs/architecture.md, "Several
// views a step"): the batch's projections write one set of records, one
// binning and one raster forward cover every view's tiles, each view's loss
// fills its part of d_image, one raster backward runs over all the pairs,
// and each view's projection backward, statistics and accumulation then run
// in view order, as a batch trained one view after another sums them.
#include "gpu_device.h"

namespace splat::gpu {

bool GpuDevice::train_views_together(const CameraParams* cams, const uint32_t* views, const bool* track_stats,
                                     uint32_t count, uint32_t sh_degree, const float background[3],
                                     float ssim_weight, uint32_t step, const McmcStepSettings* mcmc) {
  std::lock_guard<std::mutex> lock(mutex_);
  for (uint32_t k = 0; k < count; ++k) check_view(cams[k], views[k]);
  // Where it cannot: the caller trains the views one after another. Streamed
  // images hold two views on the device; absgrad's per-record sums and
  // exposure's per-view corrections are not batched yet.
  if (config_.view_launches != ViewLaunches::Together || count < 2 || count_ == 0 || storage_.streamed ||
      options_.absgrad || options_.exposure)
    return false;
  for (uint32_t k = 1; k < count; ++k)
    if (cams[k].width != cams[0].width || cams[k].height != cams[0].height) return false;

  const size_t n = count_;
  const size_t per_view = static_cast<size_t>(cams[0].width) * cams[0].height;
  have_loss_ = false;
  have_train_step_ = false;
  forward_views(state_params(), n, sh_stride_, cams, count, sh_degree, background, step);

  // Each view's loss against its image, into its part of d_image; loss[0]
  // ends as the views' mean (LossParams::views).
  begin(TimingLabel::Ssim);
  const BufferRef d_image = ensure(kDImage, 12 * per_view * count);
  for (uint32_t k = 0; k < count; ++k) {
    const auto [target, mask] = view_pixels(views[k]);
    const LossParams lp = loss_params(cams[k], images_.views[views[k]], ssim_weight, k, count);
    launch_loss(lp, ref(kImage, 12 * per_view * k), target, mask, ref(kDImage, 12 * per_view * k));
  }
  end(TimingLabel::Ssim);

  backward_raster(d_image, nullptr, BufferRef{});
  // Each view's SH factors kept in its own set: Adam (and any expansion) takes
  // their mean (sh_factor_grad_views), where expanding and summing each view
  // moved ~0.8 KB a Gaussian a view.
  if (uint64_t{SPLAT_SH_FACTOR_FLOATS} * n * count >= (uint64_t{1} << 32))
    throw BackendError("[gpu] train_views_together: too many SH factors for one dispatch");
  ensure(kShFactors, 4 * SPLAT_SH_FACTOR_FLOATS * n * count, true);
  const BufferRef outs[6] = {ref(kGrad0), ref(kGrad0 + 1), ref(kGrad0 + 2), ref(kGrad0 + 3), BufferRef{},
                             ref(kGradMeans2d)};
  // Each view's projection backward adds its four parameter gradients to the
  // batch's sums itself (RasterParams::grad_views), where a launch per array
  // and view did (32 at eight views). MCMC's regularisers are added to a
  // view's gradients between the two, so its views keep the launches.
  const bool summed = mcmc == nullptr;
  if (summed)
    for (int a = 0; a < 4; ++a) ensure(kGradSum0 + a, 4 * n * param_width(a, sh_stride_), true);
  for (uint32_t k = 0; k < count; ++k) {
    begin(TimingLabel::ProjectBack);
    backward_project(k, cams[k], outs, summed ? count : 0u);
    end(TimingLabel::ProjectBack);
    if (mcmc) mcmc_regularize_grads(*mcmc);
    if (track_stats[k]) grad_stats(cams[k], ref(kRadius, 4 * n * k), ref(kGradMeans2d));
    if (!summed) accumulate_view_gradients(k, count, false, false);
  }
  sh_grad_full_ = false;  // the SH gradient: the mean of the views' factor sets
  sh_factor_views_ = count;
  last_absgrad_ = false;
  train_sh_degree_ = sh_degree;
  have_forward_ = false;
  have_loss_ = true;
  have_train_step_ = true;
  finish_op(false);
  return true;
}

}  // namespace splat::gpu
