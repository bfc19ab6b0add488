// Grid sizes of SIMT dispatches: threads per threadgroup and the number of
// threadgroups that cover n items.
#pragma once
#include <cstddef>
#include <cstdint>

#include "../../shaders/common/params.h"

namespace splat::gpu {

constexpr uint32_t kGroup = SPLAT_GROUP_SIZE;

inline uint32_t div_up(size_t n, size_t d) { return static_cast<uint32_t>((n + d - 1) / d); }

}  // namespace splat::gpu
