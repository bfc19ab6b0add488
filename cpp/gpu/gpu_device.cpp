#include "gpu_device.h"

#include <algorithm>
#include <chrono>

#include "grid.h"
#include "splat/errors.h"
#include "splat/limits.h"
#include "timing.h"

namespace splat::gpu {
GpuDevice::GpuDevice(Backend backend, const BackendConfig& config, std::unique_ptr<Launcher> launcher)
    : backend_(backend),
      config_(config),
      launcher_(std::move(launcher)),
      pairs_on_device_(config.pair_sizing == PairSizing::Device) {
  backward_spec_ = rasterize_backward_specialization(config_);
  deterministic_spec_ = deterministic_specialization(config_);
  timing_ = config_.timing == Timing::PerKernel;
  launcher_->set_timing(timing_);
  size_t free_bytes = 0, total_bytes = 0;
  if (launcher_->memory_info(&free_bytes, &total_bytes)) record_driver_start(total_bytes - free_bytes);
}

GpuDevice::~GpuDevice() {
  try {
    launcher_->synchronize();
  } catch (...) {
  }
  try {
    if (host_images_) launcher_->release_host(host_images_);
  } catch (...) {
  }
  for (auto& b : arena_) {
    if (b.capacity == 0) continue;
    try {
      launcher_->release(b.handle);
      record_arena_bytes(-static_cast<long long>(b.capacity));
    } catch (...) {
    }
  }
}

std::string GpuDevice::description() const { return launcher_->description(); }

size_t GpuDevice::allocation_count() const { return allocations_; }

BufferRef GpuDevice::ensure(int slot, size_t bytes, bool headroom) {
  ArenaBuffer& b = arena_[slot];
  bytes = std::max<size_t>(bytes, 16);
  if (b.capacity < bytes || b.stale) {
    auto t0 = std::chrono::steady_clock::now();
    // 1.25x: densification grows the state by a few percent at a time; 1.5x
    // left lego_800's arena 0.03 GiB larger at the end.
    size_t cap = b.stale ? bytes : std::max(bytes, b.capacity + b.capacity / 4);
    if (headroom) cap = std::max(cap, bytes + bytes / 4);
    cap = (cap + 255) & ~size_t{255};
    if (b.capacity) {
      launcher_->release(b.handle);
      record_arena_bytes(-static_cast<long long>(b.capacity));
    }
    b.handle = 0;
    b.capacity = 0;
    b.handle = launcher_->allocate(cap);
    b.capacity = cap;
    record_arena_bytes(static_cast<long long>(cap));
    ++allocations_;
    size_t free_bytes = 0, total_bytes = 0;
    if (launcher_->memory_info(&free_bytes, &total_bytes)) record_driver_memory(total_bytes - free_bytes, total_bytes);
    const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    alloc_ms_ += ms;
    alloc_ms_by_label_[static_cast<size_t>(current_label_)] += ms;
  }
  b.stale = false;
  return BufferRef{b.handle, 0};
}

Pipeline GpuDevice::pipeline(Kernel k) {
  Pipeline& p = pipelines_[static_cast<size_t>(k)];
  if (!p) {
    Specialization spec;
    if (k == Kernel::RasterizeBackward) spec = backward_spec_;
    if (k == Kernel::ProjectBackward || k == Kernel::ProjectBackwardViews || k == Kernel::EmitPairs)
      spec = deterministic_spec_;
    p = launcher_->pipeline(k, spec);
  }
  return p;
}

void GpuDevice::launch(Kernel k, uint32_t groups, std::initializer_list<KernelArg> args) {
  if (groups == 0) return;
  launch(pipeline(k), k, groups, args);
}

void GpuDevice::launch(Pipeline p, Kernel k, uint32_t groups, std::initializer_list<KernelArg> args) {
  if (groups == 0) return;
  launcher_->dispatch(p, groups, kernel_info(k).threads, args.begin(), args.size());
  if (config_.submission == Submission::PerKernel) {
    launcher_->flush();
    launcher_->synchronize();
  }
}

void GpuDevice::begin(TimingLabel l) {
  current_label_ = l;
  if (timing_) launcher_->begin_label(l);
}

void GpuDevice::end(TimingLabel l) {
  if (timing_) launcher_->end_label(l);
  const bool forward_stage = l <= TimingLabel::FwdReadback;
  if (forward_stage && config_.forward_submission == ForwardSubmission::PerStage) {
    launcher_->flush();
    launcher_->synchronize();
  }
}

void GpuDevice::finish_op(bool sync) {
  launcher_->flush();
  if (!sync && !timing_) return;
  launcher_->synchronize();
  if (!timing_) return;
  std::vector<double> ms = launcher_->take_timings();
  for (size_t i = 0; i < ms.size() && i < kTimingLabelCount; ++i) {
    const double alloc = alloc_ms_by_label_[i];
    alloc_ms_by_label_[i] = 0.0;
    if (ms[i] < 0.0) continue;
    const TimingLabel l = static_cast<TimingLabel>(i);
    const char* name = timing_label_name(l);
    record_timing(name, ms[i]);
    // The label's GPU time is an upload, a read-back or compute by what it
    // does; the host time of arena allocations inside it is its alloc time.
    if (l == TimingLabel::FwdUpload || l == TimingLabel::BwdUpload || l == TimingLabel::Upload)
      registry_.add(name, 0.0, ms[i], alloc, 0.0);
    else if (l == TimingLabel::FwdReadback || l == TimingLabel::BwdReadback || l == TimingLabel::Readback)
      registry_.add(name, 0.0, 0.0, alloc, ms[i]);
    else
      registry_.add(name, ms[i], 0.0, alloc, 0.0);
  }
  if (alloc_ms_ > 0.0) record_timing("ts_alloc", alloc_ms_);
  alloc_ms_ = 0.0;
}

uint32_t GpuDevice::exclusive_scan(BufferRef in, BufferRef out, uint32_t count) {
  const uint32_t blocks = div_up(count, SPLAT_SCAN_BLOCK);
  // The scanned block sums, then the total (scan.h): scan_apply copies the
  // total to out[count]; scanned_total() reads the block offsets back.
  BufferRef sums = ensure(kScanBlockSums, sizeof(uint32_t) * (size_t{blocks} + 1));
  ScanParams p{count, blocks, blocks, 0};
  BufferRef total{sums.handle, sizeof(uint32_t) * size_t{blocks}};
  launch(Kernel::ScanBlockSums, blocks, {KernelArg::value(p), KernelArg::buf(in), KernelArg::buf(sums)});
  launch(Kernel::ScanRows, 1, {KernelArg::value(p), KernelArg::buf(sums), KernelArg::buf(total)});
  launch(Kernel::ScanApply, std::max(blocks, 1u),
         {KernelArg::value(p), KernelArg::buf(in), KernelArg::buf(sums), KernelArg::buf(out)});
  return blocks;
}

uint64_t GpuDevice::scanned_total(uint32_t blocks, bool& saturated) {
  // Block offsets modulo 2^32, the total last: no block sum wraps (scan.h),
  // so each difference modulo 2^32 is that block's sum.
  scan_offsets_.resize(size_t{blocks} + 1);
  launcher_->download(scan_offsets_.data(), ref(kScanBlockSums), sizeof(uint32_t) * scan_offsets_.size());
  uint64_t total = 0;
  saturated = false;
  for (uint32_t b = 0; b < blocks; ++b) {
    const uint32_t sum = scan_offsets_[b + 1] - scan_offsets_[b];
    saturated = saturated || sum == 0xffffffffu;
    total += sum;
  }
  return total;
}

bool GpuDevice::radix_sort_slots(int keys_a, int keys_b, int vals_a, int vals_b, uint32_t count,
                                 uint32_t key_bits, BufferRef count_limit) {
  const uint32_t blocks = div_up(count, SPLAT_SORT_BLOCK);
  BufferRef hist = ensure(kHist, sizeof(uint32_t) * SPLAT_RADIX * static_cast<size_t>(blocks));
  BufferRef totals = ensure(kDigitTotals, sizeof(uint32_t) * SPLAT_RADIX);
  BufferRef keys[2] = {ref(keys_a), ref(keys_b)};
  BufferRef vals[2] = {ref(vals_a), ref(vals_b)};
  const uint32_t passes = (key_bits + SPLAT_RADIX_BITS - 1) / SPLAT_RADIX_BITS;
  int cur = 0;
  for (uint32_t pass = 0; pass < passes; ++pass) {
    ScanParams p{count, blocks, blocks, pass * SPLAT_RADIX_BITS};
    launch(Kernel::RadixHistogram, blocks,
           {KernelArg::value(p), KernelArg::buf(keys[cur]), KernelArg::buf(count_limit), KernelArg::buf(hist)});
    launch(Kernel::ScanRows, SPLAT_RADIX, {KernelArg::value(p), KernelArg::buf(hist), KernelArg::buf(totals)});
    launch(Kernel::RadixScatter, blocks,
           {KernelArg::value(p), KernelArg::buf(keys[cur]), KernelArg::buf(vals[cur]), KernelArg::buf(count_limit),
            KernelArg::buf(keys[1 - cur]), KernelArg::buf(vals[1 - cur]), KernelArg::buf(hist),
            KernelArg::buf(totals)});
    cur = 1 - cur;
  }
  return cur == 1;
}

void GpuDevice::rasterize_forward(const GaussiansView& g, const CameraParams& cam, uint32_t sh_degree,
                                  const float background[3], const ForwardOutputs& out) {
  std::lock_guard<std::mutex> lock(mutex_);
  have_forward_ = false;
  const size_t n = g.count;
  check_gaussian_count(n);  // before the uploads
  const size_t pixels = static_cast<size_t>(cam.width) * cam.height;
  const size_t k = g.sh_stride;

  begin(TimingLabel::FwdUpload);
  ParamRefs params{{ensure(kMeans, 12 * n), ensure(kLogScales, 12 * n), ensure(kQuats, 16 * n),
                    ensure(kOpacityLogits, 4 * n), ensure(kSh, 12 * k * n)}};
  if (n) {
    launcher_->upload(params.p[0], g.means, 12 * n);
    launcher_->upload(params.p[1], g.log_scales, 12 * n);
    launcher_->upload(params.p[2], g.quats, 16 * n);
    launcher_->upload(params.p[3], g.opacity_logits, 4 * n);
    launcher_->upload(params.p[4], g.sh, 12 * k * n);
  }
  end(TimingLabel::FwdUpload);

  forward_pass(params, n, g.sh_stride, cam, sh_degree, background);
  have_forward_ = false;

  begin(TimingLabel::FwdReadback);
  if (out.image) launcher_->download(out.image, ref(kImage), 12 * pixels);
  if (out.alpha) launcher_->download(out.alpha, ref(kAlpha), 4 * pixels);
  if (out.radii && n) launcher_->download(out.radii, ref(kRadius), 4 * n);
  end(TimingLabel::FwdReadback);
  finish_call();
  have_forward_ = true;
}

void GpuDevice::rasterize_backward(const float* d_image, const float* d_alpha, const GradientOutputs& grads) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!have_forward_) throw BackendError("[gpu] rasterize_backward() needs a forward pass first");
  const size_t n = num_gaussians_;
  const size_t k = rp_.sh_stride;
  const size_t pixels = static_cast<size_t>(cam_.width) * cam_.height;

  begin(TimingLabel::BwdUpload);
  BufferRef dimg = ensure(kDImage, 12 * pixels);
  launcher_->upload(dimg, d_image, 12 * pixels);
  BufferRef dalpha{};
  if (d_alpha) {
    dalpha = ensure(kDAlpha, 4 * pixels);
    launcher_->upload(dalpha, d_alpha, 4 * pixels);
  }
  end(TimingLabel::BwdUpload);

  const BufferRef outs[6] = {ensure(kOutMeans, 12 * n),     ensure(kOutLogScales, 12 * n),
                             ensure(kOutQuats, 16 * n),     ensure(kOutOpacityLogits, 4 * n),
                             ensure(kOutSh, 12 * k * n),    ensure(kOutMeans2d, 8 * n)};
  backward_pass(dimg, d_alpha ? &dalpha : nullptr, outs);

  begin(TimingLabel::BwdReadback);
  if (n) {
    if (grads.means) launcher_->download(grads.means, outs[0], 12 * n);
    if (grads.log_scales) launcher_->download(grads.log_scales, outs[1], 12 * n);
    if (grads.quats) launcher_->download(grads.quats, outs[2], 16 * n);
    if (grads.opacity_logits) launcher_->download(grads.opacity_logits, outs[3], 4 * n);
    if (grads.sh) launcher_->download(grads.sh, outs[4], 12 * k * n);
    if (grads.means2d) launcher_->download(grads.means2d, outs[5], 8 * n);
  }
  end(TimingLabel::BwdReadback);
  finish_call();
}

namespace {

// The caller's memory as a buffer of the launcher (wraps_device_pointers()).
BufferRef external(const void* p) { return BufferRef{static_cast<BufferHandle>(reinterpret_cast<uintptr_t>(p)), 0}; }

// Enqueues on the caller's queue for one call.
class QueueScope {
 public:
  QueueScope(Launcher& l, uint64_t queue) : l_(l) { l_.use_queue(true, queue); }
  ~QueueScope() { l_.use_queue(false, 0); }

 private:
  Launcher& l_;
};

}  // namespace

// The numpy path without its copies: the parameters are read where they are,
// the outputs written in place, all on the caller's queue; no wait at the end.
void GpuDevice::rasterize_forward_external(const GaussiansView& g, const CameraParams& cam, uint32_t sh_degree,
                                           const float background[3], const ForwardOutputs& out, uint64_t queue) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!launcher_->wraps_device_pointers()) throw BackendError("[gpu] this backend does not read the caller's memory");
  have_forward_ = false;
  const size_t n = g.count;
  const size_t pixels = static_cast<size_t>(cam.width) * cam.height;
  if (!out.image || !out.alpha || (n && !out.radii)) throw ConfigError("[gpu] forward: every output is required");
  if (n) {
    launcher_->check_device_pointer(g.means, "means");
    launcher_->check_device_pointer(g.sh, "sh");
  }
  launcher_->check_device_pointer(out.image, "image");
  QueueScope scope(*launcher_, queue);
  const ParamRefs params{{external(g.means), external(g.log_scales), external(g.quats), external(g.opacity_logits),
                          external(g.sh)}};
  forward_pass(params, n, g.sh_stride, cam, sh_degree, background);
  have_forward_ = false;
  launcher_->copy(external(out.image), ref(kImage), 12 * pixels);
  launcher_->copy(external(out.alpha), ref(kAlpha), 4 * pixels);
  if (n) launcher_->copy(external(out.radii), ref(kRadius), 4 * n);
  finish_op(false);
  have_forward_ = true;
}

void GpuDevice::rasterize_backward_external(const float* d_image, const float* d_alpha, const GradientOutputs& grads,
                                            uint64_t queue) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!have_forward_) throw BackendError("[gpu] rasterize_backward_external() needs a forward pass first");
  const size_t n = num_gaussians_;
  if (n && (!grads.means || !grads.log_scales || !grads.quats || !grads.opacity_logits || !grads.means2d))
    throw ConfigError("[gpu] backward: every gradient output but sh is required");
  launcher_->check_device_pointer(d_image, "d_image");
  if (n) launcher_->check_device_pointer(grads.means, "grad means");
  // expand_sh_grad_body writes the SH gradient a 16-byte quad at a time.
  if (grads.sh && reinterpret_cast<uintptr_t>(grads.sh) % 16 != 0)
    throw ConfigError("[gpu] grad sh: the array must start 16-byte aligned");
  QueueScope scope(*launcher_, queue);
  const BufferRef dimg = external(d_image), dalpha = external(d_alpha);
  const BufferRef outs[6] = {external(grads.means),          external(grads.log_scales), external(grads.quats),
                             external(grads.opacity_logits), external(grads.sh),         external(grads.means2d)};
  backward_pass(dimg, d_alpha ? &dalpha : nullptr, outs);
  finish_op(false);
}

Device::HostTransfers GpuDevice::host_transfers() const {
  const Launcher::Transfers t = launcher_->transfers();
  HostTransfers h;
  h.uploads = t.uploads;
  h.upload_bytes = t.upload_bytes;
  h.downloads = t.downloads;
  h.download_bytes = t.download_bytes;
  return h;
}

void GpuDevice::radix_sort(uint32_t* keys, uint32_t* values, size_t count, uint32_t key_bits) {
  std::lock_guard<std::mutex> lock(mutex_);
  have_forward_ = false;
  if (count >= (size_t{1} << 31)) throw BackendError("[gpu] radix_sort: too many keys");
  if (key_bits > 32) throw ConfigError("[gpu] radix_sort: key_bits must be <= 32");
  if (count == 0) return;
  launcher_->upload(ensure(kKeysA, 4 * count), keys, 4 * count);
  launcher_->upload(ensure(kValsA, 4 * count), values, 4 * count);
  ensure(kKeysB, 4 * count);
  ensure(kValsB, 4 * count);
  bool in_b = radix_sort_slots(kKeysA, kKeysB, kValsA, kValsB, static_cast<uint32_t>(count), key_bits,
                               count_unlimited());
  launcher_->download(keys, ref(in_b ? kKeysB : kKeysA), 4 * count);
  launcher_->download(values, ref(in_b ? kValsB : kValsA), 4 * count);
  finish_call();
}

}  // namespace splat::gpu
