// The process-wide Metal state (Objective-C++, ARC): the MTLDevice, one
// command queue, the kernel libraries (splat.metallib next to the module, or
// the embedded sources compiled at first use) and the pipeline-state cache
// keyed by (kernel, function-constant values). Safe for concurrent use; every
// MetalLauncher of the process shares it, so a kernel specialisation is
// compiled once per process. Include only from .mm files.
#pragma once
#import <Metal/Metal.h>

#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <utility>

#include "../gpu/kernels.h"

namespace splat::metal {

// A compiled, specialised kernel; its address is the gpu::Pipeline handle.
struct MetalPipeline {
  id<MTLComputePipelineState> state = nil;
  std::string name;  // entry point [specialisation]
};

class MetalContext {
 public:
  // The shared context, created on first use; null (and `why` set) when this
  // machine has no usable Metal device. Never destroyed.
  static MetalContext* get(std::string* why);

  id<MTLDevice> device() const { return device_; }
  id<MTLCommandQueue> queue() const { return queue_; }
  std::string description() const;

  // The pipeline of `kernel` specialised with `spec`: built on first use, then
  // cached. Throws BackendError with Metal's message when the library, the
  // function or the pipeline cannot be built. `profile` logs its reflection.
  const MetalPipeline* pipeline(gpu::Kernel kernel, const gpu::Specialization& spec, bool profile);

 private:
  MetalContext() = default;
  bool init(std::string* why);
  // The library holding `info`'s entry point; caller holds mutex_.
  id<MTLLibrary> library_for(const gpu::KernelInfo& info, bool profile, std::string* origin);
  id<MTLLibrary> source_library(const gpu::KernelInfo& info, bool profile);

  id<MTLDevice> device_ = nil;
  id<MTLCommandQueue> queue_ = nil;
  std::string name_;

  std::mutex mutex_;
  id<MTLLibrary> metallib_ = nil;  // the install-time library, when it loaded
  std::string metallib_path_;
  std::string metallib_note_;      // why it is not used, when it is not
  std::map<std::string, id<MTLLibrary>> source_libraries_;  // by shaders/metal file
  std::map<std::pair<int, gpu::Specialization>, std::unique_ptr<MetalPipeline>> pipelines_;
};

// Runs `f` inside an autorelease pool; an exception it throws is rethrown
// after the pool is drained.
template <class F>
void pooled(F&& f) {
  std::exception_ptr failure;
  @autoreleasepool {
    try {
      f();
    } catch (...) {
      failure = std::current_exception();
    }
  }
  if (failure) std::rethrow_exception(failure);
}

// Metal's message of `error`, or `fallback` when there is none.
std::string error_text(NSError* error, const char* fallback = "no error details");

}  // namespace splat::metal
