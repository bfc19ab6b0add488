// The Device interface: what the core asks of a backend. The CPU backend
// implements it directly; Metal and CUDA implement it through cpp/gpu/, which
// turns each op into kernel launches on a Launcher.
#pragma once
#include <atomic>
#include <memory>
#include <string>

#include "config.h"
#include "errors.h"
#include "training.h"
#include "types.h"

namespace splat {

class Device {
 public:
  virtual ~Device() = default;

  virtual Backend backend() const = 0;
  virtual std::string description() const = 0;

  // The rasterization mode of every later forward, rendering or training
  // (docs/training_modes.md "Antialiasing"): antialiased multiplies each
  // splat's opacity by the 2D filter's compensation. A backward follows the
  // mode of its forward.
  void set_antialiased(bool on) { antialiased_.store(on, std::memory_order_relaxed); }
  bool antialiased() const { return antialiased_.load(std::memory_order_relaxed); }
  // The blend's stop of every later forward (docs/gpu.md, "The chunked stop";
  // train.blend_stop): false, a pixel stops before the splat that would take
  // its transmittance below 1e-4 (the 3DGS rule); true, that rule applies
  // within each 256-position chunk of a tile's list to the chunk's own
  // product, and the pixel stops after the first chunk that leaves its
  // transmittance below 1e-4. A backward follows the rule of its forward.
  void set_chunked_stop(bool on) { chunked_stop_.store(on, std::memory_order_relaxed); }
  bool chunked_stop() const { return chunked_stop_.load(std::memory_order_relaxed); }

  // Renders `g` from `cam`. Keeps what the backward needs (the parameters are
  // copied into the device's resident buffers, which only grow).
  virtual void rasterize_forward(const GaussiansView& g, const CameraParams& cam, uint32_t sh_degree,
                                 const float background[3], const ForwardOutputs& out) = 0;

  // Backward of the last forward. d_alpha may be null (zero).
  virtual void rasterize_backward(const float* d_image, const float* d_alpha,
                                  const GradientOutputs& grads) = 0;

  // --- The rasterizer on the caller's memory (zero-copy interop) --------------
  // Which memory rasterize_*_external below read and write in place: host
  // memory (the CPU backend), CUDA memory of this device's primary context
  // (which torch uses too), or none (they throw). Every pointer is that memory,
  // and the work is enqueued on the caller's `queue` (CUDA: a CUstream; 0 is the
  // legacy default stream, torch's default) without waiting for it. Outputs are written in place; the forward keeps
  // pointers to the parameters, which must stay alive and unchanged until its
  // backward. The forward's one read-back (the pair count) remains.
  enum class ExternalMemory : uint8_t { None, Host, Cuda };
  virtual ExternalMemory external_memory() const { return ExternalMemory::None; }
  virtual void rasterize_forward_external(const GaussiansView& g, const CameraParams& cam, uint32_t sh_degree,
                                          const float background[3], const ForwardOutputs& out, uint64_t queue) {
    (void)g, (void)cam, (void)sh_degree, (void)background, (void)out, (void)queue;
    throw BackendError("[device] this backend does not read the caller's device memory");
  }
  // Every gradient output but `sh` is required (sh may be null: not expanded).
  virtual void rasterize_backward_external(const float* d_image, const float* d_alpha, const GradientOutputs& grads,
                                           uint64_t queue) {
    (void)d_image, (void)d_alpha, (void)grads, (void)queue;
    throw BackendError("[device] this backend does not read the caller's device memory");
  }
  // Host <-> device copies so far (count and bytes each way), for tests.
  struct HostTransfers {
    uint64_t uploads = 0, upload_bytes = 0, downloads = 0, download_bytes = 0;
  };
  virtual HostTransfers host_transfers() const { return {}; }

  // Number of buffer (re)allocations so far: constant once warm.
  virtual size_t allocation_count() const = 0;

  // --- Training: state resident on the device -------------------------------
  // Uploads the training images once, each view its own size, packed as
  // plan_image_layout() lays them out (masks likewise, for the views that
  // have one). Sizes the per-pixel buffers for the largest view. When their
  // bytes exceed `budget_bytes` (0: the backend's default, a fraction of the
  // free device memory; none on the cpu backend) they stay in host memory
  // and are streamed, a view a step ahead (see ImageStorage).
  virtual void upload_images(const std::vector<TrainingImage>& images, size_t budget_bytes) = 0;
  // Starts copying view `view`'s image for a later train_forward_backward
  // (a no-op when the images are resident).
  virtual void prefetch_image(uint32_t view) { (void)view; }
  virtual ImageStorage image_storage() const { return {}; }
  // Switches on what TrainingOptions adds; before set_training_state (which
  // then sizes the colour corrections for every uploaded view).
  virtual void set_training_options(const TrainingOptions& options) = 0;
  // Replaces the resident training state (parameters, moments, statistics).
  virtual void set_training_state(const TrainingState& state) = 0;
  virtual void get_training_state(TrainingState& state) = 0;
  virtual size_t num_gaussians() const = 0;

  // Renders the resident Gaussians, computes the loss against image `view`
  // and back-propagates it into the resident gradients; accumulates the
  // densification statistics when `track_stats`. The loss stays on the
  // device until last_loss() asks for it; last_loss() is NaN on every
  // backend until a forward of the current state ran (set_training_state
  // drops the last loss: it belonged to another state).
  // `step` names the step (GPU: recorded when its pairs do not fit).
  virtual void train_forward_backward(const CameraParams& cam, uint32_t view, uint32_t sh_degree,
                                      const float background[3], float ssim_weight, bool track_stats,
                                      uint32_t step) = 0;
  virtual float last_loss() = 0;
  // One fused Adam step over every parameter group.
  virtual void adam_step(const AdamSettings& settings) = 0;
  // Clone / split / prune in place (parameters and moments), resets the
  // statistics. Returns the counts (the one host round trip of a step).
  virtual DensifyResult densify(const DensifySettings& settings) = 0;
  // opacity <= max_opacity; the opacity moments restart from zero.
  virtual void reset_opacity(float max_opacity) = 0;
  // The growth cap after densification: every log scale at or below its
  // Gaussian's ceiling. When the state has no ceilings (one set without them,
  // or after densify or an MCMC refine) each Gaussian's largest log scale now
  // plus log_growth becomes its ceiling first. TrainingState::scale_ceiling
  // carries them.
  virtual void cap_scales(float log_growth) = 0;
  // The MCMC strategy. Adds the opacity and scale regularisers' gradients to
  // the resident gradients of the last train_forward_backward.
  virtual void mcmc_regularize(const McmcStepSettings& settings) {
    (void)settings;
    throw BackendError("[device] this backend does not train with the MCMC strategy");
  }
  // Moves each mean by its position noise (after adam_step).
  virtual void mcmc_noise(const McmcStepSettings& settings) {
    (void)settings;
    throw BackendError("[device] this backend does not train with the MCMC strategy");
  }
  // Relocation and growth; resets the statistics. Returns the counts (one
  // host round trip).
  virtual McmcRefineResult mcmc_refine(const McmcRefineSettings& settings) {
    (void)settings;
    throw BackendError("[device] this backend does not train with the MCMC strategy");
  }
  // Counts the non-finite values of the resident parameters (a reduction on
  // the device; five counts come back, so it synchronizes).
  virtual NonFiniteCounts count_nonfinite() = 0;
  // Training forwards whose (tile, Gaussian) pairs are sized on the device
  // (GPU, pair_sizing = device) never wait for their count: a forward whose
  // pairs exceed the buffers emits none and its step changes nothing. At each
  // of its sync points the Trainer asks here (one small read-back): the
  // device reports the first such step and the count it needed, grows the
  // buffers (unless that count is past the pair limit) and forgets the
  // overflow; the Trainer runs those steps again. Backends that count on the
  // host never overflow.
  struct PairOverflow {
    bool happened = false;
    uint32_t first_step = 0;
    uint64_t required = 0;   // the largest count of those steps
    bool saturated = false;  // `required` is a lower bound
  };
  virtual PairOverflow take_pair_overflow() { return {}; }
  // The pair buffers' capacity (0: sized by each forward's exact count) and the
  // overflows taken so far.
  struct PairBuffers {
    size_t capacity = 0;
    uint64_t overflows = 0;
  };
  virtual PairBuffers pair_buffers() const { return {}; }
  // Test hook: the capacity from now on (overflows the next forwards when small).
  virtual void set_pair_capacity(size_t pairs) { (void)pairs; }
  // Several views a step (TrainSettings::batch_views): after view k of a batch
  // of `views` (its train_forward_backward and MCMC regularisers), adds its
  // gradients into an accumulator (k = 0 starts it); at k = views - 1 the
  // gradients the next adam_step applies become the views' mean, summed in
  // view order and divided by `views` (sh in full, as set_gradients leaves
  // it), and last_loss() the mean of their losses. A view whose forward
  // overflowed the pair buffers adds nothing (its batch runs again from it).
  virtual void accumulate_gradients(uint32_t k, uint32_t views) {
    (void)k;
    (void)views;
    throw BackendError("[device] this backend does not train several views a step");
  }
  // The same for a whole batch in one pass where the backend can: every
  // view's train_forward_backward (views[k] of cams[k], track_stats[k]) and
  // accumulate_gradients(k, count), with the views rasterized together
  // (docs/architecture.md, "Several views a step"). The pass names `step`
  // (the batch's first) when its pairs overflow, so the batch runs again
  // whole. Returns false, having done nothing, where it cannot (another
  // backend, views of different sizes, streamed images, absgrad); the caller
  // then trains the views one after another. reg: the loss's regularisers
  // (Trainer::regularizers_at), added to each view's gradients as
  // mcmc_regularize adds them (null: none).
  virtual bool train_views_together(const CameraParams* cams, const uint32_t* views, const bool* track_stats,
                                    uint32_t count, uint32_t sh_degree, const float background[3],
                                    float ssim_weight, uint32_t step, const McmcStepSettings* reg) {
    (void)cams;
    (void)views;
    (void)track_stats;
    (void)count;
    (void)sh_degree;
    (void)background;
    (void)ssim_weight;
    (void)step;
    (void)reg;
    return false;
  }
  // Data-parallel training (python/splat/parallel): the last step's
  // gradients, laid out as TrainingState::params (sh in full), and the
  // densification statistics, as host arrays; set_* takes them back (the
  // ranks' reduction; sizes checked).
  virtual void get_gradients(std::vector<float> (&grads)[5]) = 0;
  virtual void set_gradients(const std::vector<float> (&grads)[5]) = 0;
  // Exposure compensation's share: every view's correction gradient
  // [views x 12] (zero but the last step's view's; empty without exposure);
  // set_* gives the next Adam step every view's gradient instead (the ranks'
  // mean of their views').
  virtual void get_exposure_gradients(std::vector<float>& grads) { grads.clear(); }
  virtual void set_exposure_gradients(const std::vector<float>& grads) {
    (void)grads;
    throw BackendError("[device] this backend cannot take exposure gradients");
  }
  // visible_adam's share: the last forward's screen radius of every Gaussian
  // (0: not seen; Adam steps the Gaussians above 0); set_* replaces it (the
  // ranks' maximum: a Gaussian any rank's view saw).
  virtual void get_step_radii(std::vector<int32_t>& radii) = 0;
  virtual void set_step_radii(const std::vector<int32_t>& radii) = 0;
  virtual void get_densify_stats(std::vector<float>& accum, std::vector<float>& count,
                                 std::vector<float>& max_radii) = 0;
  virtual void set_densify_stats(const std::vector<float>& accum, const std::vector<float>& count,
                                 const std::vector<float>& max_radii) = 0;
  // Data-parallel ranks reducing in place on the device (CUDA: NCCL, loaded at
  // run time): join_ranks joins the communicator rank 0's id names; then
  // reduce_gradients replaces the last backward's gradients with their mean
  // over the ranks (sh in full, as set_gradients leaves it) and
  // reduce_densify_stats the statistics with their sums (radii: maximum),
  // enqueued without waiting. Backends without it raise BackendError.
  virtual void join_ranks(const std::string& unique_id, int rank, int ranks) {
    (void)unique_id;
    (void)rank;
    (void)ranks;
    throw BackendError("[device] this backend cannot reduce across ranks on the device (exchange='host')");
  }
  virtual void reduce_gradients() {
    throw BackendError("[device] this backend cannot reduce across ranks on the device (exchange='host')");
  }
  virtual void reduce_densify_stats() {
    throw BackendError("[device] this backend cannot reduce across ranks on the device (exchange='host')");
  }
  // Renders the resident Gaussians into a host image [H,W,3].
  virtual void render_resident(const CameraParams& cam, uint32_t sh_degree, const float background[3],
                               float* image) = 0;
  // Each resident Gaussian's blend weight, alpha T, summed over every pixel of
  // these views (the forward's own blend and stop: occluded and faint
  // Gaussians score low). Read as the colour gradient of a backward under
  // d_image = 1, which does not depend on the colours; one forward and one
  // backward a view, and the weights come back (weights[i] for Gaussian i).
  virtual void blend_weights(const CameraParams* cams, uint32_t count, std::vector<float>& weights) = 0;

  // --- Instrumentation --------------------------------------------------------
  // ts_* timings recorded since the last reset (only with timing = per_kernel).
  virtual std::vector<TimingRecord> timings(bool reset) {
    (void)reset;
    return {};
  }
  // Buffers of the last train_forward_backward; false when not supported.
  virtual bool debug_snapshot(DebugSnapshot& out) {
    (void)out;
    return false;
  }

 private:
  std::atomic<bool> antialiased_{false};
  std::atomic<bool> chunked_stop_{false};
};

// Creates the device `config.backend` names (auto resolved as documented).
// Throws BackendUnavailable with the reason when it cannot run here.
std::unique_ptr<Device> create_device(const BackendConfig& config);

// The backend `auto` resolves to on this machine.
Backend resolve_backend(Backend requested);

// Whether `b` can run here; when not, `reason` says why.
bool backend_available(Backend b, std::string* reason);

}  // namespace splat
