// expect: double is not supported in MSL
#include <metal_stdlib>
using namespace metal;
kernel void k(device float* out [[buffer(0)]], uint gid [[thread_position_in_grid]]) {
  double d = 1.0;
  out[gid] = float(d);
}
