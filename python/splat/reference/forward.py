"""Float64 forward pass: `forward(...)` -> `RefForward`."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .projection import Projection, as_f64, project, tile_grid
from .blend import ALPHA_MAX, TileBlend, rasterize, splat_alphas
from .sh import MAX_SH_DEGREE


@dataclass
class RefForward:
    """Result of `forward`. Per-Gaussian outputs of invisible Gaussians (radius 0) are zero,
    except `depths` (always t.z), `colors` and `opacities` (always evaluated)."""

    image: np.ndarray        # [H,W,3]
    alpha: np.ndarray        # [H,W] 1 - final_T
    radii: np.ndarray        # [N] int32, 0 = invisible
    means2d: np.ndarray      # [N,2] pixels
    conics: np.ndarray       # [N,3] (A, B, C): inverse 2D covariance [[A, B], [B, C]]
    depths: np.ndarray       # [N] camera-space z
    colors: np.ndarray       # [N,3] clamped SH colour
    opacities: np.ndarray    # [N] the blend's: sigmoid(opacity_logits), times the compensation if antialiased
    n_contrib: np.ndarray    # [H,W] int32: 1-based list position of the last blended splat
    final_T: np.ndarray      # [H,W]
    tile_rects: np.ndarray   # [N,4] int64 (x0, x1, y0, y1): tiles [x0,x1) x [y0,y1); 0 if invisible
    background: np.ndarray   # [3]
    proj: Projection = field(repr=False)          # every per-Gaussian intermediate
    tiles: list[TileBlend] = field(repr=False)    # per-tile lists and contributor masks
    depth: np.ndarray | None = None  # [H,W] accumulated depth sum_i w_i z_i, when asked for

    def decisions(self) -> dict[str, np.ndarray]:
        """Every discrete choice the forward made. The outputs are smooth functions of the
        inputs wherever all of these stay unchanged (used to validate finite differences)."""
        p = self.proj
        vis = p.visible
        alpha_clamped = []
        for tb in self.tiles:
            if len(tb.ids):
                s = splat_alphas(self.means2d, self.conics, self.opacities, tb.ids, tb.px, tb.py)
                alpha_clamped.append(((s.raw > ALPHA_MAX) & tb.contrib).ravel())
        cat = (lambda xs, dt: np.concatenate(xs) if xs else np.zeros(0, dtype=dt))
        return {
            "radii": self.radii,
            "tile_rects": self.tile_rects,
            "n_contrib": self.n_contrib,
            "tile_lists": cat([tb.ids for tb in self.tiles], np.int64),
            "contrib": cat([tb.contrib.ravel() for tb in self.tiles], bool),
            "alpha_clamped": cat(alpha_clamped, bool),
            "fov_clamped": p.clamped_xy & vis[:, None],
            "color_clamped": (p.colors_raw < 0.0) & vis[:, None],
        }


def forward_arrays(means, log_scales, quats, opacity_logits, sh, world_to_camera,
                   fx, fy, cx, cy, width, height, sh_degree, background, depth=False,
                   antialiased=False, blend_stop="splat", tile_cover=None) -> RefForward:
    """Render N Gaussians given as arrays (any float dtype; computed in float64). With
    `depth`, the blend carries the camera depth z as a fourth channel (background 0):
    `depth` = sum_i w_i z_i with the colour's weights. `antialiased`: the 2D filter's
    opacity compensation (projection.project). `blend_stop`: "splat" or "chunk"
    (blend.rasterize). `tile_cover(means2d, conics, opacities, tile_rects, tiles_x, tiles_y)`
    gives the [N, tiles_y, tiles_x] mask of the tiles binning gives each splat (default:
    its whole rect), whose list positions the chunked stop's chunks count."""
    background = as_f64("background", background, (None,)).reshape(-1)
    if background.shape != (3,):
        raise ValueError(f"[splat.reference] background: expected 3 values, got {background.shape[0]}")
    p = project(means, log_scales, quats, opacity_logits, sh, world_to_camera,
                fx, fy, cx, cy, width, height, sh_degree, antialiased)
    vis = p.visible
    means2d = np.where(vis[:, None], p.means2d, 0.0)
    conics = np.where(vis[:, None], p.conics, 0.0)
    colors, bg = p.colors, background
    if depth:
        colors = np.concatenate([p.colors, p.depths[:, None]], axis=1)
        bg = np.append(background, 0.0)
    tile_mask = None
    if tile_cover is not None:
        tile_mask = tile_cover(means2d, conics, p.opacities, p.tile_rects, *tile_grid(p.width, p.height))
    image, alpha, n_contrib, final_T, tiles = rasterize(
        means2d, conics, colors, p.opacities, p.depths, p.tile_rects, vis,
        p.width, p.height, bg, blend_stop, tile_mask)
    return RefForward(
        image=image[..., :3], depth=image[..., 3] if depth else None, alpha=alpha, radii=np.where(vis, p.radius, 0).astype(np.int32),
        means2d=means2d, conics=conics, depths=p.depths.copy(), colors=p.colors,
        opacities=p.opacities, n_contrib=n_contrib, final_T=final_T, tile_rects=p.tile_rects,
        background=background, proj=p, tiles=tiles)


def forward_scene(gaussians, camera, sh_degree=None, background=None, depth=False,
                  antialiased=False, blend_stop="splat") -> RefForward:
    """Render duck-typed Gaussians (.means .log_scales .quats .opacity_logits .sh) seen by a
    duck-typed camera (.world_to_camera .fx .fy .cx .cy .width .height).

    sh_degree defaults to the largest degree the stored coefficients allow, background to black."""
    g, c = gaussians, camera
    if sh_degree is None:
        k = np.asarray(g.sh).shape[1]
        sh_degree = min(MAX_SH_DEGREE, int(np.floor(np.sqrt(k) + 1e-9)) - 1)
    if background is None:
        background = np.zeros(3)
    return forward_arrays(g.means, g.log_scales, g.quats, g.opacity_logits, g.sh,
                          c.world_to_camera, c.fx, c.fy, c.cx, c.cy, c.width, c.height,
                          sh_degree, background, depth, antialiased, blend_stop)


def _is_gaussians(x) -> bool:
    return all(hasattr(x, a) for a in ("means", "log_scales", "quats", "opacity_logits", "sh"))


def forward(*args, **kwargs) -> RefForward:
    """forward(means, log_scales, quats, opacity_logits, sh, world_to_camera,
               fx, fy, cx, cy, width, height, sh_degree, background, depth=False, antialiased=False,
               blend_stop="splat")
    or forward(gaussians, camera, sh_degree, background, depth=False, antialiased=False)."""
    if (args and _is_gaussians(args[0])) or "gaussians" in kwargs:
        return forward_scene(*args, **kwargs)
    return forward_arrays(*args, **kwargs)
