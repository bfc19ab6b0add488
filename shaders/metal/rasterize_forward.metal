// Metal entry points: forward rasterization, chunk pass (one threadgroup per
// chunk) and chain pass (one per tile).
#include "rasterize_forward.h"

kernel void splat_rasterize_chunks(constant CameraParams& cam [[buffer(0)]], constant RasterParams& rp [[buffer(1)]],
                                   device const uint32_t* ranges [[buffer(2)]],
                                   device const uint32_t* sorted_ids [[buffer(3)]],
                                   device const SplatRecord* records [[buffer(4)]],
                                   device const uint32_t* chunk_tiles [[buffer(5)]],
                                   device float* chunk_state [[buffer(6)]], device uint32_t* chunk_last [[buffer(7)]],
                                   SPLAT_THREAD_ATTRS) {
  SPLAT_TG_ARRAY(float, s_splats, SPLAT_GROUP_SIZE * SPLAT_BATCH_FLOATS);
  rasterize_chunks_body(SPLAT_THREAD_CTX(), cam, rp, ranges, sorted_ids, records, chunk_tiles, chunk_state, chunk_last,
                        s_splats);
}

kernel void splat_rasterize_forward(constant CameraParams& cam [[buffer(0)]], constant RasterParams& rp [[buffer(1)]],
                                    device const uint32_t* ranges [[buffer(2)]],
                                    device const uint32_t* sorted_ids [[buffer(3)]],
                                    device const SplatRecord* records [[buffer(4)]], device float* image [[buffer(5)]],
                                    device float* alpha [[buffer(6)]], device float* final_T [[buffer(7)]],
                                    device uint32_t* n_contrib [[buffer(8)]], device float* chunk_state [[buffer(9)]],
                                    device const uint32_t* chunk_last [[buffer(10)]], SPLAT_THREAD_ATTRS) {
  SPLAT_TG_ARRAY(float, s_splats, SPLAT_GROUP_SIZE * SPLAT_BATCH_FLOATS);
  SPLAT_TG_ARRAY(uint32_t, s_flags, SPLAT_GROUP_WARPS);
  rasterize_forward_body(SPLAT_THREAD_CTX(), cam, rp, ranges, sorted_ids, records, image, alpha, final_T, n_contrib,
                         chunk_state, chunk_last, s_splats, s_flags);
}
