"""What `splat train --view` costs training: the same steps with and without
a live viewer that someone watches, alternated, training time compared.

    python bench/view_overhead.py --config configs/lego_400.toml --steps 3000 --backend cuda
    python bench/view_overhead.py --steps 1500 --backend cpu          # the built-in scene

"Watched" is simulated without a browser: the LiveView hook runs after every
step exactly as in `splat train`, with one connected view whose camera moves
all the time (a 1280x960 canvas orbiting the scene), so the hook reads the
parameters back at its rate and renders whenever its time budget allows.
Prints the per-step time of each repeat and the median slowdown; the target
is at most 10%.
"""
from __future__ import annotations

import argparse
import math
import statistics
import time

import numpy as np

import splat
from splat.viewer import live as live_mod


def make_scene(args):
    if args.config:
        cfg = splat.load_config(args.config)
        d = cfg.data
        common = dict(background=d.background, downscale=d.downscale, test_every=d.test_every, format=d.format)
        train = splat.load_dataset(d.path, d.train_split, frames=d.train_frames, **common)
        test = splat.load_dataset(d.eval_path or d.path, d.eval_split, frames=d.test_frames, **common)
        tc = cfg.train
    else:
        from splat.data import synthetic
        train, test = synthetic.make_scene()
        tc = synthetic.default_train_config(args.steps, image_size=train.width)
    tc.steps = max(tc.steps, args.steps)
    return train, test, tc


class FakeClient:
    """What the viewer reads from a connected browser: its camera (orbiting a
    little further at each read) and a scene to send the image to."""

    client_id = -1

    def __init__(self, frame):
        self.frame, self.t = frame, 0
        self.scene = self
        self.frames = 0

    @property
    def camera(self):
        from splat.render_path import look_at
        from splat.viewer.camera_math import matrix_to_quat
        f = self.frame
        self.t += 1
        a = 0.05 * self.t
        e2 = np.cross(f.up, f.start)
        d = math.cos(f.elevation) * (math.cos(a) * f.start + math.sin(a) * e2) + math.sin(f.elevation) * f.up
        pos = f.centre + f.radius * d
        w2c = look_at(pos, f.centre, f.up)

        class Cam:
            wxyz, position, fov = matrix_to_quat(w2c[:3, :3].T), pos, math.radians(50)
            image_width, image_height = 1280, 960
        return Cam

    def set_background_image(self, img, **kw):
        self.frames += 1


def train_once(train, test, tc, bc, steps, watched):
    trainer = splat.Trainer.from_dataset(train, tc, bc)
    for _ in range(20):                       # warm-up: kernels compiled, buffers grown
        trainer.step(read_loss=False)
    trainer.step(read_loss=True)
    hook = None
    if watched:
        from splat.viewer.server import _ClientState
        hook = live_mod.LiveView(trainer, train, test, "/tmp", bc, port=0)
        fake = FakeClient(hook.viewer.frame)
        hook.viewer.server.get_clients = lambda: {-1: fake}
        state = hook.viewer._clients[-1] = _ClientState()
    t0 = time.perf_counter()
    for i in range(steps):
        trainer.step(read_loss=(i + 1) % 10 == 0)
        if hook is not None:
            state.dirty, state.last_move = True, time.monotonic()    # the camera keeps moving
            hook(trainer)
    trainer.step(read_loss=True)              # the device is done
    seconds = time.perf_counter() - t0
    extra = ""
    if watched:
        extra = (f"  ({hook.updates} parameter updates, {fake.frames} frames, viewer {hook.spent:.2f} s = "
                 f"{100.0 * hook.spent / seconds:.1f}% of the training time)")
        hook.viewer._clients.clear()
        hook.close()
    return 1000.0 * seconds / steps, extra


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--config")
    p.add_argument("--steps", type=int, default=2000)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--backend", default="auto")
    args = p.parse_args()
    train, test, tc = make_scene(args)
    bc = splat.BackendConfig(backend=args.backend)
    times = {False: [], True: []}
    for r in range(args.repeats):
        for watched in (False, True):
            ms, extra = train_once(train, test, tc, bc, args.steps, watched)
            times[watched].append(ms)
            print(f"repeat {r}: {'watched' if watched else 'plain  '} {ms:.3f} ms/step{extra}", flush=True)
    a, b = statistics.median(times[False]), statistics.median(times[True])
    print(f"median: plain {a:.3f} ms/step, watched {b:.3f} ms/step: {100.0 * (b / a - 1.0):+.1f}%")


if __name__ == "__main__":
    main()
