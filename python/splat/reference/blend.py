"""Per-pixel stage of the forward pass: front-to-back alpha blending of 2D splats.

The image is cut into 16x16 tiles. Every pixel of a tile walks the same list:
the visible splats whose tile rectangle contains the tile, sorted by depth
(ties by Gaussian index). For one pixel the blend is, literally
(`blend_pixel_literal` below is exactly this, one scalar at a time):

    T = 1, C = 0
    for position, g in enumerate(list, start=1):
        d = mean2d[g] - (i + 0.5, j + 0.5)
        sigma = 0.5 (A dx^2 + C dy^2) + B dx dy
        if sigma < 0 or sigma >= 5.55: skip
        alpha = min(0.999, opacity[g] exp(-sigma))
        if alpha < 1/255: skip
        if T (1 - alpha) < 1e-4: stop (g does not contribute)
        C += colour[g] alpha T;  T *= 1 - alpha;  n_contrib = position
    image = C + T background, alpha = 1 - T

`rasterize` evaluates the same thing for all pixels of a tile at once: the
alphas of the whole [list, pixel] table are computed first (they do not depend
on T), then the running transmittance is a cumulative product down the list
(multiplying by 1 for skipped splats), and the stop position of a pixel is the
first list entry where that product drops below 1e-4. That entry is always a
non-skipped one (the product only changes at those), so "stop before it" gives
exactly the contributors of the sequential loop, with the same products.

The chunked stop (`blend_stop="chunk"`, `[train] blend_stop`): the list is cut into
chunks of CHUNK positions; within a chunk the stop above applies to the chunk's own
product (from 1 at the chunk's first entry), and a pixel takes no later chunk once a
chunk stopped it or left its T below 1e-4. The first chunk is the rule above exactly;
later ones let a pixel blend past the 3DGS stop to its chunk's end: the splat the 3DGS
rule stops before (T (1 - alpha) < 1e-4, so T < 1e-4 / (1 - alpha), up to 0.1 for an
opaque one) and those after it (each adding under 1e-4). Chunks count the positions of the lists as binning
builds them, which leaves out the tiles of a splat's rect that its ellipse cannot reach
(shaders/common/tile_cover.h): pass those lists as `tile_mask` for the chunked stop.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .projection import TILE_SIZE, tile_grid

SIGMA_CUTOFF = 5.55          # skip if sigma >= 5.55
ALPHA_MAX = 0.999            # alpha = min(0.999, opacity exp(-sigma))
ALPHA_MIN = 1.0 / 255.0      # skip if alpha < 1/255
T_MIN = 1e-4                 # stop before a splat that would bring T below this
CHUNK = 256                  # list positions a chunk of the chunked stop holds
BLEND_STOPS = ("splat", "chunk")


@dataclass
class TileBlend:
    """What the forward decided for one tile; the backward replays it."""

    tile: tuple[int, int]    # (tile x, tile y)
    px: np.ndarray           # [P] pixel columns i of the tile's in-image pixels (row-major)
    py: np.ndarray           # [P] pixel rows j
    ids: np.ndarray          # [L] the tile's list: Gaussian indices, front to back
    contrib: np.ndarray      # [L,P] bool: splat ids[k] was blended into pixel p


@dataclass
class SplatAlphas:
    """Per (list entry, pixel) quantities of the blend, all [L,P]."""

    dx: np.ndarray           # mean2d.x - (i + 0.5)
    dy: np.ndarray           # mean2d.y - (j + 0.5)
    sigma: np.ndarray
    gauss: np.ndarray        # exp(-sigma)
    raw: np.ndarray          # opacity exp(-sigma), before the 0.999 clamp
    alpha: np.ndarray        # min(0.999, raw)
    passes: np.ndarray       # bool: not skipped (sigma in [0, 5.55) and alpha >= 1/255)


def splat_alphas(means2d, conics, opacities, ids, px, py) -> SplatAlphas:
    """Alphas of the splats `ids` [L] at the pixels (px, py) [P]."""
    dx = means2d[ids, 0][:, None] - (px + 0.5)[None, :]
    dy = means2d[ids, 1][:, None] - (py + 0.5)[None, :]
    A, B, C = (conics[ids, k][:, None] for k in range(3))
    sigma = 0.5 * (A * dx * dx + C * dy * dy) + B * dx * dy
    with np.errstate(over="ignore"):
        gauss = np.exp(-sigma)
    raw = opacities[ids][:, None] * gauss
    alpha = np.minimum(ALPHA_MAX, raw)
    passes = (sigma >= 0.0) & (sigma < SIGMA_CUTOFF) & (alpha >= ALPHA_MIN)
    return SplatAlphas(dx, dy, sigma, gauss, raw, alpha, passes)


def transmittance(alpha: np.ndarray, contrib: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(T before each list entry [L,P], final T [P]) given the contributor mask."""
    factor = np.where(contrib, 1.0 - alpha, 1.0)
    after = np.cumprod(factor, axis=0)
    before = np.concatenate([np.ones((1, alpha.shape[1])), after[:-1]], axis=0)
    return before, after[-1]


def depth_order(depths: np.ndarray, visible: np.ndarray) -> np.ndarray:
    """Indices of the visible Gaussians by depth ascending, ties by index."""
    idx = np.flatnonzero(visible)
    return idx[np.argsort(depths[idx], kind="stable")]


def tile_list(order: np.ndarray, tile_rects: np.ndarray, tx: int, ty: int, tile_mask=None) -> np.ndarray:
    """The entries of `order` whose tile rectangle contains tile (tx, ty), in order;
    with `tile_mask` [N, tiles_y, tiles_x], those it marks at (tx, ty) among them."""
    r = tile_rects[order]
    inside = (r[:, 0] <= tx) & (tx < r[:, 1]) & (r[:, 2] <= ty) & (ty < r[:, 3])
    if tile_mask is not None:
        inside &= tile_mask[order, ty, tx].astype(bool)
    return order[inside]


def tile_pixels(tx: int, ty: int, width: int, height: int) -> tuple[np.ndarray, np.ndarray]:
    """(px, py) of the in-image pixels of tile (tx, ty), row-major."""
    cols = np.arange(tx * TILE_SIZE, min((tx + 1) * TILE_SIZE, width))
    rows = np.arange(ty * TILE_SIZE, min((ty + 1) * TILE_SIZE, height))
    py, px = np.meshgrid(rows, cols, indexing="ij")
    return px.ravel(), py.ravel()


def stop_mask(s: SplatAlphas) -> np.ndarray:
    """[L,P] bool: the splats blended under the 3DGS stop."""
    n_list = s.alpha.shape[0]
    # running T if every non-skipped splat were blended; stop where it drops below T_MIN
    running = np.cumprod(np.where(s.passes, 1.0 - s.alpha, 1.0), axis=0)
    below = running < T_MIN
    stop = np.where(below.any(axis=0), below.argmax(axis=0), n_list)
    return s.passes & (np.arange(n_list)[:, None] < stop[None, :])


def chunked_stop_mask(s: SplatAlphas) -> np.ndarray:
    """[L,P] bool: the splats blended under the chunked stop (module docstring)."""
    n_list, n_pix = s.alpha.shape
    contrib = np.zeros((n_list, n_pix), dtype=bool)
    T = np.ones(n_pix)
    alive = np.ones(n_pix, dtype=bool)
    for lo in range(0, n_list, CHUNK):
        part = SplatAlphas(*(getattr(s, f)[lo:lo + CHUNK] for f in SplatAlphas.__dataclass_fields__))
        inside = stop_mask(part)                                   # the 3DGS stop from 1 in the chunk
        stopped = part.passes.any(axis=0) & (inside.sum(axis=0) < part.passes.sum(axis=0))
        inside &= alive[None, :]
        contrib[lo:lo + CHUNK] = inside
        T = T * np.prod(np.where(inside, 1.0 - part.alpha, 1.0), axis=0)
        alive &= ~stopped & (T >= T_MIN)
    return contrib


def rasterize(means2d, conics, colors, opacities, depths, tile_rects, visible,
              width, height, background, blend_stop="splat", tile_mask=None):
    """Blend the splats. Returns (image [H,W,D], alpha [H,W], n_contrib [H,W] int32,
    final_T [H,W], tiles: list[TileBlend]); colors [N,D] and background [D] (D = 3, or
    4 with the camera depth as the last channel). `blend_stop`: "splat" (the 3DGS stop)
    or "chunk" (the chunked stop, module docstring); `tile_mask` [N, tiles_y, tiles_x]: the
    tiles binning gives each splat (tile_list)."""
    if blend_stop not in BLEND_STOPS:
        raise ValueError(f"[splat.reference] blend_stop: expected one of {BLEND_STOPS}, got {blend_stop!r}")
    background = np.asarray(background, dtype=np.float64).reshape(-1)
    image = np.empty((height, width, colors.shape[1]))
    final_T = np.ones((height, width))
    n_contrib = np.zeros((height, width), dtype=np.int32)
    order = depth_order(depths, visible)
    tiles_x, tiles_y = tile_grid(width, height)
    tiles = []
    for ty in range(tiles_y):
        for tx in range(tiles_x):
            px, py = tile_pixels(tx, ty, width, height)
            ids = tile_list(order, tile_rects, tx, ty, tile_mask)
            n_list = len(ids)
            if n_list == 0:
                contrib = np.zeros((0, len(px)), dtype=bool)
                image[py, px] = background
                tiles.append(TileBlend((tx, ty), px, py, ids, contrib))
                continue
            s = splat_alphas(means2d, conics, opacities, ids, px, py)
            contrib = stop_mask(s) if blend_stop == "splat" else chunked_stop_mask(s)
            T_before, T_last = transmittance(s.alpha, contrib)
            weight = np.where(contrib, s.alpha * T_before, 0.0)           # [L,P]
            color = weight.T @ colors[ids]                                # [P,3]
            image[py, px] = color + T_last[:, None] * background
            final_T[py, px] = T_last
            last = n_list - np.argmax(contrib[::-1], axis=0)              # 1-based position
            n_contrib[py, px] = np.where(contrib.any(axis=0), last, 0)
            tiles.append(TileBlend((tx, ty), px, py, ids, contrib))
    return image, 1.0 - final_T, n_contrib, final_T, tiles


def blend_pixel_literal(means2d, conics, colors, opacities, depths, tile_rects, visible,
                        background, i: int, j: int):
    """One pixel, one splat at a time, exactly as specified (slow; used to test `rasterize`).

    Returns (rgb [3], alpha, n_contrib, final_T)."""
    order = depth_order(depths, visible)
    T = 1.0
    C = np.zeros(3)
    n_contrib = 0
    for position, g in enumerate(tile_list(order, tile_rects, i // TILE_SIZE, j // TILE_SIZE), 1):
        dx = means2d[g, 0] - (i + 0.5)
        dy = means2d[g, 1] - (j + 0.5)
        A, B, Cc = conics[g]
        sigma = 0.5 * (A * dx * dx + Cc * dy * dy) + B * dx * dy
        if sigma < 0.0 or sigma >= SIGMA_CUTOFF:
            continue
        alpha = min(ALPHA_MAX, opacities[g] * np.exp(-sigma))
        if alpha < ALPHA_MIN:
            continue
        if T * (1.0 - alpha) < T_MIN:
            break
        C += colors[g] * alpha * T
        T *= 1.0 - alpha
        n_contrib = position
    return C + T * np.asarray(background, dtype=np.float64), 1.0 - T, n_contrib, T
