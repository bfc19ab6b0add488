// Device for the GPU backends: turns each op into SIMT kernel launches on a
// Launcher. Metal and CUDA share it unchanged; only the Launcher differs.
#pragma once
#include <array>
#include <memory>
#include <mutex>
#include <string>

#include "launcher.h"
#include "splat/device.h"

namespace splat::gpu {

class GpuDevice final : public Device {
 public:
  GpuDevice(Backend backend, const BackendConfig& config, std::unique_ptr<Launcher> launcher);
  ~GpuDevice() override;

  Backend backend() const override { return backend_; }
  std::string description() const override;
  void rasterize_forward(const GaussiansView& g, const CameraParams& cam, uint32_t sh_degree,
                         const float background[3], const ForwardOutputs& out) override;
  void rasterize_backward(const float* d_image, const float* d_alpha, const GradientOutputs& grads) override;
  size_t allocation_count() const override;

  // Training ops: not on the GPU backends yet (they raise BackendError).
  void upload_images(const uint8_t* rgb, uint32_t views, uint32_t width, uint32_t height) override;
  void set_training_state(const TrainingState& state) override;
  void get_training_state(TrainingState& state) override;
  size_t num_gaussians() const override { return 0; }
  void train_forward_backward(const CameraParams& cam, uint32_t view, uint32_t sh_degree, const float background[3],
                              float ssim_weight, bool track_stats) override;
  float last_loss() override;
  void adam_step(const AdamSettings& settings) override;
  DensifyResult densify(const DensifySettings& settings) override;
  void reset_opacity(float max_opacity) override;
  void render_resident(const CameraParams& cam, uint32_t sh_degree, const float background[3],
                       float* image) override;

  // Test hook: stable sort of (keys, values) by the low `key_bits` bits of the
  // keys (the higher bits must be zero), on the device, in place. Invalidates
  // the last forward.
  void radix_sort(uint64_t* keys, uint32_t* values, size_t count, uint32_t key_bits);

  // Number of (tile, Gaussian) pairs of the last forward.
  size_t pair_count() const { return num_pairs_; }

 private:
  // Resident arena slots: grow-only device buffers reused by every call.
  enum Slot : uint8_t {
    kMeans, kLogScales, kQuats, kOpacityLogits, kSh,
    kRecords, kRadius, kRects, kPairCount, kOffsets, kScanBlockSums,
    kKeysA, kKeysB, kValsA, kValsB, kHist, kDigitTotals, kRanges,
    kImage, kAlpha, kFinalT, kNContrib,
    kDImage, kDAlpha, kGrads,
    kOutMeans, kOutLogScales, kOutQuats, kOutOpacityLogits, kOutSh, kOutMeans2d,
    kSlotCount
  };
  struct ArenaBuffer {
    BufferHandle handle = 0;
    size_t capacity = 0;
    bool stale = false;  // per_iter_alloc: reallocate on the next ensure()
  };

  BufferRef ensure(Slot slot, size_t bytes);
  BufferRef ref(Slot slot, size_t offset = 0) const { return BufferRef{arena_[slot].handle, offset}; }
  Pipeline pipeline(Kernel k);
  void launch(Kernel k, uint32_t groups, std::initializer_list<KernelArg> args);
  void begin(TimingLabel l);
  void end(TimingLabel l);
  void finish_call();
  // Exclusive scan of `count` uint32 at `in` into `out` (count + 1 values:
  // out[count] is the total).
  void exclusive_scan(BufferRef in, BufferRef out, uint32_t count);
  // Sorts pairs in (A, B) ping-pong buffers; returns true when the result is
  // in the B buffers.
  bool sort_pairs(uint32_t count, uint32_t key_bits);

  const Backend backend_;
  const BackendConfig config_;
  std::unique_ptr<Launcher> launcher_;
  std::mutex mutex_;
  std::array<ArenaBuffer, kSlotCount> arena_{};
  std::array<Pipeline, kKernelCount> pipelines_{};
  Specialization backward_spec_, project_backward_spec_;
  size_t allocations_ = 0;
  bool timing_ = false;

  // The last forward.
  bool have_forward_ = false;
  CameraParams cam_{};
  RasterParams rp_{};
  size_t num_gaussians_ = 0;
  size_t num_pairs_ = 0;
  bool sorted_in_b_ = false;
};

}  // namespace splat::gpu
