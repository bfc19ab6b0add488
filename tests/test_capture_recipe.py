"""What a capture gets with the opacity resets its camera layout gets (none around an
object, resets in an open scene): the default preset's clone / split threshold becomes
0.0006, densification stops at step 7000 and every rate but the means' decays to a tenth
after it (PRESETS_CAPTURE), for the keys a config leaves to its preset; every other scene, recipe and explicit key keeps
its value. Oracles: the rule written out here case by case, a TOML round trip,
and what `splat train` records and `splat check` prints."""
import numpy as np
import pytest

import splat
from splat.config import PRESETS, load_config
from splat.recipe import describe
from splat.schedule import CAPTURE_FORMATS, capture_keys, capture_recipe
from _pkg import NATIVE
from test_opacity_reset_mode import _capture

native = pytest.mark.skipif(not NATIVE, reason="needs the native module splat._core")
DEFAULT = splat.TrainConfig().densify_grad_threshold
CAPTURE = 6e-4
DEFAULT_UNTIL = splat.TrainConfig().densify_until
CAPTURE_UNTIL = 7000
CAPTURE_DECAY = 0.1   # lr_final_fraction for a capture (PRESETS_CAPTURE)
CAPTURE_NEAR = 0.3    # prune_near for a capture (PRESETS_CAPTURE; acts without resets only)


def test_the_keys_change_only_for_a_capture_with_its_layouts_resets():
    assert DEFAULT == 2e-4 and DEFAULT_UNTIL == 15000
    for fmt in CAPTURE_FORMATS:
        for cfg, layout in ((splat.TrainConfig(), "object"), (splat.TrainConfig(opacity_reset="off"), "object"),
                            (splat.TrainConfig(), "open"), (splat.TrainConfig(opacity_reset="on"), "open")):
            got = capture_recipe(cfg, fmt, layout)
            assert (got.densify_grad_threshold, got.densify_until) == (CAPTURE, CAPTURE_UNTIL), (fmt, layout)
            # The other rates decay once the count is settled, around an object and in an open scene.
            assert got.lr_final_fraction == CAPTURE_DECAY, (fmt, layout)
            assert got.prune_near == (CAPTURE_NEAR if layout == "object" else 0.0), (fmt, layout)
            changed = ("densify_grad_threshold", "densify_until", "lr_final_fraction", "prune_near")
            others = {k: v for k, v in got.to_dict().items() if k not in changed}
            assert others == {k: v for k, v in cfg.to_dict().items() if k not in changed}, (fmt, layout)
        # Not measured: a layout trained with the other reset mode, an unknown layout,
        # MCMC, absgrad.
        for cfg, layout in ((splat.TrainConfig(), None),
                            (splat.TrainConfig(opacity_reset="on"), "object"),
                            (splat.TrainConfig(opacity_reset="off"), "open"),
                            (splat.TrainConfig(strategy="mcmc"), "object"),
                            (splat.TrainConfig(strategy="mcmc"), "open"),
                            (splat.TrainConfig(absgrad=True), "object"),
                            (splat.TrainConfig(absgrad=True), "open")):
            out = capture_recipe(cfg, fmt, layout)
            assert out is cfg and capture_keys(cfg, fmt, layout) == {}, (fmt, layout)
            assert (out.densify_grad_threshold, out.densify_until) == (cfg.densify_grad_threshold, cfg.densify_until)
            assert out.lr_final_fraction == 1.0 and out.prune_near == 0.0
    for fmt in ("blender", None):
        got = capture_recipe(splat.TrainConfig(), fmt, "object")
        assert (got.densify_grad_threshold, got.densify_until) == (DEFAULT, DEFAULT_UNTIL), fmt
    # The fast preset keeps its own densification keys.
    fast = capture_recipe(splat.TrainConfig(preset="fast"), "colmap", "object")
    assert fast.densify_grad_threshold == PRESETS["fast"]["densify_grad_threshold"]
    assert fast.densify_until == PRESETS["fast"]["densify_until"]
    assert fast.lr_final_fraction == PRESETS["fast"]["lr_final_fraction"] == 0.1   # the preset's own


def test_the_fast_preset_gives_a_capture_the_resolution_schedule():
    rng = np.random.default_rng()
    plain = splat.TrainConfig(preset="fast")
    assert (plain.num_downscales, plain.resolution_schedule) == (0, 3000)   # the config's own defaults
    for fmt in CAPTURE_FORMATS:
        for layout in ("object", "open"):
            got = capture_recipe(splat.TrainConfig(preset="fast"), fmt, layout)
            assert (got.num_downscales, got.resolution_schedule) == (2, 1000), (fmt, layout)
            assert {k: v for k, v in got.to_dict().items() if k not in ("num_downscales", "resolution_schedule")} \
                == {k: v for k, v in plain.to_dict().items() if k not in ("num_downscales", "resolution_schedule")}
    # Not for a Blender scene, MCMC, or a recipe the schedule cannot train (exposure);
    # a key set explicitly wins, each on its own.
    for cfg, fmt in ((splat.TrainConfig(preset="fast"), "blender"),
                     (splat.TrainConfig(preset="fast", strategy="mcmc"), "colmap"),
                     (splat.TrainConfig(preset="fast", exposure=True), "colmap"),
                     (splat.TrainConfig(preset="fast", num_downscales=0), "colmap")):
        got = capture_recipe(cfg, fmt, "object")
        assert got.num_downscales == cfg.num_downscales and got.resolution_schedule == cfg.resolution_schedule, cfg
    n = int(rng.integers(100, 2000))
    got = capture_recipe(splat.TrainConfig(preset="fast", resolution_schedule=n), "nerfstudio", "object")
    assert (got.num_downscales, got.resolution_schedule) == (2, n)
    lines = describe(capture_recipe(splat.TrainConfig(preset="fast"), "colmap", "object"), "colmap", "object")
    assert any(x.startswith("preset: fast on a capture") and "num_downscales 2, resolution_schedule 1000" in x
               for x in lines), lines


def test_keys_set_explicitly_win_and_a_second_call_changes_nothing():
    rng = np.random.default_rng()
    mine = float(rng.uniform(1e-4, 9e-4))
    for given in (DEFAULT, mine):   # the default's own value too, when set
        cfg = splat.TrainConfig(densify_grad_threshold=given)
        got = capture_recipe(cfg, "colmap", "object")
        assert (got.densify_grad_threshold, got.densify_until) == (given, CAPTURE_UNTIL)   # each key on its own
    until = int(rng.integers(1000, 20000))
    for given in (DEFAULT_UNTIL, until):
        got = capture_recipe(splat.TrainConfig(densify_until=given), "colmap", "object")
        assert (got.densify_grad_threshold, got.densify_until) == (CAPTURE, given)
    steps = int(rng.integers(1000, 40000))
    once = capture_recipe(splat.TrainConfig(steps=steps), "nerfstudio", "object")
    twice = capture_recipe(once, "nerfstudio", "object")
    assert once.densify_grad_threshold == twice.densify_grad_threshold == CAPTURE
    assert once.densify_until == twice.densify_until == CAPTURE_UNTIL
    assert once.steps == twice.steps == steps and once.to_dict() == twice.to_dict()
    mine_decay = float(rng.uniform(0.2, 1.0))
    for given in (1.0, mine_decay):   # the default's own value too, when set
        for layout in ("object", "open"):
            got = capture_recipe(splat.TrainConfig(lr_final_fraction=given), "colmap", layout)
            assert (got.lr_final_fraction, got.densify_grad_threshold) == (given, CAPTURE), layout
    # A value changed after construction counts as set.
    later = splat.TrainConfig()
    later.densify_grad_threshold = mine
    assert capture_recipe(later, "colmap", "object").densify_grad_threshold == mine


def test_a_config_file_leaving_the_key_out_gets_the_capture_value(tmp_path):
    left_out = tmp_path / "a.toml"
    left_out.write_text("[data]\npath = \"scene\"\n[train]\nsteps = 500\n")
    set_in = tmp_path / "b.toml"
    set_in.write_text(f"[data]\npath = \"scene\"\n[train]\nsteps = 500\ndensify_grad_threshold = {DEFAULT}\n")
    a = capture_recipe(load_config(left_out, check_paths=False).train, "colmap", "object")
    assert (a.densify_grad_threshold, a.densify_until) == (CAPTURE, CAPTURE_UNTIL)
    b = capture_recipe(load_config(set_in, check_paths=False).train, "colmap", "object")
    assert (b.densify_grad_threshold, b.densify_until) == (DEFAULT, CAPTURE_UNTIL)


def test_describe_names_the_rule_where_it_applies():
    for layout, seen in (("object", "cameras around an object, no opacity resets"),
                         ("open", "an open scene, opacity resets")):
        cfg = capture_recipe(splat.TrainConfig(), "colmap", layout)
        lines = describe(cfg, "colmap", layout)
        assert any(x.startswith(f"preset: default on a capture (a colmap dataset, {seen})") and "0.0006" in x
                   and "densify_until 7000" in x for x in lines), lines
        strategy = next(x for x in lines if x.startswith("strategy: default"))
        assert "the screen-space gradient above 0.0006" in strategy and "from 500 to 7000," in strategy
    for cfg, where in ((splat.TrainConfig(), ("blender", "object")),
                       (splat.TrainConfig(opacity_reset="off"), ("colmap", "open"))):
        assert not any("on a capture" in x for x in describe(cfg, *where)), where


@native
@pytest.mark.filterwarnings("ignore:.*SfM points")   # the small capture starts from random points too
@pytest.mark.parametrize("outward", [False, True], ids=["object", "open"])
def test_from_dataset_trains_with_the_scene_recipe(tmp_path, outward):
    rng = np.random.default_rng()
    ds = splat.load_dataset(_capture(tmp_path / "cap", outward, rng), "train")
    cfg = splat.TrainConfig(steps=20, init_points=200)
    tr = splat.Trainer.from_dataset(ds, cfg, splat.BackendConfig(backend="cpu"))
    assert tr.camera_layout == ("open" if outward else "object")
    assert (tr.config.densify_grad_threshold, tr.config.densify_until) == (CAPTURE, CAPTURE_UNTIL)
    assert tr.opacity_resets == outward   # the layout's own reset mode, under which the keys apply
    assert tr.config.lr_final_fraction == CAPTURE_DECAY and tr.config.prune_near == (0.0 if outward else CAPTURE_NEAR)
    # Around an object (no resets) the near pruning runs at 15% of the larger side; an open
    # scene keeps the resets' rule, off for its layout.
    assert tr.screen_prune_px == (0.0 if outward else pytest.approx(0.15 * max(max(s) for s in tr.sizes)))
    assert tr.config.steps == 20 and tr.config.init_points == 200
    assert cfg.densify_grad_threshold == DEFAULT   # the caller's config is left as it was
    mine = splat.TrainConfig(steps=20, init_points=200, densify_grad_threshold=DEFAULT)
    assert splat.Trainer.from_dataset(ds, mine, splat.BackendConfig(backend="cpu")).config \
        .densify_grad_threshold == DEFAULT
    other = splat.TrainConfig(steps=20, init_points=200, opacity_reset="off" if outward else "on")
    kept = splat.Trainer.from_dataset(ds, other, splat.BackendConfig(backend="cpu")).config
    assert (kept.densify_grad_threshold, kept.densify_until) == (DEFAULT, DEFAULT_UNTIL)


@native
@pytest.mark.parametrize("outward", [False, True], ids=["object", "open"])
def test_splat_train_records_and_check_prints_the_capture_value(tmp_path, capsys, outward):
    from _cli import run_cli
    rng = np.random.default_rng()
    scene = _capture(tmp_path / "cap", outward, rng)
    rc, out, err = run_cli(capsys, "check", scene)
    assert rc == 0, err
    line = next(x for x in out.splitlines() if x.startswith("# strategy: default"))
    assert "the screen-space gradient above 0.0006" in line and "to 7000," in line, line
    run = tmp_path / "run"
    rc, out, err = run_cli(capsys, "train", scene, "--steps", "3", "--backend", "cpu", "--out", str(run),
                           "--set", "train.init_points=200")
    assert rc == 0, err
    assert "note: a capture's recipe: clone / split above a gradient of 0.0006, densification until step 7000" in out
    decay = "every learning rate but the means' decaying to 0.1x after densification"
    assert decay in out, out
    near = "what a view sees large from nearer than 0.3x the extent pruned while densifying"
    assert (near in out) == (not outward), out   # only where it acts: without resets
    recorded = load_config(run / "config.toml", check_paths=False).train
    assert (recorded.densify_grad_threshold, recorded.densify_until) == (CAPTURE, CAPTURE_UNTIL)
    assert recorded.lr_final_fraction == CAPTURE_DECAY
    # --fast: the preset's capture keys, noted and recorded.
    rc, out, err = run_cli(capsys, "train", scene, "--fast", "--steps", "3", "--backend", "cpu",
                           "--out", str(tmp_path / "fast"), "--set", "train.init_points=200")
    assert rc == 0, err
    note = next(x for x in out.splitlines() if x.startswith("note: a capture's recipe"))
    assert "views at 1/4 size at first, doubling every 1000 steps" in note and "0.0006" not in note, note
    fast = load_config(tmp_path / "fast" / "config.toml", check_paths=False).train
    assert (fast.num_downscales, fast.resolution_schedule, fast.preset) == (2, 1000, "fast")
    # The run resumes with the recipe it recorded (and says nothing: its config set it).
    rc, out, err = run_cli(capsys, "train", "--resume", str(run), "--steps", "5", "--backend", "cpu")
    assert rc == 0, err
    assert "a capture's recipe" not in out
    resumed = load_config(run / "config.toml", check_paths=False).train
    assert (resumed.densify_grad_threshold, resumed.densify_until) == (CAPTURE, CAPTURE_UNTIL)
    assert resumed.lr_final_fraction == CAPTURE_DECAY
    # A run written under an earlier default (0.0004 and constant rates, recorded in its
    # config.toml and checkpoint as every resolved key is) resumes with what it recorded.
    old_run = tmp_path / "old_run"
    rc, out, err = run_cli(capsys, "train", scene, "--steps", "3", "--backend", "cpu", "--out", str(old_run),
                           "--set", "train.init_points=200", "--set", "train.densify_grad_threshold=0.0004",
                           "--set", "train.lr_final_fraction=1")
    assert rc == 0, err
    rc, out, err = run_cli(capsys, "train", "--resume", str(old_run), "--steps", "5", "--backend", "cpu")
    assert rc == 0, err
    assert "a capture's recipe" not in out
    resumed = load_config(old_run / "config.toml", check_paths=False).train
    assert (resumed.densify_grad_threshold, resumed.densify_until, resumed.lr_final_fraction) == \
        (4e-4, CAPTURE_UNTIL, 1.0)
    # A key set on the command line is the user's; the note names only the other.
    until = int(rng.integers(1000, 20000))
    rc, out, err = run_cli(capsys, "train", scene, "--steps", "3", "--backend", "cpu", "--out", str(tmp_path / "mine"),
                           "--set", "train.init_points=200", "--set", f"train.densify_until={until}")
    assert rc == 0, err
    note = next(x for x in out.splitlines() if x.startswith("note: a capture's recipe"))
    assert "0.0006" in note and "densification until" not in note, note
    mine = load_config(tmp_path / "mine" / "config.toml", check_paths=False).train
    assert (mine.densify_grad_threshold, mine.densify_until) == (CAPTURE, until)
