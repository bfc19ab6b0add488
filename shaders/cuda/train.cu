// CUDA entry points (NVRTC): the training step's kernels (fused loss, Adam,
// densification statistics and densification, opacity reset, the count of
// non-finite parameters, the MCMC strategy). Thin wrappers
// only; the bodies are shaders/kernels/train_*.h, shared with Metal.
#include "train_absgrad.h"
#include "train_check.h"
#include "train_densify.h"
#include "train_exposure.h"
#include "train_loss.h"
#include "train_mcmc.h"
#include "train_optim.h"

extern "C" __global__ void __launch_bounds__(SPLAT_GROUP_SIZE)
    splat_ssim_forward(LossParams p, const float* image, const splat_byte* target, const splat_byte* mask,
                       float* partials, float* tile_sums) {
  SPLAT_TG_QUADS(s_in, SPLAT_LOSS_FWD_IN);
  SPLAT_TG_ARRAY(float, s_h, SPLAT_LOSS_FWD_H);
  SPLAT_TG_ARRAY(float, s_red, SPLAT_LOSS_RED);
  ssim_forward_body(SPLAT_THREAD_CTX(), p, image, target, mask, partials, tile_sums, s_in, s_h, s_red);
}

extern "C" __global__ void __launch_bounds__(SPLAT_GROUP_SIZE)
    splat_ssim_backward(LossParams p, const float* image, const splat_byte* target, const splat_byte* mask,
                        const float* partials, const float* tile_sums, float* d_image, float* loss) {
  SPLAT_TG_QUADS(s_in, SPLAT_LOSS_BWD_IN);
  SPLAT_TG_ARRAY(float, s_h, SPLAT_LOSS_BWD_H);
  SPLAT_TG_ARRAY(float, s_red, SPLAT_LOSS_RED);
  ssim_backward_body(SPLAT_THREAD_CTX(), p, image, target, mask, partials, tile_sums, d_image, loss, s_in, s_h, s_red);
}

extern "C" __global__ void __launch_bounds__(SPLAT_GROUP_SIZE)
    splat_ssim_forward_views(LossViewsParams b, const float* image, const splat_byte* targets, const splat_byte* masks,
                             float* partials, float* tile_sums) {
  SPLAT_TG_QUADS(s_in, SPLAT_LOSS_FWD_IN);
  SPLAT_TG_ARRAY(float, s_h, SPLAT_LOSS_FWD_H);
  SPLAT_TG_ARRAY(float, s_red, SPLAT_LOSS_RED);
  ssim_forward_views_body(SPLAT_THREAD_CTX(), b, image, targets, masks, partials, tile_sums, s_in, s_h, s_red);
}

extern "C" __global__ void __launch_bounds__(SPLAT_GROUP_SIZE)
    splat_ssim_backward_views(LossViewsParams b, const float* image, const splat_byte* targets,
                              const splat_byte* masks, const float* partials, const float* tile_sums, float* d_image,
                              float* loss) {
  SPLAT_TG_QUADS(s_in, SPLAT_LOSS_BWD_IN);
  SPLAT_TG_ARRAY(float, s_h, SPLAT_LOSS_BWD_H);
  SPLAT_TG_ARRAY(float, s_red, SPLAT_LOSS_RED);
  ssim_backward_views_body(SPLAT_THREAD_CTX(), b, image, targets, masks, partials, tile_sums, d_image, loss, s_in, s_h,
                           s_red);
}

extern "C" __global__ void __launch_bounds__(SPLAT_GROUP_SIZE)
    splat_adam(AdamParams p, float* means, float* log_scales, float* quats, float* opacity, float* sh,
               float* m_means, float* m_log_scales, float* m_quats, float* m_opacity, float* m_sh, float* v_means,
               float* v_log_scales, float* v_quats, float* v_opacity, float* v_sh, const float* g_means,
               const float* g_log_scales, const float* g_quats, const float* g_opacity, const float* sh_factors,
               const int32_t* radius) {
  adam_body(SPLAT_THREAD_CTX(), p, means, log_scales, quats, opacity, sh, m_means, m_log_scales, m_quats, m_opacity,
            m_sh, v_means, v_log_scales, v_quats, v_opacity, v_sh, g_means, g_log_scales, g_quats, g_opacity, sh_factors,
            radius);
}

extern "C" __global__ void __launch_bounds__(SPLAT_GROUP_SIZE)
    splat_grad_stats(ElementParams p, const int32_t* radius, const float* d_means2d, float* grad_accum,
                     float* grad_count, float* max_radii) {
  grad_stats_body(SPLAT_THREAD_CTX(), p, radius, d_means2d, grad_accum, grad_count, max_radii);
}

extern "C" __global__ void __launch_bounds__(SPLAT_GROUP_SIZE)
    splat_grad_accumulate(AccumulateParams p, float* grad, float* sum, const int32_t* radius, float* loss) {
  grad_accumulate_body(SPLAT_THREAD_CTX(), p, grad, sum, radius, loss);
}

extern "C" __global__ void __launch_bounds__(SPLAT_GROUP_SIZE)
    splat_cap_scales(ScaleCapParams p, float* log_scales, float* ceiling) {
  cap_scales_body(SPLAT_THREAD_CTX(), p, log_scales, ceiling);
}

extern "C" __global__ void __launch_bounds__(SPLAT_GROUP_SIZE)
    splat_reset_opacity(ElementParams p, float* opacity) {
  reset_opacity_body(SPLAT_THREAD_CTX(), p, opacity);
}

extern "C" __global__ void __launch_bounds__(SPLAT_GROUP_SIZE)
    splat_densify_classify(DensifyParams p, const float* log_scales, const float* grad_accum,
                           const float* grad_count, uint32_t* kind, uint32_t* extra) {
  densify_classify_body(SPLAT_THREAD_CTX(), p, log_scales, grad_accum, grad_count, kind, extra);
}

extern "C" __global__ void __launch_bounds__(SPLAT_GROUP_SIZE)
    splat_densify_mark(DensifyParams p, const float* log_scales, const float* opacity, const float* max_radii,
                       const uint32_t* extra, const uint32_t* extra_offsets, uint32_t* kind, uint32_t* flags) {
  densify_mark_body(SPLAT_THREAD_CTX(), p, log_scales, opacity, max_radii, extra, extra_offsets, kind, flags);
}

extern "C" __global__ void __launch_bounds__(SPLAT_GROUP_SIZE)
    splat_densify_sources(DensifyParams p, const uint32_t* offsets, uint32_t* row_source) {
  densify_sources_body(SPLAT_THREAD_CTX(), p, offsets, row_source);
}

extern "C" __global__ void __launch_bounds__(SPLAT_GROUP_SIZE)
    splat_densify_gather(DensifyParams p, const uint32_t* row_source, const float* src, float* dst) {
  densify_gather_body(SPLAT_THREAD_CTX(), p, row_source, src, dst);
}

extern "C" __global__ void __launch_bounds__(SPLAT_GROUP_SIZE)
    splat_densify_children(DensifyParams p, const uint32_t* offsets, const float* means, const float* log_scales,
                           const float* quats, float* dst_means) {
  densify_children_body(SPLAT_THREAD_CTX(), p, offsets, means, log_scales, quats, dst_means);
}

extern "C" __global__ void __launch_bounds__(SPLAT_GROUP_SIZE)
    splat_count_nonfinite(FiniteParams p, const float* means, const float* log_scales, const float* quats,
                          const float* opacity, const float* sh, uint32_t* partials) {
  SPLAT_TG_ARRAY(uint32_t, warp_tot, SPLAT_GROUP_WARPS + 1);
  count_nonfinite_body(SPLAT_THREAD_CTX(), p, means, log_scales, quats, opacity, sh, partials, warp_tot);
}

extern "C" __global__ void __launch_bounds__(SPLAT_GROUP_SIZE)
    splat_nonfinite_total(FiniteParams p, const uint32_t* partials, uint32_t* totals) {
  SPLAT_TG_ARRAY(uint32_t, warp_tot, SPLAT_GROUP_WARPS + 1);
  nonfinite_total_body(SPLAT_THREAD_CTX(), p, partials, totals, warp_tot);
}

extern "C" __global__ void __launch_bounds__(SPLAT_GROUP_SIZE)
    splat_mcmc_weights(McmcParams p, const float* opacity, uint32_t* prefix, uint32_t* block_sums) {
  SPLAT_TG_ARRAY(uint32_t, warp_tot, SPLAT_GROUP_WARPS + 1);
  mcmc_weights_body(SPLAT_THREAD_CTX(), p, opacity, prefix, block_sums, warp_tot);
}

extern "C" __global__ void __launch_bounds__(SPLAT_GROUP_SIZE)
    splat_mcmc_block_offsets(McmcParams p, const uint32_t* block_sums, uint64_t* block_offsets) {
  SPLAT_TG_ARRAY(uint64_t, runs, SPLAT_GROUP_SIZE);
  mcmc_block_offsets_body(SPLAT_THREAD_CTX(), p, block_sums, block_offsets, runs);
}

extern "C" __global__ void __launch_bounds__(SPLAT_GROUP_SIZE)
    splat_mcmc_sample(McmcParams p, const float* opacity, const uint32_t* prefix, const uint64_t* block_offsets,
                      uint32_t* source, uint32_t* times_sampled) {
  mcmc_sample_body(SPLAT_THREAD_CTX(), p, opacity, prefix, block_offsets, source, times_sampled);
}

extern "C" __global__ void __launch_bounds__(SPLAT_GROUP_SIZE)
    splat_mcmc_apply(McmcParams p, const uint32_t* source, const uint32_t* times_sampled, const float* binoms,
                     const float* opacity, float* data) {
  mcmc_apply_body(SPLAT_THREAD_CTX(), p, source, times_sampled, binoms, opacity, data);
}

extern "C" __global__ void __launch_bounds__(SPLAT_GROUP_SIZE)
    splat_mcmc_copy(McmcParams p, const float* src, float* dst) {
  mcmc_copy_body(SPLAT_THREAD_CTX(), p, src, dst);
}

extern "C" __global__ void __launch_bounds__(SPLAT_GROUP_SIZE)
    splat_mcmc_regularize(McmcParams p, const float* opacity, const float* log_scales, float* g_opacity,
                          float* g_log_scales) {
  mcmc_regularize_body(SPLAT_THREAD_CTX(), p, opacity, log_scales, g_opacity, g_log_scales);
}

extern "C" __global__ void __launch_bounds__(SPLAT_GROUP_SIZE)
    splat_mcmc_noise(McmcParams p, float* means, const float* log_scales, const float* quats, const float* opacity,
                     const int32_t* radius) {
  mcmc_noise_body(SPLAT_THREAD_CTX(), p, means, log_scales, quats, opacity, radius);
}

extern "C" __global__ void __launch_bounds__(SPLAT_GROUP_SIZE)
    splat_absgrad_pair_sum(ElementParams p, const uint32_t* pair_ranges, const float* pair_abs, float* means2d_abs) {
  absgrad_pair_sum_body(SPLAT_THREAD_CTX(), p, pair_ranges, pair_abs, means2d_abs);
}

extern "C" __global__ void __launch_bounds__(SPLAT_GROUP_SIZE)
    splat_exposure_apply(ExposureParams p, const float* exposure, const float* image, float* corrected) {
  exposure_apply_body(SPLAT_THREAD_CTX(), p, exposure, image, corrected);
}

extern "C" __global__ void __launch_bounds__(SPLAT_GROUP_SIZE)
    splat_exposure_backward(ExposureParams p, const float* exposure, const float* image, float* d_image,
                            float* partials) {
  SPLAT_TG_ARRAY(float, s_red, SPLAT_EXPOSURE_RED_FLOATS);
  exposure_backward_body(SPLAT_THREAD_CTX(), p, exposure, image, d_image, partials, s_red);
}

extern "C" __global__ void __launch_bounds__(SPLAT_GROUP_SIZE)
    splat_exposure_reduce(ExposureParams p, const float* partials, float* grad) {
  SPLAT_TG_ARRAY(float, s_red, SPLAT_EXPOSURE_RED_FLOATS);
  exposure_reduce_body(SPLAT_THREAD_CTX(), p, partials, grad, s_red);
}

extern "C" __global__ void __launch_bounds__(SPLAT_GROUP_SIZE)
    splat_exposure_adam(ExposureParams p, float* exposure, float* m, float* v, const float* grad,
                        const float* grad_views, const int32_t* radius) {
  exposure_adam_body(SPLAT_THREAD_CTX(), p, exposure, m, v, grad, grad_views, radius);
}

extern "C" __global__ void __launch_bounds__(SPLAT_GROUP_SIZE)
    splat_exposure_center(ExposureParams p, float* exposure, const int32_t* radius) {
  SPLAT_TG_ARRAY(float, s_red, SPLAT_EXPOSURE_RED_FLOATS);
  exposure_center_body(SPLAT_THREAD_CTX(), p, exposure, radius, s_red);
}
