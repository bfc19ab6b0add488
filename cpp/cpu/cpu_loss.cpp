#include "cpu_loss.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "../../shaders/common/ssim.h"

namespace splat::cpu {
namespace {

// Interleaved [H,W,3] -> three planes [3][H*W], times `scale`.
template <class T>
void to_planar(const T* src, float scale, size_t plane, float* dst) {
  for (size_t p = 0; p < plane; ++p)
    for (int c = 0; c < 3; ++c) dst[c * plane + p] = src[3 * p + c] * scale;
}

}  // namespace

// out = G * in with zero padding, one plane [H,W]: horizontal pass into a
// scratch plane, then vertical pass.
void CpuLoss::blur(const float* in, float* out, uint32_t width, uint32_t height) {
  const size_t plane = static_cast<size_t>(width) * height;
  float* tmp = tmp_.ensure(plane, allocations_);
  float taps[SSIM_TAPS];
  for (int i = 0; i < SSIM_TAPS; ++i) taps[i] = ssim_tap(i);
  const int w = static_cast<int>(width), h = static_cast<int>(height);
  pool_.parallel_for(height, 16, [&](size_t lo, size_t hi) {
    for (size_t y = lo; y < hi; ++y) {
      const float* row = in + y * width;
      float* dst = tmp + y * width;
      for (int x = 0; x < w; ++x) {
        float s = 0.f;
        int k0 = std::max(0, SSIM_RADIUS - x), k1 = std::min(SSIM_TAPS, w - x + SSIM_RADIUS);
        for (int k = k0; k < k1; ++k) s += taps[k] * row[x + k - SSIM_RADIUS];
        dst[x] = s;
      }
    }
  });
  pool_.parallel_for(height, 16, [&](size_t lo, size_t hi) {
    for (size_t yy = lo; yy < hi; ++yy) {
      int y = static_cast<int>(yy);
      float* dst = out + yy * width;
      std::fill(dst, dst + width, 0.f);
      int k0 = std::max(0, SSIM_RADIUS - y), k1 = std::min(SSIM_TAPS, h - y + SSIM_RADIUS);
      for (int k = k0; k < k1; ++k) {
        const float* src = tmp + static_cast<size_t>(y + k - SSIM_RADIUS) * width;
        for (int x = 0; x < w; ++x) dst[x] += taps[k] * src[x];
      }
    }
  });
}

void CpuLoss::compute_stats(uint32_t width, uint32_t height) {
  const size_t plane = static_cast<size_t>(width) * height;
  float* x = x_.data();
  float* y = y_.data();
  float* stats = stats_.ensure(15 * plane, allocations_);
  float* prod = products_.ensure(3 * plane, allocations_);
  float* map = map_.ensure(3 * plane, allocations_);
  for (int c = 0; c < 3; ++c) {
    const float* xc = x + c * plane;
    const float* yc = y + c * plane;
    for (size_t p = 0; p < plane; ++p) {
      prod[p] = xc[p] * xc[p];
      prod[plane + p] = yc[p] * yc[p];
      prod[2 * plane + p] = xc[p] * yc[p];
    }
    float* s = stats + 5 * c * plane;
    blur(xc, s, width, height);
    blur(yc, s + plane, width, height);
    blur(prod, s + 2 * plane, width, height);
    blur(prod + plane, s + 3 * plane, width, height);
    blur(prod + 2 * plane, s + 4 * plane, width, height);
    for (size_t p = 0; p < plane; ++p)
      map[c * plane + p] = ssim_value({s[p], s[plane + p], s[2 * plane + p], s[3 * plane + p], s[4 * plane + p]});
  }
}

float CpuLoss::loss_and_grad(const float* rendered, const uint8_t* target, uint32_t width, uint32_t height,
                             float ssim_weight, float* d_rendered, const uint8_t* mask) {
  const size_t plane = static_cast<size_t>(width) * height;
  float* x = x_.ensure(3 * plane, allocations_);
  float* y = y_.ensure(3 * plane, allocations_);
  to_planar(rendered, 1.f, plane, x);
  to_planar(target, 1.f / 255.f, plane, y);
  size_t valid = plane;
  if (mask) {
    valid = 0;
    for (size_t p = 0; p < plane; ++p) {
      if (mask[p]) {
        ++valid;
        continue;
      }
      for (int c = 0; c < 3; ++c) x[c * plane + p] = y[c * plane + p] = 0.f;
    }
    if (valid == 0) {
      std::fill(d_rendered, d_rendered + 3 * plane, 0.f);
      return 0.f;
    }
  }
  compute_stats(width, height);
  const float* stats = stats_.data();
  const float* map = map_.data();
  float* partials = partials_.ensure(9 * plane, allocations_);
  float* blurred = blurred_partials_.ensure(9 * plane, allocations_);

  const double count = 3.0 * static_cast<double>(valid);
  double l1 = 0.0, ssim_sum = 0.0;
  for (size_t i = 0; i < 3 * plane; ++i) {
    if (mask && !mask[i % plane]) continue;
    l1 += std::fabs(x[i] - y[i]);
    ssim_sum += map[i];
  }
  // dL/d map = -ssim_weight / count at every valid pixel and channel, 0 elsewhere.
  const float d_map = static_cast<float>(-ssim_weight / count);
  for (int c = 0; c < 3; ++c) {
    const float* s = stats + 5 * c * plane;
    float* pc = partials + 3 * c * plane;
    for (size_t p = 0; p < plane; ++p) {
      if (mask && !mask[p]) {
        pc[p] = pc[plane + p] = pc[2 * plane + p] = 0.f;
        continue;
      }
      vec3 g = ssim_value_grad({s[p], s[plane + p], s[2 * plane + p], s[3 * plane + p], s[4 * plane + p]});
      pc[p] = d_map * g.x;
      pc[plane + p] = d_map * g.y;
      pc[2 * plane + p] = d_map * g.z;
    }
    for (int k = 0; k < 3; ++k) blur(pc + k * plane, blurred + (3 * c + k) * plane, width, height);
  }
  const float d_l1 = static_cast<float>((1.0 - ssim_weight) / count);
  for (size_t p = 0; p < plane; ++p)
    for (int c = 0; c < 3; ++c) {
      if (mask && !mask[p]) {
        d_rendered[3 * p + c] = 0.f;
        continue;
      }
      size_t i = c * plane + p;
      const float* b = blurred + 3 * c * plane;
      float diff = x[i] - y[i];
      float sign = diff > 0.f ? 1.f : (diff < 0.f ? -1.f : 0.f);
      d_rendered[3 * p + c] = d_l1 * sign + b[p] + 2.f * x[i] * b[plane + p] + y[i] * b[2 * plane + p];
    }
  return static_cast<float>((1.0 - ssim_weight) * l1 / count + ssim_weight * (1.0 - ssim_sum / count));
}

CpuLoss::SsimMeans CpuLoss::ssim(const float* a, const float* b, uint32_t width, uint32_t height,
                                 const uint8_t* mask) {
  const size_t plane = static_cast<size_t>(width) * height;
  float* x = x_.ensure(3 * plane, allocations_);
  float* y = y_.ensure(3 * plane, allocations_);
  to_planar(a, 1.f, plane, x);
  to_planar(b, 1.f, plane, y);
  if (mask)
    for (size_t p = 0; p < plane; ++p)
      if (!mask[p])
        for (int c = 0; c < 3; ++c) x[c * plane + p] = y[c * plane + p] = 0.f;
  compute_stats(width, height);
  const float* map = map_.data();
  SsimMeans out{0.0, 0.0};
  double interior = 0.0;
  size_t interior_count = 0, count = 0;
  for (int c = 0; c < 3; ++c)
    for (uint32_t yy = 0; yy < height; ++yy)
      for (uint32_t xx = 0; xx < width; ++xx) {
        const size_t p = static_cast<size_t>(yy) * width + xx;
        if (mask && !mask[p]) continue;
        double v = map[c * plane + p];
        out.full += v;
        ++count;
        if (xx >= SSIM_RADIUS && yy >= SSIM_RADIUS && xx + SSIM_RADIUS < width && yy + SSIM_RADIUS < height) {
          interior += v;
          ++interior_count;
        }
      }
  out.full = count ? out.full / count : 1.0;
  out.interior = interior_count ? interior / interior_count : out.full;
  return out;
}

}  // namespace splat::cpu
