"""The `splat` command line, end to end on a tiny Blender-format scene."""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys

import numpy as np
import pytest
from PIL import Image

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _pkg import NATIVE, splat  # noqa: E402
from _cli import assert_user_error, run_cli  # noqa: E402
from _scenes import write_blender_scene  # noqa: E402

pytestmark = pytest.mark.skipif(not NATIVE, reason="needs the native module splat._core")

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib

if NATIVE:
    from splat import cli  # noqa: E402
    from splat.data import load_dataset  # noqa: E402

SIZE = 32
TRAIN_TOML = """\
[data]
path = "../scene"

[train]
steps = 30
sh_degree = 1
sh_degree_interval = 10
densify_from = 5
densify_until = 20
densify_every = 5
densify_grad_threshold = 0.002
opacity_reset_every = 1000
init_points = 400
init_extent = 1.0

[backend]
backend = "cpu"

[output]
dir = {out}
eval_steps = [10, 30, 100]
checkpoint_steps = [20, 30, 500]
render_views = 2
"""


def make_scene_dir(tmp_path_factory, name="cli"):
    """A folder with a small Blender scene (scene/) and room for configs (configs/)."""
    root = tmp_path_factory.mktemp(name)
    write_blender_scene(root / "scene", SIZE, n_test_views=4)
    (root / "configs").mkdir()
    return root


@pytest.fixture(scope="module")
def scene_dir(tmp_path_factory):
    return make_scene_dir(tmp_path_factory)


def write_config(scene_dir, name, out, text=TRAIN_TOML):
    path = scene_dir / "configs" / name
    path.write_text(text.format(out=json.dumps(str(out))))
    return path


@pytest.fixture(scope="module")
def run(scene_dir):
    """A 30-step training run through the CLI (checked by the tests below)."""
    out = scene_dir / "run"
    cfg = write_config(scene_dir, "tiny.toml", out)
    rc = cli.main(["train", "--config", str(cfg), "--quiet"])
    assert rc == 0
    return out


def finite(x):
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


# --------------------------------------------------------------------------- train


def test_train_writes_every_output(run):
    for name in ("metrics.json", "checkpoint.npz", "checkpoint_20.npz", "checkpoint_30.npz",
                 "point_cloud.ply", "training.png", "config.toml"):
        assert (run / name).is_file(), name
    assert not (run / "checkpoint_500.npz").exists()
    assert not list(run.rglob("*.tmp")), "temporary files left behind"
    for step in (10, 30):
        pngs = sorted((run / "renders" / f"step_{step}").glob("*.png"))
        assert len(pngs) == 2
        with Image.open(pngs[0]) as im:
            assert im.height == SIZE and im.width > 2 * SIZE          # render next to ground truth
    assert not (run / "renders" / "step_100").exists()
    with Image.open(run / "training.png") as im:
        assert im.format == "PNG" and im.width > 300


def test_metrics_json(run):
    m = json.loads((run / "metrics.json").read_text())
    assert m["steps"] == 30 and m["finished"] is True
    assert m["backend"] == "cpu"
    for key in ("psnr", "ssim", "train_seconds", "ms_per_step", "load_seconds", "eval_seconds"):
        assert finite(m[key]), key
    assert 0 < m["ssim"] <= 1 and m["psnr"] > 5 and m["train_seconds"] > 0
    assert m["num_gaussians"] > 0
    assert [e["step"] for e in m["evals"]] == [10, 30]
    assert m["evals"][-1]["psnr"] == m["psnr"]
    assert len(m["per_view"]) == 4 and all(finite(v["psnr"]) and finite(v["ssim"]) for v in m["per_view"])
    assert m["psnr"] == pytest.approx(np.mean([v["psnr"] for v in m["per_view"]]))
    assert len(m["history"]) >= 3 and m["history"][-1][0] == 30


def test_outputs_load_back(run, scene_dir):
    m = json.loads((run / "metrics.json").read_text())
    train = load_dataset(scene_dir / "scene", "train")
    test = load_dataset(scene_dir / "scene", "test")
    trainer = splat.Trainer.load_checkpoint(run / "checkpoint.npz", train)
    assert trainer.step_count == 30 and trainer.num_gaussians == m["num_gaussians"]
    assert splat.evaluate(trainer, test).psnr == pytest.approx(m["psnr"], abs=1e-6)
    assert splat.Trainer.load_checkpoint(run / "checkpoint_20.npz", train).step_count == 20
    from splat.io.ply import load_ply
    assert len(load_ply(run / "point_cloud.ply")) == m["num_gaussians"]
    cfg = splat.load_config(run / "config.toml")
    assert cfg.train.steps == 30 and cfg.data.path == str(scene_dir / "scene")


def test_steps_and_out_override(scene_dir, tmp_path, capsys):
    cfg = write_config(scene_dir, "override.toml", scene_dir / "unused")
    rc, out, err = run_cli(capsys, "train", "--config", cfg, "--steps", 12, "--out", tmp_path / "r", "--quiet")
    assert rc == 0, err
    assert "PSNR" in out
    assert not (scene_dir / "unused").exists()
    m = json.loads((tmp_path / "r" / "metrics.json").read_text())
    assert m["steps"] == 12 and [e["step"] for e in m["evals"]] == [10, 12]
    assert not list((tmp_path / "r").glob("checkpoint_*.npz"))     # 20, 30, 500 are past the end
    assert (tmp_path / "r" / "checkpoint.npz").is_file()


def test_train_without_config(tmp_path, capsys):
    rc, out, err = run_cli(capsys, "train", "--steps", 50, "--out", tmp_path / "syn", "--quiet")
    assert rc == 0, err
    assert "PSNR" in out and "SSIM" in out
    m = json.loads((tmp_path / "syn" / "metrics.json").read_text())
    assert m["scene"] == "synthetic" and m["steps"] == 50
    assert finite(m["psnr"]) and finite(m["ssim"]) and m["eval_views"] == 8
    for name in ("checkpoint.npz", "point_cloud.ply", "training.png"):
        assert (tmp_path / "syn" / name).is_file()


# --------------------------------------------------------------------------- eval / render


def test_eval(run, scene_dir, tmp_path, capsys):
    m = json.loads((run / "metrics.json").read_text())
    out_json = tmp_path / "eval.json"
    rc, out, err = run_cli(capsys, "eval", "--checkpoint", run / "checkpoint.npz", "--data", scene_dir / "scene",
                           "--json", out_json)
    assert rc == 0, err
    assert "PSNR" in out and "SSIM" in out
    e = json.loads(out_json.read_text())
    assert e["psnr"] == pytest.approx(m["psnr"], abs=1e-6)
    assert e["ssim"] == pytest.approx(m["ssim"], abs=1e-6)
    assert len(e["per_view"]) == 4 and e["step"] == 30
    rc, out, err = run_cli(capsys, "eval", "--checkpoint", run / "checkpoint.npz", "--data", scene_dir / "scene",
                           "--frames", "1::2", "--supersample", 2, "--json", out_json)
    assert rc == 0, err
    e = json.loads(out_json.read_text())
    assert [v["name"] for v in e["per_view"]] == [m["per_view"][1]["name"], m["per_view"][3]["name"]]
    assert e["supersample"] == 2 and finite(e["psnr"])


def test_eval_of_a_run_reads_its_dataset_as_it_trained(tmp_path, capsys):
    """`splat eval RUN_DIR` without --data repeats the run's own last evaluation: its
    config's scene folder, eval split, test_frames and downscale; --data, --split,
    --frames and --downscale override them one by one."""
    import shutil
    scene = tmp_path / "scene"
    write_blender_scene(scene, SIZE, n_test_views=4)
    out = tmp_path / "run"
    rc, _, err = run_cli(capsys, "train", scene, "--steps", 6, "--backend", "cpu", "--quiet", "--out", out,
                         "--set", "data.downscale=2", "--set", 'data.test_frames="1::2"',
                         "--set", "train.init_points=300", "--set", "output.eval_steps=[6]")
    assert rc == 0, err
    m = json.loads((out / "metrics.json").read_text())
    got = tmp_path / "eval.json"
    for source in (out, out / "checkpoint.npz", out / "point_cloud.ply"):
        rc, printed, err = run_cli(capsys, "eval", source, "--backend", "cpu", "--json", got)
        assert rc == 0, err
        e = json.loads(got.read_text())
        assert e["psnr"] == pytest.approx(m["psnr"], abs=1e-4), source
        assert [v["name"] for v in e["per_view"]] == [v["name"] for v in m["per_view"]]
        assert e["downscale"] == 2 and e["split"] == "test" and len(e["per_view"]) == 2
        assert "2 views" in printed and "at downscale 2" in printed
    rc, _, err = run_cli(capsys, "eval", out, "--backend", "cpu", "--json", got, "--downscale", 1, "--frames", "0",
                         "--split", "train")
    assert rc == 0, err
    e = json.loads(got.read_text())
    assert e["downscale"] == 1 and e["split"] == "train" and len(e["per_view"]) == 1 and finite(e["psnr"])
    # the dataset moved: the error names the run's config and --data; --data finds it
    shutil.move(scene, tmp_path / "moved")
    rc, _, err = run_cli(capsys, "eval", out, "--backend", "cpu")
    assert_user_error(rc, err, str(scene), str(out / "config.toml"), "--data")
    rc, _, err = run_cli(capsys, "eval", out, "--backend", "cpu", "--data", tmp_path / "moved", "--json", got)
    assert rc == 0, err
    assert json.loads(got.read_text())["psnr"] == pytest.approx(m["psnr"], abs=1e-4)


def test_resume_after_the_scene_moved(tmp_path, capsys):
    """--resume of a run whose scene folder moved says to give --data; with it the run
    continues on the moved folder and its config.toml records the new path."""
    import shutil
    scene = tmp_path / "scene"
    write_blender_scene(scene, SIZE, n_test_views=2)
    out = tmp_path / "run"
    rc, _, err = run_cli(capsys, "train", scene, "--steps", 6, "--backend", "cpu", "--quiet", "--out", out,
                         "--set", "train.init_points=200", "--set", "output.eval_steps=[]")
    assert rc == 0, err
    moved = tmp_path / "elsewhere"
    shutil.move(scene, moved)
    rc, _, err = run_cli(capsys, "train", "--resume", out, "--steps", 9, "--quiet")
    assert_user_error(rc, err, str(scene), "--data NEW_PATH")
    rc, _, err = run_cli(capsys, "train", "--resume", out, "--steps", 9, "--quiet", "--data", moved)
    assert rc == 0, err
    assert json.loads((out / "metrics.json").read_text())["steps"] == 9
    assert tomllib.loads((out / "config.toml").read_text())["data"]["path"] == str(moved)
    rc, _, err = run_cli(capsys, "train", "--resume", out, "--steps", 12, "--quiet", "--data", tmp_path / "gone")
    assert_user_error(rc, err, "data.path", "gone")


def test_render(run, scene_dir, tmp_path, capsys):
    rc, out, err = run_cli(capsys, "render", "--checkpoint", run / "checkpoint.npz", "--data", scene_dir / "scene",
                           "--frames", "0::2", "--out", tmp_path / "r")
    assert rc == 0, err
    pngs = sorted((tmp_path / "r").glob("*.png"))
    assert len(pngs) == 2
    with Image.open(pngs[0]) as im:
        assert im.size == (SIZE, SIZE)
        assert np.asarray(im).std() > 5
    rc, out, err = run_cli(capsys, "render", "--checkpoint", run / "checkpoint.npz", "--data", scene_dir / "scene",
                           "--split", "train", "--frames", "3", "--supersample", 2, "--compare",
                           "--out", tmp_path / "c")
    assert rc == 0, err
    (png,) = (tmp_path / "c").glob("*.png")
    with Image.open(png) as im:
        assert im.height == SIZE and im.width > 2 * SIZE


# --------------------------------------------------------------------------- check


def test_check_good(run, scene_dir, capsys):
    rc, out, err = run_cli(capsys, "check", "--config", scene_dir / "configs" / "tiny.toml")
    assert rc == 0, err
    assert "error" not in err
    resolved = tomllib.loads(out)
    assert resolved["data"]["path"] == str(scene_dir / "scene")
    assert resolved["train"]["steps"] == 30 and resolved["train"]["means_lr"] == pytest.approx(1.6e-4)
    assert resolved["backend"]["backend"] == "cpu"


def test_check_takes_the_train_command_line(scene_dir, tmp_path, capsys):
    """`splat check` with splat train's arguments (scene PATH, --set, --steps, --backend)
    prints the config that `splat train` with those arguments writes into its run folder."""
    out = (tmp_path / "checked_run").resolve()
    argv = [scene_dir / "scene", "--set", "train.sh_degree=1", "--set", f"output.dir={json.dumps(str(out))}",
            "--set", "output.eval_steps=[]", "--steps", "6", "--backend", "cpu"]
    rc, printed, err = run_cli(capsys, "check", *argv)
    assert rc == 0, err
    checked = tomllib.loads(printed)
    assert checked["train"]["steps"] == 6 and checked["train"]["sh_degree"] == 1
    assert checked["backend"]["backend"] == "cpu" and checked["data"]["path"] == str(scene_dir / "scene")
    rc, _, err = run_cli(capsys, "train", *argv, "--quiet")
    assert rc == 0, err
    assert tomllib.loads((out / "config.toml").read_text()) == checked
    # the same errors as splat train, each on its line, then the count
    rc, printed, err = run_cli(capsys, "check", scene_dir / "scene", "--set", "train.sh_degree=9",
                               "--set", "train.densify_every=x")
    assert_user_error(rc, err, "train.sh_degree", "train.densify_every", "2 problems", lines=3)
    assert printed == ""
    # no config and no scene: the built-in scene, as splat train runs it
    out = (tmp_path / "builtin_run").resolve()
    argv = ["--set", "train.steps=6", "--set", f"output.dir={json.dumps(str(out))}", "--set", "output.eval_steps=[]",
            "--backend", "cpu"]
    rc, printed, err = run_cli(capsys, "check", *argv)
    assert rc == 0, err
    checked = tomllib.loads(printed)
    assert checked["train"]["steps"] == 6 and "path" not in checked["data"]
    rc, _, err = run_cli(capsys, "train", *argv, "--quiet")
    assert rc == 0, err
    assert tomllib.loads((out / "config.toml").read_text()) == checked
    rc, _, err = run_cli(capsys, "check", "--set", "data.downscale=2")
    assert_user_error(rc, err, "data.downscale", "built-in scene")
    # a config given where a scene belongs
    cfg = write_config(scene_dir, "positional.toml", tmp_path / "unused")
    for command in ("check", "train"):
        rc, _, err = run_cli(capsys, command, cfg)
        assert_user_error(rc, err, "config file", f"--config {cfg}")


def test_check_backend_warnings(scene_dir, capsys):
    text = TRAIN_TOML.replace('backend = "cpu"', 'backend = "cpu"\nraster_backward = "tg"\npipelining = "on"')
    cfg = write_config(scene_dir, "warn.toml", scene_dir / "unused", text)
    rc, out, err = run_cli(capsys, "check", "--config", cfg)
    assert rc == 0, err
    want = splat.BackendConfig(backend="cpu", raster_backward="tg", pipelining="on").validate("cpu")
    assert len(want) == 2
    for w in want:
        assert f"splat: warning: {w}" in err
    assert tomllib.loads(out)["backend"]["raster_backward"] == "tg"


def test_check_reports_every_error(scene_dir, capsys):
    bad = scene_dir / "configs" / "bad.toml"
    bad.write_text('[data]\npath = "../scene"\nformat = "nope"\n'
                   '[train]\nsteps = -1\ndensify_every = "x"\nbogus = 1\n'
                   '[backend]\nraster_backward = "fast"\n'
                   '[output]\nrender_views = -2\n')
    expected = splat.check_config(bad)
    assert len(expected) >= 6
    rc, out, err = run_cli(capsys, "check", "--config", bad)
    assert rc == 1
    assert out == ""
    lines = err.strip().splitlines()
    assert all(ln.startswith("splat: error: ") for ln in lines) and "Traceback" not in err
    for e in expected:
        assert any(e in ln for ln in lines), e
    for key in ("data.format", "train.steps", "train.densify_every", "train.bogus", "backend.raster_backward",
                "output.render_views"):
        assert key in err, key
    # training refuses the same config, listing every error too
    rc, out, err = run_cli(capsys, "train", "--config", bad)
    assert_user_error(rc, err, "train.steps", "backend.raster_backward", lines=len(expected))

    missing = scene_dir / "configs" / "missing_data.toml"
    missing.write_text('[data]\npath = "../nowhere"\n')
    rc, out, err = run_cli(capsys, "check", "--config", missing)
    assert rc == 1 and "data.path" in err


# --------------------------------------------------------------------------- user errors


def test_user_errors(run, scene_dir, tmp_path, capsys):
    rc, _, err = run_cli(capsys, "train", "--config", tmp_path / "nope.toml")
    assert_user_error(rc, err, "nope.toml", "not found")

    (tmp_path / "broken.toml").write_text("[train\nsteps = 3\n")
    rc, _, err = run_cli(capsys, "check", "--config", tmp_path / "broken.toml")
    assert_user_error(rc, err, "invalid TOML", lines=2)          # the problem, then the count

    corrupt = tmp_path / "corrupt.npz"
    corrupt.write_bytes(b"not a checkpoint at all")
    rc, _, err = run_cli(capsys, "eval", "--checkpoint", corrupt, "--data", scene_dir / "scene")
    assert_user_error(rc, err, "corrupt.npz")

    rc, _, err = run_cli(capsys, "render", "--checkpoint", tmp_path / "missing.npz", "--data", scene_dir / "scene")
    assert_user_error(rc, err, "missing.npz")

    rc, _, err = run_cli(capsys, "eval", "--checkpoint", run / "checkpoint.npz", "--data", tmp_path / "nodata")
    assert_user_error(rc, err, "nodata")

    rc, _, err = run_cli(capsys, "eval", "--checkpoint", run / "checkpoint.npz", "--data", scene_dir / "scene",
                         "--frames", "40")
    assert_user_error(rc, err, "frames")

    # a scene whose image is not a PNG
    import shutil
    bad_scene = tmp_path / "bad_scene"
    shutil.copytree(scene_dir / "scene", bad_scene)
    victim = sorted((bad_scene / "train").glob("*.png"))[0]
    victim.write_bytes(b"garbage")
    cfg = tmp_path / "bad_scene.toml"
    cfg.write_text(f'[data]\npath = {json.dumps(str(bad_scene))}\n[backend]\nbackend = "cpu"\n'
                   f'[output]\ndir = {json.dumps(str(tmp_path / "bad_run"))}\n')
    rc, _, err = run_cli(capsys, "train", "--config", cfg, "--quiet")
    assert_user_error(rc, err, victim.name)

    if not splat.backend_available("metal")[0]:
        rc, _, err = run_cli(capsys, "train", "--steps", 5, "--backend", "metal", "--out", tmp_path / "m", "--quiet")
        assert_user_error(rc, err, "metal")


def test_python_dash_m(tmp_path):
    """`python -m splat` is the same program; a user error is one line and exit status 1."""
    env = dict(os.environ)
    env.pop("SPLAT_DEBUG", None)
    corrupt = tmp_path / "c.npz"
    corrupt.write_bytes(b"\x00" * 10)
    p = subprocess.run([sys.executable, "-m", "splat", "eval", "--checkpoint", str(corrupt), "--data",
                        str(tmp_path)], capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)
    assert p.returncode == 1
    lines = [ln for ln in p.stderr.strip().splitlines() if not ln.startswith("splat: warning: ")]  # e.g. no GPU
    assert len(lines) == 1 and lines[0].startswith("splat: error: "), p.stderr
    p = subprocess.run([sys.executable, "-m", "splat", "--version"], capture_output=True, text=True, env=env,
                       timeout=120)
    assert p.returncode == 0 and p.stdout.startswith("splat ")


@pytest.mark.skipif(not NATIVE, reason="native module not built")
@pytest.mark.parametrize("key,views", [("train_frames", 8), ("test_frames", 4)])
def test_a_frame_selection_that_selects_nothing_names_its_key(tmp_path, capsys, key, views):
    scene = tmp_path / "scene"
    write_blender_scene(scene, SIZE, n_test_views=4)
    rc, out, err = run_cli(capsys, "train", scene, "--set", f'data.{key}="50:"', "--steps", "2", "--backend", "cpu",
                           "--out", tmp_path / "run", "--quiet")
    assert_user_error(rc, err, f"data.{key}: slice(50, None, None) selects no view out of {views}")
    assert not (tmp_path / "run" / "metrics.json").exists()
