// Exposure compensation: a per-view affine colour correction out = A x + b of
// the rendered image, before the loss (docs/training_modes.md, "Exposure
// compensation"). A view's 12 parameters are the 3x4 matrix [A | b],
// row-major; the identity [I | 0] leaves the render as it is.
#pragma once
#include "compat.h"
#include "sh.h"  // SH_C0

#define SPLAT_EXPOSURE_FLOATS 12

struct ExposureAffine {
  float e[SPLAT_EXPOSURE_FLOATS];
};

// A x + b.
SPLAT_FUNC vec3 exposure_apply(ExposureAffine a, vec3 x) {
  return make_vec3(a.e[0] * x.x + a.e[1] * x.y + a.e[2] * x.z + a.e[3],
                   a.e[4] * x.x + a.e[5] * x.y + a.e[6] * x.z + a.e[7],
                   a.e[8] * x.x + a.e[9] * x.y + a.e[10] * x.z + a.e[11]);
}

// The identity's value at float k of [A | b]: 1 on A's diagonal (k = 0, 5, 10).
SPLAT_FUNC float exposure_identity(uint32_t k) { return k % 5u == 0u ? 1.f : 0.f; }

// d loss / d x = A^T d, d = d loss / d out.
SPLAT_FUNC vec3 exposure_image_grad(ExposureAffine a, vec3 d) {
  return make_vec3(a.e[0] * d.x + a.e[4] * d.y + a.e[8] * d.z,
                   a.e[1] * d.x + a.e[5] * d.y + a.e[9] * d.z,
                   a.e[2] * d.x + a.e[6] * d.y + a.e[10] * d.z);
}

// acc[12] += one pixel's d loss / d [A | b]: d_i x_j and d_i.
SPLAT_FUNC void exposure_grad_accumulate(SPLAT_THREAD float* acc, vec3 x, vec3 d) {
  const float di[3] = {d.x, d.y, d.z};
  for (int i = 0; i < 3; ++i) {
    acc[4 * i] += di[i] * x.x;
    acc[4 * i + 1] += di[i] * x.y;
    acc[4 * i + 2] += di[i] * x.z;
    acc[4 * i + 3] += di[i];
  }
}

// Centring without moving the renders (exposure_center; docs/training_modes.md,
// "Centring"). With M = [Abar | bbar] the corrections' mean, every correction
// becomes C M^-1, so that their mean is the identity, and every colour the scene
// renders becomes M x (each Gaussian's SH mapped, exposure_map_sh): C M^-1 M x =
// C x, so a view's corrected render stays as it was wherever the scene is opaque
// and no colour is clamped at 0.
#define SPLAT_EXPOSURE_GAUGE_FLOATS 21
struct ExposureGauge {
  float m[SPLAT_EXPOSURE_FLOATS];  // M = [Abar | bbar], row-major
  float inv[9];                    // Abar^-1, row-major
};

// Abar^-1 by cofactors (Abar is near the identity: the corrections start there
// and the centring keeps their mean there).
SPLAT_FUNC ExposureGauge exposure_gauge(SPLAT_THREAD const float* mean) {
  ExposureGauge g;
  for (uint32_t k = 0; k < SPLAT_EXPOSURE_FLOATS; ++k) g.m[k] = mean[k];
  const float a = mean[0], b = mean[1], c = mean[2], d = mean[4], e = mean[5], f = mean[6], p = mean[8],
              q = mean[9], r = mean[10];
  const float c00 = e * r - f * q, c01 = f * p - d * r, c02 = d * q - e * p;
  const float inv_det = 1.f / (a * c00 + b * c01 + c * c02);
  g.inv[0] = c00 * inv_det;
  g.inv[1] = (c * q - b * r) * inv_det;
  g.inv[2] = (b * f - c * e) * inv_det;
  g.inv[3] = c01 * inv_det;
  g.inv[4] = (a * r - c * p) * inv_det;
  g.inv[5] = (c * d - a * f) * inv_det;
  g.inv[6] = c02 * inv_det;
  g.inv[7] = (b * p - a * q) * inv_det;
  g.inv[8] = (a * e - b * d) * inv_det;
  return g;
}

// C M^-1: [A Abar^-1 | b - A Abar^-1 bbar].
SPLAT_FUNC ExposureAffine exposure_recentre(ExposureAffine x, SPLAT_THREAD const ExposureGauge& g) {
  ExposureAffine out;
  for (uint32_t i = 0; i < 3u; ++i) {
    float bias = x.e[4 * i + 3];
    for (uint32_t j = 0; j < 3u; ++j) {
      const float v = x.e[4 * i] * g.inv[j] + x.e[4 * i + 1] * g.inv[3 + j] + x.e[4 * i + 2] * g.inv[6 + j];
      out.e[4 * i + j] = v;
      bias -= v * g.m[4 * j + 3];
    }
    out.e[4 * i + 3] = bias;
  }
  return out;
}

// One Gaussian's SH (coeffs x 3, [k][channel]) so that its colour x = SH + 0.5
// becomes M x: every coefficient Abar c, and the DC term also (Abar 0.5 + bbar -
// 0.5) / SH_C0 (the basis' constant), the 0.5 being outside the SH.
SPLAT_FUNC void exposure_map_sh(SPLAT_THREAD const ExposureGauge& g, SPLAT_DEVICE_MEM float* sh, uint32_t coeffs) {
  for (uint32_t k = 0; k < coeffs; ++k) {
    const float x0 = sh[3 * k], x1 = sh[3 * k + 1], x2 = sh[3 * k + 2];
    for (uint32_t i = 0; i < 3u; ++i) {
      float v = g.m[4 * i] * x0 + g.m[4 * i + 1] * x1 + g.m[4 * i + 2] * x2;
      if (k == 0u) v += (0.5f * (g.m[4 * i] + g.m[4 * i + 1] + g.m[4 * i + 2]) + g.m[4 * i + 3] - 0.5f) / SH_C0;
      sh[3 * k + i] = v;
    }
  }
}
