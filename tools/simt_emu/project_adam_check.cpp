// The projection backward with the Adam step fused after it
// (shaders/kernels/train_project_adam.h: a thread a Gaussian, then the
// threadgroup's quads of every group) on the SIMT emulator, against the two
// kernels it replaces as GpuDevice dispatched them: project_backward_body
// over the Gaussians, then adam_body over every quad. Random Gaussians in
// front of a random camera, a fifth unseen (radius 0), the raster backward's
// per-record accumulators random. Each way runs with float32 moments, packed
// bfloat16 moments, only the seen Gaussians stepped (visible_only) and a step
// whose pairs did not fit (every radius -1). Prints `differ` (parameters,
// moments, gradients, SH factors and 2D gradients whose bits differ, over
// every way), `moved` (parameters the float32 step changed) and `values`
// (parameters).
//
//   project_adam_check SEED GAUSSIANS K_COUNT
// (built with cpp/core/camera_params.cpp)
#include "simt_emu.h"
#include "bit_compare.h"
// The kernel bodies, after the emulator.
#include "train_project_adam.h"

#include "splat/types.h"  // make_camera_params (cpp/core/camera_params.cpp)

#include <cmath>
#include <random>

namespace {

constexpr uint32_t kStride = 16;  // SH coefficients stored per Gaussian (degree 3's)

// Everything a step reads and writes: [0..4] the parameter groups (means,
// log scales, quats, opacity logits, sh), their moments, the gradients of the
// first four, the SH factors and the 2D gradient.
struct State {
  std::vector<float> param[5], m[5], v[5], grad[4], factors, means2d;
};

size_t differences(const State& a, const State& b) {
  size_t d = count_bit_differences(a.factors, b.factors) + count_bit_differences(a.means2d, b.means2d);
  for (int k = 0; k < 5; ++k)
    d += count_bit_differences(a.param[k], b.param[k]) + count_bit_differences(a.m[k], b.m[k]) +
         count_bit_differences(a.v[k], b.v[k]);
  for (int k = 0; k < 4; ++k) d += count_bit_differences(a.grad[k], b.grad[k]);
  return d;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: project_adam_check SEED GAUSSIANS K_COUNT\n");
    return 2;
  }
  const uint32_t seed = (uint32_t)strtoul(argv[1], nullptr, 10);
  std::mt19937 rng(seed);
  const uint32_t n = (uint32_t)atoi(argv[2]), k_count = (uint32_t)atoi(argv[3]);
  std::normal_distribution<float> normal(0.f, 1.f);
  std::uniform_real_distribution<float> unit(0.f, 1.f);
  const uint32_t widths[5] = {3u, 3u, 4u, 1u, 3u * kStride};

  State start;
  for (int k = 0; k < 5; ++k) {
    const size_t len = (size_t)n * widths[k];
    start.param[k].resize(len);
    start.m[k].resize(len);
    start.v[k].resize(len);
    for (size_t e = 0; e < len; ++e) {
      start.m[k][e] = 0.1f * normal(rng);
      start.v[k][e] = 0.01f * unit(rng);
    }
    if (k < 4) start.grad[k].assign(len, 7.f);  // stale values of an earlier step
  }
  for (uint32_t i = 0; i < n; ++i) {
    start.param[0][3 * i] = normal(rng);
    start.param[0][3 * i + 1] = normal(rng);
    start.param[0][3 * i + 2] = 4.f + normal(rng);
    for (int c = 0; c < 3; ++c) start.param[1][3 * i + c] = -3.f + 0.5f * normal(rng);
    for (int c = 0; c < 4; ++c) start.param[2][4 * i + c] = normal(rng);
    start.param[3][i] = 2.f * normal(rng);
  }
  for (float& x : start.param[4]) x = 0.3f * normal(rng);
  start.factors.assign((size_t)SPLAT_SH_FACTOR_FLOATS * n, -5.f);
  start.means2d.assign(2 * (size_t)n, -5.f);

  // The view: a camera at (ex, ey, ez) looking down +z.
  const float w2c[16] = {1, 0, 0, -0.3f * normal(rng), 0, 1, 0, -0.3f * normal(rng), 0, 0, 1, 1.f, 0, 0, 0, 1};
  const CameraParams cam = splat::make_camera_params(w2c, 80.f, 80.f, 48.f, 36.f, 96, 72);
  RasterParams rp{};
  rp.num_gaussians = n;
  rp.sh_degree = k_count <= 1 ? 0u : k_count <= 4 ? 1u : k_count <= 9 ? 2u : 3u;
  rp.sh_stride = kStride;
  rp.antialiased = rng() % 2;
  std::vector<SplatRecord> records(n);
  std::vector<int32_t> radius(n), unfit(n, -1);
  std::vector<float> accum((size_t)SPLAT_PAIR_GRAD * n);
  for (uint32_t i = 0; i < n; ++i) {
    records[i].sigmoid_opacity = 0.05f + 0.9f * unit(rng);
    records[i].opacity = records[i].sigmoid_opacity * (0.5f + 0.5f * unit(rng));
    radius[i] = unit(rng) < 0.2f ? 0 : 1 + (int32_t)(rng() % 20);
  }
  for (float& a : accum) a = normal(rng) * std::exp2(-8.f * unit(rng));

  AdamParams p{};
  p.count = n;
  p.sh_width = 3u * kStride;
  // Step 5's bias corrections and gsplat's default rates, as GpuDevice::adam_step makes them.
  const float bias1 = 1.f - std::pow(0.9f, 5.f), bias2 = 1.f - std::pow(0.999f, 5.f);
  p.step_means = adam_step_size(1.6e-4f, bias1);
  p.step_log_scales = adam_step_size(5e-3f, bias1);
  p.step_quats = adam_step_size(1e-3f, bias1);
  p.step_opacity = adam_step_size(5e-2f, bias1);
  p.step_sh_dc = adam_step_size(2.5e-3f, bias1);
  p.step_sh_rest = adam_step_size(2.5e-3f / 20.f, bias1);
  p.beta1 = 0.9f;
  p.beta2 = 0.999f;
  p.eps = 1e-15f;
  p.rsqrt_bias2 = adam_rsqrt_bias2(bias2);
  p.sh_k_count = k_count;
  p.sh_views = 1u;

  const uint32_t groups = (n + SPLAT_GROUP_SIZE - 1) / SPLAT_GROUP_SIZE;
  // With ap.bf16_moments each m array holds the packed words and is bound for v too.
  auto two_kernels = [&](const AdamParams& ap, const int32_t* radii, State& s) {
    const bool packed = ap.bf16_moments != 0u;
    simt_emu::dispatch(groups, SPLAT_GROUP_SIZE, [&](SimtThread t) {
      project_backward_body(t, cam, rp, s.param[0].data(), s.param[1].data(), s.param[2].data(), s.param[4].data(),
                            records.data(), radii, accum.data(), nullptr, s.grad[0].data(), s.grad[1].data(),
                            s.grad[2].data(), s.grad[3].data(), s.factors.data(), s.means2d.data());
    });
    const uint32_t quads = adam_quads(n, ap.sh_width);
    simt_emu::dispatch((quads + SPLAT_GROUP_SIZE - 1) / SPLAT_GROUP_SIZE, SPLAT_GROUP_SIZE, [&](SimtThread t) {
      adam_body(t, ap, s.param[0].data(), s.param[1].data(), s.param[2].data(), s.param[3].data(), s.param[4].data(),
                s.m[0].data(), s.m[1].data(), s.m[2].data(), s.m[3].data(), s.m[4].data(),
                (packed ? s.m : s.v)[0].data(), (packed ? s.m : s.v)[1].data(), (packed ? s.m : s.v)[2].data(),
                (packed ? s.m : s.v)[3].data(), (packed ? s.m : s.v)[4].data(), s.grad[0].data(), s.grad[1].data(),
                s.grad[2].data(), s.grad[3].data(), s.factors.data(), radii);
    });
  };
  auto fused = [&](const AdamParams& ap, const int32_t* radii, State& s) {
    const bool packed = ap.bf16_moments != 0u;
    simt_emu::dispatch(groups, SPLAT_GROUP_SIZE, [&](SimtThread t) {
      project_adam_body(t, cam, rp, ap, s.param[0].data(), s.param[1].data(), s.param[2].data(), s.param[3].data(),
                        s.param[4].data(), s.m[0].data(), s.m[1].data(), s.m[2].data(), s.m[3].data(), s.m[4].data(),
                        (packed ? s.m : s.v)[0].data(), (packed ? s.m : s.v)[1].data(),
                        (packed ? s.m : s.v)[2].data(), (packed ? s.m : s.v)[3].data(),
                        (packed ? s.m : s.v)[4].data(), records.data(), radii, accum.data(), nullptr,
                        s.grad[0].data(), s.grad[1].data(), s.grad[2].data(), s.grad[3].data(), s.factors.data(),
                        s.means2d.data());
    });
  };

  size_t differ = 0, moved = 0, values = 0;
  for (int way = 0; way < 4; ++way) {
    AdamParams ap = p;
    if (way == 1) {  // bfloat16 moments: the start's moments packed
      ap.bf16_moments = 1u;
      ap.moment_key = adam_moment_key(seed, 5u);
    }
    if (way == 2) ap.visible_only = 1u;
    const int32_t* radii = way == 3 ? unfit.data() : radius.data();
    State a = start;
    if (ap.bf16_moments)
      for (int k = 0; k < 5; ++k)
        for (size_t e = 0; e < a.m[k].size(); ++e)
          a.m[k][e] = sp_bits_float(bf16_round_nearest(a.m[k][e]) | bf16_round_nearest(a.v[k][e]) << 16);
    State b = a;
    two_kernels(ap, radii, a);
    fused(ap, radii, b);
    differ += differences(a, b);
    if (way == 0)
      for (int k = 0; k < 5; ++k) {
        values += a.param[k].size();
        moved += count_bit_differences(a.param[k], start.param[k]);
      }
  }
  printf("differ %zu\nmoved %zu\nvalues %zu\n", differ, moved, values);
  return 0;
}
