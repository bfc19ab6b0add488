// The per-pixel front-to-back blend of depth-sorted splats, and its backward.
// Conventions: docs/architecture.md "Blend".
#pragma once
#include "compat.h"

#define SPLAT_ALPHA_MAX 0.999f
#define SPLAT_ALPHA_MIN (1.0f / 255.0f)
#define SPLAT_T_MIN 1e-4f
// With opacity <= 1, sigma >= 5.55 gives alpha < 1/255 (exp(-5.55) = 0.99533 /
// 255), so the alpha test skips it: the tile cover's bound (tile_cover.h). Every
// opacity the kernels blend is at most 1 (a sigmoid, times the antialiased
// compensation, clamped to 1: projection.h), so no test of sigma's own is needed.
#define SPLAT_SIGMA_SKIP 5.55f
// -log2(e) / 2: the exponent coefficients' factor (blend_exponent_coefs).
#define SPLAT_NEG_HALF_LOG2E (-0.72134752f)

// a . b, a x + b y and acc + w c with the fused multiply-adds of compat.h
// (the same rounding as the plain expressions where the host has no FMA).
SPLAT_FUNC float blend_dot(vec3 a, vec3 b) { return sp_fma(a.z, b.z, sp_fma(a.y, b.y, a.x * b.x)); }
SPLAT_FUNC vec3 blend_mix(float a, vec3 x, float b, vec3 y) {
  return make_vec3(sp_fma(a, x.x, b * y.x), sp_fma(a, x.y, b * y.y), sp_fma(a, x.z, b * y.z));
}
SPLAT_FUNC vec3 blend_accumulate(vec3 acc, float w, vec3 c) {
  return make_vec3(sp_fma(w, c.x, acc.x), sp_fma(w, c.y, acc.y), sp_fma(w, c.z, acc.z));
}

// The blend evaluates exp(-sigma), sigma = 0.5 d^T conic d (d = mean2d - pix),
// as 2^e with e = A dx^2 + B dx dy + C dy^2 and (A, B, C) = -log2(e) (conic.x / 2,
// conic.y, conic.z / 2), formed once a splat: e is two fused multiply-adds a
// pixel on top of the terms in dx alone, which a thread's pixels of one column
// share (rasterize_forward.h), with no scaling before the exp.
SPLAT_FUNC vec3 blend_exponent_coefs(vec3 conic) {
  return make_vec3(SPLAT_NEG_HALF_LOG2E * conic.x, (2.f * SPLAT_NEG_HALF_LOG2E) * conic.y,
                   SPLAT_NEG_HALF_LOG2E * conic.z);
}

// One splat as the blend sees it. `coefs` = blend_exponent_coefs(conic): the
// alphas read only them, the backward's gradients the conic.
struct BlendSplat {
  vec2 mean2d;
  vec3 conic;
  vec3 coefs;
  float opacity;
  vec3 color;
};

SPLAT_FUNC BlendSplat blend_splat(vec2 mean2d, vec3 conic, float opacity, vec3 color) {
  BlendSplat s;
  s.mean2d = mean2d;
  s.conic = conic;
  s.coefs = blend_exponent_coefs(conic);
  s.opacity = opacity;
  s.color = color;
  return s;
}

// The exponent e = -sigma log2(e) of pixel centre `pix` (coefficients `coefs`).
SPLAT_FUNC float blend_exponent(vec3 coefs, vec2 mean2d, vec2 pix) {
  float dx = mean2d.x - pix.x;
  float dy = mean2d.y - pix.y;
  return sp_fma(sp_fma(coefs.z, dy, coefs.y * dx), dy, coefs.x * dx * dx);
}

// Whether a splat is skipped at a pixel of exponent e before its alpha is
// tested: sigma < 0 (rounding). (sigma >= SPLAT_SIGMA_SKIP is skipped by the
// alpha test: one compare a pixel fewer in every raster loop.)
SPLAT_FUNC bool blend_exponent_skips(float e) { return e > 0.f; }

// Alpha of `s` at pixel centre `pix`, or 0 when the splat is skipped there.
// `gauss` receives exp(-sigma) and `clamped` whether alpha hit 0.999.
SPLAT_FUNC float blend_alpha(BlendSplat s, vec2 pix, SPLAT_THREAD float& gauss, SPLAT_THREAD bool& clamped) {
  float e = blend_exponent(s.coefs, s.mean2d, pix);
  gauss = 0.f;
  clamped = false;
  if (blend_exponent_skips(e)) return 0.f;
  gauss = sp_blend_exp2(e);
  float raw = s.opacity * gauss;
  clamped = raw > SPLAT_ALPHA_MAX;
  float alpha = sp_min(SPLAT_ALPHA_MAX, raw);
  return alpha < SPLAT_ALPHA_MIN ? 0.f : alpha;
}

// What the backward needs of one splat at one pixel: the forward's alpha (0:
// skipped there), and the factor of alpha's derivative in sigma and opacity:
// exp(-sigma), or 0 where alpha is clamped at 0.999 or skipped; and whether
// it is blended there (alpha != 0, as a predicate: a SIMD group's vote reads it
// without comparing alpha again).
struct BlendHit {
  float alpha;
  float slope;
  bool blended;
};

// blend_alpha's alpha without a branch (the exp is computed, then discarded,
// for a skipped sigma), before the skip's select: `hit` says whether the
// splat is blended at `pix` (alpha is meaningless where not). `gauss`
// receives exp(-sigma), `raw` opacity exp(-sigma).
SPLAT_FUNC float blend_alpha_hit(BlendSplat s, vec2 pix, SPLAT_THREAD float& gauss, SPLAT_THREAD float& raw,
                                 SPLAT_THREAD bool& hit) {
  float e = blend_exponent(s.coefs, s.mean2d, pix);
  gauss = sp_blend_exp2(e);
  raw = s.opacity * gauss;
  float alpha = sp_min(SPLAT_ALPHA_MAX, raw);
  hit = !(blend_exponent_skips(e) || alpha < SPLAT_ALPHA_MIN);
  return alpha;
}

// blend_alpha_hit as the backward steps it, for SIMD groups that step every
// lane together. `live`: the pixel's walk reaches the splat (else alpha = 0).
SPLAT_FUNC BlendHit blend_hit(BlendSplat s, vec2 pix, bool live) {
  float gauss, raw;
  bool hit;
  float alpha = blend_alpha_hit(s, pix, gauss, raw, hit);
  bool skip = !live || !hit;
  BlendHit h;
  h.alpha = skip ? 0.f : alpha;
  h.slope = (skip || raw > SPLAT_ALPHA_MAX) ? 0.f : gauss;
  h.blended = !skip;
  return h;
}

// Gradients of one splat's blend inputs from one pixel.
struct BlendGrad {
  vec2 mean2d;
  vec3 conic;
  float opacity;
  vec3 color;
};

// acc[0..8] += g in the layout of the accumulated gradients (params.h
// SPLAT_PAIR_GRAD): mean2d.xy, conic.xyz, opacity, colour.rgb.
SPLAT_FUNC void blend_grad_accumulate(SPLAT_THREAD float* acc, BlendGrad g) {
  acc[0] += g.mean2d.x;
  acc[1] += g.mean2d.y;
  acc[2] += g.conic.x;
  acc[3] += g.conic.y;
  acc[4] += g.conic.z;
  acc[5] += g.opacity;
  acc[6] += g.color.x;
  acc[7] += g.color.y;
  acc[8] += g.color.z;
}

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

// The factors of one backward step's gradients, before they are multiplied
// out: colour = weight d_pixel, opacity = slope d_a, d_sigma = -opacity slope
// d_a, and (dx, dy) = mean2d - pix for mean2d's and the conic's. The backward
// kernel sums a thread's pixels' factors as moments (blend_moments_add).
struct BlendGradTerms {
  float weight;
  float slope;
  float d_a;
  float d_sigma;
  float dx, dy;
};

// One step of the backward walk for a hit, as factors. A hit with alpha 0
// gives zero gradients and leaves the state as it was, so SIMD lanes can all
// step.
SPLAT_FUNC BlendGradTerms blend_backward_terms(BlendSplat s, vec2 pix, BlendHit h,
                                               SPLAT_THREAD BlendBackwardState& st) {
  float one_minus = 1.f - h.alpha;
  // Transmittance in front of this splat. A zero alpha divides by exactly 1,
  // which leaves T as it was on every target (CUDA's rcp.approx of 1 is 1:
  // docs/gpu.md), so no select.
  st.T = sp_blend_div(st.T, one_minus);
  BlendGradTerms f;
  f.weight = h.alpha * st.T;
  float d_a = st.T * blend_dot(s.color - st.behind, st.d_pixel);
  // Training binds no alpha gradient. Where the division shares T's
  // reciprocal (CUDA) the term is added whatever d_alpha: a zero one adds +0,
  // the same bits, for a multiply and an add, where the per-pixel test was
  // predicated and issued the term's instructions anyway. Elsewhere a
  // division is skipped.
  if (SPLAT_BLEND_DIV_SHARED || st.d_alpha != 0.f) d_a = d_a + sp_blend_div(st.d_alpha * st.T_final, one_minus);
  st.behind = blend_mix(h.alpha, s.color, one_minus, st.behind);
  f.slope = h.slope;
  f.d_a = d_a;
  f.d_sigma = -s.opacity * h.slope * d_a;
  f.dx = s.mean2d.x - pix.x;
  f.dy = s.mean2d.y - pix.y;
  return f;
}

// d sigma / d mean2d without the d_sigma factor: conic (dx, dy).
SPLAT_FUNC vec2 blend_sigma_mean2d(vec3 conic, BlendGradTerms f) {
  return make_vec2(sp_fma(conic.x, f.dx, conic.y * f.dy), sp_fma(conic.z, f.dy, conic.y * f.dx));
}

// The mean2d gradient the factors give (absgrad sums its magnitude).
SPLAT_FUNC vec2 blend_grad_mean2d(vec3 conic, BlendGradTerms f) {
  vec2 u = blend_sigma_mean2d(conic, f);
  return make_vec2(f.d_sigma * u.x, f.d_sigma * u.y);
}

// The gradients the factors give.
SPLAT_FUNC BlendGrad blend_grad_of(vec3 conic, BlendGradTerms f, vec3 d_pixel) {
  BlendGrad g;
  g.color = f.weight * d_pixel;
  g.opacity = f.slope * f.d_a;
  g.mean2d = blend_grad_mean2d(conic, f);
  g.conic = make_vec3(0.5f * f.d_sigma * f.dx * f.dx, f.d_sigma * f.dx * f.dy, 0.5f * f.d_sigma * f.dy * f.dy);
  return g;
}

// A thread's pixels' gradients of one splat, summed as moments that the
// conic multiplies once: acc[0..1] = sum d_sigma (dx, dy), acc[2..4] = sum
// d_sigma (dx dx, dx dy, dy dy), acc[5..8] as in blend_grad_accumulate's
// layout. blend_moments_store starts the sums with the first pixel's terms,
// blend_moments_add adds a later pixel's (fused multiply-adds), and
// blend_moments_gradients turns the sums into that layout: seven
// instructions a pixel and six a thread for mean2d's and the conic's five
// gradients, where forming them took thirteen a pixel. The same gradients
// as blend_grad_of summed, rounded otherwise.
SPLAT_FUNC void blend_moments_store(SPLAT_THREAD float* acc, BlendGradTerms f, vec3 d_pixel) {
  float ax = f.d_sigma * f.dx, ay = f.d_sigma * f.dy;
  acc[0] = ax;
  acc[1] = ay;
  acc[2] = ax * f.dx;
  acc[3] = ax * f.dy;
  acc[4] = ay * f.dy;
  acc[5] = f.slope * f.d_a;
  acc[6] = f.weight * d_pixel.x;
  acc[7] = f.weight * d_pixel.y;
  acc[8] = f.weight * d_pixel.z;
}

SPLAT_FUNC void blend_moments_add(SPLAT_THREAD float* acc, BlendGradTerms f, vec3 d_pixel) {
  float ax = f.d_sigma * f.dx, ay = f.d_sigma * f.dy;
  acc[0] += ax;
  acc[1] += ay;
  acc[2] = sp_fma(ax, f.dx, acc[2]);
  acc[3] = sp_fma(ax, f.dy, acc[3]);
  acc[4] = sp_fma(ay, f.dy, acc[4]);
  acc[5] = sp_fma(f.slope, f.d_a, acc[5]);
  acc[6] = sp_fma(f.weight, d_pixel.x, acc[6]);
  acc[7] = sp_fma(f.weight, d_pixel.y, acc[7]);
  acc[8] = sp_fma(f.weight, d_pixel.z, acc[8]);
}

// mean2d's gradient is conic (sum d_sigma dx, sum d_sigma dy) (conic
// symmetric), the conic's half the diagonal moments and the cross one.
SPLAT_FUNC void blend_moments_gradients(SPLAT_THREAD float* acc, vec3 conic) {
  float mx = acc[0], my = acc[1];
  acc[0] = sp_fma(conic.x, mx, conic.y * my);
  acc[1] = sp_fma(conic.z, my, conic.y * mx);
  acc[2] = 0.5f * acc[2];
  acc[4] = 0.5f * acc[4];
}

// blend_backward_terms, multiplied out.
SPLAT_FUNC void blend_backward_apply(BlendSplat s, vec2 pix, BlendHit h, SPLAT_THREAD BlendBackwardState& st,
                                     SPLAT_THREAD BlendGrad& g) {
  g = blend_grad_of(s.conic, blend_backward_terms(s, pix, h, st), st.d_pixel);
}

// One step of the backward walk. Returns false (and leaves `g` untouched)
// when the splat was skipped at this pixel in the forward pass.
SPLAT_FUNC bool blend_backward_step(BlendSplat s, vec2 pix, SPLAT_THREAD BlendBackwardState& st,
                                    SPLAT_THREAD BlendGrad& g) {
  BlendHit h;
  bool clamped;
  h.alpha = blend_alpha(s, pix, h.slope, clamped);
  if (h.alpha == 0.f) return false;
  h.blended = true;
  if (clamped) h.slope = 0.f;
  blend_backward_apply(s, pix, h, st, g);
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

// Blends a splat the pixel blends (alpha > 0), of colour `color` at list
// position `position` (0-based), into the pixel: false, with st.done set,
// where it would stop the pixel (it is then not blended).
SPLAT_FUNC bool blend_forward_take(float alpha, vec3 color, uint32_t position, SPLAT_THREAD BlendForwardState& st) {
  float next_T = st.T * (1.f - alpha);
  if (next_T < SPLAT_T_MIN) {
    st.done = true;
    return false;
  }
  st.color = blend_accumulate(st.color, alpha * st.T, color);
  st.T = next_T;
  st.n_contrib = position + 1;
  return true;
}

// (P, L) of a run of splats blended from T = 1, accumulated splat by splat
// with blend_forward_take's roundings: a chunk of a tile's list
// (rasterize_forward.h; the CPU's chunked stop).
struct ChunkBlend {
  float P;
  vec3 L;
};

SPLAT_FUNC ChunkBlend chunk_blend_begin() {
  ChunkBlend cb;
  cb.P = 1.f;
  cb.L = make_vec3(0.f, 0.f, 0.f);
  return cb;
}

// The chunk's product after a splat of alpha `alpha`: chunk_blend_take's.
SPLAT_FUNC float chunk_blend_next(ChunkBlend cb, float alpha) { return cb.P * (1.f - alpha); }

// Blends a splat of alpha `alpha` (> 0) into the chunk's (P, L), `next`
// being chunk_blend_next(cb, alpha) (formed once where the stop tests it).
SPLAT_FUNC void chunk_blend_take_next(SPLAT_THREAD ChunkBlend& cb, float alpha, vec3 color, float next) {
  cb.L = blend_accumulate(cb.L, alpha * cb.P, color);
  cb.P = next;
}

// Blends a splat of alpha `alpha` (> 0) into the chunk's (P, L).
SPLAT_FUNC void chunk_blend_take(SPLAT_THREAD ChunkBlend& cb, float alpha, vec3 color) {
  chunk_blend_take_next(cb, alpha, color, chunk_blend_next(cb, alpha));
}

SPLAT_FUNC void chunk_blend_add(SPLAT_THREAD ChunkBlend& cb, float alpha, vec3 color) {
  if (alpha > 0.f) chunk_blend_take(cb, alpha, color);
}

// The blend's stop applied to a chunk's own product: chunk_blend_take of
// `alpha` would take it below SPLAT_T_MIN (the splat is then not blended).
SPLAT_FUNC bool chunk_blend_take_stops(ChunkBlend cb, float alpha) { return chunk_blend_next(cb, alpha) < SPLAT_T_MIN; }

// chunk_blend_take_stops of a splat that may be skipped (alpha 0).
SPLAT_FUNC bool chunk_blend_stops(ChunkBlend cb, float alpha) {
  return alpha > 0.f && chunk_blend_take_stops(cb, alpha);
}

// A chunk's (P, L) chained onto a pixel's state: C += T L, T *= P; `last` is
// its last contributor's position in the chunk + 1 (0: none), the chunk
// starting at list position `base`.
SPLAT_FUNC void blend_chain_chunk(SPLAT_THREAD BlendForwardState& st, float P, vec3 L, uint32_t base, uint32_t last) {
  st.color = st.color + st.T * L;
  st.T = st.T * P;
  if (last != 0u) st.n_contrib = base + last;
}

// blend_alpha, then blend_forward_take of a blended splat; returns its alpha
// (0 where skipped or where it would stop the pixel).
SPLAT_FUNC float blend_forward_step(BlendSplat s, vec2 pix, uint32_t position,
                                    SPLAT_THREAD BlendForwardState& st) {
  float gauss;
  bool clamped;
  float alpha = blend_alpha(s, pix, gauss, clamped);
  if (alpha == 0.f) return 0.f;
  return blend_forward_take(alpha, s.color, position, st) ? alpha : 0.f;
}
