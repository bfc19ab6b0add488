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
#include "trainer_conversions.h"
#include "splat/errors.h"
#include "splat/trainer.h"

namespace nb = nanobind;

namespace splat::bindings {
namespace {

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

  nb::dict step(bool read_loss, std::optional<uint32_t> until) {
    ObjectLock guard(mutex_);
    StepStats st;
    {
      nb::gil_scoped_release release;
      st = trainer_->step(read_loss, until.value_or(UINT32_MAX));
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

  // --- Data-parallel training (python/splat/parallel) ----------------------
  void forward_backward(uint32_t t, uint32_t sh_degree) {
    ObjectLock guard(mutex_);
    nb::gil_scoped_release release;
    trainer_->forward_backward(t, sh_degree, t);  // one view a rank: its own batch
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
    std::vector<float> exposure;
    trainer_->device().get_exposure_gradients(exposure);
    if (!exposure.empty()) d["exposure"] = float_array(exposure, {exposure.size() / 12, 3, 4});
    return d;
  }
  void set_gradients(nb::dict d) {
    ObjectLock guard(mutex_);
    std::vector<float> g[5];
    const size_t n = trainer_->device().num_gaussians();
    for (int a = 0; a < 5; ++a) {
      if (!d.contains(kParamNames[a])) throw ConfigError(std::string("[trainer] gradients: missing ") + kParamNames[a]);
      FloatIn arr;
      // The SH width comes with the array; the device checks it against its own.
      const size_t len = a < 4 ? n * param_width(a, 1) : (nb::try_cast(d[kParamNames[a]], arr) ? arr.size() : 0);
      g[a] = to_vector(d[kParamNames[a]], kParamNames[a], len);
    }
    // Checked in full before anything is applied: a refused call changes nothing.
    const bool exposure_on = trainer_->settings().exposure;
    if (d.contains("exposure") && !exposure_on)
      throw ConfigError("[trainer] gradients: exposure given, but this run has no exposure compensation");
    if (exposure_on && !d.contains("exposure"))
      throw ConfigError("[trainer] gradients: missing exposure (this run learns a correction per view)");
    std::vector<float> exposure;
    if (exposure_on) {
      FloatIn arr;
      exposure = to_vector(d["exposure"], "exposure", nb::try_cast(d["exposure"], arr) ? arr.size() : 0);
      const size_t want = kExposureFloats * trainer_->num_views();
      if (exposure.size() != want)
        throw ConfigError("[trainer] gradients: exposure has " + std::to_string(exposure.size()) +
                          " values, expected " + std::to_string(want) + " (12 per training view)");
    }
    trainer_->device().set_gradients(g);
    if (exposure_on) trainer_->device().set_exposure_gradients(exposure);
  }
  FloatOut step_radii() {
    ObjectLock guard(mutex_);
    std::vector<int32_t> r;
    trainer_->device().get_step_radii(r);
    return float_array(std::vector<float>(r.begin(), r.end()), {r.size()});
  }
  void set_step_radii(nb::object radii) {
    ObjectLock guard(mutex_);
    const std::vector<float> f = to_vector(radii, "radii", trainer_->device().num_gaussians());
    trainer_->device().set_step_radii(std::vector<int32_t>(f.begin(), f.end()));
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
  void join_ranks(nb::bytes unique_id, int rank, int ranks) {
    ObjectLock guard(mutex_);
    std::string id(unique_id.c_str(), unique_id.size());
    nb::gil_scoped_release release;  // blocks until every rank has joined
    trainer_->device().join_ranks(id, rank, ranks);
  }
  void reduce_gradients() {
    ObjectLock guard(mutex_);
    nb::gil_scoped_release release;
    trainer_->device().reduce_gradients();
  }
  void reduce_densify_stats() {
    ObjectLock guard(mutex_);
    nb::gil_scoped_release release;
    trainer_->device().reduce_densify_stats();
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
  FloatOut blend_weights() {
    ObjectLock guard(mutex_);
    std::vector<float> w;
    {
      nb::gil_scoped_release release;
      w = trainer_->blend_weights(trainer_->step_count());
    }
    return float_array(w, {w.size()});
  }
  bool prunes_low_weight_at(uint32_t t) const { return trainer_->prunes_low_weight_at(t); }
  uint32_t prune_low_weight(uint32_t t, std::optional<FloatIn> weights) {
    ObjectLock guard(mutex_);
    std::vector<float> w;
    if (weights) {
      if (weights->ndim() != 1) throw ConfigError("[trainer] weights: expected a 1-D array, one per Gaussian");
      w.assign(weights->data(), weights->data() + weights->shape(0));
    }
    nb::gil_scoped_release release;
    return weights ? trainer_->prune_least_weight(w) : trainer_->prune_low_weight(t);
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
  uint32_t batch_last(uint32_t first, uint32_t last_at_most) const { return trainer_->batch_last(first, last_at_most); }
  uint32_t downscale_level(uint32_t step) const { return trainer_->downscale_level(step); }

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
      .def("step", &PyTrainer::step, nb::arg("read_loss") = true, nb::arg("until").none() = nb::none())
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
      .def("batch_last", &PyTrainer::batch_last, nb::arg("first"), nb::arg("last_at_most"),
           "The last view step of the batch starting at `first` when step() is given `last_at_most`")
      .def("downscale_level", &PyTrainer::downscale_level, nb::arg("step"),
           "The resolution level step `step` trains at: its view at 1/2^level of its size")
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
      .def("gradients", &PyTrainer::gradients, "The last backward's gradients, as the state's arrays (sh in full; with exposure "
           "compensation also exposure [views, 3, 4], zero but the step's view)")
      .def("set_gradients", &PyTrainer::set_gradients, nb::arg("gradients"),
           "Replaces the gradients the next update applies (the ranks' reduction)")
      .def("step_radii", &PyTrainer::step_radii,
           "The last forward's screen radius of every Gaussian (0: unseen; visible_adam steps the others)")
      .def("set_step_radii", &PyTrainer::set_step_radii, nb::arg("radii"),
           "Replaces them before the update (the ranks' maximum, for visible_adam)")
      .def("densify_stats", &PyTrainer::densify_stats, "{grad_accum, grad_count, max_radii} since the last densification")
      .def("set_densify_stats", &PyTrainer::set_densify_stats, nb::arg("stats"),
           "Replaces the densification statistics (the ranks' reduction)")
      .def("join_ranks", &PyTrainer::join_ranks, nb::arg("unique_id"), nb::arg("rank"), nb::arg("ranks"),
           "Joins the ranks' communicator on the device (CUDA: NCCL; unique_id: rank 0's nccl_unique_id())")
      .def("reduce_gradients", &PyTrainer::reduce_gradients,
           "The gradients' mean over the ranks, in place on the device (after join_ranks)")
      .def("reduce_densify_stats", &PyTrainer::reduce_densify_stats,
           "The densification statistics' sums (radii: maximum) over the ranks, in place on the device")
      .def("apply_update", &PyTrainer::apply_update, nb::arg("step"), nb::arg("update"), nb::arg("lr_scale"),
           nb::arg("beta1"), nb::arg("beta2"),
           "Adam as update number `update` at view step `step`'s learning rates times lr_scale")
      .def("densifies_at", &PyTrainer::densifies_at, nb::arg("step"))
      .def("densify_at", &PyTrainer::densify_at, nb::arg("step"), "The schedule's densification at view step `step`")
      .def("reset_opacity", &PyTrainer::reset_opacity, "The schedule's opacity reset, now")
      .def("blend_weights", &PyTrainer::blend_weights,
           "Each Gaussian's blend weight (alpha T summed over the pixels) over every training view, [N]")
      .def("prunes_low_weight_at", &PyTrainer::prunes_low_weight_at, nb::arg("step"),
           "Whether view step `step` prunes by blend weight (train.prune_low_weight)")
      .def("prune_low_weight", &PyTrainer::prune_low_weight, nb::arg("step"), nb::arg("weights").none() = nb::none(),
           "The pruning by blend weight of view step `step` (by `weights` when given: one per Gaussian), now; "
           "returns how many Gaussians left")
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
