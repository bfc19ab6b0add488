// The Metal backend: availability and device creation (cpp/core/backends.h).
// GpuDevice runs on MetalLauncher exactly as it runs on the CUDA launcher.
#include "../core/backends.h"
#include "../gpu/gpu_device.h"
#include "metal_context.h"
#include "metal_launcher.h"
#include "splat/errors.h"

namespace splat {

bool metal_available(std::string* reason) {
  std::string why;
  bool ok = metal::MetalContext::get(&why) != nullptr;
  if (!ok && reason) *reason = why;
  return ok;
}

std::unique_ptr<Device> create_metal_device(const BackendConfig& config) {
  std::string why;
  metal::MetalContext* context = metal::MetalContext::get(&why);
  if (!context) throw BackendUnavailable("[metal] " + why);
  auto launcher = std::make_unique<metal::MetalLauncher>(context, config.profile);
  return std::make_unique<gpu::GpuDevice>(Backend::Metal, config, std::move(launcher));
}

}  // namespace splat
