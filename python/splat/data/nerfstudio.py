"""nerfstudio scenes: one `transforms.json` (nerfstudio, Polycam, Record3D and
many capture apps write it) beside the images.

Intrinsics are global or per frame (a frame's keys win): `fl_x`, `fl_y`,
`cx`, `cy` (pixels, pixel centres at i + 0.5), `w`, `h`, `camera_model` and
the distortion `k1 k2 k3 k4 p1 p2`. Models: SIMPLE_PINHOLE, PINHOLE and the
perspective models (SIMPLE_RADIAL, RADIAL, OPENCV, FULL_OPENCV) take
k1 k2 k3 p1 p2 (k3 the r^6 term); OPENCV_FISHEYE takes k1..k4. Every
coefficient present is honoured (undistorted at load, see splat.data.lens) or
the file is rejected naming it (k4 of a perspective camera, p1/p2 of a
fisheye, EQUIRECTANGULAR).

`transform_matrix` is the camera-to-world matrix in OpenGL camera axes
(x right, y up, looking down -z), as nerfstudio writes it. `ply_file_path`
names the initial point cloud; ns-process-data writes it in the same world
frame as the frames (with `applied_transform` already applied to both), so
the points are used as they are and `applied_transform` (the map from the
original SfM frame, kept for exporting) is only checked. `mask_path` per frame
(every frame or none) names its mask; without it, a `masks/` folder beside
the images is used as for COLMAP.

Splits: the frames are sorted by file name; `train_filenames`,
`val_filenames` and `test_filenames` pick them when present, else every
`test_every`-th frame is test (and val), the others train.
"""
from __future__ import annotations

import posixpath
from pathlib import Path

import numpy as np

from .dataset import Dataset, DatasetError, select_frames
from .images import IMAGE_EXTENSIONS
from .paths import check_inside, outside_reason
from .transforms_json import INTRINSIC_KEYS, image_size, key_number, lens_from_keys, read_json
from .views import ViewSource, find_mask, load_views

SPLITS = ("train", "val", "test", "all")
# OpenCV camera axes from OpenGL ones (flip y and z).
GL_TO_CV = np.diag([1.0, -1.0, -1.0, 1.0])


def _matrix(where: str, key: str, value, rows: tuple) -> np.ndarray:
    try:
        arr = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        arr = None
    if arr is None or arr.shape not in [(r, 4) for r in rows] or not np.all(np.isfinite(arr)):
        shape = " or ".join(f"{r}x4" for r in rows)
        raise DatasetError(f"[splat] {where}: '{key}' is not a finite {shape} matrix")
    return arr


def _image_file(root: Path, file_path: str) -> Path:
    p = root / file_path
    if p.suffix.lower() not in IMAGE_EXTENSIONS and not p.is_file():
        p = p.with_name(p.name + ".png")
    return p


def _downscaled(root: Path, rel: str, d: int, prefix_default: str) -> Path | None:
    """nerfstudio's downscaled copy of `rel`: the file in `<folder>_<d>/` (or
    `<prefix>_<d>/` when the path has no folder), when it exists."""
    p = Path(rel)
    parent = p.parent
    folder = f"{parent.name}_{d}" if parent.name else f"{prefix_default}_{d}"
    cand = root / parent.parent / folder / p.name if parent.name else root / folder / p.name
    return cand if cand.is_file() else None


def _name(fr_path: str) -> str:
    return fr_path[2:] if fr_path.startswith("./") else fr_path


def load_nerfstudio(root, split: str = "train", *, background=(0.0, 0.0, 0.0), downscale: int = 1,
                    frames=None, test_every: int = 8, keep_alpha: bool = False,
                    alpha_mode: str = "composite", transforms: str = "transforms.json",
                    allow_outside_paths: bool = False) -> Dataset:
    root = Path(root)
    if split not in SPLITS:
        raise ValueError(f"[splat] split: nerfstudio scenes have splits {', '.join(SPLITS)}; got {split!r}")
    tf = root / transforms
    meta = read_json(tf)
    all_frames = meta.get("frames")
    if not isinstance(all_frames, list) or not all_frames:
        raise DatasetError(f"[splat] {tf}: 'frames' must be a non-empty list")
    for i, fr in enumerate(all_frames):
        if not isinstance(fr, dict) or not isinstance(fr.get("file_path"), str) or not fr["file_path"]:
            raise DatasetError(f"[splat] {tf}: frames[{i}] has no 'file_path' string")
        if "mask_path" in fr and (not isinstance(fr["mask_path"], str) or not fr["mask_path"]):
            raise DatasetError(f"[splat] {tf}: frames[{i}] 'mask_path' must be a file path")
        for key in ("file_path", "mask_path", "depth_file_path"):
            check_inside(tf, f"frames[{i}] '{key}'", fr.get(key), root, allow=allow_outside_paths)
    check_inside(tf, "'ply_file_path'", meta.get("ply_file_path"), root, allow=allow_outside_paths)
    if "applied_transform" in meta:
        _matrix(str(tf), "applied_transform", meta["applied_transform"], (3, 4))
    ordered = sorted(range(len(all_frames)), key=lambda i: _name(all_frames[i]["file_path"]))
    names = {i: _name(all_frames[i]["file_path"]) for i in ordered}

    lists = {s: meta.get(f"{s}_filenames") for s in ("train", "val", "test")}
    if split == "all":
        chosen = ordered
    elif any(v is not None for v in lists.values()):
        wanted = lists[split]
        if wanted is None:
            raise DatasetError(f"[splat] {tf}: has {', '.join(f'{s}_filenames' for s, v in lists.items() if v is not None)} "
                               f"but no {split}_filenames")
        if not isinstance(wanted, list) or not all(isinstance(x, str) for x in wanted):
            raise DatasetError(f"[splat] {tf}: '{split}_filenames' must be a list of file paths")
        want = {_name(x) for x in wanted}
        known = set(names.values())
        missing = sorted(want - known)
        if missing:
            raise DatasetError(f"[splat] {tf}: '{split}_filenames' names {missing[0]!r}, which no frame has"
                               + (f" (and {len(missing) - 1} more)" if len(missing) > 1 else ""))
        chosen = [i for i in ordered if names[i] in want]
    else:
        if isinstance(test_every, bool) or not isinstance(test_every, (int, np.integer)) or test_every < 2:
            raise ValueError(f"[splat] test_every: expected an integer >= 2, got {test_every!r}")
        held = split in ("val", "test")
        chosen = [i for k, i in enumerate(ordered) if (k % test_every == 0) == held]
    if not chosen:
        raise DatasetError(f"[splat] {tf}: the {split} split is empty ({len(all_frames)} frames)")
    chosen = [chosen[i] for i in select_frames(len(chosen), frames)]

    with_mask = [i for i in range(len(all_frames)) if "mask_path" in all_frames[i]]
    if with_mask and len(with_mask) != len(all_frames):
        raise DatasetError(f"[splat] {tf}: 'mask_path' is given for {len(with_mask)} of "
                           f"{len(all_frames)} frames; give it for every frame or none")
    global_keys = {k: meta[k] for k in INTRINSIC_KEYS + ("is_fisheye",) if k in meta}
    views = []
    for i in chosen:
        fr = all_frames[i]
        where = f"{tf}: frames[{i}] ({names[i]})"
        c2w = _matrix(where, "transform_matrix", fr.get("transform_matrix"), (3, 4))
        if c2w.shape == (3, 4):
            c2w = np.vstack([c2w, [0.0, 0.0, 0.0, 1.0]])
        rot = c2w[:3, :3]
        if abs(abs(np.linalg.det(rot)) - 1.0) > 1e-3 or np.abs(rot.T @ rot - np.eye(3)).max() > 1e-3:
            raise DatasetError(f"[splat] {where}: 'transform_matrix' rotation is not orthonormal")
        w2c = np.linalg.inv(c2w @ GL_TO_CV)
        full_path = _image_file(root, fr["file_path"])
        keys = dict(global_keys)
        keys.update({k: fr[k] for k in INTRINSIC_KEYS + ("is_fisheye",) if k in fr})
        if "w" in keys and "h" in keys:
            width = int(key_number(where, "w", keys["w"], positive=True))
            height = int(key_number(where, "h", keys["h"], positive=True))
        else:       # the size of the image itself
            width, height = image_size(full_path)
        lens = lens_from_keys(where, keys, width, height)
        image_path, prescaled = full_path, False
        if downscale > 1:
            small = _downscaled(root, fr["file_path"], downscale, "images")
            if small is not None:
                image_path, prescaled = small, True
        mask = None
        if with_mask:
            mask = root / fr["mask_path"]
            if prescaled:
                small_mask = _downscaled(root, fr["mask_path"], downscale, "masks")
                mask = small_mask or mask
        else:   # masks/ beside the image's folder, when that lies in the scene folder
            mask_dir = full_path.parent.parent / "masks"
            beside = posixpath.join(posixpath.dirname(fr["file_path"].replace("\\", "/")), "..", "masks")
            if (allow_outside_paths or outside_reason(beside, root) is None) and mask_dir.is_dir():
                mask = find_mask(mask_dir, full_path.name)
                if mask is None:
                    raise DatasetError(f"[splat] {mask_dir}: no mask for {full_path.name}")
        views.append(ViewSource(name=names[i], image_path=image_path, lens=lens, world_to_camera=w2c,
                                mask_path=mask, prescaled=prescaled))
    points = colors = None
    if "ply_file_path" in meta:
        rel = meta["ply_file_path"]
        if not isinstance(rel, str) or not rel:
            raise DatasetError(f"[splat] {tf}: 'ply_file_path' must be a file path")
        from ..io.ply import load_point_cloud
        try:
            points, colors = load_point_cloud(root / rel)
        except FileNotFoundError as exc:
            raise DatasetError(str(exc)) from None
        except ValueError as exc:
            raise DatasetError(str(exc)) from None
    bg = tuple(float(b) for b in background)
    loaded = load_views(views, downscale=downscale, background=bg, alpha_mode=alpha_mode,
                        keep_alpha=keep_alpha)
    return Dataset(cameras=loaded.cameras, images=loaded.images, names=[names[i] for i in chosen],
                   points=points, point_colors=colors, background=bg, alphas=loaded.alphas,
                   masks=loaded.masks, path=str(root), format="nerfstudio", split=split)
