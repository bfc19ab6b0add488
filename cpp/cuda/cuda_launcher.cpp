#include "cuda_launcher.h"

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <thread>
#include <cstdio>

#include "cuda_backend.h"
#include "nvrtc_compiler.h"
#include "splat/errors.h"

namespace splat::cuda {

class CudaLauncher::Scope {
 public:
  explicit Scope(const CudaLauncher& l) : l_(l) { l_.check(l_.cu_->cuCtxPushCurrent(l_.context_), "cuCtxPushCurrent"); }
  ~Scope() {
    CUcontext popped = nullptr;
    l_.cu_->cuCtxPopCurrent(&popped);
  }

 private:
  const CudaLauncher& l_;
};

void CudaLauncher::check(CUresult r, const std::string& what) const {
  if (r == CUDA_SUCCESS) return;
  std::string msg = "[cuda] " + what + " failed: " + driver_error_text(cu_, r);
  if (last_kernel_) msg += " (last kernel launched: " + *last_kernel_ + ")";
  throw BackendError(msg);
}

CudaLauncher::CudaLauncher(int ordinal, bool profile, bool overlap) : ordinal_(ordinal), profile_(profile) {
  std::string why;
  cu_ = driver(&why);
  if (!cu_) throw BackendUnavailable("[cuda] " + why);
  nv_ = nvrtc(&why);
  if (!nv_) throw BackendUnavailable("[cuda] " + why);
  int count = 0;
  check(cu_->cuDeviceGetCount(&count), "cuDeviceGetCount");
  if (ordinal < 0 || ordinal >= count)
    throw BackendUnavailable("[cuda] no CUDA device " + std::to_string(ordinal) + " (" + std::to_string(count) +
                             " present)");
  check(cu_->cuDeviceGet(&device_, ordinal), "cuDeviceGet");
  char name[256] = {0};
  check(cu_->cuDeviceGetName(name, sizeof(name) - 1, device_), "cuDeviceGetName");
  name_ = name;
  check(cu_->cuDeviceGetAttribute(&cc_major_, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR, device_),
        "cuDeviceGetAttribute");
  check(cu_->cuDeviceGetAttribute(&cc_minor_, CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR, device_),
        "cuDeviceGetAttribute");
  check(cu_->cuDriverGetVersion(&driver_version_), "cuDriverGetVersion");
  hold_primary_context(cu_, device_);
  check(cu_->cuDevicePrimaryCtxRetain(&context_, device_), "cuDevicePrimaryCtxRetain");
  try {
    Scope scope(*this);
    check(cu_->cuStreamCreate(&own_stream_, CU_STREAM_NON_BLOCKING), "cuStreamCreate");
    stream_ = own_stream_;
    // The context reserves its per-thread stack for every thread the GPU can
    // hold: 1 KiB by default, 264 MiB of an H200. No kernel here has a stack
    // frame, and the driver grows the reservation for a launch that needs
    // more, so a default one is lowered to nothing. A limit someone set
    // above the default is left alone.
    size_t stack = 0;
    if (cu_->cuCtxGetLimit && cu_->cuCtxSetLimit && cu_->cuCtxGetLimit(&stack, CU_LIMIT_STACK_SIZE) == CUDA_SUCCESS &&
        stack > 0 && stack <= 1024)
      cu_->cuCtxSetLimit(CU_LIMIT_STACK_SIZE, 0);
  } catch (...) {
    cu_->cuDevicePrimaryCtxRelease(device_);
    throw;
  }
  // A cubin for this exact architecture when NVRTC knows it (no JIT, and it
  // loads on any driver of the same major version); else the newest PTX NVRTC
  // can write that this GPU runs, compiled by the driver.
  const int cc = cc_major_ * 10 + cc_minor_;
  std::vector<int> archs = nvrtc_supported_archs(nv_);
  int best = 0;
  for (int a : archs) {
    if (a == cc) best = a;
    if (a < cc && a > best && best != cc) best = a;
  }
  if (best == cc || archs.empty())
    arch_ = "sm_" + std::to_string(cc);
  else if (best > 0)
    arch_ = "compute_" + std::to_string(best);
  else
    arch_ = "sm_" + std::to_string(cc);
  // The kernels wait for the grid ahead of them (sp_grid_dependency_wait) only
  // when compiled for sm_90 on, and a launch may only overlap if they do.
  const int code = std::atoi(arch_.c_str() + arch_.find('_') + 1);
  overlap_ = overlap && cu_->cuLaunchKernelEx != nullptr && cc_major_ >= 9 && code >= 90;
}

CudaLauncher::~CudaLauncher() {
  CUcontext popped = nullptr;
  if (cu_->cuCtxPushCurrent(context_) == CUDA_SUCCESS) {
    if (comm_) {  // a dead rank must not hold the exit: the wait aborts the communicator then
      try {
        wait_stream("cuStreamSynchronize");
      } catch (const std::exception&) {
      }
      if (comm_) nccl_->ncclCommDestroy(comm_);
    }
    if (stream_) cu_->cuStreamSynchronize(stream_);
    if (own_stream_ && own_stream_ != stream_) cu_->cuStreamSynchronize(own_stream_);
    for (const std::vector<CUevent>& label : events_)
      for (CUevent e : label) cu_->cuEventDestroy(e);
    for (auto& m : modules_) cu_->cuModuleUnload(m.second);
    if (own_stream_) cu_->cuStreamDestroy(own_stream_);
    cu_->cuCtxPopCurrent(&popped);
  }
  cu_->cuDevicePrimaryCtxRelease(device_);
}

std::string CudaLauncher::description() const {
  return "cuda (" + name_ + ", compute capability " + std::to_string(cc_major_) + "." + std::to_string(cc_minor_) +
         ", driver " + std::to_string(driver_version_ / 1000) + "." + std::to_string(driver_version_ % 1000 / 10) +
         ", nvrtc " + std::to_string(nv_->major) + "." + std::to_string(nv_->minor) + ", " + arch_ +
         (overlap_ ? ", programmatic dependent launch" : "") + ")";
}

gpu::BufferHandle CudaLauncher::allocate(size_t bytes) {
  Scope scope(*this);
  CUdeviceptr p = 0;
  check(cu_->cuMemAlloc(&p, bytes), "cuMemAlloc(" + std::to_string(bytes) + " bytes)");
  return static_cast<gpu::BufferHandle>(p);
}

void CudaLauncher::release(gpu::BufferHandle buffer) {
  if (!buffer) return;
  Scope scope(*this);
  // Work still queued may use the buffer.
  wait_stream("cuStreamSynchronize");
  check(cu_->cuMemFree(static_cast<CUdeviceptr>(buffer)), "cuMemFree");
}

void CudaLauncher::upload(gpu::BufferRef dst, const void* src, size_t bytes) {
  if (!bytes) return;
  Scope scope(*this);
  check(cu_->cuMemcpyHtoDAsync(static_cast<CUdeviceptr>(dst.handle + dst.offset), src, bytes, stream_),
        "cuMemcpyHtoDAsync");
  ++transfers_.uploads;
  transfers_.upload_bytes += bytes;
}

void CudaLauncher::download(void* dst, gpu::BufferRef src, size_t bytes) {
  if (!bytes) return;
  Scope scope(*this);
  check(cu_->cuMemcpyDtoHAsync(dst, static_cast<CUdeviceptr>(src.handle + src.offset), bytes, stream_),
        "cuMemcpyDtoHAsync");
  wait_stream("cuStreamSynchronize");
  ++transfers_.downloads;
  transfers_.download_bytes += bytes;
}

void CudaLauncher::copy(gpu::BufferRef dst, gpu::BufferRef src, size_t bytes) {
  if (!bytes) return;
  Scope scope(*this);
  check(cu_->cuMemcpyDtoDAsync(static_cast<CUdeviceptr>(dst.handle + dst.offset),
                               static_cast<CUdeviceptr>(src.handle + src.offset), bytes, stream_),
        "cuMemcpyDtoDAsync");
}

// A caller's stream (torch's current one): its work before this call is
// ordered before ours and its work after ours after it, with no sync. Handle
// 0 is the legacy default stream, torch's default.
void CudaLauncher::use_queue(bool caller, uint64_t queue) {
  stream_ = caller ? reinterpret_cast<CUstream>(static_cast<uintptr_t>(queue)) : own_stream_;
}

void CudaLauncher::check_device_pointer(const void* ptr, const char* what) {
  if (!ptr || !cu_->cuPointerGetAttribute) return;
  int ordinal = -1;
  const CUresult r = cu_->cuPointerGetAttribute(&ordinal, CU_POINTER_ATTRIBUTE_DEVICE_ORDINAL,
                                                static_cast<CUdeviceptr>(reinterpret_cast<uintptr_t>(ptr)));
  if (r != CUDA_SUCCESS)
    throw ConfigError(std::string("[cuda] ") + what + ": is not CUDA device memory (" + driver_error_text(cu_, r) + ")");
  if (ordinal != ordinal_)
    throw ConfigError(std::string("[cuda] ") + what + ": lives on CUDA device " + std::to_string(ordinal) +
                      ", the backend runs on device " + std::to_string(ordinal_) + " (SPLAT_CUDA_DEVICE)");
}

void CudaLauncher::fill_zero(gpu::BufferRef dst, size_t bytes) {
  if (!bytes) return;
  Scope scope(*this);
  check(cu_->cuMemsetD8Async(static_cast<CUdeviceptr>(dst.handle + dst.offset), 0, bytes, stream_),
        "cuMemsetD8Async");
}

CUmodule CudaLauncher::load_module(const gpu::KernelInfo& info, const std::vector<std::string>& defines) {
  std::string id = info.cuda_source;
  for (const auto& d : defines) id += " " + d;
  auto it = modules_.find(id);
  if (it != modules_.end()) return it->second;

  std::vector<std::string> options = compile_options(arch_, defines);
  std::string identity = "nvrtc " + std::to_string(nv_->major) + "." + std::to_string(nv_->minor) + "|driver " +
                         std::to_string(driver_version_) + "|" + name_ + "|cc " + std::to_string(cc_major_) + "." +
                         std::to_string(cc_minor_);
  std::string key = compile_cache_key(info.cuda_source, options, identity);
  std::string image;
  bool from_cache = cache_load(key, &image);
  if (!from_cache) {
    CompileOutput out = compile_cuda_source(nv_, info.cuda_source, arch_, defines);
    if (!out.ok)
      throw BackendError("[cuda] NVRTC failed to compile " + id + " for " + arch_ + " (kernel " + info.entry +
                         "):\n" + out.log);
    image = std::move(out.image);
  }
  char jit_log[8192] = {0};
  int jit_opts[] = {CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES};
  void* jit_vals[] = {jit_log, reinterpret_cast<void*>(static_cast<size_t>(sizeof(jit_log) - 1))};
  CUmodule module = nullptr;
  CUresult r = cu_->cuModuleLoadDataEx(&module, image.data(), 2, jit_opts, jit_vals);
  if (r != CUDA_SUCCESS && from_cache) {
    // A stale or damaged cache entry: compile afresh.
    CompileOutput out = compile_cuda_source(nv_, info.cuda_source, arch_, defines);
    if (!out.ok)
      throw BackendError("[cuda] NVRTC failed to compile " + id + " for " + arch_ + " (kernel " + info.entry +
                         "):\n" + out.log);
    image = std::move(out.image);
    from_cache = false;
    r = cu_->cuModuleLoadDataEx(&module, image.data(), 2, jit_opts, jit_vals);
  }
  if (r != CUDA_SUCCESS)
    throw BackendError("[cuda] cuModuleLoadDataEx failed for " + id + " (kernel " + info.entry +
                       "): " + driver_error_text(cu_, r) + (jit_log[0] ? std::string("\n") + jit_log : ""));
  if (!from_cache) cache_store(key, image);
  modules_.emplace(id, module);
  return module;
}

gpu::Pipeline CudaLauncher::pipeline(gpu::Kernel kernel, const gpu::Specialization& spec) {
  std::lock_guard<std::mutex> lock(pipeline_mutex_);
  auto key = std::make_pair(static_cast<int>(kernel), spec);
  auto it = pipelines_.find(key);
  if (it != pipelines_.end()) return it->second.get();
  Scope scope(*this);
  const gpu::KernelInfo& info = gpu::kernel_info(kernel);
  CUmodule module = load_module(info, gpu::specialization_defines(kernel, spec));
  auto state = std::make_unique<PipelineState>();
  state->name = info.entry;
  std::string label = gpu::specialization_label(kernel, spec);
  if (!label.empty()) state->name += " [" + label + "]";
  CUresult r = cu_->cuModuleGetFunction(&state->function, module, info.entry);
  if (r != CUDA_SUCCESS)
    throw BackendError("[cuda] cuModuleGetFunction(" + state->name + ") failed: " + driver_error_text(cu_, r));
  if (profile_) {
    int regs = 0, shared = 0, local = 0, max_threads = 0;
    cu_->cuFuncGetAttribute(&regs, CU_FUNC_ATTRIBUTE_NUM_REGS, state->function);
    cu_->cuFuncGetAttribute(&shared, CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES, state->function);
    cu_->cuFuncGetAttribute(&local, CU_FUNC_ATTRIBUTE_LOCAL_SIZE_BYTES, state->function);
    cu_->cuFuncGetAttribute(&max_threads, CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK, state->function);
    std::fprintf(stderr, "[splat cuda] %s: %d registers, %d B shared, %d B local, max %d threads/group, simd width 32\n",
                 state->name.c_str(), regs, shared, local, max_threads);
  }
  gpu::Pipeline p = state.get();
  pipelines_.emplace(key, std::move(state));
  return p;
}

void CudaLauncher::dispatch(gpu::Pipeline pipeline, uint32_t groups, uint32_t group_size, const gpu::KernelArg* args,
                            size_t num_args) {
  if (groups == 0) return;
  const auto* state = static_cast<const PipelineState*>(pipeline);
  constexpr size_t kMaxArgs = 32;
  if (num_args > kMaxArgs) throw BackendError("[cuda] too many kernel arguments for " + state->name);
  CUdeviceptr pointers[kMaxArgs];
  void* params[kMaxArgs];
  for (size_t i = 0; i < num_args; ++i) {
    if (args[i].kind == gpu::KernelArg::Kind::Buffer) {
      pointers[i] = static_cast<CUdeviceptr>(args[i].buffer.handle + args[i].buffer.offset);
      params[i] = &pointers[i];
    } else {
      params[i] = const_cast<void*>(args[i].bytes);
    }
  }
  Scope scope(*this);
  last_kernel_ = &state->name;
  // The message is built only on failure: a launch is on every step's path.
  CUresult r;
  const bool overlapped = overlap_ && !timing_;
  if (overlapped) {
    // May start while the kernel ahead runs; the kernel waits for it
    // (compat.h). Timed runs launch plainly: their events bracket kernels.
    CUlaunchAttribute attr{};
    attr.id = CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION;
    attr.value.programmatic_stream_serialization = 1;
    const CUlaunchConfig config{groups, 1, 1, group_size, 1, 1, 0, stream_, &attr, 1};
    r = cu_->cuLaunchKernelEx(&config, state->function, params, nullptr);
  } else {
    r = cu_->cuLaunchKernel(state->function, groups, 1, 1, group_size, 1, 1, 0, stream_, params, nullptr);
  }
  if (r != CUDA_SUCCESS)
    check(r, std::string(overlapped ? "cuLaunchKernelEx(" : "cuLaunchKernel(") + state->name + ", " +
                 std::to_string(groups) + " groups)");
}

void CudaLauncher::wait_stream(const char* what) {
  if (!comm_) {
    check(cu_->cuStreamSynchronize(stream_), what);
    return;
  }
  double timeout_s = 600.0;
  if (const char* env = std::getenv("SPLAT_RANK_TIMEOUT"); env && *env && std::atof(env) > 0) timeout_s = std::atof(env);
  const auto start = std::chrono::steady_clock::now();
  for (;;) {
    CUresult r = cu_->cuStreamQuery(stream_);
    if (r == CUDA_SUCCESS) return;
    if (r != CUDA_ERROR_NOT_READY) check(r, what);
    ncclResult_t async = NCCL_SUCCESS;
    nccl_->ncclCommGetAsyncError(comm_, &async);
    const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    if ((async != NCCL_SUCCESS && async != NCCL_IN_PROGRESS) || waited > timeout_s) {
      const std::string why = async != NCCL_SUCCESS && async != NCCL_IN_PROGRESS
                                  ? std::string(nccl_->ncclGetErrorString(async))
                                  : "no progress in " + std::to_string(static_cast<int>(timeout_s)) + " s";
      nccl_->ncclCommAbort(comm_);  // its kernels end, and the stream with them
      comm_ = nullptr;
      cu_->cuStreamSynchronize(stream_);
      throw BackendError("[cuda] the ranks' exchange on the device failed (" + why +
                         "): another rank stopped or did not answer (SPLAT_RANK_TIMEOUT)");
    }
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

void CudaLauncher::join_ranks(const std::string& unique_id, int rank, int ranks) {
  if (comm_) throw BackendError("[cuda] join_ranks: this device has joined its ranks already");
  if (unique_id.size() != sizeof(NcclUniqueId))
    throw ConfigError("[cuda] join_ranks: the communicator id has " + std::to_string(unique_id.size()) +
                      " bytes, expected " + std::to_string(sizeof(NcclUniqueId)) + " (rank 0's nccl_unique_id())");
  if (ranks < 1 || rank < 0 || rank >= ranks)
    throw ConfigError("[cuda] join_ranks: rank " + std::to_string(rank) + " of " + std::to_string(ranks));
  std::string why;
  nccl_ = nccl(&why);
  if (!nccl_) throw BackendUnavailable("[cuda] " + why);
  NcclUniqueId id;
  std::copy(unique_id.begin(), unique_id.end(), id.internal);
  Scope scope(*this);  // NCCL takes the current context's device
  ncclResult_t r = nccl_->ncclCommInitRank(&comm_, ranks, id, rank);
  if (r != NCCL_SUCCESS) {
    comm_ = nullptr;
    throw BackendError("[cuda] rank " + std::to_string(rank) + " of " + std::to_string(ranks) +
                       ": ncclCommInitRank failed: " + nccl_->ncclGetErrorString(r));
  }
}

void CudaLauncher::all_reduce(const gpu::BufferRef* buffers, const size_t* counts, size_t n, ReduceOp op) {
  if (!comm_) throw BackendError("[cuda] all_reduce: join_ranks first");
  const int nccl_op = op == ReduceOp::Sum ? NCCL_SUM : op == ReduceOp::Max ? NCCL_MAX : NCCL_AVG;
  Scope scope(*this);
  ncclResult_t r = nccl_->ncclGroupStart();
  for (size_t i = 0; i < n && r == NCCL_SUCCESS; ++i) {
    if (!counts[i]) continue;
    void* p = reinterpret_cast<void*>(static_cast<CUdeviceptr>(buffers[i].handle + buffers[i].offset));
    r = nccl_->ncclAllReduce(p, p, counts[i], NCCL_FLOAT32, nccl_op, comm_, stream_);
  }
  ncclResult_t end = nccl_->ncclGroupEnd();
  if (r == NCCL_SUCCESS) r = end;
  if (r != NCCL_SUCCESS) throw BackendError(std::string("[cuda] ncclAllReduce failed: ") + nccl_->ncclGetErrorString(r));
}

void CudaLauncher::synchronize() {
  Scope scope(*this);
  wait_stream("running the queued kernels (cuStreamSynchronize)");
}

void CudaLauncher::set_timing(bool enabled) { timing_ = enabled; }

void CudaLauncher::begin_label(gpu::TimingLabel label) {
  if (!timing_) return;
  Scope scope(*this);
  std::vector<CUevent>& events = events_[static_cast<size_t>(label)];
  const size_t at = 2 * brackets_[static_cast<size_t>(label)];
  while (events.size() < at + 2) {
    CUevent e = nullptr;
    check(cu_->cuEventCreate(&e, CU_EVENT_DEFAULT), "cuEventCreate");
    events.push_back(e);
  }
  check(cu_->cuEventRecord(events[at], stream_), "cuEventRecord");
}

void CudaLauncher::end_label(gpu::TimingLabel label) {
  if (!timing_) return;
  Scope scope(*this);
  const size_t i = static_cast<size_t>(label);
  if (events_[i].size() < 2 * brackets_[i] + 2) return;  // not begun since timing was switched on
  check(cu_->cuEventRecord(events_[i][2 * brackets_[i] + 1], stream_), "cuEventRecord");
  ++brackets_[i];
}

std::vector<double> CudaLauncher::take_timings() {
  std::vector<double> out(gpu::kTimingLabelCount, -1.0);
  if (!timing_) return out;
  Scope scope(*this);
  for (size_t i = 0; i < gpu::kTimingLabelCount; ++i) {
    if (brackets_[i] == 0) continue;
    double sum = 0.0;
    for (size_t b = 0; b < brackets_[i]; ++b) {
      check(cu_->cuEventSynchronize(events_[i][2 * b + 1]), "cuEventSynchronize");
      float ms = 0.f;
      check(cu_->cuEventElapsedTime(&ms, events_[i][2 * b], events_[i][2 * b + 1]), "cuEventElapsedTime");
      sum += ms;
    }
    brackets_[i] = 0;
    out[i] = sum;
  }
  return out;
}

void* CudaLauncher::allocate_host(size_t bytes) {
  if (!cu_->cuMemAllocHost || !cu_->cuMemFreeHost) return gpu::Launcher::allocate_host(bytes);
  Scope scope(*this);
  void* p = nullptr;
  check(cu_->cuMemAllocHost(&p, bytes ? bytes : 1), "cuMemAllocHost(" + std::to_string(bytes) + " bytes)");
  return p;
}

void CudaLauncher::release_host(void* p) {
  if (!p) return;
  if (!cu_->cuMemAllocHost || !cu_->cuMemFreeHost) return gpu::Launcher::release_host(p);
  Scope scope(*this);
  wait_stream("cuStreamSynchronize");  // a copy may still read it
  check(cu_->cuMemFreeHost(p), "cuMemFreeHost");
}

bool CudaLauncher::memory_info(size_t* free_bytes, size_t* total_bytes) {
  if (!cu_->cuMemGetInfo) return false;
  Scope scope(*this);
  return cu_->cuMemGetInfo(free_bytes, total_bytes) == CUDA_SUCCESS;
}

}  // namespace splat::cuda
