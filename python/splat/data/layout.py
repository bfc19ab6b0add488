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


def camera_axes(cameras):
    """(centres [V,3], forward [V,3], up [V,3]) of splat.Cameras, in float64: each
    camera's centre, view direction (its z axis) and up (its -y axis) in the world."""
    return pose_axes([c.world_to_camera for c in cameras])


def pose_axes(world_to_camera):
    """camera_axes of 4x4 world-to-camera matrices (OpenCV axes)."""
    w2c = np.stack([np.asarray(m, np.float64) for m in world_to_camera])
    rot, t = w2c[:, :3, :3], w2c[:, :3, 3]
    centres = -np.einsum("vji,vj->vi", rot, t)
    return centres, rot[:, 2], -rot[:, 1]


def axes_meeting_point(centres, forward):
    """The point nearest to every optical axis (least squares), or None when the
    axes are nearly parallel and meet nowhere in particular."""
    proj = np.eye(3)[None] - forward[:, :, None] * forward[:, None, :]
    a = proj.sum(0)
    b = np.einsum("vij,vj->i", proj, centres)
    w = np.linalg.eigvalsh(a)
    return np.linalg.solve(a, b) if w[0] > 0.05 * w[-1] else None


def axes_meeting_angle(cameras) -> float:
    """The median angle (degrees) between each camera's view direction and the
    direction to the point nearest all the optical axes; 90 when there is no
    such point (the axes nearly parallel, or fewer than two cameras)."""
    return pose_meeting_angle([c.world_to_camera for c in cameras])


def pose_meeting_angle(world_to_camera) -> float:
    """axes_meeting_angle of 4x4 world-to-camera matrices."""
    if len(world_to_camera) < 2:
        return 90.0
    centres, forward, _ = pose_axes(world_to_camera)
    point = axes_meeting_point(centres, forward)
    if point is None:
        return 90.0
    to_point = point[None] - centres
    dist = np.linalg.norm(to_point, axis=1)
    cos = np.einsum("vi,vi->v", to_point, forward) / np.maximum(dist, 1e-12)
    return float(np.degrees(np.median(np.arccos(np.clip(cos, -1.0, 1.0)))))


def camera_layout(cameras) -> str:
    """'object' when the cameras look at a common point in front of them, else 'open'."""
    return pose_layout([c.world_to_camera for c in cameras])


def pose_layout(world_to_camera) -> str:
    """camera_layout of 4x4 world-to-camera matrices."""
    return "object" if pose_meeting_angle(world_to_camera) < OBJECT_MAX_ANGLE_DEG else "open"
