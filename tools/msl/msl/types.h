// MSL shim: address spaces, scalar and vector types, as_type (MSL spec 2, 4).
#pragma once

// Address spaces (MSL spec 4). device, constant and threadgroup are distinct
// clang address spaces; thread is the default one, tagged so that the rule
// checker sees that it was written.
#define device __attribute__((address_space(1)))
#define constant __attribute__((address_space(2)))
#define threadgroup __attribute__((address_space(3)))
#define thread __attribute__((btf_type_tag("msl_thread")))

// Scalar types (MSL spec 2.1, table 2.1).
typedef unsigned char uchar;
typedef unsigned short ushort;
typedef unsigned int uint;
typedef unsigned long ulong;
typedef _Float16 half;
typedef signed char int8_t;
typedef unsigned char uint8_t;
typedef short int16_t;
typedef unsigned short uint16_t;
typedef int int32_t;
typedef unsigned int uint32_t;
typedef long int64_t;
typedef unsigned long uint64_t;
typedef decltype(sizeof(0)) size_t;
typedef decltype((int*)0 - (int*)0) ptrdiff_t;

// Vector types (MSL spec 2.2): 2, 3 and 4 components; a 3-component vector
// has the size and alignment of a 4-component one, as in MSL.
#define SPLAT_MSL_VECTORS(T)                               \
  typedef T T##2 __attribute__((ext_vector_type(2)));      \
  typedef T T##3 __attribute__((ext_vector_type(3)));      \
  typedef T T##4 __attribute__((ext_vector_type(4)));
SPLAT_MSL_VECTORS(bool)
SPLAT_MSL_VECTORS(char)
SPLAT_MSL_VECTORS(uchar)
SPLAT_MSL_VECTORS(short)
SPLAT_MSL_VECTORS(ushort)
SPLAT_MSL_VECTORS(int)
SPLAT_MSL_VECTORS(uint)
SPLAT_MSL_VECTORS(long)
SPLAT_MSL_VECTORS(ulong)
SPLAT_MSL_VECTORS(half)
SPLAT_MSL_VECTORS(float)
#undef SPLAT_MSL_VECTORS

namespace metal {

// Type traits the overload sets below are constrained with.
template <bool B, class T = void>
struct enable_if {};
template <class T>
struct enable_if<true, T> {
  typedef T type;
};
template <bool B, class T = void>
using enable_if_t = typename enable_if<B, T>::type;

template <class T, class U>
struct is_same {
  static constexpr bool value = false;
};
template <class T>
struct is_same<T, T> {
  static constexpr bool value = true;
};

template <class T>
struct __scalar_of {
  typedef T type;
};
template <class T, int N>
struct __scalar_of<T __attribute__((ext_vector_type(N)))> {
  typedef T type;
};

template <class T>
struct __is_scalar_float {
  static constexpr bool value = is_same<T, float>::value || is_same<T, half>::value;
};
template <class T>
struct __is_scalar_int {
  static constexpr bool value = is_same<T, char>::value || is_same<T, uchar>::value || is_same<T, short>::value ||
                                is_same<T, ushort>::value || is_same<T, int>::value || is_same<T, uint>::value ||
                                is_same<T, long>::value || is_same<T, ulong>::value ||
                                is_same<T, signed char>::value;
};
template <class T>
struct __is_vec {
  static constexpr bool value = false;
};
template <class T, int N>
struct __is_vec<T __attribute__((ext_vector_type(N)))> {
  static constexpr bool value = true;
};

// float, half and their vectors.
template <class T>
constexpr bool __msl_floating = __is_scalar_float<typename __scalar_of<T>::type>::value;
// the integer types and their vectors.
template <class T>
constexpr bool __msl_integral = __is_scalar_int<typename __scalar_of<T>::type>::value;
template <class T>
constexpr bool __msl_arith = __msl_floating<T> || __msl_integral<T>;

// as_type<T>(x): reinterprets the bits; sizes must match (MSL spec 2.14).
template <class T, class U>
T as_type(U x) {
  static_assert(sizeof(T) == sizeof(U), "as_type: the two types must have the same size");
  return __builtin_bit_cast(T, x);
}

}  // namespace metal
