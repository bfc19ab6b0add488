// Adam (bias-corrected, as torch.optim.Adam computes it) for one scalar parameter.
//
// The bias corrections fold into two scalars of the step, the step size
// lr / (1 - beta1^t) and 1 / sqrt(1 - beta2^t), so that an element costs one
// square root and one division. With a division for each correction as well,
// the fused update kernel was bound by arithmetic, not memory (86% of the SM's
// issue slots at 3.1M Gaussians on an H200). On CUDA that square root and
// division are the hardware approximations (sp_adam_quotient, compat.h).
#pragma once
#include "compat.h"
#include "random.h"

// Several views a step: view k's value into the batch's sum (k = 0 starts
// it), and at the last view the mean, (sum + value) / views, where the update
// reads it: the views summed in order (grad_accumulate_body on the GPU, the CPU
// backend's accumulate_grads). accumulate_view_in is the rule on a running
// sum the caller holds (a register): the sum after view k, or at the last view
// the mean; views rasterized together sum a Gaussian's views so in one thread
// (project_backward_views_body).
SPLAT_FUNC float accumulate_view_in(uint32_t k, uint32_t views, float value, float sum) {
  if (k == 0u) return value;
  if (k + 1u == views) return (sum + value) / (float)views;
  return sum + value;
}

SPLAT_FUNC void accumulate_view(uint32_t k, uint32_t views, SPLAT_DEVICE_MEM float& value,
                                SPLAT_DEVICE_MEM float& sum) {
  if (k + 1u == views && k > 0u) value = accumulate_view_in(k, views, value, sum);
  else sum = accumulate_view_in(k, views, value, sum);
}

struct AdamStep {
  float step_size;  // lr / (1 - beta1^t): adam_step_size
  float beta1, beta2, eps;
  float rsqrt_bias2;  // 1 / sqrt(1 - beta2^t): adam_rsqrt_bias2
};

// From a rate and 1 - beta^t as the host rounds them; every backend calls
// these, so the scalars (and the updates) are the same bits everywhere.
SPLAT_FUNC float adam_step_size(float lr, float bias1) { return lr / bias1; }
SPLAT_FUNC float adam_rsqrt_bias2(float bias2) { return sp_rsqrt(bias2); }

SPLAT_FUNC AdamStep make_adam_step(float lr, float beta1, float beta2, float eps, float bias1, float bias2) {
  AdamStep a;
  a.step_size = adam_step_size(lr, bias1);
  a.beta1 = beta1;
  a.beta2 = beta2;
  a.eps = eps;
  a.rsqrt_bias2 = adam_rsqrt_bias2(bias2);
  return a;
}

SPLAT_FUNC void adam_update(AdamStep a, float grad, SPLAT_THREAD float& param, SPLAT_THREAD float& m,
                            SPLAT_THREAD float& v) {
  m = a.beta1 * m + (1.f - a.beta1) * grad;
  v = a.beta2 * v + (1.f - a.beta2) * grad * grad;
  param -= sp_adam_quotient(a.step_size * m, v, a.rsqrt_bias2, a.eps);
}

// train.adam_moments = "bfloat16": an element's two moments in one 32-bit
// word, m in the low half and v in the high, each a bfloat16 (a float's upper
// 16 bits). The update runs in float from the stored values, as adam_update;
// only the stored moments are rounded, stochastically: up with probability
// equal to the dropped fraction, so a rounding is unbiased and an increment
// smaller than bfloat16's spacing still counts on average. Round-to-nearest
// would freeze v, whose per-step change (1 - beta2) g^2 is a thousandth of it
// while bfloat16 resolves 1/256. The noise is a pure function of (seed, step,
// group, element), so every backend rounds alike.

// The step's key (the host computes it; the kernels and the CPU derive each
// group's from it).
SPLAT_FUNC uint32_t adam_moment_key(uint32_t seed, uint32_t step) { return random_key(seed, step, 0xada30000u, 0u); }
// group: 0 means, 1 log_scales, 2 quats, 3 opacity, 4 sh.
SPLAT_FUNC uint32_t adam_group_key(uint32_t key, uint32_t group) { return hash_u32(key ^ (0x9e3779b9u * (group + 1u))); }
// 32 bits of noise for one element: 16 for m (low), 16 for v (high). One hash
// per quad of 4 elements (the GPU kernel's unit of work), times an odd constant
// of the element's place in it: a bijection of the 32 bits, so each element's
// noise stays uniform, at one multiply an element instead of a hash (the hash
// per element had made the bfloat16 kernel partly bound by its arithmetic).
SPLAT_FUNC uint32_t adam_quad_noise(uint32_t group_key, uint32_t quad) { return hash_u32(group_key ^ quad); }
SPLAT_FUNC uint32_t adam_lane_noise(uint32_t quad_noise, uint32_t lane) {
  return quad_noise * (lane == 0u ? 0x9e3779b1u : lane == 1u ? 0x85ebca77u : lane == 2u ? 0xc2b2ae3du : 0x27d4eb2fu);
}
SPLAT_FUNC uint32_t adam_moment_noise(uint32_t group_key, uint32_t element) {
  return adam_lane_noise(adam_quad_noise(group_key, element >> 2), element & 3u);
}

// An infinity or NaN's bfloat16 bits: truncated, a NaN kept a NaN.
SPLAT_FUNC uint32_t bf16_nonfinite(uint32_t bits) { return (bits >> 16) | ((bits & 0x007fffffu) != 0u ? 0x40u : 0u); }
// x's bfloat16 bits (in the low 16): the dropped low half decides the rounding
// against `noise` (16 bits).
SPLAT_FUNC uint32_t bf16_round_stochastic(float x, uint32_t noise) {
  const uint32_t bits = sp_float_bits(x);
  if (sp_nonfinite(x)) return bf16_nonfinite(bits);
  return (bits + (noise & 0xffffu)) >> 16;  // finite: a carry out of the exponent is infinity, as it should be
}
// Round to nearest, ties to even: for moments that come from elsewhere (a
// float32 state uploaded for bfloat16 training).
SPLAT_FUNC uint32_t bf16_round_nearest(float x) {
  const uint32_t bits = sp_float_bits(x);
  if (sp_nonfinite(x)) return bf16_nonfinite(bits);
  return (bits + 0x7fffu + ((bits >> 16) & 1u)) >> 16;
}
SPLAT_FUNC float bf16_float(uint32_t h) { return sp_bits_float(h << 16); }

SPLAT_FUNC uint32_t adam_pack_moments(float m, float v, uint32_t noise) {
  return bf16_round_stochastic(m, noise) | (bf16_round_stochastic(v, noise >> 16) << 16);
}
SPLAT_FUNC float adam_unpack_m(uint32_t word) { return bf16_float(word & 0xffffu); }
SPLAT_FUNC float adam_unpack_v(uint32_t word) { return bf16_float(word >> 16); }

// adam_update on a packed word.
SPLAT_FUNC void adam_update_bf16(AdamStep a, float grad, SPLAT_THREAD float& param, SPLAT_THREAD uint32_t& word,
                                 uint32_t noise) {
  float m = adam_unpack_m(word), v = adam_unpack_v(word);
  adam_update(a, grad, param, m, v);
  word = adam_pack_moments(m, v, noise);
}
