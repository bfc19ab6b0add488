"""Scene loading: NeRF-synthetic (Blender), nerfstudio (transforms.json) and COLMAP folders -> `Dataset`."""
from __future__ import annotations

import math
import os
from pathlib import Path

import numpy as np

from .dataset import Dataset, DatasetError, parse_frames, scene_extent, select_frames

__all__ = ["Dataset", "DatasetError", "load_dataset", "detect_format", "default_background",
           "scene_extent", "parse_frames", "select_frames", "view_sizes"]

FORMATS = ("auto", "blender", "nerfstudio", "colmap")
# The background captures are composited on when none is asked for: black, as
# 3DGS and gsplat train COLMAP scenes (NeRF-synthetic scenes keep white).
CAPTURE_BACKGROUND = (0.0, 0.0, 0.0)
BLENDER_BACKGROUND = (1.0, 1.0, 1.0)


def scene_folder_hint(path) -> str:
    """'; the scene folder is probably X' when `path` lies inside a scene (a transforms
    file, a COLMAP sparse model or one of its files, an image folder), else ''."""
    p = Path(path).absolute()
    for cand in [p] + list(p.parents)[:3]:
        if cand.name == "sparse" or (cand.parent.name == "sparse" and cand.name.isdigit()):
            root = cand.parent if cand.name == "sparse" else cand.parent.parent
            return f"; the scene folder is probably {root}"
    if p.is_file() and p.suffix == ".json" and p.name.startswith("transforms"):
        return f"; the scene folder is probably {p.parent}"
    beside_colmap = p.is_dir() and (p.parent / "sparse").is_dir()        # images/ next to sparse/
    beside_transforms = any((p.parent / n).is_file() for n in ("transforms.json", "transforms_train.json"))
    if beside_colmap or beside_transforms:
        return f"; the scene folder is probably {p.parent}"
    return ""


def detect_format(path, split: str = "train") -> str:
    """"blender" if transforms_{split}.json exists, "nerfstudio" if
    transforms.json exists, "colmap" if a sparse model exists (sparse/0 or
    sparse), else DatasetError naming what was looked for."""
    from .colmap import find_sparse_dir
    root = Path(path)
    if not root.exists():
        raise DatasetError(f"[splat] {root}: dataset folder does not exist")
    if not root.is_dir():
        raise DatasetError(f"[splat] {root}: not a folder{scene_folder_hint(root)}")
    if (root / f"transforms_{split}.json").is_file():
        return "blender"
    if (root / "transforms.json").is_file():
        return "nerfstudio"
    if find_sparse_dir(root) is not None:
        return "colmap"
    others = sorted(p.name for p in root.glob("transforms_*.json"))
    if others:
        raise DatasetError(f"[splat] {root}: no transforms_{split}.json for split {split!r} "
                           f"(found {', '.join(others)})")
    raise DatasetError(f"[splat] {root}: not a recognised dataset: looked for transforms_{split}.json "
                       f"(Blender / NeRF-synthetic), transforms.json (nerfstudio) and "
                       f"sparse/0/cameras.bin|txt or sparse/cameras.bin|txt (COLMAP){scene_folder_hint(root)}")


def default_background(path, split: str = "train", format: str = "auto") -> tuple:
    """The background a scene is composited on when none is given: white for
    Blender scenes, black for captures (COLMAP, nerfstudio)."""
    fmt = detect_format(path, split) if format == "auto" else format
    return BLENDER_BACKGROUND if fmt == "blender" else CAPTURE_BACKGROUND


def _check_background(background) -> tuple:
    """3 real numbers in [0, 1] (any sequence or array; the package's number rule)."""
    from .._validate import real_array
    arr = real_array("background", background, (3,)).astype(np.float64)
    bg = tuple(float(x) for x in arr)
    if not all(math.isfinite(x) and 0.0 <= x <= 1.0 for x in bg):
        raise ValueError(f"[splat] background: expected 3 values in [0, 1], got {list(bg)!r}")
    return bg


def load_dataset(path, split: str = "train", *, background=None, downscale: int = 1,
                 test_every: int = 8, frames=None, format: str = "auto",
                 keep_alpha: bool = False, alpha: str = "composite",
                 allow_outside_paths: bool = False) -> Dataset:
    """Load one split of a scene folder.

    path: a Blender / NeRF-synthetic folder (transforms_{split}.json), a
        nerfstudio folder (transforms.json) or a COLMAP folder (sparse/0 or
        sparse, images/); detected unless `format` says which.
    split: "train", "val", "test" (Blender); "train", "test", "all" (COLMAP,
        where images sorted by name with index % test_every == 0 are test);
        nerfstudio: its *_filenames lists, else as COLMAP (val = test).
    background: RGB in [0, 1] the images are composited on (rgb a + bg (1 - a));
        None: white for Blender scenes, black for captures.
    downscale: integer factor; images are box-averaged, intrinsics divided.
    frames: optional subset of the split: a slice, a list of indices or a
        string like "0::2".
    keep_alpha: also return the per-pixel coverage as `Dataset.alphas`.
    alpha: "composite" (RGBA images are put on the background) or "mask"
        (transparent pixels are left out of `Dataset.masks`).
    allow_outside_paths: let the dataset's files name files outside `path`
        (absolute paths, or ones whose normalised form leaves the folder);
        refused by default (see splat.data.paths).
    """
    if isinstance(path, (str, os.PathLike)):
        root = Path(path)
    else:
        raise TypeError(f"[splat] path: expected a path, got {type(path).__name__}")
    if not isinstance(split, str):
        raise TypeError(f"[splat] split: expected a string, got {type(split).__name__}")
    if format not in FORMATS:
        raise ValueError(f"[splat] format: expected one of {', '.join(FORMATS)}, got {format!r}")
    from .._validate import integer
    downscale = integer("downscale", downscale, 1)
    from .views import ALPHA_MODES
    if alpha not in ALPHA_MODES:
        raise ValueError(f"[splat] alpha: expected one of {', '.join(ALPHA_MODES)}, got {alpha!r}")
    if not isinstance(allow_outside_paths, (bool, np.bool_)):
        raise TypeError(f"[splat] allow_outside_paths: expected a bool, got {type(allow_outside_paths).__name__}")
    frames = parse_frames(frames)
    fmt = detect_format(root, split) if format == "auto" else format
    if not root.is_dir():
        raise DatasetError(f"[splat] {root}: dataset folder does not exist")
    if background is None:
        background = BLENDER_BACKGROUND if fmt == "blender" else CAPTURE_BACKGROUND
    bg = _check_background(background)
    common = dict(background=bg, downscale=int(downscale), frames=frames, keep_alpha=keep_alpha,
                  alpha_mode=alpha, allow_outside_paths=bool(allow_outside_paths))
    if fmt == "blender":
        from .blender import load_blender
        return load_blender(root, split, **common)
    if fmt == "nerfstudio":
        from .nerfstudio import load_nerfstudio
        return load_nerfstudio(root, split, test_every=test_every, **common)
    from .colmap import load_colmap
    return load_colmap(root, split, test_every=test_every, **common)


def view_sizes(path, split: str = "train", **kwargs) -> list[tuple[int, int, bool]]:
    """(width, height, may_have_mask) of every view `load_dataset(path, split, **kwargs)`
    would load, from the image headers: no image is decoded (the footprint of a scene
    without its memory). may_have_mask: the view has a mask file, or an alpha channel
    with alpha="mask" (whether it leaves any pixel out is known only once decoded)."""
    return view_headers(path, split, **kwargs)[0]


def view_layout(path, split: str = "train", **kwargs) -> str:
    """The camera layout ("object" or "open", splat.data.layout) of the views
    `load_dataset(path, split, **kwargs)` would load, with no image decoded."""
    from .layout import pose_layout
    return pose_layout(view_headers(path, split, **kwargs)[1])


def view_headers(path, split: str = "train", **kwargs) -> tuple[list, list]:
    """(view_sizes, poses) in one pass over the headers: poses are each view's 4x4
    world-to-camera (OpenCV axes); no image is decoded."""
    from .views import HeaderSizes, headers_only
    with headers_only():
        try:
            load_dataset(path, split, **kwargs)
        except HeaderSizes as headers:
            return headers.sizes, headers.poses
    raise AssertionError("[splat] view_headers: the loader decoded its images")  # every loader goes through load_views
