"""Inputs that used to end in a traceback or a lost run: each is now a result or
one `splat: error:` line naming the file and the key."""
from __future__ import annotations

import errno
import io
import json
import os
import sys
import tempfile

import numpy as np
import pytest
from PIL import Image

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _pkg import NATIVE, splat  # noqa: E402
from _cli import assert_user_error, run_cli  # noqa: E402
from _scenes import write_blender_scene  # noqa: E402

pytestmark = pytest.mark.skipif(not NATIVE, reason="needs the native module splat._core")

if NATIVE:
    from splat import cli  # noqa: E402
    from splat.config import MAX_GAUSSIANS, ConfigError, TrainConfig, check_config  # noqa: E402
    from splat.data import DatasetError, load_dataset  # noqa: E402
    from splat.io.atomic import atomic_write_bytes, atomic_write_text  # noqa: E402

UINT32_MAX = 2 ** 32 - 1
# split_count is bounded lower, at the native limit of 256 (tests/test_limits.py).
UINT32_KEYS = ("steps", "sh_degree_interval", "densify_from", "densify_until", "densify_every",
               "opacity_reset_every")

TINY = """\
[data]
path = "scene"
background = {background}

[train]
steps = 12
sh_degree = 1
sh_degree_interval = 4
densify_from = 2
densify_until = 8
densify_every = 2
densify_grad_threshold = 0.002
opacity_reset_every = 1000
init_points = 150

[backend]
backend = "cpu"

[output]
dir = {out}
eval_steps = [6]
checkpoint_steps = [6]
render_views = 1
"""


@pytest.fixture(scope="module")
def scene(tmp_path_factory):
    root = tmp_path_factory.mktemp("faults")
    write_blender_scene(root / "scene", 24, n_test_views=2, n_views=4, n_gaussians=60)
    return root


@pytest.fixture(scope="module")
def coloured_run(scene):
    """A run with a non-white [data] background: it used to die at the first evaluation."""
    bg = [float(x) for x in np.random.default_rng().uniform(0.05, 0.95, 3)]
    cfg = scene / "coloured.toml"
    cfg.write_text(TINY.format(background=json.dumps(bg), out=json.dumps(str(scene / "coloured"))))
    assert cli.main(["train", "--config", str(cfg), "--quiet"]) == 0
    return scene / "coloured", bg


def test_background_colour_trains_to_the_end(coloured_run):
    out, bg = coloured_run
    for name in ("metrics.json", "checkpoint.npz", "checkpoint_6.npz", "point_cloud.ply", "config.toml"):
        assert (out / name).is_file(), name
    m = json.loads((out / "metrics.json").read_text())
    assert m["finished"] and [e["step"] for e in m["evals"]] == [6, 12]
    meta, _ = splat.trainer.read_checkpoint(out / "checkpoint.npz")
    assert meta["background"] == pytest.approx(bg, abs=0)  # the colour as given, not rounded


def test_trainer_render_takes_a_list_background(coloured_run, scene):
    out, bg = coloured_run
    data = load_dataset(scene / "scene", "test", background=bg)
    trainer = splat.Trainer.load_checkpoint(out / "checkpoint.npz", data, splat.BackendConfig(backend="cpu"))
    cam = data.cameras[0]
    far = splat.Camera(cam.world_to_camera, cam.fx, cam.fy, cam.cx + 1e4, cam.cy, cam.width, cam.height)
    other = list(np.random.default_rng().uniform(0, 1, 3))
    img = trainer.render(far, background=other)  # looking away from every Gaussian: the background only
    np.testing.assert_allclose(img, np.broadcast_to(np.float32(other), img.shape), atol=1e-6)
    np.testing.assert_array_equal(trainer.render(cam, background=tuple(other)),
                                  trainer.render(cam, background=np.float32(other)))


# --------------------------------------------------------------------------- integer limits


@pytest.mark.parametrize("key", UINT32_KEYS)
def test_uint32_keys_bounded_at_the_native_type(key):
    import dataclasses
    lo = next(f.metadata["lo"] for f in dataclasses.fields(TrainConfig) if f.name == key)
    top = dict(densify_from=0, densify_until=UINT32_MAX) if key in ("densify_from", "densify_until") else {}
    assert TrainConfig(**dict(top, **{key: UINT32_MAX})).to_dict()[key] == UINT32_MAX
    for bad in (UINT32_MAX + 1, 2 ** 64 + 1, lo - 1):
        with pytest.raises(ConfigError, match=rf"train\.{key}: must be in \[{lo}, {UINT32_MAX}\], got {bad}"):
            TrainConfig(**{key: bad})


def test_check_and_train_name_out_of_range_keys(scene, tmp_path, capsys):
    cfg = tmp_path / "big.toml"
    cfg.write_text(f'[data]\npath = {json.dumps(str(scene / "scene"))}\n[train]\nsteps = 4294967297\n'
                   f'densify_until = 4294967296\ninit_points = 500000000\n[backend]\nbackend = "cpu"\n')
    rc, _, err = run_cli(capsys, "check", "--config", cfg)
    assert_user_error(rc, err, "train.steps", "train.densify_until", "train.init_points", str(MAX_GAUSSIANS),
                      lines=4)
    rc, _, err = run_cli(capsys, "train", "--config", cfg, "--quiet", "--out", tmp_path / "never")
    assert_user_error(rc, err, "train.steps", lines=3)
    assert "bad_cast" not in err and not (tmp_path / "never").exists()


def test_native_settings_guard_names_the_key():
    """Bypassing TrainConfig, the binding itself names the setting instead of std::bad_cast."""
    from splat import _core
    from splat.trainer import _camera_arrays
    rng = np.random.default_rng()
    cam = splat.Camera(np.eye(4), 20.0, 20.0, 8, 8, 16, 16)
    w2c, intr = _camera_arrays([cam])
    n = 5
    state = dict(means=rng.normal(size=(n, 3)).astype(np.float32), log_scales=np.full((n, 3), -2, np.float32),
                 quats=np.tile(np.float32([1, 0, 0, 0]), (n, 1)), opacity_logits=np.zeros(n, np.float32),
                 sh=np.zeros((n, 1, 3), np.float32))
    images = rng.integers(0, 256, (1, 16, 16, 3)).astype(np.uint8)
    for key, value in (("steps", 2 ** 32), ("densify_every", -1), ("seed", 2 ** 64)):
        with pytest.raises(ValueError, match=rf"\[trainer\] settings\.{key}: "):
            _core.Trainer(splat.BackendConfig(backend="cpu"), {key: value}, w2c, intr, list(images), None, state, 0)


def test_numbers_in_configs_follow_the_one_rule():
    c = TrainConfig(steps=np.int64(40), sh_degree=2.0, means_lr=np.float32(1e-4), seed=np.uint64(7))
    assert (c.steps, c.sh_degree, c.seed) == (40, 2, 7) and all(type(v) is int for v in (c.steps, c.sh_degree))
    assert c.means_lr == float(np.float32(1e-4))
    for kw, why in ((dict(steps=10.5), "expected an integer"), (dict(steps="10"), "expected an integer"),
                    (dict(steps=True), "expected an integer"), (dict(means_lr="0.1"), "expected a number"),
                    (dict(means_lr=1e39), "beyond the float32 range"),
                    (dict(adam_eps=1e-50), "rounds to 0.0 in float32"),
                    (dict(opacity_reset_value=1 - 1e-12), "rounds to 1.0 in float32")):
        with pytest.raises(ConfigError, match=why):
            TrainConfig(**kw)
    errors = check_config({"data": {"background": ["0.3", 0.6, 0.9]}})
    assert any(e.startswith("data.background: expected 3 numbers") for e in errors), errors


def test_trainer_rechecks_an_edited_config(scene):
    data = load_dataset(scene / "scene", "train")
    cfg = TrainConfig(steps=10, init_points=50)
    cfg.steps = 2 ** 33  # assigned after construction
    with pytest.raises(ConfigError, match=r"train\.steps: must be in"):
        splat.Trainer.from_dataset(data, cfg, splat.BackendConfig(backend="cpu"))


def test_trainer_arguments_of_the_wrong_type_name_the_argument(scene, coloured_run):
    """Trainer.from_dataset / load_checkpoint given something that is not a dataset or a
    TrainConfig raise a TypeError naming that argument (not an AttributeError from inside)."""
    data = load_dataset(scene / "scene", "train")
    cpu = splat.BackendConfig(backend="cpu")
    run, _ = coloured_run
    cases = [(lambda: splat.Trainer.from_dataset(None), "dataset"),
             (lambda: splat.Trainer.from_dataset([data.images[0]]), "dataset"),
             (lambda: splat.Trainer.from_dataset(data, {"steps": 5}, cpu), "train_config"),
             (lambda: splat.Trainer.from_dataset(data, splat.TrainConfig(steps=5, init_points=30), "cpu"),
              "backend_config"),
             (lambda: splat.Trainer.load_checkpoint(run / "checkpoint.npz", str(scene / "scene"), cpu),
              "dataset")]
    for make, name in cases:
        with pytest.raises(TypeError, match=rf"^\[splat\] {name}: expected "):
            make()
    assert splat.Trainer.load_checkpoint(run / "checkpoint.npz", data, cpu).step_count > 0


# --------------------------------------------------------------------------- checkpoints


def _rewrite(src, dst, meta_change=None, arrays_change=None):
    with np.load(src) as z:
        arrays = {k: z[k] for k in z.files}
    meta = json.loads(arrays.pop("__meta__").tobytes())
    if meta_change:
        meta_change(meta)
    if arrays_change:
        arrays_change(arrays)
    buf = io.BytesIO()
    np.savez(buf, __meta__=np.frombuffer(json.dumps(meta).encode(), np.uint8), **arrays)
    dst.write_bytes(buf.getvalue())
    return dst


def _set_nan(key):
    def change(a):
        a[key] = a[key].copy()
        a[key].reshape(-1)[np.random.default_rng().integers(a[key].size)] = np.nan
    return change


CHECKPOINT_FAULTS = {
    "no_means": (None, lambda a: a.pop("means"), "missing array 'means'"),
    "no_extent": (lambda m: m.pop("scene_extent"), None, "missing 'scene_extent'"),
    "negative_step": (lambda m: m.update(step=-3), None, "step: must be >= 0"),
    "huge_step": (lambda m: m.update(step=2 ** 40), None, "step: must be <= 4294967295"),
    "white": (lambda m: m.update(background="white"), None, "background: expected 3 numbers"),
    "nan_extent": (lambda m: m.update(scene_extent=float("nan")), None, "scene_extent: must be finite"),
    "zero_extent": (lambda m: m.update(scene_extent=0), None, "scene_extent: must be a positive"),
    "nan_means": (None, _set_nan("means"), "means: contains 1 NaN"),
    "nan_moment": (None, _set_nan("adam_m.sh"), "adam_m.sh: contains 1 NaN"),
    "nan_stat": (None, _set_nan("grad_accum"), "grad_accum: contains 1 NaN"),
    "string_width": (lambda m: m.update(width="32"), None, "width: expected a number"),
    "huge_size": (lambda m: m.update(width=2 ** 32 - 1, height=2 ** 32 - 1), None, "width: must be <= 65536"),
    "many_pixels": (lambda m: m.update(width=2 ** 16, height=2 ** 15), None, "is more than 268435456 pixels"),
    "bad_steps": (lambda m: m["train_config"].update(steps=2 ** 33), None, "train.steps: must be in"),
    "bad_config": (lambda m: m.update(train_config=[1, 2]), None, "train_config: expected an object"),
}


@pytest.mark.parametrize("case", sorted(CHECKPOINT_FAULTS))
def test_bad_checkpoints_are_one_line(case, coloured_run, scene, tmp_path, capsys):
    meta_change, arrays_change, why = CHECKPOINT_FAULTS[case]
    out, _ = coloured_run
    bad = _rewrite(out / "checkpoint.npz", tmp_path / f"{case}.npz", meta_change, arrays_change)
    for command in ("eval", "render"):
        rc, _, err = run_cli(capsys, command, "--checkpoint", bad, "--data", scene / "scene", "--backend", "cpu",
                             *(("--out", tmp_path / "r") if command == "render" else ()))
        assert_user_error(rc, err, f"{case}.npz", why)
    with pytest.raises(ValueError, match=rf"{case}.npz: .*{why.split(':')[0]}"):
        splat.Trainer.load_checkpoint(bad, load_dataset(scene / "scene", "train"), splat.BackendConfig(backend="cpu"))


# --------------------------------------------------------------------------- writes


@pytest.mark.parametrize("where,code", [("mkstemp", errno.EACCES), ("mkstemp", errno.EROFS),
                                        ("fsync", errno.ENOSPC), ("replace", errno.EACCES)])
def test_failed_atomic_write_names_the_target(tmp_path, monkeypatch, where, code):
    target = tmp_path / "out.json"
    target.write_text("old")

    def fail(*args, **kwargs):
        raise OSError(code, os.strerror(code), *(() if where == "fsync" else (str(args[0]) if args else "x",)))

    if where == "mkstemp":
        monkeypatch.setattr(tempfile, "mkstemp", lambda *a, dir=None, prefix="", suffix="", **k: fail(
            os.path.join(dir, prefix + "abc" + suffix)))
    else:
        monkeypatch.setattr(os, where, fail)
    with pytest.raises(OSError) as info:
        atomic_write_text(target, "new")
    assert info.value.errno == code and info.value.filename == str(target)
    monkeypatch.undo()
    assert target.read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out.json"]  # no temp file left


@pytest.mark.skipif(hasattr(os, "geteuid") and os.geteuid() == 0, reason="root ignores folder permissions")
def test_read_only_folder_names_the_target(tmp_path):
    folder = tmp_path / "ro"
    folder.mkdir()
    folder.chmod(0o500)
    try:
        with pytest.raises(PermissionError) as info:
            atomic_write_bytes(folder / "x.bin", b"1")
        assert info.value.filename == str(folder / "x.bin")
    finally:
        folder.chmod(0o700)


def test_full_disk_during_train_is_one_line(scene, tmp_path, monkeypatch, capsys):
    cfg = scene / "full.toml"
    cfg.write_text(TINY.format(background="[1.0, 1.0, 1.0]", out=json.dumps(str(tmp_path / "run"))))

    def full(fd):
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    monkeypatch.setattr(os, "fsync", full)
    rc, _, err = run_cli(capsys, "train", "--config", cfg, "--quiet")
    assert_user_error(rc, err, str(tmp_path / "run" / "config.toml"), "No space left on device")
    assert ".tmp" not in err


# --------------------------------------------------------------------------- COLMAP


def _write_colmap(root, fx):
    rng = np.random.default_rng()
    (root / "sparse" / "0").mkdir(parents=True)
    (root / "images").mkdir()
    w, h = 12, 10
    (root / "sparse" / "0" / "cameras.txt").write_text(f"1 PINHOLE {w} {h} {fx} 20 6 5\n")
    lines = []
    for i in range(3):
        Image.fromarray(rng.integers(0, 256, (h, w, 3)).astype(np.uint8)).save(root / "images" / f"{i}.png")
        lines += [f"{i + 1} 1 0 0 0 {0.1 * i} 0 3 1 {i}.png", ""]
    (root / "sparse" / "0" / "images.txt").write_text("\n".join(lines) + "\n")
    (root / "sparse" / "0" / "points3D.txt").write_text("1 0.1 0.2 0.3 10 20 30 0.5\n")


def test_colmap_negative_focal_names_the_file(tmp_path, capsys):
    _write_colmap(tmp_path / "neg", -20.0)
    with pytest.raises(DatasetError, match=r"cameras.txt: camera 1 \(PINHOLE\) has focal length -20, 20"):
        load_dataset(tmp_path / "neg", "train")
    cfg = tmp_path / "neg.toml"
    cfg.write_text(f'[data]\npath = "neg"\n[backend]\nbackend = "cpu"\n'
                   f'[output]\ndir = {json.dumps(str(tmp_path / "r"))}\n')
    rc, _, err = run_cli(capsys, "train", "--config", cfg, "--quiet")
    assert_user_error(rc, err, str(tmp_path / "neg" / "sparse" / "0" / "cameras.txt"), "focal length")
    _write_colmap(tmp_path / "pos", 20.0)
    assert load_dataset(tmp_path / "pos", "all").cameras[0].fx == 20.0


def test_empty_frame_selection_names_the_key(scene, tmp_path, capsys):
    cfg = tmp_path / "frames.toml"
    text = TINY.format(background="[1.0, 1.0, 1.0]", out=json.dumps(str(tmp_path / "run")))
    cfg.write_text(text.replace('background = [1.0, 1.0, 1.0]',
                                f'background = [1.0, 1.0, 1.0]\ntrain_frames = "10:"\n'
                                f'path = {json.dumps(str(scene / "scene"))}').replace('path = "scene"\n', "", 1))
    rc, _, err = run_cli(capsys, "train", "--config", cfg, "--quiet")
    assert_user_error(rc, err, str(cfg), "data.train_frames", "selects no view out of 4")
