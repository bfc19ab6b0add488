"""`splat train --view`: the viewer served during training, fed the current
parameters at a capped rate.

Everything runs in the training thread, between steps (the CPU backend's
thread pool serves one caller at a time, and on a GPU it keeps the work in
order): after a step the hook reads the parameters back (the one sync a live
view needs) when a browser is connected and the last update is 1/rate
seconds old, and renders the views that need a frame. Both happen only while
the viewer's share of the wall time stays under `duty_cycle`, so training
slows by at most duty_cycle / (1 - duty_cycle) (8.7% at the default 0.08),
plus one step's time when a single render is longer than a step.
"""
from __future__ import annotations

import time

DEFAULT_RATE = 2.0          # parameter updates per second
DEFAULT_DUTY = 0.08         # share of wall time the viewer may take
DEFAULT_MAX_SIDE = 512


class LiveView:
    def __init__(self, trainer, train, test, out, backend_config, *, host="127.0.0.1", port=None,
                 rate=DEFAULT_RATE, duty_cycle=DEFAULT_DUTY, max_side=DEFAULT_MAX_SIDE):
        from .server import Viewer
        cams = [(n, c, "train") for n, c in zip(train.names, train.cameras)] + \
            [(n, c, "test") for n, c in zip(test.names, test.cameras)]
        self.rate = float(rate)
        self.viewer = Viewer(trainer.gaussians(), cameras=cams, backend_config=backend_config,
                             background=train.background, host=host, port=port, save_dir=out,
                             max_side=max_side, duty_cycle=duty_cycle, external_pump=True,
                             label="splat (training)", antialiased=trainer.config.antialiased,
                             blend_stop=trainer.config.blend_stop)
        self.viewer.start()
        self.duty_cycle = float(duty_cycle)
        self._start = time.perf_counter()
        self._last = time.monotonic()
        self.spent = 0.0            # seconds of training-thread time the viewer took
        self.updates = 0

    @property
    def url(self) -> str:
        return self.viewer.url

    def __call__(self, trainer) -> None:
        """After a training step: new parameters and frames for the open
        views, within the time budget."""
        if self.viewer.num_clients == 0:
            return
        t0 = time.perf_counter()
        if self.spent > self.duty_cycle * (t0 - self._start):
            return
        now = time.monotonic()
        if now - self._last >= 1.0 / self.rate:
            self._last = now
            self.viewer.set_gaussians(trainer.gaussians(), note=f"training: step {trainer.step_count}")
            self.updates += 1
        if self.viewer.needs_render:
            self.viewer.pump()
        self.spent += time.perf_counter() - t0

    def close(self, trainer=None) -> None:
        if trainer is not None and self.viewer.num_clients:
            self.viewer.set_gaussians(trainer.gaussians(), note=f"trained: step {trainer.step_count}")
        self.viewer.stop()
