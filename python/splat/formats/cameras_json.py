"""`cameras.json` as the 3DGS reference writes it next to its point cloud.

A list with one object per training view::

    {"id": 0, "img_name": "r_0", "width": 800, "height": 800,
     "position": [x, y, z],                  camera centre in world coordinates
     "rotation": [[..], [..], [..]],         camera-to-world rotation (OpenCV axes:
                                             columns are the camera's x right, y down, z forward)
     "fx": 1111.1, "fy": 1111.1}

splat writes the training views, then the test views with `"split": "test"`
(the reference lists both, test first, without saying which is which;
entries without the key count as training views).

The reference keeps no principal point: it is the image centre, as it is for
every camera splat trains on except COLMAP's off-centre ones, whose cx, cy
are written as extra keys (readers ignore keys they do not know).
"""
from __future__ import annotations

import json
import os

import numpy as np

from ..camera import Camera


def cameras_json(cameras, names, test_cameras=(), test_names=()) -> list:
    out = []
    views = [(c, n, "train") for c, n in zip(cameras, names)] + \
        [(c, n, "test") for c, n in zip(test_cameras, test_names)]
    for i, (cam, name, split) in enumerate(views):
        w2c = cam.world_to_camera.astype(np.float64)
        c2w = np.linalg.inv(w2c)
        entry = {"id": i, "img_name": str(name), "width": int(cam.width), "height": int(cam.height),
                 "position": c2w[:3, 3].tolist(), "rotation": c2w[:3, :3].tolist(),
                 "fx": float(cam.fx), "fy": float(cam.fy)}
        if abs(cam.cx - 0.5 * cam.width) > 1e-3 or abs(cam.cy - 0.5 * cam.height) > 1e-3:
            entry["cx"], entry["cy"] = float(cam.cx), float(cam.cy)
        if split == "test":
            entry["split"] = "test"
        out.append(entry)
    return out


def save_cameras_json(path, cameras, names, test_cameras=(), test_names=()) -> None:
    """Write the cameras (splat.Camera lists) and their image names, atomically."""
    from ..io.atomic import atomic_write_text
    data = cameras_json(cameras, names, test_cameras, test_names)
    atomic_write_text(path, json.dumps(data, indent=1) + "\n")


def camera_from_entry(entry: dict, where: str) -> tuple[str, Camera]:
    try:
        w, h = int(entry["width"]), int(entry["height"])
        rot = np.asarray(entry["rotation"], np.float64)
        pos = np.asarray(entry["position"], np.float64)
        fx, fy = float(entry["fx"]), float(entry["fy"])
        if rot.shape != (3, 3) or pos.shape != (3,):
            raise ValueError("rotation must be 3x3 and position 3 numbers")
        if not (np.all(np.isfinite(rot)) and np.all(np.isfinite(pos))):
            raise ValueError("non-finite rotation or position")
        c2w = np.eye(4)
        c2w[:3, :3], c2w[:3, 3] = rot, pos
        w2c = np.linalg.inv(c2w)
        cx, cy = float(entry.get("cx", 0.5 * w)), float(entry.get("cy", 0.5 * h))
        cam = Camera(w2c.astype(np.float32), fx, fy, cx, cy, w, h)
    except (KeyError, TypeError, ValueError, np.linalg.LinAlgError) as exc:
        detail = f"missing key {exc}" if isinstance(exc, KeyError) else " ".join(str(exc).split())
        raise ValueError(f"[splat] {where}: bad camera entry ({detail.removeprefix('[splat] ')})") from None
    return str(entry.get("img_name", entry.get("id", ""))), cam


def load_cameras_json(path, split: str | None = None) -> list:
    """[(image name, splat.Camera)] from a cameras.json: every entry, or those
    of `split` ("train": entries without a "split" key or with "train")."""
    path = os.fspath(path)
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except json.JSONDecodeError as exc:
        raise ValueError(f"[splat] {path}: not valid JSON ({exc.msg}, line {exc.lineno})") from None
    if not isinstance(data, list):
        raise ValueError(f"[splat] {path}: expected a list of cameras")
    out = []
    for i, e in enumerate(data):
        e = e if isinstance(e, dict) else {}
        if split is None or e.get("split", "train") == split:
            out.append(camera_from_entry(e, f"{path}[{i}]"))
    return out
