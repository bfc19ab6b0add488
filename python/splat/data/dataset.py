"""The in-memory dataset: cameras, images composited on the background, points."""
from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np

from .._validate import as_float32, positive_float, real_array
from ..camera import Camera


class DatasetError(ValueError):
    """A dataset file is missing, unreadable or inconsistent (the message names it)."""


def scene_extent(cameras) -> float:
    """Scene scale as 3DGS computes it from the camera centres.

    centre = mean of the camera centres, radius = the largest distance of a
    centre to it, extent = 1.1 * radius. When every centre coincides (a single
    camera) the radius would be 0 and every position learning rate with it, so
    the extent is 1.0 there instead.
    """
    cameras = list(cameras)
    if not cameras:
        raise ValueError("[splat] cameras: need at least one camera for the scene extent")
    centers = np.stack([c.center for c in cameras]).astype(np.float64)
    mean = centers.mean(axis=0)
    radius = float(np.max(np.linalg.norm(centers - mean, axis=1)))
    if radius <= 0.0:
        return 1.0
    return radius * 1.1


def parse_frames(spec):
    """Normalize a frame selection: None, a slice, an int, a sequence of ints,
    or a string "start:stop:step" (Python slice syntax, e.g. "0::2") or "3"."""
    if spec is None or isinstance(spec, slice):
        return spec
    if isinstance(spec, str):
        text = spec.strip()
        parts = text.split(":")
        if len(parts) > 3 or not text:
            raise ValueError(f"[splat] frames: cannot parse {spec!r}; expected e.g. '0::2' or '5'")
        try:
            vals = [int(p) if p.strip() else None for p in parts]
        except ValueError:
            raise ValueError(f"[splat] frames: cannot parse {spec!r}; expected e.g. '0::2' or '5'") from None
        if len(vals) == 1:
            return [vals[0]]
        if len(vals) == 3 and vals[2] == 0:
            raise ValueError(f"[splat] frames: slice step cannot be zero in {spec!r}")
        return slice(*vals)
    if isinstance(spec, (bool, np.bool_)):
        raise TypeError("[splat] frames: expected a slice, a list of indices or a string, got bool")
    if isinstance(spec, (int, np.integer)):
        return [int(spec)]
    try:
        items = list(spec)
    except TypeError:
        raise TypeError(f"[splat] frames: expected a slice, a list of indices or a string, "
                        f"got {type(spec).__name__}") from None
    out = []
    for x in items:
        if isinstance(x, (bool, np.bool_)) or not isinstance(x, (int, np.integer)):
            raise TypeError(f"[splat] frames: indices must be integers, got {x!r}")
        out.append(int(x))
    return out


def select_frames(count: int, frames) -> list[int]:
    """Indices into a list of `count` views picked by `frames` (see parse_frames)."""
    spec = parse_frames(frames)
    if spec is None:
        return list(range(count))
    if isinstance(spec, slice):
        if spec.step == 0:
            raise ValueError("[splat] frames: slice step cannot be zero")
        idx = list(range(count))[spec]
    else:
        idx = []
        for i in spec:
            if not -count <= i < count:
                raise ValueError(f"[splat] frames: index {i} out of range for {count} views")
            idx.append(i % count)
    if not idx:
        raise ValueError(f"[splat] frames: {frames!r} selects no view out of {count}")
    return idx


@dataclass(eq=False)
class Dataset:
    """One split of a scene.

    cameras: one `Camera` per view; images: uint8 [V,H,W,3] already composited
    on `background`; names: one per view; points / point_colors: float32 [M,3]
    initial point cloud and its colours in [0,1] (None for Blender scenes);
    scene_extent: see `scene_extent` (computed from the cameras when not given);
    alphas: optional uint8 [V,H,W] coverage (only when loaded with keep_alpha).
    """

    cameras: list
    images: np.ndarray = field(repr=False)
    names: list
    points: np.ndarray | None = field(default=None, repr=False)
    point_colors: np.ndarray | None = field(default=None, repr=False)
    background: tuple = (1.0, 1.0, 1.0)
    scene_extent: float | None = None
    alphas: np.ndarray | None = field(default=None, repr=False)
    path: str | None = None
    format: str | None = None
    split: str | None = None

    def __post_init__(self):
        self.cameras = list(self.cameras)
        self.names = [str(n) for n in self.names]
        v = len(self.cameras)
        if v == 0:
            raise ValueError("[splat] cameras: a dataset needs at least one view")
        for i, cam in enumerate(self.cameras):
            if not isinstance(cam, Camera):
                raise TypeError(f"[splat] cameras[{i}]: expected splat.Camera, got {type(cam).__name__}")
        imgs = self.images
        if not isinstance(imgs, np.ndarray) or imgs.dtype != np.uint8 or imgs.ndim != 4 or imgs.shape[3] != 3:
            desc = f"{imgs.dtype} {list(imgs.shape)}" if isinstance(imgs, np.ndarray) else type(imgs).__name__
            raise ValueError(f"[splat] images: expected uint8 [V,H,W,3], got {desc}")
        if imgs.shape[0] != v:
            raise ValueError(f"[splat] images: {imgs.shape[0]} images for {v} cameras")
        if len(self.names) != v:
            raise ValueError(f"[splat] names: {len(self.names)} names for {v} cameras")
        h, w = imgs.shape[1:3]
        for i, cam in enumerate(self.cameras):
            if (cam.width, cam.height) != (w, h):
                raise ValueError(f"[splat] cameras[{i}]: camera is {cam.width}x{cam.height} but the "
                                 f"images are {w}x{h}")
        if self.points is not None:
            self.points = as_float32("points", self.points, (None, 3))
            if self.point_colors is None:
                self.point_colors = np.full_like(self.points, 0.5)
        if self.point_colors is not None:
            if self.points is None:
                raise ValueError("[splat] point_colors: given without points")
            self.point_colors = as_float32("point_colors", self.point_colors)
            if self.point_colors.shape != self.points.shape:
                raise ValueError(f"[splat] point_colors: shape {list(self.point_colors.shape)} does not "
                                 f"match points {list(self.points.shape)}")
        bg = tuple(float(x) for x in real_array("background", self.background, (3,)))
        if not all(0.0 <= x <= 1.0 for x in bg):
            raise ValueError(f"[splat] background: expected 3 values in [0, 1], got {self.background!r}")
        self.background = bg
        if self.alphas is not None:
            a = self.alphas
            if not isinstance(a, np.ndarray) or a.dtype != np.uint8 or a.shape != imgs.shape[:3]:
                raise ValueError("[splat] alphas: expected uint8 [V,H,W] matching images")
        if self.scene_extent is None:
            self.scene_extent = scene_extent(self.cameras)
        else:
            self.scene_extent = positive_float("scene_extent", self.scene_extent)

    def __len__(self) -> int:
        return len(self.cameras)

    @property
    def width(self) -> int:
        return int(self.images.shape[2])

    @property
    def height(self) -> int:
        return int(self.images.shape[1])

    def subset(self, frames) -> "Dataset":
        """The views selected by `frames` (slice, index list or "start:stop:step");
        the scene extent is recomputed from the selected cameras."""
        idx = select_frames(len(self), frames)
        return Dataset(
            cameras=[self.cameras[i] for i in idx],
            images=self.images[idx],
            names=[self.names[i] for i in idx],
            points=self.points,
            point_colors=self.point_colors,
            background=self.background,
            alphas=None if self.alphas is None else self.alphas[idx],
            path=self.path, format=self.format, split=self.split,
        )
