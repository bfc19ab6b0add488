// The portable kernel dialect: one qualifier and type vocabulary per target.
//
// Every header under shaders/common and every kernel body under
// shaders/kernels is written against these names only, so the same source
// compiles as Metal Shading Language, as CUDA through NVRTC, and as host C++
// for the CPU backend. Targets:
//   SPLAT_TARGET_METAL  __METAL_VERSION__ is defined by the Metal compiler
//   SPLAT_TARGET_CUDA   __CUDACC__ / __CUDACC_RTC__ (NVRTC)
//   SPLAT_TARGET_HOST   anything else (the CPU backend and host code)
#pragma once

#if defined(__METAL_VERSION__)
#define SPLAT_TARGET_METAL 1
#elif defined(__CUDACC__) || defined(__CUDACC_RTC__)
#define SPLAT_TARGET_CUDA 1
#else
#define SPLAT_TARGET_HOST 1
#endif

// ---------------------------------------------------------------------------
// Qualifiers.
//   SPLAT_FUNC      a function callable from kernels (and the host on HOST)
//   SPLAT_UNROLL    before a loop of constant trip count: unroll it fully, so
//                   arrays it indexes stay in registers (GPU targets only)
//   SPLAT_DEVICE_MEM / SPLAT_CONST_MEM / SPLAT_TG_MEM / SPLAT_THREAD
//                   address spaces of pointers and references
// ---------------------------------------------------------------------------
#if defined(SPLAT_TARGET_METAL)
#include <metal_stdlib>
using namespace metal;
#define SPLAT_FUNC inline
#define SPLAT_DEVICE_MEM device
#define SPLAT_CONST_MEM constant
#define SPLAT_TG_MEM threadgroup
#define SPLAT_THREAD thread
#define SPLAT_STATIC_ASSERT(c, m) static_assert(c, m)
#define SPLAT_UNROLL _Pragma("unroll")
typedef uint uint32_t;
typedef int int32_t;
typedef ulong uint64_t;
#elif defined(SPLAT_TARGET_CUDA)
#define SPLAT_FUNC __device__ __forceinline__
#define SPLAT_DEVICE_MEM
#define SPLAT_CONST_MEM
#define SPLAT_TG_MEM
#define SPLAT_THREAD
#define SPLAT_STATIC_ASSERT(c, m) static_assert(c, m)
#define SPLAT_UNROLL _Pragma("unroll")
#if defined(__CUDACC_RTC__)
typedef unsigned int uint32_t;
typedef int int32_t;
typedef unsigned long long uint64_t;
#else
#include <stdint.h>
#endif
#else  // host
#include <math.h>
#include <stdint.h>
#include <string.h>
#define SPLAT_FUNC inline
#define SPLAT_DEVICE_MEM
#define SPLAT_CONST_MEM
#define SPLAT_TG_MEM
#define SPLAT_THREAD
#define SPLAT_STATIC_ASSERT(c, m) static_assert(c, m)
#define SPLAT_UNROLL
#endif

// ---------------------------------------------------------------------------
// Small vector types with identical layout on every target (plain floats: no
// 16-byte float3 as in MSL). Used in registers; shared structs hold scalars.
// ---------------------------------------------------------------------------
struct vec2 {
  float x, y;
};
struct vec3 {
  float x, y, z;
};
struct vec4 {
  float x, y, z, w;
};

SPLAT_FUNC vec2 make_vec2(float x, float y) {
  vec2 r;
  r.x = x;
  r.y = y;
  return r;
}
SPLAT_FUNC vec3 make_vec3(float x, float y, float z) {
  vec3 r;
  r.x = x;
  r.y = y;
  r.z = z;
  return r;
}
SPLAT_FUNC vec4 make_vec4(float x, float y, float z, float w) {
  vec4 r;
  r.x = x;
  r.y = y;
  r.z = z;
  r.w = w;
  return r;
}
SPLAT_FUNC vec2 operator+(vec2 a, vec2 b) { return make_vec2(a.x + b.x, a.y + b.y); }
SPLAT_FUNC vec2 operator-(vec2 a, vec2 b) { return make_vec2(a.x - b.x, a.y - b.y); }
SPLAT_FUNC vec2 operator*(float s, vec2 a) { return make_vec2(s * a.x, s * a.y); }
SPLAT_FUNC vec3 operator+(vec3 a, vec3 b) { return make_vec3(a.x + b.x, a.y + b.y, a.z + b.z); }
SPLAT_FUNC vec3 operator-(vec3 a, vec3 b) { return make_vec3(a.x - b.x, a.y - b.y, a.z - b.z); }
SPLAT_FUNC vec3 operator*(float s, vec3 a) { return make_vec3(s * a.x, s * a.y, s * a.z); }
SPLAT_FUNC vec3 operator*(vec3 a, vec3 b) { return make_vec3(a.x * b.x, a.y * b.y, a.z * b.z); }
SPLAT_FUNC float dot(vec3 a, vec3 b) { return a.x * b.x + a.y * b.y + a.z * b.z; }

// ---------------------------------------------------------------------------
// Math. Precise (non-fast) functions on every target: Metal libraries are
// built with -fno-fast-math, NVRTC without --use_fast_math.
// ---------------------------------------------------------------------------
#if defined(SPLAT_TARGET_METAL)
SPLAT_FUNC float sp_exp(float x) { return metal::precise::exp(x); }
SPLAT_FUNC float sp_log(float x) { return metal::precise::log(x); }
SPLAT_FUNC float sp_cos(float x) { return metal::precise::cos(x); }
SPLAT_FUNC float sp_sqrt(float x) { return metal::precise::sqrt(x); }
SPLAT_FUNC float sp_rsqrt(float x) { return 1.0f / metal::precise::sqrt(x); }
SPLAT_FUNC float sp_floor(float x) { return metal::floor(x); }
SPLAT_FUNC float sp_ceil(float x) { return metal::ceil(x); }
SPLAT_FUNC float sp_min(float a, float b) { return metal::fmin(a, b); }
SPLAT_FUNC float sp_max(float a, float b) { return metal::fmax(a, b); }
SPLAT_FUNC int sp_mini(int a, int b) { return metal::min(a, b); }
SPLAT_FUNC int sp_maxi(int a, int b) { return metal::max(a, b); }
SPLAT_FUNC uint32_t sp_float_bits(float x) { return as_type<uint32_t>(x); }
SPLAT_FUNC float sp_bits_float(uint32_t u) { return as_type<float>(u); }
#elif defined(SPLAT_TARGET_CUDA)
SPLAT_FUNC float sp_exp(float x) { return expf(x); }
SPLAT_FUNC float sp_log(float x) { return logf(x); }
SPLAT_FUNC float sp_cos(float x) { return cosf(x); }
SPLAT_FUNC float sp_sqrt(float x) { return sqrtf(x); }
SPLAT_FUNC float sp_rsqrt(float x) { return 1.0f / sqrtf(x); }
SPLAT_FUNC float sp_floor(float x) { return floorf(x); }
SPLAT_FUNC float sp_ceil(float x) { return ceilf(x); }
SPLAT_FUNC float sp_min(float a, float b) { return fminf(a, b); }
SPLAT_FUNC float sp_max(float a, float b) { return fmaxf(a, b); }
SPLAT_FUNC int sp_mini(int a, int b) { return a < b ? a : b; }
SPLAT_FUNC int sp_maxi(int a, int b) { return a > b ? a : b; }
SPLAT_FUNC uint32_t sp_float_bits(float x) { return __float_as_uint(x); }
SPLAT_FUNC float sp_bits_float(uint32_t u) { return __uint_as_float(u); }
#else
SPLAT_FUNC float sp_exp(float x) { return expf(x); }
SPLAT_FUNC float sp_log(float x) { return logf(x); }
SPLAT_FUNC float sp_cos(float x) { return cosf(x); }
SPLAT_FUNC float sp_sqrt(float x) { return sqrtf(x); }
SPLAT_FUNC float sp_rsqrt(float x) { return 1.0f / sqrtf(x); }
SPLAT_FUNC float sp_floor(float x) { return floorf(x); }
SPLAT_FUNC float sp_ceil(float x) { return ceilf(x); }
// Not fminf: libm calls it out of line; inputs are never NaN here.
SPLAT_FUNC float sp_min(float a, float b) { return b < a ? b : a; }
SPLAT_FUNC float sp_max(float a, float b) { return a < b ? b : a; }
SPLAT_FUNC int sp_mini(int a, int b) { return a < b ? a : b; }
SPLAT_FUNC int sp_maxi(int a, int b) { return a > b ? a : b; }
SPLAT_FUNC uint32_t sp_float_bits(float x) {
  uint32_t u;
  memcpy(&u, &x, sizeof(u));
  return u;
}
SPLAT_FUNC float sp_bits_float(uint32_t u) {
  float x;
  memcpy(&x, &u, sizeof(x));
  return x;
}
#endif
// NaN or infinite, from the exponent bits: immune to fast-math assumptions
// that a value is finite.
SPLAT_FUNC bool sp_nonfinite(float x) { return (sp_float_bits(x) & 0x7f800000u) == 0x7f800000u; }
// The blend's inner-loop math (shaders/common/blend.h): on the GPUs the
// hardware exp approximation (relative error ~1e-7) and fused multiply-adds,
// on CUDA also the hardware reciprocal (a few ulp); on the host the exact
// functions, and a fused multiply-add only where the instruction set has one
// (otherwise a*b + c, one rounding more). Forward and backward blends use the
// same functions, so their decisions (alpha >= 1/255, alpha <= 0.999) agree
// on each target.
#if defined(SPLAT_TARGET_METAL)
SPLAT_FUNC float sp_blend_exp2(float x) { return metal::fast::exp2(x); }
SPLAT_FUNC float sp_blend_div(float a, float b) { return a / b; }  // not measured on Apple GPUs
SPLAT_FUNC float sp_fma(float a, float b, float c) { return metal::fma(a, b, c); }
#elif defined(SPLAT_TARGET_CUDA)
// ex2.approx / rcp.approx with flush-to-zero: one MUFU each, without the
// denormal fix-ups of exp2f and __fdividef (blend arguments stay normal:
// 2^x of [-8.01, 0], reciprocals of [0.001, 1]).
SPLAT_FUNC float sp_blend_exp2(float x) {
  float y;
  asm("ex2.approx.ftz.f32 %0, %1;" : "=f"(y) : "f"(x));
  return y;
}
SPLAT_FUNC float sp_blend_div(float a, float b) {
  float r;
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(b));
  return a * r;
}
// sp_blend_div is a multiply by the hardware reciprocal, which divisions by
// one denominator share: a quotient costs a multiply, less than the
// predicated test that would skip a zero one (the blend's backward).
#define SPLAT_BLEND_DIV_SHARED 1
SPLAT_FUNC float sp_fma(float a, float b, float c) { return __fmaf_rn(a, b, c); }
#else
SPLAT_FUNC float sp_blend_exp2(float x) { return exp2f(x); }
SPLAT_FUNC float sp_blend_div(float a, float b) { return a / b; }
#if defined(__FMA__) || defined(__ARM_FEATURE_FMA)
SPLAT_FUNC float sp_fma(float a, float b, float c) { return fmaf(a, b, c); }
#else
SPLAT_FUNC float sp_fma(float a, float b, float c) { return a * b + c; }
#endif
#endif
#ifndef SPLAT_BLEND_DIV_SHARED
#define SPLAT_BLEND_DIV_SHARED 0
#endif
// Adam's step size over sqrt(v) + eps (adam.h): on CUDA the hardware square
// root and reciprocal (sqrt.approx, rcp.approx: about an ulp each; denormal
// moments flushed, which moves a step by far less than it rounds), where the
// IEEE square root and division made the Adam kernel bound by its arithmetic
// rather than its memory; elsewhere the exact operations (SPLAT_ADAM_EXACT=1,
// an NVRTC define, restores them on CUDA: the A/B).
#ifndef SPLAT_ADAM_EXACT
#define SPLAT_ADAM_EXACT 0
#endif
#if defined(SPLAT_TARGET_CUDA) && !SPLAT_ADAM_EXACT
SPLAT_FUNC float sp_adam_quotient(float num, float v, float rsqrt_bias2, float eps) {
  float s, r;
  asm("sqrt.approx.ftz.f32 %0, %1;" : "=f"(s) : "f"(v));
  asm("rcp.approx.ftz.f32 %0, %1;" : "=f"(r) : "f"(s * rsqrt_bias2 + eps));
  return num * r;
}
#else
SPLAT_FUNC float sp_adam_quotient(float num, float v, float rsqrt_bias2, float eps) {
  return num / (sp_sqrt(v) * rsqrt_bias2 + eps);
}
#endif
// A square root inside a bound that a margin already widens (the tile blocks
// a splat reaches, tile_cover.h): the hardware's on the GPUs (about an ulp;
// the bound's margin is some 1% of the extent), the exact one on the host.
#if defined(SPLAT_TARGET_CUDA)
SPLAT_FUNC float sp_bound_sqrt(float x) {
  float s;
  asm("sqrt.approx.ftz.f32 %0, %1;" : "=f"(s) : "f"(x));
  return s;
}
#elif defined(SPLAT_TARGET_METAL)
SPLAT_FUNC float sp_bound_sqrt(float x) { return metal::fast::sqrt(x); }
#else
SPLAT_FUNC float sp_bound_sqrt(float x) { return sp_sqrt(x); }
#endif
SPLAT_FUNC float sp_clamp(float x, float lo, float hi) { return sp_min(sp_max(x, lo), hi); }
SPLAT_FUNC float sp_sigmoid(float x) { return 1.0f / (1.0f + sp_exp(-x)); }

// ---------------------------------------------------------------------------
// SIMD-group (warp) operations, barriers and atomics: only for the SIMT
// targets (Metal, CUDA), defined below; the host build never sees them.
// ---------------------------------------------------------------------------
//
// Convention shared by every SIMT kernel body (shaders/kernels):
//   - SIMD groups are 32 lanes wide on both targets (Apple GPUs and NVIDIA
//     warps); threadgroups are 1D, a multiple of 32 threads.
//   - SIMD-group operations are called in uniform control flow: every lane of
//     the group reaches the call (inactive lanes pass neutral values).
//   - Threadgroup arrays are declared by the entry points (MSL allows them only
//     at kernel scope) with SPLAT_TG_ARRAY (SPLAT_TG_QUADS for float arrays
//     read as 16-byte quads or 8-byte pairs) and passed to the bodies as
//     SPLAT_TG_MEM pointers.
//   - Specialization constants are compile-time values (CUDA: -D defines;
//     Metal: function constants) used in plain `if`s that the compiler folds.
// ---------------------------------------------------------------------------
#define SPLAT_SIMD_WIDTH 32

#if defined(SPLAT_TARGET_METAL) || defined(SPLAT_TARGET_CUDA)
#define SPLAT_SIMT 1

// Where one thread sits in the launch (all 1D).
struct SimtThread {
  uint32_t tid;         // thread index in the threadgroup
  uint32_t group;       // threadgroup index in the grid
  uint32_t group_size;  // threads per threadgroup
  uint32_t lane;        // lane in the SIMD group (0..31)
  uint32_t warp;        // SIMD group index in the threadgroup
};
#endif

#if defined(SPLAT_TARGET_METAL)
// Builtins used as is: simd_sum, simd_max, simd_or, simd_any, simd_shuffle,
// simd_shuffle_xor, simd_prefix_exclusive_sum.
#define SPLAT_TG_ARRAY(type, name, count) threadgroup type name[count]
// A threadgroup float array of `count` floats (a multiple of 4) aligned for
// load_tg_float4 / store_tg_float4: declared as quads, used as floats.
#define SPLAT_TG_QUADS(name, count)                   \
  SPLAT_TG_ARRAY(float4, name##_quads_, (count) / 4); \
  threadgroup float* name = (threadgroup float*)name##_quads_
#define SPLAT_THREAD_ATTRS                                                   \
  uint splat_tid_ [[thread_index_in_threadgroup]],                           \
      uint splat_group_ [[threadgroup_position_in_grid]],                    \
      uint splat_group_size_ [[threads_per_threadgroup]],                    \
      uint splat_lane_ [[thread_index_in_simdgroup]],                        \
      uint splat_warp_ [[simdgroup_index_in_threadgroup]]
#define SPLAT_THREAD_CTX() \
  SimtThread { splat_tid_, splat_group_, splat_group_size_, splat_lane_, splat_warp_ }

SPLAT_FUNC void sp_group_barrier() { threadgroup_barrier(mem_flags::mem_threadgroup); }
SPLAT_FUNC void sp_simd_barrier() { simdgroup_barrier(mem_flags::mem_threadgroup); }
// Bit i set when lane i's predicate holds (32-wide groups).
SPLAT_FUNC uint32_t sp_simd_ballot(bool p) {
  return (uint32_t)((simd_vote::vote_t)simd_ballot(p));
}
// CUDA hides the value from its optimiser (below); Metal needs no help.
SPLAT_FUNC uint32_t sp_opaque(uint32_t v) { return v; }
SPLAT_FUNC uint32_t sp_popcount(uint32_t x) { return popcount(x); }
SPLAT_FUNC uint32_t sp_ctz(uint32_t x) { return ctz(x); }
// Quad q of p (16-byte aligned) as one vector load / store.
SPLAT_FUNC vec4 load_float4(device const float* p, uint32_t q) {
  float4 v = ((device const float4*)p)[q];
  return make_vec4(v.x, v.y, v.z, v.w);
}
SPLAT_FUNC void store_float4(device float* p, uint32_t q, float a, float b, float c, float d) {
  float4 v;
  v.x = a;
  v.y = b;
  v.z = c;
  v.w = d;
  ((device float4*)p)[q] = v;
}
SPLAT_FUNC vec4 load_tg_float4(threadgroup const float* p, uint32_t q) {
  float4 v = ((threadgroup const float4*)p)[q];
  return make_vec4(v.x, v.y, v.z, v.w);
}
// Pair i of p (8-byte aligned) as one 64-bit load.
SPLAT_FUNC vec2 load_tg_float2(threadgroup const float* p, uint32_t i) {
  float2 v = ((threadgroup const float2*)p)[i];
  return make_vec2(v.x, v.y);
}
SPLAT_FUNC void store_tg_float4(threadgroup float* p, uint32_t q, vec4 v) {
  float4 w;
  w.x = v.x;
  w.y = v.y;
  w.z = v.z;
  w.w = v.w;
  ((threadgroup float4*)p)[q] = w;
}
// Relaxed float atomic add on device memory; the result is unused.
SPLAT_FUNC void sp_atomic_add(device float* p, float v) {
  atomic_fetch_add_explicit((device atomic_float*)p, v, memory_order_relaxed);
}
// Relaxed integer atomic add (order-independent: the result is the same in any order).
SPLAT_FUNC void sp_atomic_add_u32(device uint32_t* p, uint32_t v) {
  atomic_fetch_add_explicit((device atomic_uint*)p, v, memory_order_relaxed);
}
// Relaxed integer atomic minimum (order-independent likewise).
SPLAT_FUNC void sp_atomic_min_u32(device uint32_t* p, uint32_t v) {
  atomic_fetch_min_explicit((device atomic_uint*)p, v, memory_order_relaxed);
}

#elif defined(SPLAT_TARGET_CUDA)
#define SPLAT_TG_ARRAY(type, name, count) __shared__ type name[count]
#define SPLAT_TG_QUADS(name, count) __shared__ __align__(16) float name[count]
#define SPLAT_THREAD_ATTRS
// Programmatic dependent launch (sm_90 on): a kernel launched with it
// (BackendConfig.kernel_overlap) may start before the kernel ahead of it in
// the stream has finished, so every entry point first waits for that grid to
// complete and its writes to be visible (no-op for a plain launch), then lets
// the next kernel's launch begin: its threadgroups take the SMs this grid's
// tail leaves free and wait there, instead of the launch starting after it.
SPLAT_FUNC void sp_grid_dependency_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
  asm volatile("griddepcontrol.wait;" ::: "memory");
  asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}
#define SPLAT_THREAD_CTX()                                                                           \
  (sp_grid_dependency_wait(),                                                                      \
   SimtThread{(uint32_t)threadIdx.x, (uint32_t)blockIdx.x, (uint32_t)blockDim.x, (uint32_t)threadIdx.x & 31u, \
              (uint32_t)threadIdx.x >> 5})
#define SPLAT_FULL_MASK 0xffffffffu

SPLAT_FUNC void sp_group_barrier() { __syncthreads(); }
SPLAT_FUNC void sp_simd_barrier() { __syncwarp(SPLAT_FULL_MASK); }
SPLAT_FUNC uint32_t sp_simd_ballot(bool p) { return __ballot_sync(SPLAT_FULL_MASK, p); }
// Hides `v` from the optimiser, so a loop keeps it in a register rather than
// recomputing it from the thread id on every iteration.
SPLAT_FUNC uint32_t sp_opaque(uint32_t v) {
  asm volatile("" : "+r"(v));
  return v;
}
SPLAT_FUNC uint32_t sp_popcount(uint32_t x) { return (uint32_t)__popc(x); }
SPLAT_FUNC uint32_t sp_ctz(uint32_t x) { return (uint32_t)(__ffs((int)x) - 1); }
SPLAT_FUNC void sp_atomic_add(float* p, float v) { atomicAdd(p, v); }
SPLAT_FUNC void sp_atomic_add_u32(uint32_t* p, uint32_t v) { atomicAdd(p, v); }
SPLAT_FUNC void sp_atomic_min_u32(uint32_t* p, uint32_t v) { atomicMin(p, v); }
// Quad q of p (16-byte aligned) as one vector load / store.
SPLAT_FUNC vec4 load_float4(const float* p, uint32_t q) {
  float4 v = reinterpret_cast<const float4*>(p)[q];
  return make_vec4(v.x, v.y, v.z, v.w);
}
SPLAT_FUNC void store_float4(float* p, uint32_t q, float a, float b, float c, float d) {
  reinterpret_cast<float4*>(p)[q] = make_float4(a, b, c, d);
}
SPLAT_FUNC vec4 load_tg_float4(const float* p, uint32_t q) { return load_float4(p, q); }
SPLAT_FUNC void store_tg_float4(float* p, uint32_t q, vec4 v) { store_float4(p, q, v.x, v.y, v.z, v.w); }
SPLAT_FUNC vec2 load_tg_float2(const float* p, uint32_t i) {
  float2 v = reinterpret_cast<const float2*>(p)[i];
  return make_vec2(v.x, v.y);
}

// The Metal SIMD-group builtins, with Metal's names and semantics. The
// butterfly leaves the same (bitwise) result in every lane: each step adds two
// values that are already equal across the lanes it pairs, and float addition
// is commutative.
SPLAT_FUNC float simd_sum(float v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(SPLAT_FULL_MASK, v, o);
  return v;
}
SPLAT_FUNC uint32_t simd_sum(uint32_t v) {
  for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(SPLAT_FULL_MASK, v, o);
  return v;
}
SPLAT_FUNC uint32_t simd_max(uint32_t v) {
  for (int o = 16; o > 0; o >>= 1) {
    uint32_t w = __shfl_xor_sync(SPLAT_FULL_MASK, v, o);
    v = w > v ? w : v;
  }
  return v;
}
SPLAT_FUNC float simd_max(float v) {
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(SPLAT_FULL_MASK, v, o));
  return v;
}
// Bitwise or over the SIMD group (a butterfly: __reduce_or_sync needs sm_80).
SPLAT_FUNC uint32_t simd_or(uint32_t v) {
  for (int o = 16; o > 0; o >>= 1) v |= __shfl_xor_sync(SPLAT_FULL_MASK, v, o);
  return v;
}
SPLAT_FUNC bool simd_any(bool p) { return __any_sync(SPLAT_FULL_MASK, p) != 0; }
SPLAT_FUNC bool simd_all(bool p) { return __all_sync(SPLAT_FULL_MASK, p) != 0; }
SPLAT_FUNC float simd_shuffle(float v, uint32_t lane) { return __shfl_sync(SPLAT_FULL_MASK, v, (int)lane); }
SPLAT_FUNC uint32_t simd_shuffle(uint32_t v, uint32_t lane) {
  return __shfl_sync(SPLAT_FULL_MASK, v, (int)lane);
}
SPLAT_FUNC float simd_shuffle_xor(float v, uint32_t mask) { return __shfl_xor_sync(SPLAT_FULL_MASK, v, (int)mask); }
// Sum of the values of the lanes below this one.
SPLAT_FUNC uint32_t simd_prefix_exclusive_sum(uint32_t v) {
  uint32_t lane = threadIdx.x & 31u;
  uint32_t incl = v;
  for (int o = 1; o < 32; o <<= 1) {
    uint32_t w = __shfl_up_sync(SPLAT_FULL_MASK, incl, o);
    if (lane >= (uint32_t)o) incl += w;
  }
  return incl - v;
}
#endif
