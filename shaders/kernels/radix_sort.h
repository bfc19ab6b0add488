// A portable, stable LSD radix sort of 64-bit keys with 32-bit values, one
// SPLAT_RADIX_BITS digit per pass, over only the key bits in use. Each pass is
// three dispatches with no dependence between threadgroups inside one
// dispatch (Metal gives no forward-progress guarantee between threadgroups):
//   radix_histogram  per block of SPLAT_SCAN_BLOCK keys: digit counts, stored
//                    digit-major: hist[digit * num_blocks + block]
//   scan_rows        (scan.h) one threadgroup per digit: exclusive scan of the
//                    digit's row over blocks, and the digit's total
//   radix_scatter    per block: global digit bases (scan of the totals), then
//                    a stable scatter
// Inside a block, SIMD group w owns keys [w * S, (w + 1) * S) (S = 16 x 32)
// and walks them 32 at a time in order; lanes with equal digits are matched
// with ballots and ranked by lane, so the scatter keeps the input order of
// equal digits: the sort is stable.
#pragma once
#include "simt_util.h"

#define SPLAT_SORT_ROUNDS (SPLAT_SCAN_BLOCK / SPLAT_GROUP_SIZE)
SPLAT_STATIC_ASSERT(SPLAT_GROUP_SIZE == SPLAT_RADIX, "one thread per digit");

SPLAT_FUNC uint32_t radix_digit(uint64_t key, uint32_t shift) {
  return (uint32_t)(key >> shift) & (uint32_t)(SPLAT_RADIX - 1);
}

// counts[w * SPLAT_RADIX + d] = keys of digit d in SIMD group w's segment.
SPLAT_FUNC void radix_count_segments(SimtThread t, SPLAT_CONST_MEM const ScanParams& p,
                                     SPLAT_DEVICE_MEM const uint64_t* keys, SPLAT_TG_MEM uint32_t* counts) {
  for (uint32_t i = t.tid; i < SPLAT_GROUP_WARPS * SPLAT_RADIX; i += SPLAT_GROUP_SIZE) counts[i] = 0u;
  sp_group_barrier();
  uint32_t base = t.group * SPLAT_SCAN_BLOCK + t.warp * (SPLAT_SORT_ROUNDS * SPLAT_SIMD_WIDTH);
  SPLAT_TG_MEM uint32_t* mine = counts + t.warp * SPLAT_RADIX;
  for (uint32_t r = 0; r < SPLAT_SORT_ROUNDS; ++r) {
    uint32_t i = base + r * SPLAT_SIMD_WIDTH + t.lane;
    bool valid = i < p.count;
    uint32_t digit = valid ? radix_digit(keys[i], p.shift) : 0u;
    uint32_t peers = simd_match_digit(digit, valid);
    if (valid && t.lane == sp_ctz(peers)) mine[digit] += sp_popcount(peers);
    sp_simd_barrier();
  }
  sp_group_barrier();
}

SPLAT_FUNC void radix_histogram_body(SimtThread t, SPLAT_CONST_MEM const ScanParams& p,
                                     SPLAT_DEVICE_MEM const uint64_t* keys, SPLAT_DEVICE_MEM uint32_t* hist,
                                     SPLAT_TG_MEM uint32_t* counts) {
  radix_count_segments(t, p, keys, counts);
  uint32_t d = t.tid;
  uint32_t s = 0u;
  for (uint32_t w = 0; w < SPLAT_GROUP_WARPS; ++w) s += counts[w * SPLAT_RADIX + d];
  hist[d * p.num_blocks + t.group] = s;
}

// hist: rows scanned by scan_rows; digit_totals: the rows' totals.
SPLAT_FUNC void radix_scatter_body(SimtThread t, SPLAT_CONST_MEM const ScanParams& p,
                                   SPLAT_DEVICE_MEM const uint64_t* keys_in, SPLAT_DEVICE_MEM const uint32_t* vals_in,
                                   SPLAT_DEVICE_MEM uint64_t* keys_out, SPLAT_DEVICE_MEM uint32_t* vals_out,
                                   SPLAT_DEVICE_MEM const uint32_t* hist, SPLAT_DEVICE_MEM const uint32_t* digit_totals,
                                   SPLAT_TG_MEM uint32_t* counts, SPLAT_TG_MEM uint32_t* warp_tot) {
  radix_count_segments(t, p, keys_in, counts);
  // Turn the per-segment counts of digit d into each segment's first output slot.
  uint32_t d = t.tid;
  uint32_t all;
  uint32_t run = block_exclusive_scan(t, digit_totals[d], warp_tot, all) + hist[d * p.num_blocks + t.group];
  for (uint32_t w = 0; w < SPLAT_GROUP_WARPS; ++w) {
    uint32_t c = counts[w * SPLAT_RADIX + d];
    counts[w * SPLAT_RADIX + d] = run;
    run += c;
  }
  sp_group_barrier();
  uint32_t base = t.group * SPLAT_SCAN_BLOCK + t.warp * (SPLAT_SORT_ROUNDS * SPLAT_SIMD_WIDTH);
  SPLAT_TG_MEM uint32_t* next = counts + t.warp * SPLAT_RADIX;
  uint32_t below = (1u << t.lane) - 1u;
  for (uint32_t r = 0; r < SPLAT_SORT_ROUNDS; ++r) {
    uint32_t i = base + r * SPLAT_SIMD_WIDTH + t.lane;
    bool valid = i < p.count;
    uint64_t key = valid ? keys_in[i] : (uint64_t)0;
    uint32_t digit = valid ? radix_digit(key, p.shift) : 0u;
    uint32_t peers = simd_match_digit(digit, valid);
    uint32_t slot = valid ? next[digit] : 0u;
    sp_simd_barrier();  // every lane has read its slot before the leader moves it
    if (valid) {
      uint32_t dst = slot + sp_popcount(peers & below);
      keys_out[dst] = key;
      vals_out[dst] = vals_in[i];
      if (t.lane == sp_ctz(peers)) next[digit] = slot + sp_popcount(peers);
    }
    sp_simd_barrier();
  }
}
