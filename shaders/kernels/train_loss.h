// The fused training loss (1 - w) L1 + w (1 - SSIM) and its gradient with
// respect to the rendered image, against a uint8 ground truth resident on the
// device. Two dispatches of one threadgroup (256 threads) per 16x16 tile:
//   ssim_forward   per channel: the tile plus a 5-pixel halo of the render
//                  and the target in threadgroup memory, the separable 11-tap
//                  blur of (x, y, x^2, y^2, xy) (horizontal then vertical),
//                  the SSIM map and its partials d_map * d ssim / d (mu_x,
//                  xx, xy) -> partials[9 planes]; the tile's sums of |x - y|
//                  and of the map -> tile_sums[2 tile ..]
//   ssim_backward  per channel: the same blur of the three partial planes,
//                  then d_image = d_l1 sign(x - y) + G*p0 + 2 x G*p1 + y G*p2.
//                  Threadgroup 0 also reduces tile_sums in a fixed order into
//                  loss[0] (the value), loss[1] (mean L1), loss[2] (mean SSIM);
//                  loss[3] is several views' sum (train_optim.h; here when
//                  they are binned together, p.views > 1).
// The blur sums its 11 taps in index order with zeros outside the image, the
// same float operations as the CPU schedule (cpp/cpu/cpu_loss.cpp), so both
// produce the same bits; the per-pixel math is shaders/common/ssim.h.
// With a mask (p.has_mask), a masked pixel is read as outside the image (render
// and target 0), adds nothing to the sums and gets a zero gradient.
// Views rasterized together (ssim_*_views_body): one launch pair for up to
// SPLAT_LOSS_MAX_VIEWS views of one size, threadgroup g on view g / T's tile
// g % T, each view's own image, target, mask and means (LossViewsParams), the
// per-tile work and sums of one view's launch, and threadgroup 0 reducing the
// views' losses one after another as their launches would: the same bits.
#pragma once
#include "adam.h"  // accumulate_view
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
// Threadgroup floats the entry points declare.
#define SPLAT_LOSS_FWD_IN (2 * SPLAT_LOSS_HALO)
#define SPLAT_LOSS_FWD_H (5 * SPLAT_LOSS_ROWS)
#define SPLAT_LOSS_BWD_IN (3 * SPLAT_LOSS_HALO)
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

// One tile of one view (p: that view's; tile_sums: its tiles').
SPLAT_FUNC void ssim_forward_tile(SimtThread t, LossParams p, uint32_t tile_index,
                                  SPLAT_DEVICE_MEM const float* image, SPLAT_DEVICE_MEM const splat_byte* target,
                                  SPLAT_DEVICE_MEM const splat_byte* mask,
                                  SPLAT_DEVICE_MEM float* partials, SPLAT_DEVICE_MEM float* tile_sums,
                                  SPLAT_TG_MEM float* s_in, SPLAT_TG_MEM float* s_h, SPLAT_TG_MEM float* s_red) {
  const LossTile g = loss_tile(t, p, tile_index);
  const uint32_t tile = g.tile;
  const int ox = g.ox, oy = g.oy, W = g.W, H = g.H;
  const uint32_t plane = g.plane, pix = g.pix;
  const bool inside = g.inside, counts = loss_pixel_counts(p, mask, g);
  SPLAT_TG_MEM float* s_x = s_in;
  SPLAT_TG_MEM float* s_y = s_in + SPLAT_LOSS_HALO;
  float l1 = 0.f, ssim_sum = 0.f;
  for (uint32_t c = 0; c < 3u; ++c) {
    for (uint32_t k = t.tid; k < SPLAT_LOSS_HALO; k += SPLAT_GROUP_SIZE) {
      int gx = ox + (int)(k % SPLAT_LOSS_SPAN) - SSIM_RADIUS, gy = oy + (int)(k / SPLAT_LOSS_SPAN) - SSIM_RADIUS;
      float x = 0.f, y = 0.f;
      if (gx >= 0 && gx < W && gy >= 0 && gy < H && loss_counts(p, mask, (uint32_t)(gy * W + gx))) {
        uint32_t e = 3u * (uint32_t)(gy * W + gx) + c;
        x = image[e];
        y = (float)target[e] * (1.f / 255.f);
      }
      s_x[k] = x;
      s_y[k] = y;
    }
    sp_group_barrier();
    // Horizontal pass over the 26 rows of the halo, the tile's 16 columns.
    for (uint32_t k = t.tid; k < SPLAT_LOSS_ROWS; k += SPLAT_GROUP_SIZE) {
      uint32_t row = k / SPLAT_TILE_SIZE, col = k % SPLAT_TILE_SIZE;
      SPLAT_TG_MEM const float* rx = s_x + row * SPLAT_LOSS_SPAN + col;
      SPLAT_TG_MEM const float* ry = s_y + row * SPLAT_LOSS_SPAN + col;
      float a = 0.f, b = 0.f, xx = 0.f, yy = 0.f, xy = 0.f;
      for (int j = 0; j < SSIM_TAPS; ++j) {
        float w = ssim_tap(j), x = rx[j], y = ry[j];
        a += w * x;
        b += w * y;
        xx += w * (x * x);
        yy += w * (y * y);
        xy += w * (x * y);
      }
      s_h[k] = a;
      s_h[SPLAT_LOSS_ROWS + k] = b;
      s_h[2 * SPLAT_LOSS_ROWS + k] = xx;
      s_h[3 * SPLAT_LOSS_ROWS + k] = yy;
      s_h[4 * SPLAT_LOSS_ROWS + k] = xy;
    }
    sp_group_barrier();
    // Vertical pass: pixel (tid % 16, tid / 16) of the tile.
    if (inside) {
      uint32_t col = t.tid % SPLAT_TILE_SIZE, row0 = t.tid / SPLAT_TILE_SIZE;
      float v[5];
      for (int q = 0; q < 5; ++q) {
        SPLAT_TG_MEM const float* src = s_h + q * SPLAT_LOSS_ROWS + row0 * SPLAT_TILE_SIZE + col;
        float s = 0.f;
        for (int j = 0; j < SSIM_TAPS; ++j) s += ssim_tap(j) * src[j * SPLAT_TILE_SIZE];
        v[q] = s;
      }
      SsimStats st;
      st.mu_x = v[0];
      st.mu_y = v[1];
      st.xx = v[2];
      st.yy = v[3];
      st.xy = v[4];
      float map = ssim_value(st);
      vec3 g = ssim_value_grad(st);
      partials[(3u * c) * plane + pix] = counts ? p.d_map * g.x : 0.f;
      partials[(3u * c + 1u) * plane + pix] = counts ? p.d_map * g.y : 0.f;
      partials[(3u * c + 2u) * plane + pix] = counts ? p.d_map * g.z : 0.f;
      if (counts) {
        uint32_t centre = (row0 + SSIM_RADIUS) * SPLAT_LOSS_SPAN + col + SSIM_RADIUS;
        float d = s_x[centre] - s_y[centre];
        l1 += d < 0.f ? -d : d;
        ssim_sum += map;
      }
    }
    sp_group_barrier();  // the halo is reloaded for the next channel
  }
  float tl1 = loss_block_sum(t, l1, s_red);
  float tssim = loss_block_sum(t, ssim_sum, s_red);
  if (t.tid == 0) {
    tile_sums[2u * tile] = tl1;
    tile_sums[2u * tile + 1u] = tssim;
  }
}

// d_image over one tile of one view.
SPLAT_FUNC void ssim_backward_tile(SimtThread t, LossParams p, uint32_t tile_index,
                                   SPLAT_DEVICE_MEM const float* image, SPLAT_DEVICE_MEM const splat_byte* target,
                                   SPLAT_DEVICE_MEM const splat_byte* mask, SPLAT_DEVICE_MEM const float* partials,
                                   SPLAT_DEVICE_MEM float* d_image, SPLAT_TG_MEM float* s_in, SPLAT_TG_MEM float* s_h) {
  const LossTile g = loss_tile(t, p, tile_index);
  const int ox = g.ox, oy = g.oy, W = g.W, H = g.H;
  const uint32_t plane = g.plane, pix = g.pix;
  const bool inside = g.inside, counts = loss_pixel_counts(p, mask, g);
  for (uint32_t c = 0; c < 3u; ++c) {
    for (uint32_t k = t.tid; k < SPLAT_LOSS_HALO; k += SPLAT_GROUP_SIZE) {
      int gx = ox + (int)(k % SPLAT_LOSS_SPAN) - SSIM_RADIUS, gy = oy + (int)(k / SPLAT_LOSS_SPAN) - SSIM_RADIUS;
      bool in = gx >= 0 && gx < W && gy >= 0 && gy < H;
      uint32_t e = in ? (uint32_t)(gy * W + gx) : 0u;
      for (uint32_t q = 0; q < 3u; ++q) s_in[q * SPLAT_LOSS_HALO + k] = in ? partials[(3u * c + q) * plane + e] : 0.f;
    }
    sp_group_barrier();
    for (uint32_t k = t.tid; k < SPLAT_LOSS_ROWS; k += SPLAT_GROUP_SIZE) {
      uint32_t row = k / SPLAT_TILE_SIZE, col = k % SPLAT_TILE_SIZE;
      for (uint32_t q = 0; q < 3u; ++q) {
        SPLAT_TG_MEM const float* r = s_in + q * SPLAT_LOSS_HALO + row * SPLAT_LOSS_SPAN + col;
        float s = 0.f;
        for (int j = 0; j < SSIM_TAPS; ++j) s += ssim_tap(j) * r[j];
        s_h[q * SPLAT_LOSS_ROWS + k] = s;
      }
    }
    sp_group_barrier();
    if (inside) {
      uint32_t col = t.tid % SPLAT_TILE_SIZE, row0 = t.tid / SPLAT_TILE_SIZE;
      float b[3];
      for (uint32_t q = 0; q < 3u; ++q) {
        SPLAT_TG_MEM const float* src = s_h + q * SPLAT_LOSS_ROWS + row0 * SPLAT_TILE_SIZE + col;
        float s = 0.f;
        for (int j = 0; j < SSIM_TAPS; ++j) s += ssim_tap(j) * src[j * SPLAT_TILE_SIZE];
        b[q] = s;
      }
      uint32_t e = 3u * pix + c;
      float x = image[e], y = (float)target[e] * (1.f / 255.f);
      float diff = x - y;
      float sign = diff > 0.f ? 1.f : (diff < 0.f ? -1.f : 0.f);
      d_image[e] = counts ? p.d_l1 * sign + b[0] + 2.f * x * b[1] + y * b[2] : 0.f;
    }
    sp_group_barrier();
  }
}

// One view's loss from its tiles' sums, by one whole threadgroup: the sums in
// a fixed order (each thread a strided run, then the threadgroup sum), so it
// is the same on every run.
SPLAT_FUNC void ssim_loss_reduce(SimtThread t, LossParams p, SPLAT_DEVICE_MEM const float* tile_sums,
                                 SPLAT_DEVICE_MEM float* loss, SPLAT_TG_MEM float* s_red) {
  float l1 = 0.f, ssim_sum = 0.f;
  for (uint32_t k = t.tid; k < p.num_tiles; k += SPLAT_GROUP_SIZE) {
    l1 += tile_sums[2u * k];
    ssim_sum += tile_sums[2u * k + 1u];
  }
  float tl1 = loss_block_sum(t, l1, s_red);
  float tssim = loss_block_sum(t, ssim_sum, s_red);
  if (t.tid == 0) {
    float mean_l1 = tl1 * p.inv_count, mean_ssim = tssim * p.inv_count;
    loss[0] = (1.f - p.ssim_weight) * mean_l1 + p.ssim_weight * (1.f - mean_ssim);
    if (p.views > 1u) accumulate_view(p.view_k, p.views, loss[0], loss[3]);
    loss[1] = mean_l1;
    loss[2] = mean_ssim;
  }
}

SPLAT_FUNC void ssim_forward_body(SimtThread t, SPLAT_CONST_MEM const LossParams& p,
                                  SPLAT_DEVICE_MEM const float* image, SPLAT_DEVICE_MEM const splat_byte* target,
                                  SPLAT_DEVICE_MEM const splat_byte* mask,
                                  SPLAT_DEVICE_MEM float* partials, SPLAT_DEVICE_MEM float* tile_sums,
                                  SPLAT_TG_MEM float* s_in,   // SPLAT_LOSS_FWD_IN
                                  SPLAT_TG_MEM float* s_h,    // SPLAT_LOSS_FWD_H
                                  SPLAT_TG_MEM float* s_red) {  // SPLAT_LOSS_RED
  ssim_forward_tile(t, loss_params_of(p), t.group, image, target, mask, partials, tile_sums, s_in, s_h, s_red);
}

// Threadgroup 0 also writes the loss (after its tile: every threadgroup of
// the forward has written its sums).
SPLAT_FUNC void ssim_backward_body(SimtThread t, SPLAT_CONST_MEM const LossParams& p,
                                   SPLAT_DEVICE_MEM const float* image, SPLAT_DEVICE_MEM const splat_byte* target,
                                   SPLAT_DEVICE_MEM const splat_byte* mask,
                                   SPLAT_DEVICE_MEM const float* partials, SPLAT_DEVICE_MEM const float* tile_sums,
                                   SPLAT_DEVICE_MEM float* d_image, SPLAT_DEVICE_MEM float* loss,
                                   SPLAT_TG_MEM float* s_in,   // SPLAT_LOSS_BWD_IN
                                   SPLAT_TG_MEM float* s_h,    // SPLAT_LOSS_BWD_H
                                   SPLAT_TG_MEM float* s_red) {  // SPLAT_LOSS_RED
  const LossParams lp = loss_params_of(p);
  ssim_backward_tile(t, lp, t.group, image, target, mask, partials, d_image, s_in, s_h);
  if (t.group == 0) ssim_loss_reduce(t, lp, tile_sums, loss, s_red);
}

// View v of a batched launch: its LossParams (the batch's size and weight,
// its own means and mask; view_k its place in the batch).
SPLAT_FUNC LossParams loss_view_params(SPLAT_CONST_MEM const LossViewsParams& b, uint32_t v) {
  LossParams p = loss_params_of(b.base);
  p.d_l1 = b.views[v].d_l1;
  p.d_map = b.views[v].d_map;
  p.inv_count = b.views[v].inv_count;
  p.ssim_weight = b.views[v].ssim_weight;
  p.has_mask = b.views[v].has_mask;
  p.view_k = b.base.view_k + v;
  return p;
}

SPLAT_FUNC void ssim_forward_views_body(SimtThread t, SPLAT_CONST_MEM const LossViewsParams& b,
                                        SPLAT_DEVICE_MEM const float* image, SPLAT_DEVICE_MEM const splat_byte* targets,
                                        SPLAT_DEVICE_MEM const splat_byte* masks, SPLAT_DEVICE_MEM float* partials,
                                        SPLAT_DEVICE_MEM float* tile_sums, SPLAT_TG_MEM float* s_in,
                                        SPLAT_TG_MEM float* s_h, SPLAT_TG_MEM float* s_red) {
  const uint32_t tiles = b.base.num_tiles, v = t.group / tiles;
  const uint64_t plane = (uint64_t)b.base.width * b.base.height;
  ssim_forward_tile(t, loss_view_params(b, v), t.group - v * tiles, image + 3u * plane * v,
                    targets + b.views[v].target_offset, masks + b.views[v].mask_offset, partials + 9u * plane * v,
                    tile_sums + 2u * tiles * v, s_in, s_h, s_red);
}

// Threadgroup 0 writes the views' losses in view order after its tile, as
// each view's own launch would (loss[0] the views' mean at the batch's last).
SPLAT_FUNC void ssim_backward_views_body(SimtThread t, SPLAT_CONST_MEM const LossViewsParams& b,
                                         SPLAT_DEVICE_MEM const float* image,
                                         SPLAT_DEVICE_MEM const splat_byte* targets,
                                         SPLAT_DEVICE_MEM const splat_byte* masks,
                                         SPLAT_DEVICE_MEM const float* partials,
                                         SPLAT_DEVICE_MEM const float* tile_sums, SPLAT_DEVICE_MEM float* d_image,
                                         SPLAT_DEVICE_MEM float* loss, SPLAT_TG_MEM float* s_in,
                                         SPLAT_TG_MEM float* s_h, SPLAT_TG_MEM float* s_red) {
  const uint32_t tiles = b.base.num_tiles, v = t.group / tiles;
  const uint64_t plane = (uint64_t)b.base.width * b.base.height;
  ssim_backward_tile(t, loss_view_params(b, v), t.group - v * tiles, image + 3u * plane * v,
                     targets + b.views[v].target_offset, masks + b.views[v].mask_offset, partials + 9u * plane * v,
                     d_image + 3u * plane * v, s_in, s_h);
  if (t.group != 0) return;
  for (uint32_t k = 0; k < b.count; ++k)
    ssim_loss_reduce(t, loss_view_params(b, k), tile_sums + 2u * tiles * k, loss, s_red);
}
