// CUDA entry points (NVRTC): projection + SH backward per Gaussian (one view,
// or several views rasterized together), the same with the Adam step fused
// after it, and the SH gradient's expansion from its factors.
// Specialization: SPLAT_SPEC_DETERMINISTIC.
#include "project.h"
#include "train_project_adam.h"

extern "C" __global__ void __launch_bounds__(SPLAT_GROUP_SIZE)
    splat_project_backward(CameraParams cam, RasterParams rp, const float* means, const float* log_scales,
                           const float* quats, const float* sh, const SplatRecord* records, const int32_t* radius,
                           const float* accum, const uint32_t* pair_ranges, float* d_means, float* d_log_scales,
                           float* d_quats, float* d_opacity_logits, float* sh_factors, float* d_means2d) {
  project_backward_body(SPLAT_THREAD_CTX(), cam, rp, means, log_scales, quats, sh, records, radius, accum, pair_ranges,
                        d_means, d_log_scales, d_quats, d_opacity_logits, sh_factors, d_means2d);
}

extern "C" __global__ void __launch_bounds__(SPLAT_GROUP_SIZE)
    splat_project_backward_views(ViewsParams b, RasterParams rp, const float* means, const float* log_scales,
                                 const float* quats, const float* sh, const SplatRecord* records, const int32_t* radius,
                                 const float* accum, const uint32_t* pair_ranges, float* d_means, float* d_log_scales,
                                 float* d_quats, float* d_opacity_logits, float* sum_means, float* sum_log_scales,
                                 float* sum_quats, float* sum_opacity_logits, float* sh_factors, float* d_means2d,
                                 float* grad_accum, float* grad_count, float* max_radii) {
  project_backward_views_body(SPLAT_THREAD_CTX(), b, rp, means, log_scales, quats, sh, records, radius, accum,
                              pair_ranges, d_means, d_log_scales, d_quats, d_opacity_logits, sum_means, sum_log_scales,
                              sum_quats, sum_opacity_logits, sh_factors, d_means2d, grad_accum, grad_count, max_radii);
}

extern "C" __global__ void __launch_bounds__(SPLAT_GROUP_SIZE)
    splat_expand_sh_grad(ShGradParams p, const float* sh_factors, float* d_sh) {
  expand_sh_grad_body(SPLAT_THREAD_CTX(), p, sh_factors, d_sh);
}

extern "C" __global__ void __launch_bounds__(SPLAT_GROUP_SIZE)
    splat_project_backward_adam(CameraParams cam, RasterParams rp, AdamParams p, float* means, float* log_scales,
                                float* quats, float* opacity, float* sh, float* m_means, float* m_log_scales,
                                float* m_quats, float* m_opacity, float* m_sh, float* v_means, float* v_log_scales,
                                float* v_quats, float* v_opacity, float* v_sh, const SplatRecord* records,
                                const int32_t* radius, const float* accum, const uint32_t* pair_ranges,
                                float* d_means, float* d_log_scales, float* d_quats, float* d_opacity_logits,
                                float* sh_factors, float* d_means2d) {
  project_adam_body(SPLAT_THREAD_CTX(), cam, rp, p, means, log_scales, quats, opacity, sh, m_means, m_log_scales,
                    m_quats, m_opacity, m_sh, v_means, v_log_scales, v_quats, v_opacity, v_sh, records, radius, accum,
                    pair_ranges, d_means, d_log_scales, d_quats, d_opacity_logits, sh_factors, d_means2d);
}
