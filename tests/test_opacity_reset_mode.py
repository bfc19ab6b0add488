"""TrainConfig.opacity_reset: "on" resets opacities on the 3DGS schedule and
prunes by world and screen size after the first reset; "off" does neither;
"auto" (the default) is off for captures (COLMAP, nerfstudio) whose cameras
look at an object and on for everything else. Oracles: the opacity cap and the
size thresholds computed here in numpy, on Gaussians no camera sees (so only
the schedule changes them), and the Python mirror of the rule against the
native one."""
import numpy as np
import pytest

import splat
from splat.recipe import describe, recipe_warnings
from splat.schedule import (CAPTURE_FORMATS, opacity_reset_mode, opacity_reset_steps, opacity_resets_on,
                            resets_opacity_at)
from _pkg import NATIVE
from test_screen_prune import constructed
from test_training import small_config

native = pytest.mark.skipif(not NATIVE, reason="needs the native module splat._core")


def test_auto_is_off_for_captures_of_an_object_only():
    auto = splat.TrainConfig()
    assert auto.opacity_reset == "auto"
    for fmt in CAPTURE_FORMATS:
        assert opacity_reset_mode(auto, fmt, "object") == "off" and not opacity_resets_on(auto, fmt, "object")
        assert opacity_reset_mode(auto, fmt, "open") == "on"
        assert opacity_reset_mode(auto, fmt) == "auto" and opacity_resets_on(auto, fmt)   # layout not known
        assert opacity_resets_on(splat.TrainConfig(opacity_reset="on"), fmt, "object")
    for fmt, layout in (("blender", "object"), ("blender", None), (None, "object")):
        assert opacity_resets_on(auto, fmt, layout)
        assert not opacity_resets_on(splat.TrainConfig(opacity_reset="off"), fmt, layout)
    assert opacity_reset_mode(auto, "blender") == "on" and opacity_reset_mode(auto) == "auto"
    assert opacity_reset_steps(auto, "colmap", "object") == []
    assert opacity_reset_steps(auto, "colmap", "open") == opacity_reset_steps(auto) == [3000, 6000, 9000, 12000]
    with pytest.raises(ValueError, match="opacity_reset"):
        splat.TrainConfig(opacity_reset="never")


def _run(mode, fmt, rng):
    """Steps 1..10 of a run resetting every 5 steps and densifying at 10, on
    Gaussians of known screen radii that no view sees: (trainer, stats, state
    before, logits after step 5, which Gaussians prunable: too large on screen
    or in the world)."""
    cfg = small_config(densify_from=0, densify_until=1000, densify_every=10, opacity_reset_every=5,
                       opacity_reset=mode, prune_screen="on")
    radii = rng.uniform(0, 16, 40).round()
    ds, state = constructed(rng, cfg, radii)
    # Five of them too large in the world (above prune_max_world_scale x the extent).
    big = rng.choice(40, 5, replace=False)
    state["log_scales"][big, int(rng.integers(3))] = np.log(3 * cfg.prune_max_world_scale * ds.scene_extent)
    ds.format = fmt
    tr = splat.Trainer(ds, cfg, splat.BackendConfig(backend="cpu"), state, step=0)
    stats = [tr.step(read_loss=False) for _ in range(5)]
    after_reset = tr.state()["opacity_logits"].copy()
    stats += [tr.step(read_loss=False) for _ in range(5)]
    too_big = radii > 0.15 * 40
    too_big[big] = True
    return tr, stats, state, after_reset, too_big


@native
@pytest.mark.parametrize("mode,fmt,resets", [("on", "colmap", True), ("off", None, False), ("off", "blender", False),
                                             ("auto", "colmap", False), ("auto", "nerfstudio", False),
                                             ("auto", "blender", True), ("auto", None, True)])
def test_resets_and_size_pruning_follow_the_mode(mode, fmt, resets):
    rng = np.random.default_rng()
    tr, stats, state, after_reset, too_big = _run(mode, fmt, rng)
    assert tr.camera_layout == "object"   # the views orbit the scene
    assert tr.opacity_resets is resets
    assert tr.screen_prune_px == (0.15 * 40 if resets else 0.0)   # what metrics.json reports
    assert [s.step for s in stats if s.opacity_reset] == ([5, 10] if resets else [])
    assert stats[-1].densified
    logits = state["opacity_logits"]
    cap = np.float32(np.log(0.01 / 0.99))
    # Nobody sees these Gaussians: zero gradients, zero moments, so only a reset moves them.
    np.testing.assert_allclose(after_reset, np.minimum(logits, cap) if resets else logits, atol=1e-6)
    # Screen-size pruning (15% of the 40-pixel side) and world-size pruning run after
    # the first reset only.
    keep = ~too_big if resets else np.ones(len(too_big), bool)
    assert tr.num_gaussians == keep.sum()
    np.testing.assert_allclose(tr.state()["means"][:, 0], state["means"][keep, 0], atol=0.02)


@native
@pytest.mark.parametrize("mode", ["auto", "on", "off"])
@pytest.mark.parametrize("fmt", ["colmap", "blender"])
def test_the_python_rule_is_the_native_one(mode, fmt):
    rng = np.random.default_rng()
    every = int(rng.integers(3, 40))
    cfg = small_config(steps=int(rng.integers(100, 400)), densify_until=int(rng.integers(50, 300)),
                       opacity_reset_every=every, opacity_reset=mode)
    ds, state = constructed(rng, cfg, rng.uniform(0, 4, 5).round())
    ds.format = fmt
    tr = splat.Trainer(ds, cfg, splat.BackendConfig(backend="cpu"), state)
    got = [s for s in range(1, cfg.steps + 1) if tr.resets_opacity_at(s)]
    assert got == [s for s in range(1, cfg.steps + 1) if resets_opacity_at(cfg, s, fmt, tr.camera_layout)]
    assert got == opacity_reset_steps(cfg, fmt, tr.camera_layout)
    assert bool(got) == (opacity_resets_on(cfg, fmt, "object") and every < min(cfg.densify_until, cfg.steps // 2 + 1))


def test_check_describes_and_warns_by_the_dataset_format():
    auto = splat.TrainConfig()

    def strategy(*where):
        return next(x for x in describe(auto, *where) if x.startswith("strategy: default"))
    line = strategy("colmap", "object")
    assert line.endswith("no opacity resets (auto: a colmap dataset, cameras around an object)")
    assert "screen radius" not in line
    line = strategy("colmap", "open")
    assert line.endswith("opacity reset every 3000 steps (auto: a colmap dataset, an open scene)")
    line = strategy("blender")
    assert line.endswith("opacity reset every 3000 steps (auto: a blender dataset)") and "screen radius of 15%" in line
    for where in ((), ("colmap",)):   # undecided
        assert strategy(*where).endswith("none for a capture whose cameras look at an object (auto)")
    # Keys a run without resets never reads.
    cfg = splat.TrainConfig(opacity_reset_every=1000, prune_screen="on")
    ws = recipe_warnings(cfg, "colmap", "object")
    assert any(w.startswith("train.opacity_reset_every: unused with train.opacity_reset = 'auto' on a colmap")
               for w in ws)
    assert any(w.startswith("train.prune_screen: 'on' prunes after the first opacity reset") for w in ws)
    for where in (("blender", "object"), ("colmap", "open"), ("colmap",)):
        assert not [w for w in recipe_warnings(cfg, *where) if "unused" in w or "prune_screen" in w], where
    # prune_near: the screen-size keys act without resets; with resets it is the unused key.
    near = splat.TrainConfig(prune_near=0.3, prune_screen="on", prune_max_screen_radius=30.0)
    assert not [w for w in recipe_warnings(near, "colmap", "object") if "prune" in w]
    for where in (("blender", "object"), ("colmap", "open")):
        ws = [w for w in recipe_warnings(near, *where) if "prune" in w]
        assert ws == [w for w in ws if w.startswith("train.prune_near: unused with opacity resets")] and ws, where
    assert not [w for w in recipe_warnings(near, "colmap") if "prune" in w]   # undecided
    # The skipped-reset warning only where resets happen.
    short = splat.TrainConfig(steps=3000)
    assert any(w.startswith("train.opacity_reset_every: the opacity reset at step 3000") for w in
               recipe_warnings(short, "blender"))
    assert not any("step 3000" in w for w in recipe_warnings(short, "colmap", "object"))


def _capture(root, outward: bool, rng, n=10, w=32, h=24):
    """A COLMAP capture whose cameras look at the origin, or out from near it (a room)."""
    import _captures as cap
    images = []
    for k in range(n):
        w2c = cap.random_w2c(rng)
        if outward:   # turn the camera around its own centre: the axes then point away
            flip = np.diag([-1.0, 1.0, -1.0])
            centre = -w2c[:3, :3].T @ w2c[:3, 3]
            w2c[:3, :3] = flip @ w2c[:3, :3]
            w2c[:3, 3] = -w2c[:3, :3] @ centre
        name = f"{k:04d}.png"
        cap.save_image(root / "images" / name, rng.integers(30, 220, (h, w, 3), dtype=np.uint8))
        images.append((name, 1, w2c))
    cap.write_colmap_text(root, {1: ("PINHOLE", w, h, [28.0, 28.0, w / 2, h / 2])}, images,
                          rng.normal(size=(50, 3)) * 0.5)
    return root


@native
@pytest.mark.parametrize("outward", [False, True], ids=["object", "open"])
def test_check_resolves_auto_from_the_cameras_without_decoding(tmp_path, capsys, outward):
    from splat.data import view_layout
    from splat.data.layout import camera_layout
    from _cli import run_cli
    rng = np.random.default_rng()
    scene = _capture(tmp_path / "cap", outward, rng)
    want = "open" if outward else "object"
    # The layout from the poses alone is the loaded cameras' layout.
    assert view_layout(scene) == camera_layout(splat.load_dataset(scene, "train").cameras) == want
    rc, out, err = run_cli(capsys, "check", scene)
    assert rc == 0, err
    line = next(x for x in out.splitlines() if x.startswith("# strategy: default"))
    if outward:
        assert line.endswith("opacity reset every 3000 steps (auto: a colmap dataset, an open scene)"), line
    else:
        assert line.endswith("no opacity resets (auto: a colmap dataset, cameras around an object)"), line
