// Building blocks of the SIMT kernels: threadgroup-wide scans, SIMD-group
// digit matching, and loads of the shared argument structs.
// Written against compat.h only (Metal and CUDA).
#pragma once
#include "compat.h"
#include "params.h"

#if !defined(SPLAT_SIMT)
#error "shaders/kernels are SIMT kernel bodies: compile them as Metal or CUDA"
#endif

SPLAT_STATIC_ASSERT(SPLAT_GROUP_SIZE % SPLAT_SIMD_WIDTH == 0, "groups are whole SIMD groups");
SPLAT_STATIC_ASSERT(SPLAT_GROUP_WARPS <= SPLAT_SIMD_WIDTH, "one SIMD group scans the group totals");

SPLAT_FUNC uint32_t global_index(SimtThread t) { return t.group * t.group_size + t.tid; }

// An element count bounded by one the device holds (count_limit[0]).
SPLAT_FUNC uint32_t limited_count(uint32_t count, SPLAT_DEVICE_MEM const uint32_t* count_limit) {
  const uint32_t limit = count_limit[0];
  return limit < count ? limit : count;
}

SPLAT_FUNC vec3 load_vec3(SPLAT_DEVICE_MEM const float* p, uint32_t i) {
  return make_vec3(p[3 * i], p[3 * i + 1], p[3 * i + 2]);
}

SPLAT_FUNC void store_vec3(SPLAT_DEVICE_MEM float* p, uint32_t i, vec3 v) {
  p[3 * i] = v.x;
  p[3 * i + 1] = v.y;
  p[3 * i + 2] = v.z;
}

// Exclusive prefix sum of `v` over a threadgroup of `warps` SIMD groups (at
// most 32; every thread must call it). `total` receives the sum of all
// values. `warp_tot` holds warps + 1 values; it may be reused as soon as this
// returns (the final barrier protects it).
SPLAT_FUNC uint32_t group_exclusive_scan(SimtThread t, uint32_t v, uint32_t warps, SPLAT_TG_MEM uint32_t* warp_tot,
                                         SPLAT_THREAD uint32_t& total) {
  uint32_t ex = simd_prefix_exclusive_sum(v);
  if (t.lane == SPLAT_SIMD_WIDTH - 1) warp_tot[t.warp] = ex + v;
  sp_group_barrier();
  if (t.warp == 0) {
    uint32_t w = t.lane < warps ? warp_tot[t.lane] : 0u;
    uint32_t wex = simd_prefix_exclusive_sum(w);
    if (t.lane < warps) warp_tot[t.lane] = wex;
    if (t.lane == warps - 1u) warp_tot[warps] = wex + w;
  }
  sp_group_barrier();
  total = warp_tot[warps];
  uint32_t r = warp_tot[t.warp] + ex;
  sp_group_barrier();
  return r;
}

// group_exclusive_scan over a SPLAT_GROUP_SIZE threadgroup (warp_tot:
// SPLAT_GROUP_WARPS + 1 values).
SPLAT_FUNC uint32_t block_exclusive_scan(SimtThread t, uint32_t v, SPLAT_TG_MEM uint32_t* warp_tot,
                                         SPLAT_THREAD uint32_t& total) {
  return group_exclusive_scan(t, v, SPLAT_GROUP_WARPS, warp_tot, total);
}

// Bit mask of the lanes of this SIMD group whose 8-bit `digit` equals this
// lane's, among the lanes where `valid` holds (0 on invalid lanes). Built from
// SPLAT_RADIX_BITS ballots, so it needs no match instruction.
SPLAT_FUNC uint32_t simd_match_digit(uint32_t digit, bool valid) {
  uint32_t peers = sp_simd_ballot(valid);
  for (int b = 0; b < SPLAT_RADIX_BITS; ++b) {
    bool bit = ((digit >> b) & 1u) != 0u;
    uint32_t vote = sp_simd_ballot(bit);
    peers &= bit ? vote : ~vote;
  }
  return valid ? peers : 0u;
}

// The nine per-splat gradients v[0..8] summed over the SIMD group,
// transposed: 12 shuffles where nine butterflies take 45. Each halving step
// keeps half of the components in each half of the lanes and adds the
// partner lane's copy of them; after five steps each lane pair (l, l ^ 1)
// holds the total of one component. The lane's role (which half it keeps at
// each step, and the component it ends with) is fixed per lane: computed once
// with simd_sum9_lanes, outside the loops that sum.
SPLAT_STATIC_ASSERT(SPLAT_SIMD_WIDTH == 32, "the transposed sum is written for 32 lanes");

struct Sum9Lanes {
  uint32_t lane;  // bits 4..1: the lane keeps the upper half at halving steps 16, 8, 4, 2
  int component;  // the component this lane adds to memory (-1: none; odd lanes of a pair: none)
};

SPLAT_FUNC Sum9Lanes simd_sum9_lanes(uint32_t lane) {
  Sum9Lanes l;
  l.lane = sp_opaque(lane);
  uint32_t h4 = (lane >> 4) & 1u, h3 = (lane >> 3) & 1u;
  uint32_t ix = 2u * ((lane >> 2) & 1u) + ((lane >> 1) & 1u);
  uint32_t c = 5u * h4 + 3u * h3 + ix;
  bool none = (lane & 1u) != 0u || ix > 2u || 3u * h3 + ix > 4u || c >= 9u;
  l.component = (int)sp_opaque(none ? 0xffffffffu : c);
  return l;
}

SPLAT_FUNC float simd_sum9(SPLAT_THREAD const float* v, Sum9Lanes l) {
  const bool h4 = (l.lane & 16u) != 0u, h3 = (l.lane & 8u) != 0u, h2 = (l.lane & 4u) != 0u, h1 = (l.lane & 2u) != 0u;
  float w[5];
  for (int k = 0; k < 5; ++k) {
    float lo = v[k], hi = k + 5 < 9 ? v[k + 5] : 0.f;
    w[k] = (h4 ? hi : lo) + simd_shuffle_xor(h4 ? lo : hi, 16u);
  }
  float x[3];
  for (int k = 0; k < 3; ++k) {
    float lo = w[k], hi = k + 3 < 5 ? w[k + 3] : 0.f;
    x[k] = (h3 ? hi : lo) + simd_shuffle_xor(h3 ? lo : hi, 8u);
  }
  float y[2];
  for (int k = 0; k < 2; ++k) {
    float lo = x[k], hi = k + 2 < 3 ? x[k + 2] : 0.f;
    y[k] = (h2 ? hi : lo) + simd_shuffle_xor(h2 ? lo : hi, 4u);
  }
  float z = (h1 ? y[1] : y[0]) + simd_shuffle_xor(h1 ? y[0] : y[1], 2u);
  return z + simd_shuffle_xor(z, 1u);
}
