"""[train] adam_moments = "bfloat16": both Adam moments of an element packed in
one 32-bit word, each a bfloat16 rounded stochastically (shaders/common/adam.h).

The oracle is numpy: Adam's moment update in float32 from the step's gradients
(the trainer's debug snapshot), then the rounding with the documented noise
(the counter-based hash of seed, step, group and element), to the bit. The GPU
kernel is held to the same math on the SIMT emulator (test_simt_emulation.py)
and the CUDA backend to the CPU's (test_cuda_training.py)."""
import numpy as np
import pytest

import splat
from splat.reference.mcmc import hash_u32, random_key  # the backends' counter RNG (shaders/common/random.h)
from _scenes import make_rng
from test_training import adam_params, make_dataset, random_gaussians, small_config

PARAMS = ("means", "log_scales", "quats", "opacity_logits", "sh")
U32 = np.uint64(0xFFFFFFFF)


def moment_noise(seed, step, group, size):
    """adam_moment_noise for elements 0 .. size - 1 of `group` at Adam step `step`."""
    seed32 = (seed ^ (seed >> 32)) & 0xFFFFFFFF
    key = random_key(seed32, step, 0xADA30000, 0)
    group_key = hash_u32(key ^ np.uint64((0x9E3779B9 * (group + 1)) & 0xFFFFFFFF))
    element = np.arange(size, dtype=np.uint64)
    quad_noise = hash_u32(group_key ^ (element >> np.uint64(2)))
    lane_constant = np.array([0x9E3779B1, 0x85EBCA77, 0xC2B2AE3D, 0x27D4EB2F], np.uint64)[element & np.uint64(3)]
    return (quad_noise * lane_constant) & U32


def round_stochastic(x, noise16):
    """bfloat16 with the dropped half decided by `noise16` (finite x), as a float32."""
    bits = x.astype(np.float32).view(np.uint32).astype(np.uint64)
    out = ((bits + (noise16 & np.uint64(0xFFFF))) >> np.uint64(16)) << np.uint64(16)
    return (out & U32).astype(np.uint32).view(np.float32)


def round_nearest(x):
    """bfloat16 by round to nearest, ties to even (finite x), as a float32."""
    bits = np.asarray(x, np.float32).view(np.uint32).astype(np.uint64)
    out = ((bits + np.uint64(0x7FFF) + ((bits >> np.uint64(16)) & np.uint64(1))) >> np.uint64(16)) << np.uint64(16)
    return (out & U32).astype(np.uint32).view(np.float32)


def bf16_exact(a):
    return not np.any(np.asarray(a, np.float32).view(np.uint32) & 0xFFFF)


def test_bfloat16_moments_are_numpy_adam_rounded_stochastically():
    rng, seed = make_rng()
    ds = make_dataset(rng, random_gaussians(rng, 60), n_views=4)
    train_seed = int(rng.integers(0, 2 ** 40))
    cfg = small_config(adam_moments="bfloat16", seed=train_seed, densify_from=10_000, densify_until=10_000)
    tr = splat.Trainer.from_dataset(ds, cfg, splat.BackendConfig(backend="cpu"))
    b1, b2 = np.float32(cfg.adam_beta1), np.float32(cfg.adam_beta2)
    prev, rounded_up, elements = tr.state(), 0, 0
    for t in range(1, 7):
        tr.step()
        cur, snap = tr.state(), tr._native.debug_snapshot()
        for group, name in enumerate(PARAMS):
            m0, v0 = prev["adam_m." + name].ravel(), prev["adam_v." + name].ravel()
            assert bf16_exact(m0) and bf16_exact(v0), (name, t, seed)
            g = snap["grad." + name].astype(np.float32).ravel()
            # adam_update's order of float32 operations
            m1 = b1 * m0 + (np.float32(1) - b1) * g
            v1 = b2 * v0 + (np.float32(1) - b2) * g * g
            noise = moment_noise(train_seed, t, group, m1.size)
            want_m, want_v = round_stochastic(m1, noise), round_stochastic(v1, noise >> np.uint64(16))
            np.testing.assert_array_equal(cur["adam_m." + name].ravel(), want_m, err_msg=f"{name} m, step {t}; seed {seed}")
            np.testing.assert_array_equal(cur["adam_v." + name].ravel(), want_v, err_msg=f"{name} v, step {t}; seed {seed}")
            # The parameters step with the moments before they are rounded.
            shape = cur[name].shape
            lr, p1 = adam_params(tr, cfg, name, t, prev[name].astype(np.float64), m1.reshape(shape).astype(np.float64),
                                 v1.reshape(shape).astype(np.float64))
            np.testing.assert_allclose(cur[name], p1, rtol=1e-5, atol=1e-6, err_msg=f"{name} params, step {t}; seed {seed}")
            rounded_up += int(np.count_nonzero(np.abs(want_v) > np.abs(v1)))
            elements += v1.size
        prev = cur
    # The noise decides: neither always up nor always down.
    assert 0.2 * elements < rounded_up < 0.8 * elements, (rounded_up, elements, seed)


def test_stochastic_rounding_keeps_small_increments_on_average():
    """What the rounding is for: v's per-step change is below bfloat16's spacing, so
    rounding to nearest would leave it where it is; the stochastic rounding of the
    trainer follows float32 Adam's v on average. Many elements of one constant
    gradient: the mean of the trained v against float32's closed form."""
    rng, seed = make_rng()
    ds = make_dataset(rng, random_gaussians(rng, 60), n_views=4)
    cfg = small_config(adam_moments="bfloat16", seed=int(rng.integers(0, 2 ** 31)),
                       densify_from=10_000, densify_until=10_000)
    tr = splat.Trainer.from_dataset(ds, cfg, splat.BackendConfig(backend="cpu"))
    # Numpy's model over 200 steps of a gradient of 1 from v = 1: v_t = b2^t + (1 - b2^t).
    # With a gradient of 0.25 the fixed point is 1/16 and v decays towards it:
    # v_t = 1/16 + (1 - 1/16) b2^t, a change of ~1e-3 v a step, under bfloat16's 2^-8.
    steps, n = 200, 200_000
    v = np.ones(n, np.float32)
    b2 = np.float32(cfg.adam_beta2)
    g2 = np.float32(0.25) ** 2
    nearest = v.copy()
    for t in range(1, steps + 1):
        v = round_stochastic(b2 * v + (np.float32(1) - b2) * g2, moment_noise(cfg.seed, t, 0, n) >> np.uint64(16))
        nearest = round_nearest(b2 * nearest + (np.float32(1) - b2) * g2)
    exact = 1 / 16 + (1 - 1 / 16) * float(b2) ** steps
    assert abs(v.mean() - exact) < 1e-3 * exact, (v.mean(), exact, seed)   # the mean of 200k draws
    assert nearest[0] == 1.0, nearest[0]   # round to nearest never moved
    # The trainer rounds with this noise (the test above); here its moments stay
    # bfloat16 over a run with densification.
    tr.run(120, progress=False)
    st = tr.state()
    assert all(bf16_exact(st[k + name]) for k in ("adam_m.", "adam_v.") for name in PARAMS), seed
    assert np.any(st["adam_v.sh"] != 0), seed


def test_bfloat16_state_resumes_to_the_bit():
    """A run stopped and resumed from its state (moments as floats, bfloat16-exact)
    ends with the bits of the run that did not stop; a float32 state given to a
    bfloat16 trainer starts from its moments rounded to nearest."""
    rng, seed = make_rng()
    ds = make_dataset(rng, random_gaussians(rng, 60), n_views=4)
    cfg = small_config(adam_moments="bfloat16", seed=int(rng.integers(0, 2 ** 31)))
    backend = splat.BackendConfig(backend="cpu", deterministic=True)
    whole = splat.Trainer.from_dataset(ds, cfg, backend)
    whole.run(120, progress=False)   # densifies at 50 and 100
    first = splat.Trainer.from_dataset(ds, cfg, backend)
    first.run(70, progress=False)
    resumed = splat.Trainer(ds, cfg, backend, first.state(), step=first.step_count,
                            scene_extent=first.scene_extent)
    resumed.run(50, progress=False)
    a, b = whole.state(), resumed.state()
    for k in a:
        np.testing.assert_array_equal(b[k], a[k], err_msg=f"{k}; seed {seed}")
    # float32 moments in: rounded to nearest, ties to even
    f32 = splat.Trainer.from_dataset(ds, small_config(seed=cfg.seed, adam_moments="float32"), backend)
    f32.run(30, progress=False)
    state = f32.state()
    bf = splat.Trainer(ds, cfg, backend, state, step=30, scene_extent=f32.scene_extent).state()
    for name in PARAMS:
        np.testing.assert_array_equal(bf["adam_v." + name], round_nearest(state["adam_v." + name]),
                                      err_msg=f"{name}; seed {seed}")
        assert not bf16_exact(state["adam_v." + name]) and bf16_exact(bf["adam_m." + name])


@pytest.mark.parametrize("value", ["bf16", "float16", 16])
def test_adam_moments_refuses_other_values(value):
    with pytest.raises(ValueError, match="adam_moments"):
        splat.TrainConfig(adam_moments=value)
