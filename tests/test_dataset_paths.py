"""Paths a dataset file names stay inside its scene folder.

COLMAP image names, nerfstudio `file_path` / `mask_path` / `depth_file_path` /
`ply_file_path` and Blender `file_path` that are absolute or whose lexically
normalised form leaves the folder are refused in one line naming the dataset
file, the entry and the rule, before anything is opened: the message is the
same whether the target exists or not. Entries that stay inside after
normalisation (`a/../b.jpg`) load; `allow_outside_paths=True` (`[data]
allow_outside_paths = true`) lets the outside ones load.
"""
from __future__ import annotations

import json
import os
import struct
import sys
from pathlib import Path

import numpy as np
import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import example, given  # noqa: E402
from hypothesis import strategies as st  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _pkg import NATIVE, splat  # noqa: E402,F401
import _captures as cap  # noqa: E402
from _hypo import quick  # noqa: E402
from _cli import assert_user_error, run_cli  # noqa: E402

from splat.data import DatasetError, load_dataset  # noqa: E402

W, H = 16, 12
RULE = "allow_outside_paths"


def pixels(seed: int) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (H, W, 3), dtype=np.uint8)


def poses(n: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    return [cap.random_w2c(rng) for _ in range(n)]


# --------------------------------------------------------------------------- scene writers


def write_nerfstudio(root: Path, entry: str, key: str = "file_path") -> Path:
    """Three frames images/{0,1,2}.png; `key` of frame 1 (or of the file, for
    ply_file_path) is `entry`. Returns the transforms file."""
    frames = []
    for k, w2c in enumerate(poses(3)):
        cap.save_image(root / "images" / f"{k}.png", pixels(k))
        frames.append({"file_path": f"images/{k}.png", "transform_matrix": cap.c2w_opengl(w2c).tolist()})
    meta = {"fl_x": 14.0, "fl_y": 14.0, "cx": W / 2, "cy": H / 2, "w": W, "h": H, "frames": frames}
    if key == "ply_file_path":
        meta[key] = entry
    elif key == "mask_path":
        for k, fr in enumerate(frames):
            cap.save_image(root / "masks" / f"{k}.png", np.full((H, W), 255, np.uint8))
            fr[key] = f"masks/{k}.png"
        frames[1][key] = entry
    else:
        frames[1][key] = entry
    cap.write_transforms(root, meta)
    return root / "transforms.json"


def write_blender(root: Path, entry: str) -> Path:
    frames = []
    for k, w2c in enumerate(poses(3)):
        cap.save_image(root / "train" / f"r_{k}.png", pixels(k))
        frames.append({"file_path": f"./train/r_{k}", "transform_matrix": cap.c2w_opengl(w2c).tolist()})
    frames[1]["file_path"] = entry
    (root / "transforms_train.json").write_text(json.dumps({"camera_angle_x": 0.9, "frames": frames}))
    return root / "transforms_train.json"


def write_colmap_text(root: Path, entry: str) -> Path:
    names = ["0.png", entry, "2.png"]
    for k in (0, 2):
        cap.save_image(root / "images" / names[k], pixels(k))
    cap.write_colmap_text(root, {1: ("PINHOLE", W, H, [14.0, 14.0, W / 2, H / 2])},
                          [(n, 1, w2c) for n, w2c in zip(names, poses(3))])
    return root / "sparse" / "0" / "images.txt"


def write_colmap_binary(root: Path, entry: str) -> Path:
    write_colmap_text(root, entry)
    sparse = root / "sparse" / "0"
    (sparse / "images.txt").unlink()
    blob = struct.pack("<Q", 3)
    for k, (name, w2c) in enumerate(zip(["0.png", entry, "2.png"], poses(3))):
        q, t = cap.qvec_of(w2c[:3, :3]), w2c[:3, 3]
        blob += struct.pack("<i4d3di", k + 1, *q, *t, 1) + name.encode("utf-8") + b"\0" + struct.pack("<Q", 0)
    (sparse / "images.bin").write_bytes(blob)
    return sparse / "images.bin"


WRITERS = {
    "nerfstudio file_path": (write_nerfstudio, ""),
    "nerfstudio mask_path": (lambda r, e: write_nerfstudio(r, e, "mask_path"), ""),
    "nerfstudio depth_file_path": (lambda r, e: write_nerfstudio(r, e, "depth_file_path"), ""),
    "nerfstudio ply_file_path": (lambda r, e: write_nerfstudio(r, e, "ply_file_path"), ""),
    "blender file_path": (write_blender, ""),
    "colmap images.txt": (write_colmap_text, "images"),   # names are relative to images/
    "colmap images.bin": (write_colmap_binary, "images"),
}


def scene_in(base: Path) -> Path:
    """A scene folder four levels under `base` (so short escapes stay under base)."""
    root = base / "d1" / "d2" / "d3" / "scene"
    root.mkdir(parents=True)
    return root


def refusal(root: Path, kind: str, entry: str, **kwargs) -> str:
    writer = WRITERS[kind][0]
    source = writer(root, entry)
    split = "all" if kind.startswith(("nerfstudio", "colmap")) else "train"
    with pytest.raises(DatasetError) as exc:
        load_dataset(root, split, **kwargs)
    msg = str(exc.value)
    assert len(msg.splitlines()) == 1, msg
    assert msg.startswith(f"[splat] {source}: "), msg
    assert repr(entry) in msg and RULE in msg, msg
    return msg


# --------------------------------------------------------------------------- entries


SEPARATORS = st.sampled_from(["/", "\\"])


@st.composite
def escaping_entries(draw):
    """A relative entry whose normalised form leaves the folder (and a folder one level
    down: COLMAP names are relative to images/): detours that come back, then more
    `..` than folders entered, then anything (an escape is not undone by going down)."""
    prefix = draw(st.lists(st.sampled_from([".", "a", "b", "a/..", "b/./.."]), max_size=4))
    depth = sum(p in ("a", "b") for p in prefix)
    ups = depth + 2 + draw(st.integers(0, 3))
    suffix = draw(st.lists(st.sampled_from([".", "a", "..", ""]), max_size=3))
    parts = "/".join(prefix + [".."] * ups + suffix + ["secret.png"]).split("/")
    return parts[0] + "".join(draw(SEPARATORS) + p for p in parts[1:])


@st.composite
def absolute_entries(draw):
    head = draw(st.sampled_from(["/", "\\", "C:\\", "C:/", "//server/share/", "/tmp/../"]))
    tail = draw(st.lists(st.sampled_from(["..", "a", "etc", "secret.png"]), min_size=1, max_size=4))
    return head + draw(SEPARATORS).join(tail)


@st.composite
def inside_entries(draw):
    """images/<k>.png written with detours that normalise away (a/../, ./, b/c/../../)."""
    parts = []
    for _ in range(draw(st.integers(0, 3))):
        detour = draw(st.sampled_from([["."], ["a", ".."], ["b", "a", "..", ".."], ["images", ".."]]))
        parts += detour
    parts += ["images"]
    parts += draw(st.sampled_from([[], ["."], ["a", ".."]]))
    return "/".join(parts + ["1.png"])


# --------------------------------------------------------------------------- properties


@pytest.mark.parametrize("kind", sorted(WRITERS))
@quick(8)
@given(entry=escaping_entries())
@example(entry="../../../outside/secret.png")
@example(entry="images/../../../secret.png")
@example(entry="..\\..\\secret.png")
def test_escaping_entries_are_refused_alike_whether_or_not_the_target_exists(tmp_path_factory, kind, entry):
    base = tmp_path_factory.mktemp("esc")
    root = scene_in(base)
    absent = refusal(root, kind, entry)
    # the same entry with its target written (where it lands under base): the same message
    sub = WRITERS[kind][1]
    target = Path(os.path.normpath(os.path.join(root, sub, entry.replace("\\", "/"))))
    if base in target.parents:
        cap.save_image(target, pixels(9))
    present = refusal(root, kind, entry)
    assert present == absent
    assert ("leaves the scene folder" in absent) and "absolute" not in absent


@pytest.mark.parametrize("kind", sorted(WRITERS))
@quick(6)
@given(entry=absolute_entries())
@example(entry="/etc/passwd")
def test_absolute_entries_are_refused_alike_whether_or_not_the_target_exists(tmp_path_factory, kind, entry):
    root = scene_in(tmp_path_factory.mktemp("abs"))
    msg = refusal(root, kind, entry)
    assert "is absolute" in msg and "leaves" not in msg
    # an absolute path to a file that exists (this scene's own image) and one that does not
    real = root / ("" if kind.startswith("nerfstudio ply") else "images") / "0.png"
    real = str(real if real.is_file() else root.parent / "real.png")
    cap.save_image(real, pixels(3)) if not os.path.isfile(real) else None
    missing = real + ".missing"
    assert refusal(root, kind, real).replace(repr(real), "X") == \
        refusal(root, kind, missing).replace(repr(missing), "X")


@quick(12)
@given(entry=inside_entries())
@example(entry="a/../images/1.png")
def test_entries_that_stay_inside_after_normalising_load(tmp_path_factory, entry):
    """nerfstudio file_path, Blender file_path and a COLMAP name with detours: each
    loads the image it names."""
    root = scene_in(tmp_path_factory.mktemp("in"))
    folders_along(root, entry)
    write_nerfstudio(root, entry)
    ds = load_dataset(root, "all")
    assert np.array_equal(ds.images[ds.names.index(entry.removeprefix("./"))], pixels(1))

    broot = scene_in(tmp_path_factory.mktemp("in"))
    folders_along(broot, entry)
    write_blender(broot, entry)
    cap.save_image(broot / "images" / "1.png", pixels(7))
    ds = load_dataset(broot, "train")
    assert np.array_equal(ds.images[1], pixels(7))

    croot = scene_in(tmp_path_factory.mktemp("in"))
    name = entry.removeprefix("./").removeprefix("images/")        # relative to images/
    folders_along(croot / "images", name)
    cap.save_image(Path(os.path.normpath(croot / "images" / name)), pixels(1))
    write_colmap_text(croot, name)
    ds = load_dataset(croot, "all")
    assert np.array_equal(ds.images[ds.names.index(name)], pixels(1))


def folders_along(root: Path, entry: str) -> None:
    """Make every folder the entry walks through (the OS resolves `a/..` only when a exists)."""
    at = str(root)
    for part in entry.split("/")[:-1]:
        at = os.path.join(at, part)
        if part not in ("", ".", ".."):
            os.makedirs(at, exist_ok=True)


# --------------------------------------------------------------------------- reported cases


def test_outside_images_load_only_when_allowed(tmp_path):
    """The three entries that used to train on an image outside the scene."""
    root = scene_in(tmp_path)
    secret = tmp_path / "d1" / "d2" / "outside" / "secret.png"
    cap.save_image(secret, pixels(42))
    cases = [("nerfstudio file_path", "../../outside/secret.png"),
             ("nerfstudio file_path", str(secret)),
             ("colmap images.txt", "../../../outside/secret.png")]
    for k, (kind, entry) in enumerate(cases):
        r = root.parent / f"s{k}"
        r.mkdir()
        refusal(r, kind, entry)
        ds = load_dataset(r, "all", allow_outside_paths=True)
        assert np.array_equal(ds.images[ds.names.index(entry)], pixels(42))


def test_passwd_is_never_opened(tmp_path):
    """`../../../../../../etc/passwd` and `ply_file_path: /etc/passwd` are refused by
    rule: the messages are those of a file that does not exist."""
    root = scene_in(tmp_path)
    deep = "../" * 12 + "etc/passwd"
    a = refusal(root, "nerfstudio file_path", deep)
    b = refusal(root, "nerfstudio file_path", deep.replace("passwd", "no-such-file"))
    assert a.replace("etc/passwd", "X") == b.replace("etc/no-such-file", "X")
    c = refusal(root, "nerfstudio ply_file_path", "/etc/passwd")
    d = refusal(root, "nerfstudio ply_file_path", "/etc/no-such-file")
    assert c.replace("etc/passwd", "X") == d.replace("etc/no-such-file", "X")
    assert "PLY" not in c and "No such file" not in d


def test_a_symlink_inside_the_folder_is_followed(tmp_path):
    root = scene_in(tmp_path)
    outside = tmp_path / "elsewhere"
    cap.save_image(outside / "1.png", pixels(5))
    write_nerfstudio(root, "linked/1.png")
    (root / "linked").symlink_to(outside, target_is_directory=True)
    ds = load_dataset(root, "all")
    assert np.array_equal(ds.images[ds.names.index("linked/1.png")], pixels(5))


@pytest.mark.skipif(not NATIVE, reason="needs the native module splat._core")
def test_cli_refuses_in_one_line_and_the_config_key_allows(tmp_path, capsys, monkeypatch):
    root = scene_in(tmp_path)
    cap.save_image(tmp_path / "d1" / "d2" / "outside" / "secret.png", pixels(1))
    source = write_nerfstudio(root, "../../outside/secret.png")
    monkeypatch.chdir(tmp_path)
    rc, _, err = run_cli(capsys, "train", root, "--backend", "cpu", "--quiet", "--set", "train.steps=1")
    assert_user_error(rc, err, str(source), "'../../outside/secret.png'", "leaves the scene folder",
                      "[data] allow_outside_paths = true")
    from splat.config import DataConfig
    cfg = DataConfig(path=str(root), allow_outside_paths=True)
    assert cfg.loader_args()["allow_outside_paths"] is True
    assert DataConfig(path=str(root)).loader_args()["allow_outside_paths"] is False
    ds = load_dataset(root, "all", **cfg.loader_args())
    assert len(ds) == 3
