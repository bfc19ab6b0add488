// Adam (bias-corrected, as torch.optim.Adam computes it) for one scalar parameter.
//
// The bias corrections fold into two scalars of the step, the step size
// lr / (1 - beta1^t) and 1 / sqrt(1 - beta2^t), so that an element costs one
// square root and one division. With a division for each correction as well,
// the fused update kernel was bound by arithmetic, not memory (86% of the SM's
// issue slots at 3.1M Gaussians on an H200).
#pragma once
#include "compat.h"

struct AdamStep {
  float step_size;  // lr / (1 - beta1^t): adam_step_size
  float beta1, beta2, eps;
  float rsqrt_bias2;  // 1 / sqrt(1 - beta2^t): adam_rsqrt_bias2
};

// From a rate and 1 - beta^t as the host rounds them; every backend calls
// these, so the scalars (and the updates) are the same bits everywhere.
SPLAT_FUNC float adam_step_size(float lr, float bias1) { return lr / bias1; }
SPLAT_FUNC float adam_rsqrt_bias2(float bias2) { return sp_rsqrt(bias2); }

SPLAT_FUNC AdamStep make_adam_step(float lr, float beta1, float beta2, float eps, float bias1, float bias2) {
  AdamStep a;
  a.step_size = adam_step_size(lr, bias1);
  a.beta1 = beta1;
  a.beta2 = beta2;
  a.eps = eps;
  a.rsqrt_bias2 = adam_rsqrt_bias2(bias2);
  return a;
}

SPLAT_FUNC void adam_update(AdamStep a, float grad, SPLAT_THREAD float& param, SPLAT_THREAD float& m,
                            SPLAT_THREAD float& v) {
  m = a.beta1 * m + (1.f - a.beta1) * grad;
  v = a.beta2 * v + (1.f - a.beta2) * grad * grad;
  param -= a.step_size * m / (sp_sqrt(v) * a.rsqrt_bias2 + a.eps);
}
