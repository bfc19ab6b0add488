// The projection backward and the Adam step in one kernel, for a step of one
// view (BackendConfig.projection_adam = "fused"). Each thread first runs the
// projection backward of its Gaussian (project_backward_body, storing the
// gradients, SH factors and 2D gradient as that kernel does); after a
// barrier the threadgroup steps its own Gaussians' parameters, quad by quad
// as adam_body does (adam_quad), reading those gradients back while they are
// in cache and the parameters the backward has just read. The two kernels
// apart read the parameters twice and the gradients once more from memory;
// the update is theirs to the bit.
//
// A threadgroup of G Gaussians owns whole quads of every group: G is a
// multiple of 4, so its first float of each group (width w: w G0) starts a
// quad, and only the array's last quad is partial.
#pragma once
#include "project.h"
#include "train_optim.h"

SPLAT_STATIC_ASSERT(SPLAT_GROUP_SIZE % 4 == 0, "a threadgroup's Gaussians start a quad of every group");

// Quads of a group of `width` floats a Gaussian that Gaussians [g0, g1) own.
SPLAT_FUNC uint32_t owned_quads(uint32_t width, uint32_t g0, uint32_t g1) {
  return float_quads(width * g1) - width * g0 / 4u;
}

SPLAT_FUNC void project_adam_body(SimtThread t, SPLAT_CONST_MEM const CameraParams& cam,
                                  SPLAT_CONST_MEM const RasterParams& rp, SPLAT_CONST_MEM const AdamParams& p,
                                  SPLAT_DEVICE_MEM float* means, SPLAT_DEVICE_MEM float* log_scales,
                                  SPLAT_DEVICE_MEM float* quats, SPLAT_DEVICE_MEM float* opacity,
                                  SPLAT_DEVICE_MEM float* sh, SPLAT_DEVICE_MEM float* m_means,
                                  SPLAT_DEVICE_MEM float* m_log_scales, SPLAT_DEVICE_MEM float* m_quats,
                                  SPLAT_DEVICE_MEM float* m_opacity, SPLAT_DEVICE_MEM float* m_sh,
                                  SPLAT_DEVICE_MEM float* v_means, SPLAT_DEVICE_MEM float* v_log_scales,
                                  SPLAT_DEVICE_MEM float* v_quats, SPLAT_DEVICE_MEM float* v_opacity,
                                  SPLAT_DEVICE_MEM float* v_sh, SPLAT_DEVICE_MEM const SplatRecord* records,
                                  SPLAT_DEVICE_MEM const int32_t* radius, SPLAT_DEVICE_MEM const float* accum,
                                  SPLAT_DEVICE_MEM const uint32_t* pair_ranges, SPLAT_DEVICE_MEM float* g_means,
                                  SPLAT_DEVICE_MEM float* g_log_scales, SPLAT_DEVICE_MEM float* g_quats,
                                  SPLAT_DEVICE_MEM float* g_opacity, SPLAT_DEVICE_MEM float* sh_factors,
                                  SPLAT_DEVICE_MEM float* d_means2d) {
  project_backward_body(t, cam, rp, means, log_scales, quats, sh, records, radius, accum, pair_ranges, g_means,
                        g_log_scales, g_quats, g_opacity, sh_factors, d_means2d);
  // Every parameter this threadgroup steps was read above, and every gradient
  // it reads was stored above, by this threadgroup.
  sp_group_barrier_device();
  const uint32_t g0 = t.group * t.group_size;
  if (g0 >= p.count) return;
  const uint32_t g1 = sp_min(g0 + t.group_size, p.count);
  // The owned quads of each group in turn, a thread every group_size of them.
  const uint32_t c_scales = owned_quads(3u, g0, g1), c_quats = 2u * c_scales,
                 c_opacity = c_quats + owned_quads(4u, g0, g1), c_sh = c_opacity + owned_quads(1u, g0, g1),
                 total = c_sh + owned_quads(p.sh_width, g0, g1);
  for (uint32_t k = t.tid; k < total; k += t.group_size) {
    uint32_t group, q;
    if (k < c_scales) group = 0u, q = 3u * g0 / 4u + k;
    else if (k < c_quats) group = 1u, q = 3u * g0 / 4u + (k - c_scales);
    else if (k < c_opacity) group = 2u, q = g0 + (k - c_quats);
    else if (k < c_sh) group = 3u, q = g0 / 4u + (k - c_opacity);
    else group = 4u, q = p.sh_width * g0 / 4u + (k - c_sh);
    adam_quad(p, group, q, means, log_scales, quats, opacity, sh, m_means, m_log_scales, m_quats, m_opacity, m_sh,
              v_means, v_log_scales, v_quats, v_opacity, v_sh, g_means, g_log_scales, g_quats, g_opacity, sh_factors,
              radius);
  }
}
