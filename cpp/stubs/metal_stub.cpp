// Stub for builds without the Metal backend (SPLAT_METAL=OFF or not macOS).
#include "../core/backends.h"
#include "splat/errors.h"

namespace splat {

bool metal_available(std::string* reason) {
  if (reason) *reason = "this build of splat has no Metal backend (it is built on macOS with SPLAT_METAL=ON)";
  return false;
}

std::unique_ptr<Device> create_metal_device(const BackendConfig&) {
  std::string why;
  metal_available(&why);
  throw BackendUnavailable("[metal] " + why);
}

}  // namespace splat
