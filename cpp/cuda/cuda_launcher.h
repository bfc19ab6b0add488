// Launcher on the CUDA driver API: the device's primary context, one stream,
// NVRTC-compiled kernels cached per (kernel, specialization) in memory and on
// disk, and CUDA events for the ts_* timings.
#pragma once
#include <array>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "../gpu/launcher.h"
#include "cuda_api.h"
#include "nccl_api.h"

namespace splat::cuda {

class CudaLauncher final : public gpu::Launcher {
 public:
  // Opens device `ordinal`; throws BackendError / BackendUnavailable.
  // overlap: launch kernels with programmatic dependent launch where the GPU
  // and the compiled kernels have it (BackendConfig.kernel_overlap).
  CudaLauncher(int ordinal, bool profile, bool overlap = false);
  ~CudaLauncher() override;
  CudaLauncher(const CudaLauncher&) = delete;
  CudaLauncher& operator=(const CudaLauncher&) = delete;

  std::string description() const override;
  gpu::BufferHandle allocate(size_t bytes) override;
  void release(gpu::BufferHandle buffer) override;
  void upload(gpu::BufferRef dst, const void* src, size_t bytes) override;
  void download(void* dst, gpu::BufferRef src, size_t bytes) override;
  void fill_zero(gpu::BufferRef dst, size_t bytes) override;
  gpu::Pipeline pipeline(gpu::Kernel kernel, const gpu::Specialization& spec) override;
  void dispatch(gpu::Pipeline pipeline, uint32_t groups, uint32_t group_size, const gpu::KernelArg* args,
                size_t num_args) override;
  void flush() override {}
  void synchronize() override;
  void set_timing(bool enabled) override;
  void begin_label(gpu::TimingLabel label) override;
  void end_label(gpu::TimingLabel label) override;
  std::vector<double> take_timings() override;
  bool memory_info(size_t* free_bytes, size_t* total_bytes) override;
  void* allocate_host(size_t bytes) override;
  void release_host(void* p) override;
  bool wraps_device_pointers() const override { return true; }
  void check_device_pointer(const void* ptr, const char* what) override;
  void copy(gpu::BufferRef dst, gpu::BufferRef src, size_t bytes) override;
  void use_queue(bool caller, uint64_t queue) override;
  Transfers transfers() const override { return transfers_; }
  void join_ranks(const std::string& unique_id, int rank, int ranks) override;
  void all_reduce(const gpu::BufferRef* buffers, const size_t* counts, size_t n, ReduceOp op) override;

 private:
  struct PipelineState {
    CUfunction function = nullptr;
    std::string name;  // entry point [specialization]
  };
  class Scope;  // makes the context current for one call

  void check(CUresult r, const std::string& what) const;
  // Waits for the stream (context current). With a communicator, polls it:
  // a rank that died leaves NCCL's kernels waiting, so an asynchronous NCCL
  // error, or no progress within $SPLAT_RANK_TIMEOUT seconds (600), aborts the
  // communicator and raises BackendError.
  void wait_stream(const char* what);
  CUmodule load_module(const gpu::KernelInfo& info, const std::vector<std::string>& defines);

  const Driver* cu_ = nullptr;
  const Nvrtc* nv_ = nullptr;
  CUdevice device_ = 0;
  CUcontext context_ = nullptr;
  CUstream stream_ = nullptr;      // where work is enqueued: own_stream_ or a caller's
  CUstream own_stream_ = nullptr;
  int ordinal_ = 0;
  Transfers transfers_;
  std::string name_;
  int cc_major_ = 0, cc_minor_ = 0, driver_version_ = 0;
  std::string arch_;  // "sm_90" (cubin) or "compute_XY" (PTX, JIT by the driver)
  bool profile_ = false;
  bool overlap_ = false;  // programmatic dependent launch (asked for, and sm_90 code on an sm_90 GPU)

  std::mutex pipeline_mutex_;
  std::map<std::string, CUmodule> modules_;  // by source + defines
  std::map<std::pair<int, gpu::Specialization>, std::unique_ptr<PipelineState>> pipelines_;
  const std::string* last_kernel_ = nullptr;  // name held by its PipelineState

  // Data-parallel ranks: NCCL and this rank's communicator (join_ranks).
  const Nccl* nccl_ = nullptr;
  ncclComm_t comm_ = nullptr;

  bool timing_ = false;
  // Per label, a (begin, end) event pair per bracket since the last
  // take_timings, which sums them: the views of a batch open a label once
  // each. Created as first needed, then reused.
  std::array<std::vector<CUevent>, gpu::kTimingLabelCount> events_{};
  std::array<size_t, gpu::kTimingLabelCount> brackets_{};
};

}  // namespace splat::cuda
