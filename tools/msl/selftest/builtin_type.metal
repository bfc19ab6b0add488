// expect: \[\[thread_position_in_grid\]\] cannot be of type 'float'
#include <metal_stdlib>
using namespace metal;
kernel void k(device float* out [[buffer(0)]], float gid [[thread_position_in_grid]]) { out[0] = gid; }
