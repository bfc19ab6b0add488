// Per-Gaussian pieces of densification shared by every backend: the
// gradient statistic, the classification, and the split children.
#pragma once
#include "projection.h"
#include "random.h"

#define DENSIFY_KEEP 0u
#define DENSIFY_CLONE 1u
#define DENSIFY_SPLIT 2u

// The statistic 3DGS thresholds: the norm of the 2D mean gradient in NDC
// units, i.e. the pixel-space gradient scaled by half the image size.
SPLAT_FUNC float ndc_grad_norm(float d_mean2d_x, float d_mean2d_y, uint32_t width, uint32_t height) {
  float gx = d_mean2d_x * 0.5f * (float)width;
  float gy = d_mean2d_y * 0.5f * (float)height;
  return sp_sqrt(gx * gx + gy * gy);
}

// One view's statistics of a Gaussian it saw (radius r > 0) added to the
// Gaussian's running ones: the NDC norm of its 2D mean gradient, one more
// visible view, the largest screen radius. Every backend's statistics pass
// and the views-together projection backward add them so.
SPLAT_FUNC void densify_stats_add(float d_mean2d_x, float d_mean2d_y, uint32_t width, uint32_t height, int32_t r,
                                  SPLAT_THREAD float& grad, SPLAT_THREAD float& count, SPLAT_THREAD float& max_radius) {
  grad += ndc_grad_norm(d_mean2d_x, d_mean2d_y, width, height);
  count += 1.f;
  max_radius = sp_max(max_radius, (float)r);
}

// The growth cap after densification (train.cap_scale_growth = g): a
// Gaussian's ceiling is its largest log scale when densification stops plus
// log g, and afterwards no axis of it grows past that. Every backend records
// and applies it so.
SPLAT_FUNC float scale_ceiling(float s0, float s1, float s2, float log_growth) {
  return sp_max(s0, sp_max(s1, s2)) + log_growth;
}
SPLAT_FUNC float capped_log_scale(float s, float ceiling) { return sp_min(s, ceiling); }

SPLAT_FUNC uint32_t densify_classify(float grad_accum, float grad_count, float max_log_scale, float threshold,
                                     float clone_max_scale) {
  float mean_grad = grad_count > 0.f ? grad_accum / grad_count : 0.f;
  if (!(mean_grad >= threshold)) return DENSIFY_KEEP;
  return sp_exp(max_log_scale) <= clone_max_scale ? DENSIFY_CLONE : DENSIFY_SPLIT;
}

// Mean of split child `child` of Gaussian `index`: the parent mean plus
// R (s * n) with n ~ N(0, I) in the parent's frame.
SPLAT_FUNC vec3 split_child_mean(vec3 mean, vec3 log_scale, float qw, float qx, float qy, float qz, uint32_t seed,
                                 uint32_t step, uint32_t index, uint32_t child) {
  float qn = sp_sqrt(qw * qw + qx * qx + qy * qy + qz * qz);
  mat3 rot = quat_to_rotation(qw / qn, qx / qn, qy / qn, qz / qn);
  float n[3];
  for (uint32_t k = 0; k < 3; ++k)
    n[k] = random_normal(random_key(seed, step, index, 6u * child + 2u * k),
                         random_key(seed, step, index, 6u * child + 2u * k + 1u));
  vec3 local = make_vec3(sp_exp(log_scale.x) * n[0], sp_exp(log_scale.y) * n[1], sp_exp(log_scale.z) * n[2]);
  return mean + mat3_apply(rot, local);
}
