"""`splat train --view`: the viewer served during training, fed the current
parameters at a capped rate.

Costs are bounded on both sides: the parameters are read back (the one sync
a live view needs) only while a browser is connected and at most `rate`
times a second, and the render thread spends at most `duty_cycle` of the wall
time rendering (it sleeps in proportion to each render's time), at a reduced
default resolution.
"""
from __future__ import annotations

import time

DEFAULT_RATE = 2.0          # parameter updates per second
DEFAULT_DUTY = 0.05         # share of wall time the render thread may render
DEFAULT_MAX_SIDE = 512


class LiveView:
    def __init__(self, trainer, train, test, out, backend_config, *, host="127.0.0.1", port=8080,
                 rate=DEFAULT_RATE, duty_cycle=DEFAULT_DUTY, max_side=DEFAULT_MAX_SIDE):
        from .server import Viewer
        cams = [(n, c, "train") for n, c in zip(train.names, train.cameras)] + \
            [(n, c, "test") for n, c in zip(test.names, test.cameras)]
        self.rate = float(rate)
        self.viewer = Viewer(trainer.gaussians(), cameras=cams, backend_config=backend_config,
                             background=train.background, host=host, port=port, save_dir=out,
                             max_side=max_side, duty_cycle=duty_cycle, label="splat (training)")
        self.viewer.start()
        self._last = time.monotonic()
        self.updates = 0

    @property
    def url(self) -> str:
        return self.viewer.url

    def __call__(self, trainer) -> None:
        """After a training step: hand over the parameters when someone is
        watching and the last update is 1/rate seconds old."""
        if self.viewer.num_clients == 0:
            return
        now = time.monotonic()
        if now - self._last < 1.0 / self.rate:
            return
        self._last = now
        self.viewer.set_gaussians(trainer.gaussians(), note=f"training: step {trainer.step_count}")
        self.updates += 1

    def close(self, trainer=None) -> None:
        if trainer is not None and self.viewer.num_clients:
            self.viewer.set_gaussians(trainer.gaussians(), note=f"trained: step {trainer.step_count}")
        self.viewer.stop()
