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
  // mask: null, or uint8 [H,W] where 0 excludes the pixel: both images are 0
  // there (as outside the image: the SSIM windows of the other pixels see
  // neither the render nor the target of a masked pixel), the L1 and SSIM
  // means run over the valid pixels only, and a masked pixel's gradient is 0.
  // Every pixel masked: loss 0, gradient 0.
  float loss_and_grad(const float* rendered, const uint8_t* target, uint32_t width, uint32_t height,
                      float ssim_weight, float* d_rendered, const uint8_t* mask = nullptr);

  // Mean SSIM of two float [H,W,3] images: over every pixel (zero padding,
  // as the training loss) or over the interior at least 5 pixels from the
  // border (the convention of scikit-image and of evaluation). With a mask
  // (uint8 [H,W], 0 leaves a pixel out) both images are 0 at masked pixels,
  // as in the loss, and both means run over the valid pixels only.
  struct SsimMeans {
    double full, interior;
  };
  SsimMeans ssim(const float* x, const float* y, uint32_t width, uint32_t height, const uint8_t* mask = nullptr);

  size_t allocation_count() const { return allocations_; }
  // Sizes the scratch planes for images up to `pixels` pixels.
  void reserve_pixels(size_t pixels) {
    x_.ensure(3 * pixels, allocations_);
    y_.ensure(3 * pixels, allocations_);
    stats_.ensure(15 * pixels, allocations_);
    products_.ensure(3 * pixels, allocations_);
    map_.ensure(3 * pixels, allocations_);
    partials_.ensure(9 * pixels, allocations_);
    blurred_partials_.ensure(9 * pixels, allocations_);
    tmp_.ensure(pixels, allocations_);
  }

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
