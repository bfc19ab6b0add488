"""Scenes at the native core's numeric limits (docs/architecture.md, "Numeric
limits"), shared by test_limits.py (CPU) and test_cuda_limits.py.

A pair count is set exactly by construction: on a square image of `size`
pixels (T = (size / 16)^2 tiles), each "big" Gaussian (centred, 3 sigma past
the corners, opacity 0.993) covers every tile and each "tiny" one (a 2-pixel
splat at pixel (8, 8), behind all the big ones) covers tile 0 alone, so the
image has n_big T + n_tiny pairs. The big ones share a depth (ties keep index
order) and saturate every pixel within a few splats, so the render equals that
of the first few big Gaussians alone: a small equivalent.
"""
import numpy as np

import splat

TILE = 16


def tiles(size):
    return (size // TILE) ** 2


def limit_camera(size):
    w2c = np.eye(4, dtype=np.float32)
    w2c[2, 3] = 5.0  # the origin 5 units in front
    return splat.Camera(w2c, size / 2, size / 2, size / 2, size / 2, size, size)


def limit_arrays(rng, n_big, n_tiny, size, *, sh_k=1):
    """Float32 arrays (means, log_scales, quats, opacity_logits, sh) of n_big
    screen-covering and n_tiny one-tile Gaussians, colours at random."""
    n = n_big + n_tiny
    means = np.zeros((n, 3), np.float32)
    log_scales = np.ones((n, 3), np.float32)  # sigma ~ 0.54 size pixels
    quats = np.zeros((n, 4), np.float32)
    quats[:, 0] = 1.0
    opacity = np.full(n, 5.0, np.float32)
    if n_tiny:
        depth, fx = 50.0, size / 2
        means[n_big:] = [(8.0 - size / 2) * depth / fx, (8.0 - size / 2) * depth / fx, depth - 5.0]
        log_scales[n_big:] = np.log(1e-3 * depth / fx)
    sh = np.zeros((n, sh_k, 3), np.float32)
    sh[:, 0] = rng.uniform(-1.5, 1.5, (n, 3)).astype(np.float32)
    return means, log_scales, quats, opacity, sh


def limit_scene(rng, n_big, n_tiny, size, **kw):
    return splat.Gaussians(*limit_arrays(rng, n_big, n_tiny, size, **kw)), limit_camera(size)


def pair_error(pairs):
    """The message a pair count past the limit raises (a regex)."""
    return rf"\[splat\] {pairs} \(tile, Gaussian\) pairs in one image exceed the limit of 2147483647"
