// The MCMC strategy on the device (docs/training_modes.md, "The MCMC
// strategy"); the math is shaders/common/mcmc.h, shared with the CPU.
// A refine step runs twice, relocation then growth:
//   mcmc_weights        per Gaussian: its weight (live only for relocation),
//                       the inclusive prefix of the weights inside its block
//                       of SPLAT_GROUP_SIZE (uint32: 256 weights < 2^32) and
//                       the block's sum
//   mcmc_block_offsets  one threadgroup: the blocks' exclusive offsets (uint64)
//                       and the total after them, in a fixed order
//   mcmc_sample         per target (a dead Gaussian / a new slot): a point in
//                       [0, total) from the counter-based RNG, its Gaussian by
//                       binary search (blocks, then the block's prefix), and
//                       an integer atomic count of the samples per source
//   mcmc_apply          per array (each parameter, each Adam moment): targets
//                       take their source's row (its updated opacity and
//                       log-scales, zero moments); then, in a second dispatch,
//                       the sampled sources update their own rows
// Integer sums and counts do not depend on the order of the additions, so
// every sample and every count is the same on every run of a backend (across
// backends up to the last bit of a weight's sigmoid: docs/training_modes.md).
// Every step: mcmc_regularize (the regularisers' gradients, before Adam) and
// mcmc_noise (the position noise, after Adam).
#pragma once
#include "mcmc.h"
#include "simt_util.h"

SPLAT_FUNC void mcmc_weights_body(SimtThread t, SPLAT_CONST_MEM const McmcParams& p,
                                  SPLAT_DEVICE_MEM const float* opacity, SPLAT_DEVICE_MEM uint32_t* prefix,
                                  SPLAT_DEVICE_MEM uint32_t* block_sums, SPLAT_TG_MEM uint32_t* warp_tot) {
  uint32_t i = global_index(t);
  uint32_t w = i < p.count ? mcmc_weight(opacity[i], p.min_opacity, p.grow == 0u) : 0u;
  uint32_t total;
  uint32_t ex = block_exclusive_scan(t, w, warp_tot, total);
  if (i < p.count) prefix[i] = ex + w;
  if (t.tid == 0u) block_sums[t.group] = total;
}

// One threadgroup: thread r sums its run of consecutive blocks, thread 0
// scans the runs' sums in order, then each thread writes its run's offsets.
SPLAT_FUNC void mcmc_block_offsets_body(SimtThread t, SPLAT_CONST_MEM const McmcParams& p,
                                        SPLAT_DEVICE_MEM const uint32_t* block_sums,
                                        SPLAT_DEVICE_MEM uint64_t* block_offsets, SPLAT_TG_MEM uint64_t* runs) {
  const uint32_t per = (p.num_blocks + SPLAT_GROUP_SIZE - 1u) / SPLAT_GROUP_SIZE;
  const uint32_t first = t.tid * per;
  uint64_t sum = 0u;
  for (uint32_t b = first; b < first + per && b < p.num_blocks; ++b) sum += (uint64_t)block_sums[b];
  runs[t.tid] = sum;
  sp_group_barrier();
  if (t.tid == 0u) {
    uint64_t acc = 0u;
    for (uint32_t r = 0; r < SPLAT_GROUP_SIZE; ++r) {
      uint64_t s = runs[r];
      runs[r] = acc;
      acc += s;
    }
    block_offsets[p.num_blocks] = acc;
  }
  sp_group_barrier();
  uint64_t acc = runs[t.tid];
  for (uint32_t b = first; b < first + per && b < p.num_blocks; ++b) {
    block_offsets[b] = acc;
    acc += (uint64_t)block_sums[b];
  }
}

// The Gaussian whose weight interval holds `point` (< the total).
SPLAT_FUNC uint32_t mcmc_find(uint64_t point, uint32_t count, uint32_t num_blocks,
                              SPLAT_DEVICE_MEM const uint64_t* block_offsets, SPLAT_DEVICE_MEM const uint32_t* prefix) {
  // The last block whose offset is <= point (it has weight: the next offset is larger).
  uint32_t lo = 0u, hi = num_blocks;  // block_offsets[lo] <= point < block_offsets[hi]
  while (hi - lo > 1u) {
    uint32_t mid = (lo + hi) / 2u;
    if (block_offsets[mid] <= point) lo = mid;
    else hi = mid;
  }
  uint32_t local = (uint32_t)(point - block_offsets[lo]);
  // The first Gaussian of the block whose inclusive prefix exceeds local.
  uint32_t a = lo * SPLAT_GROUP_SIZE;
  uint32_t b = a + SPLAT_GROUP_SIZE < count ? a + SPLAT_GROUP_SIZE : count;
  b -= 1u;  // prefix[b] (the block's sum) > local
  while (a < b) {
    uint32_t mid = (a + b) / 2u;
    if (prefix[mid] > local) b = mid;
    else a = mid + 1u;
  }
  return a;
}

SPLAT_FUNC void mcmc_sample_body(SimtThread t, SPLAT_CONST_MEM const McmcParams& p,
                                 SPLAT_DEVICE_MEM const float* opacity, SPLAT_DEVICE_MEM const uint32_t* prefix,
                                 SPLAT_DEVICE_MEM const uint64_t* block_offsets, SPLAT_DEVICE_MEM uint32_t* source,
                                 SPLAT_DEVICE_MEM uint32_t* times_sampled) {
  uint32_t j = global_index(t);
  if (j >= p.targets) return;
  uint32_t target = p.grow != 0u ? p.count + j : j;
  const uint64_t total = block_offsets[p.num_blocks];
  if (p.grow == 0u && (!mcmc_dead(opacity[j], p.min_opacity) || total == 0u)) {
    source[target] = MCMC_NONE;
    return;
  }
  uint32_t s = j % p.count;  // growth without any weight (every opacity below 2^-24): a copy each
  if (total != 0u) s = mcmc_find(mcmc_sample_point(p.seed, p.step, target, p.draw, total), p.count, p.num_blocks,
                                 block_offsets, prefix);
  source[target] = s;
  sp_atomic_add_u32(times_sampled + s, 1u);
  if (p.grow == 0u) sp_atomic_add_u32(times_sampled + p.count, 1u);  // the relocated count
}

// p.width: the array's floats per Gaussian; p.kind: what it is (MCMC_ARRAY_*);
// p.sources: 0 the targets, 1 the sampled sources. `opacity` and `log_scales`
// are the sources' values before this refine's updates (the opacity and
// log-scale arrays are written last, sources after targets).
SPLAT_FUNC void mcmc_apply_body(SimtThread t, SPLAT_CONST_MEM const McmcParams& p,
                                SPLAT_DEVICE_MEM const uint32_t* source, SPLAT_DEVICE_MEM const uint32_t* times_sampled,
                                SPLAT_DEVICE_MEM const float* binoms, SPLAT_DEVICE_MEM const float* opacity,
                                SPLAT_DEVICE_MEM float* data) {
  uint32_t j = global_index(t);
  const uint32_t width = p.width, kind = p.kind;
  uint32_t row, from;
  if (p.sources == 0u) {
    if (j >= p.targets) return;
    row = p.grow != 0u ? p.count + j : j;
    from = source[row];
    if (from == MCMC_NONE) return;
  } else {
    if (j >= p.count || times_sampled[j] == 0u) return;
    row = j;
    from = j;
  }
  if (kind == MCMC_ARRAY_MOMENT) {
    for (uint32_t c = 0; c < width; ++c) data[row * width + c] = 0.f;
    return;
  }
  if (kind == MCMC_ARRAY_PLAIN) {
    if (row != from)
      for (uint32_t c = 0; c < width; ++c) data[row * width + c] = data[from * width + c];
    return;
  }
  McmcUpdate u = mcmc_update(opacity[from], times_sampled[from], p.min_opacity, binoms);
  if (kind == MCMC_ARRAY_OPACITY) {
    data[row] = u.logit;
    return;
  }
  for (uint32_t c = 0; c < 3u; ++c) data[row * 3u + c] = data[from * 3u + c] + u.log_scale_shift;
}

// p.width floats from src to dst (growth into a larger buffer).
SPLAT_FUNC void mcmc_copy_body(SimtThread t, SPLAT_CONST_MEM const McmcParams& p, SPLAT_DEVICE_MEM const float* src,
                               SPLAT_DEVICE_MEM float* dst) {
  uint32_t i = global_index(t);
  if (i < p.width) dst[i] = src[i];
}

SPLAT_FUNC void mcmc_regularize_body(SimtThread t, SPLAT_CONST_MEM const McmcParams& p,
                                     SPLAT_DEVICE_MEM const float* opacity, SPLAT_DEVICE_MEM const float* log_scales,
                                     SPLAT_DEVICE_MEM float* g_opacity, SPLAT_DEVICE_MEM float* g_log_scales) {
  uint32_t i = global_index(t);
  if (i >= p.count) return;
  if (p.opacity_weight != 0.f) g_opacity[i] += mcmc_opacity_reg_grad(opacity[i], p.opacity_weight);
  if (p.scale_weight != 0.f)
    for (uint32_t c = 0; c < 3u; ++c)
      g_log_scales[3u * i + c] += mcmc_scale_reg_grad(log_scales[3u * i + c], p.scale_weight);
}

SPLAT_FUNC void mcmc_noise_body(SimtThread t, SPLAT_CONST_MEM const McmcParams& p, SPLAT_DEVICE_MEM float* means,
                                SPLAT_DEVICE_MEM const float* log_scales, SPLAT_DEVICE_MEM const float* quats,
                                SPLAT_DEVICE_MEM const float* opacity, SPLAT_DEVICE_MEM const int32_t* radius) {
  uint32_t i = global_index(t);
  if (i >= p.count || step_skipped(radius)) return;
  vec3 d = mcmc_position_noise(load_vec3(log_scales, i), quats[4u * i], quats[4u * i + 1u], quats[4u * i + 2u],
                               quats[4u * i + 3u], opacity[i], p.noise_scale, p.seed, p.step, i);
  store_vec3(means, i, load_vec3(means, i) + d);
}
