// Forward rasterization in four passes over chunks: a chunk is a batch of
// SPLAT_GROUP_SIZE consecutive positions of a tile's depth-sorted list
// (chunk_slot() in shaders/common/params.h); 16x16 tiles, one thread per
// pixel. No pass is sequential over a tile's whole list, so deep tiles
// spread over the GPU.
//   rasterize_chunks       per chunk: each pixel's transmittance product P
//                          and colour L of the chunk's splats alone (the
//                          blend of shaders/common/blend.h from T = 1), and
//                          its last contributor in the chunk
//   rasterize_forward      per tile: chains the chunks front to back,
//                          C += T L, T *= P, up to the chunk where the blend's
//                          stop (T < 1e-4) may fall
//   rasterize_walk         per chunk: the pixels that stop in it walk it
//                          splat by splat with the blend's own rule, so the
//                          stop and the last contributor are the blend's
//                          (not run with the chunked stop, RasterParams::
//                          chunk_stop: there the chunk pass applies the
//                          blend's stop in every chunk, from the chunk's
//                          start, and the chain ends a pixel after the chunk
//                          that leaves its T below the stop)
//   rasterize_checkpoints  per tile: leaves the state after each chunk,
//                          (T, colour behind), for the chunked backward
//                          (with the chunked stop, rasterize_forward's end)
#pragma once
#include "blend.h"
#include "simt_util.h"
#include "tile_cover.h"

SPLAT_STATIC_ASSERT(SPLAT_GROUP_SIZE == SPLAT_TILE_SIZE * SPLAT_TILE_SIZE, "one thread per pixel of a tile");
SPLAT_STATIC_ASSERT(SPLAT_CHUNK_THREADS % SPLAT_SIMD_WIDTH == 0 && SPLAT_CHUNK_PIXELS * SPLAT_CHUNK_THREADS == SPLAT_GROUP_SIZE,
                    "the chunk pass: whole SIMD groups, every pixel of a tile once");

// A splat of a batch in threadgroup memory: the SplatRecord's three 16-byte
// quads, (mean2d, conic.xy), (conic.z, opacity, colour.rg), (colour.b,
// depth, pad), with the tile blocks the splat can reach (tile_cover_blocks,
// its bits) in the third quad's depth, read first: (colour.b, blocks, -, -).
// The forward passes' batches hold the exponent coefficients
// (blend_exponent_coefs) in the conic's place: they read nothing else of it.
// One vector load per quad (the array is declared with SPLAT_TG_QUADS).
#define SPLAT_BATCH_QUADS 3
#define SPLAT_BATCH_FLOATS (4 * SPLAT_BATCH_QUADS)
SPLAT_STATIC_ASSERT(SPLAT_SIMD_WIDTH % SPLAT_TILE_SIZE == 0, "a lane's pixels (lane_pixel) share a column");
SPLAT_STATIC_ASSERT(sizeof(SplatRecord) == 16 * SPLAT_BATCH_QUADS, "a batch splat is its record's quads");

// `coefs` (a constant at each call): the conic's place holds the exponent
// coefficients (the forward passes).
// (tx, ty): the batch's tile in its view.
SPLAT_FUNC void store_batch_splat(SPLAT_TG_MEM float* batch, uint32_t j, SPLAT_DEVICE_MEM const SplatRecord* records,
                                  uint32_t g, bool coefs, uint32_t tx, uint32_t ty) {
  SPLAT_DEVICE_MEM const float* src = (SPLAT_DEVICE_MEM const float*)records;
  TileCover tc = record_tile_cover(records[g], 0, 0, 0, 0);
  const uint32_t blocks = tile_cover_blocks(tc, (int)tx, (int)ty);
  vec4 q0 = load_float4(src, SPLAT_BATCH_QUADS * g);
  vec4 q1 = load_float4(src, SPLAT_BATCH_QUADS * g + 1u);
  vec4 q2 = load_float4(src, SPLAT_BATCH_QUADS * g + 2u);
  if (coefs) {
    vec3 k = blend_exponent_coefs(make_vec3(q0.z, q0.w, q1.x));
    q0 = make_vec4(q0.x, q0.y, k.x, k.y);
    q1 = make_vec4(k.z, q1.y, q1.z, q1.w);
  }
  store_tg_float4(batch, SPLAT_BATCH_QUADS * j, q0);
  store_tg_float4(batch, SPLAT_BATCH_QUADS * j + 1u, q1);
  store_tg_float4(batch, SPLAT_BATCH_QUADS * j + 2u, make_vec4(q2.x, sp_bits_float(blocks), 0.f, 0.f));
}

// The quad of batch splat j holding its blocks (and the last colour channel).
// The batch readers offset the pointer to splat j once: its quads are then
// immediate offsets of one address, where a 32-bit quad index 3 j + q (which
// may wrap, as far as the compiler knows) took an address computation each.
SPLAT_FUNC vec4 batch_splat_blocks(SPLAT_TG_MEM const float* batch, uint32_t j) {
  return load_tg_float4(batch + SPLAT_BATCH_FLOATS * j, 2u);
}

// The splat of a record in device memory, as the blend sees it.
SPLAT_FUNC BlendSplat record_blend_splat(SPLAT_DEVICE_MEM const SplatRecord& r) {
  return blend_splat(make_vec2(r.mean2d[0], r.mean2d[1]), make_vec3(r.conic[0], r.conic[1], r.conic[2]), r.opacity,
                     make_vec3(r.color[0], r.color[1], r.color[2]));
}

// Batch splat j (store_batch_splat with the same `coefs`). From a batch of
// coefficients the conic is not known (zero): the forward reads only them.
SPLAT_FUNC BlendSplat load_blend_splat(SPLAT_TG_MEM const float* batch, uint32_t j, vec4 tail, bool coefs) {
  SPLAT_TG_MEM const float* splat = batch + SPLAT_BATCH_FLOATS * j;
  vec4 q0 = load_tg_float4(splat, 0u);
  vec4 q1 = load_tg_float4(splat, 1u);
  vec2 mean2d = make_vec2(q0.x, q0.y);
  vec3 color = make_vec3(q1.z, q1.w, tail.x);
  if (!coefs) return blend_splat(mean2d, make_vec3(q0.z, q0.w, q1.x), q1.y, color);
  BlendSplat b;
  b.mean2d = mean2d;
  b.conic = make_vec3(0.f, 0.f, 0.f);
  b.coefs = make_vec3(q0.z, q0.w, q1.x);
  b.opacity = q1.y;
  b.color = color;
  return b;
}

// The pixel of thread `tid` in global tile `tile`: with several views of one
// size binned together, view v's tiles are [v T, (v + 1) T) (T = tiles_x
// tiles_y) and its pixels [v W H, (v + 1) W H) of the per-pixel buffers.
struct TilePixel {
  uint32_t tile_x, tile_y;  // in the view
  uint32_t x, y;            // in the view
  bool inside;
  uint32_t index;  // v W H + y W + x when inside
};

SPLAT_FUNC uint32_t local_tile(SPLAT_CONST_MEM const CameraParams& cam, uint32_t tile) {
  return tile % (cam.tiles_x * cam.tiles_y);
}

SPLAT_FUNC TilePixel tile_pixel(SPLAT_CONST_MEM const CameraParams& cam, uint32_t tile, uint32_t tid) {
  TilePixel p;
  const uint32_t per_view = cam.tiles_x * cam.tiles_y, view = tile / per_view, local = tile - view * per_view;
  p.tile_x = local % cam.tiles_x;
  p.tile_y = local / cam.tiles_x;
  p.x = p.tile_x * SPLAT_TILE_SIZE + tid % SPLAT_TILE_SIZE;
  p.y = p.tile_y * SPLAT_TILE_SIZE + tid / SPLAT_TILE_SIZE;
  p.inside = p.x < cam.width && p.y < cam.height;
  p.index = p.inside ? view * (cam.width * cam.height) + p.y * cam.width + p.x : 0u;
  return p;
}

// SIMD groups hold compact sets of a tile's pixels: the pixels in group
// order, slot k = 64 q + 8 row + column within quadrant q of the tile's 2 x 2
// quadrants of 8 x 8 pixels (row-major), so a SIMD group of 64 pixels (two a
// lane) holds a quadrant and one of 32 pixels half of one. A splat reaches
// 17-18% fewer quadrants than the 16 x 4 row strips that held 64 pixels
// before (the scale table's random scenes at 1M splats, 800x800, and 6M,
// 3840x2160), and each (SIMD group, splat) visit costs the same.
// SPLAT_GROUP_QUADRANTS=0 (an NVRTC define, for the A/B) keeps the tile's
// row-major order: 16 x 4 strips, the same block test.
#ifndef SPLAT_GROUP_QUADRANTS
#define SPLAT_GROUP_QUADRANTS 1
#endif
SPLAT_FUNC uint32_t tile_group_pixel(uint32_t k) {
  if (SPLAT_GROUP_QUADRANTS == 0) return k;
  const uint32_t q = k / 64u, j = k % 64u;
  return ((q / 2u) * 8u + j / 8u) * SPLAT_TILE_SIZE + (q % 2u) * 8u + j % 8u;
}

// The block bit (tile_cover_blocks) of tile pixel i (row-major).
SPLAT_FUNC uint32_t tile_pixel_block(uint32_t i) {
  return 1u << (i / (4u * SPLAT_TILE_SIZE) * 4u + i % SPLAT_TILE_SIZE / 4u);
}

// Slot p of thread t in group order when every thread holds `per_lane`
// pixels: SIMD group w the per_lane * 32 slots from w per_lane 32, lane l the
// slots l, l + 32, ... of them.
SPLAT_FUNC uint32_t lane_slot(SimtThread t, uint32_t per_lane, uint32_t p) {
  return t.warp * per_lane * SPLAT_SIMD_WIDTH + p * SPLAT_SIMD_WIDTH + t.lane;
}

// The tile pixel of thread t's slot p (lane_slot). A lane's pixels share a
// column: slots 32 apart are rows 4 apart in a quadrant.
SPLAT_FUNC uint32_t lane_pixel(SimtThread t, uint32_t per_lane, uint32_t p) {
  return tile_group_pixel(lane_slot(t, per_lane, p));
}

// Whether the batch splat whose third quad is `tail` (batch_splat_blocks)
// reaches none of the blocks holding this SIMD group's pixels
// (`group_blocks`: the group's tile_pixel_block bits, simd_or): the whole
// group can skip it.
SPLAT_FUNC bool batch_splat_misses(vec4 tail, uint32_t group_blocks) {
  return (sp_float_bits(tail.y) & group_blocks) == 0u;
}

// The chunk a chunk-parallel threadgroup works on: the tile that recorded
// its slot (tile_chunks_body), checked against the tile's own slots, since
// slots no chunk uses hold stale values. Uniform over the threadgroup.
struct TileChunk {
  uint32_t tile;
  uint32_t start, end;  // the tile's list
  uint32_t lo, hi;      // this chunk's positions [lo, hi)
};

// Chunk k of `tile` (the chunk pass's head launches, and tile_chunk); false
// when the tile has fewer chunks.
SPLAT_FUNC bool tile_chunk_at(uint32_t tile, uint32_t k, SPLAT_DEVICE_MEM const uint32_t* ranges,
                              SPLAT_THREAD TileChunk& c) {
  c.tile = tile;
  c.start = ranges[2 * tile];
  c.end = ranges[2 * tile + 1];
  c.lo = c.start + k * (uint32_t)SPLAT_GROUP_SIZE;
  if (c.lo >= c.end) return false;
  c.hi = c.end - c.lo < (uint32_t)SPLAT_GROUP_SIZE ? c.end : c.lo + (uint32_t)SPLAT_GROUP_SIZE;
  return true;
}

SPLAT_FUNC bool tile_chunk(uint32_t slot, SPLAT_CONST_MEM const RasterParams& rp,
                           SPLAT_DEVICE_MEM const uint32_t* ranges, SPLAT_DEVICE_MEM const uint32_t* chunk_tiles,
                           SPLAT_THREAD TileChunk& c) {
  const uint32_t tile = chunk_tiles[slot];
  if (tile >= rp.num_tiles) return false;
  const uint32_t first = chunk_slot(tile, ranges[2 * tile], 0u);
  return slot >= first && tile_chunk_at(tile, slot - first, ranges, c);
}

// The chunk pass's blend of a batch of `count` splats into a thread's
// pixels, from T = 1; with `exact` (a constant at each call) the blend's stop
// too: a pixel that stops takes no later splat and is marked in `stopped`.
// Ends once every pixel of the thread has stopped or has P below the stop.
SPLAT_FUNC void blend_chunk_splats(SPLAT_TG_MEM const float* s_splats, uint32_t count, uint32_t group_blocks,
                                   SPLAT_THREAD const vec2* pix, bool exact, SPLAT_THREAD ChunkBlend* cb,
                                   SPLAT_THREAD uint32_t* last, SPLAT_THREAD bool* stopped) {
  // With the stop, a pixel that has not stopped keeps P >= SPLAT_T_MIN (a
  // splat that would take it below stops it instead), so one starting below
  // (an ended pixel, P = 0) would stop at its first hit, blending nothing:
  // marked now, it blends nothing either (the caller clears its flag), and
  // the exit test reads the flags alone, predicates rather than a maximum.
  bool all_stopped = exact;
  SPLAT_UNROLL
  for (int p = 0; p < SPLAT_CHUNK_PIXELS; ++p) {
    if (exact) stopped[p] = stopped[p] || cb[p].P < SPLAT_T_MIN;
    all_stopped = all_stopped && stopped[p];
  }
  if (all_stopped) return;
  for (uint32_t j = 0; j < count; ++j) {
    vec4 tail = batch_splat_blocks(s_splats, j);
    if (batch_splat_misses(tail, group_blocks)) continue;
    BlendSplat b = load_blend_splat(s_splats, j, tail, true);
    float p_max = 0.f;
    all_stopped = exact;
    SPLAT_UNROLL
    for (int p = 0; p < SPLAT_CHUNK_PIXELS; ++p) {
      // chunk_blend_add and chunk_blend_stops on the hit itself: no select
      // of alpha and compare of it again, and the stop's product is the one
      // blended, formed once (the stop's test and the blend are predicated
      // apart). The test is chunk_blend_take_stops' comparison written out:
      // called on `next` through a bool function, NVRTC kept six more
      // instructions in this loop.
      float gauss, raw;
      bool hit;
      const float alpha = blend_alpha_hit(b, pix[p], gauss, raw, hit);
      const float next = chunk_blend_next(cb[p], alpha);
      if (exact) {
        stopped[p] = stopped[p] || (hit && next < SPLAT_T_MIN);
        hit = hit && !stopped[p];
      }
      if (hit) chunk_blend_take_next(cb[p], alpha, b.color, next);
      last[p] = hit ? j + 1u : last[p];
      if (exact) {
        all_stopped = all_stopped && stopped[p];
      } else {
        p_max = sp_max(p_max, cb[p].P);
      }
    }
    if (exact ? all_stopped : p_max < SPLAT_T_MIN) break;
  }
}

// chunk_last's flag: the pixel stopped in this chunk, by the blend's own rule
// (the first chunk only). Its (P, L) are then the blend's up to the stop.
#define SPLAT_CHUNK_STOPPED 0x80000000u

// Whether the chunk pass applies the blend's stop in chunk k: in the first
// chunk, which every pixel enters with T = 1, (P, L) from T = 1 are the
// blend's own state (chunk_blend_take and blend_forward_take round alike), so
// a pixel stopping there needs no walk. SPLAT_CHUNK_EXACT_FIRST 0 restores
// the walk for it (the A/B and the emulator's same-bits check). With the
// chunked stop, in every chunk: that is its rule.
#ifndef SPLAT_CHUNK_EXACT_FIRST
#define SPLAT_CHUNK_EXACT_FIRST 1
#endif
SPLAT_FUNC bool chunk_first_exact(uint32_t k) { return SPLAT_CHUNK_EXACT_FIRST != 0 && k == 0u; }
SPLAT_FUNC bool chunk_applies_stop(SPLAT_CONST_MEM const RasterParams& rp, uint32_t k) {
  return rp.chunk_stop != 0u || chunk_first_exact(k);
}

// A pixel's 4-float chunk state (quad `at` of chunk_state): one vector store.
SPLAT_FUNC void store_chunk_state(SPLAT_DEVICE_MEM float* chunk_state, uint32_t at, float a, vec3 b) {
  store_float4(chunk_state, at, a, b.x, b.y, b.z);
}

// Pass 1. chunk_state[4 (SPLAT_GROUP_SIZE slot + pixel) ..] = (P, L.rgb),
// chunk_last[..] = the last contributor's position in the chunk + 1 (0:
// none), with SPLAT_CHUNK_STOPPED where the pixel stopped in a chunk that
// applies the blend's stop (chunk_applies_stop).
// SPLAT_CHUNK_THREADS threads, SPLAT_CHUNK_PIXELS pixels each (as the
// backward: SIMD group w holds quadrant w, lane l its slots l and l + 32,
// lane_pixel), so a splat's block test and loads serve two pixels. Once
// both of a thread's pixels are stopped or have P below the stop it stops
// early; a pixel whose P did so before goes on meanwhile, harmlessly: the
// chain then walks that chunk splat by splat and never reads its (P, L). s_splats:
// SPLAT_GROUP_SIZE * SPLAT_BATCH_FLOATS floats.
// With cp.skip_saturated (ChunkPassParams in params.h) a chunk past one that
// saturates its tile is skipped, and a chunk that saturates its tile says so;
// s_flags: SPLAT_CHUNK_THREADS / 32 values.
// SPLAT_CHUNK_SKIP_ENDED (a define; 0 for the A/B): a head launch's pixels that
// the earlier chunks have already ended skip this chunk. (The last launch
// skipping by the head chunks' product was measured no faster: docs/gpu.md.)
#ifndef SPLAT_CHUNK_SKIP_ENDED
#define SPLAT_CHUNK_SKIP_ENDED 1
#endif
// A pixel's transmittance before chunk `known` as the chain takes it: chunks
// 0..known-1's products in order, 0 where one of them stopped it by the blend's
// stop (1 when known is 0).
SPLAT_FUNC float chunk_T_before(SPLAT_CONST_MEM const RasterParams& rp, uint32_t tile, uint32_t start, uint32_t known,
                                uint32_t pixel, SPLAT_DEVICE_MEM const float* chunk_state,
                                SPLAT_DEVICE_MEM const uint32_t* chunk_last) {
  float T = 1.f;
  for (uint32_t j = 0; j < known; ++j) {
    const uint32_t at = chunk_pixel(tile, start, j, pixel);
    T *= load_float4(chunk_state, at).x;
    if (chunk_applies_stop(rp, j) && (chunk_last[at] & SPLAT_CHUNK_STOPPED) != 0u) T = 0.f;
  }
  return T;
}
// Whether the chain has ended a pixel before a chunk, from chunk_T_before (below
// half the stop: the margin absorbs a walk's rounding, as the tile's saturation
// test's does): nothing reads its state in the chunk, so it skips it.
SPLAT_FUNC bool chunk_pixel_ended(float T_before) {
  return SPLAT_CHUNK_SKIP_ENDED != 0 && T_before < 0.5f * SPLAT_T_MIN;
}
SPLAT_FUNC void rasterize_chunks_body(SimtThread t, SPLAT_CONST_MEM const CameraParams& cam,
                                      SPLAT_CONST_MEM const RasterParams& rp,
                                      SPLAT_CONST_MEM const ChunkPassParams& cp, SPLAT_DEVICE_MEM const uint32_t* ranges,
                                      SPLAT_DEVICE_MEM const uint32_t* sorted_ids,
                                      SPLAT_DEVICE_MEM const SplatRecord* records,
                                      SPLAT_DEVICE_MEM const uint32_t* chunk_tiles, SPLAT_DEVICE_MEM float* chunk_state,
                                      SPLAT_DEVICE_MEM uint32_t* chunk_last, SPLAT_DEVICE_MEM uint32_t* tile_saturated,
                                      SPLAT_TG_MEM float* s_splats, SPLAT_TG_MEM uint32_t* s_flags) {
  TileChunk c;
  uint32_t k;
  if (cp.head) {
    k = cp.chunk;
    if (!tile_chunk_at(t.group, k, ranges, c)) return;
  } else {
    if (!tile_chunk(t.group, rp, ranges, chunk_tiles, c)) return;
    k = (c.lo - c.start) / (uint32_t)SPLAT_GROUP_SIZE;
    if (k < cp.tail_from) return;
  }
  // An earlier chunk stops every pixel of the tile: nothing reads this one.
  // (A stale read only misses the skip.)
  if (cp.skip_saturated && tile_saturated[c.tile] < k) return;
  uint32_t count = c.hi - c.lo;
  const TilePixel corner = tile_pixel(cam, c.tile, 0u);
  for (uint32_t i = t.tid; i < count; i += SPLAT_CHUNK_THREADS)
    store_batch_splat(s_splats, i, records, sorted_ids[c.lo + i], true, corner.tile_x, corner.tile_y);
  sp_group_barrier();
  TilePixel px[SPLAT_CHUNK_PIXELS];
  vec2 pix[SPLAT_CHUNK_PIXELS];
  ChunkBlend cb[SPLAT_CHUNK_PIXELS];
  uint32_t last[SPLAT_CHUNK_PIXELS];
  // The pixel's transmittance before this chunk as the chain takes it (the
  // earlier chunks' products in order; 0 where one of them stopped it by the
  // blend's stop): known in a head launch, whose earlier chunks are complete;
  // 1 otherwise.
  float T_before[SPLAT_CHUNK_PIXELS];
  const uint32_t known = cp.skip_saturated && cp.head ? k : 0u;
  bool any_live = false;
  uint32_t blocks = 0u;
  SPLAT_UNROLL
  for (int p = 0; p < SPLAT_CHUNK_PIXELS; ++p) {
    const uint32_t pixel = lane_pixel(t, SPLAT_CHUNK_PIXELS, (uint32_t)p);
    px[p] = tile_pixel(cam, c.tile, pixel);
    // A lane's pixels share a column (lane_pixel: rows 4 apart in a
    // quadrant): one x value, so the blend's x terms are formed once a splat.
    pix[p] = make_vec2(p == 0 ? (float)px[p].x + 0.5f : pix[0].x, (float)px[p].y + 0.5f);
    cb[p] = chunk_blend_begin();
    last[p] = 0u;
    T_before[p] = chunk_T_before(rp, c.tile, c.start, known, pixel, chunk_state, chunk_last);
    // An ended pixel blends nothing here, with P = 0 so that later head
    // launches see it ended.
    if (chunk_pixel_ended(T_before[p])) cb[p].P = 0.f;
    const bool live = px[p].inside && cb[p].P > 0.f;
    any_live = any_live || live;
    // The group's blocks count its live pixels alone: an ended pixel leaves
    // this chunk as (P, L, last) = (0, 0, 0) whatever it visits, and nothing
    // reads the state of a pixel outside the image.
    blocks |= live ? tile_pixel_block(pixel) : 0u;
  }
  const uint32_t group_blocks = simd_or(blocks);
  // The first chunk of a list starts from T = 1, the blend's own start: there
  // the pass applies the blend's stop and a pixel that stops is finished
  // (chunk_first_exact), with no walk. Two loops, so the other chunks' loop
  // keeps none of that test (k is uniform over the threadgroup).
  bool stopped[SPLAT_CHUNK_PIXELS];
  SPLAT_UNROLL
  for (int p = 0; p < SPLAT_CHUNK_PIXELS; ++p) stopped[p] = false;
  if (any_live && chunk_applies_stop(rp, k))
    blend_chunk_splats(s_splats, count, group_blocks, pix, true, cb, last, stopped);
  else if (any_live)
    blend_chunk_splats(s_splats, count, group_blocks, pix, false, cb, last, stopped);
  SPLAT_UNROLL
  for (int p = 0; p < SPLAT_CHUNK_PIXELS; ++p) {
    if (chunk_pixel_ended(T_before[p])) {  // blended nothing
      last[p] = 0u;
      stopped[p] = false;
    }
  }
  const uint32_t slot = chunk_slot(c.tile, c.start, k);
  // Whether every pixel of the tile is below half the stop after this chunk
  // (or stopped in a chunk that applies the stop, which it then never leaves):
  // its transmittance product with the earlier chunks' (complete: earlier
  // launches) in a head launch, its own in a slot launch. Then the chain
  // (chain_chunks, the same products) stops every pixel in this chunk or
  // before, and a walk from there stops by its end (the same factors from
  // T <= 1; the half absorbs the rounding between the two), so no later chunk
  // is read.
  bool saturated = true;
  SPLAT_UNROLL
  for (int p = 0; p < SPLAT_CHUNK_PIXELS; ++p) {
    const uint32_t pixel = lane_pixel(t, SPLAT_CHUNK_PIXELS, (uint32_t)p);
    store_chunk_state(chunk_state, slot * (uint32_t)SPLAT_GROUP_SIZE + pixel, cb[p].P, cb[p].L);
    chunk_last[slot * (uint32_t)SPLAT_GROUP_SIZE + pixel] = last[p] | (stopped[p] ? SPLAT_CHUNK_STOPPED : 0u);
    saturated = saturated && (!px[p].inside || stopped[p] || T_before[p] * cb[p].P < 0.5f * SPLAT_T_MIN);
  }
  if (cp.skip_saturated) {
    bool warp_saturated = !simd_any(!saturated);
    if (t.lane == 0) s_flags[t.warp] = warp_saturated ? 1u : 0u;
    sp_group_barrier();
    uint32_t all = 1u;
    for (uint32_t w = 0; w < SPLAT_CHUNK_THREADS / SPLAT_SIMD_WIDTH; ++w) all &= s_flags[w];
    if (all && t.tid == 0) sp_atomic_min_u32(&tile_saturated[c.tile], k);
  }
}

// Chains chunks k, k + 1, .. onto the pixel state `st` with the chunk pass's
// (P, L): C += T L, T *= P, while that is the blend's own result, i.e. while
// T P stays above the stop (with a margin for rounding: then no splat of the
// chunk stops the pixel, as T only falls to T P within it). Returns the first
// chunk the pixel must walk splat by splat (`chunks` when none). With the
// chunked stop (`chunked`) every chunk is taken whole, as the chunk pass
// blended it, and the pixel ends after one that stopped it or that leaves T
// below the stop: nothing is walked.
SPLAT_FUNC uint32_t chain_chunks(uint32_t tile, uint32_t start, uint32_t chunks, uint32_t k, uint32_t tid,
                                 SPLAT_DEVICE_MEM const float* chunk_state, SPLAT_DEVICE_MEM const uint32_t* chunk_last,
                                 SPLAT_THREAD BlendForwardState& st, bool flags, bool chunked) {
  for (; k < chunks; ++k) {
    uint32_t at = chunk_pixel(tile, start, k, tid);
    vec4 ck = load_float4(chunk_state, at);
    float P = ck.x;
    uint32_t last = chunk_last[at];
    // Only chunks that apply the stop carry the flag (chunk_applies_stop): a
    // chain from a later one (the walk's) leaves the test out (`flags` is a
    // constant at each call).
    const bool stopped = flags && (last & SPLAT_CHUNK_STOPPED) != 0u;
    if (flags) last &= ~SPLAT_CHUNK_STOPPED;
    if (!chunked && !stopped && !(st.T * P >= SPLAT_T_MIN * 1.001f)) return k;
    blend_chain_chunk(st, P, make_vec3(ck.y, ck.z, ck.w), k * (uint32_t)SPLAT_GROUP_SIZE, last);
    // The blend's stop in a chunk that applies it (in the first chunk, from
    // T = 1: the same bits as its walk), or the chunked stop's end.
    if (stopped || (chunked && st.T < SPLAT_T_MIN)) {
      st.done = true;
      return chunks;
    }
  }
  return chunks;
}

SPLAT_FUNC void store_pixel(SPLAT_CONST_MEM const RasterParams& rp, uint32_t index,
                            SPLAT_THREAD const BlendForwardState& st, SPLAT_DEVICE_MEM float* image,
                            SPLAT_DEVICE_MEM float* alpha, SPLAT_DEVICE_MEM float* final_T,
                            SPLAT_DEVICE_MEM uint32_t* n_contrib) {
  vec3 bg = make_vec3(rp.background[0], rp.background[1], rp.background[2]);
  store_vec3(image, index, st.color + st.T * bg);
  alpha[index] = 1.f - st.T;
  final_T[index] = st.T;
  n_contrib[index] = st.n_contrib;
}

// The checkpoints of one pixel (tile pixel `tid`, last contributor `nc`,
// final transmittance `T`): a back-to-front sweep over the chunks up to the
// last contributor leaves in each chunk's slot, in place of its (P, L), the
// state after it for the chunked backward: (T, B) with B the colour behind
// normalised by T, composited from the later chunks' (P, L) (B = L + P
// B_next, the background last) as the backward's own walk composites it,
// with no cancellation. The loads run ahead of the stores,
// SPLAT_CHECKPOINT_BATCH chunks at a time: the stores go to the same array,
// so the compiler kept every load behind the previous store and the sweep was
// a chain of L2 round trips (Nsight Compute: no eligible warp in 95% of
// cycles).
#define SPLAT_CHECKPOINT_BATCH 4
SPLAT_FUNC void store_checkpoints(SPLAT_CONST_MEM const RasterParams& rp, uint32_t tile, uint32_t start, uint32_t tid,
                                  uint32_t nc, float T, SPLAT_DEVICE_MEM float* chunk_state) {
  if (nc == 0u) return;
  uint32_t k_last = (nc - 1u) / (uint32_t)SPLAT_GROUP_SIZE;
  vec3 B = make_vec3(rp.background[0], rp.background[1], rp.background[2]);
  for (uint32_t k_end = k_last + 1u; k_end > 0u;) {  // chunks k_end - 1 .. 0 remain
    vec4 s[SPLAT_CHECKPOINT_BATCH];
    SPLAT_UNROLL for (uint32_t j = 0; j < SPLAT_CHECKPOINT_BATCH; ++j) {
      s[j] = make_vec4(1.f, 0.f, 0.f, 0.f);
      if (j < k_end) s[j] = load_float4(chunk_state, chunk_pixel(tile, start, k_end - 1u - j, tid));
    }
    SPLAT_UNROLL for (uint32_t j = 0; j < SPLAT_CHECKPOINT_BATCH; ++j) {
      if (j >= k_end) break;
      const uint32_t k = k_end - 1u - j;
      if (k < k_last) store_chunk_state(chunk_state, chunk_pixel(tile, start, k, tid), T, B);
      float P = s[j].x;
      vec3 L = make_vec3(s[j].y, s[j].z, s[j].w);
      B = L + P * B;
      T = T / P;
    }
    k_end = k_end > SPLAT_CHECKPOINT_BATCH ? k_end - SPLAT_CHECKPOINT_BATCH : 0u;
  }
}

#define SPLAT_NO_STOP_CHUNK 0xffffffffu

// Pass 2, one threadgroup per tile, no barriers. Chains each pixel's chunks;
// a pixel that never needs a walk is finished here (every pixel, with the
// chunked stop). Otherwise its state at
// the start of that chunk, (T, C), goes to the chunk's slot and the chunk to
// stop_chunk[pixel], for the walk pass (never written with the chunked stop).
SPLAT_FUNC void rasterize_forward_body(SimtThread t, SPLAT_CONST_MEM const CameraParams& cam,
                                       SPLAT_CONST_MEM const RasterParams& rp, SPLAT_DEVICE_MEM const uint32_t* ranges,
                                       SPLAT_DEVICE_MEM float* image, SPLAT_DEVICE_MEM float* alpha,
                                       SPLAT_DEVICE_MEM float* final_T, SPLAT_DEVICE_MEM uint32_t* n_contrib,
                                       SPLAT_DEVICE_MEM float* chunk_state, SPLAT_DEVICE_MEM const uint32_t* chunk_last,
                                       SPLAT_DEVICE_MEM uint32_t* stop_chunk) {
  TilePixel px = tile_pixel(cam, t.group, t.tid);
  if (!px.inside) return;
  uint32_t start = ranges[2 * t.group], end = ranges[2 * t.group + 1];
  uint32_t chunks = chunk_count(start, end);
  BlendForwardState st = blend_forward_begin();
  uint32_t k = chain_chunks(t.group, start, chunks, 0u, t.tid, chunk_state, chunk_last, st, true, rp.chunk_stop != 0u);
  if (k < chunks) {
    uint32_t at = chunk_pixel(t.group, start, k, t.tid);
    store_chunk_state(chunk_state, at, st.T, st.color);
    n_contrib[px.index] = st.n_contrib;
    stop_chunk[px.index] = k;
    return;
  }
  store_pixel(rp, px.index, st, image, alpha, final_T, n_contrib);
  // The chunked stop walks nothing, so every pixel is final here: its
  // checkpoints too, from the chunk states this thread just read; stop_chunk
  // is the walk's alone (a one-element buffer then).
  if (rp.chunk_stop != 0u)
    store_checkpoints(rp, t.group, start, t.tid, st.n_contrib, st.T, chunk_state);
  else
    stop_chunk[px.index] = SPLAT_NO_STOP_CHUNK;
}

// Pass 3, one threadgroup per chunk (tile_chunk()). The pixels whose walk
// chunk this is walk it from threadgroup memory with the blend's own rule,
// from the state pass 2 left, and leave (P, L) of what they blended in the
// slot. Should a walk not stop after all (T P was within the margin), the
// pixel chains on, walking any later chunk from device memory.
// With SPLAT_WALK_COMPACT the walking pixels are first gathered, in group
// order (tile_group_pixel), onto the threadgroup's first threads: a chunk
// where a quarter of the pixels stop, spread over the tile, then walks on
// two SIMD groups instead of eight mostly idle ones (each splat's block test
// then covers its group's walkers' blocks). Each pixel's arithmetic is the same either
// way; 0 (the A/B, an NVRTC define) keeps a pixel on its own thread.
// s_splats: SPLAT_GROUP_SIZE * SPLAT_BATCH_FLOATS floats; s_flags:
// SPLAT_GROUP_WARPS + 1 values; s_walkers: SPLAT_GROUP_SIZE values.
#ifndef SPLAT_WALK_COMPACT
#define SPLAT_WALK_COMPACT 1
#endif
SPLAT_FUNC void rasterize_walk_body(SimtThread t, SPLAT_CONST_MEM const CameraParams& cam,
                                    SPLAT_CONST_MEM const RasterParams& rp, SPLAT_DEVICE_MEM const uint32_t* ranges,
                                    SPLAT_DEVICE_MEM const uint32_t* sorted_ids,
                                    SPLAT_DEVICE_MEM const SplatRecord* records,
                                    SPLAT_DEVICE_MEM const uint32_t* chunk_tiles, SPLAT_DEVICE_MEM float* image,
                                    SPLAT_DEVICE_MEM float* alpha, SPLAT_DEVICE_MEM float* final_T,
                                    SPLAT_DEVICE_MEM uint32_t* n_contrib, SPLAT_DEVICE_MEM float* chunk_state,
                                    SPLAT_DEVICE_MEM const uint32_t* chunk_last,
                                    SPLAT_DEVICE_MEM const uint32_t* stop_chunk, SPLAT_TG_MEM float* s_splats,
                                    SPLAT_TG_MEM uint32_t* s_flags, SPLAT_TG_MEM uint32_t* s_walkers) {
  TileChunk c;
  if (!tile_chunk(t.group, rp, ranges, chunk_tiles, c)) return;
  const uint32_t k = (c.lo - c.start) / (uint32_t)SPLAT_GROUP_SIZE;
  // This thread's slot in group order (tile_group_pixel), so that gathered
  // walkers fill SIMD groups in compact blocks.
  const uint32_t own_pixel = tile_group_pixel(t.tid);
  const TilePixel own = tile_pixel(cam, c.tile, own_pixel);
  const bool walk = own.inside && stop_chunk[own.index] == k;
  uint32_t walkers;  // SPLAT_WALK_COMPACT: the threadgroup's walking pixels
  if (SPLAT_WALK_COMPACT != 0) {
    const uint32_t rank = block_exclusive_scan(t, walk ? 1u : 0u, s_flags, walkers);
    if (walkers == 0u) return;
    if (walk) s_walkers[rank] = own_pixel;  // read after the loads' barrier
  } else {
    bool warp_walks = simd_any(walk);
    if (t.lane == 0) s_flags[t.warp] = warp_walks ? 1u : 0u;
    sp_group_barrier();
    uint32_t any = 0u;
    for (uint32_t w = 0; w < SPLAT_GROUP_WARPS; ++w) any |= s_flags[w];
    if (any == 0u) return;
    walkers = 0u;
  }
  uint32_t count = c.hi - c.lo;
  if (t.tid < count)
    store_batch_splat(s_splats, t.tid, records, sorted_ids[c.lo + t.tid], true, own.tile_x, own.tile_y);
  sp_group_barrier();

  // This thread's pixel (tile pixel `pixel`) and the blocks its SIMD group's
  // walkers lie in (before any lane leaves).
  const bool holds = SPLAT_WALK_COMPACT != 0 ? t.tid < walkers : walk;
  const uint32_t pixel = SPLAT_WALK_COMPACT != 0 ? (holds ? s_walkers[t.tid] : 0u) : own_pixel;
  const uint32_t group_blocks = simd_or(holds ? tile_pixel_block(pixel) : 0u);
  if (!holds) return;
  const TilePixel px = SPLAT_WALK_COMPACT != 0 ? tile_pixel(cam, c.tile, pixel) : own;
  vec2 pix = make_vec2((float)px.x + 0.5f, (float)px.y + 0.5f);
  const uint32_t at = t.group * (uint32_t)SPLAT_GROUP_SIZE + pixel;
  vec4 ck = load_float4(chunk_state, at);
  BlendForwardState st = blend_forward_begin();
  st.T = ck.x;
  st.color = make_vec3(ck.y, ck.z, ck.w);
  st.n_contrib = n_contrib[px.index];
  ChunkBlend cb = chunk_blend_begin();
  for (uint32_t j = 0; j < count; ++j) {
    vec4 tail = batch_splat_blocks(s_splats, j);
    if (batch_splat_misses(tail, group_blocks)) continue;
    BlendSplat b = load_blend_splat(s_splats, j, tail, true);
    float gauss, raw;
    bool hit;
    const float a = blend_alpha_hit(b, pix, gauss, raw, hit);
    if (!hit) continue;
    if (!blend_forward_take(a, b.color, c.lo - c.start + j, st)) break;
    chunk_blend_take(cb, a, b.color);
  }
  store_chunk_state(chunk_state, at, cb.P, cb.L);

  uint32_t chunks = chunk_count(c.start, c.end);
  for (uint32_t next = k + 1u; !st.done && next < chunks; ++next) {
    next = chain_chunks(c.tile, c.start, chunks, next, pixel, chunk_state, chunk_last, st, false, false);
    if (next >= chunks) break;
    uint32_t lo = c.start + next * (uint32_t)SPLAT_GROUP_SIZE;
    uint32_t hi = c.end - lo < (uint32_t)SPLAT_GROUP_SIZE ? c.end : lo + (uint32_t)SPLAT_GROUP_SIZE;
    ChunkBlend nb = chunk_blend_begin();
    for (uint32_t i = lo; i < hi; ++i) {
      BlendSplat b = record_blend_splat(records[sorted_ids[i]]);
      float a = blend_forward_step(b, pix, i - c.start, st);
      if (st.done) break;
      chunk_blend_add(nb, a, b.color);
    }
    store_chunk_state(chunk_state, chunk_pixel(c.tile, c.start, next, pixel), nb.P, nb.L);
  }
  store_pixel(rp, px.index, st, image, alpha, final_T, n_contrib);
}

// Pass 4, one threadgroup per tile, no barriers: store_checkpoints for each
// pixel (the chunked stop runs it at the end of pass 2 instead, which then
// holds every pixel's final state).
SPLAT_FUNC void rasterize_checkpoints_body(SimtThread t, SPLAT_CONST_MEM const CameraParams& cam,
                                           SPLAT_CONST_MEM const RasterParams& rp,
                                           SPLAT_DEVICE_MEM const uint32_t* ranges,
                                           SPLAT_DEVICE_MEM const float* final_T,
                                           SPLAT_DEVICE_MEM const uint32_t* n_contrib,
                                           SPLAT_DEVICE_MEM float* chunk_state) {
  TilePixel px = tile_pixel(cam, t.group, t.tid);
  if (!px.inside) return;
  store_checkpoints(rp, t.group, ranges[2 * t.group], t.tid, n_contrib[px.index], final_T[px.index], chunk_state);
}
