// The CUDA backend: availability and device creation (cpp/core/backends.h).
#include "cuda_backend.h"

#include <cstdlib>
#include <mutex>

#include "../core/backends.h"
#include "../gpu/gpu_device.h"
#include "cuda_launcher.h"
#include "splat/errors.h"

namespace splat {
namespace cuda {

bool nvrtc_available(std::string* info) {
  std::string why;
  const Nvrtc* nv = nvrtc(&why);
  if (!nv) {
    if (info) *info = why;
    return false;
  }
  if (info) *info = nv->path + " (NVRTC " + std::to_string(nv->major) + "." + std::to_string(nv->minor) + ")";
  return true;
}

namespace {

// The device ordinal: $SPLAT_CUDA_DEVICE, else 0 (CUDA_VISIBLE_DEVICES
// applies as usual).
int device_ordinal() {
  const char* env = std::getenv("SPLAT_CUDA_DEVICE");
  return env && *env ? std::atoi(env) : 0;
}

}  // namespace
}  // namespace cuda

bool cuda_available(std::string* reason) {
  static std::mutex m;
  static bool checked = false, ok = false;
  static std::string why;
  std::lock_guard<std::mutex> lock(m);
  if (!checked) {
    checked = true;
    const cuda::Driver* d = cuda::driver(&why);
    if (d) {
      int count = 0;
      cuda::CUresult r = d->cuDeviceGetCount(&count);
      if (r != cuda::CUDA_SUCCESS)
        why = "cuDeviceGetCount failed: " + cuda::driver_error_text(d, r);
      else if (count <= cuda::device_ordinal())
        why = count == 0 ? "no CUDA device is visible"
                         : "SPLAT_CUDA_DEVICE=" + std::to_string(cuda::device_ordinal()) + " but only " +
                               std::to_string(count) + " CUDA device(s) are visible";
      else
        ok = cuda::nvrtc(&why) != nullptr;
    }
    // NVRTC may become loadable later (a search directory registered after
    // this check): only a missing driver or device is final.
    if (!ok && d && why.rfind("NVRTC", 0) == 0) checked = false;
  }
  if (!ok && reason) *reason = why;
  return ok;
}

std::unique_ptr<Device> create_cuda_device(const BackendConfig& config) {
  std::string why;
  if (!cuda_available(&why)) throw BackendUnavailable("[cuda] " + why);
  auto launcher = std::make_unique<cuda::CudaLauncher>(cuda::device_ordinal(), config.profile);
  return std::make_unique<gpu::GpuDevice>(Backend::Cuda, config, std::move(launcher));
}

}  // namespace splat
