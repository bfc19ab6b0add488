// MSL shim: atomic types and functions (MSL spec 2.6, 6.15). Objects live in
// device or threadgroup memory and are passed as (volatile) pointers; MSL 3.0
// knows only memory_order_relaxed. atomic_float supports load, store,
// exchange, compare-exchange, fetch_add and fetch_sub.
#pragma once
#include "types.h"

namespace metal {

enum memory_order { memory_order_relaxed = 0 };

// Atomic objects are only reached through pointers to device or threadgroup
// memory (MSL has no atomic objects in thread memory).
template <class T>
struct atomic {
  T __value;
};
typedef atomic<int> atomic_int;
typedef atomic<uint> atomic_uint;
typedef atomic<bool> atomic_bool;
typedef atomic<float> atomic_float;

template <class T>
constexpr bool __msl_atomic_int = is_same<T, int>::value || is_same<T, uint>::value;
template <class T>
constexpr bool __msl_atomic_any = __msl_atomic_int<T> || is_same<T, float>::value || is_same<T, bool>::value;
template <class T>
constexpr bool __msl_atomic_add = __msl_atomic_int<T> || is_same<T, float>::value;

#define SPLAT_MSL_ATOMIC_FUNCTIONS(AS)                                                                            \
  template <class T, class = enable_if_t<__msl_atomic_any<T>>>                                                   \
  void atomic_store_explicit(volatile AS atomic<T>* object, T desired, memory_order order);                     \
  template <class T, class = enable_if_t<__msl_atomic_any<T>>>                                                   \
  T atomic_load_explicit(const volatile AS atomic<T>* object, memory_order order);                              \
  template <class T, class = enable_if_t<__msl_atomic_any<T>>>                                                   \
  T atomic_exchange_explicit(volatile AS atomic<T>* object, T desired, memory_order order);                     \
  template <class T, class = enable_if_t<__msl_atomic_any<T>>>                                                   \
  bool atomic_compare_exchange_weak_explicit(volatile AS atomic<T>* object, thread T* expected, T desired,       \
                                             memory_order success, memory_order failure);                       \
  template <class T, class = enable_if_t<__msl_atomic_add<T>>>                                                   \
  T atomic_fetch_add_explicit(volatile AS atomic<T>* object, T operand, memory_order order);                    \
  template <class T, class = enable_if_t<__msl_atomic_add<T>>>                                                   \
  T atomic_fetch_sub_explicit(volatile AS atomic<T>* object, T operand, memory_order order);                    \
  template <class T, class = enable_if_t<__msl_atomic_int<T>>>                                                   \
  T atomic_fetch_and_explicit(volatile AS atomic<T>* object, T operand, memory_order order);                    \
  template <class T, class = enable_if_t<__msl_atomic_int<T>>>                                                   \
  T atomic_fetch_or_explicit(volatile AS atomic<T>* object, T operand, memory_order order);                     \
  template <class T, class = enable_if_t<__msl_atomic_int<T>>>                                                   \
  T atomic_fetch_xor_explicit(volatile AS atomic<T>* object, T operand, memory_order order);                    \
  template <class T, class = enable_if_t<__msl_atomic_int<T>>>                                                   \
  T atomic_fetch_min_explicit(volatile AS atomic<T>* object, T operand, memory_order order);                    \
  template <class T, class = enable_if_t<__msl_atomic_int<T>>>                                                   \
  T atomic_fetch_max_explicit(volatile AS atomic<T>* object, T operand, memory_order order);
SPLAT_MSL_ATOMIC_FUNCTIONS(device)
SPLAT_MSL_ATOMIC_FUNCTIONS(threadgroup)
#undef SPLAT_MSL_ATOMIC_FUNCTIONS

}  // namespace metal
