"""Command-line data arguments of `splat train`: the scene folder (PATH /
--data), `--set section.key=value` overrides, the run configuration they
give, and the file names renders are written under."""
from __future__ import annotations

import os
import re
import unicodedata
from collections import Counter
from pathlib import Path

CAPTURE_RUNS = "runs"           # `splat train PATH` without a config: runs/<scene name>


def _safe_name(name: str) -> str:
    """A portable file name: accents dropped (café -> cafe), every run of other
    characters outside A-Z a-z 0-9 . _ - made one '_', no leading or trailing '.' / '_'."""
    text = "".join(c for c in unicodedata.normalize("NFKD", str(name)) if not unicodedata.combining(c))
    stem = re.sub(r"[^A-Za-z0-9._-]+", "_", text).strip("._")
    return stem or "view"


def render_stems(names) -> list:
    """One file stem per view name (PNG renders are <stem>.png), never two alike,
    not even where the file system ignores case: the image's name with its image
    extension dropped (0000.jpg -> 0000; a folder all names share left out, other
    folders flattened with '_'); names that would then collide keep their
    extension (a.jpg -> a.jpg, a.png -> a.png), and those that still collide
    (é.jpg, ë.jpg) get their index in `names` (e_0, e_1)."""
    from ..data.images import IMAGE_EXTENSIONS

    def stem(name):
        base, ext = os.path.splitext(name)
        return base if ext.lower() in IMAGE_EXTENSIONS else name

    names = [str(n) for n in names]
    # a folder every name shares (nerfstudio's "images/") says nothing: left out
    dirs = {os.path.dirname(n) for n in names}
    shared = dirs.pop() if len(dirs) == 1 else ""
    short = [n[len(shared) + 1:] if shared else n for n in names]
    key = str.lower     # one file on case-insensitive file systems (macOS, Windows)
    out: list = [None] * len(names)
    used: set = set()
    for tries in ([_safe_name(stem(n)) for n in short], [_safe_name(n) for n in short]):
        counts = Counter(key(t) for i, t in enumerate(tries) if out[i] is None)
        for i, t in enumerate(tries):
            if out[i] is None and counts[key(t)] == 1 and key(t) not in used:
                out[i] = t
                used.add(key(t))
    for i, n in enumerate(short):
        if out[i] is None:
            base = _safe_name(stem(n))
            cand, extra = f"{base}_{i}", 0
            while key(cand) in used:
                extra += 1
                cand = f"{base}_{i}_{extra}"
            out[i] = cand
            used.add(key(cand))
    return out


def render_files(names) -> dict:
    """{view name: PNG file name} of distinct view names (see render_stems)."""
    names = [str(n) for n in names]
    return {n: f"{s}.png" for n, s in zip(names, render_stems(names))}


def scene_arg(args) -> str | None:
    """The scene folder given on the command line (PATH or --data), absolute; None if neither."""
    scene, data = getattr(args, "scene", None), getattr(args, "data", None)
    if scene and data and os.path.abspath(scene) != os.path.abspath(data):
        raise ValueError(f"two scene folders given: {scene} and --data {data}")
    chosen = scene or data
    if chosen is not None and chosen.lower().endswith(".toml") and os.path.isfile(chosen):
        raise ValueError(f"{chosen} is a config file, not a scene folder: pass it as --config {chosen}")
    return None if chosen is None else os.path.abspath(os.path.expanduser(chosen))


def _parse_value(text: str):
    """A --set value: a TOML value (3, 0.5, true, [0, 0, 0], "x"), else the text itself."""
    from ..config import _toml
    try:
        return _toml.loads(f"v = {text}")["v"]
    except _toml.TOMLDecodeError:
        return text.strip()


def parse_overrides(items) -> dict:
    """--set section.key=value items -> {section: {key: value}}."""
    out: dict = {}
    for item in items or []:
        key, eq, text = item.partition("=")
        section, dot, name = key.strip().partition(".")
        if not eq or not dot or not section or not name or "." in name or not text.strip():
            raise ValueError(f"--set {item!r}: expected section.key=value (e.g. train.steps=7000)")
        out.setdefault(section, {})[name] = _parse_value(text)
    return out


def _scene_name(path: str) -> str:
    return _safe_name(Path(path).resolve().name) or "scene"


def run_config(args):
    """The run's Config: the TOML file (if any) with PATH / --data as data.path
    and every --set written over it, validated in one pass like a file. A
    scene without a config trains with the defaults (the 3DGS recipe; black
    background for captures) into runs/<scene name>."""
    from ..config import Config, load_config
    overrides = parse_overrides(getattr(args, "set", None))
    if getattr(args, "fast", False):
        given = overrides.setdefault("train", {}).setdefault("preset", "fast")
        if given != "fast":
            raise ValueError(f"--fast: contradicts --set train.preset={given}")
    scene = scene_arg(args)
    if scene is not None:
        overrides.setdefault("data", {})["path"] = scene
    if args.config:
        return load_config(args.config, overrides=overrides)
    if "dir" not in overrides.get("output", {}):
        path = overrides.get("data", {}).get("path")
        overrides.setdefault("output", {})["dir"] = str(Path(CAPTURE_RUNS) / _scene_name(str(path or "scene")))
    return Config.from_dict(overrides, base_dir=Path.cwd(), check_paths=True)


def config_dataset_format(cfg) -> str | None:
    """The format of the config's train split ([data] format, or detected from the
    folder); None without a path or when the folder cannot say (loading reports that)."""
    d = cfg.data
    if d.format != "auto":
        return d.format
    if d.path is None:
        return None
    from ..data import detect_format
    try:
        return detect_format(d.path, d.train_split)
    except (OSError, ValueError):
        return None
