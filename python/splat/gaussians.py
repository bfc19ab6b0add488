"""The Gaussian parameters, as float32 SoA numpy arrays (the native layout)."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from ._validate import as_float32

MAX_SH_DEGREE = 3


def sh_coeffs(degree: int) -> int:
    """Number of SH coefficients per colour channel for `degree`: (degree + 1)^2."""
    return (degree + 1) ** 2


@dataclass(frozen=True, init=False)
class Gaussians:
    """means [N,3], log_scales [N,3], quats [N,4] (w,x,y,z), opacity_logits [N], sh [N,K,3]."""

    means: np.ndarray = field(repr=False)
    log_scales: np.ndarray = field(repr=False)
    quats: np.ndarray = field(repr=False)
    opacity_logits: np.ndarray = field(repr=False)
    sh: np.ndarray = field(repr=False)

    def __init__(self, means, log_scales, quats, opacity_logits, sh):
        means = as_float32("means", means, (None, 3))
        n = means.shape[0]
        log_scales = as_float32("log_scales", log_scales, (None, 3))
        quats = as_float32("quats", quats, (None, 4))
        opacity_logits = as_float32("opacity_logits", opacity_logits, (None,))
        sh = as_float32("sh", sh, (None, None, 3))
        for name, arr in (("log_scales", log_scales), ("quats", quats),
                          ("opacity_logits", opacity_logits), ("sh", sh)):
            if arr.shape[0] != n:
                raise ValueError(f"[splat] {name}: has {arr.shape[0]} Gaussians but means has {n}")
        if sh.shape[1] not in (1, 4, 9, 16):
            raise ValueError(f"[splat] sh: K = {sh.shape[1]} coefficients is not (degree+1)^2 for a degree 0..3")
        if n and np.any(np.sum(quats.astype(np.float64) ** 2, axis=1) == 0.0):
            raise ValueError("[splat] quats: a quaternion has zero norm")
        for name, arr in (("means", means), ("log_scales", log_scales), ("quats", quats),
                          ("opacity_logits", opacity_logits), ("sh", sh)):
            object.__setattr__(self, name, arr)

    def __len__(self) -> int:
        return self.means.shape[0]

    @property
    def sh_degree(self) -> int:
        """Largest SH degree the stored coefficients support."""
        return int(round(np.sqrt(self.sh.shape[1]))) - 1

    def copy(self) -> "Gaussians":
        return Gaussians(self.means.copy(), self.log_scales.copy(), self.quats.copy(),
                         self.opacity_logits.copy(), self.sh.copy())
