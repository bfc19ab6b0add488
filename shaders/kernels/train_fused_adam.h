// The training step's projection backward with Adam folded in: each thread
// takes a Gaussian's gradients from its accumulated blend gradients
// (gaussian_grads, project.h) and steps its parameters and moments at once,
// so the gradients never go to memory and come back. The separate path writes
// 31 floats of gradients and SH factors a Gaussian, then Adam reads them and
// every parameter again (the projection backward had read them a moment
// before): ~1.5 KB a Gaussian at SH degree 3 against ~1.0 KB here.
//
// Every element is stepped with the separate kernel's arithmetic
// (train_optim.h, adam_body): the same gradient floats, the same adam_update /
// adam_update_bf16, the same stochastic-rounding noise (a function of the
// group and the element's index in it, adam.h), the same rates (SH DC against
// the rest), the same visible_only and skipped-step rules. Parameters and
// moments therefore come out the same bits either way (emulator:
// tests/test_simt_emulation.py; on the GPU with deterministic=true,
// tests/test_cuda_training.py). Only the 2D-mean gradient is stored (the
// densification statistics read it); p.sh_grad_full is not supported (the
// data-parallel mean needs the gradients in memory: the host keeps the
// separate path there).
#pragma once
#include "adam.h"
#include "project.h"

// Adam for element e of one group's flat arrays at step.step_size. With
// packed moments m holds both and v is not read; the noise is
// adam_moment_noise(group key, e), as the separate kernel's.
SPLAT_FUNC void adam_element(SPLAT_CONST_MEM const AdamParams& p, AdamStep step, uint32_t key,
                             SPLAT_DEVICE_MEM float* param, SPLAT_DEVICE_MEM float* m, SPLAT_DEVICE_MEM float* v,
                             uint32_t e, float grad) {
  float pe = param[e];
  if (p.bf16_moments != 0u) {
    uint32_t word = sp_float_bits(m[e]);
    adam_update_bf16(step, grad, pe, word, adam_moment_noise(key, e));
    m[e] = sp_bits_float(word);
  } else {
    float me = m[e], ve = v[e];
    adam_update(step, grad, pe, me, ve);
    m[e] = me;
    v[e] = ve;
  }
  param[e] = pe;
}

// One quad (4 floats from element 4 q of the flat SH array) of Gaussian i's
// row, whose elements are row elements j0 .. j0 + 3: gradient b[j / 3] dc[j % 3]
// for the active coefficients (sh_factor_grad's rule), DC's rate for j < 3.
SPLAT_FUNC void adam_sh_quad(SPLAT_CONST_MEM const AdamParams& p, AdamStep step, uint32_t key,
                             SPLAT_DEVICE_MEM float* sh, SPLAT_DEVICE_MEM float* m, SPLAT_DEVICE_MEM float* v,
                             uint32_t q, uint32_t j0, SPLAT_THREAD const ShGradFactors& f) {
  float grad[4];
  SPLAT_UNROLL for (uint32_t r = 0; r < 4u; ++r) {
    const uint32_t j = j0 + r;
    grad[r] = j / 3u < p.sh_k_count ? sh_factor_grad_at(f, j / 3u, j % 3u) : 0.f;
  }
  vec4 pv = load_float4(sh, q);
  if (p.bf16_moments != 0u) {
    const uint32_t quad_noise = adam_quad_noise(key, q);
    vec4 wv = load_float4(m, q);
    uint32_t w0 = sp_float_bits(wv.x), w1 = sp_float_bits(wv.y), w2 = sp_float_bits(wv.z), w3 = sp_float_bits(wv.w);
    step.step_size = j0 < 3u ? p.step_sh_dc : p.step_sh_rest;
    adam_update_bf16(step, grad[0], pv.x, w0, adam_lane_noise(quad_noise, 0u));
    step.step_size = j0 + 1u < 3u ? p.step_sh_dc : p.step_sh_rest;
    adam_update_bf16(step, grad[1], pv.y, w1, adam_lane_noise(quad_noise, 1u));
    step.step_size = j0 + 2u < 3u ? p.step_sh_dc : p.step_sh_rest;
    adam_update_bf16(step, grad[2], pv.z, w2, adam_lane_noise(quad_noise, 2u));
    step.step_size = j0 + 3u < 3u ? p.step_sh_dc : p.step_sh_rest;
    adam_update_bf16(step, grad[3], pv.w, w3, adam_lane_noise(quad_noise, 3u));
    store_float4(m, q, sp_bits_float(w0), sp_bits_float(w1), sp_bits_float(w2), sp_bits_float(w3));
  } else {
    vec4 mv = load_float4(m, q), vv = load_float4(v, q);
    step.step_size = j0 < 3u ? p.step_sh_dc : p.step_sh_rest;
    adam_update(step, grad[0], pv.x, mv.x, vv.x);
    step.step_size = j0 + 1u < 3u ? p.step_sh_dc : p.step_sh_rest;
    adam_update(step, grad[1], pv.y, mv.y, vv.y);
    step.step_size = j0 + 2u < 3u ? p.step_sh_dc : p.step_sh_rest;
    adam_update(step, grad[2], pv.z, mv.z, vv.z);
    step.step_size = j0 + 3u < 3u ? p.step_sh_dc : p.step_sh_rest;
    adam_update(step, grad[3], pv.w, mv.w, vv.w);
    store_float4(m, q, mv.x, mv.y, mv.z, mv.w);
    store_float4(v, q, vv.x, vv.y, vv.z, vv.w);
  }
  store_float4(sh, q, pv.x, pv.y, pv.z, pv.w);
}

// One thread per Gaussian (p.count of them; rp.num_gaussians the same).
SPLAT_FUNC void project_backward_adam_body(
    SimtThread t, SPLAT_CONST_MEM const CameraParams& cam, SPLAT_CONST_MEM const RasterParams& rp,
    SPLAT_CONST_MEM const AdamParams& p, SPLAT_DEVICE_MEM float* means, SPLAT_DEVICE_MEM float* log_scales,
    SPLAT_DEVICE_MEM float* quats, SPLAT_DEVICE_MEM float* opacity, SPLAT_DEVICE_MEM float* sh,
    SPLAT_DEVICE_MEM const SplatRecord* records, SPLAT_DEVICE_MEM const int32_t* radius,
    SPLAT_DEVICE_MEM const float* accum, SPLAT_DEVICE_MEM const uint32_t* pair_ranges, SPLAT_DEVICE_MEM float* m_means,
    SPLAT_DEVICE_MEM float* m_log_scales, SPLAT_DEVICE_MEM float* m_quats, SPLAT_DEVICE_MEM float* m_opacity,
    SPLAT_DEVICE_MEM float* m_sh, SPLAT_DEVICE_MEM float* v_means, SPLAT_DEVICE_MEM float* v_log_scales,
    SPLAT_DEVICE_MEM float* v_quats, SPLAT_DEVICE_MEM float* v_opacity, SPLAT_DEVICE_MEM float* v_sh,
    SPLAT_DEVICE_MEM float* d_means2d) {
  const uint32_t i = global_index(t);
  if (i >= rp.num_gaussians) return;
  const bool seen = radius[i] > 0;
  GaussianGrads g;
  if (seen) {
    g = gaussian_grads(cam, rp, means, log_scales, quats, sh, records, accum, pair_ranges, i);
  } else {  // unseen, or a skipped step's -1 (tile_bin.h): zero gradients, as project_backward_body stores
    g.mean = make_vec3(0.f, 0.f, 0.f);
    g.log_scale = make_vec3(0.f, 0.f, 0.f);
    SPLAT_UNROLL for (uint32_t c = 0; c < 4u; ++c) g.quat[c] = 0.f;
    g.opacity_logit = 0.f;
    SPLAT_UNROLL for (uint32_t k = 0; k < SPLAT_MAX_SH_COEFFS; ++k) g.sh.b[k] = 0.f;
    g.sh.dc = make_vec3(0.f, 0.f, 0.f);
    g.mean2d = make_vec2(0.f, 0.f);
  }
  d_means2d[2 * i] = g.mean2d.x;
  d_means2d[2 * i + 1] = g.mean2d.y;
  if (step_skipped(radius) || (p.visible_only != 0u && !seen)) return;

  AdamStep step;
  step.beta1 = p.beta1;
  step.beta2 = p.beta2;
  step.eps = p.eps;
  step.rsqrt_bias2 = p.rsqrt_bias2;
  step.step_size = p.step_means;
  uint32_t key = adam_group_key(p.moment_key, 0u);
  adam_element(p, step, key, means, m_means, v_means, 3u * i, g.mean.x);
  adam_element(p, step, key, means, m_means, v_means, 3u * i + 1u, g.mean.y);
  adam_element(p, step, key, means, m_means, v_means, 3u * i + 2u, g.mean.z);
  step.step_size = p.step_log_scales;
  key = adam_group_key(p.moment_key, 1u);
  adam_element(p, step, key, log_scales, m_log_scales, v_log_scales, 3u * i, g.log_scale.x);
  adam_element(p, step, key, log_scales, m_log_scales, v_log_scales, 3u * i + 1u, g.log_scale.y);
  adam_element(p, step, key, log_scales, m_log_scales, v_log_scales, 3u * i + 2u, g.log_scale.z);
  step.step_size = p.step_quats;
  key = adam_group_key(p.moment_key, 2u);
  SPLAT_UNROLL for (uint32_t c = 0; c < 4u; ++c)
    adam_element(p, step, key, quats, m_quats, v_quats, 4u * i + c, g.quat[c]);
  step.step_size = p.step_opacity;
  adam_element(p, step, adam_group_key(p.moment_key, 3u), opacity, m_opacity, v_opacity, i, g.opacity_logit);

  const uint32_t width = p.sh_width, e0 = width * i;
  key = adam_group_key(p.moment_key, 4u);
  if (width % 4u == 0u) {  // whole quads a row (the trainer's 16 coefficients: 12)
    SPLAT_UNROLL for (uint32_t c = 0; c < 3u * SPLAT_MAX_SH_COEFFS / 4u; ++c) {
      if (4u * c >= width) break;
      adam_sh_quad(p, step, key, sh, m_sh, v_sh, e0 / 4u + c, 4u * c, g.sh);
    }
    return;
  }
  // Any other width (3 stride): a row's coefficients one by one, unrolled so
  // that the factors stay in registers.
  SPLAT_UNROLL for (uint32_t k = 0; k < SPLAT_MAX_SH_COEFFS; ++k) {
    if (3u * k >= width) break;
    step.step_size = k == 0u ? p.step_sh_dc : p.step_sh_rest;
    SPLAT_UNROLL for (uint32_t c = 0; c < 3u; ++c)
      adam_element(p, step, key, sh, m_sh, v_sh, e0 + 3u * k + c,
                   k < p.sh_k_count ? sh_factor_grad_at(g.sh, k, c) : 0.f);
  }
}
