// Binning into tile buckets (BackendConfig.pair_sort = "buckets"; tile_bin.h
// is the radix path). Three dispatches and a scan over the tiles instead of a
// depth sort over the Gaussians and a tile sort over the pairs:
//   bucket_count  a thread a record: +1 on each covered tile's count (atomics)
//   (scan.h)      the counts' exclusive scan: each tile's first slot, the total
//   bucket_emit   a thread a record: each pair, (depth bits << 32 | record) in
//                 one 64-bit word, at a slot of its tile taken with an atomic
//                 decrement of the count (any order within the tile)
//   bucket_sort   a threadgroup a tile: its words sorted, the records written out
// (depth bits, record) is a total order and the radix path's (a stable depth
// sort, then a stable tile sort) is the same one, so every tile's list is the
// radix path's to the bit. A record walks the tiles of its CoverRecord in
// row-major order, at most its pair count of them (the count projection took:
// emission's rule in tile_bin.h, so the two paths drop the same tiles should
// rounding ever make them disagree); the radix path's sentinel pairs have no
// bucket here. A record of more than SPLAT_EMIT_PIECE pairs is walked by its
// whole SIMD group, a lane a column, so that a splat covering the frame does
// not hold one thread for thousands of tiles.
#pragma once
#include "cover_record.h"
#include "simt_util.h"
#include "tile_cover.h"

// Pairs a threadgroup sorts in threadgroup memory at once (8 bytes each).
// A longer list is sorted in runs of this many and the runs merged through
// device memory (bucket_sort_body).
#ifndef SPLAT_BUCKET_CAP
#if defined(SPLAT_TARGET_METAL)
#define SPLAT_BUCKET_CAP 2048u  // 16 KB of Metal's 32 KB of threadgroup memory
#else
#define SPLAT_BUCKET_CAP 4096u  // 32 KB
#endif
#endif
SPLAT_STATIC_ASSERT((SPLAT_BUCKET_CAP & (SPLAT_BUCKET_CAP - 1u)) == 0u && SPLAT_BUCKET_CAP >= 16u,
                    "the bucket sort's bitonic network wants a power of two");

// One visit of a (record, tile) pair: count it, or place it.
// The word sorts as (depth bits, record): the radix path's order.
SPLAT_FUNC void bucket_visit(bool place, uint32_t tile, uint64_t word, SPLAT_DEVICE_MEM uint32_t* tile_counts,
                             SPLAT_DEVICE_MEM const uint32_t* tile_offsets, SPLAT_DEVICE_MEM uint64_t* words) {
  if (!place) {
    sp_atomic_add_u32(&tile_counts[tile], 1u);
    return;
  }
  // Counting down: the count ends at 0 (the host zeroes it every forward).
  words[tile_offsets[tile] + sp_atomic_fetch_add_u32(&tile_counts[tile], 0xffffffffu) - 1u] = word;
}

// Both passes: a thread a record r; its SIMD group walks its large records
// together first. place = false counts, true places (bucket_visit).
SPLAT_FUNC void bucket_walk_body(SimtThread t, bool place, SPLAT_CONST_MEM const CameraParams& cam,
                                 SPLAT_CONST_MEM const RasterParams& rp, SPLAT_DEVICE_MEM const CoverRecord* covers,
                                 SPLAT_DEVICE_MEM const uint32_t* pair_count, SPLAT_DEVICE_MEM const uint32_t* depth_keys,
                                 SPLAT_DEVICE_MEM uint32_t* tile_counts, SPLAT_DEVICE_MEM const uint32_t* tile_offsets,
                                 SPLAT_DEVICE_MEM uint64_t* words) {
  const uint32_t r = global_index(t);
  const bool valid = r < rp.num_gaussians;
  const uint32_t count = valid ? pair_count[r] : 0u;
  const uint32_t key = valid && place && count > 0u ? depth_keys[r] : 0u;
  const uint64_t word = ((uint64_t)key << 32) | (uint64_t)r;
  // The large records, one at a time, every lane on its columns of each row.
  uint32_t large = sp_simd_ballot(count > SPLAT_EMIT_PIECE);
  while (large != 0u) {
    const uint32_t src = sp_ctz(large);
    large &= large - 1u;
    const uint32_t lr = simd_shuffle(r, src), lcount = simd_shuffle(count, src), lkey = simd_shuffle(key, src);
    const uint64_t lword = ((uint64_t)lkey << 32) | (uint64_t)lr;
    const TileCover tc = load_tile_cover(covers, lr);
    const TileRows rows = tile_rows(tc);
    const uint32_t base = view_tile_base(cam, rp, lr);
    uint32_t walked = 0u;  // pairs in the rows before this one
    for (int32_t ty = tc.y0; ty < tc.y1 && walked < lcount; ++ty) {
      int tx0, tx1;
      tile_cover_row(rows, ty, tx0, tx1);
      for (int32_t tx = tx0 + (int32_t)t.lane; tx < tx1 && walked + (uint32_t)(tx - tx0) < lcount;
           tx += SPLAT_SIMD_WIDTH)
        bucket_visit(place, base + (uint32_t)ty * cam.tiles_x + (uint32_t)tx, lword, tile_counts, tile_offsets,
                     words);
      walked += (uint32_t)(tx1 - tx0);
    }
  }
  if (count == 0u || count > SPLAT_EMIT_PIECE) return;
  const TileCover tc = load_tile_cover(covers, r);
  const TileRows rows = tile_rows(tc);
  const uint32_t base = view_tile_base(cam, rp, r);
  uint32_t left = count;
  for (int32_t ty = tc.y0; ty < tc.y1 && left > 0u; ++ty) {
    int tx0, tx1;
    tile_cover_row(rows, ty, tx0, tx1);
    for (int32_t tx = tx0; tx < tx1 && left > 0u; ++tx, --left)
      bucket_visit(place, base + (uint32_t)ty * cam.tiles_x + (uint32_t)tx, word, tile_counts, tile_offsets, words);
  }
}

SPLAT_FUNC void bucket_count_body(SimtThread t, SPLAT_CONST_MEM const CameraParams& cam,
                                  SPLAT_CONST_MEM const RasterParams& rp, SPLAT_DEVICE_MEM const CoverRecord* covers,
                                  SPLAT_DEVICE_MEM const uint32_t* pair_count, SPLAT_DEVICE_MEM uint32_t* tile_counts) {
  // Nothing placed: no keys, offsets or words.
  bucket_walk_body(t, false, cam, rp, covers, pair_count, pair_count, tile_counts, pair_count,
                   (SPLAT_DEVICE_MEM uint64_t*)tile_counts);
}

// status: the forward's PairStatus (pair_total over the tile counts' scan).
// Past the capacity nothing is placed and every radius becomes -1, as
// emission does (tile_bin.h).
SPLAT_FUNC void bucket_emit_body(SimtThread t, SPLAT_CONST_MEM const CameraParams& cam,
                                 SPLAT_CONST_MEM const RasterParams& rp, SPLAT_DEVICE_MEM const CoverRecord* covers,
                                 SPLAT_DEVICE_MEM int32_t* radius, SPLAT_DEVICE_MEM const uint32_t* pair_count,
                                 SPLAT_DEVICE_MEM const uint32_t* depth_keys, SPLAT_DEVICE_MEM const PairStatus* status,
                                 SPLAT_DEVICE_MEM uint32_t* tile_counts, SPLAT_DEVICE_MEM const uint32_t* tile_offsets,
                                 SPLAT_DEVICE_MEM uint64_t* words) {
  if (status[0].overflow != 0u) {
    const uint32_t r = global_index(t);
    if (r < rp.num_gaussians) radius[r] = -1;
    return;
  }
  bucket_walk_body(t, true, cam, rp, covers, pair_count, depth_keys, tile_counts, tile_offsets, words);
}

// Sorts w[0, m) ascending in threadgroup memory (m a power of two, at most
// SPLAT_BUCKET_CAP): a bitonic network, a barrier a stage.
SPLAT_FUNC void bucket_bitonic(SimtThread t, uint32_t m, SPLAT_TG_MEM uint64_t* w) {
  for (uint32_t size = 2u; size <= m; size <<= 1u) {
    for (uint32_t stride = size >> 1u; stride > 0u; stride >>= 1u) {
      for (uint32_t q = t.tid; q < m / 2u; q += SPLAT_GROUP_SIZE) {
        const uint32_t a = 2u * q - (q & (stride - 1u)), b = a + stride;
        const uint64_t wa = w[a], wb = w[b];
        if (((a & size) == 0u) == (wb < wa)) {  // ascending blocks where bit `size` of a is clear
          w[a] = wb;
          w[b] = wa;
        }
      }
      sp_group_barrier();
    }
  }
}

// Sorts the words [first, first + len) (len <= SPLAT_BUCKET_CAP) through w:
// back into words, or their records (low halves) into records when given.
SPLAT_FUNC void bucket_sort_run(SimtThread t, uint32_t first, uint32_t len, SPLAT_DEVICE_MEM uint64_t* words,
                                bool records_out, SPLAT_DEVICE_MEM uint32_t* records, SPLAT_TG_MEM uint64_t* w) {
  uint32_t m = 2u;
  while (m < len) m <<= 1u;
  for (uint32_t j = t.tid; j < m; j += SPLAT_GROUP_SIZE) w[j] = j < len ? words[first + j] : ~(uint64_t)0;  // last
  sp_group_barrier();
  bucket_bitonic(t, m, w);
  for (uint32_t j = t.tid; j < len; j += SPLAT_GROUP_SIZE) {
    if (records_out) records[first + j] = (uint32_t)w[j];
    else words[first + j] = w[j];
  }
  sp_group_barrier_device();  // w is free again, and a merge may read what was stored
}

// Threadgroup g sorts tile g's words (tile_offsets[g] .. tile_offsets[g + 1]
// of words_a) and writes their records to `sorted` and the tile's range; the
// last group (g = num_tiles) writes the sentinel range empty, [0, 0), as the
// radix path leaves it when no pair needed a sentinel. A list longer than
// SPLAT_BUCKET_CAP is sorted in runs, then merged a level at a time through
// device memory (words_a, words_b in turn): each word goes to its own index
// in its run plus the number of the other run's words below it (a binary
// search; no two words are equal).
SPLAT_FUNC void bucket_sort_body(SimtThread t, SPLAT_CONST_MEM const RasterParams& rp,
                                 SPLAT_DEVICE_MEM const uint32_t* tile_offsets,
                                 SPLAT_DEVICE_MEM const PairStatus* status, SPLAT_DEVICE_MEM uint64_t* words_a,
                                 SPLAT_DEVICE_MEM uint64_t* words_b, SPLAT_DEVICE_MEM uint32_t* sorted,
                                 SPLAT_DEVICE_MEM uint32_t* ranges, SPLAT_TG_MEM uint64_t* w) {
  const uint32_t tile = t.group;
  const bool overflow = status[0].overflow != 0u;
  if (tile == rp.num_tiles) {
    if (t.tid == 0u) {
      ranges[2u * tile] = 0u;
      ranges[2u * tile + 1u] = 0u;
    }
    return;
  }
  const uint32_t first = overflow ? 0u : tile_offsets[tile], len = overflow ? 0u : tile_offsets[tile + 1u] - first;
  if (t.tid == 0u) {
    ranges[2u * tile] = first;
    ranges[2u * tile + 1u] = first + len;
  }
  if (len == 0u) return;
  if (len <= SPLAT_BUCKET_CAP) {
    bucket_sort_run(t, first, len, words_a, true, sorted, w);
    return;
  }
  for (uint32_t run = 0u; run < len; run += SPLAT_BUCKET_CAP)
    bucket_sort_run(t, first + run, len - run < SPLAT_BUCKET_CAP ? len - run : SPLAT_BUCKET_CAP, words_a, false,
                    sorted, w);
  bool in_a = true;
  for (uint32_t width = SPLAT_BUCKET_CAP; width < len; width <<= 1u) {
    SPLAT_DEVICE_MEM const uint64_t* src = (in_a ? words_a : words_b) + first;
    SPLAT_DEVICE_MEM uint64_t* dst = (in_a ? words_b : words_a) + first;
    const bool last = width * 2u >= len;
    for (uint32_t e = t.tid; e < len; e += SPLAT_GROUP_SIZE) {
      const uint32_t own = e / width * width, other = own ^ width;  // the run's first index, its partner's
      const uint32_t pair_first = own < other ? own : other;
      uint32_t lo = 0u, hi = other < len ? (len - other < width ? len - other : width) : 0u;
      const uint64_t x = src[e];
      while (lo < hi) {  // the partner's words below x
        const uint32_t mid = (lo + hi) >> 1u;
        if (src[other + mid] < x) lo = mid + 1u;
        else hi = mid;
      }
      const uint32_t to = pair_first + (e - own) + lo;
      if (last) sorted[first + to] = (uint32_t)x;
      else dst[to] = x;
    }
    sp_group_barrier_device();
    in_a = !in_a;
  }
}
