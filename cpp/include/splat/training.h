// Types of the training ops a Device implements (docs/gpu.md,
// "The GPU training step"). The schedule that strings them together is core's
// Trainer; a device only keeps the state resident and runs each op.
#pragma once
#include <cmath>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "types.h"

namespace splat {

// One training view's pixels as the host holds them, for upload_images.
struct TrainingImage {
  const uint8_t* rgb = nullptr;   // [height, width, 3]
  const uint8_t* mask = nullptr;  // [height, width], nonzero: the pixel counts; null: every pixel counts
  uint32_t width = 0, height = 0;
  // Called by upload_images once the device holds its own copy of this view:
  // the caller may free rgb and mask then, so the host never holds two copies
  // of every view at once. The device reads neither afterwards.
  std::function<void()> copied;
};

// Where a view lives in the packed image storage of a device: one uint8
// buffer of every view's RGB one after the other (no padding to the largest
// view; each view starts on kImageAlign bytes) and one of the masks of the
// views that have one (1 byte a pixel).
struct ImageSlot {
  size_t rgb_offset = 0;
  size_t mask_offset = 0;  // meaningful only when has_mask
  uint32_t width = 0, height = 0;
  uint64_t valid_pixels = 0;  // pixels that count in the loss (width * height without a mask)
  bool has_mask = false;
};

struct ImageLayout {
  static constexpr size_t kImageAlign = 16;
  std::vector<ImageSlot> views;
  size_t rgb_bytes = 0, mask_bytes = 0;
  size_t max_pixels = 0;
  uint32_t max_tiles = 0;  // most SPLAT_TILE_SIZE tiles of any view
};

// Where the training images live (Device::image_storage). Resident: the
// packed buffers on the device. Streamed (their bytes exceed the budget):
// the packed buffers in (page-locked) host memory and two device slots of
// the largest view, the next step's view copied into the free one a step
// ahead (Device::prefetch_image).
struct ImageStorage {
  size_t image_bytes = 0;   // RGB + masks of every view, packed
  size_t device_bytes = 0;  // what the images take on the device
  size_t budget_bytes = 0;  // the budget they were held against (0: none known)
  bool streamed = false;
};

// The packed layout of `images` (counts each mask's valid pixels).
inline ImageLayout plan_image_layout(const std::vector<TrainingImage>& images) {
  ImageLayout layout;
  const auto align = [](size_t x) { return (x + ImageLayout::kImageAlign - 1) & ~(ImageLayout::kImageAlign - 1); };
  for (const TrainingImage& im : images) {
    ImageSlot v;
    v.width = im.width;
    v.height = im.height;
    const size_t pixels = static_cast<size_t>(im.width) * im.height;
    v.rgb_offset = layout.rgb_bytes;
    layout.rgb_bytes = align(layout.rgb_bytes + 3 * pixels);
    v.has_mask = im.mask != nullptr;
    v.valid_pixels = pixels;
    if (v.has_mask) {
      v.mask_offset = layout.mask_bytes;
      layout.mask_bytes = align(layout.mask_bytes + pixels);
      uint64_t valid = 0;
      for (size_t p = 0; p < pixels; ++p) valid += im.mask[p] != 0;
      v.valid_pixels = valid;
    }
    const uint32_t tiles = ((im.width + SPLAT_TILE_SIZE - 1) / SPLAT_TILE_SIZE) *
                           ((im.height + SPLAT_TILE_SIZE - 1) / SPLAT_TILE_SIZE);
    layout.max_pixels = pixels > layout.max_pixels ? pixels : layout.max_pixels;
    layout.max_tiles = tiles > layout.max_tiles ? tiles : layout.max_tiles;
    layout.views.push_back(v);
  }
  return layout;
}

// Learning rates of the parameter groups for one Adam step.
struct AdamSettings {
  float lr_means, lr_log_scales, lr_quats, lr_opacity, lr_sh_dc, lr_sh_rest;
  float beta1, beta2, eps;
  uint32_t step;  // 1-based Adam step count (bias correction)
  float lr_exposure = 0.f;  // the per-view colour corrections (TrainingOptions::exposure)
  // Only the Gaussians the step's view saw (radius > 0 in its forward) move;
  // the others keep their parameters and moments (train.visible_adam).
  bool visible_only = false;
  // The stochastic rounding's seed with bfloat16 moments (TrainingOptions::bf16_moments).
  uint32_t moment_seed = 0;

  // 1 - beta^step, Adam's bias correction: one rounding for every backend, so
  // that the step sizes made from it (shaders/common/adam.h) are the same bits.
  float bias_correction(float beta) const { return 1.f - std::pow(beta, static_cast<float>(step)); }
};

// What a training run adds to the 3DGS recipe (docs/training_modes.md,
// "Absgrad densification" and "Exposure compensation").
struct TrainingOptions {
  // The densification statistic accumulates the norm of the summed absolute
  // per-pixel 2D-mean gradient instead of the norm of the gradient.
  bool absgrad = false;
  // A per-view affine colour correction (kExposureFloats a view, identity at
  // start) between the render and the loss, optimised with its own Adam.
  bool exposure = false;
  // Both Adam moments of every Gaussian parameter in bfloat16, packed in one
  // 32-bit word and rounded stochastically (shaders/common/adam.h,
  // train.adam_moments); TrainingState still carries them as floats.
  bool bf16_moments = false;
};

// A view's colour correction: out = A x + b, stored as the 3x4 matrix [A | b],
// row-major (shaders/common/exposure.h).
constexpr uint32_t kExposureFloats = 12;

// What one densification does (ARCHITECTURE: clone / split / prune).
struct DensifySettings {
  float grad_threshold;        // on the mean NDC-space 2D mean gradient norm
  float clone_max_scale;       // clone if max scale <= this, else split (world units)
  uint32_t split_count;        // children per split Gaussian
  float split_scale_divisor;   // children take the parent scale / this (1.6 = 0.8 x 2 in 3DGS)
  float prune_opacity;         // prune opacity below this
  float prune_max_world_scale; // prune max scale above this (0: off)
  float prune_max_screen_radius;  // prune max 2D radius above this (0: off)
  // > 0: ... and only where the max scale is under that radius times this: a
  // Gaussian of scale s drawn at radius r (3 sigma) was seen from about 3 s f / r,
  // so this is (the nearest depth pruned) / (3 f). 0: any size.
  float prune_screen_scale_per_px = 0.f;
  uint64_t seed;               // split sampling: counter-based RNG keyed by (seed, step, index)
  uint32_t step;
  uint32_t max_gaussians;      // hard cap on the count after densification
};

struct DensifyResult {
  uint32_t cloned = 0, split = 0, pruned = 0, count = 0;
};

// One refine step of the MCMC strategy (docs/training_modes.md, "The MCMC
// strategy"): the dead Gaussians (opacity <= min_opacity) move onto live ones
// sampled by opacity, then `add` new Gaussians are sampled the same way.
struct McmcRefineSettings {
  float min_opacity;
  uint32_t add;   // Gaussians to add (the trainer keeps the count within max_gaussians)
  uint64_t seed;  // sampling: counter-based RNG keyed by (seed, step, target)
  uint32_t step;
};

struct McmcRefineResult {
  uint32_t relocated = 0, added = 0, count = 0;
};

// The MCMC strategy's per-step terms: the regularisers' gradients (added to
// the resident gradients before Adam) and the position noise (after Adam).
struct McmcStepSettings {
  float opacity_reg, scale_reg;  // weights of mean(opacity) and mean(scale) in the loss
  float noise_scale;             // noise_lr times the means' learning rate
  uint64_t seed;
  uint32_t step;
};

// Non-finite (NaN or infinite) values of each resident parameter array, in
// TrainingState::params order: how a diverged run is detected.
struct NonFiniteCounts {
  uint64_t params[5] = {0, 0, 0, 0, 0};
  uint64_t total() const { return params[0] + params[1] + params[2] + params[3] + params[4]; }
};

// Full training state in host memory (checkpoints): parameters, both Adam
// moments per parameter, densification statistics.
struct TrainingState {
  size_t count = 0;
  uint32_t sh_stride = 16;
  std::vector<float> params[5];     // means, log_scales, quats, opacity_logits, sh
  std::vector<float> adam_m[5], adam_v[5];
  std::vector<float> grad_accum;    // sum of NDC 2D mean gradient norms
  std::vector<float> grad_count;    // visible steps since last densification
  std::vector<float> max_radii;     // largest 2D radius since last densification
  // [views, kExposureFloats] and its two Adam moments (TrainingOptions::exposure;
  // empty: identity and zero moments).
  std::vector<float> exposure, exposure_m, exposure_v;
  // [count]: each Gaussian's ceiling of the growth cap after densification
  // (TrainSettings::cap_scale_growth; Device::cap_scales); empty: none recorded.
  std::vector<float> scale_ceiling;
};

// One ts_* label's accumulated time, split by where it went. compute_ms is
// time on the device's processors (GPU kernels; worker threads on the cpu
// backend).
struct TimingRecord {
  std::string label;
  uint64_t calls = 0;
  double upload_ms = 0.0, alloc_ms = 0.0, compute_ms = 0.0, readback_ms = 0.0;
  double total_ms() const { return upload_ms + alloc_ms + compute_ms + readback_ms; }
};

// Host copies of the buffers of the last training step, for parity checks
// between configurations and backends.
struct DebugSnapshot {
  std::vector<uint32_t> tile_ranges;   // [num_tiles, 2]: [start, end) into sorted_gauss
  std::vector<uint32_t> sorted_gauss;  // Gaussian of each (tile, depth)-sorted pair
  std::vector<float> grads[5];         // d loss / d parameters, as TrainingState::params
  std::vector<float> means2d_grad;     // [N, 2], pixels
  std::vector<float> means2d_abs;      // [N, 2], pixels (absgrad, while densifying; else empty)
  std::vector<float> exposure_grad;    // [12]: d loss / d [A | b] of the step's view (exposure; else empty)
};

// Floats per Gaussian of each parameter array.
inline uint32_t param_width(int array, uint32_t sh_stride) {
  static const uint32_t widths[4] = {3, 3, 4, 1};
  return array < 4 ? widths[array] : 3 * sh_stride;
}

}  // namespace splat
