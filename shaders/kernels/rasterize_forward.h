// Forward rasterization: one threadgroup of 256 threads per 16x16 tile, one
// thread per pixel. The tile's depth-sorted splats are loaded cooperatively
// into threadgroup memory in batches of 256 and blended front to back with
// the exact per-pixel blend of shaders/common/blend.h; each batch boundary
// leaves a checkpoint of the pixel state for the chunked backward.
#pragma once
#include "blend.h"
#include "simt_util.h"
#include "tile_cover.h"

SPLAT_STATIC_ASSERT(SPLAT_GROUP_SIZE == SPLAT_TILE_SIZE * SPLAT_TILE_SIZE, "one thread per pixel of a tile");

// Floats of a splat as the blend sees it: the first 9 of a SplatRecord
// (mean2d, conic, opacity, colour), which is BlendSplat's field order. In
// threadgroup memory each splat of a batch also keeps the pixel rows it can
// reach (tile_cover_y_range): SPLAT_BATCH_FLOATS in all.
#define SPLAT_BLEND_FLOATS 9
#define SPLAT_BATCH_FLOATS 11

SPLAT_FUNC void store_batch_splat(SPLAT_TG_MEM float* dst, SPLAT_DEVICE_MEM const SplatRecord* records, uint32_t g) {
  SPLAT_DEVICE_MEM const float* src = (SPLAT_DEVICE_MEM const float*)(records + g);
  for (int k = 0; k < SPLAT_BLEND_FLOATS; ++k) dst[k] = src[k];
  TileCover tc = tile_cover(make_vec2(src[0], src[1]), make_vec3(src[2], src[3], src[4]), src[5], 0, 0, 0, 0);
  float y_lo, y_hi;
  tile_cover_y_range(tc, y_lo, y_hi);
  dst[SPLAT_BLEND_FLOATS] = y_lo;
  dst[SPLAT_BLEND_FLOATS + 1] = y_hi;
}

// Whether the batch splat at `s` gives zero alpha on every pixel row of this
// SIMD group, centres y in [row_lo, row_hi]: the whole group can skip it.
SPLAT_FUNC bool batch_splat_misses_rows(SPLAT_TG_MEM const float* s, float row_lo, float row_hi) {
  return s[SPLAT_BLEND_FLOATS + 1] < row_lo || s[SPLAT_BLEND_FLOATS] > row_hi;
}

SPLAT_FUNC BlendSplat load_blend_splat(SPLAT_TG_MEM const float* s) {
  BlendSplat b;
  b.mean2d = make_vec2(s[0], s[1]);
  b.conic = make_vec3(s[2], s[3], s[4]);
  b.opacity = s[5];
  b.color = make_vec3(s[6], s[7], s[8]);
  return b;
}

// The pixel of thread `tid` in tile `tile`.
struct TilePixel {
  uint32_t tile_x, tile_y;
  uint32_t x, y;
  bool inside;
  uint32_t index;  // y * width + x when inside
};

SPLAT_FUNC TilePixel tile_pixel(SPLAT_CONST_MEM const CameraParams& cam, uint32_t tile, uint32_t tid) {
  TilePixel p;
  p.tile_x = tile % cam.tiles_x;
  p.tile_y = tile / cam.tiles_x;
  p.x = p.tile_x * SPLAT_TILE_SIZE + tid % SPLAT_TILE_SIZE;
  p.y = p.tile_y * SPLAT_TILE_SIZE + tid / SPLAT_TILE_SIZE;
  p.inside = p.x < cam.width && p.y < cam.height;
  p.index = p.inside ? p.y * cam.width + p.x : 0u;
  return p;
}

// Chunk checkpoints: see chunk_slot() in shaders/common/params.h.

// The pixel-centre rows of SIMD group `warp` of a tile's threadgroup.
SPLAT_FUNC void warp_rows(uint32_t tile_y, uint32_t warp, SPLAT_THREAD float& row_lo, SPLAT_THREAD float& row_hi) {
  const uint32_t first = warp * SPLAT_SIMD_WIDTH / SPLAT_TILE_SIZE;
  const uint32_t last = (warp * SPLAT_SIMD_WIDTH + SPLAT_SIMD_WIDTH - 1u) / SPLAT_TILE_SIZE;
  row_lo = (float)(tile_y * SPLAT_TILE_SIZE + first) + 0.5f;
  row_hi = (float)(tile_y * SPLAT_TILE_SIZE + last) + 0.5f;
}

// s_splats: SPLAT_GROUP_SIZE * SPLAT_BATCH_FLOATS floats; s_flags:
// SPLAT_GROUP_WARPS values.
SPLAT_FUNC void rasterize_forward_body(SimtThread t, SPLAT_CONST_MEM const CameraParams& cam,
                                       SPLAT_CONST_MEM const RasterParams& rp, SPLAT_DEVICE_MEM const uint32_t* ranges,
                                       SPLAT_DEVICE_MEM const uint32_t* sorted_ids,
                                       SPLAT_DEVICE_MEM const SplatRecord* records, SPLAT_DEVICE_MEM float* image,
                                       SPLAT_DEVICE_MEM float* alpha, SPLAT_DEVICE_MEM float* final_T,
                                       SPLAT_DEVICE_MEM uint32_t* n_contrib, SPLAT_DEVICE_MEM float* checkpoints,
                                       SPLAT_DEVICE_MEM uint32_t* chunk_tiles, SPLAT_TG_MEM float* s_splats,
                                       SPLAT_TG_MEM uint32_t* s_flags) {
  TilePixel px = tile_pixel(cam, t.group, t.tid);
  vec2 pix = make_vec2((float)px.x + 0.5f, (float)px.y + 0.5f);
  uint32_t start = ranges[2 * t.group], end = ranges[2 * t.group + 1];
  uint32_t chunks = (end - start + (uint32_t)SPLAT_GROUP_SIZE - 1u) / (uint32_t)SPLAT_GROUP_SIZE;
  for (uint32_t c = t.tid; c < chunks; c += (uint32_t)SPLAT_GROUP_SIZE) chunk_tiles[chunk_slot(t.group, start, c)] = t.group;
  float row_lo, row_hi;
  warp_rows(px.tile_y, t.warp, row_lo, row_hi);
  BlendForwardState st = blend_forward_begin();
  bool done = !px.inside;
  for (uint32_t b = start; b < end; b += SPLAT_GROUP_SIZE) {
    // Stop as soon as every pixel of the tile is saturated.
    bool warp_done = !simd_any(!done);
    if (t.lane == 0) s_flags[t.warp] = warp_done ? 1u : 0u;
    sp_group_barrier();
    bool all_done = true;
    for (uint32_t w = 0; w < SPLAT_GROUP_WARPS; ++w) all_done = all_done && s_flags[w] != 0u;
    if (all_done) break;
    uint32_t count = end - b < (uint32_t)SPLAT_GROUP_SIZE ? end - b : (uint32_t)SPLAT_GROUP_SIZE;
    if (t.tid < count) store_batch_splat(s_splats + SPLAT_BATCH_FLOATS * t.tid, records, sorted_ids[b + t.tid]);
    sp_group_barrier();
    if (!done) {
      for (uint32_t j = 0; j < count; ++j) {
        SPLAT_TG_MEM const float* sj = s_splats + SPLAT_BATCH_FLOATS * j;
        if (batch_splat_misses_rows(sj, row_lo, row_hi)) continue;
        blend_forward_step(load_blend_splat(sj), pix, b - start + j, st);
        if (st.done) break;
      }
      done = st.done;
    }
    // The state after this chunk, for the backward of the chunks before it
    // (a saturated pixel's is never read: its walk ends before this chunk).
    if (!done && b + SPLAT_GROUP_SIZE < end) {
      uint32_t slot = chunk_slot(t.group, start, (b - start) / (uint32_t)SPLAT_GROUP_SIZE);
      SPLAT_DEVICE_MEM float* ck = checkpoints + 4u * (slot * (uint32_t)SPLAT_GROUP_SIZE + t.tid);
      ck[0] = st.T;
      ck[1] = st.color.x;
      ck[2] = st.color.y;
      ck[3] = st.color.z;
    }
    sp_group_barrier();
  }
  if (!px.inside) return;
  vec3 bg = make_vec3(rp.background[0], rp.background[1], rp.background[2]);
  vec3 c = st.color + st.T * bg;
  store_vec3(image, px.index, c);
  alpha[px.index] = 1.f - st.T;
  final_T[px.index] = st.T;
  n_contrib[px.index] = st.n_contrib;
}
