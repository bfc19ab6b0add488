// Tile coverage: which tiles of a splat's projection rect can receive a
// non-zero alpha from it. Conventions: docs/architecture.md "Tile coverage".
//
// The blend (blend.h) gives a splat zero alpha wherever sigma >= 5.55 or
// opacity exp(-sigma) < 1/255, that is outside the ellipse
//   q(u, v) = A u^2 + 2 B u v + C v^2 <= 2 cut,  cut = min(5.55, ln(255 opacity))
// (u, v: pixel centre minus mean2d; conic (A, B, C)). Binning emits a pair
// only for the tiles of the rect that hold a pixel centre inside the ellipse
// grown by SPLAT_COVER_MARGIN in sigma, so float rounding never drops a
// contributing pixel: images and gradients are those of the whole rect.
#pragma once
#include "blend.h"
#include "params.h"

#define SPLAT_COVER_MARGIN 0.1f
// Below this det / (A C) the conic is too ill-conditioned to trust the
// ellipse's float bounds: such a splat keeps its whole rect.
#define SPLAT_COVER_MIN_CONDITION 1e-4f

struct TileCover {
  vec2 mean2d;
  float a, b, c;  // conic
  float det;      // A C - B^2
  float r;        // 2 (cut + margin); < 0 when alpha < 1/255 everywhere
  bool whole_rect;
  int x0, y0, x1, y1;  // the projection's tile rect [x0, x1) x [y0, y1)
};

SPLAT_FUNC TileCover tile_cover(vec2 mean2d, vec3 conic, float opacity, int x0, int y0, int x1, int y1) {
  TileCover tc;
  tc.mean2d = mean2d;
  tc.a = conic.x;
  tc.b = conic.y;
  tc.c = conic.z;
  tc.det = tc.a * tc.c - tc.b * tc.b;
  tc.x0 = x0;
  tc.y0 = y0;
  tc.x1 = x1;
  tc.y1 = y1;
  tc.r = opacity * 255.f < 0.999f ? -1.f
                                  : 2.f * (sp_min(SPLAT_SIGMA_SKIP, sp_log(opacity * 255.f)) + SPLAT_COVER_MARGIN);
  tc.whole_rect = !(tc.a > 0.f) || !(tc.c > 0.f) || !(tc.det > SPLAT_COVER_MIN_CONDITION * tc.a * tc.c);
  return tc;
}

// The cover of a projected splat's record, with its rect [x0, x1) x [y0, y1).
SPLAT_FUNC TileCover record_tile_cover(SPLAT_DEVICE_MEM const SplatRecord& r, int x0, int y0, int x1, int y1) {
  return tile_cover(make_vec2(r.mean2d[0], r.mean2d[1]), make_vec3(r.conic[0], r.conic[1], r.conic[2]), r.opacity,
                    x0, y0, x1, y1);
}

// The ellipse's vertical extent from the mean, sqrt(r A / det) (a
// well-conditioned cover with r >= 0).
SPLAT_FUNC float tile_cover_v_max(SPLAT_THREAD const TileCover& tc) { return sp_sqrt(tc.r * tc.a / tc.det); }

// A cover ready to be walked row by row: the row-invariant terms of
// tile_cover_row computed once (the same expressions, so the same bits as
// computing them per row). Only for an ellipse (r >= 0, not whole_rect); 0
// otherwise.
struct TileRows {
  TileCover tc;
  float v_max;   // tile_cover_v_max
  float v_turn;  // B sqrt(r / (C det)): where the ellipse's left / right boundaries turn
};

SPLAT_FUNC TileRows tile_rows(SPLAT_THREAD const TileCover& tc) {
  TileRows rows;
  rows.tc = tc;
  rows.v_max = 0.f;
  rows.v_turn = 0.f;
  if (tc.r >= 0.f && !tc.whole_rect) {
    rows.v_max = tile_cover_v_max(tc);
    rows.v_turn = tc.b * sp_sqrt(tc.r / (tc.c * tc.det));
  }
  return rows;
}

// Both roots u of q(u, v) = r at row offset v (|v| within the ellipse), the
// smaller in `lo`; written without cancellation.
SPLAT_FUNC void tile_cover_roots(SPLAT_THREAD const TileCover& tc, float v, SPLAT_THREAD float& lo,
                                 SPLAT_THREAD float& hi) {
  float bv = tc.b * v;
  float s = sp_sqrt(sp_max(0.f, tc.a * tc.r - tc.det * v * v));
  float q = bv >= 0.f ? -(bv + s) : s - bv;  // |q| = |bv| + s
  float r1 = q / tc.a;
  float r2 = q != 0.f ? (tc.c * v * v - tc.r) / q : 0.f;
  lo = sp_min(r1, r2);
  hi = sp_max(r1, r2);
}

// The tiles [tx0, tx1) of tile row `ty` that the splat covers (tx0 == tx1:
// none). Rows outside the rect are not asked for.
SPLAT_FUNC void tile_cover_row(SPLAT_THREAD const TileRows& rows, int ty, SPLAT_THREAD int& tx0,
                               SPLAT_THREAD int& tx1) {
  SPLAT_THREAD const TileCover& tc = rows.tc;
  tx0 = tc.x0;
  tx1 = tc.x0;
  if (tc.r < 0.f) return;
  tx1 = tc.x1;
  if (tc.whole_rect) return;
  tx1 = tx0;
  const float ts = (float)SPLAT_TILE_SIZE;
  // The pixel-centre rows of this tile row, relative to the mean, within the
  // ellipse's vertical extent.
  float v0 = sp_max((float)ty * ts + 0.5f - tc.mean2d.y, -rows.v_max);
  float v1 = sp_min((float)ty * ts + (ts - 0.5f) - tc.mean2d.y, rows.v_max);
  if (!(v0 <= v1)) return;
  // The ellipse's right boundary is concave in v with its maximum at
  // v = -v_turn, the left one convex with its minimum at v_turn: over
  // [v0, v1] each extreme is at that v clamped to the band.
  float lo, hi, unused;
  tile_cover_roots(tc, sp_clamp(-rows.v_turn, v0, v1), unused, hi);
  tile_cover_roots(tc, sp_clamp(rows.v_turn, v0, v1), lo, unused);
  // Tiles holding a pixel centre x + 0.5 in [mean + lo, mean + hi].
  float b = sp_ceil((tc.mean2d.x + lo - (ts - 0.5f)) / ts);
  float e = sp_floor((tc.mean2d.x + hi - 0.5f) / ts) + 1.f;
  tx0 = (int)sp_clamp(b, (float)tc.x0, (float)tc.x1);
  tx1 = (int)sp_clamp(e, (float)tx0, (float)tc.x1);
}

// Number of tiles the splat covers in its rows before `ty`.
SPLAT_FUNC uint32_t tile_rows_count_before(SPLAT_THREAD const TileRows& rows, int ty) {
  uint32_t n = 0u;
  for (int row = rows.tc.y0; row < ty; ++row) {
    int tx0, tx1;
    tile_cover_row(rows, row, tx0, tx1);
    n += (uint32_t)(tx1 - tx0);
  }
  return n;
}

// Number of tiles the splat covers: its pair count.
SPLAT_FUNC uint32_t tile_cover_count(SPLAT_THREAD const TileCover& tc) {
  const TileRows rows = tile_rows(tc);
  return tile_rows_count_before(rows, tc.y1);
}

// Emission rank of covered tile (tx, ty) among the splat's pairs (row-major).
SPLAT_FUNC uint32_t tile_cover_rank(SPLAT_THREAD const TileCover& tc, int tx, int ty) {
  const TileRows rows = tile_rows(tc);
  int tx0, tx1;
  tile_cover_row(rows, ty, tx0, tx1);
  return tile_rows_count_before(rows, ty) + (uint32_t)(tx - tx0);
}

// The tile's 4x4-pixel blocks holding a pixel centre where the splat can
// have a non-zero alpha: bit 4 row + column of block (column, row) of tile
// (tx, ty) of its view. The rasterizers skip the splat for a SIMD group whose
// pixels lie in no such block. Per band of four pixel rows, the ellipse's
// horizontal extent is bounded by its centre line u = -B v / A at the band's
// ends, widened by the half-width sqrt(A r - det v^2) / A at the band's row
// nearest the mean: a superset of the exact extent (the centre line is
// linear in v, the half-width largest there), for one square root a band
// where the exact extent's two roots take two and four divisions. On the
// scale table's random scene (1M splats, 800x800) it leaves 1.7% more (SIMD
// group, splat) visits than the exact extent would.
SPLAT_STATIC_ASSERT(SPLAT_TILE_SIZE == 16, "a tile is 4 x 4 blocks of 4 x 4 pixels");
SPLAT_FUNC uint32_t tile_cover_blocks(SPLAT_THREAD const TileCover& tc, int tx, int ty) {
  if (tc.r < 0.f) return 0u;
  if (tc.whole_rect) return 0xFFFFu;
  const float v_max = tile_cover_v_max(tc), inv_a = 1.f / tc.a;
  // The tile's first pixel-centre column and row, relative to the mean.
  const float x0 = (float)(tx * SPLAT_TILE_SIZE) + 0.5f - tc.mean2d.x;
  const float y0 = (float)(ty * SPLAT_TILE_SIZE) + 0.5f - tc.mean2d.y;
  uint32_t mask = 0u;
  SPLAT_UNROLL
  for (int band = 0; band < 4; ++band) {
    const float v0 = sp_max(y0 + (float)(4 * band), -v_max), v1 = sp_min(y0 + (float)(4 * band + 3), v_max);
    if (!(v0 <= v1)) continue;
    const float vn = sp_clamp(0.f, v0, v1);
    const float w = sp_bound_sqrt(sp_max(0.f, tc.a * tc.r - tc.det * vn * vn)) * inv_a;
    const float u0 = -tc.b * v0 * inv_a, u1 = -tc.b * v1 * inv_a;
    const float lo = sp_min(u0, u1) - w, hi = sp_max(u0, u1) + w;
    // Block columns c whose centres x0 + 4 c .. x0 + 4 c + 3 meet [lo, hi].
    const float c_lo = sp_ceil((lo - x0 - 3.f) * 0.25f), c_hi = sp_floor((hi - x0) * 0.25f) + 1.f;
    const uint32_t c0 = (uint32_t)sp_clamp(c_lo, 0.f, 4.f), c1 = (uint32_t)sp_clamp(c_hi, (float)c0, 4.f);
    mask |= ((1u << c1) - (1u << c0)) << (4 * band);
  }
  return mask;
}
