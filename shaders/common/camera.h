// Camera transforms shared by projection and colour.
#pragma once
#include "linalg.h"
#include "params.h"

SPLAT_FUNC mat3 camera_rotation(SPLAT_CONST_MEM const CameraParams& cam) {
  mat3 r;
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j) r.m[i][j] = cam.w2c[i * 4 + j];
  return r;
}

// View-space position t = R mean + t_w.
SPLAT_FUNC vec3 world_to_view(SPLAT_CONST_MEM const CameraParams& cam, vec3 p) {
  return make_vec3(cam.w2c[0] * p.x + cam.w2c[1] * p.y + cam.w2c[2] * p.z + cam.w2c[3],
                   cam.w2c[4] * p.x + cam.w2c[5] * p.y + cam.w2c[6] * p.z + cam.w2c[7],
                   cam.w2c[8] * p.x + cam.w2c[9] * p.y + cam.w2c[10] * p.z + cam.w2c[11]);
}

SPLAT_FUNC vec3 camera_center(SPLAT_CONST_MEM const CameraParams& cam) {
  return make_vec3(cam.center[0], cam.center[1], cam.center[2]);
}
