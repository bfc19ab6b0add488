// The differentiable rasterizer on views of the caller's arrays (DLPack through
// nanobind's ndarray). Arrays in the memory the device reads in place (host
// memory on the CPU backend, CUDA memory on the CUDA backend) go to
// rasterize_*_external, read and written where they are (CUDA: on the
// caller's stream); host arrays on a GPU backend go to its host entry points
// (copies). The caller allocates every output (splat.torch: torch
// tensors). Argument checking with readable messages is in
// python/splat/torch; the checks here guard the native code.
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>

#include <memory>
#include <optional>
#include <string>

#include "bindings.h"
#include "raster_args.h"
#include "splat/device.h"
#include "splat/errors.h"

namespace nb = nanobind;

namespace splat::bindings {
namespace {

using In = nb::ndarray<const float, nb::c_contig>;
using Out = nb::ndarray<float, nb::c_contig>;
using IntOut = nb::ndarray<int32_t, nb::c_contig>;
using HostIn = nb::ndarray<const float, nb::c_contig, nb::device::cpu>;

constexpr const char* kComponent = "raster_views";

void require(bool ok, const std::string& msg) { require_arg(kComponent, ok, msg); }

template <class A>
void check_shape(const A& a, const char* name, std::initializer_list<size_t> shape) {
  require_shape(kComponent, a, name, shape);
}

class ViewRasterizer {
 public:
  explicit ViewRasterizer(const BackendConfig& config) : device_(create_device(config)) {}

  std::string backend() const { return backend_name(device_->backend()); }
  size_t allocation_count() const { return device_->allocation_count(); }
  bool accepts_device_pointers() const { return device_->external_memory() == Device::ExternalMemory::Cuda; }
  uint64_t last_token() const { return last_ ? last_->token : 0; }

  nb::dict host_transfers() const { return transfers_dict(device_->host_transfers()); }

  uint64_t forward(In means, In log_scales, In quats, In opacity_logits, In sh, HostIn w2c, float fx, float fy,
                   float cx, float cy, uint32_t width, uint32_t height, uint32_t sh_degree, HostIn background,
                   float near_plane, float far_plane, Out image, Out alpha, IntOut radii, uint64_t queue,
                   bool antialiased, bool chunked_stop) {
    ObjectLock guard(mutex_);
    const RasterArgs a = raster_args(kComponent, means, log_scales, quats, opacity_logits, sh, w2c, fx, fy, cx, cy,
                                     width, height, sh_degree, background, near_plane, far_plane);
    const size_t n = a.n, k = a.k;
    check_shape(image, "image", {height, width, 3});
    check_shape(alpha, "alpha", {height, width});
    check_shape(radii, "radii", {n});
    const bool in_place = same_device({means.device_type(), log_scales.device_type(), quats.device_type(),
                                        opacity_logits.device_type(), sh.device_type(), image.device_type(),
                                        alpha.device_type(), radii.device_type()});

    // The projection reads SH rows of a multiple of 4 coefficients as 16-byte quads.
    require(!in_place || device_->external_memory() != Device::ExternalMemory::Cuda || k % 4 != 0 || reinterpret_cast<uintptr_t>(sh.data()) % 16 == 0,
            "sh: CUDA SH arrays with K % 4 == 0 must start 16-byte aligned");
    ForwardOutputs out{image.data(), alpha.data(), radii.data()};
    last_.reset();
    {
      nb::gil_scoped_release release;
      device_->set_antialiased(antialiased);
      device_->set_chunked_stop(chunked_stop);
      if (in_place)
        device_->rasterize_forward_external(a.gaussians, a.camera, sh_degree, a.background, out, queue);
      else
        device_->rasterize_forward(a.gaussians, a.camera, sh_degree, a.background, out);
    }
    last_ = Last{n, k, width, height, in_place, ++forwards_};
    return last_->token;
  }

  void backward(In d_image, std::optional<In> d_alpha, Out means, Out log_scales, Out quats, Out opacity_logits,
                std::optional<Out> sh, Out means2d, uint64_t token, uint64_t queue) {
    ObjectLock guard(mutex_);
    require(last_.has_value(), "backward() called before forward()");
    require(token == last_->token, "backward(): the device holds the state of another forward");
    const Last s = *last_;
    check_shape(d_image, "d_image", {s.height, s.width, 3});
    if (d_alpha) check_shape(*d_alpha, "d_alpha", {s.height, s.width});
    check_shape(means, "grad means", {s.n, 3});
    check_shape(log_scales, "grad log_scales", {s.n, 3});
    check_shape(quats, "grad quats", {s.n, 4});
    check_shape(opacity_logits, "grad opacity_logits", {s.n});
    if (sh) check_shape(*sh, "grad sh", {s.n, s.k, 3});
    check_shape(means2d, "grad means2d", {s.n, 2});
    const bool in_place = same_device({d_image.device_type(), d_alpha ? d_alpha->device_type() : d_image.device_type(),
                                        means.device_type(), log_scales.device_type(), quats.device_type(),
                                        opacity_logits.device_type(), sh ? sh->device_type() : means.device_type(),
                                        means2d.device_type()});
    require(in_place == s.in_place, "backward(): arrays on another device than the forward's");
    GradientOutputs grads{means.data(), log_scales.data(), quats.data(), opacity_logits.data(),
                          sh ? sh->data() : nullptr, means2d.data()};
    const float* da = d_alpha ? d_alpha->data() : nullptr;
    nb::gil_scoped_release release;
    if (device_->external_memory() != Device::ExternalMemory::Cuda)
      require(sh.has_value(), "grad sh: required for host arrays");
    if (in_place)
      device_->rasterize_backward_external(d_image.data(), da, grads, queue);
    else
      device_->rasterize_backward(d_image.data(), da, grads);
  }

 private:
  std::mutex mutex_;  // one call at a time (ObjectLock)
  struct Last {
    size_t n, k;
    uint32_t width, height;
    bool in_place;
    uint64_t token;
  };

  // True when the arrays (all on one device) are the memory this device reads
  // in place, false for host arrays it copies; anything else is an error.
  bool same_device(std::initializer_list<int> types) const {
    const int first = *types.begin();
    for (int t : types) require(t == first, "arrays on different devices (all must be CPU, or all CUDA)");
    const Device::ExternalMemory kind = device_->external_memory();
    if (first == nb::device::cpu::value) return kind == Device::ExternalMemory::Host;
    require(first == nb::device::cuda::value, "arrays must be CPU or CUDA memory");
    require(kind == Device::ExternalMemory::Cuda,
            "CUDA arrays need the cuda backend (this rasterizer runs " + backend() + ")");
    return true;
  }

  std::unique_ptr<Device> device_;
  std::optional<Last> last_;
  uint64_t forwards_ = 0;
};

}  // namespace

void bind_raster_views(nb::module_& m) {
  nb::class_<ViewRasterizer>(m, "ViewRasterizer")
      .def(nb::init<const BackendConfig&>(), nb::arg("config"))
      .def_prop_ro("backend", &ViewRasterizer::backend)
      .def_prop_ro("allocation_count", &ViewRasterizer::allocation_count)
      .def_prop_ro("accepts_device_pointers", &ViewRasterizer::accepts_device_pointers)
      .def_prop_ro("last_token", &ViewRasterizer::last_token)
      .def_prop_ro("host_transfers", &ViewRasterizer::host_transfers)
      // noconvert: an array that needs converting is a caller's bug, never a silent copy.
      .def("forward", &ViewRasterizer::forward, nb::arg("means").noconvert(), nb::arg("log_scales").noconvert(),
           nb::arg("quats").noconvert(), nb::arg("opacity_logits").noconvert(), nb::arg("sh").noconvert(),
           nb::arg("world_to_camera").noconvert(), nb::arg("fx"), nb::arg("fy"), nb::arg("cx"), nb::arg("cy"),
           nb::arg("width"), nb::arg("height"), nb::arg("sh_degree"), nb::arg("background").noconvert(),
           nb::arg("near_plane"), nb::arg("far_plane"), nb::arg("image").noconvert(), nb::arg("alpha").noconvert(),
           nb::arg("radii").noconvert(), nb::arg("queue") = 0, nb::arg("antialiased") = false,
           nb::arg("chunked_stop") = false)
      .def("backward", &ViewRasterizer::backward, nb::arg("d_image").noconvert(),
           nb::arg("d_alpha").noconvert().none(), nb::arg("means").noconvert(), nb::arg("log_scales").noconvert(),
           nb::arg("quats").noconvert(), nb::arg("opacity_logits").noconvert(), nb::arg("sh").noconvert().none(),
           nb::arg("means2d").noconvert(), nb::arg("token"), nb::arg("queue") = 0);
}

}  // namespace splat::bindings
