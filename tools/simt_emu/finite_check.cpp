// The divergence check's kernels (shaders/kernels/train_check.h: a strided
// count per threadgroup, then one threadgroup sums the partial counts) on
// the SIMT emulator, dispatched as GpuDevice::count_nonfinite does, against
// std::isfinite over every element of random parameter arrays holding NaNs
// and infinities of both signs among large, tiny and subnormal finite values.
// Prints each array's count from both, for tests/test_simt_emulation.py.
//
//   finite_check SEED GAUSSIANS SH_WIDTH GROUPS
#include "simt_emu.h"
// The kernel bodies, after the emulator.
#include "train_check.h"

#include <cfloat>
#include <cmath>
#include <limits>
#include <random>

int main(int argc, char** argv) {
  if (argc != 5) {
    fprintf(stderr, "usage: finite_check SEED GAUSSIANS SH_WIDTH GROUPS\n");
    return 2;
  }
  std::mt19937 rng((uint32_t)strtoul(argv[1], nullptr, 10));
  const uint32_t n = (uint32_t)atoi(argv[2]), sh_width = (uint32_t)atoi(argv[3]), groups = (uint32_t)atoi(argv[4]);
  const uint32_t widths[SPLAT_FINITE_ARRAYS] = {3, 3, 4, 1, sh_width};
  const float specials[] = {std::numeric_limits<float>::quiet_NaN(), -std::numeric_limits<float>::quiet_NaN(),
                            std::numeric_limits<float>::infinity(), -std::numeric_limits<float>::infinity(),
                            FLT_MAX, -FLT_MAX, FLT_MIN, std::numeric_limits<float>::denorm_min(), -0.f};
  std::normal_distribution<float> normal(0.f, 1.f);
  std::uniform_int_distribution<int> pick(0, (int)(sizeof(specials) / sizeof(float)) - 1);
  std::bernoulli_distribution special(0.02);
  std::vector<float> arrays[SPLAT_FINITE_ARRAYS];
  std::uniform_int_distribution<int> pick_nonfinite(0, 3);  // specials[0..3]: the NaNs and infinities
  for (int a = 0; a < SPLAT_FINITE_ARRAYS; ++a) {
    arrays[a].resize((size_t)n * widths[a]);
    for (float& v : arrays[a]) v = special(rng) ? specials[pick(rng)] : normal(rng);
    // at least one in every array, so a kernel that counts nothing cannot pass
    std::uniform_int_distribution<size_t> at(0, arrays[a].size() - 1);
    arrays[a][at(rng)] = specials[pick_nonfinite(rng)];
  }

  FiniteParams p{};
  p.count = n;
  p.sh_width = sh_width;
  p.groups = groups;
  std::vector<uint32_t> partials((size_t)SPLAT_FINITE_ARRAYS * groups, 0xdeadbeefu), totals(SPLAT_FINITE_ARRAYS, 0xdeadbeefu);
  simt_emu::dispatch(groups, SPLAT_GROUP_SIZE, [&](SimtThread t) {
    SPLAT_TG_ARRAY(uint32_t, warp_tot, SPLAT_GROUP_WARPS + 1);
    count_nonfinite_body(t, p, arrays[0].data(), arrays[1].data(), arrays[2].data(), arrays[3].data(),
                         arrays[4].data(), partials.data(), warp_tot);
  });
  simt_emu::dispatch(1, SPLAT_GROUP_SIZE, [&](SimtThread t) {
    SPLAT_TG_ARRAY(uint32_t, warp_tot, SPLAT_GROUP_WARPS + 1);
    nonfinite_total_body(t, p, partials.data(), totals.data(), warp_tot);
  });

  for (int a = 0; a < SPLAT_FINITE_ARRAYS; ++a) {
    size_t want = 0;
    for (float v : arrays[a]) want += !std::isfinite(v);
    printf("want%d %zu\ngot%d %u\n", a, want, a, totals[a]);
  }
  return 0;
}
