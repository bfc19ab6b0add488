// expect: \[\[buffer\(1\)\]\] used by 'a' and 'b'
#include <metal_stdlib>
using namespace metal;
kernel void k(device float* a [[buffer(1)]], device float* b [[buffer(1)]], uint gid [[thread_position_in_grid]]) {
  a[gid] = b[gid];
}
