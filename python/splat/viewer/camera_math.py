"""Between the browser's camera (viser: camera-to-world rotation as a (w, x,
y, z) quaternion and position, OpenCV axes, vertical field of view) and
splat's pinhole `Camera`. Pure numpy, so the maths is testable without a
browser or viser."""
from __future__ import annotations

import math

import numpy as np

from ..camera import Camera


def quat_to_matrix(wxyz) -> np.ndarray:
    w, x, y, z = np.asarray(wxyz, np.float64) / np.linalg.norm(wxyz)
    return np.array([[1 - 2 * (y * y + z * z), 2 * (x * y - w * z), 2 * (x * z + w * y)],
                     [2 * (x * y + w * z), 1 - 2 * (x * x + z * z), 2 * (y * z - w * x)],
                     [2 * (x * z - w * y), 2 * (y * z + w * x), 1 - 2 * (x * x + y * y)]])


def matrix_to_quat(r) -> np.ndarray:
    """(w, x, y, z) with w >= 0 of a rotation matrix (Shepperd's method)."""
    r = np.asarray(r, np.float64)
    t = np.trace(r)
    if t > 0:
        s = 2.0 * math.sqrt(1.0 + t)
        q = [0.25 * s, (r[2, 1] - r[1, 2]) / s, (r[0, 2] - r[2, 0]) / s, (r[1, 0] - r[0, 1]) / s]
    else:
        i = int(np.argmax(np.diag(r)))
        j, k = (i + 1) % 3, (i + 2) % 3
        s = 2.0 * math.sqrt(max(1e-12, 1.0 + r[i, i] - r[j, j] - r[k, k]))
        q = [0.0] * 4
        q[0] = (r[k, j] - r[j, k]) / s
        q[1 + i] = 0.25 * s
        q[1 + j] = (r[j, i] + r[i, j]) / s
        q[1 + k] = (r[k, i] + r[i, k]) / s
    q = np.array(q)
    return q * (1.0 if q[0] >= 0 else -1.0) / np.linalg.norm(q)


def render_size(canvas_width: int, canvas_height: int, max_side: int) -> tuple[int, int]:
    """The canvas's aspect at no more than `max_side` pixels on its long side
    (and never larger than the canvas)."""
    cw, ch = max(1, int(canvas_width)), max(1, int(canvas_height))
    scale = min(1.0, max_side / max(cw, ch))
    return max(1, int(round(cw * scale))), max(1, int(round(ch * scale)))


def camera_from_pose(wxyz, position, fov_y: float, width: int, height: int) -> Camera:
    """splat Camera of a browser view: square pixels, centred principal point."""
    c2w = np.eye(4)
    c2w[:3, :3] = quat_to_matrix(wxyz)
    c2w[:3, 3] = np.asarray(position, np.float64)
    f = 0.5 * height / math.tan(0.5 * fov_y)
    return Camera(np.linalg.inv(c2w).astype(np.float32), f, f, 0.5 * width, 0.5 * height, width, height)


def pose_from_camera(cam: Camera) -> tuple[np.ndarray, np.ndarray, float, float]:
    """(wxyz, position, vertical fov in radians, aspect) that show `cam`'s view
    in the browser (its vertical extent; the browser's aspect decides the width)."""
    r_w2c = cam.world_to_camera[:3, :3].astype(np.float64)
    fov_y = 2.0 * math.atan(0.5 * cam.height / cam.fy)
    return matrix_to_quat(r_w2c.T), cam.center, fov_y, cam.width / cam.height
