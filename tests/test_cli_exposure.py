"""`[train] exposure = true` through the command line: exposure.npy in the run
folder, `splat eval --exposure` on the training views, and its errors."""
from __future__ import annotations

import json
import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _pkg import NATIVE  # noqa: E402
from test_cli import TRAIN_TOML, assert_user_error, make_scene_dir, run_cli, write_config  # noqa: E402

pytestmark = pytest.mark.skipif(not NATIVE, reason="needs the native module splat._core")

if NATIVE:
    from splat import cli  # noqa: E402
    from splat.data import load_dataset  # noqa: E402
    from splat.exposure import apply_exposure  # noqa: E402
    from splat.trainer import Trainer  # noqa: E402


@pytest.fixture(scope="module")
def scene_dir(tmp_path_factory):
    return make_scene_dir(tmp_path_factory, "cli_exposure")


EXPOSURE_TOML = TRAIN_TOML.replace("[backend]", "exposure = true\nabsgrad = true\n\n[backend]")


@pytest.fixture(scope="module")
def exposure_run(scene_dir):
    out = scene_dir / "run_exposure"
    cfg = write_config(scene_dir, "exposure.toml", out, EXPOSURE_TOML)
    assert cli.main(["train", "--config", str(cfg), "--quiet"]) == 0
    return out


def test_train_writes_the_corrections(exposure_run, scene_dir):
    e = np.load(exposure_run / "exposure.npy")
    train = load_dataset(scene_dir / "scene", "train")
    assert e.shape == (len(train), 3, 4) and e.dtype == np.float32
    assert not np.allclose(e, np.eye(3, 4))   # learned, not the identity it started from
    from splat.trainer import read_checkpoint
    meta, arrays = read_checkpoint(exposure_run / "checkpoint.npz")
    np.testing.assert_array_equal(arrays["exposure"], e)
    assert meta["train_config"]["exposure"] is True and meta["train_config"]["absgrad"] is True


def test_eval_with_exposure_on_the_training_views(exposure_run, scene_dir, tmp_path, capsys):
    plain_json, corrected_json = tmp_path / "plain.json", tmp_path / "corrected.json"
    for extra, path in (((), plain_json), (("--exposure",), corrected_json)):
        rc, out, err = run_cli(capsys, "eval", exposure_run, "--data", scene_dir / "scene", "--split", "train",
                               "--json", path, *extra)
        assert rc == 0, err
    assert "with the learned exposure corrections" in out
    plain, corrected = json.loads(plain_json.read_text()), json.loads(corrected_json.read_text())
    assert corrected["exposure"] is True and plain["exposure"] is False
    # An independent computation of the first view's corrected PSNR.
    train = load_dataset(scene_dir / "scene", "train")
    tr = Trainer.load_checkpoint(exposure_run / "checkpoint.npz", train)
    e = np.load(exposure_run / "exposure.npy")
    render = apply_exposure(tr.render(train.cameras[0], background=train.background), e[0])
    target = train.images[0].astype(np.float32) / 255.0
    psnr = -10 * np.log10(np.mean((render.astype(np.float64) - target) ** 2))
    assert corrected["per_view"][0]["psnr"] == pytest.approx(psnr, abs=1e-3)
    assert corrected["per_view"][0]["psnr"] != plain["per_view"][0]["psnr"]


def test_eval_exposure_errors(exposure_run, scene_dir, capsys):
    rc, out, err = run_cli(capsys, "eval", exposure_run, "--data", scene_dir / "scene", "--exposure")
    assert_user_error(rc, err, "not a training view", "without --exposure")
    rc, out, err = run_cli(capsys, "eval", exposure_run / "checkpoint.npz", "--data", scene_dir / "scene",
                           "--split", "train", "--exposure")
    assert rc == 0, err
    # A run trained without exposure has no corrections to apply.
    plain = scene_dir / "run_plain"
    cfg = write_config(scene_dir, "plain.toml", plain, TRAIN_TOML.replace("steps = 30", "steps = 5"))
    assert cli.main(["train", "--config", str(cfg), "--quiet"]) == 0
    capsys.readouterr()
    rc, out, err = run_cli(capsys, "eval", plain, "--data", scene_dir / "scene", "--split", "train", "--exposure")
    assert_user_error(rc, err, "no learned colour corrections")


def test_eval_fit_exposure(exposure_run, scene_dir, tmp_path, capsys):
    path = tmp_path / "fit.json"
    rc, out, err = run_cli(capsys, "eval", exposure_run, "--data", scene_dir / "scene", "--fit-exposure",
                           "--json", path)
    assert rc == 0, err
    assert "exposure fitted on the left" in out
    result = json.loads(path.read_text())
    assert result["fit_exposure"] is True and result["exposure"] is False
    assert all(np.asarray(v["exposure"]).shape == (3, 4) for v in result["per_view"])
    rc, out, err = run_cli(capsys, "eval", exposure_run, "--data", scene_dir / "scene", "--split", "train",
                           "--exposure", "--fit-exposure")
    assert_user_error(rc, err, "--exposure, --fit-exposure: choose one")
