// The training schedule, written once against the Device interface: view
// order, SH-degree and learning-rate schedules, render -> loss -> backward ->
// Adam -> densification statistics, and the densification policy.
#pragma once
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "device.h"

namespace splat {

// The recipe (python/splat/config.py TrainConfig) plus what the scene fixes.
struct TrainSettings {
  uint32_t steps = 30000;
  float means_lr = 1.6e-4f, means_lr_final = 1.6e-6f;  // x scene_extent
  float log_scales_lr = 5e-3f, quats_lr = 1e-3f, opacity_lr = 5e-2f;
  float sh_dc_lr = 2.5e-3f, sh_rest_lr = 2.5e-3f / 20.f;
  // The other rates' fraction at the last step: constant until the Gaussians'
  // count is settled (densify_until; MCMC: mcmc_refine_until), then a
  // log-linear decay to this fraction at `steps` (1: constant, the 3DGS recipe).
  float lr_final_fraction = 1.f;
  // The default strategy's regularisers (MCMC has its own, below): weights of
  // mean(opacity) and mean(scale) in the loss from step reg_from on.
  float opacity_reg = 0.f, scale_reg = 0.f;
  uint32_t reg_from = 0;
  float adam_eps = 1e-15f, adam_beta1 = 0.9f, adam_beta2 = 0.999f;
  uint32_t sh_degree = 3, sh_degree_interval = 1000;
  uint32_t densify_from = 500, densify_until = 15000, densify_every = 100;
  // > 0: from densify_until on (the default strategy), no Gaussian's scale
  // grows past cap_scale_growth times its largest at that step
  // (Device::cap_scales, after each update); 0: no cap.
  float cap_scale_growth = 0.f;
  // > 0: at densify_until (the default strategy) this fraction of the
  // Gaussians, those with the least blend weight over the training views,
  // is pruned (Trainer::prune_low_weight); 0: none.
  float prune_low_weight = 0.f;
  float densify_grad_threshold = 2e-4f, percent_dense = 0.01f;
  uint32_t split_count = 2;
  float split_scale_divisor = 1.6f;
  float prune_opacity = 0.005f, prune_max_screen_radius = 0.f, prune_max_world_scale = 0.1f;
  // > 0 and no opacity resets: the screen-size pruning runs at every
  // densification, limited to Gaussians seen that large from near a camera
  // (DensifySettings::prune_screen_scale_per_px; the Python side's train.prune_near).
  float prune_near_scale_per_px = 0.f;
  // Opacity resets, and the world- and screen-size pruning that starts after
  // the first one: with opacity_resets false neither happens (the Python
  // side's opacity_reset = "auto" turns them off for captures of an object).
  bool opacity_resets = true;
  uint32_t opacity_reset_every = 3000;
  float opacity_reset_value = 0.01f;
  float ssim_weight = 0.2f;
  uint64_t seed = 0;
  bool random_background = false;
  uint32_t max_gaussians = 1u << 24;
  bool antialiased = false;  // the 2D filter's opacity compensation (Device::set_antialiased)
  bool chunked_stop = false;  // the blend's stop per chunk (Device::set_chunked_stop; train.blend_stop)
  // The MCMC strategy (docs/training_modes.md, "The MCMC strategy") instead of
  // clone / split / prune and opacity resets.
  bool mcmc = false;
  uint32_t mcmc_refine_from = 500, mcmc_refine_until = 25000, mcmc_refine_every = 100;
  float mcmc_growth = 0.05f;        // Gaussians added per refine, times the count (up to max_gaussians)
  float mcmc_min_opacity = 0.005f;  // dead at or below this opacity
  float mcmc_noise_lr = 5e5f;       // position noise, times the means' learning rate
  float mcmc_opacity_reg = 0.01f, mcmc_scale_reg = 0.01f;
  // Absgrad densification and per-view exposure compensation.
  bool absgrad = false;
  float absgrad_grad_threshold = 8e-4f;
  bool exposure = false;
  float exposure_lr = 1e-2f, exposure_lr_final = 1e-3f;  // exponential decay over `steps`
  // Adam on the Gaussians each step's view saw only (AdamSettings::visible_only).
  bool visible_adam = false;
  // Adam's moments in bfloat16 (TrainingOptions::bf16_moments; train.adam_moments).
  bool bf16_moments = false;
  // Resolution schedule (nerfstudio's splatfacto): the first steps train on
  // the views at 1/2^num_downscales of their size, the factor halving every
  // resolution_schedule steps down to full size (0: full size throughout).
  uint32_t num_downscales = 0, resolution_schedule = 3000;
  // Views a step (train.batch_views): each step() is one update over this many
  // consecutive view steps, their gradients' mean (as data-parallel ranks make
  // it: learning rates times sqrt(views), betas to the power views).
  uint32_t batch_views = 1;
  // Scene.
  float scene_extent = 1.f;
  float background[3] = {1.f, 1.f, 1.f};
  // Device bytes the training images may take before they are streamed
  // from host memory (0: the backend's default).
  uint64_t image_budget_bytes = 0;
};

struct StepStats {
  uint32_t step = 0;
  float loss = 0.f;
  uint32_t num_gaussians = 0;
  double ms = 0.0;
  uint32_t sh_degree = 0;
  bool densified = false;
  bool opacity_reset = false;
  DensifyResult densify;
  McmcRefineResult mcmc;  // an MCMC refine step (densified is set too)
};

// Steps between two checks of the parameters for non-finite values (each one
// a small reduction and a read-back of five counts).
constexpr uint32_t kFiniteCheckEvery = 100;

class Trainer {
 public:
  // One camera and one image per view; image v has camera v's size (and
  // optionally a mask of the pixels that count).
  Trainer(std::unique_ptr<Device> device, const TrainSettings& settings, std::vector<CameraParams> cameras,
          const std::vector<TrainingImage>& images, const TrainingState& initial, uint32_t step = 0);

  // One step: one view, or batch_views views and one update. A batch ends
  // early at `steps` (the run's last) and at `last_at_most`, a view step its
  // caller names (an evaluation, a checkpoint), so that the state exists
  // there; the next batch starts after it. The loss is read back
  // only when read_loss (a sync on GPUs): the mean of the batch's views'.
  // Throws TrainingDiverged when the loss read back, or a parameter at a
  // check (every kFiniteCheckEvery steps), is not finite; every later call
  // throws again.
  StepStats step(bool read_loss = true, uint32_t last_at_most = UINT32_MAX);
  // Checks the resident parameters now; throws TrainingDiverged if any is
  // not finite.
  void check_finite();
  bool diverged() const { return diverged_; }
  // The step at which training diverged (when diverged()).
  uint32_t diverged_step() const { return diverged_step_; }
  // Whether step `t` (1-based) resets opacities: every opacity_reset_every
  // steps while densifying (t < densify_until), but never when fewer than
  // opacity_reset_every steps of the run remain after it; never without
  // opacity_resets.
  bool resets_opacity_at(uint32_t t) const;
  // Whether step `t` is an MCMC refine step (relocation and growth).
  bool mcmc_refines_at(uint32_t t) const;
  // Gaussians an MCMC refine adds to `n`: (1 + mcmc_growth) n, rounded down,
  // at most max_gaussians.
  uint32_t mcmc_growth_at(uint32_t n) const;

  uint32_t step_count() const { return step_; }
  // The last view step of the batch that starts at view step `first` (batches
  // follow one another: each starts after the one before it ended): step()
  // with `last_at_most` trains first..batch_last(first, last_at_most).
  uint32_t batch_last(uint32_t first, uint32_t last_at_most) const;
  uint32_t active_sh_degree() const { return active_sh_degree(step_); }
  // The SH degree the schedule trains at view step t.
  uint32_t active_sh_degree(uint32_t step) const;
  float means_lr(uint32_t step) const;
  // The loss's regularisers at step t of the batch starting at view step
  // `first` (t itself for a view trained alone): MCMC's, or the default
  // strategy's (opacity_reg, scale_reg) from reg_from on, counted by the
  // batch's first step so that its views trained together or one by one
  // agree; none where they do not apply.
  std::optional<McmcStepSettings> regularizers_at(uint32_t t, uint32_t first) const;
  // The factor on every rate but the means' at step t (lr_final_fraction).
  float late_lr_scale(uint32_t step) const;
  float exposure_lr(uint32_t step) const;
  // The 64-bit seed folded to the 32 bits the counter-based draws take (the
  // epoch shuffle; bfloat16 moments' rounding, AdamSettings::moment_seed).
  uint32_t seed32() const { return static_cast<uint32_t>(settings_.seed ^ (settings_.seed >> 32)); }
  // The view trained at 1-based `step`.
  uint32_t view_for_step(uint32_t step);
  // The resolution level step t trains at: its views at 1/2^level of their size.
  uint32_t downscale_level(uint32_t step) const;

  // --- Data-parallel training (python/splat/parallel) ----------------------
  // A batch of views, one per rank, is one update. Step t's forward and
  // backward alone (its view and background, the statistics while
  // densifying, the MCMC regularisers) at `sh_degree`; the gradients stay on
  // the device for the ranks' reduction (Device::get/set_gradients).
  // `batch_first`: the first view step of the batch t belongs to (t itself for
  // a view trained alone, as each rank's is).
  void forward_backward(uint32_t t, uint32_t sh_degree, uint32_t batch_first);
  // The update of a batch whose last view step is t: Adam as its `update`-th
  // step (bias correction) with the learning rates of view step t times
  // `lr_scale` and the betas given. The step count becomes t. (The MCMC
  // refine and noise of step t follow, as in step().)
  void apply_update(uint32_t t, uint32_t update, float lr_scale, float beta1, float beta2);
  // Whether the schedule densifies at view step t, and that densification
  // (its statistics reduced by then).
  bool densifies_at(uint32_t t) const;
  DensifyResult densify_at(uint32_t t);
  // The opacity reset of the schedule (resets_opacity_at).
  void reset_opacity();
  // Each Gaussian's blend weight (alpha T summed over the pixels) over every
  // training view at step t's resolution (Device::blend_weights).
  std::vector<float> blend_weights(uint32_t t);
  // Whether view step t prunes by blend weight (prune_low_weight > 0, the
  // default strategy, t = densify_until), and that pruning: the
  // floor(prune_low_weight n) Gaussians of least blend_weights(t), ties to the
  // lower index, leave the state (parameters, moments, statistics, ceilings).
  // Returns how many left.
  bool prunes_low_weight_at(uint32_t t) const;
  uint32_t prune_low_weight(uint32_t t);
  // The same pruning by given weights (one per Gaussian): data-parallel
  // ranks prune by their weights summed over the ranks, so that they drop
  // the same rows.
  uint32_t prune_least_weight(const std::vector<float>& weights);

  // Runs again the steps whose pairs did not fit the device's buffers (they
  // changed nothing; Device::take_pair_overflow), so that the state is that of
  // step_count() steps. Every sync point calls it first: the loss, a
  // densification, an opacity reset, an MCMC refine, a check, a render; a
  // caller reading the device's state directly calls it before.
  void settle();

  Device& device() { return *device_; }
  const TrainSettings& settings() const { return settings_; }
  size_t num_views() const { return views_; }
  void render(const CameraParams& cam, float* image, const float* background = nullptr);

 private:
  void shuffle_epoch(uint32_t epoch);
  // Step t's training up to its sync points: the view's forward and
  // backward, the MCMC regularisers and Adam; then its MCMC noise (after a
  // refine, when the step has one). step_ = t after the first.
  void train_step(uint32_t t);
  void train_step_noise(uint32_t t);
  // The growth cap after densification of the update ending at step t
  // (cap_scale_growth): the first from densify_until on records the ceilings.
  void cap_scales_at(uint32_t t);
  // The update number of the batch that starts at view step `first` (Adam's
  // bias correction).
  uint32_t update_number(uint32_t first) const;
  // The batch of view steps first..last from its view `from` on (earlier
  // views' gradients already accumulated on the device), then its update;
  // step_ becomes `last`, which it returns. Recorded for a replay.
  uint32_t train_batch(uint32_t first, uint32_t last, uint32_t from);
  // The whole batch's forwards, backwards and accumulation in one device pass
  // (Device::train_views_together); false, having done nothing, where the
  // recipe (a random background per view) or the device asks for one view
  // after another.
  bool train_views_together(uint32_t first, uint32_t views, uint32_t sh_degree);
  DensifySettings densify_settings(uint32_t t) const;
  // settle() with step_ = `current` whose noise has run when `noise_done`.
  void settle(bool noise_done);
  [[noreturn]] void diverge(const std::string& why);
  // The views at each lower resolution level, after the full-size ones (the
  // device holds level l's view v as view l * views_ + v): their cameras in
  // cameras_, their pixels in level_pixels_ until the device has copied them.
  std::vector<TrainingImage> downscaled_views(const std::vector<TrainingImage>& images);
  // The device's view of step t.
  uint32_t device_view(uint32_t t, uint32_t view) const;

  std::unique_ptr<Device> device_;
  TrainSettings settings_;
  std::vector<CameraParams> cameras_;  // every level's, level-major
  size_t views_ = 0;
  std::vector<std::vector<uint8_t>> level_pixels_;  // per downscaled view: RGB then its mask, if any
  uint32_t step_ = 0;
  // The batches trained since the last sync point, (first, last) each: what
  // settle() trains again after an overflow (reserved once; swapped, never
  // reallocated while a sync point comes at least every kFiniteCheckEvery steps).
  std::vector<std::pair<uint32_t, uint32_t>> batches_run_, batches_replayed_;
  bool diverged_ = false;
  uint32_t diverged_step_ = 0;
  std::string diverged_why_;
  uint32_t epoch_ = UINT32_MAX;
  std::vector<uint32_t> order_;
};

}  // namespace splat
