// The MCMC strategy's kernels (shaders/kernels/train_mcmc.h) on the SIMT
// emulator, dispatched as GpuDevice does (gpu_mcmc.cpp): a refine
// (relocation, then growth into rows already allocated), the position noise,
// or the regularisers' gradients, on a state the test writes; the result goes
// back for tests/test_simt_emulation.py to hold against splat.reference.mcmc.
//
//   mcmc_check IN OUT
// IN: uint32 n, add, sh_width, seed, step, mode (0 refine, 1 noise, 2
// regularisers); float32 min_opacity, noise_scale, opacity_weight,
// scale_weight; then the 5 parameter arrays, their first and their second
// moments (n rows each), and for mode 2 the gradients of log-scales and
// opacities. OUT: uint32 relocated, then every array at n + add rows (mode 2:
// the two gradients; mode 0: then each pass's n sampling weights, relocation
// first, from the block prefixes: a weight comes from a float sigmoid, whose
// last bit may differ from numpy's, so the test hands these to the reference).
#include "simt_emu.h"
// The kernel bodies, after the emulator.
#include "train_mcmc.h"
#include "../../cpp/gpu/grid.h"  // the host's grid sizes

#include <vector>

namespace {

using splat::gpu::div_up;

struct State {
  uint32_t n = 0, sh_width = 0;
  std::vector<float> a[15];  // params, m, v (5 each)
  uint32_t width(int k) const {
    static const uint32_t w[4] = {3, 3, 4, 1};
    return k % 5 < 4 ? w[k % 5] : sh_width;
  }
};

// GpuDevice::mcmc_pass.
uint32_t pass(State& s, const McmcParams& base, const std::vector<float>& binoms, uint32_t targets, bool grow,
              std::vector<uint32_t>& weights) {
  McmcParams p = base;
  const uint32_t n = s.n;
  p.count = n;
  p.targets = targets;
  p.grow = grow ? 1u : 0u;
  p.num_blocks = div_up(n, SPLAT_GROUP_SIZE);
  p.draw = grow ? MCMC_DRAW_GROW : MCMC_DRAW_RELOCATE;
  std::vector<uint32_t> prefix(n, 0xdeadbeefu), block_sums(p.num_blocks, 0xdeadbeefu),
      source(size_t{n} + targets, 0xdeadbeefu), times(size_t{n} + 1, 0u);
  std::vector<uint64_t> offsets(size_t{p.num_blocks} + 1, 0xdeadbeefull);
  float* opacity = s.a[3].data();
  simt_emu::dispatch(p.num_blocks, SPLAT_GROUP_SIZE, [&](SimtThread t) {
    SPLAT_TG_ARRAY(uint32_t, warp_tot, SPLAT_GROUP_WARPS + 1);
    mcmc_weights_body(t, p, opacity, prefix.data(), block_sums.data(), warp_tot);
  });
  simt_emu::dispatch(1, SPLAT_GROUP_SIZE, [&](SimtThread t) {
    SPLAT_TG_ARRAY(uint64_t, runs, SPLAT_GROUP_SIZE);
    mcmc_block_offsets_body(t, p, block_sums.data(), offsets.data(), runs);
  });
  simt_emu::dispatch(div_up(targets, SPLAT_GROUP_SIZE), SPLAT_GROUP_SIZE, [&](SimtThread t) {
    mcmc_sample_body(t, p, opacity, prefix.data(), offsets.data(), source.data(), times.data());
  });
  weights.resize(n);
  for (uint32_t i = 0; i < n; ++i) weights[i] = prefix[i] - (i % SPLAT_GROUP_SIZE ? prefix[i - 1] : 0u);
  const int order[5] = {0, 2, 4, 1, 3};
  for (int a : order) {
    const uint32_t kind = a == 1 ? MCMC_ARRAY_LOG_SCALES : a == 3 ? MCMC_ARRAY_OPACITY : MCMC_ARRAY_PLAIN;
    for (int k = 0; k < 3; ++k) {
      McmcParams q = p;
      q.width = s.width(a);
      q.kind = k == 0 ? kind : MCMC_ARRAY_MOMENT;
      for (uint32_t phase = 0; phase < 2; ++phase) {
        if (phase == 1 && q.kind == MCMC_ARRAY_PLAIN) continue;
        q.sources = phase;
        float* data = s.a[5 * k + a].data();
        simt_emu::dispatch(div_up(phase == 0 ? targets : n, SPLAT_GROUP_SIZE), SPLAT_GROUP_SIZE, [&](SimtThread t) {
          mcmc_apply_body(t, q, source.data(), times.data(), binoms.data(), opacity, data);
        });
      }
    }
  }
  return times[n];  // the relocated count (relocation only)
}

bool read(FILE* f, void* p, size_t bytes) { return fread(p, 1, bytes, f) == bytes; }

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: mcmc_check IN OUT\n");
    return 2;
  }
  FILE* in = fopen(argv[1], "rb");
  uint32_t h[6];
  float hf[4];
  if (!in || !read(in, h, sizeof(h)) || !read(in, hf, sizeof(hf))) return 3;
  State s;
  s.n = h[0];
  const uint32_t add = h[1], mode = h[5];
  s.sh_width = h[2];
  McmcParams p{};
  p.count = s.n;
  p.seed = h[3];
  p.step = h[4];
  p.sh_width = s.sh_width;
  p.min_opacity = hf[0];
  p.noise_scale = hf[1];
  p.opacity_weight = hf[2];
  p.scale_weight = hf[3];
  const size_t rows = size_t{s.n} + add;
  for (int k = 0; k < 15; ++k) {
    s.a[k].assign(rows * s.width(k), 0.f);
    if (!read(in, s.a[k].data(), 4 * size_t{s.n} * s.width(k))) return 3;
  }
  std::vector<float> g_log_scales(3 * size_t{s.n}), g_opacity(s.n);
  if (mode == 2 && (!read(in, g_log_scales.data(), 4 * g_log_scales.size()) ||
                    !read(in, g_opacity.data(), 4 * g_opacity.size())))
    return 3;
  fclose(in);

  uint32_t relocated = 0;
  std::vector<uint32_t> weights[2];
  if (mode == 0) {
    std::vector<float> binoms(MCMC_MAX_RATIO * MCMC_MAX_RATIO);
    mcmc_fill_binomials(binoms.data());
    relocated = pass(s, p, binoms, s.n, false, weights[0]);
    if (add > 0) pass(s, p, binoms, add, true, weights[1]);
  } else if (mode == 1) {
    simt_emu::dispatch(div_up(s.n, SPLAT_GROUP_SIZE), SPLAT_GROUP_SIZE, [&](SimtThread t) {
      static const int32_t kSeen = 0;  // the step's gate (params.h): not skipped
      mcmc_noise_body(t, p, s.a[0].data(), s.a[1].data(), s.a[2].data(), s.a[3].data(), &kSeen);
    });
  } else {
    simt_emu::dispatch(div_up(s.n, SPLAT_GROUP_SIZE), SPLAT_GROUP_SIZE, [&](SimtThread t) {
      mcmc_regularize_body(t, p, s.a[3].data(), s.a[1].data(), g_opacity.data(), g_log_scales.data());
    });
  }
  FILE* out = fopen(argv[2], "wb");
  if (!out) return 4;
  fwrite(&relocated, 4, 1, out);
  if (mode == 2) {
    fwrite(g_log_scales.data(), 4, g_log_scales.size(), out);
    fwrite(g_opacity.data(), 4, g_opacity.size(), out);
  } else {
    for (int k = 0; k < 15; ++k) fwrite(s.a[k].data(), 4, s.a[k].size(), out);
    for (const std::vector<uint32_t>& w : weights) fwrite(w.data(), 4, w.size(), out);
  }
  fclose(out);
  return 0;
}
