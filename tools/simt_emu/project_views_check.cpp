// Several views rasterized together: their projection in one launch for up to
// SPLAT_VIEWS_LAUNCH_MAX views (shaders/kernels/project.h,
// project_forward_views_body: a thread a (view, Gaussian)) against a launch a
// view at its records' offset, and their projection backward likewise
// (project_backward_views_body: a thread a Gaussian walking the views), on the
// SIMT emulator, against the launches it replaces, view by view: the
// projection backward (project_backward_body), grad_accumulate_body over each
// parameter array (train_optim.h) and, for the views that track them, the
// densification statistics (grad_stats_body), as GpuDevice dispatched them.
// Random Gaussians in front of random cameras, some unseen in a view (radius
// 0); one pass where view BAD overflows its pair buffers (every radius -1):
// both ways must leave the same state there, and the batch run again from its
// first view the same means, SH factor sets, 2D gradient and statistics.
// Prints `forward_differ` and `visible` (the projection's outputs whose bits
// differ, and the records visible), `differ` (the backward's values whose
// bits differ at the end), `skip_differ` (the same after the overflowing
// pass), `nonzero` (gradient values not zero) and `values`.
//
//   project_views_check SEED GAUSSIANS VIEWS GROUP
// (built with cpp/core/camera_params.cpp)
#include "simt_emu.h"
#include "bit_compare.h"
// The kernel bodies, after the emulator.
#include "project.h"
#include "train_optim.h"  // grad_accumulate_body, grad_stats_body

#include "splat/types.h"  // make_camera_params (cpp/core/camera_params.cpp)

#include <algorithm>
#include <cmath>
#include <cstring>
#include <random>

namespace {

constexpr uint32_t kStride = 16;  // SH coefficients stored per Gaussian (degree 3)
constexpr uint32_t kWidths[4] = {3, 3, 4, 1};

struct Scene {
  std::vector<float> means, log_scales, quats, opacity_logits, sh;
  std::vector<CameraParams> cams;
  // Every view's records one view after another (record k n + i: Gaussian i
  // in view k), their radii, and the raster backward's per-record accumulators.
  std::vector<SplatRecord> records;
  std::vector<std::vector<int32_t>> radius;
  std::vector<float> accum;
  std::vector<float> color_jac;  // each record's ShColorJacobian rows (3 quads)
};

// A camera at `eye` looking down +z (world = camera axes), W x H pixels, as
// the host derives one (cpp/core/camera_params.cpp).
CameraParams camera(float ex, float ey, float ez, uint32_t w, uint32_t h, float f) {
  const float w2c[16] = {1, 0, 0, -ex, 0, 1, 0, -ey, 0, 0, 1, -ez, 0, 0, 0, 1};
  return splat::make_camera_params(w2c, f, f, 0.5f * (float)w, 0.5f * (float)h, w, h);
}

Scene make_scene(std::mt19937& rng, uint32_t n, uint32_t views) {
  std::normal_distribution<float> normal(0.f, 1.f);
  std::uniform_real_distribution<float> unit(0.f, 1.f);
  Scene s;
  for (uint32_t i = 0; i < n; ++i) {
    s.means.push_back(normal(rng));
    s.means.push_back(normal(rng));
    s.means.push_back(4.f + normal(rng));
    for (int c = 0; c < 3; ++c) s.log_scales.push_back(-3.f + 0.5f * normal(rng));
    for (int c = 0; c < 4; ++c) s.quats.push_back(normal(rng));
    s.opacity_logits.push_back(2.f * normal(rng));
  }
  s.sh.resize((size_t)n * 3 * kStride);
  for (float& v : s.sh) v = 0.3f * normal(rng);
  for (uint32_t k = 0; k < views; ++k) {
    s.cams.push_back(camera(0.3f * normal(rng), 0.3f * normal(rng), -1.f + 0.3f * normal(rng), 96, 72, 80.f));
    std::vector<int32_t> rad(n);
    for (uint32_t i = 0; i < n; ++i) {
      SplatRecord r{};
      r.sigmoid_opacity = 0.05f + 0.9f * unit(rng);
      r.opacity = r.sigmoid_opacity * (0.5f + 0.5f * unit(rng));
      r.color_clamped = (float)(rng() % 8u);
      s.records.push_back(r);
      for (int e = 0; e < SPLAT_COLOR_JAC_FLOATS; ++e) s.color_jac.push_back(normal(rng));
      rad[i] = unit(rng) < 0.2f ? 0 : 1 + (int32_t)(rng() % 20);  // a fifth unseen
    }
    // Magnitudes far apart, so the order of the views' sums shows in the bits.
    for (uint32_t e = 0; e < SPLAT_PAIR_GRAD * n; ++e) s.accum.push_back(normal(rng) * std::exp2(-12.f * unit(rng)));
    s.radius.push_back(rad);
  }
  return s;
}

struct Outputs {
  std::vector<float> grads[4], sums[4], factors, means2d, stats[3];
  Outputs(uint32_t n, uint32_t views) {
    for (int a = 0; a < 4; ++a) {
      grads[a].assign((size_t)n * kWidths[a], 7.f);  // stale values of an earlier step
      sums[a].assign((size_t)n * kWidths[a], -3.f);
    }
    factors.assign((size_t)SPLAT_SH_FACTOR_FLOATS * n * views, 0.f);
    means2d.assign(2 * (size_t)n, 0.f);
    for (auto& v : stats) v.assign(n, 0.5f);  // earlier steps' statistics
  }
};

RasterParams raster_params(uint32_t n, bool antialiased) {
  RasterParams rp{};
  rp.num_gaussians = n;
  rp.sh_degree = 3;
  rp.sh_stride = kStride;
  rp.antialiased = antialiased ? 1u : 0u;
  return rp;
}

// The launches a view made: the projection backward on the view's records
// (offset buffers), then grad_accumulate over each array and, when the view
// tracks them, grad_stats.
void launches_a_view(const Scene& s, uint32_t n, uint32_t k, uint32_t views, bool track, bool antialiased,
                     const int32_t* radius, Outputs& out) {
  const RasterParams rp = raster_params(n, antialiased);
  const uint32_t groups = (n + SPLAT_GROUP_SIZE - 1) / SPLAT_GROUP_SIZE;
  const size_t r0 = (size_t)k * n;
  simt_emu::dispatch(groups, SPLAT_GROUP_SIZE, [&](SimtThread t) {
    project_backward_body(t, s.cams[k], rp, s.means.data(), s.log_scales.data(), s.quats.data(),
                          s.color_jac.data() + SPLAT_COLOR_JAC_FLOATS * r0, s.records.data() + r0, radius + r0,
                          s.accum.data() + (size_t)SPLAT_PAIR_GRAD * r0, nullptr,
                          out.grads[0].data(), out.grads[1].data(), out.grads[2].data(), out.grads[3].data(),
                          out.factors.data() + (size_t)SPLAT_SH_FACTOR_FLOATS * r0, out.means2d.data());
  });
  for (int a = 0; a < 4; ++a) {
    const uint32_t len = n * kWidths[a];
    const AccumulateParams p{len, k, views, 0u};
    simt_emu::dispatch((len + SPLAT_GROUP_SIZE - 1) / SPLAT_GROUP_SIZE, SPLAT_GROUP_SIZE, [&](SimtThread t) {
      grad_accumulate_body(t, p, out.grads[a].data(), out.sums[a].data(), radius, nullptr);
    });
  }
  if (!track) return;
  const ElementParams ep{n, s.cams[k].width, s.cams[k].height, 0.f};
  simt_emu::dispatch(groups, SPLAT_GROUP_SIZE, [&](SimtThread t) {
    grad_stats_body(t, ep, radius + r0, out.means2d.data(), out.stats[0].data(), out.stats[1].data(),
                    out.stats[2].data());
  });
}

// The batch's launches of project_backward_views_body, GROUP views each.
void views_together(const Scene& s, uint32_t n, uint32_t views, uint32_t group, uint32_t track, bool antialiased,
                    const int32_t* radius, Outputs& out) {
  const RasterParams rp = raster_params(n, antialiased);
  const uint32_t groups = (n + SPLAT_GROUP_SIZE - 1) / SPLAT_GROUP_SIZE;
  for (uint32_t first = 0; first < views; first += group) {
    ViewsParams b{};
    b.first = first;
    b.count = std::min(group, views - first);
    b.views = views;
    for (uint32_t c = 0; c < b.count; ++c) {
      b.cams[c] = s.cams[first + c];
      if (track >> (first + c) & 1u) b.track_mask |= 1u << c;
    }
    simt_emu::dispatch(groups, SPLAT_GROUP_SIZE, [&](SimtThread t) {
      project_backward_views_body(t, b, rp, s.means.data(), s.log_scales.data(), s.quats.data(), s.color_jac.data(),
                                  s.records.data(), radius, s.accum.data(), nullptr, out.grads[0].data(),
                                  out.grads[1].data(), out.grads[2].data(), out.grads[3].data(), out.sums[0].data(),
                                  out.sums[1].data(), out.sums[2].data(), out.sums[3].data(), out.factors.data(),
                                  out.means2d.data(), out.stats[0].data(), out.stats[1].data(), out.stats[2].data());
    });
  }
}

// The projection's outputs for every view's records.
struct Projected {
  std::vector<SplatRecord> records;
  std::vector<int32_t> radius;
  std::vector<CoverRecord> covers;
  std::vector<uint32_t> pair_count, depth_keys, depth_ids;
  std::vector<float> color_jac;
  explicit Projected(size_t records_) : records(records_), radius(records_, 99), covers(records_),
                                        pair_count(records_, 99), depth_keys(records_), depth_ids(records_),
                                        color_jac(SPLAT_COLOR_JAC_FLOATS * records_) {}
};

size_t byte_differences(const void* a, const void* b, size_t count, size_t size) {
  size_t d = 0;
  for (size_t e = 0; e < count; ++e) d += memcmp((const char*)a + e * size, (const char*)b + e * size, size) != 0;
  return d;
}

// A launch a view at its records' offset, against launches of GROUP views.
size_t forward_differences(const Scene& s, uint32_t n, uint32_t views, uint32_t group, bool antialiased,
                           size_t* visible) {
  const size_t total = (size_t)n * views;
  Projected a(total), b(total);
  RasterParams rp = raster_params(n, antialiased);
  for (uint32_t k = 0; k < views; ++k) {
    rp.record_base = k * n;
    const size_t o = (size_t)k * n;
    simt_emu::dispatch((n + SPLAT_GROUP_SIZE - 1) / SPLAT_GROUP_SIZE, SPLAT_GROUP_SIZE, [&](SimtThread t) {
      project_forward_body(t, s.cams[k], rp, s.means.data(), s.log_scales.data(), s.quats.data(),
                           s.opacity_logits.data(), s.sh.data(), a.records.data() + o, a.radius.data() + o,
                           a.covers.data() + o, a.pair_count.data() + o, a.depth_keys.data() + o,
                           a.depth_ids.data() + o, a.color_jac.data() + SPLAT_COLOR_JAC_FLOATS * o);
    });
  }
  rp.record_base = 0;
  for (uint32_t first = 0; first < views; first += group) {
    ViewsParams v{};
    v.first = first;
    v.count = std::min(group, views - first);
    v.views = views;
    for (uint32_t c = 0; c < v.count; ++c) v.cams[c] = s.cams[first + c];
    simt_emu::dispatch((v.count * n + SPLAT_GROUP_SIZE - 1) / SPLAT_GROUP_SIZE, SPLAT_GROUP_SIZE, [&](SimtThread t) {
      project_forward_views_body(t, v, rp, s.means.data(), s.log_scales.data(), s.quats.data(),
                                 s.opacity_logits.data(), s.sh.data(), b.records.data(), b.radius.data(),
                                 b.covers.data(), b.pair_count.data(), b.depth_keys.data(), b.depth_ids.data(),
                                 b.color_jac.data());
    });
  }
  *visible = 0;
  for (int32_t r : a.radius) *visible += r > 0;
  // Records and covers of invisible Gaussians are not written: compare the visible ones.
  size_t d = byte_differences(a.radius.data(), b.radius.data(), total, 4) +
             byte_differences(a.pair_count.data(), b.pair_count.data(), total, 4) +
             byte_differences(a.depth_keys.data(), b.depth_keys.data(), total, 4) +
             byte_differences(a.depth_ids.data(), b.depth_ids.data(), total, 4);
  for (size_t e = 0; e < total; ++e)
    if (a.radius[e] > 0)
      d += byte_differences(&a.records[e], &b.records[e], 1, sizeof(SplatRecord)) +
           byte_differences(&a.covers[e], &b.covers[e], 1, sizeof(CoverRecord)) +
           byte_differences(&a.color_jac[SPLAT_COLOR_JAC_FLOATS * e], &b.color_jac[SPLAT_COLOR_JAC_FLOATS * e],
                            SPLAT_COLOR_JAC_FLOATS, 4);
  return d;
}

// Values whose bits differ; the sums only where both ways keep them (more
// than one launch of views: between launches).
size_t differences(const Outputs& a, const Outputs& b, bool sums) {
  size_t d = count_bit_differences(a.factors, b.factors) + count_bit_differences(a.means2d, b.means2d);
  for (int k = 0; k < 4; ++k) d += count_bit_differences(a.grads[k], b.grads[k]);
  for (int k = 0; k < 3; ++k) d += count_bit_differences(a.stats[k], b.stats[k]);
  if (sums)
    for (int k = 0; k < 4; ++k) d += count_bit_differences(a.sums[k], b.sums[k]);
  return d;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 5) {
    fprintf(stderr, "usage: project_views_check SEED GAUSSIANS VIEWS GROUP\n");
    return 2;
  }
  std::mt19937 rng((uint32_t)strtoul(argv[1], nullptr, 10));
  const uint32_t n = (uint32_t)atoi(argv[2]), views = (uint32_t)atoi(argv[3]), group = (uint32_t)atoi(argv[4]);
  const Scene s = make_scene(rng, n, views);
  const bool antialiased = rng() % 2 == 0;
  const uint32_t track = (uint32_t)rng() | 1u;  // the views that add to the statistics (view 0 and random others)
  std::vector<int32_t> radius, overflow((size_t)n * views, -1);
  for (const auto& r : s.radius) radius.insert(radius.end(), r.begin(), r.end());

  size_t visible = 0;
  const size_t forward_differ = forward_differences(s, n, views, group, antialiased, &visible);

  Outputs launched(n, views), together(n, views);
  // An overflowing forward (every radius -1): the state both ways leave.
  for (uint32_t k = 0; k < views; ++k)
    launches_a_view(s, n, k, views, track >> k & 1u, antialiased, overflow.data(), launched);
  views_together(s, n, views, group, track, antialiased, overflow.data(), together);
  const size_t skip_differ = differences(launched, together, true);
  // The batch again.
  for (uint32_t k = 0; k < views; ++k)
    launches_a_view(s, n, k, views, track >> k & 1u, antialiased, radius.data(), launched);
  views_together(s, n, views, group, track, antialiased, radius.data(), together);
  size_t nonzero = 0, values = 0;
  for (int a = 0; a < 4; ++a) {
    for (float g : together.grads[a]) nonzero += g != 0.f && std::isfinite(g);
    values += together.grads[a].size();
  }
  printf("forward_differ %zu\nvisible %zu\ndiffer %zu\nskip_differ %zu\nnonzero %zu\nvalues %zu\n", forward_differ,
         visible, differences(launched, together, false), skip_differ, nonzero, values);
  return 0;
}
