// The forward's binning: each tile's records in depth order, as the pair
// list the raster passes read (values in kValsA or kValsB, sorted_in_b_) and
// each tile's range in it (kRanges). Two paths give the same lists to the
// bit (docs/gpu.md, "Binning into tile buckets"): the radix path
// (shaders/kernels/tile_bin.h: a depth sort over the records, pairs emitted
// in depth order, a stable tile sort over the pairs) and the bucket path
// (tile_buckets.h: per-tile counts, each pair placed in its tile's bucket,
// each bucket sorted by its own threadgroup).
#include "gpu_device.h"
#include "grid.h"
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

bool GpuDevice::uses_buckets() const {
  // The deterministic backward reads each record's pair slots in emission
  // order (pair_ranges), which only the radix path writes.
  return config_.pair_sort == PairSort::Buckets && !config_.deterministic;
}

BufferRef GpuDevice::size_pairs(uint32_t blocks, uint32_t step) {
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
  const BufferRef status = ref(slot);
  const PairParams pp{blocks, on_device ? static_cast<uint32_t>(pair_capacity_) : 0xffffffffu, on_device ? step : 0u,
                      0u};
  launch(Kernel::PairTotal, 1, {KernelArg::value(pp), KernelArg::buf(ref(kScanBlockSums)), KernelArg::buf(status)});
  if (on_device) {
    pairs_known_ = false;
    pair_slots_ = pair_capacity_;
  }
  return status;
}

BufferRef GpuDevice::bin_radix(size_t n, BufferRef covers, BufferRef radius, BufferRef counts, BufferRef pair_ranges,
                               uint32_t step) {
  // The Gaussians in depth order, their pairs emitted in that order, keyed by tile.
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
    status = size_pairs(exclusive_scan(counts_by_rank, offsets, static_cast<uint32_t>(n)), step);
  }
  ensure(kKeysA, 4 * pair_slots_);
  ensure(kKeysB, 4 * pair_slots_);
  ensure(kValsA, 4 * pair_slots_);
  ensure(kValsB, 4 * pair_slots_);
  // A thread per rank and per piece of SPLAT_EMIT_PIECE pair slots (tile_bin.h).
  const uint32_t emit_threads = emit_pair_threads(static_cast<uint32_t>(n), static_cast<uint32_t>(pair_slots_));
  launch(Kernel::EmitPairs, n ? div_up(emit_threads, kGroup) : 0,
         {KernelArg::value(cam_), KernelArg::value(rp_), KernelArg::buf(covers), KernelArg::buf(radius),
          KernelArg::buf(order), KernelArg::buf(offsets), KernelArg::buf(status), KernelArg::buf(ref(kKeysA)),
          KernelArg::buf(ref(kValsA)), KernelArg::buf(pair_ranges)});
  end(TimingLabel::FwdEmitPairs);

  begin(TimingLabel::FwdRadixSort);
  const uint32_t pairs = static_cast<uint32_t>(pair_slots_), num_tiles = rp_.num_tiles;
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
  return ranges;
}

BufferRef GpuDevice::bin_buckets(size_t n, BufferRef covers, BufferRef radius, BufferRef counts, uint32_t step) {
  // The same labels as the radix path, for the A/B: placing the pairs under
  // the emission's, sorting the buckets under the sort's.
  begin(TimingLabel::FwdEmitPairs);
  const uint32_t num_tiles = rp_.num_tiles;
  // Zeroed every forward: a forward stopped between the count and the sort
  // (a pair count past the limit) would otherwise leave its counts behind.
  BufferRef tile_counts = ensure(kTileCounts, 4 * static_cast<size_t>(num_tiles)),
            tile_offsets = ensure(kTileOffsets, 4 * (static_cast<size_t>(num_tiles) + 1));
  launcher_->fill_zero(tile_counts, 4 * static_cast<size_t>(num_tiles));
  const uint32_t groups = div_up(n, kGroup);
  launch(Kernel::BucketCount, groups,
         {KernelArg::value(cam_), KernelArg::value(rp_), KernelArg::buf(covers), KernelArg::buf(counts),
          KernelArg::buf(tile_counts)});
  const BufferRef status = size_pairs(exclusive_scan(tile_counts, tile_offsets, num_tiles), step);
  // A pair is one 64-bit word (depth bits << 32 | record) in kKeysA, merged
  // through kKeysB when its list is long; the records sorted into kValsB.
  ensure(kKeysA, 8 * pair_slots_);
  ensure(kKeysB, 8 * pair_slots_);
  ensure(kValsB, 4 * pair_slots_);
  launch(Kernel::BucketEmit, groups,
         {KernelArg::value(cam_), KernelArg::value(rp_), KernelArg::buf(covers), KernelArg::buf(radius),
          KernelArg::buf(counts), KernelArg::buf(ref(kDepthKeysA)), KernelArg::buf(status),
          KernelArg::buf(tile_counts), KernelArg::buf(tile_offsets), KernelArg::buf(ref(kKeysA))});
  end(TimingLabel::FwdEmitPairs);

  begin(TimingLabel::FwdRadixSort);
  BufferRef ranges = ensure(kRanges, 8 * (static_cast<size_t>(num_tiles) + 1));
  launch(Kernel::BucketSort, num_tiles + 1,
         {KernelArg::value(rp_), KernelArg::buf(tile_offsets), KernelArg::buf(status), KernelArg::buf(ref(kKeysA)),
          KernelArg::buf(ref(kKeysB)), KernelArg::buf(ref(kValsB)), KernelArg::buf(ranges)});
  sorted_in_b_ = true;
  end(TimingLabel::FwdRadixSort);
  return ranges;
}

}  // namespace splat::gpu
