"""The `.splat` format of the antimatter15 web viewer: 32 bytes per Gaussian.

Little endian, no header, one record per Gaussian::

    float32 x, y, z            position
    float32 sx, sy, sz         scale (linear: exp of the log-scales)
    uint8   r, g, b, a         colour 0.5 + C0 * SH DC and opacity sigmoid(logit), times 255
    uint8   qw, qx, qy, qz     the normalized quaternion, q * 128 + 128

Records are sorted by decreasing exp(sum of log-scales) * opacity, as the
viewer's converter does (the viewer streams the file and draws the largest,
most opaque splats first). The format keeps no view-dependent colour: only
SH degree 0 survives, loading gives a degree-0 `Gaussians`.
"""
from __future__ import annotations

import os

import numpy as np

from ..gaussians import Gaussians
from ..io.atomic import atomic_write

SH_C0 = 0.28209479177387814
RECORD = np.dtype([("position", "<f4", 3), ("scale", "<f4", 3), ("rgba", "u1", 4), ("rot", "u1", 4)])
assert RECORD.itemsize == 32


def _sigmoid(x):
    return 1.0 / (1.0 + np.exp(-np.asarray(x, np.float64)))


def _logit(p):
    p = np.clip(np.asarray(p, np.float64), 1e-6, 1.0 - 1e-6)
    return np.log(p / (1.0 - p))


def encode_splat(g: Gaussians) -> bytes:
    """The file's bytes for `g`."""
    n = len(g)
    ls = g.log_scales.astype(np.float64)
    opacity = _sigmoid(g.opacity_logits)
    order = np.argsort(-np.exp(ls.sum(axis=1)) * opacity, kind="stable")
    rec = np.zeros(n, RECORD)
    rec["position"] = g.means[order]
    rec["scale"] = np.exp(ls[order]).astype(np.float32)
    rgba = np.empty((n, 4), np.float64)
    rgba[:, :3] = 0.5 + SH_C0 * g.sh[order, 0, :]
    rgba[:, 3] = opacity[order]
    rec["rgba"] = np.clip(np.rint(rgba * 255.0), 0, 255).astype(np.uint8)
    q = g.quats[order].astype(np.float64)
    q /= np.linalg.norm(q, axis=1, keepdims=True)
    rec["rot"] = np.clip(np.rint(q * 128.0 + 128.0), 0, 255).astype(np.uint8)
    return rec.tobytes()


def save_splat(path, g: Gaussians) -> None:
    """Write `g` as a .splat file (atomically)."""
    data = encode_splat(g)
    with atomic_write(path, "wb") as f:
        f.write(data)


def decode_splat(data: bytes, name: str = ".splat data") -> Gaussians:
    if len(data) % RECORD.itemsize:
        raise ValueError(f"[splat] {name}: {len(data)} bytes is not a whole number of 32-byte "
                         f".splat records")
    rec = np.frombuffer(data, RECORD)
    scale = rec["scale"].astype(np.float64)
    if not np.all(np.isfinite(rec["position"])) or not np.all(np.isfinite(scale)) or np.any(scale <= 0):
        raise ValueError(f"[splat] {name}: a record has a non-finite position or a scale <= 0")
    q = (rec["rot"].astype(np.float32) - 128.0) / 128.0
    # A quaternion that rounded to all 128s (norm 0) is the identity.
    zero = ~np.any(q, axis=1)
    q[zero, 0] = 1.0
    rgba = rec["rgba"].astype(np.float64) / 255.0
    sh = ((rgba[:, :3] - 0.5) / SH_C0).astype(np.float32)[:, None, :]
    return Gaussians(means=rec["position"].copy(), log_scales=np.log(scale).astype(np.float32), quats=q,
                     opacity_logits=_logit(rgba[:, 3]).astype(np.float32), sh=sh)


def load_splat(path) -> Gaussians:
    path = os.fspath(path)
    with open(path, "rb") as f:
        data = f.read()
    return decode_splat(data, path)
