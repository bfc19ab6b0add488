// Run-time compilation of the embedded CUDA entry points with NVRTC, and the
// on-disk cache of the results.
#pragma once
#include <string>
#include <vector>

#include "../gpu/kernels.h"
#include "cuda_api.h"

namespace splat::cuda {

struct CompileOutput {
  bool ok = false;
  bool is_cubin = false;  // else PTX
  std::string image;      // PTX text or cubin bytes
  std::string log;        // NVRTC log (warnings or errors)
};

// The NVRTC options for `arch` ("sm_90": cubin; "compute_90": PTX) and the
// specialization defines ("NAME=value").
std::vector<std::string> compile_options(const std::string& arch, const std::vector<std::string>& defines);

// Compiles shaders/cuda/<cuda_source> (embedded) with the kernel headers
// handed to NVRTC as named headers. Never throws for compile errors: they are
// in `log` with ok = false.
CompileOutput compile_cuda_source(const Nvrtc* nv, const std::string& cuda_source, const std::string& arch,
                                  const std::vector<std::string>& defines);

// A stable hash (hex) of everything that determines a compiled image: the
// embedded sources, the options and `extra` (driver / device identity).
std::string compile_cache_key(const std::string& cuda_source, const std::vector<std::string>& options,
                              const std::string& extra);

// The directory compiled kernels are cached in: $XDG_CACHE_HOME/splat/cuda,
// else ~/.cache/splat/cuda. Empty when neither is known.
std::string cache_directory();
bool cache_load(const std::string& key, std::string* data);
void cache_store(const std::string& key, const std::string& data);  // best effort

// One row of compile_all.
struct KernelCompileReport {
  std::string kernel;          // entry point
  std::string specialization;  // "NAME=value,..." ("" when none)
  bool ok = false;
  std::string log;
};

// Compiles every kernel x every valid specialization for `arch` (PTX for
// "compute_XY", cubin for "sm_XY"); needs only NVRTC, not a GPU. Throws
// BackendUnavailable when NVRTC cannot be loaded.
std::vector<KernelCompileReport> compile_all(const std::string& arch);

}  // namespace splat::cuda
