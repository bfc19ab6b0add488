"""Tile coverage (shaders/common/tile_cover.h): binning gives a splat only the tiles
of its projection rect where some pixel centre can receive a non-zero alpha.

The oracle is a brute force over every pixel centre of the rect with the blend's own
skip tests in float32 (blend.h) and, for tightness, the exact ellipse in float64.
"""
from __future__ import annotations

import numpy as np
import pytest

from splat import _core
from _scenes import make_rng

TILE = 16
SIGMA_SKIP = 5.55
MARGIN = 0.1


def random_splats(rng, n, tiles_x, tiles_y):
    """mean2d, conic, opacity and the spec's tile rects of random 2D splats: round,
    needle-thin and huge ones, some centred off screen, opacities down to below 1/255."""
    w, h = tiles_x * TILE, tiles_y * TILE
    mean2d = np.stack([rng.uniform(-0.2 * w, 1.2 * w, n), rng.uniform(-0.2 * h, 1.2 * h, n)], 1)
    sx = np.exp(rng.uniform(np.log(0.3), np.log(60.0), n))
    sy = sx * np.exp(rng.uniform(np.log(1e-2), 0.0, n))
    theta = rng.uniform(0, np.pi, n)
    c, s = np.cos(theta), np.sin(theta)
    cov_a = c * c * sx * sx + s * s * sy * sy + 0.3
    cov_b = c * s * (sx * sx - sy * sy)
    cov_c = s * s * sx * sx + c * c * sy * sy + 0.3
    det = cov_a * cov_c - cov_b * cov_b
    conic = np.stack([cov_c / det, -cov_b / det, cov_a / det], 1).astype(np.float32)
    opacity = np.exp(rng.uniform(np.log(1e-3), 0.0, n)).astype(np.float32)
    mid = 0.5 * (cov_a + cov_c)
    radius = np.ceil(3.0 * np.sqrt(mid + np.sqrt(np.maximum(0.1, mid * mid - det))))
    rects = np.stack([np.clip(np.floor((mean2d[:, 0] - radius) / TILE), 0, tiles_x),
                      np.clip(np.floor((mean2d[:, 1] - radius) / TILE), 0, tiles_y),
                      np.clip(np.ceil((mean2d[:, 0] + radius) / TILE), 0, tiles_x),
                      np.clip(np.ceil((mean2d[:, 1] + radius) / TILE), 0, tiles_y)], 1).astype(np.int32)
    return mean2d.astype(np.float32), conic, opacity, rects


def sigma_grid(mean2d, conic, rect, dtype):
    """sigma at every pixel centre of the rect's tiles, as blend.h computes it in `dtype`."""
    x0, y0, x1, y1 = (int(v) for v in rect)
    px = (np.arange(x0 * TILE, x1 * TILE) + 0.5).astype(dtype)
    py = (np.arange(y0 * TILE, y1 * TILE) + 0.5).astype(dtype)
    dx = dtype(mean2d[0]) - px[None, :]
    dy = dtype(mean2d[1]) - py[:, None]
    a, b, c = (dtype(v) for v in conic)
    return dtype(0.5) * (a * dx * dx + c * dy * dy) + b * dx * dy


def tile_min_sigma(mean2d, conic, rect, size=TILE):
    """[tiles_y, tiles_x] of the rect (or, for a smaller `size`, its size x size pixel
    blocks): the least float64 sigma over each one's continuous box of pixel centres
    (its minimum lies on an edge unless the mean is inside)."""
    x0, y0, x1, y1 = (int(v) * TILE // size for v in rect)
    a, b, c = conic.astype(np.float64)
    tx, ty = np.meshgrid(np.arange(x0, x1), np.arange(y0, y1))
    u0, u1 = tx * size + 0.5 - mean2d[0], tx * size + size - 0.5 - mean2d[0]
    v0, v1 = ty * size + 0.5 - mean2d[1], ty * size + size - 0.5 - mean2d[1]
    q = lambda u, v: 0.5 * (a * u * u + c * v * v) + b * u * v
    best = np.where((u0 <= 0) & (0 <= u1) & (v0 <= 0) & (0 <= v1), 0.0, np.inf)
    for v in (v0, v1):
        best = np.minimum(best, q(np.clip(-b * v / a, u0, u1), v))
    for u in (u0, u1):
        best = np.minimum(best, q(u, np.clip(-b * u / c, v0, v1)))
    return best


def tiles_where(flags, rect, size=TILE):
    """[tiles_y, tiles_x] of the rect (or its size x size blocks): any flag in the tile."""
    x0, y0, x1, y1 = (int(v) * TILE // size for v in rect)
    t = flags.reshape(y1 - y0, size, x1 - x0, size)
    return t.any(axis=(1, 3))


def test_cover_holds_every_contributing_tile_and_little_else():
    rng, seed = make_rng()
    tiles_x, tiles_y = 20, 14
    mean2d, conic, opacity, rects = random_splats(rng, 600, tiles_x, tiles_y)
    mask = _core.tile_cover_mask(mean2d, conic, opacity, rects, tiles_x, tiles_y)
    assert mask.shape == (600, tiles_y, tiles_x)
    full = kept = 0
    for i in range(len(mean2d)):
        x0, y0, x1, y1 = rects[i]
        cover = mask[i, y0:y1, x0:x1].astype(bool)
        outside = mask[i].sum() - cover.sum()
        assert outside == 0, f"seed {seed}: splat {i} covers tiles outside its rect"
        if x1 <= x0 or y1 <= y0:
            continue
        # Every tile with a pixel the float32 blend gives alpha >= 1/255 is covered.
        s32 = sigma_grid(mean2d[i], conic[i], rects[i], np.float32)
        alpha = np.minimum(np.float32(0.999), opacity[i] * np.exp(-s32))
        contributes = (s32 >= 0) & (s32 < np.float32(SIGMA_SKIP)) & (alpha >= np.float32(1.0 / 255.0))
        needed = tiles_where(contributes, rects[i])
        assert not (needed & ~cover).any(), f"seed {seed}: splat {i} misses a contributing tile"
        # No tile beyond the margin's ellipse is covered (well-conditioned conics).
        a, b, c = conic[i].astype(np.float64)
        if a * c - b * b > 1e-3 * a * c:
            cut = min(SIGMA_SKIP, np.log(255.0 * float(opacity[i]))) + MARGIN
            allowed = tile_min_sigma(mean2d[i].astype(np.float64), conic[i], rects[i]) <= cut * (1 + 1e-4) + 1e-4
            assert not (cover & ~allowed).any(), f"seed {seed}: splat {i} covers a tile beyond its ellipse"
        full += cover.size
        kept += int(cover.sum())
    # These splats fill their rects poorly: coverage must cut most rect tiles.
    assert kept < 0.6 * full, f"seed {seed}: cover kept {kept} of {full} rect tiles"


def test_blocks_hold_every_contributing_pixel_and_little_else():
    """tile_cover_blocks: the 4x4-pixel blocks a SIMD group's skip test keeps for a
    splat hold every pixel the float32 blend gives alpha >= 1/255, and its per-band
    bound keeps few blocks beyond the margin's exact ellipse."""
    rng, seed = make_rng()
    tiles_x, tiles_y = 20, 14
    mean2d, conic, opacity, rects = random_splats(rng, 600, tiles_x, tiles_y)
    blocks = _core.tile_block_mask(mean2d, conic, opacity, rects, tiles_x, tiles_y)
    assert blocks.shape == (600, 4 * tiles_y, 4 * tiles_x)
    kept_total = allowed_total = 0
    for i in range(len(mean2d)):
        x0, y0, x1, y1 = rects[i]
        kept = blocks[i, 4 * y0:4 * y1, 4 * x0:4 * x1].astype(bool)
        assert blocks[i].sum() == kept.sum(), f"seed {seed}: splat {i} keeps blocks outside its rect"
        if x1 <= x0 or y1 <= y0:
            continue
        s32 = sigma_grid(mean2d[i], conic[i], rects[i], np.float32)
        alpha = np.minimum(np.float32(0.999), opacity[i] * np.exp(-s32))
        contributes = (s32 >= 0) & (s32 < np.float32(SIGMA_SKIP)) & (alpha >= np.float32(1.0 / 255.0))
        needed = tiles_where(contributes, rects[i], 4)
        assert not (needed & ~kept).any(), f"seed {seed}: splat {i} drops a block with a contributing pixel"
        a, b, c = conic[i].astype(np.float64)
        if a * c - b * b > 1e-3 * a * c and opacity[i] * 255 >= 1:
            cut = min(SIGMA_SKIP, np.log(255.0 * float(opacity[i]))) + MARGIN
            allowed = tile_min_sigma(mean2d[i].astype(np.float64), conic[i], rects[i], 4) <= cut * (1 + 1e-4) + 1e-4
            kept_total += int(kept.sum())
            allowed_total += int(allowed.sum())
    # The bound widens each band's exact extent by the centre line's run over the
    # band: on these splats (needle-thin ones at every angle) it kept 1.012-1.018x
    # the exact ellipse's blocks over seeds 1-10.
    assert allowed_total <= kept_total <= 1.05 * allowed_total, \
        f"seed {seed}: kept {kept_total} blocks where the ellipse reaches {allowed_total}"


def test_faint_splats_cover_nothing():
    rng, _ = make_rng()
    mean2d, conic, _, rects = random_splats(rng, 50, 8, 8)
    opacity = rng.uniform(0.0, 0.99 / 255.0, 50).astype(np.float32)
    assert _core.tile_cover_mask(mean2d, conic, opacity, rects, 8, 8).sum() == 0
    assert _core.tile_block_mask(mean2d, conic, opacity, rects, 8, 8).sum() == 0


def test_bad_arguments_raise():
    rng, _ = make_rng()
    mean2d, conic, opacity, rects = random_splats(rng, 4, 8, 8)
    with pytest.raises(ValueError, match="rects"):
        _core.tile_cover_mask(mean2d, conic, opacity, rects + 100, 8, 8)
    with pytest.raises(ValueError, match="conic"):
        _core.tile_cover_mask(mean2d, conic[:3], opacity, rects, 8, 8)
