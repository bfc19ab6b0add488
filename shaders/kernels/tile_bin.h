// Binning of visible Gaussians into 16x16 tiles. The Gaussians are sorted by
// depth first (radix_sort.h over n 32-bit keys, stable: ties keep index
// order); pairs are then emitted in that order at prefix-sum offsets over the
// depth ranks, keyed by tile alone, and a stable sort by tile (a few bits)
// leaves each tile's list in depth order: the order a stable sort of
// (tile << 32 | depth bits) over pairs in Gaussian order gives, with 4 + 2
// radix passes over n Gaussians and the pairs instead of 6 over the pairs.
// Then each tile's range in the sorted pair list.
#pragma once
#include "cover_record.h"
#include "simt_util.h"
#include "tile_cover.h"

#ifndef SPLAT_SPEC_DETERMINISTIC
#define SPLAT_SPEC_DETERMINISTIC 0
#endif

// counts_by_rank[r] = pair_count[order[r]]: the pair counts in depth order.
SPLAT_FUNC void gather_pair_counts_body(SimtThread t, SPLAT_CONST_MEM const ScanParams& p,
                                        SPLAT_DEVICE_MEM const uint32_t* order,
                                        SPLAT_DEVICE_MEM const uint32_t* pair_count,
                                        SPLAT_DEVICE_MEM uint32_t* counts_by_rank) {
  uint32_t r = global_index(t);
  if (r >= p.count) return;
  counts_by_rank[r] = pair_count[order[r]];
}

// One threadgroup: the exact 64-bit total of the pair counts from their
// scanned block sums (scan.h: block_offsets[0 .. num_blocks], each
// difference a block's sum, 2^32 - 1 when it saturated), checked against the
// capacity of the pair buffers. A total that does not fit sets the sticky
// overflow (and its step); from then on every forward emits nothing until the
// host has grown the buffers, cleared the record and run the steps again.
SPLAT_FUNC void pair_total_body(SimtThread t, SPLAT_CONST_MEM const PairParams& p,
                                SPLAT_DEVICE_MEM const uint32_t* block_offsets, SPLAT_DEVICE_MEM PairStatus* status,
                                SPLAT_TG_MEM uint64_t* partial, SPLAT_TG_MEM uint32_t* wrapped) {
  uint64_t sum = 0u;
  uint32_t sat = 0u;
  for (uint32_t b = t.tid; b < p.num_blocks; b += SPLAT_GROUP_SIZE) {
    const uint32_t d = block_offsets[b + 1u] - block_offsets[b];
    sum += (uint64_t)d;
    sat |= d == 0xffffffffu ? 1u : 0u;
  }
  partial[t.tid] = sum;
  wrapped[t.tid] = sat;
  sp_group_barrier();
  for (uint32_t half = SPLAT_GROUP_SIZE / 2u; half > 0u; half >>= 1u) {
    if (t.tid < half) {
      partial[t.tid] += partial[t.tid + half];
      wrapped[t.tid] |= wrapped[t.tid + half];
    }
    sp_group_barrier();
  }
  if (t.tid != 0u) return;
  const uint64_t total = partial[0];
  const bool saturated = wrapped[0] != 0u;
  const bool fits = !saturated && total <= (uint64_t)p.capacity;
  // Field by field: Metal copies no struct across address spaces.
  SPLAT_DEVICE_MEM PairStatus* s = status;
  if (!fits && s->overflow == 0u) {
    s->overflow = 1u;
    s->first_step = p.step;
  }
  if (saturated) s->saturated = 1u;
  s->live = s->overflow == 0u ? (uint32_t)total : 0u;
  const uint64_t seen = ((uint64_t)s->max_hi << 32) | (uint64_t)s->max_lo;
  if (total > seen) {
    s->max_lo = (uint32_t)total;
    s->max_hi = (uint32_t)(total >> 32);
  }
}

// The pairs of Gaussian i, whose slots are [a, b), that fall in [lo, hi)
// (a <= lo <= hi <= b): its covered tiles (its CoverRecord) in row-major order
// from the (lo - a)-th on, then sentinel keys of tile num_tiles where the
// cover holds fewer tiles than its count (rounding: emit_pairs_body below).
// Both emission roles write through it, so a slot's key does not depend on
// which thread wrote it.
SPLAT_FUNC void emit_pair_span(SPLAT_CONST_MEM const CameraParams& cam, SPLAT_CONST_MEM const RasterParams& rp,
                               SPLAT_DEVICE_MEM const CoverRecord* covers, uint32_t i, uint32_t a, uint32_t lo,
                               uint32_t hi, SPLAT_DEVICE_MEM uint32_t* keys, SPLAT_DEVICE_MEM uint32_t* values) {
  const TileCover tc = load_tile_cover(covers, i);
  const TileRows rows = tile_rows(tc);
  const uint32_t base = view_tile_base(cam, rp, i);
  uint32_t skip = lo - a, out = lo;
  for (int32_t ty = tc.y0; ty < tc.y1 && out < hi; ++ty) {
    int tx0, tx1;
    tile_cover_row(rows, ty, tx0, tx1);
    const uint32_t row = (uint32_t)(tx1 - tx0);
    if (skip >= row) {  // a row wholly before lo: counted, not walked
      skip -= row;
      continue;
    }
    for (int32_t tx = tx0 + (int32_t)skip; tx < tx1 && out < hi; ++tx) {
      keys[out] = base + (uint32_t)ty * cam.tiles_x + (uint32_t)tx;
      values[out] = i;
      ++out;
    }
    skip = 0u;
  }
  for (; out < hi; ++out) {
    keys[out] = rp.num_tiles;
    values[out] = i;
  }
}

// Emission has two roles per thread g (grid: emit_pair_threads in params.h).
// As rank r = g it records Gaussian i = order[r]'s slots offsets[r] ..
// offsets[r + 1] (the scan of counts_by_rank) in pair_ranges[2 i ..] = (first
// slot, count) when SPLAT_SPEC_DETERMINISTIC (the deterministic backward's
// pair slots; a random write a Gaussian that nothing else reads, so the other
// variant skips it), and emits them itself when
// there are at most SPLAT_EMIT_PIECE. As piece g it emits the slots
// [g P, (g + 1) P) (P = SPLAT_EMIT_PIECE) of the Gaussians of more than P
// pairs: a splat that covers a thousand tiles is written by a few dozen
// threads instead of one, whose serial walk was the kernel's length
// (thermos: the nearest splats cover up to the whole frame, and depth order
// puts them in the same first SIMD groups). Keys: tile, the covered tiles in
// row-major order. Should rounding ever make the walk disagree with the
// count taken in projection, the slots stay in range: surplus tiles are
// dropped and missing ones filled with sentinel keys of tile num_tiles, which
// sort last and fall outside every tile's range. status: the forward's
// PairStatus (pair_total, or the host's exact count).
SPLAT_FUNC void emit_pairs_body(SimtThread t, SPLAT_CONST_MEM const CameraParams& cam,
                                SPLAT_CONST_MEM const RasterParams& rp, SPLAT_DEVICE_MEM const CoverRecord* covers,
                                SPLAT_DEVICE_MEM int32_t* radius, SPLAT_DEVICE_MEM const uint32_t* order, SPLAT_DEVICE_MEM const uint32_t* offsets,
                                SPLAT_DEVICE_MEM const PairStatus* status, SPLAT_DEVICE_MEM uint32_t* keys,
                                SPLAT_DEVICE_MEM uint32_t* values, SPLAT_DEVICE_MEM uint32_t* pair_ranges) {
  const uint32_t g = global_index(t), n = rp.num_gaussians;
  const bool overflow = status[0].overflow != 0u;
  if (g < n) {
    const uint32_t i = order[g];
    if (overflow) {
      // The pairs do not fit: none is written, and every radius becomes -1,
      // which the step's state-changing kernels read as "skip this step".
      if (SPLAT_SPEC_DETERMINISTIC) {
        pair_ranges[2 * i] = 0u;
        pair_ranges[2 * i + 1] = 0u;
      }
      radius[i] = -1;
    } else {
      const uint32_t a = offsets[g], b = offsets[g + 1];
      if (SPLAT_SPEC_DETERMINISTIC) {  // read only by the deterministic backward
        pair_ranges[2 * i] = a;
        pair_ranges[2 * i + 1] = b - a;
      }
      // A Gaussian with no pair (culled: radius 0) reads nothing.
      if (b > a && b - a <= SPLAT_EMIT_PIECE) emit_pair_span(cam, rp, covers, i, a, a, b, keys, values);
    }
  }
  if (overflow || n == 0u) return;
  // Piece g: the last rank whose slots start at or before its first slot,
  // then every rank that starts inside it. (Pieces on threads of their own,
  // after the ranks, measured 0.003 ms slower on thermos.)
  const uint32_t live = status[0].live;
  if (g >= (live + SPLAT_EMIT_PIECE - 1u) / SPLAT_EMIT_PIECE) return;
  const uint32_t s0 = g * SPLAT_EMIT_PIECE, s1 = live - s0 < SPLAT_EMIT_PIECE ? live : s0 + SPLAT_EMIT_PIECE;
  uint32_t lo = 0u, hi = n;
  while (hi - lo > 1u) {
    const uint32_t mid = lo + (hi - lo) / 2u;
    if (offsets[mid] <= s0) lo = mid;
    else hi = mid;
  }
  for (uint32_t r = lo; r < n; ++r) {
    const uint32_t a = offsets[r];
    if (a >= s1) break;
    const uint32_t b = offsets[r + 1];
    if (b - a <= SPLAT_EMIT_PIECE) continue;  // its rank's own thread emits it
    emit_pair_span(cam, rp, covers, order[r], a, a > s0 ? a : s0, b < s1 ? b : s1, keys, values);
  }
}

// ranges[2 tile] .. ranges[2 tile + 1]: the tile's pairs in sorted order
// (the buffer is zeroed first, so empty tiles read [0, 0)). It holds
// num_tiles + 1 ranges: the last one catches sentinel keys. The pairs are the
// first min(p.count, count_limit[0]) keys (count_limit: PairStatus::live).
SPLAT_FUNC void tile_ranges_body(SimtThread t, SPLAT_CONST_MEM const ScanParams& p,
                                 SPLAT_DEVICE_MEM const uint32_t* keys, SPLAT_DEVICE_MEM const uint32_t* count_limit,
                                 SPLAT_DEVICE_MEM uint32_t* ranges) {
  uint32_t i = global_index(t);
  const uint32_t count = limited_count(p.count, count_limit);
  if (i >= count) return;
  uint32_t tile = keys[i];
  if (i == 0) {
    ranges[2 * tile] = 0u;
  } else {
    uint32_t prev = keys[i - 1];
    if (prev != tile) {
      ranges[2 * prev + 1] = i;
      ranges[2 * tile] = i;
    }
  }
  if (i == count - 1) ranges[2 * tile + 1] = count;
}

// chunk_tiles[slot] = tile for every chunk slot of every tile (chunk_slot()
// in params.h), one thread per tile; no chunk saturates the tile yet.
SPLAT_FUNC void tile_chunks_body(SimtThread t, SPLAT_CONST_MEM const RasterParams& rp,
                                 SPLAT_DEVICE_MEM const uint32_t* ranges, SPLAT_DEVICE_MEM uint32_t* chunk_tiles,
                                 SPLAT_DEVICE_MEM uint32_t* tile_saturated) {
  uint32_t tile = global_index(t);
  if (tile >= rp.num_tiles) return;
  tile_saturated[tile] = SPLAT_NOT_SATURATED;
  uint32_t start = ranges[2 * tile], end = ranges[2 * tile + 1];
  uint32_t chunks = chunk_count(start, end);
  for (uint32_t c = 0; c < chunks; ++c) chunk_tiles[chunk_slot(tile, start, c)] = tile;
}
