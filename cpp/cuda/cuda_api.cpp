#include "cuda_api.h"

#include <dlfcn.h>
#include <unistd.h>

#include <cstdlib>
#include <mutex>

namespace splat::cuda {

void* library_symbol(void* lib, const char* name) { return dlsym(lib, name); }

std::string library_error() {
  const char* e = dlerror();
  return e ? e : "unknown error";
}

namespace {

template <class F>
void bind_optional(void* lib, F& fn, const char* name) {
  fn = reinterpret_cast<F>(library_symbol(lib, name));
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
    std::string first_error = lib ? "" : library_error();
    if (!lib) lib = dlopen("libcuda.so", RTLD_NOW | RTLD_LOCAL);
    if (!lib) {
      failure = "the NVIDIA driver library libcuda.so.1 could not be loaded (" + first_error + ")";
    } else {
      std::string missing;
      bind_symbol(lib, d.cuInit, "cuInit", missing);
      bind_symbol(lib, d.cuDriverGetVersion, "cuDriverGetVersion", missing);
      bind_symbol(lib, d.cuDeviceGetCount, "cuDeviceGetCount", missing);
      bind_symbol(lib, d.cuDeviceGet, "cuDeviceGet", missing);
      bind_symbol(lib, d.cuDeviceGetName, "cuDeviceGetName", missing);
      bind_symbol(lib, d.cuDeviceGetAttribute, "cuDeviceGetAttribute", missing);
      bind_symbol(lib, d.cuDevicePrimaryCtxRetain, "cuDevicePrimaryCtxRetain", missing);
      bind_symbol(lib, d.cuDevicePrimaryCtxRelease, "cuDevicePrimaryCtxRelease_v2", missing);
      bind_symbol(lib, d.cuCtxPushCurrent, "cuCtxPushCurrent_v2", missing);
      bind_symbol(lib, d.cuCtxPopCurrent, "cuCtxPopCurrent_v2", missing);
      bind_symbol(lib, d.cuStreamCreate, "cuStreamCreate", missing);
      bind_symbol(lib, d.cuStreamDestroy, "cuStreamDestroy_v2", missing);
      bind_symbol(lib, d.cuStreamSynchronize, "cuStreamSynchronize", missing);
      bind_symbol(lib, d.cuStreamQuery, "cuStreamQuery", missing);
      bind_symbol(lib, d.cuMemAlloc, "cuMemAlloc_v2", missing);
      bind_symbol(lib, d.cuMemFree, "cuMemFree_v2", missing);
      bind_symbol(lib, d.cuMemcpyHtoDAsync, "cuMemcpyHtoDAsync_v2", missing);
      bind_symbol(lib, d.cuMemcpyDtoHAsync, "cuMemcpyDtoHAsync_v2", missing);
      bind_symbol(lib, d.cuMemsetD8Async, "cuMemsetD8Async", missing);
      bind_symbol(lib, d.cuMemcpyDtoDAsync, "cuMemcpyDtoDAsync_v2", missing);
      bind_symbol(lib, d.cuModuleLoadDataEx, "cuModuleLoadDataEx", missing);
      bind_symbol(lib, d.cuModuleUnload, "cuModuleUnload", missing);
      bind_symbol(lib, d.cuModuleGetFunction, "cuModuleGetFunction", missing);
      bind_symbol(lib, d.cuFuncGetAttribute, "cuFuncGetAttribute", missing);
      bind_symbol(lib, d.cuLaunchKernel, "cuLaunchKernel", missing);
      bind_symbol(lib, d.cuEventCreate, "cuEventCreate", missing);
      bind_symbol(lib, d.cuEventDestroy, "cuEventDestroy_v2", missing);
      bind_symbol(lib, d.cuEventRecord, "cuEventRecord", missing);
      bind_symbol(lib, d.cuEventSynchronize, "cuEventSynchronize", missing);
      bind_symbol(lib, d.cuEventElapsedTime, "cuEventElapsedTime", missing);
      bind_symbol(lib, d.cuGetErrorName, "cuGetErrorName", missing);
      bind_symbol(lib, d.cuGetErrorString, "cuGetErrorString", missing);
      bind_optional(lib, d.cuMemGetInfo, "cuMemGetInfo_v2");
      bind_optional(lib, d.cuMemAllocHost, "cuMemAllocHost_v2");
      bind_optional(lib, d.cuMemFreeHost, "cuMemFreeHost");
      bind_optional(lib, d.cuCtxGetLimit, "cuCtxGetLimit");
      bind_optional(lib, d.cuCtxSetLimit, "cuCtxSetLimit");
      bind_optional(lib, d.cuPointerGetAttribute, "cuPointerGetAttribute");
      bind_optional(lib, d.cuLaunchKernelEx, "cuLaunchKernelEx");
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
    why = library_error();
    return false;
  }
  std::string missing;
  bind_symbol(lib, n.nvrtcGetErrorString, "nvrtcGetErrorString", missing);
  bind_symbol(lib, n.nvrtcVersion, "nvrtcVersion", missing);
  bind_symbol(lib, n.nvrtcCreateProgram, "nvrtcCreateProgram", missing);
  bind_symbol(lib, n.nvrtcDestroyProgram, "nvrtcDestroyProgram", missing);
  bind_symbol(lib, n.nvrtcCompileProgram, "nvrtcCompileProgram", missing);
  bind_symbol(lib, n.nvrtcGetPTXSize, "nvrtcGetPTXSize", missing);
  bind_symbol(lib, n.nvrtcGetPTX, "nvrtcGetPTX", missing);
  bind_symbol(lib, n.nvrtcGetProgramLogSize, "nvrtcGetProgramLogSize", missing);
  bind_symbol(lib, n.nvrtcGetProgramLog, "nvrtcGetProgramLog", missing);
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
