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
#else
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
SPLAT_FUNC uint32_t sp_float_bits(float x) {
  uint32_t u;
  memcpy(&u, &x, sizeof(u));
  return u;
}
#endif
SPLAT_FUNC float sp_clamp(float x, float lo, float hi) { return sp_min(sp_max(x, lo), hi); }
SPLAT_FUNC float sp_sigmoid(float x) { return 1.0f / (1.0f + sp_exp(-x)); }

// ---------------------------------------------------------------------------
// SIMD-group (warp) operations and atomics: only for SIMT targets. Kernels
// include shaders/common/simt.h, which defines them; the host never does.
// ---------------------------------------------------------------------------
