#include <nanobind/nanobind.h>

#include "bindings.h"
#include "splat/errors.h"
#include "splat/limits.h"

namespace nb = nanobind;

NB_MODULE(_core, m) {
  m.doc() = "splat native core: backends, rasterizer and trainer";
  // A RuntimeError of its own, so callers can tell a diverged run apart.
  static PyObject* diverged = PyErr_NewExceptionWithDoc(
      "splat._core.TrainingDiverged", "The loss or a parameter of a training run is no longer finite.",
      PyExc_RuntimeError, nullptr);
  m.attr("TrainingDiverged") = nb::handle(diverged);
  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const splat::TrainingDiverged& e) {
      PyErr_SetString(diverged, e.what());
    } catch (const splat::ConfigError& e) {
      PyErr_SetString(PyExc_ValueError, e.what());
    } catch (const splat::BackendUnavailable& e) {
      PyErr_SetString(PyExc_RuntimeError, e.what());
    } catch (const splat::BackendError& e) {
      PyErr_SetString(PyExc_RuntimeError, e.what());
    }
  });
  // The numeric limits (docs/architecture.md, "Numeric limits").
  m.attr("MAX_GAUSSIANS") = splat::kMaxGaussians;
  m.attr("MAX_IMAGE_SIDE") = splat::kMaxImageSide;
  m.attr("MAX_PAIRS") = splat::kMaxPairs;
  m.attr("MAX_SPLIT_COUNT") = splat::kMaxSplitCount;
  splat::bindings::bind_config(m);
  splat::bindings::bind_rasterizer(m);
  splat::bindings::bind_raster_views(m);
  splat::bindings::bind_gpu(m);
  splat::bindings::bind_trainer(m);
}
