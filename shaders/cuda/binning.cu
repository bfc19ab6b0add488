// CUDA entry points (NVRTC): prefix sums, the portable radix sort, pair
// emission, tile ranges and chunk slots.
#include "radix_sort.h"
#include "scan.h"
#include "tile_bin.h"

extern "C" __global__ void __launch_bounds__(SPLAT_GROUP_SIZE)
    splat_scan_block_sums(ScanParams p, const uint32_t* in, uint32_t* block_sums) {
  SPLAT_TG_ARRAY(uint32_t, warp_tot, SPLAT_GROUP_WARPS + 1);
  scan_block_sums_body(SPLAT_THREAD_CTX(), p, in, block_sums, warp_tot);
}

extern "C" __global__ void __launch_bounds__(SPLAT_GROUP_SIZE)
    splat_scan_rows(ScanParams p, uint32_t* data, uint32_t* totals) {
  SPLAT_TG_ARRAY(uint32_t, warp_tot, SPLAT_GROUP_WARPS + 1);
  scan_rows_body(SPLAT_THREAD_CTX(), p, data, totals, warp_tot);
}

extern "C" __global__ void __launch_bounds__(SPLAT_GROUP_SIZE)
    splat_scan_apply(ScanParams p, const uint32_t* in, const uint32_t* block_offsets, uint32_t* out) {
  SPLAT_TG_ARRAY(uint32_t, warp_tot, SPLAT_GROUP_WARPS + 1);
  scan_apply_body(SPLAT_THREAD_CTX(), p, in, block_offsets, out, warp_tot);
}

extern "C" __global__ void __launch_bounds__(SPLAT_GROUP_SIZE)
    splat_radix_histogram(ScanParams p, const uint32_t* keys, const uint32_t* count_limit, uint32_t* hist) {
  SPLAT_TG_ARRAY(uint32_t, counts, SPLAT_GROUP_WARPS * SPLAT_RADIX);
  radix_histogram_body(SPLAT_THREAD_CTX(), p, keys, count_limit, hist, counts);
}

extern "C" __global__ void __launch_bounds__(SPLAT_GROUP_SIZE)
    splat_radix_scatter(ScanParams p, const uint32_t* keys_in, const uint32_t* vals_in, const uint32_t* count_limit,
                        uint32_t* keys_out, uint32_t* vals_out, const uint32_t* hist, const uint32_t* digit_totals) {
  SPLAT_TG_ARRAY(uint32_t, counts, SPLAT_GROUP_WARPS * SPLAT_RADIX);
  SPLAT_TG_ARRAY(uint32_t, warp_tot, SPLAT_GROUP_WARPS + 1);
  SPLAT_TG_ARRAY(uint32_t, staged, SPLAT_SORT_STAGE_WORDS);
  radix_scatter_body(SPLAT_THREAD_CTX(), p, keys_in, vals_in, count_limit, keys_out, vals_out, hist, digit_totals,
                     counts, warp_tot, staged);
}

extern "C" __global__ void __launch_bounds__(SPLAT_GROUP_SIZE)
    splat_gather_pair_counts(ScanParams p, const uint32_t* order, const uint32_t* pair_count,
                             uint32_t* counts_by_rank) {
  gather_pair_counts_body(SPLAT_THREAD_CTX(), p, order, pair_count, counts_by_rank);
}

extern "C" __global__ void __launch_bounds__(SPLAT_GROUP_SIZE)
    splat_emit_pairs(CameraParams cam, RasterParams rp, const CoverRecord* covers, int32_t* radius,
                     const uint32_t* order, const uint32_t* offsets, const PairStatus* status, uint32_t* keys,
                     uint32_t* values, uint32_t* pair_ranges) {
  emit_pairs_body(SPLAT_THREAD_CTX(), cam, rp, covers, radius, order, offsets, status, keys, values, pair_ranges);
}

extern "C" __global__ void __launch_bounds__(SPLAT_GROUP_SIZE)
    splat_pair_total(PairParams p, const uint32_t* block_offsets, PairStatus* status) {
  SPLAT_TG_ARRAY(uint64_t, partial, SPLAT_GROUP_SIZE);
  SPLAT_TG_ARRAY(uint32_t, wrapped, SPLAT_GROUP_SIZE);
  pair_total_body(SPLAT_THREAD_CTX(), p, block_offsets, status, partial, wrapped);
}

extern "C" __global__ void __launch_bounds__(SPLAT_GROUP_SIZE)
    splat_tile_ranges(ScanParams p, const uint32_t* keys, const uint32_t* count_limit, uint32_t* ranges) {
  tile_ranges_body(SPLAT_THREAD_CTX(), p, keys, count_limit, ranges);
}

extern "C" __global__ void __launch_bounds__(SPLAT_GROUP_SIZE)
    splat_tile_chunks(RasterParams rp, const uint32_t* ranges, uint32_t* chunk_tiles, uint32_t* tile_saturated) {
  tile_chunks_body(SPLAT_THREAD_CTX(), rp, ranges, chunk_tiles, tile_saturated);
}
