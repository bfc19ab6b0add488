// Binning of visible Gaussians into 16x16 tiles: (tile, depth) pairs emitted
// at per-Gaussian prefix-sum offsets (deterministic order), and each tile's
// range in the sorted pair list.
#pragma once
#include "simt_util.h"

// Key (tile << 32) | depth bits: depth >= near > 0, so its bits sort as the
// float. Pairs of Gaussian i go to offsets[i] .. in row-major tile order.
SPLAT_FUNC void emit_pairs_body(SimtThread t, SPLAT_CONST_MEM const CameraParams& cam,
                                SPLAT_CONST_MEM const RasterParams& rp, SPLAT_DEVICE_MEM const SplatRecord* records,
                                SPLAT_DEVICE_MEM const int32_t* radius, SPLAT_DEVICE_MEM const int32_t* rects,
                                SPLAT_DEVICE_MEM const uint32_t* offsets, SPLAT_DEVICE_MEM uint64_t* keys,
                                SPLAT_DEVICE_MEM uint32_t* values) {
  uint32_t i = global_index(t);
  if (i >= rp.num_gaussians || radius[i] == 0) return;
  uint64_t depth_bits = (uint64_t)sp_float_bits(records[i].depth);
  uint32_t out = offsets[i];
  int32_t x0 = rects[4 * i], y0 = rects[4 * i + 1], x1 = rects[4 * i + 2], y1 = rects[4 * i + 3];
  for (int32_t ty = y0; ty < y1; ++ty) {
    for (int32_t tx = x0; tx < x1; ++tx) {
      uint64_t tile = (uint64_t)((uint32_t)ty * cam.tiles_x + (uint32_t)tx);
      keys[out] = (tile << 32) | depth_bits;
      values[out] = i;
      ++out;
    }
  }
}

// ranges[2 tile] .. ranges[2 tile + 1]: the tile's pairs in sorted order
// (the buffer is zeroed first, so empty tiles read [0, 0)).
SPLAT_FUNC void tile_ranges_body(SimtThread t, SPLAT_CONST_MEM const ScanParams& p, SPLAT_DEVICE_MEM const uint64_t* keys,
                                 SPLAT_DEVICE_MEM uint32_t* ranges) {
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
