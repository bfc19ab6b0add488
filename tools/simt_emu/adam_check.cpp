// The fused Adam kernel (shaders/kernels/train_optim.h: one thread per
// 16-byte quad of each parameter group, tails element by element, the SH
// gradient expanded from its factors) on the SIMT emulator, against a plain
// loop of adam_update (shaders/common/adam.h) over every element with its
// group's rate. Prints how many of the updated values differ in their bits,
// for tests/test_simt_emulation.py. With VISIBLE (0..1), p.visible_only: that
// share of the Gaussians at random have a radius > 0, and the reference steps
// only theirs (the others' parameters and moments stay to the bit). Also
// p.bf16_moments (both moments packed in one word) against adam_update_bf16,
// and p.sh_views (several views' SH factor sets) against their expansions
// summed by accumulate_view.
//
//   adam_check SEED GAUSSIANS SH_WIDTH ACTIVE_COEFFS [VISIBLE]
#include "simt_emu.h"
#include "bit_compare.h"
// The kernel bodies, after the emulator.
#include "train_optim.h"

#include <random>

namespace {

struct Group {
  std::vector<float> param, m, v, grad;
};

Group random_group(std::mt19937& rng, size_t len) {
  std::normal_distribution<float> normal(0.f, 1.f);
  std::uniform_real_distribution<float> uniform(0.f, 1.f);
  Group g;
  g.param.resize(len);
  g.m.resize(len);
  g.v.resize(len);
  g.grad.resize(len);
  for (size_t e = 0; e < len; ++e) {
    g.param[e] = normal(rng);
    g.m[e] = 0.1f * normal(rng);
    g.v[e] = 0.01f * uniform(rng);
    g.grad[e] = normal(rng);
  }
  return g;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 5 && argc != 6) {
    fprintf(stderr, "usage: adam_check SEED GAUSSIANS SH_WIDTH ACTIVE_COEFFS [VISIBLE]\n");
    return 2;
  }
  const bool visible_only = argc == 6;
  const float visible = visible_only ? (float)atof(argv[5]) : 1.f;
  std::mt19937 rng((uint32_t)strtoul(argv[1], nullptr, 10));
  const uint32_t n = (uint32_t)atoi(argv[2]), sh_width = (uint32_t)atoi(argv[3]), k_count = (uint32_t)atoi(argv[4]);
  std::normal_distribution<float> normal(0.f, 1.f);

  AdamParams p{};
  p.count = n;
  p.sh_width = sh_width;
  // Step 3's bias corrections, and the rates as GpuDevice::adam_step turns them into step sizes.
  const float bias1 = 1.f - 0.9f * 0.9f * 0.9f, bias2 = 1.f - 0.999f * 0.999f * 0.999f;
  const float lr_sh_dc = 2.5e-3f, lr_sh_rest = 2.5e-3f / 20.f;
  const float rates[4] = {1.6e-4f, 5e-3f, 1e-3f, 5e-2f};
  p.step_means = adam_step_size(rates[0], bias1);
  p.step_log_scales = adam_step_size(rates[1], bias1);
  p.step_quats = adam_step_size(rates[2], bias1);
  p.step_opacity = adam_step_size(rates[3], bias1);
  p.step_sh_dc = adam_step_size(lr_sh_dc, bias1);
  p.step_sh_rest = adam_step_size(lr_sh_rest, bias1);
  p.beta1 = 0.9f;
  p.beta2 = 0.999f;
  p.eps = 1e-15f;
  p.rsqrt_bias2 = adam_rsqrt_bias2(bias2);
  p.sh_k_count = k_count;
  p.visible_only = visible_only ? 1u : 0u;

  Group groups[5] = {random_group(rng, 3u * n), random_group(rng, 3u * n), random_group(rng, 4u * n),
                     random_group(rng, n), random_group(rng, (size_t)n * sh_width)};
  std::vector<float> factors((size_t)SPLAT_SH_FACTOR_FLOATS * n);
  for (float& f : factors) f = normal(rng);
  std::uniform_real_distribution<float> uniform(0.f, 1.f);
  std::vector<int32_t> radius(n);
  for (int32_t& r : radius) r = uniform(rng) < visible ? 1 + (int32_t)(uniform(rng) * 20.f) : 0;
  const uint32_t widths[5] = {3u, 3u, 4u, 1u, sh_width};

  // The reference: every element in turn.
  Group want[5] = {groups[0], groups[1], groups[2], groups[3], groups[4]};
  AdamStep step = make_adam_step(0.f, p.beta1, p.beta2, p.eps, bias1, bias2);
  // Element e of group k: its gradient, with step.step_size set to its rate.
  auto reference_grad = [&](int k, size_t e) {
    float grad = groups[k].grad[e];
    step.step_size = k < 4 ? adam_step_size(rates[k], bias1) : 0.f;
    if (k == 4) {
      const uint32_t i = (uint32_t)(e / sh_width), j = (uint32_t)(e % sh_width);
      grad = sh_factor_grad(&factors[(size_t)SPLAT_SH_FACTOR_FLOATS * i], j / 3u, j % 3u, k_count);
      step.step_size = adam_step_size(j < 3u ? lr_sh_dc : lr_sh_rest, bias1);
    }
    return grad;
  };
  for (int k = 0; k < 5; ++k)
    for (size_t e = 0; e < want[k].param.size(); ++e) {
      if (visible_only && radius[e / widths[k]] <= 0) continue;
      const float grad = reference_grad(k, e);
      adam_update(step, grad, want[k].param[e], want[k].m[e], want[k].v[e]);
    }

  const uint32_t quads = adam_quads(n, sh_width);
  // One Adam dispatch over the five groups of `g`, as GpuDevice::adam_step makes
  // it: with ap.bf16_moments each m array holds the packed words and is bound
  // for v as well.
  auto adam = [&](const AdamParams& ap, Group (&g)[5], const float* sh_grad, const int32_t* radii) {
    const bool packed = ap.bf16_moments != 0u;
    simt_emu::dispatch((quads + SPLAT_GROUP_SIZE - 1) / SPLAT_GROUP_SIZE, SPLAT_GROUP_SIZE, [&](SimtThread t) {
      adam_body(t, ap, g[0].param.data(), g[1].param.data(), g[2].param.data(), g[3].param.data(), g[4].param.data(),
                g[0].m.data(), g[1].m.data(), g[2].m.data(), g[3].m.data(), g[4].m.data(),
                packed ? g[0].m.data() : g[0].v.data(), packed ? g[1].m.data() : g[1].v.data(),
                packed ? g[2].m.data() : g[2].v.data(), packed ? g[3].m.data() : g[3].v.data(),
                packed ? g[4].m.data() : g[4].v.data(), g[0].grad.data(), g[1].grad.data(), g[2].grad.data(),
                g[3].grad.data(), sh_grad, radii);
    });
  };
  // A step whose pairs did not fit: every radius -1 (tile_bin.h); nothing moves.
  size_t skip_changed = 0;
  if (n > 0) {
    std::vector<int32_t> skipped(n, -1);
    Group copy[5];
    for (int k = 0; k < 5; ++k) copy[k] = groups[k];
    adam(p, copy, factors.data(), skipped.data());
    for (int k = 0; k < 5; ++k)
      skip_changed += count_bit_differences(copy[k].param, groups[k].param) +
                      count_bit_differences(copy[k].m, groups[k].m) + count_bit_differences(copy[k].v, groups[k].v);
  }
  // The SH gradient given in full (data-parallel: p.sh_grad_full), as the
  // expansion of the same factors: the same update to the bit.
  size_t full_differ = 0;
  {
    std::vector<float> full((size_t)n * sh_width);
    for (size_t e = 0; e < full.size(); ++e)
      full[e] = sh_factor_grad(&factors[(size_t)SPLAT_SH_FACTOR_FLOATS * (e / sh_width)], (uint32_t)(e % sh_width) / 3u,
                               (uint32_t)(e % sh_width) % 3u, k_count);
    AdamParams pf = p;
    pf.sh_grad_full = 1u;
    Group copy[5];
    for (int k = 0; k < 5; ++k) copy[k] = groups[k];
    adam(pf, copy, full.data(), radius.data());
    for (int k = 0; k < 5; ++k)
      full_differ += count_bit_differences(copy[k].param, want[k].param) + count_bit_differences(copy[k].m, want[k].m) +
                     count_bit_differences(copy[k].v, want[k].v);
  }
  // Several views a step (p.sh_views): the SH gradient as the mean of three
  // views' factor sets, against the same views expanded and summed by
  // accumulate_view (the per-view path's grad_accumulate) and given in full:
  // the same update to the bit.
  size_t views_differ = 0;
  {
    const uint32_t views = 3u;
    const size_t set = (size_t)SPLAT_SH_FACTOR_FLOATS * n;
    std::vector<float> sets(set * views);
    for (float& f : sets) f = normal(rng);
    std::vector<float> full((size_t)n * sh_width), sum((size_t)n * sh_width);
    for (uint32_t k = 0; k < views; ++k)
      for (size_t e = 0; e < full.size(); ++e) {
        full[e] = sh_factor_grad(&sets[k * set + (size_t)SPLAT_SH_FACTOR_FLOATS * (e / sh_width)],
                                 (uint32_t)(e % sh_width) / 3u, (uint32_t)(e % sh_width) % 3u, k_count);
        accumulate_view(k, views, full[e], sum[e]);
      }
    AdamParams pf = p, pv = p;
    pf.sh_grad_full = 1u;
    pv.sh_views = views;
    Group a[5], b[5];
    for (int k = 0; k < 5; ++k) a[k] = b[k] = groups[k];
    adam(pf, a, full.data(), radius.data());
    adam(pv, b, sets.data(), radius.data());
    for (int k = 0; k < 5; ++k)
      views_differ += count_bit_differences(a[k].param, b[k].param) + count_bit_differences(a[k].m, b[k].m) +
                      count_bit_differences(a[k].v, b[k].v);
  }
  // p.bf16_moments: each group's m array holds both moments packed (its v
  // array is bound to the same buffer, as GpuDevice binds it, and never read);
  // the reference steps each element with adam_update_bf16 and its own noise.
  size_t bf16_differ = 0, bf16_v_changed = 0;
  {
    AdamParams pb = p;
    pb.bf16_moments = 1u;
    pb.moment_key = adam_moment_key((uint32_t)strtoul(argv[1], nullptr, 10), 3u);
    Group packed[5];
    for (int k = 0; k < 5; ++k) {
      packed[k] = groups[k];
      for (size_t e = 0; e < packed[k].m.size(); ++e)
        packed[k].m[e] = sp_bits_float(bf16_round_nearest(groups[k].m[e]) | bf16_round_nearest(groups[k].v[e]) << 16);
    }
    Group start[5] = {packed[0], packed[1], packed[2], packed[3], packed[4]};
    Group ref[5] = {packed[0], packed[1], packed[2], packed[3], packed[4]};
    for (int k = 0; k < 5; ++k) {
      const uint32_t group_key = adam_group_key(pb.moment_key, (uint32_t)k);
      for (size_t e = 0; e < ref[k].param.size(); ++e) {
        if (visible_only && radius[e / widths[k]] <= 0) continue;
        const float grad = reference_grad(k, e);
        uint32_t word = sp_float_bits(ref[k].m[e]);
        adam_update_bf16(step, grad, ref[k].param[e], word, adam_moment_noise(group_key, (uint32_t)e));
        ref[k].m[e] = sp_bits_float(word);
      }
    }
    adam(pb, packed, factors.data(), radius.data());
    for (int k = 0; k < 5; ++k) {
      bf16_differ += count_bit_differences(packed[k].param, ref[k].param) + count_bit_differences(packed[k].m, ref[k].m);
      for (size_t e = 0; e < packed[k].m.size(); ++e)
        bf16_v_changed += (sp_float_bits(packed[k].m[e]) >> 16) != (sp_float_bits(start[k].m[e]) >> 16);
    }
  }
  adam(p, groups, factors.data(), radius.data());

  size_t values = 0, differ = 0;
  for (int k = 0; k < 5; ++k) {
    values += 3 * want[k].param.size();
    differ += count_bit_differences(groups[k].param, want[k].param) + count_bit_differences(groups[k].m, want[k].m) +
              count_bit_differences(groups[k].v, want[k].v);
  }
  size_t unseen = 0;
  for (int32_t r : radius) unseen += r <= 0;
  printf("values %zu\ndiffer %zu\nunseen %zu\nskip_changed %zu\nfull_differ %zu\nbf16_differ %zu\nbf16_v_changed %zu\n"
         "views_differ %zu\n",
         values, differ, unseen, skip_changed, full_differ, bf16_differ, bf16_v_changed, views_differ);
  return 0;
}
