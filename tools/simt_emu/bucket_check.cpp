// Binning into tile buckets (shaders/kernels/tile_buckets.h) on the SIMT
// emulator, dispatched as GpuDevice dispatches it (count, the counts' scan,
// emission, the per-tile sort), against each tile's list built serially: the
// records whose covered tiles (tile_cover.h, row-major, at most their pair
// count) hold the tile, ordered by (depth bits, record) with std::sort, which
// is the radix path's order. The scene mixes small splats with ones that
// cover hundreds of tiles (walked by their SIMD group), splats without pairs,
// counts a few below the cover (the tiles past the count dropped), repeated
// depths (ties broken by record) and several views binned together. Built
// with a small SPLAT_BUCKET_CAP, long lists take the runs and merges. Prints
// `lists_differ` (tiles whose sorted list or range differs), `counts_left`
// (tile counts not back at 0 after emission, which counts them down), `longest` (the longest list),
// `pairs`, and for the overflow run (`overflow` argument 1: nothing placed)
// `radius_kept` (radii not set to -1) and `ranges_nonempty`.
//
//   bucket_check SEED GAUSSIANS VIEWS OVERFLOW
#include "simt_emu.h"
// The kernel bodies, after the emulator.
#include "tile_buckets.h"

#include <algorithm>
#include <cmath>
#include <random>

int main(int argc, char** argv) {
  if (argc != 5) {
    fprintf(stderr, "usage: bucket_check SEED GAUSSIANS VIEWS OVERFLOW\n");
    return 2;
  }
  std::mt19937 rng((uint32_t)strtoul(argv[1], nullptr, 10));
  const uint32_t per_view = (uint32_t)atoi(argv[2]);
  const uint32_t views = std::max(1, atoi(argv[3])), n = per_view * views;
  const bool overflow = atoi(argv[4]) != 0;
  std::uniform_real_distribution<float> uniform(0.f, 1.f);

  CameraParams cam{};
  cam.width = 700;
  cam.height = 420;
  cam.tiles_x = (cam.width + SPLAT_TILE_SIZE - 1) / SPLAT_TILE_SIZE;
  cam.tiles_y = (cam.height + SPLAT_TILE_SIZE - 1) / SPLAT_TILE_SIZE;
  RasterParams rp{};
  const uint32_t view_tiles = cam.tiles_x * cam.tiles_y;
  rp.num_gaussians = n;
  rp.num_tiles = view_tiles * views;
  rp.view_records = views > 1 ? per_view : 0u;

  std::vector<CoverRecord> covers(n);
  std::vector<TileCover> cover_of(n);
  std::vector<uint32_t> pair_count(n, 0u), depth_keys(n, 0xffffffffu);
  std::vector<int32_t> radius(n, 0);
  for (uint32_t i = 0; i < n; ++i) {
    const float mx = -50.f + (cam.width + 100.f) * uniform(rng), my = -50.f + (cam.height + 100.f) * uniform(rng);
    // One in 8 large (sigma up to ~150 px: hundreds of tiles), the rest 0.5..8 px.
    const float big = uniform(rng) < 0.125f ? 20.f : 1.f;
    const float s1 = big * (0.5f + 7.5f * uniform(rng)), s2 = big * (0.5f + 7.5f * uniform(rng));
    const float th = 6.2831853f * uniform(rng), c = cosf(th), s = sinf(th);
    const float a = c * c * s1 * s1 + s * s * s2 * s2, b = c * s * (s1 * s1 - s2 * s2);
    const float d = s * s * s1 * s1 + c * c * s2 * s2, det = a * d - b * b;
    const float opacity = 0.005f + 0.99f * uniform(rng);  // some below 1/255: no tile at all
    const float reach = 3.4f * std::max(s1, s2);
    const int x0 = std::clamp((int)floorf((mx - reach) / SPLAT_TILE_SIZE), 0, (int)cam.tiles_x);
    const int y0 = std::clamp((int)floorf((my - reach) / SPLAT_TILE_SIZE), 0, (int)cam.tiles_y);
    const int x1 = std::clamp((int)floorf((mx + reach) / SPLAT_TILE_SIZE) + 1, 0, (int)cam.tiles_x);
    const int y1 = std::clamp((int)floorf((my + reach) / SPLAT_TILE_SIZE) + 1, 0, (int)cam.tiles_y);
    store_cover_record(covers.data(), i, make_vec2(mx, my), make_vec3(d / det, -b / det, a / det), opacity, x0, y0,
                       x1, y1);
    cover_of[i] = load_tile_cover(covers.data(), i);
    if (uniform(rng) < 0.1f) continue;  // culled: no pairs
    uint32_t count = tile_cover_count(cover_of[i]);
    if (uniform(rng) < 0.05f) count = (uint32_t)std::max(0, (int)count - (int)(rng() % 4));
    pair_count[i] = count;
    radius[i] = 1 + (int32_t)reach;
    // Depths from a few hundred values: many ties, which the record breaks.
    depth_keys[i] = sp_float_bits(1.f + 0.01f * (float)(rng() % 400));
  }

  // The serial lists.
  std::vector<std::vector<uint32_t>> ref(rp.num_tiles);
  for (uint32_t i = 0; i < n; ++i) {
    uint32_t left = pair_count[i];
    const TileCover& tc = cover_of[i];
    const TileRows rows = tile_rows(tc);
    for (int ty = tc.y0; ty < tc.y1 && left > 0u; ++ty) {
      int tx0, tx1;
      tile_cover_row(rows, ty, tx0, tx1);
      for (int tx = tx0; tx < tx1 && left > 0u; ++tx, --left)
        ref[i / per_view * view_tiles + (uint32_t)ty * cam.tiles_x + (uint32_t)tx].push_back(i);
    }
  }
  uint32_t pairs = 0, longest = 0;
  for (auto& list : ref) {
    std::sort(list.begin(), list.end(), [&](uint32_t x, uint32_t y) {
      return depth_keys[x] < depth_keys[y] || (depth_keys[x] == depth_keys[y] && x < y);
    });
    pairs += (uint32_t)list.size();
    longest = std::max(longest, (uint32_t)list.size());
  }

  // The kernels, as GpuDevice::forward_pass dispatches them (the scan on the
  // host: scan.h has its own check).
  const uint32_t groups = (n + SPLAT_GROUP_SIZE - 1) / SPLAT_GROUP_SIZE + 1;  // a partial group and an idle one
  std::vector<uint32_t> tile_counts(rp.num_tiles, 0u), tile_offsets(rp.num_tiles + 1, 0u);
  simt_emu::dispatch(groups, SPLAT_GROUP_SIZE, [&](SimtThread t) {
    bucket_count_body(t, cam, rp, covers.data(), pair_count.data(), tile_counts.data());
  });
  for (uint32_t tile = 0; tile < rp.num_tiles; ++tile) tile_offsets[tile + 1] = tile_offsets[tile] + tile_counts[tile];
  uint32_t counts_differ = 0;
  for (uint32_t tile = 0; tile < rp.num_tiles; ++tile) counts_differ += tile_counts[tile] != ref[tile].size() ? 1u : 0u;
  PairStatus status{};
  status.live = overflow ? 0u : pairs;
  status.overflow = overflow ? 1u : 0u;
  const size_t slots = (size_t)pairs + 5u;  // a capacity above the count
  std::vector<uint64_t> words_a(slots, ~0ull), words_b(slots, ~0ull);
  std::vector<uint32_t> sorted(slots, ~0u);
  simt_emu::dispatch(groups, SPLAT_GROUP_SIZE, [&](SimtThread t) {
    bucket_emit_body(t, cam, rp, covers.data(), radius.data(), pair_count.data(), depth_keys.data(), &status,
                     tile_counts.data(), tile_offsets.data(), words_a.data());
  });
  std::vector<uint32_t> ranges(2 * ((size_t)rp.num_tiles + 1), 0xdeadu);
  simt_emu::dispatch(rp.num_tiles + 1, SPLAT_GROUP_SIZE, [&](SimtThread t) {
    SPLAT_TG_ARRAY(uint64_t, w, SPLAT_BUCKET_CAP);
    bucket_sort_body(t, rp, tile_offsets.data(), &status, words_a.data(), words_b.data(), sorted.data(),
                     ranges.data(), w);
  });

  uint32_t lists_differ = 0, counts_left = 0, radius_kept = 0, ranges_nonempty = 0;
  for (uint32_t tile = 0; tile <= rp.num_tiles; ++tile) {
    const uint32_t lo = ranges[2 * tile], hi = ranges[2 * tile + 1];
    ranges_nonempty += hi != lo ? 1u : 0u;
    if (overflow) continue;
    if (tile == rp.num_tiles) {
      lists_differ += lo != 0u || hi != 0u ? 1u : 0u;
      continue;
    }
    const std::vector<uint32_t>& want = ref[tile];
    bool same = lo == tile_offsets[tile] && hi - lo == want.size();
    for (uint32_t j = 0; same && j < want.size(); ++j) same = sorted[lo + j] == want[j];
    lists_differ += same ? 0u : 1u;
  }
  for (uint32_t tile = 0; !overflow && tile < rp.num_tiles; ++tile) counts_left += tile_counts[tile] != 0u ? 1u : 0u;
  for (uint32_t i = 0; i < n; ++i) radius_kept += overflow && radius[i] != -1 ? 1u : 0u;
  printf("counts_differ %u\nlists_differ %u\ncounts_left %u\nradius_kept %u\nranges_nonempty %u\nlongest %u\npairs %u\n",
         counts_differ, lists_differ, counts_left, radius_kept, ranges_nonempty, longest, pairs);
  return 0;
}
