// Argument structs shared by the host and every kernel target.
//
// Only 4-byte scalars and arrays of them: identical layout in C++, CUDA and
// MSL (no float3, whose size differs in MSL). Sizes and offsets are
// static_assert'ed here, which every target compiles.
#pragma once
#include "compat.h"

#define SPLAT_TILE_SIZE 16
#define SPLAT_NEAR_PLANE 0.01f
#define SPLAT_FAR_PLANE 1e10f
#define SPLAT_MAX_SH_COEFFS 16

// The camera of one view. w2c holds the first three rows of the 4x4
// world-to-camera matrix, row-major (OpenCV axes).
struct CameraParams {
  float w2c[12];
  float fx, fy, cx, cy;
  float center[3];  // camera centre in world space, -R^T t
  float tan_fovx, tan_fovy;
  uint32_t width, height;
  uint32_t tiles_x, tiles_y;
  float near_plane, far_plane;
};
SPLAT_STATIC_ASSERT(sizeof(CameraParams) == 108, "CameraParams layout");

// Per-call scene description for projection and rasterization.
struct RasterParams {
  uint32_t num_gaussians;
  uint32_t sh_degree;   // degree evaluated (0..3)
  uint32_t sh_stride;   // coefficients stored per Gaussian (K)
  uint32_t num_tiles;
  float background[3];
  uint32_t pad0;
};
SPLAT_STATIC_ASSERT(sizeof(RasterParams) == 32, "RasterParams layout");
