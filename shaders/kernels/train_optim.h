// Per-element training kernels: the fused Adam step over every parameter
// group, the densification statistics after the backward, the growth cap
// after densification and the opacity reset. The math is shaders/common
// (adam.h, densify.h), shared with the CPU.
#pragma once
#include "adam.h"
#include "densify.h"
#include "sh.h"
#include "simt_util.h"

// One thread per quad (4 floats) of each parameter group in turn (adam_quads,
// params.h), all in one dispatch. A whole quad is read and written with
// 16-byte vector accesses, the arithmetic done in the loaded registers; a
// group's partial last quad goes element by element. The kernel moves about
// 1.5 KB a Gaussian at SH degree 3, and arithmetic rather than memory bounded
// it, so the thread does one integer division (its first float's Gaussian and
// column) and steps through the quad from there. SH DC (the first 3 floats of a Gaussian's sh)
// and the rest have their own rates. The SH gradient is expanded from its
// factors (sh.h), never stored (several views a step: the mean of p.sh_views
// views' factors, sh_factor_grad_views); with p.sh_grad_full, `sh_factors`
// holds it in full instead (the ranks' mean, data-parallel). With p.visible_only, a
// Gaussian the step's view did not see (radius <= 0) keeps its parameters and
// moments, and a quad of such Gaussians alone reads and writes nothing. With
// p.bf16_moments each group's m array holds both moments, packed (adam.h), and
// v is never touched: 8 bytes of moments an element moved instead of 16. A step
// whose pairs did not fit (step_skipped) changes nothing.
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
  float lr = 0.f;  // the group's step size
  bool sh_group = false, factored = false;  // SH (its DC rate); gradient from its factors
  uint32_t group = 0u;  // adam_group_key's numbering
  if (q < q_scales) {
    param = means, m = m_means, v = v_means, lr = p.step_means, len = 3u * n, width = 3u;
  } else if (q < q_quats) {
    q -= q_scales;
    param = log_scales, m = m_log_scales, v = v_log_scales, g = g_log_scales, lr = p.step_log_scales, len = 3u * n,
    width = 3u, group = 1u;
  } else if (q < q_opacity) {
    q -= q_quats;
    param = quats, m = m_quats, v = v_quats, g = g_quats, lr = p.step_quats, len = 4u * n, width = 4u, group = 2u;
  } else if (q < q_sh) {
    q -= q_opacity;
    param = opacity, m = m_opacity, v = v_opacity, g = g_opacity, lr = p.step_opacity, len = n, width = 1u,
    group = 3u;
  } else {
    q -= q_sh;
    param = sh, m = m_sh, v = v_sh, g = sh_factors, lr = p.step_sh_rest, sh_group = true, len = n * p.sh_width,
    width = p.sh_width, group = 4u;
    factored = p.sh_grad_full == 0u;  // else a plain per-float gradient, as the others'
  }
  const uint32_t e0 = 4u * q;
  if (e0 >= len || step_skipped(radius)) return;
  const uint32_t count = len - e0 < 4u ? len - e0 : 4u;  // floats of this quad
  // Gaussian i0 and column j0 of the quad's first float; the others follow
  // (a quad spans at most two Gaussians when width >= 3, four when it is 1).
  const uint32_t i0 = e0 / width, j0 = e0 - i0 * width;
  // Per float of the quad: seen (bit r of `seen`), and SH DC's rate (bit r of `dc`).
  float grad[4];
  uint32_t seen = 0u, dc = 0u;
  {
    uint32_t i = i0, j = j0;
    SPLAT_UNROLL for (uint32_t r = 0; r < 4u; ++r) {
      const bool in = r < count;
      if (in && (p.visible_only == 0u || radius[i] > 0)) seen |= 1u << r;
      if (factored)
        grad[r] = in ? sh_factor_grad_views(sh_factors + SPLAT_SH_FACTOR_FLOATS * i, SPLAT_SH_FACTOR_FLOATS * n,
                                            p.sh_views, j / 3u, j % 3u, p.sh_k_count)
                     : 0.f;
      if (sh_group && j < 3u) dc |= 1u << r;
      if (++j == width) j = 0u, ++i;
    }
  }
  if (seen == 0u) return;
  AdamStep step;
  step.beta1 = p.beta1;
  step.beta2 = p.beta2;
  step.eps = p.eps;
  step.rsqrt_bias2 = p.rsqrt_bias2;
  // Two paths, packed and float32, each written out for the whole quad: one path
  // over register arrays for both formats (48 registers against 38) measured
  // 9% slower at 3.1M Gaussians on an H200 (docs/gpu.md, "bfloat16 moments").
  if (p.bf16_moments != 0u) {
    const uint32_t quad_noise = adam_quad_noise(adam_group_key(p.moment_key, group), q);
    if (count == 4u) {
      vec4 pv = load_float4(param, q), wv = load_float4(m, q);
      if (!factored) {
        const vec4 gv = load_float4(g, q);
        grad[0] = gv.x, grad[1] = gv.y, grad[2] = gv.z, grad[3] = gv.w;
      }
      uint32_t w0 = sp_float_bits(wv.x), w1 = sp_float_bits(wv.y), w2 = sp_float_bits(wv.z),
               w3 = sp_float_bits(wv.w);
      step.step_size = (dc & 1u) != 0u ? p.step_sh_dc : lr;
      if ((seen & 1u) != 0u) adam_update_bf16(step, grad[0], pv.x, w0, adam_lane_noise(quad_noise, 0u));
      step.step_size = (dc & 2u) != 0u ? p.step_sh_dc : lr;
      if ((seen & 2u) != 0u) adam_update_bf16(step, grad[1], pv.y, w1, adam_lane_noise(quad_noise, 1u));
      step.step_size = (dc & 4u) != 0u ? p.step_sh_dc : lr;
      if ((seen & 4u) != 0u) adam_update_bf16(step, grad[2], pv.z, w2, adam_lane_noise(quad_noise, 2u));
      step.step_size = (dc & 8u) != 0u ? p.step_sh_dc : lr;
      if ((seen & 8u) != 0u) adam_update_bf16(step, grad[3], pv.w, w3, adam_lane_noise(quad_noise, 3u));
      store_float4(param, q, pv.x, pv.y, pv.z, pv.w);
      store_float4(m, q, sp_bits_float(w0), sp_bits_float(w1), sp_bits_float(w2), sp_bits_float(w3));
      return;
    }
    SPLAT_UNROLL for (uint32_t r = 0; r < 4u; ++r) {
      if ((seen >> r & 1u) == 0u) continue;
      const uint32_t e = e0 + r;
      float pe = param[e];
      uint32_t we = sp_float_bits(m[e]);
      step.step_size = (dc >> r & 1u) != 0u ? p.step_sh_dc : lr;
      adam_update_bf16(step, factored ? grad[r] : g[e], pe, we, adam_lane_noise(quad_noise, r));
      param[e] = pe;
      m[e] = sp_bits_float(we);
    }
    return;
  }
  if (count == 4u) {
    vec4 pv = load_float4(param, q), mv = load_float4(m, q), vv = load_float4(v, q);
    if (!factored) {
      const vec4 gv = load_float4(g, q);
      grad[0] = gv.x, grad[1] = gv.y, grad[2] = gv.z, grad[3] = gv.w;
    }
    step.step_size = (dc & 1u) != 0u ? p.step_sh_dc : lr;
    if ((seen & 1u) != 0u) adam_update(step, grad[0], pv.x, mv.x, vv.x);
    step.step_size = (dc & 2u) != 0u ? p.step_sh_dc : lr;
    if ((seen & 2u) != 0u) adam_update(step, grad[1], pv.y, mv.y, vv.y);
    step.step_size = (dc & 4u) != 0u ? p.step_sh_dc : lr;
    if ((seen & 4u) != 0u) adam_update(step, grad[2], pv.z, mv.z, vv.z);
    step.step_size = (dc & 8u) != 0u ? p.step_sh_dc : lr;
    if ((seen & 8u) != 0u) adam_update(step, grad[3], pv.w, mv.w, vv.w);
    store_float4(param, q, pv.x, pv.y, pv.z, pv.w);
    store_float4(m, q, mv.x, mv.y, mv.z, mv.w);
    store_float4(v, q, vv.x, vv.y, vv.z, vv.w);
    return;
  }
  SPLAT_UNROLL for (uint32_t r = 0; r < 4u; ++r) {
    if ((seen >> r & 1u) == 0u) continue;
    const uint32_t e = e0 + r;
    float pe = param[e], me = m[e], ve = v[e];
    step.step_size = (dc >> r & 1u) != 0u ? p.step_sh_dc : lr;
    adam_update(step, factored ? grad[r] : g[e], pe, me, ve);
    param[e] = pe;
    m[e] = me;
    v[e] = ve;
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
  float grad = grad_accum[i], count = grad_count[i], max_radius = max_radii[i];
  densify_stats_add(d_means2d[2u * i], d_means2d[2u * i + 1u], p.width, p.height, r, grad, count, max_radius);
  grad_accum[i] = grad;
  grad_count[i] = count;
  max_radii[i] = max_radius;
}

// opacity_logit = min(opacity_logit, value) (the moments are zeroed by the host).
// The gradients (and, with_loss, the loss: loss[0] the view's, loss[3] the
// batch's sum; train_loss.h) of view k of a batch. A view whose forward
// overflowed the pair buffers (step_skipped) adds nothing; its batch runs
// again from it.
SPLAT_FUNC void grad_accumulate_body(SimtThread t, SPLAT_CONST_MEM const AccumulateParams& p,
                                     SPLAT_DEVICE_MEM float* grad, SPLAT_DEVICE_MEM float* sum,
                                     SPLAT_DEVICE_MEM const int32_t* radius, SPLAT_DEVICE_MEM float* loss) {
  uint32_t i = global_index(t);
  if (i >= p.count || step_skipped(radius)) return;
  accumulate_view(p.k, p.views, grad[i], sum[i]);
  if (p.with_loss != 0u && i == 0u) accumulate_view(p.k, p.views, loss[0], loss[3]);
}

// The growth cap after densification, after each Adam step (densify.h,
// scale_ceiling): with p.record, each Gaussian's ceiling becomes its largest
// log scale plus p.log_growth first. Not gated on step_skipped: a skipped
// step's Adam changed nothing, so the clamp leaves what an earlier one left (a
// ceiling recorded on a skipped step is the scales before it).
SPLAT_FUNC void cap_scales_body(SimtThread t, SPLAT_CONST_MEM const ScaleCapParams& p,
                                SPLAT_DEVICE_MEM float* log_scales, SPLAT_DEVICE_MEM float* ceiling) {
  uint32_t i = global_index(t);
  if (i >= p.count) return;
  float s0 = log_scales[3u * i], s1 = log_scales[3u * i + 1u], s2 = log_scales[3u * i + 2u];
  float c;
  if (p.record != 0u) {
    c = scale_ceiling(s0, s1, s2, p.log_growth);
    ceiling[i] = c;
  } else {
    c = ceiling[i];
  }
  log_scales[3u * i] = capped_log_scale(s0, c);
  log_scales[3u * i + 1u] = capped_log_scale(s1, c);
  log_scales[3u * i + 2u] = capped_log_scale(s2, c);
}

SPLAT_FUNC void reset_opacity_body(SimtThread t, SPLAT_CONST_MEM const ElementParams& p,
                                   SPLAT_DEVICE_MEM float* opacity) {
  uint32_t i = global_index(t);
  if (i >= p.count) return;
  opacity[i] = sp_min(opacity[i], p.value);
}
