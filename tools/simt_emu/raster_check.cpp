// The SIMT rasterization passes (shaders/kernels/rasterize_forward.h and
// rasterize_backward.h) on the SIMT emulator, against the sequential blend of
// shaders/common/blend.h over the same tile lists. A random scene of splat
// records (deep tiles: several chunks per list, saturated pixels) is binned
// as the GPU bins (tile cover, depth order) and rendered both ways; the
// backward takes a random d_image (and d_alpha). Writes the arrays for
// tests/test_simt_emulation.py to compare.
//
//   raster_check SEED SPLATS WITH_D_ALPHA OUT [FAINT [SKIP [VIEWS [CHUNKED]]]]
//
// VIEWS > 1: that many views of one size binned together, as a batch of
// views is (docs/architecture.md, "Several views a step"): SPLATS records a
// view, view v's at [v SPLATS, (v + 1) SPLATS), its tiles from v T and its
// pixels from v W H; the arrays then hold the views one below another.
//
// SKIP 1: the chunk pass in its two launches that skip the chunks behind one
// that saturates its tile (BackendConfig.raster_forward_chunks =
// skip_saturated, as GpuDevice dispatches it); the header then counts the
// chunks skipped, and the pixels of later chunks that the earlier chunks had
// ended, which skip them (in the head launches).
//
// CHUNKED 1: the chunked stop (RasterParams::chunk_stop; no walk or
// checkpoint pass, as GpuDevice dispatches it), against its sequential blend: each chunk of a
// list blended from T = 1 with the blend's own step (its stop applied to the
// chunk's product), chained, the pixel ending after a chunk that stopped it
// or left T below the stop.
//
// Backward variants are chosen at compile time (-DSPLAT_SPEC_BWD_...,
// -DSPLAT_SPEC_DETERMINISTIC=1, -DSPLAT_SPEC_ABSGRAD=1). The summed absolute
// 2D-mean gradients (absgrad) are written too: zero without SPLAT_SPEC_ABSGRAD.
#include "simt_emu.h"
// The kernel bodies, after the emulator.
#include "rasterize_backward.h"
#include "train_absgrad.h"

#include <algorithm>
#include <cmath>
#include <random>

namespace {

constexpr uint32_t kWidth = 72, kHeight = 56;  // 5 x 4 tiles, the last column and row partial

void write(FILE* f, const void* p, size_t bytes) {
  if (fwrite(p, 1, bytes, f) != bytes) {
    perror("raster_check: write");
    exit(2);
  }
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 5 || argc > 9) {
    fprintf(stderr, "usage: raster_check SEED SPLATS WITH_D_ALPHA OUT [FAINT [SKIP [VIEWS [CHUNKED]]]]\n");
    return 2;
  }
  std::mt19937 rng((uint32_t)strtoul(argv[1], nullptr, 10));
  const int per_view = atoi(argv[2]);
  const int views = argc > 7 ? std::max(1, atoi(argv[7])) : 1;
  const int n = per_view * views;
  const bool with_d_alpha = atoi(argv[3]) != 0;
  // Faint: opacities 0.01..0.05, so pixels rarely stop and their last
  // contributors lie deep in long lists (many checkpoint chunks).
  const bool faint = argc > 5 && atoi(argv[5]) != 0;
  const bool skip = argc > 6 && atoi(argv[6]) != 0;
  const bool chunked = argc > 8 && atoi(argv[8]) != 0;
  std::uniform_real_distribution<float> uniform(0.f, 1.f);
  std::normal_distribution<float> normal(0.f, 1.f);

  CameraParams cam{};
  cam.width = kWidth;
  cam.height = kHeight;
  cam.tiles_x = (kWidth + SPLAT_TILE_SIZE - 1) / SPLAT_TILE_SIZE;
  cam.tiles_y = (kHeight + SPLAT_TILE_SIZE - 1) / SPLAT_TILE_SIZE;
  const uint32_t view_tiles = cam.tiles_x * cam.tiles_y, num_tiles = view_tiles * (uint32_t)views;

  // Splats with principal sigmas of 0.7..7.7 px, some centres off screen, one
  // in 13 fully opaque (alpha clamps at 0.999) unless faint.
  std::vector<SplatRecord> records(n);
  std::vector<float> reach(n);  // half-width of a box holding the splat's sigma < 5.55 ellipse
  for (int i = 0; i < n; ++i) {
    SplatRecord& r = records[i];
    r.mean2d[0] = -8.f + (kWidth + 16.f) * uniform(rng);
    r.mean2d[1] = -8.f + (kHeight + 16.f) * uniform(rng);
    const float s1 = 0.7f + 7.f * uniform(rng) * uniform(rng), s2 = 0.7f + 7.f * uniform(rng) * uniform(rng);
    const float th = 6.2831853f * uniform(rng), c = cosf(th), s = sinf(th);
    const float a = c * c * s1 * s1 + s * s * s2 * s2, b = c * s * (s1 * s1 - s2 * s2);
    const float d = s * s * s1 * s1 + c * c * s2 * s2;
    const float det = a * d - b * b;
    r.conic[0] = d / det;
    r.conic[1] = -b / det;
    r.conic[2] = a / det;
    r.opacity = faint ? 0.01f + 0.04f * uniform(rng) : (i % 13 == 0 ? 1.f : 0.02f + 0.97f * uniform(rng));
    for (float& ch : r.color) ch = uniform(rng);
    r.depth = 1.f + 10.f * uniform(rng);
    r.sigmoid_opacity = r.opacity;
    r.color_clamped = 0.f;
    reach[i] = 3.4f * std::max(s1, s2);  // sqrt(2 * 5.55) = 3.33 sigma
  }

  // Binning as the GPU's (tile_bin.h): each splat's tile rect (here its box),
  // its covered tiles (tile_cover.h) emitted in depth order, row-major, then
  // a stable sort by tile; pair_ranges keep each splat's emission slots.
  std::vector<uint32_t> by_depth(n);
  for (int i = 0; i < n; ++i) by_depth[i] = (uint32_t)i;
  std::stable_sort(by_depth.begin(), by_depth.end(),
                   [&](uint32_t x, uint32_t y) { return records[x].depth < records[y].depth; });
  std::vector<int32_t> rects(4 * (size_t)n);
  std::vector<uint32_t> pair_ranges(2 * (size_t)n), pair_tiles, pair_ids;
  for (uint32_t g : by_depth) {
    const SplatRecord& r = records[g];
    int32_t* rect = &rects[4 * (size_t)g];
    rect[0] = std::clamp((int)floorf((r.mean2d[0] - reach[g]) / SPLAT_TILE_SIZE), 0, (int)cam.tiles_x);
    rect[1] = std::clamp((int)floorf((r.mean2d[1] - reach[g]) / SPLAT_TILE_SIZE), 0, (int)cam.tiles_y);
    rect[2] = std::clamp((int)floorf((r.mean2d[0] + reach[g]) / SPLAT_TILE_SIZE) + 1, 0, (int)cam.tiles_x);
    rect[3] = std::clamp((int)floorf((r.mean2d[1] + reach[g]) / SPLAT_TILE_SIZE) + 1, 0, (int)cam.tiles_y);
    pair_ranges[2 * g] = (uint32_t)pair_ids.size();
    const TileCover tc = record_tile_cover(r, rect[0], rect[1], rect[2], rect[3]);
    const TileRows rows = tile_rows(tc);
    for (int ty = tc.y0; ty < tc.y1; ++ty) {
      int tx0, tx1;
      tile_cover_row(rows, ty, tx0, tx1);
      for (int tx = tx0; tx < tx1; ++tx) {
        pair_tiles.push_back(g / (uint32_t)per_view * view_tiles + (uint32_t)ty * cam.tiles_x + (uint32_t)tx);
        pair_ids.push_back(g);
      }
    }
    pair_ranges[2 * g + 1] = (uint32_t)pair_ids.size() - pair_ranges[2 * g];
  }
  std::vector<uint32_t> by_tile(pair_ids.size());
  for (size_t i = 0; i < by_tile.size(); ++i) by_tile[i] = (uint32_t)i;
  std::stable_sort(by_tile.begin(), by_tile.end(),
                   [&](uint32_t x, uint32_t y) { return pair_tiles[x] < pair_tiles[y]; });
  std::vector<uint32_t> ranges(2 * num_tiles, 0u), sorted_ids(by_tile.size());
  for (size_t i = 0; i < by_tile.size(); ++i) {
    sorted_ids[i] = pair_ids[by_tile[i]];
    const uint32_t tile = pair_tiles[by_tile[i]];
    if (i == 0 || pair_tiles[by_tile[i - 1]] != tile) ranges[2 * tile] = (uint32_t)i;
    ranges[2 * tile + 1] = (uint32_t)i + 1;
  }
  const uint32_t num_pairs = (uint32_t)sorted_ids.size();
  const uint32_t slots = chunk_slots(num_tiles, num_pairs);
  std::vector<uint32_t> chunk_tiles(slots, 0xffffffffu);  // unused slots name no tile
  uint32_t deepest = 0;
  for (uint32_t t = 0; t < num_tiles; ++t) {
    const uint32_t start = ranges[2 * t], end = ranges[2 * t + 1];
    deepest = std::max(deepest, end - start);
    for (uint32_t k = 0; k < chunk_count(start, end); ++k) chunk_tiles[chunk_slot(t, start, k)] = t;
  }

  RasterParams rp{};
  rp.num_gaussians = (uint32_t)n;
  rp.num_tiles = num_tiles;
  rp.chunk_stop = chunked ? 1u : 0u;
  for (float& b : rp.background) b = uniform(rng);
  const uint32_t pixels = kWidth * kHeight * (uint32_t)views;
  std::vector<float> image(3 * pixels), alpha(pixels), final_T(pixels), chunk_state(4 * slots * SPLAT_GROUP_SIZE);
  std::vector<uint32_t> n_contrib(pixels), chunk_last(slots * SPLAT_GROUP_SIZE);
  // Written only by pixels the walk finishes: the chunked stop must leave every
  // entry as it is (the GPU binds a one-element buffer then).
  std::vector<uint32_t> stop_chunk(pixels, SPLAT_NO_STOP_CHUNK);

  // The forward's four passes, as GpuDevice dispatches them.
  std::vector<uint32_t> tile_saturated(num_tiles, SPLAT_NOT_SATURATED);
  auto chunk_pass = [&](uint32_t groups, ChunkPassParams cp) {
    simt_emu::dispatch(groups, SPLAT_CHUNK_THREADS, [&](SimtThread t) {
      SPLAT_TG_QUADS(s_splats, SPLAT_GROUP_SIZE * SPLAT_BATCH_FLOATS);
      SPLAT_TG_ARRAY(uint32_t, s_flags, SPLAT_CHUNK_THREADS / SPLAT_SIMD_WIDTH);
      rasterize_chunks_body(t, cam, rp, cp, ranges.data(), sorted_ids.data(), records.data(), chunk_tiles.data(),
                            chunk_state.data(), chunk_last.data(), tile_saturated.data(), s_splats, s_flags);
    });
  };
  const uint32_t head = 2;  // chunks per tile in the head launch (GpuDevice: kHeadChunks)
  if (skip) {
    for (uint32_t k = 0; k < head; ++k) chunk_pass(num_tiles, ChunkPassParams{1, k, 0, 1});
    chunk_pass(slots, ChunkPassParams{0, 0, head, 1});
  } else {
    chunk_pass(slots, ChunkPassParams{0, 0, 0, 0});
  }
  uint32_t skipped = 0;  // chunks behind the one that saturates their tile
  for (uint32_t t = 0; t < num_tiles; ++t)
    if (tile_saturated[t] != SPLAT_NOT_SATURATED)
      skipped += chunk_count(ranges[2 * t], ranges[2 * t + 1]) - 1u - tile_saturated[t];
  // Pixels a head launch found ended by the earlier chunks: their products in
  // the chain's order below half the stop, or a stop flagged in a chunk that
  // applies it.
  uint32_t ended = 0;
  if (skip) {
    for (uint32_t t = 0; t < num_tiles; ++t) {
      const uint32_t start = ranges[2 * t], chunks = chunk_count(start, ranges[2 * t + 1]);
      for (uint32_t k = 1; k < chunks && k < head; ++k) {
        if (tile_saturated[t] != SPLAT_NOT_SATURATED && tile_saturated[t] < k) break;
        for (uint32_t pixel = 0; pixel < SPLAT_GROUP_SIZE; ++pixel)
          ended += chunk_pixel_ended(chunk_T_before(rp, t, start, k, pixel, chunk_state.data(),
                                                    chunk_last.data())) ? 1u : 0u;
      }
    }
  }
  simt_emu::dispatch(num_tiles, SPLAT_GROUP_SIZE, [&](SimtThread t) {
    rasterize_forward_body(t, cam, rp, ranges.data(), image.data(), alpha.data(), final_T.data(), n_contrib.data(),
                           chunk_state.data(), chunk_last.data(), stop_chunk.data());
  });
  uint32_t walks = 0;  // pixels the walk pass finishes
  for (uint32_t v : stop_chunk) walks += v != SPLAT_NO_STOP_CHUNK ? 1u : 0u;
  if (!chunked) simt_emu::dispatch(slots, SPLAT_GROUP_SIZE, [&](SimtThread t) {
    SPLAT_TG_QUADS(s_splats, SPLAT_GROUP_SIZE * SPLAT_BATCH_FLOATS);
    SPLAT_TG_ARRAY(uint32_t, s_flags, SPLAT_GROUP_WARPS + 1);
    SPLAT_TG_ARRAY(uint32_t, s_walkers, SPLAT_GROUP_SIZE);
    rasterize_walk_body(t, cam, rp, ranges.data(), sorted_ids.data(), records.data(), chunk_tiles.data(),
                        image.data(), alpha.data(), final_T.data(), n_contrib.data(), chunk_state.data(),
                        chunk_last.data(), stop_chunk.data(), s_splats, s_flags, s_walkers);
  });
  if (!chunked) simt_emu::dispatch(num_tiles, SPLAT_GROUP_SIZE, [&](SimtThread t) {
    rasterize_checkpoints_body(t, cam, rp, ranges.data(), final_T.data(), n_contrib.data(), chunk_state.data());
  });

  // Deterministic: one gradient per pair (emission slot), summed per splat below;
  // the backward finds a pair's slot from the splat's cover, as projection stores it.
  const bool det = SPLAT_SPEC_DETERMINISTIC != 0;
  std::vector<CoverRecord> covers(n);
  for (int g = 0; g < n; ++g) {
    const SplatRecord& r = records[g];
    const int32_t* rect = &rects[4 * (size_t)g];
    store_cover_record(covers.data(), (uint32_t)g, make_vec2(r.mean2d[0], r.mean2d[1]),
                       make_vec3(r.conic[0], r.conic[1], r.conic[2]), r.opacity, rect[0], rect[1], rect[2], rect[3]);
  }
  std::vector<float> d_image(3 * pixels), d_alpha(pixels), grads((size_t)SPLAT_PAIR_GRAD * (det ? num_pairs : n), 0.f);
  std::vector<float> abs_grads(2 * (size_t)(det ? num_pairs : n), 0.f);
  for (float& v : d_image) v = normal(rng);
  for (float& v : d_alpha) v = normal(rng);
  BackwardParams bp{};
  bp.has_d_alpha = with_d_alpha ? 1u : 0u;
  bp.num_pairs = num_pairs;
  simt_emu::dispatch(slots, SPLAT_BWD_THREADS, [&](SimtThread t) {
    SPLAT_TG_QUADS(s_splats, SPLAT_GROUP_SIZE * SPLAT_BATCH_FLOATS);
    SPLAT_TG_ARRAY(uint32_t, s_ids, SPLAT_GROUP_SIZE);
    SPLAT_TG_ARRAY(uint32_t, s_warp, SPLAT_BWD_WARPS + 1);
    SPLAT_TG_ARRAY(float, s_red, SPLAT_BWD_RED_FLOATS);
    SPLAT_TG_ARRAY(float, s_part, SPLAT_BWD_PART_FLOATS);
    SPLAT_TG_ARRAY(uint32_t, s_live, SPLAT_GROUP_SIZE);
    rasterize_backward_body(t, cam, rp, bp, ranges.data(), sorted_ids.data(), records.data(), final_T.data(),
                            n_contrib.data(), chunk_state.data(), chunk_tiles.data(), d_image.data(), d_alpha.data(),
                            covers.data(), pair_ranges.data(), grads.data(), abs_grads.data(), s_splats, s_ids, s_warp,
                            s_red, s_part, s_live);
  });
  if (det && SPLAT_SPEC_ABSGRAD) {  // per splat, as GpuDevice dispatches it
    std::vector<float> per_splat(2 * (size_t)n, 0.f);
    ElementParams ep{(uint32_t)n, 0u, 0u, 0.f};
    simt_emu::dispatch((n + SPLAT_GROUP_SIZE - 1) / SPLAT_GROUP_SIZE, SPLAT_GROUP_SIZE, [&](SimtThread t) {
      absgrad_pair_sum_body(t, ep, pair_ranges.data(), abs_grads.data(), per_splat.data());
    });
    abs_grads.swap(per_splat);
  } else if (det) {
    abs_grads.assign(2 * (size_t)n, 0.f);
  }

  if (det) {
    std::vector<float> per_splat((size_t)SPLAT_PAIR_GRAD * n, 0.f);
    for (int g = 0; g < n; ++g)
      for (uint32_t k = 0; k < pair_ranges[2 * g + 1]; ++k)
        for (int q = 0; q < SPLAT_PAIR_GRAD; ++q)
          per_splat[SPLAT_PAIR_GRAD * g + q] += grads[SPLAT_PAIR_GRAD * (pair_ranges[2 * g] + k) + q];
    grads.swap(per_splat);
  }

  // The sequential blend: each pixel front to back through its tile's list,
  // then back to front from its last contributor.
  std::vector<float> ref_image(3 * pixels), ref_alpha(pixels), ref_grads((size_t)SPLAT_PAIR_GRAD * n, 0.f);
  std::vector<float> ref_abs(2 * (size_t)n, 0.f);
  std::vector<uint32_t> ref_n_contrib(pixels);
  const vec3 bg = make_vec3(rp.background[0], rp.background[1], rp.background[2]);
  for (uint32_t y = 0; y < kHeight * (uint32_t)views; ++y)
    for (uint32_t x = 0; x < kWidth; ++x) {
      const uint32_t v = y / kHeight, vy = y % kHeight;  // the view, and the row in it
      const uint32_t tile = v * view_tiles + vy / SPLAT_TILE_SIZE * cam.tiles_x + x / SPLAT_TILE_SIZE;
      const uint32_t p = y * kWidth + x;
      const uint32_t start = ranges[2 * tile], end = ranges[2 * tile + 1];
      const vec2 pix = make_vec2((float)x + 0.5f, (float)vy + 0.5f);
      BlendForwardState st = blend_forward_begin();
      if (!chunked) {
        for (uint32_t i = start; i < end && !st.done; ++i)
          blend_forward_step(record_blend_splat(records[sorted_ids[i]]), pix, i - start, st);
      }
      for (uint32_t lo = start; chunked && lo < end && !st.done; lo += SPLAT_GROUP_SIZE) {
        BlendForwardState part = blend_forward_begin();  // the chunk from T = 1, the blend's own stop
        for (uint32_t i = lo; i < std::min(end, lo + (uint32_t)SPLAT_GROUP_SIZE) && !part.done; ++i)
          blend_forward_step(record_blend_splat(records[sorted_ids[i]]), pix, i - start, part);
        st.color = st.color + st.T * part.color;
        st.T = st.T * part.T;
        if (part.n_contrib != 0u) st.n_contrib = part.n_contrib;
        st.done = part.done || st.T < SPLAT_T_MIN;
      }
      const vec3 c = st.color + st.T * bg;
      ref_image[3 * p] = c.x;
      ref_image[3 * p + 1] = c.y;
      ref_image[3 * p + 2] = c.z;
      ref_alpha[p] = 1.f - st.T;
      ref_n_contrib[p] = st.n_contrib;
      BlendBackwardState bs = blend_backward_begin(
          st.T, bg, make_vec3(d_image[3 * p], d_image[3 * p + 1], d_image[3 * p + 2]), with_d_alpha ? d_alpha[p] : 0.f);
      for (uint32_t k = st.n_contrib; k-- > 0;) {
        const uint32_t g = sorted_ids[start + k];
        BlendGrad gr;
        if (!blend_backward_step(record_blend_splat(records[g]), pix, bs, gr)) continue;
        blend_grad_accumulate(&ref_grads[SPLAT_PAIR_GRAD * (size_t)g], gr);
        ref_abs[2 * (size_t)g] += std::fabs(gr.mean2d.x);
        ref_abs[2 * (size_t)g + 1] += std::fabs(gr.mean2d.y);
      }
    }

  FILE* f = fopen(argv[4], "wb");
  if (!f) {
    perror("raster_check: open");
    return 2;
  }
  const uint32_t header[8] = {kWidth, kHeight * (uint32_t)views, (uint32_t)n, num_pairs, deepest, skipped, walks,
                              ended};
  write(f, header, sizeof(header));
  write(f, image.data(), 4 * image.size());
  write(f, ref_image.data(), 4 * ref_image.size());
  write(f, alpha.data(), 4 * alpha.size());
  write(f, ref_alpha.data(), 4 * ref_alpha.size());
  write(f, n_contrib.data(), 4 * n_contrib.size());
  write(f, ref_n_contrib.data(), 4 * ref_n_contrib.size());
  write(f, grads.data(), 4 * grads.size());
  write(f, ref_grads.data(), 4 * ref_grads.size());
  write(f, abs_grads.data(), 4 * abs_grads.size());
  write(f, ref_abs.data(), 4 * ref_abs.size());
  fclose(f);
  return 0;
}
