#include "kernels.h"

#include "../../shaders/common/params.h"

namespace splat::gpu {
namespace {

using SC = SpecConstant;
// Threads per threadgroup: every kernel's, and the backward rasterization's.
constexpr uint32_t kG = SPLAT_GROUP_SIZE, kBwd = SPLAT_BWD_THREADS, kChunk = SPLAT_CHUNK_THREADS;

const std::vector<KernelInfo>& table() {
  static const std::vector<KernelInfo> t = {
      {Kernel::ProjectForward, "splat_project_forward", "project.cu", "project.metal", {}, kG},
      {Kernel::ProjectForwardViews, "splat_project_forward_views", "project.cu", "project.metal", {}, kG},
      {Kernel::ProjectBackward, "splat_project_backward", "project_backward.cu", "project_backward.metal",
       {SC::Deterministic}, kG},
      {Kernel::ProjectBackwardViews, "splat_project_backward_views", "project_backward.cu",
       "project_backward.metal", {SC::Deterministic}, kG},
      {Kernel::ExpandShGrad, "splat_expand_sh_grad", "project_backward.cu", "project_backward.metal", {}, kG},
      {Kernel::ScanBlockSums, "splat_scan_block_sums", "binning.cu", "binning.metal", {}, kG},
      {Kernel::ScanRows, "splat_scan_rows", "binning.cu", "binning.metal", {}, kG},
      {Kernel::ScanApply, "splat_scan_apply", "binning.cu", "binning.metal", {}, kG},
      {Kernel::RadixHistogram, "splat_radix_histogram", "binning.cu", "binning.metal", {}, kG},
      {Kernel::RadixScatter, "splat_radix_scatter", "binning.cu", "binning.metal", {}, kG},
      {Kernel::GatherPairCounts, "splat_gather_pair_counts", "binning.cu", "binning.metal", {}, kG},
      {Kernel::EmitPairs, "splat_emit_pairs", "binning.cu", "binning.metal", {SC::Deterministic}, kG},
      {Kernel::PairTotal, "splat_pair_total", "binning.cu", "binning.metal", {}, kG},
      {Kernel::TileRanges, "splat_tile_ranges", "binning.cu", "binning.metal", {}, kG},
      {Kernel::TileChunks, "splat_tile_chunks", "binning.cu", "binning.metal", {}, kG},
      {Kernel::RasterizeChunks, "splat_rasterize_chunks", "rasterize_forward.cu", "rasterize_forward.metal", {},
       kChunk},
      {Kernel::RasterizeForward, "splat_rasterize_forward", "rasterize_forward.cu", "rasterize_forward.metal", {},
       kG},
      {Kernel::RasterizeWalk, "splat_rasterize_walk", "rasterize_forward.cu", "rasterize_forward.metal", {},
       kG},
      {Kernel::RasterizeCheckpoints, "splat_rasterize_checkpoints", "rasterize_forward.cu", "rasterize_forward.metal",
       {}, kG},
      {Kernel::RasterizeBackward, "splat_rasterize_backward", "rasterize_backward.cu", "rasterize_backward.metal",
       {SC::BwdReduce, SC::BwdRange, SC::BwdSparse, SC::BwdAtomic, SC::Deterministic, SC::Absgrad}, kBwd},
      {Kernel::SsimForward, "splat_ssim_forward", "train.cu", "train.metal", {}, kG},
      {Kernel::SsimBackward, "splat_ssim_backward", "train.cu", "train.metal", {}, kG},
      {Kernel::SsimForwardViews, "splat_ssim_forward_views", "train.cu", "train.metal", {}, kG},
      {Kernel::SsimBackwardViews, "splat_ssim_backward_views", "train.cu", "train.metal", {}, kG},
      {Kernel::Adam, "splat_adam", "train.cu", "train.metal", {}, kG},
      {Kernel::GradAccumulate, "splat_grad_accumulate", "train.cu", "train.metal", {}, kG},
      {Kernel::GradStats, "splat_grad_stats", "train.cu", "train.metal", {}, kG},
      {Kernel::ResetOpacity, "splat_reset_opacity", "train.cu", "train.metal", {}, kG},
      {Kernel::CapScales, "splat_cap_scales", "train.cu", "train.metal", {}, kG},
      {Kernel::DensifyClassify, "splat_densify_classify", "train.cu", "train.metal", {}, kG},
      {Kernel::DensifyMark, "splat_densify_mark", "train.cu", "train.metal", {}, kG},
      {Kernel::DensifySources, "splat_densify_sources", "train.cu", "train.metal", {}, kG},
      {Kernel::DensifyGather, "splat_densify_gather", "train.cu", "train.metal", {}, kG},
      {Kernel::DensifyChildren, "splat_densify_children", "train.cu", "train.metal", {}, kG},
      {Kernel::CountNonfinite, "splat_count_nonfinite", "train.cu", "train.metal", {}, kG},
      {Kernel::NonfiniteTotal, "splat_nonfinite_total", "train.cu", "train.metal", {}, kG},
      {Kernel::McmcWeights, "splat_mcmc_weights", "train.cu", "train.metal", {}, kG},
      {Kernel::McmcBlockOffsets, "splat_mcmc_block_offsets", "train.cu", "train.metal", {}, kG},
      {Kernel::McmcSample, "splat_mcmc_sample", "train.cu", "train.metal", {}, kG},
      {Kernel::McmcApply, "splat_mcmc_apply", "train.cu", "train.metal", {}, kG},
      {Kernel::McmcCopy, "splat_mcmc_copy", "train.cu", "train.metal", {}, kG},
      {Kernel::McmcRegularize, "splat_mcmc_regularize", "train.cu", "train.metal", {}, kG},
      {Kernel::McmcNoise, "splat_mcmc_noise", "train.cu", "train.metal", {}, kG},
      {Kernel::AbsgradPairSum, "splat_absgrad_pair_sum", "train.cu", "train.metal", {}, kG},
      {Kernel::ExposureApply, "splat_exposure_apply", "train.cu", "train.metal", {}, kG},
      {Kernel::ExposureBackward, "splat_exposure_backward", "train.cu", "train.metal", {}, kG},
      {Kernel::ExposureReduce, "splat_exposure_reduce", "train.cu", "train.metal", {}, kG},
      {Kernel::ExposureAdam, "splat_exposure_adam", "train.cu", "train.metal", {}, kG},
      {Kernel::ExposureCenter, "splat_exposure_center", "train.cu", "train.metal", {}, kG},
  };
  return t;
}

Specialization backward_spec(int reduce, int range, int sparse, int atomic, int det) {
  Specialization s;
  s.set(SC::BwdReduce, reduce);
  s.set(SC::BwdRange, range);
  s.set(SC::BwdSparse, sparse);
  s.set(SC::BwdAtomic, atomic);
  s.set(SC::Deterministic, det);
  return s;
}

// Canonical form: deterministic ignores reduce / sparse / atomic (it always
// skips SIMD groups without a contributing lane); original ignores atomic.
Specialization canonical_backward(int reduce, int range, int sparse, int atomic, int det) {
  if (det) return backward_spec(SPLAT_BWD_REDUCE_SIMD, range, SPLAT_BWD_SPARSE_WARP_ANY, SPLAT_BWD_ATOMIC_LANE_ZERO, 1);
  if (reduce == SPLAT_BWD_REDUCE_ORIGINAL) atomic = SPLAT_BWD_ATOMIC_LANE_ZERO;
  return backward_spec(reduce, range, sparse, atomic, 0);
}

}  // namespace

const char* spec_constant_name(SpecConstant c) {
  switch (c) {
    case SC::BwdReduce:
      return "SPLAT_SPEC_BWD_REDUCE";
    case SC::BwdRange:
      return "SPLAT_SPEC_BWD_RANGE";
    case SC::BwdSparse:
      return "SPLAT_SPEC_BWD_SPARSE";
    case SC::BwdAtomic:
      return "SPLAT_SPEC_BWD_ATOMIC";
    case SC::Deterministic:
      return "SPLAT_SPEC_DETERMINISTIC";
    case SC::Absgrad:
      return "SPLAT_SPEC_ABSGRAD";
    default:
      return "?";
  }
}

const KernelInfo& kernel_info(Kernel k) { return table()[static_cast<size_t>(k)]; }

std::vector<Specialization> valid_specializations(Kernel k) {
  std::vector<Specialization> out;
  if (k == Kernel::RasterizeBackward) {
    for (int det = 0; det < 2; ++det)
      for (int reduce = 0; reduce < 3; ++reduce)
        for (int range = 0; range < 2; ++range)
          for (int sparse = 0; sparse < 2; ++sparse)
            for (int atomic = 0; atomic < 2; ++atomic) {
              Specialization s = canonical_backward(reduce, range, sparse, atomic, det);
              bool seen = false;
              for (const auto& o : out) seen = seen || o == s;
              if (!seen) out.push_back(s);
            }
    // Each with absgrad too (training with [train] absgrad).
    for (size_t i = 0, plain = out.size(); i < plain; ++i) out.push_back(with_absgrad(out[i]));
  } else if (k == Kernel::ProjectBackward || k == Kernel::ProjectBackwardViews || k == Kernel::EmitPairs) {
    for (int det = 0; det < 2; ++det) {
      Specialization s;
      s.set(SC::Deterministic, det);
      out.push_back(s);
    }
  } else {
    out.push_back(Specialization{});
  }
  return out;
}

std::vector<std::string> specialization_defines(Kernel k, const Specialization& s) {
  std::vector<std::string> out;
  for (SpecConstant c : kernel_info(k).constants)
    out.push_back(std::string(spec_constant_name(c)) + "=" + std::to_string(s.get(c)));
  return out;
}

std::string specialization_label(Kernel k, const Specialization& s) {
  std::string out;
  for (const auto& d : specialization_defines(k, s)) {
    if (!out.empty()) out += ",";
    out += d;
  }
  return out;
}

Specialization rasterize_backward_specialization(const BackendConfig& c) {
  int reduce = c.raster_backward == RasterBackward::Simd  ? SPLAT_BWD_REDUCE_SIMD
               : c.raster_backward == RasterBackward::Tg ? SPLAT_BWD_REDUCE_TG
                                                          : SPLAT_BWD_REDUCE_ORIGINAL;
  int range = c.raster_backward_range == RasterBackwardRange::LastContributor ? SPLAT_BWD_RANGE_LAST_CONTRIBUTOR
                                                                                : SPLAT_BWD_RANGE_FULL;
  int sparse = c.raster_backward_sparse == RasterBackwardSparse::WarpAny ? SPLAT_BWD_SPARSE_WARP_ANY
                                                                           : SPLAT_BWD_SPARSE_OFF;
  int atomic = c.raster_backward_atomic == RasterBackwardAtomic::LaneZero ? SPLAT_BWD_ATOMIC_LANE_ZERO
                                                                            : SPLAT_BWD_ATOMIC_SPREAD_LANES;
  return canonical_backward(reduce, range, sparse, atomic, c.deterministic ? 1 : 0);
}

Specialization with_absgrad(Specialization s) {
  s.set(SC::Absgrad, 1);
  return s;
}

Specialization deterministic_specialization(const BackendConfig& c) {
  Specialization s;
  s.set(SC::Deterministic, c.deterministic ? 1 : 0);
  return s;
}

}  // namespace splat::gpu
