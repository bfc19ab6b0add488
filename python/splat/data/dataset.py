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


def _image_list(images, v: int) -> list:
    """`images` as a list of uint8 C-contiguous [H_i,W_i,3] arrays (one per view)."""
    if isinstance(images, np.ndarray):
        if images.dtype != np.uint8 or images.ndim != 4 or images.shape[3] != 3:
            raise ValueError(f"[splat] images: expected a list of uint8 [H,W,3] arrays or one uint8 "
                             f"[V,H,W,3] array, got {images.dtype} {list(images.shape)}")
        images = list(images)
    elif isinstance(images, (list, tuple)):
        images = list(images)
    else:
        raise ValueError(f"[splat] images: expected a list of uint8 [H,W,3] arrays or one uint8 "
                         f"[V,H,W,3] array, got {type(images).__name__}")
    if len(images) != v:
        raise ValueError(f"[splat] images: {len(images)} images for {v} cameras")
    out = []
    for i, img in enumerate(images):
        if (not isinstance(img, np.ndarray) or img.dtype != np.uint8 or img.ndim != 3
                or img.shape[2] != 3 or img.shape[0] == 0 or img.shape[1] == 0):
            desc = f"{img.dtype} {list(img.shape)}" if isinstance(img, np.ndarray) else type(img).__name__
            raise ValueError(f"[splat] images[{i}]: expected uint8 [H,W,3], got {desc}")
        out.append(np.ascontiguousarray(img))
    return out


def _per_view(name: str, values, shapes: list, dtype, v: int, allow_none: bool) -> list | None:
    """A per-view list of 2D arrays of `dtype` shaped like each image (None entries
    when `allow_none`); a single [V,H,W] array is accepted for uniform sizes."""
    if values is None:
        return None
    if isinstance(values, np.ndarray):
        if values.ndim != 3:
            raise ValueError(f"[splat] {name}: expected a list of [H,W] arrays or one [V,H,W] array, "
                             f"got {list(values.shape)}")
        values = list(values)
    elif not isinstance(values, (list, tuple)):
        raise ValueError(f"[splat] {name}: expected a list of [H,W] arrays, got {type(values).__name__}")
    values = list(values)
    if len(values) != v:
        raise ValueError(f"[splat] {name}: {len(values)} entries for {v} views")
    out = []
    for i, (a, shape) in enumerate(zip(values, shapes)):
        if a is None and allow_none:
            out.append(None)
            continue
        if not isinstance(a, np.ndarray) or a.dtype != dtype or a.shape != shape:
            desc = f"{a.dtype} {list(a.shape)}" if isinstance(a, np.ndarray) else type(a).__name__
            raise ValueError(f"[splat] {name}[{i}]: expected {np.dtype(dtype).name} {list(shape)} "
                             f"(the size of images[{i}]), got {desc}")
        out.append(np.ascontiguousarray(a))
    return out


class ReleasedImages:
    """`Dataset.images` after `Dataset.release_images()`: the views' count, and an
    error naming why for any image read."""

    def __init__(self, count: int):
        self._count = count

    def __len__(self) -> int:
        return self._count

    def __getitem__(self, i):
        raise RuntimeError("[splat] dataset: its images were released (Dataset.release_images) once a "
                           "Trainer held its own copy; load the dataset again to read them")


def size_summary(sizes) -> str:
    """"800x800" for one size, else e.g. "mixed sizes 750x1000 .. 1000x750 (3 sizes)"."""
    sizes = sorted(set(sizes), key=lambda s: (s[0] * s[1], s))
    if len(sizes) == 1:
        return f"{sizes[0][0]}x{sizes[0][1]}"
    return (f"mixed sizes {sizes[0][0]}x{sizes[0][1]} .. {sizes[-1][0]}x{sizes[-1][1]} "
            f"({len(sizes)} sizes)")


@dataclass(eq=False)
class Dataset:
    """One split of a scene.

    cameras: one `Camera` per view; images: a list of uint8 [H_i,W_i,3] arrays
    already composited on `background`, image i the size of cameras[i] (one
    uint8 [V,H,W,3] array is accepted and split into the list); names: one per
    view; points / point_colors: float32 [M,3] initial point cloud and its
    colours in [0,1] (None for Blender scenes); scene_extent: see
    `scene_extent` (computed from the cameras when not given); alphas: None or
    a list of uint8 [H_i,W_i] coverage (only when loaded with keep_alpha);
    masks: None (every pixel counts) or a list with, per view, None (every
    pixel of that view counts) or a bool [H_i,W_i] array, True where the pixel
    counts in the loss, the densification statistics and (with `[data]
    eval_masked`) the metrics.
    """

    cameras: list
    images: list = field(repr=False)
    names: list
    points: np.ndarray | None = field(default=None, repr=False)
    point_colors: np.ndarray | None = field(default=None, repr=False)
    background: tuple = (1.0, 1.0, 1.0)
    scene_extent: float | None = None
    alphas: list | None = field(default=None, repr=False)
    path: str | None = None
    format: str | None = None
    split: str | None = None
    masks: list | None = field(default=None, repr=False)

    def __post_init__(self):
        self.cameras = list(self.cameras)
        self.names = [str(n) for n in self.names]
        v = len(self.cameras)
        if v == 0:
            raise ValueError("[splat] cameras: a dataset needs at least one view")
        for i, cam in enumerate(self.cameras):
            if not isinstance(cam, Camera):
                raise TypeError(f"[splat] cameras[{i}]: expected splat.Camera, got {type(cam).__name__}")
        self.images = _image_list(self.images, v)
        if len(self.names) != v:
            raise ValueError(f"[splat] names: {len(self.names)} names for {v} cameras")
        for i, (cam, img) in enumerate(zip(self.cameras, self.images)):
            h, w = img.shape[:2]
            if (cam.width, cam.height) != (w, h):
                raise ValueError(f"[splat] cameras[{i}] ({self.names[i]}): camera is "
                                 f"{cam.width}x{cam.height} but its image is {w}x{h}")
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
        shapes = [img.shape[:2] for img in self.images]
        self.alphas = _per_view("alphas", self.alphas, shapes, np.uint8, v, allow_none=False)
        self.masks = _per_view("masks", self.masks, shapes, np.bool_, v, allow_none=True)
        if self.masks is not None and all(m is None for m in self.masks):
            self.masks = None
        if self.scene_extent is None:
            self.scene_extent = scene_extent(self.cameras)
        else:
            self.scene_extent = positive_float("scene_extent", self.scene_extent)

    def __len__(self) -> int:
        return len(self.cameras)

    @property
    def sizes(self) -> list[tuple[int, int]]:
        """(width, height) of every view."""
        return [(c.width, c.height) for c in self.cameras]

    @property
    def uniform_size(self) -> bool:
        return len(set(self.sizes)) == 1

    def _size(self) -> tuple[int, int]:
        sizes = sorted(set(self.sizes))
        if len(sizes) != 1:
            shown = ", ".join(f"{w}x{h}" for w, h in sizes[:4]) + (", ..." if len(sizes) > 4 else "")
            raise ValueError(f"[splat] dataset: images have different sizes ({shown}); use each "
                             f"camera's width and height")
        return sizes[0]

    @property
    def width(self) -> int:
        """The width of every image (ValueError when the sizes differ)."""
        return self._size()[0]

    @property
    def height(self) -> int:
        """The height of every image (ValueError when the sizes differ)."""
        return self._size()[1]

    def size_summary(self) -> str:
        """"800x800" for uniform datasets, else e.g. "mixed sizes 750x1000 .. 1000x750 (3 sizes)"."""
        return size_summary(self.sizes)

    def release_images(self) -> None:
        """Drops the decoded images (and alphas, masks), e.g. once a Trainer holds its
        own packed copy of them (`splat train` does this after its setup, so the host
        keeps one copy). Cameras, names and points stay; reading an image afterwards
        raises RuntimeError."""
        self.images = ReleasedImages(len(self.cameras))
        self.alphas = None
        self.masks = None if self.masks is None else ReleasedImages(len(self.cameras))

    def subset(self, frames) -> "Dataset":
        """The views selected by `frames` (slice, index list or "start:stop:step");
        the scene extent is recomputed from the selected cameras."""
        idx = select_frames(len(self), frames)
        return Dataset(
            cameras=[self.cameras[i] for i in idx],
            images=[self.images[i] for i in idx],
            names=[self.names[i] for i in idx],
            points=self.points,
            point_colors=self.point_colors,
            background=self.background,
            alphas=None if self.alphas is None else [self.alphas[i] for i in idx],
            masks=None if self.masks is None else [self.masks[i] for i in idx],
            path=self.path, format=self.format, split=self.split,
        )
