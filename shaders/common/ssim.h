// SSIM with an 11x11 Gaussian window (sigma 1.5), C1 = 0.01^2, C2 = 0.03^2,
// zero padding: the per-pixel map from the five window statistics, and the
// map's partial derivatives w.r.t. the statistics of the rendered image.
// The separable convolutions are the schedules' business.
#pragma once
#include "compat.h"

#define SSIM_RADIUS 5
#define SSIM_TAPS 11
#define SSIM_C1 (0.01f * 0.01f)
#define SSIM_C2 (0.03f * 0.03f)

// Normalised 1D Gaussian taps, sigma 1.5 (exp(-(i-5)^2 / 4.5) / sum).
SPLAT_FUNC float ssim_tap(int i) {
  // Precomputed in double and rounded once, so every target uses the same taps.
  const float taps[SSIM_TAPS] = {0.00102838008447911f, 0.00759875813523919f, 0.03600077212843083f,
                                 0.10936068950970002f, 0.21300553771125369f, 0.26601172486179436f,
                                 0.21300553771125369f, 0.10936068950970002f, 0.03600077212843083f,
                                 0.00759875813523919f, 0.00102838008447911f};
  return taps[i];
}

// Window statistics at one pixel: means of x, y and of x^2, y^2, xy.
struct SsimStats {
  float mu_x, mu_y, xx, yy, xy;
};

SPLAT_FUNC float ssim_value(SsimStats s) {
  float n1 = 2.f * s.mu_x * s.mu_y + SSIM_C1;
  float n2 = 2.f * (s.xy - s.mu_x * s.mu_y) + SSIM_C2;
  float d1 = s.mu_x * s.mu_x + s.mu_y * s.mu_y + SSIM_C1;
  float d2 = (s.xx - s.mu_x * s.mu_x) + (s.yy - s.mu_y * s.mu_y) + SSIM_C2;
  return (n1 * n2) / (d1 * d2);
}

// d ssim / d (mu_x, xx, xy), y fixed. The gradient w.r.t. the image x at q is
// then  G*d_mu + 2 x(q) G*d_xx + y(q) G*d_xy  (G the same window).
SPLAT_FUNC vec3 ssim_value_grad(SsimStats s) {
  float n1 = 2.f * s.mu_x * s.mu_y + SSIM_C1;
  float n2 = 2.f * (s.xy - s.mu_x * s.mu_y) + SSIM_C2;
  float d1 = s.mu_x * s.mu_x + s.mu_y * s.mu_y + SSIM_C1;
  float d2 = (s.xx - s.mu_x * s.mu_x) + (s.yy - s.mu_y * s.mu_y) + SSIM_C2;
  float inv = 1.f / (d1 * d2);
  float value = n1 * n2 * inv;
  float d_mu = 2.f * s.mu_y * (n2 - n1) * inv - 2.f * s.mu_x * value * (1.f / d1 - 1.f / d2);
  float d_xx = -value / d2;
  float d_xy = 2.f * n1 * inv;
  return make_vec3(d_mu, d_xx, d_xy);
}
