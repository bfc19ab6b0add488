#include "gpu_device.h"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>

#include "../../shaders/common/sh.h"
#include "grid.h"
#include "splat/errors.h"
#include "splat/limits.h"
#include "timing.h"

namespace splat::gpu {
namespace {

// Bits needed to hold tile ids 0 .. num_tiles - 1.
uint32_t tile_bits(uint32_t num_tiles) {
  uint32_t bits = 0;
  while (bits < 32 && (uint64_t{1} << bits) < num_tiles) ++bits;
  return bits;
}

}  // namespace

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

void GpuDevice::forward_pass(const ParamRefs& params, size_t n, uint32_t sh_stride, const CameraParams& cam,
                             uint32_t sh_degree, const float background[3], uint32_t step) {
  forward_views(params, n, sh_stride, &cam, 1, sh_degree, background, step);
}

void GpuDevice::forward_views(const ParamRefs& params, size_t n, uint32_t sh_stride, const CameraParams* cams,
                              uint32_t views, uint32_t sh_degree, const float background[3], uint32_t step) {
  have_forward_ = false;
  check_gaussian_count(n);
  const CameraParams& cam = cams[0];
  const uint32_t view_tiles = cam.tiles_x * cam.tiles_y;
  const size_t view_pixels = static_cast<size_t>(cam.width) * cam.height;
  // Every view's records, tiles and pixels one after another (views of one
  // size: docs/architecture.md, "Several views a step").
  const size_t total = n * views, pixels = view_pixels * views;
  if (total >= (size_t{1} << 31) || pixels >= (size_t{1} << 32) || size_t{view_tiles} * views >= (size_t{1} << 31))
    throw BackendError("[gpu] forward: too many records or pixels for the views binned together");
  const uint32_t num_tiles = view_tiles * views;
  cam_ = cam;
  rp_ = RasterParams{};
  rp_.num_gaussians = static_cast<uint32_t>(total);
  rp_.sh_degree = sh_degree;
  rp_.sh_stride = sh_stride;
  rp_.num_tiles = num_tiles;
  for (int c = 0; c < 3; ++c) rp_.background[c] = background[c];
  rp_.antialiased = antialiased() ? 1u : 0u;  // a runtime field: one pipeline for both modes
  rp_.view_records = views > 1 ? static_cast<uint32_t>(n) : 0u;
  num_gaussians_ = n;
  views_ = views;
  num_pairs_ = 0;
  pairs_known_ = true;
  pair_slots_ = 0;
  forward_params_ = params;
  // binning=per_iter_alloc: the binning buffers (pairs, sort, tile ranges)
  // are allocated afresh by every forward, the A/B baseline of the arena.
  if (config_.binning == Binning::PerIterAlloc)
    for (int s = kKeysA; s <= kRanges; ++s) arena_[s].stale = true;

  static_assert(kMaxImageSide / SPLAT_TILE_SIZE < (1u << 16), "CoverRecord holds tile coordinates in 16 bits");
  begin(TimingLabel::FwdProject);
  BufferRef records = ensure(kRecords, sizeof(SplatRecord) * total, true),
            radius = ensure(kRadius, 4 * total, true),
            covers = ensure(kCovers, sizeof(CoverRecord) * total, true),
            counts = ensure(kPairCount, 4 * total, true), pair_ranges = ensure(kPairRanges, 8 * total, true);
  ensure(kDepthKeysA, 4 * total, true);
  ensure(kDepthKeysB, 4 * total, true);
  ensure(kDepthIdsA, 4 * total, true);
  ensure(kDepthIdsB, 4 * total, true);
  // One view: its records (depth ids i). Several: a launch for up to
  // SPLAT_VIEWS_LAUNCH_MAX views, view v's records (and depth ids) at v n + i
  // of the arrays the binning then sorts together.
  if (views == 1) {
    launch(Kernel::ProjectForward, div_up(n, kGroup),
           {KernelArg::value(cams[0]), KernelArg::value(view_params(0)), KernelArg::buf(params.p[0]),
            KernelArg::buf(params.p[1]), KernelArg::buf(params.p[2]), KernelArg::buf(params.p[3]),
            KernelArg::buf(params.p[4]), KernelArg::buf(records), KernelArg::buf(radius), KernelArg::buf(covers),
            KernelArg::buf(counts), KernelArg::buf(ref(kDepthKeysA)), KernelArg::buf(ref(kDepthIdsA))});
  }
  for (uint32_t first = 0; views > 1 && first < views; first += SPLAT_VIEWS_LAUNCH_MAX) {
    ViewsParams b{};
    b.first = first;
    b.count = std::min<uint32_t>(SPLAT_VIEWS_LAUNCH_MAX, views - first);
    b.views = views;
    for (uint32_t c = 0; c < b.count; ++c) b.cams[c] = cams[first + c];
    launch(Kernel::ProjectForwardViews, div_up(size_t{b.count} * n, kGroup),
           {KernelArg::value(b), KernelArg::value(view_params(0)), KernelArg::buf(params.p[0]),
            KernelArg::buf(params.p[1]), KernelArg::buf(params.p[2]), KernelArg::buf(params.p[3]),
            KernelArg::buf(params.p[4]), KernelArg::buf(records), KernelArg::buf(radius), KernelArg::buf(covers),
            KernelArg::buf(counts), KernelArg::buf(ref(kDepthKeysA)), KernelArg::buf(ref(kDepthIdsA))});
  }
  end(TimingLabel::FwdProject);
  n = total;  // the binning sorts and emits every view's records as one set

  // Binning (tile_bin.h): the Gaussians in depth order, their pairs emitted
  // in that order, keyed by tile.
  begin(TimingLabel::FwdEmitPairs);
  BufferRef counts_by_rank = ensure(kCountsByRank, 4 * n, true), offsets = ensure(kRankOffsets, 4 * (n + 1), true);
  BufferRef order{}, status{};  // the PairStatus the pair kernels read (only when n > 0)
  if (n) {
    const bool in_b = radix_sort_slots(kDepthKeysA, kDepthKeysB, kDepthIdsA, kDepthIdsB, static_cast<uint32_t>(n), 32,
                                       count_unlimited());
    order = ref(in_b ? kDepthIdsB : kDepthIdsA);
    ScanParams gp{static_cast<uint32_t>(n), 0, 0, 0};
    launch(Kernel::GatherPairCounts, div_up(n, kGroup),
           {KernelArg::value(gp), KernelArg::buf(order), KernelArg::buf(counts), KernelArg::buf(counts_by_rank)});
    const uint32_t blocks = exclusive_scan(counts_by_rank, offsets, static_cast<uint32_t>(n));
    const bool on_device = pairs_on_device_ && step != kNoStep;
    if (!on_device || pair_capacity_ == 0) {
      // The read-back of a forward: the number of (tile, Gaussian) pairs sizes
      // the sort and its grid. Exact past 2^32 (from the block offsets), so a
      // count the uint32 offsets cannot hold stops here, before emission. A
      // training forward sized on the device reads it once, for its capacity.
      bool saturated = false;
      const uint64_t total = scanned_total(blocks, saturated);
      check_pair_count(total, saturated);
      num_pairs_ = total;
      pair_slots_ = total;
      if (on_device) grow_pair_capacity(total);
    }
    // The count the pair kernels read, written by pair_total. Sized on the
    // device (docs/gpu.md): the grid covers the capacity, the count bounds it,
    // and a total past the capacity emits nothing. Read back: its own record,
    // with no capacity to exceed (checked above), and no upload (the torch
    // path copies nothing to the device).
    const int slot = on_device ? kPairStatus : kPairStatusExact;
    if (arena_[slot].capacity == 0) launcher_->fill_zero(ensure(slot, sizeof(PairStatus)), sizeof(PairStatus));
    status = ref(slot);
    const PairParams pp{blocks, on_device ? static_cast<uint32_t>(pair_capacity_) : 0xffffffffu, on_device ? step : 0u,
                        0u};
    launch(Kernel::PairTotal, 1, {KernelArg::value(pp), KernelArg::buf(ref(kScanBlockSums)), KernelArg::buf(status)});
    if (on_device) {
      pairs_known_ = false;
      pair_slots_ = pair_capacity_;
    }
  }
  ensure(kKeysA, 4 * pair_slots_);
  ensure(kKeysB, 4 * pair_slots_);
  ensure(kValsA, 4 * pair_slots_);
  ensure(kValsB, 4 * pair_slots_);
  // A thread per rank and per piece of SPLAT_EMIT_PIECE pair slots (tile_bin.h).
  const uint32_t emit_threads = emit_pair_threads(static_cast<uint32_t>(n), static_cast<uint32_t>(pair_slots_));
  launch(Kernel::EmitPairs, n ? div_up(emit_threads, kGroup) : 0,
         {KernelArg::value(cam_), KernelArg::value(rp_), KernelArg::buf(covers), KernelArg::buf(radius),
          KernelArg::buf(order), KernelArg::buf(offsets), KernelArg::buf(status),
          KernelArg::buf(ref(kKeysA)), KernelArg::buf(ref(kValsA)), KernelArg::buf(pair_ranges)});
  end(TimingLabel::FwdEmitPairs);

  begin(TimingLabel::FwdRadixSort);
  const uint32_t pairs = static_cast<uint32_t>(pair_slots_);
  // Tile ids run to num_tiles: emission's sentinel (tile_bin.h) has a range too.
  sorted_in_b_ =
      pairs ? radix_sort_slots(kKeysA, kKeysB, kValsA, kValsB, pairs, tile_bits(num_tiles + 1), status) : false;
  BufferRef ranges = ensure(kRanges, 8 * (static_cast<size_t>(num_tiles) + 1));
  launcher_->fill_zero(ranges, 8 * (static_cast<size_t>(num_tiles) + 1));
  ScanParams rp{pairs, 0, 0, 0};
  launch(Kernel::TileRanges, div_up(pairs, kGroup),
         {KernelArg::value(rp), KernelArg::buf(ref(sorted_in_b_ ? kKeysB : kKeysA)), KernelArg::buf(status),
          KernelArg::buf(ranges)});
  end(TimingLabel::FwdRadixSort);

  begin(TimingLabel::FwdRasterize);
  BufferRef image = ensure(kImage, 12 * pixels), alpha = ensure(kAlpha, 4 * pixels),
            final_T = ensure(kFinalT, 4 * pixels), n_contrib = ensure(kNContrib, 4 * pixels);
  // Chunk passes (rasterize_forward.h): per chunk slot and pixel, 4 floats
  // of state and the last contributor; the slot -> tile map.
  // Below kMaxPairs and 2^20 tiles, slot * SPLAT_GROUP_SIZE + pixel (the
  // kernels' uint32 quad index into chunk_state) stays below 2^32.
  const size_t slots = chunk_slots(num_tiles, pairs);
  static_assert((uint64_t{kMaxImageSide / SPLAT_TILE_SIZE} * (kMaxImageSide / SPLAT_TILE_SIZE) + kMaxPairs / kGroup + 1) *
                        kGroup <= (uint64_t{1} << 32),
                "chunk_state quad indices fit uint32");
  BufferRef chunk_state = ensure(kChunkState, 16 * kGroup * slots, true),
            chunk_last = ensure(kChunkLast, 4 * kGroup * slots, true),
            chunk_tiles = ensure(kChunkTiles, 4 * slots, true),
            tile_saturated = ensure(kTileSaturated, 4 * static_cast<size_t>(num_tiles), true);
  const BufferRef sorted = ref(sorted_in_b_ ? kValsB : kValsA);
  if (pairs) {
    launch(Kernel::TileChunks, div_up(num_tiles, kGroup),
           {KernelArg::value(rp_), KernelArg::buf(ranges), KernelArg::buf(chunk_tiles),
            KernelArg::buf(tile_saturated)});
    auto chunk_pass = [&](uint32_t groups, const ChunkPassParams& cp) {
      launch(Kernel::RasterizeChunks, groups,
             {KernelArg::value(cam_), KernelArg::value(rp_), KernelArg::value(cp), KernelArg::buf(ranges),
              KernelArg::buf(sorted), KernelArg::buf(records), KernelArg::buf(chunk_tiles),
              KernelArg::buf(chunk_state), KernelArg::buf(chunk_last), KernelArg::buf(tile_saturated)});
    };
    if (skips_saturated_chunks(num_gaussians_, view_pixels)) {  // as one view alone decides
      // Every tile's chunk k, one launch per k < kHeadChunks, each seeing
      // the chunks before it whole; then the rest over the slots, skipping
      // the chunks behind a tile's saturation (ChunkPassParams).
      for (uint32_t k = 0; k < kHeadChunks; ++k) chunk_pass(num_tiles, ChunkPassParams{1, k, 0, 1});
      chunk_pass(static_cast<uint32_t>(slots), ChunkPassParams{0, 0, kHeadChunks, 1});
    } else {
      chunk_pass(static_cast<uint32_t>(slots), ChunkPassParams{0, 0, 0, 0});
    }
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

void GpuDevice::backward_pass(BufferRef d_image, const BufferRef* d_alpha, const BufferRef out[6], BufferRef abs_out) {
  backward_raster(d_image, d_alpha, abs_out);
  begin(TimingLabel::ProjectBack);
  ensure(kShFactors, 4 * SPLAT_SH_FACTOR_FLOATS * num_gaussians_, true);
  sh_factor_views_ = 1;  // one view's factors (views together: gpu_views.cpp)
  backward_project(0, cam_, out);
  if (out[4].handle) expand_sh_grad(out[4]);
  end(TimingLabel::ProjectBack);
}

void GpuDevice::backward_raster(BufferRef d_image, const BufferRef* d_alpha, BufferRef abs_out) {
  const size_t n = num_gaussians_ * views_;  // every view's records
  const bool det = config_.deterministic;
  const bool absgrad = abs_out.handle != 0;

  begin(TimingLabel::ZeroGrads);
  const size_t grad_items = det ? pair_slots_ : n;
  BufferRef acc = ensure(kGrads, sizeof(float) * SPLAT_PAIR_GRAD * grad_items, true);
  if (grad_items) launcher_->fill_zero(acc, sizeof(float) * SPLAT_PAIR_GRAD * grad_items);
  // absgrad: the backward adds into abs_out, or writes per pair slot
  // (deterministic); slots of chunks with nothing to do stay zero.
  BufferRef abs_acc = acc;  // any buffer: the plain specialization never touches it
  if (absgrad) {
    abs_acc = det ? ensure(kPairAbs, 8 * grad_items, true) : abs_out;
    if (grad_items) launcher_->fill_zero(abs_acc, 8 * grad_items);
  }
  end(TimingLabel::ZeroGrads);

  begin(TimingLabel::BackwardRaster);
  BackwardParams bp{d_alpha ? 1u : 0u, static_cast<uint32_t>(pair_slots_), 0u, 0u};
  // One threadgroup per chunk slot (rasterize_forward.h).
  const uint32_t slots = pair_slots_ ? chunk_slots(rp_.num_tiles, static_cast<uint32_t>(pair_slots_)) : 0u;
  if (absgrad && !backward_absgrad_pipeline_)
    backward_absgrad_pipeline_ = launcher_->pipeline(Kernel::RasterizeBackward, with_absgrad(backward_spec_));
  launch(absgrad ? backward_absgrad_pipeline_ : pipeline(Kernel::RasterizeBackward), Kernel::RasterizeBackward, slots,
         {KernelArg::value(cam_), KernelArg::value(rp_), KernelArg::value(bp), KernelArg::buf(ref(kRanges)),
          KernelArg::buf(ref(sorted_in_b_ ? kValsB : kValsA)), KernelArg::buf(ref(kRecords)),
          KernelArg::buf(ref(kFinalT)), KernelArg::buf(ref(kNContrib)), KernelArg::buf(ref(kChunkState)),
          KernelArg::buf(ref(kChunkTiles)), KernelArg::buf(d_image),
          KernelArg::buf(d_alpha ? *d_alpha : d_image), KernelArg::buf(ref(kCovers)), KernelArg::buf(ref(kPairRanges)),
          KernelArg::buf(acc), KernelArg::buf(abs_acc)});
  if (absgrad && det) {  // per Gaussian, its pair slots in emission order
    ElementParams ep{static_cast<uint32_t>(n), 0u, 0u, 0.f};
    launch(Kernel::AbsgradPairSum, div_up(n, kGroup),
           {KernelArg::value(ep), KernelArg::buf(ref(kPairRanges)), KernelArg::buf(abs_acc), KernelArg::buf(abs_out)});
  }
  end(TimingLabel::BackwardRaster);
}

void GpuDevice::backward_project(uint32_t v, const CameraParams& cam, const BufferRef out[6]) {
  const size_t n = num_gaussians_;
  const ParamRefs& p = forward_params_;
  // View v's SH factors at set v of kShFactors, which the caller sized.
  const BufferRef factors = ref(kShFactors, 4 * SPLAT_SH_FACTOR_FLOATS * n * v);
  // View v's records, radii, pair ranges and (per record, not per pair slot)
  // accumulators; the deterministic variant's pair slots are global.
  const size_t acc_offset = config_.deterministic ? 0 : sizeof(float) * SPLAT_PAIR_GRAD * n * v;
  launch(Kernel::ProjectBackward, div_up(n, kGroup),
         {KernelArg::value(cam), KernelArg::value(view_params(v)), KernelArg::buf(p.p[0]), KernelArg::buf(p.p[1]),
          KernelArg::buf(p.p[2]), KernelArg::buf(p.p[4]), KernelArg::buf(ref(kRecords, sizeof(SplatRecord) * n * v)),
          KernelArg::buf(ref(kRadius, 4 * n * v)), KernelArg::buf(ref(kGrads, acc_offset)),
          KernelArg::buf(ref(kPairRanges, 8 * n * v)), KernelArg::buf(out[0]), KernelArg::buf(out[1]),
          KernelArg::buf(out[2]), KernelArg::buf(out[3]), KernelArg::buf(factors), KernelArg::buf(out[5])});
}

void GpuDevice::expand_sh_grad(BufferRef out) {
  const size_t n = num_gaussians_;
  ShGradParams sp{static_cast<uint32_t>(n), rp_.sh_stride,
                  static_cast<uint32_t>(sh_num_coeffs(static_cast<int>(rp_.sh_degree))), sh_factor_views_};
  const size_t total = n * 3 * size_t{rp_.sh_stride};
  if (total > (size_t{1} << 32) - 4) throw BackendError("[gpu] too many SH coefficients for one dispatch");
  launch(Kernel::ExpandShGrad, div_up(div_up(total, 4), kGroup),  // a thread per 16-byte quad
         {KernelArg::value(sp), KernelArg::buf(ref(kShFactors)), KernelArg::buf(out)});
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
