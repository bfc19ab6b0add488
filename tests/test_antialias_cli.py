"""[train] antialiased end to end: a short antialiased training run whose stored config
reaches the trainer's render, `splat eval` and `splat render` of its run folder,
checkpoint and PLY; --antialiased / --no-antialiased override it (a PLY alone
carries no mode)."""
from __future__ import annotations

import json
import os
import shutil
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _pkg import NATIVE, splat  # noqa: E402
from _scenes import write_blender_scene  # noqa: E402

pytestmark = pytest.mark.skipif(not NATIVE, reason="needs the native module splat._core")

if NATIVE:
    from splat import cli  # noqa: E402
    from splat.data import load_dataset  # noqa: E402

SIZE = 32
TOML = """\
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
antialiased = true

[backend]
backend = "cpu"

[output]
dir = {out}
eval_steps = [30]
checkpoint_steps = [30]
render_views = 1
"""


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    root = tmp_path_factory.mktemp("aa")
    write_blender_scene(root / "scene", SIZE, n_test_views=3)
    (root / "configs").mkdir()
    cfg = root / "configs" / "aa.toml"
    cfg.write_text(TOML.format(out=json.dumps(str(root / "run"))))
    assert cli.main(["train", "--config", str(cfg), "--quiet"]) == 0
    return root


def _eval(capsys, tmp_path, *argv):
    out = tmp_path / f"e{len(list(tmp_path.glob('e*.json')))}.json"
    rc = cli.main(["eval", *map(str, argv), "--json", str(out)])
    err = capsys.readouterr().err
    assert rc == 0, err
    return json.loads(out.read_text())


def test_stored_mode_reaches_eval(run, tmp_path, capsys):
    root = run
    m = json.loads((root / "run" / "metrics.json").read_text())
    data = root / "scene"
    ck = _eval(capsys, tmp_path, "--checkpoint", root / "run" / "checkpoint.npz", "--data", data)
    assert ck["antialiased"] is True
    assert ck["psnr"] == pytest.approx(m["psnr"], abs=1e-6)
    folder = _eval(capsys, tmp_path, root / "run", "--data", data)        # its PLY and config.toml
    assert folder["antialiased"] is True
    assert folder["psnr"] == pytest.approx(m["psnr"], abs=1e-3)
    classic = _eval(capsys, tmp_path, root / "run", "--data", data, "--no-antialiased")
    assert classic["antialiased"] is False
    assert abs(classic["psnr"] - folder["psnr"]) > 1e-3, "the mode changed nothing"
    ck_classic = _eval(capsys, tmp_path, "--checkpoint", root / "run" / "checkpoint.npz", "--data", data,
                       "--no-antialiased")
    assert ck_classic["psnr"] == pytest.approx(classic["psnr"], abs=1e-3)
    # A PLY away from its run folder carries no mode: classic unless told.
    lone = tmp_path / "lone"
    lone.mkdir()
    shutil.copy(root / "run" / "point_cloud.ply", lone / "scene.ply")
    bare = _eval(capsys, tmp_path, lone / "scene.ply", "--data", data)
    assert bare["antialiased"] is False and bare["psnr"] == pytest.approx(classic["psnr"], abs=1e-6)
    told = _eval(capsys, tmp_path, lone / "scene.ply", "--data", data, "--antialiased")
    assert told["psnr"] == pytest.approx(folder["psnr"], abs=1e-6)


def test_stored_mode_reaches_render(run, tmp_path, capsys):
    from PIL import Image
    root = run
    imgs = {}
    for flag in ("--antialiased", "--no-antialiased", None):
        out = tmp_path / str(flag)
        argv = ["render", str(root / "run"), "--data", str(root / "scene"), "--frames", "0", "--out", str(out),
                "--quiet"] + ([flag] if flag else [])
        assert cli.main(argv) == 0, capsys.readouterr().err
        (png,) = out.glob("*.png")
        with Image.open(png) as im:
            imgs[flag] = np.asarray(im).astype(int)
    assert np.array_equal(imgs[None], imgs["--antialiased"])
    assert np.abs(imgs[None] - imgs["--no-antialiased"]).max() > 0


def test_trainer_renders_and_trains_in_its_mode(run):
    """Trainer.render of an antialiased run is the antialiased rasterizer's image of its
    Gaussians; the mode round-trips through the checkpoint's config."""
    root = run
    data = load_dataset(root / "scene", "test")
    trainer = splat.Trainer.load_checkpoint(root / "run" / "checkpoint.npz", data,
                                            splat.BackendConfig(backend="cpu"))
    assert trainer.config.antialiased is True
    g = trainer.gaussians()
    cam = data.cameras[0]
    got = trainer.render(cam)
    r = splat.Rasterizer(splat.BackendConfig(backend="cpu"))
    bg = np.asarray(data.background, np.float32)
    aa = r.forward(g, cam, g.sh_degree, bg, antialiased=True).image
    classic = r.forward(g, cam, g.sh_degree, bg).image
    assert np.abs(got - aa).max() <= 1e-5
    assert np.abs(got - classic).max() > 1e-3


def test_bad_value_is_a_config_error(tmp_path, capsys):
    cfg = tmp_path / "bad.toml"
    cfg.write_text('[train]\nantialiased = "yes"\n')
    rc = cli.main(["check", "--config", str(cfg)])
    err = capsys.readouterr().err
    assert rc == 1 and "train.antialiased" in err and "Traceback" not in err, err
