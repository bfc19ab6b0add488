"""Analytic backward pass of the reference rasterizer: `backward(out, d_image, d_alpha)`.

It is the exact derivative of the forward with every discrete decision (visibility,
radius, tile lists, which splats are skipped, where a pixel stops) held fixed.
Clamps are differentiated exactly: min(0.999, .), max(colour, 0) and the field-of-view
clamp of t.x/t.z, t.y/t.z pass no gradient to their argument where they are active.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .forward import RefForward
from .geometry import quat_to_rotmat_vjp
from .projection import Projection, sigmoid
from .blend import ALPHA_MAX, splat_alphas, transmittance
from .sh import num_sh_coeffs, sh_basis_jacobian


@dataclass
class RefGrads:
    """dL/d(every input), plus dL/d(intermediates) for stage-by-stage comparisons.
    All rows of invisible Gaussians are zero."""

    means: np.ndarray           # [N,3]
    log_scales: np.ndarray      # [N,3]
    quats: np.ndarray           # [N,4] (w, x, y, z), w.r.t. the unnormalized input
    opacity_logits: np.ndarray  # [N]
    sh: np.ndarray              # [N,K,3] (zero for coefficients above sh_degree)
    means2d: np.ndarray         # [N,2] dL/d mean2d, pixel units
    conics: np.ndarray          # [N,3] dL/d (A, B, C)
    colors: np.ndarray          # [N,3] dL/d clamped colour
    opacities: np.ndarray       # [N] dL/d the blend's opacity (sigmoid(opacity_logits) unless antialiased)
    # [N,2] sum over pixels of |each pixel's contribution to dL/d mean2d|, x and y
    # apart (the absgrad densification statistic), pixel units
    means2d_abs: np.ndarray | None = None


def rasterize_backward(out: RefForward, d_image: np.ndarray, d_alpha: np.ndarray, d_depth=None,
                       absgrad: bool = False):
    """dL/d (means2d, conics, colors, opacities) from dL/d image and dL/d alpha. With
    d_depth [H,W] the depth is the blend's fourth channel: colors then has a fourth
    column, dL/d z. With absgrad, a fifth result: the per-pixel terms of dL/d means2d
    summed in absolute value ([N,2])."""
    n = out.means2d.shape[0]
    colors, bg = out.colors, out.background
    if d_depth is not None:
        colors = np.concatenate([out.colors, out.depths[:, None]], axis=1)
        bg = np.append(out.background, 0.0)
        d_image = np.concatenate([d_image, d_depth[..., None]], axis=2)
    d_means2d = np.zeros((n, 2))
    d_conics = np.zeros((n, 3))
    d_colors = np.zeros((n, colors.shape[1]))
    d_opacities = np.zeros(n)
    d_means2d_abs = np.zeros((n, 2))
    for tb in out.tiles:
        ids = tb.ids
        if len(ids) == 0:
            continue
        s = splat_alphas(out.means2d, out.conics, out.opacities, ids, tb.px, tb.py)
        contrib = tb.contrib
        alpha = np.where(contrib, s.alpha, 0.0)
        T_before, T_last = transmittance(alpha, contrib)
        g = d_image[tb.py, tb.px]                       # [P,3] dL/d pixel colour
        g_T_last = g @ bg - d_alpha[tb.py, tb.px]       # [P]   dL/d final T

        # C = sum_k c_k a_k T_k + T_last bg, with T_k = prod_{j<k} (1 - a_j) over contributors
        g_dot_c = colors[ids] @ g.T                     # [L,P] g . c_k
        d_colors[ids] += np.where(contrib, alpha * T_before, 0.0) @ g
        # Entry k scales everything behind it by (1 - a_k): the later splats and the background.
        seen = np.where(contrib, g_dot_c * alpha * T_before, 0.0)
        later = np.cumsum(seen[::-1], axis=0)[::-1] - seen              # sum over j > k
        behind = later + T_last[None, :] * g_T_last[None, :]
        d_a = np.where(contrib, T_before * g_dot_c - behind / (1.0 - alpha), 0.0)

        # a = min(0.999, o exp(-sigma)): no gradient where the clamp is active
        d_raw = np.where(s.raw <= ALPHA_MAX, d_a, 0.0)
        d_opacities[ids] += np.sum(d_raw * s.gauss, axis=1)
        d_sigma = -d_raw * out.opacities[ids][:, None] * s.gauss
        A, B, C = (out.conics[ids, k][:, None] for k in range(3))
        # sigma = 0.5 (A dx^2 + C dy^2) + B dx dy, d = mean2d - pixel
        gx, gy = d_sigma * (A * s.dx + B * s.dy), d_sigma * (B * s.dx + C * s.dy)  # [L,P] per pixel
        d_means2d[ids, 0] += np.sum(gx, axis=1)
        d_means2d[ids, 1] += np.sum(gy, axis=1)
        d_means2d_abs[ids, 0] += np.sum(np.abs(gx), axis=1)
        d_means2d_abs[ids, 1] += np.sum(np.abs(gy), axis=1)
        d_conics[ids, 0] += np.sum(d_sigma * 0.5 * s.dx * s.dx, axis=1)
        d_conics[ids, 1] += np.sum(d_sigma * s.dx * s.dy, axis=1)
        d_conics[ids, 2] += np.sum(d_sigma * 0.5 * s.dy * s.dy, axis=1)
    if absgrad:
        return d_means2d, d_conics, d_colors, d_opacities, d_means2d_abs
    return d_means2d, d_conics, d_colors, d_opacities


def project_backward(p: Projection, d_means2d, d_conics, d_colors, d_opacities):
    """dL/d (means, log_scales, quats, opacity_logits, sh) from the 2D-splat gradients."""
    n = p.means.shape[0]
    fx, fy = p.fx, p.fy
    t, tz = p.t, p.t[:, 2]
    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        # conic = (c, -b, a) / det, det = a c - b^2  ->  cov2d (a, b, c)
        a, b, c = p.cov2d[:, 0], p.cov2d[:, 1], p.cov2d[:, 2]
        det = p.det
        gA, gB, gC = d_conics[:, 0], d_conics[:, 1], d_conics[:, 2]
        g_det = -(gA * c - gB * b + gC * a) / det ** 2
        g_a = gC / det + g_det * c
        g_b = -gB / det - 2.0 * b * g_det
        g_c = gA / det + g_det * a
        sig = sigmoid(p.opacity_logits)
        if p.antialiased:
            # opacity = sigmoid * k, k = sqrt(det_raw / det): dk = k/2 (d det_raw / det_raw - d det / det)
            ra, rb, rc = p.cov2d_raw[:, 0], p.cov2d_raw[:, 1], p.cov2d_raw[:, 2]
            det_raw = ra * rc - rb * rb
            k = p.compensation
            g_k = d_opacities * sig * 0.5 * k
            live = k > 0.0  # where the clamp at 0 holds, no gradient
            g_a = g_a + np.where(live, g_k * (rc / det_raw - c / det), 0.0)
            g_b = g_b + np.where(live, g_k * (-2.0 * rb / det_raw + 2.0 * b / det), 0.0)
            g_c = g_c + np.where(live, g_k * (ra / det_raw - a / det), 0.0)
        G2 = np.empty((n, 2, 2))                        # symmetric dL/d cov2d
        G2[:, 0, 0], G2[:, 1, 1] = g_a, g_c
        G2[:, 0, 1] = G2[:, 1, 0] = 0.5 * g_b

        # cov2d = T Sigma T^T + 0.3 I, T = J Wr
        d_cov3d = p.T.transpose(0, 2, 1) @ G2 @ p.T     # [N,3,3] symmetric
        d_T = 2.0 * G2 @ p.T @ p.cov3d                  # [N,2,3]
        d_J = d_T @ p.Wr.T

        # Sigma = M M^T, M = R S
        d_M = 2.0 * d_cov3d @ p.M
        d_scales = np.sum(d_M * p.R, axis=1)            # sum over rows r of dM[r,i] R[r,i]
        d_log_scales = d_scales * p.scales
        d_R = d_M * p.scales[:, None, :]
        d_qn = quat_to_rotmat_vjp(p.qn, d_R)
        d_quats = (d_qn - p.qn * np.sum(p.qn * d_qn, axis=1, keepdims=True)) / p.quat_norm[:, None]

        # camera-space mean t: through mean2d (unclamped t) and through J (clamped tx, ty)
        d_t = np.zeros((n, 3))
        d_t[:, 0] += fx / tz * d_means2d[:, 0]
        d_t[:, 1] += fy / tz * d_means2d[:, 1]
        d_t[:, 2] -= (fx * t[:, 0] * d_means2d[:, 0] + fy * t[:, 1] * d_means2d[:, 1]) / tz ** 2
        # J = [[fx/tz, 0, -fx tx/tz^2], [0, fy/tz, -fy ty/tz^2]]
        d_t[:, 2] -= (fx * d_J[:, 0, 0] + fy * d_J[:, 1, 1]) / tz ** 2
        tc = p.t_clamped
        d_t[:, 2] += 2.0 * (fx * tc[:, 0] * d_J[:, 0, 2] + fy * tc[:, 1] * d_J[:, 1, 2]) / tz ** 3
        d_tc = np.stack([-fx * d_J[:, 0, 2], -fy * d_J[:, 1, 2]], axis=1) / tz[:, None] ** 2
        # tc = clamp(t_xy / tz, -lim, lim) tz: d/dt_xy = 1 if free; d/dtz = tc/tz if clamped
        d_t[:, :2] += np.where(p.clamped_xy, 0.0, d_tc)
        d_t[:, 2] += np.sum(np.where(p.clamped_xy, tc / tz[:, None] * d_tc, 0.0), axis=1)
        d_means = d_t @ p.Wr                            # t = Wr mean + w

        # colour = max(SH(dir) + 0.5, 0), dir = (mean - centre) / |mean - centre|
        k_used = num_sh_coeffs(p.sh_degree)
        d_raw = np.where(p.colors_raw >= 0.0, d_colors, 0.0)
        d_sh = np.zeros_like(p.sh)
        d_sh[:, :k_used, :] = p.basis[:, :, None] * d_raw[:, None, :]
        d_basis = np.einsum("nkc,nc->nk", p.sh[:, :k_used, :], d_raw)
        d_dirs = np.einsum("nkd,nk->nd", sh_basis_jacobian(p.dirs, p.sh_degree), d_basis)
        d_means += (d_dirs - p.dirs * np.sum(p.dirs * d_dirs, axis=1, keepdims=True)) / p.dir_norm[:, None]

        d_logits = d_opacities * p.compensation * sig * (1.0 - sig)

    def vis(x):
        return np.where(p.visible.reshape((n,) + (1,) * (x.ndim - 1)), x, 0.0)

    return vis(d_means), vis(d_log_scales), vis(d_quats), vis(d_logits), vis(d_sh)


def backward(out: RefForward, d_image, d_alpha=None, d_depth=None) -> RefGrads:
    """Gradients of a loss L given dL/d out.image [H,W,3] and optionally dL/d out.alpha [H,W]
    and dL/d out.depth [H,W] (a forward with depth=True)."""
    h, w = out.image.shape[:2]
    d_image = np.asarray(d_image, dtype=np.float64)
    if d_image.shape != (h, w, 3):
        raise ValueError(f"[splat.reference] d_image: expected shape {[h, w, 3]}, got {list(d_image.shape)}")
    if d_alpha is None:
        d_alpha = np.zeros((h, w))
    d_alpha = np.asarray(d_alpha, dtype=np.float64)
    if d_alpha.shape != (h, w):
        raise ValueError(f"[splat.reference] d_alpha: expected shape {[h, w]}, got {list(d_alpha.shape)}")
    if d_depth is not None:
        if out.depth is None:
            raise ValueError("[splat.reference] d_depth: the forward rendered no depth (depth=True)")
        d_depth = np.asarray(d_depth, dtype=np.float64)
        if d_depth.shape != (h, w):
            raise ValueError(f"[splat.reference] d_depth: expected shape {[h, w]}, got {list(d_depth.shape)}")
    d_means2d, d_conics, d_colors, d_opacities, d_means2d_abs = rasterize_backward(
        out, d_image, d_alpha, d_depth, absgrad=True)
    vis = out.proj.visible
    d_z = d_colors[:, 3] if d_depth is not None else None
    d_colors = np.where(vis[:, None], d_colors[:, :3], 0.0)
    d_opacities = np.where(vis, d_opacities, 0.0)
    means, log_scales, quats, logits, sh = project_backward(
        out.proj, d_means2d, d_conics, d_colors, d_opacities)
    if d_z is not None:  # z = Wr[2] . mean + w[2]
        means = means + np.where(vis, d_z, 0.0)[:, None] * out.proj.Wr[2][None, :]
    return RefGrads(means=means, log_scales=log_scales, quats=quats, opacity_logits=logits, sh=sh,
                    means2d=d_means2d, conics=d_conics, colors=d_colors, opacities=d_opacities,
                    means2d_abs=d_means2d_abs)
