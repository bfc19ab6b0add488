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
//   densify_sources   per (section, Gaussian): each output row's source
//                     (section * n + Gaussian), for the gather
//   densify_gather    per output element, once per parameter array and once
//                     per moment of it: copies the rows to their slots, a
//                     float a thread, so a SIMD group reads and writes
//                     consecutive floats (a thread per row looped over its
//                     floats, 48 apart for SH); moments of new rows are zero;
//                     children's log-scales are the parent's - log(divisor)
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
  float max_scale = sp_exp(max_ls);
  bool prune_self = low_opacity;
  if (p.prune_max_world_scale > 0.f && max_scale > p.prune_max_world_scale) prune_self = true;
  if (p.prune_max_screen_radius > 0.f && max_radii[i] > p.prune_max_screen_radius &&
      !(p.prune_screen_scale_per_px > 0.f && max_scale >= max_radii[i] * p.prune_screen_scale_per_px))
    prune_self = true;
  bool prune_child = low_opacity;
  if (p.prune_max_world_scale > 0.f && sp_exp(max_ls - p.log_div) > p.prune_max_world_scale) prune_child = true;
  flags[i] = (k != DENSIFY_SPLIT && !prune_self) ? 1u : 0u;
  flags[n + i] = (k == DENSIFY_CLONE && !prune_self) ? 1u : 0u;
  flags[2u * n + i] = (k == DENSIFY_SPLIT && !prune_child) ? p.split_count : 0u;
  flags[3u * n + i] = k == DENSIFY_CLONE ? 1u : 0u;
  flags[4u * n + i] = k == DENSIFY_SPLIT ? 1u : 0u;
}

// Each output row's source j = section * n + i (0: kept, 1: clone, 2: child).
SPLAT_FUNC void densify_sources_body(SimtThread t, SPLAT_CONST_MEM const DensifyParams& p,
                                     SPLAT_DEVICE_MEM const uint32_t* offsets, SPLAT_DEVICE_MEM uint32_t* row_source) {
  uint32_t j = global_index(t);
  if (j >= 3u * p.count) return;
  uint32_t first = offsets[j], rows = offsets[j + 1u] - first;
  for (uint32_t r = 0; r < rows; ++r) row_source[first + r] = j;
}

// One parameter array or one of its Adam moments (p.width floats per
// Gaussian), element e = row * width + column of the output.
SPLAT_FUNC void densify_gather_body(SimtThread t, SPLAT_CONST_MEM const DensifyParams& p,
                                    SPLAT_DEVICE_MEM const uint32_t* row_source, SPLAT_DEVICE_MEM const float* src,
                                    SPLAT_DEVICE_MEM float* dst) {
  uint32_t e = global_index(t);
  const uint32_t w = p.width;
  if (e >= p.out_count * w) return;
  uint32_t row = e / w, c = e - row * w;
  uint32_t j = row_source[row];
  uint32_t section = j / p.count, i = j - section * p.count;
  float v = 0.f;  // a moment of a new row
  if (p.is_moment == 0u || section == 0u) {
    v = src[i * w + c];
    if (section == 2u && p.is_log_scales != 0u) v -= p.log_div;
  }
  dst[e] = v;
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
