// expect: no matching function for call to 'simd_sum'
#include <metal_stdlib>
using namespace metal;
kernel void k(device float* out [[buffer(0)]], uint gid [[thread_position_in_grid]]) {
  bool any = simd_sum(gid > 3u);
  out[gid] = any ? 1.0f : 0.0f;
}
