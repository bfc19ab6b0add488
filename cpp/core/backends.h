// The GPU backends' entry points. Each is implemented by its backend when
// built (SPLAT_METAL / SPLAT_CUDA), otherwise by a stub that reports why it is
// not available.
#pragma once
#include <memory>
#include <string>

#include "splat/device.h"

namespace splat {

bool metal_available(std::string* reason);
std::unique_ptr<Device> create_metal_device(const BackendConfig& config);

bool cuda_available(std::string* reason);
std::unique_ptr<Device> create_cuda_device(const BackendConfig& config);

}  // namespace splat
