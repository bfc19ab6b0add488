// Real spherical harmonics of degree 0..3 (the standard 3DGS basis): colour
// of a Gaussian seen from the camera, and its backward.
#pragma once
#include "adam.h"    // accumulate_view_in
#include "compat.h"
#include "params.h"  // SPLAT_MAX_SH_COEFFS

#define SH_C0 0.28209479177387814f
#define SH_C1 0.4886025119029199f
#define SH_C2_0 1.0925484305920792f
#define SH_C2_1 -1.0925484305920792f
#define SH_C2_2 0.31539156525252005f
#define SH_C2_3 -1.0925484305920792f
#define SH_C2_4 0.5462742152960396f
#define SH_C3_0 -0.5900435899266435f
#define SH_C3_1 2.890611442640554f
#define SH_C3_2 -0.4570457994644658f
#define SH_C3_3 0.3731763325901154f
#define SH_C3_4 -0.4570457994644658f
#define SH_C3_5 1.445305721320277f
#define SH_C3_6 -0.5900435899266435f

SPLAT_FUNC int sh_num_coeffs(int degree) { return (degree + 1) * (degree + 1); }

// Basis value k (< 16) at the unit direction d.
SPLAT_FUNC float sh_basis_value(int k, vec3 d) {
  float x = d.x, y = d.y, z = d.z;
  float xx = x * x, yy = y * y, zz = z * z;
  switch (k) {
    case 0: return SH_C0;
    case 1: return -SH_C1 * y;
    case 2: return SH_C1 * z;
    case 3: return -SH_C1 * x;
    case 4: return SH_C2_0 * x * y;
    case 5: return SH_C2_1 * y * z;
    case 6: return SH_C2_2 * (2.f * zz - xx - yy);
    case 7: return SH_C2_3 * x * z;
    case 8: return SH_C2_4 * (xx - yy);
    case 9: return SH_C3_0 * y * (3.f * xx - yy);
    case 10: return SH_C3_1 * x * y * z;
    case 11: return SH_C3_2 * y * (4.f * zz - xx - yy);
    case 12: return SH_C3_3 * z * (2.f * zz - 3.f * xx - 3.f * yy);
    case 13: return SH_C3_4 * x * (4.f * zz - xx - yy);
    case 14: return SH_C3_5 * z * (xx - yy);
    default: return SH_C3_6 * x * (xx - 3.f * yy);
  }
}

// d b_k / d d at the unit direction d.
SPLAT_FUNC vec3 sh_basis_grad_value(int k, vec3 d) {
  float x = d.x, y = d.y, z = d.z;
  float xx = x * x, yy = y * y, zz = z * z;
  switch (k) {
    case 0: return make_vec3(0.f, 0.f, 0.f);
    case 1: return make_vec3(0.f, -SH_C1, 0.f);
    case 2: return make_vec3(0.f, 0.f, SH_C1);
    case 3: return make_vec3(-SH_C1, 0.f, 0.f);
    case 4: return make_vec3(SH_C2_0 * y, SH_C2_0 * x, 0.f);
    case 5: return make_vec3(0.f, SH_C2_1 * z, SH_C2_1 * y);
    case 6: return make_vec3(-2.f * SH_C2_2 * x, -2.f * SH_C2_2 * y, 4.f * SH_C2_2 * z);
    case 7: return make_vec3(SH_C2_3 * z, 0.f, SH_C2_3 * x);
    case 8: return make_vec3(2.f * SH_C2_4 * x, -2.f * SH_C2_4 * y, 0.f);
    case 9: return make_vec3(SH_C3_0 * 6.f * x * y, SH_C3_0 * (3.f * xx - 3.f * yy), 0.f);
    case 10: return make_vec3(SH_C3_1 * y * z, SH_C3_1 * x * z, SH_C3_1 * x * y);
    case 11: return make_vec3(-SH_C3_2 * 2.f * x * y, SH_C3_2 * (4.f * zz - xx - 3.f * yy), SH_C3_2 * 8.f * y * z);
    case 12:
      return make_vec3(-SH_C3_3 * 6.f * x * z, -SH_C3_3 * 6.f * y * z, SH_C3_3 * (6.f * zz - 3.f * xx - 3.f * yy));
    case 13: return make_vec3(SH_C3_4 * (4.f * zz - 3.f * xx - yy), -SH_C3_4 * 2.f * x * y, SH_C3_4 * 8.f * x * z);
    case 14: return make_vec3(SH_C3_5 * 2.f * x * z, -SH_C3_5 * 2.f * y * z, SH_C3_5 * (xx - yy));
    default: return make_vec3(SH_C3_6 * (3.f * xx - 3.f * yy), -SH_C3_6 * 6.f * x * y, 0.f);
  }
}

// Basis values b[k] at the unit direction d, for k < (degree+1)^2. The loop
// is fully unrolled (SPLAT_UNROLL): indexed by constants, b lives in
// registers, not in a thread's local memory, and each switch folds away.
SPLAT_FUNC void sh_basis(int degree, vec3 d, SPLAT_THREAD float* b) {
  const int k_count = sh_num_coeffs(degree);
  SPLAT_UNROLL for (int k = 0; k < SPLAT_MAX_SH_COEFFS; ++k) {
    if (k >= k_count) break;
    b[k] = sh_basis_value(k, d);
  }
}

// One Gaussian's SH coefficients, (r, g, b) per coefficient, in registers:
// the colour and its backward read them from here, so a GPU kernel can fetch
// a row with 16-byte loads (load_sh_row, project.h) and the CPU element by
// element (sh_row), with the same arithmetic after.
struct ShRow {
  float c[3 * SPLAT_MAX_SH_COEFFS];
};

// The first k_count coefficients at `sh` (K x 3 floats); the rest zero.
SPLAT_FUNC ShRow sh_row(SPLAT_DEVICE_MEM const float* sh, int k_count) {
  ShRow row;
  SPLAT_UNROLL for (int e = 0; e < 3 * SPLAT_MAX_SH_COEFFS; ++e) row.c[e] = e < 3 * k_count ? sh[e] : 0.f;
  return row;
}

// The SH gradient of one Gaussian is rank one: dL/d sh[k][c] = b_k(dir) dc[c]
// for k below the active count, with b the basis at the view direction and dc
// the colour gradient with clamped channels zeroed. The GPU keeps only these
// factors per Gaussian (SPLAT_SH_FACTOR_FLOATS, params.h: b[16], zeros past the
// active count, then dc and a pad) and expands them where the gradient is
// consumed (Adam, read-backs): 48 strided stores per Gaussian were the
// projection backward's whole cost.
struct ShGradFactors {
  float b[SPLAT_MAX_SH_COEFFS];
  vec3 dc;
};

// dL/d sh[k][c] from factors stored as above; 0 for inactive coefficients.
SPLAT_FUNC float sh_factor_grad(SPLAT_DEVICE_MEM const float* f, uint32_t k, uint32_t c, uint32_t k_count) {
  return k < k_count ? f[k] * f[SPLAT_MAX_SH_COEFFS + c] : 0.f;
}

// The mean SH gradient of several views a step, from each view's factors
// (`views` sets, `view_stride` floats apart; fewer than 2: the one set's
// value). The views' values are summed by accumulate_view's rule (adam.h,
// accumulate_view_in), so the bits are those of expanding and accumulating
// each view, without storing either.
SPLAT_FUNC float sh_factor_grad_views(SPLAT_DEVICE_MEM const float* f, uint32_t view_stride, uint32_t views, uint32_t k,
                                      uint32_t c, uint32_t k_count) {
  if (views < 2u) return sh_factor_grad(f, k, c, k_count);
  float sum = 0.f;
  for (uint32_t v = 0u; v < views; ++v)
    sum = accumulate_view_in(v, views, sh_factor_grad(f + v * view_stride, k, c, k_count), sum);
  return sum;
}

// What the backward needs of a Gaussian's colour in one view, left by the
// forward so that the backward does not read the coefficients again (192
// bytes a Gaussian at degree 3): each channel's derivative by the unit view
// direction, row[c] = sum_k sh[k][c] d b_k / d dir (summed over k in order),
// and which channels the clamp at 0 zeroed (bit c).
struct ShColorJacobian {
  vec3 row[3];
  uint32_t clamped;
};

// Colour of one Gaussian: SH(dir) + 0.5, clamped at 0 (a clamped channel has
// zero gradient), from its coefficients `sh`, and its ShColorJacobian.
SPLAT_FUNC vec3 sh_color_jacobian(int degree, vec3 mean, vec3 cam_center, SPLAT_THREAD const ShRow& sh,
                                  SPLAT_THREAD ShColorJacobian& jac) {
  vec3 dir = mean - cam_center;
  float inv = sp_rsqrt(dot(dir, dir));
  dir = inv * dir;
  float pre[3] = {0.5f, 0.5f, 0.5f};
  jac.row[0] = jac.row[1] = jac.row[2] = make_vec3(0.f, 0.f, 0.f);
  int k_count = sh_num_coeffs(degree);
  // A coefficient at a time (its basis value and gradient, then the sums): the
  // whole basis and its gradient at once held 64 values live.
  SPLAT_UNROLL for (int k = 0; k < SPLAT_MAX_SH_COEFFS; ++k) {
    if (k >= k_count) break;
    const float bk = sh_basis_value(k, dir);
    const vec3 dbk = sh_basis_grad_value(k, dir);
    SPLAT_UNROLL for (int ch = 0; ch < 3; ++ch) {
      pre[ch] += bk * sh.c[3 * k + ch];
      jac.row[ch] = jac.row[ch] + sh.c[3 * k + ch] * dbk;
    }
  }
  jac.clamped = (pre[0] < 0.f ? 1u : 0u) | (pre[1] < 0.f ? 2u : 0u) | (pre[2] < 0.f ? 4u : 0u);
  return make_vec3(sp_max(pre[0], 0.f), sp_max(pre[1], 0.f), sp_max(pre[2], 0.f));
}

// The colour alone (the CPU backend's forward): one sum for every backend, so
// their colours agree to the bit.
SPLAT_FUNC vec3 sh_color(int degree, vec3 mean, vec3 cam_center, SPLAT_THREAD const ShRow& sh) {
  ShColorJacobian unused;
  return sh_color_jacobian(degree, mean, cam_center, sh, unused);
}

// Backward of sh_color from the forward's ShColorJacobian: the SH gradient's
// factors, and dL/d mean through the view direction (returned).
SPLAT_FUNC vec3 sh_color_backward_jacobian(int degree, vec3 mean, vec3 cam_center,
                                           SPLAT_THREAD const ShColorJacobian& jac, vec3 d_color,
                                           SPLAT_THREAD ShGradFactors& factors) {
  vec3 dir_raw = mean - cam_center;
  float inv = sp_rsqrt(dot(dir_raw, dir_raw));
  vec3 dir = inv * dir_raw;
  float b[SPLAT_MAX_SH_COEFFS];
  sh_basis(degree, dir, b);
  const int k_count = sh_num_coeffs(degree);
  const vec3 dc = make_vec3((jac.clamped & 1u) != 0u ? 0.f : d_color.x, (jac.clamped & 2u) != 0u ? 0.f : d_color.y,
                            (jac.clamped & 4u) != 0u ? 0.f : d_color.z);
  SPLAT_UNROLL for (int k = 0; k < SPLAT_MAX_SH_COEFFS; ++k) factors.b[k] = k < k_count ? b[k] : 0.f;
  factors.dc = dc;
  if (degree < 1) return make_vec3(0.f, 0.f, 0.f);  // the colour does not depend on the direction
  const vec3 d_dir = dc.x * jac.row[0] + dc.y * jac.row[1] + dc.z * jac.row[2];
  // dir = v / |v|: d v = (d_dir - dir (dir . d_dir)) / |v|
  return inv * (d_dir - dot(dir, d_dir) * dir);
}

// The same from the coefficients (the CPU backend, which keeps no Jacobian):
// the Jacobian formed as the forward forms it, so the bits are the GPU's.
SPLAT_FUNC vec3 sh_color_backward(int degree, vec3 mean, vec3 cam_center, SPLAT_THREAD const ShRow& sh,
                                  vec3 d_color, SPLAT_THREAD ShGradFactors& factors) {
  ShColorJacobian jac;
  sh_color_jacobian(degree, mean, cam_center, sh, jac);
  return sh_color_backward_jacobian(degree, mean, cam_center, jac, d_color, factors);
}
