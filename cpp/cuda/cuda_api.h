// The few CUDA driver API and NVRTC declarations the backend uses, loaded at
// run time with dlopen: building splat needs no CUDA toolkit, and a machine
// without a driver simply reports the backend as unavailable.
#pragma once
#include <cstddef>
#include <functional>
#include <string>
#include <vector>

namespace splat::cuda {

// --- driver API (libcuda.so.1) ---------------------------------------------
using CUresult = int;
using CUdevice = int;
using CUdeviceptr = unsigned long long;
using CUcontext = struct CUctx_st*;
using CUmodule = struct CUmod_st*;
using CUfunction = struct CUfunc_st*;
using CUstream = struct CUstream_st*;
using CUevent = struct CUevent_st*;

constexpr CUresult CUDA_SUCCESS = 0;
constexpr CUresult CUDA_ERROR_NOT_READY = 600;
constexpr int CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT = 16;
constexpr int CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR = 75;
constexpr int CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR = 76;
constexpr unsigned CU_STREAM_NON_BLOCKING = 1;
constexpr unsigned CU_EVENT_DEFAULT = 0;
constexpr int CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK = 0;
constexpr int CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES = 1;
constexpr int CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES = 3;
constexpr int CU_FUNC_ATTRIBUTE_NUM_REGS = 4;
constexpr int CU_JIT_ERROR_LOG_BUFFER = 5;
constexpr int CU_LIMIT_STACK_SIZE = 0;
constexpr int CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL = 9;
constexpr int CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES = 6;
constexpr int CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION = 6;

// cuLaunchKernelEx's launch attribute and configuration (driver API 12.0 on),
// laid out as cuda.h declares them: an attribute is its 4-byte id, padding to
// 8 and a 64-byte value union (8-byte aligned).
struct CUlaunchAttribute {
  int id;
  char pad[4];
  union {
    char bytes[64];
    int programmatic_stream_serialization;
    void* align;
  } value;
};
static_assert(sizeof(CUlaunchAttribute) == 72, "CUlaunchAttribute layout");
struct CUlaunchConfig {
  unsigned gridDimX, gridDimY, gridDimZ;
  unsigned blockDimX, blockDimY, blockDimZ;
  unsigned sharedMemBytes;
  CUstream hStream;
  CUlaunchAttribute* attrs;
  unsigned numAttrs;
};
static_assert(sizeof(CUlaunchConfig) == 56, "CUlaunchConfig layout");

struct Driver {
  CUresult (*cuInit)(unsigned);
  CUresult (*cuDriverGetVersion)(int*);
  CUresult (*cuDeviceGetCount)(int*);
  CUresult (*cuDeviceGet)(CUdevice*, int);
  CUresult (*cuDeviceGetName)(char*, int, CUdevice);
  CUresult (*cuDeviceGetAttribute)(int*, int, CUdevice);
  CUresult (*cuDevicePrimaryCtxRetain)(CUcontext*, CUdevice);
  CUresult (*cuDevicePrimaryCtxRelease)(CUdevice);
  CUresult (*cuCtxPushCurrent)(CUcontext);
  CUresult (*cuCtxPopCurrent)(CUcontext*);
  CUresult (*cuStreamCreate)(CUstream*, unsigned);
  CUresult (*cuStreamDestroy)(CUstream);
  CUresult (*cuStreamSynchronize)(CUstream);
  CUresult (*cuStreamQuery)(CUstream);
  CUresult (*cuMemAlloc)(CUdeviceptr*, size_t);
  CUresult (*cuMemFree)(CUdeviceptr);
  CUresult (*cuMemcpyHtoDAsync)(CUdeviceptr, const void*, size_t, CUstream);
  CUresult (*cuMemcpyDtoHAsync)(void*, CUdeviceptr, size_t, CUstream);
  CUresult (*cuMemsetD8Async)(CUdeviceptr, unsigned char, size_t, CUstream);
  CUresult (*cuMemcpyDtoDAsync)(CUdeviceptr, CUdeviceptr, size_t, CUstream);
  CUresult (*cuModuleLoadDataEx)(CUmodule*, const void*, unsigned, int*, void**);
  CUresult (*cuModuleUnload)(CUmodule);
  CUresult (*cuModuleGetFunction)(CUfunction*, CUmodule, const char*);
  CUresult (*cuFuncGetAttribute)(int*, int, CUfunction);
  CUresult (*cuLaunchKernel)(CUfunction, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned, unsigned,
                             CUstream, void**, void**);
  CUresult (*cuEventCreate)(CUevent*, unsigned);
  CUresult (*cuEventDestroy)(CUevent);
  CUresult (*cuEventRecord)(CUevent, CUstream);
  CUresult (*cuEventSynchronize)(CUevent);
  CUresult (*cuEventElapsedTime)(float*, CUevent, CUevent);
  CUresult (*cuGetErrorName)(CUresult, const char**);
  CUresult (*cuGetErrorString)(CUresult, const char**);
  CUresult (*cuMemGetInfo)(size_t*, size_t*);  // may be null
  CUresult (*cuMemAllocHost)(void**, size_t);   // may be null (page-locked host memory)
  CUresult (*cuMemFreeHost)(void*);             // may be null
  CUresult (*cuCtxGetLimit)(size_t*, int);      // may be null
  CUresult (*cuCtxSetLimit)(int, size_t);       // may be null
  CUresult (*cuPointerGetAttribute)(void*, int, CUdeviceptr);  // may be null
  CUresult (*cuLaunchKernelEx)(const CUlaunchConfig*, CUfunction, void**, void**);  // may be null (before 12.0)
};

// The driver, loaded (and cuInit'ed) once; null with `error` set when it
// cannot be loaded or initialised.
const Driver* driver(std::string* error);

// "CUDA_ERROR_X (description)" for a driver result.
std::string driver_error_text(const Driver* d, CUresult r);

// --- NVRTC (libnvrtc) ---------------------------------------------------------
using nvrtcResult = int;
using nvrtcProgram = struct _nvrtcProgram*;
constexpr nvrtcResult NVRTC_SUCCESS = 0;

struct Nvrtc {
  std::string path;  // the library that was loaded
  int major = 0, minor = 0;
  const char* (*nvrtcGetErrorString)(nvrtcResult);
  nvrtcResult (*nvrtcVersion)(int*, int*);
  nvrtcResult (*nvrtcCreateProgram)(nvrtcProgram*, const char*, const char*, int, const char* const*,
                                    const char* const*);
  nvrtcResult (*nvrtcDestroyProgram)(nvrtcProgram*);
  nvrtcResult (*nvrtcCompileProgram)(nvrtcProgram, int, const char* const*);
  nvrtcResult (*nvrtcGetPTXSize)(nvrtcProgram, size_t*);
  nvrtcResult (*nvrtcGetPTX)(nvrtcProgram, char*);
  nvrtcResult (*nvrtcGetCUBINSize)(nvrtcProgram, size_t*);        // may be null (old NVRTC)
  nvrtcResult (*nvrtcGetCUBIN)(nvrtcProgram, char*);              // may be null
  nvrtcResult (*nvrtcGetProgramLogSize)(nvrtcProgram, size_t*);
  nvrtcResult (*nvrtcGetProgramLog)(nvrtcProgram, char*);
  nvrtcResult (*nvrtcGetNumSupportedArchs)(int*);                 // may be null
  nvrtcResult (*nvrtcGetSupportedArchs)(int*);                    // may be null
};

// NVRTC, loaded once. Search order: $SPLAT_NVRTC_LIBRARY (a file path); the
// directories registered with add_nvrtc_search_dir (the Python module adds
// the nvidia-cuda-nvrtc wheel's lib directory); then the system loader with
// libnvrtc.so, libnvrtc.so.13, libnvrtc.so.12. Null with `error` listing
// what was tried when none loads.
const Nvrtc* nvrtc(std::string* error);
void add_nvrtc_search_dir(const std::string& dir);

// dlopen'ed libraries (the driver, NVRTC, NCCL): the symbol `name` of `lib`
// (null when absent), and dlerror()'s text.
void* library_symbol(void* lib, const char* name);
std::string library_error();

// Resolves `name` into `fn`; appends the name to `missing` when absent.
template <class F>
void bind_symbol(void* lib, F& fn, const char* name, std::string& missing) {
  fn = reinterpret_cast<F>(library_symbol(lib, name));
  if (!fn) missing += std::string(missing.empty() ? "" : ", ") + name;
}

// A run-time library from its candidates: $env_var (a file path) first, then
// each directory with each of dir_names, then each of bare_names for the
// system loader; `load` tries one path (true: loaded; else why). Returns
// whether one loaded; `tried` lists the failures, a line each.
bool load_first_candidate(const char* env_var, const std::vector<std::string>& dirs,
                          const std::vector<const char*>& dir_names, const std::vector<const char*>& bare_names,
                          const std::function<bool(const std::string&, std::string&)>& load, std::string& tried);

// Compute capabilities (e.g. 90) NVRTC can generate code for.
std::vector<int> nvrtc_supported_archs(const Nvrtc* n);

}  // namespace splat::cuda
