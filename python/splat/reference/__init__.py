"""Reference (oracle) implementation of the differentiable Gaussian rasterizer.

Plain numpy in float64, written for clarity rather than speed: every other backend
is tested against it. It imports nothing but numpy.

    out = forward(means, log_scales, quats, opacity_logits, sh, world_to_camera,
                  fx, fy, cx, cy, width, height, sh_degree, background)
    out = forward(gaussians, camera, sh_degree, background)     # duck-typed objects
    grads = backward(out, d_image, d_alpha=None)

Stages: `project` (per Gaussian: covariance, EWA projection, radius, tile rectangle,
SH colour; projection.py), `rasterize` (per tile: depth-sorted front-to-back blending;
blend.py) and their exact derivatives (backward.py).
"""
from .backward import RefGrads, backward, project_backward, rasterize_backward
from .forward import RefForward, forward, forward_arrays, forward_scene
from .projection import Projection, project
from .blend import BLEND_STOPS, CHUNK, SplatAlphas, TileBlend, blend_pixel_literal, rasterize, splat_alphas
from .sh import sh_basis, sh_basis_jacobian

__all__ = [
    "forward", "backward", "RefForward", "RefGrads", "forward_arrays", "forward_scene",
    "project", "Projection", "rasterize", "rasterize_backward", "project_backward",
    "blend_pixel_literal", "splat_alphas", "SplatAlphas", "TileBlend", "sh_basis", "sh_basis_jacobian", "BLEND_STOPS",
    "CHUNK",
]
