"""Gaussian scene files other tools read: the standard 3DGS PLY, the
antimatter15 `.splat`, Niantic's `.spz` and the PlayCanvas / SuperSplat
compressed PLY; and the 3DGS reference's `cameras.json`.

    save(path, gaussians, format=None)   format from the name when None
    load(path)                           any of the four, detected from the content
    load_scene(path)                     a run folder or a scene file -> Scene
"""
from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path

from ..gaussians import Gaussians
from ..io.ply import _parse_header, load_ply, save_ply
from .cameras_json import load_cameras_json, save_cameras_json
from .compressed_ply import decode_compressed_ply, is_compressed_ply, save_compressed_ply
from .dotsplat import load_splat, save_splat
from .spz import load_spz, save_spz

__all__ = ["FORMATS", "Scene", "format_for_path", "load", "load_scene", "save", "load_cameras_json",
           "save_cameras_json"]

FORMATS = ("ply", "splat", "spz", "compressed-ply")
_SAVERS = {"ply": save_ply, "splat": save_splat, "spz": save_spz, "compressed-ply": save_compressed_ply}


def format_for_path(path) -> str:
    """The format a file name asks for: *.compressed.ply, *.ply, *.splat, *.spz."""
    name = os.fspath(path).lower()
    if name.endswith(".compressed.ply"):
        return "compressed-ply"
    for ext, fmt in ((".ply", "ply"), (".splat", "splat"), (".spz", "spz")):
        if name.endswith(ext):
            return fmt
    raise ValueError(f"[splat] {os.fspath(path)}: cannot tell the format from the name "
                     f"(expected .ply, .compressed.ply, .splat or .spz); give the format")


def save(path, gaussians: Gaussians, format: str | None = None) -> str:
    """Write `gaussians` to `path` atomically in `format` (one of FORMATS); returns the format."""
    if not isinstance(gaussians, Gaussians):
        raise TypeError(f"[splat] gaussians: expected splat.Gaussians, got {type(gaussians).__name__}")
    fmt = format_for_path(path) if format is None else format
    if fmt not in _SAVERS:
        raise ValueError(f"[splat] format: expected one of {', '.join(FORMATS)}, got {fmt!r}")
    _SAVERS[fmt](path, gaussians)
    return fmt


def detect_format(path) -> str:
    """The format of an existing file, from its first bytes (.splat has no magic:
    it is what is left when the file is neither gzip nor PLY)."""
    path = os.fspath(path)
    with open(path, "rb") as f:
        head = f.read(1 << 16)
    if head[:2] == b"\x1f\x8b":
        return "spz"
    if head[:3] == b"ply":
        with open(path, "rb") as f:
            data = f.read(1 << 20)
        _, elements, _ = _parse_header(path, data)
        return "compressed-ply" if is_compressed_ply(elements) else "ply"
    if path.lower().endswith(".splat"):
        return "splat"
    raise ValueError(f"[splat] {path}: not a Gaussian scene file (neither PLY, .spz nor a .splat name)")


def load(path) -> Gaussians:
    """Gaussians from a .ply, compressed .ply, .splat or .spz file."""
    path = os.fspath(path)
    if os.path.isdir(path):
        raise IsADirectoryError(f"[splat] {path}: is a folder, not a scene file (.ply, .splat, .spz)")
    if not os.path.isfile(path):
        raise FileNotFoundError(f"[splat] {path}: no such file")
    fmt = detect_format(path)
    if fmt == "spz":
        return load_spz(path)
    if fmt == "splat":
        return load_splat(path)
    if fmt == "compressed-ply":
        with open(path, "rb") as f:
            return decode_compressed_ply(f.read(), path)
    return load_ply(path)


@dataclass
class Scene:
    """What the viewer and `splat render` start from: the Gaussians, the
    training run's cameras where known (from cameras.json), and where it came from."""

    gaussians: Gaussians
    source: str
    run_dir: Path | None = None
    cameras: list = field(default_factory=list)       # [(name, splat.Camera)]
    background: tuple = (1.0, 1.0, 1.0)
    meta: dict = field(default_factory=dict)          # checkpoint header, when read from one
    # True when no run recorded the background (a file outside a run): `background` is then
    # white for want of better, and a dataset's own default should replace it
    background_default: bool = False


RUN_FILES = ("point_cloud.ply", "checkpoint.npz")


def _gaussians_from_checkpoint(path) -> tuple[Gaussians, dict]:
    from ..trainer import read_checkpoint
    meta, arrays = read_checkpoint(path)
    try:
        g = Gaussians(arrays["means"], arrays["log_scales"], arrays["quats"], arrays["opacity_logits"],
                      arrays["sh"])
    except KeyError as exc:
        raise ValueError(f"[splat] checkpoint {path}: has no array {exc}") from None
    return g, meta


def load_scene(path) -> Scene:
    """A run folder (point_cloud.ply or checkpoint.npz, cameras.json, config's
    background) or one scene file (.ply / compressed .ply / .splat / .spz, or a
    checkpoint .npz). Errors name the path and what was looked for."""
    p = Path(path)
    if not p.exists():
        raise FileNotFoundError(f"[splat] {p}: no such file or folder")
    run_dir = None
    meta: dict = {}
    if p.is_dir():
        run_dir = p
        found = [p / name for name in RUN_FILES if (p / name).is_file()]
        if not found:
            raise FileNotFoundError(f"[splat] {p}: not a run folder (no {' or '.join(RUN_FILES)})")
        p = found[0]
    elif (p.parent / "cameras.json").is_file():
        run_dir = p.parent
    if p.suffix.lower() == ".npz":
        g, meta = _gaussians_from_checkpoint(p)
    else:
        g = load(p)
    cameras = []
    if run_dir is not None and (run_dir / "cameras.json").is_file():
        cameras = load_cameras_json(run_dir / "cameras.json", "train")
    background = tuple(meta.get("background", ())) or _run_background(run_dir)
    return Scene(gaussians=g, source=str(p), run_dir=run_dir, cameras=cameras,
                 background=background or (1.0, 1.0, 1.0), meta=meta, background_default=not background)


def _run_background(run_dir) -> tuple:
    """The background the run trained on, from its checkpoint (() when unknown)."""
    if run_dir is not None and (run_dir / "checkpoint.npz").is_file():
        try:
            from ..trainer import read_checkpoint
            bg = read_checkpoint(run_dir / "checkpoint.npz")[0].get("background")
            if bg and len(bg) == 3:
                return tuple(float(x) for x in bg)
        except (OSError, ValueError):
            pass
    return ()
