// Per-element training kernels: the fused Adam step over every parameter
// group, the densification statistics after the backward, and the opacity
// reset. The math is shaders/common (adam.h, densify.h), shared with the CPU.
#pragma once
#include "adam.h"
#include "densify.h"
#include "sh.h"
#include "simt_util.h"

// One thread per float of the virtual concatenation
//   means [3n] | log_scales [3n] | quats [4n] | opacity_logits [n] | sh [n sh_width]
// so every group is read and written coalesced in one dispatch. SH DC (the
// first 3 floats of a Gaussian's sh) and the rest have their own rates. The
// SH gradient is expanded from its factors (sh.h), never stored.
SPLAT_FUNC void adam_body(SimtThread t, SPLAT_CONST_MEM const AdamParams& p, SPLAT_DEVICE_MEM float* means,
                          SPLAT_DEVICE_MEM float* log_scales, SPLAT_DEVICE_MEM float* quats,
                          SPLAT_DEVICE_MEM float* opacity, SPLAT_DEVICE_MEM float* sh,
                          SPLAT_DEVICE_MEM float* m_means, SPLAT_DEVICE_MEM float* m_log_scales,
                          SPLAT_DEVICE_MEM float* m_quats, SPLAT_DEVICE_MEM float* m_opacity,
                          SPLAT_DEVICE_MEM float* m_sh, SPLAT_DEVICE_MEM float* v_means,
                          SPLAT_DEVICE_MEM float* v_log_scales, SPLAT_DEVICE_MEM float* v_quats,
                          SPLAT_DEVICE_MEM float* v_opacity, SPLAT_DEVICE_MEM float* v_sh,
                          SPLAT_DEVICE_MEM const float* g_means, SPLAT_DEVICE_MEM const float* g_log_scales,
                          SPLAT_DEVICE_MEM const float* g_quats, SPLAT_DEVICE_MEM const float* g_opacity,
                          SPLAT_DEVICE_MEM const float* sh_factors) {
  const uint32_t n = p.count;
  uint32_t e = global_index(t);
  SPLAT_DEVICE_MEM float* param;
  SPLAT_DEVICE_MEM float* m;
  SPLAT_DEVICE_MEM float* v;
  SPLAT_DEVICE_MEM const float* g = g_means;
  bool sh_group = false;
  AdamStep step;
  step.beta1 = p.beta1;
  step.beta2 = p.beta2;
  step.eps = p.eps;
  step.bias1 = p.bias1;
  step.bias2 = p.bias2;
  if (e < 3u * n) {
    param = means, m = m_means, v = v_means, g = g_means, step.lr = p.lr_means;
  } else if (e < 6u * n) {
    e -= 3u * n;
    param = log_scales, m = m_log_scales, v = v_log_scales, g = g_log_scales, step.lr = p.lr_log_scales;
  } else if (e < 10u * n) {
    e -= 6u * n;
    param = quats, m = m_quats, v = v_quats, g = g_quats, step.lr = p.lr_quats;
  } else if (e < 11u * n) {
    e -= 10u * n;
    param = opacity, m = m_opacity, v = v_opacity, g = g_opacity, step.lr = p.lr_opacity;
  } else {
    e -= 11u * n;
    if (e >= n * p.sh_width) return;
    param = sh, m = m_sh, v = v_sh, sh_group = true;
    step.lr = e % p.sh_width < 3u ? p.lr_sh_dc : p.lr_sh_rest;
  }
  float grad;
  if (sh_group) {
    uint32_t i = e / p.sh_width, j = e % p.sh_width;
    grad = sh_factor_grad(sh_factors + SPLAT_SH_FACTOR_FLOATS * i, j / 3u, j % 3u, p.sh_k_count);
  } else {
    grad = g[e];
  }
  float pe = param[e], me = m[e], ve = v[e];
  adam_update(step, grad, pe, me, ve);
  param[e] = pe;
  m[e] = me;
  v[e] = ve;
}

// Densification statistics of the last backward: for every Gaussian visible
// in it, the NDC norm of its 2D mean gradient, one visible step, the largest
// screen radius.
SPLAT_FUNC void grad_stats_body(SimtThread t, SPLAT_CONST_MEM const ElementParams& p,
                                SPLAT_DEVICE_MEM const int32_t* radius, SPLAT_DEVICE_MEM const float* d_means2d,
                                SPLAT_DEVICE_MEM float* grad_accum, SPLAT_DEVICE_MEM float* grad_count,
                                SPLAT_DEVICE_MEM float* max_radii) {
  uint32_t i = global_index(t);
  if (i >= p.count) return;
  int32_t r = radius[i];
  if (r <= 0) return;
  grad_accum[i] += ndc_grad_norm(d_means2d[2u * i], d_means2d[2u * i + 1u], p.width, p.height);
  grad_count[i] += 1.f;
  max_radii[i] = sp_max(max_radii[i], (float)r);
}

// opacity_logit = min(opacity_logit, value) (the moments are zeroed by the host).
SPLAT_FUNC void reset_opacity_body(SimtThread t, SPLAT_CONST_MEM const ElementParams& p,
                                   SPLAT_DEVICE_MEM float* opacity) {
  uint32_t i = global_index(t);
  if (i >= p.count) return;
  opacity[i] = sp_min(opacity[i], p.value);
}
