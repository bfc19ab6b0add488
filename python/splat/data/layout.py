"""The layout of a capture's cameras: around an object, looking at it, or
spread through an open scene (a room seen from inside, a forward-facing
capture). Training defaults that help one kind and hurt the other follow it
(TrainConfig.prune_screen).

The statistic: the point nearest to every camera's optical axis (least
squares), and the median angle between a camera's view direction and the
direction from it to that point. Measured on the benchmark captures: lego
0.0 degrees, thermos 3.0, beer 4.4 (objects); room 82.3 (open)."""
from __future__ import annotations

import numpy as np

# Median angle (degrees) below which the axes meet in front of the cameras.
OBJECT_MAX_ANGLE_DEG = 20.0


def axes_meeting_angle(cameras) -> float:
    """The median angle (degrees) between each camera's view direction and the
    direction to the point nearest all the optical axes; 90 when there is no
    such point (the axes nearly parallel, or fewer than two cameras)."""
    if len(cameras) < 2:
        return 90.0
    rot = np.stack([np.asarray(c.world_to_camera, np.float64)[:3, :3] for c in cameras])
    centres = np.stack([np.asarray(c.center, np.float64) for c in cameras])
    forward = rot[:, 2]  # the camera z axis in the world
    proj = np.eye(3)[None] - forward[:, :, None] * forward[:, None, :]
    a = proj.sum(0)
    b = np.einsum("vij,vj->i", proj, centres)
    w = np.linalg.eigvalsh(a)
    if not w[0] > 0.05 * w[-1]:  # parallel axes meet nowhere in particular
        return 90.0
    to_point = np.linalg.solve(a, b)[None] - centres
    dist = np.linalg.norm(to_point, axis=1)
    cos = np.einsum("vi,vi->v", to_point, forward) / np.maximum(dist, 1e-12)
    return float(np.degrees(np.median(np.arccos(np.clip(cos, -1.0, 1.0)))))


def camera_layout(cameras) -> str:
    """'object' when the cameras look at a common point in front of them, else 'open'."""
    return "object" if axes_meeting_angle(cameras) < OBJECT_MAX_ANGLE_DEG else "open"
