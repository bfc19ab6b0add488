// MSL shim: threadgroup and SIMD-group barriers (MSL spec 6.9.1).
#pragma once
#include "types.h"

namespace metal {

enum class mem_flags : uint {
  mem_none = 0,
  mem_device = 1,
  mem_threadgroup = 2,
  mem_texture = 4,
  mem_threadgroup_imageblock = 8,
  mem_object_data = 16,
};
constexpr mem_flags operator|(mem_flags a, mem_flags b) { return mem_flags(uint(a) | uint(b)); }

void threadgroup_barrier(mem_flags flags);
void simdgroup_barrier(mem_flags flags);

}  // namespace metal
