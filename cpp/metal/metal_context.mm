#include "metal_context.h"

#include <dlfcn.h>
#include <sys/stat.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "../../shaders/common/params.h"
#include "metal_source.h"
#include "splat/errors.h"

namespace splat::metal {
namespace {

// SIMD-group width the kernels are written for (shaders/common/compat.h).
constexpr NSUInteger kSimdWidth = 32;

std::string to_string(NSString* s) { return s ? std::string(s.UTF8String) : std::string(); }

bool file_exists(const std::string& path) {
  struct stat st;
  return stat(path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
}

// The folder of the binary this code is linked into (the Python module).
std::string module_folder() {
  Dl_info info;
  if (dladdr(reinterpret_cast<const void*>(&module_folder), &info) == 0 || !info.dli_fname) return {};
  std::string path = info.dli_fname;
  size_t slash = path.find_last_of('/');
  return slash == std::string::npos ? std::string(".") : path.substr(0, slash);
}

// $SPLAT_METALLIB: a metallib to use instead of the installed one, or "none"
// to compile the embedded sources (both kernel paths can then be compared).
std::string metallib_path(bool* disabled) {
  *disabled = false;
  const char* env = std::getenv("SPLAT_METALLIB");
  if (env && *env) {
    std::string v = env;
    if (v == "none" || v == "0" || v == "off") {
      *disabled = true;
      return {};
    }
    return v;
  }
  std::string folder = module_folder();
  return folder.empty() ? std::string() : folder + "/splat.metallib";
}

MTLCompileOptions* compile_options() {
  MTLCompileOptions* options = [MTLCompileOptions new];
  // Precise IEEE float32 arithmetic, as the CPU and CUDA backends (and the
  // metallib, built with -fno-fast-math).
#pragma clang diagnostic push
#pragma clang diagnostic ignored "-Wdeprecated-declarations"
  options.fastMathEnabled = NO;
#pragma clang diagnostic pop
#if defined(__MAC_15_0)
  if (@available(macOS 15.0, *)) {
    options.mathMode = MTLMathModeSafe;
    options.mathFloatingPointFunctions = MTLMathFloatingPointFunctionsPrecise;
  }
#endif
  if (@available(macOS 13.0, *)) options.languageVersion = MTLLanguageVersion3_0;
  return options;
}

}  // namespace

std::string error_text(NSError* error, const char* fallback) {
  if (!error) return fallback;
  std::string text = to_string(error.localizedDescription);
  if (text.empty()) text = to_string(error.description);
  return text.empty() ? std::string(fallback) : text;
}

MetalContext* MetalContext::get(std::string* why) {
  static std::mutex m;
  static MetalContext* context = nullptr;
  static bool tried = false;
  static std::string reason;
  std::lock_guard<std::mutex> lock(m);
  if (!tried) {
    tried = true;
    auto* c = new MetalContext();
    if (c->init(&reason)) {
      context = c;
    } else {
      delete c;
    }
  }
  if (!context && why) *why = reason;
  return context;
}

bool MetalContext::init(std::string* why) {
  bool ok = false;
  @autoreleasepool {
    if (@available(macOS 13.0, *)) {
      device_ = MTLCreateSystemDefaultDevice();
      if (!device_) {
        *why = "no Metal device (MTLCreateSystemDefaultDevice returned nil)";
      } else if (![device_ supportsFamily:MTLGPUFamilyMetal3]) {
        *why = to_string(device_.name) + " does not support Metal 3 (the kernels use float atomics)";
      } else {
        queue_ = [device_ newCommandQueue];
        if (!queue_) {
          *why = "newCommandQueue returned nil";
        } else {
          queue_.label = @"splat";
          name_ = to_string(device_.name);
          ok = true;
        }
      }
    } else {
      *why = "the Metal backend needs macOS 13 or newer (Metal 3)";
    }
    if (ok) {
      bool disabled = false;
      metallib_path_ = metallib_path(&disabled);
      if (disabled) {
        metallib_note_ = "SPLAT_METALLIB=none";
      } else if (metallib_path_.empty() || !file_exists(metallib_path_)) {
        metallib_note_ = "no splat.metallib next to the module";
      } else {
        NSError* error = nil;
        NSURL* url = [NSURL fileURLWithPath:[NSString stringWithUTF8String:metallib_path_.c_str()]];
        metallib_ = [device_ newLibraryWithURL:url error:&error];
        if (!metallib_) metallib_note_ = "cannot load " + metallib_path_ + ": " + error_text(error);
      }
    }
  }
  return ok;
}

std::string MetalContext::description() const {
  std::string d = "metal (" + name_;
  if (device_.hasUnifiedMemory) d += ", unified memory";
  d += ", kernels: ";
  d += metallib_ ? metallib_path_ : "embedded source compiled at run time (" + metallib_note_ + ")";
  return d + ")";
}

id<MTLLibrary> MetalContext::source_library(const gpu::KernelInfo& info, bool profile) {
  auto it = source_libraries_.find(info.metal_source);
  if (it != source_libraries_.end()) return it->second;
  std::string source, why;
  if (!metal_library_source(info.metal_source, &source, &why))
    throw BackendError(std::string("[metal] cannot assemble the source of ") + info.metal_source + ": " + why);
  NSString* text = [[NSString alloc] initWithBytes:source.data() length:source.size() encoding:NSUTF8StringEncoding];
  if (!text) throw BackendError(std::string("[metal] the source of ") + info.metal_source + " is not UTF-8");
  NSError* error = nil;
  auto t0 = std::chrono::steady_clock::now();
  id<MTLLibrary> library = [device_ newLibraryWithSource:text options:compile_options() error:&error];
  if (!library)
    throw BackendError(std::string("[metal] compiling ") + info.metal_source + " failed:\n" + error_text(error));
  if (profile) {
    double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    std::fprintf(stderr, "[splat metal] compiled %s from source in %.1f ms%s%s\n", info.metal_source, ms,
                 error ? ":\n" : "", error ? error_text(error).c_str() : "");
  }
  source_libraries_.emplace(info.metal_source, library);
  return library;
}

id<MTLLibrary> MetalContext::library_for(const gpu::KernelInfo& info, bool profile, std::string* origin) {
  if (metallib_) {
    // A metallib from another build may lack the entry point: then the
    // embedded source (always in step with this binary) is used instead.
    NSArray<NSString*>* names = metallib_.functionNames;
    if ([names containsObject:[NSString stringWithUTF8String:info.entry]]) {
      *origin = "splat.metallib";
      return metallib_;
    }
    if (profile)
      std::fprintf(stderr, "[splat metal] %s is not in %s; compiling the embedded source\n", info.entry,
                   metallib_path_.c_str());
  }
  *origin = std::string("source ") + info.metal_source;
  return source_library(info, profile);
}

const MetalPipeline* MetalContext::pipeline(gpu::Kernel kernel, const gpu::Specialization& spec, bool profile) {
  std::lock_guard<std::mutex> lock(mutex_);
  auto key = std::make_pair(static_cast<int>(kernel), spec);
  auto it = pipelines_.find(key);
  if (it != pipelines_.end()) return it->second.get();

  const gpu::KernelInfo& info = gpu::kernel_info(kernel);
  auto entry = std::make_unique<MetalPipeline>();
  entry->name = info.entry;
  std::string label = gpu::specialization_label(kernel, spec);
  if (!label.empty()) entry->name += " [" + label + "]";

  pooled([&] {
    std::string origin;
    id<MTLLibrary> library = library_for(info, profile, &origin);
    NSString* name = [NSString stringWithUTF8String:info.entry];
    NSError* error = nil;
    id<MTLFunction> function = nil;
    if (info.constants.empty()) {
      function = [library newFunctionWithName:name];
    } else {
      // Every constant gets its value (index = gpu::SpecConstant); values of
      // constants a function does not declare are ignored by Metal.
      MTLFunctionConstantValues* values = [MTLFunctionConstantValues new];
      for (size_t c = 0; c < gpu::kSpecCount; ++c) {
        int32_t v = spec.values[c];
        [values setConstantValue:&v type:MTLDataTypeInt atIndex:c];
      }
      function = [library newFunctionWithName:name constantValues:values error:&error];
    }
    if (!function)
      throw BackendError("[metal] cannot make function " + entry->name + " (" + origin + "): " +
                         error_text(error, "the library has no such function"));
    function.label = [NSString stringWithUTF8String:entry->name.c_str()];
    // Every dispatch of a kernel uses its info.threads threads, a multiple of
    // the SIMD width: saying so lets the compiler budget registers for that.
    MTLComputePipelineDescriptor* descriptor = [MTLComputePipelineDescriptor new];
    descriptor.computeFunction = function;
    descriptor.label = function.label;
    descriptor.maxTotalThreadsPerThreadgroup = info.threads;
    descriptor.threadGroupSizeIsMultipleOfThreadExecutionWidth = YES;
    error = nil;
    id<MTLComputePipelineState> state = [device_ newComputePipelineStateWithDescriptor:descriptor
                                                                               options:MTLPipelineOptionNone
                                                                            reflection:nil
                                                                                 error:&error];
    if (!state)
      throw BackendError("[metal] cannot build the pipeline of " + entry->name + ": " + error_text(error));
    if (state.threadExecutionWidth != kSimdWidth || state.maxTotalThreadsPerThreadgroup < info.threads)
      throw BackendError("[metal] " + entry->name + " runs " + std::to_string(state.threadExecutionWidth) +
                         "-wide SIMD groups of at most " + std::to_string(state.maxTotalThreadsPerThreadgroup) +
                         " threads per threadgroup on " + name_ + "; the kernel needs 32-wide SIMD groups and " +
                         std::to_string(info.threads) + " threads per threadgroup");
    if (profile)
      std::fprintf(stderr,
                   "[splat metal] %s (%s): threadExecutionWidth %lu, maxTotalThreadsPerThreadgroup %lu, "
                   "staticThreadgroupMemoryLength %lu B\n",
                   entry->name.c_str(), origin.c_str(), static_cast<unsigned long>(state.threadExecutionWidth),
                   static_cast<unsigned long>(state.maxTotalThreadsPerThreadgroup),
                   static_cast<unsigned long>(state.staticThreadgroupMemoryLength));
    entry->state = state;
  });
  const MetalPipeline* p = entry.get();
  pipelines_.emplace(key, std::move(entry));
  return p;
}

}  // namespace splat::metal
