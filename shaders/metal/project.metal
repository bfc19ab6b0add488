// Metal entry points: per-Gaussian projection (one view, or several views
// rasterized together). Thin wrappers over the shared bodies; buffer indices follow the argument order GpuDevice binds (the same
// order as shaders/cuda/project.cu).
// Includes are by bare file name (shaders/common, shaders/kernels): the Metal
// host compiles an amalgamation with every include inlined.
#include "project.h"

kernel void splat_project_forward(constant CameraParams& cam [[buffer(0)]], constant RasterParams& rp [[buffer(1)]],
                                  device const float* means [[buffer(2)]], device const float* log_scales [[buffer(3)]],
                                  device const float* quats [[buffer(4)]],
                                  device const float* opacity_logits [[buffer(5)]], device const float* sh [[buffer(6)]],
                                  device SplatRecord* records [[buffer(7)]], device int32_t* radius [[buffer(8)]],
                                  device CoverRecord* covers [[buffer(9)]], device uint32_t* pair_count [[buffer(10)]],
                                  device uint32_t* depth_keys [[buffer(11)]], device uint32_t* depth_ids [[buffer(12)]],
                                  device float* color_jac [[buffer(13)]], SPLAT_THREAD_ATTRS) {
  project_forward_body(SPLAT_THREAD_CTX(), cam, rp, means, log_scales, quats, opacity_logits, sh, records, radius,
                       covers, pair_count, depth_keys, depth_ids, color_jac);
}

kernel void splat_project_forward_views(constant ViewsParams& b [[buffer(0)]], constant RasterParams& rp [[buffer(1)]],
                                        device const float* means [[buffer(2)]],
                                        device const float* log_scales [[buffer(3)]],
                                        device const float* quats [[buffer(4)]],
                                        device const float* opacity_logits [[buffer(5)]],
                                        device const float* sh [[buffer(6)]], device SplatRecord* records [[buffer(7)]],
                                        device int32_t* radius [[buffer(8)]], device CoverRecord* covers [[buffer(9)]],
                                        device uint32_t* pair_count [[buffer(10)]],
                                        device uint32_t* depth_keys [[buffer(11)]],
                                        device uint32_t* depth_ids [[buffer(12)]],
                                        device float* color_jac [[buffer(13)]], SPLAT_THREAD_ATTRS) {
  project_forward_views_body(SPLAT_THREAD_CTX(), b, rp, means, log_scales, quats, opacity_logits, sh, records, radius,
                             covers, pair_count, depth_keys, depth_ids, color_jac);
}
