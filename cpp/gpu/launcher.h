// What the shared GPU encoding (GpuDevice) needs from a backend: buffers,
// specialized pipelines, dispatches, copies, and per-label timing. Implemented
// by the CUDA backend (driver API + NVRTC) and the Metal backend.
//
// Ordering: every call is enqueued in order on one queue (CUDA: one stream;
// Metal: the current command buffer). download() and synchronize() wait for
// everything enqueued before them; upload() may be called only while the GPU
// is not reading the destination (GpuDevice uploads at the start of a call).
#pragma once
#include <cstddef>
#include <cstdint>
#include <new>
#include <string>
#include <utility>
#include <vector>

#include "kernels.h"
#include "splat/errors.h"

namespace splat::gpu {

// A device allocation; the meaning of `handle` is backend-defined
// (CUdeviceptr, index into a table of MTLBuffers).
using BufferHandle = uint64_t;

struct BufferRef {
  BufferHandle handle = 0;
  size_t offset = 0;  // bytes
};

// One kernel argument, in entry-point parameter order: a buffer (a pointer
// parameter / [[buffer(i)]]) or a small struct passed by value (a kernel
// parameter / setBytes into a `constant T&`).
struct KernelArg {
  enum class Kind : uint8_t { Buffer, Bytes } kind = Kind::Buffer;
  BufferRef buffer;
  const void* bytes = nullptr;  // only read during dispatch()
  uint32_t size = 0;

  static KernelArg buf(BufferRef b) {
    KernelArg a;
    a.kind = Kind::Buffer;
    a.buffer = b;
    return a;
  }
  template <class T>
  static KernelArg value(const T& v) {
    KernelArg a;
    a.kind = Kind::Bytes;
    a.bytes = &v;
    a.size = static_cast<uint32_t>(sizeof(T));
    return a;
  }
};

// The ts_* labels of the rasterizer and the training step (docs/architecture.md,
// BackendConfig).
enum class TimingLabel : uint8_t {
  FwdUpload,
  FwdProject,
  FwdEmitPairs,
  FwdRadixSort,
  FwdRasterize,
  FwdReadback,
  BwdUpload,
  BackwardRaster,
  ProjectBack,
  BwdReadback,
  Ssim,        // fused loss forward + backward
  ZeroGrads,   // zeroing the backward's accumulators
  Adam,
  Densify,     // classify, scans, count read-back, gather
  Upload,      // training state / images to the device
  Readback,    // loss, state, counts from the device
  DensifyStats,  // densification statistics after the backward
  Count
};
constexpr size_t kTimingLabelCount = static_cast<size_t>(TimingLabel::Count);
const char* timing_label_name(TimingLabel l);  // "ts_fwd_project", ...

// A compiled, specialized kernel (a pipeline state), owned by the Launcher.
using Pipeline = const void*;

class Launcher {
 public:
  virtual ~Launcher() = default;

  virtual std::string description() const = 0;

  // Raw allocations (GpuDevice keeps them in a grow-only arena).
  virtual BufferHandle allocate(size_t bytes) = 0;
  virtual void release(BufferHandle buffer) = 0;

  // Copies; `src` may be reused as soon as upload() returns. download()
  // returns when the data is in `dst`.
  virtual void upload(BufferRef dst, const void* src, size_t bytes) = 0;
  virtual void download(void* dst, BufferRef src, size_t bytes) = 0;
  virtual void fill_zero(BufferRef dst, size_t bytes) = 0;

  // The pipeline of `kernel` specialized with `spec`: compiled on first use,
  // then cached under (kernel, spec). Thread-safe.
  virtual Pipeline pipeline(Kernel kernel, const Specialization& spec) = 0;

  // Enqueues `groups` threadgroups of `group_size` threads (1D).
  virtual void dispatch(Pipeline pipeline, uint32_t groups, uint32_t group_size, const KernelArg* args,
                        size_t num_args) = 0;

  // Submits what is enqueued (Metal: commits the command buffer; CUDA: no-op).
  virtual void flush() = 0;
  // Waits until everything enqueued has finished; raises errors of the work.
  virtual void synchronize() = 0;

  // Timing: GPU time between begin and end of a label, when enabled.
  virtual void set_timing(bool enabled) = 0;
  virtual void begin_label(TimingLabel label) = 0;
  virtual void end_label(TimingLabel label) = 0;
  // After synchronize(): milliseconds per label since the last call, summed
  // over the label's brackets (labels not run report -1).
  virtual std::vector<double> take_timings() = 0;

  // Host memory that upload() can copy from asynchronously (CUDA:
  // page-locked); it must stay unchanged until the copies from it are done.
  virtual void* allocate_host(size_t bytes) { return ::operator new(bytes ? bytes : 1); }
  virtual void release_host(void* p) { ::operator delete(p); }
  // --- Caller-owned memory and queue (zero-copy interop) -------------------
  // Whether a caller's device pointer is a BufferHandle as it is (CUDA: a
  // CUdeviceptr of this device's primary context). Backends that cannot wrap
  // foreign memory leave the defaults, and the caller copies through the host.
  virtual bool wraps_device_pointers() const { return false; }
  // Throws ConfigError naming `what` unless `ptr` is device memory of this device.
  virtual void check_device_pointer(const void* ptr, const char* what) {
    (void)ptr;
    (void)what;
  }
  // Device-to-device copy, enqueued in order.
  virtual void copy(BufferRef dst, BufferRef src, size_t bytes) {
    (void)dst;
    (void)src;
    (void)bytes;
    throw BackendError("[gpu] this backend has no device-to-device copy");
  }
  // Enqueue everything on the caller's `queue` (CUDA: a CUstream, 0 the legacy
  // default stream) from now on, or, with caller false, on the launcher's own.
  virtual void use_queue(bool caller, uint64_t queue) {
    (void)caller;
    (void)queue;
  }
  // Copies between host and device so far: calls and bytes of upload() and download().
  struct Transfers {
    uint64_t uploads = 0, upload_bytes = 0, downloads = 0, download_bytes = 0;
  };
  virtual Transfers transfers() const { return {}; }

  // --- Data-parallel ranks reducing on the device (CUDA: NCCL) --------------
  enum class ReduceOp : uint8_t { Sum, Max, Mean };
  // Joins the communicator of `ranks` ranks named by `unique_id` (rank 0's,
  // handed to the others); blocks until every rank has joined.
  virtual void join_ranks(const std::string& unique_id, int rank, int ranks) {
    (void)unique_id;
    (void)rank;
    (void)ranks;
    throw BackendError("[gpu] this backend cannot reduce across ranks on the device");
  }
  // Each buffer (counts[i] floats) reduced in place over the ranks, as one
  // group enqueued in order.
  virtual void all_reduce(const BufferRef* buffers, const size_t* counts, size_t n, ReduceOp op) {
    (void)buffers;
    (void)counts;
    (void)n;
    (void)op;
    throw BackendError("[gpu] this backend cannot reduce across ranks on the device");
  }

  // Device memory as the driver reports it (bytes); false when unknown.
  virtual bool memory_info(size_t* free_bytes, size_t* total_bytes) {
    (void)free_bytes;
    (void)total_bytes;
    return false;
  }
};

}  // namespace splat::gpu
