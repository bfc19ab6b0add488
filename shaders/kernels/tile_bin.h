// Binning of visible Gaussians into 16x16 tiles. The Gaussians are sorted by
// depth first (radix_sort.h over n 32-bit keys, stable: ties keep index
// order); pairs are then emitted in that order at prefix-sum offsets over the
// depth ranks, keyed by tile alone, and a stable sort by tile (a few bits)
// leaves each tile's list in depth order: the order a stable sort of
// (tile << 32 | depth bits) over pairs in Gaussian order gives, with 4 + 2
// radix passes over n Gaussians and the pairs instead of 6 over the pairs.
// Then each tile's range in the sorted pair list.
#pragma once
#include "simt_util.h"
#include "tile_cover.h"

// counts_by_rank[r] = pair_count[order[r]]: the pair counts in depth order.
SPLAT_FUNC void gather_pair_counts_body(SimtThread t, SPLAT_CONST_MEM const ScanParams& p,
                                        SPLAT_DEVICE_MEM const uint32_t* order,
                                        SPLAT_DEVICE_MEM const uint32_t* pair_count,
                                        SPLAT_DEVICE_MEM uint32_t* counts_by_rank) {
  uint32_t r = global_index(t);
  if (r >= p.count) return;
  counts_by_rank[r] = pair_count[order[r]];
}

// One threadgroup: the exact 64-bit total of the pair counts from their
// scanned block sums (scan.h: block_offsets[0 .. num_blocks], each
// difference a block's sum, 2^32 - 1 when it saturated), checked against the
// capacity of the pair buffers. A total that does not fit sets the sticky
// overflow (and its step); from then on every forward emits nothing until the
// host has grown the buffers, cleared the record and run the steps again.
SPLAT_FUNC void pair_total_body(SimtThread t, SPLAT_CONST_MEM const PairParams& p,
                                SPLAT_DEVICE_MEM const uint32_t* block_offsets, SPLAT_DEVICE_MEM PairStatus* status,
                                SPLAT_TG_MEM uint64_t* partial, SPLAT_TG_MEM uint32_t* wrapped) {
  uint64_t sum = 0u;
  uint32_t sat = 0u;
  for (uint32_t b = t.tid; b < p.num_blocks; b += SPLAT_GROUP_SIZE) {
    const uint32_t d = block_offsets[b + 1u] - block_offsets[b];
    sum += (uint64_t)d;
    sat |= d == 0xffffffffu ? 1u : 0u;
  }
  partial[t.tid] = sum;
  wrapped[t.tid] = sat;
  sp_group_barrier();
  for (uint32_t half = SPLAT_GROUP_SIZE / 2u; half > 0u; half >>= 1u) {
    if (t.tid < half) {
      partial[t.tid] += partial[t.tid + half];
      wrapped[t.tid] |= wrapped[t.tid + half];
    }
    sp_group_barrier();
  }
  if (t.tid != 0u) return;
  const uint64_t total = partial[0];
  const bool saturated = wrapped[0] != 0u;
  const bool fits = !saturated && total <= (uint64_t)p.capacity;
  // Field by field: Metal copies no struct across address spaces.
  SPLAT_DEVICE_MEM PairStatus* s = status;
  if (!fits && s->overflow == 0u) {
    s->overflow = 1u;
    s->first_step = p.step;
  }
  if (saturated) s->saturated = 1u;
  s->live = s->overflow == 0u ? (uint32_t)total : 0u;
  const uint64_t seen = ((uint64_t)s->max_hi << 32) | (uint64_t)s->max_lo;
  if (total > seen) {
    s->max_lo = (uint32_t)total;
    s->max_hi = (uint32_t)(total >> 32);
  }
}

// Thread r emits the pairs of the Gaussian of depth rank r, i = order[r], at
// offsets[r] .. offsets[r + 1] (the scan of counts_by_rank): key = tile, the
// covered tiles (tile_cover.h) in row-major order, and records them per
// Gaussian in pair_ranges[2 i ..] = (first slot, count) for the deterministic
// backward. Should rounding ever make this walk disagree with the count taken
// in projection, the slots stay in range: surplus tiles are dropped and
// missing ones filled with sentinel keys of tile num_tiles, which sort last
// and fall outside every tile's range. status: the forward's PairStatus
// (pair_total, or the host's exact count).
SPLAT_FUNC void emit_pairs_body(SimtThread t, SPLAT_CONST_MEM const CameraParams& cam,
                                SPLAT_CONST_MEM const RasterParams& rp, SPLAT_DEVICE_MEM const SplatRecord* records,
                                SPLAT_DEVICE_MEM int32_t* radius, SPLAT_DEVICE_MEM const int32_t* rects,
                                SPLAT_DEVICE_MEM const uint32_t* order, SPLAT_DEVICE_MEM const uint32_t* offsets,
                                SPLAT_DEVICE_MEM const PairStatus* status, SPLAT_DEVICE_MEM uint64_t* keys,
                                SPLAT_DEVICE_MEM uint32_t* values, SPLAT_DEVICE_MEM uint32_t* pair_ranges) {
  uint32_t r = global_index(t);
  if (r >= rp.num_gaussians) return;
  uint32_t i = order[r];
  if (status[0].overflow != 0u) {
    // The pairs do not fit: none is written, and every radius becomes -1,
    // which the step's state-changing kernels read as "skip this step".
    pair_ranges[2 * i] = 0u;
    pair_ranges[2 * i + 1] = 0u;
    radius[i] = -1;
    return;
  }
  uint32_t out = offsets[r], stop = offsets[r + 1];
  pair_ranges[2 * i] = out;
  pair_ranges[2 * i + 1] = stop - out;
  if (radius[i] == 0) return;
  TileCover tc = record_tile_cover(records[i], rects[4 * i], rects[4 * i + 1], rects[4 * i + 2], rects[4 * i + 3]);
  for (int32_t ty = tc.y0; ty < tc.y1 && out < stop; ++ty) {
    int tx0, tx1;
    tile_cover_row(tc, ty, tx0, tx1);
    for (int32_t tx = tx0; tx < tx1 && out < stop; ++tx) {
      keys[out] = (uint64_t)((uint32_t)ty * cam.tiles_x + (uint32_t)tx);
      values[out] = i;
      ++out;
    }
  }
  for (; out < stop; ++out) {
    keys[out] = (uint64_t)rp.num_tiles;
    values[out] = i;
  }
}

// ranges[2 tile] .. ranges[2 tile + 1]: the tile's pairs in sorted order
// (the buffer is zeroed first, so empty tiles read [0, 0)). It holds
// num_tiles + 1 ranges: the last one catches sentinel keys. The pairs are the
// first min(p.count, count_limit[0]) keys (count_limit: PairStatus::live).
SPLAT_FUNC void tile_ranges_body(SimtThread t, SPLAT_CONST_MEM const ScanParams& p,
                                 SPLAT_DEVICE_MEM const uint64_t* keys, SPLAT_DEVICE_MEM const uint32_t* count_limit,
                                 SPLAT_DEVICE_MEM uint32_t* ranges) {
  uint32_t i = global_index(t);
  const uint32_t count = limited_count(p.count, count_limit);
  if (i >= count) return;
  uint32_t tile = (uint32_t)keys[i];
  if (i == 0) {
    ranges[2 * tile] = 0u;
  } else {
    uint32_t prev = (uint32_t)keys[i - 1];
    if (prev != tile) {
      ranges[2 * prev + 1] = i;
      ranges[2 * tile] = i;
    }
  }
  if (i == count - 1) ranges[2 * tile + 1] = count;
}

// chunk_tiles[slot] = tile for every chunk slot of every tile (chunk_slot()
// in params.h), one thread per tile; no chunk saturates the tile yet.
SPLAT_FUNC void tile_chunks_body(SimtThread t, SPLAT_CONST_MEM const RasterParams& rp,
                                 SPLAT_DEVICE_MEM const uint32_t* ranges, SPLAT_DEVICE_MEM uint32_t* chunk_tiles,
                                 SPLAT_DEVICE_MEM uint32_t* tile_saturated) {
  uint32_t tile = global_index(t);
  if (tile >= rp.num_tiles) return;
  tile_saturated[tile] = SPLAT_NOT_SATURATED;
  uint32_t start = ranges[2 * tile], end = ranges[2 * tile + 1];
  uint32_t chunks = chunk_count(start, end);
  for (uint32_t c = 0; c < chunks; ++c) chunk_tiles[chunk_slot(tile, start, c)] = tile;
}
