"""Random scenes and cameras shared by the tests, and a loader for splat.reference.

A `Scene` carries the Gaussian arrays and the camera under the attribute names of
`splat.Gaussians` and `splat.Camera`, so it can be passed where either is duck-typed:

    scene = random_scene(rng, n=8, sh_degree=2, width=24, height=20)
    out = reference.forward(*scene.args())          # array signature
    out = reference.forward(scene, scene, scene.sh_degree, scene.background)

Seeds: use `make_rng()`; it honours SPLAT_TEST_SEED (to replay a failure) and returns
the seed so tests can put it in their assertion messages.
"""
from __future__ import annotations

import dataclasses
import importlib.util
import os
import sys
from dataclasses import dataclass
from pathlib import Path

import numpy as np

import _pkg  # noqa: F401 - makes splat.data importable without the native module
from splat.data import synthetic
from splat.data.synthetic import look_at  # noqa: F401 - OpenCV world-to-camera 4x4, re-exported

REPO_ROOT = Path(__file__).resolve().parents[1]


def load_reference():
    """`splat.reference`, or, while the package (its native module) does not import, the same
    source files loaded directly as a standalone package."""
    try:
        from splat import reference
        return reference
    except ImportError:
        pass
    name = "_splat_reference_standalone"
    if name in sys.modules:
        return sys.modules[name]
    root = REPO_ROOT / "python" / "splat" / "reference"
    spec = importlib.util.spec_from_file_location(
        name, root / "__init__.py", submodule_search_locations=[str(root)])
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module


_SEEDS_DRAWN = 0


def seeds_drawn() -> int:
    """How many times a test has asked make_rng for its seed (`pytest --reseed` repeats those tests)."""
    return _SEEDS_DRAWN


def make_rng(seed: int | None = None) -> tuple[np.random.Generator, int]:
    """(generator, seed): a fresh random seed unless `seed` or $SPLAT_TEST_SEED is given."""
    global _SEEDS_DRAWN
    if seed is None:
        _SEEDS_DRAWN += 1
        env = os.environ.get("SPLAT_TEST_SEED")
        seed = int(env) if env else int(np.random.SeedSequence().entropy % (2 ** 63))
    return np.random.default_rng(seed), seed


@dataclass
class Scene:
    means: np.ndarray           # [N,3]
    log_scales: np.ndarray      # [N,3]
    quats: np.ndarray           # [N,4] (w, x, y, z), not normalized
    opacity_logits: np.ndarray  # [N]
    sh: np.ndarray              # [N,K,3]
    world_to_camera: np.ndarray  # [4,4]
    fx: float
    fy: float
    cx: float
    cy: float
    width: int
    height: int
    sh_degree: int
    background: np.ndarray      # [3]

    PARAMS = ("means", "log_scales", "quats", "opacity_logits", "sh")

    def args(self) -> tuple:
        """Positional arguments of reference.forward (array signature)."""
        return (self.means, self.log_scales, self.quats, self.opacity_logits, self.sh,
                self.world_to_camera, self.fx, self.fy, self.cx, self.cy,
                self.width, self.height, self.sh_degree, self.background)

    def params(self) -> dict[str, np.ndarray]:
        return {k: getattr(self, k) for k in self.PARAMS}

    def replace(self, **changes) -> "Scene":
        return dataclasses.replace(self, **changes)

    def __len__(self) -> int:
        return self.means.shape[0]

    @property
    def camera_center(self) -> np.ndarray:
        W = self.world_to_camera
        return -W[:3, :3].T @ W[:3, 3]


def random_camera(rng: np.random.Generator, width: int, height: int, fov_deg: float = 60.0,
                  distance: float = 4.0) -> dict:
    """A camera on a sphere of radius `distance` looking near the origin; keyword dict of
    world_to_camera, fx, fy, cx, cy, width, height."""
    while True:
        d = rng.normal(size=3)
        d /= np.linalg.norm(d)
        if abs(d[2]) < 0.9:
            break
    eye = distance * d
    target = rng.normal(scale=0.2, size=3)
    up = np.array([0.0, 0.0, 1.0]) + rng.normal(scale=0.1, size=3)
    fx = 0.5 * width / np.tan(0.5 * np.radians(fov_deg)) * rng.uniform(0.9, 1.1)
    fy = fx * rng.uniform(0.9, 1.1)
    cx = 0.5 * width + rng.uniform(-1.0, 1.0)
    cy = 0.5 * height + rng.uniform(-1.0, 1.0)
    return dict(world_to_camera=look_at(eye, target, up), fx=float(fx), fy=float(fy),
                cx=float(cx), cy=float(cy), width=int(width), height=int(height))


def random_scene(rng: np.random.Generator, n: int = 8, sh_degree: int = 1, width: int = 24,
                 height: int = 20, *, extra_sh: int = 0, depth=(3.0, 5.0), spread: float = 1.0,
                 pixel_sigma=(0.8, 3.0), logits=(-1.0, 3.0), sh_scale: float = 0.3,
                 snap_pixels: int = 0, background=None, camera: dict | None = None) -> Scene:
    """N random Gaussians in front of a random camera.

    Means are drawn in camera space: depth uniform in `depth`, x/z and y/z uniform in
    +-`spread` tan(fov/2) (spread > 1.3 puts some beyond the field-of-view clamp). Each
    scale is drawn so that it projects to a standard deviation in `pixel_sigma` pixels.
    `extra_sh` appends coefficients beyond sh_degree (they must not matter).

    snap_pixels > 0 picks that many pixels near the image centre and projects every mean
    to within 0.003..0.01 px of one of their centres: with opacity logits above ~7.3 the
    alpha there is clamped to 0.999, and two such splats on one pixel make it stop."""
    cam = camera if camera is not None else random_camera(rng, width, height)
    W = cam["world_to_camera"]
    fx, fy, w, h = cam["fx"], cam["fy"], cam["width"], cam["height"]
    z = rng.uniform(*depth, size=n)
    x = rng.uniform(-spread, spread, size=n) * 0.5 * w / fx * z
    y = rng.uniform(-spread, spread, size=n) * 0.5 * h / fy * z
    if snap_pixels > 0:
        cx, cy = cam["cx"], cam["cy"]
        px = rng.integers(w // 4, w - w // 4, size=snap_pixels)
        py = rng.integers(h // 4, h - h // 4, size=snap_pixels)
        pick = rng.permutation(np.arange(n) % snap_pixels)
        r = rng.uniform(0.003, 0.01, size=n)
        phi = rng.uniform(0.0, 2.0 * np.pi, size=n)
        u = px[pick] + 0.5 + r * np.cos(phi)
        v = py[pick] + 0.5 + r * np.sin(phi)
        x = (u - cx) / fx * z
        y = (v - cy) / fy * z
    t = np.stack([x, y, z], axis=1)
    means = (t - W[:3, 3]) @ W[:3, :3]                       # Wr^T (t - w)
    scales = rng.uniform(*pixel_sigma, size=(n, 3)) * z[:, None] / np.sqrt(fx * fy)
    quats = rng.normal(size=(n, 4))
    quats *= rng.uniform(0.5, 2.0, size=(n, 1)) / np.linalg.norm(quats, axis=1, keepdims=True)
    k = (sh_degree + 1) ** 2 + extra_sh
    sh = rng.normal(scale=sh_scale, size=(n, k, 3))
    sh[:, 0, :] = rng.uniform(-1.0, 1.0, size=(n, 3))      # DC: colours roughly in [0.2, 0.8]
    if background is None:
        background = rng.uniform(0.0, 1.0, size=3)
    return Scene(means=means, log_scales=np.log(scales), quats=quats,
                 opacity_logits=rng.uniform(*logits, size=n), sh=sh, sh_degree=sh_degree,
                 background=np.asarray(background, dtype=np.float64), **cam)


def empty_scene(width: int = 24, height: int = 20, k: int = 1, background=(0.1, 0.2, 0.3)) -> Scene:
    """N = 0 Gaussians, identity camera."""
    return Scene(means=np.zeros((0, 3)), log_scales=np.zeros((0, 3)), quats=np.zeros((0, 4)),
                 opacity_logits=np.zeros(0), sh=np.zeros((0, k, 3)), world_to_camera=np.eye(4),
                 fx=20.0, fy=20.0, cx=width / 2, cy=height / 2, width=width, height=height,
                 sh_degree=int(round(np.sqrt(k))) - 1,
                 background=np.asarray(background, dtype=np.float64))


def write_blender_scene(path, size: int, n_test_views: int, *, n_gaussians: int = 150, n_views: int = 8,
                        seed: int = 5) -> None:
    """A synthetic scene (size x size images, train and test splits) written in Blender format to `path`."""
    train, test = synthetic.make_scene(n_gaussians=n_gaussians, n_views=n_views, width=size, height=size,
                                       seed=seed, n_test_views=n_test_views)
    synthetic.write_blender(path, {"train": train, "test": test})
