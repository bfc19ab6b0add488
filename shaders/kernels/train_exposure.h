// Exposure compensation on the device: the step's view's affine colour
// correction between the render and the loss (shaders/common/exposure.h).
// Dispatches:
//   exposure_apply     per pixel: corrected = A x + b
//   (the loss, on the corrected image: d_image is d loss / d corrected)
//   exposure_backward  per pixel: its d loss / d [A | b] and d_image = A^T
//                      d_image in place; each threadgroup sums its pixels'
//                      12 gradients in a fixed tree order into one partial
//   exposure_reduce    one threadgroup: the partials summed in a fixed order
//   exposure_adam      per float of every view's correction: Adam, with a
//                      zero gradient for the views the step did not train
//                      (or, all_views, every view's from grad_views: the
//                      data-parallel ranks' mean)
//   exposure_center    one threadgroup: the corrections' mean over the views
//                      held at the identity (they are defined only relative
//                      to one another: the Gaussians' colours can absorb any
//                      map they share)
// No atomics: the gradient, and so training, is deterministic.
#pragma once
#include "adam.h"
#include "exposure.h"
#include "simt_util.h"

// Threadgroup floats of exposure_backward (12 per thread) and exposure_reduce.
#define SPLAT_EXPOSURE_RED_FLOATS (SPLAT_EXPOSURE_FLOATS * SPLAT_GROUP_SIZE)

SPLAT_FUNC ExposureAffine load_exposure(SPLAT_DEVICE_MEM const float* exposure, uint32_t view) {
  ExposureAffine a;
  for (uint32_t k = 0; k < SPLAT_EXPOSURE_FLOATS; ++k) a.e[k] = exposure[SPLAT_EXPOSURE_FLOATS * view + k];
  return a;
}

SPLAT_FUNC void exposure_apply_body(SimtThread t, SPLAT_CONST_MEM const ExposureParams& p,
                                    SPLAT_DEVICE_MEM const float* exposure, SPLAT_DEVICE_MEM const float* image,
                                    SPLAT_DEVICE_MEM float* corrected) {
  uint32_t i = global_index(t);
  if (i >= p.pixels) return;
  store_vec3(corrected, i, exposure_apply(load_exposure(exposure, p.view), load_vec3(image, i)));
}

// Sums s[c * SPLAT_GROUP_SIZE + tid] over tid for every component c (a
// halving tree, the same order on every run); the totals end at tid 0.
SPLAT_FUNC void exposure_tree_sum(SimtThread t, SPLAT_TG_MEM float* s, uint32_t components) {
  for (uint32_t half = SPLAT_GROUP_SIZE / 2u; half > 0u; half /= 2u) {
    if (t.tid < half)
      for (uint32_t c = 0; c < components; ++c)
        s[c * SPLAT_GROUP_SIZE + t.tid] += s[c * SPLAT_GROUP_SIZE + t.tid + half];
    sp_group_barrier();
  }
}

SPLAT_FUNC void exposure_backward_body(SimtThread t, SPLAT_CONST_MEM const ExposureParams& p,
                                       SPLAT_DEVICE_MEM const float* exposure, SPLAT_DEVICE_MEM const float* image,
                                       SPLAT_DEVICE_MEM float* d_image, SPLAT_DEVICE_MEM float* partials,
                                       SPLAT_TG_MEM float* s_red) {  // SPLAT_EXPOSURE_RED_FLOATS
  uint32_t i = global_index(t);
  float acc[SPLAT_EXPOSURE_FLOATS];
  for (uint32_t k = 0; k < SPLAT_EXPOSURE_FLOATS; ++k) acc[k] = 0.f;
  if (i < p.pixels) {
    const ExposureAffine a = load_exposure(exposure, p.view);
    const vec3 d = load_vec3(d_image, i);
    exposure_grad_accumulate(acc, load_vec3(image, i), d);
    store_vec3(d_image, i, exposure_image_grad(a, d));
  }
  for (uint32_t k = 0; k < SPLAT_EXPOSURE_FLOATS; ++k) s_red[k * SPLAT_GROUP_SIZE + t.tid] = acc[k];
  sp_group_barrier();
  exposure_tree_sum(t, s_red, SPLAT_EXPOSURE_FLOATS);
  if (t.tid < SPLAT_EXPOSURE_FLOATS)
    partials[SPLAT_EXPOSURE_FLOATS * t.group + t.tid] = s_red[t.tid * SPLAT_GROUP_SIZE];
}

SPLAT_FUNC void exposure_reduce_body(SimtThread t, SPLAT_CONST_MEM const ExposureParams& p,
                                     SPLAT_DEVICE_MEM const float* partials, SPLAT_DEVICE_MEM float* grad,
                                     SPLAT_TG_MEM float* s_red) {  // SPLAT_EXPOSURE_RED_FLOATS
  for (uint32_t c = 0; c < SPLAT_EXPOSURE_FLOATS; ++c) {
    float sum = 0.f;
    for (uint32_t b = t.tid; b < p.blocks; b += SPLAT_GROUP_SIZE) sum += partials[SPLAT_EXPOSURE_FLOATS * b + c];
    s_red[c * SPLAT_GROUP_SIZE + t.tid] = sum;
  }
  sp_group_barrier();
  exposure_tree_sum(t, s_red, SPLAT_EXPOSURE_FLOATS);
  if (t.tid < SPLAT_EXPOSURE_FLOATS) grad[t.tid] = s_red[t.tid * SPLAT_GROUP_SIZE];
}

SPLAT_FUNC void exposure_adam_body(SimtThread t, SPLAT_CONST_MEM const ExposureParams& p,
                                   SPLAT_DEVICE_MEM float* exposure, SPLAT_DEVICE_MEM float* m,
                                   SPLAT_DEVICE_MEM float* v, SPLAT_DEVICE_MEM const float* grad,
                                   SPLAT_DEVICE_MEM const float* grad_views, SPLAT_DEVICE_MEM const int32_t* radius) {
  uint32_t i = global_index(t);
  if (i >= p.floats || step_skipped(radius)) return;
  const AdamStep a = make_adam_step(p.lr, p.beta1, p.beta2, p.eps, p.bias1, p.bias2);
  float g = p.all_views ? grad_views[i] : (i / SPLAT_EXPOSURE_FLOATS == p.view ? grad[i % SPLAT_EXPOSURE_FLOATS] : 0.f);
  float x = exposure[i], mi = m[i], vi = v[i];
  adam_update(a, g, x, mi, vi);
  exposure[i] = x;
  m[i] = mi;
  v[i] = vi;
}

SPLAT_FUNC void exposure_center_body(SimtThread t, SPLAT_CONST_MEM const ExposureParams& p,
                                     SPLAT_DEVICE_MEM float* exposure, SPLAT_DEVICE_MEM const int32_t* radius,
                                     SPLAT_TG_MEM float* s_red) {  // SPLAT_EXPOSURE_RED_FLOATS
  if (step_skipped(radius)) return;  // the same for every thread: no barrier is left waiting
  const uint32_t views = p.floats / SPLAT_EXPOSURE_FLOATS;
  for (uint32_t c = 0; c < SPLAT_EXPOSURE_FLOATS; ++c) {
    float sum = 0.f;
    for (uint32_t v = t.tid; v < views; v += SPLAT_GROUP_SIZE) sum += exposure[SPLAT_EXPOSURE_FLOATS * v + c];
    s_red[c * SPLAT_GROUP_SIZE + t.tid] = sum;
  }
  sp_group_barrier();
  exposure_tree_sum(t, s_red, SPLAT_EXPOSURE_FLOATS);
  for (uint32_t i = t.tid; i < p.floats; i += SPLAT_GROUP_SIZE) {
    const uint32_t c = i % SPLAT_EXPOSURE_FLOATS;
    exposure[i] -= s_red[c * SPLAT_GROUP_SIZE] / float(views) - exposure_identity(c);
  }
}
