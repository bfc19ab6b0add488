"""The resolution schedule (train.num_downscales, train.resolution_schedule;
nerfstudio's splatfacto convention): the first steps train on every view at
1/2^L of its size, the factor halving every resolution_schedule steps. Oracle:
a trainer of the full-size recipe on a dataset downscaled here in numpy (f x f
box filter rounded to the byte, intrinsics / f, a pixel valid when all its f x f
pixels are) trains the same Gaussians, bit for bit on the CPU backend."""
import numpy as np
import pytest

import splat
from _pkg import NATIVE
from test_training import make_dataset, random_gaussians, small_config

native = pytest.mark.skipif(not NATIVE, reason="needs the native module splat._core")


def downscaled(ds, f):
    """`ds` at 1/f of its size, as the trainer's schedule sees it."""
    cams, images, masks = [], [], []
    for k, (c, img) in enumerate(zip(ds.cameras, ds.images)):
        w, h = c.width // f, c.height // f
        block = img[:h * f, :w * f].astype(np.uint32).reshape(h, f, w, f, 3).sum(axis=(1, 3))
        images.append(((block + f * f // 2) // (f * f)).astype(np.uint8))
        cams.append(splat.Camera(c.world_to_camera, c.fx / f, c.fy / f, c.cx / f, c.cy / f, w, h))
        if ds.masks is not None:
            m = ds.masks[k]
            masks.append(None if m is None else m[:h * f, :w * f].reshape(h, f, w, f).all(axis=(1, 3)))
    return splat.Dataset(cameras=cams, images=images, names=list(ds.names), points=ds.points,
                         point_colors=ds.point_colors, scene_extent=ds.scene_extent,
                         masks=masks if ds.masks is not None else None)


def test_the_level_halves_every_resolution_schedule_steps():
    cfg = splat.TrainConfig(num_downscales=2, resolution_schedule=100)
    assert (cfg.num_downscales, cfg.resolution_schedule) == (2, 100)
    assert splat.TrainConfig().num_downscales == 0   # the default recipe trains at full size
    for bad in (dict(num_downscales=5), dict(num_downscales=-1), dict(resolution_schedule=0)):
        with pytest.raises(ValueError, match=next(iter(bad))):
            splat.TrainConfig(**bad)
    with pytest.raises(ValueError, match="num_downscales"):
        splat.TrainConfig(num_downscales=1, exposure=True)


def test_check_describes_the_schedule_and_warns_when_it_never_ends():
    from splat.recipe import describe, mode_warnings
    cfg = splat.TrainConfig(num_downscales=2, resolution_schedule=500)
    assert "resolution schedule: the views box-filtered to 1/4 to step 500, 1/2 to step 1000, then full size" \
        in describe(cfg)
    assert not any("resolution" in w for w in mode_warnings(cfg))
    assert any("never trains at full size" in w
               for w in mode_warnings(splat.TrainConfig(num_downscales=2, resolution_schedule=500, steps=1000)))
    assert any("resolution_schedule: unused" in w for w in mode_warnings(splat.TrainConfig(resolution_schedule=10)))
    assert not any("resolution" in line for line in describe(splat.TrainConfig()))


@native
def test_levels_by_step():
    rng = np.random.default_rng()
    ds = make_dataset(rng, random_gaussians(rng, 30), n_views=3, width=37, height=29)
    cfg = small_config(num_downscales=2, resolution_schedule=int(rng.integers(3, 9)))
    tr = splat.Trainer.from_dataset(ds, cfg, splat.BackendConfig(backend="cpu"))
    n = cfg.resolution_schedule
    # splatfacto's 2^max(L - step // n, 0), with steps counted from 1 here.
    assert [tr.downscale_level(t) for t in (1, n, n + 1, 2 * n, 2 * n + 1, 10 * n)] == [2, 2, 1, 1, 0, 0]
    off = splat.Trainer.from_dataset(ds, small_config(), splat.BackendConfig(backend="cpu"))
    assert {off.downscale_level(t) for t in (1, 100, 10 ** 6)} == {0}


@native
@pytest.mark.parametrize("factor_log2,masked", [(1, False), (2, True)])
def test_coarse_steps_train_on_the_box_filtered_views(factor_log2, masked):
    rng = np.random.default_rng()
    ds = make_dataset(rng, random_gaussians(rng, 60), n_views=5, width=int(rng.integers(41, 57)),
                      height=int(rng.integers(33, 45)))
    if masked:   # masks on some views, holes of a few pixels
        ds.masks = [None if k % 2 else rng.uniform(size=(c.height, c.width)) > 0.1
                    for k, c in enumerate(ds.cameras)]
    f = 2 ** factor_log2
    steps = 12
    over = dict(densify_from=2, densify_every=4, densify_until=100, densify_grad_threshold=1e-5,
                sh_degree_interval=5)
    scheduled = splat.Trainer.from_dataset(ds, small_config(num_downscales=factor_log2, resolution_schedule=steps,
                                                            **over), splat.BackendConfig(backend="cpu"))
    oracle = splat.Trainer.from_dataset(downscaled(ds, f), small_config(**over), splat.BackendConfig(backend="cpu"))
    assert scheduled.downscale_level(steps) == factor_log2 and scheduled.downscale_level(steps * factor_log2 + 1) == 0
    for _ in range(steps):
        a, b = scheduled.step(), oracle.step()
        assert a.loss == b.loss and a.num_gaussians == b.num_gaussians
    assert scheduled.num_gaussians > 60, "the densification should have cloned or split"
    sa, sb = scheduled.state(), oracle.state()
    for k in sb:
        np.testing.assert_array_equal(sa[k], sb[k], err_msg=k)
    # Then full size: the step after the schedule trains on the original views, so
    # it departs from the oracle's next coarse step.
    for _ in range(steps * factor_log2 - steps + 1):
        scheduled.step()
    assert scheduled.downscale_level(scheduled.step_count) == 0
    full = scheduled.render(ds.cameras[0])
    assert full.shape == (ds.cameras[0].height, ds.cameras[0].width, 3)


@native
def test_a_view_too_small_for_the_schedule_is_named():
    rng = np.random.default_rng()
    ds = make_dataset(rng, random_gaussians(rng, 20), n_views=3, width=40, height=32)
    ds.cameras[1] = splat.Camera(ds.cameras[1].world_to_camera, 10.0, 10.0, 4.0, 3.0, 9, 7)
    ds.images[1] = ds.images[1][:7, :9].copy()
    with pytest.raises(ValueError, match=r"view 1 \(9x7\)"):
        splat.Trainer.from_dataset(ds, small_config(num_downscales=4), splat.BackendConfig(backend="cpu"))


def test_the_progress_bar_says_when_the_views_are_downscaled():
    from splat.cli.train import _size_note
    assert _size_note(0) == ""
    assert _size_note(2).strip() == "views at 1/4 size"
