// Real spherical harmonics of degree 0..3 (the standard 3DGS basis): colour
// of a Gaussian seen from the camera, and its backward.
#pragma once
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

// Basis values b[k] at the unit direction d, for k < (degree+1)^2.
// With want_grad, also db[k] = d b[k] / d d.
SPLAT_FUNC void sh_basis(int degree, vec3 d, SPLAT_THREAD float* b, SPLAT_THREAD vec3* db, bool want_grad) {
  float x = d.x, y = d.y, z = d.z;
  b[0] = SH_C0;
  if (want_grad) db[0] = make_vec3(0.f, 0.f, 0.f);
  if (degree < 1) return;
  b[1] = -SH_C1 * y;
  b[2] = SH_C1 * z;
  b[3] = -SH_C1 * x;
  if (want_grad) {
    db[1] = make_vec3(0.f, -SH_C1, 0.f);
    db[2] = make_vec3(0.f, 0.f, SH_C1);
    db[3] = make_vec3(-SH_C1, 0.f, 0.f);
  }
  if (degree < 2) return;
  float xx = x * x, yy = y * y, zz = z * z;
  b[4] = SH_C2_0 * x * y;
  b[5] = SH_C2_1 * y * z;
  b[6] = SH_C2_2 * (2.f * zz - xx - yy);
  b[7] = SH_C2_3 * x * z;
  b[8] = SH_C2_4 * (xx - yy);
  if (want_grad) {
    db[4] = make_vec3(SH_C2_0 * y, SH_C2_0 * x, 0.f);
    db[5] = make_vec3(0.f, SH_C2_1 * z, SH_C2_1 * y);
    db[6] = make_vec3(-2.f * SH_C2_2 * x, -2.f * SH_C2_2 * y, 4.f * SH_C2_2 * z);
    db[7] = make_vec3(SH_C2_3 * z, 0.f, SH_C2_3 * x);
    db[8] = make_vec3(2.f * SH_C2_4 * x, -2.f * SH_C2_4 * y, 0.f);
  }
  if (degree < 3) return;
  b[9] = SH_C3_0 * y * (3.f * xx - yy);
  b[10] = SH_C3_1 * x * y * z;
  b[11] = SH_C3_2 * y * (4.f * zz - xx - yy);
  b[12] = SH_C3_3 * z * (2.f * zz - 3.f * xx - 3.f * yy);
  b[13] = SH_C3_4 * x * (4.f * zz - xx - yy);
  b[14] = SH_C3_5 * z * (xx - yy);
  b[15] = SH_C3_6 * x * (xx - 3.f * yy);
  if (want_grad) {
    db[9] = make_vec3(SH_C3_0 * 6.f * x * y, SH_C3_0 * (3.f * xx - 3.f * yy), 0.f);
    db[10] = make_vec3(SH_C3_1 * y * z, SH_C3_1 * x * z, SH_C3_1 * x * y);
    db[11] = make_vec3(-SH_C3_2 * 2.f * x * y, SH_C3_2 * (4.f * zz - xx - 3.f * yy),
                       SH_C3_2 * 8.f * y * z);
    db[12] = make_vec3(-SH_C3_3 * 6.f * x * z, -SH_C3_3 * 6.f * y * z,
                       SH_C3_3 * (6.f * zz - 3.f * xx - 3.f * yy));
    db[13] = make_vec3(SH_C3_4 * (4.f * zz - 3.f * xx - yy), -SH_C3_4 * 2.f * x * y,
                       SH_C3_4 * 8.f * x * z);
    db[14] = make_vec3(SH_C3_5 * 2.f * x * z, -SH_C3_5 * 2.f * y * z, SH_C3_5 * (xx - yy));
    db[15] = make_vec3(SH_C3_6 * (3.f * xx - 3.f * yy), -SH_C3_6 * 6.f * x * y, 0.f);
  }
}

// Colour of one Gaussian: SH(dir) + 0.5, clamped at 0 (a clamped channel has
// zero gradient). `sh` points at the Gaussian's K x 3 coefficients.
SPLAT_FUNC vec3 sh_color(int degree, vec3 mean, vec3 cam_center, SPLAT_DEVICE_MEM const float* sh) {
  vec3 dir = mean - cam_center;
  float inv = sp_rsqrt(dot(dir, dir));
  dir = inv * dir;
  float b[SPLAT_MAX_SH_COEFFS];
  vec3 db[1];
  sh_basis(degree, dir, b, db, false);
  float r = 0.5f, g = 0.5f, bl = 0.5f;
  int k_count = sh_num_coeffs(degree);
  for (int k = 0; k < k_count; ++k) {
    r += b[k] * sh[3 * k + 0];
    g += b[k] * sh[3 * k + 1];
    bl += b[k] * sh[3 * k + 2];
  }
  return make_vec3(sp_max(r, 0.f), sp_max(g, 0.f), sp_max(bl, 0.f));
}

// Backward of sh_color: writes dL/d sh (K x 3, only the used coefficients) and
// returns dL/d mean through the view direction.
SPLAT_FUNC vec3 sh_color_backward(int degree, vec3 mean, vec3 cam_center, SPLAT_DEVICE_MEM const float* sh,
                                  vec3 d_color, SPLAT_DEVICE_MEM float* d_sh) {
  vec3 dir_raw = mean - cam_center;
  float inv = sp_rsqrt(dot(dir_raw, dir_raw));
  vec3 dir = inv * dir_raw;
  float b[SPLAT_MAX_SH_COEFFS];
  vec3 db[SPLAT_MAX_SH_COEFFS];
  sh_basis(degree, dir, b, db, true);
  int k_count = sh_num_coeffs(degree);
  // Recompute the pre-clamp colour to zero clamped channels.
  float pre[3] = {0.5f, 0.5f, 0.5f};
  for (int k = 0; k < k_count; ++k)
    for (int ch = 0; ch < 3; ++ch) pre[ch] += b[k] * sh[3 * k + ch];
  float dc[3] = {pre[0] < 0.f ? 0.f : d_color.x, pre[1] < 0.f ? 0.f : d_color.y,
                 pre[2] < 0.f ? 0.f : d_color.z};
  vec3 d_dir = make_vec3(0.f, 0.f, 0.f);
  for (int k = 0; k < k_count; ++k) {
    d_sh[3 * k + 0] = b[k] * dc[0];
    d_sh[3 * k + 1] = b[k] * dc[1];
    d_sh[3 * k + 2] = b[k] * dc[2];
    float s = sh[3 * k + 0] * dc[0] + sh[3 * k + 1] * dc[1] + sh[3 * k + 2] * dc[2];
    d_dir = d_dir + s * db[k];
  }
  // dir = v / |v|: d v = (d_dir - dir (dir . d_dir)) / |v|
  return inv * (d_dir - dot(dir, d_dir) * dir);
}
