// The native Trainer, the knn initialiser and native SSIM. Argument checking
// with readable messages lives in python/splat/trainer.py.
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>

#include <cmath>
#include <cstring>
#include <memory>
#include <optional>

#include "../cpu/cpu_loss.h"
#include "../cpu/knn.h"
#include "bindings.h"
#include "splat/errors.h"
#include "splat/trainer.h"

namespace nb = nanobind;

namespace splat::bindings {
namespace {

using FloatIn = nb::ndarray<const float, nb::c_contig, nb::device::cpu>;
using ByteIn = nb::ndarray<const uint8_t, nb::c_contig, nb::device::cpu>;
using FloatOut = nb::ndarray<nb::numpy, float>;

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
  if (!s.exposure.empty()) {
    const size_t views = s.exposure.size() / kExposureFloats;
    d["exposure"] = float_array(s.exposure, {views, 3, 4});
    d["adam_m.exposure"] = float_array(s.exposure_m, {views, 3, 4});
    d["adam_v.exposure"] = float_array(s.exposure_v, {views, 3, 4});
  }
  return d;
}

// A value the native type cannot hold (an integer past 32 bits, a negative
// count) is a named error here, never nanobind's bare std::bad_cast.
template <class T>
void read_setting(nb::dict d, const char* key, T& dst) {
  if (!d.contains(key)) return;
  if (!nb::try_cast(d[key], dst))
    throw ConfigError(std::string("[trainer] settings.") + key + ": " +
                      nb::repr(d[key]).c_str() + " does not fit the native type");
}

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
  SPLAT_READ(adam_eps);
  SPLAT_READ(adam_beta1);
  SPLAT_READ(adam_beta2);
  SPLAT_READ(sh_degree);
  SPLAT_READ(sh_degree_interval);
  SPLAT_READ(densify_from);
  SPLAT_READ(densify_until);
  SPLAT_READ(densify_every);
  SPLAT_READ(densify_grad_threshold);
  SPLAT_READ(percent_dense);
  SPLAT_READ(split_count);
  SPLAT_READ(split_scale_divisor);
  SPLAT_READ(prune_opacity);
  SPLAT_READ(prune_max_screen_radius);
  SPLAT_READ(prune_max_world_scale);
  SPLAT_READ(opacity_reset_every);
  SPLAT_READ(opacity_reset_value);
  SPLAT_READ(ssim_weight);
  SPLAT_READ(seed);
  SPLAT_READ(random_background);
  SPLAT_READ(max_gaussians);
  SPLAT_READ(antialiased);
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

class PyTrainer {
 public:
  PyTrainer(const BackendConfig& config, nb::dict settings, FloatIn w2c, FloatIn intrinsics, nb::list images,
            nb::object masks, nb::dict state, uint32_t step, nb::object copied) {
    if (w2c.ndim() != 3) throw ConfigError("[trainer] world_to_camera: expected [V,4,4]");
    std::vector<TrainingImage> views = images_from(images, masks, w2c.shape(0), copied);
    auto cams = cameras_from(w2c, intrinsics, views);
    TrainingState initial = state_from_dict(state);
    TrainSettings s = settings_from_dict(settings);
    trainer_ = std::make_unique<Trainer>(create_device(config), s, std::move(cams), views, initial, step);
  }

  nb::dict step(bool read_loss) {
    ObjectLock guard(mutex_);
    StepStats st;
    {
      nb::gil_scoped_release release;
      st = trainer_->step(read_loss);
    }
    nb::dict d;
    d["step"] = st.step;
    d["loss"] = st.loss;
    d["num_gaussians"] = st.num_gaussians;
    d["ms"] = st.ms;
    d["sh_degree"] = st.sh_degree;
    d["densified"] = st.densified;
    d["opacity_reset"] = st.opacity_reset;
    if (st.densified) {
      d["cloned"] = st.densify.cloned;
      d["split"] = st.densify.split;
      d["pruned"] = st.densify.pruned;
      d["relocated"] = st.mcmc.relocated;
      d["added"] = st.mcmc.added;
    }
    return d;
  }

  // n steps without returning to Python in between; the loss of the last.
  nb::dict run(uint32_t n) {
    ObjectLock guard(mutex_);
    StepStats st;
    {
      nb::gil_scoped_release release;
      for (uint32_t i = 0; i < n; ++i) st = trainer_->step(i + 1 == n);
    }
    nb::dict d;
    d["step"] = st.step;
    d["loss"] = st.loss;
    d["num_gaussians"] = st.num_gaussians;
    return d;
  }

  nb::dict state() {
    ObjectLock guard(mutex_);
    TrainingState s;
    trainer_->settle();
    trainer_->device().get_training_state(s);
    return state_to_dict(s);
  }

  FloatOut render(FloatIn w2c, float fx, float fy, float cx, float cy, uint32_t width, uint32_t height,
                  std::optional<FloatIn> background) {
    ObjectLock guard(mutex_);
    if (w2c.ndim() != 2 || w2c.shape(0) != 4 || w2c.shape(1) != 4) throw ConfigError("[trainer] world_to_camera: expected [4,4]");
    if (background && background->size() != 3) throw ConfigError("[trainer] background: expected 3 values");
    CameraParams cam = make_camera_params(w2c.data(), fx, fy, cx, cy, width, height);
    std::vector<float> image(static_cast<size_t>(width) * height * 3);
    {
      nb::gil_scoped_release release;
      trainer_->render(cam, image.data(), background ? background->data() : nullptr);
    }
    return float_array(image, {height, width, 3});
  }

  nb::dict timings(bool reset) {
    ObjectLock guard(mutex_);
    nb::dict d;
    for (const TimingRecord& r : trainer_->device().timings(reset)) {
      nb::dict e;
      e["calls"] = r.calls;
      e["total_ms"] = r.total_ms();
      e["upload_ms"] = r.upload_ms;
      e["alloc_ms"] = r.alloc_ms;
      e["gpu_ms"] = r.compute_ms;
      e["readback_ms"] = r.readback_ms;
      d[r.label.c_str()] = e;
    }
    return d;
  }

  nb::dict debug_snapshot() {
    ObjectLock guard(mutex_);
    DebugSnapshot snap;
    trainer_->settle();
    if (!trainer_->device().debug_snapshot(snap))
      throw BackendError(std::string("[trainer] no debug snapshot on the ") + backend_name(trainer_->device().backend()) +
                         " backend: no training step since the last render, or the backend keeps none");
    TrainingState shape;
    trainer_->device().get_training_state(shape);
    const size_t n = shape.count;
    auto u32 = [](const std::vector<uint32_t>& v, std::initializer_list<size_t> sh) {
      uint32_t* data = new uint32_t[v.size() > 0 ? v.size() : 1];
      std::memcpy(data, v.data(), v.size() * sizeof(uint32_t));
      nb::capsule owner(data, [](void* p) noexcept { delete[] static_cast<uint32_t*>(p); });
      return nb::ndarray<nb::numpy, uint32_t>(data, sh.size(), sh.begin(), owner);
    };
    nb::dict d;
    d["tile_ranges"] = u32(snap.tile_ranges, {snap.tile_ranges.size() / 2, 2});
    d["sorted_gauss"] = u32(snap.sorted_gauss, {snap.sorted_gauss.size()});
    d["grad.means"] = float_array(snap.grads[0], {n, 3});
    d["grad.log_scales"] = float_array(snap.grads[1], {n, 3});
    d["grad.quats"] = float_array(snap.grads[2], {n, 4});
    d["grad.opacity_logits"] = float_array(snap.grads[3], {n});
    d["grad.sh"] = float_array(snap.grads[4], {n, shape.sh_stride, 3});
    d["grad.means2d"] = float_array(snap.means2d_grad, {n, 2});
    if (!snap.means2d_abs.empty()) d["grad.means2d_abs"] = float_array(snap.means2d_abs, {n, 2});
    if (!snap.exposure_grad.empty()) d["grad.exposure"] = float_array(snap.exposure_grad, {3, 4});
    return d;
  }

  nb::dict image_storage() {
    ObjectLock guard(mutex_);
    const ImageStorage st = trainer_->device().image_storage();
    nb::dict d;
    d["image_bytes"] = st.image_bytes;
    d["device_bytes"] = st.device_bytes;
    d["budget_bytes"] = st.budget_bytes;
    d["streamed"] = st.streamed;
    return d;
  }

  // --- Data-parallel training (python/splat/distributed) ----------------------
  void forward_backward(uint32_t t, uint32_t sh_degree) {
    ObjectLock guard(mutex_);
    nb::gil_scoped_release release;
    trainer_->forward_backward(t, sh_degree);
  }
  float last_loss() {
    ObjectLock guard(mutex_);
    nb::gil_scoped_release release;
    trainer_->settle();
    return trainer_->device().last_loss();
  }
  nb::dict gradients() {
    ObjectLock guard(mutex_);
    std::vector<float> g[5];
    trainer_->device().get_gradients(g);
    const size_t n = trainer_->device().num_gaussians();
    const size_t k = n ? g[4].size() / (3 * n) : 0;
    nb::dict d;
    d["means"] = float_array(g[0], {n, 3});
    d["log_scales"] = float_array(g[1], {n, 3});
    d["quats"] = float_array(g[2], {n, 4});
    d["opacity_logits"] = float_array(g[3], {n});
    d["sh"] = float_array(g[4], {n, k, 3});
    return d;
  }
  void set_gradients(nb::dict d) {
    ObjectLock guard(mutex_);
    std::vector<float> g[5];
    trainer_->device().get_gradients(g);  // the sizes expected
    for (int a = 0; a < 5; ++a) {
      if (!d.contains(kParamNames[a])) throw ConfigError(std::string("[trainer] gradients: missing ") + kParamNames[a]);
      g[a] = to_vector(d[kParamNames[a]], kParamNames[a], g[a].size());
    }
    trainer_->device().set_gradients(g);
  }
  nb::dict densify_stats() {
    ObjectLock guard(mutex_);
    std::vector<float> accum, count, radii;
    trainer_->settle();
    trainer_->device().get_densify_stats(accum, count, radii);
    nb::dict d;
    d["grad_accum"] = float_array(accum, {accum.size()});
    d["grad_count"] = float_array(count, {count.size()});
    d["max_radii"] = float_array(radii, {radii.size()});
    return d;
  }
  void set_densify_stats(nb::dict d) {
    ObjectLock guard(mutex_);
    const size_t n = trainer_->device().num_gaussians();
    std::vector<float> v[3];
    const char* const keys[3] = {"grad_accum", "grad_count", "max_radii"};
    for (int k = 0; k < 3; ++k) {
      if (!d.contains(keys[k])) throw ConfigError(std::string("[trainer] densification statistics: missing ") + keys[k]);
      v[k] = to_vector(d[keys[k]], keys[k], n);
    }
    trainer_->device().set_densify_stats(v[0], v[1], v[2]);
  }
  void apply_update(uint32_t t, uint32_t update, float lr_scale, float beta1, float beta2) {
    ObjectLock guard(mutex_);
    nb::gil_scoped_release release;
    trainer_->apply_update(t, update, lr_scale, beta1, beta2);
  }
  bool densifies_at(uint32_t t) const { return trainer_->densifies_at(t); }
  nb::dict densify_at(uint32_t t) {
    ObjectLock guard(mutex_);
    DensifyResult r;
    {
      nb::gil_scoped_release release;
      r = trainer_->densify_at(t);
    }
    nb::dict d;
    d["count"] = r.count;
    d["cloned"] = r.cloned;
    d["split"] = r.split;
    d["pruned"] = r.pruned;
    return d;
  }
  void reset_opacity() {
    ObjectLock guard(mutex_);
    nb::gil_scoped_release release;
    trainer_->reset_opacity();
  }
  uint32_t sh_degree_at(uint32_t t) const { return trainer_->active_sh_degree(t); }
  bool mcmc_refines_at(uint32_t t) const { return trainer_->mcmc_refines_at(t); }

  void check_finite() {
    ObjectLock guard(mutex_);
    nb::gil_scoped_release release;
    trainer_->check_finite();
  }

  uint32_t step_count() const { return trainer_->step_count(); }
  std::optional<uint32_t> diverged_step() const {
    return trainer_->diverged() ? std::optional<uint32_t>(trainer_->diverged_step()) : std::nullopt;
  }
  bool resets_opacity_at(uint32_t step) const { return trainer_->resets_opacity_at(step); }
  uint32_t active_sh_degree() const { return trainer_->active_sh_degree(); }
  size_t num_gaussians() { return trainer_->device().num_gaussians(); }
  size_t allocation_count() { return trainer_->device().allocation_count(); }
  std::string backend() { return backend_name(trainer_->device().backend()); }
  float means_lr(uint32_t step) const { return trainer_->means_lr(step); }
  uint32_t view_for_step(uint32_t step) { return trainer_->view_for_step(step); }

  // The MCMC ops on the resident state, outside the schedule (tests).
  nb::dict mcmc_refine(float min_opacity, uint32_t add, uint64_t seed, uint32_t step) {
    ObjectLock guard(mutex_);
    McmcRefineResult r;
    {
      nb::gil_scoped_release release;
      trainer_->settle();
      r = trainer_->device().mcmc_refine(McmcRefineSettings{min_opacity, add, seed, step});
    }
    nb::dict d;
    d["relocated"] = r.relocated;
    d["added"] = r.added;
    d["count"] = r.count;
    return d;
  }
  void mcmc_noise(float noise_scale, uint64_t seed, uint32_t step) {
    ObjectLock guard(mutex_);
    nb::gil_scoped_release release;
    trainer_->settle();
    trainer_->device().mcmc_noise(McmcStepSettings{0.f, 0.f, noise_scale, seed, step});
  }
  uint32_t mcmc_growth_at(uint32_t n) const { return trainer_->mcmc_growth_at(n); }

  // The pair buffers of training forwards sized on the device (tests, benchmarks).
  nb::dict pair_buffers() {
    ObjectLock guard(mutex_);
    const Device::PairBuffers b = trainer_->device().pair_buffers();
    nb::dict d;
    d["capacity"] = b.capacity;
    d["overflows"] = b.overflows;
    return d;
  }
  nb::dict host_transfers() { return transfers_dict(trainer_->device().host_transfers()); }
  void set_pair_capacity(size_t pairs) {
    ObjectLock guard(mutex_);
    trainer_->device().set_pair_capacity(pairs);
  }

 private:
  std::unique_ptr<Trainer> trainer_;
  std::mutex mutex_;  // one call at a time (ObjectLock)
};

}  // namespace

void bind_trainer(nb::module_& m) {
  nb::class_<PyTrainer>(m, "Trainer")
      .def(nb::init<const BackendConfig&, nb::dict, FloatIn, FloatIn, nb::list, nb::object, nb::dict, uint32_t,
                    nb::object>(),
           nb::arg("config"), nb::arg("settings"), nb::arg("world_to_camera").noconvert(),
           nb::arg("intrinsics").noconvert(), nb::arg("images"), nb::arg("masks").none(), nb::arg("state"),
           nb::arg("step") = 0, nb::arg("copied").none() = nb::none(),
           "images: a list of uint8 [H,W,3] arrays, one per camera, each its own size; masks: None or a list of "
           "None / uint8 [H,W] (0: the pixel is left out of the loss); copied: None or a callable given each view's "
           "index once the device holds its own copy of it (the caller may drop that view's arrays)")
      .def("step", &PyTrainer::step, nb::arg("read_loss") = true)
      .def("run", &PyTrainer::run, nb::arg("n"))
      .def("state", &PyTrainer::state)
      .def("check_finite", &PyTrainer::check_finite,
           "Counts the non-finite parameters on the device; raises TrainingDiverged if there are any")
      .def("timings", &PyTrainer::timings, nb::arg("reset") = false,
           "ts_* timings since the last reset: {label: {calls, total_ms, upload_ms, alloc_ms, gpu_ms, readback_ms}} "
           "(empty unless the BackendConfig has timing='per_kernel'; gpu_ms is worker-thread time on the cpu backend)")
      .def("debug_snapshot", &PyTrainer::debug_snapshot,
           "Buffers of the last training step: tile_ranges, sorted_gauss and grad.* (for parity checks)")
      .def("render", &PyTrainer::render, nb::arg("world_to_camera").noconvert(), nb::arg("fx"), nb::arg("fy"),
           nb::arg("cx"), nb::arg("cy"), nb::arg("width"), nb::arg("height"),
           nb::arg("background").noconvert().none() = nb::none())
      .def("image_storage", &PyTrainer::image_storage,
           "{image_bytes, device_bytes, budget_bytes, streamed}: where the training images live")
      .def_prop_ro("step_count", &PyTrainer::step_count)
      .def_prop_ro("diverged_step", &PyTrainer::diverged_step)
      .def("resets_opacity_at", &PyTrainer::resets_opacity_at, nb::arg("step"),
           "Whether the schedule resets opacities at this 1-based step")
      .def_prop_ro("active_sh_degree", &PyTrainer::active_sh_degree)
      .def_prop_ro("num_gaussians", &PyTrainer::num_gaussians)
      .def_prop_ro("allocation_count", &PyTrainer::allocation_count)
      .def_prop_ro("backend", &PyTrainer::backend)
      .def("means_lr", &PyTrainer::means_lr, nb::arg("step"))
      .def("view_for_step", &PyTrainer::view_for_step, nb::arg("step"))
      .def("mcmc_refine", &PyTrainer::mcmc_refine, nb::arg("min_opacity"), nb::arg("add"), nb::arg("seed"),
           nb::arg("step"),
           "One MCMC refine (relocation of the dead, then `add` new Gaussians) on the resident state, outside the "
           "schedule: {relocated, added, count}")
      .def("mcmc_noise", &PyTrainer::mcmc_noise, nb::arg("noise_scale"), nb::arg("seed"), nb::arg("step"),
           "The MCMC position noise (noise_lr times the means' lr = noise_scale) on the resident means, outside "
           "the schedule")
      .def("mcmc_growth_at", &PyTrainer::mcmc_growth_at, nb::arg("n"),
           "Gaussians an MCMC refine adds to n (within max_gaussians)")
      .def("forward_backward", &PyTrainer::forward_backward, nb::arg("step"), nb::arg("sh_degree"),
           "Data-parallel training: view step `step`'s forward and backward alone (statistics while densifying, "
           "the MCMC regularisers); the gradients stay for gradients() / set_gradients()")
      .def("last_loss", &PyTrainer::last_loss, "The loss of the last forward (a read-back)")
      .def("gradients", &PyTrainer::gradients, "The last backward's gradients, as the state's arrays (sh in full)")
      .def("set_gradients", &PyTrainer::set_gradients, nb::arg("gradients"),
           "Replaces the gradients the next update applies (the ranks' reduction)")
      .def("densify_stats", &PyTrainer::densify_stats, "{grad_accum, grad_count, max_radii} since the last densification")
      .def("set_densify_stats", &PyTrainer::set_densify_stats, nb::arg("stats"),
           "Replaces the densification statistics (the ranks' reduction)")
      .def("apply_update", &PyTrainer::apply_update, nb::arg("step"), nb::arg("update"), nb::arg("lr_scale"),
           nb::arg("beta1"), nb::arg("beta2"),
           "Adam as update number `update` at view step `step`'s learning rates times lr_scale")
      .def("densifies_at", &PyTrainer::densifies_at, nb::arg("step"))
      .def("densify_at", &PyTrainer::densify_at, nb::arg("step"), "The schedule's densification at view step `step`")
      .def("reset_opacity", &PyTrainer::reset_opacity, "The schedule's opacity reset, now")
      .def("sh_degree_at", &PyTrainer::sh_degree_at, nb::arg("step"))
      .def("mcmc_refines_at", &PyTrainer::mcmc_refines_at, nb::arg("step"))
      .def("pair_buffers", &PyTrainer::pair_buffers,
           "{capacity, overflows}: the pair buffers of training forwards sized on the device (capacity 0: "
           "sized by each forward's read-back count)")
      .def("set_pair_capacity", &PyTrainer::set_pair_capacity, nb::arg("pairs"),
           "Test hook: the pair buffers' capacity from the next training forward on")
      .def("host_transfers", &PyTrainer::host_transfers,
           "{uploads, upload_bytes, downloads, download_bytes}: host-device copies so far");

  m.def(
      "knn_mean_sq_dist",
      [](FloatIn points, int k) {
        if (points.ndim() != 2 || points.shape(1) != 3) throw ConfigError("[knn] points: expected [N,3]");
        if (k < 1) throw ConfigError("[knn] k: must be >= 1");
        std::vector<float> out(points.shape(0));
        {
          nb::gil_scoped_release release;
          cpu::knn_mean_sq_dist(points.data(), points.shape(0), k, out.data());
        }
        return float_array(out, {points.shape(0)});
      },
      nb::arg("points").noconvert(), nb::arg("k") = 3);

  m.def(
      "ssim",
      [](FloatIn a, FloatIn b, std::optional<ByteIn> mask) {
        if (a.ndim() != 3 || a.shape(2) != 3 || b.ndim() != 3 || a.shape(0) != b.shape(0) || a.shape(1) != b.shape(1) ||
            b.shape(2) != 3)
          throw ConfigError("[ssim] images: expected two float32 [H,W,3] arrays of one shape");
        if (mask && (mask->ndim() != 2 || mask->shape(0) != a.shape(0) || mask->shape(1) != a.shape(1)))
          throw ConfigError("[ssim] mask: expected uint8 [H,W] the size of the images");
        cpu::CpuLoss loss(cpu::ThreadPool::shared());
        cpu::CpuLoss::SsimMeans r;
        {
          nb::gil_scoped_release release;
          r = loss.ssim(a.data(), b.data(), static_cast<uint32_t>(a.shape(1)), static_cast<uint32_t>(a.shape(0)),
                        mask ? mask->data() : nullptr);
        }
        return nb::make_tuple(r.full, r.interior);
      },
      nb::arg("a").noconvert(), nb::arg("b").noconvert(), nb::arg("mask").noconvert().none() = nb::none(),
      "(mean SSIM over all pixels with zero padding, mean over the interior 5+ pixels from the border); with a "
      "uint8 [H,W] mask, both images are 0 where it is 0 and the means run over the other pixels");

  m.def(
      "loss_and_grad",
      [](FloatIn rendered, ByteIn target, float ssim_weight, std::optional<ByteIn> mask) {
        if (rendered.ndim() != 3 || rendered.shape(2) != 3 || target.ndim() != 3 || target.shape(0) != rendered.shape(0) ||
            target.shape(1) != rendered.shape(1) || target.shape(2) != 3)
          throw ConfigError("[loss] expected float32 [H,W,3] rendered and uint8 [H,W,3] target");
        if (mask && (mask->ndim() != 2 || mask->shape(0) != rendered.shape(0) || mask->shape(1) != rendered.shape(1)))
          throw ConfigError("[loss] mask: expected uint8 [H,W] the size of the images");
        const uint32_t h = static_cast<uint32_t>(rendered.shape(0)), w = static_cast<uint32_t>(rendered.shape(1));
        std::vector<float> grad(static_cast<size_t>(w) * h * 3);
        cpu::CpuLoss loss(cpu::ThreadPool::shared());
        float value;
        {
          nb::gil_scoped_release release;
          value = loss.loss_and_grad(rendered.data(), target.data(), w, h, ssim_weight, grad.data(),
                                     mask ? mask->data() : nullptr);
        }
        return nb::make_tuple(value, float_array(grad, {h, w, 3}));
      },
      nb::arg("rendered").noconvert(), nb::arg("target").noconvert(), nb::arg("ssim_weight") = 0.2f,
      nb::arg("mask").noconvert().none() = nb::none(),
      "The training loss (1-w) L1 + w (1 - SSIM) and its gradient w.r.t. rendered (CPU schedule); mask: "
      "uint8 [H,W], 0 leaves a pixel out (the means run over the others).");
}

}  // namespace splat::bindings
