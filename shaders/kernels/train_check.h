// The divergence check: how many values of each parameter array are NaN or
// infinite. Two dispatches and no atomics: every threadgroup of the first
// strides over the five arrays and writes its five counts, one threadgroup of
// the second sums them in a fixed order. The host reads back five counts.
#pragma once
#include "simt_util.h"

// Non-finite values among elements first, first + stride, ... of `a`.
SPLAT_FUNC uint32_t nonfinite_in(SPLAT_DEVICE_MEM const float* a, uint32_t len, uint32_t first, uint32_t stride) {
  uint32_t c = 0u;
  for (uint32_t e = first; e < len; e += stride) c += sp_nonfinite(a[e]) ? 1u : 0u;
  return c;
}

// partials[5 group + a]: the non-finite values of array a this group saw.
SPLAT_FUNC void count_nonfinite_body(SimtThread t, SPLAT_CONST_MEM const FiniteParams& p,
                                     SPLAT_DEVICE_MEM const float* means, SPLAT_DEVICE_MEM const float* log_scales,
                                     SPLAT_DEVICE_MEM const float* quats, SPLAT_DEVICE_MEM const float* opacity,
                                     SPLAT_DEVICE_MEM const float* sh, SPLAT_DEVICE_MEM uint32_t* partials,
                                     SPLAT_TG_MEM uint32_t* warp_tot) {
  const uint32_t n = p.count, first = global_index(t), stride = p.groups * t.group_size;
  uint32_t c[SPLAT_FINITE_ARRAYS];
  c[0] = nonfinite_in(means, 3u * n, first, stride);
  c[1] = nonfinite_in(log_scales, 3u * n, first, stride);
  c[2] = nonfinite_in(quats, 4u * n, first, stride);
  c[3] = nonfinite_in(opacity, n, first, stride);
  c[4] = nonfinite_in(sh, n * p.sh_width, first, stride);
  for (uint32_t a = 0u; a < SPLAT_FINITE_ARRAYS; ++a) {
    uint32_t total;
    block_exclusive_scan(t, c[a], warp_tot, total);
    if (t.tid == 0u) partials[SPLAT_FINITE_ARRAYS * t.group + a] = total;
  }
}

// One threadgroup: totals[a] = the sum of partials[5 g + a] over the groups.
SPLAT_FUNC void nonfinite_total_body(SimtThread t, SPLAT_CONST_MEM const FiniteParams& p,
                                     SPLAT_DEVICE_MEM const uint32_t* partials, SPLAT_DEVICE_MEM uint32_t* totals,
                                     SPLAT_TG_MEM uint32_t* warp_tot) {
  for (uint32_t a = 0u; a < SPLAT_FINITE_ARRAYS; ++a) {
    uint32_t c = 0u;
    for (uint32_t g = t.tid; g < p.groups; g += t.group_size) c += partials[SPLAT_FINITE_ARRAYS * g + a];
    uint32_t total;
    block_exclusive_scan(t, c, warp_tot, total);
    if (t.tid == 0u) totals[a] = total;
  }
}
