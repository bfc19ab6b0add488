// BackendConfig: one struct of switches for every backend (docs/architecture.md,
// "BackendConfig"). Defaults are the first value of each field.
#pragma once
#include <cstdint>
#include <string>
#include <utility>
#include <vector>

namespace splat {

enum class Backend : uint8_t { Auto, Metal, Cuda, Cpu };
enum class RasterBackward : uint8_t { Simd, Tg, Original };
enum class RasterBackwardRange : uint8_t { LastContributor, FullRange };
enum class RasterBackwardSparse : uint8_t { WarpAny, Off };
enum class RasterBackwardAtomic : uint8_t { SpreadLanes, LaneZero };
enum class RadixSort : uint8_t { Portable, Native };
enum class Submission : uint8_t { Chained, PerKernel };
enum class ForwardSubmission : uint8_t { Chained, PerStage };
enum class Pipelining : uint8_t { Off, On };
enum class Binning : uint8_t { Resident, PerIterAlloc };
enum class PairSizing : uint8_t { Device, Readback };
enum class RasterForwardChunks : uint8_t { Auto, All, SkipSaturated };
enum class Timing : uint8_t { Off, PerKernel };
// Auto: programmatic where the CUDA device and the compiled kernels allow it.
enum class KernelOverlap : uint8_t { Auto, Off, Programmatic };
// Several views a step (batch_views > 1): rasterized together where the
// backend can, or one view after another.
enum class ViewLaunches : uint8_t { Together, PerView };

struct BackendConfig {
  Backend backend = Backend::Auto;
  RasterBackward raster_backward = RasterBackward::Simd;
  RasterBackwardRange raster_backward_range = RasterBackwardRange::LastContributor;
  RasterBackwardSparse raster_backward_sparse = RasterBackwardSparse::WarpAny;
  RasterBackwardAtomic raster_backward_atomic = RasterBackwardAtomic::SpreadLanes;
  RadixSort radix_sort = RadixSort::Portable;
  Submission submission = Submission::Chained;
  ForwardSubmission forward_submission = ForwardSubmission::Chained;
  Pipelining pipelining = Pipelining::Off;
  Binning binning = Binning::Resident;
  PairSizing pair_sizing = PairSizing::Device;
  RasterForwardChunks raster_forward_chunks = RasterForwardChunks::Auto;
  KernelOverlap kernel_overlap = KernelOverlap::Auto;
  ViewLaunches view_launches = ViewLaunches::Together;
  bool deterministic = false;
  Timing timing = Timing::Off;
  bool profile = false;

  // Reflection over the fields, in declaration order: name and accepted
  // values (bools are "false"/"true").
  struct Field {
    const char* name;
    std::vector<const char*> values;
    bool is_bool;
  };
  static const std::vector<Field>& fields();

  // The value of `field` as its name ("simd", "true", ...).
  std::string get(const std::string& field) const;
  // Sets `field` from a value name. Throws ConfigError naming the field and
  // listing the accepted values (or the accepted fields).
  void set(const std::string& field, const std::string& value);

  // (field, value) pairs in declaration order.
  std::vector<std::pair<std::string, std::string>> items() const;
  std::string repr() const;

  // Warnings for switches `backend` cannot honour, each naming the fallback it
  // takes. `backend` must be resolved (not Auto).
  std::vector<std::string> validate(Backend backend) const;

  bool operator==(const BackendConfig& o) const { return items() == o.items(); }
  bool operator!=(const BackendConfig& o) const { return !(*this == o); }
};

const char* backend_name(Backend b);
// Parses "auto" | "metal" | "cuda" | "cpu"; throws ConfigError otherwise.
Backend parse_backend(const std::string& name);

}  // namespace splat
