"""Quaternion -> rotation matrix, and its vector-Jacobian product."""
from __future__ import annotations

import numpy as np


def quat_to_rotmat(q: np.ndarray) -> np.ndarray:
    """Rotation matrices [N,3,3] from UNIT quaternions q [N,4] stored (w, x, y, z)."""
    w, x, y, z = q[:, 0], q[:, 1], q[:, 2], q[:, 3]
    R = np.empty((q.shape[0], 3, 3))
    R[:, 0, 0] = 1.0 - 2.0 * (y * y + z * z)
    R[:, 0, 1] = 2.0 * (x * y - w * z)
    R[:, 0, 2] = 2.0 * (x * z + w * y)
    R[:, 1, 0] = 2.0 * (x * y + w * z)
    R[:, 1, 1] = 1.0 - 2.0 * (x * x + z * z)
    R[:, 1, 2] = 2.0 * (y * z - w * x)
    R[:, 2, 0] = 2.0 * (x * z - w * y)
    R[:, 2, 1] = 2.0 * (y * z + w * x)
    R[:, 2, 2] = 1.0 - 2.0 * (x * x + y * y)
    return R


def quat_to_rotmat_vjp(q: np.ndarray, dR: np.ndarray) -> np.ndarray:
    """dL/dq [N,4] given dL/dR [N,3,3], for R = quat_to_rotmat(q) (q as independent entries)."""
    w, x, y, z = q[:, 0], q[:, 1], q[:, 2], q[:, 3]
    g = dR
    dw = 2.0 * (z * (g[:, 1, 0] - g[:, 0, 1]) + y * (g[:, 0, 2] - g[:, 2, 0])
                + x * (g[:, 2, 1] - g[:, 1, 2]))
    dx = (2.0 * (y * (g[:, 0, 1] + g[:, 1, 0]) + z * (g[:, 0, 2] + g[:, 2, 0])
                 + w * (g[:, 2, 1] - g[:, 1, 2]))
          - 4.0 * x * (g[:, 1, 1] + g[:, 2, 2]))
    dy = (2.0 * (x * (g[:, 0, 1] + g[:, 1, 0]) + w * (g[:, 0, 2] - g[:, 2, 0])
                 + z * (g[:, 1, 2] + g[:, 2, 1]))
          - 4.0 * y * (g[:, 0, 0] + g[:, 2, 2]))
    dz = (2.0 * (w * (g[:, 1, 0] - g[:, 0, 1]) + x * (g[:, 0, 2] + g[:, 2, 0])
                 + y * (g[:, 1, 2] + g[:, 2, 1]))
          - 4.0 * z * (g[:, 0, 0] + g[:, 1, 1]))
    return np.stack([dw, dx, dy, dz], axis=1)
