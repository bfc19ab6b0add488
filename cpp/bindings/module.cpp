#include <nanobind/nanobind.h>

#include "bindings.h"
#include "splat/errors.h"

namespace nb = nanobind;

NB_MODULE(_core, m) {
  m.doc() = "splat native core: backends, rasterizer and trainer";
  nb::register_exception_translator([](const std::exception_ptr& p, void*) {
    try {
      std::rethrow_exception(p);
    } catch (const splat::ConfigError& e) {
      PyErr_SetString(PyExc_ValueError, e.what());
    } catch (const splat::BackendUnavailable& e) {
      PyErr_SetString(PyExc_RuntimeError, e.what());
    } catch (const splat::BackendError& e) {
      PyErr_SetString(PyExc_RuntimeError, e.what());
    }
  });
  splat::bindings::bind_config(m);
  splat::bindings::bind_rasterizer(m);
  splat::bindings::bind_raster_views(m);
  splat::bindings::bind_gpu(m);
  splat::bindings::bind_trainer(m);
}
