// CUDA entry point (NVRTC): projection + SH backward per Gaussian.
// Specialization: SPLAT_SPEC_DETERMINISTIC.
#include "project.h"

extern "C" __global__ void __launch_bounds__(SPLAT_GROUP_SIZE)
    splat_project_backward(CameraParams cam, RasterParams rp, const float* means, const float* log_scales,
                           const float* quats, const float* sh, const SplatRecord* records, const int32_t* radius,
                           const float* accum, const uint32_t* offsets, float* d_means, float* d_log_scales,
                           float* d_quats, float* d_opacity_logits, float* d_sh, float* d_means2d) {
  project_backward_body(SPLAT_THREAD_CTX(), cam, rp, means, log_scales, quats, sh, records, radius, accum, offsets,
                        d_means, d_log_scales, d_quats, d_opacity_logits, d_sh, d_means2d);
}
