// Several views rasterized together: each view's projection backward
// (shaders/kernels/project.h, project_backward_body with RasterParams::
// grad_views) adds its four parameter gradients to the batch's sums itself.
// Against the launches it replaces, on the SIMT emulator: the projection
// backward storing them, then grad_accumulate_body over each array
// (train_optim.h), view by view, as GpuDevice::accumulate_view_gradients
// dispatches it. Random Gaussians in front of random cameras, some unseen
// (radius 0); one pass where view BAD overflows its pair buffers (every
// radius -1): both ways must leave the same gradients and sums there, and the
// batch run again from its first view the same means.
// Prints `differ` (gradient and sum elements whose bits differ at the end),
// `skip_differ` (the same after the overflowing view), `nonzero` (gradient
// elements not zero at the end) and `values`.
//
//   project_sum_check SEED GAUSSIANS VIEWS
#include "simt_emu.h"
#include "bit_compare.h"
// The kernel bodies, after the emulator.
#include "project.h"
#include "train_optim.h"

#include <cmath>
#include <random>

namespace {

constexpr uint32_t kStride = 16;  // SH coefficients stored per Gaussian (degree 3)
constexpr uint32_t kWidths[4] = {3, 3, 4, 1};

struct Scene {
  std::vector<float> means, log_scales, quats, sh;
  std::vector<CameraParams> cams;
  // Per view: records, radii, the raster backward's per-record accumulators.
  std::vector<std::vector<SplatRecord>> records;
  std::vector<std::vector<int32_t>> radius;
  std::vector<std::vector<float>> accum;
};

// A camera at `eye` looking down +z (world = camera axes), W x H pixels.
CameraParams camera(float ex, float ey, float ez, uint32_t w, uint32_t h, float f) {
  CameraParams c{};
  const float r[9] = {1, 0, 0, 0, 1, 0, 0, 0, 1};
  for (int i = 0; i < 3; ++i) {
    for (int j = 0; j < 3; ++j) c.w2c[4 * i + j] = r[3 * i + j];
  }
  c.w2c[3] = -ex;
  c.w2c[7] = -ey;
  c.w2c[11] = -ez;
  c.center[0] = ex;
  c.center[1] = ey;
  c.center[2] = ez;
  c.fx = c.fy = f;
  c.cx = 0.5f * (float)w;
  c.cy = 0.5f * (float)h;
  c.tan_fovx = 0.5f * (float)w / f;
  c.tan_fovy = 0.5f * (float)h / f;
  c.width = w;
  c.height = h;
  c.tiles_x = (w + SPLAT_TILE_SIZE - 1) / SPLAT_TILE_SIZE;
  c.tiles_y = (h + SPLAT_TILE_SIZE - 1) / SPLAT_TILE_SIZE;
  c.near_plane = SPLAT_NEAR_PLANE;
  c.far_plane = SPLAT_FAR_PLANE;
  return c;
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
  }
  s.sh.resize((size_t)n * 3 * kStride);
  for (float& v : s.sh) v = 0.3f * normal(rng);
  for (uint32_t k = 0; k < views; ++k) {
    s.cams.push_back(camera(0.3f * normal(rng), 0.3f * normal(rng), -1.f + 0.3f * normal(rng), 96, 72, 80.f));
    std::vector<SplatRecord> rec(n);
    std::vector<int32_t> rad(n);
    std::vector<float> acc((size_t)SPLAT_PAIR_GRAD * n);
    for (uint32_t i = 0; i < n; ++i) {
      SplatRecord& r = rec[i];
      r = SplatRecord{};
      r.sigmoid_opacity = 0.05f + 0.9f * unit(rng);
      r.opacity = r.sigmoid_opacity * (0.5f + 0.5f * unit(rng));
      rad[i] = unit(rng) < 0.2f ? 0 : 1 + (int32_t)(rng() % 20);  // a fifth unseen
    }
    // Magnitudes far apart, so the order of the views' sums shows in the bits.
    for (float& v : acc) v = normal(rng) * std::exp2(-12.f * unit(rng));
    s.records.push_back(rec);
    s.radius.push_back(rad);
    s.accum.push_back(acc);
  }
  return s;
}

struct Outputs {
  std::vector<float> grads[4], sums[4], factors, means2d;
  explicit Outputs(uint32_t n) {
    for (int a = 0; a < 4; ++a) {
      grads[a].assign((size_t)n * kWidths[a], 7.f);  // stale values of an earlier step
      sums[a].assign((size_t)n * kWidths[a], -3.f);
    }
    factors.assign((size_t)SPLAT_SH_FACTOR_FLOATS * n, 0.f);
    means2d.assign(2 * (size_t)n, 0.f);
  }
};

// View k's projection backward: with `summed`, adding to the sums itself;
// without, storing its gradients and then one grad_accumulate dispatch per
// array. `radius` overrides the view's radii (an overflowing forward's -1s).
void backward_view(const Scene& s, uint32_t n, uint32_t k, uint32_t views, bool summed, bool antialiased,
                   const std::vector<int32_t>& radius, Outputs& out) {
  RasterParams rp{};
  rp.num_gaussians = n;
  rp.sh_degree = 3;
  rp.sh_stride = kStride;
  rp.antialiased = antialiased ? 1u : 0u;
  rp.grad_view = summed ? k : 0u;
  rp.grad_views = summed ? views : 0u;
  const uint32_t groups = (n + SPLAT_GROUP_SIZE - 1) / SPLAT_GROUP_SIZE;
  const SplatParamGrads sums = {out.sums[0].data(), out.sums[1].data(), out.sums[2].data(), out.sums[3].data()};
  simt_emu::dispatch(groups, SPLAT_GROUP_SIZE, [&](SimtThread t) {
    project_backward_body(t, s.cams[k], rp, s.means.data(), s.log_scales.data(), s.quats.data(), s.sh.data(),
                          s.records[k].data(), radius.data(), s.accum[k].data(), nullptr, out.grads[0].data(),
                          out.grads[1].data(), out.grads[2].data(), out.grads[3].data(), out.factors.data(),
                          out.means2d.data(), sums);
  });
  if (summed) return;
  for (int a = 0; a < 4; ++a) {
    const uint32_t len = n * kWidths[a];
    const AccumulateParams p{len, k, views, 0u};
    simt_emu::dispatch((len + SPLAT_GROUP_SIZE - 1) / SPLAT_GROUP_SIZE, SPLAT_GROUP_SIZE, [&](SimtThread t) {
      grad_accumulate_body(t, p, out.grads[a].data(), out.sums[a].data(), radius.data(), nullptr);
    });
  }
}

size_t differences(const Outputs& a, const Outputs& b) {
  size_t d = 0;
  for (int k = 0; k < 4; ++k) d += count_bit_differences(a.grads[k], b.grads[k]) + count_bit_differences(a.sums[k], b.sums[k]);
  return d + count_bit_differences(a.factors, b.factors) + count_bit_differences(a.means2d, b.means2d);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: project_sum_check SEED GAUSSIANS VIEWS\n");
    return 2;
  }
  std::mt19937 rng((uint32_t)strtoul(argv[1], nullptr, 10));
  const uint32_t n = (uint32_t)atoi(argv[2]), views = (uint32_t)atoi(argv[3]);
  const Scene s = make_scene(rng, n, views);
  const bool antialiased = rng() % 2 == 0;
  const uint32_t bad = (uint32_t)(rng() % views);  // the view whose forward overflows
  const std::vector<int32_t> overflow(n, -1);

  Outputs launched(n), summed(n);
  size_t skip_differ = 0;
  for (uint32_t k = 0; k <= bad; ++k) {  // the first pass, to the overflowing view
    backward_view(s, n, k, views, false, antialiased, k == bad ? overflow : s.radius[k], launched);
    backward_view(s, n, k, views, true, antialiased, k == bad ? overflow : s.radius[k], summed);
  }
  skip_differ = differences(launched, summed);
  for (uint32_t k = 0; k < views; ++k) {  // the batch again, from its first view
    backward_view(s, n, k, views, false, antialiased, s.radius[k], launched);
    backward_view(s, n, k, views, true, antialiased, s.radius[k], summed);
  }
  size_t nonzero = 0, values = 0;
  for (int a = 0; a < 4; ++a) {
    for (float g : summed.grads[a]) nonzero += g != 0.f && std::isfinite(g);
    values += summed.grads[a].size();
  }
  printf("differ %zu\nskip_differ %zu\nnonzero %zu\nvalues %zu\n", differences(launched, summed), skip_differ, nonzero,
         values);
  return 0;
}
