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

import threading
import weakref
from dataclasses import dataclass

import numpy as np

from . import _core

SH_C0 = 0.28209479177387814
DEFAULT_POOL_SIZE = 4
NEAR, FAR = 0.01, 1e10  # the projection's default clipping planes (params.h)


class Lease:
    """A pass's claim on a native's resident state; released by its backward or
    when it is garbage (the output that needed it is gone)."""

    __slots__ = ("done", "slot", "__weakref__")

    def __init__(self, slot: int):
        self.done = False
        self.slot = slot   # the native's index in its pool


class NativePool:
    """Native rasterizers of one BackendConfig, made on first use (`factory`:
    _core.Rasterizer or _core.ViewRasterizer). `take()` gives the first native
    whose last pass no longer needs its state, so a forward/backward loop stays
    on one device; several live passes spread over up to `size` devices, and
    past that the least recently taken native is reused (its pass renders again
    before its backward)."""

    def __init__(self, config, size: int = DEFAULT_POOL_SIZE, factory=None):
        self.config = config
        self.size = max(1, int(size))
        self._factory = factory or _core.Rasterizer
        self._natives: list = []
        self._leases: list = []   # weakref to the Lease of each native's last pass
        self._clock = 0
        self._taken: list = []    # when each native was last taken
        self._slot_locks: list = []  # held over a pass's native calls (threads take turns per native)
        self._lock = threading.Lock()

    def native(self, slot: int):
        with self._lock:
            return self._grow(slot)

    def _grow(self, slot: int):
        while len(self._natives) <= slot:
            self._natives.append(self._factory(self.config))
            self._leases.append(None)
            self._taken.append(0)
            self._slot_locks.append(threading.Lock())
        return self._natives[slot]

    def take(self):
        """(native, Lease) for a new pass."""
        with self._lock:
            slot = None
            for i, ref in enumerate(self._leases):
                lease = ref() if ref is not None else None
                if lease is None or lease.done:
                    slot = i
                    break
            if slot is None:
                slot = len(self._natives) if len(self._natives) < self.size else \
                    min(range(len(self._natives)), key=self._taken.__getitem__)
            native = self._grow(slot)
            lease = Lease(slot)
            self._leases[slot] = weakref.ref(lease)
            self._clock += 1
            self._taken[slot] = self._clock
            return native, lease

    def slot_lock(self, slot: int) -> threading.Lock:
        """The lock a thread holds over its calls on native `slot` (a backward's
        token check, its render again and the backward itself are one turn)."""
        with self._lock:
            self._grow(slot)
            return self._slot_locks[slot]

    def busy(self) -> bool:
        """Whether a pass still waits for its backward on one of the natives."""
        with self._lock:
            return any(ref is not None and ref() is not None and not ref().done for ref in self._leases)

    @property
    def backend(self) -> str:
        return self.native(0).backend

    @property
    def allocation_count(self) -> int:
        return sum(n.allocation_count for n in self._natives)

    def host_transfers(self) -> dict:
        total: dict = {}
        for n in self._natives:
            for k, v in n.host_transfers.items():
                total[k] = total.get(k, 0) + v
        return total


@dataclass
class RenderPass:
    """One native forward: its inputs (kept to render again), device and token."""

    native: object
    args: tuple      # the native forward's arguments
    n: int
    k: int
    token: int
    lease: Lease

    def backward(self, d_image: np.ndarray, d_alpha: np.ndarray | None):
        """(means, log_scales, quats, opacity_logits, sh, means2d) gradients of this pass."""
        if self.native.last_token != self.token:
            self.native.forward(*self.args)
            self.token = self.native.last_token
        grads = self.native.backward(d_image, d_alpha, self.token)
        self.lease.done = True
        return grads


def render(pool, means, log_scales, quats, opacity_logits, sh, w2c, fx, fy, cx, cy, width, height,
           sh_degree, background, near, far, antialiased=False, chunked_stop=False):
    """(image, alpha, radii, RenderPass) of one native forward on a native of `pool` (arrays already float32 C-contiguous)."""
    native, lease = pool.take()
    args = (means, log_scales, quats, opacity_logits, sh, w2c, float(fx), float(fy), float(cx), float(cy),
            int(width), int(height), int(sh_degree), background, float(near), float(far), bool(antialiased),
            bool(chunked_stop))
    image, alpha, radii = native.forward(*args)
    return image, alpha, radii, RenderPass(native, args, means.shape[0], sh.shape[1], native.last_token, lease)


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
