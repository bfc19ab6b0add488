// Per-Gaussian projection + spherical-harmonics colour, and its backward.
// The math is shaders/common (projection.h, sh.h), shared with the CPU backend.
#pragma once
#include "adam.h"  // accumulate_view_value
#include "projection.h"
#include "sh.h"
#include "simt_util.h"
#include "cover_record.h"
#include "tile_cover.h"

#ifndef SPLAT_SPEC_DETERMINISTIC
#define SPLAT_SPEC_DETERMINISTIC 0
#endif

// Gaussian i's first k_count SH coefficients (rows of 3 stride floats). Where
// rows are whole 16-byte quads (stride a multiple of 4, as the trainer's 16)
// they are read as quads: 12 vector loads where 48 scalar ones, 192 bytes
// apart across a SIMD group, kept both projections L1-bound. Elements past
// 3 k_count may hold the row's other coefficients; the colour never reads them.
SPLAT_FUNC ShRow load_sh_row(SPLAT_DEVICE_MEM const float* sh, uint32_t stride, uint32_t i, int k_count) {
  if (stride % 4u != 0u) return sh_row(sh + 3u * stride * i, k_count);
  ShRow row;
  const uint32_t first = 3u * stride / 4u * i, used = 3u * (uint32_t)k_count;
  SPLAT_UNROLL for (uint32_t q = 0; q < 3u * SPLAT_MAX_SH_COEFFS / 4u; ++q) {
    vec4 v = make_vec4(0.f, 0.f, 0.f, 0.f);
    if (4u * q < used) v = load_float4(sh, first + q);
    row.c[4u * q] = v.x;
    row.c[4u * q + 1u] = v.y;
    row.c[4u * q + 2u] = v.z;
    row.c[4u * q + 3u] = v.w;
  }
  return row;
}

SPLAT_FUNC void project_forward_body(SimtThread t, SPLAT_CONST_MEM const CameraParams& cam,
                                     SPLAT_CONST_MEM const RasterParams& rp, SPLAT_DEVICE_MEM const float* means,
                                     SPLAT_DEVICE_MEM const float* log_scales, SPLAT_DEVICE_MEM const float* quats,
                                     SPLAT_DEVICE_MEM const float* opacity_logits, SPLAT_DEVICE_MEM const float* sh,
                                     SPLAT_DEVICE_MEM SplatRecord* records, SPLAT_DEVICE_MEM int32_t* radius,
                                     SPLAT_DEVICE_MEM CoverRecord* covers, SPLAT_DEVICE_MEM uint32_t* pair_count,
                                     SPLAT_DEVICE_MEM uint32_t* depth_keys, SPLAT_DEVICE_MEM uint32_t* depth_ids) {
  uint32_t i = global_index(t);
  if (i >= rp.num_gaussians) return;
  // The depth order of the Gaussians (tile_bin.h): depth > 0, so its bits
  // sort as the float; Gaussians without pairs go last.
  depth_ids[i] = rp.record_base + i;  // the record's id among every view's
  depth_keys[i] = 0xffffffffu;
  vec3 mean = load_vec3(means, i);
  ProjectedGaussian pg;
  bool visible = project_gaussian(cam, mean, load_vec3(log_scales, i), quats[4 * i], quats[4 * i + 1],
                                  quats[4 * i + 2], quats[4 * i + 3], rp.antialiased != 0u, pg);
  radius[i] = pg.radius;
  if (!visible) {
    pair_count[i] = 0u;
    return;
  }
  const float sigmoid_opacity = sp_sigmoid(opacity_logits[i]);
  float opacity = sigmoid_opacity * pg.opacity_scale;
  TileCover tc = tile_cover(pg.mean2d, pg.conic, opacity, pg.tile_min_x, pg.tile_min_y, pg.tile_max_x, pg.tile_max_y);
  pair_count[i] = tile_cover_count(tc);
  store_cover_record(covers, i, pg.mean2d, pg.conic, opacity, pg.tile_min_x, pg.tile_min_y, pg.tile_max_x,
                     pg.tile_max_y);
  depth_keys[i] = sp_float_bits(pg.depth);
  const int k_count = sh_num_coeffs((int)rp.sh_degree);
  ShRow coeffs = load_sh_row(sh, rp.sh_stride, i, k_count);
  vec3 color = sh_color((int)rp.sh_degree, mean, camera_center(cam), coeffs);
  // The record's three quads (rasterize_forward.h reads it so): (mean2d,
  // conic.xy), (conic.z, opacity, colour.rg), (colour.b, depth, sigmoid
  // opacity, pad).
  SPLAT_DEVICE_MEM float* r = (SPLAT_DEVICE_MEM float*)records;
  store_float4(r, 3u * i, pg.mean2d.x, pg.mean2d.y, pg.conic.x, pg.conic.y);
  store_float4(r, 3u * i + 1u, pg.conic.z, opacity, color.x, color.y);
  store_float4(r, 3u * i + 2u, color.z, pg.depth, sigmoid_opacity, 0.f);
}

// The four parameter gradient arrays a projection backward writes (means,
// log scales, quats, opacity logits) or, for views rasterized together, their
// running sums over the batch's views.
struct SplatParamGrads {
  SPLAT_DEVICE_MEM float* means;
  SPLAT_DEVICE_MEM float* log_scales;
  SPLAT_DEVICE_MEM float* quats;
  SPLAT_DEVICE_MEM float* opacity_logits;
};
#define SPLAT_PARAM_GRADS 11  // 3 + 3 + 4 + 1 floats a Gaussian

// View rp.grad_view's gradients of Gaussian i, g (means, log scales, quats,
// opacity), summed as grad_accumulate sums each array (accumulate_view_value):
// the same floats in the same order, so the same bits as storing them and
// launching the accumulation.
SPLAT_FUNC void sum_param_grads(SPLAT_CONST_MEM const RasterParams& rp, SplatParamGrads grads, SplatParamGrads sums,
                                uint32_t i, SPLAT_THREAD const float* g) {
  for (uint32_t c = 0; c < 3u; ++c) {
    accumulate_view_value(rp.grad_view, rp.grad_views, g[c], grads.means[3 * i + c], sums.means[3 * i + c]);
    accumulate_view_value(rp.grad_view, rp.grad_views, g[3 + c], grads.log_scales[3 * i + c],
                          sums.log_scales[3 * i + c]);
  }
  for (uint32_t c = 0; c < 4u; ++c)
    accumulate_view_value(rp.grad_view, rp.grad_views, g[6 + c], grads.quats[4 * i + c], sums.quats[4 * i + c]);
  accumulate_view_value(rp.grad_view, rp.grad_views, g[10], grads.opacity_logits[i], sums.opacity_logits[i]);
}

// Gradients of every parameter of Gaussian i from its accumulated blend
// gradients: accum[9 i ..] (atomics), or, deterministic, the sum of its pairs'
// partial gradients pair_grad[9 e ..] over its emission range (pair_ranges,
// tile_bin.h), in order. The SH gradient leaves as its factors,
// sh_factors[SPLAT_SH_FACTOR_FLOATS i ..] (sh.h), in 16-byte quads.
#define SPLAT_SH_FACTOR_QUADS (SPLAT_SH_FACTOR_FLOATS / 4)
SPLAT_FUNC void project_backward_body(SimtThread t, SPLAT_CONST_MEM const CameraParams& cam,
                                      SPLAT_CONST_MEM const RasterParams& rp, SPLAT_DEVICE_MEM const float* means,
                                      SPLAT_DEVICE_MEM const float* log_scales, SPLAT_DEVICE_MEM const float* quats,
                                      SPLAT_DEVICE_MEM const float* sh, SPLAT_DEVICE_MEM const SplatRecord* records,
                                      SPLAT_DEVICE_MEM const int32_t* radius, SPLAT_DEVICE_MEM const float* accum,
                                      SPLAT_DEVICE_MEM const uint32_t* pair_ranges, SPLAT_DEVICE_MEM float* d_means,
                                      SPLAT_DEVICE_MEM float* d_log_scales, SPLAT_DEVICE_MEM float* d_quats,
                                      SPLAT_DEVICE_MEM float* d_opacity_logits, SPLAT_DEVICE_MEM float* sh_factors,
                                      SPLAT_DEVICE_MEM float* d_means2d, SplatParamGrads sums) {
  uint32_t i = global_index(t);
  if (i >= rp.num_gaussians) return;
  const SplatParamGrads grads = {d_means, d_log_scales, d_quats, d_opacity_logits};
  // A skipped step's gradients are stored (zeros) and its sums left alone, as
  // grad_accumulate leaves them: the batch runs again from its first view.
  const bool summed = rp.grad_views > 1u && !step_skipped(radius);
  if (radius[i] <= 0) {  // unseen, or a skipped step's -1 (tile_bin.h)
    for (uint32_t q = 0; q < SPLAT_SH_FACTOR_QUADS; ++q)
      store_float4(sh_factors, SPLAT_SH_FACTOR_QUADS * i + q, 0.f, 0.f, 0.f, 0.f);
    if (summed) {
      float zeros[SPLAT_PARAM_GRADS] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
      sum_param_grads(rp, grads, sums, i, zeros);
    } else {
      store_vec3(d_means, i, make_vec3(0.f, 0.f, 0.f));
      store_vec3(d_log_scales, i, make_vec3(0.f, 0.f, 0.f));
      for (uint32_t c = 0; c < 4u; ++c) d_quats[4 * i + c] = 0.f;
      d_opacity_logits[i] = 0.f;
    }
    d_means2d[2 * i] = 0.f;
    d_means2d[2 * i + 1] = 0.f;
    return;
  }
  float s[SPLAT_PAIR_GRAD];
  for (int c = 0; c < SPLAT_PAIR_GRAD; ++c) s[c] = 0.f;
  if (SPLAT_SPEC_DETERMINISTIC) {
    // Per pair (emission index e < 2^31): 9 e in 64 bits.
    for (uint32_t e = pair_ranges[2 * i]; e < pair_ranges[2 * i] + pair_ranges[2 * i + 1]; ++e)
      for (int c = 0; c < SPLAT_PAIR_GRAD; ++c) s[c] += accum[(uint64_t)SPLAT_PAIR_GRAD * e + c];
  } else {
    for (int c = 0; c < SPLAT_PAIR_GRAD; ++c) s[c] = accum[SPLAT_PAIR_GRAD * i + c];
  }
  vec3 mean = load_vec3(means, i);
  ShGradFactors f;
  ShRow coeffs = load_sh_row(sh, rp.sh_stride, i, sh_num_coeffs((int)rp.sh_degree));
  vec3 d_mean_color = sh_color_backward((int)rp.sh_degree, mean, camera_center(cam), coeffs,
                                        make_vec3(s[6], s[7], s[8]), f);
  // Vector stores: b in quads 0..3, then (dc, 0).
  SPLAT_UNROLL for (uint32_t q = 0; q < SPLAT_MAX_SH_COEFFS / 4; ++q)
    store_float4(sh_factors, SPLAT_SH_FACTOR_QUADS * i + q, f.b[4 * q], f.b[4 * q + 1], f.b[4 * q + 2],
                 f.b[4 * q + 3]);
  store_float4(sh_factors, SPLAT_SH_FACTOR_QUADS * i + SPLAT_MAX_SH_COEFFS / 4, f.dc.x, f.dc.y, f.dc.z, 0.f);
  ProjectionGrads pg = project_gaussian_backward(cam, mean, load_vec3(log_scales, i), quats[4 * i], quats[4 * i + 1],
                                                 quats[4 * i + 2], quats[4 * i + 3], make_vec2(s[0], s[1]),
                                                 make_vec3(s[2], s[3], s[4]),
                                                 rp.antialiased != 0u ? s[5] * records[i].sigmoid_opacity : 0.f);
  // opacity = k sigmoid(logit): d/dlogit = k sigmoid (1 - sigmoid) = opacity (1 - sigmoid).
  float o = records[i].opacity;
  const float d_opacity = s[5] * o * (1.f - records[i].sigmoid_opacity);
  const vec3 d_mean = pg.mean + d_mean_color;
  if (summed) {
    float g[SPLAT_PARAM_GRADS] = {d_mean.x,    d_mean.y,    d_mean.z,    pg.log_scale.x, pg.log_scale.y, pg.log_scale.z,
                                  pg.quat[0], pg.quat[1], pg.quat[2], pg.quat[3],      d_opacity};
    sum_param_grads(rp, grads, sums, i, g);
  } else {
    store_vec3(d_means, i, d_mean);
    store_vec3(d_log_scales, i, pg.log_scale);
    for (uint32_t c = 0; c < 4u; ++c) d_quats[4 * i + c] = pg.quat[c];
    d_opacity_logits[i] = d_opacity;
  }
  d_means2d[2 * i] = s[0];
  d_means2d[2 * i + 1] = s[1];
}

// The SH gradient d_sh[n, stride, 3] expanded from its factors (p.views sets:
// their mean), for callers that read the gradient itself: one thread per 16-byte quad of the flat array
// (d_sh 16-byte aligned), its four floats stored at once; the array's partial
// last quad float by float. A thread per float wrote the same values with four
// times the threads and threadgroups for one 4-byte store each.
SPLAT_FUNC void expand_sh_grad_body(SimtThread t, SPLAT_CONST_MEM const ShGradParams& p,
                                    SPLAT_DEVICE_MEM const float* sh_factors, SPLAT_DEVICE_MEM float* d_sh) {
  uint32_t q = global_index(t);
  uint32_t width = 3u * p.sh_stride;
  uint32_t total = p.count * width;
  uint32_t e = 4u * q;
  if (e >= total) return;
  uint32_t i = e / width, j = e - i * width;
  float v[4];
  SPLAT_UNROLL for (uint32_t c = 0; c < 4u; ++c) {
    v[c] = e + c < total ? sh_factor_grad_views(sh_factors + SPLAT_SH_FACTOR_FLOATS * i, SPLAT_SH_FACTOR_FLOATS * p.count,
                                                p.views, j / 3u, j % 3u, p.k_count)
                         : 0.f;
    if (++j == width) {
      j = 0;
      ++i;
    }
  }
  if (e + 4u <= total) {
    store_float4(d_sh, q, v[0], v[1], v[2], v[3]);
  } else {
    for (uint32_t c = 0; e + c < total; ++c) d_sh[e + c] = v[c];
  }
}
