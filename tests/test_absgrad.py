"""absgrad densification: the accumulated absolute screen-space gradient
against the numpy reference, and a run that densifies differently."""
import numpy as np
import pytest

import splat
from splat import _core
from _scenes import load_reference, make_rng
from test_training import make_dataset, random_gaussians, small_config

reference = load_reference()


def ndc_norm(g, width, height):
    return np.hypot(g[:, 0] * 0.5 * width, g[:, 1] * 0.5 * height)


def state_of(g):
    return dict(means=g.means, log_scales=g.log_scales, quats=g.quats, opacity_logits=g.opacity_logits, sh=g.sh)


def one_step_statistic(ds, start, absgrad, backend="cpu", **over):
    cfg = small_config(absgrad=absgrad, densify_from=1000, densify_until=2000, **over)
    tr = splat.Trainer(ds, cfg, splat.BackendConfig(backend=backend), state_of(start))
    tr.step()
    s = tr.state()
    return s["grad_accum"], s["grad_count"], tr._native.debug_snapshot()


def test_absgrad_statistic_matches_the_reference():
    rng, seed = make_rng()
    width, height = 40, 32
    ds = make_dataset(rng, random_gaussians(rng, 60), n_views=1, width=width, height=height)
    start = random_gaussians(rng, 50)
    cam = ds.cameras[0]
    # The render and loss gradient the step sees (step 1: SH degree 0).
    render = splat.Rasterizer(splat.BackendConfig(backend="cpu")).forward(start, cam, 0, ds.background).image
    _, d_image = _core.loss_and_grad(np.ascontiguousarray(render, np.float32), ds.images[0], 0.2)
    ref = reference.backward(reference.forward_scene(start, cam, 0, np.asarray(ds.background)), d_image)

    plain, count, snap = one_step_statistic(ds, start, absgrad=False)
    absg, count_abs, snap_abs = one_step_statistic(ds, start, absgrad=True)
    seen = count > 0
    assert seen.sum() >= 10 and np.array_equal(count, count_abs), seed
    assert "grad.means2d_abs" not in snap
    want = ndc_norm(ref.means2d_abs, width, height)
    scale = want[seen].max()
    np.testing.assert_allclose(absg[seen], want[seen], rtol=2e-3, atol=1e-5 * scale, err_msg=f"seed {seed}")
    np.testing.assert_allclose(snap_abs["grad.means2d_abs"][seen], ref.means2d_abs[seen], rtol=2e-3,
                               atol=1e-5 * np.abs(ref.means2d_abs).max(), err_msg=f"seed {seed}")
    np.testing.assert_allclose(plain[seen], ndc_norm(ref.means2d, width, height)[seen], rtol=2e-3,
                               atol=1e-5 * scale, err_msg=f"seed {seed}")
    # |sum| <= sum |.|, strictly where pixels pull a splat different ways.
    assert np.all(absg[seen] >= plain[seen] * (1 - 1e-5)) and np.mean(absg[seen] > 1.5 * plain[seen]) > 0.2
    assert not np.any(absg[~seen]) and not np.any(plain[~seen])


def test_absgrad_densifies_on_its_own_statistic_and_threshold():
    rng, seed = make_rng()
    ds = make_dataset(rng, random_gaussians(rng, 120), n_views=6)
    start = random_gaussians(rng, 80)

    def run(steps=100, **over):
        cfg = small_config(steps=100, densify_from=50, densify_every=50, densify_until=200, **over)
        tr = splat.Trainer(ds, cfg, splat.BackendConfig(backend="cpu"), state_of(start))
        stats = [tr.step() for _ in range(steps)]
        assert stats[-1].densified == (steps == 100)
        return tr

    # The mean statistics one step before the first densification: a threshold
    # where the default densifies some Gaussians but not most.
    means = {}
    for absgrad in (False, True):
        st = run(steps=99, absgrad=absgrad).state()
        means[absgrad] = st["grad_accum"] / np.maximum(st["grad_count"], 1)
    threshold = float(np.quantile(means[False], 0.8))
    assert np.mean(means[True] >= threshold) > np.mean(means[False] >= threshold) + 0.1, seed
    # Up to the first densification the trajectories are identical (the
    # statistic does not feed the optimisation) and the absolute statistic is
    # the larger: at the same threshold absgrad densifies a superset.
    default = run(densify_grad_threshold=threshold).num_gaussians
    absgrad = run(absgrad=True, absgrad_grad_threshold=threshold).num_gaussians
    assert absgrad > default > 0, (absgrad, default, seed)
    # With absgrad, its own threshold counts and densify_grad_threshold does not.
    assert run(absgrad=True, absgrad_grad_threshold=threshold, densify_grad_threshold=1.0).num_gaussians == absgrad
    high = run(absgrad=True, absgrad_grad_threshold=1e3).num_gaussians
    assert high <= len(start) < absgrad, (high, absgrad, seed)


def test_absgrad_config_keys():
    assert splat.TrainConfig().absgrad is False and splat.TrainConfig().absgrad_grad_threshold == 8e-4
    with pytest.raises(splat.ConfigError, match="absgrad_grad_threshold"):
        splat.TrainConfig(absgrad_grad_threshold=0.0)
