// Python values <-> the native Trainer's types (trainer_conversions.h).
#include "trainer_conversions.h"

#include <cstring>

#include "splat/errors.h"

namespace nb = nanobind;

namespace splat::bindings {

const char* const kParamNames[5] = {"means", "log_scales", "quats", "opacity_logits", "sh"};

FloatOut float_array(const std::vector<float>& src, std::initializer_list<size_t> shape) {
  float* data = new float[src.size() > 0 ? src.size() : 1];
  std::memcpy(data, src.data(), src.size() * sizeof(float));
  nb::capsule owner(data, [](void* p) noexcept { delete[] static_cast<float*>(p); });
  return FloatOut(data, shape.size(), shape.begin(), owner);
}

std::vector<float> to_vector(nb::handle array, const std::string& name, size_t expected) {
  FloatIn a;
  if (!nb::try_cast(array, a)) throw ConfigError("[trainer] state." + name + ": expected a float32 C-contiguous array");
  if (a.size() != expected)
    throw ConfigError("[trainer] state." + name + ": expected " + std::to_string(expected) + " values, got " +
                      std::to_string(a.size()));
  return std::vector<float>(a.data(), a.data() + a.size());
}

// dict -> TrainingState. Moments and statistics are optional (zero).
TrainingState state_from_dict(nb::dict d) {
  TrainingState s;
  FloatIn means = nb::cast<FloatIn>(d["means"]);
  s.count = means.ndim() == 2 ? means.shape(0) : 0;
  FloatIn sh = nb::cast<FloatIn>(d["sh"]);
  s.sh_stride = sh.ndim() == 3 ? static_cast<uint32_t>(sh.shape(1)) : 16;
  for (int a = 0; a < 5; ++a) {
    size_t len = s.count * param_width(a, s.sh_stride);
    s.params[a] = to_vector(d[kParamNames[a]], kParamNames[a], len);
    std::string m = std::string("adam_m.") + kParamNames[a], v = std::string("adam_v.") + kParamNames[a];
    if (d.contains(m.c_str())) s.adam_m[a] = to_vector(d[m.c_str()], m, len);
    if (d.contains(v.c_str())) s.adam_v[a] = to_vector(d[v.c_str()], v, len);
    if (s.adam_m[a].empty() != s.adam_v[a].empty()) throw ConfigError("[trainer] state: " + m + " without " + v);
  }
  for (const char* key : {"grad_accum", "grad_count", "max_radii"}) {
    if (!d.contains(key)) continue;
    auto& dst = std::string(key) == "grad_accum" ? s.grad_accum : std::string(key) == "grad_count" ? s.grad_count : s.max_radii;
    dst = to_vector(d[key], key, s.count);
  }
  if (d.contains("scale_ceiling")) s.scale_ceiling = to_vector(d["scale_ceiling"], "scale_ceiling", s.count);
  // Exposure corrections [views, 3, 4] and their moments (the device checks
  // the view count).
  const char* const exposure_keys[3] = {"exposure", "adam_m.exposure", "adam_v.exposure"};
  std::vector<float>* exposure_dst[3] = {&s.exposure, &s.exposure_m, &s.exposure_v};
  for (int k = 0; k < 3; ++k) {
    if (!d.contains(exposure_keys[k])) continue;
    FloatIn a;
    if (!nb::try_cast(d[exposure_keys[k]], a) || a.size() % kExposureFloats != 0)
      throw ConfigError(std::string("[trainer] state.") + exposure_keys[k] +
                        ": expected a float32 C-contiguous [views, 3, 4] array");
    *exposure_dst[k] = std::vector<float>(a.data(), a.data() + a.size());
  }
  return s;
}

nb::dict state_to_dict(const TrainingState& s) {
  nb::dict d;
  for (int a = 0; a < 5; ++a) {
    auto shape = [&](int arr) -> std::vector<size_t> {
      switch (arr) {
        case 0:
        case 1:
          return {s.count, 3};
        case 2:
          return {s.count, 4};
        case 3:
          return {s.count};
        default:
          return {s.count, s.sh_stride, 3};
      }
    };
    auto sh = shape(a);
    auto make = [&](const std::vector<float>& v) {
      float* data = new float[v.size() > 0 ? v.size() : 1];
      std::memcpy(data, v.data(), v.size() * sizeof(float));
      nb::capsule owner(data, [](void* p) noexcept { delete[] static_cast<float*>(p); });
      return FloatOut(data, sh.size(), sh.data(), owner);
    };
    d[kParamNames[a]] = make(s.params[a]);
    d[(std::string("adam_m.") + kParamNames[a]).c_str()] = make(s.adam_m[a]);
    d[(std::string("adam_v.") + kParamNames[a]).c_str()] = make(s.adam_v[a]);
  }
  d["grad_accum"] = float_array(s.grad_accum, {s.count});
  d["grad_count"] = float_array(s.grad_count, {s.count});
  d["max_radii"] = float_array(s.max_radii, {s.count});
  if (!s.scale_ceiling.empty()) d["scale_ceiling"] = float_array(s.scale_ceiling, {s.count});
  if (!s.exposure.empty()) {
    const size_t views = s.exposure.size() / kExposureFloats;
    d["exposure"] = float_array(s.exposure, {views, 3, 4});
    d["adam_m.exposure"] = float_array(s.exposure_m, {views, 3, 4});
    d["adam_v.exposure"] = float_array(s.exposure_v, {views, 3, 4});
  }
  return d;
}

namespace {

// A value the native type cannot hold (an integer past 32 bits, a negative
// count) is a named error here, never nanobind's bare std::bad_cast.
template <class T>
void read_setting(nb::dict d, const char* key, T& dst) {
  if (!d.contains(key)) return;
  if (!nb::try_cast(d[key], dst))
    throw ConfigError(std::string("[trainer] settings.") + key + ": " +
                      nb::repr(d[key]).c_str() + " does not fit the native type");
}

}  // namespace

TrainSettings settings_from_dict(nb::dict d) {
  TrainSettings s;
#define SPLAT_READ(name) read_setting(d, #name, s.name)
  SPLAT_READ(steps);
  SPLAT_READ(means_lr);
  SPLAT_READ(means_lr_final);
  SPLAT_READ(log_scales_lr);
  SPLAT_READ(quats_lr);
  SPLAT_READ(opacity_lr);
  SPLAT_READ(sh_dc_lr);
  SPLAT_READ(sh_rest_lr);
  SPLAT_READ(lr_final_fraction);
  SPLAT_READ(opacity_reg);
  SPLAT_READ(scale_reg);
  SPLAT_READ(reg_from);
  SPLAT_READ(adam_eps);
  SPLAT_READ(adam_beta1);
  SPLAT_READ(adam_beta2);
  SPLAT_READ(sh_degree);
  SPLAT_READ(sh_degree_interval);
  SPLAT_READ(densify_from);
  SPLAT_READ(densify_until);
  SPLAT_READ(cap_scale_growth);
  SPLAT_READ(prune_low_weight);
  SPLAT_READ(densify_every);
  SPLAT_READ(densify_grad_threshold);
  SPLAT_READ(percent_dense);
  SPLAT_READ(split_count);
  SPLAT_READ(split_scale_divisor);
  SPLAT_READ(prune_opacity);
  SPLAT_READ(prune_max_screen_radius);
  SPLAT_READ(prune_near_scale_per_px);
  SPLAT_READ(prune_max_world_scale);
  SPLAT_READ(opacity_resets);
  SPLAT_READ(opacity_reset_every);
  SPLAT_READ(opacity_reset_value);
  SPLAT_READ(ssim_weight);
  SPLAT_READ(seed);
  SPLAT_READ(random_background);
  SPLAT_READ(max_gaussians);
  SPLAT_READ(antialiased);
  SPLAT_READ(chunked_stop);
  SPLAT_READ(mcmc);
  SPLAT_READ(mcmc_refine_from);
  SPLAT_READ(mcmc_refine_until);
  SPLAT_READ(mcmc_refine_every);
  SPLAT_READ(mcmc_growth);
  SPLAT_READ(mcmc_min_opacity);
  SPLAT_READ(mcmc_noise_lr);
  SPLAT_READ(mcmc_opacity_reg);
  SPLAT_READ(mcmc_scale_reg);
  SPLAT_READ(visible_adam);
  SPLAT_READ(bf16_moments);
  SPLAT_READ(num_downscales);
  SPLAT_READ(resolution_schedule);
  SPLAT_READ(batch_views);
  SPLAT_READ(absgrad);
  SPLAT_READ(absgrad_grad_threshold);
  SPLAT_READ(exposure);
  SPLAT_READ(exposure_lr);
  SPLAT_READ(exposure_lr_final);
  SPLAT_READ(scene_extent);
  SPLAT_READ(image_budget_bytes);
#undef SPLAT_READ
  if (d.contains("background")) {
    nb::sequence bg = nb::cast<nb::sequence>(d["background"]);
    for (int c = 0; c < 3; ++c) s.background[c] = nb::cast<float>(bg[c]);
  }
  return s;
}

// The training views: uint8 [H,W,3] images (one per camera, each its own
// size) and optional uint8 [H,W] masks (None: every pixel counts).
std::vector<TrainingImage> images_from(nb::list images, nb::object masks, size_t views, nb::object copied) {
  if (images.size() != views) throw ConfigError("[trainer] images: expected one uint8 [H,W,3] image per camera");
  const bool have_masks = !masks.is_none();
  nb::list mask_list = have_masks ? nb::cast<nb::list>(masks) : nb::list();
  if (have_masks && mask_list.size() != views) throw ConfigError("[trainer] masks: expected one entry per camera");
  std::vector<TrainingImage> out(views);
  for (size_t v = 0; v < views; ++v) {
    ByteIn im;
    if (!nb::try_cast(images[v], im, false) || im.ndim() != 3 || im.shape(2) != 3 || im.shape(0) == 0 || im.shape(1) == 0)
      throw ConfigError("[trainer] images[" + std::to_string(v) + "]: expected a uint8 C-contiguous [H,W,3] array");
    out[v].rgb = im.data();
    out[v].height = static_cast<uint32_t>(im.shape(0));
    out[v].width = static_cast<uint32_t>(im.shape(1));
    // Called during the upload, in this thread with the GIL held (the
    // constructor keeps it): the caller may drop view v's arrays.
    if (!copied.is_none()) out[v].copied = [copied, v]() { copied(v); };
    if (!have_masks || mask_list[v].is_none()) continue;
    ByteIn m;
    if (!nb::try_cast(mask_list[v], m, false) || m.ndim() != 2 || m.shape(0) != im.shape(0) || m.shape(1) != im.shape(1))
      throw ConfigError("[trainer] masks[" + std::to_string(v) + "]: expected a uint8 C-contiguous [H,W] array the "
                        "size of images[" + std::to_string(v) + "]");
    out[v].mask = m.data();
  }
  return out;  // the arrays stay alive in the caller's lists during the upload
}

std::vector<CameraParams> cameras_from(FloatIn w2c, FloatIn intrinsics, const std::vector<TrainingImage>& images) {
  if (w2c.ndim() != 3 || w2c.shape(1) != 4 || w2c.shape(2) != 4)
    throw ConfigError("[trainer] world_to_camera: expected [V,4,4]");
  if (intrinsics.ndim() != 2 || intrinsics.shape(0) != w2c.shape(0) || intrinsics.shape(1) != 4)
    throw ConfigError("[trainer] intrinsics: expected [V,4] (fx, fy, cx, cy)");
  std::vector<CameraParams> cams;
  for (size_t v = 0; v < w2c.shape(0); ++v) {
    const float* k = intrinsics.data() + 4 * v;
    cams.push_back(make_camera_params(w2c.data() + 16 * v, k[0], k[1], k[2], k[3], images[v].width,
                                      images[v].height));
  }
  return cams;
}

}  // namespace splat::bindings
