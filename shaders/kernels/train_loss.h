// The fused training loss (1 - w) L1 + w (1 - SSIM) and its gradient with
// respect to the rendered image, against a uint8 ground truth resident on the
// device. Two dispatches of one threadgroup (256 threads) per 16x16 tile:
//   ssim_forward   the tile plus a 5-pixel halo of the render and the target,
//                  all three channels, in threadgroup memory; per channel the
//                  separable 11-tap blur of (x, y, x^2, y^2, xy) (horizontal,
//                  two outputs a thread, then vertical), the SSIM map and its
//                  partials d_map * d ssim / d (mu_x, xx, xy) -> partials[9
//                  planes]; the tile's sums of |x - y| and of the map ->
//                  tile_sums[2 tile ..]
//   ssim_backward  the nine partial planes' halo likewise; per channel the
//                  same blur of its three planes, then d_image = d_l1 sign(x -
//                  y) + G*p0 + 2 x G*p1 + y G*p2.
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
#include "train_loss_tile.h"

#include "train_loss_all_channels.h"

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
