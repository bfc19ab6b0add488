#include "splat/trainer.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <limits>
#include <numeric>
#include <string>

#include "../../shaders/common/random.h"
#include "splat/errors.h"
#include "splat/limits.h"

namespace splat {

Trainer::Trainer(std::unique_ptr<Device> device, const TrainSettings& settings, std::vector<CameraParams> cameras,
                 const std::vector<TrainingImage>& images, const TrainingState& initial, uint32_t step)
    : device_(std::move(device)), settings_(settings), cameras_(std::move(cameras)), step_(step) {
  batches_run_.reserve(kFiniteCheckEvery + 1);
  batches_replayed_.reserve(kFiniteCheckEvery + 1);
  if (cameras_.empty()) throw ConfigError("[trainer] no training views");
  if (settings_.batch_views == 0 || settings_.batch_views > kMaxBatchViews)
    throw ConfigError("[splat] batch_views " + std::to_string(settings_.batch_views) + ": must be 1.." +
                      std::to_string(kMaxBatchViews));
  if (settings_.batch_views > 1 && (settings_.exposure || settings_.visible_adam))
    throw ConfigError(std::string("[splat] batch_views > 1 does not train with ") +
                      (settings_.exposure ? "exposure" : "visible_adam") + " yet: set batch_views = 1");
  check_gaussian_count(initial.count, "initial Gaussians");
  check_gaussian_count(settings_.max_gaussians, "max_gaussians");
  if (settings_.split_count < 2 || settings_.split_count > kMaxSplitCount)
    throw ConfigError("[splat] split_count " + std::to_string(settings_.split_count) + ": must be 2.." +
                      std::to_string(kMaxSplitCount));
  if (initial.sh_stride == 0 || initial.sh_stride > SPLAT_MAX_SH_COEFFS)
    throw ConfigError("[trainer] sh: " + std::to_string(initial.sh_stride) + " coefficients per channel (1.." +
                      std::to_string(SPLAT_MAX_SH_COEFFS) + ")");
  if (images.size() != cameras_.size())
    throw ConfigError("[trainer] " + std::to_string(images.size()) + " images for " +
                      std::to_string(cameras_.size()) + " cameras");
  for (size_t v = 0; v < cameras_.size(); ++v) {
    const CameraParams& c = cameras_[v];
    if (!images[v].rgb || c.width != images[v].width || c.height != images[v].height)
      throw ConfigError("[trainer] view " + std::to_string(v) + ": camera is " + std::to_string(c.width) + "x" +
                        std::to_string(c.height) + " but its image is " + std::to_string(images[v].width) + "x" +
                        std::to_string(images[v].height));
  }
  views_ = cameras_.size();
  device_->set_antialiased(settings_.antialiased);
  device_->set_chunked_stop(settings_.chunked_stop);
  device_->upload_images(downscaled_views(images), static_cast<size_t>(settings_.image_budget_bytes));
  device_->set_training_options(TrainingOptions{settings_.absgrad, settings_.exposure, settings_.bf16_moments});
  device_->set_training_state(initial);
  order_.resize(views_);
}

std::vector<TrainingImage> Trainer::downscaled_views(const std::vector<TrainingImage>& images) {
  const uint32_t levels = settings_.num_downscales;
  if (levels == 0) return images;
  if (levels > kMaxDownscales)
    throw ConfigError("[trainer] num_downscales " + std::to_string(levels) + ": must be 0.." +
                      std::to_string(kMaxDownscales));
  if (settings_.resolution_schedule == 0) throw ConfigError("[trainer] resolution_schedule: must be >= 1 step");
  // Each view's colour correction is one set of parameters for one image size.
  if (settings_.exposure)
    throw ConfigError("[trainer] exposure with num_downscales > 0: not supported; train one or the other");
  std::vector<TrainingImage> all = images;
  for (uint32_t level = 1; level <= levels; ++level) {
    const uint32_t f = 1u << level;
    for (size_t v = 0; v < views_; ++v) {
      const TrainingImage& src = images[v];
      if (src.width < f || src.height < f)
        throw ConfigError("[trainer] view " + std::to_string(v) + " (" + std::to_string(src.width) + "x" +
                          std::to_string(src.height) + ") is smaller than 1/" + std::to_string(f) +
                          " of a pixel at num_downscales " + std::to_string(levels));
      const CameraParams cam = downscaled_camera(cameras_[v], f);
      // Box filter of f x f pixels, rounded to the nearest byte; a pixel
      // counts when all of its f x f pixels do.
      const size_t pixels = static_cast<size_t>(cam.width) * cam.height;
      std::vector<uint8_t> out(pixels * 3 + (src.mask ? pixels : 0));
      const uint32_t area = f * f;
      for (uint32_t y = 0; y < cam.height; ++y)
        for (uint32_t x = 0; x < cam.width; ++x) {
          uint32_t sum[3] = {0, 0, 0};
          bool valid = true;
          for (uint32_t dy = 0; dy < f; ++dy)
            for (uint32_t dx = 0; dx < f; ++dx) {
              const size_t p = static_cast<size_t>(y * f + dy) * src.width + (x * f + dx);
              for (int c = 0; c < 3; ++c) sum[c] += src.rgb[3 * p + c];
              if (src.mask && !src.mask[p]) valid = false;
            }
          const size_t q = static_cast<size_t>(y) * cam.width + x;
          for (int c = 0; c < 3; ++c) out[3 * q + c] = static_cast<uint8_t>((sum[c] + area / 2) / area);
          if (src.mask) out[3 * pixels + q] = valid ? 1 : 0;
        }
      cameras_.push_back(cam);
      level_pixels_.push_back(std::move(out));
      const size_t k = level_pixels_.size() - 1;
      TrainingImage t;
      t.rgb = level_pixels_[k].data();
      t.mask = src.mask ? level_pixels_[k].data() + 3 * pixels : nullptr;
      t.width = cam.width;
      t.height = cam.height;
      // The device has its own copy: the host's goes (streamed views keep theirs).
      t.copied = [this, k] { std::vector<uint8_t>().swap(level_pixels_[k]); };
      all.push_back(t);
    }
  }
  return all;
}

uint32_t Trainer::downscale_level(uint32_t step) const {
  const uint32_t levels = settings_.num_downscales;
  if (levels == 0 || step == 0) return 0;
  const uint32_t halvings = (step - 1) / std::max(1u, settings_.resolution_schedule);
  return halvings >= levels ? 0u : levels - halvings;
}

uint32_t Trainer::device_view(uint32_t t, uint32_t view) const {
  return downscale_level(t) * static_cast<uint32_t>(views_) + view;
}

uint32_t Trainer::active_sh_degree(uint32_t step) const {
  return std::min(settings_.sh_degree, step / std::max(1u, settings_.sh_degree_interval));
}

namespace {

// Exponential decay (log-linear) from lr0 at t = 0 to lr1 at t = 1; linear
// where either is not positive.
float log_linear(double lr0, double lr1, double t) {
  if (lr0 <= 0.0 || lr1 <= 0.0) return static_cast<float>(lr0 * (1 - t) + lr1 * t);
  return static_cast<float>(std::exp(std::log(lr0) * (1.0 - t) + std::log(lr1) * t));
}

}  // namespace

float Trainer::means_lr(uint32_t step) const {
  double t = std::clamp(static_cast<double>(step) / std::max(1u, settings_.steps), 0.0, 1.0);
  return log_linear(settings_.means_lr * settings_.scene_extent, settings_.means_lr_final * settings_.scene_extent, t);
}

float Trainer::late_lr_scale(uint32_t step) const {
  const TrainSettings& s = settings_;
  const uint32_t from = s.mcmc ? s.mcmc_refine_until : s.densify_until;
  if (s.lr_final_fraction == 1.f || step <= from || s.steps <= from) return 1.f;
  double t = std::min(1.0, static_cast<double>(step - from) / static_cast<double>(s.steps - from));
  return log_linear(1.0, s.lr_final_fraction, t);
}

float Trainer::exposure_lr(uint32_t step) const {
  // The same decay as the means' rate.
  double t = std::clamp(static_cast<double>(step) / std::max(1u, settings_.steps), 0.0, 1.0);
  return log_linear(settings_.exposure_lr, settings_.exposure_lr_final, t);
}

void Trainer::shuffle_epoch(uint32_t epoch) {
  // Fisher-Yates with counter-based draws: the order is a function of
  // (seed, epoch), so a checkpoint needs only the step count.
  std::iota(order_.begin(), order_.end(), 0u);
  const uint32_t seed = seed32();
  for (uint32_t i = static_cast<uint32_t>(order_.size()); i > 1; --i) {
    uint32_t j = random_key(seed, epoch, i, 0x9e3779b9u) % i;
    std::swap(order_[i - 1], order_[j]);
  }
  epoch_ = epoch;
}

uint32_t Trainer::view_for_step(uint32_t step) {
  const uint32_t v = static_cast<uint32_t>(views_);
  uint32_t epoch = (step - 1) / v;
  if (epoch != epoch_) shuffle_epoch(epoch);
  return order_[(step - 1) % v];
}

bool Trainer::resets_opacity_at(uint32_t t) const {
  const TrainSettings& s = settings_;
  const uint32_t every = std::max(1u, s.opacity_reset_every);
  return !s.mcmc && s.opacity_resets && t < s.densify_until && t % every == 0 && uint64_t{t} + every <= s.steps;
}

bool Trainer::mcmc_refines_at(uint32_t t) const {
  const TrainSettings& s = settings_;
  return s.mcmc && t > s.mcmc_refine_from && t < s.mcmc_refine_until && t % std::max(1u, s.mcmc_refine_every) == 0;
}

uint32_t Trainer::mcmc_growth_at(uint32_t n) const {
  // In double, as gsplat's int((1 + 0.05) * n).
  const double target = std::floor((1.0 + static_cast<double>(settings_.mcmc_growth)) * n);
  const double cap = std::min<double>(target, settings_.max_gaussians);
  return cap > n ? static_cast<uint32_t>(cap) - n : 0u;
}

void Trainer::diverge(const std::string& why) {
  diverged_ = true;
  diverged_step_ = step_;
  diverged_why_ = why;
  throw TrainingDiverged("[trainer] training diverged at step " + std::to_string(step_) + " (" + why + ")");
}

void Trainer::check_finite() {
  if (diverged_) diverge(diverged_why_);
  settle();
  static const char* const names[5] = {"means", "log_scales", "quats", "opacity_logits", "sh"};
  const NonFiniteCounts c = device_->count_nonfinite();
  if (c.total() == 0) return;
  std::string why = "non-finite parameters:";
  bool first = true;
  for (int a = 0; a < 5; ++a) {
    if (!c.params[a]) continue;
    why += std::string(first ? " " : ", ") + std::to_string(c.params[a]) + " in " + names[a];
    first = false;
  }
  diverge(why);
}

void Trainer::train_step(uint32_t t) {
  const TrainSettings& s = settings_;
  forward_backward(t, active_sh_degree(t), t);
  step_ = t;
  const float late = late_lr_scale(t);
  AdamSettings adam{means_lr(t), s.log_scales_lr * late, s.quats_lr * late, s.opacity_lr * late, s.sh_dc_lr * late,
                    s.sh_rest_lr * late, s.adam_beta1, s.adam_beta2, s.adam_eps, t,
                    s.exposure ? exposure_lr(t) : 0.f, s.visible_adam, seed32()};
  device_->adam_step(adam);
  cap_scales_at(t);
}

void Trainer::cap_scales_at(uint32_t t) {
  const TrainSettings& s = settings_;
  if (s.cap_scale_growth > 0.f && !s.mcmc && t >= s.densify_until) device_->cap_scales(std::log(s.cap_scale_growth));
}

uint32_t Trainer::batch_last(uint32_t first, uint32_t last_at_most) const {
  const uint32_t b = settings_.batch_views;
  const uint32_t steps = settings_.steps;
  uint32_t last = first + (b - 1);
  if (first <= steps) last = std::min(last, steps);  // the run's last batch ends at `steps`
  return std::min(last, last_at_most);              // and any batch where its caller names a step
}

uint32_t Trainer::update_number(uint32_t first) const {
  // ceil((first - 1) / B) + 1: the data-parallel trainer's count (ceil(step / views)
  // updates before a resume, then one a batch) wherever batches run whole from the
  // step a run started or resumed at, and a function of the batch's first view step
  // alone, so a run resumed where one of its batches ended counts on as it did.
  const uint32_t b = settings_.batch_views;
  return (first - 1 + (b - 1)) / b + 1;
}

uint32_t Trainer::train_batch(uint32_t first, uint32_t last, uint32_t from) {
  batches_run_.push_back({first, last});
  if (settings_.batch_views <= 1) {
    train_step(first);
    return first;
  }
  const uint32_t views = last - first + 1;  // a batch may hold one view (the run's end, a named step)
  const uint32_t sh_degree = active_sh_degree(first);
  if (from == 0 && views > 1 && train_views_together(first, views, sh_degree)) from = views;
  for (uint32_t k = from; k < views; ++k) {
    forward_backward(first + k, sh_degree, first);
    if (views > 1) device_->accumulate_gradients(k, views);
    // The batch's next image while this view's work runs (streamed images).
    if (k + 1 < views) device_->prefetch_image(device_view(first + k + 1, view_for_step(first + k + 1)));
  }
  // In double, then rounded once: what a caller of apply_update passing
  // sqrt(views) and beta ** views from Python gives.
  const double v = views;
  apply_update(last, update_number(first), static_cast<float>(std::sqrt(v)),
               static_cast<float>(std::pow(static_cast<double>(settings_.adam_beta1), v)),
               static_cast<float>(std::pow(static_cast<double>(settings_.adam_beta2), v)));
  return last;
}

bool Trainer::train_views_together(uint32_t first, uint32_t views, uint32_t sh_degree) {
  const TrainSettings& s = settings_;
  if (s.random_background) return false;
  std::array<CameraParams, kMaxBatchViews> cams;
  std::array<uint32_t, kMaxBatchViews> device_views;
  std::array<bool, kMaxBatchViews> track;
  for (uint32_t k = 0; k < views; ++k) {
    const uint32_t t = first + k;
    device_views[k] = device_view(t, view_for_step(t));
    cams[k] = cameras_[device_views[k]];
    track[k] = !s.mcmc && t < s.densify_until;
  }
  const std::optional<McmcStepSettings> reg = regularizers_at(first, first);
  return device_->train_views_together(cams.data(), device_views.data(), track.data(), views, sh_degree,
                                       s.background, s.ssim_weight, first, reg ? &*reg : nullptr);
}

void Trainer::train_step_noise(uint32_t t) {
  const TrainSettings& s = settings_;
  // As gsplat's MCMCStrategy: the noise on every step, after any refine, at
  // this step's learning rate of the means.
  if (s.mcmc)
    device_->mcmc_noise(McmcStepSettings{s.mcmc_opacity_reg, s.mcmc_scale_reg, s.mcmc_noise_lr * means_lr(t), s.seed, t});
}

bool Trainer::densifies_at(uint32_t t) const {
  const TrainSettings& s = settings_;
  return !s.mcmc && t < s.densify_until && t > s.densify_from && t % std::max(1u, s.densify_every) == 0;
}

DensifySettings Trainer::densify_settings(uint32_t t) const {
  const TrainSettings& s = settings_;
  // The size pruning starts where the first reset falls; with no resets it
  // never does (measured: pruning by size without resets costs beer 1.9 dB
  // and thermos 0.35; README, "What a capture gets by default").
  const bool after_reset = s.opacity_resets && t > s.opacity_reset_every;
  // Without resets, the screen-size pruning limited to what is seen large from
  // near a camera runs at every densification (train.prune_near).
  const bool near_only = !s.opacity_resets && s.prune_near_scale_per_px > 0.f;
  DensifySettings d;
  d.grad_threshold = s.absgrad ? s.absgrad_grad_threshold : s.densify_grad_threshold;
  d.clone_max_scale = s.percent_dense * s.scene_extent;
  d.split_count = s.split_count;
  d.split_scale_divisor = s.split_scale_divisor;
  d.prune_opacity = s.prune_opacity;
  d.prune_max_world_scale = after_reset ? s.prune_max_world_scale * s.scene_extent : 0.f;
  d.prune_max_screen_radius = after_reset || near_only ? s.prune_max_screen_radius : 0.f;
  d.prune_screen_scale_per_px = near_only ? s.prune_near_scale_per_px : 0.f;
  d.seed = s.seed;
  d.step = t;
  d.max_gaussians = s.max_gaussians;
  return d;
}

void Trainer::forward_backward(uint32_t t, uint32_t sh_degree, uint32_t batch_first) {
  if (t == 0) throw ConfigError("[trainer] forward_backward: steps count from 1");
  const TrainSettings& s = settings_;
  const uint32_t view = device_view(t, view_for_step(t));
  float bg[3] = {s.background[0], s.background[1], s.background[2]};
  if (s.random_background) {
    const uint32_t seed = static_cast<uint32_t>(s.seed);
    for (uint32_t c = 0; c < 3; ++c) bg[c] = random_uniform(random_key(seed, t, 0xb6u, c));
  }
  const bool densifying = !s.mcmc && t < s.densify_until;
  device_->train_forward_backward(cameras_[view], view, sh_degree, bg, s.ssim_weight, densifying, t);
  if (const std::optional<McmcStepSettings> reg = regularizers_at(t, batch_first)) device_->mcmc_regularize(*reg);
}

std::optional<McmcStepSettings> Trainer::regularizers_at(uint32_t t, uint32_t first) const {
  const TrainSettings& s = settings_;
  // The regularisers read only their weights (McmcStepSettings' noise_scale is
  // the noise's, left 0).
  if (s.mcmc) return McmcStepSettings{s.mcmc_opacity_reg, s.mcmc_scale_reg, 0.f, s.seed, t};
  if ((s.opacity_reg == 0.f && s.scale_reg == 0.f) || first < s.reg_from) return std::nullopt;
  return McmcStepSettings{s.opacity_reg, s.scale_reg, 0.f, s.seed, t};
}

void Trainer::apply_update(uint32_t t, uint32_t update, float lr_scale, float beta1, float beta2) {
  const TrainSettings& s = settings_;
  if (update == 0) throw ConfigError("[trainer] apply_update: updates count from 1");
  if (!(lr_scale > 0.f) || !(beta1 >= 0.f && beta1 < 1.f) || !(beta2 >= 0.f && beta2 < 1.f))
    throw ConfigError("[trainer] apply_update: lr_scale must be > 0 and the betas in [0, 1)");
  const float late = late_lr_scale(t) * lr_scale;
  AdamSettings adam{means_lr(t) * lr_scale, s.log_scales_lr * late, s.quats_lr * late,
                    s.opacity_lr * late, s.sh_dc_lr * late, s.sh_rest_lr * late,
                    beta1, beta2, s.adam_eps, update, s.exposure ? exposure_lr(t) * lr_scale : 0.f,
                    s.visible_adam, seed32()};
  device_->adam_step(adam);
  cap_scales_at(t);
  step_ = t;
}

DensifyResult Trainer::densify_at(uint32_t t) {
  settle();
  return device_->densify(densify_settings(t));
}

void Trainer::reset_opacity() {
  settle();
  device_->reset_opacity(settings_.opacity_reset_value);
}

std::vector<float> Trainer::blend_weights(uint32_t t) {
  settle();
  std::vector<CameraParams> cams(views_);
  for (size_t v = 0; v < views_; ++v) cams[v] = cameras_[device_view(t, static_cast<uint32_t>(v))];
  std::vector<float> weights;
  device_->blend_weights(cams.data(), static_cast<uint32_t>(views_), weights);
  return weights;
}

bool Trainer::prunes_low_weight_at(uint32_t t) const {
  const TrainSettings& s = settings_;
  return s.prune_low_weight > 0.f && !s.mcmc && t == s.densify_until;
}

namespace {

// Keeps the rows of `v` (`width` floats a row, n rows, or empty) flagged in keep.
void keep_rows(std::vector<float>& v, size_t width, const std::vector<uint8_t>& keep) {
  if (v.size() != width * keep.size()) return;
  size_t out = 0;
  for (size_t i = 0; i < keep.size(); ++i)
    if (keep[i]) {
      if (out != i) std::copy(v.begin() + width * i, v.begin() + width * (i + 1), v.begin() + width * out);
      ++out;
    }
  v.resize(width * out);
}

}  // namespace

uint32_t Trainer::prune_low_weight(uint32_t t) { return prune_least_weight(blend_weights(t)); }

uint32_t Trainer::prune_least_weight(const std::vector<float>& weights) {
  settle();
  const size_t n = device_->num_gaussians();
  if (weights.size() != n)
    throw ConfigError("[trainer] prune by weight: " + std::to_string(weights.size()) + " weights for " +
                      std::to_string(n) + " Gaussians");
  // A NaN weight (a non-finite Gaussian) ranks least, so the order stays strict.
  std::vector<float> w(weights);
  for (float& x : w)
    if (std::isnan(x)) x = -std::numeric_limits<float>::infinity();
  const size_t drop = static_cast<size_t>(std::floor(static_cast<double>(settings_.prune_low_weight) * n));
  if (drop == 0) return 0;
  // The `drop` least weights, ties to the lower index: a strict order, so
  // the same weights drop the same Gaussians.
  std::vector<uint32_t> order(n);
  for (size_t i = 0; i < n; ++i) order[i] = static_cast<uint32_t>(i);
  std::nth_element(order.begin(), order.begin() + (drop - 1), order.end(),
                   [&](uint32_t a, uint32_t b) { return w[a] < w[b] || (w[a] == w[b] && a < b); });
  std::vector<uint8_t> keep(n, 1);
  for (size_t k = 0; k < drop; ++k) keep[order[k]] = 0;
  TrainingState st;
  device_->get_training_state(st);
  for (int a = 0; a < 5; ++a) {
    const size_t width = param_width(a, st.sh_stride);
    keep_rows(st.params[a], width, keep);
    keep_rows(st.adam_m[a], width, keep);
    keep_rows(st.adam_v[a], width, keep);
  }
  for (std::vector<float>* v : {&st.grad_accum, &st.grad_count, &st.max_radii, &st.scale_ceiling})
    keep_rows(*v, 1, keep);
  st.count = n - drop;
  device_->set_training_state(st);
  return static_cast<uint32_t>(drop);
}

void Trainer::settle() { settle(true); }

void Trainer::settle(bool noise_done) {
  const uint32_t current = step_;
  // Each pass grows the buffers to 1.5x what the steps needed; a replay
  // that overflows again (its Gaussians moved) takes another pass.
  for (int pass = 0; pass < 8; ++pass) {
    const Device::PairOverflow o = device_->take_pair_overflow();
    if (!o.happened) {
      batches_run_.clear();  // nothing before this point runs again
      return;
    }
    if (o.first_step == 0 || o.first_step > current)
      throw BackendError("[trainer] the device names step " + std::to_string(o.first_step) +
                         " as overflowing its pair buffers, not one of steps 1.." + std::to_string(current));
    step_ = o.first_step - 1;  // those steps changed nothing
    check_pair_count(o.required, o.saturated);
    // The batches since the last sync point again, as they ran, from the
    // overflowing view on: the views of its batch before it added their
    // gradients already (a view that overflowed adds nothing).
    batches_replayed_.swap(batches_run_);
    batches_run_.clear();
    bool found = false;
    for (const auto& [first, last] : batches_replayed_) {
      if (last < o.first_step) continue;
      found = found || first <= o.first_step;
      if (!found)
        throw BackendError("[trainer] the device names step " + std::to_string(o.first_step) +
                           " as overflowing its pair buffers, not one of the steps since the last sync point");
      train_batch(first, last, o.first_step > first ? o.first_step - first : 0);
      if (last < current || noise_done) train_step_noise(last);
    }
  }
  throw BackendError("[trainer] steps " + std::to_string(step_) +
                     " kept overflowing the pair buffers after 8 enlargements");
}

StepStats Trainer::step(bool read_loss, uint32_t last_at_most) {
  if (diverged_)
    throw TrainingDiverged("[trainer] training diverged at step " + std::to_string(diverged_step_) + " (" +
                           diverged_why_ + "); load a checkpoint to train on");
  auto t0 = std::chrono::steady_clock::now();
  const TrainSettings& s = settings_;
  const uint32_t first = step_ + 1;  // counted once the step's forward has run (it may stop at a limit)
  if (last_at_most < first)
    throw ConfigError("[trainer] step: a batch ending at step " + std::to_string(last_at_most) +
                      " starts at step " + std::to_string(first) + " (steps trained: " + std::to_string(step_) + ")");
  StepStats stats;
  stats.sh_degree = active_sh_degree(first);
  const uint32_t t = train_batch(first, batch_last(first, last_at_most), 0);
  stats.step = t;

  // The schedule's events of each view step of the batch, after its update
  // (as the data-parallel trainer orders them); the noise once, at its last.
  for (uint32_t u = first; u <= t; ++u) {
    if (s.mcmc && mcmc_refines_at(u)) {
      settle(false);
      McmcRefineSettings r{s.mcmc_min_opacity, mcmc_growth_at(static_cast<uint32_t>(device_->num_gaussians())),
                           s.seed, u};
      stats.mcmc = device_->mcmc_refine(r);
      stats.densified = true;
    }
  }
  train_step_noise(t);
  // The step's loss, read before a pruning replaces the device's state
  // (set_training_state drops the last loss); once a run.
  std::optional<float> loss_before_prune;
  for (uint32_t u = first; u <= t; ++u) {
    if (densifies_at(u)) {
      settle();
      stats.densify = device_->densify(densify_settings(u));
      stats.densified = true;
    }
    if (resets_opacity_at(u)) {
      settle();
      device_->reset_opacity(s.opacity_reset_value);
      stats.opacity_reset = true;
    }
    if (prunes_low_weight_at(u)) {
      if (read_loss && !loss_before_prune) {
        settle();
        loss_before_prune = device_->last_loss();
      }
      stats.densify.pruned += prune_low_weight(u);
      stats.densify.count = static_cast<uint32_t>(device_->num_gaussians());
      stats.densified = true;
    }
  }

  // The next step's image, while this one's work runs (streamed images).
  device_->prefetch_image(device_view(t + 1, view_for_step(t + 1)));
  if (read_loss) settle();
  stats.num_gaussians = static_cast<uint32_t>(device_->num_gaussians());
  stats.loss = !read_loss ? std::nanf("") : loss_before_prune ? *loss_before_prune : device_->last_loss();
  if (read_loss && !std::isfinite(stats.loss)) {
    const std::string loss = std::isnan(stats.loss) ? "nan" : stats.loss > 0 ? "inf" : "-inf";
    diverge("the loss is " + loss);
  }
  if (t / kFiniteCheckEvery > (first - 1) / kFiniteCheckEvery) check_finite();
  stats.ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  return stats;
}

void Trainer::render(const CameraParams& cam, float* image, const float* background) {
  settle();
  device_->render_resident(cam, active_sh_degree(step_), background ? background : settings_.background, image);
}

}  // namespace splat
