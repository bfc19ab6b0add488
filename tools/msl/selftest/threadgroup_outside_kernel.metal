// expect: threadgroup variable 'scratch' may only be declared in a kernel function
#include <metal_stdlib>
using namespace metal;
inline float helper(float v) {
  static threadgroup float scratch[4];
  scratch[0] = v;
  return scratch[0];
}
kernel void k(device float* out [[buffer(0)]], uint gid [[thread_position_in_grid]]) { out[gid] = helper(1.0f); }
