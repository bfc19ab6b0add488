// The CPU backend: Device implemented with C++ schedules over shaders/common.
#pragma once
#include "cpu_rasterizer.h"
#include "cpu_training.h"
#include "splat/device.h"

namespace splat::cpu {

class CpuDevice final : public Device {
 public:
  explicit CpuDevice(const BackendConfig& config)
      : raster_(ThreadPool::shared()), training_(ThreadPool::shared(), train_raster_) {
    if (config.timing == Timing::PerKernel) {
      raster_.set_timing(&timing_);
      train_raster_.set_timing(&timing_);
      training_.set_timing(&timing_);
    }
  }

  Backend backend() const override { return Backend::Cpu; }
  std::string description() const override;
  void rasterize_forward(const GaussiansView& g, const CameraParams& cam, uint32_t sh_degree,
                         const float background[3], const ForwardOutputs& out) override;
  void rasterize_backward(const float* d_image, const float* d_alpha, const GradientOutputs& grads) override;
  // Host memory in place: the forward keeps the caller's parameter arrays
  // (no resident copy), which must outlive the backward unchanged.
  ExternalMemory external_memory() const override { return ExternalMemory::Host; }
  void rasterize_forward_external(const GaussiansView& g, const CameraParams& cam, uint32_t sh_degree,
                                  const float background[3], const ForwardOutputs& out, uint64_t) override {
    follow_modes(raster_);
    raster_.forward(g, cam, sh_degree, background, out);
  }
  void rasterize_backward_external(const float* d_image, const float* d_alpha, const GradientOutputs& grads,
                                   uint64_t) override {
    raster_.backward(d_image, d_alpha, grads);
  }
  size_t allocation_count() const override {
    return allocations_ + raster_.allocation_count() + train_raster_.allocation_count() + training_.allocation_count();
  }

  // The host is the device here: the images stay resident unless a budget
  // is given (streaming then stages the same bytes, for parity tests).
  void upload_images(const std::vector<TrainingImage>& images, size_t budget_bytes) override {
    training_.upload_images(images, budget_bytes);
  }
  void prefetch_image(uint32_t view) override { training_.prefetch_image(view); }
  ImageStorage image_storage() const override { return training_.image_storage(); }
  void set_training_options(const TrainingOptions& options) override { training_.set_options(options); }
  void set_training_state(const TrainingState& state) override { training_.set_state(state); }
  void get_training_state(TrainingState& state) override { training_.get_state(state); }
  size_t num_gaussians() const override { return training_.count(); }
  void train_forward_backward(const CameraParams& cam, uint32_t view, uint32_t sh_degree, const float background[3],
                              float ssim_weight, bool track_stats, uint32_t step) override {
    (void)step;  // pairs are counted on the host: never an overflow to name
    follow_modes(train_raster_);
    training_.forward_backward(cam, view, sh_degree, background, ssim_weight, track_stats);
  }
  float last_loss() override { return training_.last_loss(); }
  void adam_step(const AdamSettings& settings) override { training_.adam_step(settings); }
  void get_gradients(std::vector<float> (&grads)[5]) override { training_.get_grads(grads); }
  void set_gradients(const std::vector<float> (&grads)[5]) override { training_.set_grads(grads); }
  void accumulate_gradients(uint32_t k, uint32_t views) override { training_.accumulate_grads(k, views); }
  void get_exposure_gradients(std::vector<float>& grads) override { training_.get_exposure_grads(grads); }
  void set_exposure_gradients(const std::vector<float>& grads) override { training_.set_exposure_grads(grads); }
  void get_step_radii(std::vector<int32_t>& radii) override { training_.get_step_radii(radii); }
  void set_step_radii(const std::vector<int32_t>& radii) override { training_.set_step_radii(radii); }
  void get_densify_stats(std::vector<float>& accum, std::vector<float>& count,
                         std::vector<float>& max_radii) override {
    training_.get_stats(accum, count, max_radii);
  }
  void set_densify_stats(const std::vector<float>& accum, const std::vector<float>& count,
                         const std::vector<float>& max_radii) override {
    training_.set_stats(accum, count, max_radii);
  }
  DensifyResult densify(const DensifySettings& settings) override { return training_.densify(settings); }
  void reset_opacity(float max_opacity) override { training_.reset_opacity(max_opacity); }
  void cap_scales(float log_growth) override { training_.cap_scales(log_growth); }
  void mcmc_regularize(const McmcStepSettings& s) override { training_.mcmc_regularize(s); }
  void mcmc_noise(const McmcStepSettings& s) override { training_.mcmc_noise(s); }
  McmcRefineResult mcmc_refine(const McmcRefineSettings& s) override { return training_.mcmc_refine(s); }
  NonFiniteCounts count_nonfinite() override { return training_.count_nonfinite(); }
  void render_resident(const CameraParams& cam, uint32_t sh_degree, const float background[3], float* image) override {
    follow_modes(train_raster_);
    training_.render(cam, sh_degree, background, image);
  }
  void blend_weights(const CameraParams* cams, uint32_t count, std::vector<float>& weights) override {
    follow_modes(train_raster_);
    training_.blend_weights(cams, count, weights);
  }
  std::vector<TimingRecord> timings(bool reset) override { return timing_.snapshot(reset); }
  bool debug_snapshot(DebugSnapshot& out) override {
    if (!train_raster_.snapshot_binning(out)) return false;
    training_.snapshot_grads(out);
    return true;
  }

 private:
  // The device's rasterization modes (Device::set_antialiased,
  // set_chunked_stop) onto `raster` before its next forward.
  void follow_modes(CpuRasterizer& raster) const {
    raster.set_antialiased(antialiased());
    raster.set_chunked_stop(chunked_stop());
  }

  CpuRasterizer raster_;        // the differentiable-rasterizer API
  CpuRasterizer train_raster_{ThreadPool::shared()};  // the training state's own
  CpuTraining training_;
  TimingRegistry timing_;
  size_t allocations_ = 0;
  // Resident copies of the parameters, so backward() does not depend on the
  // caller's arrays staying alive.
  GrowBuffer<float> means_, log_scales_, quats_, opacity_logits_, sh_;
};

}  // namespace splat::cpu
