"""NeRF-synthetic ("Blender") scenes: transforms_{split}.json + RGBA PNGs.

The json holds `camera_angle_x` (horizontal field of view, radians) and a list
of `frames`, each with `file_path` (relative to the scene folder; ".png" is
appended when it has no image extension) and `transform_matrix`, the
camera-to-world matrix in OpenGL axes. The instant-ngp variant with explicit
`fl_x`, `fl_y`, `cx`, `cy` (pixels at full resolution) is accepted too.

With `downscale` d the straight RGBA is box-averaged over d x d blocks before
compositing (the released lego_400 images are exactly that average of the
800x800 originals); the intrinsics scale by 1/d.
"""
from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np

from ..camera import Camera
from .dataset import Dataset, DatasetError, select_frames
from .images import IMAGE_EXTENSIONS, finish_rgb, load_all, prepare_image, read_image, to_uint8

SPLITS = ("train", "val", "test")


def _number(tf: Path, meta: dict, key: str, positive: bool = True):
    v = meta.get(key)
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or (positive and v <= 0):
        raise DatasetError(f"[splat] {tf}: '{key}' must be a {'positive ' if positive else ''}number, got {v!r}")
    return float(v)


def read_transforms(tf: Path):
    """Parse and check a transforms json; returns (meta, frames)."""
    try:
        with open(tf, "rb") as f:
            meta = json.loads(f.read().decode("utf-8"))
    except FileNotFoundError:
        raise DatasetError(f"[splat] {tf}: file not found") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise DatasetError(f"[splat] {tf}: cannot read transforms json ({exc})") from None
    if not isinstance(meta, dict):
        raise DatasetError(f"[splat] {tf}: expected a JSON object at the top level")
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
                 frames=None, keep_alpha: bool = False) -> Dataset:
    root = Path(root)
    if split not in SPLITS:
        raise ValueError(f"[splat] split: Blender scenes have splits {', '.join(SPLITS)}; got {split!r}")
    tf = root / f"transforms_{split}.json"
    meta, all_frames = read_transforms(tf)
    idx = select_frames(len(all_frames), frames)
    chosen = [all_frames[i] for i in idx]
    paths = [image_path(root, fr["file_path"]) for fr in chosen]
    names = [fr["file_path"][2:] if fr["file_path"].startswith("./") else fr["file_path"] for fr in chosen]
    bg = tuple(background)
    full_sizes: list = [None] * len(paths)

    def load_one(i, p):
        raw = read_image(p)
        full_sizes[i] = (raw.shape[1], raw.shape[0])
        try:
            rgb, a = prepare_image(raw, downscale, bg)
        except ValueError as exc:
            raise DatasetError(f"[splat] {p}: {str(exc).removeprefix('[splat] ')}") from None
        alpha = None if a is None or not keep_alpha else to_uint8(a * np.float32(255.0))
        return finish_rgb(rgb), alpha

    images, alphas = load_all(paths, load_one, keep_alpha=keep_alpha)
    full_w, full_h = full_sizes[0]
    for p, size in zip(paths, full_sizes):
        if size != (full_w, full_h):
            raise DatasetError(f"[splat] {p}: image is {size[0]}x{size[1]} but {paths[0]} is "
                               f"{full_w}x{full_h}; all images of a split must share one size")
    h, w = images.shape[1:3]
    d = float(downscale)

    if "fl_x" in meta:
        fx = _number(tf, meta, "fl_x")
        fy = _number(tf, meta, "fl_y") if "fl_y" in meta else fx
        cx = _number(tf, meta, "cx", positive=False) if "cx" in meta else 0.5 * full_w
        cy = _number(tf, meta, "cy", positive=False) if "cy" in meta else 0.5 * full_h
        angle = 2.0 * math.atan(0.5 * full_w / fx)
    else:
        angle = _number(tf, meta, "camera_angle_x")
        if angle >= math.pi:
            raise DatasetError(f"[splat] {tf}: 'camera_angle_x' must be below pi, got {angle}")
        fx = fy = cx = cy = None

    cameras = []
    for i, fr in zip(idx, chosen):
        try:
            base = Camera.from_blender(fr["transform_matrix"], angle, full_w, full_h)
        except (ValueError, np.linalg.LinAlgError) as exc:
            raise DatasetError(f"[splat] {tf}: frames[{i}] 'transform_matrix': "
                               f"{str(exc).removeprefix('[splat] ')}") from None
        if fx is None:  # exactly what from_blender derives from camera_angle_x
            cam_fx, cam_fy, cam_cx, cam_cy = base.fx, base.fy, base.cx, base.cy
        else:
            cam_fx, cam_fy, cam_cx, cam_cy = fx, fy, cx, cy
        try:
            cameras.append(Camera(base.world_to_camera, cam_fx / d, cam_fy / d, cam_cx / d, cam_cy / d, w, h))
        except (TypeError, ValueError) as exc:  # e.g. an fl_x too small or a cx too large for float32
            raise DatasetError(f"[splat] {tf}: frames[{i}]: {str(exc).removeprefix('[splat] ')}") from None

    return Dataset(cameras=cameras, images=images, names=names, points=None, point_colors=None,
                   background=bg, alphas=alphas, path=str(root), format="blender", split=split)
