// Plain views over caller-owned arrays, passed across the Device interface.
#pragma once
#include <cstddef>
#include <cstdint>

#include "../../../shaders/common/params.h"

namespace splat {

// The Gaussian parameters, float32 SoA (docs/architecture.md "Parameters").
struct GaussiansView {
  const float* means = nullptr;           // [N,3]
  const float* log_scales = nullptr;      // [N,3]
  const float* quats = nullptr;           // [N,4] (w,x,y,z)
  const float* opacity_logits = nullptr;  // [N]
  const float* sh = nullptr;              // [N,K,3]
  size_t count = 0;                       // N
  uint32_t sh_stride = 1;                 // K
};

// Outputs of a forward pass, [H,W,3], [H,W], [N].
struct ForwardOutputs {
  float* image = nullptr;
  float* alpha = nullptr;
  int32_t* radii = nullptr;
};

// Gradients of a backward pass, shaped like GaussiansView plus means2d [N,2].
struct GradientOutputs {
  float* means = nullptr;
  float* log_scales = nullptr;
  float* quats = nullptr;
  float* opacity_logits = nullptr;
  float* sh = nullptr;
  float* means2d = nullptr;
  // [N,2] or null: each pixel's term of d loss / d mean2d summed in absolute
  // value, x and y apart (the absgrad densification statistic, pixels). The
  // CPU backward fills it when given; the GPU training step has its own.
  float* means2d_abs = nullptr;
};

// Fills the derived camera fields (centre, tan fov, tiles, planes) of a
// CameraParams from its world-to-camera rows and intrinsics.
CameraParams make_camera_params(const float w2c_4x4[16], float fx, float fy, float cx, float cy,
                                uint32_t width, uint32_t height);
// `c` seen at 1/factor of its resolution: size floor(width / factor) x
// floor(height / factor) and the intrinsics divided by `factor` (the pixel
// grid's edges stay where they were: factor x factor pixels become one); the
// rest derived as make_camera_params derives it.
CameraParams downscaled_camera(const CameraParams& c, uint32_t factor);

}  // namespace splat
