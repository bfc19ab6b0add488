"""NeRF-synthetic ("Blender") scenes: transforms_{split}.json + RGBA PNGs.

The json holds `camera_angle_x` (horizontal field of view, radians) and a list
of `frames`, each with `file_path` (relative to the scene folder; ".png" is
appended when it has no image extension) and `transform_matrix`, the
camera-to-world matrix in OpenGL axes. The instant-ngp variant with explicit
`fl_x`, `fl_y`, `cx`, `cy` (pixels at full resolution) is accepted too, with
its distortion keys (`k1 k2 k3 k4 p1 p2`, `camera_model`, `is_fisheye`, global
or per frame) honoured as in nerfstudio files (see splat.data.nerfstudio) or
rejected naming the key.

With `downscale` d the straight RGBA is box-averaged over d x d blocks before
compositing (the released lego_400 images are exactly that average of the
800x800 originals); the intrinsics scale by 1/d.
"""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from ..camera import Camera
from .dataset import Dataset, DatasetError, select_frames
from .images import IMAGE_EXTENSIONS
from .lens import Lens
from .paths import check_inside
from .transforms_json import INTRINSIC_KEYS, image_size, lens_from_keys, read_json
from .views import ViewSource, load_views

SPLITS = ("train", "val", "test")


def _number(tf: Path, meta: dict, key: str, positive: bool = True):
    v = meta.get(key)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or (positive and v <= 0):
        raise DatasetError(f"[splat] {tf}: '{key}' must be a {'positive ' if positive else ''}number, got {v!r}")
    return float(v)


def read_transforms(tf: Path):
    """Parse and check a transforms json; returns (meta, frames)."""
    meta = read_json(tf, "transforms json")
    frames = meta.get("frames")
    if not isinstance(frames, list) or not frames:
        raise DatasetError(f"[splat] {tf}: 'frames' must be a non-empty list")
    if "camera_angle_x" not in meta and "fl_x" not in meta:
        raise DatasetError(f"[splat] {tf}: missing 'camera_angle_x'")
    for i, fr in enumerate(frames):
        if not isinstance(fr, dict) or not isinstance(fr.get("file_path"), str) or not fr["file_path"]:
            raise DatasetError(f"[splat] {tf}: frames[{i}] has no 'file_path' string")
        m = fr.get("transform_matrix")
        try:
            arr = np.asarray(m, dtype=np.float64)
        except (TypeError, ValueError):
            arr = None
        if arr is None or arr.shape != (4, 4) or not np.all(np.isfinite(arr)):
            raise DatasetError(f"[splat] {tf}: frames[{i}] 'transform_matrix' is not a finite 4x4 matrix")
    return meta, frames


def image_path(root: Path, file_path: str) -> Path:
    p = root / file_path
    if p.suffix.lower() not in IMAGE_EXTENSIONS:
        p = p.with_name(p.name + ".png")
    return p


def load_blender(root, split: str = "train", *, background=(1.0, 1.0, 1.0), downscale: int = 1,
                 frames=None, keep_alpha: bool = False, alpha_mode: str = "composite",
                 allow_outside_paths: bool = False) -> Dataset:
    root = Path(root)
    if split not in SPLITS:
        raise ValueError(f"[splat] split: Blender scenes have splits {', '.join(SPLITS)}; got {split!r}")
    tf = root / f"transforms_{split}.json"
    meta, all_frames = read_transforms(tf)
    for i, fr in enumerate(all_frames):
        check_inside(tf, f"frames[{i}] 'file_path'", fr["file_path"], root, allow=allow_outside_paths)
    idx = select_frames(len(all_frames), frames)
    chosen = [all_frames[i] for i in idx]
    paths = [image_path(root, fr["file_path"]) for fr in chosen]
    names = [fr["file_path"][2:] if fr["file_path"].startswith("./") else fr["file_path"] for fr in chosen]
    angle = None
    if "fl_x" not in meta:
        angle = _number(tf, meta, "camera_angle_x")
        if angle >= math.pi:
            raise DatasetError(f"[splat] {tf}: 'camera_angle_x' must be below pi, got {angle}")
    global_keys = {k: meta[k] for k in INTRINSIC_KEYS + ("is_fisheye",) if k in meta}
    views = []
    for i, fr, p, name in zip(idx, chosen, paths, names):
        keys = dict(global_keys)
        keys.update({k: fr[k] for k in INTRINSIC_KEYS + ("is_fisheye",) if k in fr})
        if "w" in keys and "h" in keys:
            width, height = int(keys["w"]), int(keys["h"])
        else:
            width, height = image_size(p)
        default_fx = None if angle is None else 0.5 * width / math.tan(0.5 * angle)
        lens = lens_from_keys(f"{tf}: frames[{i}]", keys, width, height, default_fx=default_fx)
        try:
            base = Camera.from_blender(fr["transform_matrix"], angle if angle is not None else
                                       2.0 * math.atan(0.5 * width / lens.fx), width, height)
        except (ValueError, np.linalg.LinAlgError) as exc:
            raise DatasetError(f"[splat] {tf}: frames[{i}] 'transform_matrix': "
                               f"{str(exc).removeprefix('[splat] ')}") from None
        if angle is not None:   # exactly what from_blender derives from camera_angle_x
            lens = Lens(lens.model, width, height, base.fx, base.fy, base.cx, base.cy, lens.coeffs)
        views.append(ViewSource(name=name, image_path=p, lens=lens, world_to_camera=base.world_to_camera))
    bg = tuple(background)
    loaded = load_views(views, downscale=downscale, background=bg, alpha_mode=alpha_mode,
                        keep_alpha=keep_alpha)
    return Dataset(cameras=loaded.cameras, images=loaded.images, names=names, points=None,
                   point_colors=None, background=bg, alphas=loaded.alphas, masks=loaded.masks,
                   path=str(root), format="blender", split=split)
