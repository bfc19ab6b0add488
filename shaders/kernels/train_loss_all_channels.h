// The loss's tile bodies (train_loss.h): the halo of all three channels in
// threadgroup memory at once (s_in declared with SPLAT_TG_QUADS: its planes
// are read as 64-bit pairs), the horizontal pass two outputs a thread.
#pragma once
#include "train_loss_tile.h"

// Horizontal outputs a thread computes along a row: the taps' loads (and the
// forward's products) serve both, 12 values for 2 outputs instead of 22, and
// 208 threads cover a channel's 416 outputs in one round instead of two.
#define SPLAT_LOSS_RUN 2
#define SPLAT_LOSS_RUN_SPAN (SSIM_TAPS + SPLAT_LOSS_RUN - 1)  // 12 values a run reads

// The render (x) and the target (y) over the tile and its halo, all three
// channels, into planes s_x[c SPLAT_LOSS_HALO ..] and s_y[..] alike: a halo
// row is 78 consecutive values of the interleaved images, so neighbouring
// threads read neighbouring addresses, and the tile's loads are issued
// together rather than a channel at a time. Outside the image or masked: 0.
SPLAT_FUNC void loss_load_images(SimtThread t, SPLAT_THREAD const LossParams& p, LossTile g,
                                 SPLAT_DEVICE_MEM const float* image, SPLAT_DEVICE_MEM const splat_byte* target,
                                 SPLAT_DEVICE_MEM const splat_byte* mask, SPLAT_TG_MEM float* s_x,
                                 SPLAT_TG_MEM float* s_y) {
  const uint32_t values = 3u * SPLAT_LOSS_HALO, row_values = 3u * SPLAT_LOSS_SPAN;
  SPLAT_UNROLL
  for (uint32_t i = 0; i < (values + SPLAT_GROUP_SIZE - 1u) / SPLAT_GROUP_SIZE; ++i) {
    const uint32_t k = t.tid + i * SPLAT_GROUP_SIZE;
    if (k < values) {
      const uint32_t row = k / row_values, v = k - row * row_values, col = v / 3u, c = v - col * 3u;
      const int gx = g.ox + (int)col - SSIM_RADIUS, gy = g.oy + (int)row - SSIM_RADIUS;
      float x = 0.f, y = 0.f;
      if (gx >= 0 && gx < g.W && gy >= 0 && gy < g.H && loss_counts(p, mask, (uint32_t)(gy * g.W + gx))) {
        const uint32_t e = 3u * (uint32_t)(gy * g.W + gx) + c;
        x = image[e];
        y = (float)target[e] * (1.f / 255.f);
      }
      const uint32_t at = c * SPLAT_LOSS_HALO + row * SPLAT_LOSS_SPAN + col;
      s_x[at] = x;
      s_y[at] = y;
    }
  }
}

// A thread's run of the backward's horizontal pass, read as 64-bit pairs:
// half SIMD group h (16 lanes) takes halo row h (h < 8) or h + 8 on its
// first 8 lanes and the row 8 below on the other 8, lane m % 8 the run at
// columns 2 (m % 8) + {0, 1}. The two rows lie 8 x 26 floats apart, 16 banks
// of 32, so a half group's pair loads (8 lanes x 2 banks a row) meet no bank
// twice (a thread on row tid / 8 met a bank up to three times a load). Rows
// 0-7 pair with 8-15 and 16-17 with 24-25; 18-23 have no partner left and run
// alone: the 16 half groups of the threadgroup, 208 lanes working. False for
// an idle lane.
SPLAT_STATIC_ASSERT(SPLAT_TILE_SIZE / SPLAT_LOSS_RUN == 8 && SPLAT_GROUP_SIZE == 256 &&
                        (8 * SPLAT_LOSS_SPAN) % 32 == 16 && SPLAT_LOSS_HALO % 2 == 0 && SPLAT_LOSS_SPAN % 2 == 0,
                    "the run layout: 8 runs a row, 16 half groups, partner rows 16 banks apart, pairs aligned");
SPLAT_FUNC bool loss_run(SimtThread t, SPLAT_THREAD uint32_t& row, SPLAT_THREAD uint32_t& col) {
  const uint32_t half = t.tid / 16u, m = t.tid % 16u;
  row = (half < 8u ? half : half + 8u) + m / 8u * 8u;
  col = m % 8u * SPLAT_LOSS_RUN;
  return row < SPLAT_LOSS_SPAN;
}

// The 12 values of a run, from its row of plane `s` (8-byte aligned) as six
// 64-bit loads.
SPLAT_FUNC void loss_run_values(SPLAT_TG_MEM const float* s, uint32_t row, uint32_t col,
                                SPLAT_THREAD float* v) {
  const uint32_t pair = (row * SPLAT_LOSS_SPAN + col) / 2u;
  SPLAT_UNROLL
  for (int i = 0; i < SPLAT_LOSS_RUN_SPAN / 2; ++i) {
    vec2 w = load_tg_float2(s, pair + (uint32_t)i);
    v[2 * i] = w.x;
    v[2 * i + 1] = w.y;
  }
}

// The horizontal pass of one channel's five window sums (x, y, x^2, y^2, xy)
// over the halo's 26 rows and the tile's 16 columns into s_h[q
// SPLAT_LOSS_ROWS + row 16 + col], each output summed over its 11 taps in
// index order from 0, as the CPU schedule sums it.
SPLAT_FUNC void ssim_forward_rows(SimtThread t, SPLAT_TG_MEM const float* s_x, SPLAT_TG_MEM const float* s_y,
                                  SPLAT_TG_MEM float* s_h) {
  // Thread j < 208 the run at row j / 8, columns 2 (j % 8) + {0, 1}, with
  // scalar loads: this kernel is bound by issue, not by shared memory, and
  // with the backward's layout and pair loads (loss_run, loss_run_values) it
  // held 44-46 registers instead of 40, five threadgroups an SM instead of
  // six, and ran 6-7% longer (Nsight Compute, H100).
  if (t.tid >= SPLAT_LOSS_ROWS / SPLAT_LOSS_RUN) return;
  const uint32_t row = t.tid / (SPLAT_TILE_SIZE / SPLAT_LOSS_RUN);
  const uint32_t col = t.tid % (SPLAT_TILE_SIZE / SPLAT_LOSS_RUN) * SPLAT_LOSS_RUN;
  const uint32_t in = row * SPLAT_LOSS_SPAN + col;
  float x[SPLAT_LOSS_RUN_SPAN], y[SPLAT_LOSS_RUN_SPAN];
  SPLAT_UNROLL
  for (int i = 0; i < SPLAT_LOSS_RUN_SPAN; ++i) {
    x[i] = s_x[in + i];
    y[i] = s_y[in + i];
  }
  float a[SPLAT_LOSS_RUN], b[SPLAT_LOSS_RUN], xx[SPLAT_LOSS_RUN], yy[SPLAT_LOSS_RUN], xy[SPLAT_LOSS_RUN];
  SPLAT_UNROLL
  for (int r = 0; r < SPLAT_LOSS_RUN; ++r) a[r] = b[r] = xx[r] = yy[r] = xy[r] = 0.f;
  SPLAT_UNROLL
  for (int j = 0; j < SSIM_TAPS; ++j) {
    const float w = ssim_tap(j);
    SPLAT_UNROLL
    for (int r = 0; r < SPLAT_LOSS_RUN; ++r) {
      const float xv = x[j + r], yv = y[j + r];
      a[r] += w * xv;
      b[r] += w * yv;
      xx[r] += w * (xv * xv);
      yy[r] += w * (yv * yv);
      xy[r] += w * (xv * yv);
    }
  }
  const uint32_t out = row * SPLAT_TILE_SIZE + col;
  SPLAT_UNROLL
  for (int r = 0; r < SPLAT_LOSS_RUN; ++r) {
    s_h[out + r] = a[r];
    s_h[SPLAT_LOSS_ROWS + out + r] = b[r];
    s_h[2 * SPLAT_LOSS_ROWS + out + r] = xx[r];
    s_h[3 * SPLAT_LOSS_ROWS + out + r] = yy[r];
    s_h[4 * SPLAT_LOSS_ROWS + out + r] = xy[r];
  }
}

// The vertical pass at this thread's pixel (tid % 16, tid / 16 of the tile):
// quantity q's window sum over the 11 rows of s_h centred on it.
SPLAT_FUNC float loss_column_sum(SimtThread t, SPLAT_TG_MEM const float* s_h, uint32_t q) {
  SPLAT_TG_MEM const float* src = s_h + q * SPLAT_LOSS_ROWS + t.tid;
  float s = 0.f;
  SPLAT_UNROLL
  for (int j = 0; j < SSIM_TAPS; ++j) s += ssim_tap(j) * src[j * SPLAT_TILE_SIZE];
  return s;
}

// One tile of one view (p: that view's; tile_sums: its tiles').
SPLAT_FUNC void ssim_forward_tile(SimtThread t, LossParams p, uint32_t tile_index,
                                  SPLAT_DEVICE_MEM const float* image, SPLAT_DEVICE_MEM const splat_byte* target,
                                  SPLAT_DEVICE_MEM const splat_byte* mask,
                                  SPLAT_DEVICE_MEM float* partials, SPLAT_DEVICE_MEM float* tile_sums,
                                  SPLAT_TG_MEM float* s_in, SPLAT_TG_MEM float* s_h, SPLAT_TG_MEM float* s_red) {
  const LossTile g = loss_tile(t, p, tile_index);
  const bool counts = loss_pixel_counts(p, mask, g);
  SPLAT_TG_MEM float* s_x = s_in;
  SPLAT_TG_MEM float* s_y = s_in + 3 * SPLAT_LOSS_HALO;
  loss_load_images(t, p, g, image, target, mask, s_x, s_y);
  sp_group_barrier();
  const uint32_t centre = (t.tid / SPLAT_TILE_SIZE + SSIM_RADIUS) * SPLAT_LOSS_SPAN + t.tid % SPLAT_TILE_SIZE + SSIM_RADIUS;
  float l1 = 0.f, ssim_sum = 0.f;
  SPLAT_UNROLL
  for (uint32_t c = 0; c < 3u; ++c) {
    ssim_forward_rows(t, s_x + c * SPLAT_LOSS_HALO, s_y + c * SPLAT_LOSS_HALO, s_h);
    sp_group_barrier();
    if (g.inside) {
      SsimStats st;
      st.mu_x = loss_column_sum(t, s_h, 0u);
      st.mu_y = loss_column_sum(t, s_h, 1u);
      st.xx = loss_column_sum(t, s_h, 2u);
      st.yy = loss_column_sum(t, s_h, 3u);
      st.xy = loss_column_sum(t, s_h, 4u);
      float map = ssim_value(st);
      vec3 d = ssim_value_grad(st);
      partials[(3u * c) * g.plane + g.pix] = counts ? p.d_map * d.x : 0.f;
      partials[(3u * c + 1u) * g.plane + g.pix] = counts ? p.d_map * d.y : 0.f;
      partials[(3u * c + 2u) * g.plane + g.pix] = counts ? p.d_map * d.z : 0.f;
      if (counts) {
        float diff = s_x[c * SPLAT_LOSS_HALO + centre] - s_y[c * SPLAT_LOSS_HALO + centre];
        l1 += diff < 0.f ? -diff : diff;
        ssim_sum += map;
      }
    }
    if (c < 2u) sp_group_barrier();  // s_h is rewritten for the next channel
  }
  float tl1 = loss_block_sum(t, l1, s_red);
  float tssim = loss_block_sum(t, ssim_sum, s_red);
  if (t.tid == 0) {
    tile_sums[2u * g.tile] = tl1;
    tile_sums[2u * g.tile + 1u] = tssim;
  }
}

// The nine partial planes over the tile and its halo into s_in[(3 c + q)
// SPLAT_LOSS_HALO ..], every load of the tile issued together (0 outside the
// image; the forward wrote 0 at masked pixels).
SPLAT_FUNC void loss_load_partials(SimtThread t, LossTile g, SPLAT_DEVICE_MEM const float* partials,
                                   SPLAT_TG_MEM float* s_in) {
  SPLAT_UNROLL
  for (uint32_t i = 0; i < (SPLAT_LOSS_HALO + SPLAT_GROUP_SIZE - 1u) / SPLAT_GROUP_SIZE; ++i) {
    const uint32_t k = t.tid + i * SPLAT_GROUP_SIZE;
    if (k < SPLAT_LOSS_HALO) {
      const int gx = g.ox + (int)(k % SPLAT_LOSS_SPAN) - SSIM_RADIUS, gy = g.oy + (int)(k / SPLAT_LOSS_SPAN) - SSIM_RADIUS;
      const bool in = gx >= 0 && gx < g.W && gy >= 0 && gy < g.H;
      const uint32_t e = in ? (uint32_t)(gy * g.W + gx) : 0u;
      SPLAT_UNROLL
      for (uint32_t q = 0; q < 9u; ++q) s_in[q * SPLAT_LOSS_HALO + k] = in ? partials[q * g.plane + e] : 0.f;
    }
  }
}

// The horizontal pass of one channel's three partial planes (s_p: the first)
// into s_h[q SPLAT_LOSS_ROWS + row 16 + col], in the forward's order.
SPLAT_FUNC void ssim_backward_rows(SimtThread t, SPLAT_TG_MEM const float* s_p, SPLAT_TG_MEM float* s_h) {
  uint32_t row, col;
  if (!loss_run(t, row, col)) return;
  SPLAT_UNROLL
  for (uint32_t q = 0; q < 3u; ++q) {
    float v[SPLAT_LOSS_RUN_SPAN];
    loss_run_values(s_p + q * SPLAT_LOSS_HALO, row, col, v);
    float s[SPLAT_LOSS_RUN];
    SPLAT_UNROLL
    for (int r = 0; r < SPLAT_LOSS_RUN; ++r) s[r] = 0.f;
    SPLAT_UNROLL
    for (int j = 0; j < SSIM_TAPS; ++j) {
      const float w = ssim_tap(j);
      SPLAT_UNROLL
      for (int r = 0; r < SPLAT_LOSS_RUN; ++r) s[r] += w * v[j + r];
    }
    SPLAT_UNROLL
    for (int r = 0; r < SPLAT_LOSS_RUN; ++r) s_h[q * SPLAT_LOSS_ROWS + row * SPLAT_TILE_SIZE + col + r] = s[r];
  }
}

// d_image over one tile of one view.
SPLAT_FUNC void ssim_backward_tile(SimtThread t, LossParams p, uint32_t tile_index,
                                   SPLAT_DEVICE_MEM const float* image, SPLAT_DEVICE_MEM const splat_byte* target,
                                   SPLAT_DEVICE_MEM const splat_byte* mask, SPLAT_DEVICE_MEM const float* partials,
                                   SPLAT_DEVICE_MEM float* d_image, SPLAT_TG_MEM float* s_in, SPLAT_TG_MEM float* s_h) {
  const LossTile g = loss_tile(t, p, tile_index);
  const bool counts = loss_pixel_counts(p, mask, g);
  loss_load_partials(t, g, partials, s_in);
  // This pixel's render and target, loaded beside the halo.
  float x[3], y[3];
  SPLAT_UNROLL
  for (uint32_t c = 0; c < 3u; ++c) {
    x[c] = g.inside ? image[3u * g.pix + c] : 0.f;
    y[c] = g.inside ? (float)target[3u * g.pix + c] * (1.f / 255.f) : 0.f;
  }
  sp_group_barrier();
  SPLAT_UNROLL
  for (uint32_t c = 0; c < 3u; ++c) {
    ssim_backward_rows(t, s_in + 3u * c * SPLAT_LOSS_HALO, s_h);
    sp_group_barrier();
    if (g.inside) {
      float b0 = loss_column_sum(t, s_h, 0u), b1 = loss_column_sum(t, s_h, 1u), b2 = loss_column_sum(t, s_h, 2u);
      float diff = x[c] - y[c];
      float sign = diff > 0.f ? 1.f : (diff < 0.f ? -1.f : 0.f);
      d_image[3u * g.pix + c] = counts ? p.d_l1 * sign + b0 + 2.f * x[c] * b1 + y[c] * b2 : 0.f;
    }
    if (c < 2u) sp_group_barrier();  // s_h is rewritten for the next channel
  }
}
