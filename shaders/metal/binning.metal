// Metal entry points: prefix sums, the portable radix sort, pair emission and
// tile ranges (same argument order as shaders/cuda/binning.cu).
// Function constant: splat_fc_deterministic (index 4), read by emission.
#include "function_constants.h"
#include "radix_sort.h"
#include "scan.h"
#include "tile_bin.h"

kernel void splat_scan_block_sums(constant ScanParams& p [[buffer(0)]], device const uint32_t* in [[buffer(1)]],
                                  device uint32_t* block_sums [[buffer(2)]], SPLAT_THREAD_ATTRS) {
  SPLAT_TG_ARRAY(uint32_t, warp_tot, SPLAT_GROUP_WARPS + 1);
  scan_block_sums_body(SPLAT_THREAD_CTX(), p, in, block_sums, warp_tot);
}

kernel void splat_scan_rows(constant ScanParams& p [[buffer(0)]], device uint32_t* data [[buffer(1)]],
                            device uint32_t* totals [[buffer(2)]], SPLAT_THREAD_ATTRS) {
  SPLAT_TG_ARRAY(uint32_t, warp_tot, SPLAT_GROUP_WARPS + 1);
  scan_rows_body(SPLAT_THREAD_CTX(), p, data, totals, warp_tot);
}

kernel void splat_scan_apply(constant ScanParams& p [[buffer(0)]], device const uint32_t* in [[buffer(1)]],
                             device const uint32_t* block_offsets [[buffer(2)]], device uint32_t* out [[buffer(3)]],
                             SPLAT_THREAD_ATTRS) {
  SPLAT_TG_ARRAY(uint32_t, warp_tot, SPLAT_GROUP_WARPS + 1);
  scan_apply_body(SPLAT_THREAD_CTX(), p, in, block_offsets, out, warp_tot);
}

kernel void splat_radix_histogram(constant ScanParams& p [[buffer(0)]], device const uint32_t* keys [[buffer(1)]],
                                  device const uint32_t* count_limit [[buffer(2)]], device uint32_t* hist [[buffer(3)]],
                                  SPLAT_THREAD_ATTRS) {
  SPLAT_TG_ARRAY(uint32_t, counts, SPLAT_GROUP_WARPS * SPLAT_RADIX);
  radix_histogram_body(SPLAT_THREAD_CTX(), p, keys, count_limit, hist, counts);
}

kernel void splat_radix_scatter(constant ScanParams& p [[buffer(0)]], device const uint32_t* keys_in [[buffer(1)]],
                                device const uint32_t* vals_in [[buffer(2)]],
                                device const uint32_t* count_limit [[buffer(3)]], device uint32_t* keys_out [[buffer(4)]],
                                device uint32_t* vals_out [[buffer(5)]], device const uint32_t* hist [[buffer(6)]],
                                device const uint32_t* digit_totals [[buffer(7)]], SPLAT_THREAD_ATTRS) {
  SPLAT_TG_ARRAY(uint32_t, counts, SPLAT_GROUP_WARPS * SPLAT_RADIX);
  SPLAT_TG_ARRAY(uint32_t, warp_tot, SPLAT_GROUP_WARPS + 1);
  SPLAT_TG_ARRAY(uint32_t, staged, SPLAT_SORT_STAGE_WORDS);
  radix_scatter_body(SPLAT_THREAD_CTX(), p, keys_in, vals_in, count_limit, keys_out, vals_out, hist, digit_totals,
                     counts, warp_tot, staged);
}

kernel void splat_gather_pair_counts(constant ScanParams& p [[buffer(0)]], device const uint32_t* order [[buffer(1)]],
                                     device const uint32_t* pair_count [[buffer(2)]],
                                     device uint32_t* counts_by_rank [[buffer(3)]], SPLAT_THREAD_ATTRS) {
  gather_pair_counts_body(SPLAT_THREAD_CTX(), p, order, pair_count, counts_by_rank);
}

kernel void splat_emit_pairs(constant CameraParams& cam [[buffer(0)]], constant RasterParams& rp [[buffer(1)]],
                             device const CoverRecord* covers [[buffer(2)]], device int32_t* radius [[buffer(3)]],
                             device const uint32_t* order [[buffer(4)]], device const uint32_t* offsets [[buffer(5)]],
                             device const PairStatus* status [[buffer(6)]], device uint32_t* keys [[buffer(7)]],
                             device uint32_t* values [[buffer(8)]], device uint32_t* pair_ranges [[buffer(9)]],
                             SPLAT_THREAD_ATTRS) {
  emit_pairs_body(SPLAT_THREAD_CTX(), cam, rp, covers, radius, order, offsets, status, keys, values, pair_ranges);
}

kernel void splat_pair_total(constant PairParams& p [[buffer(0)]], device const uint32_t* block_offsets [[buffer(1)]],
                             device PairStatus* status [[buffer(2)]], SPLAT_THREAD_ATTRS) {
  SPLAT_TG_ARRAY(uint64_t, partial, SPLAT_GROUP_SIZE);
  SPLAT_TG_ARRAY(uint32_t, wrapped, SPLAT_GROUP_SIZE);
  pair_total_body(SPLAT_THREAD_CTX(), p, block_offsets, status, partial, wrapped);
}

kernel void splat_tile_ranges(constant ScanParams& p [[buffer(0)]], device const uint32_t* keys [[buffer(1)]],
                              device const uint32_t* count_limit [[buffer(2)]], device uint32_t* ranges [[buffer(3)]],
                              SPLAT_THREAD_ATTRS) {
  tile_ranges_body(SPLAT_THREAD_CTX(), p, keys, count_limit, ranges);
}

kernel void splat_tile_chunks(constant RasterParams& rp [[buffer(0)]], device const uint32_t* ranges [[buffer(1)]],
                              device uint32_t* chunk_tiles [[buffer(2)]], device uint32_t* tile_saturated [[buffer(3)]],
                              SPLAT_THREAD_ATTRS) {
  tile_chunks_body(SPLAT_THREAD_CTX(), rp, ranges, chunk_tiles, tile_saturated);
}
