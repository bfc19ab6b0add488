// The loss of views rasterized together (shaders/kernels/train_loss.h,
// ssim_forward_views_body / ssim_backward_views_body: a launch pair for up to
// SPLAT_LOSS_MAX_VIEWS views) on the SIMT emulator, against the launch pair
// a view it replaces (ssim_forward_body / ssim_backward_body with the view's
// LossParams), as GpuDevice::launch_loss_views groups the views. Random renders
// near random targets, the targets (and masks: some views masked, one may be
// masked entirely) at scattered offsets of one buffer, as resident images lie.
// Prints `differ` (d_image values whose bits differ), `loss_differ` (of the
// four loss values), `values` and `nonzero` (d_image values not zero).
//
//   loss_views_check SEED WIDTH HEIGHT VIEWS GROUP
#include "simt_emu.h"
#include "bit_compare.h"
// The kernel bodies, after the emulator.
#include "train_loss.h"

#include <algorithm>
#include <random>

int main(int argc, char** argv) {
  if (argc != 6) {
    fprintf(stderr, "usage: loss_views_check SEED WIDTH HEIGHT VIEWS GROUP\n");
    return 2;
  }
  std::mt19937 rng((uint32_t)strtoul(argv[1], nullptr, 10));
  const uint32_t width = (uint32_t)atoi(argv[2]), height = (uint32_t)atoi(argv[3]);
  const uint32_t views = (uint32_t)atoi(argv[4]), group = (uint32_t)atoi(argv[5]);
  const size_t pixels = (size_t)width * height;
  const float ssim_weight = 0.2f;
  std::uniform_real_distribution<float> uniform(0.f, 1.f);

  // The images' and masks' buffers: each view's target (mask) at an offset
  // with a gap before it, in shuffled order.
  std::vector<uint32_t> order(views);
  for (uint32_t k = 0; k < views; ++k) order[k] = k;
  std::shuffle(order.begin(), order.end(), rng);
  std::vector<uint64_t> target_at(views), mask_at(views);
  std::vector<uint8_t> targets, masks;
  std::vector<bool> has_mask(views);
  std::vector<uint64_t> valid(views, pixels);
  const uint32_t all_masked = uniform(rng) < 0.5f ? (uint32_t)(rng() % views) : views;
  for (uint32_t k : order) {
    targets.resize(targets.size() + 16 * (1 + rng() % 4));
    target_at[k] = targets.size();
    for (size_t e = 0; e < 3 * pixels; ++e) targets.push_back((uint8_t)(uniform(rng) * 255.99f));
    has_mask[k] = k == all_masked || uniform(rng) < 0.5f;
    if (!has_mask[k]) continue;
    masks.resize(masks.size() + 16 * (1 + rng() % 4));
    mask_at[k] = masks.size();
    valid[k] = 0;
    for (size_t p = 0; p < pixels; ++p) {
      const uint8_t m = k == all_masked ? 0 : (uniform(rng) < 0.7f ? 1 : 0);
      masks.push_back(m);
      valid[k] += m;
    }
  }
  if (masks.empty()) masks.resize(16);
  // The renders, one view after another, near their targets.
  std::vector<float> image(3 * pixels * views);
  for (uint32_t k = 0; k < views; ++k)
    for (size_t e = 0; e < 3 * pixels; ++e) {
      const float t = (float)targets[target_at[k] + e] * (1.f / 255.f);
      const float near = std::min(1.f, std::max(0.f, t + 0.2f * (uniform(rng) - 0.5f)));
      image[3 * pixels * k + e] = uniform(rng) < 0.05f ? t : near;
    }

  // Each view's LossParams, as GpuDevice::loss_params gives them.
  const uint32_t tiles_x = (width + SPLAT_TILE_SIZE - 1) / SPLAT_TILE_SIZE;
  const uint32_t tiles = tiles_x * ((height + SPLAT_TILE_SIZE - 1) / SPLAT_TILE_SIZE);
  auto params = [&](uint32_t k) {
    const double count = 3.0 * (double)valid[k];
    const bool any = valid[k] > 0;
    return LossParams{width, height, tiles_x, tiles,
                      any ? (float)((1.0 - ssim_weight) / count) : 0.f, any ? (float)(-ssim_weight / count) : 0.f,
                      any ? ssim_weight : 0.f, any ? (float)(1.0 / count) : 0.f, has_mask[k] ? 1u : 0u, k, views, 0u};
  };

  // A launch pair a view.
  std::vector<float> partials(9 * pixels * std::max(group, 1u)), tile_sums(2 * (size_t)tiles * std::max(group, 1u));
  std::vector<float> d_single(3 * pixels * views, -7.f), loss_single(4, 0.f);
  for (uint32_t k = 0; k < views; ++k) {
    const LossParams lp = params(k);
    const float* img = image.data() + 3 * pixels * k;
    const uint8_t* tgt = targets.data() + target_at[k];
    const uint8_t* msk = has_mask[k] ? masks.data() + mask_at[k] : tgt;
    simt_emu::dispatch(tiles, SPLAT_GROUP_SIZE, [&](SimtThread t) {
      SPLAT_TG_ARRAY(float, s_in, SPLAT_LOSS_FWD_IN);
      SPLAT_TG_ARRAY(float, s_h, SPLAT_LOSS_FWD_H);
      SPLAT_TG_ARRAY(float, s_red, SPLAT_LOSS_RED);
      ssim_forward_body(t, lp, img, tgt, msk, partials.data(), tile_sums.data(), s_in, s_h, s_red);
    });
    simt_emu::dispatch(tiles, SPLAT_GROUP_SIZE, [&](SimtThread t) {
      SPLAT_TG_ARRAY(float, s_in, SPLAT_LOSS_BWD_IN);
      SPLAT_TG_ARRAY(float, s_h, SPLAT_LOSS_BWD_H);
      SPLAT_TG_ARRAY(float, s_red, SPLAT_LOSS_RED);
      ssim_backward_body(t, lp, img, tgt, msk, partials.data(), tile_sums.data(), d_single.data() + 3 * pixels * k,
                         loss_single.data(), s_in, s_h, s_red);
    });
  }

  // The batched launches, GROUP views a pair.
  std::vector<float> d_views(3 * pixels * views, -7.f), loss_views(4, 0.f);
  std::fill(partials.begin(), partials.end(), 0.f);
  for (uint32_t first = 0; first < views; first += group) {
    LossViewsParams b{};
    b.base = params(first);
    b.count = std::min(group, views - first);
    for (uint32_t v = 0; v < b.count; ++v) {
      const LossParams lp = params(first + v);
      b.views[v] = LossView{target_at[first + v], has_mask[first + v] ? mask_at[first + v] : 0u, lp.d_l1, lp.d_map,
                            lp.ssim_weight, lp.inv_count, lp.has_mask, 0u};
    }
    const float* img = image.data() + 3 * pixels * first;
    simt_emu::dispatch(b.count * tiles, SPLAT_GROUP_SIZE, [&](SimtThread t) {
      SPLAT_TG_ARRAY(float, s_in, SPLAT_LOSS_FWD_IN);
      SPLAT_TG_ARRAY(float, s_h, SPLAT_LOSS_FWD_H);
      SPLAT_TG_ARRAY(float, s_red, SPLAT_LOSS_RED);
      ssim_forward_views_body(t, b, img, targets.data(), masks.data(), partials.data(), tile_sums.data(), s_in, s_h,
                              s_red);
    });
    simt_emu::dispatch(b.count * tiles, SPLAT_GROUP_SIZE, [&](SimtThread t) {
      SPLAT_TG_ARRAY(float, s_in, SPLAT_LOSS_BWD_IN);
      SPLAT_TG_ARRAY(float, s_h, SPLAT_LOSS_BWD_H);
      SPLAT_TG_ARRAY(float, s_red, SPLAT_LOSS_RED);
      ssim_backward_views_body(t, b, img, targets.data(), masks.data(), partials.data(), tile_sums.data(),
                               d_views.data() + 3 * pixels * first, loss_views.data(), s_in, s_h, s_red);
    });
  }
  size_t nonzero = 0;
  for (float g : d_views) nonzero += g != 0.f;
  printf("differ %zu\nloss_differ %zu\nvalues %zu\nnonzero %zu\n", count_bit_differences(d_single, d_views),
         count_bit_differences(loss_single, loss_views), d_views.size(), nonzero);
  return 0;
}
