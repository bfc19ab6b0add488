"""`splat.torch.rasterization`: gsplat's `rasterization()` signature and conventions
over `splat.torch.rasterize`, so a gsplat script switches by changing its import.

gsplat takes activated parameters: scales (log taken here), opacities in (0, 1)
(logit taken here) and colours as SH [N,K,3] (sh_degree set) or RGB [N,3]
(sh_degree None: the colour is a degree-0 SH whose value is the RGB, so it is
clamped at 0 as SH colours are). Settings splat does not have raise a
ValueError naming them rather than rendering something else; README "From
torch" lists every difference.
"""
from __future__ import annotations

import torch

from .._passes import SH_C0
from ._render import rasterize

# Opacities are clamped into the open interval before the logit: 1 - 1e-6 still
# saturates the blend's 0.999 alpha clamp.
_OPACITY_EPS = 1e-6


def rasterization(means, quats, scales, opacities, colors, viewmats, Ks, width, height, near_plane=0.01,
                  far_plane=1e10, radius_clip=0.0, eps2d=0.3, sh_degree=None, packed=True, tile_size=16,
                  backgrounds=None, render_mode="RGB", sparse_grad=False, absgrad=False,
                  rasterize_mode="classic", channel_chunk=32, distributed=False, camera_model="pinhole",
                  segmented=False, covars=None, config=None, blend_stop="splat", **unsupported):
    """Render N Gaussians to C images as gsplat's `rasterization` does (see its docs).

    Returns (render_colors [C,H,W,X], render_alphas [C,H,W,1], meta). The layout is
    always gsplat's unpacked one ([C,N,...]) whatever `packed` says; pass
    packed=False to a gsplat strategy. `channel_chunk` and `segmented` only tune
    gsplat's kernels and are ignored. `config` (splat's own): a splat.BackendConfig
    for the rasterizers of this call (default: the device's defaults); `blend_stop`
    (splat's own): "splat", gsplat's stop, or "chunk" (splat.torch.rasterize)."""
    _refuse("radius_clip", radius_clip, 0.0)
    _refuse("eps2d", eps2d, 0.3, why="splat's 2D dilation is fixed at 0.3")
    _refuse("tile_size", tile_size, 16, why="splat's tiles are 16x16")
    _refuse("sparse_grad", sparse_grad, False)
    _refuse("absgrad", absgrad, False)
    _refuse("distributed", distributed, False)
    _refuse("camera_model", camera_model, "pinhole")
    if covars is not None:
        raise ValueError("[splat] covars: not supported; pass quats and scales")
    if unsupported:
        raise ValueError(f"[splat] rasterization: arguments splat does not have: {', '.join(sorted(unsupported))}")
    if means.dim() != 2:
        raise ValueError(f"[splat] means: expected shape [N, 3] (no batch dimensions), got {list(means.shape)}")
    if not isinstance(scales, torch.Tensor) or not isinstance(opacities, torch.Tensor):
        raise TypeError("[splat] scales, opacities: expected torch.Tensors")
    log_scales = torch.log(scales)
    opacity_logits = torch.logit(opacities, eps=_OPACITY_EPS)  # clamps as clamp() would, in one op and node
    if sh_degree is None:
        n = means.shape[0]
        if colors.shape[-1] != 3 or colors.dim() not in (2, 3) or colors.shape[-2] != n:
            raise ValueError(f"[splat] colors: with sh_degree None expected RGB [N, 3] or [C, N, 3], got "
                             f"{list(colors.shape)} (splat renders 3 colour channels)")
        sh = ((colors - 0.5) / SH_C0).unsqueeze(-2)
        degree = 0
    else:
        sh, degree = colors, int(sh_degree)
    return rasterize(means, quats, log_scales, opacity_logits, sh, viewmats, Ks, width, height, sh_degree=degree,
                     backgrounds=backgrounds, render_mode=render_mode, near=near_plane, far=far_plane,
                     config=config, rasterize_mode=rasterize_mode, blend_stop=blend_stop)


def _refuse(name, value, default, why=None):
    if value != default:
        raise ValueError(f"[splat] {name}={value!r}: not supported by splat (only {default!r})"
                         + (f"; {why}" if why else ""))
