// Backward rasterization: one threadgroup of SPLAT_BWD_THREADS (128) threads
// per chunk of 256 positions of a tile's list (rasterize_forward.h), two
// pixels per thread, walking the chunk's splats back to front with the
// blend's backward step (shaders/common/blend.h) from the pixel states the
// forward checkpointed at the chunk's end. Chunks of one tile run in
// parallel, so the depth of the deepest tile no longer bounds the pass. A
// thread adds its two pixels' gradients before the SIMD group reduces them:
// the loads, the block test, the reduction and the atomics of a splat serve
// 64 pixels (SIMD group w holds the tile's quadrant w; lane l its slots l
// and l + 32: lane_pixel in rasterize_forward.h). The variants are
// specialization constants (compile-time), one per BackendConfig switch:
//   SPLAT_SPEC_BWD_REDUCE   simd: sum the 9 per-splat gradients over the SIMD
//                           group, one set of atomics per SIMD group; tg:
//                           threadgroup-memory reduction, one set per
//                           threadgroup; original: per-thread atomics
//   SPLAT_SPEC_BWD_RANGE    last_contributor: the walk starts at the SIMD
//                           group's largest last contributor (chunks behind
//                           the threadgroup's do nothing); full: at the tile
//                           end
//   SPLAT_SPEC_BWD_SPARSE   warp_any: skip the step, the reduction and the
//                           atomics when no lane contributes (tg: skip the
//                           atomics when no thread does); off
//   SPLAT_SPEC_BWD_ATOMIC   lane_zero: nine simd_sum butterflies (45
//                           shuffles), lane 0 issues the 9 atomics;
//                           spread_lanes: the transposed simd_sum9 (12
//                           shuffles) leaves each total in its own lane, and
//                           those 9 lanes issue one atomic each
//   SPLAT_SPEC_DETERMINISTIC  no float atomics: each (tile, splat) pair's
//                           gradient is reduced in a fixed order (simd_sum,
//                           then SIMD groups in index order) and written to
//                           its slot pair_grad[9 * emission index]; the
//                           per-Gaussian sum happens in project_backward.
//   SPLAT_SPEC_ABSGRAD      1: also sums each pixel's |d mean2d| (x, y apart)
//                           into abs_grads, 2 floats per Gaussian (atomics,
//                           one pair per SIMD group) or, deterministic, per
//                           pair slot (summed per Gaussian by
//                           absgrad_pair_sum, train_absgrad.h); 0: abs_grads
//                           is never touched.
// SPLAT_BWD_COMPACT (a define, 1 unless SPLAT_NVRTC_OPTIONS sets 0 for the
// A/B): the chunk's live pixels, those whose last contributor lies in or
// behind it, are gathered in group order onto the first threads, two a thread
// as above, so a chunk deep in a tile where a quarter of the pixels still
// blend runs one SIMD group's loads, reductions and atomics per splat instead
// of four mostly idle ones. Each pixel's gradient terms are the same; the
// SIMD groups sum other sets of pixels, so the atomics' sums round otherwise.
// 0 keeps each pixel on its own thread.
// Gradient layout per Gaussian (or pair): mean2d.xy, conic.xyz, opacity,
// colour.rgb.
#pragma once
#include "cover_record.h"
#include "rasterize_forward.h"
#include "tile_cover.h"

#ifndef SPLAT_SPEC_BWD_REDUCE
#define SPLAT_SPEC_BWD_REDUCE SPLAT_BWD_REDUCE_SIMD
#endif
#ifndef SPLAT_SPEC_BWD_RANGE
#define SPLAT_SPEC_BWD_RANGE SPLAT_BWD_RANGE_LAST_CONTRIBUTOR
#endif
#ifndef SPLAT_SPEC_BWD_SPARSE
#define SPLAT_SPEC_BWD_SPARSE SPLAT_BWD_SPARSE_WARP_ANY
#endif
#ifndef SPLAT_SPEC_BWD_ATOMIC
#define SPLAT_SPEC_BWD_ATOMIC SPLAT_BWD_ATOMIC_LANE_ZERO
#endif
#ifndef SPLAT_SPEC_DETERMINISTIC
#define SPLAT_SPEC_DETERMINISTIC 0
#endif
#ifndef SPLAT_SPEC_ABSGRAD
#define SPLAT_SPEC_ABSGRAD 0
#endif
#ifndef SPLAT_BWD_COMPACT
#define SPLAT_BWD_COMPACT 1
#endif

// The threadgroup (SPLAT_BWD_THREADS, SPLAT_BWD_PIXELS: params.h).
SPLAT_STATIC_ASSERT(SPLAT_BWD_THREADS % SPLAT_SIMD_WIDTH == 0, "whole SIMD groups");
SPLAT_STATIC_ASSERT(64 % (SPLAT_BWD_PIXELS * SPLAT_SIMD_WIDTH) == 0,
                    "a SIMD group's slots lie in one quadrant of its tile (tile_group_pixel)");

// Splats per deterministic reduction round, and threadgroup memory sizes (in
// elements) the entry points declare.
#define SPLAT_DET_SLOTS 32
#define SPLAT_BWD_TG_RED_FLOATS ((SPLAT_PAIR_GRAD + 1) * SPLAT_BWD_THREADS)
// Deterministic: the 9 gradients per (slot, SIMD group), then the 2 absgrad sums.
#define SPLAT_BWD_DET_ABS_AT (SPLAT_DET_SLOTS * SPLAT_BWD_WARPS * SPLAT_PAIR_GRAD)
#define SPLAT_BWD_DET_RED_FLOATS (SPLAT_DET_SLOTS * SPLAT_BWD_WARPS * (SPLAT_PAIR_GRAD + 2))
#define SPLAT_BWD_RED_FLOATS \
  (SPLAT_BWD_TG_RED_FLOATS > SPLAT_BWD_DET_RED_FLOATS ? SPLAT_BWD_TG_RED_FLOATS : SPLAT_BWD_DET_RED_FLOATS)
#define SPLAT_BWD_PART_FLOATS ((SPLAT_PAIR_GRAD + 1) * SPLAT_BWD_WARPS)

SPLAT_FUNC void rasterize_backward_body(
    SimtThread t, SPLAT_CONST_MEM const CameraParams& cam, SPLAT_CONST_MEM const RasterParams& rp,
    SPLAT_CONST_MEM const BackwardParams& bp, SPLAT_DEVICE_MEM const uint32_t* ranges,
    SPLAT_DEVICE_MEM const uint32_t* sorted_ids, SPLAT_DEVICE_MEM const SplatRecord* records,
    SPLAT_DEVICE_MEM const float* final_T, SPLAT_DEVICE_MEM const uint32_t* n_contrib,
    SPLAT_DEVICE_MEM const float* checkpoints, SPLAT_DEVICE_MEM const uint32_t* chunk_tiles,
    SPLAT_DEVICE_MEM const float* d_image, SPLAT_DEVICE_MEM const float* d_alpha, SPLAT_DEVICE_MEM const CoverRecord* covers,
    SPLAT_DEVICE_MEM const uint32_t* pair_ranges, SPLAT_DEVICE_MEM float* grads,
    SPLAT_DEVICE_MEM float* abs_grads,  // SPLAT_SPEC_ABSGRAD: 2 per Gaussian (deterministic: per pair)
    SPLAT_TG_MEM float* s_splats,  // SPLAT_GROUP_SIZE * SPLAT_BATCH_FLOATS
    SPLAT_TG_MEM uint32_t* s_ids,  // SPLAT_GROUP_SIZE: Gaussian id (deterministic: pair slot)
    SPLAT_TG_MEM uint32_t* s_warp, // SPLAT_BWD_WARPS + 1
    SPLAT_TG_MEM float* s_red,     // SPLAT_BWD_RED_FLOATS (tg, deterministic)
    SPLAT_TG_MEM float* s_part,    // SPLAT_BWD_PART_FLOATS (tg)
    SPLAT_TG_MEM uint32_t* s_live) {  // SPLAT_GROUP_SIZE (SPLAT_BWD_COMPACT)
  const bool det = SPLAT_SPEC_DETERMINISTIC != 0;
  const bool use_simd = !det && SPLAT_SPEC_BWD_REDUCE == SPLAT_BWD_REDUCE_SIMD;
  const bool use_tg = !det && SPLAT_SPEC_BWD_REDUCE == SPLAT_BWD_REDUCE_TG;
  const bool use_original = !det && SPLAT_SPEC_BWD_REDUCE == SPLAT_BWD_REDUCE_ORIGINAL;
  const bool sparse = SPLAT_SPEC_BWD_SPARSE == SPLAT_BWD_SPARSE_WARP_ANY;
  const bool lane_zero = SPLAT_SPEC_BWD_ATOMIC == SPLAT_BWD_ATOMIC_LANE_ZERO;
  // Variants with threadgroup barriers per splat visit every splat of a batch.
  const bool uniform_walk = det || use_tg;
  const bool absgrad = SPLAT_SPEC_ABSGRAD != 0;

  TileChunk c;
  if (!tile_chunk(t.group, rp, ranges, chunk_tiles, c)) return;
  const uint32_t tile = c.tile, start = c.start, end = c.end, batch_lo = c.lo, batch_hi = c.hi;
  const uint32_t count = batch_hi - batch_lo;

  // This thread's pixels: the tile pixels lane_pixel(t, SPLAT_BWD_PIXELS, p),
  // or with SPLAT_BWD_COMPACT the live pixels at those slots of s_live
  // (gathered in group order, so that a SIMD group's lie in few blocks).
  uint32_t pixel[SPLAT_BWD_PIXELS];
  bool held[SPLAT_BWD_PIXELS];
  if (SPLAT_BWD_COMPACT != 0) {
    // Thread i counts group slots 2i and 2i + 1; live: blended in this chunk or later.
    uint32_t live_mine[2], mine_pixel[2];
    uint32_t mine = 0u;
    for (uint32_t q = 0; q < 2u; ++q) {
      mine_pixel[q] = tile_group_pixel(2u * t.tid + q);
      const TilePixel a = tile_pixel(cam, tile, mine_pixel[q]);
      live_mine[q] = a.inside && n_contrib[a.index] > batch_lo - start ? 1u : 0u;
      mine += live_mine[q];
    }
    uint32_t live;
    const uint32_t rank = group_exclusive_scan(t, mine, SPLAT_BWD_WARPS, s_warp, live);
    if (live == 0u) return;
    if (live_mine[0] != 0u) s_live[rank] = mine_pixel[0];
    if (live_mine[1] != 0u) s_live[rank + live_mine[0]] = mine_pixel[1];
    sp_group_barrier();  // s_live complete
    SPLAT_UNROLL
    for (int p = 0; p < SPLAT_BWD_PIXELS; ++p) {
      const uint32_t slot = lane_slot(t, SPLAT_BWD_PIXELS, (uint32_t)p);
      held[p] = slot < live;
      pixel[p] = held[p] ? s_live[slot] : 0u;
    }
  } else {
    SPLAT_UNROLL
    for (int p = 0; p < SPLAT_BWD_PIXELS; ++p) {
      pixel[p] = lane_pixel(t, SPLAT_BWD_PIXELS, (uint32_t)p);
      held[p] = true;
    }
  }
  TilePixel px[SPLAT_BWD_PIXELS];
  vec2 pix[SPLAT_BWD_PIXELS];
  uint32_t nc[SPLAT_BWD_PIXELS];
  uint32_t nc_max = 0u;
  SPLAT_UNROLL
  for (int p = 0; p < SPLAT_BWD_PIXELS; ++p) {
    px[p] = tile_pixel(cam, tile, pixel[p]);
    px[p].inside = px[p].inside && held[p];
    pix[p] = make_vec2((float)px[p].x + 0.5f, (float)px[p].y + 0.5f);
    nc[p] = px[p].inside ? n_contrib[px[p].index] : 0u;
    nc_max = nc[p] > nc_max ? nc[p] : nc_max;
  }
  // The blocks (tile_cover_blocks) holding the SIMD group's pixels that
  // blend in this chunk or behind it: a splat reaching none of them has
  // nothing to give the group.
  uint32_t blocks = 0u;
  SPLAT_UNROLL
  for (int p = 0; p < SPLAT_BWD_PIXELS; ++p) blocks |= nc[p] > batch_lo - start ? tile_pixel_block(pixel[p]) : 0u;
  const uint32_t group_blocks = simd_or(blocks);

  // Positions (in the tile's list) this SIMD group walks; a chunk wholly
  // behind every pixel's last contributor has nothing to do.
  uint32_t warp_limit;
  if (SPLAT_SPEC_BWD_RANGE == SPLAT_BWD_RANGE_LAST_CONTRIBUTOR) {
    warp_limit = simd_max(nc_max);
    if (t.lane == 0) s_warp[t.warp] = warp_limit;
    sp_group_barrier();
    uint32_t block_limit = 0u;
    for (uint32_t w = 0; w < SPLAT_BWD_WARPS; ++w) block_limit = s_warp[w] > block_limit ? s_warp[w] : block_limit;
    if (batch_lo - start >= block_limit) return;
  } else {
    warp_limit = end - start;
  }

  // Each pixel's state behind this chunk: the forward's checkpoint at its
  // end (transmittance T, colour behind normalised by T); past the last
  // contributor, T_final and the background.
  const vec3 bg = make_vec3(rp.background[0], rp.background[1], rp.background[2]);
  BlendBackwardState st[SPLAT_BWD_PIXELS];
  SPLAT_UNROLL
  for (int p = 0; p < SPLAT_BWD_PIXELS; ++p) {
    const TilePixel q = px[p];
    vec3 d_pix = q.inside ? load_vec3(d_image, q.index) : make_vec3(0.f, 0.f, 0.f);
    float d_a = (q.inside && bp.has_d_alpha != 0u) ? d_alpha[q.index] : 0.f;
    st[p] = blend_backward_begin(q.inside ? final_T[q.index] : 1.f, bg, d_pix, d_a);
    if (batch_hi - start < nc[p]) {
      uint32_t at = t.group * (uint32_t)SPLAT_GROUP_SIZE + pixel[p];
      SPLAT_DEVICE_MEM const float* ck = checkpoints + 4u * at;
      st[p].T = ck[0];
      st[p].behind = make_vec3(ck[1], ck[2], ck[3]);
    }
  }

  for (uint32_t k = t.tid; k < count; k += SPLAT_BWD_THREADS) {
    uint32_t g = sorted_ids[batch_hi - 1u - k];
    store_batch_splat(s_splats, k, records, g, false, px[0].tile_x, px[0].tile_y);
    if (det) {
      // The pair's emission slot: its tile's rank among the Gaussian's
      // covered tiles (tile_bin.h), kept inside the Gaussian's slots.
      TileCover tc = load_tile_cover(covers, g);
      uint32_t rank = tile_cover_rank(tc, (int)px[0].tile_x, (int)px[0].tile_y);
      uint32_t slots = pair_ranges[2 * g + 1];
      s_ids[k] = pair_ranges[2 * g] + (rank < slots ? rank : slots - 1u);
    } else {
      s_ids[k] = g;
    }
  }
  sp_group_barrier();
  // Splats of this batch above the SIMD group's limit cannot contribute.
  uint32_t above = batch_hi - start > warp_limit ? batch_hi - start - warp_limit : 0u;
  uint32_t first = uniform_walk ? 0u : (above < count ? above : count);
  const Sum9Lanes sum9 = simd_sum9_lanes(t.lane);
  for (uint32_t j = first; j < count; ++j) {
    vec4 tail = batch_splat_blocks(s_splats, j);
    // The SIMD group skips a splat that reaches none of its pixels' blocks
    // (never in the variants that meet at a barrier per splat).
    if (!uniform_walk && batch_splat_misses(tail, group_blocks)) continue;
    uint32_t position = batch_hi - 1u - j - start;
    BlendSplat b = load_blend_splat(s_splats, j, tail, false);
    BlendHit h[SPLAT_BWD_PIXELS];
    bool contrib = false;
    SPLAT_UNROLL
    for (int p = 0; p < SPLAT_BWD_PIXELS; ++p) {
      h[p] = blend_hit(b, pix[p], position < nc[p]);
      contrib = contrib || h[p].blended;
    }
    // Every lane steps each of its pixels (a pixel the splat misses steps
    // with zeros), so the group skips a splat no lane blends before the math.
    if (sparse && !uniform_walk && !simd_any(contrib)) continue;
    // This thread's pixels' gradients summed as moments (blend.h), then
    // formed once.
    float v[SPLAT_PAIR_GRAD];
    float va[2] = {0.f, 0.f};  // absgrad: this thread's pixels' |d mean2d|
    SPLAT_UNROLL
    for (int p = 0; p < SPLAT_BWD_PIXELS; ++p) {
      BlendGradTerms f = blend_backward_terms(b, pix[p], h[p], st[p]);
      if (p == 0) {
        blend_moments_store(v, f, st[p].d_pixel);
      } else {
        blend_moments_add(v, f, st[p].d_pixel);
      }
      if (absgrad) {
        vec2 gm = blend_grad_mean2d(b.conic, f);
        va[0] += sp_max(gm.x, -gm.x);
        va[1] += sp_max(gm.y, -gm.y);
      }
    }
    blend_moments_gradients(v, b.conic);
    // absgrad outside the deterministic variant: per SIMD group, two atomics
    // (lanes 1 and 3, which the spread reduction leaves idle).
    if (absgrad && !det) {
      if (use_original) {
        if (contrib) {
          sp_atomic_add(abs_grads + 2u * s_ids[j], va[0]);
          sp_atomic_add(abs_grads + 2u * s_ids[j] + 1u, va[1]);
        }
      } else {
        float ax = simd_sum(va[0]), ay = simd_sum(va[1]);
        bool issue = !sparse || simd_any(contrib);  // every lane takes part in the vote
        if (issue && t.lane == 1u) sp_atomic_add(abs_grads + 2u * s_ids[j], ax);
        if (issue && t.lane == 3u) sp_atomic_add(abs_grads + 2u * s_ids[j] + 1u, ay);
      }
    }

    if (use_original) {
      if (contrib) {
        SPLAT_DEVICE_MEM float* dst = grads + SPLAT_PAIR_GRAD * s_ids[j];
        for (int c = 0; c < SPLAT_PAIR_GRAD; ++c) sp_atomic_add(dst + c, v[c]);
      }
    } else if (use_simd) {
      SPLAT_DEVICE_MEM float* dst = grads + SPLAT_PAIR_GRAD * s_ids[j];
      if (lane_zero) {
        for (int c = 0; c < SPLAT_PAIR_GRAD; ++c) v[c] = simd_sum(v[c]);
        if (t.lane == 0)
          for (int c = 0; c < SPLAT_PAIR_GRAD; ++c) sp_atomic_add(dst + c, v[c]);
      } else {
        float total = simd_sum9(v, sum9);
        if (sum9.component >= 0) sp_atomic_add(dst + sum9.component, total);
      }
    } else if (use_tg) {
      // Rows 0..8: gradients; row 9: contribution flags.
      for (int c = 0; c < SPLAT_PAIR_GRAD; ++c) s_red[c * SPLAT_BWD_THREADS + t.tid] = v[c];
      s_red[SPLAT_PAIR_GRAD * SPLAT_BWD_THREADS + t.tid] = contrib ? 1.f : 0.f;
      sp_group_barrier();
      if (t.tid < SPLAT_BWD_PART_FLOATS) {
        uint32_t row = t.tid / SPLAT_BWD_WARPS, part = t.tid % SPLAT_BWD_WARPS;
        SPLAT_TG_MEM const float* src = s_red + row * SPLAT_BWD_THREADS + part * SPLAT_SIMD_WIDTH;
        float sum = 0.f;
        for (uint32_t k = 0; k < SPLAT_SIMD_WIDTH; ++k) sum += src[k];
        s_part[t.tid] = sum;
      }
      sp_group_barrier();
      bool issuer = lane_zero ? t.tid == 0 : t.tid < SPLAT_PAIR_GRAD;
      if (issuer) {
        float flags = 0.f;
        for (uint32_t w = 0; w < SPLAT_BWD_WARPS; ++w) flags += s_part[SPLAT_PAIR_GRAD * SPLAT_BWD_WARPS + w];
        if (!sparse || flags > 0.f) {
          SPLAT_DEVICE_MEM float* dst = grads + SPLAT_PAIR_GRAD * s_ids[j];
          uint32_t c0 = lane_zero ? 0u : t.tid;
          uint32_t c1 = lane_zero ? (uint32_t)SPLAT_PAIR_GRAD : t.tid + 1u;
          for (uint32_t c = c0; c < c1; ++c) {
            float sum = 0.f;
            for (uint32_t w = 0; w < SPLAT_BWD_WARPS; ++w) sum += s_part[c * SPLAT_BWD_WARPS + w];
            sp_atomic_add(dst + c, sum);
          }
        }
      }
    } else {  // deterministic
      uint32_t slot = j % SPLAT_DET_SLOTS;
      bool any = simd_any(contrib);
      for (int c = 0; c < SPLAT_PAIR_GRAD; ++c) v[c] = any ? simd_sum(v[c]) : 0.f;
      if (absgrad)
        for (int c = 0; c < 2; ++c) va[c] = any ? simd_sum(va[c]) : 0.f;
      if (t.lane == 0) {
        for (int c = 0; c < SPLAT_PAIR_GRAD; ++c)
          s_red[(slot * SPLAT_BWD_WARPS + t.warp) * SPLAT_PAIR_GRAD + c] = v[c];
        if (absgrad)
          for (int c = 0; c < 2; ++c) s_red[SPLAT_BWD_DET_ABS_AT + (slot * SPLAT_BWD_WARPS + t.warp) * 2 + c] = va[c];
      }
      if (slot == SPLAT_DET_SLOTS - 1 || j == count - 1) {
        sp_group_barrier();
        uint32_t slots = slot + 1u, first_j = j - slot;
        for (uint32_t it = t.tid; it < slots * SPLAT_PAIR_GRAD; it += SPLAT_BWD_THREADS) {
          uint32_t sl = it / SPLAT_PAIR_GRAD, c = it % SPLAT_PAIR_GRAD;
          float sum = 0.f;
          for (uint32_t w = 0; w < SPLAT_BWD_WARPS; ++w) sum += s_red[(sl * SPLAT_BWD_WARPS + w) * SPLAT_PAIR_GRAD + c];
          // 64-bit: 9 x the emission index passes 2^32 from 477M pairs.
          grads[(uint64_t)SPLAT_PAIR_GRAD * s_ids[first_j + sl] + c] = sum;
        }
        if (absgrad)
          for (uint32_t it = t.tid; it < slots * 2u; it += SPLAT_BWD_THREADS) {
            uint32_t sl = it / 2u, c = it % 2u;
            float sum = 0.f;
            for (uint32_t w = 0; w < SPLAT_BWD_WARPS; ++w) sum += s_red[SPLAT_BWD_DET_ABS_AT + (sl * SPLAT_BWD_WARPS + w) * 2u + c];
            abs_grads[(uint64_t)2u * s_ids[first_j + sl] + c] = sum;
          }
        sp_group_barrier();
      }
    }
  }
}
