// Device for the GPU backends: turns each op into SIMT kernel launches on a
// Launcher. Metal and CUDA share it unchanged; only the Launcher differs.
#pragma once
#include <array>
#include <memory>
#include <mutex>
#include <string>
#include <utility>

#include "../core/timing_registry.h"
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
  ExternalMemory external_memory() const override {
    return launcher_->wraps_device_pointers() ? ExternalMemory::Cuda : ExternalMemory::None;
  }
  void rasterize_forward_external(const GaussiansView& g, const CameraParams& cam, uint32_t sh_degree,
                                  const float background[3], const ForwardOutputs& out, uint64_t queue) override;
  void rasterize_backward_external(const float* d_image, const float* d_alpha, const GradientOutputs& grads,
                                   uint64_t queue) override;
  HostTransfers host_transfers() const override;

  // Training ops on resident state (docs/gpu.md, "The GPU training step").
  void upload_images(const std::vector<TrainingImage>& images, size_t budget_bytes) override;
  void prefetch_image(uint32_t view) override;
  ImageStorage image_storage() const override { return storage_; }
  void set_training_options(const TrainingOptions& options) override;
  void set_training_state(const TrainingState& state) override;
  void get_training_state(TrainingState& state) override;
  size_t num_gaussians() const override { return count_; }
  void train_forward_backward(const CameraParams& cam, uint32_t view, uint32_t sh_degree, const float background[3],
                              float ssim_weight, bool track_stats, uint32_t step) override;
  float last_loss() override;
  // Data-parallel training: host copies (the SH gradient expanded; once set, Adam reads it in full).
  void get_gradients(std::vector<float> (&grads)[5]) override;
  void set_gradients(const std::vector<float> (&grads)[5]) override;
  void get_exposure_gradients(std::vector<float>& grads) override;
  void set_exposure_gradients(const std::vector<float>& grads) override;
  void get_step_radii(std::vector<int32_t>& radii) override;
  void set_step_radii(const std::vector<int32_t>& radii) override;
  void get_densify_stats(std::vector<float>& accum, std::vector<float>& count, std::vector<float>& max_radii) override;
  void set_densify_stats(const std::vector<float>& accum, const std::vector<float>& count,
                         const std::vector<float>& max_radii) override;
  void join_ranks(const std::string& unique_id, int rank, int ranks) override;
  void reduce_gradients() override;
  void accumulate_gradients(uint32_t k, uint32_t views) override;
  // Several views a step rasterized together (gpu_views.cpp).
  bool train_views_together(const CameraParams* cams, const uint32_t* views, const bool* track_stats, uint32_t count,
                            uint32_t sh_degree, const float background[3], float ssim_weight, uint32_t step,
                            const McmcStepSettings* reg) override;
  void reduce_densify_stats() override;
  void adam_step(const AdamSettings& settings) override;
  DensifyResult densify(const DensifySettings& settings) override;
  void reset_opacity(float max_opacity) override;
  void cap_scales(float log_growth) override;
  // The MCMC strategy (gpu_mcmc.cpp).
  void mcmc_regularize(const McmcStepSettings& settings) override;
  void mcmc_noise(const McmcStepSettings& settings) override;
  McmcRefineResult mcmc_refine(const McmcRefineSettings& settings) override;
  NonFiniteCounts count_nonfinite() override;
  void render_resident(const CameraParams& cam, uint32_t sh_degree, const float background[3],
                       float* image) override;
  // gpu_weights.cpp
  void blend_weights(const CameraParams* cams, uint32_t count, std::vector<float>& weights) override;
  // ts_* with {upload, alloc, gpu, readback} attribution (timing = per_kernel).
  std::vector<TimingRecord> timings(bool reset) override { return registry_.snapshot(reset); }
  // Tile ranges, sorted pairs and gradients of the last train_forward_backward.
  bool debug_snapshot(DebugSnapshot& out) override;

  // Test hook: stable sort of (keys, values) by the low `key_bits` bits of the
  // keys (the higher bits must be zero), on the device, in place. Invalidates
  // the last forward.
  void radix_sort(uint32_t* keys, uint32_t* values, size_t count, uint32_t key_bits);

  PairOverflow take_pair_overflow() override;
  PairBuffers pair_buffers() const override { return {pair_capacity_, pair_overflows_}; }
  void set_pair_capacity(size_t pairs) override;

 private:
  // Resident arena slots: grow-only device buffers reused by every call.
  enum Slot : uint8_t {
    kMeans, kLogScales, kQuats, kOpacityLogits, kSh,
    kRecords, kRadius, kCovers, kColorJacobian, kPairCount, kPairRanges, kScanBlockSums,
    kKeysA, kKeysB, kValsA, kValsB, kDepthKeysA, kDepthKeysB, kDepthIdsA, kDepthIdsB, kCountsByRank, kRankOffsets,
    kHist, kDigitTotals, kRanges,
    kImage, kAlpha, kFinalT, kNContrib, kChunkState, kChunkLast, kChunkTiles, kStopChunk, kTileSaturated,
    kDImage, kDAlpha, kGrads, kShFactors,
    kOutMeans, kOutLogScales, kOutQuats, kOutOpacityLogits, kOutSh, kOutMeans2d,
    // Training: the resident parameters and Adam moments (5 arrays each), the
    // gradients (also densification's gather targets, swapped with the state),
    // the densification statistics, the images, and the loss / densify scratch.
    kParam0, kM0 = kParam0 + 5, kV0 = kM0 + 5,
    kGrad0 = kV0 + 5, kGradMeans2d = kGrad0 + 5,
    kGradSum0,  // several views a step: the batch's gradient sums (5 arrays)
    kGradAccum = kGradSum0 + 5, kGradCount, kMaxRadii,
    kImages, kMasks, kLossPartials, kTileSums, kLoss,
    kDensifyKind, kDensifyExtra, kDensifyExtraOffsets, kDensifyFlags, kDensifyOffsets, kDensifyRowSource,
    kFinitePartials, kFiniteTotals,
    // The MCMC strategy (gpu_mcmc.cpp).
    kMcmcPrefix, kMcmcBlockSums, kMcmcBlockOffsets, kMcmcSource, kMcmcTimes, kMcmcBinoms,
    // absgrad: the summed |d mean2d| per Gaussian (deterministic: per pair
    // first); exposure: every view's correction, its moments, the step's
    // gradient, its partials and the corrected render.
    kMeans2dAbs, kPairAbs, kExposure, kExposureM, kExposureV, kExposureGrad, kExposurePartials, kCorrected,
    kExposureGradViews,
    // Each Gaussian's ceiling of the growth cap after densification (cap_scales).
    kScaleCeiling,
    // The PairStatus of training forwards sized on the device and that of the
    // forwards whose count is read back, and a count limit of 2^32 - 1.
    kPairStatus, kPairStatusExact, kCountUnlimited,
    kSlotCount
  };
  struct ArenaBuffer {
    BufferHandle handle = 0;
    size_t capacity = 0;
    bool stale = false;  // per_iter_alloc: reallocate on the next ensure()
  };

  // The parameter buffers a forward reads (means, log_scales, quats,
  // opacity_logits, sh).
  struct ParamRefs {
    BufferRef p[5];
  };

  // Grow-only: reallocates (contents lost) when `bytes` exceed the capacity;
  // a new capacity is at least 1.25x the old one, and with `headroom` 1.25x
  // what is asked.
  BufferRef ensure(int slot, size_t bytes, bool headroom = false);
  // Arrays per parameter group of the resident state: the parameters and
  // both moments, or the parameters and one packed word of them (bf16_moments).
  int state_arrays() const { return options_.bf16_moments ? 2 : 3; }
  // The arena slot of parameter group `group`'s state array k < state_arrays():
  // the parameters, then the first moment (or the packed pair), then the second.
  static int state_slot(int group, int k) { return (k == 0 ? kParam0 : k == 1 ? kM0 : kV0) + group; }
  BufferRef ref(int slot, size_t offset = 0) const { return BufferRef{arena_[slot].handle, offset}; }
  // Project -> pairs -> sort -> ranges -> rasterize on device-resident
  // parameters; the render stays in kImage. Reads back the pair count, unless
  // `step` is given (a training forward with pair_sizing = device): then the
  // pairs are sized by pair_capacity_ and counted on the device.
  static constexpr uint32_t kNoStep = 0xffffffffu;
  // raster_forward_chunks = skip_saturated: the chunks per tile of the chunk
  // pass's first launch, in chunk order (ChunkPassParams).
  static constexpr uint32_t kHeadChunks = 4;
  // raster_forward_chunks = auto skips from this many Gaussians or pixels on:
  // below, the head launches' serial waves cost more than the chunks they skip
  // (docs/gpu.md, "Chunks behind a saturated tile").
  static constexpr size_t kSkipFromGaussians = 2'000'000, kSkipFromPixels = 1'000'000;
  bool skips_saturated_chunks(size_t n, size_t pixels) const {
    return config_.raster_forward_chunks == RasterForwardChunks::SkipSaturated ||
           (config_.raster_forward_chunks == RasterForwardChunks::Auto &&
            (n >= kSkipFromGaussians || pixels >= kSkipFromPixels));
  }
  // stop_chunk is the walk pass's alone: the chunked stop neither writes nor
  // reads it, and binds a one-element buffer.
  static size_t stop_chunk_bytes(bool chunked, size_t pixels) { return chunked ? 4 : 4 * pixels; }
  void forward_pass(const ParamRefs& params, size_t n, uint32_t sh_stride, const CameraParams& cam,
                    uint32_t sh_degree, const float background[3], uint32_t step = kNoStep);
  // The same for `views` cameras of one size binned together: view v's
  // records at [v n, (v + 1) n), its tiles and pixels after the views' before
  // it (RasterParams::view_records; one view: forward_pass).
  void forward_views(const ParamRefs& params, size_t n, uint32_t sh_stride, const CameraParams* cams, uint32_t views,
                     uint32_t sh_degree, const float background[3], uint32_t step);
  // The last forward's RasterParams as view v's own launches see them (its n
  // records from v n on, its tiles).
  RasterParams view_params(uint32_t v) const {
    RasterParams p = rp_;
    p.num_gaussians = static_cast<uint32_t>(num_gaussians_);
    p.num_tiles = cam_.tiles_x * cam_.tiles_y;
    p.view_records = 0u;
    p.record_base = static_cast<uint32_t>(num_gaussians_ * v);
    return p;
  }
  // A buffer holding 2^32 - 1: the count limit of sorts whose count the host knows.
  BufferRef count_unlimited();
  // The capacity for a forward of `pairs` pairs and those after it (1.5x, at
  // most the pair limit); never shrinks.
  void grow_pair_capacity(uint64_t pairs);
  // Backward of the last forward_pass from d_image (and d_alpha when given)
  // into out: d_means, d_log_scales, d_quats, d_opacity_logits, d_sh, d_means2d.
  // The SH gradient stays factored in kShFactors (shaders/common/sh.h); it is
  // expanded into out[4] only when that has a buffer.
  // With abs_out (a buffer: [n, 2]) it also sums each pixel's |d mean2d|
  // there (the absgrad specialization of the backward rasterization).
  void backward_pass(BufferRef d_image, const BufferRef* d_alpha, const BufferRef out[6], BufferRef abs_out = {});
  // Its two halves: the raster backward over every view's pairs into the
  // per-record (deterministic: per pair slot) accumulators, and view v's
  // projection backward from them into out (its SH factors into set v of
  // kShFactors, which the caller sizes and counts in sh_factor_views_).
  void backward_raster(BufferRef d_image, const BufferRef* d_alpha, BufferRef abs_out);
  void backward_project(uint32_t v, const CameraParams& cam, const BufferRef out[6]);
  // Views rasterized together, after backward_raster: every view's projection
  // backward, gradient sum and (views with track_stats) densification
  // statistics, a launch for up to SPLAT_VIEWS_LAUNCH_MAX views
  // (project_backward_views_body); the means into out[0..3], the last view's
  // 2D gradient into out[5].
  void backward_project_views(const CameraParams* cams, const bool* track_stats, uint32_t count,
                              const BufferRef out[6]);
  // mcmc_regularize without the lock (the regularisers' gradients added to kGrad0..).
  void mcmc_regularize_grads(const McmcStepSettings& s);
  // accumulate_gradients without the lock; with_loss: also the views' loss;
  // without with_sh the SH gradient is left to its factor sets (views together).
  void accumulate_view_gradients(uint32_t k, uint32_t views, bool with_loss, bool with_sh = true);
  // Submits; waits only when `sync` or when timing (then records ts_*).
  void finish_op(bool sync);
  ParamRefs state_params() const;
  // Sizes every per-Gaussian training buffer for n Gaussians (headroom).
  void reserve_state(size_t n);
  // Sizes the per-pixel and per-tile buffers of a render, the loss and the
  // backward for views up to `pixels` pixels and `tiles` tiles.
  void reserve_pixels(size_t pixels, uint32_t tiles);
  // The fused loss's parameters for `cam` against view `slot`'s image; view k
  // of `views` binned together (1: alone).
  static LossParams loss_params(const CameraParams& cam, const ImageSlot& slot, float ssim_weight, uint32_t k,
                                uint32_t views);
  // Throws unless `view` is an uploaded image of `cam`'s size.
  void check_view(const CameraParams& cam, uint32_t view) const;
  // The loss's launch pair over `image` against the view's pixels: the loss
  // partials into kLossPartials / kTileSums (sized here from lp), d_image,
  // and the loss into kLoss.
  void launch_loss(const LossParams& lp, BufferRef image, BufferRef target, BufferRef mask, BufferRef d_image);
  // The loss of `count` views rasterized together (one size; their renders and
  // d_image one after another): a launch pair a group of up to
  // SPLAT_LOSS_MAX_VIEWS views, the same values as a launch pair a view.
  void launch_loss_views(const CameraParams* cams, const uint32_t* views, uint32_t count, float ssim_weight);
  // The densification statistics of the last backward seen from `cam`: radii
  // at `radius`, the screen-space gradient (or absgrad's sums) at `means2d`.
  void grad_stats(const CameraParams& cam, BufferRef radius, BufferRef means2d);
  // d_sh of the last backward, expanded from its factors into `out`.
  void expand_sh_grad(BufferRef out);
  // The training SH gradient in full at kGrad0 + 4: expanded from the last
  // backward's factors, unless set_gradients / reduce_gradients left it there.
  void ensure_full_sh_grad();
  Pipeline pipeline(Kernel k);
  void launch(Kernel k, uint32_t groups, std::initializer_list<KernelArg> args);
  void launch(Pipeline p, Kernel k, uint32_t groups, std::initializer_list<KernelArg> args);
  void begin(TimingLabel l);
  void end(TimingLabel l);
  void finish_call() { finish_op(true); }
  // Exclusive scan of `count` uint32 at `in` into `out` (count + 1 values:
  // out[count] is the total, modulo 2^32); returns its number of blocks.
  uint32_t exclusive_scan(BufferRef in, BufferRef out, uint32_t count);
  // The exact total of the last exclusive_scan of `blocks` blocks (one
  // read-back); `saturated`: a block's sum reached 2^32 - 1, so the total is
  // a lower bound (scan.h).
  uint64_t scanned_total(uint32_t blocks, bool& saturated);
  // Stable radix sort of `count` (key, value) pairs by the low `key_bits` key
  // bits in the ping-pong slots (keys_a, keys_b), (vals_a, vals_b); returns
  // true when the result is in the B slots.
  // count_limit: the number of keys when only the device knows it (at most `count`).
  bool radix_sort_slots(int keys_a, int keys_b, int vals_a, int vals_b, uint32_t count, uint32_t key_bits,
                        BufferRef count_limit);
  // One MCMC sampling pass (relocation of the dead among n, or growth into
  // the `targets` slots after n) and its application to every array.
  void mcmc_pass(const McmcRefineSettings& s, uint32_t n, uint32_t targets, bool grow);
  // Grows a state slot to `bytes`, keeping its first `keep` bytes (through
  // the SH gradient slot, which only densification and snapshots use).
  void mcmc_grow_slot(int slot, size_t keep, size_t bytes);
  bool mcmc_binoms_ready_ = false;

  const Backend backend_;
  const BackendConfig config_;
  std::unique_ptr<Launcher> launcher_;
  std::mutex mutex_;
  std::array<ArenaBuffer, kSlotCount> arena_{};
  double alloc_ms_ = 0.0;  // host time spent allocating since the last timing record
  std::array<double, kTimingLabelCount> alloc_ms_by_label_{};
  TimingLabel current_label_ = TimingLabel::FwdUpload;
  TimingRegistry registry_;
  std::array<Pipeline, kKernelCount> pipelines_{};
  Pipeline backward_absgrad_pipeline_{};  // the raster backward with SPLAT_SPEC_ABSGRAD
  Specialization backward_spec_, deterministic_spec_;
  size_t allocations_ = 0;
  bool timing_ = false;

  // The last forward.
  bool have_forward_ = false;
  CameraParams cam_{};
  RasterParams rp_{};
  size_t num_gaussians_ = 0;  // per view
  uint32_t views_ = 1;        // views binned together
  size_t num_pairs_ = 0;      // its pairs, when counted on the host (pairs_known_)
  bool pairs_known_ = true;
  size_t pair_slots_ = 0;     // the grid its pair kernels ran over: the count, or the capacity
  bool sorted_in_b_ = false;
  // Pairs sized on the device (Device::take_pair_overflow).
  const bool pairs_on_device_;
  size_t pair_capacity_ = 0;  // 0: not sized yet (the first training forward reads its count)
  uint64_t pair_overflows_ = 0;
  uint64_t max_pairs_seen_ = 0;  // the largest count at the last read of the status
  ParamRefs forward_params_{};

  // Training state.
  size_t count_ = 0;
  uint32_t sh_stride_ = 16;
  ImageLayout images_;  // where each training view's pixels (and mask) are in kImages (kMasks)
  ImageStorage storage_;
  // Streamed images: the packed images in host memory (allocate_host), and
  // kImages / kMasks hold two slots of the largest view; the view each slot
  // holds (-1: none) and the slot the last step read.
  uint8_t* host_images_ = nullptr;
  size_t slot_rgb_bytes_ = 0, slot_mask_bytes_ = 0;
  int64_t staged_view_[2] = {-1, -1};
  int current_slot_ = 0;
  // Enqueues the copy of `view` into the slot the last step did not read.
  void stage_view(uint32_t view);
  // The view's target and mask buffers (the mask: any buffer without one).
  std::pair<BufferRef, BufferRef> view_pixels(uint32_t view);
  uint32_t train_sh_degree_ = 0;  // of the last train_forward_backward (its SH gradient factors)
  TrainingOptions options_;
  int64_t exposure_view_ = -1;  // the view of the last step's exposure gradient (-1: none yet)
  // set_exposure_gradients gave every view's gradient (kExposureGradViews) for
  // the next Adam step, instead of the one view's in kExposureGrad.
  bool exposure_grad_views_set_ = false;
  bool last_absgrad_ = false;   // the last step summed the absolute gradient (kMeans2dAbs is its)
  bool have_loss_ = false;
  bool has_scale_ceiling_ = false;  // kScaleCeiling holds the state's ceilings
  bool have_train_step_ = false;  // the gradients of the last train_forward_backward are current
  bool sh_grad_full_ = false;     // set_gradients gave the SH gradient in full (kGrad0 + 4), not factored
  // Factor sets in kShFactors that the SH gradient is the mean of: the views
  // of a batch trained together (gpu_views.cpp), else 1.
  uint32_t sh_factor_views_ = 1;
  std::vector<uint32_t> scan_offsets_;  // scanned_total's read-back (grow-only)
};

}  // namespace splat::gpu
