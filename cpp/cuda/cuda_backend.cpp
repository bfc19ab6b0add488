// The CUDA backend: availability and device creation (cpp/core/backends.h).
#include "cuda_backend.h"

#include <cstdlib>
#include <map>
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

CUcontext hold_primary_context(const Driver* cu, CUdevice device) {
  // One retain per device, never released: the driver tears the context down
  // at exit. Without it the context went with the last object and came back
  // (with its setup time) with the next.
  static std::mutex m;
  static std::map<CUdevice, CUcontext> held;
  std::lock_guard<std::mutex> lock(m);
  auto it = held.find(device);
  if (it != held.end()) return it->second;
  CUcontext context = nullptr;
  CUresult r = cu->cuDevicePrimaryCtxRetain(&context, device);
  if (r != CUDA_SUCCESS) throw BackendError("[cuda] cuDevicePrimaryCtxRetain failed: " + driver_error_text(cu, r));
  held.emplace(device, context);
  return context;
}

void device_memory(size_t* free_bytes, size_t* total_bytes) {
  std::string why;
  if (!cuda_available(&why)) throw BackendUnavailable("[cuda] " + why);
  const Driver* cu = driver(&why);
  if (!cu->cuMemGetInfo) throw BackendUnavailable("[cuda] this driver has no cuMemGetInfo");
  CUdevice device = 0;
  CUresult r = cu->cuDeviceGet(&device, device_ordinal());
  if (r != CUDA_SUCCESS) throw BackendError("[cuda] cuDeviceGet failed: " + driver_error_text(cu, r));
  CUcontext context = hold_primary_context(cu, device);
  r = cu->cuCtxPushCurrent(context);
  if (r != CUDA_SUCCESS) throw BackendError("[cuda] cuCtxPushCurrent failed: " + driver_error_text(cu, r));
  r = cu->cuMemGetInfo(free_bytes, total_bytes);
  CUcontext popped = nullptr;
  cu->cuCtxPopCurrent(&popped);
  if (r != CUDA_SUCCESS) throw BackendError("[cuda] cuMemGetInfo failed: " + driver_error_text(cu, r));
}

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
  auto launcher = std::make_unique<cuda::CudaLauncher>(cuda::device_ordinal(), config.profile,
                                                      config.kernel_overlap != KernelOverlap::Off);
  return std::make_unique<gpu::GpuDevice>(Backend::Cuda, config, std::move(launcher));
}

}  // namespace splat
