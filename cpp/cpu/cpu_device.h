// The CPU backend: Device implemented with C++ schedules over shaders/common.
#pragma once
#include "cpu_rasterizer.h"
#include "splat/device.h"

namespace splat::cpu {

class CpuDevice final : public Device {
 public:
  CpuDevice() : raster_(ThreadPool::shared()) {}

  Backend backend() const override { return Backend::Cpu; }
  std::string description() const override;
  void rasterize_forward(const GaussiansView& g, const CameraParams& cam, uint32_t sh_degree,
                         const float background[3], const ForwardOutputs& out) override;
  void rasterize_backward(const float* d_image, const float* d_alpha, const GradientOutputs& grads) override;
  size_t allocation_count() const override { return allocations_ + raster_.allocation_count(); }

 private:
  CpuRasterizer raster_;
  size_t allocations_ = 0;
  // Resident copies of the parameters, so backward() does not depend on the
  // caller's arrays staying alive.
  GrowBuffer<float> means_, log_scales_, quats_, opacity_logits_, sh_;
};

}  // namespace splat::cpu
