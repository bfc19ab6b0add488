"""The browser viewer (`splat view`, `splat train --view`) on viser; extra `[view]`."""
from __future__ import annotations

from .camera_math import camera_from_pose, pose_from_camera, render_size

__all__ = ["Viewer", "camera_from_pose", "pose_from_camera", "render_size"]


def __getattr__(name):
    if name == "Viewer":            # viser is imported only when a viewer is made
        from .server import Viewer
        return Viewer
    raise AttributeError(name)
