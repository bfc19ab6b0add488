// CUDA entry points (NVRTC): per-Gaussian projection (one view, or several
// views rasterized together). Thin wrappers only; the
// bodies are shaders/kernels, shared with Metal.
#include "project.h"

extern "C" __global__ void __launch_bounds__(SPLAT_GROUP_SIZE)
    splat_project_forward(CameraParams cam, RasterParams rp, const float* means, const float* log_scales,
                          const float* quats, const float* opacity_logits, const float* sh, SplatRecord* records,
                          int32_t* radius, CoverRecord* covers, uint32_t* pair_count, uint32_t* depth_keys,
                          uint32_t* depth_ids, float* color_jac) {
  project_forward_body(SPLAT_THREAD_CTX(), cam, rp, means, log_scales, quats, opacity_logits, sh, records, radius,
                       covers, pair_count, depth_keys, depth_ids, color_jac);
}

extern "C" __global__ void __launch_bounds__(SPLAT_GROUP_SIZE)
    splat_project_forward_views(ViewsParams b, RasterParams rp, const float* means, const float* log_scales,
                                const float* quats, const float* opacity_logits, const float* sh, SplatRecord* records,
                                int32_t* radius, CoverRecord* covers, uint32_t* pair_count, uint32_t* depth_keys,
                                uint32_t* depth_ids, float* color_jac) {
  project_forward_views_body(SPLAT_THREAD_CTX(), b, rp, means, log_scales, quats, opacity_logits, sh, records, radius,
                             covers, pair_count, depth_keys, depth_ids, color_jac);
}
