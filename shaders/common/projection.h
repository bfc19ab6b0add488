// EWA projection of one 3D Gaussian to the image plane, and its backward.
// Conventions: docs/architecture.md "Projection".
#pragma once
#include "camera.h"

// The 2D filter added to every projected covariance (in pixels^2): the
// reference 3DGS dilation, and the mip-splatting filter of the antialiased mode.
#define SPLAT_COV2D_DILATION 0.3f

// What projection produces for one Gaussian; radius 0 means invisible.
struct ProjectedGaussian {
  vec2 mean2d;
  vec3 conic;  // (A, B, C) of the inverse 2D covariance
  float depth;
  float opacity_scale;  // antialiased: the filter's opacity compensation; else 1
  int radius;
  int tile_min_x, tile_min_y, tile_max_x, tile_max_y;  // tile rect [min, max)
};

// Rotation matrix of the unit quaternion (w, x, y, z).
SPLAT_FUNC mat3 quat_to_rotation(float w, float x, float y, float z) {
  mat3 r;
  r.m[0][0] = 1.f - 2.f * (y * y + z * z);
  r.m[0][1] = 2.f * (x * y - w * z);
  r.m[0][2] = 2.f * (x * z + w * y);
  r.m[1][0] = 2.f * (x * y + w * z);
  r.m[1][1] = 1.f - 2.f * (x * x + z * z);
  r.m[1][2] = 2.f * (y * z - w * x);
  r.m[2][0] = 2.f * (x * z - w * y);
  r.m[2][1] = 2.f * (y * z + w * x);
  r.m[2][2] = 1.f - 2.f * (x * x + y * y);
  return r;
}

// M = R S: columns of R scaled by the Gaussian's scales; Sigma = M M^T.
SPLAT_FUNC mat3 scaled_rotation(mat3 rot, vec3 scale) {
  mat3 m;
  for (int i = 0; i < 3; ++i) {
    m.m[i][0] = rot.m[i][0] * scale.x;
    m.m[i][1] = rot.m[i][1] * scale.y;
    m.m[i][2] = rot.m[i][2] * scale.z;
  }
  return m;
}

// The projection Jacobian (rows 0 and 1; J[0][1] = J[1][0] = 0) with the
// view-space x/z and y/z clamped to 1.3 tan(fov/2), as in the reference 3DGS.
struct ProjectionJacobian {
  float j00, j02, j11, j12;
  float u, v;            // clamped t.x / t.z and t.y / t.z
  bool clamped_x, clamped_y;
};

SPLAT_FUNC ProjectionJacobian projection_jacobian(SPLAT_CONST_MEM const CameraParams& cam, vec3 t) {
  ProjectionJacobian jac;
  float lim_x = 1.3f * cam.tan_fovx;
  float lim_y = 1.3f * cam.tan_fovy;
  float ux = t.x / t.z;
  float uy = t.y / t.z;
  jac.clamped_x = ux < -lim_x || ux > lim_x;
  jac.clamped_y = uy < -lim_y || uy > lim_y;
  jac.u = sp_clamp(ux, -lim_x, lim_x);
  jac.v = sp_clamp(uy, -lim_y, lim_y);
  jac.j00 = cam.fx / t.z;
  jac.j11 = cam.fy / t.z;
  jac.j02 = -cam.fx * jac.u / t.z;  // -fx tx / z^2 with tx = u z
  jac.j12 = -cam.fy * jac.v / t.z;
  return jac;
}

// T = J R_w (2x3): rows of the view-to-screen linear map.
SPLAT_FUNC void screen_map(ProjectionJacobian jac, mat3 rw, SPLAT_THREAD float (&tm)[2][3]) {
  for (int k = 0; k < 3; ++k) {
    tm[0][k] = jac.j00 * rw.m[0][k] + jac.j02 * rw.m[2][k];
    tm[1][k] = jac.j11 * rw.m[1][k] + jac.j12 * rw.m[2][k];
  }
}

// The screen-space covariance (J R_w) M M^T (J R_w)^T + 0.3 I, with the
// factors the backward reuses.
struct ScreenCovariance {
  ProjectionJacobian jac;
  float tm[2][3];   // T = J R_w
  float tmm[2][3];  // T M
  float a, b, c;    // cov2d = [[a, b], [b, c]]
  float a0, c0;     // the diagonal before the dilation
};

SPLAT_FUNC ScreenCovariance screen_covariance(SPLAT_CONST_MEM const CameraParams& cam, vec3 t, mat3 rw, mat3 m) {
  ScreenCovariance sc;
  sc.jac = projection_jacobian(cam, t);
  screen_map(sc.jac, rw, sc.tm);
  for (int r = 0; r < 2; ++r)
    for (int k = 0; k < 3; ++k)
      sc.tmm[r][k] = sc.tm[r][0] * m.m[0][k] + sc.tm[r][1] * m.m[1][k] + sc.tm[r][2] * m.m[2][k];
  sc.a0 = sc.tmm[0][0] * sc.tmm[0][0] + sc.tmm[0][1] * sc.tmm[0][1] + sc.tmm[0][2] * sc.tmm[0][2];
  sc.b = sc.tmm[0][0] * sc.tmm[1][0] + sc.tmm[0][1] * sc.tmm[1][1] + sc.tmm[0][2] * sc.tmm[1][2];
  sc.c0 = sc.tmm[1][0] * sc.tmm[1][0] + sc.tmm[1][1] * sc.tmm[1][1] + sc.tmm[1][2] * sc.tmm[1][2];
  sc.a = sc.a0 + SPLAT_COV2D_DILATION;
  sc.c = sc.c0 + SPLAT_COV2D_DILATION;
  return sc;
}

// The antialiased mode's opacity compensation (mip-splatting's 2D filter, as
// gsplat's rasterize_mode="antialiased"): the dilated splat keeps the
// undilated one's integral, opacity x sqrt(det(cov2d - 0.3 I) / det(cov2d)).
// 0 where the undilated covariance is degenerate (rounding below 0), and at
// most 1, as it is exactly: the cancellation in a thin splat's determinants can
// round the ratio past 1, and the blend relies on opacities of at most 1
// (SPLAT_SIGMA_SKIP, blend.h).
SPLAT_FUNC float antialias_compensation(SPLAT_THREAD const ScreenCovariance& sc) {
  float det = sc.a * sc.c - sc.b * sc.b;
  float det0 = sc.a0 * sc.c0 - sc.b * sc.b;
  return sp_sqrt(sp_clamp(det0 / det, 0.f, 1.f));
}

// dL/d(a, b, c) of the compensation k given dL/dk, added to (ga, gb, gc); b
// is the one off-diagonal scalar. With f = 0.3 and d = det(cov2d),
// dk/da = f (c (c - f) + b^2) / (2 k d^2), dk/dc likewise with a, and
// dk/db = -f b (a + c - f) / (k d^2): exact where k > 0, 0 where the clamp at 0
// holds. The clamp at 1 corrects rounding, not the function (smooth there, just
// under 1), so the derivative is the function's.
SPLAT_FUNC void antialias_compensation_backward(SPLAT_THREAD const ScreenCovariance& sc, float comp, float d_comp,
                                                SPLAT_THREAD float& ga, SPLAT_THREAD float& gb,
                                                SPLAT_THREAD float& gc) {
  if (!(comp > 0.f) || d_comp == 0.f) return;
  const float f = SPLAT_COV2D_DILATION;
  // Each factor over det once (not k over det^2, which overflows for large splats).
  const float id = 1.f / (sc.a * sc.c - sc.b * sc.b);
  const float k = d_comp * f / (2.f * comp);
  const float bi = sc.b * id;
  ga += k * ((sc.c * id) * (sc.c0 * id) + bi * bi);
  gc += k * ((sc.a * id) * (sc.a0 * id) + bi * bi);
  gb -= k * 2.f * bi * ((sc.a0 + sc.c) * id);
}

// The tile rect [min, max) a splat of `radius` around `mean2d` touches.
SPLAT_FUNC bool tile_rect(vec2 mean2d, int radius, uint32_t tiles_x, uint32_t tiles_y,
                          SPLAT_THREAD ProjectedGaussian& p) {
  float r = (float)radius;
  float ts = (float)SPLAT_TILE_SIZE;
  p.tile_min_x = (int)sp_clamp(sp_floor((mean2d.x - r) / ts), 0.f, (float)tiles_x);
  p.tile_min_y = (int)sp_clamp(sp_floor((mean2d.y - r) / ts), 0.f, (float)tiles_y);
  p.tile_max_x = (int)sp_clamp(sp_ceil((mean2d.x + r) / ts), 0.f, (float)tiles_x);
  p.tile_max_y = (int)sp_clamp(sp_ceil((mean2d.y + r) / ts), 0.f, (float)tiles_y);
  return p.tile_max_x > p.tile_min_x && p.tile_max_y > p.tile_min_y;
}

// Projects one Gaussian. Returns false (and radius 0) when it is invisible:
// outside [near, far], a degenerate 2D covariance, or no tile touched.
// `antialiased`: p.opacity_scale is the filter's compensation (else 1).
SPLAT_FUNC bool project_gaussian(SPLAT_CONST_MEM const CameraParams& cam, vec3 mean, vec3 log_scale,
                                 float qw, float qx, float qy, float qz, bool antialiased,
                                 SPLAT_THREAD ProjectedGaussian& p) {
  p.radius = 0;
  p.opacity_scale = 1.f;
  p.tile_min_x = p.tile_min_y = p.tile_max_x = p.tile_max_y = 0;
  vec3 t = world_to_view(cam, mean);
  p.depth = t.z;
  if (!(t.z >= cam.near_plane && t.z <= cam.far_plane)) return false;

  float qn = sp_sqrt(qw * qw + qx * qx + qy * qy + qz * qz);
  mat3 rot = quat_to_rotation(qw / qn, qx / qn, qy / qn, qz / qn);
  vec3 scale = make_vec3(sp_exp(log_scale.x), sp_exp(log_scale.y), sp_exp(log_scale.z));
  mat3 m = scaled_rotation(rot, scale);

  ScreenCovariance sc = screen_covariance(cam, t, camera_rotation(cam), m);
  float a = sc.a, b = sc.b, c = sc.c;
  float det = a * c - b * b;
  if (!(det > 0.f)) return false;
  p.conic = make_vec3(c / det, -b / det, a / det);
  if (antialiased) p.opacity_scale = antialias_compensation(sc);
  p.mean2d = make_vec2(cam.fx * t.x / t.z + cam.cx, cam.fy * t.y / t.z + cam.cy);
  float mid = 0.5f * (a + c);
  float lambda_max = mid + sp_sqrt(sp_max(0.1f, mid * mid - det));
  // Capped at 2^30 pixels (past any image side) so the conversion stays in int's range.
  int radius = (int)sp_ceil(sp_min(3.f * sp_sqrt(lambda_max), 1073741824.f));
  if (!tile_rect(p.mean2d, radius, cam.tiles_x, cam.tiles_y, p)) return false;
  p.radius = radius;
  return true;
}

// Gradients of the projection inputs.
struct ProjectionGrads {
  vec3 mean;
  vec3 log_scale;
  float quat[4];
};

// Backward of project_gaussian for a visible Gaussian, given dL/d mean2d,
// dL/d conic and (antialiased; else 0) dL/d opacity_scale. The clamp of x/z
// and y/z is differentiated exactly: a clamped coordinate contributes
// through t.z only.
SPLAT_FUNC ProjectionGrads project_gaussian_backward(SPLAT_CONST_MEM const CameraParams& cam, vec3 mean,
                                                     vec3 log_scale, float qw, float qx, float qy,
                                                     float qz, vec2 d_mean2d, vec3 d_conic,
                                                     float d_opacity_scale) {
  vec3 t = world_to_view(cam, mean);
  float qn = sp_sqrt(qw * qw + qx * qx + qy * qy + qz * qz);
  float w = qw / qn, x = qx / qn, y = qy / qn, z = qz / qn;
  mat3 rot = quat_to_rotation(w, x, y, z);
  vec3 scale = make_vec3(sp_exp(log_scale.x), sp_exp(log_scale.y), sp_exp(log_scale.z));
  mat3 m = scaled_rotation(rot, scale);
  mat3 rw = camera_rotation(cam);
  const ScreenCovariance sc = screen_covariance(cam, t, rw, m);
  const ProjectionJacobian jac = sc.jac;
  const float a = sc.a, b = sc.b, c = sc.c;
  float det = a * c - b * b;

  // conic K = (c, -b, a) / det = cov2d^-1  ->  dL/dcov2d = -K dL/dK K, formed from
  // K's own entries: the form over det^2 overflowed (det^2 past 3.4e38, then 0 x inf)
  // for a splat of ~1e5 pixels, as a large Gaussian a hundredth from the camera is.
  const float ka = c / det, kb = -b / det, kc = a / det;
  float dA = d_conic.x, dB = d_conic.y, dC = d_conic.z;
  float ga = -(ka * ka * dA + ka * kb * dB + kb * kb * dC);
  float gc = -(kb * kb * dA + kb * kc * dB + kc * kc * dC);
  float gb = -(2.f * ka * kb * dA + (ka * kc + kb * kb) * dB + 2.f * kb * kc * dC);
  if (d_opacity_scale != 0.f)
    antialias_compensation_backward(sc, antialias_compensation(sc), d_opacity_scale, ga, gb, gc);
  // Symmetric G with cov2d = T Sigma T^T: dL/dcov2d = [[ga, gb/2], [gb/2, gc]].
  float g[2][2] = {{ga, 0.5f * gb}, {0.5f * gb, gc}};

  // dL/dSigma = T^T G T (3x3 symmetric);   dL/dT = 2 G T Sigma.
  // With Sigma = M M^T: dL/dM = 2 dL/dSigma M; and T Sigma = (T M) M^T.
  float gt[2][3];  // G T
  for (int r = 0; r < 2; ++r)
    for (int k = 0; k < 3; ++k) gt[r][k] = g[r][0] * sc.tm[0][k] + g[r][1] * sc.tm[1][k];
  mat3 d_sigma;
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j) d_sigma.m[i][j] = sc.tm[0][i] * gt[0][j] + sc.tm[1][i] * gt[1][j];
  float d_tm[2][3];  // 2 G (T M) M^T
  for (int r = 0; r < 2; ++r) {
    float gtmm[3];
    for (int k = 0; k < 3; ++k) gtmm[k] = g[r][0] * sc.tmm[0][k] + g[r][1] * sc.tmm[1][k];
    for (int i = 0; i < 3; ++i)
      d_tm[r][i] = 2.f * (gtmm[0] * m.m[i][0] + gtmm[1] * m.m[i][1] + gtmm[2] * m.m[i][2]);
  }
  // T = J R_w: dL/dJ = dL/dT R_w^T; only j00, j02, j11, j12 are non-zero.
  float d_j00 = d_tm[0][0] * rw.m[0][0] + d_tm[0][1] * rw.m[0][1] + d_tm[0][2] * rw.m[0][2];
  float d_j02 = d_tm[0][0] * rw.m[2][0] + d_tm[0][1] * rw.m[2][1] + d_tm[0][2] * rw.m[2][2];
  float d_j11 = d_tm[1][0] * rw.m[1][0] + d_tm[1][1] * rw.m[1][1] + d_tm[1][2] * rw.m[1][2];
  float d_j12 = d_tm[1][0] * rw.m[2][0] + d_tm[1][1] * rw.m[2][1] + d_tm[1][2] * rw.m[2][2];

  float iz = 1.f / t.z;
  float iz2 = iz * iz;
  // j00 = fx/z; j02 = -fx u / z with u = clamp(x/z): du/dx = 1/z, du/dz = -x/z^2 unless clamped.
  float d_tx = 0.f, d_ty = 0.f, d_tz = 0.f;
  d_tz += -cam.fx * iz2 * d_j00 - cam.fy * iz2 * d_j11;
  d_tz += cam.fx * jac.u * iz2 * d_j02 + cam.fy * jac.v * iz2 * d_j12;
  if (!jac.clamped_x) {
    d_tx += -cam.fx * iz2 * d_j02;
    d_tz += cam.fx * t.x * iz2 * iz * d_j02;
  }
  if (!jac.clamped_y) {
    d_ty += -cam.fy * iz2 * d_j12;
    d_tz += cam.fy * t.y * iz2 * iz * d_j12;
  }
  // mean2d = (fx x/z + cx, fy y/z + cy)
  d_tx += cam.fx * iz * d_mean2d.x;
  d_ty += cam.fy * iz * d_mean2d.y;
  d_tz += -cam.fx * t.x * iz2 * d_mean2d.x - cam.fy * t.y * iz2 * d_mean2d.y;

  ProjectionGrads out;
  out.mean = mat3_apply_transposed(rw, make_vec3(d_tx, d_ty, d_tz));

  // dL/dM = 2 dL/dSigma M
  mat3 d_m;
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j)
      d_m.m[i][j] = 2.f * (d_sigma.m[i][0] * m.m[0][j] + d_sigma.m[i][1] * m.m[1][j] +
                           d_sigma.m[i][2] * m.m[2][j]);
  // M[i][j] = R[i][j] s_j
  float d_s[3] = {0.f, 0.f, 0.f};
  mat3 d_r;
  for (int i = 0; i < 3; ++i) {
    d_s[0] += d_m.m[i][0] * rot.m[i][0];
    d_s[1] += d_m.m[i][1] * rot.m[i][1];
    d_s[2] += d_m.m[i][2] * rot.m[i][2];
    d_r.m[i][0] = d_m.m[i][0] * scale.x;
    d_r.m[i][1] = d_m.m[i][1] * scale.y;
    d_r.m[i][2] = d_m.m[i][2] * scale.z;
  }
  out.log_scale = make_vec3(d_s[0] * scale.x, d_s[1] * scale.y, d_s[2] * scale.z);

  // Rotation of the unit quaternion -> d(w, x, y, z)
  float R00 = d_r.m[0][0], R01 = d_r.m[0][1], R02 = d_r.m[0][2];
  float R10 = d_r.m[1][0], R11 = d_r.m[1][1], R12 = d_r.m[1][2];
  float R20 = d_r.m[2][0], R21 = d_r.m[2][1], R22 = d_r.m[2][2];
  float dw = 2.f * (-z * R01 + y * R02 + z * R10 - x * R12 - y * R20 + x * R21);
  float dx = 2.f * (y * R01 + z * R02 + y * R10 - 2.f * x * R11 - w * R12 + z * R20 + w * R21 -
                    2.f * x * R22);
  float dy = 2.f * (-2.f * y * R00 + x * R01 + w * R02 + x * R10 + z * R12 - w * R20 + z * R21 -
                    2.f * y * R22);
  float dz = 2.f * (-2.f * z * R00 - w * R01 + x * R02 + w * R10 - 2.f * z * R11 + y * R12 +
                    x * R20 + y * R21);
  // normalization q / |q|: project out the radial component
  float qdot = w * dw + x * dx + y * dy + z * dz;
  out.quat[0] = (dw - w * qdot) / qn;
  out.quat[1] = (dx - x * qdot) / qn;
  out.quat[2] = (dy - y * qdot) / qn;
  out.quat[3] = (dz - z * qdot) / qn;
  return out;
}
