// expect: use of undeclared identifier 'simd_summ'
#include <metal_stdlib>
using namespace metal;
kernel void k(device float* out [[buffer(0)]], uint gid [[thread_position_in_grid]]) {
  out[gid] = simd_summ(out[gid]);
}
