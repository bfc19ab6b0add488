// Bitwise comparison of the emulated kernels' outputs with their references,
// shared by the emulator checks.
#pragma once
#include <cstring>
#include <vector>

// How many elements of a and b differ in their bits (-0 and +0 differ, a NaN equals
// only the same NaN); the vectors have one size.
inline size_t count_bit_differences(const std::vector<float>& a, const std::vector<float>& b) {
  size_t d = 0;
  for (size_t e = 0; e < a.size(); ++e) d += std::memcmp(&a[e], &b[e], sizeof(float)) != 0;
  return d;
}
