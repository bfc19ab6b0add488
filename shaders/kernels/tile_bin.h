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

// Thread r emits the pairs of the Gaussian of depth rank r, i = order[r], at
// offsets[r] .. offsets[r + 1] (the scan of counts_by_rank): key = tile, the
// covered tiles (tile_cover.h) in row-major order, and records them per
// Gaussian in pair_ranges[2 i ..] = (first slot, count) for the deterministic
// backward. Should rounding ever make this walk disagree with the count taken
// in projection, the slots stay in range: surplus tiles are dropped and
// missing ones filled with sentinel keys of tile num_tiles, which sort last
// and fall outside every tile's range.
SPLAT_FUNC void emit_pairs_body(SimtThread t, SPLAT_CONST_MEM const CameraParams& cam,
                                SPLAT_CONST_MEM const RasterParams& rp, SPLAT_DEVICE_MEM const SplatRecord* records,
                                SPLAT_DEVICE_MEM const int32_t* radius, SPLAT_DEVICE_MEM const int32_t* rects,
                                SPLAT_DEVICE_MEM const uint32_t* order, SPLAT_DEVICE_MEM const uint32_t* offsets,
                                SPLAT_DEVICE_MEM uint64_t* keys, SPLAT_DEVICE_MEM uint32_t* values,
                                SPLAT_DEVICE_MEM uint32_t* pair_ranges) {
  uint32_t r = global_index(t);
  if (r >= rp.num_gaussians) return;
  uint32_t i = order[r];
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
// num_tiles + 1 ranges: the last one catches sentinel keys.
SPLAT_FUNC void tile_ranges_body(SimtThread t, SPLAT_CONST_MEM const ScanParams& p,
                                 SPLAT_DEVICE_MEM const uint64_t* keys, SPLAT_DEVICE_MEM uint32_t* ranges) {
  uint32_t i = global_index(t);
  if (i >= p.count) return;
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
  if (i == p.count - 1) ranges[2 * tile + 1] = p.count;
}

// chunk_tiles[slot] = tile for every chunk slot of every tile (chunk_slot()
// in params.h), one thread per tile.
SPLAT_FUNC void tile_chunks_body(SimtThread t, SPLAT_CONST_MEM const RasterParams& rp,
                                 SPLAT_DEVICE_MEM const uint32_t* ranges, SPLAT_DEVICE_MEM uint32_t* chunk_tiles) {
  uint32_t tile = global_index(t);
  if (tile >= rp.num_tiles) return;
  uint32_t start = ranges[2 * tile], end = ranges[2 * tile + 1];
  uint32_t chunks = chunk_count(start, end);
  for (uint32_t c = 0; c < chunks; ++c) chunk_tiles[chunk_slot(tile, start, c)] = tile;
}
