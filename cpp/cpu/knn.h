// Nearest-neighbour distances for initialising Gaussian scales from a point
// cloud: a uniform grid searched in growing shells.
#pragma once
#include <cstddef>

namespace splat::cpu {

// out[i] = mean squared distance from point i to its k nearest other points
// (points: [n,3]). With fewer than k other points, the mean over those there are.
void knn_mean_sq_dist(const float* points, size_t n, int k, float* out);

}  // namespace splat::cpu
