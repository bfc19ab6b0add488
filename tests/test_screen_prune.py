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


# ----------------------------------------------------------------------------- near the cameras, without resets
def near_and_far(rng, near, far, radius_px):
    """One view and two Gaussians on its axis, each drawn `radius_px` wide on it: one
    `near` x the extent in front of the camera, one `far` x the extent. Their true
    depths are the oracle: train.prune_near = p takes the first (p > near), not the
    second (p < far)."""
    ds = make_dataset(rng, random_gaussians(rng, 20), n_views=1, width=40, height=32)
    cam = ds.cameras[0]
    forward = np.asarray(cam.world_to_camera, np.float64)[2, :3]  # the camera's +z, world frame
    depths = np.array([near, far]) * ds.scene_extent
    means = cam.center + depths[:, None] * forward
    scale = radius_px * depths / (3.0 * max(cam.fx, cam.fy))  # r = 3 s f / d
    f = lambda a: np.ascontiguousarray(a, np.float32)
    state = dict(means=f(means), log_scales=f(np.repeat(np.log(scale)[:, None], 3, 1)),
                 quats=f(np.tile([1.0, 0, 0, 0], (2, 1)) + rng.normal(0, 0.01, (2, 4))),
                 opacity_logits=f(rng.uniform(0.5, 2.0, 2)), sh=f(rng.normal(0, 0.3, (2, 4, 3))),
                 # a mean gradient far under the threshold whatever this step adds: no clone / split
                 grad_accum=f(np.zeros(2)), grad_count=f(np.full(2, 1e7)), max_radii=f(np.zeros(2)))
    return ds, state, depths


BACKENDS = [pytest.param("cpu"), pytest.param("cuda", marks=pytest.mark.cuda)]


def trainer_on(backend, ds, cfg, state, step):
    ok, why = splat.backend_available(backend)
    if not ok:
        pytest.skip(f"{backend} backend not available: {why}")
    return splat.Trainer(ds, cfg, splat.BackendConfig(backend=backend), state, step=step)


@pytest.mark.parametrize("backend", BACKENDS)
def test_near_pruning_takes_what_is_seen_large_from_near_a_camera_and_keeps_the_far(backend):
    rng, seed = make_rng()
    near, far = rng.uniform(0.05, 0.12), rng.uniform(1.0, 3.0)
    ds, state, depths = near_and_far(rng, near, far, radius_px=rng.uniform(14.0, 18.0))  # threshold 0.15 x 40 = 6 px
    base = dict(densify_from=0, densify_until=1000, densify_every=10, opacity_reset="off", prune_screen="on")
    kept = {}
    for prune_near in (0.0, 0.3):
        tr = trainer_on(backend, ds, small_config(prune_near=prune_near, **base), state, 9)
        assert tr.step().densified  # step 10
        kept[prune_near] = tr.state()["means"]
    # Off: no size pruning without resets. On: the near one goes, the far one stays where it was.
    assert kept[0.0].shape[0] == 2, seed
    assert kept[0.3].shape[0] == 1, (seed, near, far)
    far_mean = state["means"][1]
    assert np.linalg.norm(kept[0.3][0] - far_mean) < 0.01 * depths[1], seed


@pytest.mark.parametrize("backend", BACKENDS)
def test_near_pruning_reads_the_radius_the_views_drew(backend):
    """Both Gaussians near, one drawn under the screen threshold: only the one drawn above it goes."""
    rng, seed = make_rng()
    near = rng.uniform(0.05, 0.12)
    ds, state, _ = near_and_far(rng, near, near * rng.uniform(1.5, 2.5), radius_px=16.0)
    state["log_scales"][1] += np.float32(np.log(0.2))  # the second: about 3 px, under 6
    cfg = small_config(densify_from=0, densify_until=1000, densify_every=10, opacity_reset="off",
                       prune_screen="on", prune_near=0.3)
    tr = trainer_on(backend, ds, cfg, state, 9)
    assert tr.step().densified
    after = tr.state()["means"]
    assert after.shape[0] == 1 and np.linalg.norm(after[0] - state["means"][1]) < 0.01, seed


def test_with_resets_prune_near_changes_nothing():
    """With resets, prune_near changes nothing: both large Gaussians go after the first reset (the
    rule above), neither before it."""
    rng, seed = make_rng()
    ds, state, _ = near_and_far(rng, 0.1, 2.0, radius_px=16.0)
    for reset_every, count in ((50, 2), (5, 0)):
        cfg = small_config(densify_from=0, densify_until=1000, densify_every=10, opacity_reset="on",
                           opacity_reset_every=reset_every, prune_screen="on", prune_near=0.3)
        tr = splat.Trainer(ds, cfg, splat.BackendConfig(backend="cpu"), state, step=9)
        assert tr.step().densified
        assert tr.num_gaussians == count, (reset_every, seed)


def test_near_scale_per_px_is_the_depth_over_three_focal_lengths():
    from splat.trainer import near_scale_per_px
    cams = [camera((0, 5, 0), (0, 0, 0), f=50.0), camera((5, 0, 0), (0, 0, 0), f=80.0)]
    assert near_scale_per_px(0.3, 7.0, cams) == pytest.approx(0.3 * 7.0 / (3 * 80.0))
    with pytest.raises(ValueError, match="prune_near"):
        splat.TrainConfig(prune_near=-0.1)
