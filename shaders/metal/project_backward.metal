// Metal entry points: projection + SH backward per Gaussian (alone, or with
// the training step's Adam folded in), and the SH gradient's expansion from
// its factors.
// Function constant: splat_fc_deterministic (index 4).
#include "function_constants.h"
#include "project.h"
#include "train_fused_adam.h"

kernel void splat_project_backward(constant CameraParams& cam [[buffer(0)]], constant RasterParams& rp [[buffer(1)]],
                                   device const float* means [[buffer(2)]],
                                   device const float* log_scales [[buffer(3)]],
                                   device const float* quats [[buffer(4)]], device const float* sh [[buffer(5)]],
                                   device const SplatRecord* records [[buffer(6)]],
                                   device const int32_t* radius [[buffer(7)]], device const float* accum [[buffer(8)]],
                                   device const uint32_t* pair_ranges [[buffer(9)]], device float* d_means [[buffer(10)]],
                                   device float* d_log_scales [[buffer(11)]], device float* d_quats [[buffer(12)]],
                                   device float* d_opacity_logits [[buffer(13)]], device float* sh_factors [[buffer(14)]],
                                   device float* d_means2d [[buffer(15)]], SPLAT_THREAD_ATTRS) {
  project_backward_body(SPLAT_THREAD_CTX(), cam, rp, means, log_scales, quats, sh, records, radius, accum, pair_ranges,
                        d_means, d_log_scales, d_quats, d_opacity_logits, sh_factors, d_means2d);
}

kernel void splat_project_backward_adam(
    constant CameraParams& cam [[buffer(0)]], constant RasterParams& rp [[buffer(1)]],
    constant AdamParams& p [[buffer(2)]], device float* means [[buffer(3)]], device float* log_scales [[buffer(4)]],
    device float* quats [[buffer(5)]], device float* opacity [[buffer(6)]], device float* sh [[buffer(7)]],
    device const SplatRecord* records [[buffer(8)]], device const int32_t* radius [[buffer(9)]],
    device const float* accum [[buffer(10)]], device const uint32_t* pair_ranges [[buffer(11)]],
    device float* m_means [[buffer(12)]], device float* m_log_scales [[buffer(13)]], device float* m_quats [[buffer(14)]],
    device float* m_opacity [[buffer(15)]], device float* m_sh [[buffer(16)]], device float* v_means [[buffer(17)]],
    device float* v_log_scales [[buffer(18)]], device float* v_quats [[buffer(19)]],
    device float* v_opacity [[buffer(20)]], device float* v_sh [[buffer(21)]], device float* d_means2d [[buffer(22)]],
    SPLAT_THREAD_ATTRS) {
  SPLAT_TG_ARRAY(float, s_grads, SPLAT_FUSED_GRAD_ROWS * SPLAT_GROUP_SIZE);
  SPLAT_TG_ARRAY(uint32_t, s_seen, SPLAT_GROUP_SIZE);
  project_backward_adam_body(SPLAT_THREAD_CTX(), cam, rp, p, means, log_scales, quats, opacity, sh, records, radius,
                             accum, pair_ranges, m_means, m_log_scales, m_quats, m_opacity, m_sh, v_means,
                             v_log_scales, v_quats, v_opacity, v_sh, d_means2d, s_grads, s_seen);
}

kernel void splat_expand_sh_grad(constant ShGradParams& p [[buffer(0)]], device const float* sh_factors [[buffer(1)]],
                                 device float* d_sh [[buffer(2)]], SPLAT_THREAD_ATTRS) {
  expand_sh_grad_body(SPLAT_THREAD_CTX(), p, sh_factors, d_sh);
}
