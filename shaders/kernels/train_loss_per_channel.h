// The loss's tile bodies as they were before the halo of all three channels
// was loaded at once (train_loss_all_channels.h): a channel at a time, the
// horizontal pass an output a thread. Kept for the A/B
// (SPLAT_LOSS_LOAD_PER_CHANNEL=1, an NVRTC define) until an H200 has timed
// both (an H100 has: docs/gpu.md); the same bits.
#pragma once
#include "train_loss_tile.h"

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

