#include "splat/trainer.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <numeric>

#include "../../shaders/common/random.h"
#include "splat/errors.h"
#include "splat/limits.h"

namespace splat {

Trainer::Trainer(std::unique_ptr<Device> device, const TrainSettings& settings, std::vector<CameraParams> cameras,
                 const uint8_t* images, uint32_t width, uint32_t height, const TrainingState& initial, uint32_t step)
    : device_(std::move(device)), settings_(settings), cameras_(std::move(cameras)), step_(step) {
  if (cameras_.empty()) throw ConfigError("[trainer] no training views");
  check_gaussian_count(initial.count, "initial Gaussians");
  check_gaussian_count(settings_.max_gaussians, "max_gaussians");
  if (settings_.split_count < 2 || settings_.split_count > kMaxSplitCount)
    throw ConfigError("[splat] split_count " + std::to_string(settings_.split_count) + ": must be 2.." +
                      std::to_string(kMaxSplitCount));
  if (initial.sh_stride == 0 || initial.sh_stride > SPLAT_MAX_SH_COEFFS)
    throw ConfigError("[trainer] sh: " + std::to_string(initial.sh_stride) + " coefficients per channel (1.." +
                      std::to_string(SPLAT_MAX_SH_COEFFS) + ")");
  for (const CameraParams& c : cameras_)
    if (c.width != width || c.height != height)
      throw ConfigError("[trainer] every training camera must match the image size");
  device_->upload_images(images, static_cast<uint32_t>(cameras_.size()), width, height);
  device_->set_training_state(initial);
  order_.resize(cameras_.size());
}

uint32_t Trainer::active_sh_degree(uint32_t step) const {
  return std::min(settings_.sh_degree, step / std::max(1u, settings_.sh_degree_interval));
}

float Trainer::means_lr(uint32_t step) const {
  // Exponential decay (log-linear) from the initial to the final rate.
  double t = std::clamp(static_cast<double>(step) / std::max(1u, settings_.steps), 0.0, 1.0);
  double lr0 = settings_.means_lr * settings_.scene_extent, lr1 = settings_.means_lr_final * settings_.scene_extent;
  if (lr0 <= 0.0 || lr1 <= 0.0) return static_cast<float>(lr0 * (1 - t) + lr1 * t);
  return static_cast<float>(std::exp(std::log(lr0) * (1.0 - t) + std::log(lr1) * t));
}

void Trainer::shuffle_epoch(uint32_t epoch) {
  // Fisher-Yates with counter-based draws: the order is a function of
  // (seed, epoch), so a checkpoint needs only the step count.
  std::iota(order_.begin(), order_.end(), 0u);
  const uint32_t seed = static_cast<uint32_t>(settings_.seed ^ (settings_.seed >> 32));
  for (uint32_t i = static_cast<uint32_t>(order_.size()); i > 1; --i) {
    uint32_t j = random_key(seed, epoch, i, 0x9e3779b9u) % i;
    std::swap(order_[i - 1], order_[j]);
  }
  epoch_ = epoch;
}

uint32_t Trainer::view_for_step(uint32_t step) {
  const uint32_t v = static_cast<uint32_t>(cameras_.size());
  uint32_t epoch = (step - 1) / v;
  if (epoch != epoch_) shuffle_epoch(epoch);
  return order_[(step - 1) % v];
}

StepStats Trainer::step(bool read_loss) {
  auto t0 = std::chrono::steady_clock::now();
  const TrainSettings& s = settings_;
  const uint32_t t = step_ + 1;  // counted once the step's forward has run (it may stop at a limit)
  StepStats stats;
  stats.step = t;
  stats.sh_degree = active_sh_degree(t);

  const uint32_t view = view_for_step(t);
  float bg[3] = {s.background[0], s.background[1], s.background[2]};
  if (s.random_background) {
    const uint32_t seed = static_cast<uint32_t>(s.seed);
    for (uint32_t c = 0; c < 3; ++c) bg[c] = random_uniform(random_key(seed, t, 0xb6u, c));
  }
  const bool densifying = t < s.densify_until;
  device_->train_forward_backward(cameras_[view], view, stats.sh_degree, bg, s.ssim_weight, densifying);
  step_ = t;

  AdamSettings adam{means_lr(t), s.log_scales_lr, s.quats_lr, s.opacity_lr, s.sh_dc_lr, s.sh_rest_lr,
                    s.adam_beta1, s.adam_beta2, s.adam_eps, t};
  device_->adam_step(adam);

  if (densifying && t > s.densify_from && t % s.densify_every == 0) {
    const bool after_reset = t > s.opacity_reset_every;
    DensifySettings d;
    d.grad_threshold = s.densify_grad_threshold;
    d.clone_max_scale = s.percent_dense * s.scene_extent;
    d.split_count = s.split_count;
    d.split_scale_divisor = s.split_scale_divisor;
    d.prune_opacity = s.prune_opacity;
    d.prune_max_world_scale = after_reset ? s.prune_max_world_scale * s.scene_extent : 0.f;
    d.prune_max_screen_radius = after_reset ? s.prune_max_screen_radius : 0.f;
    d.seed = s.seed;
    d.step = t;
    d.max_gaussians = s.max_gaussians;
    stats.densify = device_->densify(d);
    stats.densified = true;
  }
  if (densifying && t % s.opacity_reset_every == 0) device_->reset_opacity(s.opacity_reset_value);

  stats.num_gaussians = static_cast<uint32_t>(device_->num_gaussians());
  stats.loss = read_loss ? device_->last_loss() : std::nanf("");
  stats.ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
  return stats;
}

void Trainer::render(const CameraParams& cam, float* image, const float* background) {
  device_->render_resident(cam, active_sh_degree(step_), background ? background : settings_.background, image);
}

}  // namespace splat
