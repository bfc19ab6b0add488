// Several views a step rasterized together (docs/architecture.md, "Several
// views a step"): the batch's projection writes one set of records, one
// binning and one raster forward cover every view's tiles, the views' loss
// fills their parts of d_image, one raster backward runs over all the pairs,
// and the projection backward then takes each Gaussian through the views in
// order, its statistics and gradient sums as a batch trained one view after
// another gives them. The per-Gaussian kernels and the loss launch once for up
// to eight views (their cameras and images' offsets in the launch's
// arguments: nothing uploaded a step).
#include "gpu_device.h"

#include <algorithm>

#include "grid.h"

namespace splat::gpu {

bool GpuDevice::train_views_together(const CameraParams* cams, const uint32_t* views, const bool* track_stats,
                                     uint32_t count, uint32_t sh_degree, const float background[3],
                                     float ssim_weight, uint32_t step, const McmcStepSettings* reg) {
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
  launch_loss_views(cams, views, count, ssim_weight);
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
  if (reg) {
    // The regularisers are added to each view's gradients before they are
    // summed: a launch pair a view.
    for (uint32_t k = 0; k < count; ++k) {
      begin(TimingLabel::ProjectBack);
      backward_project(k, cams[k], outs);
      end(TimingLabel::ProjectBack);
      mcmc_regularize_grads(*reg);
      if (track_stats[k]) grad_stats(cams[k], ref(kRadius, 4 * n * k), ref(kGradMeans2d));
      accumulate_view_gradients(k, count, false, false);
    }
  } else {
    begin(TimingLabel::ProjectBack);
    backward_project_views(cams, track_stats, count, outs);
    end(TimingLabel::ProjectBack);
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

void GpuDevice::backward_project_views(const CameraParams* cams, const bool* track_stats, uint32_t count,
                                       const BufferRef out[6]) {
  const size_t n = num_gaussians_;
  const ParamRefs& p = forward_params_;
  // The sums carry a Gaussian's views from one launch to the next (more than
  // SPLAT_VIEWS_LAUNCH_MAX views).
  BufferRef sums[4] = {out[0], out[1], out[2], out[3]};  // not read with one launch
  if (count > SPLAT_VIEWS_LAUNCH_MAX)
    for (int a = 0; a < 4; ++a) sums[a] = ensure(kGradSum0 + a, 4 * n * param_width(a, sh_stride_), true);
  const RasterParams rp = view_params(0);
  for (uint32_t first = 0; first < count; first += SPLAT_VIEWS_LAUNCH_MAX) {
    ViewsParams b{};
    b.first = first;
    b.count = std::min<uint32_t>(SPLAT_VIEWS_LAUNCH_MAX, count - first);
    b.views = count;
    for (uint32_t c = 0; c < b.count; ++c) {
      b.cams[c] = cams[first + c];
      if (track_stats[first + c]) b.track_mask |= 1u << c;
    }
    // Records, radii, pair ranges and accumulators of every view (the
    // deterministic variant's pair slots are global).
    launch(Kernel::ProjectBackwardViews, div_up(n, kGroup),
           {KernelArg::value(b), KernelArg::value(rp), KernelArg::buf(p.p[0]), KernelArg::buf(p.p[1]),
            KernelArg::buf(p.p[2]), KernelArg::buf(ref(kColorJacobian)), KernelArg::buf(ref(kRecords)),
            KernelArg::buf(ref(kRadius)),
            KernelArg::buf(ref(kGrads)), KernelArg::buf(ref(kPairRanges)), KernelArg::buf(out[0]),
            KernelArg::buf(out[1]), KernelArg::buf(out[2]), KernelArg::buf(out[3]), KernelArg::buf(sums[0]),
            KernelArg::buf(sums[1]), KernelArg::buf(sums[2]), KernelArg::buf(sums[3]), KernelArg::buf(ref(kShFactors)),
            KernelArg::buf(out[5]), KernelArg::buf(ref(kGradAccum)), KernelArg::buf(ref(kGradCount)),
            KernelArg::buf(ref(kMaxRadii))});
  }
}

void GpuDevice::launch_loss_views(const CameraParams* cams, const uint32_t* views, uint32_t count, float ssim_weight) {
  const size_t per_view = static_cast<size_t>(cams[0].width) * cams[0].height;
  const uint32_t tiles = cams[0].tiles_x * cams[0].tiles_y;
  // Views a launch: enough tiles for several waves of the GPU (a 400x400
  // view's 625 tiles fill about half of one on an H200), at most
  // SPLAT_LOSS_MAX_VIEWS; the partials (36 bytes a pixel) are sized for them.
  const uint32_t group = std::max(1u, std::min({count, uint32_t{SPLAT_LOSS_MAX_VIEWS}, 8192u / std::max(tiles, 1u)}));
  const BufferRef partials = ensure(kLossPartials, 9 * 4 * per_view * group);
  const BufferRef tile_sums = ensure(kTileSums, 8 * size_t{tiles} * group);
  ensure(kLoss, 16);
  // Targets and masks by their offsets into the resident images' buffers
  // (views together never stream); without masks the images stand in.
  const BufferRef targets{arena_[kImages].handle, 0};
  const BufferRef masks = arena_[kMasks].handle ? BufferRef{arena_[kMasks].handle, 0} : targets;
  for (uint32_t first = 0; first < count; first += group) {
    LossViewsParams b{};
    b.base = loss_params(cams[first], images_.views[views[first]], ssim_weight, first, count);
    b.count = std::min(group, count - first);
    for (uint32_t v = 0; v < b.count; ++v) {
      const ImageSlot& slot = images_.views[views[first + v]];
      const LossParams lp = loss_params(cams[first + v], slot, ssim_weight, first + v, count);
      b.views[v] = LossView{slot.rgb_offset, slot.has_mask ? slot.mask_offset : 0u, lp.d_l1, lp.d_map,
                            lp.ssim_weight, lp.inv_count, lp.has_mask, 0u};
    }
    const BufferRef image = ref(kImage, 12 * per_view * first), d_image = ref(kDImage, 12 * per_view * first);
    launch(Kernel::SsimForwardViews, b.count * tiles,
           {KernelArg::value(b), KernelArg::buf(image), KernelArg::buf(targets), KernelArg::buf(masks),
            KernelArg::buf(partials), KernelArg::buf(tile_sums)});
    launch(Kernel::SsimBackwardViews, b.count * tiles,
           {KernelArg::value(b), KernelArg::buf(image), KernelArg::buf(targets), KernelArg::buf(masks),
            KernelArg::buf(partials), KernelArg::buf(tile_sums), KernelArg::buf(d_image), KernelArg::buf(ref(kLoss))});
  }
}

}  // namespace splat::gpu
