// MSL shim: math functions (MSL spec 6.5), in metal::, metal::precise:: and
// metal::fast:: (the last two only for float types). Declarations only; each
// overload set accepts what the specification lists and nothing else.
#pragma once
#include "types.h"

#define SPLAT_MSL_F template <class T, class = enable_if_t<__msl_floating<T>>>
#define SPLAT_MSL_UNARY(name) SPLAT_MSL_F T name(T x);
#define SPLAT_MSL_BINARY(name) SPLAT_MSL_F T name(T x, T y);
#define SPLAT_MSL_FLOAT_FUNCTIONS                                                                         \
  SPLAT_MSL_UNARY(acos) SPLAT_MSL_UNARY(acosh) SPLAT_MSL_UNARY(asin) SPLAT_MSL_UNARY(asinh)               \
  SPLAT_MSL_UNARY(atan) SPLAT_MSL_UNARY(atanh) SPLAT_MSL_UNARY(ceil) SPLAT_MSL_UNARY(cos)                 \
  SPLAT_MSL_UNARY(cosh) SPLAT_MSL_UNARY(cospi) SPLAT_MSL_UNARY(exp) SPLAT_MSL_UNARY(exp2)                 \
  SPLAT_MSL_UNARY(exp10) SPLAT_MSL_UNARY(fabs) SPLAT_MSL_UNARY(floor) SPLAT_MSL_UNARY(fract)              \
  SPLAT_MSL_UNARY(log) SPLAT_MSL_UNARY(log2) SPLAT_MSL_UNARY(log10) SPLAT_MSL_UNARY(rint)                 \
  SPLAT_MSL_UNARY(round) SPLAT_MSL_UNARY(rsqrt) SPLAT_MSL_UNARY(sin) SPLAT_MSL_UNARY(sinh)                 \
  SPLAT_MSL_UNARY(sinpi) SPLAT_MSL_UNARY(sqrt) SPLAT_MSL_UNARY(tan) SPLAT_MSL_UNARY(tanh)                 \
  SPLAT_MSL_UNARY(tanpi) SPLAT_MSL_UNARY(trunc) SPLAT_MSL_UNARY(saturate) SPLAT_MSL_BINARY(atan2)         \
  SPLAT_MSL_BINARY(copysign) SPLAT_MSL_BINARY(fdim) SPLAT_MSL_BINARY(fmax) SPLAT_MSL_BINARY(fmin)         \
  SPLAT_MSL_BINARY(fmod) SPLAT_MSL_BINARY(pow) SPLAT_MSL_BINARY(powr) SPLAT_MSL_BINARY(step)              \
  SPLAT_MSL_F T fma(T a, T b, T c);                                                                       \
  SPLAT_MSL_F T mix(T x, T y, T a);                                                                       \
  SPLAT_MSL_F T smoothstep(T edge0, T edge1, T x);                                                        \
  SPLAT_MSL_F T ldexp(T x, int k);                                                                        \
  SPLAT_MSL_F T sincos(T x, thread T& cosval);                                                            \
  SPLAT_MSL_F T modf(T x, thread T& intval);

namespace metal {
SPLAT_MSL_FLOAT_FUNCTIONS
SPLAT_MSL_UNARY(sign)
SPLAT_MSL_F bool isnan(T x);
SPLAT_MSL_F bool isinf(T x);
SPLAT_MSL_F bool isfinite(T x);
SPLAT_MSL_F bool signbit(T x);
// Geometric functions (MSL spec 6.6) on float vectors.
template <class T, class = enable_if_t<__msl_floating<T> && __is_vec<T>::value>>
typename __scalar_of<T>::type dot(T x, T y);
template <class T, class = enable_if_t<__msl_floating<T> && __is_vec<T>::value>>
typename __scalar_of<T>::type length(T x);
template <class T, class = enable_if_t<__msl_floating<T> && __is_vec<T>::value>>
typename __scalar_of<T>::type length_squared(T x);
template <class T, class = enable_if_t<__msl_floating<T> && __is_vec<T>::value>>
typename __scalar_of<T>::type distance(T x, T y);
template <class T, class = enable_if_t<__msl_floating<T> && __is_vec<T>::value>>
T normalize(T x);
float3 cross(float3 x, float3 y);
half3 cross(half3 x, half3 y);

namespace precise {
SPLAT_MSL_FLOAT_FUNCTIONS
}  // namespace precise
namespace fast {
SPLAT_MSL_FLOAT_FUNCTIONS
}  // namespace fast
}  // namespace metal

#undef SPLAT_MSL_FLOAT_FUNCTIONS
#undef SPLAT_MSL_BINARY
#undef SPLAT_MSL_UNARY
#undef SPLAT_MSL_F
