// Forward rasterization in two passes over chunks: a chunk is a batch of
// SPLAT_GROUP_SIZE consecutive positions of a tile's depth-sorted list
// (chunk_slot() in shaders/common/params.h), 16x16 tiles, one thread per
// pixel.
//   rasterize_chunks  one threadgroup per chunk: each pixel's transmittance
//                     product P and colour L of the chunk's splats alone
//                     (the blend of shaders/common/blend.h with T_in = 1),
//                     and its last contributor in the chunk. Chunks of one
//                     tile run in parallel, so deep tiles spread over the GPU.
//   rasterize_forward one threadgroup per tile: chains the chunks front to
//                     back, C += T L, T *= P. Where T P could fall below the
//                     blend's stop (T < 1e-4) the pixel walks that chunk
//                     splat by splat with the blend's own rule instead (from
//                     threadgroup memory), so the stop and the last
//                     contributor are the blend's.
//                     It leaves the state after each chunk, (T, colour
//                     behind), in the chunk's slot for the chunked backward.
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

// The pixel-centre rows of SIMD group `warp` of a tile's threadgroup.
SPLAT_FUNC void warp_rows(uint32_t tile_y, uint32_t warp, SPLAT_THREAD float& row_lo, SPLAT_THREAD float& row_hi) {
  const uint32_t first = warp * SPLAT_SIMD_WIDTH / SPLAT_TILE_SIZE;
  const uint32_t last = (warp * SPLAT_SIMD_WIDTH + SPLAT_SIMD_WIDTH - 1u) / SPLAT_TILE_SIZE;
  row_lo = (float)(tile_y * SPLAT_TILE_SIZE + first) + 0.5f;
  row_hi = (float)(tile_y * SPLAT_TILE_SIZE + last) + 0.5f;
}

// The chunk a chunk-parallel threadgroup works on: the tile that recorded
// its slot (tile_chunks_body), checked against the tile's own slots, since
// slots no chunk uses hold stale values. Uniform over the threadgroup.
struct TileChunk {
  uint32_t tile;
  uint32_t start, end;  // the tile's list
  uint32_t lo, hi;      // this chunk's positions [lo, hi)
};

SPLAT_FUNC bool tile_chunk(uint32_t slot, SPLAT_CONST_MEM const RasterParams& rp, SPLAT_DEVICE_MEM const uint32_t* ranges,
                           SPLAT_DEVICE_MEM const uint32_t* chunk_tiles, SPLAT_THREAD TileChunk& c) {
  c.tile = chunk_tiles[slot];
  if (c.tile >= rp.num_tiles) return false;
  c.start = ranges[2 * c.tile];
  c.end = ranges[2 * c.tile + 1];
  uint32_t first = chunk_slot(c.tile, c.start, 0u);
  if (slot < first) return false;
  c.lo = c.start + (slot - first) * (uint32_t)SPLAT_GROUP_SIZE;
  if (c.lo >= c.end) return false;
  c.hi = c.end - c.lo < (uint32_t)SPLAT_GROUP_SIZE ? c.end : c.lo + (uint32_t)SPLAT_GROUP_SIZE;
  return true;
}

// Pass 1. chunk_state[4 (SPLAT_GROUP_SIZE slot + tid) ..] = (P, L.rgb),
// chunk_last[..] = the last contributor's position in the chunk + 1 (0:
// none). A pixel whose P drops below the stop stops early: the chain walks
// that chunk splat by splat anyway. s_splats: SPLAT_GROUP_SIZE *
// SPLAT_BATCH_FLOATS floats.
SPLAT_FUNC void rasterize_chunks_body(SimtThread t, SPLAT_CONST_MEM const CameraParams& cam,
                                      SPLAT_CONST_MEM const RasterParams& rp, SPLAT_DEVICE_MEM const uint32_t* ranges,
                                      SPLAT_DEVICE_MEM const uint32_t* sorted_ids,
                                      SPLAT_DEVICE_MEM const SplatRecord* records,
                                      SPLAT_DEVICE_MEM const uint32_t* chunk_tiles, SPLAT_DEVICE_MEM float* chunk_state,
                                      SPLAT_DEVICE_MEM uint32_t* chunk_last, SPLAT_TG_MEM float* s_splats) {
  TileChunk c;
  if (!tile_chunk(t.group, rp, ranges, chunk_tiles, c)) return;
  uint32_t count = c.hi - c.lo;
  if (t.tid < count) store_batch_splat(s_splats + SPLAT_BATCH_FLOATS * t.tid, records, sorted_ids[c.lo + t.tid]);
  sp_group_barrier();
  TilePixel px = tile_pixel(cam, c.tile, t.tid);
  vec2 pix = make_vec2((float)px.x + 0.5f, (float)px.y + 0.5f);
  float row_lo, row_hi;
  warp_rows(px.tile_y, t.warp, row_lo, row_hi);
  float P = 1.f;
  vec3 L = make_vec3(0.f, 0.f, 0.f);
  uint32_t last = 0u;
  if (px.inside) {
    for (uint32_t j = 0; j < count; ++j) {
      SPLAT_TG_MEM const float* sj = s_splats + SPLAT_BATCH_FLOATS * j;
      if (batch_splat_misses_rows(sj, row_lo, row_hi)) continue;
      BlendSplat b = load_blend_splat(sj);
      float gauss;
      bool clamped;
      float alpha = blend_alpha(b.conic, b.mean2d, b.opacity, pix, gauss, clamped);
      if (alpha == 0.f) continue;
      L = L + (alpha * P) * b.color;
      P = P * (1.f - alpha);
      last = j + 1u;
      if (P < SPLAT_T_MIN) break;
    }
  }
  uint32_t at = t.group * (uint32_t)SPLAT_GROUP_SIZE + t.tid;
  chunk_state[4u * at] = P;
  chunk_state[4u * at + 1u] = L.x;
  chunk_state[4u * at + 2u] = L.y;
  chunk_state[4u * at + 3u] = L.z;
  chunk_last[at] = last;
}

// Pass 2, one threadgroup per tile. A front-to-back sweep over the chunks
// gives the image; where pixels must walk a chunk splat by splat, the
// threadgroup loads it into threadgroup memory once for all of them. A
// back-to-front sweep then leaves in each chunk's slot, in place of its
// (P, L), the state after it for the chunked backward: (T, B) with B the
// colour behind, normalised by T, composited from the later chunks' (P, L)
// (B = L + P B_next, background last) as the backward's own walk composites
// it, with no cancellation. s_splats: SPLAT_GROUP_SIZE * SPLAT_BATCH_FLOATS
// floats; s_flags: SPLAT_GROUP_WARPS values.
SPLAT_FUNC void rasterize_forward_body(SimtThread t, SPLAT_CONST_MEM const CameraParams& cam,
                                       SPLAT_CONST_MEM const RasterParams& rp, SPLAT_DEVICE_MEM const uint32_t* ranges,
                                       SPLAT_DEVICE_MEM const uint32_t* sorted_ids,
                                       SPLAT_DEVICE_MEM const SplatRecord* records, SPLAT_DEVICE_MEM float* image,
                                       SPLAT_DEVICE_MEM float* alpha, SPLAT_DEVICE_MEM float* final_T,
                                       SPLAT_DEVICE_MEM uint32_t* n_contrib, SPLAT_DEVICE_MEM float* chunk_state,
                                       SPLAT_DEVICE_MEM const uint32_t* chunk_last, SPLAT_TG_MEM float* s_splats,
                                       SPLAT_TG_MEM uint32_t* s_flags) {
  TilePixel px = tile_pixel(cam, t.group, t.tid);
  vec2 pix = make_vec2((float)px.x + 0.5f, (float)px.y + 0.5f);
  float row_lo, row_hi;
  warp_rows(px.tile_y, t.warp, row_lo, row_hi);
  uint32_t start = ranges[2 * t.group], end = ranges[2 * t.group + 1];
  uint32_t chunks = (end - start + (uint32_t)SPLAT_GROUP_SIZE - 1u) / (uint32_t)SPLAT_GROUP_SIZE;
  BlendForwardState st = blend_forward_begin();
  st.done = !px.inside;
  uint32_t k_end = 0u;  // the last chunk the pixel blends from
  for (uint32_t k = 0; k < chunks; ++k) {
    uint32_t at = chunk_slot(t.group, start, k) * (uint32_t)SPLAT_GROUP_SIZE + t.tid;
    SPLAT_DEVICE_MEM float* ck = chunk_state + 4u * at;
    bool walk = false;
    if (!st.done) {
      k_end = k;
      float P = ck[0];
      // With a margin for rounding, T P above the stop means no splat of the
      // chunk stops the pixel: T only falls to T P within it.
      if (st.T * P >= SPLAT_T_MIN * 1.001f) {
        st.color = st.color + st.T * make_vec3(ck[1], ck[2], ck[3]);
        st.T = st.T * P;
        uint32_t last = chunk_last[at];
        if (last != 0u) st.n_contrib = k * (uint32_t)SPLAT_GROUP_SIZE + last;
      } else {
        walk = true;
      }
    }
    // Flags: 1 some pixel walks this chunk, 2 some pixel goes on.
    uint32_t flag = (simd_any(walk) ? 1u : 0u) | (simd_any(!st.done) ? 2u : 0u);
    if (t.lane == 0) s_flags[t.warp] = flag;
    sp_group_barrier();
    uint32_t flags = 0u;
    for (uint32_t w = 0; w < SPLAT_GROUP_WARPS; ++w) flags |= s_flags[w];
    if (flags == 0u) break;
    if ((flags & 1u) != 0u) {
      // The blend, splat by splat; the chunk's (P, L) become those of the
      // splats it blended.
      uint32_t lo = start + k * (uint32_t)SPLAT_GROUP_SIZE;
      uint32_t count = end - lo < (uint32_t)SPLAT_GROUP_SIZE ? end - lo : (uint32_t)SPLAT_GROUP_SIZE;
      if (t.tid < count) store_batch_splat(s_splats + SPLAT_BATCH_FLOATS * t.tid, records, sorted_ids[lo + t.tid]);
      sp_group_barrier();
      if (walk) {
        float Pc = 1.f;
        vec3 Lc = make_vec3(0.f, 0.f, 0.f);
        for (uint32_t j = 0; j < count; ++j) {
          SPLAT_TG_MEM const float* sj = s_splats + SPLAT_BATCH_FLOATS * j;
          if (batch_splat_misses_rows(sj, row_lo, row_hi)) continue;
          BlendSplat b = load_blend_splat(sj);
          float a = blend_forward_step(b, pix, lo - start + j, st);
          if (st.done) break;
          if (a > 0.f) {
            Lc = Lc + (a * Pc) * b.color;
            Pc = Pc * (1.f - a);
          }
        }
        ck[0] = Pc;
        ck[1] = Lc.x;
        ck[2] = Lc.y;
        ck[3] = Lc.z;
      }
    }
    sp_group_barrier();  // s_flags and s_splats are free again
  }
  if (!px.inside) return;
  vec3 bg = make_vec3(rp.background[0], rp.background[1], rp.background[2]);
  store_vec3(image, px.index, st.color + st.T * bg);
  alpha[px.index] = 1.f - st.T;
  final_T[px.index] = st.T;
  n_contrib[px.index] = st.n_contrib;

  float T = st.T;
  vec3 B = bg;
  for (uint32_t k = chunks > 0u ? k_end + 1u : 0u; k-- > 0u;) {
    SPLAT_DEVICE_MEM float* ck = chunk_state + 4u * (chunk_slot(t.group, start, k) * (uint32_t)SPLAT_GROUP_SIZE + t.tid);
    float P = ck[0];
    vec3 L = make_vec3(ck[1], ck[2], ck[3]);
    if (k < k_end) {
      ck[0] = T;
      ck[1] = B.x;
      ck[2] = B.y;
      ck[3] = B.z;
    }
    B = L + P * B;
    T = T / P;
  }
}
