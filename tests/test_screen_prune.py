"""Screen-size pruning (TrainConfig.prune_screen_fraction, prune_max_screen_radius):
at a densification after the first opacity reset, every Gaussian whose largest
screen radius since the last densification exceeds the threshold goes.

Oracle: the threshold computed here from the views' sizes, and the survivors
picked in numpy from the radii we set, for Gaussians no camera sees (so the
step's own statistics leave the radii as set)."""
import numpy as np
import pytest

import splat
from splat.data.layout import axes_meeting_angle, camera_layout
from splat.trainer import screen_prune_radius
from _scenes import look_at, make_rng
from test_training import make_dataset, random_gaussians, small_config


def constructed(rng, cfg, radii):
    ds = make_dataset(rng, random_gaussians(rng, 20), n_views=3, width=40, height=32)
    n = len(radii)
    f = lambda a: np.ascontiguousarray(a, np.float32)
    # On a grid 0.1 apart, far behind every camera: invisible, no gradient.
    means = f(np.stack([np.arange(n) * 0.1, np.zeros(n), np.full(n, -60.0)], 1))
    small = np.log(0.5 * cfg.percent_dense * ds.scene_extent)
    state = dict(means=means, log_scales=f(np.full((n, 3), small)), quats=f(rng.normal(size=(n, 4))),
                 opacity_logits=f(rng.uniform(0.5, 2.0, n)), sh=f(rng.normal(0, 0.3, (n, 4, 3))),
                 grad_accum=f(np.full(n, 0.1 * cfg.densify_grad_threshold)), grad_count=f(np.ones(n)),
                 max_radii=f(radii))
    return ds, state


@pytest.mark.parametrize("fraction,pixels,mode", [(0.15, 0.0, "auto"), (0.3, 5.0, "on"), (0.0, 7.0, "auto"),
                                                  (0.0, 0.0, "auto"), (0.15, 0.0, "off"), (0.15, 9.0, "off")])
def test_screen_pruning_keeps_exactly_the_gaussians_below_the_threshold(fraction, pixels, mode):
    rng, seed = make_rng()
    cfg = small_config(densify_from=0, densify_until=1000, densify_every=10, opacity_reset_every=5,
                       prune_screen_fraction=fraction, prune_max_screen_radius=pixels, prune_screen=mode)
    # The views are 40 x 32 and orbit the scene: "auto" is on.
    limits = [v for v in (fraction * 40 if mode != "off" else 0, pixels) if v > 0]
    threshold = min(limits) if limits else np.inf
    radii = rng.uniform(0, 16, 40).round()
    ds, state = constructed(rng, cfg, radii)
    tr = splat.Trainer(ds, cfg, splat.BackendConfig(backend="cpu"), state, step=9)
    assert tr.step().densified  # step 10: after the reset at 5
    keep = radii <= threshold
    after = tr.state()["means"]
    assert tr.camera_layout == "object"
    assert after.shape[0] == keep.sum(), (fraction, pixels, mode, seed)
    np.testing.assert_allclose(after[:, 0], state["means"][keep, 0], atol=0.02)


def test_no_screen_pruning_before_the_first_opacity_reset():
    rng, seed = make_rng()
    cfg = small_config(densify_from=0, densify_until=1000, densify_every=10, opacity_reset_every=50)
    radii = rng.uniform(7, 30, 25).round()  # all above 0.15 x 40 = 6 px
    ds, state = constructed(rng, cfg, radii)
    tr = splat.Trainer(ds, cfg, splat.BackendConfig(backend="cpu"), state, step=9)
    assert tr.step().densified
    assert tr.num_gaussians == 25, seed


def test_the_threshold_is_the_fraction_of_the_largest_views_larger_side():
    cfg = splat.TrainConfig()
    sizes = [(946, 532), (532, 946), (400, 300)]
    assert screen_prune_radius(cfg, sizes) == pytest.approx(0.15 * 946)
    assert screen_prune_radius(splat.TrainConfig(prune_max_screen_radius=50.0), sizes) == 50.0
    assert screen_prune_radius(splat.TrainConfig(prune_max_screen_radius=500.0), sizes) == pytest.approx(0.15 * 946)
    assert screen_prune_radius(splat.TrainConfig(prune_screen_fraction=0.0), sizes) == 0.0
    # auto: on for cameras around an object only; on and off whatever the layout.
    assert screen_prune_radius(cfg, sizes, "open") == 0.0
    assert screen_prune_radius(splat.TrainConfig(prune_screen="on"), sizes, "open") == pytest.approx(0.15 * 946)
    assert screen_prune_radius(splat.TrainConfig(prune_screen="off"), sizes, "object") == 0.0
    assert screen_prune_radius(splat.TrainConfig(prune_screen="off", prune_max_screen_radius=30.0), sizes) == 30.0
    with pytest.raises(ValueError, match="prune_screen"):
        splat.TrainConfig(prune_screen="yes")
    with pytest.raises(ValueError, match="prune_screen_fraction"):
        splat.TrainConfig(prune_screen_fraction=1.5)


def camera(eye, target, f=50.0):
    return splat.Camera(look_at(np.asarray(eye, np.float64), np.asarray(target, np.float64)).astype(np.float32),
                        f, f, 32.0, 24.0, 64, 48)


def test_the_camera_layout_tells_an_object_from_an_open_scene():
    rng, seed = make_rng()
    n = 24
    # Around an object: cameras on a noisy sphere, each looking at a point near the centre.
    centre = rng.normal(0, 2, 3)
    eyes = [centre + rng.uniform(3, 6) * d / np.linalg.norm(d) for d in rng.normal(size=(n, 3))]
    ring = [camera(e, centre + rng.normal(0, 0.05, 3)) for e in eyes]
    assert axes_meeting_angle(ring) < 5.0 and camera_layout(ring) == "object", seed
    # Inside a room: cameras near the middle, each looking out at a wall in its own direction.
    inside = [camera(centre + rng.normal(0, 0.3, 3), centre + 5 * d / np.linalg.norm(d))
              for d in rng.normal(size=(n, 3))]
    assert axes_meeting_angle(inside) > 45.0 and camera_layout(inside) == "open", seed
    # Forward-facing: parallel axes meet nowhere.
    ahead = rng.normal(size=3)
    facing = [camera(p, p + ahead) for p in rng.normal(0, 0.5, (n, 3))]
    assert axes_meeting_angle(facing) == 90.0 and camera_layout(facing) == "open"
    assert camera_layout(ring[:1]) == "open"
