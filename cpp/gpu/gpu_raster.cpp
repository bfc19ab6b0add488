// The rasterizer's passes on the GPU, over one view or several views of one
// size binned together (docs/gpu.md): the forward (projection, binning in
// depth order, the four raster passes) and the backward (the raster backward
// into per-record accumulators, then the projection backward). The device's
// plumbing (arena, launches, timing) is gpu_device.cpp; the training step
// around these passes gpu_training.cpp and gpu_views.cpp.
#include <algorithm>

#include "../../shaders/common/sh.h"
#include "gpu_device.h"
#include "grid.h"
#include "splat/errors.h"
#include "splat/limits.h"

namespace splat::gpu {
namespace {

// Bits needed to hold tile ids 0 .. num_tiles - 1.
uint32_t tile_bits(uint32_t num_tiles) {
  uint32_t bits = 0;
  while (bits < 32 && (uint64_t{1} << bits) < num_tiles) ++bits;
  return bits;
}

}  // namespace

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
  rp_.chunk_stop = chunked_stop() ? 1u : 0u;    // likewise (no walk pass then)
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
  // Each record's ShColorJacobian (three quads) for the projection backward, from SH degree 1 on.
  const size_t jac_bytes = sizeof(float) * SPLAT_COLOR_JAC_FLOATS;
  BufferRef color_jac = ensure(kColorJacobian, sh_degree > 0 ? jac_bytes * total : 16, true);
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
            KernelArg::buf(counts), KernelArg::buf(ref(kDepthKeysA)), KernelArg::buf(ref(kDepthIdsA)),
            KernelArg::buf(color_jac)});
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
            KernelArg::buf(counts), KernelArg::buf(ref(kDepthKeysA)), KernelArg::buf(ref(kDepthIdsA)),
            KernelArg::buf(color_jac)});
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
  BufferRef stop_chunk = ensure(kStopChunk, stop_chunk_bytes(rp_.chunk_stop != 0u, pixels));
  launch(Kernel::RasterizeForward, num_tiles,
         {KernelArg::value(cam_), KernelArg::value(rp_), KernelArg::buf(ranges), KernelArg::buf(image),
          KernelArg::buf(alpha), KernelArg::buf(final_T), KernelArg::buf(n_contrib), KernelArg::buf(chunk_state),
          KernelArg::buf(chunk_last), KernelArg::buf(stop_chunk)});
  // The chunked stop leaves every pixel final in RasterizeForward, which then
  // stores its checkpoints too: no walk, no checkpoint pass.
  if (pairs && !rp_.chunk_stop) {
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
  const size_t jac_offset = rp_.sh_degree > 0 ? sizeof(float) * SPLAT_COLOR_JAC_FLOATS * n * v : 0;
  launch(Kernel::ProjectBackward, div_up(n, kGroup),
         {KernelArg::value(cam), KernelArg::value(view_params(v)), KernelArg::buf(p.p[0]), KernelArg::buf(p.p[1]),
          KernelArg::buf(p.p[2]), KernelArg::buf(ref(kColorJacobian, jac_offset)),
          KernelArg::buf(ref(kRecords, sizeof(SplatRecord) * n * v)),
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

}  // namespace splat::gpu
