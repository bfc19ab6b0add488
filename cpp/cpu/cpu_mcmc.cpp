// The MCMC strategy on the CPU backend's resident state (docs/training_modes.md,
// "The MCMC strategy"): the math is shaders/common/mcmc.h, shared with the
// GPU kernels (shaders/kernels/train_mcmc.h); the schedule here is plain
// loops. Sampling sums integer weights, so its results do not depend on the
// order of the sums and match the GPU's.
#include <algorithm>
#include <cstring>

#include "../../shaders/common/mcmc.h"
#include "cpu_training.h"
#include "grow_buffer.h"

namespace splat::cpu {
namespace {

constexpr int kMeans = 0, kLogScales = 1, kQuats = 2, kOpacity = 3;

}  // namespace

void CpuTraining::mcmc_regularize(const McmcStepSettings& s) {
  ScopedTiming t(timing_, "ts_adam");
  const size_t n = count_;
  if (n == 0) return;
  const float wo = static_cast<float>(s.opacity_reg / static_cast<double>(n));
  const float ws = static_cast<float>(s.scale_reg / (3.0 * static_cast<double>(n)));
  const float* logit = params_[kOpacity].data();
  const float* ls = params_[kLogScales].data();
  float* g_opacity = grads_[kOpacity].data();
  float* g_ls = grads_[kLogScales].data();
  pool_.parallel_for(n, 4096, [&](size_t lo, size_t hi) {
    for (size_t i = lo; i < hi; ++i) {
      if (wo != 0.f) g_opacity[i] += mcmc_opacity_reg_grad(logit[i], wo);
      if (ws != 0.f)
        for (size_t c = 0; c < 3; ++c) g_ls[3 * i + c] += mcmc_scale_reg_grad(ls[3 * i + c], ws);
    }
  });
}

void CpuTraining::mcmc_noise(const McmcStepSettings& s) {
  ScopedTiming t(timing_, "ts_adam");
  float* means = params_[kMeans].data();
  const float* ls = params_[kLogScales].data();
  const float* q = params_[kQuats].data();
  const float* logit = params_[kOpacity].data();
  const uint32_t seed = static_cast<uint32_t>(s.seed);
  pool_.parallel_for(count_, 4096, [&](size_t lo, size_t hi) {
    for (size_t i = lo; i < hi; ++i) {
      vec3 d = mcmc_position_noise(make_vec3(ls[3 * i], ls[3 * i + 1], ls[3 * i + 2]), q[4 * i], q[4 * i + 1],
                                   q[4 * i + 2], q[4 * i + 3], logit[i], s.noise_scale, seed, s.step,
                                   static_cast<uint32_t>(i));
      means[3 * i] += d.x;
      means[3 * i + 1] += d.y;
      means[3 * i + 2] += d.z;
    }
  });
}

// Samples a source for each target (the dead among 0..n, or the new slots
// n..n+targets), then copies the sources' rows with their updated opacity
// and scale into the targets and updates the sources; the moments of both
// restart from zero. Returns the targets that received a source.
uint32_t CpuTraining::mcmc_sample(const McmcRefineSettings& s, size_t n, size_t targets, bool grow_phase) {
  const uint32_t seed = static_cast<uint32_t>(s.seed);
  const float* logit = params_[kOpacity].data();
  uint64_t total = 0;
  for (size_t i = 0; i < n; ++i) {
    total += mcmc_weight(logit[i], s.min_opacity, !grow_phase);
    mcmc_prefix_[i] = total;
  }
  std::fill(mcmc_times_.begin(), mcmc_times_.begin() + n, 0u);
  const uint32_t draw = grow_phase ? MCMC_DRAW_GROW : MCMC_DRAW_RELOCATE;
  uint32_t moved = 0;
  for (size_t j = 0; j < targets; ++j) {
    const size_t target = grow_phase ? n + j : j;
    if (!grow_phase && (!mcmc_dead(logit[j], s.min_opacity) || total == 0)) {
      mcmc_source_[target] = MCMC_NONE;
      continue;
    }
    size_t src = j % n;  // growth without any weight (every opacity below 2^-24): a copy each
    if (total > 0) {
      const uint64_t point = mcmc_sample_point(seed, s.step, static_cast<uint32_t>(target), draw, total);
      src = std::upper_bound(mcmc_prefix_.begin(), mcmc_prefix_.begin() + n, point) - mcmc_prefix_.begin();
    }
    mcmc_source_[target] = static_cast<uint32_t>(src);
    ++mcmc_times_[src];
    ++moved;
  }
  // The sources' updates, from their values before this pass.
  for (size_t i = 0; i < n; ++i) {
    if (!mcmc_times_[i]) continue;
    const McmcUpdate u = mcmc_update(logit[i], mcmc_times_[i], s.min_opacity, mcmc_binoms_.data());
    mcmc_logit_[i] = u.logit;
    mcmc_shift_[i] = u.log_scale_shift;
  }
  for (size_t j = 0; j < targets; ++j) {
    const size_t target = grow_phase ? n + j : j;
    const uint32_t src = mcmc_source_[target];
    if (src == MCMC_NONE) continue;
    for (int a = 0; a < 5; ++a) {
      const size_t w = param_width(a, sh_stride_);
      float* p = params_[a].data();
      if (a == kOpacity)
        p[target] = mcmc_logit_[src];
      else if (a == kLogScales)
        for (size_t c = 0; c < 3; ++c) p[3 * target + c] = p[3 * src + c] + mcmc_shift_[src];
      else
        std::memcpy(p + target * w, p + src * w, w * sizeof(float));
      std::fill(m_[a].begin() + target * w, m_[a].begin() + (target + 1) * w, 0.f);
      std::fill(v_[a].begin() + target * w, v_[a].begin() + (target + 1) * w, 0.f);
    }
  }
  for (size_t i = 0; i < n; ++i) {
    if (!mcmc_times_[i]) continue;
    params_[kOpacity][i] = mcmc_logit_[i];
    for (size_t c = 0; c < 3; ++c) params_[kLogScales][3 * i + c] += mcmc_shift_[i];
    for (int a = 0; a < 5; ++a) {
      const size_t w = param_width(a, sh_stride_);
      std::fill(m_[a].begin() + i * w, m_[a].begin() + (i + 1) * w, 0.f);
      std::fill(v_[a].begin() + i * w, v_[a].begin() + (i + 1) * w, 0.f);
    }
  }
  return moved;
}

McmcRefineResult CpuTraining::mcmc_refine(const McmcRefineSettings& s) {
  ScopedTiming t(timing_, "ts_densify");
  scale_ceiling_.clear();  // other Gaussians: cap_scales records anew
  if (mcmc_binoms_.empty()) {
    grow_vector(mcmc_binoms_, size_t{MCMC_MAX_RATIO} * MCMC_MAX_RATIO, allocations_);
    mcmc_fill_binomials(mcmc_binoms_.data());
  }
  McmcRefineResult result;
  const size_t n = count_;
  const size_t total = n + (n > 0 ? s.add : 0);
  for (std::vector<float>* v : {&mcmc_logit_, &mcmc_shift_}) grow_vector(*v, n, allocations_);
  grow_vector(mcmc_prefix_, n, allocations_);
  grow_vector(mcmc_times_, n, allocations_);
  grow_vector(mcmc_source_, total, allocations_);
  if (n > 0) {
    result.relocated = mcmc_sample(s, n, n, false);
    if (total > n) {
      resize(total);  // keeps the rows (vectors), new rows are written below
      result.added = mcmc_sample(s, n, total - n, true);
    }
  }
  std::fill(grad_accum_.begin(), grad_accum_.end(), 0.f);
  std::fill(grad_count_.begin(), grad_count_.end(), 0.f);
  std::fill(max_radii_.begin(), max_radii_.end(), 0.f);
  result.count = static_cast<uint32_t>(count_);
  return result;
}

}  // namespace splat::cpu
