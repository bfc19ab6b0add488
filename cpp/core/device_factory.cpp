// Backend selection: which Device `auto` means here, and why a backend that
// was asked for cannot run.
#include <memory>

#include "../cpu/cpu_device.h"
#include "backends.h"
#include "splat/device.h"
#include "splat/errors.h"

namespace splat {

bool backend_available(Backend b, std::string* reason) {
  std::string why;
  bool ok = false;
  switch (b) {
    case Backend::Cpu:
      ok = true;
      break;
    case Backend::Metal:
      ok = metal_available(&why);
      break;
    case Backend::Cuda:
      ok = cuda_available(&why);
      break;
    case Backend::Auto:
      ok = true;
      break;
  }
  if (!ok && reason) *reason = why;
  return ok;
}

Backend resolve_backend(Backend requested) {
  if (requested != Backend::Auto) return requested;
#if defined(__APPLE__)
  if (backend_available(Backend::Metal, nullptr)) return Backend::Metal;
#endif
  if (backend_available(Backend::Cuda, nullptr)) return Backend::Cuda;
  return Backend::Cpu;
}

std::unique_ptr<Device> create_device(const BackendConfig& config) {
  Backend b = resolve_backend(config.backend);
  std::string why;
  if (!backend_available(b, &why))
    throw BackendUnavailable(std::string("[device] backend '") + backend_name(b) + "' is not available: " + why);
  switch (b) {
    case Backend::Metal:
      return create_metal_device(config);
    case Backend::Cuda:
      return create_cuda_device(config);
    default:
      return std::make_unique<cpu::CpuDevice>(config);
  }
}

}  // namespace splat
