#include <cmath>

#include "splat/limits.h"
#include "splat/types.h"

namespace splat {

CameraParams make_camera_params(const float w2c[16], float fx, float fy, float cx, float cy, uint32_t width,
                                uint32_t height) {
  check_image_size(width, height);  // before any image-sized buffer
  CameraParams c{};
  for (int i = 0; i < 12; ++i) c.w2c[i] = w2c[i];
  c.fx = fx;
  c.fy = fy;
  c.cx = cx;
  c.cy = cy;
  // centre = -R^T t, in double for accuracy
  for (int j = 0; j < 3; ++j) {
    double s = 0.0;
    for (int i = 0; i < 3; ++i) s -= static_cast<double>(w2c[i * 4 + j]) * w2c[i * 4 + 3];
    c.center[j] = static_cast<float>(s);
  }
  c.tan_fovx = 0.5f * static_cast<float>(width) / fx;
  c.tan_fovy = 0.5f * static_cast<float>(height) / fy;
  c.width = width;
  c.height = height;
  c.tiles_x = (width + SPLAT_TILE_SIZE - 1) / SPLAT_TILE_SIZE;
  c.tiles_y = (height + SPLAT_TILE_SIZE - 1) / SPLAT_TILE_SIZE;
  c.near_plane = SPLAT_NEAR_PLANE;
  c.far_plane = SPLAT_FAR_PLANE;
  return c;
}

CameraParams downscaled_camera(const CameraParams& c, uint32_t factor) {
  float w2c[16] = {0.f};
  for (int i = 0; i < 12; ++i) w2c[i] = c.w2c[i];
  w2c[15] = 1.f;
  const float f = static_cast<float>(factor);
  return make_camera_params(w2c, c.fx / f, c.fy / f, c.cx / f, c.cy / f, c.width / factor, c.height / factor);
}

}  // namespace splat
