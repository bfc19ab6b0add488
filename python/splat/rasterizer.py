"""The differentiable rasterizer on numpy arrays."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import _core
from ._validate import as_float32, backend_config, integer
from .camera import Camera
from .gaussians import MAX_SH_DEGREE, Gaussians, sh_coeffs


@dataclass(frozen=True)
class RasterOutput:
    """image [H,W,3], alpha [H,W], radii [N] (0 = invisible)."""

    image: np.ndarray
    alpha: np.ndarray
    radii: np.ndarray


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
    """Renders Gaussians and back-propagates image gradients, on the configured backend."""

    def __init__(self, config: "_core.BackendConfig | None" = None):
        config = backend_config("config", config)
        self.config = config
        self._native = _core.Rasterizer(config)
        self._last: tuple[int, int, int] | None = None  # (N, H, W)

    @property
    def backend(self) -> str:
        """The backend actually running ('cpu', 'cuda' or 'metal')."""
        return self._native.backend

    def forward(self, gaussians: Gaussians, camera: Camera, sh_degree: int = 3,
                background=(0.0, 0.0, 0.0)) -> RasterOutput:
        if not isinstance(gaussians, Gaussians):
            raise TypeError(f"[splat] gaussians: expected splat.Gaussians, got {type(gaussians).__name__}")
        if not isinstance(camera, Camera):
            raise TypeError(f"[splat] camera: expected splat.Camera, got {type(camera).__name__}")
        degree = check_sh_degree(sh_degree, gaussians)
        bg = as_float32("background", background, (3,))
        g, c = gaussians, camera
        image, alpha, radii = self._native.forward(
            g.means, g.log_scales, g.quats, g.opacity_logits, g.sh, c.world_to_camera,
            c.fx, c.fy, c.cx, c.cy, c.width, c.height, degree, bg)
        self._last = (len(g), c.height, c.width)
        return RasterOutput(image=image, alpha=alpha, radii=radii)

    def backward(self, d_image, d_alpha=None) -> RasterGradients:
        """Gradients of the last forward() given dL/d image (and optionally dL/d alpha)."""
        if self._last is None:
            raise RuntimeError("[splat] backward: call forward() first")
        _, h, w = self._last
        d_image = as_float32("d_image", d_image, (h, w, 3))
        if d_alpha is not None:
            d_alpha = as_float32("d_alpha", d_alpha, (h, w))
        arrays = self._native.backward(d_image, d_alpha)
        return RasterGradients(*arrays)
