"""Pinhole camera in the OpenCV convention (x right, y down, z forward)."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ._validate import as_float32, finite_float, positive_float, positive_int, real_array

# Blender / NeRF-synthetic cameras are OpenGL (y up, z backward): flip y and z.
_OPENGL_TO_OPENCV = np.diag([1.0, -1.0, -1.0, 1.0])


@dataclass(frozen=True, init=False)
class Camera:
    """A pinhole camera: world-to-camera 4x4 matrix and intrinsics in pixels.

    The matrix is stored as float32 (any real array converts, rounding);
    fx, fy, cx, cy take any real number finite in float32, width and height
    any real number with a positive integral value (64 or 64.0, not 64.5).
    """

    world_to_camera: np.ndarray = field(repr=False)
    fx: float
    fy: float
    cx: float
    cy: float
    width: int
    height: int

    def __init__(self, world_to_camera, fx, fy, cx, cy, width, height):
        w2c = as_float32("world_to_camera", world_to_camera, (4, 4))
        if not np.allclose(w2c[3], [0.0, 0.0, 0.0, 1.0], atol=1e-6):
            raise ValueError("[splat] world_to_camera: last row must be [0, 0, 0, 1]")
        w2c.setflags(write=False)
        object.__setattr__(self, "world_to_camera", w2c)
        object.__setattr__(self, "fx", positive_float("fx", fx))
        object.__setattr__(self, "fy", positive_float("fy", fy))
        object.__setattr__(self, "cx", finite_float("cx", cx))
        object.__setattr__(self, "cy", finite_float("cy", cy))
        object.__setattr__(self, "width", positive_int("width", width))
        object.__setattr__(self, "height", positive_int("height", height))

    @classmethod
    def from_blender(cls, c2w_opengl, camera_angle_x: float, width: int, height: int) -> "Camera":
        """Camera from a NeRF-synthetic frame: OpenGL camera-to-world and horizontal FOV."""
        c2w = real_array("c2w_opengl", c2w_opengl).astype(np.float64)
        if c2w.shape != (4, 4) or not np.all(np.isfinite(c2w)):
            raise ValueError("[splat] c2w_opengl: expected a finite 4x4 matrix")
        angle = positive_float("camera_angle_x", camera_angle_x)
        width = positive_int("width", width)
        height = positive_int("height", height)
        focal = 0.5 * width / np.tan(0.5 * angle)
        w2c = np.linalg.inv(c2w @ _OPENGL_TO_OPENCV)
        return cls(w2c.astype(np.float32), focal, focal, 0.5 * width, 0.5 * height, width, height)

    @property
    def center(self) -> np.ndarray:
        """Camera centre in world coordinates (float64)."""
        w2c = self.world_to_camera.astype(np.float64)
        return -w2c[:3, :3].T @ w2c[:3, 3]

    def scaled(self, factor: float) -> "Camera":
        """The same camera at `factor` times the resolution (focal and centre scale too)."""
        factor = positive_float("factor", factor)
        w = max(1, int(round(self.width * factor)))
        h = max(1, int(round(self.height * factor)))
        return Camera(self.world_to_camera, self.fx * factor, self.fy * factor,
                      self.cx * factor, self.cy * factor, w, h)
