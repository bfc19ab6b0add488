"""A procedural ground-truth scene: `splat train` with no config trains on it.

`make_scene` builds a few hundred coloured, anisotropic Gaussians forming
recognisable shapes around the origin -- a checkered ground disk, a banded
sphere, a torus, a box with differently coloured faces and a striped post --
renders them with the CPU rasterizer from cameras on a sphere looking at the
origin, and returns a train and a test `Dataset` (images quantised to uint8).
Like a COLMAP reconstruction, the train split carries a sparse point cloud: a
noisy subsample of the ground-truth means with their colours, which
`Trainer.from_dataset` initialises from.

Everything is a pure function of the arguments: the same seed gives the same
scene, cameras and images, byte for byte.
"""
from __future__ import annotations

import json
import math
import os
from pathlib import Path

import numpy as np

from .._validate import integer, real_array
from ..camera import Camera
from .dataset import Dataset

__all__ = ["make_scene", "ground_truth", "default_train_config", "write_blender", "DEFAULT_SEED"]

SH_C0 = 0.28209479177387814
DEFAULT_SEED = 0            # seed=None: the built-in scene
CAMERA_DISTANCE = 4.0
FOV_DEG = 40.0              # horizontal field of view; the scene (radius ~1.3) fills the frame
GT_SH_DEGREE = 1            # the ground truth has a little view dependence


# --------------------------------------------------------------------------- geometry helpers


def _quat_from_matrix(r: np.ndarray) -> np.ndarray:
    """Unit quaternions (w, x, y, z) of rotation matrices [N,3,3] (columns = axes)."""
    r = np.asarray(r, dtype=np.float64)
    m00, m11, m22 = r[:, 0, 0], r[:, 1, 1], r[:, 2, 2]
    q = np.empty((len(r), 4))
    trace = m00 + m11 + m22
    for i in range(len(r)):
        m = r[i]
        if trace[i] > 0.0:
            s = 2.0 * math.sqrt(1.0 + trace[i])
            q[i] = (0.25 * s, (m[2, 1] - m[1, 2]) / s, (m[0, 2] - m[2, 0]) / s, (m[1, 0] - m[0, 1]) / s)
        elif m[0, 0] > m[1, 1] and m[0, 0] > m[2, 2]:
            s = 2.0 * math.sqrt(1.0 + m[0, 0] - m[1, 1] - m[2, 2])
            q[i] = ((m[2, 1] - m[1, 2]) / s, 0.25 * s, (m[0, 1] + m[1, 0]) / s, (m[0, 2] + m[2, 0]) / s)
        elif m[1, 1] > m[2, 2]:
            s = 2.0 * math.sqrt(1.0 + m[1, 1] - m[0, 0] - m[2, 2])
            q[i] = ((m[0, 2] - m[2, 0]) / s, (m[0, 1] + m[1, 0]) / s, 0.25 * s, (m[1, 2] + m[2, 1]) / s)
        else:
            s = 2.0 * math.sqrt(1.0 + m[2, 2] - m[0, 0] - m[1, 1])
            q[i] = ((m[1, 0] - m[0, 1]) / s, (m[0, 2] + m[2, 0]) / s, (m[1, 2] + m[2, 1]) / s, 0.25 * s)
    return q / np.linalg.norm(q, axis=1, keepdims=True)


def _frames_from_normals(normals: np.ndarray, hint=None) -> np.ndarray:
    """Rotation matrices [N,3,3] whose third column is the normal."""
    n = normals / np.linalg.norm(normals, axis=1, keepdims=True)
    if hint is None:
        hint = np.where(np.abs(n[:, 2:3]) < 0.9, [[0.0, 0.0, 1.0]], [[1.0, 0.0, 0.0]])
    t1 = np.cross(hint, n)
    t1 /= np.linalg.norm(t1, axis=1, keepdims=True)
    t2 = np.cross(n, t1)
    return np.stack([t1, t2, n], axis=2)


def _rot(axis, angle) -> np.ndarray:
    axis = np.asarray(axis, dtype=np.float64)
    axis = axis / np.linalg.norm(axis)
    k = np.array([[0.0, -axis[2], axis[1]], [axis[2], 0.0, -axis[0]], [-axis[1], axis[0], 0.0]])
    return np.eye(3) + math.sin(angle) * k + (1.0 - math.cos(angle)) * (k @ k)


def _fibonacci_sphere(n: int) -> np.ndarray:
    i = np.arange(n) + 0.5
    z = 1.0 - 2.0 * i / n
    r = np.sqrt(np.maximum(0.0, 1.0 - z * z))
    phi = math.pi * (3.0 - math.sqrt(5.0)) * i
    return np.stack([r * np.cos(phi), r * np.sin(phi), z], axis=1)


class _Builder:
    """Collects Gaussians shape by shape (float64 until the end)."""

    def __init__(self, rng: np.random.Generator):
        self.rng = rng
        self.means, self.rots, self.scales, self.colors, self.opacity = [], [], [], [], []

    def add(self, means, rots, scales, colors, opacity=0.97):
        n = len(means)
        jitter = self.rng.normal(scale=0.03, size=(n, 3))          # slight colour variation
        self.means.append(np.asarray(means, np.float64))
        self.rots.append(np.asarray(rots, np.float64))
        self.scales.append(np.broadcast_to(np.asarray(scales, np.float64), (n, 3)))
        self.colors.append(np.clip(np.broadcast_to(np.asarray(colors, np.float64), (n, 3)) + jitter,
                                   0.02, 0.98))
        self.opacity.append(np.broadcast_to(np.asarray(opacity, np.float64), (n,)))

    def arrays(self):
        return (np.concatenate(self.means), np.concatenate(self.rots), np.concatenate(self.scales),
                np.concatenate(self.colors), np.concatenate(self.opacity))


def _ground(b: _Builder, count: int):
    """A checkered disk at z = -0.65 (flat Gaussians)."""
    side = max(2, int(round(math.sqrt(count * 4.0 / math.pi))))
    spacing = 2.3 / side
    g = (np.arange(side) - (side - 1) / 2.0) * spacing
    x, y = np.meshgrid(g, g, indexing="ij")
    keep = x ** 2 + y ** 2 <= 1.15 ** 2
    x, y = x[keep], y[keep]
    means = np.stack([x, y, np.full_like(x, -0.65)], axis=1)
    rots = np.repeat(np.eye(3)[None], len(means), axis=0)
    checker = ((np.floor(x / 0.4) + np.floor(y / 0.4)) % 2).astype(bool)
    colors = np.where(checker[:, None], [[0.85, 0.8, 0.65]], [[0.35, 0.3, 0.3]])
    b.add(means, rots, (0.6 * spacing, 0.6 * spacing, 0.01), colors)


def _sphere(b: _Builder, count: int, center, radius):
    d = _fibonacci_sphere(count)
    means = np.asarray(center) + radius * d
    spacing = radius * math.sqrt(4.0 * math.pi / count)
    bands = (np.floor((d[:, 2] + 1.0) * 3.0) % 2).astype(bool)
    colors = np.where(bands[:, None], [[0.2, 0.7, 0.25]], [[0.95, 0.85, 0.2]])
    b.add(means, _frames_from_normals(d), (0.6 * spacing, 0.6 * spacing, 0.012), colors)


def _torus(b: _Builder, count: int, center, major, minor, tilt):
    nu = max(4, int(round(math.sqrt(count * major / minor))))
    nv = max(3, count // nu)
    u, v = np.meshgrid(np.arange(nu) * 2 * math.pi / nu, np.arange(nv) * 2 * math.pi / nv, indexing="ij")
    u, v = u.ravel(), v.ravel()
    radial = np.stack([np.cos(u), np.sin(u), np.zeros_like(u)], axis=1)
    normal = np.cos(v)[:, None] * radial + np.sin(v)[:, None] * np.array([0.0, 0.0, 1.0])
    pts = major * radial + minor * normal
    tangent = np.stack([-np.sin(u), np.cos(u), np.zeros_like(u)], axis=1)
    r = _rot([1.0, 0.3, 0.0], tilt)
    pts, normal, tangent = pts @ r.T, normal @ r.T, tangent @ r.T
    frames = _frames_from_normals(normal, hint=np.cross(normal, tangent))
    along = 0.7 * 2 * math.pi * major / nu
    across = 0.6 * 2 * math.pi * minor / nv
    shade = 0.5 + 0.5 * np.cos(u * 2.0)
    colors = shade[:, None] * np.array([[0.9, 0.15, 0.1]]) + (1 - shade[:, None]) * np.array([[1.0, 0.55, 0.1]])
    b.add(np.asarray(center) + pts, frames, (along, across, 0.01), colors)


def _box(b: _Builder, per_face: int, center, size, yaw):
    k = max(2, int(round(math.sqrt(per_face))))
    g = ((np.arange(k) + 0.5) / k - 0.5) * size
    s, t = np.meshgrid(g, g, indexing="ij")
    s, t = s.ravel(), t.ravel()
    face_colors = [(0.15, 0.3, 0.9), (0.5, 0.2, 0.8), (0.1, 0.65, 0.85),
                   (0.2, 0.2, 0.55), (0.85, 0.85, 0.95), (0.6, 0.45, 0.9)]
    r = _rot([0.0, 0.0, 1.0], yaw)
    spacing = size / k
    for f, (axis, sign) in enumerate([(0, 1), (0, -1), (1, 1), (1, -1), (2, 1), (2, -1)]):
        a1, a2 = [i for i in range(3) if i != axis]
        pts = np.zeros((len(s), 3))
        pts[:, axis] = sign * size / 2
        pts[:, a1], pts[:, a2] = s, t
        nrm = np.zeros(3)
        nrm[axis] = sign
        pts, nrm = pts @ r.T, r @ nrm
        frames = _frames_from_normals(np.repeat(nrm[None], len(pts), axis=0))
        b.add(np.asarray(center) + pts, frames, (0.6 * spacing, 0.6 * spacing, 0.01), face_colors[f])


def _post(b: _Builder, count: int, base, height):
    z = (np.arange(count) + 0.5) / count * height
    means = np.asarray(base) + np.stack([np.zeros_like(z), np.zeros_like(z), z], axis=1)
    rots = np.repeat(np.eye(3)[None], count, axis=0)
    stripes = (np.arange(count) // 2 % 2).astype(bool)
    colors = np.where(stripes[:, None], [[0.05, 0.05, 0.05]], [[0.95, 0.95, 0.95]])
    b.add(means, rots, (0.05, 0.05, 0.5 * height / count), colors)


def ground_truth(n_gaussians: int = 400, seed: int | None = None):
    """The ground-truth Gaussians of the scene (a `splat.Gaussians` with SH degree 1).

    n_gaussians is distributed over the shapes (the exact count can differ a
    little because shapes are laid out on grids)."""
    from ..gaussians import Gaussians
    if isinstance(n_gaussians, bool) or not isinstance(n_gaussians, (int, np.integer)) or n_gaussians < 20:
        raise ValueError(f"[splat] n_gaussians: expected an integer >= 20, got {n_gaussians!r}")
    rng = np.random.default_rng(DEFAULT_SEED if seed is None else seed)
    b = _Builder(rng)
    n = int(n_gaussians)
    # Shape placement varies with the seed; the composition stays the same.
    wobble = rng.uniform(-1.0, 1.0, size=8)
    _ground(b, int(0.3 * n))
    _sphere(b, int(0.2 * n), (0.5 + 0.1 * wobble[0], 0.1 * wobble[1], -0.2), 0.38)
    _torus(b, int(0.22 * n), (-0.35 + 0.1 * wobble[2], 0.4 + 0.1 * wobble[3], 0.05), 0.42, 0.11,
           0.5 + 0.3 * wobble[4])
    _box(b, max(4, int(0.2 * n) // 6), (-0.25, -0.5 + 0.1 * wobble[5], -0.36), 0.55, 0.4 + 0.5 * wobble[6])
    _post(b, max(4, int(0.08 * n)), (0.6 + 0.05 * wobble[7], -0.55, -0.65), 1.2)
    means, rots, scales, colors, opacity = b.arrays()
    sh = np.zeros((len(means), 4, 3))
    sh[:, 0, :] = (colors - 0.5) / SH_C0
    sh[:, 1:, :] = rng.normal(scale=0.08, size=(len(means), 3, 3))   # mild view dependence
    logits = np.log(opacity / (1.0 - opacity))
    return Gaussians(means.astype(np.float32), np.log(scales).astype(np.float32),
                     _quat_from_matrix(rots).astype(np.float32), logits.astype(np.float32),
                     sh.astype(np.float32))


# --------------------------------------------------------------------------- cameras


def look_at(eye, target=(0.0, 0.0, 0.0), up=(0.0, 0.0, 1.0)) -> np.ndarray:
    """OpenCV world-to-camera 4x4 (x right, y down, z towards `target`), float64."""
    eye, target, up = (real_array(name, v, (3,)).astype(np.float64)
                       for name, v in (("eye", eye), ("target", target), ("up", up)))
    for name, v in (("eye", eye), ("target", target), ("up", up)):
        if not np.all(np.isfinite(v)):
            raise ValueError(f"[splat] {name}: must be finite, got {v.tolist()}")
    z = target - eye
    if not np.linalg.norm(z) > 0:
        raise ValueError("[splat] target: must differ from eye")
    z /= np.linalg.norm(z)
    x = np.cross(z, up)
    if not np.linalg.norm(x) > 1e-12 * max(1.0, float(np.linalg.norm(up))):
        raise ValueError("[splat] up: must not be parallel to the viewing direction")
    x /= np.linalg.norm(x)
    y = np.cross(z, x)
    w2c = np.eye(4)
    w2c[:3, :3] = np.stack([x, y, z])
    w2c[:3, 3] = -w2c[:3, :3] @ eye
    return w2c


def _directions(n: int, rng: np.random.Generator | None, lo=-0.25, hi=0.85) -> np.ndarray:
    """Unit directions with z in [lo, hi]: a Fibonacci spiral over that band
    (rng None) or uniform random over it."""
    if rng is None:
        i = np.arange(n) + 0.5
        z = hi - (hi - lo) * i / n
        phi = math.pi * (3.0 - math.sqrt(5.0)) * i
    else:
        z = rng.uniform(lo, hi, size=n)
        phi = rng.uniform(0.0, 2.0 * math.pi, size=n)
    r = np.sqrt(1.0 - z * z)
    return np.stack([r * np.cos(phi), r * np.sin(phi), z], axis=1)


def _cameras(dirs: np.ndarray, width: int, height: int, rng: np.random.Generator | None):
    f = 0.5 * width / math.tan(math.radians(FOV_DEG) / 2.0)
    cams = []
    for d in dirs:
        target = np.zeros(3) if rng is None else rng.normal(scale=0.05, size=3)
        w2c = look_at(CAMERA_DISTANCE * d, target)
        cams.append(Camera(w2c.astype(np.float32), f, f, 0.5 * width, 0.5 * height, width, height))
    return cams


# --------------------------------------------------------------------------- the scene


def _render(gaussians, cameras, background) -> np.ndarray:
    from .. import _core
    from ..rasterizer import Rasterizer
    r = Rasterizer(_core.BackendConfig(backend="cpu"))
    out = np.empty((len(cameras), cameras[0].height, cameras[0].width, 3), np.uint8)
    for i, cam in enumerate(cameras):
        img = r.forward(gaussians, cam, sh_degree=GT_SH_DEGREE, background=background).image
        out[i] = np.clip(np.rint(np.asarray(img, np.float64) * 255.0), 0, 255).astype(np.uint8)
    return out


def _positive_int(name, v, lo=1):
    return integer(name, v, lo)


def make_scene(n_gaussians: int = 400, n_views: int = 48, width: int = 80, height: int = 80,
               seed: int | None = None, background=(1.0, 1.0, 1.0), n_test_views: int = 8,
               n_points: int | None = None) -> tuple[Dataset, Dataset]:
    """(train, test) datasets of the procedural scene.

    Train cameras lie on a Fibonacci spiral over a band of the sphere of radius
    4 around the origin (elevation about -15 to 58 degrees), looking at the
    origin; test cameras are drawn at random over the same band and aim near
    the origin, so they are views the training never saw. `seed` (None: the
    built-in scene, seed 0) fixes shapes, colours, test cameras and the point
    cloud. `n_points` (default: 60% of the Gaussians) is the size of the
    train split's point cloud: ground-truth means with Gaussian noise of 2% of
    the object size, and their colours with a little noise.
    """
    n_views = _positive_int("n_views", n_views)
    n_test_views = _positive_int("n_test_views", n_test_views)
    width = _positive_int("width", width)
    height = _positive_int("height", height)
    bg = tuple(float(x) for x in background)
    if len(bg) != 3 or not all(0.0 <= x <= 1.0 for x in bg):
        raise ValueError(f"[splat] background: expected 3 values in [0, 1], got {background!r}")
    seed = DEFAULT_SEED if seed is None else int(seed)
    gt = ground_truth(n_gaussians, seed)
    rng = np.random.default_rng([seed, 1])
    train_cams = _cameras(_directions(n_views, None), width, height, None)
    test_cams = _cameras(_directions(n_test_views, rng), width, height, rng)

    n = len(gt)
    m = max(8, int(round(0.6 * n))) if n_points is None else _positive_int("n_points", n_points)
    idx = rng.choice(n, size=min(m, n), replace=False) if m <= n else rng.integers(0, n, size=m)
    points = gt.means[idx].astype(np.float64) + rng.normal(scale=0.02, size=(len(idx), 3))
    colors = np.clip(gt.sh[idx, 0, :].astype(np.float64) * SH_C0 + 0.5
                     + rng.normal(scale=0.03, size=(len(idx), 3)), 0.0, 1.0)

    train = Dataset(cameras=train_cams, images=_render(gt, train_cams, bg),
                    names=[f"train_{i:03d}" for i in range(n_views)],
                    points=points.astype(np.float32), point_colors=colors.astype(np.float32),
                    background=bg, format="synthetic", split="train")
    test = Dataset(cameras=test_cams, images=_render(gt, test_cams, bg),
                   names=[f"test_{i:03d}" for i in range(n_test_views)],
                   background=bg, format="synthetic", split="test")
    return train, test


def default_train_config(steps: int = 2000, image_size: int = 80):
    """The 3DGS recipe scaled to the small synthetic scene: the schedules
    (densification, opacity reset, SH degree) are compressed into `steps`
    (densify from 1/12 to 2/3 of the run, one opacity reset at 45%, SH
    degree 1 from a quarter of the run), and the densification threshold is
    set for `image_size`-pixel images (the mean-loss gradient of a splat's
    2D position grows as the image shrinks; 8e-4 at 80 px, chosen by
    measurement on this scene)."""
    from ..config import TrainConfig
    steps = _positive_int("steps", steps)
    image_size = _positive_int("image_size", image_size)
    every = max(5, steps // 40)
    densify_from = max(every, steps // 12)
    return TrainConfig(
        steps=steps,
        sh_degree=1,
        sh_degree_interval=max(1, steps // 4),
        densify_from=densify_from,
        densify_until=max(densify_from, steps * 2 // 3),
        densify_every=every,
        opacity_reset_every=max(1, steps * 9 // 20),
        densify_grad_threshold=0.064 / image_size,
        init_points=2000,
    )


# --------------------------------------------------------------------------- export


def write_blender(root, splits: dict, *, camera_angle_x: float | None = None) -> Path:
    """Write datasets as a NeRF-synthetic folder: `splits` maps a split name
    ("train", "val", "test") to a Dataset whose cameras are centred pinholes
    with fx == fy; images go to <split>/<name>.png, poses (OpenGL camera-to-world)
    to transforms_<split>.json. Returns the folder."""
    from PIL import Image

    from ..io.atomic import atomic_write, atomic_write_text
    root = Path(root)
    flip = np.diag([1.0, -1.0, -1.0, 1.0])
    for split, ds in splits.items():
        (root / split).mkdir(parents=True, exist_ok=True)
        cam0 = ds.cameras[0]
        angle = camera_angle_x if camera_angle_x is not None else 2.0 * math.atan(0.5 * cam0.width / cam0.fx)
        frames = []
        for cam, img, name in zip(ds.cameras, ds.images, ds.names):
            if not (math.isclose(cam.fx, cam.fy, rel_tol=1e-6) and math.isclose(cam.cx, 0.5 * cam.width)
                    and math.isclose(cam.cy, 0.5 * cam.height)):
                raise ValueError(f"[splat] {name}: Blender format needs fx == fy and a centred principal point")
            c2w = np.linalg.inv(cam.world_to_camera.astype(np.float64)) @ flip
            stem = os.path.basename(name)
            with atomic_write(root / split / f"{stem}.png", "wb") as f:
                Image.fromarray(img).save(f, format="PNG")
            frames.append({"file_path": f"./{split}/{stem}", "transform_matrix": c2w.tolist()})
        atomic_write_text(root / f"transforms_{split}.json",
                          json.dumps({"camera_angle_x": angle, "frames": frames}, indent=1))
    return root
