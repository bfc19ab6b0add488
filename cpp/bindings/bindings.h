// One registration function per bound area; module.cpp calls them all.
#pragma once
#include <nanobind/nanobind.h>

namespace splat::bindings {

void bind_config(nanobind::module_& m);
void bind_rasterizer(nanobind::module_& m);
void bind_raster_views(nanobind::module_& m);
void bind_gpu(nanobind::module_& m);
void bind_trainer(nanobind::module_& m);

}  // namespace splat::bindings
