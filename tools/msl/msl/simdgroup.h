// MSL shim: SIMD-group functions (MSL spec 6.9.2). T is a scalar or vector of
// float, half, int, uint, short, ushort (char, uchar for the shuffles);
// bitwise reductions take integers only.
#pragma once
#include "types.h"

namespace metal {

class simd_vote {
 public:
  typedef uint64_t vote_t;
  explicit constexpr simd_vote(vote_t v = 0) : v_(v) {}
  explicit constexpr operator vote_t() const { return v_; }
  bool all() const;
  bool any() const;

 private:
  vote_t v_;
};

#define SPLAT_MSL_A template <class T, class = enable_if_t<__msl_arith<T>>>
#define SPLAT_MSL_I template <class T, class = enable_if_t<__msl_integral<T>>>
SPLAT_MSL_A T simd_sum(T data);
SPLAT_MSL_A T simd_product(T data);
SPLAT_MSL_A T simd_max(T data);
SPLAT_MSL_A T simd_min(T data);
SPLAT_MSL_I T simd_and(T data);
SPLAT_MSL_I T simd_or(T data);
SPLAT_MSL_I T simd_xor(T data);
SPLAT_MSL_A T simd_prefix_exclusive_sum(T data);
SPLAT_MSL_A T simd_prefix_inclusive_sum(T data);
SPLAT_MSL_A T simd_prefix_exclusive_product(T data);
SPLAT_MSL_A T simd_prefix_inclusive_product(T data);
SPLAT_MSL_A T simd_broadcast(T data, ushort broadcast_lane_id);
SPLAT_MSL_A T simd_broadcast_first(T data);
SPLAT_MSL_A T simd_shuffle(T data, ushort simd_lane_id);
SPLAT_MSL_A T simd_shuffle_xor(T data, ushort mask);
SPLAT_MSL_A T simd_shuffle_up(T data, ushort delta);
SPLAT_MSL_A T simd_shuffle_down(T data, ushort delta);
SPLAT_MSL_A T simd_shuffle_rotate_up(T data, ushort delta);
SPLAT_MSL_A T simd_shuffle_rotate_down(T data, ushort delta);
SPLAT_MSL_A T simd_shuffle_and_fill_up(T data, T filling_data, ushort delta);
SPLAT_MSL_A T simd_shuffle_and_fill_down(T data, T filling_data, ushort delta);
#undef SPLAT_MSL_I
#undef SPLAT_MSL_A
bool simd_all(bool expr);
bool simd_any(bool expr);
simd_vote simd_ballot(bool expr);
simd_vote simd_active_threads_mask();
bool simd_is_first();

}  // namespace metal
