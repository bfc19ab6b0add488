// Exposure compensation: a per-view affine colour correction out = A x + b of
// the rendered image, before the loss (docs/training_modes.md, "Exposure
// compensation"). A view's 12 parameters are the 3x4 matrix [A | b],
// row-major; the identity [I | 0] leaves the render as it is.
#pragma once
#include "compat.h"

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
