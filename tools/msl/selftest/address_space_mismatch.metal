// expect: no matching function for call to 'fill'
#include <metal_stdlib>
using namespace metal;
inline void fill(threadgroup float* p, uint i) { p[i] = 0.0f; }
kernel void k(device float* out [[buffer(0)]], uint gid [[thread_position_in_grid]]) {
  fill(out, gid);
}
