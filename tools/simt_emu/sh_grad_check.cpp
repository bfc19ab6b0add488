// The SH gradient's expansion (shaders/kernels/project.h, expand_sh_grad_body:
// a thread per 16-byte quad of the flat d_sh array, the partial last quad
// float by float) on the SIMT emulator, dispatched as GpuDevice::expand_sh_grad
// does, against a loop of sh_factor_grad over every element. Prints how many
// elements differ in their bits and how many past the array were touched, for
// tests/test_simt_emulation.py.
//
// With VIEWS > 1, p.views factor sets: against each set's value summed by
// accumulate_view (adam.h), as the per-view path's grad_accumulate sums them.
//
//   sh_grad_check SEED GAUSSIANS SH_STRIDE ACTIVE_COEFFS [VIEWS]
#include "simt_emu.h"
#include "bit_compare.h"
// The kernel bodies, after the emulator.
#include "project.h"
#include "adam.h"  // accumulate_view, the per-view sum

#include <random>

int main(int argc, char** argv) {
  if (argc != 5 && argc != 6) {
    fprintf(stderr, "usage: sh_grad_check SEED GAUSSIANS SH_STRIDE ACTIVE_COEFFS [VIEWS]\n");
    return 2;
  }
  const uint32_t views = argc == 6 ? (uint32_t)atoi(argv[5]) : 1u;
  std::mt19937 rng((uint32_t)strtoul(argv[1], nullptr, 10));
  const uint32_t n = (uint32_t)atoi(argv[2]), stride = (uint32_t)atoi(argv[3]), k_count = (uint32_t)atoi(argv[4]);
  std::normal_distribution<float> normal(0.f, 1.f);
  const size_t set = (size_t)SPLAT_SH_FACTOR_FLOATS * n;
  std::vector<float> factors(set * views);
  for (float& f : factors) f = normal(rng);

  const size_t total = (size_t)n * 3 * stride;
  const float sentinel = -12345.f;
  // Room past the array: a quad stored across its end would show there.
  std::vector<float> d_sh(total + 8, sentinel);
  ShGradParams p{n, stride, k_count, argc == 6 ? views : 0u};  // 0: one set, as the pad once was
  const uint32_t quads = (uint32_t)((total + 3) / 4);
  simt_emu::dispatch((quads + SPLAT_GROUP_SIZE - 1) / SPLAT_GROUP_SIZE, SPLAT_GROUP_SIZE,
                     [&](SimtThread t) { expand_sh_grad_body(t, p, factors.data(), d_sh.data()); });

  std::vector<float> want(total), sum(total);
  size_t nonzero = 0, past_end = 0;
  for (size_t e = 0; e < total; ++e) {
    const uint32_t width = 3 * stride, j = (uint32_t)(e % width);
    for (uint32_t k = 0; k < views; ++k) {
      want[e] = sh_factor_grad(&factors[k * set + (size_t)SPLAT_SH_FACTOR_FLOATS * (e / width)], j / 3u, j % 3u, k_count);
      if (views > 1) accumulate_view(k, views, want[e], sum[e]);
    }
    nonzero += want[e] != 0.f;
  }
  const size_t differ = count_bit_differences(want, d_sh);  // over want's elements: the array itself
  for (size_t e = total; e < d_sh.size(); ++e) past_end += d_sh[e] != sentinel;
  printf("values %zu\ndiffer %zu\nnonzero %zu\npast_end %zu\n", total, differ, nonzero, past_end);
  return 0;
}
