// expect: pass
// A kernel that uses what the project's kernels use; the shim must accept it.
#include <metal_stdlib>
using namespace metal;

constant float kScale = 2.0f;
constant int fc_mode [[function_constant(0)]];

struct Params {
  uint count;
  float bias;
};

inline float accumulate(device const float* in, uint i, thread float& acc, threadgroup float* scratch) {
  acc += in[i];
  scratch[0] = acc;
  return metal::precise::exp(-acc) + metal::fmin(acc, 1.0f);
}

kernel void good_kernel(constant Params& p [[buffer(0)]], device const float* in [[buffer(1)]],
                        device float* out [[buffer(2)]], uint gid [[thread_position_in_grid]],
                        uint lane [[thread_index_in_simdgroup]], uint warp [[simdgroup_index_in_threadgroup]]) {
  // static: clang allows an address space on a function-scope variable only
  // when static (Apple's compiler needs no static; see tools/msl/splat_prelude.h).
  static threadgroup float scratch[32];
  float acc = p.bias * kScale;
  float v = gid < p.count ? accumulate(in, gid, acc, scratch) : 0.0f;
  v = simd_sum(v);
  uint bits = (uint)((simd_vote::vote_t)simd_ballot(v > 0.0f));
  v += float(popcount(bits)) + simd_shuffle_xor(v, ushort(1)) + as_type<float>(bits) * 0.0f;
  threadgroup_barrier(mem_flags::mem_threadgroup);
  if (fc_mode == 1 && simd_any(lane == 0u))
    atomic_fetch_add_explicit((device atomic_float*)out, v, memory_order_relaxed);
  else if (gid < p.count)
    out[gid] = v + scratch[warp % 32u];
}
