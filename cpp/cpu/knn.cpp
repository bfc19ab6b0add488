#include "knn.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "thread_pool.h"

namespace splat::cpu {

void knn_mean_sq_dist(const float* p, size_t n, int k, float* out) {
  if (n == 0) return;
  if (n == 1) {
    out[0] = 0.f;
    return;
  }
  k = static_cast<int>(std::min<size_t>(k, n - 1));
  float lo[3], hi[3];
  for (int a = 0; a < 3; ++a) lo[a] = hi[a] = p[a];
  for (size_t i = 0; i < n; ++i)
    for (int a = 0; a < 3; ++a) {
      lo[a] = std::min(lo[a], p[3 * i + a]);
      hi[a] = std::max(hi[a], p[3 * i + a]);
    }
  // About two points per cell.
  double volume = 1.0;
  for (int a = 0; a < 3; ++a) volume *= std::max(1e-6, static_cast<double>(hi[a] - lo[a]));
  double cell = std::cbrt(volume * 2.0 / static_cast<double>(n));
  int dims[3];
  for (int a = 0; a < 3; ++a)
    dims[a] = std::clamp(static_cast<int>(std::ceil((hi[a] - lo[a]) / cell)), 1, 1024);
  auto cell_of = [&](size_t i, int a) {
    return std::clamp(static_cast<int>((p[3 * i + a] - lo[a]) / cell), 0, dims[a] - 1);
  };
  const size_t cells = static_cast<size_t>(dims[0]) * dims[1] * dims[2];
  std::vector<uint32_t> start(cells + 1, 0), sorted(n);
  std::vector<uint32_t> cell_id(n);
  for (size_t i = 0; i < n; ++i) {
    cell_id[i] = static_cast<uint32_t>((static_cast<size_t>(cell_of(i, 2)) * dims[1] + cell_of(i, 1)) * dims[0] +
                                       cell_of(i, 0));
    ++start[cell_id[i] + 1];
  }
  for (size_t c = 0; c < cells; ++c) start[c + 1] += start[c];
  {
    std::vector<uint32_t> cursor(start.begin(), start.end() - 1);
    for (size_t i = 0; i < n; ++i) sorted[cursor[cell_id[i]]++] = static_cast<uint32_t>(i);
  }
  ThreadPool::shared().parallel_for(n, 256, [&](size_t b, size_t e) {
    std::vector<float> best;  // the k smallest squared distances, ascending
    for (size_t i = b; i < e; ++i) {
      best.assign(k, std::numeric_limits<float>::infinity());
      int c[3] = {cell_of(i, 0), cell_of(i, 1), cell_of(i, 2)};
      for (int r = 0;; ++r) {
        // Visit the cells on the shell at Chebyshev distance r.
        for (int z = c[2] - r; z <= c[2] + r; ++z) {
          if (z < 0 || z >= dims[2]) continue;
          for (int y = c[1] - r; y <= c[1] + r; ++y) {
            if (y < 0 || y >= dims[1]) continue;
            for (int x = c[0] - r; x <= c[0] + r; ++x) {
              if (x < 0 || x >= dims[0]) continue;
              if (std::max({std::abs(x - c[0]), std::abs(y - c[1]), std::abs(z - c[2])}) != r) continue;
              size_t cid = (static_cast<size_t>(z) * dims[1] + y) * dims[0] + x;
              for (uint32_t s = start[cid]; s < start[cid + 1]; ++s) {
                uint32_t j = sorted[s];
                if (j == i) continue;
                float d = 0.f;
                for (int a = 0; a < 3; ++a) {
                  float t = p[3 * j + a] - p[3 * i + a];
                  d += t * t;
                }
                if (d < best[k - 1]) {
                  best[k - 1] = d;
                  for (int q = k - 1; q > 0 && best[q] < best[q - 1]; --q) std::swap(best[q], best[q - 1]);
                }
              }
            }
          }
        }
        // Every point outside the searched cube is at least r * cell away.
        double reach = r * cell;
        bool covered = r >= std::max({dims[0], dims[1], dims[2]});
        if (covered || (best[k - 1] < std::numeric_limits<float>::infinity() && best[k - 1] <= reach * reach)) break;
      }
      double sum = 0.0;
      for (float d : best) sum += d;
      out[i] = static_cast<float>(sum / k);
    }
  });
}

}  // namespace splat::cpu
