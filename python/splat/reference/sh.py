"""Real spherical harmonics (the 3DGS basis, degrees 0..3) and their derivatives.

The basis is evaluated at a unit direction d = (x, y, z). `sh_basis` returns
the value of every basis function, `sh_basis_jacobian` the derivative of each
basis function with respect to x, y and z taken as independent variables (the
projection onto the unit sphere is applied by the caller).
"""
from __future__ import annotations

import numpy as np

MAX_SH_DEGREE = 3

SH_C0 = 0.28209479177387814
SH_C1 = 0.4886025119029199
SH_C2 = (1.0925484305920792, -1.0925484305920792, 0.31539156525252005,
         -1.0925484305920792, 0.5462742152960396)
SH_C3 = (-0.5900435899266435, 2.890611442640554, -0.4570457994644658, 0.3731763325901154,
         -0.4570457994644658, 1.445305721320277, -0.5900435899266435)


def num_sh_coeffs(degree: int) -> int:
    """(degree + 1)^2: the number of coefficients per colour channel."""
    return (degree + 1) ** 2


def sh_basis(dirs: np.ndarray, degree: int) -> np.ndarray:
    """Basis values [N, (degree+1)^2] at the unit directions `dirs` [N, 3]."""
    x, y, z = dirs[:, 0], dirs[:, 1], dirs[:, 2]
    one = np.ones_like(x)
    b = [SH_C0 * one]
    if degree >= 1:
        b += [-SH_C1 * y, SH_C1 * z, -SH_C1 * x]
    if degree >= 2:
        xx, yy, zz = x * x, y * y, z * z
        b += [SH_C2[0] * x * y,
              SH_C2[1] * y * z,
              SH_C2[2] * (2.0 * zz - xx - yy),
              SH_C2[3] * x * z,
              SH_C2[4] * (xx - yy)]
    if degree >= 3:
        b += [SH_C3[0] * y * (3.0 * xx - yy),
              SH_C3[1] * x * y * z,
              SH_C3[2] * y * (4.0 * zz - xx - yy),
              SH_C3[3] * z * (2.0 * zz - 3.0 * xx - 3.0 * yy),
              SH_C3[4] * x * (4.0 * zz - xx - yy),
              SH_C3[5] * z * (xx - yy),
              SH_C3[6] * x * (xx - 3.0 * yy)]
    return np.stack(b, axis=1)


def sh_basis_jacobian(dirs: np.ndarray, degree: int) -> np.ndarray:
    """d basis_k / d (x, y, z): [N, (degree+1)^2, 3]."""
    x, y, z = dirs[:, 0], dirs[:, 1], dirs[:, 2]
    zero = np.zeros_like(x)
    rows = [(zero, zero, zero)]
    if degree >= 1:
        c = SH_C1
        rows += [(zero, -c + zero, zero),
                 (zero, zero, c + zero),
                 (-c + zero, zero, zero)]
    if degree >= 2:
        c = SH_C2
        xx, yy, zz = x * x, y * y, z * z
        rows += [(c[0] * y, c[0] * x, zero),
                 (zero, c[1] * z, c[1] * y),
                 (-2.0 * c[2] * x, -2.0 * c[2] * y, 4.0 * c[2] * z),
                 (c[3] * z, zero, c[3] * x),
                 (2.0 * c[4] * x, -2.0 * c[4] * y, zero)]
    if degree >= 3:
        c = SH_C3
        rows += [(6.0 * c[0] * x * y, c[0] * (3.0 * xx - 3.0 * yy), zero),
                 (c[1] * y * z, c[1] * x * z, c[1] * x * y),
                 (-2.0 * c[2] * x * y, c[2] * (4.0 * zz - xx - 3.0 * yy), 8.0 * c[2] * y * z),
                 (-6.0 * c[3] * x * z, -6.0 * c[3] * y * z, c[3] * (6.0 * zz - 3.0 * xx - 3.0 * yy)),
                 (c[4] * (4.0 * zz - 3.0 * xx - yy), -2.0 * c[4] * x * y, 8.0 * c[4] * x * z),
                 (2.0 * c[5] * x * z, -2.0 * c[5] * y * z, c[5] * (xx - yy)),
                 (c[6] * (3.0 * xx - 3.0 * yy), -6.0 * c[6] * x * y, zero)]
    return np.stack([np.stack(r, axis=1) for r in rows], axis=1)
