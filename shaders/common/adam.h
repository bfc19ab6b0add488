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

// Deferred Adam (train.deferred_adam; docs/training_modes.md). A Gaussian the
// step's view did not see has a zero gradient, so its step of dense Adam only
// decays both moments and coasts the parameter on its momentum. Those steps
// wait until the Gaussian is next seen, or until a settle, and then run in
// order, each with the hyperparameters its step had: the same operations on
// the same floats as dense Adam. A ring keeps the last SPLAT_ADAM_RING steps'
// hyperparameters; every SPLAT_ADAM_SETTLE_EVERY steps (and before anything
// reads or rewrites the state) every Gaussian catches up, so no pending step
// is older than the ring.
#define SPLAT_ADAM_RING 256u
#define SPLAT_ADAM_SETTLE_EVERY 128u

// One step's hyperparameters; lr by group: means, log_scales, quats, opacity,
// SH DC, SH rest.
struct AdamRingEntry {
  float lr[6];
  float beta1, beta2, eps, bias1, bias2, pad;
};
SPLAT_STATIC_ASSERT(sizeof(AdamRingEntry) == 48, "AdamRingEntry layout");
SPLAT_STATIC_ASSERT(SPLAT_ADAM_SETTLE_EVERY < SPLAT_ADAM_RING, "a settle comes before the ring wraps");

// Dense Adam's zero-gradient steps first..last (inclusive; none if first > last)
// of one float whose learning rate is group `lr_index`.
SPLAT_FUNC void adam_catch_up(SPLAT_DEVICE_MEM const AdamRingEntry* ring, uint32_t first, uint32_t last,
                              uint32_t lr_index, SPLAT_THREAD float& param, SPLAT_THREAD float& m,
                              SPLAT_THREAD float& v) {
  for (uint32_t u = first; u <= last && u >= first; ++u) {
    const uint32_t slot = u % SPLAT_ADAM_RING;
    AdamStep a;
    a.lr = ring[slot].lr[lr_index];
    a.beta1 = ring[slot].beta1;
    a.beta2 = ring[slot].beta2;
    a.eps = ring[slot].eps;
    a.bias1 = ring[slot].bias1;
    a.bias2 = ring[slot].bias2;
    adam_update(a, 0.f, param, m, v);
  }
}
