// The differentiable rasterizer on numpy arrays. Argument checking with
// readable messages happens in python/splat/rasterizer.py; the checks here
// only guard the native code against a caller that bypasses it.
#include <nanobind/ndarray.h>
#include <nanobind/stl/optional.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>

#include <memory>
#include <optional>

#include "bindings.h"
#include "raster_args.h"
#include "shaders/common/tile_cover.h"
#include "splat/device.h"
#include "splat/errors.h"

namespace nb = nanobind;

namespace splat::bindings {
namespace {

using FloatIn = nb::ndarray<const float, nb::c_contig, nb::device::cpu>;

template <class T>
nb::ndarray<nb::numpy, T> new_array(std::initializer_list<size_t> shape) {
  size_t count = 1;
  for (size_t s : shape) count *= s;
  T* data = new T[count > 0 ? count : 1]();
  nb::capsule owner(data, [](void* p) noexcept { delete[] static_cast<T*>(p); });
  return nb::ndarray<nb::numpy, T>(data, shape.size(), shape.begin(), owner);
}

constexpr const char* kComponent = "rasterizer";

void require(bool ok, const std::string& msg) { require_arg(kComponent, ok, msg); }

void check_shape(const FloatIn& a, const char* name, std::initializer_list<size_t> shape) {
  require_shape(kComponent, a, name, shape);
}

class Rasterizer {
 public:
  explicit Rasterizer(const BackendConfig& config) : config_(config), device_(create_device(config)) {}

  std::string backend() const { return backend_name(device_->backend()); }
  std::string description() const { return device_->description(); }
  size_t allocation_count() const { return device_->allocation_count(); }

  nb::tuple forward(FloatIn means, FloatIn log_scales, FloatIn quats, FloatIn opacity_logits, FloatIn sh,
                    FloatIn w2c, float fx, float fy, float cx, float cy, uint32_t width, uint32_t height,
                    uint32_t sh_degree, FloatIn background, float near_plane, float far_plane, bool antialiased,
                    bool chunked_stop) {
    ObjectLock guard(mutex_);
    const RasterArgs a = raster_args(kComponent, means, log_scales, quats, opacity_logits, sh, w2c, fx, fy, cx, cy,
                                     width, height, sh_degree, background, near_plane, far_plane);
    const size_t n = a.n, k = a.k;

    auto image = new_array<float>({height, width, 3});
    auto alpha = new_array<float>({height, width});
    auto radii = new_array<int32_t>({n});
    ForwardOutputs out{image.data(), alpha.data(), radii.data()};
    last_.reset();
    {
      nb::gil_scoped_release release;
      device_->set_antialiased(antialiased);
      device_->set_chunked_stop(chunked_stop);
      device_->rasterize_forward(a.gaussians, a.camera, sh_degree, a.background, out);
    }
    last_ = Shape{n, k, width, height, ++forwards_};
    return nb::make_tuple(image, alpha, radii);
  }

  // Which forward the device holds the state of: a number that every forward
  // increments (0: none). A caller that keeps several forwards alive checks
  // it before a backward and renders again when it has moved on.
  uint64_t last_token() const { return last_ ? last_->token : 0; }

  nb::tuple backward(FloatIn d_image, std::optional<FloatIn> d_alpha, std::optional<uint64_t> token) {
    ObjectLock guard(mutex_);
    require(last_.has_value(), "backward() called before forward()");
    require(!token || *token == last_->token, "backward(): the device holds the state of another forward");
    const Shape s = *last_;
    check_shape(d_image, "d_image", {s.height, s.width, 3});
    if (d_alpha) check_shape(*d_alpha, "d_alpha", {s.height, s.width});
    auto means = new_array<float>({s.n, 3});
    auto log_scales = new_array<float>({s.n, 3});
    auto quats = new_array<float>({s.n, 4});
    auto opacity_logits = new_array<float>({s.n});
    auto sh = new_array<float>({s.n, s.k, 3});
    auto means2d = new_array<float>({s.n, 2});
    GradientOutputs grads{means.data(), log_scales.data(), quats.data(), opacity_logits.data(), sh.data(),
                          means2d.data()};
    {
      nb::gil_scoped_release release;
      device_->rasterize_backward(d_image.data(), d_alpha ? d_alpha->data() : nullptr, grads);
    }
    return nb::make_tuple(means, log_scales, quats, opacity_logits, sh, means2d);
  }

 private:
  std::mutex mutex_;  // one call at a time (ObjectLock)
  struct Shape {
    size_t n, k;
    uint32_t width, height;
    uint64_t token;
  };
  uint64_t forwards_ = 0;
  BackendConfig config_;
  std::unique_ptr<Device> device_;
  std::optional<Shape> last_;
};

using IntIn = nb::ndarray<const int32_t, nb::c_contig, nb::device::cpu>;

// The splats' arguments to the coverage hooks, checked; returns their count.
size_t check_cover_args(FloatIn mean2d, FloatIn conic, FloatIn opacity, IntIn rects, uint32_t tiles_x,
                        uint32_t tiles_y) {
  const size_t n = mean2d.ndim() == 2 ? mean2d.shape(0) : 0;
  check_shape(mean2d, "mean2d", {n, 2});
  check_shape(conic, "conic", {n, 3});
  check_shape(opacity, "opacity", {n});
  require(rects.ndim() == 2 && rects.shape(0) == n && rects.shape(1) == 4, "rects: unexpected shape");
  const int32_t* r = rects.data();
  for (size_t i = 0; i < 4 * n; i += 4)
    require(r[i] >= 0 && r[i + 1] >= 0 && r[i] <= r[i + 2] && r[i + 1] <= r[i + 3] &&
                r[i + 2] <= static_cast<int32_t>(tiles_x) && r[i + 3] <= static_cast<int32_t>(tiles_y),
            "rects: each must be [x0, y0, x1, y1] inside the tile grid");
  return n;
}

TileCover cover_of(FloatIn mean2d, FloatIn conic, FloatIn opacity, IntIn rects, size_t i) {
  const float* m = mean2d.data();
  const float* c = conic.data();
  const int32_t* r = rects.data() + 4 * i;
  return tile_cover(make_vec2(m[2 * i], m[2 * i + 1]), make_vec3(c[3 * i], c[3 * i + 1], c[3 * i + 2]),
                    opacity.data()[i], r[0], r[1], r[2], r[3]);
}

// Which tiles binning gives each splat (shaders/common/tile_cover.h), as a
// mask [N, tiles_y, tiles_x]: the hook the coverage tests check it through.
nb::ndarray<nb::numpy, uint8_t> tile_cover_mask(FloatIn mean2d, FloatIn conic, FloatIn opacity, IntIn rects,
                                                uint32_t tiles_x, uint32_t tiles_y) {
  const size_t n = check_cover_args(mean2d, conic, opacity, rects, tiles_x, tiles_y);
  auto mask = new_array<uint8_t>({n, tiles_y, tiles_x});
  for (size_t i = 0; i < n; ++i) {
    const TileCover tc = cover_of(mean2d, conic, opacity, rects, i);
    const TileRows rows = tile_rows(tc);
    uint8_t* out = mask.data() + i * tiles_x * tiles_y;
    for (int ty = tc.y0; ty < tc.y1; ++ty) {
      int tx0, tx1;
      tile_cover_row(rows, ty, tx0, tx1);
      for (int tx = tx0; tx < tx1; ++tx) out[ty * tiles_x + tx] = 1;
    }
  }
  return mask;
}

// The 4x4-pixel blocks the rasterizers keep for each splat in every tile of
// its rect (tile_cover_blocks), as a mask [N, 4 tiles_y, 4 tiles_x].
nb::ndarray<nb::numpy, uint8_t> tile_block_mask(FloatIn mean2d, FloatIn conic, FloatIn opacity, IntIn rects,
                                                uint32_t tiles_x, uint32_t tiles_y) {
  const size_t n = check_cover_args(mean2d, conic, opacity, rects, tiles_x, tiles_y);
  const size_t bx = 4 * size_t(tiles_x), by = 4 * size_t(tiles_y);
  auto mask = new_array<uint8_t>({n, by, bx});
  for (size_t i = 0; i < n; ++i) {
    const TileCover tc = cover_of(mean2d, conic, opacity, rects, i);
    uint8_t* out = mask.data() + i * bx * by;
    for (int ty = tc.y0; ty < tc.y1; ++ty)
      for (int tx = tc.x0; tx < tc.x1; ++tx) {
        const uint32_t bits = tile_cover_blocks(tc, tx, ty);
        for (uint32_t b = 0; b < 16u; ++b)
          out[(4 * size_t(ty) + b / 4u) * bx + 4 * size_t(tx) + b % 4u] = (bits >> b) & 1u;
      }
  }
  return mask;
}

}  // namespace

void bind_rasterizer(nb::module_& m) {
  m.def("tile_cover_mask", &tile_cover_mask, nb::arg("mean2d").noconvert(), nb::arg("conic").noconvert(),
        nb::arg("opacity").noconvert(), nb::arg("rects").noconvert(), nb::arg("tiles_x"), nb::arg("tiles_y"));
  m.def("tile_block_mask", &tile_block_mask, nb::arg("mean2d").noconvert(), nb::arg("conic").noconvert(),
        nb::arg("opacity").noconvert(), nb::arg("rects").noconvert(), nb::arg("tiles_x"), nb::arg("tiles_y"));
  nb::class_<Rasterizer>(m, "Rasterizer")
      .def(nb::init<const BackendConfig&>(), nb::arg("config"))
      .def_prop_ro("backend", &Rasterizer::backend)
      .def_prop_ro("description", &Rasterizer::description)
      .def_prop_ro("allocation_count", &Rasterizer::allocation_count)
      // noconvert: the native side never copies or casts silently.
      .def("forward", &Rasterizer::forward, nb::arg("means").noconvert(), nb::arg("log_scales").noconvert(),
           nb::arg("quats").noconvert(), nb::arg("opacity_logits").noconvert(), nb::arg("sh").noconvert(),
           nb::arg("world_to_camera").noconvert(), nb::arg("fx"), nb::arg("fy"), nb::arg("cx"), nb::arg("cy"),
           nb::arg("width"), nb::arg("height"), nb::arg("sh_degree"), nb::arg("background").noconvert(),
           nb::arg("near_plane") = SPLAT_NEAR_PLANE, nb::arg("far_plane") = SPLAT_FAR_PLANE,
           nb::arg("antialiased") = false, nb::arg("chunked_stop") = false)
      .def_prop_ro("last_token", &Rasterizer::last_token)
      .def("backward", &Rasterizer::backward, nb::arg("d_image").noconvert(),
           nb::arg("d_alpha").noconvert().none() = nb::none(), nb::arg("token").none() = nb::none());
}

}  // namespace splat::bindings
