"""[train] opacity_reg, scale_reg and reg_from: the default strategy's
regularisers, opacity_reg mean(opacity) + scale_reg mean(scale) added to the
loss from step reg_from on.

The oracle is the numpy reference's gradient of those terms
(splat.reference.mcmc.regularizer_grads): a run with the regularisers and one
without, from the same state, differ in their gradients by exactly that, and
not at all before reg_from."""
import numpy as np
import pytest

import splat
from splat.reference import mcmc as ref
from _scenes import make_rng
from test_training import make_dataset, random_gaussians, small_config


def trainer(ds, init, **keys):
    # No densification or reset falls in these runs: the count stays.
    cfg = small_config(densify_from=10_000, densify_until=10_000, **keys)
    return splat.Trainer.from_dataset(ds, cfg, splat.BackendConfig(backend="cpu"), initial=init)


def test_the_regularisers_add_their_gradients_from_reg_from():
    rng, seed = make_rng()
    ds = make_dataset(rng, random_gaussians(rng, 40), n_views=4)
    init = random_gaussians(rng, 60)
    w_o, w_s = float(rng.uniform(0.01, 0.1)), float(rng.uniform(0.01, 0.1))
    start = int(rng.integers(2, 5))
    plain = trainer(ds, init)
    reg = trainer(ds, init, opacity_reg=w_o, scale_reg=w_s, reg_from=start)
    for t in range(1, start):
        plain.step()
        reg.step()
        a, b = plain.state(), reg.state()
        for name in a:  # before reg_from the two runs are one
            np.testing.assert_array_equal(b[name], a[name], err_msg=f"{name}, step {t}; seed {seed}")
    before = reg.state()
    plain.step()
    reg.step()
    g_plain, g_reg = plain._native.debug_snapshot(), reg._native.debug_snapshot()
    d_o, d_s = ref.regularizer_grads(before["opacity_logits"], before["log_scales"], w_o, w_s)
    assert np.abs(d_o).max() > 1e-6 and np.abs(d_s).max() > 1e-6, seed  # terms the check can see
    np.testing.assert_allclose(g_reg["grad.opacity_logits"] - g_plain["grad.opacity_logits"], d_o,
                               rtol=1e-4, atol=1e-9, err_msg=f"opacity, seed {seed}")
    np.testing.assert_allclose(g_reg["grad.log_scales"] - g_plain["grad.log_scales"], d_s,
                               rtol=1e-4, atol=1e-9, err_msg=f"scales, seed {seed}")
    for name in ("grad.means", "grad.quats"):  # the other groups' gradients are the loss's alone
        np.testing.assert_array_equal(g_reg[name], g_plain[name], err_msg=f"{name}; seed {seed}")


def test_mcmc_keeps_its_own_weights():
    """Under MCMC the default strategy's keys change nothing: its regularisers
    are mcmc_opacity_reg and mcmc_scale_reg."""
    rng, seed = make_rng()
    ds = make_dataset(rng, random_gaussians(rng, 40), n_views=4)
    init = random_gaussians(rng, 60)
    keys = dict(strategy="mcmc", mcmc_refine_from=10_000, mcmc_refine_until=10_000, mcmc_noise_lr=0.0)
    a = trainer(ds, init, **keys)
    b = trainer(ds, init, opacity_reg=0.5, scale_reg=0.5, **keys)
    for _ in range(3):
        a.step()
        b.step()
    sa, sb = a.state(), b.state()
    for name in sa:
        np.testing.assert_array_equal(sb[name], sa[name], err_msg=f"{name}; seed {seed}")


@pytest.mark.parametrize("key", ["opacity_reg", "scale_reg", "reg_from"])
def test_the_keys_refuse_negative_values(key):
    with pytest.raises(splat.ConfigError, match=f"train.{key}"):
        splat.TrainConfig(**{key: -1})
