// GPU backend utilities: NVRTC compilation of every kernel (works without a
// GPU), the ts_* timing record, and test hooks.
#include <nanobind/ndarray.h>
#include <nanobind/stl/string.h>
#include <nanobind/stl/tuple.h>
#include <nanobind/stl/vector.h>

#include <cstring>
#include <memory>

#include "bindings.h"
#include "splat/config.h"
#include "splat/errors.h"

#if defined(SPLAT_HAS_CUDA)
#include "../core/backends.h"
#include "../cuda/cuda_api.h"
#include "../cuda/cuda_backend.h"
#include "../cuda/nccl_api.h"
#include "../gpu/gpu_device.h"
#include "../gpu/timing.h"
#endif

namespace nb = nanobind;

namespace splat::bindings {
namespace {

#if defined(SPLAT_HAS_CUDA)
// NVRTC from the NVIDIA wheels, when installed: their lib directories are
// handed to the loader (found with importlib, nothing imported). CUDA 12's
// nvidia-cuda-nvrtc-cu12 (the [cuda] extra, nvidia/cuda_nvrtc/lib) comes
// first, as it runs on every CUDA 12 and 13 driver; CUDA 13's
// nvidia-cuda-nvrtc ([cuda13], nvidia/cu13/lib) needs a CUDA 13 driver.
void register_wheel_nvrtc() {
  for (const char* package : {"nvidia.cuda_nvrtc", "nvidia.cu13"}) {
    try {
      nb::module_ util = nb::module_::import_("importlib.util");
      nb::object spec = util.attr("find_spec")(package);
      if (spec.is_none()) continue;
      nb::object locations = spec.attr("submodule_search_locations");
      if (locations.is_none()) continue;
      for (nb::handle loc : locations) cuda::add_nvrtc_search_dir(nb::cast<std::string>(nb::str(loc)) + "/lib");
    } catch (const nb::python_error&) {
      // No such wheel (or no `nvidia` package): the system loader is tried instead.
    }
  }
}

// NCCL from the nvidia-nccl-cu12 wheel (the [multigpu] extra, nvidia/nccl/lib), when installed.
void register_wheel_nccl() {
  try {
    nb::module_ util = nb::module_::import_("importlib.util");
    nb::object spec = util.attr("find_spec")("nvidia.nccl");
    if (spec.is_none()) return;
    nb::object locations = spec.attr("submodule_search_locations");
    if (locations.is_none()) return;
    for (nb::handle loc : locations) cuda::add_nccl_search_dir(nb::cast<std::string>(nb::str(loc)) + "/lib");
  } catch (const nb::python_error&) {
  }
}
#endif

[[noreturn]] void no_cuda() {
  throw BackendUnavailable("[cuda] this build of splat has no CUDA backend (built with SPLAT_CUDA=OFF)");
}

}  // namespace

void bind_gpu(nb::module_& m) {
#if defined(SPLAT_HAS_CUDA)
  register_wheel_nvrtc();
  register_wheel_nccl();
#endif

  m.def(
      "nccl_available",
      []() {
#if defined(SPLAT_HAS_CUDA)
        std::string why;
        const cuda::Nccl* n = cuda::nccl(&why);
        if (!n) return std::make_tuple(false, why);
        return std::make_tuple(true, n->path + " (version " + std::to_string(n->version) + ")");
#else
        return std::make_tuple(false, std::string("built with SPLAT_CUDA=OFF"));
#endif
      },
      "(loaded, library path and version | reason) of NCCL, which CUDA ranks reduce with on the device.");

  m.def(
      "nccl_unique_id",
      []() {
#if defined(SPLAT_HAS_CUDA)
        std::string id = cuda::nccl_unique_id();
        return nb::bytes(id.data(), id.size());
#else
        no_cuda();
#endif
      },
      "A new NCCL communicator id (bytes) for rank 0 to hand to the other ranks' join_ranks.");

  m.def(
      "nvrtc_available",
      []() {
#if defined(SPLAT_HAS_CUDA)
        std::string info;
        bool ok = cuda::nvrtc_available(&info);
        return std::make_tuple(ok, info);
#else
        return std::make_tuple(false, std::string("built with SPLAT_CUDA=OFF"));
#endif
      },
      "(loaded, library path and version | reason) of NVRTC.");

  m.def(
      "nvrtc_compile_all",
      [](const std::string& arch) {
#if defined(SPLAT_HAS_CUDA)
        std::vector<cuda::KernelCompileReport> reports;
        {
          nb::gil_scoped_release release;
          reports = cuda::compile_all(arch);
        }
        std::vector<std::tuple<std::string, std::string, bool, std::string>> out;
        for (auto& r : reports) out.emplace_back(r.kernel, r.specialization, r.ok, r.log);
        return out;
#else
        (void)arch;
        no_cuda();
#endif
      },
      nb::arg("arch") = "compute_90",
      "Compiles every SIMT kernel x every valid specialization with NVRTC (no GPU needed): a list of "
      "(kernel, specialization, ok, log). arch: 'compute_XY' (PTX) or 'sm_XY' (cubin).");

  m.def(
      "gpu_timings",
      [](bool reset) {
        nb::dict d;
#if defined(SPLAT_HAS_CUDA)
        for (const auto& e : gpu::timings(reset)) d[e.label.c_str()] = nb::make_tuple(e.total_ms, e.last_ms, e.calls);
#else
        (void)reset;
#endif
        return d;
      },
      nb::arg("reset") = false,
      "GPU ts_* timings recorded by devices with timing='per_kernel': {label: (total_ms, last_ms, calls)}.");

  m.def(
      "gpu_memory",
      [](bool reset_peaks) {
        nb::dict d;
#if defined(SPLAT_HAS_CUDA)
        gpu::MemoryStats s = gpu::memory_stats(reset_peaks);
        d["arena_bytes"] = s.arena_bytes;
        d["arena_peak_bytes"] = s.arena_peak_bytes;
        d["driver_used_bytes"] = s.driver_used_bytes;
        d["driver_peak_used_bytes"] = s.driver_peak_used_bytes;
        d["driver_total_bytes"] = s.driver_total_bytes;
        d["driver_start_used_bytes"] = s.driver_start_used_bytes;
#else
        (void)reset_peaks;
#endif
        return d;
      },
      nb::arg("reset_peaks") = false,
      "Device memory of the GPU backends (bytes): resident arenas now and at their high-water mark, and the "
      "driver's used / total (cuMemGetInfo after each arena allocation; 0 when unknown), and the driver's used "
      "memory when the process's first GPU device was made (its context, before any arena buffer).");

  m.def(
      "cuda_device_memory",
      []() {
#if defined(SPLAT_HAS_CUDA)
        size_t free_bytes = 0, total_bytes = 0;
        {
          nb::gil_scoped_release release;
          cuda::device_memory(&free_bytes, &total_bytes);
        }
        return std::make_tuple(free_bytes, total_bytes);
#else
        no_cuda();
#endif
      },
      "(free, total) bytes of the CUDA backend's device as the driver reports them now (cuMemGetInfo); "
      "raises BackendUnavailable without a CUDA device.");

  using U32In = nb::ndarray<const uint32_t, nb::ndim<1>, nb::c_contig, nb::device::cpu>;
  m.def(
      "gpu_radix_sort",
      [](U32In keys, U32In values, uint32_t key_bits, const std::string& backend) {
#if defined(SPLAT_HAS_CUDA)
        const size_t n = keys.shape(0);
        if (values.shape(0) != n) throw ConfigError("[gpu_radix_sort] keys and values differ in length");
        if (key_bits == 0 || key_bits > 32) throw ConfigError("[gpu_radix_sort] key_bits must be in 1..32");
        BackendConfig cfg;
        cfg.set("backend", backend);
        if (cfg.backend != Backend::Cuda) throw ConfigError("[gpu_radix_sort] only backend='cuda' is supported");
        uint32_t* k = new uint32_t[n ? n : 1];
        uint32_t* v = new uint32_t[n ? n : 1];
        nb::capsule ko(k, [](void* p) noexcept { delete[] static_cast<uint32_t*>(p); });
        nb::capsule vo(v, [](void* p) noexcept { delete[] static_cast<uint32_t*>(p); });
        if (n) {
          std::memcpy(k, keys.data(), 4 * n);
          std::memcpy(v, values.data(), 4 * n);
        }
        {
          nb::gil_scoped_release release;
          std::unique_ptr<Device> dev = create_cuda_device(cfg);
          auto* gdev = dynamic_cast<gpu::GpuDevice*>(dev.get());
          if (!gdev) throw BackendError("[gpu_radix_sort] not a GPU device");
          gdev->radix_sort(k, v, n, key_bits);
        }
        size_t shape[1] = {n};
        return nb::make_tuple(nb::ndarray<nb::numpy, uint32_t>(k, 1, shape, ko),
                              nb::ndarray<nb::numpy, uint32_t>(v, 1, shape, vo));
#else
        (void)keys;
        (void)values;
        (void)key_bits;
        (void)backend;
        no_cuda();
#endif
      },
      nb::arg("keys"), nb::arg("values"), nb::arg("key_bits"), nb::arg("backend") = "cuda",
      "Test hook: the GPU backend's portable radix sort (stable, by the low key_bits bits): (keys, values).");
}

}  // namespace splat::bindings
