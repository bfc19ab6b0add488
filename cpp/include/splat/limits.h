// The numeric limits of the native core (docs/architecture.md, "Numeric
// limits"): every count, offset and key below them fits the 32-bit indices
// the kernels and the CPU schedules use, so a call past one stops with a
// ConfigError naming the limit and the value before anything is allocated or
// indexed.
#pragma once
#include <cstdint>
#include <string>

#include "errors.h"

namespace splat {

// Gaussians per call and per trained model (TrainSettings::max_gaussians).
inline constexpr uint64_t kMaxGaussians = uint64_t{1} << 24;
// Pixels per image side: at most 1024 x 1024 tiles, so a scan block's pair
// count (4096 Gaussians) stays below 2^32 once saturated (scan.h).
inline constexpr uint32_t kMaxImageSide = 16384;
// (tile, Gaussian) pairs of one image: sorted indices, tile ranges and
// emission offsets are uint32, and the GPU's chunk slots stay below 2^24.
inline constexpr uint64_t kMaxPairs = (uint64_t{1} << 31) - 1;
// Gaussians one split produces: the GPU scans the extras of every Gaussian
// before the cap, n (split_count - 1) < 2^32 for n <= kMaxGaussians.
inline constexpr uint32_t kMaxSplitCount = 256;
// Views a training step may average (train.batch_views).
inline constexpr uint32_t kMaxBatchViews = 64;
// Halvings of the resolution schedule (TrainSettings::num_downscales): the
// coarsest level is 1/16 of each side.
inline constexpr uint32_t kMaxDownscales = 4;

inline void check_gaussian_count(uint64_t n, const char* what = "Gaussians") {
  if (n > kMaxGaussians)
    throw ConfigError("[splat] " + std::to_string(n) + " " + what + " exceed the limit of " +
                      std::to_string(kMaxGaussians) + " (2^24)");
}

inline void check_image_size(uint64_t width, uint64_t height) {
  if (width == 0 || height == 0 || width > kMaxImageSide || height > kMaxImageSide)
    throw ConfigError("[splat] image size " + std::to_string(width) + "x" + std::to_string(height) +
                      ": each side must be 1.." + std::to_string(kMaxImageSide) + " pixels");
}

// `pairs` is exact, or a lower bound when `at_least` (a saturated GPU count).
inline void check_pair_count(uint64_t pairs, bool at_least = false) {
  if (pairs > kMaxPairs)
    throw ConfigError("[splat] " + std::string(at_least ? "at least " : "") + std::to_string(pairs) +
                      " (tile, Gaussian) pairs in one image exceed the limit of " + std::to_string(kMaxPairs) +
                      " (2^31 - 1): fewer or smaller Gaussians, or a smaller image");
}

}  // namespace splat
