// The CPU backend's resident training state and its ops: render + loss +
// backward, fused Adam, densification statistics, densification in place.
#pragma once
#include <cstdint>
#include <limits>
#include <utility>
#include <vector>

#include "cpu_loss.h"
#include "grow_buffer.h"
#include "cpu_rasterizer.h"
#include "splat/training.h"

namespace splat::cpu {

class CpuTraining {
 public:
  CpuTraining(ThreadPool& pool, CpuRasterizer& raster) : pool_(pool), raster_(raster), loss_(pool) {}

  // budget_bytes > 0 and below the images' bytes: streamed (the host copy
  // and two staging slots; the same bytes reach the loss either way).
  void upload_images(const std::vector<TrainingImage>& images, size_t budget_bytes);
  void prefetch_image(uint32_t view);
  ImageStorage image_storage() const { return storage_; }
  void set_options(const TrainingOptions& options) { options_ = options; }
  void set_state(const TrainingState& state);
  void get_state(TrainingState& state) const;
  size_t count() const { return count_; }

  void forward_backward(const CameraParams& cam, uint32_t view, uint32_t sh_degree, const float background[3],
                        float ssim_weight, bool track_stats);
  float last_loss() const { return loss_value_; }
  void adam_step(const AdamSettings& s);
  // Data-parallel training: the gradients and statistics out and back (sizes checked).
  void get_grads(std::vector<float> (&grads)[5]) const;
  void set_grads(const std::vector<float> (&grads)[5]);
  // Device::accumulate_gradients: view k of `views` into grad_sum_, the mean
  // into the gradients at the last.
  void accumulate_grads(uint32_t k, uint32_t views);
  // Exposure: every view's correction gradient [views x 12] (zero but the
  // last step's view's); set: the next Adam step uses these instead.
  void get_exposure_grads(std::vector<float>& grads) const;
  void set_exposure_grads(const std::vector<float>& grads);
  // The last forward's screen radii (visible_adam's mask), and their replacement.
  void get_step_radii(std::vector<int32_t>& radii) const;
  void set_step_radii(const std::vector<int32_t>& radii);
  void get_stats(std::vector<float>& accum, std::vector<float>& count, std::vector<float>& max_radii) const;
  void set_stats(const std::vector<float>& accum, const std::vector<float>& count, const std::vector<float>& max_radii);
  DensifyResult densify(const DensifySettings& s);
  void reset_opacity(float max_opacity);
  void cap_scales(float log_growth);
  // The MCMC strategy (cpu_mcmc.cpp).
  void mcmc_regularize(const McmcStepSettings& s);
  void mcmc_noise(const McmcStepSettings& s);
  McmcRefineResult mcmc_refine(const McmcRefineSettings& s);
  NonFiniteCounts count_nonfinite() const;
  void render(const CameraParams& cam, uint32_t sh_degree, const float background[3], float* image);
  void blend_weights(const CameraParams* cams, uint32_t count, std::vector<float>& weights);

  size_t allocation_count() const { return allocations_ + loss_.allocation_count(); }
  void set_timing(TimingRegistry* registry) { timing_ = registry; }
  // Gradients of the last forward_backward (binning comes from the rasterizer).
  void snapshot_grads(DebugSnapshot& out) const;

 private:
  GaussiansView view() const;
  // Sizes every per-Gaussian array for n Gaussians (grow-only capacity).
  void resize(size_t n);

  ThreadPool& pool_;
  CpuRasterizer& raster_;
  CpuLoss loss_;
  size_t allocations_ = 0;
  TimingRegistry* timing_ = nullptr;

  size_t count_ = 0;
  uint32_t sh_stride_ = 16;
  std::vector<float> params_[5], m_[5], v_[5], grads_[5];
  std::vector<float> grad_sum_[5];  // several views a step: the batch's gradients so far
  std::vector<float> scale_ceiling_;  // cap_scales' ceilings; empty: none recorded
  std::vector<float> means2d_grad_, grad_accum_, grad_count_, max_radii_;
  std::vector<int32_t> radii_;
  // Every view's RGB packed one after the other, and the masks of the views
  // that have one (layout_ says where).
  // Uninitialised until written, so a page counts once its view is copied in
  // (the caller frees its copy view by view: TrainingImage::copied).
  GrowBuffer<uint8_t> images_, masks_;
  ImageLayout layout_;
  ImageStorage storage_;
  // Streamed: two slots of the largest view (RGB and mask), the view each
  // holds (-1: none) and the slot the last step read.
  std::vector<uint8_t> staged_rgb_[2], staged_mask_[2];
  int64_t staged_view_[2] = {-1, -1};
  int current_slot_ = 0;
  // The view's RGB and mask (null without one), staged first when streamed.
  std::pair<const uint8_t*, const uint8_t*> view_pixels(uint32_t view);
  std::vector<float> rendered_, d_rendered_, alpha_;
  // NaN until a forward of the current state (Device::last_loss).
  float loss_value_ = std::numeric_limits<float>::quiet_NaN();
  float loss_sum_ = 0.f;  // several views a step: the batch's losses so far
  TrainingOptions options_;
  // absgrad: the backward's summed absolute 2D-mean gradient [N, 2].
  std::vector<float> means2d_abs_;
  bool last_tracked_ = false;  // the last step accumulated statistics (means2d_abs_ is its)
  // Exposure: [views, 12] corrections and moments, the corrected render, per
  // row-block gradient partials, and the last step's view and gradient.
  std::vector<float> exposure_, exposure_m_, exposure_v_, corrected_, exposure_partials_;
  float exposure_grad_[12] = {};
  int64_t exposure_view_ = -1;
  // set_exposure_grads' gradient of every view, used by the next Adam step
  // (until the next backward) instead of the one view's.
  std::vector<float> exposure_grad_views_;
  bool exposure_grad_views_set_ = false;
  // Applies view `view`'s correction to rendered_ (into corrected_); after
  // the loss, its gradient and d_rendered_ = A^T d_rendered_.
  void exposure_forward(uint32_t view, size_t pixels);
  void exposure_backward(uint32_t view, size_t pixels, uint32_t width);
  // Holds the mean of the views' corrections at the identity (after each Adam step).
  void center_exposure();
  // Densification scratch (kept between calls): where each Gaussian of the
  // densified set comes from.
  enum SourceKind : uint8_t { kOriginal, kClone, kChild };
  struct Source {
    uint32_t index;
    SourceKind kind;
    uint32_t child;
    bool keep = true;
  };
  std::vector<Source> sources_;
  std::vector<uint32_t> kind_;
  std::vector<float> scratch_p_[5], scratch_m_[5], scratch_v_[5];

  // MCMC scratch (kept between calls): the inclusive prefix of the sampling
  // weights, each target's source, each source's sample count, the sources'
  // updates, the binomial table.
  uint32_t mcmc_sample(const McmcRefineSettings& s, size_t n, size_t targets, bool grow);
  std::vector<uint64_t> mcmc_prefix_;
  std::vector<uint32_t> mcmc_source_, mcmc_times_;
  std::vector<float> mcmc_logit_, mcmc_shift_;
  std::vector<float> mcmc_binoms_;
};

}  // namespace splat::cpu
