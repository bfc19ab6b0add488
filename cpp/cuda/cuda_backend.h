// The CUDA backend's entry points beyond cpp/core/backends.h, for the
// bindings and tests.
#pragma once
#include <cstddef>
#include <string>

#include "cuda_api.h"
#include "nvrtc_compiler.h"

namespace splat::cuda {

// Whether NVRTC loads; `info` receives its path and version, or the reason.
bool nvrtc_available(std::string* info);

// The process holds each device's primary context from its first use until
// exit, as the CUDA runtime does (docs/architecture.md, "Device memory"):
// objects made after the last one died find it ready, and between objects the
// process holds the context alone. Returns the retained context.
CUcontext hold_primary_context(const Driver* cu, CUdevice device);

// The driver's free and total memory of the backend's device, now
// (cuMemGetInfo in the held primary context). Throws BackendUnavailable
// without a CUDA device.
void device_memory(size_t* free_bytes, size_t* total_bytes);

}  // namespace splat::cuda
