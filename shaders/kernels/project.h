// Per-Gaussian projection + spherical-harmonics colour, and its backward.
// The math is shaders/common (projection.h, sh.h), shared with the CPU backend.
#pragma once
#include "adam.h"     // accumulate_view_in
#include "densify.h"  // densify_stats_add
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

// Record r's ShColorJacobian rows as three 16-byte quads (x, y, z, 0) from
// color_jac[SPLAT_COLOR_JAC_FLOATS r] (the clamped channels go in the record:
// SplatRecord::color_clamped). Quads, not 9 packed floats: the forward's nine
// scalar stores 36 bytes apart cost it 0.035 ms at 1M Gaussians where the
// quads cost 0.026 (H100). Written and read only at SH degree 1 and up: at 0
// the colour does not depend on the view.
SPLAT_FUNC void store_color_jacobian(SPLAT_DEVICE_MEM float* color_jac, uint32_t r,
                                     SPLAT_THREAD const ShColorJacobian& jac) {
  SPLAT_UNROLL for (uint32_t c = 0; c < 3u; ++c)
    store_float4(color_jac, SPLAT_COLOR_JAC_FLOATS / 4 * r + c, jac.row[c].x, jac.row[c].y, jac.row[c].z, 0.f);
}

SPLAT_FUNC ShColorJacobian load_color_jacobian(SPLAT_CONST_MEM const RasterParams& rp,
                                               SPLAT_DEVICE_MEM const float* color_jac,
                                               SPLAT_DEVICE_MEM const SplatRecord& record, uint32_t r) {
  ShColorJacobian jac;
  jac.clamped = (uint32_t)record.color_clamped;
  jac.row[0] = jac.row[1] = jac.row[2] = make_vec3(0.f, 0.f, 0.f);
  if (rp.sh_degree == 0u) return jac;
  SPLAT_UNROLL for (uint32_t c = 0; c < 3u; ++c) {
    const vec4 q = load_float4(color_jac, SPLAT_COLOR_JAC_FLOATS / 4 * r + c);
    jac.row[c] = make_vec3(q.x, q.y, q.z);
  }
  return jac;
}

// Gaussian i (its parameters at index i) projected into `cam` as record r
// (its outputs at index r), whose id among every view's records is depth_id.
SPLAT_FUNC void project_gaussian_record(SPLAT_CONST_MEM const CameraParams& cam, SPLAT_CONST_MEM const RasterParams& rp,
                                        uint32_t i, uint32_t r, uint32_t depth_id, SPLAT_DEVICE_MEM const float* means,
                                        SPLAT_DEVICE_MEM const float* log_scales, SPLAT_DEVICE_MEM const float* quats,
                                        SPLAT_DEVICE_MEM const float* opacity_logits, SPLAT_DEVICE_MEM const float* sh,
                                        SPLAT_DEVICE_MEM SplatRecord* records, SPLAT_DEVICE_MEM int32_t* radius,
                                        SPLAT_DEVICE_MEM CoverRecord* covers, SPLAT_DEVICE_MEM uint32_t* pair_count,
                                        SPLAT_DEVICE_MEM uint32_t* depth_keys, SPLAT_DEVICE_MEM uint32_t* depth_ids,
                                        SPLAT_DEVICE_MEM float* color_jac) {
  // The depth order of the Gaussians (tile_bin.h): depth > 0, so its bits
  // sort as the float; Gaussians without pairs go last.
  depth_ids[r] = depth_id;
  depth_keys[r] = 0xffffffffu;
  vec3 mean = load_vec3(means, i);
  ProjectedGaussian pg;
  bool visible = project_gaussian(cam, mean, load_vec3(log_scales, i), quats[4 * i], quats[4 * i + 1],
                                  quats[4 * i + 2], quats[4 * i + 3], rp.antialiased != 0u, pg);
  radius[r] = pg.radius;
  if (!visible) {
    pair_count[r] = 0u;
    return;
  }
  const float sigmoid_opacity = sp_sigmoid(opacity_logits[i]);
  float opacity = sigmoid_opacity * pg.opacity_scale;
  TileCover tc = tile_cover(pg.mean2d, pg.conic, opacity, pg.tile_min_x, pg.tile_min_y, pg.tile_max_x, pg.tile_max_y);
  pair_count[r] = tile_cover_count(tc);
  store_cover_record(covers, r, pg.mean2d, pg.conic, opacity, pg.tile_min_x, pg.tile_min_y, pg.tile_max_x,
                     pg.tile_max_y);
  depth_keys[r] = sp_float_bits(pg.depth);
  const int k_count = sh_num_coeffs((int)rp.sh_degree);
  ShRow coeffs = load_sh_row(sh, rp.sh_stride, i, k_count);
  ShColorJacobian jac;
  vec3 color = sh_color_jacobian((int)rp.sh_degree, mean, camera_center(cam), coeffs, jac);
  // The record's three quads (rasterize_forward.h reads it so): (mean2d,
  // conic.xy), (conic.z, opacity, colour.rg), (colour.b, depth, sigmoid
  // opacity, clamped channels).
  SPLAT_DEVICE_MEM float* rf = (SPLAT_DEVICE_MEM float*)records;
  store_float4(rf, 3u * r, pg.mean2d.x, pg.mean2d.y, pg.conic.x, pg.conic.y);
  store_float4(rf, 3u * r + 1u, pg.conic.z, opacity, color.x, color.y);
  store_float4(rf, 3u * r + 2u, color.z, pg.depth, sigmoid_opacity, (float)jac.clamped);
  if (rp.sh_degree > 0u) store_color_jacobian(color_jac, r, jac);
}

// One view: a thread a Gaussian, its outputs at offset arrays (the view's
// records), its depth ids from rp.record_base.
SPLAT_FUNC void project_forward_body(SimtThread t, SPLAT_CONST_MEM const CameraParams& cam,
                                     SPLAT_CONST_MEM const RasterParams& rp, SPLAT_DEVICE_MEM const float* means,
                                     SPLAT_DEVICE_MEM const float* log_scales, SPLAT_DEVICE_MEM const float* quats,
                                     SPLAT_DEVICE_MEM const float* opacity_logits, SPLAT_DEVICE_MEM const float* sh,
                                     SPLAT_DEVICE_MEM SplatRecord* records, SPLAT_DEVICE_MEM int32_t* radius,
                                     SPLAT_DEVICE_MEM CoverRecord* covers, SPLAT_DEVICE_MEM uint32_t* pair_count,
                                     SPLAT_DEVICE_MEM uint32_t* depth_keys, SPLAT_DEVICE_MEM uint32_t* depth_ids,
                                     SPLAT_DEVICE_MEM float* color_jac) {
  uint32_t i = global_index(t);
  if (i >= rp.num_gaussians) return;
  project_gaussian_record(cam, rp, i, i, rp.record_base + i, means, log_scales, quats, opacity_logits, sh, records,
                          radius, covers, pair_count, depth_keys, depth_ids, color_jac);
}

// Views rasterized together: views first .. first + count - 1 in one launch,
// a thread a (view, Gaussian), view-major, writing record k n + i of view k
// (the arrays of every view's records), as a launch a view at its offset did.
SPLAT_FUNC void project_forward_views_body(SimtThread t, SPLAT_CONST_MEM const ViewsParams& b,
                                           SPLAT_CONST_MEM const RasterParams& rp,
                                           SPLAT_DEVICE_MEM const float* means,
                                           SPLAT_DEVICE_MEM const float* log_scales,
                                           SPLAT_DEVICE_MEM const float* quats,
                                           SPLAT_DEVICE_MEM const float* opacity_logits,
                                           SPLAT_DEVICE_MEM const float* sh, SPLAT_DEVICE_MEM SplatRecord* records,
                                           SPLAT_DEVICE_MEM int32_t* radius, SPLAT_DEVICE_MEM CoverRecord* covers,
                                           SPLAT_DEVICE_MEM uint32_t* pair_count,
                                           SPLAT_DEVICE_MEM uint32_t* depth_keys,
                                           SPLAT_DEVICE_MEM uint32_t* depth_ids,
                                           SPLAT_DEVICE_MEM float* color_jac) {
  const uint32_t n = rp.num_gaussians, g = global_index(t);
  if (g >= b.count * n) return;
  const uint32_t c = g / n, i = g - c * n, r = (b.first + c) * n + i;
  project_gaussian_record(b.cams[c], rp, i, r, r, means, log_scales, quats, opacity_logits, sh, records, radius, covers,
                          pair_count, depth_keys, depth_ids, color_jac);
}

#define SPLAT_SH_FACTOR_QUADS (SPLAT_SH_FACTOR_FLOATS / 4)
#define SPLAT_PARAM_GRADS 11  // a Gaussian's gradients of means, log scales, quats, opacity logit: 3 + 3 + 4 + 1

// A Gaussian's blend gradients (dL/d mean2d, conic, opacity, colour) summed
// over its pairs: accum[9 r ..] of its record r (atomics), or, deterministic,
// its pairs' partial gradients pair_grad[9 e ..] over its emission range
// (pair_ranges, tile_bin.h), in order.
SPLAT_FUNC void load_blend_grads(SPLAT_DEVICE_MEM const float* accum, SPLAT_DEVICE_MEM const uint32_t* pair_ranges,
                                 uint64_t r, SPLAT_THREAD float* s) {
  for (int c = 0; c < SPLAT_PAIR_GRAD; ++c) s[c] = 0.f;
  if (SPLAT_SPEC_DETERMINISTIC) {
    // Per pair (emission index e < 2^31): 9 e in 64 bits.
    for (uint32_t e = pair_ranges[2 * r]; e < pair_ranges[2 * r] + pair_ranges[2 * r + 1]; ++e)
      for (int c = 0; c < SPLAT_PAIR_GRAD; ++c) s[c] += accum[(uint64_t)SPLAT_PAIR_GRAD * e + c];
  } else {
    for (int c = 0; c < SPLAT_PAIR_GRAD; ++c) s[c] = accum[SPLAT_PAIR_GRAD * r + c];
  }
}

// The SH gradient's factors of one view at factor slot f (sh.h), in 16-byte
// quads: b in quads 0..3, then (dc, 0). The host keeps every view's slots'
// floats below 2^32.
SPLAT_FUNC void store_sh_factors(SPLAT_DEVICE_MEM float* sh_factors, uint32_t f, SPLAT_THREAD const ShGradFactors& sf) {
  SPLAT_UNROLL for (uint32_t q = 0; q < SPLAT_MAX_SH_COEFFS / 4; ++q)
    store_float4(sh_factors, SPLAT_SH_FACTOR_QUADS * f + q, sf.b[4 * q], sf.b[4 * q + 1], sf.b[4 * q + 2],
                 sf.b[4 * q + 3]);
  store_float4(sh_factors, SPLAT_SH_FACTOR_QUADS * f + SPLAT_MAX_SH_COEFFS / 4, sf.dc.x, sf.dc.y, sf.dc.z, 0.f);
}

SPLAT_FUNC void zero_sh_factors(SPLAT_DEVICE_MEM float* sh_factors, uint32_t f) {
  for (uint32_t q = 0; q < SPLAT_SH_FACTOR_QUADS; ++q)
    store_float4(sh_factors, SPLAT_SH_FACTOR_QUADS * f + q, 0.f, 0.f, 0.f, 0.f);
}

// What one view's backward needs of Gaussian i that no view changes (the
// colour's part is each view's record's: its ShColorJacobian).
struct GaussianInputs {
  vec3 mean, log_scale;
  float quat[4];
};

SPLAT_FUNC GaussianInputs load_gaussian_inputs(SPLAT_DEVICE_MEM const float* means,
                                               SPLAT_DEVICE_MEM const float* log_scales,
                                               SPLAT_DEVICE_MEM const float* quats, uint32_t i) {
  GaussianInputs g;
  g.mean = load_vec3(means, i);
  g.log_scale = load_vec3(log_scales, i);
  for (uint32_t c = 0; c < 4u; ++c) g.quat[c] = quats[4 * i + c];
  return g;
}

// One view's gradients of a visible Gaussian (its record r) from its blend
// gradients s: the SH gradient as its factors sf, the others into g (means,
// log scales, quats, opacity logit).
SPLAT_FUNC void view_param_grads(SPLAT_CONST_MEM const CameraParams& cam, SPLAT_CONST_MEM const RasterParams& rp,
                                 SPLAT_THREAD const GaussianInputs& in, SPLAT_DEVICE_MEM const SplatRecord& record,
                                 SPLAT_DEVICE_MEM const float* color_jac, uint32_t r, SPLAT_THREAD const float* s,
                                 SPLAT_THREAD ShGradFactors& sf, SPLAT_THREAD float* g) {
  const float opacity = record.opacity, sigmoid_opacity = record.sigmoid_opacity;
  const ShColorJacobian jac = load_color_jacobian(rp, color_jac, record, r);
  vec3 d_mean_color =
      sh_color_backward_jacobian((int)rp.sh_degree, in.mean, camera_center(cam), jac, make_vec3(s[6], s[7], s[8]), sf);
  ProjectionGrads pg = project_gaussian_backward(cam, in.mean, in.log_scale, in.quat[0], in.quat[1], in.quat[2],
                                                 in.quat[3], make_vec2(s[0], s[1]), make_vec3(s[2], s[3], s[4]),
                                                 rp.antialiased != 0u ? s[5] * sigmoid_opacity : 0.f);
  const vec3 d_mean = pg.mean + d_mean_color;
  g[0] = d_mean.x;
  g[1] = d_mean.y;
  g[2] = d_mean.z;
  g[3] = pg.log_scale.x;
  g[4] = pg.log_scale.y;
  g[5] = pg.log_scale.z;
  for (uint32_t c = 0; c < 4u; ++c) g[6 + c] = pg.quat[c];
  // opacity = k sigmoid(logit): d/dlogit = k sigmoid (1 - sigmoid) = opacity (1 - sigmoid).
  g[10] = s[5] * opacity * (1.f - sigmoid_opacity);
}

SPLAT_FUNC void store_param_grads(SPLAT_DEVICE_MEM float* d_means, SPLAT_DEVICE_MEM float* d_log_scales,
                                  SPLAT_DEVICE_MEM float* d_quats, SPLAT_DEVICE_MEM float* d_opacity_logits,
                                  uint32_t i, SPLAT_THREAD const float* g) {
  store_vec3(d_means, i, make_vec3(g[0], g[1], g[2]));
  store_vec3(d_log_scales, i, make_vec3(g[3], g[4], g[5]));
  for (uint32_t c = 0; c < 4u; ++c) d_quats[4 * i + c] = g[6 + c];
  d_opacity_logits[i] = g[10];
}

// Gradients of every parameter of Gaussian i from its accumulated blend
// gradients (load_blend_grads). The SH gradient leaves as its factors,
// sh_factors[SPLAT_SH_FACTOR_FLOATS i ..] (sh.h), in 16-byte quads.
SPLAT_FUNC void project_backward_body(SimtThread t, SPLAT_CONST_MEM const CameraParams& cam,
                                      SPLAT_CONST_MEM const RasterParams& rp, SPLAT_DEVICE_MEM const float* means,
                                      SPLAT_DEVICE_MEM const float* log_scales, SPLAT_DEVICE_MEM const float* quats,
                                      SPLAT_DEVICE_MEM const float* color_jac,
                                      SPLAT_DEVICE_MEM const SplatRecord* records,
                                      SPLAT_DEVICE_MEM const int32_t* radius, SPLAT_DEVICE_MEM const float* accum,
                                      SPLAT_DEVICE_MEM const uint32_t* pair_ranges, SPLAT_DEVICE_MEM float* d_means,
                                      SPLAT_DEVICE_MEM float* d_log_scales, SPLAT_DEVICE_MEM float* d_quats,
                                      SPLAT_DEVICE_MEM float* d_opacity_logits, SPLAT_DEVICE_MEM float* sh_factors,
                                      SPLAT_DEVICE_MEM float* d_means2d) {
  uint32_t i = global_index(t);
  if (i >= rp.num_gaussians) return;
  float g[SPLAT_PARAM_GRADS];
  for (int c = 0; c < SPLAT_PARAM_GRADS; ++c) g[c] = 0.f;
  if (radius[i] <= 0) {  // unseen, or a skipped step's -1 (tile_bin.h)
    zero_sh_factors(sh_factors, i);
    store_param_grads(d_means, d_log_scales, d_quats, d_opacity_logits, i, g);
    d_means2d[2 * i] = 0.f;
    d_means2d[2 * i + 1] = 0.f;
    return;
  }
  float s[SPLAT_PAIR_GRAD];
  load_blend_grads(accum, pair_ranges, i, s);
  const GaussianInputs in = load_gaussian_inputs(means, log_scales, quats, i);
  ShGradFactors sf;
  view_param_grads(cam, rp, in, records[i], color_jac, i, s, sf, g);
  store_sh_factors(sh_factors, i, sf);
  store_param_grads(d_means, d_log_scales, d_quats, d_opacity_logits, i, g);
  d_means2d[2 * i] = s[0];
  d_means2d[2 * i + 1] = s[1];
}

// Views rasterized together (docs/architecture.md, "Several views a step"):
// the projection backward of views first .. first + count - 1 of a batch of
// b.views in one launch, a thread a Gaussian walking them in order. It does
// what a launch a view of project_backward_body, then grad_accumulate over the
// four parameter arrays and (views in track_mask) grad_stats did, with the same
// float operations in the same order, so the same bits: each view's SH factors
// into its set, the parameter gradients summed in registers as
// accumulate_view sums them (carried between launches in `sums`; the mean
// into the gradients at the batch's last view), the densification statistics
// added view by view, and the last view's 2D gradient left in d_means2d. The
// Gaussian's parameters are read once, not once a view.
SPLAT_FUNC void project_backward_views_body(
    SimtThread t, SPLAT_CONST_MEM const ViewsParams& b, SPLAT_CONST_MEM const RasterParams& rp,
    SPLAT_DEVICE_MEM const float* means, SPLAT_DEVICE_MEM const float* log_scales, SPLAT_DEVICE_MEM const float* quats,
    SPLAT_DEVICE_MEM const float* color_jac, SPLAT_DEVICE_MEM const SplatRecord* records,
    SPLAT_DEVICE_MEM const int32_t* radius, SPLAT_DEVICE_MEM const float* accum,
    SPLAT_DEVICE_MEM const uint32_t* pair_ranges, SPLAT_DEVICE_MEM float* d_means, SPLAT_DEVICE_MEM float* d_log_scales,
    SPLAT_DEVICE_MEM float* d_quats, SPLAT_DEVICE_MEM float* d_opacity_logits, SPLAT_DEVICE_MEM float* sum_means,
    SPLAT_DEVICE_MEM float* sum_log_scales, SPLAT_DEVICE_MEM float* sum_quats,
    SPLAT_DEVICE_MEM float* sum_opacity_logits, SPLAT_DEVICE_MEM float* sh_factors,
    SPLAT_DEVICE_MEM float* d_means2d, SPLAT_DEVICE_MEM float* grad_accum, SPLAT_DEVICE_MEM float* grad_count,
    SPLAT_DEVICE_MEM float* max_radii) {
  const uint32_t i = global_index(t), n = rp.num_gaussians;
  if (i >= n) return;
  // An overflowing forward set every record's radius to -1: as a launch a view
  // then, gradients stored as zeros, sums and statistics left alone (the
  // batch runs again from its first view).
  const bool skipped = step_skipped(radius);
  const bool last = b.first + b.count == b.views;
  const GaussianInputs in = load_gaussian_inputs(means, log_scales, quats, i);
  float sum[SPLAT_PARAM_GRADS];
  for (int c = 0; c < SPLAT_PARAM_GRADS; ++c) sum[c] = 0.f;
  if (b.first > 0u && !skipped) {
    for (uint32_t c = 0; c < 3u; ++c) {
      sum[c] = sum_means[3 * i + c];
      sum[3 + c] = sum_log_scales[3 * i + c];
    }
    for (uint32_t c = 0; c < 4u; ++c) sum[6 + c] = sum_quats[4 * i + c];
    sum[10] = sum_opacity_logits[i];
  }
  const bool tracks = b.track_mask != 0u && !skipped;
  float stat_grad = 0.f, stat_count = 0.f, stat_radius = 0.f;
  if (tracks) {
    stat_grad = grad_accum[i];
    stat_count = grad_count[i];
    stat_radius = max_radii[i];
  }
  float s0 = 0.f, s1 = 0.f;  // the view's 2D gradient
  for (uint32_t c = 0; c < b.count; ++c) {
    const uint32_t k = b.first + c;
    const uint32_t r = k * n + i;  // the view's record of Gaussian i (20 n views < 2^32: the host's bound)
    float g[SPLAT_PARAM_GRADS];
    for (int e = 0; e < SPLAT_PARAM_GRADS; ++e) g[e] = 0.f;
    const int32_t rad = radius[r];
    s0 = 0.f;
    s1 = 0.f;
    if (rad <= 0) {
      zero_sh_factors(sh_factors, r);
    } else {
      float s[SPLAT_PAIR_GRAD];
      load_blend_grads(accum, pair_ranges, r, s);
      ShGradFactors sf;
      view_param_grads(b.cams[c], rp, in, records[r], color_jac, r, s, sf, g);
      store_sh_factors(sh_factors, r, sf);
      s0 = s[0];
      s1 = s[1];
    }
    if (!skipped)
      for (int e = 0; e < SPLAT_PARAM_GRADS; ++e) sum[e] = accumulate_view_in(k, b.views, g[e], sum[e]);
    if (tracks && (b.track_mask >> c & 1u) != 0u && rad > 0)
      densify_stats_add(s0, s1, b.cams[c].width, b.cams[c].height, rad, stat_grad, stat_count, stat_radius);
  }
  if (skipped || last) {  // skipped: `sum` is still its zeros
    store_param_grads(d_means, d_log_scales, d_quats, d_opacity_logits, i, sum);
    d_means2d[2 * i] = s0;
    d_means2d[2 * i + 1] = s1;
  } else {
    store_param_grads(sum_means, sum_log_scales, sum_quats, sum_opacity_logits, i, sum);
  }
  if (tracks) {
    grad_accum[i] = stat_grad;
    grad_count[i] = stat_count;
    max_radii[i] = stat_radius;
  }
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
