// Metal entry point: backward rasterization, one threadgroup per chunk.
// Function constants (function_constants.h): bwd_reduce, bwd_range,
// bwd_sparse, bwd_atomic, deterministic, absgrad. Threadgroup arrays cannot be sized
// by function constants, so the reduction scratch is reserved at its largest
// (~24 KB in all, within the 32 KB Apple GPUs give a threadgroup).
#include "function_constants.h"
#include "rasterize_backward.h"

kernel void splat_rasterize_backward(constant CameraParams& cam [[buffer(0)]], constant RasterParams& rp [[buffer(1)]],
                                     constant BackwardParams& bp [[buffer(2)]],
                                     device const uint32_t* ranges [[buffer(3)]],
                                     device const uint32_t* sorted_ids [[buffer(4)]],
                                     device const SplatRecord* records [[buffer(5)]],
                                     device const float* final_T [[buffer(6)]],
                                     device const uint32_t* n_contrib [[buffer(7)]],
                                     device const float* checkpoints [[buffer(8)]],
                                     device const uint32_t* chunk_tiles [[buffer(9)]],
                                     device const float* d_image [[buffer(10)]],
                                     device const float* d_alpha [[buffer(11)]],
                                     device const CoverRecord* covers [[buffer(12)]],
                                     device const uint32_t* pair_ranges [[buffer(13)]], device float* grads [[buffer(14)]],
                                     device float* abs_grads [[buffer(15)]], SPLAT_THREAD_ATTRS) {
  SPLAT_TG_QUADS(s_splats, SPLAT_GROUP_SIZE * SPLAT_BATCH_FLOATS);
  SPLAT_TG_ARRAY(uint32_t, s_ids, SPLAT_GROUP_SIZE);
  SPLAT_TG_ARRAY(uint32_t, s_warp, SPLAT_BWD_WARPS + 1);
  SPLAT_TG_ARRAY(float, s_red, SPLAT_BWD_RED_FLOATS);
  SPLAT_TG_ARRAY(float, s_part, SPLAT_BWD_PART_FLOATS);
  SPLAT_TG_ARRAY(uint32_t, s_live, SPLAT_GROUP_SIZE);
  rasterize_backward_body(SPLAT_THREAD_CTX(), cam, rp, bp, ranges, sorted_ids, records, final_T, n_contrib,
                          checkpoints, chunk_tiles, d_image, d_alpha, covers, pair_ranges, grads, abs_grads, s_splats,
                          s_ids, s_warp, s_red, s_part, s_live);
}
