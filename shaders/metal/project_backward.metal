// Metal entry points: projection + SH backward per Gaussian (one view, or
// several views rasterized together), and the SH gradient's expansion from its
// factors.
// Function constant: splat_fc_deterministic (index 4).
#include "function_constants.h"
#include "project.h"

kernel void splat_project_backward(constant CameraParams& cam [[buffer(0)]], constant RasterParams& rp [[buffer(1)]],
                                   device const float* means [[buffer(2)]],
                                   device const float* log_scales [[buffer(3)]],
                                   device const float* quats [[buffer(4)]], device const float* color_jac [[buffer(5)]],
                                   device const SplatRecord* records [[buffer(6)]],
                                   device const int32_t* radius [[buffer(7)]], device const float* accum [[buffer(8)]],
                                   device const uint32_t* pair_ranges [[buffer(9)]], device float* d_means [[buffer(10)]],
                                   device float* d_log_scales [[buffer(11)]], device float* d_quats [[buffer(12)]],
                                   device float* d_opacity_logits [[buffer(13)]], device float* sh_factors [[buffer(14)]],
                                   device float* d_means2d [[buffer(15)]], SPLAT_THREAD_ATTRS) {
  project_backward_body(SPLAT_THREAD_CTX(), cam, rp, means, log_scales, quats, color_jac, records, radius, accum,
                        pair_ranges, d_means, d_log_scales, d_quats, d_opacity_logits, sh_factors, d_means2d);
}

kernel void splat_project_backward_views(
    constant ViewsParams& b [[buffer(0)]], constant RasterParams& rp [[buffer(1)]],
    device const float* means [[buffer(2)]], device const float* log_scales [[buffer(3)]],
    device const float* quats [[buffer(4)]], device const float* color_jac [[buffer(5)]],
    device const SplatRecord* records [[buffer(6)]], device const int32_t* radius [[buffer(7)]],
    device const float* accum [[buffer(8)]], device const uint32_t* pair_ranges [[buffer(9)]],
    device float* d_means [[buffer(10)]], device float* d_log_scales [[buffer(11)]],
    device float* d_quats [[buffer(12)]], device float* d_opacity_logits [[buffer(13)]],
    device float* sum_means [[buffer(14)]], device float* sum_log_scales [[buffer(15)]],
    device float* sum_quats [[buffer(16)]], device float* sum_opacity_logits [[buffer(17)]],
    device float* sh_factors [[buffer(18)]], device float* d_means2d [[buffer(19)]],
    device float* grad_accum [[buffer(20)]], device float* grad_count [[buffer(21)]],
    device float* max_radii [[buffer(22)]], SPLAT_THREAD_ATTRS) {
  project_backward_views_body(SPLAT_THREAD_CTX(), b, rp, means, log_scales, quats, color_jac, records, radius, accum,
                              pair_ranges, d_means, d_log_scales, d_quats, d_opacity_logits, sum_means, sum_log_scales,
                              sum_quats, sum_opacity_logits, sh_factors, d_means2d, grad_accum, grad_count, max_radii);
}

kernel void splat_expand_sh_grad(constant ShGradParams& p [[buffer(0)]], device const float* sh_factors [[buffer(1)]],
                                 device float* d_sh [[buffer(2)]], SPLAT_THREAD_ATTRS) {
  expand_sh_grad_body(SPLAT_THREAD_CTX(), p, sh_factors, d_sh);
}
