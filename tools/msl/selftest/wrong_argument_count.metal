// expect: no matching function for call to 'exp'
#include <metal_stdlib>
using namespace metal;
kernel void k(device float* out [[buffer(0)]], uint gid [[thread_position_in_grid]]) {
  out[gid] = metal::precise::exp(out[gid], 2.0f);
}
