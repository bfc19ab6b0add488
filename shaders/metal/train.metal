// Metal entry points: the training step's kernels (same argument order as
// shaders/cuda/train.cu; buffer indices follow it).
#include "train_absgrad.h"
#include "train_check.h"
#include "train_densify.h"
#include "train_exposure.h"
#include "train_loss.h"
#include "train_mcmc.h"
#include "train_optim.h"

kernel void splat_ssim_forward(constant LossParams& p [[buffer(0)]], device const float* image [[buffer(1)]],
                               device const uchar* target [[buffer(2)]], device const uchar* mask [[buffer(3)]],
                               device float* partials [[buffer(4)]], device float* tile_sums [[buffer(5)]],
                               SPLAT_THREAD_ATTRS) {
  SPLAT_TG_QUADS(s_in, SPLAT_LOSS_FWD_IN);
  SPLAT_TG_ARRAY(float, s_h, SPLAT_LOSS_FWD_H);
  SPLAT_TG_ARRAY(float, s_red, SPLAT_LOSS_RED);
  ssim_forward_body(SPLAT_THREAD_CTX(), p, image, target, mask, partials, tile_sums, s_in, s_h, s_red);
}

kernel void splat_ssim_backward(constant LossParams& p [[buffer(0)]], device const float* image [[buffer(1)]],
                                device const uchar* target [[buffer(2)]], device const uchar* mask [[buffer(3)]],
                                device const float* partials [[buffer(4)]], device const float* tile_sums [[buffer(5)]],
                                device float* d_image [[buffer(6)]], device float* loss [[buffer(7)]],
                                SPLAT_THREAD_ATTRS) {
  SPLAT_TG_QUADS(s_in, SPLAT_LOSS_BWD_IN);
  SPLAT_TG_ARRAY(float, s_h, SPLAT_LOSS_BWD_H);
  SPLAT_TG_ARRAY(float, s_red, SPLAT_LOSS_RED);
  ssim_backward_body(SPLAT_THREAD_CTX(), p, image, target, mask, partials, tile_sums, d_image, loss, s_in, s_h, s_red);
}

kernel void splat_ssim_forward_views(constant LossViewsParams& b [[buffer(0)]], device const float* image [[buffer(1)]],
                                     device const uchar* targets [[buffer(2)]], device const uchar* masks [[buffer(3)]],
                                     device float* partials [[buffer(4)]], device float* tile_sums [[buffer(5)]],
                                     SPLAT_THREAD_ATTRS) {
  SPLAT_TG_QUADS(s_in, SPLAT_LOSS_FWD_IN);
  SPLAT_TG_ARRAY(float, s_h, SPLAT_LOSS_FWD_H);
  SPLAT_TG_ARRAY(float, s_red, SPLAT_LOSS_RED);
  ssim_forward_views_body(SPLAT_THREAD_CTX(), b, image, targets, masks, partials, tile_sums, s_in, s_h, s_red);
}

kernel void splat_ssim_backward_views(constant LossViewsParams& b [[buffer(0)]],
                                      device const float* image [[buffer(1)]],
                                      device const uchar* targets [[buffer(2)]], device const uchar* masks [[buffer(3)]],
                                      device const float* partials [[buffer(4)]],
                                      device const float* tile_sums [[buffer(5)]], device float* d_image [[buffer(6)]],
                                      device float* loss [[buffer(7)]], SPLAT_THREAD_ATTRS) {
  SPLAT_TG_QUADS(s_in, SPLAT_LOSS_BWD_IN);
  SPLAT_TG_ARRAY(float, s_h, SPLAT_LOSS_BWD_H);
  SPLAT_TG_ARRAY(float, s_red, SPLAT_LOSS_RED);
  ssim_backward_views_body(SPLAT_THREAD_CTX(), b, image, targets, masks, partials, tile_sums, d_image, loss, s_in, s_h,
                           s_red);
}

kernel void splat_adam(constant AdamParams& p [[buffer(0)]], device float* means [[buffer(1)]],
                       device float* log_scales [[buffer(2)]], device float* quats [[buffer(3)]],
                       device float* opacity [[buffer(4)]], device float* sh [[buffer(5)]],
                       device float* m_means [[buffer(6)]], device float* m_log_scales [[buffer(7)]],
                       device float* m_quats [[buffer(8)]], device float* m_opacity [[buffer(9)]],
                       device float* m_sh [[buffer(10)]], device float* v_means [[buffer(11)]],
                       device float* v_log_scales [[buffer(12)]], device float* v_quats [[buffer(13)]],
                       device float* v_opacity [[buffer(14)]], device float* v_sh [[buffer(15)]],
                       device const float* g_means [[buffer(16)]], device const float* g_log_scales [[buffer(17)]],
                       device const float* g_quats [[buffer(18)]], device const float* g_opacity [[buffer(19)]],
                       device const float* sh_factors [[buffer(20)]], device const int32_t* radius [[buffer(21)]],
                       SPLAT_THREAD_ATTRS) {
  adam_body(SPLAT_THREAD_CTX(), p, means, log_scales, quats, opacity, sh, m_means, m_log_scales, m_quats, m_opacity,
            m_sh, v_means, v_log_scales, v_quats, v_opacity, v_sh, g_means, g_log_scales, g_quats, g_opacity, sh_factors,
            radius);
}

kernel void splat_grad_stats(constant ElementParams& p [[buffer(0)]], device const int32_t* radius [[buffer(1)]],
                             device const float* d_means2d [[buffer(2)]], device float* grad_accum [[buffer(3)]],
                             device float* grad_count [[buffer(4)]], device float* max_radii [[buffer(5)]],
                             SPLAT_THREAD_ATTRS) {
  grad_stats_body(SPLAT_THREAD_CTX(), p, radius, d_means2d, grad_accum, grad_count, max_radii);
}

kernel void splat_grad_accumulate(constant AccumulateParams& p [[buffer(0)]], device float* grad [[buffer(1)]],
                                  device float* sum [[buffer(2)]], device const int32_t* radius [[buffer(3)]],
                                  device float* loss [[buffer(4)]], SPLAT_THREAD_ATTRS) {
  grad_accumulate_body(SPLAT_THREAD_CTX(), p, grad, sum, radius, loss);
}

kernel void splat_cap_scales(constant ScaleCapParams& p [[buffer(0)]], device float* log_scales [[buffer(1)]],
                             device float* ceiling [[buffer(2)]], SPLAT_THREAD_ATTRS) {
  cap_scales_body(SPLAT_THREAD_CTX(), p, log_scales, ceiling);
}

kernel void splat_reset_opacity(constant ElementParams& p [[buffer(0)]], device float* opacity [[buffer(1)]],
                                SPLAT_THREAD_ATTRS) {
  reset_opacity_body(SPLAT_THREAD_CTX(), p, opacity);
}

kernel void splat_densify_classify(constant DensifyParams& p [[buffer(0)]], device const float* log_scales [[buffer(1)]],
                                   device const float* grad_accum [[buffer(2)]],
                                   device const float* grad_count [[buffer(3)]], device uint32_t* kind [[buffer(4)]],
                                   device uint32_t* extra [[buffer(5)]], SPLAT_THREAD_ATTRS) {
  densify_classify_body(SPLAT_THREAD_CTX(), p, log_scales, grad_accum, grad_count, kind, extra);
}

kernel void splat_densify_mark(constant DensifyParams& p [[buffer(0)]], device const float* log_scales [[buffer(1)]],
                               device const float* opacity [[buffer(2)]], device const float* max_radii [[buffer(3)]],
                               device const uint32_t* extra [[buffer(4)]],
                               device const uint32_t* extra_offsets [[buffer(5)]], device uint32_t* kind [[buffer(6)]],
                               device uint32_t* flags [[buffer(7)]], SPLAT_THREAD_ATTRS) {
  densify_mark_body(SPLAT_THREAD_CTX(), p, log_scales, opacity, max_radii, extra, extra_offsets, kind, flags);
}

kernel void splat_densify_sources(constant DensifyParams& p [[buffer(0)]], device const uint32_t* offsets [[buffer(1)]],
                                  device uint32_t* row_source [[buffer(2)]], SPLAT_THREAD_ATTRS) {
  densify_sources_body(SPLAT_THREAD_CTX(), p, offsets, row_source);
}

kernel void splat_densify_gather(constant DensifyParams& p [[buffer(0)]],
                                 device const uint32_t* row_source [[buffer(1)]], device const float* src [[buffer(2)]],
                                 device float* dst [[buffer(3)]], SPLAT_THREAD_ATTRS) {
  densify_gather_body(SPLAT_THREAD_CTX(), p, row_source, src, dst);
}

kernel void splat_densify_children(constant DensifyParams& p [[buffer(0)]],
                                   device const uint32_t* offsets [[buffer(1)]], device const float* means [[buffer(2)]],
                                   device const float* log_scales [[buffer(3)]], device const float* quats [[buffer(4)]],
                                   device float* dst_means [[buffer(5)]], SPLAT_THREAD_ATTRS) {
  densify_children_body(SPLAT_THREAD_CTX(), p, offsets, means, log_scales, quats, dst_means);
}

kernel void splat_count_nonfinite(constant FiniteParams& p [[buffer(0)]], device const float* means [[buffer(1)]],
                                  device const float* log_scales [[buffer(2)]], device const float* quats [[buffer(3)]],
                                  device const float* opacity [[buffer(4)]], device const float* sh [[buffer(5)]],
                                  device uint32_t* partials [[buffer(6)]], SPLAT_THREAD_ATTRS) {
  SPLAT_TG_ARRAY(uint32_t, warp_tot, SPLAT_GROUP_WARPS + 1);
  count_nonfinite_body(SPLAT_THREAD_CTX(), p, means, log_scales, quats, opacity, sh, partials, warp_tot);
}

kernel void splat_nonfinite_total(constant FiniteParams& p [[buffer(0)]], device const uint32_t* partials [[buffer(1)]],
                                  device uint32_t* totals [[buffer(2)]], SPLAT_THREAD_ATTRS) {
  SPLAT_TG_ARRAY(uint32_t, warp_tot, SPLAT_GROUP_WARPS + 1);
  nonfinite_total_body(SPLAT_THREAD_CTX(), p, partials, totals, warp_tot);
}

kernel void splat_mcmc_weights(constant McmcParams& p [[buffer(0)]], device const float* opacity [[buffer(1)]],
                               device uint32_t* prefix [[buffer(2)]], device uint32_t* block_sums [[buffer(3)]],
                               SPLAT_THREAD_ATTRS) {
  SPLAT_TG_ARRAY(uint32_t, warp_tot, SPLAT_GROUP_WARPS + 1);
  mcmc_weights_body(SPLAT_THREAD_CTX(), p, opacity, prefix, block_sums, warp_tot);
}

kernel void splat_mcmc_block_offsets(constant McmcParams& p [[buffer(0)]],
                                     device const uint32_t* block_sums [[buffer(1)]],
                                     device uint64_t* block_offsets [[buffer(2)]], SPLAT_THREAD_ATTRS) {
  SPLAT_TG_ARRAY(uint64_t, runs, SPLAT_GROUP_SIZE);
  mcmc_block_offsets_body(SPLAT_THREAD_CTX(), p, block_sums, block_offsets, runs);
}

kernel void splat_mcmc_sample(constant McmcParams& p [[buffer(0)]], device const float* opacity [[buffer(1)]],
                              device const uint32_t* prefix [[buffer(2)]],
                              device const uint64_t* block_offsets [[buffer(3)]], device uint32_t* source [[buffer(4)]],
                              device uint32_t* times_sampled [[buffer(5)]], SPLAT_THREAD_ATTRS) {
  mcmc_sample_body(SPLAT_THREAD_CTX(), p, opacity, prefix, block_offsets, source, times_sampled);
}

kernel void splat_mcmc_apply(constant McmcParams& p [[buffer(0)]], device const uint32_t* source [[buffer(1)]],
                             device const uint32_t* times_sampled [[buffer(2)]], device const float* binoms [[buffer(3)]],
                             device const float* opacity [[buffer(4)]], device float* data [[buffer(5)]],
                             SPLAT_THREAD_ATTRS) {
  mcmc_apply_body(SPLAT_THREAD_CTX(), p, source, times_sampled, binoms, opacity, data);
}

kernel void splat_mcmc_copy(constant McmcParams& p [[buffer(0)]], device const float* src [[buffer(1)]],
                            device float* dst [[buffer(2)]], SPLAT_THREAD_ATTRS) {
  mcmc_copy_body(SPLAT_THREAD_CTX(), p, src, dst);
}

kernel void splat_mcmc_regularize(constant McmcParams& p [[buffer(0)]], device const float* opacity [[buffer(1)]],
                                  device const float* log_scales [[buffer(2)]], device float* g_opacity [[buffer(3)]],
                                  device float* g_log_scales [[buffer(4)]], SPLAT_THREAD_ATTRS) {
  mcmc_regularize_body(SPLAT_THREAD_CTX(), p, opacity, log_scales, g_opacity, g_log_scales);
}

kernel void splat_mcmc_noise(constant McmcParams& p [[buffer(0)]], device float* means [[buffer(1)]],
                             device const float* log_scales [[buffer(2)]], device const float* quats [[buffer(3)]],
                             device const float* opacity [[buffer(4)]], device const int32_t* radius [[buffer(5)]],
                             SPLAT_THREAD_ATTRS) {
  mcmc_noise_body(SPLAT_THREAD_CTX(), p, means, log_scales, quats, opacity, radius);
}

kernel void splat_absgrad_pair_sum(constant ElementParams& p [[buffer(0)]],
                                   device const uint32_t* pair_ranges [[buffer(1)]],
                                   device const float* pair_abs [[buffer(2)]], device float* means2d_abs [[buffer(3)]],
                                   SPLAT_THREAD_ATTRS) {
  absgrad_pair_sum_body(SPLAT_THREAD_CTX(), p, pair_ranges, pair_abs, means2d_abs);
}

kernel void splat_exposure_apply(constant ExposureParams& p [[buffer(0)]], device const float* exposure [[buffer(1)]],
                                 device const float* image [[buffer(2)]], device float* corrected [[buffer(3)]],
                                 SPLAT_THREAD_ATTRS) {
  exposure_apply_body(SPLAT_THREAD_CTX(), p, exposure, image, corrected);
}

kernel void splat_exposure_backward(constant ExposureParams& p [[buffer(0)]],
                                    device const float* exposure [[buffer(1)]], device const float* image [[buffer(2)]],
                                    device float* d_image [[buffer(3)]], device float* partials [[buffer(4)]],
                                    SPLAT_THREAD_ATTRS) {
  SPLAT_TG_ARRAY(float, s_red, SPLAT_EXPOSURE_RED_FLOATS);
  exposure_backward_body(SPLAT_THREAD_CTX(), p, exposure, image, d_image, partials, s_red);
}

kernel void splat_exposure_reduce(constant ExposureParams& p [[buffer(0)]], device const float* partials [[buffer(1)]],
                                  device float* grad [[buffer(2)]], SPLAT_THREAD_ATTRS) {
  SPLAT_TG_ARRAY(float, s_red, SPLAT_EXPOSURE_RED_FLOATS);
  exposure_reduce_body(SPLAT_THREAD_CTX(), p, partials, grad, s_red);
}

kernel void splat_exposure_adam(constant ExposureParams& p [[buffer(0)]], device float* exposure [[buffer(1)]],
                                device float* m [[buffer(2)]], device float* v [[buffer(3)]],
                                device const float* grad [[buffer(4)]], device const float* grad_views [[buffer(5)]],
                                device const int32_t* radius [[buffer(6)]], SPLAT_THREAD_ATTRS) {
  exposure_adam_body(SPLAT_THREAD_CTX(), p, exposure, m, v, grad, grad_views, radius);
}

kernel void splat_exposure_center(constant ExposureParams& p [[buffer(0)]], device float* exposure [[buffer(1)]],
                                  device const int32_t* radius [[buffer(2)]], SPLAT_THREAD_ATTRS) {
  SPLAT_TG_ARRAY(float, s_red, SPLAT_EXPOSURE_RED_FLOATS);
  exposure_center_body(SPLAT_THREAD_CTX(), p, exposure, radius, s_red);
}
