// Stub for builds without the CUDA backend (SPLAT_CUDA=OFF).
#include "../core/backends.h"
#include "splat/errors.h"

namespace splat {

bool cuda_available(std::string* reason) {
  if (reason) *reason = "this build of splat has no CUDA backend (built with SPLAT_CUDA=OFF)";
  return false;
}

std::unique_ptr<Device> create_cuda_device(const BackendConfig&) {
  std::string why;
  cuda_available(&why);
  throw BackendUnavailable("[cuda] " + why);
}

}  // namespace splat
