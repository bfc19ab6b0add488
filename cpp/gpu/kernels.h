// The SIMT kernels the GPU backends launch: their entry-point names, the
// source files that define them per target, and their specialization
// constants. Shared by CUDA (NVRTC, constants as -D defines) and Metal
// (function constants, indexed by SpecConstant).
#pragma once
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "splat/config.h"

namespace splat::gpu {

enum class Kernel : uint8_t {
  ProjectForward,
  ProjectForwardViews,  // views rasterized together, one launch
  ProjectBackward,
  ProjectBackwardViews,  // views rasterized together, one launch
  ExpandShGrad,
  ScanBlockSums,
  ScanRows,
  ScanApply,
  RadixHistogram,
  RadixScatter,
  GatherPairCounts,
  EmitPairs,
  PairTotal,
  TileRanges,
  TileChunks,
  RasterizeChunks,
  RasterizeForward,
  RasterizeWalk,
  RasterizeCheckpoints,
  RasterizeBackward,
  // The training step (shaders/kernels/train_*.h).
  SsimForward,
  SsimBackward,
  SsimForwardViews,  // the loss of views rasterized together, one launch pair
  SsimBackwardViews,
  Adam,
  GradAccumulate,
  GradStats,
  ResetOpacity,
  CapScales,
  DensifyClassify,
  DensifyMark,
  DensifySources,
  DensifyGather,
  DensifyChildren,
  CountNonfinite,
  NonfiniteTotal,
  // The MCMC strategy (shaders/kernels/train_mcmc.h).
  McmcWeights,
  McmcBlockOffsets,
  McmcSample,
  McmcApply,
  McmcCopy,
  McmcRegularize,
  McmcNoise,
  // absgrad and exposure compensation (train_absgrad.h, train_exposure.h).
  AbsgradPairSum,
  ExposureApply,
  ExposureBackward,
  ExposureReduce,
  ExposureAdam,
  ExposureCenter,
  Count
};
constexpr size_t kKernelCount = static_cast<size_t>(Kernel::Count);

// Specialization constants; the index is the Metal function-constant index.
enum class SpecConstant : uint8_t { BwdReduce, BwdRange, BwdSparse, BwdAtomic, Deterministic, Absgrad, Count };
constexpr size_t kSpecCount = static_cast<size_t>(SpecConstant::Count);
const char* spec_constant_name(SpecConstant c);  // "SPLAT_SPEC_BWD_REDUCE", ...

struct KernelInfo {
  Kernel id;
  const char* entry;        // entry-point symbol, e.g. "splat_project_forward"
  const char* cuda_source;  // file under shaders/cuda
  const char* metal_source; // file under shaders/metal
  std::vector<SpecConstant> constants;  // the constants this kernel reads
  uint32_t threads;                     // threads per threadgroup the entry point is written for
};
const KernelInfo& kernel_info(Kernel k);

// Values of a kernel's specialization constants (only those it reads are
// meaningful; the rest stay 0 so equal specializations compare equal).
struct Specialization {
  std::array<int32_t, kSpecCount> values{};
  int32_t get(SpecConstant c) const { return values[static_cast<size_t>(c)]; }
  void set(SpecConstant c, int32_t v) { values[static_cast<size_t>(c)] = v; }
  bool operator<(const Specialization& o) const { return values < o.values; }
  bool operator==(const Specialization& o) const { return values == o.values; }
};

// Every distinct specialization the backends can request for `k` (the
// canonical ones: switches a variant ignores are fixed to 0).
std::vector<Specialization> valid_specializations(Kernel k);

// "NAME=value" for each constant `k` reads (CUDA -D options, cache keys, logs).
std::vector<std::string> specialization_defines(Kernel k, const Specialization& s);
std::string specialization_label(Kernel k, const Specialization& s);

// The specializations a BackendConfig selects.
// raster_backward without absgrad; with_absgrad: the same with it.
Specialization rasterize_backward_specialization(const BackendConfig& c);
Specialization with_absgrad(Specialization s);
// The projection backward and pair emission: deterministic or not.
Specialization deterministic_specialization(const BackendConfig& c);

}  // namespace splat::gpu
