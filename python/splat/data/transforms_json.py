"""What Blender / NeRF-synthetic and nerfstudio transforms files share: reading
the JSON, the intrinsic keys (global or per frame) to a `Lens`, and the image
size read from a file's header when the keys give none.

Models: SIMPLE_PINHOLE, PINHOLE and the perspective models (SIMPLE_RADIAL,
RADIAL, OPENCV, FULL_OPENCV) take k1 k2 k3 p1 p2 (k3 the r^6 term);
OPENCV_FISHEYE takes k1..k4. Every coefficient present is honoured or the file
is rejected naming it (k4 of a perspective camera, p1/p2 of a fisheye,
EQUIRECTANGULAR).
"""
from __future__ import annotations

import json
import math
from pathlib import Path

from PIL import Image, UnidentifiedImageError

from .dataset import DatasetError
from .lens import Lens

PERSPECTIVE_MODELS = ("SIMPLE_PINHOLE", "PINHOLE", "SIMPLE_RADIAL", "RADIAL", "OPENCV", "FULL_OPENCV",
                      "PERSPECTIVE")
FISHEYE_MODELS = ("OPENCV_FISHEYE", "FISHEYE")
DISTORTION_KEYS = ("k1", "k2", "k3", "k4", "p1", "p2")
INTRINSIC_KEYS = ("fl_x", "fl_y", "cx", "cy", "w", "h", "camera_model") + DISTORTION_KEYS


def key_number(where: str, key: str, v, *, positive=False) -> float:
    """`v` as a float: a finite number (positive when asked), else a DatasetError naming `key`."""
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) or (positive and v <= 0):
        raise DatasetError(f"[splat] {where}: '{key}' must be a {'positive ' if positive else ''}finite "
                           f"number, got {v!r}")
    return float(v)


def lens_from_keys(where: str, keys: dict, width: int, height: int, *, default_fx=None) -> Lens:
    """The lens of a transforms file's intrinsic keys (global merged with the frame's).

    `width`, `height`: the image size the keys refer to; `default_fx`: the focal
    length when there is no `fl_x` (Blender's camera_angle_x)."""
    if "fl_x" in keys:
        fx = key_number(where, "fl_x", keys["fl_x"], positive=True)
    elif default_fx is not None:
        fx = float(default_fx)
    else:
        raise DatasetError(f"[splat] {where}: no focal length ('fl_x')")
    fy = key_number(where, "fl_y", keys["fl_y"], positive=True) if "fl_y" in keys else fx
    cx = key_number(where, "cx", keys["cx"]) if "cx" in keys else 0.5 * width
    cy = key_number(where, "cy", keys["cy"]) if "cy" in keys else 0.5 * height
    coef = {k: key_number(where, k, keys[k]) if k in keys else 0.0 for k in DISTORTION_KEYS}
    model = keys.get("camera_model", None)
    if model is not None and not isinstance(model, str):
        raise DatasetError(f"[splat] {where}: 'camera_model' must be a string, got {model!r}")
    if keys.get("is_fisheye") is True:     # instant-ngp's flag
        model = "OPENCV_FISHEYE"
    model = (model or "OPENCV").upper()
    if model in FISHEYE_MODELS:
        bad = [k for k in ("p1", "p2") if coef[k] != 0.0]
        if bad:
            raise DatasetError(f"[splat] {where}: {', '.join(bad)} given for a fisheye camera "
                               f"({model}), which has no tangential distortion")
        return Lens("OPENCV_FISHEYE", width, height, fx, fy, cx, cy,
                    (coef["k1"], coef["k2"], coef["k3"], coef["k4"]))
    if model not in PERSPECTIVE_MODELS:
        raise DatasetError(f"[splat] {where}: camera_model {model!r} is not supported (supported: "
                           f"{', '.join(PERSPECTIVE_MODELS[:-1] + FISHEYE_MODELS[:1])})")
    if coef["k4"] != 0.0:
        raise DatasetError(f"[splat] {where}: 'k4' = {coef['k4']} on a perspective camera "
                           f"({model}) is not supported (only fisheye cameras take k4)")
    if coef["k3"] != 0.0:
        return Lens("FULL_OPENCV", width, height, fx, fy, cx, cy,
                    (coef["k1"], coef["k2"], coef["p1"], coef["p2"], coef["k3"], 0.0, 0.0, 0.0))
    if any(coef[k] != 0.0 for k in ("k1", "k2", "p1", "p2")):
        return Lens("OPENCV", width, height, fx, fy, cx, cy,
                    (coef["k1"], coef["k2"], coef["p1"], coef["p2"]))
    return Lens("PINHOLE", width, height, fx, fy, cx, cy)


def read_json(path: Path, what: str = "json") -> dict:
    """The JSON object in `path` (DatasetError naming the file otherwise)."""
    try:
        with open(path, "rb") as f:
            meta = json.loads(f.read().decode("utf-8"))
    except FileNotFoundError:
        raise DatasetError(f"[splat] {path}: file not found") from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise DatasetError(f"[splat] {path}: cannot read {what} ({exc})") from None
    if not isinstance(meta, dict):
        raise DatasetError(f"[splat] {path}: expected a JSON object at the top level")
    return meta


def image_size(p: Path) -> tuple[int, int]:
    """(width, height) of an image file from its header."""
    if not p.is_file():
        raise DatasetError(f"[splat] {p}: image file not found")
    try:
        with Image.open(p) as im:
            return im.size
    except (UnidentifiedImageError, OSError, SyntaxError, ValueError) as exc:
        raise DatasetError(f"[splat] {p}: cannot decode image ({exc})") from None
