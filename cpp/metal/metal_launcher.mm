#include "metal_launcher.h"

#include <cstring>

#include "splat/errors.h"

namespace splat::metal {
namespace {

constexpr size_t kMaxKernelNames = 8;  // listed per command buffer in error messages

std::string status_name(MTLCommandBufferStatus s) {
  switch (s) {
    case MTLCommandBufferStatusNotEnqueued:
      return "not enqueued";
    case MTLCommandBufferStatusEnqueued:
      return "enqueued";
    case MTLCommandBufferStatusCommitted:
      return "committed";
    case MTLCommandBufferStatusScheduled:
      return "scheduled";
    case MTLCommandBufferStatusCompleted:
      return "completed";
    case MTLCommandBufferStatusError:
      return "error";
  }
  return "unknown";
}

// Which encoders of a failed command buffer faulted (macOS 11+).
std::string encoder_states(NSError* error) {
  if (!error) return {};
  std::string out;
  if (@available(macOS 11.0, *)) {
    NSArray* infos = error.userInfo[MTLCommandBufferEncoderInfoErrorKey];
    for (id<MTLCommandBufferEncoderInfo> info in infos) {
      const char* state = "unknown";
      switch (info.errorState) {
        case MTLCommandEncoderErrorStateCompleted:
          state = "completed";
          break;
        case MTLCommandEncoderErrorStateAffected:
          state = "affected";
          break;
        case MTLCommandEncoderErrorStateFaulted:
          state = "faulted";
          break;
        case MTLCommandEncoderErrorStatePending:
          state = "pending";
          break;
        default:
          break;
      }
      out += std::string("\n  encoder ") + (info.label ? info.label.UTF8String : "?") + ": " + state;
    }
  }
  return out;
}

}  // namespace

MetalLauncher::MetalLauncher(MetalContext* context, bool profile) : context_(context), profile_(profile) {}

MetalLauncher::~MetalLauncher() {
  try {
    synchronize();
  } catch (...) {
  }
}

std::string MetalLauncher::description() const { return context_->description(); }

bool MetalLauncher::memory_info(size_t* free_bytes, size_t* total_bytes) {
  id<MTLDevice> device = context_->device();
  const uint64_t total = device.recommendedMaxWorkingSetSize, used = device.currentAllocatedSize;
  if (total == 0) return false;
  *total_bytes = static_cast<size_t>(total);
  *free_bytes = static_cast<size_t>(total > used ? total - used : 0);
  return true;
}

id<MTLBuffer> MetalLauncher::buffer_of(gpu::BufferRef ref, size_t bytes, const char* what) const {
  if (ref.handle == 0 || ref.handle > buffers_.size() || !buffers_[ref.handle - 1])
    throw BackendError(std::string("[metal] ") + what + ": invalid buffer handle " + std::to_string(ref.handle));
  id<MTLBuffer> b = buffers_[ref.handle - 1];
  if (ref.offset > b.length || bytes > b.length - ref.offset)
    throw BackendError(std::string("[metal] ") + what + ": " + std::to_string(bytes) + " bytes at offset " +
                       std::to_string(ref.offset) + " exceed the buffer's " + std::to_string(b.length));
  return b;
}

gpu::BufferHandle MetalLauncher::allocate(size_t bytes) {
  gpu::BufferHandle handle = 0;
  pooled([&] {
    id<MTLDevice> device = context_->device();
    if (bytes > device.maxBufferLength)
      throw BackendError("[metal] cannot allocate " + std::to_string(bytes) + " bytes: the device's largest buffer is " +
                         std::to_string(device.maxBufferLength) + " bytes");
    id<MTLBuffer> b = [device newBufferWithLength:(bytes ? bytes : 16) options:MTLResourceStorageModeShared];
    if (!b) throw BackendError("[metal] newBufferWithLength(" + std::to_string(bytes) + " bytes) failed");
    size_t slot;
    if (!free_slots_.empty()) {
      slot = free_slots_.back();
      free_slots_.pop_back();
      buffers_[slot] = b;
    } else {
      slot = buffers_.size();
      buffers_.push_back(b);
    }
    handle = static_cast<gpu::BufferHandle>(slot + 1);
  });
  return handle;
}

void MetalLauncher::release(gpu::BufferHandle buffer) {
  if (buffer == 0 || buffer > buffers_.size()) return;
  // Command buffers keep the resources they use alive until they complete.
  buffers_[buffer - 1] = nil;
  free_slots_.push_back(buffer - 1);
}

void MetalLauncher::upload(gpu::BufferRef dst, const void* src, size_t bytes) {
  if (!bytes) return;
  id<MTLBuffer> b = buffer_of(dst, bytes, "upload");
  // Shared storage: a CPU copy, ordered after all work enqueued so far.
  if (!idle()) {
    commit();
    wait_all();
  }
  std::memcpy(static_cast<char*>(b.contents) + dst.offset, src, bytes);
}

void MetalLauncher::download(void* dst, gpu::BufferRef src, size_t bytes) {
  if (!bytes) return;
  id<MTLBuffer> b = buffer_of(src, bytes, "download");
  commit();
  wait_all();
  std::memcpy(dst, static_cast<const char*>(b.contents) + src.offset, bytes);
}

void MetalLauncher::begin_command_buffer() {
  if (command_) return;
  pooled([&] {
    id<MTLCommandBuffer> cb = nil;
    if (@available(macOS 11.0, *)) {
      MTLCommandBufferDescriptor* d = [MTLCommandBufferDescriptor new];
      d.errorOptions = MTLCommandBufferErrorOptionEncoderExecutionStatus;
      cb = [context_->queue() commandBufferWithDescriptor:d];
    } else {
      cb = [context_->queue() commandBuffer];
    }
    if (!cb) throw BackendError("[metal] the queue returned no command buffer");
    command_ = cb;
  });
  command_kernels_.clear();
  command_kernel_count_ = 0;
}

void MetalLauncher::end_encoder() {
  if (!encoder_) return;
  [encoder_ endEncoding];
  encoder_ = nil;
}

void MetalLauncher::note_kernel(const std::string& name) {
  if (command_kernel_count_ < kMaxKernelNames)
    command_kernels_ += (command_kernels_.empty() ? "" : "; ") + name;
  else if (command_kernel_count_ == kMaxKernelNames)
    command_kernels_ += "; ...";
  ++command_kernel_count_;
}

void MetalLauncher::fill_zero(gpu::BufferRef dst, size_t bytes) {
  if (!bytes) return;
  id<MTLBuffer> b = buffer_of(dst, bytes, "fill_zero");
  begin_command_buffer();
  end_encoder();
  pooled([&] {
    id<MTLBlitCommandEncoder> blit = [command_ blitCommandEncoder];
    if (!blit) throw BackendError("[metal] the command buffer returned no blit encoder");
    blit.label = @"fill_zero";
    [blit fillBuffer:b range:NSMakeRange(dst.offset, bytes) value:0];
    [blit endEncoding];
  });
  note_kernel("fill_zero");
  if (timing_) commit();
}

gpu::Pipeline MetalLauncher::pipeline(gpu::Kernel kernel, const gpu::Specialization& spec) {
  return context_->pipeline(kernel, spec, profile_);
}

void MetalLauncher::dispatch(gpu::Pipeline pipeline, uint32_t groups, uint32_t group_size, const gpu::KernelArg* args,
                             size_t num_args) {
  if (groups == 0) return;
  const auto* p = static_cast<const MetalPipeline*>(pipeline);
  if (group_size > p->state.maxTotalThreadsPerThreadgroup)
    throw BackendError("[metal] " + p->name + ": " + std::to_string(group_size) +
                       " threads per threadgroup exceed the pipeline's maximum of " +
                       std::to_string(p->state.maxTotalThreadsPerThreadgroup));
  // Resolve every argument before encoding anything.
  constexpr size_t kMaxArgs = 31;  // Metal's buffer argument table
  if (num_args > kMaxArgs) throw BackendError("[metal] too many kernel arguments for " + p->name);
  id<MTLBuffer> bound[kMaxArgs];
  for (size_t i = 0; i < num_args; ++i) {
    if (args[i].kind == gpu::KernelArg::Kind::Buffer) {
      bound[i] = buffer_of(args[i].buffer, 0, p->name.c_str());
    } else {
      bound[i] = nil;
      if (args[i].size > 4096) throw BackendError("[metal] " + p->name + ": argument over 4 KB passed by value");
    }
  }
  begin_command_buffer();
  pooled([&] {
    if (!encoder_) {
      // Serial dispatch type: each dispatch sees the writes of the previous.
      encoder_ = [command_ computeCommandEncoder];
      if (!encoder_) throw BackendError("[metal] the command buffer returned no compute encoder");
      encoder_.label = [NSString stringWithUTF8String:p->name.c_str()];
    }
    [encoder_ setComputePipelineState:p->state];
    for (size_t i = 0; i < num_args; ++i) {
      if (bound[i])
        [encoder_ setBuffer:bound[i] offset:args[i].buffer.offset atIndex:i];
      else
        [encoder_ setBytes:args[i].bytes length:args[i].size atIndex:i];
    }
    // The kernels declare their threadgroup arrays statically (at kernel
    // scope), so no threadgroup memory length is set here.
    [encoder_ dispatchThreadgroups:MTLSizeMake(groups, 1, 1) threadsPerThreadgroup:MTLSizeMake(group_size, 1, 1)];
  });
  note_kernel(p->name);
  if (timing_) commit();
}

void MetalLauncher::commit() {
  if (!command_) return;
  end_encoder();
  Submitted s;
  s.buffer = command_;
  s.label = label_;
  s.kernels = command_kernels_;
  [command_ commit];
  command_ = nil;
  command_kernels_.clear();
  command_kernel_count_ = 0;
  submitted_.push_back(std::move(s));
  reap();
}

void MetalLauncher::account(const Submitted& s) {
  if (s.label < 0) return;
  double ms = (s.buffer.GPUEndTime - s.buffer.GPUStartTime) * 1e3;
  gpu_ms_[s.label] += ms > 0.0 ? ms : 0.0;
  has_gpu_[s.label] = true;
}

void MetalLauncher::reap() {
  // Work flushed without a wait (e.g. training steps that read nothing back)
  // must not pile up: completed command buffers are dropped here, and past
  // kMaxInFlight the oldest is waited for. A failed one stays for wait_all().
  constexpr size_t kMaxInFlight = 16;
  if (submitted_.size() > kMaxInFlight && submitted_.front().buffer.status != MTLCommandBufferStatusError)
    [submitted_.front().buffer waitUntilCompleted];
  size_t done = 0;
  while (done < submitted_.size() && submitted_[done].buffer.status == MTLCommandBufferStatusCompleted)
    account(submitted_[done++]);
  submitted_.erase(submitted_.begin(), submitted_.begin() + static_cast<std::ptrdiff_t>(done));
}

void MetalLauncher::wait_all() {
  std::string failure;
  pooled([&] {
    for (Submitted& s : submitted_) {
      [s.buffer waitUntilCompleted];
      MTLCommandBufferStatus status = s.buffer.status;
      if (status == MTLCommandBufferStatusCompleted) {
        account(s);
      } else if (failure.empty()) {
        NSError* error = s.buffer.error;
        failure = "[metal] command buffer (" + s.kernels + ") ended with status " + status_name(status) + ": " +
                  error_text(error, "no error details") + encoder_states(error);
      }
    }
    submitted_.clear();
  });
  if (!failure.empty()) throw BackendError(failure);
}

void MetalLauncher::flush() { commit(); }

void MetalLauncher::synchronize() {
  commit();
  wait_all();
}

void MetalLauncher::set_timing(bool enabled) { timing_ = enabled; }

void MetalLauncher::begin_label(gpu::TimingLabel label) {
  if (!timing_) return;
  commit();  // earlier work belongs to the previous label
  label_ = static_cast<int>(label);
  label_start_ = std::chrono::steady_clock::now();
}

void MetalLauncher::end_label(gpu::TimingLabel label) {
  if (!timing_) return;
  synchronize();  // the label's host time then covers its GPU work
  size_t i = static_cast<size_t>(label);
  if (i < gpu::kTimingLabelCount) {
    host_ms_[i] += std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - label_start_).count();
    ran_[i] = true;
  }
  label_ = -1;
}

std::vector<double> MetalLauncher::take_timings() {
  std::vector<double> out(gpu::kTimingLabelCount, -1.0);
  for (size_t i = 0; i < gpu::kTimingLabelCount; ++i) {
    if (has_gpu_[i])
      out[i] = gpu_ms_[i];
    else if (ran_[i])
      out[i] = host_ms_[i];
    gpu_ms_[i] = host_ms_[i] = 0.0;
    has_gpu_[i] = ran_[i] = false;
  }
  return out;
}

}  // namespace splat::metal
