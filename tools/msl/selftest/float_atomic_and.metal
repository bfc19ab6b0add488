// expect: no matching function for call to 'atomic_fetch_and_explicit'
#include <metal_stdlib>
using namespace metal;
kernel void k(device atomic_float* out [[buffer(0)]], uint gid [[thread_position_in_grid]]) {
  atomic_fetch_and_explicit(out, 1.0f, memory_order_relaxed);
}
