#include "cpu_training.h"
#include "grow_buffer.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>

#include "../../shaders/common/adam.h"
#include "../../shaders/common/densify.h"
#include "../../shaders/common/exposure.h"
#include "../../shaders/common/sh.h"
#include "splat/errors.h"

namespace splat::cpu {
namespace {

constexpr int kMeans = 0, kLogScales = 1, kQuats = 2, kOpacity = 3, kSh = 4;
// Rows of one exposure-gradient partial: a fixed split (not the thread
// count's), so the reduction's order, and its sum, are the same everywhere.
constexpr uint32_t kExposureRows = 8;


}  // namespace

void CpuTraining::upload_images(const std::vector<TrainingImage>& images, size_t budget_bytes) {
  layout_ = plan_image_layout(images);
  storage_ = ImageStorage{};
  storage_.image_bytes = layout_.rgb_bytes + layout_.mask_bytes;
  storage_.budget_bytes = budget_bytes;
  storage_.streamed = budget_bytes > 0 && storage_.image_bytes > budget_bytes;
  storage_.device_bytes = storage_.image_bytes;
  if (storage_.streamed) {
    size_t max_mask = 0;
    for (const ImageSlot& v : layout_.views)
      if (v.has_mask) max_mask = std::max(max_mask, static_cast<size_t>(v.width) * v.height);
    for (int k = 0; k < 2; ++k) {
      grow_vector(staged_rgb_[k], 3 * layout_.max_pixels, allocations_);
      grow_vector(staged_mask_[k], max_mask, allocations_);
      staged_view_[k] = -1;
    }
    storage_.device_bytes = 2 * (3 * layout_.max_pixels + max_mask);
  }
  uint8_t* rgb = images_.ensure(std::max<size_t>(layout_.rgb_bytes, 1), allocations_);
  uint8_t* masks = masks_.ensure(std::max<size_t>(layout_.mask_bytes, 1), allocations_);
  for (size_t v = 0; v < images.size(); ++v) {
    const ImageSlot& slot = layout_.views[v];
    const size_t pixels = static_cast<size_t>(slot.width) * slot.height;
    std::memcpy(rgb + slot.rgb_offset, images[v].rgb, 3 * pixels);
    if (slot.has_mask) std::memcpy(masks + slot.mask_offset, images[v].mask, pixels);
    if (images[v].copied) images[v].copied();
  }
  // Sized once for the largest view: steps on smaller ones use a prefix.
  grow_vector(rendered_, 3 * layout_.max_pixels, allocations_);
  grow_vector(d_rendered_, 3 * layout_.max_pixels, allocations_);
  grow_vector(alpha_, layout_.max_pixels, allocations_);
  raster_.reserve_pixels(layout_.max_pixels, layout_.max_tiles);
  loss_.reserve_pixels(layout_.max_pixels);
}

void CpuTraining::prefetch_image(uint32_t view) {
  if (!storage_.streamed || view >= layout_.views.size()) return;
  if (staged_view_[0] == view || staged_view_[1] == view) return;
  // The slot the last step did not read (a GPU copies into it while that
  // step runs; here the copy is the same bytes, in order).
  const int k = 1 - current_slot_;
  const ImageSlot& slot = layout_.views[view];
  const size_t pixels = static_cast<size_t>(slot.width) * slot.height;
  std::memcpy(staged_rgb_[k].data(), images_.data() + slot.rgb_offset, 3 * pixels);
  if (slot.has_mask) std::memcpy(staged_mask_[k].data(), masks_.data() + slot.mask_offset, pixels);
  staged_view_[k] = view;
}

std::pair<const uint8_t*, const uint8_t*> CpuTraining::view_pixels(uint32_t view) {
  const ImageSlot& slot = layout_.views[view];
  if (!storage_.streamed)
    return {images_.data() + slot.rgb_offset, slot.has_mask ? masks_.data() + slot.mask_offset : nullptr};
  if (staged_view_[0] != view && staged_view_[1] != view) prefetch_image(view);  // not fetched ahead
  const int k = staged_view_[0] == view ? 0 : 1;
  current_slot_ = k;
  return {staged_rgb_[k].data(), slot.has_mask ? staged_mask_[k].data() : nullptr};
}

void CpuTraining::resize(size_t n) {
  for (int a = 0; a < 5; ++a) {
    size_t len = n * param_width(a, sh_stride_);
    grow_vector(params_[a], len, allocations_);
    grow_vector(m_[a], len, allocations_);
    grow_vector(v_[a], len, allocations_);
    grow_vector(grads_[a], len, allocations_);
  }
  grow_vector(means2d_grad_, 2 * n, allocations_);
  grow_vector(grad_accum_, n, allocations_);
  grow_vector(grad_count_, n, allocations_);
  grow_vector(max_radii_, n, allocations_);
  grow_vector(radii_, n, allocations_);
  if (options_.absgrad) grow_vector(means2d_abs_, 2 * n, allocations_);
  count_ = n;
}

void CpuTraining::set_state(const TrainingState& s) {
  loss_value_ = std::numeric_limits<float>::quiet_NaN();  // no forward of this state yet
  sh_stride_ = s.sh_stride;
  resize(s.count);
  for (int a = 0; a < 5; ++a) {
    std::copy(s.params[a].begin(), s.params[a].end(), params_[a].begin());
    if (s.adam_m[a].empty()) {
      std::fill(m_[a].begin(), m_[a].end(), 0.f);
      std::fill(v_[a].begin(), v_[a].end(), 0.f);
    } else {
      std::copy(s.adam_m[a].begin(), s.adam_m[a].end(), m_[a].begin());
      std::copy(s.adam_v[a].begin(), s.adam_v[a].end(), v_[a].begin());
      if (options_.bf16_moments)  // as the GPU stores them (a bfloat16 state is kept as it is)
        for (size_t i = 0; i < s.adam_m[a].size(); ++i) {
          m_[a][i] = bf16_float(bf16_round_nearest(m_[a][i]));
          v_[a][i] = bf16_float(bf16_round_nearest(v_[a][i]));
        }
    }
  }
  auto load = [&](const std::vector<float>& src, std::vector<float>& dst) {
    if (src.empty())
      std::fill(dst.begin(), dst.end(), 0.f);
    else
      std::copy(src.begin(), src.end(), dst.begin());
  };
  load(s.grad_accum, grad_accum_);
  load(s.grad_count, grad_count_);
  load(s.max_radii, max_radii_);
  if (!s.scale_ceiling.empty() && s.scale_ceiling.size() != s.count)
    throw ConfigError("[trainer] state.scale_ceiling: expected " + std::to_string(s.count) + " values, got " +
                      std::to_string(s.scale_ceiling.size()));
  scale_ceiling_ = s.scale_ceiling;
  if (options_.exposure) {  // every uploaded view's correction: identity unless given
    const size_t len = kExposureFloats * layout_.views.size();
    for (const std::vector<float>* v : {&s.exposure, &s.exposure_m, &s.exposure_v})
      if (!v->empty() && v->size() != len)
        throw ConfigError("[trainer] state.exposure: expected " + std::to_string(len) + " values (12 per view), got " +
                          std::to_string(v->size()));
    grow_vector(exposure_, len, allocations_);
    // Identity [I | 0]: entries 0, 5 and 10 of each view are 1.
    for (size_t i = 0; i < len; ++i) exposure_[i] = s.exposure.empty() ? (i % 12 % 5 == 0 ? 1.f : 0.f) : s.exposure[i];
    grow_vector(exposure_m_, len, allocations_);
    grow_vector(exposure_grad_views_, len, allocations_);
    exposure_grad_views_set_ = false;
    grow_vector(exposure_v_, len, allocations_);
    load(s.exposure_m, exposure_m_);
    load(s.exposure_v, exposure_v_);
    grow_vector(corrected_, 3 * layout_.max_pixels, allocations_);
    uint32_t max_height = 0;  // the gradient's partials: one per kExposureRows rows of the tallest view
    for (const ImageSlot& v : layout_.views) max_height = std::max(max_height, v.height);
    grow_vector(exposure_partials_, kExposureFloats * ((max_height + kExposureRows - 1) / kExposureRows), allocations_);
    exposure_view_ = -1;
  }
}

void CpuTraining::get_grads(std::vector<float> (&grads)[5]) const {
  for (int a = 0; a < 5; ++a) grads[a].assign(grads_[a].begin(), grads_[a].begin() + count_ * param_width(a, sh_stride_));
}

void CpuTraining::set_grads(const std::vector<float> (&grads)[5]) {
  for (int a = 0; a < 5; ++a)
    if (grads[a].size() != count_ * param_width(a, sh_stride_))
      throw ConfigError("[trainer] gradients: array " + std::to_string(a) + " has " + std::to_string(grads[a].size()) +
                        " values, expected " + std::to_string(count_ * param_width(a, sh_stride_)));
  for (int a = 0; a < 5; ++a) std::copy(grads[a].begin(), grads[a].end(), grads_[a].begin());
}

void CpuTraining::accumulate_grads(uint32_t k, uint32_t views) {
  accumulate_view(k, views, loss_value_, loss_sum_);  // the batch's loss: the views' mean
  for (int a = 0; a < 5; ++a) {
    const size_t len = count_ * param_width(a, sh_stride_);
    if (k == 0) grow_vector(grad_sum_[a], len, allocations_);  // grows with the Gaussians, not per step
    float *g = grads_[a].data(), *sum = grad_sum_[a].data();
    for (size_t i = 0; i < len; ++i) accumulate_view(k, views, g[i], sum[i]);
  }
}

void CpuTraining::get_step_radii(std::vector<int32_t>& radii) const {
  radii.assign(radii_.begin(), radii_.begin() + std::min(radii_.size(), count_));
}

void CpuTraining::set_step_radii(const std::vector<int32_t>& radii) {
  if (radii.size() != count_ || radii_.size() < count_)
    throw ConfigError("[trainer] step radii: " + std::to_string(radii.size()) + " values, expected " +
                      std::to_string(count_) + " (one per Gaussian, after a forward)");
  std::copy(radii.begin(), radii.end(), radii_.begin());
}

void CpuTraining::get_exposure_grads(std::vector<float>& grads) const {
  grads.clear();
  if (!options_.exposure) return;
  if (exposure_grad_views_set_) {
    grads = exposure_grad_views_;
    return;
  }
  grads.assign(exposure_.size(), 0.f);
  if (exposure_view_ >= 0)
    std::copy(exposure_grad_, exposure_grad_ + kExposureFloats, grads.begin() + kExposureFloats * exposure_view_);
}

void CpuTraining::set_exposure_grads(const std::vector<float>& grads) {
  if (!options_.exposure)
    throw ConfigError("[trainer] gradients: exposure given, but this run has no exposure compensation");
  if (grads.size() != exposure_.size())
    throw ConfigError("[trainer] gradients: exposure has " + std::to_string(grads.size()) + " values, expected " +
                      std::to_string(exposure_.size()) + " (12 per training view)");
  std::copy(grads.begin(), grads.end(), exposure_grad_views_.begin());
  exposure_grad_views_set_ = true;
}

void CpuTraining::get_stats(std::vector<float>& accum, std::vector<float>& count, std::vector<float>& max_radii) const {
  accum = grad_accum_;
  count = grad_count_;
  max_radii = max_radii_;
}

void CpuTraining::set_stats(const std::vector<float>& accum, const std::vector<float>& count,
                            const std::vector<float>& max_radii) {
  for (const std::vector<float>* v : {&accum, &count, &max_radii})
    if (v->size() != count_)
      throw ConfigError("[trainer] densification statistics: " + std::to_string(v->size()) + " values for " +
                        std::to_string(count_) + " Gaussians");
  grad_accum_ = accum;
  grad_count_ = count;
  max_radii_ = max_radii;
}

void CpuTraining::get_state(TrainingState& s) const {
  s.count = count_;
  s.sh_stride = sh_stride_;
  for (int a = 0; a < 5; ++a) {
    s.params[a] = params_[a];
    s.adam_m[a] = m_[a];
    s.adam_v[a] = v_[a];
  }
  s.grad_accum = grad_accum_;
  s.grad_count = grad_count_;
  s.max_radii = max_radii_;
  s.scale_ceiling = scale_ceiling_;
  s.exposure.clear();
  s.exposure_m.clear();
  s.exposure_v.clear();
  if (options_.exposure) {
    s.exposure = exposure_;
    s.exposure_m = exposure_m_;
    s.exposure_v = exposure_v_;
  }
}

GaussiansView CpuTraining::view() const {
  GaussiansView g;
  g.means = params_[kMeans].data();
  g.log_scales = params_[kLogScales].data();
  g.quats = params_[kQuats].data();
  g.opacity_logits = params_[kOpacity].data();
  g.sh = params_[kSh].data();
  g.count = count_;
  g.sh_stride = sh_stride_;
  return g;
}

void CpuTraining::forward_backward(const CameraParams& cam, uint32_t view_index, uint32_t sh_degree,
                                   const float background[3], float ssim_weight, bool track_stats) {
  if (view_index >= layout_.views.size() || cam.width != layout_.views[view_index].width ||
      cam.height != layout_.views[view_index].height)
    throw ConfigError("[trainer] view index or camera size does not match the uploaded images");
  ForwardOutputs out{rendered_.data(), alpha_.data(), radii_.data()};
  raster_.forward(view(), cam, sh_degree, background, out);
  const auto [target, mask] = view_pixels(view_index);
  const size_t pixels = static_cast<size_t>(cam.width) * cam.height;
  if (options_.exposure) exposure_forward(view_index, pixels);
  {
    ScopedTiming t(timing_, "ts_ssim");
    loss_value_ = loss_.loss_and_grad(options_.exposure ? corrected_.data() : rendered_.data(), target, cam.width,
                                      cam.height, ssim_weight, d_rendered_.data(), mask);
  }
  if (options_.exposure) exposure_backward(view_index, pixels, cam.width);
  GradientOutputs grads{grads_[kMeans].data(),   grads_[kLogScales].data(), grads_[kQuats].data(),
                        grads_[kOpacity].data(), grads_[kSh].data(),        means2d_grad_.data()};
  if (options_.absgrad && track_stats) grads.means2d_abs = means2d_abs_.data();
  raster_.backward(d_rendered_.data(), nullptr, grads);
  last_tracked_ = track_stats;
  if (!track_stats) return;
  ScopedTiming t(timing_, "ts_densify_stats");
  // absgrad: the same statistic of the summed absolute per-pixel gradient.
  const float* g2d = options_.absgrad ? means2d_abs_.data() : means2d_grad_.data();
  pool_.parallel_for(count_, 4096, [&](size_t lo, size_t hi) {
    for (size_t i = lo; i < hi; ++i) {
      if (radii_[i] <= 0) continue;
      densify_stats_add(g2d[2 * i], g2d[2 * i + 1], cam.width, cam.height, radii_[i], grad_accum_[i], grad_count_[i],
                        max_radii_[i]);
    }
  });
}

namespace {
ExposureAffine exposure_of(const float* e) {
  ExposureAffine a;
  for (uint32_t k = 0; k < kExposureFloats; ++k) a.e[k] = e[k];
  return a;
}
}  // namespace

void CpuTraining::exposure_forward(uint32_t view, size_t pixels) {
  ScopedTiming t(timing_, "ts_exposure");
  const ExposureAffine a = exposure_of(exposure_.data() + kExposureFloats * view);
  const float* x = rendered_.data();
  float* out = corrected_.data();
  pool_.parallel_for(pixels, 1 << 14, [&](size_t lo, size_t hi) {
    for (size_t p = lo; p < hi; ++p) {
      const vec3 c = exposure_apply(a, make_vec3(x[3 * p], x[3 * p + 1], x[3 * p + 2]));
      out[3 * p] = c.x;
      out[3 * p + 1] = c.y;
      out[3 * p + 2] = c.z;
    }
  });
}

void CpuTraining::exposure_backward(uint32_t view, size_t pixels, uint32_t width) {
  ScopedTiming t(timing_, "ts_exposure");
  const ExposureAffine a = exposure_of(exposure_.data() + kExposureFloats * view);
  const size_t height = pixels / width;
  const size_t blocks = (height + kExposureRows - 1) / kExposureRows;
  const float* x = rendered_.data();
  float* d = d_rendered_.data();
  float* partials = exposure_partials_.data();
  pool_.parallel_for(blocks, 1, [&](size_t lo, size_t hi) {
    for (size_t b = lo; b < hi; ++b) {
      float acc[kExposureFloats] = {};
      const size_t p0 = b * kExposureRows * width, p1 = std::min(pixels, (b + 1) * kExposureRows * width);
      for (size_t p = p0; p < p1; ++p) {
        const vec3 dp = make_vec3(d[3 * p], d[3 * p + 1], d[3 * p + 2]);
        exposure_grad_accumulate(acc, make_vec3(x[3 * p], x[3 * p + 1], x[3 * p + 2]), dp);
        const vec3 g = exposure_image_grad(a, dp);
        d[3 * p] = g.x;
        d[3 * p + 1] = g.y;
        d[3 * p + 2] = g.z;
      }
      std::memcpy(partials + kExposureFloats * b, acc, sizeof(acc));
    }
  });
  for (uint32_t k = 0; k < kExposureFloats; ++k) {
    float sum = 0.f;
    for (size_t b = 0; b < blocks; ++b) sum += partials[kExposureFloats * b + k];
    exposure_grad_[k] = sum;
  }
  exposure_view_ = view;
  exposure_grad_views_set_ = false;
}

void CpuTraining::adam_step(const AdamSettings& s) {
  ScopedTiming t(timing_, "ts_adam");
  const float bias1 = s.bias_correction(s.beta1), bias2 = s.bias_correction(s.beta2);
  const AdamStep base = make_adam_step(0.f, s.beta1, s.beta2, s.eps, bias1, bias2);
  const float steps[4] = {adam_step_size(s.lr_means, bias1), adam_step_size(s.lr_log_scales, bias1),
                          adam_step_size(s.lr_quats, bias1), adam_step_size(s.lr_opacity, bias1)};
  const float step_sh_dc = adam_step_size(s.lr_sh_dc, bias1), step_sh_rest = adam_step_size(s.lr_sh_rest, bias1);
  const uint32_t sh_width = 3 * sh_stride_;
  const int32_t* radii = radii_.data();
  const bool visible_only = s.visible_only, bf16 = options_.bf16_moments;
  const uint32_t moment_key = adam_moment_key(s.moment_seed, s.step);
  pool_.parallel_for(count_, 2048, [&](size_t lo, size_t hi) {
    for (int a = 0; a < 5; ++a) {
      const uint32_t w = param_width(a, sh_stride_);
      const uint32_t group_key = adam_group_key(moment_key, static_cast<uint32_t>(a));
      float* p = params_[a].data();
      float* m = m_[a].data();
      float* v = v_[a].data();
      const float* g = grads_[a].data();
      AdamStep step = base;
      for (size_t i = lo * w; i < hi * w; ++i) {
        if (visible_only && radii[i / w] <= 0) continue;  // unseen: parameters and moments as they were
        if (a < 4)
          step.step_size = steps[a];
        else
          step.step_size = (i % sh_width) < 3 ? step_sh_dc : step_sh_rest;
        adam_update(step, g[i], p[i], m[i], v[i]);
        if (bf16) {  // stored as the GPU's packed word holds them (adam_update_bf16)
          const uint32_t word = adam_pack_moments(m[i], v[i], adam_moment_noise(group_key, static_cast<uint32_t>(i)));
          m[i] = adam_unpack_m(word);
          v[i] = adam_unpack_v(word);
        }
      }
    }
  });
  if (options_.exposure && (exposure_view_ >= 0 || exposure_grad_views_set_)) {
    // Every view's correction steps (a zero gradient but the last step's
    // view's, or every view's that set_exposure_grads gave), as one dense
    // parameter tensor under torch.optim.Adam.
    const AdamStep step = make_adam_step(s.lr_exposure, s.beta1, s.beta2, s.eps, bias1, bias2);
    for (size_t i = 0; i < exposure_.size(); ++i) {
      const bool current = i / kExposureFloats == static_cast<size_t>(exposure_view_);
      const float g = exposure_grad_views_set_ ? exposure_grad_views_[i]
                                               : (current ? exposure_grad_[i % kExposureFloats] : 0.f);
      adam_update(step, g, exposure_[i], exposure_m_[i], exposure_v_[i]);
    }
    center_exposure();
  }
}

void CpuTraining::center_exposure() {
  // The corrections are defined only relative to one another (the Gaussians'
  // colours can absorb any affine map they share), so their mean is held at
  // the identity: the model renders the views' average exposure.
  const size_t views = exposure_.size() / kExposureFloats;
  for (uint32_t k = 0; k < kExposureFloats; ++k) {
    float sum = 0.f;
    for (size_t v = 0; v < views; ++v) sum += exposure_[kExposureFloats * v + k];
    const float shift = sum / static_cast<float>(views) - exposure_identity(k);
    for (size_t v = 0; v < views; ++v) exposure_[kExposureFloats * v + k] -= shift;
  }
}

DensifyResult CpuTraining::densify(const DensifySettings& s) {
  ScopedTiming t(timing_, "ts_densify");
  scale_ceiling_.clear();  // other Gaussians: cap_scales records anew
  const size_t n = count_;
  DensifyResult result;
  // 1. Classify and list the sources of the densified set, in order: the
  //    originals that are not split, then clones, then split children.
  grow_vector(kind_, n, allocations_);
  const float* ls = params_[kLogScales].data();
  for (size_t i = 0; i < n; ++i) {
    float max_ls = std::max(ls[3 * i], std::max(ls[3 * i + 1], ls[3 * i + 2]));
    kind_[i] = densify_classify(grad_accum_[i], grad_count_[i], max_ls, s.grad_threshold, s.clone_max_scale);
  }
  size_t room = s.max_gaussians > n ? s.max_gaussians - n : 0;
  for (size_t i = 0; i < n; ++i) {  // over the cap, a Gaussian stays as it is
    uint32_t extra = kind_[i] == DENSIFY_CLONE ? 1 : kind_[i] == DENSIFY_SPLIT ? s.split_count - 1 : 0;
    if (extra > room) kind_[i] = DENSIFY_KEEP;
    else room -= extra;
  }
  sources_.clear();  // capacity is kept across calls
  for (size_t i = 0; i < n; ++i)
    if (kind_[i] != DENSIFY_SPLIT) sources_.push_back({static_cast<uint32_t>(i), kOriginal, 0});
  for (size_t i = 0; i < n; ++i)
    if (kind_[i] == DENSIFY_CLONE) {
      sources_.push_back({static_cast<uint32_t>(i), kClone, 0});
      ++result.cloned;
    }
  for (size_t i = 0; i < n; ++i)
    if (kind_[i] == DENSIFY_SPLIT) {
      for (uint32_t c = 0; c < s.split_count; ++c) sources_.push_back({static_cast<uint32_t>(i), kChild, c});
      ++result.split;
    }

  // 2. Prune: low opacity, oversized in the world or on screen. Children take
  //    the parent's scale / divisor and have no screen radius yet.
  const float log_div = std::log(s.split_scale_divisor);
  const float logit_min = std::log(s.prune_opacity / (1.f - s.prune_opacity));
  size_t out = 0;
  for (Source& src : sources_) {
    const float* l = ls + 3 * src.index;
    float max_scale = std::exp(std::max(l[0], std::max(l[1], l[2])) - (src.kind == kChild ? log_div : 0.f));
    float radius = src.kind == kChild ? 0.f : max_radii_[src.index];
    bool prune = params_[kOpacity][src.index] < logit_min;
    if (s.prune_max_world_scale > 0.f && max_scale > s.prune_max_world_scale) prune = true;
    if (s.prune_max_screen_radius > 0.f && radius > s.prune_max_screen_radius &&
        !(s.prune_screen_scale_per_px > 0.f && max_scale >= radius * s.prune_screen_scale_per_px))
      prune = true;
    src.keep = !prune;
    out += src.keep;
  }
  result.pruned = static_cast<uint32_t>(sources_.size() - out);

  // 3. Gather the kept ones into scratch arrays, then swap them in. Moments of
  //    new Gaussians start at zero.
  for (int a = 0; a < 5; ++a) {
    const size_t w = param_width(a, sh_stride_);
    grow_vector(scratch_p_[a], out * w, allocations_);
    grow_vector(scratch_m_[a], out * w, allocations_);
    grow_vector(scratch_v_[a], out * w, allocations_);
    size_t k = 0;
    for (const Source& src : sources_) {
      if (!src.keep) continue;
      const size_t from = src.index * w, to = k * w;
      std::memcpy(scratch_p_[a].data() + to, params_[a].data() + from, w * sizeof(float));
      if (src.kind == kOriginal) {
        std::memcpy(scratch_m_[a].data() + to, m_[a].data() + from, w * sizeof(float));
        std::memcpy(scratch_v_[a].data() + to, v_[a].data() + from, w * sizeof(float));
      } else {
        std::fill(scratch_m_[a].data() + to, scratch_m_[a].data() + to + w, 0.f);
        std::fill(scratch_v_[a].data() + to, scratch_v_[a].data() + to + w, 0.f);
      }
      ++k;
    }
  }
  size_t k = 0;
  for (const Source& src : sources_) {
    if (!src.keep) continue;
    if (src.kind == kChild) {
      const uint32_t i = src.index;
      const float* q = params_[kQuats].data() + 4 * i;
      const float* mean = params_[kMeans].data() + 3 * i;
      vec3 cm = split_child_mean(make_vec3(mean[0], mean[1], mean[2]), make_vec3(ls[3 * i], ls[3 * i + 1], ls[3 * i + 2]),
                                 q[0], q[1], q[2], q[3], static_cast<uint32_t>(s.seed), s.step, i, src.child);
      float* dst = scratch_p_[kMeans].data() + 3 * k;
      dst[0] = cm.x;
      dst[1] = cm.y;
      dst[2] = cm.z;
      for (int c = 0; c < 3; ++c) scratch_p_[kLogScales][3 * k + c] -= log_div;
    }
    ++k;
  }
  for (int a = 0; a < 5; ++a) {
    params_[a].swap(scratch_p_[a]);
    m_[a].swap(scratch_m_[a]);
    v_[a].swap(scratch_v_[a]);
  }
  resize(out);
  std::fill(grad_accum_.begin(), grad_accum_.end(), 0.f);
  std::fill(grad_count_.begin(), grad_count_.end(), 0.f);
  std::fill(max_radii_.begin(), max_radii_.end(), 0.f);
  result.count = static_cast<uint32_t>(out);
  return result;
}

void CpuTraining::snapshot_grads(DebugSnapshot& out) const {
  for (int a = 0; a < 5; ++a) out.grads[a] = grads_[a];
  out.means2d_grad = means2d_grad_;
  out.means2d_abs.clear();
  out.exposure_grad.clear();
  if (options_.absgrad && last_tracked_) out.means2d_abs.assign(means2d_abs_.begin(), means2d_abs_.begin() + 2 * count_);
  if (options_.exposure && exposure_view_ >= 0) out.exposure_grad.assign(exposure_grad_, exposure_grad_ + kExposureFloats);
}

void CpuTraining::reset_opacity(float max_opacity) {
  const float logit = std::log(max_opacity / (1.f - max_opacity));
  for (size_t i = 0; i < count_; ++i) params_[kOpacity][i] = std::min(params_[kOpacity][i], logit);
  std::fill(m_[kOpacity].begin(), m_[kOpacity].end(), 0.f);
  std::fill(v_[kOpacity].begin(), v_[kOpacity].end(), 0.f);
}

void CpuTraining::cap_scales(float log_growth) {
  float* ls = params_[kLogScales].data();
  const bool record = scale_ceiling_.empty();
  if (record) grow_vector(scale_ceiling_, count_, allocations_);  // once: densification has stopped
  float* ceiling = scale_ceiling_.data();
  pool_.parallel_for(count_, 1 << 14, [&](size_t lo, size_t hi) {
    for (size_t i = lo; i < hi; ++i) {
      float* s = ls + 3 * i;
      if (record) ceiling[i] = scale_ceiling(s[0], s[1], s[2], log_growth);
      for (int k = 0; k < 3; ++k) s[k] = capped_log_scale(s[k], ceiling[i]);
    }
  });
}

NonFiniteCounts CpuTraining::count_nonfinite() const {
  NonFiniteCounts counts;
  for (int a = 0; a < 5; ++a) {
    const float* p = params_[a].data();
    std::atomic<uint64_t> found{0};
    pool_.parallel_for(count_ * param_width(a, sh_stride_), 1 << 16, [&](size_t lo, size_t hi) {
      uint64_t c = 0;
      for (size_t i = lo; i < hi; ++i) c += sp_nonfinite(p[i]) ? 1u : 0u;
      if (c) found.fetch_add(c, std::memory_order_relaxed);
    });
    counts.params[a] = found.load();
  }
  return counts;
}

void CpuTraining::render(const CameraParams& cam, uint32_t sh_degree, const float background[3], float* image) {
  ForwardOutputs out{image, nullptr, nullptr};
  raster_.forward(view(), cam, sh_degree, background, out);
}

void CpuTraining::blend_weights(const CameraParams* cams, uint32_t count, std::vector<float>& weights) {
  const size_t n = count_;
  weights.assign(n, 0.f);
  if (n == 0 || count == 0) return;
  // White Gaussians (degree 0, colour 1: never clamped) under d_image = 1:
  // each one's DC gradient is SH_C0 times its summed alpha T.
  GaussiansView g = view();
  std::vector<float> white(3 * n, 0.5f / SH_C0);
  g.sh = white.data();
  g.sh_stride = 1;
  size_t max_pixels = 0;
  for (uint32_t v = 0; v < count; ++v) max_pixels = std::max(max_pixels, static_cast<size_t>(cams[v].width) * cams[v].height);
  std::vector<float> ones(3 * max_pixels, 1.f), image(3 * max_pixels);
  std::vector<float> d_means(3 * n), d_scales(3 * n), d_quats(4 * n), d_opacity(n), d_sh(3 * n), d_mean2d(2 * n);
  const GradientOutputs grads{d_means.data(), d_scales.data(), d_quats.data(), d_opacity.data(), d_sh.data(),
                              d_mean2d.data(), nullptr};
  const float black[3] = {0.f, 0.f, 0.f};
  std::vector<double> sum(n, 0.0);
  for (uint32_t v = 0; v < count; ++v) {
    ForwardOutputs out{image.data(), nullptr, nullptr};
    raster_.forward(g, cams[v], 0, black, out);
    raster_.backward(ones.data(), nullptr, grads);
    for (size_t i = 0; i < n; ++i) sum[i] += d_sh[3 * i] / SH_C0;
  }
  for (size_t i = 0; i < n; ++i) weights[i] = static_cast<float>(sum[i]);
}

}  // namespace splat::cpu
