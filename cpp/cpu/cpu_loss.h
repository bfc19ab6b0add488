// The CPU schedule of the training loss 0.8 L1 + 0.2 (1 - SSIM) and its
// gradient, and SSIM for evaluation. Separable 11-tap Gaussian blurs over
// planar channels; the per-pixel math is shaders/common/ssim.h.
#pragma once
#include <cstdint>

#include "grow_buffer.h"
#include "thread_pool.h"

namespace splat::cpu {

class CpuLoss {
 public:
  explicit CpuLoss(ThreadPool& pool) : pool_(pool) {}

  // rendered: float [H,W,3]; target: uint8 [H,W,3] (value / 255). Returns the
  // loss (1 - ssim_weight) L1 + ssim_weight (1 - SSIM) and writes its gradient
  // w.r.t. rendered into d_rendered [H,W,3].
  float loss_and_grad(const float* rendered, const uint8_t* target, uint32_t width, uint32_t height,
                      float ssim_weight, float* d_rendered);

  // Mean SSIM of two float [H,W,3] images: over every pixel (zero padding,
  // as the training loss) or over the interior at least 5 pixels from the
  // border (the convention of scikit-image and of evaluation).
  struct SsimMeans {
    double full, interior;
  };
  SsimMeans ssim(const float* x, const float* y, uint32_t width, uint32_t height);

  size_t allocation_count() const { return allocations_; }

 private:
  // Planar statistics of both images; returns per-pixel map values in map_.
  void compute_stats(uint32_t width, uint32_t height);
  void blur(const float* in, float* out, uint32_t width, uint32_t height);

  ThreadPool& pool_;
  size_t allocations_ = 0;
  GrowBuffer<float> x_, y_;          // 3 planes each
  GrowBuffer<float> stats_;          // 5 x 3 planes: mu_x, mu_y, xx, yy, xy
  GrowBuffer<float> products_;       // 3 planes scratch (x^2, y^2, xy) before blurring
  GrowBuffer<float> map_;            // 3 planes: SSIM map
  GrowBuffer<float> partials_;       // 3 x 3 planes: d_mu, d_xx, d_xy
  GrowBuffer<float> blurred_partials_;
  GrowBuffer<float> tmp_;            // blur scratch, 1 plane per thread chunk
};

}  // namespace splat::cpu
