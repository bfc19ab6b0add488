// The CUDA backend's entry points beyond cpp/core/backends.h, for the
// bindings and tests.
#pragma once
#include <string>

#include "nvrtc_compiler.h"

namespace splat::cuda {

// Whether NVRTC loads; `info` receives its path and version, or the reason.
bool nvrtc_available(std::string* info);

}  // namespace splat::cuda
