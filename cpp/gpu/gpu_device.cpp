#include "gpu_device.h"

#include <algorithm>
#include <cstring>

#include "splat/errors.h"
#include "timing.h"

namespace splat::gpu {
namespace {

constexpr uint32_t kGroup = SPLAT_GROUP_SIZE;

uint32_t div_up(size_t n, size_t d) { return static_cast<uint32_t>((n + d - 1) / d); }

// Bits needed to hold tile ids 0 .. num_tiles - 1.
uint32_t tile_bits(uint32_t num_tiles) {
  uint32_t bits = 0;
  while (bits < 32 && (uint64_t{1} << bits) < num_tiles) ++bits;
  return bits;
}

}  // namespace

GpuDevice::GpuDevice(Backend backend, const BackendConfig& config, std::unique_ptr<Launcher> launcher)
    : backend_(backend), config_(config), launcher_(std::move(launcher)) {
  backward_spec_ = rasterize_backward_specialization(config_);
  project_backward_spec_ = project_backward_specialization(config_);
  timing_ = config_.timing == Timing::PerKernel;
  launcher_->set_timing(timing_);
}

GpuDevice::~GpuDevice() {
  try {
    launcher_->synchronize();
  } catch (...) {
  }
  for (auto& b : arena_) {
    if (b.capacity == 0) continue;
    try {
      launcher_->release(b.handle);
    } catch (...) {
    }
  }
}

std::string GpuDevice::description() const { return launcher_->description(); }

size_t GpuDevice::allocation_count() const { return allocations_; }

BufferRef GpuDevice::ensure(Slot slot, size_t bytes) {
  ArenaBuffer& b = arena_[slot];
  bytes = std::max<size_t>(bytes, 16);
  if (b.capacity < bytes || b.stale) {
    size_t cap = b.stale ? bytes : std::max(bytes, b.capacity + b.capacity / 2);
    cap = (cap + 255) & ~size_t{255};
    if (b.capacity) launcher_->release(b.handle);
    b.handle = 0;
    b.capacity = 0;
    b.handle = launcher_->allocate(cap);
    b.capacity = cap;
    ++allocations_;
  }
  b.stale = false;
  return BufferRef{b.handle, 0};
}

Pipeline GpuDevice::pipeline(Kernel k) {
  Pipeline& p = pipelines_[static_cast<size_t>(k)];
  if (!p) {
    Specialization spec;
    if (k == Kernel::RasterizeBackward) spec = backward_spec_;
    if (k == Kernel::ProjectBackward) spec = project_backward_spec_;
    p = launcher_->pipeline(k, spec);
  }
  return p;
}

void GpuDevice::launch(Kernel k, uint32_t groups, std::initializer_list<KernelArg> args) {
  if (groups == 0) return;
  launcher_->dispatch(pipeline(k), groups, kGroup, args.begin(), args.size());
  if (config_.submission == Submission::PerKernel) {
    launcher_->flush();
    launcher_->synchronize();
  }
}

void GpuDevice::begin(TimingLabel l) {
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

void GpuDevice::finish_call() {
  launcher_->flush();
  launcher_->synchronize();
  if (!timing_) return;
  std::vector<double> ms = launcher_->take_timings();
  for (size_t i = 0; i < ms.size() && i < kTimingLabelCount; ++i)
    if (ms[i] >= 0.0) record_timing(timing_label_name(static_cast<TimingLabel>(i)), ms[i]);
}

void GpuDevice::exclusive_scan(BufferRef in, BufferRef out, uint32_t count) {
  const uint32_t blocks = div_up(count, SPLAT_SCAN_BLOCK);
  BufferRef sums = ensure(kScanBlockSums, sizeof(uint32_t) * blocks);
  ScanParams p{count, blocks, blocks, 0};
  BufferRef total{out.handle, out.offset + sizeof(uint32_t) * count};
  launch(Kernel::ScanBlockSums, blocks, {KernelArg::value(p), KernelArg::buf(in), KernelArg::buf(sums)});
  launch(Kernel::ScanRows, 1, {KernelArg::value(p), KernelArg::buf(sums), KernelArg::buf(total)});
  launch(Kernel::ScanApply, blocks,
         {KernelArg::value(p), KernelArg::buf(in), KernelArg::buf(sums), KernelArg::buf(out)});
}

bool GpuDevice::sort_pairs(uint32_t count, uint32_t key_bits) {
  const uint32_t blocks = div_up(count, SPLAT_SCAN_BLOCK);
  BufferRef hist = ensure(kHist, sizeof(uint32_t) * SPLAT_RADIX * static_cast<size_t>(blocks));
  BufferRef totals = ensure(kDigitTotals, sizeof(uint32_t) * SPLAT_RADIX);
  BufferRef keys[2] = {ref(kKeysA), ref(kKeysB)};
  BufferRef vals[2] = {ref(kValsA), ref(kValsB)};
  const uint32_t passes = (key_bits + SPLAT_RADIX_BITS - 1) / SPLAT_RADIX_BITS;
  int cur = 0;
  for (uint32_t pass = 0; pass < passes; ++pass) {
    ScanParams p{count, blocks, blocks, pass * SPLAT_RADIX_BITS};
    launch(Kernel::RadixHistogram, blocks, {KernelArg::value(p), KernelArg::buf(keys[cur]), KernelArg::buf(hist)});
    launch(Kernel::ScanRows, SPLAT_RADIX, {KernelArg::value(p), KernelArg::buf(hist), KernelArg::buf(totals)});
    launch(Kernel::RadixScatter, blocks,
           {KernelArg::value(p), KernelArg::buf(keys[cur]), KernelArg::buf(vals[cur]), KernelArg::buf(keys[1 - cur]),
            KernelArg::buf(vals[1 - cur]), KernelArg::buf(hist), KernelArg::buf(totals)});
    cur = 1 - cur;
  }
  return cur == 1;
}

void GpuDevice::rasterize_forward(const GaussiansView& g, const CameraParams& cam, uint32_t sh_degree,
                                  const float background[3], const ForwardOutputs& out) {
  std::lock_guard<std::mutex> lock(mutex_);
  have_forward_ = false;
  const size_t n = g.count;
  if (n >= (size_t{1} << 31)) throw BackendError("[gpu] too many Gaussians for one call");
  const uint32_t num_tiles = cam.tiles_x * cam.tiles_y;
  const size_t pixels = static_cast<size_t>(cam.width) * cam.height;
  const size_t k = g.sh_stride;
  cam_ = cam;
  rp_ = RasterParams{};
  rp_.num_gaussians = static_cast<uint32_t>(n);
  rp_.sh_degree = sh_degree;
  rp_.sh_stride = g.sh_stride;
  rp_.num_tiles = num_tiles;
  for (int c = 0; c < 3; ++c) rp_.background[c] = background[c];
  num_gaussians_ = n;
  num_pairs_ = 0;
  // binning=per_iter_alloc: the binning buffers (pairs, sort, tile ranges)
  // are allocated afresh by every forward, the A/B baseline of the arena.
  if (config_.binning == Binning::PerIterAlloc)
    for (int s = kKeysA; s <= kRanges; ++s) arena_[s].stale = true;

  begin(TimingLabel::FwdUpload);
  BufferRef means = ensure(kMeans, 12 * n), log_scales = ensure(kLogScales, 12 * n), quats = ensure(kQuats, 16 * n),
            logits = ensure(kOpacityLogits, 4 * n), sh = ensure(kSh, 12 * k * n);
  if (n) {
    launcher_->upload(means, g.means, 12 * n);
    launcher_->upload(log_scales, g.log_scales, 12 * n);
    launcher_->upload(quats, g.quats, 16 * n);
    launcher_->upload(logits, g.opacity_logits, 4 * n);
    launcher_->upload(sh, g.sh, 12 * k * n);
  }
  end(TimingLabel::FwdUpload);

  begin(TimingLabel::FwdProject);
  BufferRef records = ensure(kRecords, sizeof(SplatRecord) * n), radius = ensure(kRadius, 4 * n),
            rects = ensure(kRects, 16 * n), counts = ensure(kPairCount, 4 * n), offsets = ensure(kOffsets, 4 * (n + 1));
  launch(Kernel::ProjectForward, div_up(n, kGroup),
         {KernelArg::value(cam_), KernelArg::value(rp_), KernelArg::buf(means), KernelArg::buf(log_scales),
          KernelArg::buf(quats), KernelArg::buf(logits), KernelArg::buf(sh), KernelArg::buf(records),
          KernelArg::buf(radius), KernelArg::buf(rects), KernelArg::buf(counts)});
  end(TimingLabel::FwdProject);

  begin(TimingLabel::FwdEmitPairs);
  if (n) {
    exclusive_scan(counts, offsets, static_cast<uint32_t>(n));
    uint32_t total = 0;
    launcher_->download(&total, BufferRef{offsets.handle, 4 * n}, sizeof(total));
    num_pairs_ = total;
  }
  if (num_pairs_ >= (size_t{1} << 31)) throw BackendError("[gpu] too many (tile, Gaussian) pairs for one call");
  ensure(kKeysA, 8 * num_pairs_);
  ensure(kKeysB, 8 * num_pairs_);
  ensure(kValsA, 4 * num_pairs_);
  ensure(kValsB, 4 * num_pairs_);
  launch(Kernel::EmitPairs, num_pairs_ ? div_up(n, kGroup) : 0,
         {KernelArg::value(cam_), KernelArg::value(rp_), KernelArg::buf(records), KernelArg::buf(radius),
          KernelArg::buf(rects), KernelArg::buf(offsets), KernelArg::buf(ref(kKeysA)), KernelArg::buf(ref(kValsA))});
  end(TimingLabel::FwdEmitPairs);

  begin(TimingLabel::FwdRadixSort);
  const uint32_t pairs = static_cast<uint32_t>(num_pairs_);
  sorted_in_b_ = pairs ? sort_pairs(pairs, 32 + tile_bits(num_tiles)) : false;
  BufferRef ranges = ensure(kRanges, 8 * static_cast<size_t>(num_tiles));
  launcher_->fill_zero(ranges, 8 * static_cast<size_t>(num_tiles));
  ScanParams rp{pairs, 0, 0, 0};
  launch(Kernel::TileRanges, div_up(pairs, kGroup),
         {KernelArg::value(rp), KernelArg::buf(ref(sorted_in_b_ ? kKeysB : kKeysA)), KernelArg::buf(ranges)});
  end(TimingLabel::FwdRadixSort);

  begin(TimingLabel::FwdRasterize);
  BufferRef image = ensure(kImage, 12 * pixels), alpha = ensure(kAlpha, 4 * pixels),
            final_T = ensure(kFinalT, 4 * pixels), n_contrib = ensure(kNContrib, 4 * pixels);
  launch(Kernel::RasterizeForward, num_tiles,
         {KernelArg::value(cam_), KernelArg::value(rp_), KernelArg::buf(ranges),
          KernelArg::buf(ref(sorted_in_b_ ? kValsB : kValsA)), KernelArg::buf(records), KernelArg::buf(image),
          KernelArg::buf(alpha), KernelArg::buf(final_T), KernelArg::buf(n_contrib)});
  end(TimingLabel::FwdRasterize);

  begin(TimingLabel::FwdReadback);
  if (out.image) launcher_->download(out.image, image, 12 * pixels);
  if (out.alpha) launcher_->download(out.alpha, alpha, 4 * pixels);
  if (out.radii && n) launcher_->download(out.radii, radius, 4 * n);
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
  const bool det = config_.deterministic;

  begin(TimingLabel::BwdUpload);
  BufferRef dimg = ensure(kDImage, 12 * pixels);
  launcher_->upload(dimg, d_image, 12 * pixels);
  BufferRef dalpha = dimg;
  if (d_alpha) {
    dalpha = ensure(kDAlpha, 4 * pixels);
    launcher_->upload(dalpha, d_alpha, 4 * pixels);
  }
  end(TimingLabel::BwdUpload);

  begin(TimingLabel::BackwardRaster);
  const size_t grad_items = det ? num_pairs_ : n;
  BufferRef acc = ensure(kGrads, sizeof(float) * SPLAT_PAIR_GRAD * grad_items);
  if (grad_items) launcher_->fill_zero(acc, sizeof(float) * SPLAT_PAIR_GRAD * grad_items);
  BackwardParams bp{d_alpha ? 1u : 0u, static_cast<uint32_t>(num_pairs_), 0u, 0u};
  launch(Kernel::RasterizeBackward, num_pairs_ ? rp_.num_tiles : 0,
         {KernelArg::value(cam_), KernelArg::value(rp_), KernelArg::value(bp), KernelArg::buf(ref(kRanges)),
          KernelArg::buf(ref(sorted_in_b_ ? kValsB : kValsA)), KernelArg::buf(ref(kRecords)),
          KernelArg::buf(ref(kFinalT)), KernelArg::buf(ref(kNContrib)), KernelArg::buf(dimg), KernelArg::buf(dalpha),
          KernelArg::buf(ref(kRects)), KernelArg::buf(ref(kOffsets)), KernelArg::buf(acc)});
  end(TimingLabel::BackwardRaster);

  begin(TimingLabel::ProjectBack);
  BufferRef o_means = ensure(kOutMeans, 12 * n), o_scales = ensure(kOutLogScales, 12 * n),
            o_quats = ensure(kOutQuats, 16 * n), o_logits = ensure(kOutOpacityLogits, 4 * n),
            o_sh = ensure(kOutSh, 12 * k * n), o_m2d = ensure(kOutMeans2d, 8 * n);
  launch(Kernel::ProjectBackward, div_up(n, kGroup),
         {KernelArg::value(cam_), KernelArg::value(rp_), KernelArg::buf(ref(kMeans)), KernelArg::buf(ref(kLogScales)),
          KernelArg::buf(ref(kQuats)), KernelArg::buf(ref(kSh)), KernelArg::buf(ref(kRecords)),
          KernelArg::buf(ref(kRadius)), KernelArg::buf(acc), KernelArg::buf(ref(kOffsets)), KernelArg::buf(o_means),
          KernelArg::buf(o_scales), KernelArg::buf(o_quats), KernelArg::buf(o_logits), KernelArg::buf(o_sh),
          KernelArg::buf(o_m2d)});
  end(TimingLabel::ProjectBack);

  begin(TimingLabel::BwdReadback);
  if (n) {
    if (grads.means) launcher_->download(grads.means, o_means, 12 * n);
    if (grads.log_scales) launcher_->download(grads.log_scales, o_scales, 12 * n);
    if (grads.quats) launcher_->download(grads.quats, o_quats, 16 * n);
    if (grads.opacity_logits) launcher_->download(grads.opacity_logits, o_logits, 4 * n);
    if (grads.sh) launcher_->download(grads.sh, o_sh, 12 * k * n);
    if (grads.means2d) launcher_->download(grads.means2d, o_m2d, 8 * n);
  }
  end(TimingLabel::BwdReadback);
  finish_call();
}

void GpuDevice::radix_sort(uint64_t* keys, uint32_t* values, size_t count, uint32_t key_bits) {
  std::lock_guard<std::mutex> lock(mutex_);
  have_forward_ = false;
  if (count >= (size_t{1} << 31)) throw BackendError("[gpu] radix_sort: too many keys");
  if (key_bits > 64) throw ConfigError("[gpu] radix_sort: key_bits must be <= 64");
  if (count == 0) return;
  launcher_->upload(ensure(kKeysA, 8 * count), keys, 8 * count);
  launcher_->upload(ensure(kValsA, 4 * count), values, 4 * count);
  ensure(kKeysB, 8 * count);
  ensure(kValsB, 4 * count);
  bool in_b = sort_pairs(static_cast<uint32_t>(count), key_bits);
  launcher_->download(keys, ref(in_b ? kKeysB : kKeysA), 8 * count);
  launcher_->download(values, ref(in_b ? kValsB : kValsA), 4 * count);
  finish_call();
}

namespace {

[[noreturn]] void training_unsupported(const char* op, Backend b) {
  throw BackendError(std::string("[") + backend_name(b) + "] " + op +
                     ": training ops are not implemented on the GPU backends yet; use backend='cpu' for training");
}

}  // namespace

void GpuDevice::upload_images(const uint8_t*, uint32_t, uint32_t, uint32_t) {
  training_unsupported("upload_images", backend_);
}
void GpuDevice::set_training_state(const TrainingState&) { training_unsupported("set_training_state", backend_); }
void GpuDevice::get_training_state(TrainingState&) { training_unsupported("get_training_state", backend_); }
void GpuDevice::train_forward_backward(const CameraParams&, uint32_t, uint32_t, const float*, float, bool) {
  training_unsupported("train_forward_backward", backend_);
}
float GpuDevice::last_loss() { training_unsupported("last_loss", backend_); }
void GpuDevice::adam_step(const AdamSettings&) { training_unsupported("adam_step", backend_); }
DensifyResult GpuDevice::densify(const DensifySettings&) { training_unsupported("densify", backend_); }
void GpuDevice::reset_opacity(float) { training_unsupported("reset_opacity", backend_); }
void GpuDevice::render_resident(const CameraParams&, uint32_t, const float*, float*) {
  training_unsupported("render_resident", backend_);
}

}  // namespace splat::gpu
