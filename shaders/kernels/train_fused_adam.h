// The training step's projection backward with Adam folded in: each thread
// takes a Gaussian's gradients from its accumulated blend gradients
// (gaussian_grads, project.h) into threadgroup memory, then the threadgroup
// steps its Gaussians' parameters and moments quad by quad, so the gradients
// never go to memory and come back. The separate path writes 31 floats of
// gradients and SH factors a Gaussian, then Adam reads them and every
// parameter again from memory (the projection backward had read them a moment
// before; here they are the threadgroup's own, still in cache).
//
// Every element is stepped with the separate kernel's arithmetic
// (train_optim.h, adam_body): the same gradient floats, the same adam_update /
// adam_update_bf16, the same stochastic-rounding noise (a function of the
// group and the element's index in it, adam.h), the same rates (SH DC against
// the rest), the same visible_only and skipped-step rules. Parameters and
// moments therefore come out the same bits either way (emulator:
// tests/test_simt_emulation.py; on the GPU with deterministic=true,
// tests/test_cuda_training.py). Only the 2D-mean gradient is stored (the
// densification statistics read it); p.sh_grad_full is not supported (the
// data-parallel mean needs the gradients in memory: the host keeps the
// separate path there).
#pragma once
#include "adam.h"
#include "project.h"
#include "train_optim.h"

// Rows of the threadgroup's staged gradients, each SPLAT_GROUP_SIZE floats
// (column t: thread t's Gaussian): means 0-2, log-scales 3-5, quaternion 6-9,
// opacity logit 10, the SH factors b[0..15] 11-26 and dc 27-29.
#define SPLAT_FUSED_ROW_SH_B 11u
#define SPLAT_FUSED_ROW_SH_DC 27u
#define SPLAT_FUSED_GRAD_ROWS 30u

// Quads a thread loads before stepping any (phase 2 runs at the projection
// backward's occupancy, two threadgroups an SM: one quad in flight a thread
// left it latency-bound).
#ifndef SPLAT_FUSED_BATCH
#define SPLAT_FUSED_BATCH 4u
#endif

// One group's Adam over the threadgroup's Gaussians [first, first + count)
// (their rows of `width` floats; first a multiple of SPLAT_GROUP_SIZE, so the
// range starts on a quad), a quad a thread in turn: contiguous 16-byte
// accesses across the threadgroup, as the separate kernel's, SPLAT_FUSED_BATCH
// quads loaded at once. Gradients come from the staged rows: row0 + column
// (sh: the factors' product).
SPLAT_FUNC void fused_adam_group(SimtThread t, SPLAT_CONST_MEM const AdamParams& p, float lr, uint32_t group,
                                 SPLAT_DEVICE_MEM float* param, SPLAT_DEVICE_MEM float* m, SPLAT_DEVICE_MEM float* v,
                                 uint32_t width, uint32_t first, uint32_t count, uint32_t row0, bool sh,
                                 SPLAT_TG_MEM const float* s_grads, SPLAT_TG_MEM const uint32_t* s_seen) {
  const uint32_t floats = width * count, quads = (floats + 3u) / 4u, quad0 = width * first / 4u;
  const bool packed = p.bf16_moments != 0u;
  for (uint32_t base = t.tid; base < quads; base += SPLAT_FUSED_BATCH * SPLAT_GROUP_SIZE) {
    float grad[SPLAT_FUSED_BATCH][4];
    uint32_t seen[SPLAT_FUSED_BATCH], dc[SPLAT_FUSED_BATCH];
    vec4 pv[SPLAT_FUSED_BATCH], mv[SPLAT_FUSED_BATCH], vv[SPLAT_FUSED_BATCH];
    SPLAT_UNROLL for (uint32_t b = 0; b < SPLAT_FUSED_BATCH; ++b) {
      const uint32_t lq = base + b * SPLAT_GROUP_SIZE, e0 = 4u * lq;
      const uint32_t in_quad = lq >= quads ? 0u : floats - e0 < 4u ? floats - e0 : 4u;
      uint32_t gl = e0 / width, j = e0 - gl * width;  // the first float's Gaussian (in the group) and column
      seen[b] = 0u;
      dc[b] = 0u;
      SPLAT_UNROLL for (uint32_t r = 0; r < 4u; ++r) {
        grad[b][r] = 0.f;
        if (r >= in_quad) continue;
        if (s_seen[gl] != 0u) seen[b] |= 1u << r;
        if (sh) {
          const uint32_t k = j / 3u;
          if (k < p.sh_k_count)
            grad[b][r] = s_grads[(SPLAT_FUSED_ROW_SH_B + k) * SPLAT_GROUP_SIZE + gl] *
                         s_grads[(SPLAT_FUSED_ROW_SH_DC + (j - 3u * k)) * SPLAT_GROUP_SIZE + gl];
          if (j < 3u) dc[b] |= 1u << r;
        } else {
          grad[b][r] = s_grads[(row0 + j) * SPLAT_GROUP_SIZE + gl];
        }
        if (++j == width) j = 0u, ++gl;
      }
      // A whole quad's loads now; a partial one (the array's last) in adam_quad.
      if (seen[b] != 0u && in_quad == 4u) {
        pv[b] = load_float4(param, quad0 + lq);
        mv[b] = load_float4(m, quad0 + lq);
        if (!packed) vv[b] = load_float4(v, quad0 + lq);
      }
      if (seen[b] != 0u && in_quad < 4u) adam_quad(p, lr, group, param, m, v, quad0 + lq, in_quad, grad[b], seen[b], dc[b]);
      if (in_quad < 4u) seen[b] = 0u;
    }
    SPLAT_UNROLL for (uint32_t b = 0; b < SPLAT_FUSED_BATCH; ++b) {
      if (seen[b] == 0u) continue;
      const uint32_t q = quad0 + base + b * SPLAT_GROUP_SIZE;
      adam_quad_registers(p, lr, group, q, grad[b], seen[b], dc[b], pv[b], mv[b], vv[b]);
      store_float4(param, q, pv[b].x, pv[b].y, pv[b].z, pv[b].w);
      store_float4(m, q, mv[b].x, mv[b].y, mv[b].z, mv[b].w);
      if (!packed) store_float4(v, q, vv[b].x, vv[b].y, vv[b].z, vv[b].w);
    }
  }
}

// One thread per Gaussian for its gradients, then the threadgroup's Adam a
// quad a thread: a thread per Gaussian stepping its own 59 floats read and
// wrote them 192 bytes apart across a SIMD group and measured slower than the
// two kernels it replaced (H200, lego_400: 0.191 ms against 0.049 + 0.095).
// s_grads: SPLAT_FUSED_GRAD_ROWS * SPLAT_GROUP_SIZE floats; s_seen:
// SPLAT_GROUP_SIZE values. No thread returns before the barrier.
SPLAT_FUNC void project_backward_adam_body(
    SimtThread t, SPLAT_CONST_MEM const CameraParams& cam, SPLAT_CONST_MEM const RasterParams& rp,
    SPLAT_CONST_MEM const AdamParams& p, SPLAT_DEVICE_MEM float* means, SPLAT_DEVICE_MEM float* log_scales,
    SPLAT_DEVICE_MEM float* quats, SPLAT_DEVICE_MEM float* opacity, SPLAT_DEVICE_MEM float* sh,
    SPLAT_DEVICE_MEM const SplatRecord* records, SPLAT_DEVICE_MEM const int32_t* radius,
    SPLAT_DEVICE_MEM const float* accum, SPLAT_DEVICE_MEM const uint32_t* pair_ranges, SPLAT_DEVICE_MEM float* m_means,
    SPLAT_DEVICE_MEM float* m_log_scales, SPLAT_DEVICE_MEM float* m_quats, SPLAT_DEVICE_MEM float* m_opacity,
    SPLAT_DEVICE_MEM float* m_sh, SPLAT_DEVICE_MEM float* v_means, SPLAT_DEVICE_MEM float* v_log_scales,
    SPLAT_DEVICE_MEM float* v_quats, SPLAT_DEVICE_MEM float* v_opacity, SPLAT_DEVICE_MEM float* v_sh,
    SPLAT_DEVICE_MEM float* d_means2d, SPLAT_TG_MEM float* s_grads, SPLAT_TG_MEM uint32_t* s_seen) {
  const uint32_t n = rp.num_gaussians, first = t.group * SPLAT_GROUP_SIZE;
  const uint32_t i = first + t.tid;
  const bool live = i < n, seen = live && radius[i] > 0;
  // Zero gradients for an unseen Gaussian (or a skipped step's -1, tile_bin.h),
  // as project_backward_body stores them.
  GaussianGrads g;
  if (seen) {
    g = gaussian_grads(cam, rp, means, log_scales, quats, sh, records, accum, pair_ranges, i);
  } else {
    g.mean = make_vec3(0.f, 0.f, 0.f);
    g.log_scale = make_vec3(0.f, 0.f, 0.f);
    SPLAT_UNROLL for (uint32_t c = 0; c < 4u; ++c) g.quat[c] = 0.f;
    g.opacity_logit = 0.f;
    SPLAT_UNROLL for (uint32_t k = 0; k < SPLAT_MAX_SH_COEFFS; ++k) g.sh.b[k] = 0.f;
    g.sh.dc = make_vec3(0.f, 0.f, 0.f);
    g.mean2d = make_vec2(0.f, 0.f);
  }
  if (live) {
    d_means2d[2 * i] = g.mean2d.x;
    d_means2d[2 * i + 1] = g.mean2d.y;
  }
  SPLAT_TG_MEM float* col = s_grads + t.tid;
  col[0u * SPLAT_GROUP_SIZE] = g.mean.x;
  col[1u * SPLAT_GROUP_SIZE] = g.mean.y;
  col[2u * SPLAT_GROUP_SIZE] = g.mean.z;
  col[3u * SPLAT_GROUP_SIZE] = g.log_scale.x;
  col[4u * SPLAT_GROUP_SIZE] = g.log_scale.y;
  col[5u * SPLAT_GROUP_SIZE] = g.log_scale.z;
  SPLAT_UNROLL for (uint32_t c = 0; c < 4u; ++c) col[(6u + c) * SPLAT_GROUP_SIZE] = g.quat[c];
  col[10u * SPLAT_GROUP_SIZE] = g.opacity_logit;
  SPLAT_UNROLL for (uint32_t k = 0; k < SPLAT_MAX_SH_COEFFS; ++k)
    col[(SPLAT_FUSED_ROW_SH_B + k) * SPLAT_GROUP_SIZE] = g.sh.b[k];
  col[SPLAT_FUSED_ROW_SH_DC * SPLAT_GROUP_SIZE] = g.sh.dc.x;
  col[(SPLAT_FUSED_ROW_SH_DC + 1u) * SPLAT_GROUP_SIZE] = g.sh.dc.y;
  col[(SPLAT_FUSED_ROW_SH_DC + 2u) * SPLAT_GROUP_SIZE] = g.sh.dc.z;
  s_seen[t.tid] = live && !step_skipped(radius) && (p.visible_only == 0u || seen) ? 1u : 0u;
  sp_group_barrier();
  if (first >= n) return;
  const uint32_t count = n - first < SPLAT_GROUP_SIZE ? n - first : SPLAT_GROUP_SIZE;
  fused_adam_group(t, p, p.step_means, 0u, means, m_means, v_means, 3u, first, count, 0u, false, s_grads, s_seen);
  fused_adam_group(t, p, p.step_log_scales, 1u, log_scales, m_log_scales, v_log_scales, 3u, first, count, 3u, false,
                   s_grads, s_seen);
  fused_adam_group(t, p, p.step_quats, 2u, quats, m_quats, v_quats, 4u, first, count, 6u, false, s_grads, s_seen);
  fused_adam_group(t, p, p.step_opacity, 3u, opacity, m_opacity, v_opacity, 1u, first, count, 10u, false, s_grads,
                   s_seen);
  fused_adam_group(t, p, p.step_sh_rest, 4u, sh, m_sh, v_sh, p.sh_width, first, count, 0u, true, s_grads, s_seen);
}
