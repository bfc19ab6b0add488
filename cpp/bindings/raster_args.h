// The arguments of a rasterizer forward as the bindings receive them (numpy
// arrays or DLPack views): checked against the native code's assumptions and
// turned into the Device's GaussiansView, CameraParams and background. The
// numpy Rasterizer (rasterizer.cpp) and the view rasterizer (raster_views.cpp)
// both go through here; readable argument errors are Python's job.
#pragma once
#include <nanobind/ndarray.h>

#include <cstring>
#include <initializer_list>
#include <string>

#include "shaders/common/params.h"
#include "splat/errors.h"
#include "splat/types.h"

namespace splat::bindings {

// Throws ConfigError("[component] msg") unless ok.
inline void require_arg(const char* component, bool ok, const std::string& msg) {
  if (!ok) throw ConfigError(std::string("[") + component + "] " + msg);
}

template <class A>
void require_shape(const char* component, const A& a, const char* name, std::initializer_list<size_t> shape) {
  bool ok = a.ndim() == shape.size();
  size_t d = 0;
  for (size_t s : shape) ok = ok && a.shape(d++) == s;
  require_arg(component, ok, std::string(name) + ": unexpected shape");
}

struct RasterArgs {
  GaussiansView gaussians;
  CameraParams camera;
  float background[3];
  size_t n, k;  // Gaussians, SH coefficients per channel
};

// G: the parameter arrays' type, H: the host arrays' (world_to_camera, background).
template <class G, class H>
RasterArgs raster_args(const char* component, const G& means, const G& log_scales, const G& quats,
                       const G& opacity_logits, const G& sh, const H& w2c, float fx, float fy, float cx, float cy,
                       uint32_t width, uint32_t height, uint32_t sh_degree, const H& background, float near_plane,
                       float far_plane) {
  const size_t n = means.ndim() == 2 ? means.shape(0) : 0;
  require_shape(component, means, "means", {n, 3});
  require_shape(component, log_scales, "log_scales", {n, 3});
  require_shape(component, quats, "quats", {n, 4});
  require_shape(component, opacity_logits, "opacity_logits", {n});
  require_arg(component, sh.ndim() == 3 && sh.shape(0) == n && sh.shape(2) == 3, "sh: unexpected shape");
  const size_t k = sh.shape(1);
  require_arg(component, sh_degree <= 3 && k >= (sh_degree + 1) * (sh_degree + 1),
              "sh_degree: too few SH coefficients");
  require_arg(component, k <= SPLAT_MAX_SH_COEFFS, "sh: at most 16 coefficients per channel");
  require_shape(component, w2c, "world_to_camera", {4, 4});
  require_shape(component, background, "background", {3});
  require_arg(component, width > 0 && height > 0 && fx > 0 && fy > 0, "camera: non-positive size or focal");
  require_arg(component, near_plane > 0 && far_plane > near_plane, "near / far: need 0 < near < far");

  RasterArgs a;
  a.n = n;
  a.k = k;
  a.gaussians.means = means.data();
  a.gaussians.log_scales = log_scales.data();
  a.gaussians.quats = quats.data();
  a.gaussians.opacity_logits = opacity_logits.data();
  a.gaussians.sh = sh.data();
  a.gaussians.count = n;
  a.gaussians.sh_stride = static_cast<uint32_t>(k);
  a.camera = make_camera_params(w2c.data(), fx, fy, cx, cy, width, height);
  a.camera.near_plane = near_plane;
  a.camera.far_plane = far_plane;
  std::memcpy(a.background, background.data(), sizeof(a.background));
  return a;
}

}  // namespace splat::bindings
