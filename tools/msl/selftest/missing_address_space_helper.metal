// expect: 'p' of type 'float \*': pointer or reference without an explicit address space
#include <metal_stdlib>
using namespace metal;
inline void store(float* p, uint i) { p[i] = 0.0f; }
kernel void k(device float* out [[buffer(0)]], uint gid [[thread_position_in_grid]]) {
  float local[2];
  store(local, gid & 1u);
  out[gid] = local[0];
}
