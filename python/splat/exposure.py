"""Learned per-view colour corrections (`[train] exposure = true`) outside
training: finding a run's corrections and applying them to renders of its
training views (`splat eval --exposure`).

A correction is the 3x4 matrix [A | b] of one training view: corrected = A rgb + b.
Only the training views have one; the test views' exposure is unknown, so they
are never corrected (docs/training_modes.md, "Exposure compensation")."""
from __future__ import annotations

from pathlib import Path

import numpy as np

EXPOSURE_FILE = "exposure.npy"


def apply_exposure(image: np.ndarray, correction: np.ndarray) -> np.ndarray:
    """[A | b] applied to an [H,W,3] image, clipped to [0, 1] as a recorded image is."""
    e = np.asarray(correction, np.float32)
    return np.clip(image @ e[:, :3].T + e[:, 3], 0.0, 1.0).astype(np.float32)


def run_corrections(source, run_dir) -> np.ndarray | None:
    """[views, 3, 4] corrections of a run in training-view order: a checkpoint's
    own, else the run folder's exposure.npy, else its checkpoint.npz; None
    when the run has none."""
    from .trainer import read_checkpoint
    src = Path(source)
    candidates = [src] if src.suffix.lower() == ".npz" and src.is_file() else []
    if run_dir is not None:
        candidates += [Path(run_dir) / EXPOSURE_FILE, Path(run_dir) / "checkpoint.npz"]
    for path in candidates:
        if not path.is_file():
            continue
        if path.suffix == ".npy":
            e = np.load(path, allow_pickle=False)
        else:
            e = read_checkpoint(path)[1].get("exposure")
        if e is not None:
            e = np.asarray(e, np.float32)
            if e.ndim != 3 or e.shape[1:] != (3, 4) or not np.isfinite(e).all():
                raise ValueError(f"[splat] {path}: exposure: expected finite [views, 3, 4] corrections, "
                                 f"got shape {list(e.shape)}")
            return e
    return None


class CorrectedRenderer:
    """A renderer whose renders of the given training views carry each view's
    correction (views are matched by their camera pose)."""

    def __init__(self, renderer, cameras, corrections):
        self.renderer = renderer
        self._by_pose = {np.asarray(c.world_to_camera, np.float32).tobytes(): np.asarray(e, np.float32)
                         for c, e in zip(cameras, corrections)}

    def __getattr__(self, name):
        return getattr(self.renderer, name)

    def render(self, camera, background=None):
        image = self.renderer.render(camera, background=background)
        e = self._by_pose.get(np.asarray(camera.world_to_camera, np.float32).tobytes())
        if e is None:
            raise ValueError("[splat] exposure: a view without a learned correction")
        return apply_exposure(image, e)


def corrected_renderer(model, data, split: str):
    """`model`'s renderer with the corrections of `data`'s views (which must be
    training views, named as the run's cameras.json names them)."""
    corrections = run_corrections(model.source, model.run_dir)
    if corrections is None:
        raise ValueError(f"[splat] --exposure: {model.source} has no learned colour corrections "
                         f"(it was trained without [train] exposure = true)")
    train_names = [n for n, _, s in model.cameras if s == "train"]
    if len(train_names) != len(corrections):
        raise ValueError(f"[splat] --exposure: {len(corrections)} corrections but {len(train_names)} training "
                         f"views in the run's cameras.json: cannot tell which view each belongs to")
    index = {n: i for i, n in enumerate(train_names)}
    missing = [n for n in data.names if n not in index]
    if missing:
        raise ValueError(f"[splat] --exposure: view {missing[0]} of split {split} is not a training view; "
                         f"only the {len(train_names)} training views have a learned correction (evaluate "
                         f"other views without --exposure)")
    return CorrectedRenderer(model.renderer, data.cameras, [corrections[index[n]] for n in data.names])
