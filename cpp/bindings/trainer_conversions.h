// Python values <-> the native Trainer's types: the training state and the
// settings as dicts, the views' images and cameras (trainer.cpp binds them).
#pragma once
#include <nanobind/ndarray.h>

#include <initializer_list>
#include <string>
#include <vector>

#include "splat/trainer.h"

namespace splat::bindings {

using FloatIn = nanobind::ndarray<const float, nanobind::c_contig, nanobind::device::cpu>;
using ByteIn = nanobind::ndarray<const uint8_t, nanobind::c_contig, nanobind::device::cpu>;
using FloatOut = nanobind::ndarray<nanobind::numpy, float>;

// The state's parameter arrays, in TrainingState::params order.
extern const char* const kParamNames[5];

// A numpy copy of `src` in `shape`.
FloatOut float_array(const std::vector<float>& src, std::initializer_list<size_t> shape);
// A float32 C-contiguous array of `expected` values, copied (ConfigError naming `name` otherwise).
std::vector<float> to_vector(nanobind::handle array, const std::string& name, size_t expected);
// dict <-> TrainingState; moments and statistics are optional (zero).
TrainingState state_from_dict(nanobind::dict d);
nanobind::dict state_to_dict(const TrainingState& s);
// The settings dict python/splat/trainer.py builds.
TrainSettings settings_from_dict(nanobind::dict d);
// The training views: uint8 [H,W,3] images, optional uint8 [H,W] masks; `copied(v)`
// is called once view v is copied (None: never).
std::vector<TrainingImage> images_from(nanobind::list images, nanobind::object masks, size_t views,
                                       nanobind::object copied);
std::vector<CameraParams> cameras_from(FloatIn w2c, FloatIn intrinsics, const std::vector<TrainingImage>& images);

}  // namespace splat::bindings
