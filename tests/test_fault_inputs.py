"""Property-based fault suite: generated configs, Blender and COLMAP files,
images, PLYs and array-API arguments either work or raise one of the package's
clean errors (ValueError / TypeError / FileNotFoundError and their
ConfigError / DatasetError subclasses, the message starting with a
`[component]` prefix). Any other exception, a hang or a crash fails.

The whole file is bounded to well under a minute on two cores: few examples
per property, no deadline (shared machines), no example database;
SPLAT_FAULT_SCALE multiplies the examples for a deeper search.
"""
from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
import textwrap

import numpy as np
import pytest

hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, example, given, settings  # noqa: E402
from hypothesis import strategies as st  # noqa: E402
from hypothesis.extra import numpy as hnp  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _images import CHANNELS, GRAY, GRAY_ALPHA, PALETTE, RGB, RGBA, encode_png  # noqa: E402
from _pkg import NATIVE, splat  # noqa: E402

pytestmark = pytest.mark.skipif(not NATIVE, reason="needs the native module splat._core")

if NATIVE:
    from splat.config import SECTIONS, TrainConfig, check_config, load_config  # noqa: E402
    from splat.data import DatasetError, load_dataset  # noqa: E402
    from splat.data.images import read_image  # noqa: E402
    from splat.io.ply import load_ply, save_ply  # noqa: E402

CLEAN = (ValueError, TypeError, FileNotFoundError)
# SPLAT_FAULT_SCALE=10 runs ten times the examples (a deeper search than CI's).
SCALE = float(os.environ.get("SPLAT_FAULT_SCALE", "1"))
PREFIX = re.compile(r"^\[[A-Za-z_ ]+\] ")


def quick(n: int):
    """Hypothesis settings for one property: `n` examples, no deadline, no database."""
    return settings(max_examples=max(1, int(n * SCALE)), deadline=None, database=None, derandomize=False,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture,
                                           HealthCheck.data_too_large])


def works_or_clean(fn, *args, naming=None, **kwargs):
    """fn's result, or None after a clean error (whose message contains `naming`,
    when given: the file or folder at fault); anything else propagates (and fails)."""
    try:
        return fn(*args, **kwargs)
    except CLEAN as exc:
        msg = str(exc)
        assert PREFIX.match(msg), f"{type(exc).__name__} without a [component] prefix: {msg!r}"
        assert "Traceback" not in msg and "bad_cast" not in msg, msg
        assert naming is None or str(naming) in msg, f"the error does not name {naming}: {msg!r}"
        return None


# --------------------------------------------------------------------------- values

finite_or_not = st.floats(allow_nan=True, allow_infinity=True, width=64)
ints_any = st.one_of(st.integers(-3, 3), st.integers(-2 ** 70, 2 ** 70),
                     st.sampled_from([2 ** 32 - 1, 2 ** 32, 2 ** 63 - 1, 2 ** 63, 2 ** 64, -2 ** 63]))
scalars = st.one_of(ints_any, finite_or_not, st.booleans(), st.text(max_size=6),
                    st.sampled_from([1e-50, 1e39, 1 - 1e-12, 0.5, 3.0, 64.0]))
toml_values = st.recursive(scalars, lambda inner: st.lists(inner, max_size=4) |
                           st.dictionaries(st.text(max_size=4), inner, max_size=3), max_leaves=6)


def _toml_scalar(v) -> str:
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int):
        return str(v)
    if isinstance(v, float):
        return "nan" if math.isnan(v) else ("inf" if v == math.inf else "-inf" if v == -math.inf else repr(v))
    if isinstance(v, str):
        return json.dumps(v)
    if isinstance(v, list):
        return "[" + ", ".join(_toml_scalar(x) for x in v) + "]"
    return "{" + ", ".join(f"{json.dumps(k)} = {_toml_scalar(x)}" for k, x in v.items()) + "}"


KEYS = {sec: [f.name for f in cls.__dataclass_fields__.values()] for sec, cls in SECTIONS.items()} if NATIVE else {}
KEYS_BACKEND = ["backend", "deterministic", "threads", "nonsense"]


@st.composite
def configs(draw):
    """A dict shaped like a config file: real keys (mostly) with arbitrary values."""
    raw = {}
    for sec in draw(st.lists(st.sampled_from(["data", "train", "output", "backend", "extra"]), max_size=4,
                             unique=True)):
        pool = KEYS_BACKEND if sec == "backend" else KEYS.get(sec, ["k"])
        keys = draw(st.lists(st.one_of(st.sampled_from(pool), st.text(min_size=1, max_size=5)), max_size=5,
                             unique=True))
        raw[sec] = {k: draw(toml_values) for k in keys}
    return raw


# --------------------------------------------------------------------------- configs


@quick(80)
@given(raw=configs())
def test_config_dicts_check_cleanly(tmp_path_factory, raw):
    errors = check_config(raw)  # never raises: every problem is a line
    assert isinstance(errors, list) and all(isinstance(e, str) and e for e in errors)
    from splat.config import Config
    cfg = works_or_clean(Config.from_dict, raw)
    if cfg is not None:  # what is accepted writes TOML that reads back the same
        path = tmp_path_factory.mktemp("rt") / "c.toml"
        path.write_text(cfg.to_toml())
        assert load_config(path, check_paths=False).to_dict() == cfg.to_dict()


@quick(40)
@given(raw=configs())
def test_config_files_load_cleanly(tmp_path_factory, raw):
    path = tmp_path_factory.mktemp("cfg") / "c.toml"
    try:
        text = "".join(f"[{sec}]\n" + "".join(f"{json.dumps(k)} = {_toml_scalar(v)}\n" for k, v in table.items())
                       for sec, table in raw.items())
    except (TypeError, ValueError):
        return
    path.write_text(text)
    works_or_clean(load_config, path, check_paths=False, naming=path)


@quick(30)
@given(raw=configs())
def test_splat_check_prints_only_error_lines(tmp_path_factory, capsys, raw):
    from splat import cli
    path = tmp_path_factory.mktemp("cli") / "c.toml"
    try:
        path.write_text("".join(f"[{sec}]\n" + "".join(f"{json.dumps(k)} = {_toml_scalar(v)}\n"
                                                        for k, v in table.items()) for sec, table in raw.items()))
    except (TypeError, ValueError):
        return
    capsys.readouterr()
    rc = cli.main(["check", "--config", str(path)])
    err = capsys.readouterr().err
    assert rc in (0, 1), err
    lines = [ln for ln in err.split("\n") if ln.strip()]
    assert all(ln.startswith(("splat: error: ", "splat: warning: ")) or ln.endswith(": OK") for ln in lines), err
    assert (rc == 1) == any(ln.startswith("splat: error: ") for ln in lines), err


@pytest.fixture(scope="module")
def eval_setup(tmp_path_factory):
    """A scene on disk and a checkpoint trained on it (a few steps)."""
    from _scenes import write_blender_scene
    root = tmp_path_factory.mktemp("ckpt")
    write_blender_scene(root / "scene", 16, n_test_views=1, n_views=2, n_gaussians=30)
    data = load_dataset(root / "scene", "train")
    trainer = splat.Trainer.from_dataset(data, TrainConfig(steps=4, init_points=40, sh_degree=1),
                                         splat.BackendConfig(backend="cpu"))
    trainer.run(2, progress=False)
    trainer.save_checkpoint(root / "good.npz")
    return root


header_keys = st.sampled_from(["step", "width", "height", "train_config", "backend_config", "scene_extent",
                               "background", "version", "unknown"])
array_keys = st.sampled_from(["means", "log_scales", "quats", "opacity_logits", "sh", "adam_m.means",
                              "adam_v.sh", "grad_accum", "grad_count", "max_radii"])


@quick(40)
@given(meta_edits=st.dictionaries(header_keys, toml_values | st.none(), max_size=2),
       array_edits=st.dictionaries(array_keys, st.sampled_from(["drop", "nan", "neg", "short", "f64", "int"]),
                                   max_size=2),
       config_edits=st.dictionaries(st.sampled_from(["steps", "sh_degree", "seed", "means_lr", "bogus"]),
                                    scalars, max_size=2))
def test_edited_checkpoints_evaluate_or_fail_in_one_line(eval_setup, capsys, meta_edits, array_edits,
                                                         config_edits):
    import io

    from splat import cli
    with np.load(eval_setup / "good.npz") as z:
        arrays = {k: z[k] for k in z.files}
    meta = json.loads(arrays.pop("__meta__").tobytes())
    for k, v in meta_edits.items():
        if v is None:
            meta.pop(k, None)
        else:
            meta[k] = v
    if isinstance(meta.get("train_config"), dict):
        meta["train_config"].update(config_edits)
    for k, how in array_edits.items():
        a = arrays[k]
        if how == "drop":
            arrays.pop(k)
        elif how == "nan" and a.size:
            arrays[k] = a.copy()
            arrays[k].reshape(-1)[0] = np.nan
        elif how == "neg":
            arrays[k] = -np.abs(a) - 1
        elif how == "short":
            arrays[k] = a[:-1]
        elif how == "f64":
            arrays[k] = a.astype(np.float64)
        elif how == "int":
            arrays[k] = a.astype(np.int64)
    buf = io.BytesIO()
    np.savez(buf, __meta__=np.frombuffer(json.dumps(meta, allow_nan=True).encode(), np.uint8), **arrays)
    path = eval_setup / "edited.npz"
    path.write_bytes(buf.getvalue())
    capsys.readouterr()
    rc = cli.main(["eval", "--checkpoint", str(path), "--data", str(eval_setup / "scene"), "--backend", "cpu"])
    out, err = capsys.readouterr()
    if rc == 0:
        assert "PSNR" in out and not err.strip()
    else:
        lines = err.strip().splitlines()
        assert rc == 1 and len(lines) == 1 and lines[0].startswith("splat: error: "), err
        assert "edited.npz" in err or "scene" in err, err


@pytest.fixture(scope="module")
def tiny_dataset():
    from splat.data import Dataset
    rng = np.random.default_rng()
    cam = splat.Camera(np.eye(4), 20.0, 20.0, 8, 8, 16, 16)
    return Dataset(cameras=[cam], images=rng.integers(0, 256, (1, 16, 16, 3)).astype(np.uint8), names=["v"])


train_values = st.fixed_dictionaries({}, optional={
    k: scalars for k in ("steps", "sh_degree", "sh_degree_interval", "densify_from", "densify_until",
                         "densify_every", "split_count", "opacity_reset_every", "seed", "means_lr",
                         "adam_eps", "adam_beta2", "opacity_reset_value", "percent_dense", "ssim_weight")})


@quick(40)
@given(values=train_values)
def test_train_configs_reach_the_native_trainer(tiny_dataset, values):
    """Whatever TrainConfig accepts, the native trainer can hold (never std::bad_cast)."""
    cfg = works_or_clean(TrainConfig, **values)
    if cfg is None:
        return
    n = 4
    rng = np.random.default_rng()
    state = dict(means=rng.normal(0, 0.3, (n, 3)), log_scales=np.full((n, 3), -2.0),
                 quats=np.tile([1.0, 0, 0, 0], (n, 1)),
                 opacity_logits=np.zeros(n), sh=rng.normal(0, 0.2, (n, 16, 3)))
    trainer = splat.Trainer(tiny_dataset, cfg, splat.BackendConfig(backend="cpu"), state)
    assert trainer.step_count == 0 and trainer.num_gaussians == n


# --------------------------------------------------------------------------- Blender


@pytest.fixture(scope="module")
def image_folder(tmp_path_factory):
    from PIL import Image
    root = tmp_path_factory.mktemp("imgs")
    rng = np.random.default_rng()
    (root / "train").mkdir()
    for i in range(2):
        Image.fromarray(rng.integers(0, 256, (8, 10, 4)).astype(np.uint8)).save(root / "train" / f"r_{i}.png")
    Image.fromarray(rng.integers(0, 256, (6, 10, 3)).astype(np.uint8)).save(root / "train" / "odd.png")
    (root / "train" / "junk.png").write_bytes(b"\x89PNG\r\n\x1a\n not really")
    return root


matrices = st.one_of(
    hnp.arrays(np.float64, st.sampled_from([(4, 4), (3, 4), (4,), (4, 4, 1)]),
               elements=st.floats(-10, 10) | finite_or_not).map(lambda a: a.tolist()),
    st.just([[1, 0, 0, 0], [0, 1, 0, 0], [0, 0, 1, 3], [0, 0, 0, 1]]),
    toml_values)
frames = st.fixed_dictionaries(
    {"file_path": st.one_of(st.sampled_from(["./train/r_0", "./train/r_1", "train/r_0.png", "./train/odd",
                                             "./train/junk", "./train/missing", "", "../../etc/passwd"]),
                            scalars),
     "transform_matrix": matrices})


@quick(40)
@given(meta=st.fixed_dictionaries({"frames": st.one_of(st.lists(frames, max_size=3), toml_values)},
                                  optional={"camera_angle_x": scalars, "fl_x": scalars, "fl_y": scalars,
                                            "cx": scalars, "cy": scalars}),
       downscale=st.sampled_from([1, 2, 3, 64]), raw_bytes=st.none() | st.binary(max_size=40))
@example(meta={"frames": [{"file_path": "./train/r_0", "transform_matrix": [[1, 0, 0, 0], [0, 1, 0, 0],
                                                                             [0, 0, 1, 3], [0, 0, 0, 1]]}],
               "camera_angle_x": 1}, downscale=2, raw_bytes=None)   # one that loads, every run
def test_blender_transforms_load_cleanly(image_folder, meta, downscale, raw_bytes):
    text = raw_bytes if raw_bytes is not None else json.dumps(meta, allow_nan=True).encode()
    (image_folder / "transforms_train.json").write_bytes(text)
    ds = works_or_clean(load_dataset, image_folder, "train", downscale=downscale, background=(0.2, 0.4, 0.6),
                        naming=image_folder)
    if ds is not None:
        assert len(ds) == len(ds.cameras) == len(ds.images)
        for img, c in zip(ds.images, ds.cameras):
            assert img.dtype == np.uint8 and img.shape == (c.height, c.width, 3)
            assert math.isfinite(c.fx) and c.fx > 0


# --------------------------------------------------------------------------- nerfstudio


intrinsics = st.fixed_dictionaries({}, optional={
    "fl_x": scalars, "fl_y": scalars, "cx": scalars, "cy": scalars,
    "w": st.one_of(st.just(10), scalars), "h": st.one_of(st.just(8), scalars),
    "camera_model": st.one_of(st.sampled_from(["OPENCV", "PINHOLE", "OPENCV_FISHEYE", "EQUIRECTANGULAR", "opencv"]),
                              scalars),
    "k1": scalars, "k2": scalars, "k3": scalars, "k4": scalars, "p1": scalars, "p2": scalars,
    "is_fisheye": st.booleans()})
ns_frames = st.builds(lambda f, extra: {**f, **extra},
                      frames, intrinsics | st.fixed_dictionaries({}, optional={"mask_path": scalars}))
ns_lists = st.one_of(st.lists(st.sampled_from(["train/r_0.png", "train/r_1.png", "r_0", "nope.png"]), max_size=3),
                     toml_values)


@quick(40)
@given(meta=st.builds(lambda top, fr, extra: {**top, "frames": fr, **extra}, intrinsics,
                      st.one_of(st.lists(ns_frames, max_size=3), toml_values),
                      st.fixed_dictionaries({}, optional={"applied_transform": matrices, "train_filenames": ns_lists,
                                                          "test_filenames": ns_lists, "ply_file_path": scalars})),
       split=st.sampled_from(["train", "test", "all"]), downscale=st.sampled_from([1, 2, 64]))
@example(meta={"fl_x": 12.0, "w": 10, "h": 8, "k1": 0.01,
               "frames": [{"file_path": "train/r_0.png",
                           "transform_matrix": [[1, 0, 0, 0], [0, 1, 0, 0], [0, 0, 1, 3], [0, 0, 0, 1]]},
                          {"file_path": "train/r_1.png",
                           "transform_matrix": [[1, 0, 0, 0.2], [0, 1, 0, 0], [0, 0, 1, 3], [0, 0, 0, 1]]}]},
         split="all", downscale=1)   # one that loads (with a distortion to undo), every run
def test_nerfstudio_transforms_load_cleanly(image_folder, meta, split, downscale):
    """transforms.json (nerfstudio) with fuzzed global and per-frame intrinsics, lens
    models, distortion, masks, applied_transform and split lists: loads, or fails
    with one clean error naming the folder."""
    (image_folder / "transforms.json").write_text(json.dumps(meta, allow_nan=True))
    try:
        ds = works_or_clean(load_dataset, image_folder, split, downscale=downscale, format="nerfstudio",
                            naming=image_folder)
    finally:
        (image_folder / "transforms.json").unlink()
    if ds is not None:
        assert len(ds) == len(ds.cameras) == len(ds.images) > 0
        for img, c in zip(ds.images, ds.cameras):
            assert img.dtype == np.uint8 and img.shape == (c.height, c.width, 3)
            assert all(math.isfinite(v) for v in (c.fx, c.fy, c.cx, c.cy)) and c.fx > 0 and c.fy > 0


# --------------------------------------------------------------------------- COLMAP

models = st.sampled_from(["PINHOLE", "SIMPLE_PINHOLE", "SIMPLE_RADIAL", "RADIAL", "OPENCV", "FULL_OPENCV", "BOGUS"])
num_text = st.one_of(st.integers(-5, 40).map(str), st.floats(-1e3, 1e3).map(repr),
                     st.sampled_from(["nan", "inf", "-0", "1e400", "x", "", "12", "10"]))


@st.composite
def colmap_texts(draw):
    cams = []
    for cid in draw(st.lists(st.integers(-1, 3), min_size=1, max_size=2, unique=True)):
        model = draw(models)
        nparams = {"PINHOLE": 4, "SIMPLE_PINHOLE": 3, "SIMPLE_RADIAL": 4, "RADIAL": 5, "OPENCV": 8}.get(model, 4)
        nparams += draw(st.sampled_from([0, 0, 0, -1, 1]))
        params = [draw(num_text) for _ in range(max(0, nparams))]
        size = draw(st.sampled_from([["10", "8"], ["12", "8"], ["0", "8"], [draw(num_text), draw(num_text)]]))
        cams.append(" ".join([str(cid), model, *size, *params]))
    images = []
    for iid in range(draw(st.integers(0, 3))):
        q = [draw(num_text) for _ in range(4)]
        t = [draw(num_text) for _ in range(3)]
        name = draw(st.sampled_from(["a.png", "b.png", "odd.png", "junk.png", "none.png", "../a.png"]))
        images += [" ".join([str(iid), *q, *t, draw(st.sampled_from(["1", "2", "0", "x"])), name]),
                   draw(st.sampled_from(["", "1 2 3", "x"]))]
    points = [" ".join([str(i), *(draw(num_text) for _ in range(3)), *(draw(st.sampled_from(["0", "255", "300", "-1"]))
                                                                    for _ in range(3)), "0.5"])
              for i in range(draw(st.integers(0, 3)))]
    return "\n".join(cams) + "\n", "\n".join(images) + "\n", "\n".join(points) + "\n"


@pytest.fixture(scope="module")
def colmap_folder(tmp_path_factory):
    from PIL import Image
    root = tmp_path_factory.mktemp("colmap")
    (root / "sparse" / "0").mkdir(parents=True)
    (root / "images").mkdir()
    rng = np.random.default_rng()
    for name in ("a.png", "b.png"):
        Image.fromarray(rng.integers(0, 256, (8, 10, 3)).astype(np.uint8)).save(root / "images" / name)
    Image.fromarray(rng.integers(0, 256, (8, 12, 4)).astype(np.uint8)).save(root / "images" / "odd.png")
    (root / "images" / "junk.png").write_bytes(b"GIF89a")
    return root


@quick(50)
@given(texts=colmap_texts(), split=st.sampled_from(["train", "test", "all"]), downscale=st.sampled_from([1, 2]))
def test_colmap_text_models_load_cleanly(colmap_folder, texts, split, downscale):
    sparse = colmap_folder / "sparse" / "0"
    for name, text in zip(("cameras.txt", "images.txt", "points3D.txt"), texts):
        (sparse / name).write_text(text)
    ds = works_or_clean(load_dataset, colmap_folder, split, format="colmap", test_every=2, downscale=downscale,
                        naming=colmap_folder)
    if ds is not None:
        assert all(c.fx > 0 and c.fy > 0 for c in ds.cameras)
        assert np.all(np.isfinite(ds.points))


@st.composite
def colmap_binaries(draw):
    """cameras.bin / images.bin / points3D.bin: plausible records with arbitrary fields, then damage."""
    import struct
    num = st.one_of(st.floats(-1e3, 1e3), finite_or_not)
    cams = [struct.pack("<iiQQ", draw(st.integers(-2, 3)), draw(st.integers(-1, 12)), draw(st.integers(0, 20)),
                        draw(st.integers(0, 20))) + struct.pack(f"<{n}d", *(draw(num) for _ in range(n)))
            for n in (draw(st.integers(0, 8)) for _ in range(draw(st.integers(0, 2))))]
    imgs = [struct.pack("<i4d3di", i, *(draw(num) for _ in range(7)), draw(st.integers(-1, 3)))
            + draw(st.sampled_from([b"a.png\0", b"odd.png\0", b"\xff\xfe\0", b"none.png\0", b"a.png"]))
            + struct.pack("<Q", draw(st.sampled_from([0, 1, 2 ** 40]))) + draw(st.binary(max_size=48))
            for i in range(draw(st.integers(0, 3)))]
    pts = [struct.pack("<Q3d3BdQ", i, *(draw(num) for _ in range(3)), 1, 2, 3, 0.5,
                       draw(st.sampled_from([0, 1, 2 ** 62]))) + draw(st.binary(max_size=16))
           for i in range(draw(st.integers(0, 3)))]
    out = []
    for records, count in ((cams, len(cams)), (imgs, len(imgs)), (pts, len(pts))):
        count = draw(st.sampled_from([count, count, count + 1, 2 ** 63]))
        data = struct.pack("<Q", count) + b"".join(records)
        if draw(st.booleans()):
            data = data[: draw(st.integers(0, len(data)))]
        out.append(data)
    return out


@quick(40)
@given(blobs=colmap_binaries())
def test_colmap_binary_models_load_cleanly(colmap_folder, blobs):
    sparse = colmap_folder / "sparse" / "0"
    for stem in ("cameras", "images", "points3D"):
        (sparse / f"{stem}.txt").unlink(missing_ok=True)
    for stem, data in zip(("cameras", "images", "points3D"), blobs):
        (sparse / f"{stem}.bin").write_bytes(data)
    try:
        ds = works_or_clean(load_dataset, colmap_folder, "all", format="colmap", naming=colmap_folder)
    finally:
        for stem in ("cameras", "images", "points3D"):
            (sparse / f"{stem}.bin").unlink()
    if ds is not None:
        assert all(c.fx > 0 and c.fy > 0 for c in ds.cameras)


# --------------------------------------------------------------------------- images


png_kinds = st.sampled_from([(GRAY, 1), (GRAY, 2), (GRAY, 4), (GRAY, 8), (GRAY, 16), (RGB, 8), (RGB, 16),
                             (GRAY_ALPHA, 8), (GRAY_ALPHA, 16), (RGBA, 8), (RGBA, 16), (PALETTE, 8)])


@quick(40)
@given(kind=png_kinds, h=st.integers(1, 12), w=st.integers(1, 12), seed=st.integers(0, 2 ** 32 - 1))
def test_random_pngs_decode_to_the_written_values(tmp_path_factory, kind, h, w, seed):
    color, depth = kind
    rng = np.random.default_rng(seed)
    samples = rng.integers(0, 2 ** depth, (h, w, CHANNELS[color]))
    palette = rng.integers(0, 256, (256, 3)) if color == PALETTE else None
    path = tmp_path_factory.mktemp("png") / "x.png"
    path.write_bytes(encode_png(samples, depth, color, rng=rng, palette=palette))
    got = read_image(path).astype(np.float64)
    if color == PALETTE:
        want = palette[samples[..., 0]].astype(np.float64)
    else:
        want = samples * 255.0 / (2 ** depth - 1)
        if CHANNELS[color] <= 2:
            want = np.concatenate([np.repeat(want[..., :1], 3, axis=2), want[..., 1:]], axis=2)
    tol = 0.5 if depth <= 8 else 2e-5 * 255  # 8-bit sources come back as their rounded uint8
    assert got.shape == want.shape and np.abs(got - want).max() <= tol


@pytest.fixture(scope="module")
def valid_image_bytes():
    import io

    from PIL import Image
    rng = np.random.default_rng()
    out = []
    for fmt, mode in (("PNG", "RGBA"), ("PNG", "L"), ("JPEG", "RGB"), ("BMP", "RGB"), ("TIFF", "RGB"), ("GIF", "P")):
        buf = io.BytesIO()
        Image.fromarray(rng.integers(0, 256, (9, 7, 3)).astype(np.uint8)).convert(mode).save(buf, format=fmt)
        out.append((fmt, buf.getvalue()))
    out.append(("PNG16", encode_png(rng.integers(0, 65536, (9, 7, 3)), 16, RGB, rng=rng)))
    return out


@quick(60)
@given(which=st.integers(0, 6), edits=st.lists(st.tuples(st.integers(0, 10 ** 6), st.integers(0, 255)), max_size=6),
       cut=st.none() | st.integers(0, 10 ** 6))
def test_damaged_images_decode_or_fail_cleanly(tmp_path_factory, valid_image_bytes, which, edits, cut):
    fmt, data = valid_image_bytes[which]
    data = bytearray(data)
    header = 33 if fmt.startswith("PNG") else 64  # keep the claimed size: a huge claim is tested on its own
    for pos, byte in edits:
        if len(data) > header:
            data[header + pos % (len(data) - header)] = byte
    if cut is not None:
        data = data[: cut % (len(data) + 1)]
    ext = {"PNG": "png", "PNG16": "png", "JPEG": "jpg", "BMP": "bmp", "TIFF": "tif", "GIF": "gif"}[fmt]
    path = tmp_path_factory.mktemp("bad") / f"x.{ext}"
    path.write_bytes(bytes(data))
    img = works_or_clean(read_image, path, naming=path)
    if img is None:
        return
    assert img.ndim == 3 and img.shape[2] in (3, 4) and img.dtype in (np.uint8, np.float32)
    if img.dtype == np.float32:
        assert np.all(np.isfinite(img)) and img.min() >= 0 and img.max() <= 255.0 + 1e-3


def test_huge_claimed_image_size_is_refused(tmp_path):
    import struct
    import zlib
    ihdr = struct.pack(">IIBBBBB", 60000, 60000, 8, 2, 0, 0, 0)

    def chunk(kind, data):
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)

    (tmp_path / "bomb.png").write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr)
                                        + chunk(b"IDAT", zlib.compress(b"\0" * 100)) + chunk(b"IEND", b""))
    with pytest.raises(DatasetError, match=r"bomb.png: cannot decode image"):
        read_image(tmp_path / "bomb.png")


# --------------------------------------------------------------------------- PLY

ply_types = st.sampled_from(["float", "double", "uchar", "int", "short", "float32", "list uchar int", "bogus"])
ply_names = st.sampled_from(["x", "y", "z", "nx", "f_dc_0", "f_dc_1", "f_dc_2", "f_rest_0", "f_rest_1", "opacity",
                             "scale_0", "scale_1", "scale_2", "rot_0", "rot_1", "rot_2", "rot_3", "extra"])


@quick(60)
@given(fmt=st.sampled_from(["binary_little_endian", "binary_big_endian", "ascii", "weird"]),
       count=st.one_of(st.integers(0, 4), st.sampled_from([10 ** 12, 2 ** 64])),
       other=st.none() | st.integers(0, 10 ** 12),
       props=st.lists(st.tuples(ply_types, ply_names), max_size=20),
       body=st.binary(max_size=300), ascii_body=st.lists(st.lists(num_text, max_size=20), max_size=5))
def test_generated_plys_load_cleanly(tmp_path_factory, fmt, count, other, props, body, ascii_body):
    head = ["ply", f"format {fmt} 1.0"]
    if other is not None:
        head += [f"element face {other}", "property list uchar int vertex_indices"]
    head += [f"element vertex {count}"] + [f"property {t} {n}" for t, n in props] + ["end_header"]
    data = ("\n".join(head) + "\n").encode()
    data += "\n".join(" ".join(r) for r in ascii_body).encode() if fmt == "ascii" else body
    path = tmp_path_factory.mktemp("ply") / "g.ply"
    path.write_bytes(data)
    g = works_or_clean(load_ply, path, naming=path)
    if g is not None:
        assert len(g) == count and np.all(np.isfinite(g.means))


@quick(20)
@given(n=st.integers(0, 6), k=st.sampled_from([1, 4, 9, 16]), seed=st.integers(0, 2 ** 32 - 1))
def test_ply_round_trip(tmp_path_factory, n, k, seed):
    rng = np.random.default_rng(seed)
    g = splat.Gaussians(rng.normal(size=(n, 3)), rng.normal(size=(n, 3)), rng.normal(size=(n, 4)) + [3, 0, 0, 0],
                        rng.normal(size=n), rng.normal(size=(n, k, 3)))
    path = tmp_path_factory.mktemp("rt") / "g.ply"
    save_ply(path, g)
    back = load_ply(path)
    for name in ("means", "log_scales", "quats", "opacity_logits", "sh"):
        np.testing.assert_array_equal(getattr(back, name), getattr(g, name))


# --------------------------------------------------------------------------- array API

dtypes = st.sampled_from([np.float32, np.float64, np.float16, np.int64, np.int8, np.uint16, np.bool_,
                          np.complex64, np.dtype("U2"), np.dtype(">f4"), object])


def _array(draw, shape):
    """An array of the given shape and a random dtype, or a wrong shape / a list / junk now and then."""
    choice = draw(st.integers(0, 9))
    if choice == 0:
        shape = draw(st.lists(st.integers(0, 4), max_size=3).map(tuple))
    dtype = draw(dtypes)
    if dtype in (np.float32, np.float64, np.float16, np.dtype(">f4")):
        elements = st.floats(-4, 4, width=16) if choice > 2 else finite_or_not.map(lambda x: float(np.float16(x)))
        arr = draw(hnp.arrays(dtype, shape, elements=elements))
    elif dtype is object:
        arr = np.empty(shape, object)
        arr.flat[:] = [draw(st.one_of(st.integers(-3, 3), st.none(), st.text(max_size=1)))
                       for _ in range(arr.size)]
    else:
        arr = draw(hnp.arrays(dtype, shape))
    return arr.tolist() if choice == 1 and arr.dtype != object else arr


@st.composite
def raster_calls(draw):
    n = draw(st.integers(0, 6))
    k = draw(st.sampled_from([1, 4, 9, 16]))
    arrays = {name: _array(draw, shape) for name, shape in
              (("means", (n, 3)), ("log_scales", (n, 3)), ("quats", (n, 4)), ("opacity_logits", (n,)),
               ("sh", (n, k, 3)))}
    cam = {"fx": draw(scalars), "fy": draw(st.sampled_from([30.0, np.float32(20), 7])), "cx": draw(scalars),
           "cy": 8.0, "width": draw(st.sampled_from([16, 16.0, np.int64(24), 16.5, "16", 0, True])),
           "height": draw(st.sampled_from([16, 8.0, np.uint8(12)]))}
    extra = {"sh_degree": draw(st.sampled_from([0, 1, 3, 1.0, 2.5, "1", None])),
             "background": draw(st.sampled_from([(1.0, 1.0, 1.0), [0.2, 0.3, 0.4], np.float64([0, 1, 0]),
                                                 (1.0,), "white", (np.nan, 0.0, 0.0), [1, 2, 3]]))}
    return arrays, cam, extra


def run_raster_property(examples: int) -> None:
    """The array API property itself (run in a child process: a native crash must not take pytest down)."""
    rng = np.random.default_rng()
    r = splat.Rasterizer(splat.BackendConfig(backend="cpu"))

    @quick(examples)
    @given(call=raster_calls())
    def prop(call):
        arrays, cam, extra = call
        g = works_or_clean(splat.Gaussians, **arrays)
        w2c = np.eye(4)
        w2c[:3, 3] = rng.normal(0, 0.2, 3) + [0, 0, 4]
        c = works_or_clean(splat.Camera, w2c, **cam)
        if g is None or c is None:
            return
        out = works_or_clean(r.forward, g, c, **extra)
        if out is None:
            return
        assert out.image.shape == (c.height, c.width, 3) and np.all(np.isfinite(out.image))
        grads = works_or_clean(r.backward, rng.normal(size=out.image.shape))
        if grads is not None:
            assert grads.means.shape == g.means.shape

    prop()


def test_array_api_works_or_fails_cleanly(tmp_path):
    code = textwrap.dedent(f"""
        import sys
        sys.path.insert(0, {os.path.dirname(os.path.abspath(__file__))!r})
        import test_fault_inputs
        test_fault_inputs.run_raster_property(120)  # times SPLAT_FAULT_SCALE
        print("ok")
    """)
    env = dict(os.environ, PYTHONFAULTHANDLER="1")
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300, cwd=tmp_path,
                       env=env)
    assert p.returncode == 0 and p.stdout.strip().endswith("ok"), (p.returncode, p.stdout[-3000:], p.stderr[-6000:])
