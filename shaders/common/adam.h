// Adam (bias-corrected, as torch.optim.Adam) for one scalar parameter.
#pragma once
#include "compat.h"

struct AdamStep {
  float lr;
  float beta1, beta2, eps;
  float bias1;  // 1 - beta1^t
  float bias2;  // 1 - beta2^t
};

SPLAT_FUNC void adam_update(AdamStep a, float grad, SPLAT_THREAD float& param, SPLAT_THREAD float& m,
                            SPLAT_THREAD float& v) {
  m = a.beta1 * m + (1.f - a.beta1) * grad;
  v = a.beta2 * v + (1.f - a.beta2) * grad * grad;
  float m_hat = m / a.bias1;
  float v_hat = v / a.bias2;
  param -= a.lr * m_hat / (sp_sqrt(v_hat) + a.eps);
}
