// Metal entry points: the four forward rasterization passes
// (shaders/kernels/rasterize_forward.h).
#include "rasterize_forward.h"

kernel void splat_rasterize_chunks(constant CameraParams& cam [[buffer(0)]], constant RasterParams& rp [[buffer(1)]],
                                   constant ChunkPassParams& cp [[buffer(2)]],
                                   device const uint32_t* ranges [[buffer(3)]],
                                   device const uint32_t* sorted_ids [[buffer(4)]],
                                   device const SplatRecord* records [[buffer(5)]],
                                   device const uint32_t* chunk_tiles [[buffer(6)]],
                                   device float* chunk_state [[buffer(7)]], device uint32_t* chunk_last [[buffer(8)]],
                                   device uint32_t* tile_saturated [[buffer(9)]], SPLAT_THREAD_ATTRS) {
  SPLAT_TG_QUADS(s_splats, SPLAT_GROUP_SIZE * SPLAT_BATCH_FLOATS);
  SPLAT_TG_ARRAY(uint32_t, s_flags, SPLAT_CHUNK_THREADS / SPLAT_SIMD_WIDTH);
  rasterize_chunks_body(SPLAT_THREAD_CTX(), cam, rp, cp, ranges, sorted_ids, records, chunk_tiles, chunk_state,
                        chunk_last, tile_saturated, s_splats, s_flags);
}

kernel void splat_rasterize_forward(constant CameraParams& cam [[buffer(0)]], constant RasterParams& rp [[buffer(1)]],
                                    device const uint32_t* ranges [[buffer(2)]], device float* image [[buffer(3)]],
                                    device float* alpha [[buffer(4)]], device float* final_T [[buffer(5)]],
                                    device uint32_t* n_contrib [[buffer(6)]], device float* chunk_state [[buffer(7)]],
                                    device const uint32_t* chunk_last [[buffer(8)]],
                                    device uint32_t* stop_chunk [[buffer(9)]], SPLAT_THREAD_ATTRS) {
  rasterize_forward_body(SPLAT_THREAD_CTX(), cam, rp, ranges, image, alpha, final_T, n_contrib, chunk_state,
                         chunk_last, stop_chunk);
}

kernel void splat_rasterize_walk(constant CameraParams& cam [[buffer(0)]], constant RasterParams& rp [[buffer(1)]],
                                 device const uint32_t* ranges [[buffer(2)]],
                                 device const uint32_t* sorted_ids [[buffer(3)]],
                                 device const SplatRecord* records [[buffer(4)]],
                                 device const uint32_t* chunk_tiles [[buffer(5)]], device float* image [[buffer(6)]],
                                 device float* alpha [[buffer(7)]], device float* final_T [[buffer(8)]],
                                 device uint32_t* n_contrib [[buffer(9)]], device float* chunk_state [[buffer(10)]],
                                 device const uint32_t* chunk_last [[buffer(11)]],
                                 device const uint32_t* stop_chunk [[buffer(12)]], SPLAT_THREAD_ATTRS) {
  SPLAT_TG_QUADS(s_splats, SPLAT_GROUP_SIZE * SPLAT_BATCH_FLOATS);
  SPLAT_TG_ARRAY(uint32_t, s_flags, SPLAT_GROUP_WARPS + 1);
  SPLAT_TG_ARRAY(uint32_t, s_walkers, SPLAT_GROUP_SIZE);
  rasterize_walk_body(SPLAT_THREAD_CTX(), cam, rp, ranges, sorted_ids, records, chunk_tiles, image, alpha, final_T,
                      n_contrib, chunk_state, chunk_last, stop_chunk, s_splats, s_flags, s_walkers);
}

kernel void splat_rasterize_checkpoints(constant CameraParams& cam [[buffer(0)]],
                                        constant RasterParams& rp [[buffer(1)]],
                                        device const uint32_t* ranges [[buffer(2)]],
                                        device const float* final_T [[buffer(3)]],
                                        device const uint32_t* n_contrib [[buffer(4)]],
                                        device float* chunk_state [[buffer(5)]], SPLAT_THREAD_ATTRS) {
  rasterize_checkpoints_body(SPLAT_THREAD_CTX(), cam, rp, ranges, final_T, n_contrib, chunk_state);
}
