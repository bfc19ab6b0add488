// The MCMC strategy's per-Gaussian math, shared by every backend
// (Kheradmand et al. 2024, "3D Gaussian Splatting as Markov Chain Monte
// Carlo"; docs/training_modes.md, "The MCMC strategy"):
//   - opacity-weighted sampling: each Gaussian's weight is its opacity in
//     24-bit fixed point, so prefix sums are exact integers and a sample is
//     the same on every backend whatever order the sums are formed in;
//   - the relocation update of a sampled Gaussian's opacity and scale when it
//     is copied `ratio - 1` times (ratio: copies plus the original);
//   - the position noise and the regularisers' gradients.
#pragma once
#include "projection.h"
#include "random.h"

#define MCMC_NONE 0xffffffffu
// Ratios past this are clamped (the binomial table is MCMC_MAX_RATIO^2).
#define MCMC_MAX_RATIO 51u
// A weight is floor(opacity * MCMC_WEIGHT_SCALE): 2^24 - 1, so 256 weights
// (one threadgroup's block) still sum below 2^32.
#define MCMC_WEIGHT_SCALE 16777215.0f
// Draws of the counter-based RNG (random_key's last argument), apart from
// the split children's (6 child + 2 k + b < 2^12) and the backgrounds'.
#define MCMC_DRAW_RELOCATE 0x52000000u
#define MCMC_DRAW_GROW 0x47000000u
#define MCMC_DRAW_NOISE 0x4e000000u
// What the GPU's mcmc_apply dispatch writes into an array (McmcParams::kind).
#define MCMC_ARRAY_PLAIN 0u       // copied as is (means, quats, sh)
#define MCMC_ARRAY_LOG_SCALES 1u  // plus the source's log-scale shift
#define MCMC_ARRAY_OPACITY 2u     // the source's updated logit
#define MCMC_ARRAY_MOMENT 3u      // zero

SPLAT_FUNC float mcmc_opacity(float logit) { return sp_sigmoid(logit); }

SPLAT_FUNC bool mcmc_dead(float logit, float min_opacity) { return mcmc_opacity(logit) <= min_opacity; }

// The sampling weight of a Gaussian (0 for the dead when only the live are
// candidates).
SPLAT_FUNC uint32_t mcmc_weight(float logit, float min_opacity, bool live_only) {
  float o = mcmc_opacity(logit);
  if (live_only && o <= min_opacity) return 0u;
  return (uint32_t)(o * MCMC_WEIGHT_SCALE);
}

// The sample's position in [0, total) (0 < total < 2^48): floor(u total)
// for u = 64 random bits / 2^64, from four partial products below 2^56
// (each floored: the point is at most 3 below the exact one, never past
// it). A scaled point, not a remainder, so a total that differs by a unit
// (an exp one ulp apart on another backend) moves the point by < 1.
SPLAT_FUNC uint64_t mcmc_sample_point(uint32_t seed, uint32_t step, uint32_t target, uint32_t draw,
                                      uint64_t total) {
  uint64_t a = random_key(seed, step, target, draw);
  uint64_t b = random_key(seed, step, target, draw + 1u);
  uint64_t c = total >> 24, d = total & 0xffffffu;
  return ((a * c) >> 8) + ((a * d) >> 32) + ((b * c) >> 40);
}

// New opacity of a Gaussian sampled ratio - 1 times: 1 - (1 - o)^(1 / ratio),
// kept in [min_opacity, 1 - 2^-23] (float32's epsilon below 1, as gsplat).
SPLAT_FUNC float mcmc_relocated_opacity(float opacity, uint32_t ratio, float min_opacity) {
  float o = 1.f - sp_exp(sp_log(1.f - opacity) / (float)ratio);
  return sp_clamp(o, min_opacity, 1.f - 1.1920929e-7f);
}

// The paper's scale factor: o / sum_{i=1}^{ratio} sum_{k=0}^{i-1}
// C(i-1, k) (-1)^k new_o^(k+1) / sqrt(k+1), with the binomial coefficients
// from `binoms` (MCMC_MAX_RATIO x MCMC_MAX_RATIO, row n holding C(n, k)).
SPLAT_FUNC float mcmc_scale_factor(float opacity, float new_opacity, uint32_t ratio,
                                   SPLAT_DEVICE_MEM const float* binoms) {
  float denom = 0.f;
  for (uint32_t i = 1u; i <= ratio; ++i) {
    float power = new_opacity;  // new_o^(k+1)
    for (uint32_t k = 0u; k < i; ++k) {
      float sign = (k & 1u) ? -1.f : 1.f;
      float term = (sign / sp_sqrt((float)(k + 1u))) * power;
      denom += binoms[(i - 1u) * MCMC_MAX_RATIO + k] * term;
      power *= new_opacity;
    }
  }
  return opacity / denom;
}

// How many times a source was sampled, plus its original, as the update uses it.
SPLAT_FUNC uint32_t mcmc_ratio(uint32_t times_sampled) {
  uint32_t r = times_sampled + 1u;
  return r < MCMC_MAX_RATIO ? r : MCMC_MAX_RATIO;
}

// The updated (opacity logit, log-scale shift) of a source Gaussian.
struct McmcUpdate {
  float logit;
  float log_scale_shift;  // log of the scale factor, added to each log-scale
};

SPLAT_FUNC McmcUpdate mcmc_update(float logit, uint32_t times_sampled, float min_opacity,
                                  SPLAT_DEVICE_MEM const float* binoms) {
  uint32_t ratio = mcmc_ratio(times_sampled);
  float o = mcmc_opacity(logit);
  float o_new = mcmc_relocated_opacity(o, ratio, min_opacity);
  McmcUpdate u;
  u.logit = sp_log(o_new / (1.f - o_new));
  u.log_scale_shift = sp_log(mcmc_scale_factor(o, o_new, ratio, binoms));
  return u;
}

// Gate of the position noise: 1 / (1 + exp(-100 ((1 - o) - 0.995))), ~0
// unless the Gaussian is nearly transparent.
SPLAT_FUNC float mcmc_noise_gate(float opacity) {
  return 1.f / (1.f + sp_exp(-100.f * ((1.f - opacity) - 0.995f)));
}

// The position noise of Gaussian `index` at `step`: Sigma n, n ~ N(0, I),
// times gate(opacity) * scale (scale: noise_lr times the means' learning
// rate). Sigma = M M^T with M = R S.
SPLAT_FUNC vec3 mcmc_position_noise(vec3 log_scale, float qw, float qx, float qy, float qz, float logit,
                                    float scale, uint32_t seed, uint32_t step, uint32_t index) {
  float qn = sp_sqrt(qw * qw + qx * qx + qy * qy + qz * qz);
  mat3 m = scaled_rotation(quat_to_rotation(qw / qn, qx / qn, qy / qn, qz / qn),
                           make_vec3(sp_exp(log_scale.x), sp_exp(log_scale.y), sp_exp(log_scale.z)));
  float n[3];
  for (uint32_t k = 0; k < 3u; ++k)
    n[k] = random_normal(random_key(seed, step, index, MCMC_DRAW_NOISE + 2u * k),
                         random_key(seed, step, index, MCMC_DRAW_NOISE + 2u * k + 1u));
  vec3 sigma_n = mat3_apply(m, mat3_apply_transposed(m, make_vec3(n[0], n[1], n[2])));
  return (mcmc_noise_gate(mcmc_opacity(logit)) * scale) * sigma_n;
}

// Gradients of opacity_reg * mean(opacity) and scale_reg * mean(scale):
// `weight` is the regulariser's weight over the number of terms of its mean
// (n and 3n).
SPLAT_FUNC float mcmc_opacity_reg_grad(float logit, float weight) {
  float o = mcmc_opacity(logit);
  return weight * (o * (1.f - o));
}
SPLAT_FUNC float mcmc_scale_reg_grad(float log_scale, float weight) { return weight * sp_exp(log_scale); }

#if defined(SPLAT_TARGET_HOST)
// C(n, k) for n, k < MCMC_MAX_RATIO (0 where k > n), each rounded once to float.
inline void mcmc_fill_binomials(float* table) {
  for (uint32_t n = 0; n < MCMC_MAX_RATIO; ++n) {
    double c = 1.0;
    for (uint32_t k = 0; k < MCMC_MAX_RATIO; ++k) {
      table[n * MCMC_MAX_RATIO + k] = k <= n ? (float)c : 0.f;
      c = c * (double)(n - k) / (double)(k + 1);
    }
  }
}
#endif
