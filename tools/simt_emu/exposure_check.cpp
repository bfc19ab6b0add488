// The exposure-compensation kernels (shaders/kernels/train_exposure.h) on the
// SIMT emulator, against plain loops over the shared math of
// shaders/common/exposure.h and adam.h: the corrected image and A^T d_image
// to the bit, the 12 summed gradients against a float64 sum, every view's
// Adam step to the bit, and the centring's mean (against float64) and the
// differences between views it must keep. Prints the counts and errors for
// tests/test_simt_emulation.py.
//
//   exposure_check SEED PIXELS VIEWS
#include "simt_emu.h"
#include "bit_compare.h"
// The kernel bodies, after the emulator.
#include "train_exposure.h"

#include <cmath>
#include <random>

int main(int argc, char** argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: exposure_check SEED PIXELS VIEWS\n");
    return 2;
  }
  std::mt19937 rng((uint32_t)strtoul(argv[1], nullptr, 10));
  const uint32_t pixels = (uint32_t)atoi(argv[2]), views = (uint32_t)atoi(argv[3]);
  std::normal_distribution<float> normal(0.f, 1.f);
  std::uniform_real_distribution<float> uniform(0.f, 1.f);
  const uint32_t view = (uint32_t)(rng() % views);

  std::vector<float> exposure(SPLAT_EXPOSURE_FLOATS * views), m(exposure.size()), v(exposure.size());
  for (size_t i = 0; i < exposure.size(); ++i) {
    exposure[i] = (i % 12 % 5 == 0 ? 1.f : 0.f) + 0.2f * normal(rng);
    // Momentum at least 1e-3 in size: every view's momentum-only step then moves its
    // value by ~3e-4 or more, far above a float ulp (a momentum drawn near 0 gave a step
    // that rounded away: one value in ~8000 did not move).
    const float z = normal(rng);
    m[i] = (z < 0.f ? -1.f : 1.f) * (1e-3f + 0.01f * std::fabs(z));
    v[i] = 1e-4f * uniform(rng);
  }
  std::vector<float> image(3 * (size_t)pixels), d_image(image.size());
  for (float& x : image) x = uniform(rng);
  for (float& x : d_image) x = 1e-3f * normal(rng);

  ExposureParams p{};
  p.pixels = pixels;
  p.view = view;
  p.blocks = (pixels + SPLAT_GROUP_SIZE - 1) / SPLAT_GROUP_SIZE;
  p.floats = (uint32_t)exposure.size();
  p.lr = 1e-2f;
  p.beta1 = 0.9f;
  p.beta2 = 0.999f;
  p.eps = 1e-15f;
  p.bias1 = 1.f - 0.9f * 0.9f;
  p.bias2 = 1.f - 0.999f * 0.999f;

  // The kernels, as GpuDevice dispatches them.
  std::vector<float> corrected(image.size()), d_out = d_image, partials(SPLAT_EXPOSURE_FLOATS * (size_t)p.blocks),
      grad(SPLAT_EXPOSURE_FLOATS);
  simt_emu::dispatch(p.blocks, SPLAT_GROUP_SIZE, [&](SimtThread t) {
    exposure_apply_body(t, p, exposure.data(), image.data(), corrected.data());
  });
  simt_emu::dispatch(p.blocks, SPLAT_GROUP_SIZE, [&](SimtThread t) {
    SPLAT_TG_ARRAY(float, s_red, SPLAT_EXPOSURE_RED_FLOATS);
    exposure_backward_body(t, p, exposure.data(), image.data(), d_out.data(), partials.data(), s_red);
  });
  simt_emu::dispatch(1, SPLAT_GROUP_SIZE, [&](SimtThread t) {
    SPLAT_TG_ARRAY(float, s_red, SPLAT_EXPOSURE_RED_FLOATS);
    exposure_reduce_body(t, p, partials.data(), grad.data(), s_red);
  });
  std::vector<float> got_e = exposure, got_m = m, got_v = v;
  // The step's gate: radius[0] >= 0 (a skipped step's -1 changes nothing, below).
  static const int32_t kSeen = 3, kSkipped = -1;
  std::vector<float> skip_e = exposure, skip_m = m, skip_v = v;
  simt_emu::dispatch((p.floats + SPLAT_GROUP_SIZE - 1) / SPLAT_GROUP_SIZE, SPLAT_GROUP_SIZE, [&](SimtThread t) {
    exposure_adam_body(t, p, skip_e.data(), skip_m.data(), skip_v.data(), grad.data(), nullptr, &kSkipped);
  });
  const bool skip_kept = skip_e == exposure && skip_m == m && skip_v == v;
  simt_emu::dispatch((p.floats + SPLAT_GROUP_SIZE - 1) / SPLAT_GROUP_SIZE, SPLAT_GROUP_SIZE, [&](SimtThread t) {
    exposure_adam_body(t, p, got_e.data(), got_m.data(), got_v.data(), grad.data(), nullptr, &kSeen);
  });
  // all_views: every view's gradient from grad_views (the data-parallel ranks' mean).
  std::vector<float> grad_views(exposure.size());
  for (float& x : grad_views) x = 1e-2f * normal(rng);
  ExposureParams pv = p;
  pv.all_views = 1;
  std::vector<float> views_e = exposure, views_m = m, views_v = v;
  simt_emu::dispatch((p.floats + SPLAT_GROUP_SIZE - 1) / SPLAT_GROUP_SIZE, SPLAT_GROUP_SIZE, [&](SimtThread t) {
    exposure_adam_body(t, pv, views_e.data(), views_m.data(), views_v.data(), grad.data(), grad_views.data(), &kSeen);
  });

  // The references.
  ExposureAffine a;
  for (uint32_t k = 0; k < SPLAT_EXPOSURE_FLOATS; ++k) a.e[k] = exposure[SPLAT_EXPOSURE_FLOATS * view + k];
  std::vector<float> want_c(image.size()), want_d(image.size());
  double want_g[SPLAT_EXPOSURE_FLOATS] = {};
  for (uint32_t i = 0; i < pixels; ++i) {
    const vec3 x = make_vec3(image[3 * i], image[3 * i + 1], image[3 * i + 2]);
    const vec3 d = make_vec3(d_image[3 * i], d_image[3 * i + 1], d_image[3 * i + 2]);
    const vec3 c = exposure_apply(a, x), g = exposure_image_grad(a, d);
    want_c[3 * i] = c.x, want_c[3 * i + 1] = c.y, want_c[3 * i + 2] = c.z;
    want_d[3 * i] = g.x, want_d[3 * i + 1] = g.y, want_d[3 * i + 2] = g.z;
    const double xs[3] = {x.x, x.y, x.z}, ds[3] = {d.x, d.y, d.z};
    for (int r = 0; r < 3; ++r) {
      for (int c2 = 0; c2 < 3; ++c2) want_g[4 * r + c2] += ds[r] * xs[c2];
      want_g[4 * r + 3] += ds[r];
    }
  }
  double err = 0.0, norm = 0.0;
  for (uint32_t k = 0; k < SPLAT_EXPOSURE_FLOATS; ++k) {
    err += (grad[k] - want_g[k]) * (grad[k] - want_g[k]);
    norm += want_g[k] * want_g[k];
  }
  std::vector<float> want_e = exposure, want_m = m, want_v = v;
  const AdamStep step = make_adam_step(p.lr, p.beta1, p.beta2, p.eps, p.bias1, p.bias2);
  for (size_t i = 0; i < want_e.size(); ++i)
    adam_update(step, i / SPLAT_EXPOSURE_FLOATS == view ? grad[i % SPLAT_EXPOSURE_FLOATS] : 0.f, want_e[i], want_m[i],
                want_v[i]);
  std::vector<float> wantv_e = exposure, wantv_m = m, wantv_v = v;
  for (size_t i = 0; i < wantv_e.size(); ++i) adam_update(step, grad_views[i], wantv_e[i], wantv_m[i], wantv_v[i]);
  size_t moved = 0;
  for (size_t i = 0; i < want_e.size(); ++i) moved += got_e[i] != exposure[i];

  // exposure_center on the stepped corrections: each float's mean over the
  // views becomes the identity's (float64 check); every view moves by the
  // same shift, so the differences between views stay (to rounding).
  std::vector<float> centred = got_e, skip_c = got_e;
  simt_emu::dispatch(1, SPLAT_GROUP_SIZE, [&](SimtThread t) {
    SPLAT_TG_ARRAY(float, s_red, SPLAT_EXPOSURE_RED_FLOATS);
    exposure_center_body(t, p, centred.data(), &kSeen, s_red);
  });
  simt_emu::dispatch(1, SPLAT_GROUP_SIZE, [&](SimtThread t) {
    SPLAT_TG_ARRAY(float, s_red, SPLAT_EXPOSURE_RED_FLOATS);
    exposure_center_body(t, p, skip_c.data(), &kSkipped, s_red);
  });
  double mean_err = 0.0, diff_err = 0.0;
  for (uint32_t k = 0; k < SPLAT_EXPOSURE_FLOATS; ++k) {
    double mean = 0.0;
    for (uint32_t w = 0; w < views; ++w) mean += centred[SPLAT_EXPOSURE_FLOATS * w + k];
    mean_err = std::fmax(mean_err, std::fabs(mean / views - exposure_identity(k)));
    for (uint32_t w = 1; w < views; ++w) {
      const size_t i = SPLAT_EXPOSURE_FLOATS * w + k, j = k;
      diff_err = std::fmax(diff_err, std::fabs((double(centred[i]) - centred[j]) - (double(got_e[i]) - got_e[j])));
    }
  }

  printf("apply_differ %zu\n", count_bit_differences(corrected, want_c));
  printf("image_grad_differ %zu\n", count_bit_differences(d_out, want_d));
  printf("grad_rel_err %.9g\n", std::sqrt(err / norm));
  printf("adam_differ %zu\n", count_bit_differences(got_e, want_e) + count_bit_differences(got_m, want_m) + count_bit_differences(got_v, want_v));
  printf("adam_moved %zu\n", moved);
  printf("adam_views_differ %zu\n", count_bit_differences(views_e, wantv_e) + count_bit_differences(views_m, wantv_m) +
                                        count_bit_differences(views_v, wantv_v));
  printf("adam_values %zu\n", want_e.size());
  printf("skip_kept %d\n", skip_kept ? 1 : 0);
  printf("center_mean_err %.9g\n", mean_err);
  printf("center_diff_err %.9g\n", diff_err);
  printf("center_skip_kept %d\n", skip_c == got_e ? 1 : 0);
  return 0;
}
