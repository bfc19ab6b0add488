// A portable, stable LSD radix sort of 32-bit keys with 32-bit values, one
// SPLAT_RADIX_BITS digit per pass, over only the key bits in use. Each pass is
// three dispatches with no dependence between threadgroups inside one
// dispatch (Metal gives no forward-progress guarantee between threadgroups):
//   radix_histogram  per block of SPLAT_SORT_BLOCK keys: digit counts, stored
//                    digit-major: hist[digit * num_blocks + block]
//   scan_rows        (scan.h) one threadgroup per digit: exclusive scan of the
//                    digit's row over blocks, and the digit's total
//   radix_scatter    per block: global digit bases (scan of the totals), then
//                    a stable scatter
// Inside a block, SIMD group w owns keys [w * S, (w + 1) * S) (S =
// SPLAT_SORT_ROUNDS x 32), loads them all first (the loads overlap), then
// walks them 32 at a time in order; lanes with equal digits are matched
// with ballots and ranked by lane, so the scatter keeps the input order of
// equal digits: the sort is stable. The scatter keeps each round's match from
// its counting walk for its scatter walk (a match is nine ballots).
// The scatter walk places the block's keys and values in threadgroup memory in
// their output order, and the block then stores them a run of equal digits at
// a time, consecutive threads to consecutive slots: a lane storing its key at
// its digit's slot directly (a round of 32 lanes touching up to 32 sectors on
// the low digits) made the step 4.5-6% slower (docs/gpu.md, "Sort"). That direct
// scatter stays as the A/B SPLAT_SORT_STAGED=0 (an NVRTC define through
// SPLAT_NVRTC_OPTIONS); the same slots for the same keys either way.
// The keys are the first min(p.count, count_limit[0]): a count that only the
// device knows (the pairs of a forward sized on the device) bounds a grid
// sized by p.count.
#pragma once
#include "simt_util.h"

#ifndef SPLAT_SORT_STAGED
#define SPLAT_SORT_STAGED 1
#endif
// Threadgroup words the scatter stages through: the block's keys, its values,
// and each digit's global minus local first slot (1 for the direct scatter).
#define SPLAT_SORT_STAGE_WORDS (SPLAT_SORT_STAGED ? 2 * SPLAT_SORT_BLOCK + SPLAT_RADIX : 1)

SPLAT_STATIC_ASSERT(SPLAT_GROUP_SIZE == SPLAT_RADIX, "one thread per digit");

SPLAT_FUNC uint32_t radix_digit(uint32_t key, uint32_t shift) {
  return (key >> shift) & (uint32_t)(SPLAT_RADIX - 1);
}

// The first of this thread's keys: SIMD group w of a block owns
// SPLAT_SORT_ROUNDS x 32 consecutive keys, lane l every 32nd from l.
SPLAT_FUNC uint32_t radix_first_key(SimtThread t) {
  return t.group * SPLAT_SORT_BLOCK + t.warp * (SPLAT_SORT_ROUNDS * SPLAT_SIMD_WIDTH) + t.lane;
}

// Loads this thread's keys (all rounds at once, so the loads overlap).
SPLAT_FUNC void radix_load_keys(SimtThread t, uint32_t count, SPLAT_DEVICE_MEM const uint32_t* keys_in,
                                SPLAT_THREAD uint32_t* keys) {
  const uint32_t first = radix_first_key(t);
  SPLAT_UNROLL for (uint32_t r = 0; r < SPLAT_SORT_ROUNDS; ++r) {
    uint32_t i = first + r * SPLAT_SIMD_WIDTH;
    keys[r] = i < count ? keys_in[i] : 0u;
  }
}

// counts[w * SPLAT_RADIX + d] = keys of digit d in SIMD group w's segment;
// peers[r]: the lanes whose round-r key has this lane's digit (0 for a key
// past the count).
SPLAT_FUNC void radix_count_segments(SimtThread t, SPLAT_CONST_MEM const ScanParams& p, uint32_t count,
                                     SPLAT_THREAD const uint32_t* keys, SPLAT_TG_MEM uint32_t* counts,
                                     SPLAT_THREAD uint32_t* peers) {
  for (uint32_t i = t.tid; i < SPLAT_GROUP_WARPS * SPLAT_RADIX; i += SPLAT_GROUP_SIZE) counts[i] = 0u;
  sp_group_barrier();
  const uint32_t first = radix_first_key(t);
  SPLAT_TG_MEM uint32_t* mine = counts + t.warp * SPLAT_RADIX;
  SPLAT_UNROLL for (uint32_t r = 0; r < SPLAT_SORT_ROUNDS; ++r) {
    bool valid = first + r * SPLAT_SIMD_WIDTH < count;
    uint32_t digit = valid ? radix_digit(keys[r], p.shift) : 0u;
    peers[r] = simd_match_digit(digit, valid);
    if (valid && t.lane == sp_ctz(peers[r])) mine[digit] += sp_popcount(peers[r]);
    sp_simd_barrier();
  }
  sp_group_barrier();
}

SPLAT_FUNC void radix_histogram_body(SimtThread t, SPLAT_CONST_MEM const ScanParams& p,
                                     SPLAT_DEVICE_MEM const uint32_t* keys_in,
                                     SPLAT_DEVICE_MEM const uint32_t* count_limit, SPLAT_DEVICE_MEM uint32_t* hist,
                                     SPLAT_TG_MEM uint32_t* counts) {
  const uint32_t count = limited_count(p.count, count_limit);
  uint32_t keys[SPLAT_SORT_ROUNDS], peers[SPLAT_SORT_ROUNDS];
  radix_load_keys(t, count, keys_in, keys);
  radix_count_segments(t, p, count, keys, counts, peers);
  uint32_t d = t.tid;
  uint32_t s = 0u;
  for (uint32_t w = 0; w < SPLAT_GROUP_WARPS; ++w) s += counts[w * SPLAT_RADIX + d];
  hist[d * p.num_blocks + t.group] = s;
}

// hist: rows scanned by scan_rows; digit_totals: the rows' totals.
SPLAT_FUNC void radix_scatter_body(SimtThread t, SPLAT_CONST_MEM const ScanParams& p,
                                   SPLAT_DEVICE_MEM const uint32_t* keys_in, SPLAT_DEVICE_MEM const uint32_t* vals_in,
                                   SPLAT_DEVICE_MEM const uint32_t* count_limit,
                                   SPLAT_DEVICE_MEM uint32_t* keys_out, SPLAT_DEVICE_MEM uint32_t* vals_out,
                                   SPLAT_DEVICE_MEM const uint32_t* hist, SPLAT_DEVICE_MEM const uint32_t* digit_totals,
                                   SPLAT_TG_MEM uint32_t* counts, SPLAT_TG_MEM uint32_t* warp_tot,
                                   SPLAT_TG_MEM uint32_t* staged) {  // SPLAT_SORT_STAGE_WORDS
  const uint32_t count = limited_count(p.count, count_limit);
  uint32_t keys[SPLAT_SORT_ROUNDS], peers[SPLAT_SORT_ROUNDS];
  uint32_t vals[SPLAT_SORT_ROUNDS];
  radix_load_keys(t, count, keys_in, keys);
  const uint32_t first = radix_first_key(t);
  SPLAT_UNROLL for (uint32_t r = 0; r < SPLAT_SORT_ROUNDS; ++r) {
    uint32_t i = first + r * SPLAT_SIMD_WIDTH;
    vals[r] = i < count ? vals_in[i] : 0u;
  }
  radix_count_segments(t, p, count, keys, counts, peers);
  // Turn the per-segment counts of digit d into each segment's first output slot
  // (staged: its first slot in the block, and the digit's offset to the output).
  uint32_t d = t.tid;
  uint32_t all;
  uint32_t run = block_exclusive_scan(t, digit_totals[d], warp_tot, all) + hist[d * p.num_blocks + t.group];
  // staged: keys at [0, block), values at [block, 2 block), digit d's offset to the output
  // at 2 block + d.
  const uint32_t block = SPLAT_SORT_BLOCK;
  uint32_t block_keys = 0u;  // staged: the block's keys (those below the count)
  if (SPLAT_SORT_STAGED) {
    uint32_t digit_keys = 0u;  // the block's keys of digit d
    for (uint32_t w = 0; w < SPLAT_GROUP_WARPS; ++w) digit_keys += counts[w * SPLAT_RADIX + d];
    const uint32_t local = block_exclusive_scan(t, digit_keys, warp_tot, block_keys);
    staged[2u * block + d] = run - local;
    run = local;
  }
  for (uint32_t w = 0; w < SPLAT_GROUP_WARPS; ++w) {
    uint32_t c = counts[w * SPLAT_RADIX + d];
    counts[w * SPLAT_RADIX + d] = run;
    run += c;
  }
  sp_group_barrier();
  SPLAT_TG_MEM uint32_t* next = counts + t.warp * SPLAT_RADIX;
  uint32_t below = (1u << t.lane) - 1u;
  SPLAT_UNROLL for (uint32_t r = 0; r < SPLAT_SORT_ROUNDS; ++r) {
    bool valid = first + r * SPLAT_SIMD_WIDTH < count;
    uint32_t digit = valid ? radix_digit(keys[r], p.shift) : 0u;
    uint32_t slot = valid ? next[digit] : 0u;
    sp_simd_barrier();  // every lane has read its slot before the leader moves it
    if (valid) {
      uint32_t dst = slot + sp_popcount(peers[r] & below);
      if (SPLAT_SORT_STAGED) {
        staged[dst] = keys[r];
        staged[block + dst] = vals[r];
      } else {
        keys_out[dst] = keys[r];
        vals_out[dst] = vals[r];
      }
      if (t.lane == sp_ctz(peers[r])) next[digit] = slot + sp_popcount(peers[r]);
    }
    sp_simd_barrier();
  }
  if (SPLAT_SORT_STAGED) {
    sp_group_barrier();
    for (uint32_t i = t.tid; i < block_keys; i += SPLAT_GROUP_SIZE) {
      const uint32_t key = staged[i];
      const uint32_t dst = i + staged[2u * block + radix_digit(key, p.shift)];
      keys_out[dst] = key;
      vals_out[dst] = staged[block + i];
    }
  }
}
