// The per-pixel front-to-back blend of depth-sorted splats, and its backward.
// Conventions: docs/architecture.md "Blend".
#pragma once
#include "compat.h"

#define SPLAT_ALPHA_MAX 0.999f
#define SPLAT_ALPHA_MIN (1.0f / 255.0f)
#define SPLAT_T_MIN 1e-4f
// With opacity <= 1, sigma >= 5.55 gives alpha < 1/255: skip before exp.
#define SPLAT_SIGMA_SKIP 5.55f

// One splat as the blend sees it.
struct BlendSplat {
  vec2 mean2d;
  vec3 conic;
  float opacity;
  vec3 color;
};

// Alpha of `s` at pixel centre `pix`, or 0 when the splat is skipped there.
// `gauss` receives exp(-sigma) and `clamped` whether alpha hit 0.999.
SPLAT_FUNC float blend_alpha(vec3 conic, vec2 mean2d, float opacity, vec2 pix,
                             SPLAT_THREAD float& gauss, SPLAT_THREAD bool& clamped) {
  float dx = mean2d.x - pix.x;
  float dy = mean2d.y - pix.y;
  float sigma = 0.5f * (conic.x * dx * dx + conic.z * dy * dy) + conic.y * dx * dy;
  gauss = 0.f;
  clamped = false;
  if (sigma < 0.f || sigma >= SPLAT_SIGMA_SKIP) return 0.f;
  gauss = sp_exp(-sigma);
  float raw = opacity * gauss;
  clamped = raw > SPLAT_ALPHA_MAX;
  float alpha = sp_min(SPLAT_ALPHA_MAX, raw);
  return alpha < SPLAT_ALPHA_MIN ? 0.f : alpha;
}

// Gradients of one splat's blend inputs from one pixel.
struct BlendGrad {
  vec2 mean2d;
  vec3 conic;
  float opacity;
  vec3 color;
};

// State of the backward walk of one pixel, from the last contributor to the
// first: T is the transmittance behind the current splat, `behind` the colour
// (normalised by T) of everything behind it, background included.
struct BlendBackwardState {
  float T;
  float T_final;
  vec3 behind;
  vec3 d_pixel;   // dL/d image at this pixel
  float d_alpha;  // dL/d (1 - T_final)
};

SPLAT_FUNC BlendBackwardState blend_backward_begin(float T_final, vec3 background, vec3 d_pixel,
                                                   float d_alpha) {
  BlendBackwardState st;
  st.T = T_final;
  st.T_final = T_final;
  st.behind = background;
  st.d_pixel = d_pixel;
  st.d_alpha = d_alpha;
  return st;
}

// One step of the backward walk. Returns false (and leaves `g` untouched)
// when the splat was skipped at this pixel in the forward pass.
SPLAT_FUNC bool blend_backward_step(BlendSplat s, vec2 pix, SPLAT_THREAD BlendBackwardState& st,
                                    SPLAT_THREAD BlendGrad& g) {
  float gauss;
  bool clamped;
  float alpha = blend_alpha(s.conic, s.mean2d, s.opacity, pix, gauss, clamped);
  if (alpha == 0.f) return false;
  float one_minus = 1.f - alpha;
  st.T = st.T / one_minus;  // transmittance in front of this splat
  float weight = alpha * st.T;
  g.color = weight * st.d_pixel;
  float d_a = st.T * dot(s.color - st.behind, st.d_pixel);
  // Training binds no alpha gradient: skip the second division per step.
  if (st.d_alpha != 0.f) d_a = d_a + st.d_alpha * st.T_final / one_minus;
  st.behind = alpha * s.color + one_minus * st.behind;
  float dx = s.mean2d.x - pix.x;
  float dy = s.mean2d.y - pix.y;
  float d_sigma = clamped ? 0.f : -s.opacity * gauss * d_a;
  g.opacity = clamped ? 0.f : gauss * d_a;
  g.mean2d = make_vec2(d_sigma * (s.conic.x * dx + s.conic.y * dy),
                       d_sigma * (s.conic.z * dy + s.conic.y * dx));
  g.conic = make_vec3(0.5f * d_sigma * dx * dx, d_sigma * dx * dy, 0.5f * d_sigma * dy * dy);
  return true;
}

// Forward state of one pixel.
struct BlendForwardState {
  float T;
  vec3 color;
  uint32_t n_contrib;  // list position (1-based) of the last splat blended
  bool done;
};

SPLAT_FUNC BlendForwardState blend_forward_begin() {
  BlendForwardState st;
  st.T = 1.f;
  st.color = make_vec3(0.f, 0.f, 0.f);
  st.n_contrib = 0;
  st.done = false;
  return st;
}

// Blends the splat at list position `position` (0-based) into the pixel and
// returns its alpha (0 when skipped). Sets st.done when the pixel saturates
// (the splat is then not blended).
SPLAT_FUNC float blend_forward_step(BlendSplat s, vec2 pix, uint32_t position,
                                    SPLAT_THREAD BlendForwardState& st) {
  float gauss;
  bool clamped;
  float alpha = blend_alpha(s.conic, s.mean2d, s.opacity, pix, gauss, clamped);
  if (alpha == 0.f) return 0.f;
  float next_T = st.T * (1.f - alpha);
  if (next_T < SPLAT_T_MIN) {
    st.done = true;
    return 0.f;
  }
  st.color = st.color + (alpha * st.T) * s.color;
  st.T = next_T;
  st.n_contrib = position + 1;
  return alpha;
}
