// Binning of visible Gaussians into 16x16 tiles: (tile, depth) pairs emitted
// at per-Gaussian prefix-sum offsets (deterministic order), and each tile's
// range in the sorted pair list.
#pragma once
#include "simt_util.h"
#include "tile_cover.h"

// Key (tile << 32) | depth bits: depth >= near > 0, so its bits sort as the
// float. Pairs of Gaussian i go to offsets[i] .. offsets[i + 1], the tiles it
// covers (tile_cover.h) in row-major order. Should rounding ever make this
// walk disagree with the count taken in projection, the slots stay in range:
// surplus tiles are dropped and missing ones filled with sentinel keys of
// tile num_tiles, which sort last and fall outside every tile's range.
SPLAT_FUNC void emit_pairs_body(SimtThread t, SPLAT_CONST_MEM const CameraParams& cam,
                                SPLAT_CONST_MEM const RasterParams& rp, SPLAT_DEVICE_MEM const SplatRecord* records,
                                SPLAT_DEVICE_MEM const int32_t* radius, SPLAT_DEVICE_MEM const int32_t* rects,
                                SPLAT_DEVICE_MEM const uint32_t* offsets, SPLAT_DEVICE_MEM uint64_t* keys,
                                SPLAT_DEVICE_MEM uint32_t* values) {
  uint32_t i = global_index(t);
  if (i >= rp.num_gaussians || radius[i] == 0) return;
  SPLAT_DEVICE_MEM const SplatRecord& r = records[i];
  uint64_t depth_bits = (uint64_t)sp_float_bits(r.depth);
  uint32_t out = offsets[i], stop = offsets[i + 1];
  TileCover tc = record_tile_cover(r, rects[4 * i], rects[4 * i + 1], rects[4 * i + 2], rects[4 * i + 3]);
  for (int32_t ty = tc.y0; ty < tc.y1 && out < stop; ++ty) {
    int tx0, tx1;
    tile_cover_row(tc, ty, tx0, tx1);
    for (int32_t tx = tx0; tx < tx1 && out < stop; ++tx) {
      uint64_t tile = (uint64_t)((uint32_t)ty * cam.tiles_x + (uint32_t)tx);
      keys[out] = (tile << 32) | depth_bits;
      values[out] = i;
      ++out;
    }
  }
  for (; out < stop; ++out) {
    keys[out] = ((uint64_t)rp.num_tiles << 32) | depth_bits;
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
  uint32_t tile = (uint32_t)(keys[i] >> 32);
  if (i == 0) {
    ranges[2 * tile] = 0u;
  } else {
    uint32_t prev = (uint32_t)(keys[i - 1] >> 32);
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
