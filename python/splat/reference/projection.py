"""Per-Gaussian stage of the forward pass: 3D Gaussians -> 2D splats.

Everything here is vectorized over the N Gaussians. `project` keeps every
intermediate it computes in a `Projection` so the backward pass can reuse them.
Quantities of invisible Gaussians (radius 0) are whatever the formulas give
(possibly inf / nan); the public outputs mask them.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .geometry import quat_to_rotmat
from .sh import MAX_SH_DEGREE, num_sh_coeffs, sh_basis

NEAR = 0.01                  # t.z below this -> invisible
FAR = 1e10                   # t.z above this -> invisible
FOV_CLAMP = 1.3              # t.x / t.z is clamped to +-1.3 tan(fov_x / 2) inside the Jacobian
COV2D_DILATION = 0.3         # added to the diagonal of the 2D covariance
RADIUS_SIGMAS = 3.0          # radius = ceil(3 sqrt(lambda_max))
MIN_EIG_SPREAD = 0.1         # lambda_max = mid + sqrt(max(0.1, mid^2 - det))
TILE_SIZE = 16


def as_f64(name: str, value, shape: tuple) -> np.ndarray:
    """`value` as a float64 array of `shape` (None = any length), or ValueError naming it."""
    arr = np.asarray(value, dtype=np.float64)
    ok = arr.ndim == len(shape) and all(s is None or s == d for s, d in zip(shape, arr.shape))
    if not ok:
        want = "[" + ", ".join("*" if s is None else str(s) for s in shape) + "]"
        raise ValueError(f"[splat.reference] {name}: expected shape {want}, got {list(arr.shape)}")
    return arr


def sigmoid(x: np.ndarray) -> np.ndarray:
    """Logistic function without overflow for large |x|."""
    e = np.exp(-np.abs(x))
    return np.where(x >= 0, 1.0 / (1.0 + e), e / (1.0 + e))


def tile_grid(width: int, height: int) -> tuple[int, int]:
    """(tiles_x, tiles_y) = (ceil(width / 16), ceil(height / 16))."""
    return -(-width // TILE_SIZE), -(-height // TILE_SIZE)


@dataclass
class Projection:
    """Inputs (float64), camera and every per-Gaussian intermediate of the projection."""

    # inputs
    means: np.ndarray           # [N,3]
    log_scales: np.ndarray      # [N,3]
    quats: np.ndarray           # [N,4] as given (w, x, y, z), not normalized
    opacity_logits: np.ndarray  # [N]
    sh: np.ndarray              # [N,K,3]
    sh_degree: int
    # camera
    Wr: np.ndarray              # [3,3] world-to-camera rotation
    w: np.ndarray               # [3] world-to-camera translation
    fx: float
    fy: float
    cx: float
    cy: float
    width: int
    height: int
    cam_center: np.ndarray      # [3] = -Wr^T w
    # 3D covariance
    scales: np.ndarray          # [N,3] exp(log_scales)
    quat_norm: np.ndarray       # [N] |q|
    qn: np.ndarray              # [N,4] q / |q|
    R: np.ndarray               # [N,3,3]
    M: np.ndarray               # [N,3,3] R S
    cov3d: np.ndarray           # [N,3,3] M M^T
    # EWA projection
    t: np.ndarray               # [N,3] camera-space mean
    clamped_xy: np.ndarray      # [N,2] bool: t.x/t.z (t.y/t.z) hit the +-1.3 tan_fov clamp
    t_clamped: np.ndarray       # [N,2] (tx, ty) after the clamp, used in J
    J: np.ndarray               # [N,2,3]
    T: np.ndarray               # [N,2,3] J Wr
    cov2d: np.ndarray           # [N,3] (a, b, c) including the 0.3 dilation
    det: np.ndarray             # [N]
    conics: np.ndarray          # [N,3] (A, B, C) = (c, -b, a) / det
    means2d: np.ndarray         # [N,2] pixels, from the UNclamped t
    radius: np.ndarray          # [N] float ceil(3 sqrt(lambda_max)) (before visibility)
    tile_rects: np.ndarray      # [N,4] int (x0, x1, y0, y1), half-open tile ranges; 0 if invisible
    visible: np.ndarray         # [N] bool
    # colour
    dir_norm: np.ndarray        # [N] |mean - cam_center|
    dirs: np.ndarray            # [N,3] unit view directions
    basis: np.ndarray           # [N,(deg+1)^2] SH basis at dirs
    colors_raw: np.ndarray      # [N,3] SH + 0.5, before the clamp at 0
    colors: np.ndarray          # [N,3] max(colors_raw, 0)
    opacities: np.ndarray       # [N] the blend's opacity: sigmoid(opacity_logits) * compensation
    # antialiased mode (the mip-splatting 2D filter)
    antialiased: bool = False
    cov2d_raw: np.ndarray | None = None     # [N,3] (a, b, c) before the 0.3 dilation
    compensation: np.ndarray | None = None  # [N] sqrt(max(0, det(raw) / det)); ones when not antialiased

    @property
    def depths(self) -> np.ndarray:
        return self.t[:, 2]


def project(means, log_scales, quats, opacity_logits, sh, world_to_camera,
            fx, fy, cx, cy, width, height, sh_degree, antialiased=False) -> Projection:
    """Project N Gaussians to 2D splats.

    scale = exp(log_scales), R = R(q / |q|), Sigma = R S S^T R^T, opacity = sigmoid(logit).
    t = Wr mean + w; invisible unless near <= t.z <= far. J is the perspective Jacobian at
    (tx, ty, t.z), tx = clamp(t.x / t.z, +-1.3 tan_fovx) t.z (ty likewise), tan_fovx =
    0.5 width / fx. cov2d = J Wr Sigma Wr^T J^T + 0.3 I = [[a, b], [b, c]]; invisible if
    det <= 0; conic = (c, -b, a) / det; mean2d = (fx t.x / t.z + cx, fy t.y / t.z + cy).
    radius = ceil(3 sqrt(mid + sqrt(max(0.1, mid^2 - det)))), mid = (a + c) / 2; the tile
    rectangle is [floor((m - r) / 16), ceil((m + r) / 16)) per axis, clipped to the grid,
    and an empty one makes the Gaussian invisible. colour = max(SH(dir) + 0.5, 0) with
    dir = normalize(mean - camera_center), camera_center = -Wr^T w.
    `antialiased` (mip-splatting's 2D filter, gsplat's rasterize_mode="antialiased"): the
    blend's opacity is sigmoid(logit) * sqrt(max(0, det(cov2d - 0.3 I) / det(cov2d))), the
    dilated splat keeping the undilated one's integral.
    """
    means = as_f64("means", means, (None, 3))
    n = means.shape[0]
    log_scales = as_f64("log_scales", log_scales, (n, 3))
    quats = as_f64("quats", quats, (n, 4))
    opacity_logits = as_f64("opacity_logits", opacity_logits, (n,))
    sh = as_f64("sh", sh, (n, None, 3))
    W = as_f64("world_to_camera", world_to_camera, (4, 4))
    fx, fy, cx, cy = float(fx), float(fy), float(cx), float(cy)
    width, height, sh_degree = int(width), int(height), int(sh_degree)
    if not 0 <= sh_degree <= MAX_SH_DEGREE:
        raise ValueError(f"[splat.reference] sh_degree: must be in 0..{MAX_SH_DEGREE}, got {sh_degree}")
    k_used = num_sh_coeffs(sh_degree)
    if sh.shape[1] < k_used:
        raise ValueError(f"[splat.reference] sh: degree {sh_degree} needs {k_used} coefficients, "
                         f"got {sh.shape[1]}")
    if width <= 0 or height <= 0:
        raise ValueError("[splat.reference] width and height must be positive")
    Wr, w = W[:3, :3], W[:3, 3]

    with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
        # 3D covariance  Sigma = R S S^T R^T
        scales = np.exp(log_scales)
        quat_norm = np.linalg.norm(quats, axis=1)
        qn = quats / quat_norm[:, None]
        R = quat_to_rotmat(qn)
        M = R * scales[:, None, :]                      # R S: column i of R times s_i
        cov3d = M @ M.transpose(0, 2, 1)

        # camera space, near/far culling
        t = means @ Wr.T + w
        tz = t[:, 2]
        in_depth = (tz >= NEAR) & (tz <= FAR)

        # EWA: Jacobian of the perspective projection at the (clamped) mean
        limit = FOV_CLAMP * np.array([0.5 * width / fx, 0.5 * height / fy])
        u = t[:, :2] / tz[:, None]
        clamped_xy = (u < -limit) | (u > limit)
        t_clamped = np.clip(u, -limit, limit) * tz[:, None]
        J = np.zeros((n, 2, 3))
        J[:, 0, 0] = fx / tz
        J[:, 0, 2] = -fx * t_clamped[:, 0] / tz ** 2
        J[:, 1, 1] = fy / tz
        J[:, 1, 2] = -fy * t_clamped[:, 1] / tz ** 2
        T = J @ Wr
        full = T @ cov3d @ T.transpose(0, 2, 1)
        a = full[:, 0, 0] + COV2D_DILATION
        b = full[:, 0, 1]
        c = full[:, 1, 1] + COV2D_DILATION
        det = a * c - b * b
        conics = np.stack([c, -b, a], axis=1) / det[:, None]
        means2d = np.stack([fx * t[:, 0] / tz + cx, fy * t[:, 1] / tz + cy], axis=1)

        # screen-space extent
        mid = 0.5 * (a + c)
        lambda_max = mid + np.sqrt(np.maximum(MIN_EIG_SPREAD, mid * mid - det))
        radius = np.ceil(RADIUS_SIGMAS * np.sqrt(lambda_max))
        ok = in_depth & (det > 0) & np.isfinite(radius) & np.all(np.isfinite(means2d), axis=1)

        # tile rectangle [x0, x1) x [y0, y1), clamped to the grid
        tiles_x, tiles_y = tile_grid(width, height)
        r = np.where(ok, radius, 0.0)
        mx = np.where(ok, means2d[:, 0], 0.0)
        my = np.where(ok, means2d[:, 1], 0.0)
        x0 = np.clip(np.floor((mx - r) / TILE_SIZE), 0, tiles_x)
        x1 = np.clip(np.ceil((mx + r) / TILE_SIZE), 0, tiles_x)
        y0 = np.clip(np.floor((my - r) / TILE_SIZE), 0, tiles_y)
        y1 = np.clip(np.ceil((my + r) / TILE_SIZE), 0, tiles_y)
        visible = ok & (x1 > x0) & (y1 > y0)
        tile_rects = np.where(visible[:, None], np.stack([x0, x1, y0, y1], axis=1), 0).astype(np.int64)

        # view-dependent colour
        cam_center = -Wr.T @ w
        v = means - cam_center
        dir_norm = np.linalg.norm(v, axis=1)
        dirs = v / dir_norm[:, None]
        basis = sh_basis(dirs, sh_degree)
        colors_raw = np.einsum("nk,nkc->nc", basis, sh[:, :k_used, :]) + 0.5
        colors = np.maximum(colors_raw, 0.0)
        raw = np.stack([full[:, 0, 0], full[:, 0, 1], full[:, 1, 1]], axis=1)
        if antialiased:
            det_raw = raw[:, 0] * raw[:, 2] - raw[:, 1] ** 2
            compensation = np.sqrt(np.maximum(0.0, det_raw / det))
        else:
            compensation = np.ones(n)
        opacities = sigmoid(opacity_logits) * compensation

    return Projection(
        means=means, log_scales=log_scales, quats=quats, opacity_logits=opacity_logits, sh=sh,
        sh_degree=sh_degree, Wr=Wr, w=w, fx=fx, fy=fy, cx=cx, cy=cy, width=width, height=height,
        cam_center=cam_center, scales=scales, quat_norm=quat_norm, qn=qn, R=R, M=M, cov3d=cov3d,
        t=t, clamped_xy=clamped_xy, t_clamped=t_clamped, J=J, T=T,
        cov2d=np.stack([a, b, c], axis=1), det=det, conics=conics, means2d=means2d,
        radius=radius, tile_rects=tile_rects, visible=visible, dir_norm=dir_norm, dirs=dirs,
        basis=basis, colors_raw=colors_raw, colors=colors, opacities=opacities,
        antialiased=bool(antialiased), cov2d_raw=raw, compensation=compensation)
