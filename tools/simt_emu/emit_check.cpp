// Pair emission (emit_pairs_body, shaders/kernels/tile_bin.h) on the SIMT
// emulator, against the serial walk over each Gaussian's covered tiles
// (tile_cover.h) in depth order. The scene mixes small splats with ones that
// cover hundreds of tiles, splats with radius 0, and counts off by a few from
// the cover (the rounding case: surplus tiles dropped, missing ones filled
// with sentinels), over a grid whose last threadgroup is partial and covers
// a capacity above the count. Prints `keys_differ`, `values_differ`,
// `ranges_differ` (built with SPLAT_SPEC_DETERMINISTIC=1: the per-Gaussian
// slot ranges; =0: left unwritten), `large` (Gaussians of more than 32 pairs), `in_pieces`
// (more than SPLAT_EMIT_PIECE: emitted piece by piece) and `pairs`.
//
//   emit_check SEED GAUSSIANS [VIEWS]
//
// VIEWS > 1: GAUSSIANS records a view for that many views binned together
// (RasterParams::view_records): record i's keys are its view's tiles, from
// (i / GAUSSIANS) T on.
#include "simt_emu.h"
// The kernel bodies, after the emulator.
#include "tile_bin.h"

#include <algorithm>
#include <cmath>
#include <random>

int main(int argc, char** argv) {
  if (argc != 3 && argc != 4) {
    fprintf(stderr, "usage: emit_check SEED GAUSSIANS [VIEWS]\n");
    return 2;
  }
  std::mt19937 rng((uint32_t)strtoul(argv[1], nullptr, 10));
  const uint32_t per_view = (uint32_t)atoi(argv[2]);
  const uint32_t views = argc == 4 ? std::max(1, atoi(argv[3])) : 1u, n = per_view * views;
  std::uniform_real_distribution<float> uniform(0.f, 1.f);

  CameraParams cam{};
  cam.width = 1000;
  cam.height = 600;
  cam.tiles_x = (cam.width + SPLAT_TILE_SIZE - 1) / SPLAT_TILE_SIZE;
  cam.tiles_y = (cam.height + SPLAT_TILE_SIZE - 1) / SPLAT_TILE_SIZE;
  RasterParams rp{};
  const uint32_t view_tiles = cam.tiles_x * cam.tiles_y;
  rp.num_gaussians = n;
  rp.num_tiles = view_tiles * views;
  rp.view_records = views > 1 ? per_view : 0u;

  std::vector<SplatRecord> records(n);
  std::vector<int32_t> radius(n), rects(4 * (size_t)n);
  for (uint32_t i = 0; i < n; ++i) {
    SplatRecord& r = records[i];
    r.mean2d[0] = -50.f + (cam.width + 100.f) * uniform(rng);
    r.mean2d[1] = -50.f + (cam.height + 100.f) * uniform(rng);
    // One in 8 large (sigma up to ~150 px: hundreds of tiles), the rest 0.5..8 px.
    const float big = uniform(rng) < 0.125f ? 20.f : 1.f;
    const float s1 = big * (0.5f + 7.5f * uniform(rng)), s2 = big * (0.5f + 7.5f * uniform(rng));
    const float th = 6.2831853f * uniform(rng), c = cosf(th), s = sinf(th);
    const float a = c * c * s1 * s1 + s * s * s2 * s2, b = c * s * (s1 * s1 - s2 * s2);
    const float d = s * s * s1 * s1 + c * c * s2 * s2, det = a * d - b * b;
    r.conic[0] = d / det;
    r.conic[1] = -b / det;
    r.conic[2] = a / det;
    r.opacity = 0.005f + 0.99f * uniform(rng);  // some below 1/255: no tile at all
    r.depth = 1.f + 10.f * uniform(rng);
    const float reach = 3.4f * std::max(s1, s2);
    int32_t* rect = &rects[4 * (size_t)i];
    rect[0] = std::clamp((int)floorf((r.mean2d[0] - reach) / SPLAT_TILE_SIZE), 0, (int)cam.tiles_x);
    rect[1] = std::clamp((int)floorf((r.mean2d[1] - reach) / SPLAT_TILE_SIZE), 0, (int)cam.tiles_y);
    rect[2] = std::clamp((int)floorf((r.mean2d[0] + reach) / SPLAT_TILE_SIZE) + 1, 0, (int)cam.tiles_x);
    rect[3] = std::clamp((int)floorf((r.mean2d[1] + reach) / SPLAT_TILE_SIZE) + 1, 0, (int)cam.tiles_y);
    radius[i] = uniform(rng) < 0.1f ? 0 : 1 + (int32_t)reach;
  }
  // What projection stores for emission (cover_record.h); the serial walk
  // below reads the records and rects themselves.
  std::vector<CoverRecord> covers(n);
  for (uint32_t i = 0; i < n; ++i) {
    const SplatRecord& r = records[i];
    const int32_t* rect = &rects[4 * (size_t)i];
    store_cover_record(covers.data(), i, make_vec2(r.mean2d[0], r.mean2d[1]),
                       make_vec3(r.conic[0], r.conic[1], r.conic[2]), r.opacity, rect[0], rect[1], rect[2], rect[3]);
  }
  std::vector<uint32_t> order(n);
  for (uint32_t i = 0; i < n; ++i) order[i] = i;
  std::stable_sort(order.begin(), order.end(),
                   [&](uint32_t x, uint32_t y) { return records[x].depth < records[y].depth; });
  // Counts in depth order: the cover's, off by -3..+3 for one Gaussian in 20.
  std::vector<uint32_t> offsets(n + 1, 0u);
  uint32_t large = 0, in_pieces = 0;
  for (uint32_t rank = 0; rank < n; ++rank) {
    const uint32_t i = order[rank];
    const int32_t* rect = &rects[4 * (size_t)i];
    uint32_t count = 0;
    if (radius[i] != 0) {
      count = tile_cover_count(record_tile_cover(records[i], rect[0], rect[1], rect[2], rect[3]));
      if (uniform(rng) < 0.05f) count = (uint32_t)std::max(0, (int)count + (int)(rng() % 7) - 3);
    }
    large += count > 32u ? 1u : 0u;
    in_pieces += count > SPLAT_EMIT_PIECE ? 1u : 0u;
    offsets[rank + 1] = offsets[rank] + count;
  }
  const uint32_t pairs = offsets[n];

  // The serial walk: each Gaussian's covered tiles, row-major, within its slots.
  std::vector<uint32_t> ref_keys(pairs, ~0u);
  std::vector<uint32_t> ref_values(pairs, ~0u), ref_ranges(2 * (size_t)n, ~0u);
  for (uint32_t rank = 0; rank < n; ++rank) {
    const uint32_t i = order[rank];
    uint32_t out = offsets[rank];
    const uint32_t stop = offsets[rank + 1];
    if (SPLAT_SPEC_DETERMINISTIC) {  // the other variant writes no range
      ref_ranges[2 * i] = out;
      ref_ranges[2 * i + 1] = stop - out;
    }
    if (radius[i] == 0) continue;
    const int32_t* rect = &rects[4 * (size_t)i];
    const TileCover tc = record_tile_cover(records[i], rect[0], rect[1], rect[2], rect[3]);
    const TileRows rows = tile_rows(tc);
    for (int ty = tc.y0; ty < tc.y1; ++ty) {
      int tx0, tx1;
      tile_cover_row(rows, ty, tx0, tx1);
      for (int tx = tx0; tx < tx1 && out < stop; ++tx, ++out) {
        ref_keys[out] = i / per_view * view_tiles + (uint32_t)ty * cam.tiles_x + (uint32_t)tx;
        ref_values[out] = i;
      }
    }
    for (; out < stop; ++out) {
      ref_keys[out] = rp.num_tiles;
      ref_values[out] = i;
    }
  }

  std::vector<uint32_t> keys(pairs, ~0u);
  std::vector<uint32_t> values(pairs, ~0u), ranges(2 * (size_t)n, ~0u);
  PairStatus status{};
  status.live = pairs;
  // The grid covers a capacity above the count, as a forward sized on the
  // device runs it (pieces past the count return at once).
  const uint32_t slots = pairs + pairs / 2u + 7u;
  const uint32_t groups = (emit_pair_threads(n, slots) + SPLAT_GROUP_SIZE - 1) / SPLAT_GROUP_SIZE;
  simt_emu::dispatch(groups, SPLAT_GROUP_SIZE, [&](SimtThread t) {
    emit_pairs_body(t, cam, rp, covers.data(), radius.data(), order.data(), offsets.data(), &status,
                    keys.data(), values.data(), ranges.data());
  });
  uint32_t keys_differ = 0, values_differ = 0, ranges_differ = 0;
  for (uint32_t p = 0; p < pairs; ++p) {
    keys_differ += keys[p] != ref_keys[p] ? 1u : 0u;
    values_differ += values[p] != ref_values[p] ? 1u : 0u;
  }
  for (size_t k = 0; k < ranges.size(); ++k) ranges_differ += ranges[k] != ref_ranges[k] ? 1u : 0u;
  printf("keys_differ %u\nvalues_differ %u\nranges_differ %u\nlarge %u\nin_pieces %u\npairs %u\n", keys_differ,
         values_differ, ranges_differ, large, in_pieces, pairs);
  return 0;
}
