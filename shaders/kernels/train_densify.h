// Densification on the device: classify -> cap -> prune -> one scan -> gather.
// The densified set is, in order (as the CPU backend builds it):
//   the Gaussians that are not split, in index order (moments kept)
//   one clone of each Gaussian classified clone, in index order
//   split_count children of each Gaussian classified split, in index order
// minus the pruned ones. Pruning depends only on the source Gaussian (a clone
// is pruned with its original; the children of one parent all share the
// parent's opacity, scale / divisor and a screen radius of 0), so one
// exclusive scan over the concatenation
//   keep[n] | clones[n] | children[n] | is_clone[n] | is_split[n]
// gives every output slot (the first 3n entries) and the counts the host
// reads back (the scan at 3n, 4n, 5n). Dispatches:
//   densify_classify  per Gaussian: kind (densify.h) and its extra count
//   (scan of the extras: the cap keeps the candidates whose running extra fits)
//   densify_mark      per Gaussian: cap, prune, the 5 scan inputs
//   (scan of the 5n flags)
//   densify_gather    per (section, Gaussian), once per parameter array and
//                     once per moment of it: copies the rows to their slots;
//                     moments of new rows are zero; children's log-scales
//                     are the parent's - log(divisor)
//   densify_children  per (section 2, Gaussian): the children's means
//                     (split_child_mean, the counter-based RNG of the CPU)
#pragma once
#include "densify.h"
#include "simt_util.h"

SPLAT_FUNC float max3(float a, float b, float c) { return sp_max(a, sp_max(b, c)); }

SPLAT_FUNC void densify_classify_body(SimtThread t, SPLAT_CONST_MEM const DensifyParams& p,
                                      SPLAT_DEVICE_MEM const float* log_scales,
                                      SPLAT_DEVICE_MEM const float* grad_accum,
                                      SPLAT_DEVICE_MEM const float* grad_count, SPLAT_DEVICE_MEM uint32_t* kind,
                                      SPLAT_DEVICE_MEM uint32_t* extra) {
  uint32_t i = global_index(t);
  if (i >= p.count) return;
  float max_ls = max3(log_scales[3u * i], log_scales[3u * i + 1u], log_scales[3u * i + 2u]);
  uint32_t k = densify_classify(grad_accum[i], grad_count[i], max_ls, p.grad_threshold, p.clone_max_scale);
  kind[i] = k;
  extra[i] = k == DENSIFY_CLONE ? 1u : (k == DENSIFY_SPLIT ? p.split_count - 1u : 0u);
}

SPLAT_FUNC void densify_mark_body(SimtThread t, SPLAT_CONST_MEM const DensifyParams& p,
                                  SPLAT_DEVICE_MEM const float* log_scales, SPLAT_DEVICE_MEM const float* opacity,
                                  SPLAT_DEVICE_MEM const float* max_radii, SPLAT_DEVICE_MEM const uint32_t* extra,
                                  SPLAT_DEVICE_MEM const uint32_t* extra_offsets, SPLAT_DEVICE_MEM uint32_t* kind,
                                  SPLAT_DEVICE_MEM uint32_t* flags) {
  uint32_t i = global_index(t);
  const uint32_t n = p.count;
  if (i >= n) return;
  uint32_t k = kind[i];
  uint32_t x = extra[i];
  // Over the cap a Gaussian stays as it is.
  if (x > 0u && (extra_offsets[i] > p.room || p.room - extra_offsets[i] < x)) {
    k = DENSIFY_KEEP;
    kind[i] = k;
  }
  float max_ls = max3(log_scales[3u * i], log_scales[3u * i + 1u], log_scales[3u * i + 2u]);
  bool low_opacity = opacity[i] < p.logit_min;
  bool prune_self = low_opacity;
  if (p.prune_max_world_scale > 0.f && sp_exp(max_ls - 0.f) > p.prune_max_world_scale) prune_self = true;
  if (p.prune_max_screen_radius > 0.f && max_radii[i] > p.prune_max_screen_radius) prune_self = true;
  bool prune_child = low_opacity;
  if (p.prune_max_world_scale > 0.f && sp_exp(max_ls - p.log_div) > p.prune_max_world_scale) prune_child = true;
  flags[i] = (k != DENSIFY_SPLIT && !prune_self) ? 1u : 0u;
  flags[n + i] = (k == DENSIFY_CLONE && !prune_self) ? 1u : 0u;
  flags[2u * n + i] = (k == DENSIFY_SPLIT && !prune_child) ? p.split_count : 0u;
  flags[3u * n + i] = k == DENSIFY_CLONE ? 1u : 0u;
  flags[4u * n + i] = k == DENSIFY_SPLIT ? 1u : 0u;
}

// One parameter array or one of its Adam moments (p.width floats per Gaussian).
SPLAT_FUNC void densify_gather_body(SimtThread t, SPLAT_CONST_MEM const DensifyParams& p,
                                    SPLAT_DEVICE_MEM const uint32_t* offsets, SPLAT_DEVICE_MEM const float* src,
                                    SPLAT_DEVICE_MEM float* dst) {
  uint32_t j = global_index(t);
  const uint32_t n = p.count;
  if (j >= 3u * n) return;
  uint32_t first = offsets[j], rows = offsets[j + 1u] - first;
  if (rows == 0u) return;
  uint32_t section = j / n, i = j - section * n;
  const uint32_t w = p.width;
  float shift = (section == 2u && p.is_log_scales != 0u) ? p.log_div : 0.f;
  bool zero = p.is_moment != 0u && section != 0u;
  for (uint32_t r = 0; r < rows; ++r) {
    uint32_t to = (first + r) * w, from = i * w;
    for (uint32_t c = 0; c < w; ++c) dst[to + c] = zero ? 0.f : (shift != 0.f ? src[from + c] - shift : src[from + c]);
  }
}

SPLAT_FUNC void densify_children_body(SimtThread t, SPLAT_CONST_MEM const DensifyParams& p,
                                      SPLAT_DEVICE_MEM const uint32_t* offsets, SPLAT_DEVICE_MEM const float* means,
                                      SPLAT_DEVICE_MEM const float* log_scales, SPLAT_DEVICE_MEM const float* quats,
                                      SPLAT_DEVICE_MEM float* dst_means) {
  uint32_t i = global_index(t);
  const uint32_t n = p.count;
  if (i >= n) return;
  uint32_t j = 2u * n + i;
  uint32_t first = offsets[j], rows = offsets[j + 1u] - first;
  for (uint32_t c = 0; c < rows; ++c) {
    vec3 cm = split_child_mean(load_vec3(means, i), load_vec3(log_scales, i), quats[4u * i], quats[4u * i + 1u],
                               quats[4u * i + 2u], quats[4u * i + 3u], p.seed, p.step, i, c);
    store_vec3(dst_means, first + c, cm);
  }
}
