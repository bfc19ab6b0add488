#include "cpu_device.h"

#include <cstring>
#include <string>

#include "splat/limits.h"

namespace splat::cpu {
namespace {

const float* copy_into(GrowBuffer<float>& buf, const float* src, size_t count, size_t& allocations) {
  float* dst = buf.ensure(count + 1, allocations);
  if (count) std::memcpy(dst, src, count * sizeof(float));
  return dst;
}

}  // namespace

std::string CpuDevice::description() const {
  return "cpu (" + std::to_string(ThreadPool::shared().size()) + " threads)";
}

void CpuDevice::rasterize_forward(const GaussiansView& g, const CameraParams& cam, uint32_t sh_degree,
                                  const float background[3], const ForwardOutputs& out) {
  const size_t n = g.count;
  check_gaussian_count(n);  // before the copies
  GaussiansView resident = g;
  resident.means = copy_into(means_, g.means, 3 * n, allocations_);
  resident.log_scales = copy_into(log_scales_, g.log_scales, 3 * n, allocations_);
  resident.quats = copy_into(quats_, g.quats, 4 * n, allocations_);
  resident.opacity_logits = copy_into(opacity_logits_, g.opacity_logits, n, allocations_);
  resident.sh = copy_into(sh_, g.sh, 3 * static_cast<size_t>(g.sh_stride) * n, allocations_);
  follow_modes(raster_);
  raster_.forward(resident, cam, sh_degree, background, out);
}

void CpuDevice::rasterize_backward(const float* d_image, const float* d_alpha, const GradientOutputs& grads) {
  raster_.backward(d_image, d_alpha, grads);
}

}  // namespace splat::cpu
