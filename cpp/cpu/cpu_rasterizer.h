// The CPU schedules of the rasterizer: per-Gaussian projection, a stable
// counting sort of (tile, depth) pairs, per-tile blending, and a backward that
// reduces per-pair gradients per Gaussian in a fixed order (deterministic, no
// atomics). The math is shaders/common, shared with the SIMT kernels.
#pragma once
#include <cstdint>

#include "../core/timing_registry.h"
#include "../../shaders/common/tile_cover.h"
#include "grow_buffer.h"
#include "splat/types.h"
#include "thread_pool.h"

namespace splat::cpu {

class CpuRasterizer {
 public:
  explicit CpuRasterizer(ThreadPool& pool) : pool_(pool) {}

  // Renders `g` (which must stay alive and unchanged until backward()).
  void forward(const GaussiansView& g, const CameraParams& cam, uint32_t sh_degree, const float background[3],
               const ForwardOutputs& out);

  // Backward of the last forward(); d_alpha may be null.
  void backward(const float* d_image, const float* d_alpha, const GradientOutputs& grads);

  // The mode of every later forward (its backward follows the forward's):
  // the antialiased 2D filter's opacity compensation (projection.h).
  void set_antialiased(bool on) { antialiased_ = on; }
  // The blend's stop of every later forward (Device::set_chunked_stop).
  void set_chunked_stop(bool on) { chunked_stop_ = on; }

  size_t allocation_count() const { return allocations_; }
  // Sizes the per-pixel and per-tile buffers for views up to `pixels` pixels
  // and `tiles` tiles (training: the largest view, once).
  void reserve_pixels(size_t pixels, uint32_t tiles) {
    final_T_.ensure(pixels, allocations_);
    n_contrib_.ensure(pixels, allocations_);
    tile_start_.ensure(size_t{tiles} + 1, allocations_);
    tile_cursor_.ensure(size_t{tiles} + 1, allocations_);
  }
  // Records ts_* timings into `registry` (null: off).
  void set_timing(TimingRegistry* registry) { timing_ = registry; }
  // The tile ranges and (tile, depth)-sorted Gaussians of the last forward
  // (false when it did not complete).
  bool snapshot_binning(DebugSnapshot& out) const;
  // Number of (tile, Gaussian) pairs of the last forward.
  size_t pair_count() const { return num_pairs_; }

 private:
  void project(uint32_t sh_degree);
  void bin_and_sort();
  TileCover cover(size_t i) const;  // the tiles Gaussian i's pairs go to
  void blend(const ForwardOutputs& out);

  ThreadPool& pool_;
  size_t allocations_ = 0;
  TimingRegistry* timing_ = nullptr;

  // The last forward's inputs.
  GaussiansView g_;
  CameraParams cam_{};
  uint32_t sh_degree_ = 0;
  float background_[3] = {0.f, 0.f, 0.f};
  size_t num_pairs_ = 0;
  bool have_forward_ = false;  // the last forward completed (a limit error leaves it false)
  bool antialiased_ = false;          // the next forward's mode
  bool forward_antialiased_ = false;  // the last forward's
  bool chunked_stop_ = false;         // the next forward's blend stop

  // Per Gaussian.
  GrowBuffer<float> mean2d_, conic_, depth_, opacity_, color_;
  GrowBuffer<float> extent_;                    // pixel half-extents of the blend region
  GrowBuffer<int32_t> radius_, rect_;           // rect: min_x, min_y, max_x, max_y
  GrowBuffer<uint32_t> pair_offset_;            // N + 1: pair counts, then emission offsets
  // Per tile.
  GrowBuffer<uint32_t> tile_start_, tile_cursor_;  // num_tiles + 1
  // Per pair: its tile, in emission order; Gaussian and emission index in
  // sorted (tile, depth) order.
  GrowBuffer<uint32_t> pair_tile_;
  GrowBuffer<uint32_t> sorted_gauss_, sorted_emit_;
  GrowBuffer<float> pair_grad_;                 // 9 per pair, at emission index
  GrowBuffer<float> pair_abs_;                  // 2 per pair (absgrad), at emission index
  // Per pixel.
  GrowBuffer<float> final_T_;
  GrowBuffer<uint32_t> n_contrib_;
};

}  // namespace splat::cpu
