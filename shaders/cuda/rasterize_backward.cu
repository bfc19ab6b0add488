// CUDA entry point (NVRTC): backward rasterization, one threadgroup per chunk.
// Specializations (-D): SPLAT_SPEC_BWD_REDUCE, SPLAT_SPEC_BWD_RANGE,
// SPLAT_SPEC_BWD_SPARSE, SPLAT_SPEC_BWD_ATOMIC, SPLAT_SPEC_DETERMINISTIC,
// SPLAT_SPEC_ABSGRAD; SPLAT_BWD_COMPACT.
#include "rasterize_backward.h"

// Only the variants that reduce through threadgroup memory reserve it.
#if SPLAT_SPEC_DETERMINISTIC || SPLAT_SPEC_BWD_REDUCE == SPLAT_BWD_REDUCE_TG
#define SPLAT_BWD_RED_SIZE SPLAT_BWD_RED_FLOATS
#define SPLAT_BWD_PART_SIZE SPLAT_BWD_PART_FLOATS
#else
#define SPLAT_BWD_RED_SIZE 1
#define SPLAT_BWD_PART_SIZE 1
#endif
#if SPLAT_BWD_COMPACT
#define SPLAT_BWD_LIVE_SIZE SPLAT_GROUP_SIZE
#else
#define SPLAT_BWD_LIVE_SIZE 1
#endif

extern "C" __global__ void __launch_bounds__(SPLAT_BWD_THREADS)
    splat_rasterize_backward(CameraParams cam, RasterParams rp, BackwardParams bp, const uint32_t* ranges,
                             const uint32_t* sorted_ids, const SplatRecord* records, const float* final_T,
                             const uint32_t* n_contrib, const float* checkpoints,
                             const uint32_t* chunk_tiles, const float* d_image, const float* d_alpha,
                             const CoverRecord* covers, const uint32_t* pair_ranges, float* grads,
                             float* abs_grads) {
  SPLAT_TG_QUADS(s_splats, SPLAT_GROUP_SIZE * SPLAT_BATCH_FLOATS);
  SPLAT_TG_ARRAY(uint32_t, s_ids, SPLAT_GROUP_SIZE);
  SPLAT_TG_ARRAY(uint32_t, s_warp, SPLAT_BWD_WARPS + 1);
  SPLAT_TG_ARRAY(float, s_red, SPLAT_BWD_RED_SIZE);
  SPLAT_TG_ARRAY(float, s_part, SPLAT_BWD_PART_SIZE);
  SPLAT_TG_ARRAY(uint32_t, s_live, SPLAT_BWD_LIVE_SIZE);
  rasterize_backward_body(SPLAT_THREAD_CTX(), cam, rp, bp, ranges, sorted_ids, records, final_T, n_contrib,
                          checkpoints, chunk_tiles, d_image, d_alpha, covers, pair_ranges, grads, abs_grads, s_splats,
                          s_ids, s_warp, s_red, s_part, s_live);
}
