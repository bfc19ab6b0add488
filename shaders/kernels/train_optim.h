// Per-element training kernels: the fused Adam step over every parameter
// group, the densification statistics after the backward, and the opacity
// reset. The math is shaders/common (adam.h, densify.h), shared with the CPU.
#pragma once
#include "adam.h"
#include "densify.h"
#include "sh.h"
#include "simt_util.h"

SPLAT_FUNC float vec4_at(vec4 v, uint32_t r) { return r == 0u ? v.x : r == 1u ? v.y : r == 2u ? v.z : v.w; }

// One thread per quad (4 floats) of each parameter group in turn (adam_quads,
// params.h), every group read and written with 16-byte vector accesses (a group's tail
// quad element by element), all in one dispatch. SH DC (the first 3 floats of
// a Gaussian's sh) and the rest have their own rates. The SH gradient is
// expanded from its factors (sh.h), never stored; with p.sh_grad_full,
// `sh_factors` holds it in full instead (the ranks' mean, data-parallel). With p.visible_only, a
// Gaussian the step's view did not see (radius <= 0) keeps its parameters and
// moments, and a quad of such Gaussians alone reads and writes nothing. A
// step whose pairs did not fit (step_skipped) changes nothing.
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
                          SPLAT_DEVICE_MEM const float* sh_factors, SPLAT_DEVICE_MEM const int32_t* radius) {
  const uint32_t n = p.count;
  // The groups' first quads (params.h, adam_quads).
  const uint32_t q_scales = float_quads(3u * n), q_quats = 2u * q_scales, q_opacity = q_quats + n,
                 q_sh = q_opacity + float_quads(n);
  uint32_t q = global_index(t);
  SPLAT_DEVICE_MEM float* param;
  SPLAT_DEVICE_MEM float* m;
  SPLAT_DEVICE_MEM float* v;
  SPLAT_DEVICE_MEM const float* g = g_means;
  uint32_t len, width;  // the group's floats, and per Gaussian
  float lr = 0.f;
  bool sh_group = false;
  if (q < q_scales) {
    param = means, m = m_means, v = v_means, lr = p.lr_means, len = 3u * n, width = 3u;
  } else if (q < q_quats) {
    q -= q_scales;
    param = log_scales, m = m_log_scales, v = v_log_scales, g = g_log_scales, lr = p.lr_log_scales, len = 3u * n,
    width = 3u;
  } else if (q < q_opacity) {
    q -= q_quats;
    param = quats, m = m_quats, v = v_quats, g = g_quats, lr = p.lr_quats, len = 4u * n, width = 4u;
  } else if (q < q_sh) {
    q -= q_opacity;
    param = opacity, m = m_opacity, v = v_opacity, g = g_opacity, lr = p.lr_opacity, len = n, width = 1u;
  } else {
    q -= q_sh;
    param = sh, m = m_sh, v = v_sh, sh_group = true, len = n * p.sh_width, width = p.sh_width;
  }
  const uint32_t e0 = 4u * q;
  if (e0 >= len || step_skipped(radius)) return;
  bool seen[4] = {true, true, true, true};
  if (p.visible_only != 0u) {
    bool any = false;
    SPLAT_UNROLL for (uint32_t r = 0; r < 4u; ++r) {
      seen[r] = e0 + r < len && radius[(e0 + r) / width] > 0;
      any = any || seen[r];
    }
    if (!any) return;
  }
  AdamStep step;
  step.lr = lr;
  step.beta1 = p.beta1;
  step.beta2 = p.beta2;
  step.eps = p.eps;
  step.bias1 = p.bias1;
  step.bias2 = p.bias2;
  const bool full = e0 + 4u <= len;
  vec4 pv, mv, vv, gv;
  if (full) {
    pv = load_float4(param, q);
    mv = load_float4(m, q);
    vv = load_float4(v, q);
    if (!sh_group) gv = load_float4(g, q);
  }
  float out_p[4], out_m[4], out_v[4];
  SPLAT_UNROLL for (uint32_t r = 0; r < 4u; ++r) {
    const uint32_t e = e0 + r;
    if (e >= len) break;
    float grad;
    if (sh_group) {
      uint32_t i = e / p.sh_width, j = e % p.sh_width;
      grad = p.sh_grad_full != 0u ? sh_factors[e]
                                  : sh_factor_grad(sh_factors + SPLAT_SH_FACTOR_FLOATS * i, j / 3u, j % 3u, p.sh_k_count);
      step.lr = j < 3u ? p.lr_sh_dc : p.lr_sh_rest;
    } else {
      grad = full ? vec4_at(gv, r) : g[e];
    }
    float pe = full ? vec4_at(pv, r) : param[e], me = full ? vec4_at(mv, r) : m[e], ve = full ? vec4_at(vv, r) : v[e];
    if (seen[r]) adam_update(step, grad, pe, me, ve);
    out_p[r] = pe;
    out_m[r] = me;
    out_v[r] = ve;
    if (!full) {
      param[e] = pe;
      m[e] = me;
      v[e] = ve;
    }
  }
  if (full) {
    store_float4(param, q, out_p[0], out_p[1], out_p[2], out_p[3]);
    store_float4(m, q, out_m[0], out_m[1], out_m[2], out_m[3]);
    store_float4(v, q, out_v[0], out_v[1], out_v[2], out_v[3]);
  }
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
