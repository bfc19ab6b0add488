"""The built-in synthetic scene through the command line: a run of it (`splat train`
with no PATH, also with `--set`) can be evaluated and rendered against its views
without a dataset folder, since the views are regenerated from the scene's recipe."""
from __future__ import annotations

import json
import os
import sys

import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _pkg import NATIVE  # noqa: E402
from _cli import assert_user_error, run_cli  # noqa: E402

pytestmark = pytest.mark.skipif(not NATIVE, reason="needs the native module splat._core")


@pytest.fixture(scope="module")
def builtin_run(tmp_path_factory):
    """A short run of the built-in scene, trained once for the module."""
    from splat import cli
    out = tmp_path_factory.mktemp("builtin") / "synthetic"
    rc = cli.main(["train", "--steps", "30", "--out", str(out), "--backend", "cpu", "--quiet"])
    assert rc == 0
    return out


def test_eval_of_the_builtin_scene_run_repeats_its_evaluation(builtin_run, tmp_path, capsys):
    m = json.loads((builtin_run / "metrics.json").read_text())
    got = tmp_path / "eval.json"
    for source in (builtin_run, builtin_run / "checkpoint.npz", builtin_run / "point_cloud.ply"):
        rc, printed, err = run_cli(capsys, "eval", source, "--backend", "cpu", "--json", got, "--quiet")
        assert rc == 0, err
        e = json.loads(got.read_text())
        assert e["psnr"] == pytest.approx(m["psnr"], abs=1e-4), source
        assert [v["name"] for v in e["per_view"]] == [v["name"] for v in m["per_view"]]
        assert e["split"] == "test" and e["data"] == "synthetic"
        assert "built-in synthetic scene [test]" in printed
    rc, _, err = run_cli(capsys, "eval", builtin_run, "--backend", "cpu", "--json", got, "--quiet",
                         "--split", "train", "--frames", "0::12")
    assert rc == 0, err
    e = json.loads(got.read_text())
    assert e["split"] == "train" and len(e["per_view"]) == 4
    # the built-in scene has no images on disk to downscale: one line saying so
    rc, _, err = run_cli(capsys, "eval", builtin_run, "--backend", "cpu", "--downscale", 2, "--quiet")
    assert_user_error(rc, err, "--downscale", "built-in")


def test_render_compare_of_the_builtin_scene_run(builtin_run, tmp_path, capsys):
    out = tmp_path / "cmp"
    rc, printed, err = run_cli(capsys, "render", builtin_run, "--path", "test", "--compare", "--out", out,
                               "--backend", "cpu", "--quiet")
    assert rc == 0, err
    assert len(list(out.glob("*.png"))) == 8
    assert "built-in synthetic scene [test]" in printed


def test_set_without_a_path_trains_the_builtin_scene(tmp_path, capsys):
    out = tmp_path / "syn"
    rc, printed, err = run_cli(capsys, "train", "--set", "train.steps=16", "--set", "output.render_views=0",
                               "--out", out, "--backend", "cpu", "--quiet")
    assert rc == 0, err
    m = json.loads((out / "metrics.json").read_text())
    assert m["scene"] == "synthetic" and m["steps"] == 16
    assert [e["step"] for e in m["evals"]] == [2 * k for k in range(1, 9)]   # scaled to the steps, as --steps
    assert not (out / "renders").exists()
    # --steps wins over --set train.steps, as for a config
    rc, _, err = run_cli(capsys, "train", "--set", "train.steps=16", "--steps", 8, "--out", tmp_path / "b",
                         "--backend", "cpu", "--quiet")
    assert rc == 0, err
    assert json.loads((tmp_path / "b" / "metrics.json").read_text())["steps"] == 8
    # [data] keys have nothing to apply to without a scene folder
    rc, _, err = run_cli(capsys, "train", "--set", "data.downscale=2", "--out", tmp_path / "c", "--quiet")
    assert_user_error(rc, err, "data.downscale", "PATH")
    assert not (tmp_path / "c").exists()
    # a bad value is reported like one in a config
    rc, _, err = run_cli(capsys, "train", "--set", "train.steps=-3", "--out", tmp_path / "d", "--quiet")
    assert_user_error(rc, err, "train.steps")
