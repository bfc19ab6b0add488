// CUDA entry points (NVRTC): the four forward rasterization passes
// (shaders/kernels/rasterize_forward.h).
#include "rasterize_forward.h"

extern "C" __global__ void __launch_bounds__(SPLAT_CHUNK_THREADS)
    splat_rasterize_chunks(CameraParams cam, RasterParams rp, ChunkPassParams cp, const uint32_t* ranges,
                           const uint32_t* sorted_ids, const SplatRecord* records, const uint32_t* chunk_tiles,
                           float* chunk_state, uint32_t* chunk_last, uint32_t* tile_saturated) {
  SPLAT_TG_QUADS(s_splats, SPLAT_GROUP_SIZE * SPLAT_BATCH_FLOATS);
  SPLAT_TG_ARRAY(uint32_t, s_flags, SPLAT_CHUNK_THREADS / SPLAT_SIMD_WIDTH);
  rasterize_chunks_body(SPLAT_THREAD_CTX(), cam, rp, cp, ranges, sorted_ids, records, chunk_tiles, chunk_state,
                        chunk_last, tile_saturated, s_splats, s_flags);
}

extern "C" __global__ void __launch_bounds__(SPLAT_GROUP_SIZE)
    splat_rasterize_forward(CameraParams cam, RasterParams rp, const uint32_t* ranges, float* image, float* alpha,
                            float* final_T, uint32_t* n_contrib, float* chunk_state, const uint32_t* chunk_last,
                            uint32_t* stop_chunk) {
  rasterize_forward_body(SPLAT_THREAD_CTX(), cam, rp, ranges, image, alpha, final_T, n_contrib, chunk_state,
                         chunk_last, stop_chunk);
}

// The walkers' list only where they are gathered (SPLAT_WALK_COMPACT).
#if SPLAT_WALK_COMPACT
#define SPLAT_WALK_WALKERS_SIZE SPLAT_GROUP_SIZE
#else
#define SPLAT_WALK_WALKERS_SIZE 1
#endif

extern "C" __global__ void __launch_bounds__(SPLAT_GROUP_SIZE)
    splat_rasterize_walk(CameraParams cam, RasterParams rp, const uint32_t* ranges, const uint32_t* sorted_ids,
                         const SplatRecord* records, const uint32_t* chunk_tiles, float* image, float* alpha,
                         float* final_T, uint32_t* n_contrib, float* chunk_state, const uint32_t* chunk_last,
                         const uint32_t* stop_chunk) {
  SPLAT_TG_QUADS(s_splats, SPLAT_GROUP_SIZE * SPLAT_BATCH_FLOATS);
  SPLAT_TG_ARRAY(uint32_t, s_flags, SPLAT_GROUP_WARPS + 1);
  SPLAT_TG_ARRAY(uint32_t, s_walkers, SPLAT_WALK_WALKERS_SIZE);
  rasterize_walk_body(SPLAT_THREAD_CTX(), cam, rp, ranges, sorted_ids, records, chunk_tiles, image, alpha, final_T,
                      n_contrib, chunk_state, chunk_last, stop_chunk, s_splats, s_flags, s_walkers);
}

extern "C" __global__ void __launch_bounds__(SPLAT_GROUP_SIZE)
    splat_rasterize_checkpoints(CameraParams cam, RasterParams rp, const uint32_t* ranges, const float* final_T,
                                const uint32_t* n_contrib, float* chunk_state) {
  rasterize_checkpoints_body(SPLAT_THREAD_CTX(), cam, rp, ranges, final_T, n_contrib, chunk_state);
}
