// CUDA entry points (NVRTC): projection + SH backward per Gaussian (one view,
// or several views rasterized together), and the SH gradient's expansion from
// its factors.
// Specialization: SPLAT_SPEC_DETERMINISTIC.
#include "project.h"

extern "C" __global__ void __launch_bounds__(SPLAT_GROUP_SIZE)
    splat_project_backward(CameraParams cam, RasterParams rp, const float* means, const float* log_scales,
                           const float* quats, const float* color_jac,
                           const SplatRecord* records, const int32_t* radius,
                           const float* accum, const uint32_t* pair_ranges, float* d_means, float* d_log_scales,
                           float* d_quats, float* d_opacity_logits, float* sh_factors, float* d_means2d) {
  project_backward_body(SPLAT_THREAD_CTX(), cam, rp, means, log_scales, quats, color_jac, records, radius, accum,
                        pair_ranges, d_means, d_log_scales, d_quats, d_opacity_logits, sh_factors, d_means2d);
}

extern "C" __global__ void __launch_bounds__(SPLAT_GROUP_SIZE)
    splat_project_backward_views(ViewsParams b, RasterParams rp, const float* means, const float* log_scales,
                                 const float* quats, const float* color_jac,
                                 const SplatRecord* records, const int32_t* radius,
                                 const float* accum, const uint32_t* pair_ranges, float* d_means, float* d_log_scales,
                                 float* d_quats, float* d_opacity_logits, float* sum_means, float* sum_log_scales,
                                 float* sum_quats, float* sum_opacity_logits, float* sh_factors, float* d_means2d,
                                 float* grad_accum, float* grad_count, float* max_radii) {
  project_backward_views_body(SPLAT_THREAD_CTX(), b, rp, means, log_scales, quats, color_jac, records, radius, accum,
                              pair_ranges, d_means, d_log_scales, d_quats, d_opacity_logits, sum_means, sum_log_scales,
                              sum_quats, sum_opacity_logits, sh_factors, d_means2d, grad_accum, grad_count, max_radii);
}

extern "C" __global__ void __launch_bounds__(SPLAT_GROUP_SIZE)
    splat_expand_sh_grad(ShGradParams p, const float* sh_factors, float* d_sh) {
  expand_sh_grad_body(SPLAT_THREAD_CTX(), p, sh_factors, d_sh);
}
