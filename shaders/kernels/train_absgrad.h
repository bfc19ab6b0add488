// absgrad densification, deterministic variant: the backward rasterization
// (SPLAT_SPEC_ABSGRAD with SPLAT_SPEC_DETERMINISTIC) writes each (tile,
// Gaussian) pair's summed |d mean2d| to the pair's emission slot; this sums
// a Gaussian's slots in emission order, as project_backward sums its
// gradients, so the statistic is reproducible bit for bit.
#pragma once
#include "simt_util.h"

SPLAT_FUNC void absgrad_pair_sum_body(SimtThread t, SPLAT_CONST_MEM const ElementParams& p,
                                      SPLAT_DEVICE_MEM const uint32_t* pair_ranges,
                                      SPLAT_DEVICE_MEM const float* pair_abs, SPLAT_DEVICE_MEM float* means2d_abs) {
  uint32_t i = global_index(t);
  if (i >= p.count) return;
  uint32_t first = pair_ranges[2u * i], slots = pair_ranges[2u * i + 1u];
  float x = 0.f, y = 0.f;
  for (uint32_t k = 0; k < slots; ++k) {
    uint64_t at = (uint64_t)2u * (first + k);
    x += pair_abs[at];
    y += pair_abs[at + 1u];
  }
  means2d_abs[2u * i] = x;
  means2d_abs[2u * i + 1u] = y;
}
