// expect: argument 'out' .*must be in the device or constant address space
#include <metal_stdlib>
using namespace metal;
kernel void k(float* out [[buffer(0)]], uint gid [[thread_position_in_grid]]) {
  out[gid] = 1.0f;
}
