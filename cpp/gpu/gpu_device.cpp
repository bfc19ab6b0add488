#include "gpu_device.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>

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
    size_t cap = b.stale ? bytes : std::max(bytes, b.capacity + b.capacity / 2);
    if (headroom) cap = std::max(cap, bytes + bytes / 2);
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

bool GpuDevice::radix_sort_slots(int keys_a, int keys_b, int vals_a, int vals_b, uint32_t count,
                                 uint32_t key_bits) {
  const uint32_t blocks = div_up(count, SPLAT_SORT_BLOCK);
  BufferRef hist = ensure(kHist, sizeof(uint32_t) * SPLAT_RADIX * static_cast<size_t>(blocks));
  BufferRef totals = ensure(kDigitTotals, sizeof(uint32_t) * SPLAT_RADIX);
  BufferRef keys[2] = {ref(keys_a), ref(keys_b)};
  BufferRef vals[2] = {ref(vals_a), ref(vals_b)};
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

void GpuDevice::forward_pass(const ParamRefs& params, size_t n, uint32_t sh_stride, const CameraParams& cam,
                             uint32_t sh_degree, const float background[3]) {
  have_forward_ = false;
  if (n >= (size_t{1} << 31)) throw BackendError("[gpu] too many Gaussians for one call");
  const uint32_t num_tiles = cam.tiles_x * cam.tiles_y;
  const size_t pixels = static_cast<size_t>(cam.width) * cam.height;
  cam_ = cam;
  rp_ = RasterParams{};
  rp_.num_gaussians = static_cast<uint32_t>(n);
  rp_.sh_degree = sh_degree;
  rp_.sh_stride = sh_stride;
  rp_.num_tiles = num_tiles;
  for (int c = 0; c < 3; ++c) rp_.background[c] = background[c];
  num_gaussians_ = n;
  num_pairs_ = 0;
  forward_params_ = params;
  // binning=per_iter_alloc: the binning buffers (pairs, sort, tile ranges)
  // are allocated afresh by every forward, the A/B baseline of the arena.
  if (config_.binning == Binning::PerIterAlloc)
    for (int s = kKeysA; s <= kRanges; ++s) arena_[s].stale = true;

  begin(TimingLabel::FwdProject);
  BufferRef records = ensure(kRecords, sizeof(SplatRecord) * n, true), radius = ensure(kRadius, 4 * n, true),
            rects = ensure(kRects, 16 * n, true), counts = ensure(kPairCount, 4 * n, true),
            pair_ranges = ensure(kPairRanges, 8 * n, true);
  ensure(kDepthKeysA, 8 * n, true);
  ensure(kDepthKeysB, 8 * n, true);
  ensure(kDepthIdsA, 4 * n, true);
  ensure(kDepthIdsB, 4 * n, true);
  launch(Kernel::ProjectForward, div_up(n, kGroup),
         {KernelArg::value(cam_), KernelArg::value(rp_), KernelArg::buf(params.p[0]), KernelArg::buf(params.p[1]),
          KernelArg::buf(params.p[2]), KernelArg::buf(params.p[3]), KernelArg::buf(params.p[4]),
          KernelArg::buf(records), KernelArg::buf(radius), KernelArg::buf(rects), KernelArg::buf(counts),
          KernelArg::buf(ref(kDepthKeysA)), KernelArg::buf(ref(kDepthIdsA))});
  end(TimingLabel::FwdProject);

  // Binning (tile_bin.h): the Gaussians in depth order, their pairs emitted
  // in that order, keyed by tile.
  begin(TimingLabel::FwdEmitPairs);
  BufferRef counts_by_rank = ensure(kCountsByRank, 4 * n, true), offsets = ensure(kRankOffsets, 4 * (n + 1), true);
  BufferRef order{};
  if (n) {
    const bool in_b = radix_sort_slots(kDepthKeysA, kDepthKeysB, kDepthIdsA, kDepthIdsB, static_cast<uint32_t>(n), 32);
    order = ref(in_b ? kDepthIdsB : kDepthIdsA);
    ScanParams gp{static_cast<uint32_t>(n), 0, 0, 0};
    launch(Kernel::GatherPairCounts, div_up(n, kGroup),
           {KernelArg::value(gp), KernelArg::buf(order), KernelArg::buf(counts), KernelArg::buf(counts_by_rank)});
    exclusive_scan(counts_by_rank, offsets, static_cast<uint32_t>(n));
    // The one read-back of a forward: the number of (tile, Gaussian) pairs
    // sizes the sort and its grid.
    uint32_t total = 0;
    launcher_->download(&total, BufferRef{offsets.handle, 4 * n}, sizeof(total));
    num_pairs_ = total;
  }
  if (num_pairs_ >= (size_t{1} << 31)) throw BackendError("[gpu] too many (tile, Gaussian) pairs for one call");
  ensure(kKeysA, 8 * num_pairs_);
  ensure(kKeysB, 8 * num_pairs_);
  ensure(kValsA, 4 * num_pairs_);
  ensure(kValsB, 4 * num_pairs_);
  launch(Kernel::EmitPairs, n ? div_up(n, kGroup) : 0,
         {KernelArg::value(cam_), KernelArg::value(rp_), KernelArg::buf(records), KernelArg::buf(radius),
          KernelArg::buf(rects), KernelArg::buf(order), KernelArg::buf(offsets), KernelArg::buf(ref(kKeysA)),
          KernelArg::buf(ref(kValsA)), KernelArg::buf(pair_ranges)});
  end(TimingLabel::FwdEmitPairs);

  begin(TimingLabel::FwdRadixSort);
  const uint32_t pairs = static_cast<uint32_t>(num_pairs_);
  // Tile ids run to num_tiles: emission's sentinel (tile_bin.h) has a range too.
  sorted_in_b_ = pairs ? radix_sort_slots(kKeysA, kKeysB, kValsA, kValsB, pairs, tile_bits(num_tiles + 1)) : false;
  BufferRef ranges = ensure(kRanges, 8 * (static_cast<size_t>(num_tiles) + 1));
  launcher_->fill_zero(ranges, 8 * (static_cast<size_t>(num_tiles) + 1));
  ScanParams rp{pairs, 0, 0, 0};
  launch(Kernel::TileRanges, div_up(pairs, kGroup),
         {KernelArg::value(rp), KernelArg::buf(ref(sorted_in_b_ ? kKeysB : kKeysA)), KernelArg::buf(ranges)});
  end(TimingLabel::FwdRadixSort);

  begin(TimingLabel::FwdRasterize);
  BufferRef image = ensure(kImage, 12 * pixels), alpha = ensure(kAlpha, 4 * pixels),
            final_T = ensure(kFinalT, 4 * pixels), n_contrib = ensure(kNContrib, 4 * pixels);
  // Chunk passes (rasterize_forward.h): per chunk slot and pixel, 4 floats
  // of state and the last contributor; the slot -> tile map.
  const size_t slots = chunk_slots(num_tiles, pairs);
  if (4 * kGroup * slots >= (size_t{1} << 32)) throw BackendError("[gpu] too many (tile, Gaussian) pairs for one call");
  BufferRef chunk_state = ensure(kChunkState, 16 * kGroup * slots, true),
            chunk_last = ensure(kChunkLast, 4 * kGroup * slots, true),
            chunk_tiles = ensure(kChunkTiles, 4 * slots, true);
  const BufferRef sorted = ref(sorted_in_b_ ? kValsB : kValsA);
  if (pairs) {
    launch(Kernel::TileChunks, div_up(num_tiles, kGroup),
           {KernelArg::value(rp_), KernelArg::buf(ranges), KernelArg::buf(chunk_tiles)});
    launch(Kernel::RasterizeChunks, static_cast<uint32_t>(slots),
           {KernelArg::value(cam_), KernelArg::value(rp_), KernelArg::buf(ranges), KernelArg::buf(sorted),
            KernelArg::buf(records), KernelArg::buf(chunk_tiles), KernelArg::buf(chunk_state),
            KernelArg::buf(chunk_last)});
  }
  BufferRef stop_chunk = ensure(kStopChunk, 4 * pixels);
  launch(Kernel::RasterizeForward, num_tiles,
         {KernelArg::value(cam_), KernelArg::value(rp_), KernelArg::buf(ranges), KernelArg::buf(image),
          KernelArg::buf(alpha), KernelArg::buf(final_T), KernelArg::buf(n_contrib), KernelArg::buf(chunk_state),
          KernelArg::buf(chunk_last), KernelArg::buf(stop_chunk)});
  if (pairs) {
    launch(Kernel::RasterizeWalk, static_cast<uint32_t>(slots),
           {KernelArg::value(cam_), KernelArg::value(rp_), KernelArg::buf(ranges), KernelArg::buf(sorted),
            KernelArg::buf(records), KernelArg::buf(chunk_tiles), KernelArg::buf(image), KernelArg::buf(alpha),
            KernelArg::buf(final_T), KernelArg::buf(n_contrib), KernelArg::buf(chunk_state),
            KernelArg::buf(chunk_last), KernelArg::buf(stop_chunk)});
    launch(Kernel::RasterizeCheckpoints, num_tiles,
           {KernelArg::value(cam_), KernelArg::value(rp_), KernelArg::buf(ranges), KernelArg::buf(final_T),
            KernelArg::buf(n_contrib), KernelArg::buf(chunk_state)});
  }
  end(TimingLabel::FwdRasterize);
  have_forward_ = true;
}

void GpuDevice::backward_pass(BufferRef d_image, const BufferRef* d_alpha, const BufferRef out[6]) {
  const size_t n = num_gaussians_;
  const bool det = config_.deterministic;

  begin(TimingLabel::ZeroGrads);
  const size_t grad_items = det ? num_pairs_ : n;
  BufferRef acc = ensure(kGrads, sizeof(float) * SPLAT_PAIR_GRAD * grad_items, true);
  if (grad_items) launcher_->fill_zero(acc, sizeof(float) * SPLAT_PAIR_GRAD * grad_items);
  end(TimingLabel::ZeroGrads);

  begin(TimingLabel::BackwardRaster);
  BackwardParams bp{d_alpha ? 1u : 0u, static_cast<uint32_t>(num_pairs_), 0u, 0u};
  // One threadgroup per chunk slot (rasterize_forward.h).
  const uint32_t slots = num_pairs_ ? chunk_slots(rp_.num_tiles, static_cast<uint32_t>(num_pairs_)) : 0u;
  launch(Kernel::RasterizeBackward, slots,
         {KernelArg::value(cam_), KernelArg::value(rp_), KernelArg::value(bp), KernelArg::buf(ref(kRanges)),
          KernelArg::buf(ref(sorted_in_b_ ? kValsB : kValsA)), KernelArg::buf(ref(kRecords)),
          KernelArg::buf(ref(kFinalT)), KernelArg::buf(ref(kNContrib)), KernelArg::buf(ref(kChunkState)),
          KernelArg::buf(ref(kChunkTiles)), KernelArg::buf(d_image),
          KernelArg::buf(d_alpha ? *d_alpha : d_image), KernelArg::buf(ref(kRects)), KernelArg::buf(ref(kPairRanges)),
          KernelArg::buf(acc)});
  end(TimingLabel::BackwardRaster);

  begin(TimingLabel::ProjectBack);
  const ParamRefs& p = forward_params_;
  BufferRef factors = ensure(kShFactors, 4 * SPLAT_SH_FACTOR_FLOATS * n, true);
  launch(Kernel::ProjectBackward, div_up(n, kGroup),
         {KernelArg::value(cam_), KernelArg::value(rp_), KernelArg::buf(p.p[0]), KernelArg::buf(p.p[1]),
          KernelArg::buf(p.p[2]), KernelArg::buf(p.p[4]), KernelArg::buf(ref(kRecords)), KernelArg::buf(ref(kRadius)),
          KernelArg::buf(acc), KernelArg::buf(ref(kPairRanges)), KernelArg::buf(out[0]), KernelArg::buf(out[1]),
          KernelArg::buf(out[2]), KernelArg::buf(out[3]), KernelArg::buf(factors), KernelArg::buf(out[5])});
  if (out[4].handle) expand_sh_grad(out[4]);
  end(TimingLabel::ProjectBack);
}

void GpuDevice::expand_sh_grad(BufferRef out) {
  const size_t n = num_gaussians_;
  const int degree = static_cast<int>(rp_.sh_degree);
  ShGradParams sp{static_cast<uint32_t>(n), rp_.sh_stride, static_cast<uint32_t>((degree + 1) * (degree + 1)), 0u};
  const size_t total = n * 3 * size_t{rp_.sh_stride};
  if (total >= (size_t{1} << 32)) throw BackendError("[gpu] too many SH coefficients for one dispatch");
  launch(Kernel::ExpandShGrad, div_up(total, kGroup),
         {KernelArg::value(sp), KernelArg::buf(ref(kShFactors)), KernelArg::buf(out)});
}

void GpuDevice::rasterize_forward(const GaussiansView& g, const CameraParams& cam, uint32_t sh_degree,
                                  const float background[3], const ForwardOutputs& out) {
  std::lock_guard<std::mutex> lock(mutex_);
  have_forward_ = false;
  const size_t n = g.count;
  if (n >= (size_t{1} << 31)) throw BackendError("[gpu] too many Gaussians for one call");
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
  bool in_b = radix_sort_slots(kKeysA, kKeysB, kValsA, kValsB, static_cast<uint32_t>(count), key_bits);
  launcher_->download(keys, ref(in_b ? kKeysB : kKeysA), 8 * count);
  launcher_->download(values, ref(in_b ? kValsB : kValsA), 4 * count);
  finish_call();
}

// --- Training ----------------------------------------------------------------

GpuDevice::ParamRefs GpuDevice::state_params() const {
  ParamRefs p;
  for (int a = 0; a < 5; ++a) p.p[a] = ref(kParam0 + a);
  return p;
}

void GpuDevice::reserve_state(size_t n) {
  for (int a = 0; a < 5; ++a) {
    const size_t bytes = 4 * n * param_width(a, sh_stride_);
    ensure(kParam0 + a, bytes, true);
    ensure(kM0 + a, bytes, true);
    ensure(kV0 + a, bytes, true);
    if (a != 4) ensure(kGrad0 + a, bytes, true);  // d_sh stays factored (kShFactors)
  }
  ensure(kShFactors, 4 * SPLAT_SH_FACTOR_FLOATS * n, true);
  ensure(kGradMeans2d, 8 * n, true);
  ensure(kGradAccum, 4 * n, true);
  ensure(kGradCount, 4 * n, true);
  ensure(kMaxRadii, 4 * n, true);
}

void GpuDevice::upload_images(const uint8_t* rgb, uint32_t views, uint32_t width, uint32_t height) {
  std::lock_guard<std::mutex> lock(mutex_);
  const size_t bytes = static_cast<size_t>(views) * width * height * 3;
  begin(TimingLabel::Upload);
  BufferRef images = ensure(kImages, bytes);
  launcher_->upload(images, rgb, bytes);
  end(TimingLabel::Upload);
  views_ = views;
  image_width_ = width;
  image_height_ = height;
  finish_op(true);
}

void GpuDevice::set_training_state(const TrainingState& s) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (s.count >= (size_t{1} << 31)) throw BackendError("[gpu] too many Gaussians");
  for (int a = 0; a < 5; ++a) {
    const size_t len = s.count * param_width(a, s.sh_stride);
    if (s.params[a].size() != len || (!s.adam_m[a].empty() && s.adam_m[a].size() != len) ||
        (!s.adam_v[a].empty() && s.adam_v[a].size() != len))
      throw ConfigError("[gpu] set_training_state: array sizes do not match the count");
  }
  for (const std::vector<float>* v : {&s.grad_accum, &s.grad_count, &s.max_radii})
    if (!v->empty() && v->size() != s.count)
      throw ConfigError("[gpu] set_training_state: statistics do not match the count");
  have_forward_ = false;
  have_loss_ = false;
  have_train_step_ = false;
  sh_stride_ = s.sh_stride;
  count_ = s.count;
  const size_t n = count_;
  begin(TimingLabel::Upload);
  reserve_state(n);
  for (int a = 0; a < 5; ++a) {
    const size_t bytes = 4 * n * param_width(a, sh_stride_);
    launcher_->upload(ref(kParam0 + a), s.params[a].data(), bytes);
    if (s.adam_m[a].empty()) {
      launcher_->fill_zero(ref(kM0 + a), bytes);
      launcher_->fill_zero(ref(kV0 + a), bytes);
    } else {
      launcher_->upload(ref(kM0 + a), s.adam_m[a].data(), bytes);
      launcher_->upload(ref(kV0 + a), s.adam_v[a].data(), bytes);
    }
  }
  const std::vector<float>* stats[3] = {&s.grad_accum, &s.grad_count, &s.max_radii};
  const int slots[3] = {kGradAccum, kGradCount, kMaxRadii};
  for (int k = 0; k < 3; ++k) {
    if (stats[k]->empty())
      launcher_->fill_zero(ref(slots[k]), 4 * n);
    else
      launcher_->upload(ref(slots[k]), stats[k]->data(), 4 * n);
  }
  end(TimingLabel::Upload);
  finish_op(true);
}

void GpuDevice::get_training_state(TrainingState& s) {
  std::lock_guard<std::mutex> lock(mutex_);
  const size_t n = count_;
  s.count = n;
  s.sh_stride = sh_stride_;
  begin(TimingLabel::Readback);
  for (int a = 0; a < 5; ++a) {
    const size_t len = n * param_width(a, sh_stride_);
    s.params[a].resize(len);
    s.adam_m[a].resize(len);
    s.adam_v[a].resize(len);
    if (!len) continue;
    launcher_->download(s.params[a].data(), ref(kParam0 + a), 4 * len);
    launcher_->download(s.adam_m[a].data(), ref(kM0 + a), 4 * len);
    launcher_->download(s.adam_v[a].data(), ref(kV0 + a), 4 * len);
  }
  s.grad_accum.resize(n);
  s.grad_count.resize(n);
  s.max_radii.resize(n);
  if (n) {
    launcher_->download(s.grad_accum.data(), ref(kGradAccum), 4 * n);
    launcher_->download(s.grad_count.data(), ref(kGradCount), 4 * n);
    launcher_->download(s.max_radii.data(), ref(kMaxRadii), 4 * n);
  }
  end(TimingLabel::Readback);
  finish_op(true);
}

void GpuDevice::train_forward_backward(const CameraParams& cam, uint32_t view, uint32_t sh_degree,
                                       const float background[3], float ssim_weight, bool track_stats) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (view >= views_ || cam.width != image_width_ || cam.height != image_height_)
    throw ConfigError("[trainer] view index or camera size does not match the uploaded images");
  const size_t n = count_;
  forward_pass(state_params(), n, sh_stride_, cam, sh_degree, background);

  // The loss against the resident uint8 image of `view`, and d_image.
  begin(TimingLabel::Ssim);
  const size_t pixels = static_cast<size_t>(cam.width) * cam.height;
  const uint32_t num_tiles = cam.tiles_x * cam.tiles_y;
  const double count = 3.0 * static_cast<double>(pixels);
  LossParams lp{cam.width,
                cam.height,
                cam.tiles_x,
                num_tiles,
                static_cast<float>((1.0 - ssim_weight) / count),
                static_cast<float>(-ssim_weight / count),
                ssim_weight,
                static_cast<float>(1.0 / count)};
  BufferRef partials = ensure(kLossPartials, 9 * 4 * pixels), tile_sums = ensure(kTileSums, 8 * size_t{num_tiles}),
            loss = ensure(kLoss, 16), d_image = ensure(kDImage, 12 * pixels);
  BufferRef target{arena_[kImages].handle, static_cast<size_t>(view) * pixels * 3};
  launch(Kernel::SsimForward, num_tiles,
         {KernelArg::value(lp), KernelArg::buf(ref(kImage)), KernelArg::buf(target), KernelArg::buf(partials),
          KernelArg::buf(tile_sums)});
  launch(Kernel::SsimBackward, num_tiles,
         {KernelArg::value(lp), KernelArg::buf(ref(kImage)), KernelArg::buf(target), KernelArg::buf(partials),
          KernelArg::buf(tile_sums), KernelArg::buf(d_image), KernelArg::buf(loss)});
  end(TimingLabel::Ssim);

  const BufferRef outs[6] = {ref(kGrad0), ref(kGrad0 + 1), ref(kGrad0 + 2),
                             ref(kGrad0 + 3), BufferRef{}, ref(kGradMeans2d)};
  backward_pass(d_image, nullptr, outs);
  train_sh_degree_ = sh_degree;

  if (track_stats) {
    begin(TimingLabel::DensifyStats);
    ElementParams ep{static_cast<uint32_t>(n), cam.width, cam.height, 0.f};
    launch(Kernel::GradStats, div_up(n, kGroup),
           {KernelArg::value(ep), KernelArg::buf(ref(kRadius)), KernelArg::buf(ref(kGradMeans2d)),
            KernelArg::buf(ref(kGradAccum)), KernelArg::buf(ref(kGradCount)), KernelArg::buf(ref(kMaxRadii))});
    end(TimingLabel::DensifyStats);
  }
  have_forward_ = false;  // the numpy backward needs its own forward
  have_loss_ = true;
  have_train_step_ = true;
  finish_op(false);
}

float GpuDevice::last_loss() {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!have_loss_) return std::numeric_limits<float>::quiet_NaN();
  float value = 0.f;
  begin(TimingLabel::Readback);
  launcher_->download(&value, ref(kLoss), sizeof(value));
  end(TimingLabel::Readback);
  finish_op(true);
  return value;
}

void GpuDevice::adam_step(const AdamSettings& s) {
  std::lock_guard<std::mutex> lock(mutex_);
  const size_t n = count_;
  AdamParams p{};
  p.count = static_cast<uint32_t>(n);
  p.sh_width = 3 * sh_stride_;
  p.lr_means = s.lr_means;
  p.lr_log_scales = s.lr_log_scales;
  p.lr_quats = s.lr_quats;
  p.lr_opacity = s.lr_opacity;
  p.lr_sh_dc = s.lr_sh_dc;
  p.lr_sh_rest = s.lr_sh_rest;
  p.beta1 = s.beta1;
  p.beta2 = s.beta2;
  p.eps = s.eps;
  // As the CPU backend rounds them.
  p.bias1 = 1.f - std::pow(s.beta1, static_cast<float>(s.step));
  p.bias2 = 1.f - std::pow(s.beta2, static_cast<float>(s.step));
  p.sh_k_count = (train_sh_degree_ + 1) * (train_sh_degree_ + 1);
  if (n * (11 + size_t{p.sh_width}) >= (size_t{1} << 32))
    throw BackendError("[gpu] adam_step: too many parameters for one dispatch");
  // One thread per quad of each group (train_optim.h).
  const size_t total = 2 * ((3 * n + 3) / 4) + n + (n + 3) / 4 + (n * p.sh_width + 3) / 4;
  begin(TimingLabel::Adam);
  launch(Kernel::Adam, div_up(total, kGroup),
         {KernelArg::value(p), KernelArg::buf(ref(kParam0)), KernelArg::buf(ref(kParam0 + 1)),
          KernelArg::buf(ref(kParam0 + 2)), KernelArg::buf(ref(kParam0 + 3)), KernelArg::buf(ref(kParam0 + 4)),
          KernelArg::buf(ref(kM0)), KernelArg::buf(ref(kM0 + 1)), KernelArg::buf(ref(kM0 + 2)),
          KernelArg::buf(ref(kM0 + 3)), KernelArg::buf(ref(kM0 + 4)), KernelArg::buf(ref(kV0)),
          KernelArg::buf(ref(kV0 + 1)), KernelArg::buf(ref(kV0 + 2)), KernelArg::buf(ref(kV0 + 3)),
          KernelArg::buf(ref(kV0 + 4)), KernelArg::buf(ref(kGrad0)), KernelArg::buf(ref(kGrad0 + 1)),
          KernelArg::buf(ref(kGrad0 + 2)), KernelArg::buf(ref(kGrad0 + 3)), KernelArg::buf(ref(kShFactors))});
  end(TimingLabel::Adam);
  finish_op(false);
}

DensifyResult GpuDevice::densify(const DensifySettings& s) {
  std::lock_guard<std::mutex> lock(mutex_);
  DensifyResult result;
  const size_t n = count_;
  have_forward_ = false;
  have_train_step_ = false;
  if (n == 0) return result;
  if (5 * n + 1 >= (size_t{1} << 32)) throw BackendError("[gpu] densify: too many Gaussians");
  begin(TimingLabel::Densify);
  DensifyParams p{};
  p.count = static_cast<uint32_t>(n);
  p.split_count = s.split_count;
  p.room = s.max_gaussians > n ? static_cast<uint32_t>(s.max_gaussians - n) : 0u;
  p.seed = static_cast<uint32_t>(s.seed);
  p.step = s.step;
  p.grad_threshold = s.grad_threshold;
  p.clone_max_scale = s.clone_max_scale;
  // As the CPU backend rounds them.
  p.log_div = std::log(s.split_scale_divisor);
  p.logit_min = std::log(s.prune_opacity / (1.f - s.prune_opacity));
  p.prune_max_world_scale = s.prune_max_world_scale;
  p.prune_max_screen_radius = s.prune_max_screen_radius;

  BufferRef kind = ensure(kDensifyKind, 4 * n, true), extra = ensure(kDensifyExtra, 4 * n, true),
            extra_offsets = ensure(kDensifyExtraOffsets, 4 * (n + 1), true),
            flags = ensure(kDensifyFlags, 4 * 5 * n, true), offsets = ensure(kDensifyOffsets, 4 * (5 * n + 1), true);
  const uint32_t groups = div_up(n, kGroup);
  launch(Kernel::DensifyClassify, groups,
         {KernelArg::value(p), KernelArg::buf(ref(kParam0 + 1)), KernelArg::buf(ref(kGradAccum)),
          KernelArg::buf(ref(kGradCount)), KernelArg::buf(kind), KernelArg::buf(extra)});
  exclusive_scan(extra, extra_offsets, static_cast<uint32_t>(n));
  launch(Kernel::DensifyMark, groups,
         {KernelArg::value(p), KernelArg::buf(ref(kParam0 + 1)), KernelArg::buf(ref(kParam0 + 3)),
          KernelArg::buf(ref(kMaxRadii)), KernelArg::buf(extra), KernelArg::buf(extra_offsets), KernelArg::buf(kind),
          KernelArg::buf(flags)});
  exclusive_scan(flags, offsets, static_cast<uint32_t>(5 * n));
  // The one read-back of densification: the new count (and what happened).
  uint32_t at[3] = {0, 0, 0};
  for (int k = 0; k < 3; ++k)
    launcher_->download(&at[k], BufferRef{offsets.handle, 4 * (3 + k) * n}, sizeof(uint32_t));
  const size_t out = at[0];
  result.count = at[0];
  result.cloned = at[1] - at[0];
  result.split = at[2] - at[1];
  const size_t sources = n - result.split + result.cloned + size_t{result.split} * s.split_count;
  result.pruned = static_cast<uint32_t>(sources - out);

  // Gather into the spare buffers, then swap them with the state.
  for (int a = 0; a < 5; ++a) {
    const uint32_t w = param_width(a, sh_stride_);
    const size_t bytes = 4 * out * w;
    BufferRef dst = ensure(kSpareParam0 + a, bytes, true), dst_m = ensure(kSpareM0 + a, bytes, true),
              dst_v = ensure(kSpareV0 + a, bytes, true);
    DensifyParams g = p;
    g.width = w;
    g.is_log_scales = a == 1 ? 1u : 0u;
    launch(Kernel::DensifyGather, div_up(3 * n, kGroup),
           {KernelArg::value(g), KernelArg::buf(offsets), KernelArg::buf(ref(kParam0 + a)),
            KernelArg::buf(ref(kM0 + a)), KernelArg::buf(ref(kV0 + a)), KernelArg::buf(dst), KernelArg::buf(dst_m),
            KernelArg::buf(dst_v)});
  }
  launch(Kernel::DensifyChildren, groups,
         {KernelArg::value(p), KernelArg::buf(offsets), KernelArg::buf(ref(kParam0)),
          KernelArg::buf(ref(kParam0 + 1)), KernelArg::buf(ref(kParam0 + 2)), KernelArg::buf(ref(kSpareParam0))});
  for (int a = 0; a < 5; ++a) {
    std::swap(arena_[kParam0 + a], arena_[kSpareParam0 + a]);
    std::swap(arena_[kM0 + a], arena_[kSpareM0 + a]);
    std::swap(arena_[kV0 + a], arena_[kSpareV0 + a]);
  }
  count_ = out;
  reserve_state(out);  // the state arrays already fit; grads and statistics may grow
  launcher_->fill_zero(ref(kGradAccum), 4 * out);
  launcher_->fill_zero(ref(kGradCount), 4 * out);
  launcher_->fill_zero(ref(kMaxRadii), 4 * out);
  end(TimingLabel::Densify);
  finish_op(false);
  return result;
}

void GpuDevice::reset_opacity(float max_opacity) {
  std::lock_guard<std::mutex> lock(mutex_);
  const size_t n = count_;
  ElementParams p{static_cast<uint32_t>(n), 0u, 0u, std::log(max_opacity / (1.f - max_opacity))};
  launch(Kernel::ResetOpacity, div_up(n, kGroup), {KernelArg::value(p), KernelArg::buf(ref(kParam0 + 3))});
  if (n) {
    launcher_->fill_zero(ref(kM0 + 3), 4 * n);
    launcher_->fill_zero(ref(kV0 + 3), 4 * n);
  }
  finish_op(false);
}

bool GpuDevice::debug_snapshot(DebugSnapshot& out) {
  std::lock_guard<std::mutex> lock(mutex_);
  if (!have_train_step_) return false;
  const size_t n = count_;
  const size_t tiles = rp_.num_tiles;
  begin(TimingLabel::Readback);
  out.tile_ranges.resize(2 * tiles);
  out.sorted_gauss.resize(num_pairs_);
  if (tiles) launcher_->download(out.tile_ranges.data(), ref(kRanges), 8 * tiles);
  if (num_pairs_) launcher_->download(out.sorted_gauss.data(), ref(sorted_in_b_ ? kValsB : kValsA), 4 * num_pairs_);
  if (n) expand_sh_grad(ensure(kGrad0 + 4, 4 * n * param_width(4, sh_stride_)));
  for (int a = 0; a < 5; ++a) {
    out.grads[a].resize(n * param_width(a, sh_stride_));
    if (n) launcher_->download(out.grads[a].data(), ref(kGrad0 + a), 4 * out.grads[a].size());
  }
  out.means2d_grad.resize(2 * n);
  if (n) launcher_->download(out.means2d_grad.data(), ref(kGradMeans2d), 8 * n);
  end(TimingLabel::Readback);
  finish_op(true);
  return true;
}

void GpuDevice::render_resident(const CameraParams& cam, uint32_t sh_degree, const float background[3],
                                float* image) {
  std::lock_guard<std::mutex> lock(mutex_);
  forward_pass(state_params(), count_, sh_stride_, cam, sh_degree, background);
  have_forward_ = false;
  have_train_step_ = false;  // the binning buffers now hold this render's
  begin(TimingLabel::Readback);
  launcher_->download(image, ref(kImage), 12 * static_cast<size_t>(cam.width) * cam.height);
  end(TimingLabel::Readback);
  finish_op(true);
}

}  // namespace splat::gpu
