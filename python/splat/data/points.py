"""Initial points for captures: the SfM cloud, or random points in the views.

3DGS starts a capture from its structure-from-motion points. A cloud with
fewer than `MIN_SFM_POINTS` points (an empty points3D file, a transforms.json
without a point file) cannot seed a scene: training then starts from random
points inside what the cameras see (a random pixel of a random training view,
at a depth drawn uniformly between `NEAR` and `FAR` times the scene extent),
with the few SfM points kept, and a warning says so.
"""
from __future__ import annotations

import numpy as np

MIN_SFM_POINTS = 100
NEAR, FAR = 0.05, 1.5


def view_volume_points(cameras, count: int, extent: float, seed: int = 0) -> np.ndarray:
    """float32 [count, 3] points uniformly over the cameras' view frusta
    (depth in [NEAR, FAR] x extent): for each, a random camera, a random
    position on its image and a random depth."""
    if count <= 0:
        return np.zeros((0, 3), np.float32)
    rng = np.random.default_rng(seed)
    cams = list(cameras)
    which = rng.integers(0, len(cams), count)
    out = np.empty((count, 3), np.float64)
    u = rng.uniform(0.0, 1.0, count)
    v = rng.uniform(0.0, 1.0, count)
    depth = rng.uniform(NEAR, FAR, count) * float(extent)
    for k, cam in enumerate(cams):
        sel = np.nonzero(which == k)[0]
        if sel.size == 0:
            continue
        x = (u[sel] * cam.width - cam.cx) / cam.fx
        y = (v[sel] * cam.height - cam.cy) / cam.fy
        p_cam = np.stack([x * depth[sel], y * depth[sel], depth[sel]], axis=1)
        w2c = np.asarray(cam.world_to_camera, np.float64)
        rot, t = w2c[:3, :3], w2c[:3, 3]
        out[sel] = (p_cam - t) @ rot          # R^T (p - t), row vectors
    return out.astype(np.float32)


def capture_points(dataset, count: int, seed: int = 0):
    """(points, colours, warning or None) to start a capture from: its SfM
    cloud when it has at least MIN_SFM_POINTS points, else that cloud plus
    `count` random points in the view volume (colours 0.5)."""
    pts = dataset.points
    cols = dataset.point_colors
    have = 0 if pts is None else len(pts)
    if have >= MIN_SFM_POINTS:
        return pts, cols, None
    extra = view_volume_points(dataset.cameras, count, dataset.scene_extent, seed)
    extra_cols = np.full_like(extra, 0.5)
    what = "no SfM points" if have == 0 else f"only {have} SfM points"
    warning = (f"{dataset.path or 'the dataset'}: {what} (fewer than {MIN_SFM_POINTS}); starting from "
               f"{count:,} random points inside the cameras' view volume")
    if have:
        extra = np.concatenate([np.asarray(pts, np.float32), extra])
        extra_cols = np.concatenate([np.asarray(cols, np.float32), extra_cols])
    return extra, extra_cols, warning
