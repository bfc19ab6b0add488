// expect: program-scope variable 'counter' must be in the constant address space
#include <metal_stdlib>
using namespace metal;
float counter = 0.0f;
kernel void k(device float* out [[buffer(0)]], uint gid [[thread_position_in_grid]]) { out[gid] = 1.0f; }
