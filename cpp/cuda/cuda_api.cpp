#include "cuda_api.h"

#include <dlfcn.h>
#include <unistd.h>

#include <cstdlib>
#include <mutex>

namespace splat::cuda {
namespace {

std::string dl_error() {
  const char* e = dlerror();
  return e ? e : "unknown error";
}

// Resolves `name` into `fn`; appends the name to `missing` when absent.
template <class F>
void bind(void* lib, F& fn, const char* name, std::string& missing) {
  fn = reinterpret_cast<F>(dlsym(lib, name));
  if (!fn) missing += std::string(missing.empty() ? "" : ", ") + name;
}

template <class F>
void bind_optional(void* lib, F& fn, const char* name) {
  fn = reinterpret_cast<F>(dlsym(lib, name));
}

std::mutex& load_mutex() {
  static std::mutex m;
  return m;
}

}  // namespace

const Driver* driver(std::string* error) {
  static Driver d;
  static bool tried = false;
  static std::string failure;
  std::lock_guard<std::mutex> lock(load_mutex());
  if (!tried) {
    tried = true;
    void* lib = dlopen("libcuda.so.1", RTLD_NOW | RTLD_LOCAL);
    std::string first_error = lib ? "" : dl_error();
    if (!lib) lib = dlopen("libcuda.so", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
      failure = "the NVIDIA driver library libcuda.so.1 could not be loaded (" + first_error + ")";
    } else {
      std::string missing;
      bind(lib, d.cuInit, "cuInit", missing);
      bind(lib, d.cuDriverGetVersion, "cuDriverGetVersion", missing);
      bind(lib, d.cuDeviceGetCount, "cuDeviceGetCount", missing);
      bind(lib, d.cuDeviceGet, "cuDeviceGet", missing);
      bind(lib, d.cuDeviceGetName, "cuDeviceGetName", missing);
      bind(lib, d.cuDeviceGetAttribute, "cuDeviceGetAttribute", missing);
      bind(lib, d.cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain", missing);
      bind(lib, d.cuDevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2", missing);
      bind(lib, d.cuCtxPushCurrent, "cuCtxPushCurrent_v2", missing);
      bind(lib, d.cuCtxPopCurrent, "cuCtxPopCurrent_v2", missing);
      bind(lib, d.cuStreamCreate, "cuStreamCreate", missing);
      bind(lib, d.cuStreamDestroy, "cuStreamDestroy_v2", missing);
      bind(lib, d.cuStreamSynchronize, "cuStreamSynchronize", missing);
      bind(lib, d.cuStreamQuery, "cuStreamQuery", missing);
      bind(lib, d.cuMemAlloc, "cuMemAlloc_v2", missing);
      bind(lib, d.cuMemFree, "cuMemFree_v2", missing);
      bind(lib, d.cuMemcpyHtoDAsync, "cuMemcpyHtoDAsync_v2", missing);
      bind(lib, d.cuMemcpyDtoHAsync, "cuMemcpyDtoHAsync_v2", missing);
      bind(lib, d.cuMemsetD8Async, "cuMemsetD8Async", missing);
      bind(lib, d.cuMemcpyDtoDAsync, "cuMemcpyDtoDAsync_v2", missing);
      bind(lib, d.cuModuleLoadDataEx, "cuModuleLoadDataEx", missing);
      bind(lib, d.cuModuleUnload, "cuModuleUnload", missing);
      bind(lib, d.cuModuleGetFunction, "cuModuleGetFunction", missing);
      bind(lib, d.cuFuncGetAttribute, "cuFuncGetAttribute", missing);
      bind(lib, d.cuLaunchKernel, "cuLaunchKernel", missing);
      bind(lib, d.cuEventCreate, "cuEventCreate", missing);
      bind(lib, d.cuEventDestroy, "cuEventDestroy_v2", missing);
      bind(lib, d.cuEventRecord, "cuEventRecord", missing);
      bind(lib, d.cuEventSynchronize, "cuEventSynchronize", missing);
      bind(lib, d.cuEventElapsedTime, "cuEventElapsedTime", missing);
      bind(lib, d.cuGetErrorName, "cuGetErrorName", missing);
      bind(lib, d.cuGetErrorString, "cuGetErrorString", missing);
      bind_optional(lib, d.cuMemGetInfo, "cuMemGetInfo_v2");
      bind_optional(lib, d.cuMemAllocHost, "cuMemAllocHost_v2");
      bind_optional(lib, d.cuMemFreeHost, "cuMemFreeHost");
      bind_optional(lib, d.cuCtxGetLimit, "cuCtxGetLimit");
      bind_optional(lib, d.cuCtxSetLimit, "cuCtxSetLimit");
      bind_optional(lib, d.cuPointerGetAttribute, "cuPointerGetAttribute");
      if (!missing.empty()) {
        failure = "libcuda.so.1 lacks driver API functions (" + missing + "); the NVIDIA driver is too old";
      } else {
        CUresult r = d.cuInit(0);
        if (r != CUDA_SUCCESS) failure = "cuInit failed: " + driver_error_text(&d, r);
      }
    }
  }
  if (!failure.empty()) {
    if (error) *error = failure;
    return nullptr;
  }
  return &d;
}

std::string driver_error_text(const Driver* d, CUresult r) {
  const char* name = nullptr;
  const char* text = nullptr;
  if (d && d->cuGetErrorName) d->cuGetErrorName(r, &name);
  if (d && d->cuGetErrorString) d->cuGetErrorString(r, &text);
  std::string out = name ? name : "CUDA error " + std::to_string(r);
  if (text) out += std::string(" (") + text + ")";
  return out;
}

namespace {

std::vector<std::string>& search_dirs() {
  static std::vector<std::string> dirs;
  return dirs;
}

bool nvrtc_loaded = false;
bool nvrtc_tried = false;

bool load_nvrtc_from(const std::string& path, Nvrtc& n, std::string& why) {
  void* lib = dlopen(path.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (!lib) {
    why = dl_error();
    return false;
  }
  std::string missing;
  bind(lib, n.nvrtcGetErrorString, "nvrtcGetErrorString", missing);
  bind(lib, n.nvrtcVersion, "nvrtcVersion", missing);
  bind(lib, n.nvrtcCreateProgram, "nvrtcCreateProgram", missing);
  bind(lib, n.nvrtcDestroyProgram, "nvrtcDestroyProgram", missing);
  bind(lib, n.nvrtcCompileProgram, "nvrtcCompileProgram", missing);
  bind(lib, n.nvrtcGetPTXSize, "nvrtcGetPTXSize", missing);
  bind(lib, n.nvrtcGetPTX, "nvrtcGetPTX", missing);
  bind(lib, n.nvrtcGetProgramLogSize, "nvrtcGetProgramLogSize", missing);
  bind(lib, n.nvrtcGetProgramLog, "nvrtcGetProgramLog", missing);
  bind_optional(lib, n.nvrtcGetCUBINSize, "nvrtcGetCUBINSize");
  bind_optional(lib, n.nvrtcGetCUBIN, "nvrtcGetCUBIN");
  bind_optional(lib, n.nvrtcGetNumSupportedArchs, "nvrtcGetNumSupportedArchs");
  bind_optional(lib, n.nvrtcGetSupportedArchs, "nvrtcGetSupportedArchs");
  if (!missing.empty()) {
    why = "missing " + missing;
    dlclose(lib);
    return false;
  }
  n.nvrtcVersion(&n.major, &n.minor);
  n.path = path;
  // NVRTC opens libnvrtc-builtins by name at the first compile. CUDA 13's
  // wheel ships it beside libnvrtc without an $ORIGIN run path, so it is
  // loaded here from the same folder; a loaded library answers later
  // dlopen calls for its soname.
  if (size_t slash = path.rfind('/'); slash != std::string::npos) {
    std::string builtins = path.substr(0, slash + 1) + "libnvrtc-builtins.so." + std::to_string(n.major) + "." +
                           std::to_string(n.minor);
    if (access(builtins.c_str(), R_OK) == 0) dlopen(builtins.c_str(), RTLD_NOW | RTLD_LOCAL);
  }
  return true;
}

}  // namespace

void add_nvrtc_search_dir(const std::string& dir) {
  std::lock_guard<std::mutex> lock(load_mutex());
  search_dirs().push_back(dir);
  if (!nvrtc_loaded) nvrtc_tried = false;  // retry with the new directory
}

bool load_first_candidate(const char* env_var, const std::vector<std::string>& dirs,
                          const std::vector<const char*>& dir_names, const std::vector<const char*>& bare_names,
                          const std::function<bool(const std::string&, std::string&)>& load, std::string& tried) {
  std::vector<std::string> candidates;
  if (const char* env = std::getenv(env_var); env && *env) candidates.push_back(env);
  for (const auto& dir : dirs)
    for (const char* name : dir_names) candidates.push_back(dir + "/" + name);
  for (const char* name : bare_names) candidates.push_back(name);
  for (const auto& c : candidates) {
    std::string why;
    if (load(c, why)) return true;
    tried += "\n  " + c + ": " + why;
  }
  return false;
}

const Nvrtc* nvrtc(std::string* error) {
  static Nvrtc n;
  static std::string failure;
  std::lock_guard<std::mutex> lock(load_mutex());
  if (!nvrtc_tried) {
    nvrtc_tried = true;
    failure.clear();
    std::string tried;
    nvrtc_loaded = load_first_candidate(
        "SPLAT_NVRTC_LIBRARY", search_dirs(), {"libnvrtc.so.13", "libnvrtc.so.12", "libnvrtc.so"},
        {"libnvrtc.so", "libnvrtc.so.13", "libnvrtc.so.12"},
        [&](const std::string& path, std::string& why) { return load_nvrtc_from(path, n, why); }, tried);
    if (!nvrtc_loaded)
      failure = "NVRTC (libnvrtc) could not be loaded; install the [cuda] extra (the nvidia-cuda-nvrtc-cu12 wheel), a "
                "CUDA toolkit, or set SPLAT_NVRTC_LIBRARY to the library's path. Tried:" + tried;
  }
  if (!nvrtc_loaded) {
    if (error) *error = failure;
    return nullptr;
  }
  return &n;
}

std::vector<int> nvrtc_supported_archs(const Nvrtc* n) {
  std::vector<int> out;
  if (!n || !n->nvrtcGetNumSupportedArchs || !n->nvrtcGetSupportedArchs) return out;
  int count = 0;
  if (n->nvrtcGetNumSupportedArchs(&count) != NVRTC_SUCCESS || count <= 0) return out;
  out.resize(count);
  if (n->nvrtcGetSupportedArchs(out.data()) != NVRTC_SUCCESS) out.clear();
  return out;
}

}  // namespace splat::cuda
