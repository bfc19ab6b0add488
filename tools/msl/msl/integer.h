// MSL shim: common and integer functions (MSL spec 6.3, 6.4).
#pragma once
#include "types.h"

namespace metal {
#define SPLAT_MSL_A template <class T, class = enable_if_t<__msl_arith<T>>>
#define SPLAT_MSL_I template <class T, class = enable_if_t<__msl_integral<T>>>
SPLAT_MSL_A T min(T x, T y);
SPLAT_MSL_A T max(T x, T y);
SPLAT_MSL_A T clamp(T x, T minval, T maxval);
SPLAT_MSL_A T abs(T x);
SPLAT_MSL_I T absdiff(T x, T y);
SPLAT_MSL_I T addsat(T x, T y);
SPLAT_MSL_I T subsat(T x, T y);
SPLAT_MSL_I T hadd(T x, T y);
SPLAT_MSL_I T rhadd(T x, T y);
SPLAT_MSL_I T mad24(T x, T y, T z);
SPLAT_MSL_I T madhi(T a, T b, T c);
SPLAT_MSL_I T madsat(T a, T b, T c);
SPLAT_MSL_I T mul24(T x, T y);
SPLAT_MSL_I T mulhi(T x, T y);
SPLAT_MSL_I T rotate(T v, T i);
SPLAT_MSL_I T clz(T x);
SPLAT_MSL_I T ctz(T x);
SPLAT_MSL_I T popcount(T x);
SPLAT_MSL_I T reverse_bits(T x);
SPLAT_MSL_I T extract_bits(T x, uint offset, uint bits);
SPLAT_MSL_I T insert_bits(T base, T insert, uint offset, uint bits);
// Relational (MSL spec 6.5 table 6.4): select(a, b, c) = c ? b : a.
SPLAT_MSL_A T select(T a, T b, bool c);
bool all(bool x);
bool any(bool x);
#undef SPLAT_MSL_I
#undef SPLAT_MSL_A
}  // namespace metal
