"""The differentiable rasterizer on numpy arrays."""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Sequence

import numpy as np

from . import _core, _passes
from ._validate import as_float32, backend_config, integer
from .camera import Camera
from .config import BLEND_STOPS
from .gaussians import MAX_SH_DEGREE, Gaussians, sh_coeffs


def is_chunked_stop(blend_stop) -> bool:
    """Whether `blend_stop` (one of BLEND_STOPS, else a ValueError naming it) is the chunked stop."""
    if blend_stop not in BLEND_STOPS:
        raise ValueError(f"[splat] blend_stop: expected one of {', '.join(map(repr, BLEND_STOPS))}, "
                         f"got {blend_stop!r}")
    return blend_stop == "chunk"


@dataclass(frozen=True)
class RasterOutput:
    """image [H,W,3], alpha [H,W], radii [N] (0 = invisible); with several cameras
    image [C,H,W,3], alpha [C,H,W], radii [C,N]. depth (accumulated depth
    sum_i w_i z_i, [H,W] or [C,H,W]) when the forward asked for it. `context` is
    what `Rasterizer.backward` needs; it belongs to this output alone."""

    image: np.ndarray
    alpha: np.ndarray
    radii: np.ndarray
    depth: np.ndarray | None = None
    context: "RasterContext | None" = field(default=None, repr=False, compare=False)


@dataclass(frozen=True)
class RasterContext:
    """The passes of one forward (per camera: colour, then depth if asked) and the
    arrays their backward reads. The Gaussians' arrays must not change before the
    backward: when the device has rendered something else since, the backward
    renders the pass again from them."""

    passes: tuple            # per camera: (colour RenderPass, depth RenderPass | None)
    world_to_camera: tuple   # per camera [4,4]
    batched: bool
    shape: tuple             # (N, K, H, W)


@dataclass(frozen=True)
class RasterGradients:
    """Gradients shaped like the Gaussians' arrays, plus means2d [N,2] (pixel units)."""

    means: np.ndarray
    log_scales: np.ndarray
    quats: np.ndarray
    opacity_logits: np.ndarray
    sh: np.ndarray
    means2d: np.ndarray


def check_sh_degree(sh_degree, gaussians: Gaussians) -> int:
    sh_degree = integer("sh_degree", sh_degree)
    if not 0 <= sh_degree <= MAX_SH_DEGREE:
        raise ValueError(f"[splat] sh_degree: must be in 0..{MAX_SH_DEGREE}, got {sh_degree}")
    if gaussians.sh.shape[1] < sh_coeffs(sh_degree):
        raise ValueError(
            f"[splat] sh: degree {sh_degree} needs {sh_coeffs(sh_degree)} coefficients per channel, "
            f"got {gaussians.sh.shape[1]}"
        )
    return int(sh_degree)


class Rasterizer:
    """Renders Gaussians and back-propagates image gradients, on the configured backend.

        out = r.forward(gaussians, camera, sh_degree, background)        # or [camera, ...]
        grads = r.backward(out, d_image, d_alpha)                         # pairs with `out`

    A forward returns everything its backward needs (`out.context`), so any number
    of outputs can be alive and each backward uses its own forward's state: a
    device keeps the state of one pass (a camera's colour or depth), and a
    backward whose state was displaced renders that pass again first.
    `pool_size` devices keep that many passes resident (e.g. the cameras of a
    batch, or colour and depth), at that many times the device memory.
    `backward(d_image, d_alpha)` without an output is the older form: it pairs
    with the last forward() of this Rasterizer.
    """

    def __init__(self, config: "_core.BackendConfig | None" = None, *, pool_size: int = 1):
        config = backend_config("config", config)
        self.config = config
        self._pool = _passes.NativePool(config, pool_size)
        self._native = self._pool.native(0)
        self._last: RasterOutput | None = None

    @property
    def backend(self) -> str:
        """The backend actually running ('cpu', 'cuda' or 'metal')."""
        return self._native.backend

    @property
    def allocation_count(self) -> int:
        """Device buffer (re)allocations so far, over every device of this Rasterizer."""
        return self._pool.allocation_count

    def forward(self, gaussians: Gaussians, camera: "Camera | Sequence[Camera]", sh_degree: int = 3,
                background=(0.0, 0.0, 0.0), *, depth: bool = False, antialiased: bool = False,
                blend_stop: str = "splat") -> RasterOutput:
        """Renders `gaussians` from `camera`, or from each camera of a sequence (all of one
        size; the outputs gain a leading camera axis). `background` is [3] or, per camera,
        [C,3]. `depth=True` also renders the accumulated depth sum_i w_i z_i.
        `antialiased=True` applies the mip-splatting 2D filter (each splat's opacity times
        sqrt(det(cov2d) / det(cov2d + 0.3 I)), gsplat's rasterize_mode="antialiased"); the
        backward of this output follows it. `blend_stop` is where a pixel's blend stops:
        "splat" (the 3DGS rule: before the splat that would take its transmittance below
        1e-4) or "chunk" (`[train] blend_stop`: that rule within each 256-entry chunk of a
        tile's list, from the chunk's start, and the pixel stops after the first chunk that
        leaves its transmittance below 1e-4; docs/gpu.md, "The chunked stop")."""
        if not isinstance(gaussians, Gaussians):
            raise TypeError(f"[splat] gaussians: expected splat.Gaussians, got {type(gaussians).__name__}")
        batched = not isinstance(camera, Camera)
        cameras = list(camera) if batched else [camera]
        for i, c in enumerate(cameras):
            if not isinstance(c, Camera):
                raise TypeError(f"[splat] camera[{i}]: expected splat.Camera, got {type(c).__name__}")
        if not cameras:
            raise ValueError("[splat] camera: the sequence of cameras is empty")
        w, h = cameras[0].width, cameras[0].height
        for i, c in enumerate(cameras):
            if (c.width, c.height) != (w, h):
                raise ValueError(f"[splat] camera[{i}]: is {c.width}x{c.height}, camera[0] is {w}x{h}; "
                                 "a batch renders one image size")
        degree = check_sh_degree(sh_degree, gaussians)
        if not isinstance(antialiased, (bool, np.bool_)):
            raise TypeError(f"[splat] antialiased: expected a bool, got {type(antialiased).__name__}")
        chunked = is_chunked_stop(blend_stop)
        bg = as_float32("background", background)
        if bg.shape == (3,):
            bgs = [bg] * len(cameras)
        elif batched and bg.shape == (len(cameras), 3):
            bgs = list(bg)
        else:
            want = f"[3] or [{len(cameras)}, 3]" if batched else "[3]"
            raise ValueError(f"[splat] background: expected shape {want}, got {list(bg.shape)}")
        g = gaussians
        self._last = None  # a forward that fails leaves nothing for backward(d_image) to pair with
        images, alphas, radii, depths, passes = [], [], [], [], []
        for c, b in zip(cameras, bgs):
            image, alpha, r, colour_pass = _passes.render(
                self._pool, g.means, g.log_scales, g.quats, g.opacity_logits, g.sh, c.world_to_camera,
                c.fx, c.fy, c.cx, c.cy, w, h, degree, np.ascontiguousarray(b), _passes.NEAR, _passes.FAR,
                antialiased, chunked)
            depth_pass = None
            if depth:
                sh_z = _passes.depth_sh(_passes.camera_depths(g.means, c.world_to_camera))
                d, _, _, depth_pass = _passes.render(
                    self._pool, g.means, g.log_scales, g.quats, g.opacity_logits, sh_z, c.world_to_camera,
                    c.fx, c.fy, c.cx, c.cy, w, h, 0, _passes.ZERO_BACKGROUND, _passes.NEAR, _passes.FAR,
                    antialiased, chunked)
                depths.append(d[..., 0])
            images.append(image)
            alphas.append(alpha)
            radii.append(r)
            passes.append((colour_pass, depth_pass))
        pick = (lambda xs: np.stack(xs)) if batched else (lambda xs: xs[0])
        ctx = RasterContext(tuple(passes), tuple(c.world_to_camera for c in cameras), batched,
                            (len(g), g.sh.shape[1], h, w))
        out = RasterOutput(pick(images), pick(alphas), pick(radii), pick(depths) if depth else None, ctx)
        self._last = out
        return out

    def backward(self, output, d_image=None, d_alpha=None, *, d_depth=None) -> RasterGradients:
        """Gradients of the forward that returned `output`, given dL/d image and optionally
        dL/d alpha and dL/d depth (shaped like the output's arrays). Gradients of a batch are
        summed over its cameras, except means2d [C,N,2] (one per camera).

        The older form backward(d_image, d_alpha) pairs with this Rasterizer's last forward."""
        if not isinstance(output, RasterOutput):
            if d_depth is not None:
                raise TypeError("[splat] d_depth: pass the forward's output first: backward(out, d_image, ...)")
            if self._last is None:
                raise RuntimeError("[splat] backward: call forward() first (backward() needs a completed forward)")
            output, d_image, d_alpha = self._last, output, d_image
        ctx = output.context
        if ctx is None:
            raise ValueError("[splat] output: has no context (not returned by Rasterizer.forward)")
        n, k, h, w = ctx.shape
        c = len(ctx.passes)
        lead = (c,) if ctx.batched else ()
        if d_image is None:
            raise TypeError("[splat] d_image: required")
        d_image = as_float32("d_image", d_image, lead + (h, w, 3)).reshape(c, h, w, 3)
        if d_alpha is not None:
            d_alpha = as_float32("d_alpha", d_alpha, lead + (h, w)).reshape(c, h, w)
        if d_depth is not None:
            if output.depth is None:
                raise ValueError("[splat] d_depth: the forward rendered no depth (forward(..., depth=True))")
            d_depth = as_float32("d_depth", d_depth, lead + (h, w)).reshape(c, h, w)
        total = None
        means2d = np.zeros((c, n, 2), np.float32)
        # The last pass rendered first: it is the likeliest to still be on its device.
        for i in reversed(range(c)):
            colour_pass, depth_pass = ctx.passes[i]
            if depth_pass is not None and d_depth is not None:
                d = np.zeros((h, w, 3), np.float32)
                d[..., 0] = d_depth[i]
                gd = list(depth_pass.backward(d, None))
                # dL/dz from the colour (z, 0, 0): dL/d sh = C0 dL/d colour; z = R[2] . mean + t.z
                d_z = gd[4][:, 0, 0].astype(np.float64) / _passes.SH_C0
                gd[0] = (gd[0] + np.outer(d_z, ctx.world_to_camera[i][2, :3])).astype(np.float32)
                total = _sum_grads(total, gd[:4], None)
            gc = colour_pass.backward(d_image[i], None if d_alpha is None else d_alpha[i])
            total = _sum_grads(total, gc[:4], gc[4])
            means2d[i] += gc[5]
            if depth_pass is not None and d_depth is not None:
                means2d[i] += gd[5]
        means_g, log_scales_g, quats_g, opacity_g, sh_g = total
        return RasterGradients(means_g, log_scales_g, quats_g, opacity_g, sh_g,
                               means2d if ctx.batched else means2d[0])


def _sum_grads(total, four, sh):
    """Adds (means, log_scales, quats, opacity_logits) and, when given, sh to `total`."""
    if total is None:
        total = [None] * 5
    for j, a in enumerate(four):
        total[j] = a if total[j] is None else total[j] + a
    if sh is not None:
        total[4] = sh if total[4] is None else total[4] + sh
    return total

