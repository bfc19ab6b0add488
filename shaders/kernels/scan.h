// Reduce-then-scan exclusive prefix sums of uint32 arrays, in three
// dispatches with no dependence between threadgroups inside one dispatch:
//   scan_block_sums   one threadgroup per SPLAT_SCAN_BLOCK elements: its sum,
//                     saturated at 2^32 - 1
//   scan_rows         one threadgroup per row: in-place exclusive scan of the
//                     row (e.g. the block sums), its total to totals[row]
//   scan_apply        one threadgroup per block: exclusive scan of the block
//                     plus the block's scanned offset; out[count] = the total
//                     (block_offsets[num_blocks])
// The sums are modulo 2^32. Since no block sum wraps, the scanned block
// offsets (and the total after them) still give the exact 64-bit total on
// the host: the sum of their consecutive differences modulo 2^32. That is
// how GpuDevice tells a pair count past 2^32 from a small one. Elements are
// below 2^28 (a thread's 16 may not wrap).
#pragma once
#include "simt_util.h"

SPLAT_FUNC void scan_block_sums_body(SimtThread t, SPLAT_CONST_MEM const ScanParams& p,
                                     SPLAT_DEVICE_MEM const uint32_t* in, SPLAT_DEVICE_MEM uint32_t* block_sums,
                                     SPLAT_TG_MEM uint32_t* warp_tot) {
  uint32_t base = t.group * SPLAT_SCAN_BLOCK;
  uint32_t sum = 0u;
  for (uint32_t r = 0; r < SPLAT_SCAN_ITEMS_PER_THREAD; ++r) {
    uint32_t i = base + r * SPLAT_GROUP_SIZE + t.tid;
    if (i < p.count) sum += in[i];
  }
  uint32_t total, hi;
  block_exclusive_scan(t, sum, warp_tot, total);
  // Exact: sum_t = 2^16 hi_t + lo_t, so the block's sum is 2^16 hi + lo with
  // hi = sum of hi_t < 2^24 and lo = total - 2^16 hi (mod 2^32) < 2^24.
  block_exclusive_scan(t, sum >> 16, warp_tot, hi);
  uint32_t lo = total - (hi << 16);
  bool wraps = (hi >> 16) != 0u || (hi << 16) + lo < lo;
  if (t.tid == 0) block_sums[t.group] = wraps ? 0xffffffffu : total;
}

SPLAT_FUNC void scan_rows_body(SimtThread t, SPLAT_CONST_MEM const ScanParams& p, SPLAT_DEVICE_MEM uint32_t* data,
                               SPLAT_DEVICE_MEM uint32_t* totals, SPLAT_TG_MEM uint32_t* warp_tot) {
  SPLAT_DEVICE_MEM uint32_t* row = data + t.group * p.row_length;
  uint32_t carry = 0u;
  for (uint32_t c = 0; c < p.row_length; c += SPLAT_GROUP_SIZE) {
    uint32_t i = c + t.tid;
    uint32_t v = i < p.row_length ? row[i] : 0u;
    uint32_t chunk_total;
    uint32_t ex = block_exclusive_scan(t, v, warp_tot, chunk_total);
    if (i < p.row_length) row[i] = carry + ex;
    carry += chunk_total;
  }
  if (t.tid == 0) totals[t.group] = carry;
}

SPLAT_FUNC void scan_apply_body(SimtThread t, SPLAT_CONST_MEM const ScanParams& p, SPLAT_DEVICE_MEM const uint32_t* in,
                                SPLAT_DEVICE_MEM const uint32_t* block_offsets, SPLAT_DEVICE_MEM uint32_t* out,
                                SPLAT_TG_MEM uint32_t* warp_tot) {
  uint32_t base = t.group * SPLAT_SCAN_BLOCK;
  uint32_t carry = block_offsets[t.group];
  for (uint32_t r = 0; r < SPLAT_SCAN_ITEMS_PER_THREAD; ++r) {
    uint32_t i = base + r * SPLAT_GROUP_SIZE + t.tid;
    uint32_t v = i < p.count ? in[i] : 0u;
    uint32_t chunk_total;
    uint32_t ex = block_exclusive_scan(t, v, warp_tot, chunk_total);
    if (i < p.count) out[i] = carry + ex;
    carry += chunk_total;
  }
  if (t.group == 0u && t.tid == 0u) out[p.count] = block_offsets[p.num_blocks];
}
