"""Lens models and undistortion to a cropped pinhole camera.

The models are COLMAP's (nerfstudio and instant-ngp files use the same
formulas): in normalized image coordinates (x, y) = ((u - cx) / fx,
(v - cy) / fy), with u, v pixel coordinates whose pixel centres sit at
i + 0.5,

    SIMPLE_RADIAL  f cx cy k             x (1 + k r2)
    RADIAL         f cx cy k1 k2         x (1 + k1 r2 + k2 r4)
    OPENCV         fx fy cx cy k1 k2 p1 p2
                   x (1 + k1 r2 + k2 r4) + 2 p1 x y + p2 (r2 + 2 x2)
    FULL_OPENCV    fx fy cx cy k1 k2 p1 p2 k3 k4 k5 k6
                   radial = (1 + k1 r2 + k2 r4 + k3 r6) / (1 + k4 r2 + k5 r4 + k6 r6)
    OPENCV_FISHEYE fx fy cx cy k1 k2 k3 k4
                   theta = atan(r), x theta (1 + k1 t2 + k2 t4 + k3 t6 + k4 t8) / r

An image is undistorted by resampling: each pixel centre of the ideal
pinhole target is pushed through the model and the source is sampled
bilinearly there. A target pixel is valid when all four bilinear taps lie
inside the source and the model is still one-to-one at its radius (past the
fold of a strong radial polynomial the model maps far rays back into the
picture). The target is then cropped to the largest valid rectangle grown
around the principal point, with the principal point shifted by the crop, so
no pixel of the result is ever filled from outside the source.

Non-fisheye models keep the source's focal lengths and pixel grid (a
barrel-distorted source loses only the periphery that the same-size pinhole
frame cannot show). Fisheye lenses keep the focal length at the centre but
get a larger canvas, out to `FISHEYE_MAX_HALF_ANGLE` from the axis (past that
a pinhole image stretches without bound), and the crop is grown
symmetrically about the principal point.
"""
from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from .dataset import DatasetError

# name -> number of parameters, for the models that carry distortion.
DISTORTED_MODELS = {"SIMPLE_RADIAL": 4, "RADIAL": 5, "OPENCV": 8, "FULL_OPENCV": 12, "OPENCV_FISHEYE": 8}
PINHOLE_MODELS = {"SIMPLE_PINHOLE": 3, "PINHOLE": 4}
SUPPORTED_MODELS = tuple(PINHOLE_MODELS) + tuple(DISTORTED_MODELS)

# Half field of view (radians) a fisheye is undistorted out to, per axis.
FISHEYE_MAX_HALF_ANGLE = math.radians(60.0)


@dataclass(frozen=True)
class Lens:
    """One camera's intrinsics at one image size: the model name, the pinhole
    part (fx, fy, cx, cy in pixels) and the model's distortion coefficients
    (COLMAP's order: k / k1 k2 / k1 k2 p1 p2 / k1 k2 p1 p2 k3 k4 k5 k6 /
    k1 k2 k3 k4)."""

    model: str
    width: int
    height: int
    fx: float
    fy: float
    cx: float
    cy: float
    coeffs: tuple = ()

    def __post_init__(self):
        n = {**PINHOLE_MODELS, **DISTORTED_MODELS}.get(self.model)
        if n is None:
            raise ValueError(f"[splat] lens: unsupported camera model {self.model!r}; supported: "
                             f"{', '.join(SUPPORTED_MODELS)}")
        want = n - (3 if self.model.startswith("SIMPLE_") or self.model == "RADIAL" else 4)
        if len(self.coeffs) != want:
            raise ValueError(f"[splat] lens: {self.model} takes {want} distortion coefficients, "
                             f"got {len(self.coeffs)}")
        object.__setattr__(self, "coeffs", tuple(float(c) for c in self.coeffs))
        vals = (self.fx, self.fy, self.cx, self.cy) + self.coeffs
        if not all(math.isfinite(v) for v in vals) or self.fx <= 0 or self.fy <= 0:
            raise ValueError(f"[splat] lens: {self.model} needs finite parameters and positive focal "
                             f"lengths, got {list(vals)}")

    @classmethod
    def from_colmap(cls, model: str, width: int, height: int, params) -> "Lens":
        """From COLMAP's parameter list of `model`."""
        n = {**PINHOLE_MODELS, **DISTORTED_MODELS}.get(model)
        if n is None:
            raise ValueError(f"[splat] lens: unsupported camera model {model!r}; supported: "
                             f"{', '.join(SUPPORTED_MODELS)}")
        p = tuple(float(v) for v in params)
        if len(p) != n:
            raise ValueError(f"[splat] lens: {model} takes {n} parameters, got {len(p)}")
        if model in ("SIMPLE_PINHOLE", "SIMPLE_RADIAL", "RADIAL"):
            return cls(model, width, height, p[0], p[0], p[1], p[2], p[3:])
        return cls(model, width, height, p[0], p[1], p[2], p[3], p[4:])

    @property
    def intrinsics(self) -> tuple[float, float, float, float]:
        return self.fx, self.fy, self.cx, self.cy

    @property
    def is_pinhole(self) -> bool:
        return not any(c != 0.0 for c in self.coeffs)

    @property
    def is_fisheye(self) -> bool:
        return self.model == "OPENCV_FISHEYE"

    def scaled(self, sx: float, sy: float, width: int, height: int) -> "Lens":
        """The same lens for the image resized by (sx, sy) to width x height
        (the coefficients act on normalized coordinates and do not change)."""
        return Lens(self.model, width, height, self.fx * sx, self.fy * sy, self.cx * sx, self.cy * sy,
                    self.coeffs)


def distort(model: str, coeffs, x: np.ndarray, y: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Normalized ideal coordinates -> normalized distorted coordinates."""
    if model in PINHOLE_MODELS:
        return x, y
    r2 = x * x + y * y
    if model == "SIMPLE_RADIAL":
        (k,) = coeffs
        f = 1.0 + k * r2
        return x * f, y * f
    if model == "RADIAL":
        k1, k2 = coeffs
        f = 1.0 + r2 * (k1 + k2 * r2)
        return x * f, y * f
    if model in ("OPENCV", "FULL_OPENCV"):
        k1, k2, p1, p2 = coeffs[:4]
        if model == "OPENCV":
            f = 1.0 + r2 * (k1 + k2 * r2)
        else:
            k3, k4, k5, k6 = coeffs[4:]
            f = (1.0 + r2 * (k1 + r2 * (k2 + r2 * k3))) / (1.0 + r2 * (k4 + r2 * (k5 + r2 * k6)))
        xy = x * y
        return (x * f + 2.0 * p1 * xy + p2 * (r2 + 2.0 * x * x),
                y * f + 2.0 * p2 * xy + p1 * (r2 + 2.0 * y * y))
    if model == "OPENCV_FISHEYE":
        k1, k2, k3, k4 = coeffs
        r = np.sqrt(r2)
        theta = np.arctan(r)
        t2 = theta * theta
        theta_d = theta * (1.0 + t2 * (k1 + t2 * (k2 + t2 * (k3 + t2 * k4))))
        safe = r > 1e-12
        scale = np.where(safe, theta_d / np.where(safe, r, 1.0), 1.0)
        return x * scale, y * scale
    raise ValueError(f"[splat] lens: unsupported camera model {model!r}")


def _radial_of(model: str, coeffs, r: np.ndarray) -> np.ndarray:
    """Distorted radius of an ideal radius along the x axis (no tangential part)."""
    xd, _ = distort(model, tuple(coeffs[:2]) + (0.0, 0.0) + tuple(coeffs[4:]) if model in ("OPENCV", "FULL_OPENCV")
                    else coeffs, r, np.zeros_like(r))
    return xd


def monotonic_radius(model: str, coeffs, limit: float) -> float:
    """Largest ideal radius (<= limit) up to which the radial part keeps growing."""
    r = np.linspace(0.0, limit, 4097)
    d = np.diff(_radial_of(model, coeffs, r))
    bad = np.nonzero(d <= 0.0)[0]
    return float(limit if bad.size == 0 else r[bad[0]])


def _inverse_radius(model: str, coeffs, rd: float, r_max: float) -> float:
    """Ideal radius whose distorted radius is rd (bisection on [0, r_max])."""
    lo, hi = 0.0, r_max
    if _radial_of(model, coeffs, np.array([hi]))[0] <= rd:
        return hi
    for _ in range(60):
        mid = 0.5 * (lo + hi)
        if _radial_of(model, coeffs, np.array([mid]))[0] < rd:
            lo = mid
        else:
            hi = mid
    return lo


@dataclass(frozen=True, eq=False)
class Undistortion:
    """How one lens at one image size becomes a pinhole image.

    `intrinsics`: (fx, fy, cx, cy) of the target; `width`, `height`: its size;
    per target pixel, `index` (int32) is the flat index of its top-left
    bilinear tap in the source padded by one column and row, `wx`, `wy`
    (float32) the tap weights; `source_size`, `intrinsics_source`: the
    source image size and pinhole part the plan was made for.
    """

    intrinsics: tuple
    width: int
    height: int
    index: np.ndarray
    wx: np.ndarray
    wy: np.ndarray
    source_size: tuple
    intrinsics_source: tuple = ()

    @classmethod
    def from_coords(cls, intrinsics, sx: np.ndarray, sy: np.ndarray, source_size,
                    intrinsics_source=()) -> "Undistortion":
        """From source pixel-index coordinates (pixel i's centre at i) inside [0, W-1] x [0, H-1]."""
        sw, sh = source_size
        x0 = np.clip(np.floor(sx), 0, sw - 1)
        y0 = np.clip(np.floor(sy), 0, sh - 1)
        index = (y0.astype(np.int64) * (sw + 1) + x0.astype(np.int64)).astype(np.int32).ravel()
        wx = (sx - x0).astype(np.float32).ravel()[:, None]
        wy = (sy - y0).astype(np.float32).ravel()[:, None]
        h, w = sx.shape
        return cls(intrinsics, w, h, index, wx, wy, tuple(source_size), tuple(intrinsics_source))

    def apply(self, image: np.ndarray) -> np.ndarray:
        """Resample float [H, W, C] (or [H, W]) source -> float32 [h, w, C] (or [h, w])."""
        flat_in = image.ndim == 2
        src = image[..., None] if flat_in else image
        sh, sw, c = src.shape
        if (sw, sh) != tuple(self.source_size):
            raise ValueError(f"[splat] undistort: image is {sw}x{sh}, the plan is for "
                             f"{self.source_size[0]}x{self.source_size[1]}")
        padded = np.empty((sh + 1, sw + 1, c), np.float32)     # the edge repeated: taps of weight 0
        padded[:sh, :sw] = src
        padded[sh, :sw] = src[sh - 1]
        padded[:, sw] = padded[:, sw - 1]
        flat = padded.reshape(-1, c)
        i = self.index
        a, b = np.take(flat, i, axis=0), np.take(flat, i + 1, axis=0)
        top = a + self.wx * (b - a)
        a, b = np.take(flat, i + (sw + 1), axis=0), np.take(flat, i + (sw + 2), axis=0)
        bottom = a + self.wx * (b - a)
        out = (top + self.wy * (bottom - top)).reshape(self.height, self.width, c)
        return out[..., 0] if flat_in else out


def _sample_coords(lens: Lens, fx, fy, cx, cy, w, h):
    """Source pixel-index coordinates and validity of a w x h pinhole target."""
    sfx, sfy, scx, scy = lens.intrinsics
    u = np.arange(w, dtype=np.float64) + 0.5
    v = np.arange(h, dtype=np.float64) + 0.5
    x, y = np.meshgrid((u - cx) / fx, (v - cy) / fy)
    xd, yd = distort(lens.model, lens.coeffs, x, y)
    sx = sfx * xd + scx - 0.5
    sy = sfy * yd + scy - 0.5
    valid = np.isfinite(sx) & np.isfinite(sy)
    valid &= (sx >= 0.0) & (sx <= lens.width - 1) & (sy >= 0.0) & (sy <= lens.height - 1)
    r = np.sqrt(x * x + y * y)
    limit = float(r.max()) * 1.01 + 1e-9
    valid &= r <= monotonic_radius(lens.model, lens.coeffs, limit)
    return sx, sy, valid


def _valid_rectangle(valid: np.ndarray, pu: float, pv: float, symmetric: bool):
    """A large all-valid rectangle around the principal point (pu, pv), in
    target pixels: the canvas scaled about the principal point by the largest
    factor that stays valid (bisection), then each side (each pair of sides
    when `symmetric`) pushed out one pixel at a time while it stays valid.
    Returns (left, top, right, bottom), right / bottom exclusive, or None."""
    h, w = valid.shape
    sat = np.zeros((h + 1, w + 1), dtype=np.int64)
    sat[1:, 1:] = np.cumsum(np.cumsum(valid, axis=0), axis=1)

    def full(l, t, r, b):
        if l < 0 or t < 0 or r > w or b > h or l >= r or t >= b:
            return False
        return sat[b, r] - sat[t, r] - sat[b, l] + sat[t, l] == (r - l) * (b - t)

    def scaled(s):
        l = int(math.ceil(pu - s * pu - 1e-9))
        t = int(math.ceil(pv - s * pv - 1e-9))
        r = int(math.floor(pu + s * (w - pu) + 1e-9))
        b = int(math.floor(pv + s * (h - pv) + 1e-9))
        if symmetric:   # whole pixels on both sides of the centre
            half_u = min(int(math.floor(pu)) - l, r - int(math.ceil(pu)))
            half_v = min(int(math.floor(pv)) - t, b - int(math.ceil(pv)))
            l, r = int(math.floor(pu)) - half_u, int(math.ceil(pu)) + half_u
            t, b = int(math.floor(pv)) - half_v, int(math.ceil(pv)) + half_v
        return l, t, r, b

    lo, hi = 0.0, 1.0
    if not full(*scaled(hi)):
        for _ in range(40):
            mid = 0.5 * (lo + hi)
            if full(*scaled(mid)):
                lo = mid
            else:
                hi = mid
        hi = lo
    rect = scaled(hi)
    if not full(*rect):
        return None
    l, t, r, b = rect
    grown = True
    while grown:
        grown = False
        steps = (((l - 1, t, r + 1, b), (l, t - 1, r, b + 1)) if symmetric else
                 ((l - 1, t, r, b), (l, t, r + 1, b), (l, t - 1, r, b), (l, t, r, b + 1)))
        for cand in steps:
            if full(*cand):
                l, t, r, b = cand
                grown = True
    return l, t, r, b


def plan_undistortion(lens: Lens) -> Undistortion:
    """The cropped pinhole target of `lens` at its own image size (see the module doc)."""
    fx, fy, cx, cy = lens.intrinsics
    if lens.is_fisheye:
        # canvas half-extents from undistorting the source's edges along the axes
        k = lens.coeffs
        r_fold = monotonic_radius(lens.model, k, math.tan(FISHEYE_MAX_HALF_ANGLE))
        cap = min(r_fold, math.tan(FISHEYE_MAX_HALF_ANGLE))

        def ideal(pixels, f):
            return _inverse_radius(lens.model, k, max(pixels, 0.0) / f, cap)

        left, right = ideal(cx, fx) * fx, ideal(lens.width - cx, fx) * fx
        top, bottom = ideal(cy, fy) * fy, ideal(lens.height - cy, fy) * fy
        # a symmetric canvas about the principal point, whole pixels
        half_w = int(math.ceil(max(left, right))) + 1
        half_h = int(math.ceil(max(top, bottom))) + 1
        w, h = 2 * half_w, 2 * half_h
        tcx, tcy = float(half_w), float(half_h)
        symmetric = True
    else:
        w, h, tcx, tcy = lens.width, lens.height, cx, cy
        symmetric = False
    sx, sy, valid = _sample_coords(lens, fx, fy, tcx, tcy, w, h)
    rect = _valid_rectangle(valid, min(max(tcx, 0.0), float(w)), min(max(tcy, 0.0), float(h)), symmetric)
    if rect is None or (rect[2] - rect[0]) < 2 or (rect[3] - rect[1]) < 2:
        raise DatasetError(f"[splat] lens: {lens.model} {lens.width}x{lens.height} with parameters "
                           f"{[lens.fx, lens.fy, lens.cx, lens.cy, *lens.coeffs]} leaves no valid undistorted region around the principal point")
    l, t, r, b = rect
    return Undistortion.from_coords((fx, fy, tcx - l, tcy - t), sx[t:b, l:r], sy[t:b, l:r],
                                    (lens.width, lens.height), lens.intrinsics)
