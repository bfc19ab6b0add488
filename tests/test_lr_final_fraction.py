"""[train] lr_final_fraction: every rate but the means' holds until the Gaussian
count is settled (densify_until; MCMC: mcmc_refine_until), then decays
log-linearly to that fraction of itself at the last step.

The oracle is numpy's Adam with the rates of the documented schedule, computed
here from the config alone, step by step from the trainer's own states (as
test_training.py holds the constant-rate recipe)."""
import numpy as np
import pytest

import splat
from _scenes import make_rng
from test_training import adam_params, make_dataset, random_gaussians, small_config

# The groups the key scales (the means keep their own schedule).
GROUPS = ("log_scales", "quats", "opacity_logits", "sh")


def scheduled_scale(fraction, settled, steps, t):
    """The factor on the rates at step t: 1 up to `settled`, fraction at `steps`."""
    if t <= settled:
        return 1.0
    return fraction ** ((t - settled) / (steps - settled))


@pytest.mark.parametrize("strategy", ["default", "mcmc"])
def test_the_other_rates_decay_after_the_count_settles(strategy):
    rng, seed = make_rng()
    ds = make_dataset(rng, random_gaussians(rng, 60), n_views=4)
    settled, steps = int(rng.integers(2, 5)), int(rng.integers(8, 11))
    fraction = float(rng.uniform(0.05, 0.5))
    # No densification or refinement falls in the run (every 100 steps), so the
    # count stays and every step is a plain Adam step; float32 moments: numpy's
    # Adam as it is.
    keys = dict(steps=steps, lr_final_fraction=fraction, adam_moments="float32", strategy=strategy)
    if strategy == "mcmc":
        keys.update(mcmc_refine_from=0, mcmc_refine_until=settled, mcmc_refine_every=100, densify_until=1000)
    else:
        keys.update(densify_from=0, densify_until=settled, densify_every=100)
    cfg = small_config(**keys)
    tr = splat.Trainer.from_dataset(ds, cfg, splat.BackendConfig(backend="cpu"))
    b1, b2 = cfg.adam_beta1, cfg.adam_beta2
    prev = tr.state()
    for t in range(1, steps + 1):
        tr.step()
        cur = tr.state()
        scale = scheduled_scale(fraction, settled, steps, t)
        # MCMC moves the means by its noise after Adam: their schedule is the
        # means' own (test_training.py), untouched by this key.
        for name in GROUPS:
            m0, v0 = prev["adam_m." + name].astype(np.float64), prev["adam_v." + name].astype(np.float64)
            m1 = cur["adam_m." + name].astype(np.float64)
            g = (m1 - b1 * m0) / (1 - b1)  # the step's gradient, recovered from the first moment
            v1 = b2 * v0 + (1 - b2) * g * g
            _, want = adam_params(tr, cfg, name, t, prev[name], m1, v1, scale)
            np.testing.assert_allclose(cur[name], want, rtol=1e-5, atol=1e-6,
                                       err_msg=f"{name}, step {t} (scale {scale:.4f}); seed {seed}")
            if t == steps:
                # The tolerance tells the schedules apart: the last step at the
                # full rate lands far outside it.
                _, unscaled = adam_params(tr, cfg, name, t, prev[name], m1, v1, 1.0)
                assert not np.allclose(cur[name], unscaled, rtol=1e-5, atol=1e-6), f"{name}; seed {seed}"
        prev = cur


def test_the_fraction_is_bounded():
    with pytest.raises(splat.ConfigError, match="train.lr_final_fraction"):
        splat.TrainConfig(lr_final_fraction=0.0)
    with pytest.raises(splat.ConfigError, match="train.lr_final_fraction"):
        splat.TrainConfig(lr_final_fraction=1.5)
