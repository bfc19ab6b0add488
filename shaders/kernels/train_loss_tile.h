// What the loss's tile bodies share (train_loss.h): the tile and its halo,
// the threadgroup arrays' sizes, a thread's pixel, the mask test and a
// fixed-order threadgroup sum.
#pragma once
#include "ssim.h"
#include "simt_util.h"

#if defined(SPLAT_TARGET_METAL)
typedef uchar splat_byte;
#else
typedef unsigned char splat_byte;
#endif

#define SPLAT_LOSS_SPAN (SPLAT_TILE_SIZE + 2 * SSIM_RADIUS)  // 26: tile + halo
#define SPLAT_LOSS_HALO (SPLAT_LOSS_SPAN * SPLAT_LOSS_SPAN)  // 676 pixels
#define SPLAT_LOSS_ROWS (SPLAT_LOSS_SPAN * SPLAT_TILE_SIZE)  // 416: horizontal pass outputs
// Threadgroup floats the entry points declare: the forward's halo of the
// render and target (three channels each), the backward's of the nine partial
// planes (three a channel), and the horizontal pass's outputs. At most
// 29.4 KB, within Metal's 32 KB.
#define SPLAT_LOSS_FWD_IN (2 * 3 * SPLAT_LOSS_HALO)
#define SPLAT_LOSS_FWD_H (5 * SPLAT_LOSS_ROWS)
#define SPLAT_LOSS_BWD_IN (3 * 3 * SPLAT_LOSS_HALO)
#define SPLAT_LOSS_BWD_H (3 * SPLAT_LOSS_ROWS)
#define SPLAT_LOSS_RED (2 * SPLAT_GROUP_WARPS)

SPLAT_STATIC_ASSERT(SPLAT_GROUP_SIZE == SPLAT_TILE_SIZE * SPLAT_TILE_SIZE, "one thread per pixel of a tile");

// Sum over the threadgroup of one value per thread, in a fixed order
// (simd_sum, then the SIMD groups in index order). Every thread gets it.
SPLAT_FUNC float loss_block_sum(SimtThread t, float v, SPLAT_TG_MEM float* red) {
  float w = simd_sum(v);
  if (t.lane == 0) red[t.warp] = w;
  sp_group_barrier();
  float s = 0.f;
  for (uint32_t k = 0; k < SPLAT_GROUP_WARPS; ++k) s += red[k];
  sp_group_barrier();
  return s;
}

// A LossParams held by the thread, from one in constant memory, field by
// field (a struct is not copied across address spaces on Metal).
SPLAT_FUNC LossParams loss_params_of(SPLAT_CONST_MEM const LossParams& s) {
  LossParams p;
  p.width = s.width;
  p.height = s.height;
  p.tiles_x = s.tiles_x;
  p.num_tiles = s.num_tiles;
  p.d_l1 = s.d_l1;
  p.d_map = s.d_map;
  p.ssim_weight = s.ssim_weight;
  p.inv_count = s.inv_count;
  p.has_mask = s.has_mask;
  p.view_k = s.view_k;
  p.views = s.views;
  p.pad0 = s.pad0;
  return p;
}

// Whether pixel `i` (row-major) counts in the loss.
SPLAT_FUNC bool loss_counts(SPLAT_THREAD const LossParams& p, SPLAT_DEVICE_MEM const splat_byte* mask, uint32_t i) {
  return p.has_mask == 0u || mask[i] != 0;
}

// The tile a loss threadgroup covers and the pixel of this thread.
struct LossTile {
  uint32_t tile, plane, pix;  // pix: row-major index (0 outside the image)
  int ox, oy, W, H;           // tile origin, image size
  bool inside;
};

SPLAT_FUNC LossTile loss_tile(SimtThread t, SPLAT_THREAD const LossParams& p, uint32_t tile) {
  LossTile g;
  g.tile = tile;
  g.ox = (int)((g.tile % p.tiles_x) * SPLAT_TILE_SIZE);
  g.oy = (int)((g.tile / p.tiles_x) * SPLAT_TILE_SIZE);
  g.W = (int)p.width;
  g.H = (int)p.height;
  g.plane = p.width * p.height;
  const int px = g.ox + (int)(t.tid % SPLAT_TILE_SIZE), py = g.oy + (int)(t.tid / SPLAT_TILE_SIZE);
  g.inside = px < g.W && py < g.H;
  g.pix = g.inside ? (uint32_t)(py * g.W + px) : 0u;
  return g;
}

// A thread's pixel: inside the image and counted (not masked).
SPLAT_FUNC bool loss_pixel_counts(SPLAT_THREAD const LossParams& p, SPLAT_DEVICE_MEM const splat_byte* mask,
                                  LossTile g) {
  return g.inside && loss_counts(p, mask, g.pix);
}
