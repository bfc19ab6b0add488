"""`[train] preset`: the fast preset gives its values to the keys a config leaves
out, explicit keys win, it round-trips through config.toml, and `--fast` sets it
from the command line (with clear errors where it cannot apply)."""
from __future__ import annotations

import json
import os
import sys
import tomllib

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _pkg import splat  # noqa: E402
from _cli import assert_user_error, run_cli  # noqa: E402
from splat.config import PRESETS, TrainConfig  # noqa: E402
from splat.data import synthetic  # noqa: E402
from splat.recipe import describe, mode_warnings, recipe_warnings  # noqa: E402

rng = np.random.default_rng()
FAST = PRESETS["fast"]


def test_the_fast_preset_fills_only_the_keys_left_out():
    base, fast = TrainConfig(), TrainConfig(preset="fast")
    for key, value in FAST.items():
        assert getattr(fast, key) == value and getattr(base, key) != value, key
    untouched = [k for k in base.to_dict() if k not in FAST and k != "preset"]
    assert all(getattr(fast, k) == getattr(base, k) for k in untouched)
    steps, until = int(rng.integers(4000, 20000)), int(rng.integers(1000, 3000))
    mixed = TrainConfig(preset="fast", steps=steps, densify_until=until)
    assert (mixed.steps, mixed.densify_until) == (steps, until)
    assert mixed.opacity_reset_every == FAST["opacity_reset_every"]
    # Its own schedule is consistent: no warning, and its values are not "changes" the modes flag.
    assert recipe_warnings(fast) == [] and mode_warnings(TrainConfig(preset="fast", strategy="mcmc")) == []
    assert describe(fast)[0].startswith("preset: fast:") and not describe(base)[0].startswith("preset")
    with pytest.raises(splat.ConfigError, match="train.preset: expected one of 'default', 'fast'"):
        TrainConfig(preset="turbo")


def _scene(tmp_path):
    train, test = synthetic.make_scene(n_gaussians=60, n_views=3, width=16, height=16, n_test_views=1)
    return synthetic.write_blender(tmp_path / "scene", {"train": train, "test": test})


def test_splat_check_fast_resolves_the_preset_and_set_still_wins(tmp_path, capsys):
    scene = _scene(tmp_path)
    rc, out, err = run_cli(capsys, "check", scene, "--fast", "--backend", "cpu")
    assert rc == 0, err
    train = tomllib.loads("\n".join(ln for ln in out.splitlines() if not ln.startswith("#")))["train"]
    assert train["preset"] == "fast" and all(train[k] == v for k, v in FAST.items())
    steps = int(rng.integers(100, 9000))
    rc, out, err = run_cli(capsys, "check", scene, "--fast", "--set", f"train.steps={steps}", "--backend", "cpu")
    train = tomllib.loads("\n".join(ln for ln in out.splitlines() if not ln.startswith("#")))["train"]
    assert rc == 0 and train["steps"] == steps and train["densify_until"] == FAST["densify_until"]
    rc, out, err = run_cli(capsys, "check", scene, "--fast", "--set", "train.preset=default")
    assert_user_error(rc, err, "--fast", "train.preset=default")


def test_fast_is_refused_where_it_cannot_apply(tmp_path, capsys):
    rc, out, err = run_cli(capsys, "train", "--fast", "--out", tmp_path / "builtin")
    assert_user_error(rc, err, "--fast", "built-in scene")
    rc, out, err = run_cli(capsys, "train", "--set", "train.preset=fast", "--out", tmp_path / "builtin")
    assert_user_error(rc, err, "--set train.preset", "built-in scene")
    rc, out, err = run_cli(capsys, "train", "--resume", tmp_path / "nowhere", "--fast")
    assert rc == 1 and "Traceback" not in err and "--fast" in err


def test_a_fast_run_trains_the_preset_and_its_config_reads_back_to_it(tmp_path, capsys):
    """A whole fast run on the CPU (tiny scene): it trains the preset's steps, evaluates
    at its end without a note about the default's evaluation steps, and its config.toml
    reads back to the same recipe."""
    scene, out_dir = _scene(tmp_path), tmp_path / "run"
    rc, out, err = run_cli(capsys, "train", scene, "--fast", "--backend", "cpu", "--quiet", "--out", out_dir,
                           "--set", "train.init_points=300", "--set", "output.save_ply=false")
    assert rc == 0, err
    assert "past train.steps" not in err
    metrics = json.loads((out_dir / "metrics.json").read_text())
    assert metrics["steps"] == FAST["steps"] and metrics["finished"] is True
    assert [e["step"] for e in metrics["evals"]] == [FAST["steps"]]
    saved = splat.load_config(out_dir / "config.toml", check_paths=False).train
    assert saved == TrainConfig(preset="fast", init_points=300)
    # Steps given explicitly past the evaluations it lists are still reported.
    rc, out, err = run_cli(capsys, "train", scene, "--fast", "--backend", "cpu", "--quiet", "--out",
                           tmp_path / "short", "--steps", "5", "--set", "output.eval_steps=[3, 9]",
                           "--set", "train.init_points=50")
    assert rc == 0, err
    assert "steps [9] are past train.steps = 5" in err
