#include "cpu_rasterizer.h"

#include <cmath>
#include <algorithm>
#include <cstring>
#include <optional>
#include <type_traits>
#include <vector>

#include "../../shaders/common/blend.h"
#include "../../shaders/common/projection.h"
#include "../../shaders/common/sh.h"
#include "../../shaders/common/tile_cover.h"
#include "splat/errors.h"
#include "splat/limits.h"

namespace splat::cpu {
namespace {

constexpr int kTile = SPLAT_TILE_SIZE;
constexpr size_t kPairGrad = 9;  // mean2d (2), conic (3), opacity (1), colour (3)

vec3 load3(const float* p, size_t i) { return make_vec3(p[3 * i], p[3 * i + 1], p[3 * i + 2]); }

// Where a splat can pass the blend's skip tests: sigma < cut with
// cut = min(5.55, log(255 opacity)). ext = (half-extent x, half-extent y, cut).
// The marginal of the quadratic form gives sigma >= dx^2 / (2 cov_xx), so
// beyond sqrt(2 cut cov_xx) nothing is blended. The cut carries a margin of 0.1
// and the extents one pixel, to absorb rounding: the blend itself still decides
// every pixel inside, so the result is exactly the per-pixel loop's.
void pixel_extent(vec3 conic, float opacity, float* ext) {
  if (opacity * 255.f < 0.999f) {
    ext[0] = ext[1] = ext[2] = -1.f;  // alpha < 1/255 everywhere
    return;
  }
  const float cut = std::min(SPLAT_SIGMA_SKIP, std::log(opacity * 255.f)) + 0.1f;
  const float det = conic.x * conic.z - conic.y * conic.y;
  if (!(det > 0.f) || !(conic.x > 0.f)) {
    ext[0] = ext[1] = 1e30f;
    ext[2] = -1.f;  // no row spans: visit the whole box
    return;
  }
  ext[0] = std::sqrt(2.f * cut * conic.z / det) + 1.f;
  ext[1] = std::sqrt(2.f * cut * conic.x / det) + 1.f;
  ext[2] = cut;
}

// Pixel box [x0, x1) x [y0, y1) of a splat inside the tile box.
struct PixelBox {
  int x0, x1, y0, y1;
};

PixelBox splat_box(const float* mean2d, const float* ext, int tx0, int tx1, int ty0, int ty1) {
  PixelBox b;
  if (ext[0] < 0.f) return PixelBox{0, 0, 0, 0};
  b.x0 = std::max(tx0, static_cast<int>(std::floor(std::max(-1e9f, mean2d[0] - ext[0] - 0.5f))));
  b.x1 = std::min(tx1, static_cast<int>(std::ceil(std::min(1e9f, mean2d[0] + ext[0] - 0.5f))) + 1);
  b.y0 = std::max(ty0, static_cast<int>(std::floor(std::max(-1e9f, mean2d[1] - ext[1] - 0.5f))));
  b.y1 = std::min(ty1, static_cast<int>(std::ceil(std::min(1e9f, mean2d[1] + ext[1] - 0.5f))) + 1);
  return b;
}

// Columns [x0, x1) of row y, inside the box, where sigma < cut can hold:
// the roots of 0.5 A dx^2 + B dy dx + 0.5 C dy^2 = cut, widened by a pixel.
void row_span(const BlendSplat& s, const float* ext, int y, const PixelBox& box, int& x0, int& x1) {
  x0 = box.x0;
  x1 = box.x1;
  const float cut = ext[2];
  if (cut < 0.f) return;
  const float A = s.conic.x, B = s.conic.y, C = s.conic.z;
  const float dy = s.mean2d.y - (static_cast<float>(y) + 0.5f);
  const float disc = (B * B - A * C) * dy * dy + 2.f * A * cut;
  if (disc < 0.f) {
    x1 = x0;
    return;
  }
  const float root = std::sqrt(disc);
  const float dx_lo = (-B * dy - root) / A, dx_hi = (-B * dy + root) / A;  // dx = mean.x - px
  x0 = std::max(x0, static_cast<int>(std::floor(s.mean2d.x - dx_hi - 0.5f)) - 1);
  x1 = std::min(x1, static_cast<int>(std::ceil(s.mean2d.x - dx_lo - 0.5f)) + 2);
}

}  // namespace

void CpuRasterizer::forward(const GaussiansView& g, const CameraParams& cam, uint32_t sh_degree,
                            const float background[3], const ForwardOutputs& out) {
  have_forward_ = false;  // until this forward completes
  check_gaussian_count(g.count);
  g_ = g;
  cam_ = cam;
  sh_degree_ = sh_degree;
  forward_antialiased_ = antialiased_;
  std::memcpy(background_, background, sizeof(background_));
  {
    ScopedTiming t(timing_, "ts_fwd_project");
    project(sh_degree);
  }
  {
    ScopedTiming t(timing_, "ts_fwd_emit_pairs");  // counting, scatter and per-tile depth sort
    bin_and_sort();
  }
  {
    ScopedTiming t(timing_, "ts_fwd_rasterize");
    blend(out);
  }
  if (out.radii) std::memcpy(out.radii, radius_.data(), g_.count * sizeof(int32_t));
  have_forward_ = true;
}

void CpuRasterizer::project(uint32_t sh_degree) {
  const size_t n = g_.count;
  size_t& a = allocations_;
  float* mean2d = mean2d_.ensure(2 * n + 2, a);
  float* conic = conic_.ensure(3 * n + 3, a);
  float* depth = depth_.ensure(n + 1, a);
  float* opacity = opacity_.ensure(n + 1, a);
  float* color = color_.ensure(3 * n + 3, a);
  int32_t* radius = radius_.ensure(n + 1, a);
  int32_t* rect = rect_.ensure(4 * n + 4, a);
  float* extent = extent_.ensure(3 * n + 3, a);
  uint32_t* pairs = pair_offset_.ensure(n + 1, a);  // pair counts, scanned into offsets by bin_and_sort
  const vec3 center = camera_center(cam_);
  pool_.parallel_for(n, 1024, [&](size_t lo, size_t hi) {
    for (size_t i = lo; i < hi; ++i) {
      const float* q = g_.quats + 4 * i;
      ProjectedGaussian p;
      bool visible = project_gaussian(cam_, load3(g_.means, i), load3(g_.log_scales, i), q[0], q[1], q[2], q[3],
                                      forward_antialiased_, p);
      radius[i] = p.radius;
      depth[i] = p.depth;
      rect[4 * i + 0] = p.tile_min_x;
      rect[4 * i + 1] = p.tile_min_y;
      rect[4 * i + 2] = p.tile_max_x;
      rect[4 * i + 3] = p.tile_max_y;
      pairs[i] = 0;
      if (!visible) continue;
      mean2d[2 * i] = p.mean2d.x;
      mean2d[2 * i + 1] = p.mean2d.y;
      conic[3 * i] = p.conic.x;
      conic[3 * i + 1] = p.conic.y;
      conic[3 * i + 2] = p.conic.z;
      opacity[i] = sp_sigmoid(g_.opacity_logits[i]) * p.opacity_scale;
      pixel_extent(p.conic, opacity[i], extent + 3 * i);
      const TileCover tc = tile_cover(p.mean2d, p.conic, opacity[i], p.tile_min_x, p.tile_min_y, p.tile_max_x,
                                      p.tile_max_y);
      pairs[i] = tile_cover_count(tc);
      vec3 c = sh_color(static_cast<int>(sh_degree), load3(g_.means, i), center,
                        sh_row(g_.sh + 3 * g_.sh_stride * i, sh_num_coeffs(static_cast<int>(sh_degree))));
      color[3 * i] = c.x;
      color[3 * i + 1] = c.y;
      color[3 * i + 2] = c.z;
    }
  });
}

TileCover CpuRasterizer::cover(size_t i) const {
  const float* m = mean2d_.data() + 2 * i;
  const float* c = conic_.data() + 3 * i;
  const int32_t* r = rect_.data() + 4 * i;
  return tile_cover(make_vec2(m[0], m[1]), make_vec3(c[0], c[1], c[2]), opacity_.data()[i], r[0], r[1], r[2], r[3]);
}

void CpuRasterizer::bin_and_sort() {
  const size_t n = g_.count;
  const uint32_t tiles_x = cam_.tiles_x;
  const size_t num_tiles = static_cast<size_t>(cam_.tiles_x) * cam_.tiles_y;
  size_t& a = allocations_;
  const int32_t* radius = radius_.data();

  // Pair counts (from projection) -> emission offsets. Counted in 64 bits:
  // n Gaussians can cover n x tiles pairs, far past 2^32; below kMaxPairs
  // every offset and sorted index fits uint32.
  uint32_t* offset = pair_offset_.data();
  uint64_t pairs = 0;
  for (size_t i = 0; i < n; ++i) pairs += offset[i];
  check_pair_count(pairs);
  const uint32_t total = static_cast<uint32_t>(pairs);
  uint32_t run = 0;
  for (size_t i = 0; i < n; ++i) {
    const uint32_t count = offset[i];
    offset[i] = run;
    run += count;
  }
  offset[n] = total;
  num_pairs_ = total;

  // Each Gaussian's covered tiles at its emission offsets (row-major), in
  // parallel; then pairs per tile -> tile starts.
  uint32_t* pair_tile = pair_tile_.ensure(total + 1, a);
  pool_.parallel_for(n, 1024, [&](size_t lo, size_t hi) {
    for (size_t i = lo; i < hi; ++i) {
      if (radius[i] == 0) continue;
      const TileCover tc = cover(i);
      const TileRows rows = tile_rows(tc);
      uint32_t e = offset[i];
      for (int32_t ty = tc.y0; ty < tc.y1; ++ty) {
        int tx0, tx1;
        tile_cover_row(rows, ty, tx0, tx1);
        for (int32_t tx = tx0; tx < tx1; ++tx) pair_tile[e++] = static_cast<uint32_t>(ty) * tiles_x + tx;
      }
    }
  });
  uint32_t* tile_start = tile_start_.ensure(num_tiles + 1, a);
  std::fill(tile_start, tile_start + num_tiles + 1, 0u);
  for (uint32_t e = 0; e < total; ++e) ++tile_start[pair_tile[e] + 1];
  for (size_t t = 0; t < num_tiles; ++t) tile_start[t + 1] += tile_start[t];

  // Stable scatter by tile in emission order (= Gaussian-index order).
  uint32_t* gauss = sorted_gauss_.ensure(total + 1, a);
  uint32_t* emit = sorted_emit_.ensure(total + 1, a);
  uint32_t* cursor = tile_cursor_.ensure(num_tiles + 1, a);
  std::memcpy(cursor, tile_start, num_tiles * sizeof(uint32_t));
  for (size_t i = 0; i < n; ++i)
    for (uint32_t e = offset[i]; e < offset[i + 1]; ++e) {
      const uint32_t slot = cursor[pair_tile[e]]++;
      gauss[slot] = static_cast<uint32_t>(i);
      emit[slot] = e;
    }

  // Within each tile, a stable sort by depth keeps Gaussian-index order on
  // ties: together a stable sort by (tile, depth bits).
  const float* depth = depth_.data();
  pool_.parallel_for(num_tiles, 4, [&](size_t lo, size_t hi) {
    std::vector<std::pair<uint32_t, uint32_t>> items;  // (gauss, emit)
    for (size_t t = lo; t < hi; ++t) {
      uint32_t b = tile_start[t], e = tile_start[t + 1];
      if (e - b < 2) continue;
      items.resize(e - b);
      for (uint32_t k = b; k < e; ++k) items[k - b] = {gauss[k], emit[k]};
      std::stable_sort(items.begin(), items.end(), [&](const auto& x, const auto& y) {
        return sp_float_bits(depth[x.first]) < sp_float_bits(depth[y.first]);
      });
      for (uint32_t k = b; k < e; ++k) {
        gauss[k] = items[k - b].first;
        emit[k] = items[k - b].second;
      }
    }
  });
}

void CpuRasterizer::blend(const ForwardOutputs& out) {
  const uint32_t width = cam_.width, height = cam_.height, tiles_x = cam_.tiles_x;
  const size_t num_tiles = static_cast<size_t>(cam_.tiles_x) * cam_.tiles_y;
  size_t& a = allocations_;
  float* final_T = final_T_.ensure(static_cast<size_t>(width) * height, a);
  uint32_t* n_contrib = n_contrib_.ensure(static_cast<size_t>(width) * height, a);
  const uint32_t* tile_start = tile_start_.data();
  const uint32_t* gauss = sorted_gauss_.data();
  const float *mean2d = mean2d_.data(), *conic = conic_.data(), *opacity = opacity_.data(), *color = color_.data();
  const float* extent = extent_.data();
  const vec3 bg = make_vec3(background_[0], background_[1], background_[2]);

  // Splat-major inside a tile: each splat visits only the pixels of its box,
  // in depth order, so every pixel sees exactly the sequence the per-pixel
  // loop would. The chunked stop (Device::set_chunked_stop) keeps each
  // pixel's state at its chunk's start and the chunk's (P, L), chained at the
  // chunk's end as the GPU's chain does (blend_chain_chunk).
  const bool chunked = chunked_stop_;
  constexpr uint32_t kChunk = SPLAT_GROUP_SIZE;
  pool_.parallel_for(num_tiles, 1, [&](size_t lo, size_t hi) {
    BlendForwardState state[kTile * kTile];
    ChunkBlend chunk[kTile * kTile];
    uint32_t chunk_last[kTile * kTile];
    for (size_t t = lo; t < hi; ++t) {
      const int x0 = static_cast<int>(t % tiles_x) * kTile, y0 = static_cast<int>(t / tiles_x) * kTile;
      const int x1 = std::min<int>(x0 + kTile, width), y1 = std::min<int>(y0 + kTile, height);
      int alive = (x1 - x0) * (y1 - y0);
      for (int k = 0; k < kTile * kTile; ++k) {
        state[k] = blend_forward_begin();
        chunk[k] = chunk_blend_begin();
        chunk_last[k] = 0u;
      }
      // Chains pixel l's chunk (starting at list position `base`) and ends
      // the pixel when the chunk stopped it or left T below the stop.
      const auto close_chunk = [&](int l, uint32_t base, bool stopped) {
        BlendForwardState& st = state[l];
        blend_chain_chunk(st, chunk[l].P, chunk[l].L, base, chunk_last[l]);
        chunk[l] = chunk_blend_begin();
        chunk_last[l] = 0u;
        if (stopped || st.T < SPLAT_T_MIN) {
          st.done = true;
          --alive;
        }
      };
      const auto close_all = [&](uint32_t base) {
        for (int y = y0; y < y1; ++y)
          for (int x = x0; x < x1; ++x)
            if (!state[(y - y0) * kTile + (x - x0)].done) close_chunk((y - y0) * kTile + (x - x0), base, false);
      };
      for (uint32_t k = tile_start[t]; k < tile_start[t + 1] && alive > 0; ++k) {
        const uint32_t i = gauss[k];
        const PixelBox box = splat_box(mean2d + 2 * i, extent + 3 * i, x0, x1, y0, y1);
        const BlendSplat s =
            blend_splat(make_vec2(mean2d[2 * i], mean2d[2 * i + 1]), load3(conic, i), opacity[i], load3(color, i));
        const uint32_t position = k - tile_start[t];
        if (chunked && position > 0u && position % kChunk == 0u) {
          close_all(position - kChunk);
          if (alive == 0) break;
        }
        for (int y = box.y0; y < box.y1; ++y) {
          int xs, xe;
          row_span(s, extent + 3 * i, y, box, xs, xe);
          for (int x = xs; x < xe; ++x) {
            const int l = (y - y0) * kTile + (x - x0);
            BlendForwardState& st = state[l];
            if (st.done) continue;
            if (!chunked) {
              blend_forward_step(s, make_vec2(x + 0.5f, y + 0.5f), position, st);
              alive -= st.done;
              continue;
            }
            float gauss_unused;
            bool clamped_unused;
            const float a = blend_alpha(s, make_vec2(x + 0.5f, y + 0.5f), gauss_unused, clamped_unused);
            if (chunk_blend_stops(chunk[l], a)) {
              close_chunk(l, position - position % kChunk, true);
              continue;
            }
            chunk_blend_add(chunk[l], a, s.color);
            if (a > 0.f) chunk_last[l] = position % kChunk + 1u;
          }
        }
      }
      if (chunked && alive > 0 && tile_start[t + 1] > tile_start[t])
        close_all((tile_start[t + 1] - tile_start[t] - 1u) / kChunk * kChunk);
      for (int y = y0; y < y1; ++y)
        for (int x = x0; x < x1; ++x) {
          const BlendForwardState& st = state[(y - y0) * kTile + (x - x0)];
          const size_t p = static_cast<size_t>(y) * width + x;
          final_T[p] = st.T;
          n_contrib[p] = st.n_contrib;
          if (out.image) {
            vec3 c = st.color + st.T * bg;
            out.image[3 * p] = c.x;
            out.image[3 * p + 1] = c.y;
            out.image[3 * p + 2] = c.z;
          }
          if (out.alpha) out.alpha[p] = 1.f - st.T;
        }
    }
  });
}

void CpuRasterizer::backward(const float* d_image, const float* d_alpha, const GradientOutputs& grads) {
  if (!have_forward_) throw BackendError("[cpu] backward() needs a completed forward pass first");
  const size_t n = g_.count;
  const uint32_t width = cam_.width, height = cam_.height, tiles_x = cam_.tiles_x;
  const size_t num_tiles = static_cast<size_t>(cam_.tiles_x) * cam_.tiles_y;
  const uint32_t* tile_start = tile_start_.data();
  const uint32_t* gauss = sorted_gauss_.data();
  const uint32_t* emit = sorted_emit_.data();
  const float *mean2d = mean2d_.data(), *conic = conic_.data(), *opacity = opacity_.data(), *color = color_.data();
  const float* final_T = final_T_.data();
  const uint32_t* n_contrib = n_contrib_.data();
  float* pair_grad = pair_grad_.ensure(kPairGrad * num_pairs_ + 1, allocations_);
  // absgrad: per pair, the sum of |each pixel's d mean2d| (x, y), reduced in
  // the same orders as the gradients (docs/training_modes.md, "Absgrad
  // densification").
  const bool absgrad = grads.means2d_abs != nullptr;
  float* pair_abs = absgrad ? pair_abs_.ensure(2 * num_pairs_ + 1, allocations_) : nullptr;
  const vec3 bg = make_vec3(background_[0], background_[1], background_[2]);

  // 1. Per tile, splat-major from the last contributor back: each pixel
  //    walks its splats in reverse depth order (as the per-pixel loop would),
  //    and each splat's gradient sums its pixels in row-major order; the sums
  //    land at the pair's emission index.
  const float* extent = extent_.data();
  std::optional<ScopedTiming> timed(std::in_place, timing_, "ts_backward_raster");
  // Compiled twice (kAbs: absgrad or not), so the plain walk is the code it
  // was without absgrad.
  const auto tile_pass = [&](auto abs_tag) {
    constexpr bool kAbs = decltype(abs_tag)::value;
    pool_.parallel_for(num_tiles, 1, [&](size_t lo, size_t hi) {
      BlendBackwardState state[kTile * kTile];
      uint32_t last[kTile * kTile];
      for (size_t t = lo; t < hi; ++t) {
        const uint32_t b = tile_start[t], e = tile_start[t + 1];
        if (e == b) continue;
        const int x0 = static_cast<int>(t % tiles_x) * kTile, y0 = static_cast<int>(t / tiles_x) * kTile;
        const int x1 = std::min<int>(x0 + kTile, width), y1 = std::min<int>(y0 + kTile, height);
        uint32_t max_last = 0;
        for (int y = y0; y < y1; ++y)
          for (int x = x0; x < x1; ++x) {
            const size_t p = static_cast<size_t>(y) * width + x;
            const int l = (y - y0) * kTile + (x - x0);
            state[l] = blend_backward_begin(final_T[p], bg, load3(d_image, p), d_alpha ? d_alpha[p] : 0.f);
            last[l] = n_contrib[p];
            max_last = std::max(max_last, n_contrib[p]);
          }
        for (uint32_t k = max_last; k-- > 0;) {
          const uint32_t i = gauss[b + k];
          float acc[kPairGrad] = {0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f, 0.f};
          float abs_acc[2] = {0.f, 0.f};
          const PixelBox box = splat_box(mean2d + 2 * i, extent + 3 * i, x0, x1, y0, y1);
          const BlendSplat s =
              blend_splat(make_vec2(mean2d[2 * i], mean2d[2 * i + 1]), load3(conic, i), opacity[i], load3(color, i));
          for (int y = box.y0; y < box.y1; ++y) {
            int xs, xe;
            row_span(s, extent + 3 * i, y, box, xs, xe);
            for (int x = xs; x < xe; ++x) {
              const int l = (y - y0) * kTile + (x - x0);
              if (k >= last[l]) continue;
              BlendGrad gr;
              if (!blend_backward_step(s, make_vec2(x + 0.5f, y + 0.5f), state[l], gr)) continue;
              blend_grad_accumulate(acc, gr);
              if constexpr (kAbs) {
                abs_acc[0] += std::fabs(gr.mean2d.x);
                abs_acc[1] += std::fabs(gr.mean2d.y);
              }
            }
          }
          std::memcpy(pair_grad + kPairGrad * emit[b + k], acc, sizeof(acc));
          if constexpr (kAbs) std::memcpy(pair_abs + 2 * emit[b + k], abs_acc, sizeof(abs_acc));
        }
        for (uint32_t k = max_last; k < e - b; ++k) {
          std::fill(pair_grad + kPairGrad * emit[b + k], pair_grad + kPairGrad * (emit[b + k] + 1), 0.f);
          if constexpr (kAbs) pair_abs[2 * emit[b + k]] = pair_abs[2 * emit[b + k] + 1] = 0.f;
        }
      }
    });
  };
  if (absgrad)
    tile_pass(std::true_type{});
  else
    tile_pass(std::false_type{});

  timed.emplace(timing_, "ts_project_back");
  // 2. Per Gaussian: sum its pairs in emission order, then the backward of
  //    colour and projection.
  const uint32_t* offset = pair_offset_.data();
  const int32_t* radius = radius_.data();
  const vec3 center = camera_center(cam_);
  const uint32_t stride = g_.sh_stride;
  pool_.parallel_for(n, 512, [&](size_t lo, size_t hi) {
    for (size_t i = lo; i < hi; ++i) {
      float s[kPairGrad] = {0.f};
      for (uint32_t e = offset[i]; e < offset[i + 1]; ++e)
        for (size_t c = 0; c < kPairGrad; ++c) s[c] += pair_grad[kPairGrad * e + c];
      if (absgrad) {
        float ax = 0.f, ay = 0.f;
        if (radius[i] != 0)
          for (uint32_t e = offset[i]; e < offset[i + 1]; ++e) {
            ax += pair_abs[2 * e];
            ay += pair_abs[2 * e + 1];
          }
        grads.means2d_abs[2 * i] = ax;
        grads.means2d_abs[2 * i + 1] = ay;
      }
      float* d_sh = grads.sh + 3 * stride * i;
      std::fill(d_sh, d_sh + 3 * stride, 0.f);
      if (radius[i] == 0) {
        std::fill(grads.means + 3 * i, grads.means + 3 * i + 3, 0.f);
        std::fill(grads.log_scales + 3 * i, grads.log_scales + 3 * i + 3, 0.f);
        std::fill(grads.quats + 4 * i, grads.quats + 4 * i + 4, 0.f);
        grads.opacity_logits[i] = 0.f;
        grads.means2d[2 * i] = grads.means2d[2 * i + 1] = 0.f;
        continue;
      }
      vec3 mean = load3(g_.means, i);
      ShGradFactors f;
      const int k_count = sh_num_coeffs(static_cast<int>(sh_degree_));
      vec3 d_mean_color = sh_color_backward(static_cast<int>(sh_degree_), mean, center,
                                            sh_row(g_.sh + 3 * stride * i, k_count), make_vec3(s[6], s[7], s[8]), f);
      const float dc[3] = {f.dc.x, f.dc.y, f.dc.z};
      for (int k = 0; k < k_count; ++k)
        for (int c = 0; c < 3; ++c) d_sh[3 * k + c] = f.b[k] * dc[c];
      const float* q = g_.quats + 4 * i;
      const float sigmoid_opacity = sp_sigmoid(g_.opacity_logits[i]);
      ProjectionGrads pg = project_gaussian_backward(cam_, mean, load3(g_.log_scales, i), q[0], q[1], q[2], q[3],
                                                     make_vec2(s[0], s[1]), make_vec3(s[2], s[3], s[4]),
                                                     forward_antialiased_ ? s[5] * sigmoid_opacity : 0.f);
      vec3 dm = pg.mean + d_mean_color;
      grads.means[3 * i] = dm.x;
      grads.means[3 * i + 1] = dm.y;
      grads.means[3 * i + 2] = dm.z;
      grads.log_scales[3 * i] = pg.log_scale.x;
      grads.log_scales[3 * i + 1] = pg.log_scale.y;
      grads.log_scales[3 * i + 2] = pg.log_scale.z;
      for (int c = 0; c < 4; ++c) grads.quats[4 * i + c] = pg.quat[c];
      // opacity = k sigmoid(logit) (k = 1 unless antialiased): d/dlogit = opacity (1 - sigmoid).
      grads.opacity_logits[i] = s[5] * opacity[i] * (1.f - sigmoid_opacity);
      grads.means2d[2 * i] = s[0];
      grads.means2d[2 * i + 1] = s[1];
    }
  });
}

}  // namespace splat::cpu

namespace splat::cpu {

bool CpuRasterizer::snapshot_binning(DebugSnapshot& out) const {
  if (!have_forward_) return false;  // a forward stopped at a limit: its camera, not its binning
  const size_t num_tiles = static_cast<size_t>(cam_.tiles_x) * cam_.tiles_y;
  out.tile_ranges.resize(2 * num_tiles);
  for (size_t t = 0; t < num_tiles; ++t) {
    out.tile_ranges[2 * t] = tile_start_.data()[t];
    out.tile_ranges[2 * t + 1] = tile_start_.data()[t + 1];
  }
  out.sorted_gauss.assign(sorted_gauss_.data(), sorted_gauss_.data() + num_pairs_);
  return true;
}

}  // namespace splat::cpu
