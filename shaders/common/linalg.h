// 3x3 matrices in registers, row-major, for projection and its backward.
#pragma once
#include "compat.h"

struct mat3 {
  float m[3][3];
};

SPLAT_FUNC mat3 mat3_mul(mat3 a, mat3 b) {
  mat3 r;
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j)
      r.m[i][j] = a.m[i][0] * b.m[0][j] + a.m[i][1] * b.m[1][j] + a.m[i][2] * b.m[2][j];
  return r;
}

SPLAT_FUNC mat3 mat3_transpose(mat3 a) {
  mat3 r;
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j) r.m[i][j] = a.m[j][i];
  return r;
}

SPLAT_FUNC vec3 mat3_apply(mat3 a, vec3 v) {
  return make_vec3(a.m[0][0] * v.x + a.m[0][1] * v.y + a.m[0][2] * v.z,
                   a.m[1][0] * v.x + a.m[1][1] * v.y + a.m[1][2] * v.z,
                   a.m[2][0] * v.x + a.m[2][1] * v.y + a.m[2][2] * v.z);
}

// a^T v
SPLAT_FUNC vec3 mat3_apply_transposed(mat3 a, vec3 v) {
  return make_vec3(a.m[0][0] * v.x + a.m[1][0] * v.y + a.m[2][0] * v.z,
                   a.m[0][1] * v.x + a.m[1][1] * v.y + a.m[2][1] * v.z,
                   a.m[0][2] * v.x + a.m[1][2] * v.y + a.m[2][2] * v.z);
}
