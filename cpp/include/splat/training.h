// Types of the training ops a Device implements (docs/architecture.md,
// "Training step"). The schedule that strings them together is core's
// Trainer; a device only keeps the state resident and runs each op.
#pragma once
#include <cstdint>
#include <string>
#include <vector>

#include "types.h"

namespace splat {

// Learning rates of the parameter groups for one Adam step.
struct AdamSettings {
  float lr_means, lr_log_scales, lr_quats, lr_opacity, lr_sh_dc, lr_sh_rest;
  float beta1, beta2, eps;
  uint32_t step;  // 1-based Adam step count (bias correction)
};

// What one densification does (ARCHITECTURE: clone / split / prune).
struct DensifySettings {
  float grad_threshold;        // on the mean NDC-space 2D mean gradient norm
  float clone_max_scale;       // clone if max scale <= this, else split (world units)
  uint32_t split_count;        // children per split Gaussian
  float split_scale_divisor;   // children take the parent scale / this (1.6 = 0.8 x 2 in 3DGS)
  float prune_opacity;         // prune opacity below this
  float prune_max_world_scale; // prune max scale above this (0: off)
  float prune_max_screen_radius;  // prune max 2D radius above this (0: off)
  uint64_t seed;               // split sampling: counter-based RNG keyed by (seed, step, index)
  uint32_t step;
  uint32_t max_gaussians;      // hard cap on the count after densification
};

struct DensifyResult {
  uint32_t cloned = 0, split = 0, pruned = 0, count = 0;
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
};

// Floats per Gaussian of each parameter array.
inline uint32_t param_width(int array, uint32_t sh_stride) {
  static const uint32_t widths[4] = {3, 3, 4, 1};
  return array < 4 ? widths[array] : 3 * sh_stride;
}

}  // namespace splat
