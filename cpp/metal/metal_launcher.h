// Launcher on Metal (Objective-C++, ARC): shared-storage MTLBuffers, command
// buffers on the context's queue, one serial compute encoder per command
// buffer, blit fills, and per-label GPU timing. Include only from .mm files.
//
// Command buffers: the work GpuDevice enqueues accumulates in one command
// buffer until flush() commits it (GpuDevice flushes at the end of a call, at
// a download, and after every kernel or forward stage under
// submission=per_kernel / forward_submission=per_stage). With timing on,
// every dispatch and fill is committed in a command buffer of its own and a
// label's GPU time is the sum of their GPUEndTime - GPUStartTime; labels with
// no GPU work (uploads and readbacks are CPU copies on unified memory) report
// their host time.
#pragma once
#import <Metal/Metal.h>

#include <array>
#include <chrono>
#include <string>
#include <vector>

#include "../gpu/launcher.h"
#include "metal_context.h"

namespace splat::metal {

class MetalLauncher final : public gpu::Launcher {
 public:
  MetalLauncher(MetalContext* context, bool profile);
  ~MetalLauncher() override;
  MetalLauncher(const MetalLauncher&) = delete;
  MetalLauncher& operator=(const MetalLauncher&) = delete;

  std::string description() const override;
  gpu::BufferHandle allocate(size_t bytes) override;
  void release(gpu::BufferHandle buffer) override;
  void upload(gpu::BufferRef dst, const void* src, size_t bytes) override;
  void download(void* dst, gpu::BufferRef src, size_t bytes) override;
  void fill_zero(gpu::BufferRef dst, size_t bytes) override;
  gpu::Pipeline pipeline(gpu::Kernel kernel, const gpu::Specialization& spec) override;
  void dispatch(gpu::Pipeline pipeline, uint32_t groups, uint32_t group_size, const gpu::KernelArg* args,
                size_t num_args) override;
  void flush() override;
  void synchronize() override;
  void set_timing(bool enabled) override;
  void begin_label(gpu::TimingLabel label) override;
  void end_label(gpu::TimingLabel label) override;
  std::vector<double> take_timings() override;
  // Unified memory: the device's recommended working set, less what is
  // allocated now (the share of RAM the GPU is meant to use).
  bool memory_info(size_t* free_bytes, size_t* total_bytes) override;

 private:
  struct Submitted {
    id<MTLCommandBuffer> buffer = nil;
    int label = -1;       // timing label active when it was encoded
    std::string kernels;  // what it runs, for error messages
  };

  // The buffer of `ref`, checked to hold `bytes` from its offset.
  id<MTLBuffer> buffer_of(gpu::BufferRef ref, size_t bytes, const char* what) const;
  bool idle() const { return !command_ && submitted_.empty(); }
  void begin_command_buffer();
  void end_encoder();
  void note_kernel(const std::string& name);
  // Commits the open command buffer (if any).
  void commit();
  // Drops completed command buffers (their GPU time counted); bounds the
  // number in flight.
  void reap();
  void account(const Submitted& s);
  // Waits for every committed command buffer; throws the first failure.
  void wait_all();

  MetalContext* context_;
  bool profile_;
  std::vector<id<MTLBuffer>> buffers_;  // handle h is buffers_[h - 1]
  std::vector<size_t> free_slots_;

  id<MTLCommandBuffer> command_ = nil;
  id<MTLComputeCommandEncoder> encoder_ = nil;
  std::string command_kernels_;  // its kernels, for error messages
  size_t command_kernel_count_ = 0;
  std::vector<Submitted> submitted_;

  bool timing_ = false;
  int label_ = -1;
  std::chrono::steady_clock::time_point label_start_;
  std::array<double, gpu::kTimingLabelCount> gpu_ms_{};
  std::array<bool, gpu::kTimingLabelCount> has_gpu_{};
  std::array<double, gpu::kTimingLabelCount> host_ms_{};
  std::array<bool, gpu::kTimingLabelCount> ran_{};
};

}  // namespace splat::metal
