"""`[train] preset`: the fast preset gives its values to the keys a config leaves
out, explicit keys win, it round-trips through config.toml, and `--fast` sets it
from the command line (with clear errors where it cannot apply). A scene that
starts from random points (Blender) gets the preset's MCMC recipe on top, unless
the config chooses the strategy or the keys itself."""
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
from splat.config import PRESETS, PRESETS_RANDOM_START, TrainConfig  # noqa: E402
from splat.data import synthetic  # noqa: E402
from splat.recipe import describe, mode_warnings, recipe_warnings  # noqa: E402
from test_bench_real import make_scene as make_capture  # noqa: E402

rng = np.random.default_rng()
FAST = PRESETS["fast"]
FAST_RANDOM = PRESETS_RANDOM_START["fast"]


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


def test_kept_keys_are_the_ones_a_config_sets_and_survive_a_preset():
    steps, seed = int(rng.integers(4000, 20000)), int(rng.integers(1, 2**31))
    cfg = TrainConfig(preset="fast", steps=steps, seed=seed)
    assert cfg.kept_keys() == {"preset": "fast", "steps": steps, "seed": seed}
    # Applying a preset's keys keeps the config's own and records the result as given.
    extra = {"steps": 123, "strategy": "mcmc", "max_gaussians": int(rng.integers(10_000, 90_000))}
    out = cfg.with_preset_keys(extra)
    assert (out.steps, out.seed, out.strategy, out.max_gaussians) == (steps, seed, "mcmc", extra["max_gaussians"])
    assert out.with_preset_keys({"steps": 7, "strategy": "default"}).to_dict() == out.to_dict()
    # A key changed after construction counts as kept.
    cfg.densify_until = int(rng.integers(100, 900))
    assert cfg.kept_keys()["densify_until"] == cfg.densify_until


def test_a_random_start_takes_the_presets_mcmc_recipe_unless_the_config_says_otherwise():
    fast = TrainConfig(preset="fast")
    resolved = fast.for_random_start()
    assert resolved.strategy == "mcmc" and all(getattr(resolved, k) == v for k, v in FAST_RANDOM.items())
    assert all(getattr(resolved, k) == v for k, v in FAST.items() if k not in FAST_RANDOM)
    assert resolved.for_random_start() == resolved and fast == TrainConfig(preset="fast")  # fast itself unchanged
    assert recipe_warnings(resolved, "blender") == []
    # More random points than the budget: said, for a scene that starts from them only.
    over = int(rng.integers(FAST_RANDOM["max_gaussians"] + 1, 2 * FAST_RANDOM["max_gaussians"]))
    crowded = TrainConfig(preset="fast", init_points=over).for_random_start()
    assert [w for w in recipe_warnings(crowded, "blender") if w.startswith("train.init_points:")]
    assert not [w for w in recipe_warnings(crowded, "colmap") if w.startswith("train.init_points:")]
    # Keys set explicitly win, in the constructor, by assignment afterwards, or in a TOML table,
    # even where the value is the plain preset's own.
    steps, budget = int(rng.integers(1000, 9000)), int(rng.integers(10_000, 500_000))
    mine = TrainConfig(preset="fast", steps=steps, max_gaussians=budget).for_random_start()
    assert (mine.steps, mine.max_gaussians, mine.strategy) == (steps, budget, "mcmc")
    assigned = TrainConfig(preset="fast")
    assigned.steps = steps
    assert assigned.for_random_start().steps == steps
    assert TrainConfig(preset="fast", steps=FAST["steps"]).for_random_start().steps == FAST["steps"]
    from_toml = splat.Config.from_dict({"train": {"preset": "fast", "mcmc_growth": 0.02}}).train.for_random_start()
    assert from_toml.mcmc_growth == 0.02 and from_toml.steps == FAST_RANDOM["steps"]
    # A strategy chosen explicitly keeps the plain preset; other presets have no such recipe.
    for strategy in ("default", "mcmc"):
        own = TrainConfig(preset="fast", strategy=strategy)
        assert own.for_random_start() is own
    # The plain preset's random start prunes by blend weight when densification ends,
    # unless the config says otherwise.
    plain = TrainConfig()
    assert plain.for_random_start().prune_low_weight == PRESETS_RANDOM_START["default"]["prune_low_weight"] > 0
    assert plain.prune_low_weight == 0.0
    assert TrainConfig(prune_low_weight=0.0).for_random_start().prune_low_weight == 0.0
    assert TrainConfig(prune_low_weight=0.25).for_random_start().prune_low_weight == 0.25
    assert any("starts from random points" in line for line in describe(resolved, "blender"))
    assert not any("random points" in line for line in describe(resolved, "colmap"))


def test_the_trainer_resolves_the_random_start_and_keeps_a_point_cloud_on_the_plain_preset():
    from splat.data import synthetic
    train, _ = synthetic.make_scene(n_gaussians=40, n_views=2, width=16, height=16, n_test_views=1)
    cfg = TrainConfig(preset="fast", init_points=int(rng.integers(100, 400)))
    train.points = train.point_colors = None   # as a Blender scene: no point cloud
    random_start = splat.Trainer.from_dataset(train, cfg, splat.BackendConfig(backend="cpu"))
    assert random_start.config == cfg.for_random_start() and random_start.config.strategy == "mcmc"
    assert random_start.num_gaussians == cfg.init_points
    points = rng.normal(size=(int(rng.integers(50, 200)), 3)).astype(np.float32) * 0.3
    train.points, train.point_colors = points, rng.uniform(0, 1, points.shape).astype(np.float32)
    seeded = splat.Trainer.from_dataset(train, cfg, splat.BackendConfig(backend="cpu"))
    assert seeded.config == cfg and seeded.config.strategy == "default" and seeded.num_gaussians == len(points)


def _scene(tmp_path):
    train, test = synthetic.make_scene(n_gaussians=60, n_views=3, width=16, height=16, n_test_views=1)
    return synthetic.write_blender(tmp_path / "scene", {"train": train, "test": test})


def test_splat_check_fast_resolves_the_preset_and_set_still_wins(tmp_path, capsys):
    scene = _scene(tmp_path)
    capture = make_capture(tmp_path / "capture")
    rc, out, err = run_cli(capsys, "check", capture, "--fast", "--backend", "cpu")
    assert rc == 0, err
    train = tomllib.loads("\n".join(ln for ln in out.splitlines() if not ln.startswith("#")))["train"]
    assert train["preset"] == "fast" and all(train[k] == v for k, v in FAST.items())
    assert train["strategy"] == "default"
    # A Blender scene starts from random points: the preset's MCMC recipe, said in the comments.
    rc, out, err = run_cli(capsys, "check", scene, "--fast", "--backend", "cpu")
    assert rc == 0, err
    train = tomllib.loads("\n".join(ln for ln in out.splitlines() if not ln.startswith("#")))["train"]
    expected = dict(FAST, **FAST_RANDOM)
    assert train["preset"] == "fast" and all(train[k] == v for k, v in expected.items())
    assert "# preset: fast on a scene that starts from random points" in out
    assert "# strategy: mcmc:" in out
    steps = int(rng.integers(100, 9000))
    for how in (["--set", f"train.steps={steps}"], ["--steps", str(steps)]):
        rc, out, err = run_cli(capsys, "check", scene, "--fast", *how, "--backend", "cpu")
        train = tomllib.loads("\n".join(ln for ln in out.splitlines() if not ln.startswith("#")))["train"]
        assert rc == 0 and train["steps"] == steps and train["mcmc_growth"] == FAST_RANDOM["mcmc_growth"], how
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
    # A Blender scene: the preset's recipe for a random start (MCMC, FAST_RANDOM's steps).
    assert metrics["steps"] == FAST_RANDOM["steps"] and metrics["finished"] is True
    assert [e["step"] for e in metrics["evals"]] == [FAST_RANDOM["steps"]]
    assert 0 < metrics["num_gaussians"] <= FAST_RANDOM["max_gaussians"]
    saved = splat.load_config(out_dir / "config.toml", check_paths=False).train
    assert saved.strategy == "mcmc" and all(getattr(saved, k) == v for k, v in FAST_RANDOM.items())
    assert saved.init_points == 300 and saved.sh_degree_interval == FAST["sh_degree_interval"]
    assert saved.for_random_start() == saved   # read back, it is the recipe as run
    # Steps given explicitly past the evaluations it lists are still reported.
    rc, out, err = run_cli(capsys, "train", scene, "--fast", "--backend", "cpu", "--quiet", "--out",
                           tmp_path / "short", "--steps", "5", "--set", "output.eval_steps=[3, 9]",
                           "--set", "train.init_points=50")
    assert rc == 0, err
    assert "steps [9] are past train.steps = 5" in err
