// The training step's projection backward with Adam folded in
// (shaders/kernels/train_fused_adam.h: gradients staged in threadgroup
// memory, then the threadgroup's Adam a quad a thread) on the SIMT emulator,
// against the separate path it replaces: project_backward_body (gradients and
// SH factors to memory) then adam_body (train_optim.h) over them, as
// GpuDevice runs them with adam_fusion = off. Random Gaussians in front of a random camera, random
// accumulated blend gradients (per pair slot when built with
// SPLAT_SPEC_DETERMINISTIC=1), a share of unseen Gaussians (radius 0). Prints
// how many parameter and moment values differ in their bits, float32 and
// packed bfloat16 moments, with p.visible_only or not, and for a skipped step
// (every radius -1), for tests/test_simt_emulation.py.
//
//   fused_adam_check SEED GAUSSIANS SH_STRIDE SH_DEGREE VISIBLE ANTIALIASED
#include "simt_emu.h"
#include "bit_compare.h"
// The kernel bodies, after the emulator.
#include "train_fused_adam.h"
#include "train_optim.h"

#include <cmath>
#include <random>

namespace {

struct State {
  std::vector<float> param[5], m[5], v[5];
};

size_t count_state_differences(const State& a, const State& b, bool packed) {
  size_t d = 0;
  for (int k = 0; k < 5; ++k) {
    d += count_bit_differences(a.param[k], b.param[k]) + count_bit_differences(a.m[k], b.m[k]);
    if (!packed) d += count_bit_differences(a.v[k], b.v[k]);
  }
  return d;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 7) {
    fprintf(stderr, "usage: fused_adam_check SEED GAUSSIANS SH_STRIDE SH_DEGREE VISIBLE ANTIALIASED\n");
    return 2;
  }
  const uint32_t seed = (uint32_t)strtoul(argv[1], nullptr, 10);
  std::mt19937 rng(seed);
  const uint32_t n = (uint32_t)atoi(argv[2]), stride = (uint32_t)atoi(argv[3]), degree = (uint32_t)atoi(argv[4]);
  const float visible = (float)atof(argv[5]);
  std::normal_distribution<float> normal(0.f, 1.f);
  std::uniform_real_distribution<float> uniform(0.f, 1.f);

  // A camera 4 units from the origin, looking at it down a random axis tilt.
  CameraParams cam{};
  const float a = 0.6f * (uniform(rng) - 0.5f), c = cosf(a), s = sinf(a);
  const float R[9] = {c, 0.f, s, 0.f, 1.f, 0.f, -s, 0.f, c};
  const float tz = 4.f;
  for (int r = 0; r < 3; ++r) {
    for (int k = 0; k < 3; ++k) cam.w2c[4 * r + k] = R[3 * r + k];
    cam.w2c[4 * r + 3] = r == 2 ? tz : 0.f;
  }
  for (int k = 0; k < 3; ++k) cam.center[k] = -R[3 * 2 + k] * tz;  // -R^T t
  cam.width = 200;
  cam.height = 150;
  cam.fx = cam.fy = 220.f;
  cam.cx = 100.f;
  cam.cy = 75.f;
  cam.tan_fovx = 0.5f * cam.width / cam.fx;
  cam.tan_fovy = 0.5f * cam.height / cam.fy;
  cam.tiles_x = (cam.width + SPLAT_TILE_SIZE - 1) / SPLAT_TILE_SIZE;
  cam.tiles_y = (cam.height + SPLAT_TILE_SIZE - 1) / SPLAT_TILE_SIZE;
  cam.near_plane = 0.01f;
  cam.far_plane = 100.f;
  RasterParams rp{};
  rp.num_gaussians = n;
  rp.sh_degree = degree;
  rp.sh_stride = stride;
  rp.num_tiles = cam.tiles_x * cam.tiles_y;
  rp.antialiased = (uint32_t)atoi(argv[6]);

  const uint32_t sh_width = 3u * stride, widths[5] = {3u, 3u, 4u, 1u, sh_width};
  State start;
  for (int k = 0; k < 5; ++k) {
    const size_t len = (size_t)n * widths[k];
    start.param[k].resize(len);
    start.m[k].resize(len);
    start.v[k].resize(len);
    for (size_t e = 0; e < len; ++e) {
      start.param[k][e] = normal(rng);
      start.m[k][e] = 0.1f * normal(rng);
      start.v[k][e] = 0.01f * uniform(rng);
    }
  }
  for (size_t e = 0; e < start.param[0].size(); ++e) start.param[0][e] = 2.f * uniform(rng) - 1.f;  // in view
  for (float& x : start.param[1]) x = logf(0.03f + 0.2f * uniform(rng));
  std::vector<SplatRecord> records(n);
  std::vector<int32_t> radius(n);
  for (uint32_t i = 0; i < n; ++i) {
    records[i] = SplatRecord{};
    records[i].sigmoid_opacity = 0.05f + 0.9f * uniform(rng);
    records[i].opacity = records[i].sigmoid_opacity * (0.8f + 0.2f * uniform(rng));
    radius[i] = uniform(rng) < visible ? 1 + (int32_t)(20.f * uniform(rng)) : 0;
  }
  // Accumulated blend gradients: per Gaussian, or per pair slot (deterministic:
  // each Gaussian's slots [first, first + count), summed in order).
  std::vector<uint32_t> pair_ranges(2 * (size_t)n);
  uint32_t slots = 0;
  for (uint32_t i = 0; i < n; ++i) {
    const uint32_t count = SPLAT_SPEC_DETERMINISTIC ? (uint32_t)(uniform(rng) * 5.f) : 0u;
    pair_ranges[2 * i] = slots;
    pair_ranges[2 * i + 1] = count;
    slots += count;
  }
  std::vector<float> accum((size_t)SPLAT_PAIR_GRAD * (SPLAT_SPEC_DETERMINISTIC ? slots : n));
  for (float& x : accum) x = 0.05f * normal(rng);

  AdamParams p{};
  p.count = n;
  p.sh_width = sh_width;
  const float bias1 = 1.f - 0.9f * 0.9f * 0.9f, bias2 = 1.f - 0.999f * 0.999f * 0.999f;
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
  p.sh_k_count = (uint32_t)sh_num_coeffs((int)degree);
  p.moment_key = adam_moment_key(seed, 3u);

  const uint32_t blocks = (n + SPLAT_GROUP_SIZE - 1) / SPLAT_GROUP_SIZE;
  // adam_fusion = off: the gradients to memory, then Adam over them.
  auto separate = [&](const AdamParams& ap, State& st, const std::vector<int32_t>& radii, std::vector<float>& d2) {
    const bool packed = ap.bf16_moments != 0u;
    std::vector<float> grads[4] = {std::vector<float>(3 * (size_t)n), std::vector<float>(3 * (size_t)n),
                                   std::vector<float>(4 * (size_t)n), std::vector<float>(n)};
    std::vector<float> factors((size_t)SPLAT_SH_FACTOR_FLOATS * n);
    d2.assign(2 * (size_t)n, 0.f);
    simt_emu::dispatch(blocks, SPLAT_GROUP_SIZE, [&](SimtThread t) {
      project_backward_body(t, cam, rp, st.param[0].data(), st.param[1].data(), st.param[2].data(),
                            st.param[4].data(), records.data(), radii.data(), accum.data(), pair_ranges.data(),
                            grads[0].data(), grads[1].data(), grads[2].data(), grads[3].data(), factors.data(),
                            d2.data());
    });
    const uint32_t quads = adam_quads(n, sh_width);
    simt_emu::dispatch((quads + SPLAT_GROUP_SIZE - 1) / SPLAT_GROUP_SIZE, SPLAT_GROUP_SIZE, [&](SimtThread t) {
      float* v[5];
      for (int k = 0; k < 5; ++k) v[k] = packed ? st.m[k].data() : st.v[k].data();
      adam_body(t, ap, st.param[0].data(), st.param[1].data(), st.param[2].data(), st.param[3].data(),
                st.param[4].data(), st.m[0].data(), st.m[1].data(), st.m[2].data(), st.m[3].data(), st.m[4].data(),
                v[0], v[1], v[2], v[3], v[4], grads[0].data(), grads[1].data(), grads[2].data(), grads[3].data(),
                factors.data(), radii.data());
    });
  };
  auto fused = [&](const AdamParams& ap, State& st, const std::vector<int32_t>& radii, std::vector<float>& d2) {
    const bool packed = ap.bf16_moments != 0u;
    d2.assign(2 * (size_t)n, -1.f);
    simt_emu::dispatch(blocks, SPLAT_GROUP_SIZE, [&](SimtThread t) {
      SPLAT_TG_ARRAY(float, s_grads, SPLAT_FUSED_GRAD_ROWS * SPLAT_GROUP_SIZE);
      SPLAT_TG_ARRAY(uint32_t, s_seen, SPLAT_GROUP_SIZE);
      float* v[5];
      for (int k = 0; k < 5; ++k) v[k] = packed ? st.m[k].data() : st.v[k].data();
      project_backward_adam_body(t, cam, rp, ap, st.param[0].data(), st.param[1].data(), st.param[2].data(),
                                 st.param[3].data(), st.param[4].data(), records.data(), radii.data(), accum.data(),
                                 pair_ranges.data(), st.m[0].data(), st.m[1].data(), st.m[2].data(), st.m[3].data(),
                                 st.m[4].data(), v[0], v[1], v[2], v[3], v[4], d2.data(), s_grads, s_seen);
    });
  };
  // Packed moments: each m word holds both, rounded to nearest from the start's.
  State packed_start = start;
  for (int k = 0; k < 5; ++k)
    for (size_t e = 0; e < start.m[k].size(); ++e)
      packed_start.m[k][e] =
          sp_bits_float(bf16_round_nearest(start.m[k][e]) | bf16_round_nearest(start.v[k][e]) << 16);

  size_t values = 0;
  for (int k = 0; k < 5; ++k) values += 3 * start.param[k].size();
  printf("values %zu\n", values);
  for (int packed = 0; packed < 2; ++packed)
    for (int visible_only = 0; visible_only < 2; ++visible_only) {
      AdamParams ap = p;
      ap.bf16_moments = (uint32_t)packed;
      ap.visible_only = (uint32_t)visible_only;
      const State& from = packed ? packed_start : start;
      State want = from, got = from;
      std::vector<float> want_d2, got_d2;
      separate(ap, want, radius, want_d2);
      fused(ap, got, radius, got_d2);
      size_t moved = 0;
      for (int k = 0; k < 5; ++k) moved += count_bit_differences(got.param[k], from.param[k]);
      const char* name = packed ? "bf16" : "f32";
      const char* vis = visible_only ? "_visible" : "";
      printf("%s%s_differ %zu\n%s%s_moved %zu\n%s%s_means2d_differ %zu\n", name, vis,
             count_state_differences(want, got, packed), name, vis, moved, name, vis,
             count_bit_differences(want_d2, got_d2));
    }
  // A step whose pairs did not fit: every radius -1 (tile_bin.h); nothing moves.
  {
    const std::vector<int32_t> skipped(n, -1);
    State got = start;
    std::vector<float> d2;
    fused(p, got, skipped, d2);
    printf("skip_changed %zu\n", count_state_differences(got, start, false));
  }
  size_t unseen = 0;
  for (int32_t r : radius) unseen += r <= 0;
  printf("unseen %zu\n", unseen);
  return 0;
}
