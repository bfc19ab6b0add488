// GpuDevice's MCMC strategy ops (docs/training_modes.md, "The MCMC strategy"):
// the regularisers' gradients and the position noise every step, and a
// refine (relocation, then growth) as kernel launches of
// shaders/kernels/train_mcmc.h. A refine reads back one count; the per-step
// ops read nothing back.
#include <algorithm>

#include "../../shaders/common/mcmc.h"
#include "gpu_device.h"
#include "grid.h"
#include "splat/errors.h"
#include "splat/limits.h"

namespace splat::gpu {

void GpuDevice::mcmc_regularize(const McmcStepSettings& s) {
  std::lock_guard<std::mutex> lock(mutex_);
  mcmc_regularize_grads(s);
  finish_op(false);
}

void GpuDevice::mcmc_regularize_grads(const McmcStepSettings& s) {
  const size_t n = count_;
  if (n == 0) return;
  McmcParams p{};
  p.count = static_cast<uint32_t>(n);
  // As the CPU backend rounds them.
  p.opacity_weight = static_cast<float>(s.opacity_reg / static_cast<double>(n));
  p.scale_weight = static_cast<float>(s.scale_reg / (3.0 * static_cast<double>(n)));
  begin(TimingLabel::Adam);
  launch(Kernel::McmcRegularize, div_up(n, kGroup),
         {KernelArg::value(p), KernelArg::buf(ref(kParam0 + 3)), KernelArg::buf(ref(kParam0 + 1)),
          KernelArg::buf(ref(kGrad0 + 3)), KernelArg::buf(ref(kGrad0 + 1))});
  end(TimingLabel::Adam);
}

void GpuDevice::mcmc_noise(const McmcStepSettings& s) {
  std::lock_guard<std::mutex> lock(mutex_);
  const size_t n = count_;
  McmcParams p{};
  p.count = static_cast<uint32_t>(n);
  p.seed = static_cast<uint32_t>(s.seed);
  p.step = s.step;
  p.noise_scale = s.noise_scale;
  begin(TimingLabel::Adam);
  launch(Kernel::McmcNoise, div_up(n, kGroup),
         {KernelArg::value(p), KernelArg::buf(ref(kParam0)), KernelArg::buf(ref(kParam0 + 1)),
          KernelArg::buf(ref(kParam0 + 2)), KernelArg::buf(ref(kParam0 + 3)), KernelArg::buf(ref(kRadius))});
  end(TimingLabel::Adam);
  finish_op(false);
}

void GpuDevice::mcmc_grow_slot(int slot, size_t keep, size_t bytes) {
  if (arena_[slot].capacity >= bytes) return;
  const int spare = kGrad0 + 4;
  BufferRef dst = ensure(spare, bytes, true);
  McmcParams p{};
  p.width = static_cast<uint32_t>(keep / 4);
  launch(Kernel::McmcCopy, div_up(p.width, kGroup),
         {KernelArg::value(p), KernelArg::buf(ref(slot)), KernelArg::buf(dst)});
  std::swap(arena_[slot], arena_[spare]);
}

void GpuDevice::mcmc_pass(const McmcRefineSettings& s, uint32_t n, uint32_t targets, bool grow) {
  McmcParams p{};
  p.count = n;
  p.targets = targets;
  p.grow = grow ? 1u : 0u;
  p.num_blocks = div_up(n, kGroup);
  p.seed = static_cast<uint32_t>(s.seed);
  p.step = s.step;
  p.sh_width = 3 * sh_stride_;
  p.draw = grow ? MCMC_DRAW_GROW : MCMC_DRAW_RELOCATE;
  p.min_opacity = s.min_opacity;
  BufferRef prefix = ensure(kMcmcPrefix, 4 * size_t{n}, true),
            block_sums = ensure(kMcmcBlockSums, 4 * size_t{p.num_blocks}, true),
            block_offsets = ensure(kMcmcBlockOffsets, 8 * (size_t{p.num_blocks} + 1), true),
            source = ensure(kMcmcSource, 4 * (size_t{n} + targets), true),
            times = ensure(kMcmcTimes, 4 * (size_t{n} + 1), true), binoms = ref(kMcmcBinoms);
  BufferRef opacity = ref(kParam0 + 3);
  launch(Kernel::McmcWeights, p.num_blocks,
         {KernelArg::value(p), KernelArg::buf(opacity), KernelArg::buf(prefix), KernelArg::buf(block_sums)});
  launch(Kernel::McmcBlockOffsets, 1,
         {KernelArg::value(p), KernelArg::buf(block_sums), KernelArg::buf(block_offsets)});
  launcher_->fill_zero(times, 4 * (size_t{n} + 1));
  launch(Kernel::McmcSample, div_up(targets, kGroup),
         {KernelArg::value(p), KernelArg::buf(opacity), KernelArg::buf(prefix), KernelArg::buf(block_offsets),
          KernelArg::buf(source), KernelArg::buf(times)});
  // Targets then sources, per array; the log-scales and then the opacities
  // last, since every update reads the sources' opacities before this pass.
  const int order[5] = {0, 2, 4, 1, 3};
  for (int a : order) {
    const uint32_t kind = a == 1 ? MCMC_ARRAY_LOG_SCALES : a == 3 ? MCMC_ARRAY_OPACITY : MCMC_ARRAY_PLAIN;
    for (int k = 0; k < state_arrays(); ++k) {
      McmcParams q = p;
      q.width = param_width(a, sh_stride_);
      q.kind = k == 0 ? kind : MCMC_ARRAY_MOMENT;
      for (uint32_t phase = 0; phase < 2; ++phase) {
        if (phase == 1 && q.kind == MCMC_ARRAY_PLAIN) continue;  // a source keeps its row
        q.sources = phase;
        launch(Kernel::McmcApply, div_up(phase == 0 ? targets : n, kGroup),
               {KernelArg::value(q), KernelArg::buf(source), KernelArg::buf(times), KernelArg::buf(binoms),
                KernelArg::buf(opacity), KernelArg::buf(ref(state_slot(a, k)))});
      }
    }
  }
}

McmcRefineResult GpuDevice::mcmc_refine(const McmcRefineSettings& s) {
  std::lock_guard<std::mutex> lock(mutex_);
  McmcRefineResult result;
  const size_t n = count_;
  has_scale_ceiling_ = false;  // other Gaussians: cap_scales records anew
  have_forward_ = false;
  have_train_step_ = false;
  result.count = static_cast<uint32_t>(n);
  if (n == 0) return result;
  const size_t total = n + s.add;
  check_gaussian_count(total, "Gaussians after an MCMC refine");
  if (total * (3 * size_t{sh_stride_}) >= (size_t{1} << 32))
    throw BackendError("[gpu] mcmc_refine: too many parameters for one dispatch");
  begin(TimingLabel::Densify);
  if (!mcmc_binoms_ready_) {
    float table[MCMC_MAX_RATIO * MCMC_MAX_RATIO];
    mcmc_fill_binomials(table);
    BufferRef b = ensure(kMcmcBinoms, sizeof(table));
    launcher_->upload(b, table, sizeof(table));
    mcmc_binoms_ready_ = true;
  }
  const uint32_t n32 = static_cast<uint32_t>(n);
  mcmc_pass(s, n32, n32, false);
  // The relocated count, read back before growth reuses the counts.
  uint32_t relocated = 0;
  launcher_->download(&relocated, BufferRef{arena_[kMcmcTimes].handle, 4 * n}, sizeof(relocated));
  result.relocated = relocated;
  if (s.add > 0) {
    // Every state array keeps its rows as it grows (into a larger buffer
    // only when its capacity is short: at most a refine's growth at a time).
    for (int a = 0; a < 5; ++a) {
      const size_t w = 4 * size_t{param_width(a, sh_stride_)};
      for (int k = 0; k < state_arrays(); ++k) mcmc_grow_slot(state_slot(a, k), w * n, w * total);
    }
    mcmc_pass(s, n32, s.add, true);
    result.added = s.add;
    count_ = total;
    reserve_state(total);  // gradients and statistics (no contents to keep)
  }
  launcher_->fill_zero(ref(kGradAccum), 4 * count_);
  launcher_->fill_zero(ref(kGradCount), 4 * count_);
  launcher_->fill_zero(ref(kMaxRadii), 4 * count_);
  result.count = static_cast<uint32_t>(count_);
  end(TimingLabel::Densify);
  finish_op(false);
  return result;
}

}  // namespace splat::gpu
