"""Render passes over a pool of native rasterizers, shared by `splat.Rasterizer`
and `splat.torch`.

A native rasterizer keeps the state of its last forward on its device; a
`RenderPass` remembers which forward it was (the native `last_token`), and its
backward renders that pass again first when the device has moved on, so a
backward can never pair with another forward's state. A pool of a few natives
lets several passes (the views of a batch, a depth pass) stay alive together
without that extra render.

Depth is a second pass through the same blend: Gaussian i gets the colour
(z_i, 0, 0) (SH degree 0, background 0), so the pass renders D = sum_i w_i z_i
with the RGB pass's weights w_i, and its backward gives dL/dz_i through the
colour's gradient (dL/d sh = C0 dL/d colour) plus everything the weights depend
on. z_i = (world_to_camera @ mean_i).z, so dL/d mean_i += dL/dz_i R[2, :].
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from . import _core

SH_C0 = 0.28209479177387814
DEFAULT_POOL_SIZE = 4
NEAR, FAR = 0.01, 1e10  # the projection's default clipping planes (params.h)


class NativePool:
    """Native rasterizers of one BackendConfig, made on first use."""

    def __init__(self, config, size: int = DEFAULT_POOL_SIZE):
        self.config = config
        self.size = int(size)
        self._natives: list = []
        self._next = 0

    def native(self, slot: int):
        slot %= self.size
        while len(self._natives) <= slot:
            self._natives.append(_core.Rasterizer(self.config))
        return self._natives[slot]

    def take(self):
        """The next native, round robin: consecutive passes land on different devices."""
        slot = self._next
        self._next = (self._next + 1) % self.size
        return self.native(slot)

    @property
    def backend(self) -> str:
        return self.native(0).backend

    @property
    def allocation_count(self) -> int:
        return sum(n.allocation_count for n in self._natives)


@dataclass
class RenderPass:
    """One native forward: its inputs (kept to render again), device and token."""

    native: object
    args: tuple      # the native forward's arguments
    n: int
    k: int
    token: int

    def backward(self, d_image: np.ndarray, d_alpha: np.ndarray | None):
        """(means, log_scales, quats, opacity_logits, sh, means2d) gradients of this pass."""
        if self.native.last_token != self.token:
            self.native.forward(*self.args)
            self.token = self.native.last_token
        return self.native.backward(d_image, d_alpha, self.token)


def render(native, means, log_scales, quats, opacity_logits, sh, w2c, fx, fy, cx, cy, width, height,
           sh_degree, background, near, far):
    """(image, alpha, radii, RenderPass) of one native forward (arrays already float32 C-contiguous)."""
    args = (means, log_scales, quats, opacity_logits, sh, w2c, float(fx), float(fy), float(cx), float(cy),
            int(width), int(height), int(sh_degree), background, float(near), float(far))
    image, alpha, radii = native.forward(*args)
    return image, alpha, radii, RenderPass(native, args, means.shape[0], sh.shape[1], native.last_token)


def camera_depths(means: np.ndarray, w2c: np.ndarray) -> np.ndarray:
    """Camera-space z of each mean, float64."""
    w = w2c.astype(np.float64)
    return means.astype(np.float64) @ w[2, :3] + w[2, 3]


def depth_sh(z: np.ndarray) -> np.ndarray:
    """Degree-0 SH [N,1,3] whose colour is (z, 0, 0): colour = C0 sh + 0.5."""
    sh = np.full((z.shape[0], 1, 3), -0.5 / SH_C0)
    sh[:, 0, 0] = (z - 0.5) / SH_C0
    return sh.astype(np.float32)


ZERO_BACKGROUND = np.zeros(3, np.float32)
