"""What a capture of an object gets without opacity resets: the default preset's
clone / split threshold becomes 0.0004 (PRESETS_OBJECT_CAPTURE), for the keys a
config leaves to its preset; every other scene, recipe and explicit key keeps
its value. Oracles: the rule written out here case by case, a TOML round trip,
and what `splat train` records and `splat check` prints."""
import numpy as np
import pytest

import splat
from splat.config import PRESETS, load_config
from splat.recipe import describe
from splat.schedule import CAPTURE_FORMATS, capture_recipe, object_capture_keys
from _pkg import NATIVE
from test_opacity_reset_mode import _capture

native = pytest.mark.skipif(not NATIVE, reason="needs the native module splat._core")
DEFAULT = splat.TrainConfig().densify_grad_threshold
OBJECT = 4e-4


def test_the_threshold_rises_only_for_an_object_capture_without_resets():
    assert DEFAULT == 2e-4
    for fmt in CAPTURE_FORMATS:
        assert capture_recipe(splat.TrainConfig(), fmt, "object").densify_grad_threshold == OBJECT
        assert capture_recipe(splat.TrainConfig(opacity_reset="off"), fmt, "object").densify_grad_threshold == OBJECT
        for cfg, layout in ((splat.TrainConfig(), "open"), (splat.TrainConfig(), None),
                            (splat.TrainConfig(opacity_reset="on"), "object"),
                            (splat.TrainConfig(opacity_reset="off"), "open"),
                            (splat.TrainConfig(strategy="mcmc"), "object"),
                            (splat.TrainConfig(absgrad=True), "object")):
            out = capture_recipe(cfg, fmt, layout)
            assert out is cfg and object_capture_keys(cfg, fmt, layout) == {}, (fmt, layout)
    for fmt in ("blender", None):
        assert capture_recipe(splat.TrainConfig(), fmt, "object").densify_grad_threshold == DEFAULT
    # The fast preset keeps its own threshold.
    fast = splat.TrainConfig(preset="fast")
    assert capture_recipe(fast, "colmap", "object").densify_grad_threshold == PRESETS["fast"]["densify_grad_threshold"]


def test_keys_set_explicitly_win_and_a_second_call_changes_nothing():
    rng = np.random.default_rng()
    mine = float(rng.uniform(1e-4, 9e-4))
    for given in (DEFAULT, mine):   # the default's own value too, when set
        cfg = splat.TrainConfig(densify_grad_threshold=given)
        assert capture_recipe(cfg, "colmap", "object").densify_grad_threshold == given
    steps = int(rng.integers(1000, 40000))
    once = capture_recipe(splat.TrainConfig(steps=steps), "nerfstudio", "object")
    twice = capture_recipe(once, "nerfstudio", "object")
    assert once.densify_grad_threshold == twice.densify_grad_threshold == OBJECT
    assert once.steps == twice.steps == steps and once.to_dict() == twice.to_dict()
    # A value changed after construction counts as set.
    later = splat.TrainConfig()
    later.densify_grad_threshold = mine
    assert capture_recipe(later, "colmap", "object").densify_grad_threshold == mine


def test_a_config_file_leaving_the_key_out_gets_the_capture_value(tmp_path):
    left_out = tmp_path / "a.toml"
    left_out.write_text("[data]\npath = \"scene\"\n[train]\nsteps = 500\n")
    set_in = tmp_path / "b.toml"
    set_in.write_text(f"[data]\npath = \"scene\"\n[train]\nsteps = 500\ndensify_grad_threshold = {DEFAULT}\n")
    assert capture_recipe(load_config(left_out, check_paths=False).train, "colmap", "object").densify_grad_threshold == OBJECT
    assert capture_recipe(load_config(set_in, check_paths=False).train, "colmap", "object").densify_grad_threshold == DEFAULT


def test_describe_names_the_rule_where_it_applies():
    cfg = capture_recipe(splat.TrainConfig(), "colmap", "object")
    lines = describe(cfg, "colmap", "object")
    assert any(x.startswith("preset: default on a capture of an object without opacity resets") and "0.0004" in x
               for x in lines), lines
    strategy = next(x for x in lines if x.startswith("strategy: default"))
    assert "the screen-space gradient above 0.0004" in strategy
    for where in (("colmap", "open"), ("blender", "object")):
        assert not any("capture of an object" in x for x in describe(splat.TrainConfig(), *where)), where


@native
@pytest.mark.filterwarnings("ignore:.*SfM points")   # the small capture starts from random points too
@pytest.mark.parametrize("outward", [False, True], ids=["object", "open"])
def test_from_dataset_trains_with_the_scene_recipe(tmp_path, outward):
    rng = np.random.default_rng()
    ds = splat.load_dataset(_capture(tmp_path / "cap", outward, rng), "train")
    cfg = splat.TrainConfig(steps=20, init_points=200)
    tr = splat.Trainer.from_dataset(ds, cfg, splat.BackendConfig(backend="cpu"))
    assert tr.camera_layout == ("open" if outward else "object")
    assert tr.config.densify_grad_threshold == (DEFAULT if outward else OBJECT)
    assert tr.config.steps == 20 and tr.config.init_points == 200
    assert cfg.densify_grad_threshold == DEFAULT   # the caller's config is left as it was
    mine = splat.TrainConfig(steps=20, init_points=200, densify_grad_threshold=DEFAULT)
    assert splat.Trainer.from_dataset(ds, mine, splat.BackendConfig(backend="cpu")).config \
        .densify_grad_threshold == DEFAULT


@native
def test_splat_train_records_and_check_prints_the_capture_value(tmp_path, capsys):
    from _cli import run_cli
    rng = np.random.default_rng()
    scene = _capture(tmp_path / "cap", False, rng)
    rc, out, err = run_cli(capsys, "check", scene)
    assert rc == 0, err
    line = next(x for x in out.splitlines() if x.startswith("# strategy: default"))
    assert "the screen-space gradient above 0.0004" in line, line
    run = tmp_path / "run"
    rc, out, err = run_cli(capsys, "train", scene, "--steps", "3", "--backend", "cpu", "--out", str(run),
                           "--set", "train.init_points=200")
    assert rc == 0, err
    assert "clone / split above a gradient of 0.0004" in out
    assert load_config(run / "config.toml", check_paths=False).train.densify_grad_threshold == OBJECT
    # The run resumes with the recipe it recorded.
    rc, out, err = run_cli(capsys, "train", "--resume", str(run), "--steps", "5", "--backend", "cpu")
    assert rc == 0, err
    assert load_config(run / "config.toml", check_paths=False).train.densify_grad_threshold == OBJECT
