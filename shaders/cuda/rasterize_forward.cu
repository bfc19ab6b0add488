// CUDA entry point (NVRTC): forward rasterization, one threadgroup per tile.
#include "rasterize_forward.h"

extern "C" __global__ void __launch_bounds__(SPLAT_GROUP_SIZE)
    splat_rasterize_forward(CameraParams cam, RasterParams rp, const uint32_t* ranges, const uint32_t* sorted_ids,
                            const SplatRecord* records, float* image, float* alpha, float* final_T,
                            uint32_t* n_contrib, float* checkpoints, uint32_t* chunk_tiles) {
  SPLAT_TG_ARRAY(float, s_splats, SPLAT_GROUP_SIZE * SPLAT_BATCH_FLOATS);
  SPLAT_TG_ARRAY(uint32_t, s_flags, SPLAT_GROUP_WARPS);
  rasterize_forward_body(SPLAT_THREAD_CTX(), cam, rp, ranges, sorted_ids, records, image, alpha, final_T, n_contrib,
                         checkpoints, chunk_tiles, s_splats, s_flags);
}
