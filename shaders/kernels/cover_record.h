// A visible splat's CoverRecord (params.h): written by projection, read by
// pair emission and the deterministic backward as two 16-byte quads, so that
// walking its covered tiles costs one memory sector a Gaussian.
#pragma once
#include "simt_util.h"
#include "tile_cover.h"

SPLAT_FUNC void store_cover_record(SPLAT_DEVICE_MEM CoverRecord* covers, uint32_t i, vec2 mean2d, vec3 conic,
                                   float opacity, int x0, int y0, int x1, int y1) {
  SPLAT_DEVICE_MEM float* c = (SPLAT_DEVICE_MEM float*)covers;
  store_float4(c, 2u * i, mean2d.x, mean2d.y, conic.x, conic.y);
  store_float4(c, 2u * i + 1u, conic.z, opacity, sp_bits_float((uint32_t)x0 | ((uint32_t)y0 << 16)),
               sp_bits_float((uint32_t)x1 | ((uint32_t)y1 << 16)));
}

// The same TileCover as tile_cover() of the values projection stored.
SPLAT_FUNC TileCover load_tile_cover(SPLAT_DEVICE_MEM const CoverRecord* covers, uint32_t i) {
  SPLAT_DEVICE_MEM const float* c = (SPLAT_DEVICE_MEM const float*)covers;
  const vec4 a = load_float4(c, 2u * i), b = load_float4(c, 2u * i + 1u);
  const uint32_t lo = sp_float_bits(b.z), hi = sp_float_bits(b.w);
  return tile_cover(make_vec2(a.x, a.y), make_vec3(a.z, a.w, b.x), b.y, (int)(lo & 0xffffu), (int)(lo >> 16),
                    (int)(hi & 0xffffu), (int)(hi >> 16));
}
