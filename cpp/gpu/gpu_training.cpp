// GpuDevice's training ops on resident state: state up- and download, the
// training step, Adam, densification, opacity reset, the debug snapshot and
// renders (docs/gpu.md, "The GPU training step"). The rasterizer passes they
// build on are gpu_device.cpp; the training images gpu_images.cpp; what
// data-parallel ranks exchange gpu_ranks.cpp.
#include <algorithm>
#include <cmath>
#include <limits>

#include "gpu_device.h"
#include "../../shaders/common/adam.h"
#include "../../shaders/common/exposure.h"
#include "../../shaders/common/sh.h"
#include "grid.h"
#include "splat/errors.h"
#include "splat/limits.h"

namespace splat::gpu {

GpuDevice::ParamRefs GpuDevice::state_params() const {
  ParamRefs p;
  for (int a = 0; a < 5; ++a) p.p[a] = ref(kParam0 + a);
  return p;
}

void GpuDevice::reserve_state(size_t n) {
  for (int a = 0; a < 5; ++a) {
    const size_t bytes = 4 * n * param_width(a, sh_stride_);
    ensure(kParam0 + a, bytes, true);
    ensure(kM0 + a, bytes, true);
    if (!options_.bf16_moments) ensure(kV0 + a, bytes, true);  // else both moments are in kM0's words
    if (a != 4) ensure(kGrad0 + a, bytes, true);  // d_sh stays factored (kShFactors)
  }
  ensure(kShFactors, 4 * SPLAT_SH_FACTOR_FLOATS * n, true);
  ensure(kGradMeans2d, 8 * n, true);
  // Radii: the last forward's; the kernels that change the state read the
  // first as the step's gate (step_skipped, params.h), so a new buffer starts
  // at zero: not skipped.
  const BufferHandle radius_before = arena_[kRadius].handle;
  const BufferRef radius = ensure(kRadius, 4 * n, true);
  if (radius.handle != radius_before) launcher_->fill_zero(radius, arena_[kRadius].capacity);
  if (options_.absgrad) ensure(kMeans2dAbs, 8 * n, true);
  ensure(kGradAccum, 4 * n, true);
  ensure(kGradCount, 4 * n, true);
  ensure(kMaxRadii, 4 * n, true);
}

void GpuDevice::reserve_pixels(size_t pixels, uint32_t tiles) {
  ensure(kImage, 12 * pixels);
  ensure(kAlpha, 4 * pixels);
  ensure(kFinalT, 4 * pixels);
  ensure(kNContrib, 4 * pixels);
  ensure(kStopChunk, stop_chunk_bytes(chunked_stop(), pixels));
  ensure(kDImage, 12 * pixels);
  ensure(kLossPartials, 9 * 4 * pixels);
  ensure(kTileSums, 8 * size_t{tiles});
  ensure(kRanges, 8 * (size_t{tiles} + 1));
}

void GpuDevice::set_training_options(const TrainingOptions& options) {
  std::lock_guard<std::mutex> lock(mutex_);
  options_ = options;
}

void GpuDevice::set_training_state(const TrainingState& s) {
  std::lock_guard<std::mutex> lock(mutex_);
  check_gaussian_count(s.count);
  for (int a = 0; a < 5; ++a) {
    const size_t len = s.count * param_width(a, s.sh_stride);
    if (s.params[a].size() != len || (!s.adam_m[a].empty() && s.adam_m[a].size() != len) ||
        (!s.adam_v[a].empty() && s.adam_v[a].size() != len))
      throw ConfigError("[gpu] set_training_state: array sizes do not match the count");
  }
  for (const std::vector<float>* v : {&s.grad_accum, &s.grad_count, &s.max_radii})
    if (!v->empty() && v->size() != s.count)
      throw ConfigError("[gpu] set_training_state: statistics do not match the count");
  if (!s.scale_ceiling.empty() && s.scale_ceiling.size() != s.count)
    throw ConfigError("[trainer] state.scale_ceiling: expected " + std::to_string(s.count) + " values, got " +
                      std::to_string(s.scale_ceiling.size()));
  if (options_.exposure)
    for (const std::vector<float>* v : {&s.exposure, &s.exposure_m, &s.exposure_v})
      if (!v->empty() && v->size() != kExposureFloats * images_.views.size())
        throw ConfigError("[trainer] state.exposure: expected " + std::to_string(kExposureFloats * images_.views.size()) +
                          " values (12 per view), got " + std::to_string(v->size()));
  have_forward_ = false;
  have_loss_ = false;
  have_train_step_ = false;
  sh_stride_ = s.sh_stride;
  count_ = s.count;
  const size_t n = count_;
  begin(TimingLabel::Upload);
  reserve_state(n);
  // A new state: no step of the old one is pending (Device::take_pair_overflow).
  if (n) launcher_->fill_zero(ref(kRadius), 4 * n);
  if (arena_[kPairStatus].capacity) launcher_->fill_zero(ref(kPairStatus), sizeof(PairStatus));
  for (int a = 0; a < 5; ++a) {
    const size_t bytes = 4 * n * param_width(a, sh_stride_);
    launcher_->upload(ref(kParam0 + a), s.params[a].data(), bytes);
    if (s.adam_m[a].empty()) {
      launcher_->fill_zero(ref(kM0 + a), bytes);
      if (!options_.bf16_moments) launcher_->fill_zero(ref(kV0 + a), bytes);
    } else if (options_.bf16_moments) {  // packed, each rounded to nearest (exact for a bfloat16 state)
      std::vector<uint32_t> words(s.adam_m[a].size());
      for (size_t i = 0; i < words.size(); ++i)
        words[i] = bf16_round_nearest(s.adam_m[a][i]) | bf16_round_nearest(s.adam_v[a][i]) << 16;
      launcher_->upload(ref(kM0 + a), words.data(), bytes);
    } else {
      launcher_->upload(ref(kM0 + a), s.adam_m[a].data(), bytes);
      launcher_->upload(ref(kV0 + a), s.adam_v[a].data(), bytes);
    }
  }
  const std::vector<float>* stats[3] = {&s.grad_accum, &s.grad_count, &s.max_radii};
  const int slots[3] = {kGradAccum, kGradCount, kMaxRadii};
  for (int k = 0; k < 3; ++k) {
    if (stats[k]->empty())
      launcher_->fill_zero(ref(slots[k]), 4 * n);
    else
      launcher_->upload(ref(slots[k]), stats[k]->data(), 4 * n);
  }
  has_scale_ceiling_ = !s.scale_ceiling.empty();
  if (has_scale_ceiling_ && n) launcher_->upload(ensure(kScaleCeiling, 4 * n, true), s.scale_ceiling.data(), 4 * n);
  if (options_.exposure) {  // every uploaded view's correction: identity unless given
    const size_t len = kExposureFloats * images_.views.size();
    std::vector<float> identity;
    if (s.exposure.empty()) {
      identity.assign(len, 0.f);
      for (size_t i = 0; i < len; i += kExposureFloats) identity[i] = identity[i + 5] = identity[i + 10] = 1.f;
    }
    const std::vector<float>& values = s.exposure.empty() ? identity : s.exposure;
    launcher_->upload(ensure(kExposure, 4 * len), values.data(), 4 * len);
    const std::vector<float>* moments[2] = {&s.exposure_m, &s.exposure_v};
    const int mslots[2] = {kExposureM, kExposureV};
    for (int k = 0; k < 2; ++k) {
      if (moments[k]->empty())
        launcher_->fill_zero(ensure(mslots[k], 4 * len), 4 * len);
      else
        launcher_->upload(ensure(mslots[k], 4 * len), moments[k]->data(), 4 * len);
    }
    ensure(kExposureGrad, 4 * kExposureFloats);
    ensure(kExposureGradViews, 4 * len);
    exposure_grad_views_set_ = false;
    ensure(kExposurePartials, 4 * kExposureFloats * div_up(images_.max_pixels, kGroup));
    ensure(kCorrected, 12 * images_.max_pixels);
    exposure_view_ = -1;
  }
  end(TimingLabel::Upload);
  finish_op(true);
}

void GpuDevice::get_training_state(TrainingState& s) {
  std::lock_guard<std::mutex> lock(mutex_);
  const size_t n = count_;
  s.count = n;
  s.sh_stride = sh_stride_;
  begin(TimingLabel::Readback);
  for (int a = 0; a < 5; ++a) {
    const size_t len = n * param_width(a, sh_stride_);
    s.params[a].resize(len);
    s.adam_m[a].resize(len);
    s.adam_v[a].resize(len);
    if (!len) continue;
    launcher_->download(s.params[a].data(), ref(kParam0 + a), 4 * len);
    if (options_.bf16_moments) {
      std::vector<uint32_t> words(len);
      launcher_->download(words.data(), ref(kM0 + a), 4 * len);
      for (size_t i = 0; i < len; ++i) {
        s.adam_m[a][i] = adam_unpack_m(words[i]);
        s.adam_v[a][i] = adam_unpack_v(words[i]);
      }
      continue;
    }
    launcher_->download(s.adam_m[a].data(), ref(kM0 + a), 4 * len);
    launcher_->download(s.adam_v[a].data(), ref(kV0 + a), 4 * len);
  }
  s.grad_accum.resize(n);
  s.grad_count.resize(n);
  s.max_radii.resize(n);
  if (n) {
    launcher_->download(s.grad_accum.data(), ref(kGradAccum), 4 * n);
    launcher_->download(s.grad_count.data(), ref(kGradCount), 4 * n);
    launcher_->download(s.max_radii.data(), ref(kMaxRadii), 4 * n);
  }
  s.scale_ceiling.clear();
  if (has_scale_ceiling_) {
    s.scale_ceiling.resize(n);
    if (n) launcher_->download(s.scale_ceiling.data(), ref(kScaleCeiling), 4 * n);
  }
  s.exposure.clear();
  s.exposure_m.clear();
  s.exposure_v.clear();
  if (options_.exposure) {
    const size_t len = kExposureFloats * images_.views.size();
    std::vector<float>* dst[3] = {&s.exposure, &s.exposure_m, &s.exposure_v};
    const int slots[3] = {kExposure, kExposureM, kExposureV};
    for (int k = 0; k < 3; ++k) {
      dst[k]->resize(len);
      launcher_->download(dst[k]->data(), ref(slots[k]), 4 * len);
    }
  }
  end(TimingLabel::Readback);
  finish_op(true);
}

void GpuDevice::train_forward_backward(const CameraParams& cam, uint32_t view, uint32_t sh_degree,
                                       const float background[3], float ssim_weight, bool track_stats,
                                       uint32_t step) {
  std::lock_guard<std::mutex> lock(mutex_);
  check_view(cam, view);
  const ImageSlot& slot = images_.views[view];
  const size_t n = count_;
  have_loss_ = false;  // a forward that stops at a limit leaves no step behind
  have_train_step_ = false;
  sh_grad_full_ = false;  // this step's SH gradient is factored again
  // The view's pixels (staged now if they were not fetched a step ahead);
  // without a mask the kernels never read `mask`: any buffer will do.
  const auto [target, mask] = view_pixels(view);
  forward_pass(state_params(), n, sh_stride_, cam, sh_degree, background, step);

  // The loss against the resident uint8 image of `view`, and d_image.
  begin(TimingLabel::Ssim);
  const size_t pixels = static_cast<size_t>(cam.width) * cam.height;
  const LossParams lp = loss_params(cam, slot, ssim_weight, 0, 1);
  const BufferRef d_image = ensure(kDImage, 12 * pixels);
  // Exposure: the loss sees the view's corrected render (train_exposure.h).
  ExposureParams xp{};
  xp.pixels = static_cast<uint32_t>(pixels);
  xp.view = view;
  xp.blocks = div_up(pixels, kGroup);
  xp.floats = static_cast<uint32_t>(kExposureFloats * images_.views.size());
  if (options_.exposure)
    launch(Kernel::ExposureApply, xp.blocks,
           {KernelArg::value(xp), KernelArg::buf(ref(kExposure)), KernelArg::buf(ref(kImage)),
            KernelArg::buf(ref(kCorrected))});
  const BufferRef loss_image = ref(options_.exposure ? kCorrected : kImage);
  launch_loss(lp, loss_image, target, mask, d_image);
  if (options_.exposure) {
    launch(Kernel::ExposureBackward, xp.blocks,
           {KernelArg::value(xp), KernelArg::buf(ref(kExposure)), KernelArg::buf(ref(kImage)), KernelArg::buf(d_image),
            KernelArg::buf(ref(kExposurePartials))});
    launch(Kernel::ExposureReduce, 1,
           {KernelArg::value(xp), KernelArg::buf(ref(kExposurePartials)), KernelArg::buf(ref(kExposureGrad))});
    exposure_view_ = view;
    exposure_grad_views_set_ = false;
  }
  end(TimingLabel::Ssim);

  const BufferRef outs[6] = {ref(kGrad0), ref(kGrad0 + 1), ref(kGrad0 + 2),
                             ref(kGrad0 + 3), BufferRef{}, ref(kGradMeans2d)};
  // absgrad: the statistic reads the summed absolute gradient instead.
  const bool absgrad = options_.absgrad && track_stats;
  backward_pass(d_image, nullptr, outs, absgrad ? ref(kMeans2dAbs) : BufferRef{});
  last_absgrad_ = absgrad;
  train_sh_degree_ = sh_degree;

  if (track_stats) grad_stats(cam, ref(kRadius), ref(absgrad ? kMeans2dAbs : kGradMeans2d));
  have_forward_ = false;  // the numpy backward needs its own forward
  have_loss_ = true;
  have_train_step_ = true;
  finish_op(false);
}

LossParams GpuDevice::loss_params(const CameraParams& cam, const ImageSlot& slot, float ssim_weight, uint32_t k,
                                  uint32_t views) {
  // The means run over the pixels that count (the mask's valid count, known
  // since the upload: no read-back); a view masked entirely has loss 0.
  const double count = 3.0 * static_cast<double>(slot.valid_pixels);
  const bool any = slot.valid_pixels > 0;
  return LossParams{cam.width,
                    cam.height,
                    cam.tiles_x,
                    cam.tiles_x * cam.tiles_y,
                    any ? static_cast<float>((1.0 - ssim_weight) / count) : 0.f,
                    any ? static_cast<float>(-ssim_weight / count) : 0.f,
                    any ? ssim_weight : 0.f,
                    any ? static_cast<float>(1.0 / count) : 0.f,
                    slot.has_mask ? 1u : 0u,
                    k,
                    views,
                    0u};
}

void GpuDevice::launch_loss(const LossParams& lp, BufferRef image, BufferRef target, BufferRef mask,
                            BufferRef d_image) {
  // reserve_pixels sizes these for the largest view up front: no growth here in a run.
  const size_t pixels = static_cast<size_t>(lp.width) * lp.height;
  const BufferRef partials = ensure(kLossPartials, 9 * 4 * pixels);
  const BufferRef tile_sums = ensure(kTileSums, 8 * size_t{lp.num_tiles});
  ensure(kLoss, 16);
  launch(Kernel::SsimForward, lp.num_tiles,
         {KernelArg::value(lp), KernelArg::buf(image), KernelArg::buf(target), KernelArg::buf(mask),
          KernelArg::buf(partials), KernelArg::buf(tile_sums)});
  launch(Kernel::SsimBackward, lp.num_tiles,
         {KernelArg::value(lp), KernelArg::buf(image), KernelArg::buf(target), KernelArg::buf(mask),
          KernelArg::buf(partials), KernelArg::buf(tile_sums), KernelArg::buf(d_image), KernelArg::buf(ref(kLoss))});
}

void GpuDevice::grad_stats(const CameraParams& cam, BufferRef radius, BufferRef means2d) {
  const size_t n = count_;
  begin(TimingLabel::DensifyStats);
  ElementParams ep{static_cast<uint32_t>(n), cam.width, cam.height, 0.f};
  launch(Kernel::GradStats, div_up(n, kGroup),
         {KernelArg::value(ep), KernelArg::buf(radius), KernelArg::buf(means2d), KernelArg::buf(ref(kGradAccum)),
          KernelArg::buf(ref(kGradCount)), KernelArg::buf(ref(kMaxRadii))});
  end(TimingLabel::DensifyStats);
}

void GpuDevice::ensure_full_sh_grad() {
  const size_t n = count_;
  if (n && !sh_grad_full_) expand_sh_grad(ensure(kGrad0 + 4, 4 * n * param_width(4, sh_stride_)));
}

float GpuDevice::last_loss() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!have_loss_) return std::numeric_limits<float>::quiet_NaN();
  float value = 0.f;
  begin(TimingLabel::Readback);
  launcher_->download(&value, ref(kLoss), sizeof(value));
  end(TimingLabel::Readback);
  finish_op(true);
  return value;
}

void GpuDevice::adam_step(const AdamSettings& s) {
  std::lock_guard<std::mutex> lock(mutex_);
  const size_t n = count_;
  AdamParams p{};
  p.count = static_cast<uint32_t>(n);
  p.sh_width = 3 * sh_stride_;
  const float bias1 = s.bias_correction(s.beta1), bias2 = s.bias_correction(s.beta2);
  p.step_means = adam_step_size(s.lr_means, bias1);
  p.step_log_scales = adam_step_size(s.lr_log_scales, bias1);
  p.step_quats = adam_step_size(s.lr_quats, bias1);
  p.step_opacity = adam_step_size(s.lr_opacity, bias1);
  p.step_sh_dc = adam_step_size(s.lr_sh_dc, bias1);
  p.step_sh_rest = adam_step_size(s.lr_sh_rest, bias1);
  p.beta1 = s.beta1;
  p.beta2 = s.beta2;
  p.eps = s.eps;
  p.rsqrt_bias2 = adam_rsqrt_bias2(bias2);
  p.sh_k_count = static_cast<uint32_t>(sh_num_coeffs(static_cast<int>(train_sh_degree_)));
  p.visible_only = s.visible_only ? 1u : 0u;
  p.sh_grad_full = sh_grad_full_ ? 1u : 0u;
  p.sh_views = sh_factor_views_;
  p.bf16_moments = options_.bf16_moments ? 1u : 0u;
  p.moment_key = adam_moment_key(s.moment_seed, s.step);
  const int v0 = options_.bf16_moments ? kM0 : kV0;  // not read when packed
  if (n * (11 + size_t{p.sh_width}) >= (size_t{1} << 32))
    throw BackendError("[gpu] adam_step: too many parameters for one dispatch");
  const size_t total = adam_quads(p.count, p.sh_width);
  begin(TimingLabel::Adam);
  launch(Kernel::Adam, div_up(total, kGroup),
         {KernelArg::value(p), KernelArg::buf(ref(kParam0)), KernelArg::buf(ref(kParam0 + 1)),
          KernelArg::buf(ref(kParam0 + 2)), KernelArg::buf(ref(kParam0 + 3)), KernelArg::buf(ref(kParam0 + 4)),
          KernelArg::buf(ref(kM0)), KernelArg::buf(ref(kM0 + 1)), KernelArg::buf(ref(kM0 + 2)),
          KernelArg::buf(ref(kM0 + 3)), KernelArg::buf(ref(kM0 + 4)), KernelArg::buf(ref(v0)),
          KernelArg::buf(ref(v0 + 1)), KernelArg::buf(ref(v0 + 2)), KernelArg::buf(ref(v0 + 3)),
          KernelArg::buf(ref(v0 + 4)), KernelArg::buf(ref(kGrad0)), KernelArg::buf(ref(kGrad0 + 1)),
          KernelArg::buf(ref(kGrad0 + 2)), KernelArg::buf(ref(kGrad0 + 3)),
          KernelArg::buf(ref(sh_grad_full_ ? kGrad0 + 4 : kShFactors)), KernelArg::buf(ref(kRadius))});
  if (options_.exposure && (exposure_view_ >= 0 || exposure_grad_views_set_)) {
    // Every view's correction steps (zero gradient but the last step's view's,
    // or every view's that set_exposure_gradients gave).
    ExposureParams xp{};
    xp.view = static_cast<uint32_t>(exposure_view_);
    xp.all_views = exposure_grad_views_set_ ? 1u : 0u;
    xp.floats = static_cast<uint32_t>(kExposureFloats * images_.views.size());
    xp.lr = s.lr_exposure;
    xp.beta1 = p.beta1;
    xp.beta2 = p.beta2;
    xp.eps = p.eps;
    xp.bias1 = bias1;
    xp.bias2 = bias2;
    launch(Kernel::ExposureAdam, div_up(xp.floats, kGroup),
           {KernelArg::value(xp), KernelArg::buf(ref(kExposure)), KernelArg::buf(ref(kExposureM)),
            KernelArg::buf(ref(kExposureV)), KernelArg::buf(ref(kExposureGrad)),
            KernelArg::buf(ref(kExposureGradViews)), KernelArg::buf(ref(kRadius))});
    launch(Kernel::ExposureCenter, 1,
           {KernelArg::value(xp), KernelArg::buf(ref(kExposure)), KernelArg::buf(ref(kRadius))});
  }
  end(TimingLabel::Adam);
  finish_op(false);
}

DensifyResult GpuDevice::densify(const DensifySettings& s) {
  std::lock_guard<std::mutex> lock(mutex_);
  DensifyResult result;
  has_scale_ceiling_ = false;  // other Gaussians: cap_scales records anew
  const size_t n = count_;
  have_forward_ = false;
  have_train_step_ = false;
  if (n == 0) return result;
  if (5 * n + 1 >= (size_t{1} << 32)) throw BackendError("[gpu] densify: too many Gaussians");
  begin(TimingLabel::Densify);
  DensifyParams p{};
  p.count = static_cast<uint32_t>(n);
  p.split_count = s.split_count;
  p.room = s.max_gaussians > n ? static_cast<uint32_t>(s.max_gaussians - n) : 0u;
  p.seed = static_cast<uint32_t>(s.seed);
  p.step = s.step;
  p.grad_threshold = s.grad_threshold;
  p.clone_max_scale = s.clone_max_scale;
  // As the CPU backend rounds them.
  p.log_div = std::log(s.split_scale_divisor);
  p.logit_min = std::log(s.prune_opacity / (1.f - s.prune_opacity));
  p.prune_max_world_scale = s.prune_max_world_scale;
  p.prune_max_screen_radius = s.prune_max_screen_radius;
  p.prune_screen_scale_per_px = s.prune_screen_scale_per_px;

  BufferRef kind = ensure(kDensifyKind, 4 * n, true), extra = ensure(kDensifyExtra, 4 * n, true),
            extra_offsets = ensure(kDensifyExtraOffsets, 4 * (n + 1), true),
            flags = ensure(kDensifyFlags, 4 * 5 * n, true), offsets = ensure(kDensifyOffsets, 4 * (5 * n + 1), true);
  const uint32_t groups = div_up(n, kGroup);
  launch(Kernel::DensifyClassify, groups,
         {KernelArg::value(p), KernelArg::buf(ref(kParam0 + 1)), KernelArg::buf(ref(kGradAccum)),
          KernelArg::buf(ref(kGradCount)), KernelArg::buf(kind), KernelArg::buf(extra)});
  exclusive_scan(extra, extra_offsets, static_cast<uint32_t>(n));
  launch(Kernel::DensifyMark, groups,
         {KernelArg::value(p), KernelArg::buf(ref(kParam0 + 1)), KernelArg::buf(ref(kParam0 + 3)),
          KernelArg::buf(ref(kMaxRadii)), KernelArg::buf(extra), KernelArg::buf(extra_offsets), KernelArg::buf(kind),
          KernelArg::buf(flags)});
  exclusive_scan(flags, offsets, static_cast<uint32_t>(5 * n));
  // The one read-back of densification: the new count (and what happened).
  uint32_t at[3] = {0, 0, 0};
  for (int k = 0; k < 3; ++k)
    launcher_->download(&at[k], BufferRef{offsets.handle, 4 * (3 + k) * n}, sizeof(uint32_t));
  const size_t out = at[0];
  result.count = at[0];
  result.cloned = at[1] - at[0];
  result.split = at[2] - at[1];
  const size_t sources = n - result.split + result.cloned + size_t{result.split} * s.split_count;
  result.pruned = static_cast<uint32_t>(sources - out);
  p.out_count = static_cast<uint32_t>(out);

  // Each output row's source, then each array and each of its moments
  // gathered into the array's gradient slot (a finished step's gradients are
  // dead: the next backward writes every one) and the two swapped; the slot
  // then holds the old array. One spare set instead of three keeps
  // lego_800's arena ~0.2 GiB smaller. The means go first: the children's
  // means read the parents' log-scales and quaternions, still in place then.
  BufferRef row_source = ensure(kDensifyRowSource, 4 * out, true);
  launch(Kernel::DensifySources, div_up(3 * n, kGroup),
         {KernelArg::value(p), KernelArg::buf(offsets), KernelArg::buf(row_source)});
  for (int a = 0; a < 5; ++a) {
    DensifyParams g = p;
    g.width = param_width(a, sh_stride_);
    for (int s_i = 0; s_i < state_arrays(); ++s_i) {
      BufferRef dst = ensure(kGrad0 + a, 4 * out * g.width, true);
      g.is_log_scales = a == 1 && s_i == 0 ? 1u : 0u;
      g.is_moment = s_i == 0 ? 0u : 1u;
      if (out > 0)  // a float a thread: out * width < 2^32 (at most 2^24 Gaussians of 48 floats)
        launch(Kernel::DensifyGather, div_up(out * g.width, kGroup),
               {KernelArg::value(g), KernelArg::buf(row_source), KernelArg::buf(ref(state_slot(a, s_i))),
                KernelArg::buf(dst)});
      if (a == 0 && s_i == 0)
        launch(Kernel::DensifyChildren, groups,
               {KernelArg::value(p), KernelArg::buf(offsets), KernelArg::buf(ref(kParam0)),
                KernelArg::buf(ref(kParam0 + 1)), KernelArg::buf(ref(kParam0 + 2)), KernelArg::buf(dst)});
      std::swap(arena_[state_slot(a, s_i)], arena_[kGrad0 + a]);
    }
  }
  count_ = out;
  // The pairs grow with the Gaussians: size for it now rather than overflow.
  if (pair_capacity_ && n) grow_pair_capacity(max_pairs_seen_ * out / n);
  reserve_state(out);  // the state arrays already fit; grads and statistics may grow
  launcher_->fill_zero(ref(kGradAccum), 4 * out);
  launcher_->fill_zero(ref(kGradCount), 4 * out);
  launcher_->fill_zero(ref(kMaxRadii), 4 * out);
  end(TimingLabel::Densify);
  finish_op(false);
  return result;
}

void GpuDevice::cap_scales(float log_growth) {
  std::lock_guard<std::mutex> lock(mutex_);
  const size_t n = count_;
  if (!n) return;
  // Recorded once a run, when densification stops: no allocation a step.
  ScaleCapParams p{static_cast<uint32_t>(n), has_scale_ceiling_ ? 0u : 1u, log_growth, 0u};
  const BufferRef ceiling = ensure(kScaleCeiling, 4 * n, true);
  begin(TimingLabel::Adam);
  launch(Kernel::CapScales, div_up(n, kGroup), {KernelArg::value(p), KernelArg::buf(ref(kParam0 + 1)),
                                                KernelArg::buf(ceiling)});
  end(TimingLabel::Adam);
  has_scale_ceiling_ = true;
  finish_op(false);
}

void GpuDevice::reset_opacity(float max_opacity) {
  std::lock_guard<std::mutex> lock(mutex_);
  const size_t n = count_;
  ElementParams p{static_cast<uint32_t>(n), 0u, 0u, std::log(max_opacity / (1.f - max_opacity))};
  launch(Kernel::ResetOpacity, div_up(n, kGroup), {KernelArg::value(p), KernelArg::buf(ref(kParam0 + 3))});
  if (n) {
    launcher_->fill_zero(ref(kM0 + 3), 4 * n);
    if (!options_.bf16_moments) launcher_->fill_zero(ref(kV0 + 3), 4 * n);
  }
  finish_op(false);
}

NonFiniteCounts GpuDevice::count_nonfinite() {
  std::lock_guard<std::mutex> lock(mutex_);
  NonFiniteCounts counts;
  const size_t n = count_;
  if (n == 0) return counts;
  if (n * (3 * size_t{sh_stride_}) >= (size_t{1} << 32))
    throw BackendError("[gpu] count_nonfinite: too many parameters for one dispatch");
  FiniteParams p{};
  p.count = static_cast<uint32_t>(n);
  p.sh_width = 3 * sh_stride_;
  // Enough threads to fill the GPU; each strides over the arrays.
  p.groups = static_cast<uint32_t>(std::min<size_t>(1024, div_up(n * p.sh_width, 8 * size_t{kGroup})));
  begin(TimingLabel::Readback);
  BufferRef partials = ensure(kFinitePartials, 4 * SPLAT_FINITE_ARRAYS * size_t{p.groups}),
            totals = ensure(kFiniteTotals, 4 * SPLAT_FINITE_ARRAYS);
  launch(Kernel::CountNonfinite, p.groups,
         {KernelArg::value(p), KernelArg::buf(ref(kParam0)), KernelArg::buf(ref(kParam0 + 1)),
          KernelArg::buf(ref(kParam0 + 2)), KernelArg::buf(ref(kParam0 + 3)), KernelArg::buf(ref(kParam0 + 4)),
          KernelArg::buf(partials)});
  launch(Kernel::NonfiniteTotal, 1, {KernelArg::value(p), KernelArg::buf(partials), KernelArg::buf(totals)});
  uint32_t found[SPLAT_FINITE_ARRAYS] = {0, 0, 0, 0, 0};
  launcher_->download(found, totals, sizeof(found));
  end(TimingLabel::Readback);
  finish_op(true);
  for (int a = 0; a < SPLAT_FINITE_ARRAYS; ++a) counts.params[a] = found[a];
  return counts;
}

bool GpuDevice::debug_snapshot(DebugSnapshot& out) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!have_train_step_) return false;
  const size_t n = count_;
  const size_t tiles = rp_.num_tiles;
  begin(TimingLabel::Readback);
  out.tile_ranges.resize(2 * tiles);
  if (!pairs_known_) {  // sized on the device: its count (the Trainer has settled any overflow)
    PairStatus st{};
    launcher_->download(&st, ref(kPairStatus), sizeof(st));
    num_pairs_ = st.live;
    pairs_known_ = true;
  }
  out.sorted_gauss.resize(num_pairs_);
  if (tiles) launcher_->download(out.tile_ranges.data(), ref(kRanges), 8 * tiles);
  if (num_pairs_) launcher_->download(out.sorted_gauss.data(), ref(sorted_in_b_ ? kValsB : kValsA), 4 * num_pairs_);
  ensure_full_sh_grad();
  for (int a = 0; a < 5; ++a) {
    out.grads[a].resize(n * param_width(a, sh_stride_));
    if (n) launcher_->download(out.grads[a].data(), ref(kGrad0 + a), 4 * out.grads[a].size());
  }
  out.means2d_grad.resize(2 * n);
  if (n) launcher_->download(out.means2d_grad.data(), ref(kGradMeans2d), 8 * n);
  out.means2d_abs.clear();
  out.exposure_grad.clear();
  if (last_absgrad_) {
    out.means2d_abs.resize(2 * n);
    if (n) launcher_->download(out.means2d_abs.data(), ref(kMeans2dAbs), 8 * n);
  }
  if (options_.exposure && exposure_view_ >= 0) {
    out.exposure_grad.resize(kExposureFloats);
    launcher_->download(out.exposure_grad.data(), ref(kExposureGrad), 4 * kExposureFloats);
  }
  end(TimingLabel::Readback);
  finish_op(true);
  return true;
}

void GpuDevice::render_resident(const CameraParams& cam, uint32_t sh_degree, const float background[3],
                                float* image) {
  std::lock_guard<std::mutex> lock(mutex_);
  have_train_step_ = false;  // the binning buffers now hold this render's (or a stopped one's)
  forward_pass(state_params(), count_, sh_stride_, cam, sh_degree, background);
  have_forward_ = false;
  begin(TimingLabel::Readback);
  launcher_->download(image, ref(kImage), 12 * static_cast<size_t>(cam.width) * cam.height);
  end(TimingLabel::Readback);
  finish_op(true);
}

}  // namespace splat::gpu
