"""train.cap_scale_growth = g: from densify_until on, no Gaussian's scale grows
past g times its largest at that step. Checked on each backend against numpy
(the ceiling is the row maximum of the log scales at densify_until plus log g; a
capped step is the uncapped step of a twin trainer from the same state, clipped
to it), and on the CPU backend through checkpoints, densification, batches and
MCMC."""
import numpy as np
import pytest

import splat
from _scenes import make_rng
from test_training import make_dataset, random_gaussians, small_config

_cuda_ok, _cuda_why = splat.backend_available("cuda")
_CUDA = [pytest.mark.cuda, pytest.mark.skipif(not _cuda_ok, reason=f"CUDA: {_cuda_why}")]
BACKENDS = ["cpu", pytest.param("cuda", marks=_CUDA)]
UNTIL = 20


def backend_config(backend):
    # deterministic: twin GPU trainers then take the same steps to the bit
    return splat.BackendConfig(backend=backend, deterministic=True) if backend == "cuda" else \
        splat.BackendConfig(backend="cpu")


def growing_scene(rng, n=90):
    """A scene of wide Gaussians and a start of narrow ones, with a fast scale rate:
    the scales grow on every step."""
    ds = make_dataset(rng, random_gaussians(rng, 60, scale=(0.12, 0.3)), n_views=4)
    start = random_gaussians(rng, n, scale=(0.01, 0.03))
    return ds, start


def config(cap, **over):
    """cap: the growth factor (0: off). densify_from = densify_until: no densification,
    so every step keeps the Gaussians' rows."""
    kw = dict(steps=120, densify_from=UNTIL, densify_until=UNTIL, log_scales_lr=0.03, cap_scale_growth=float(cap))
    kw.update(over)
    return small_config(**kw)


def without_ceiling(state):
    return {k: v for k, v in state.items() if k != "scale_ceiling"}


@pytest.mark.parametrize("backend,growth", [("cpu", 1.0), pytest.param("cuda", 1.0, marks=_CUDA), ("cpu", 1.25),
                                            pytest.param("cuda", 1.25, marks=_CUDA)])
def test_the_ceiling_is_each_gaussians_largest_log_scale_at_densify_until(backend, growth):
    rng, seed = make_rng()
    ds, start = growing_scene(rng)
    bc = backend_config(backend)
    on = splat.Trainer.from_dataset(ds, config(growth, seed=seed), bc, initial=start)
    off = splat.Trainer.from_dataset(ds, config(0, seed=seed), bc, initial=start)
    for t in range(1, UNTIL + 1):
        on.step(read_loss=False)
        off.step(read_loss=False)
        if t < UNTIL:
            assert "scale_ceiling" not in on.state(), t
    a, b = on.state(), off.state()
    for k in b:  # the cap changes nothing at the step that records it
        assert a[k].tobytes() == b[k].tobytes(), (k, seed)
    want = (a["log_scales"].max(axis=1) + np.float32(np.log(np.float32(growth)))).astype(np.float32)
    np.testing.assert_allclose(a["scale_ceiling"], want, rtol=0, atol=1e-6, err_msg=f"seed {seed}")
    ceiling = a["scale_ceiling"]
    warm = on._native.allocation_count
    for _ in range(40):
        on.step(read_loss=False)
        off.step(read_loss=False)
    if backend == "cpu":  # recorded once; a capped step allocates nothing (a GPU's pair buffers may still grow)
        assert on._native.allocation_count == warm
    a, b = on.state(), off.state()
    np.testing.assert_array_equal(a["scale_ceiling"], ceiling)  # recorded once
    assert np.all(a["log_scales"] <= ceiling[:, None]), seed
    # The scene grows the scales: uncapped, most Gaussians pass their ceiling; capped, they sit on it.
    grew = b["log_scales"].max(axis=1) > ceiling + 1e-3
    assert grew.mean() > 0.3, (grew.mean(), seed)
    assert np.mean(a["log_scales"].max(axis=1) == ceiling) > 0.3, seed
    assert a["log_scales"].max(axis=1).mean() < b["log_scales"].max(axis=1).mean() - 0.05, seed


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_capped_step_is_the_uncapped_step_clipped_to_the_ceiling(backend):
    rng, seed = make_rng()
    ds, start = growing_scene(rng)
    bc = backend_config(backend)
    tr = splat.Trainer.from_dataset(ds, config(1, seed=seed), bc, initial=start)
    for _ in range(UNTIL + 15):
        tr.step(read_loss=False)
    state, step = tr.state(), tr.step_count
    # Lower some ceilings below the scales (a state may carry any ceiling), so the
    # clip bites on the scales that shrink this step too.
    ceiling = state["scale_ceiling"].copy()
    lower = rng.random(len(ceiling)) < 0.3
    ceiling[lower] = state["log_scales"][lower].min(axis=1) - 0.1
    state["scale_ceiling"] = ceiling
    on = splat.Trainer(ds, config(1, seed=seed), bc, state, step=step)
    off = splat.Trainer(ds, config(0, seed=seed), bc, without_ceiling(state), step=step)
    for _ in range(3):
        on.step(read_loss=False)
        off.step(read_loss=False)
        a, b = on.state(), off.state()
        clipped = np.minimum(b["log_scales"], ceiling[:, None])
        np.testing.assert_array_equal(a["log_scales"], clipped, err_msg=f"seed {seed}")
        assert np.any(b["log_scales"] > ceiling[:, None]), seed
        # The next step of the uncapped twin starts from the capped scales.
        off = splat.Trainer(ds, config(0, seed=seed), bc, without_ceiling(a), step=on.step_count)
    np.testing.assert_array_equal(on.state()["scale_ceiling"], ceiling)


def test_checkpoints_carry_the_ceiling_and_resume_to_the_same_bits(tmp_path):
    rng, seed = make_rng()
    ds, start = growing_scene(rng)
    cfg = config(1, seed=seed)
    bc = splat.BackendConfig(backend="cpu")
    tr = splat.Trainer.from_dataset(ds, cfg, bc, initial=start)
    for _ in range(UNTIL - 5):
        tr.step(read_loss=False)
    before = tmp_path / "before.npz"  # saved before densification stops: no ceiling yet
    tr.save_checkpoint(before)
    for _ in range(15):
        tr.step(read_loss=False)
    after = tmp_path / "after.npz"
    tr.save_checkpoint(after)
    for _ in range(10):
        tr.step(read_loss=False)
    want = tr.state()
    for path, steps in ((before, 25), (after, 10)):
        loaded = splat.Trainer.load_checkpoint(path, ds)
        assert ("scale_ceiling" in loaded.state()) == (path == after)
        for _ in range(steps):
            loaded.step(read_loss=False)
        got = loaded.state()
        assert sorted(got) == sorted(want)
        for k in want:
            assert got[k].tobytes() == want[k].tobytes(), (path.name, k, seed)
    # A state past densify_until without ceilings (as written before the cap
    # existed) records them at its next step: its scales after that update.
    old = splat.Trainer(ds, cfg, bc, without_ceiling(splat.Trainer.load_checkpoint(after, ds).state()),
                        step=UNTIL + 10)
    old.step(read_loss=False)
    s = old.state()
    np.testing.assert_array_equal(s["scale_ceiling"], s["log_scales"].max(axis=1))
    with pytest.raises(ValueError, match="scale_ceiling"):
        bad = dict(want, scale_ceiling=want["scale_ceiling"][:-1])
        splat.Trainer(ds, cfg, bc, bad, step=tr.step_count)


def test_densifying_after_densify_until_records_the_ceilings_anew():
    rng, seed = make_rng()
    ds, start = growing_scene(rng)
    tr = splat.Trainer.from_dataset(ds, config(1, seed=seed, densify_grad_threshold=1e-9),
                                    splat.BackendConfig(backend="cpu"), initial=start)
    for _ in range(UNTIL + 3):
        tr.step(read_loss=False)
    n = tr.num_gaussians
    tr._native.densify_at(tr.step_count)  # every Gaussian above the threshold: clone or split
    assert tr.num_gaussians > n
    assert "scale_ceiling" not in tr.state()
    tr.step(read_loss=False)
    s = tr.state()
    assert len(s["scale_ceiling"]) == tr.num_gaussians
    np.testing.assert_array_equal(s["scale_ceiling"], s["log_scales"].max(axis=1), err_msg=f"seed {seed}")


def test_batches_record_at_their_first_update_from_densify_until():
    rng, seed = make_rng()
    ds, start = growing_scene(rng)
    until = 18  # inside the batch of steps 17-20
    tr = splat.Trainer.from_dataset(ds, config(1, seed=seed, batch_views=4, densify_from=until,
                                               densify_until=until), splat.BackendConfig(backend="cpu"),
                                    initial=start)
    while tr.step_count < 16:
        tr.step(read_loss=False)
    assert "scale_ceiling" not in tr.state()
    tr.step(read_loss=False)
    assert tr.step_count == 20
    s = tr.state()
    ceiling = s["scale_ceiling"]
    np.testing.assert_array_equal(ceiling, s["log_scales"].max(axis=1))
    for _ in range(10):
        tr.step(read_loss=False)
    assert np.all(tr.state()["log_scales"] <= ceiling[:, None]), seed


def test_mcmc_has_no_cap():
    rng, seed = make_rng()
    ds, start = growing_scene(rng)
    cfg = config(1, seed=seed, strategy="mcmc", max_gaussians=120, mcmc_refine_from=5, mcmc_refine_until=15,
                 mcmc_refine_every=5)
    tr = splat.Trainer.from_dataset(ds, cfg, splat.BackendConfig(backend="cpu"), initial=start)
    for _ in range(UNTIL + 10):
        tr.step(read_loss=False)
    assert "scale_ceiling" not in tr.state()


def check_train_key(tmp_path, key, default, value, bad_values):
    """A [train] key's default, its value read from TOML, and errors naming it."""
    assert getattr(splat.TrainConfig(), key) == default
    path = tmp_path / "run.toml"
    path.write_text(f"[train]\n{key} = {value!r}\n")
    assert getattr(splat.load_config(path, check_paths=False).train, key) == value
    for bad in bad_values:
        with pytest.raises(ValueError, match=f"train.{key}"):
            splat.TrainConfig(**{key: bad})


def test_the_key_reads_from_toml_and_is_named_in_errors(tmp_path):
    check_train_key(tmp_path, "cap_scale_growth", 0.0, 1.5, ("yes", -1.0, 0.5))


def test_splat_check_says_mcmc_ignores_the_key():
    from splat.recipe import mode_warnings
    warned = mode_warnings(splat.TrainConfig(strategy="mcmc", cap_scale_growth=1.5))
    assert any(w.startswith("train.cap_scale_growth: unused with train.strategy = 'mcmc'") for w in warned), warned
    assert not any("cap_scale_growth" in w for w in mode_warnings(splat.TrainConfig(cap_scale_growth=1.5)))


def test_splat_check_describes_the_cap():
    from splat.recipe import describe
    assert "no Gaussian's scale grows" not in describe(splat.TrainConfig())[0]
    line = describe(splat.TrainConfig(cap_scale_growth=1.0, densify_until=6000))[0]
    assert line.endswith("; from step 6000 no Gaussian's scale grows past its largest at that step"), line
    line = describe(splat.TrainConfig(cap_scale_growth=1.5))[0]
    assert "from step 15000 no Gaussian's scale grows past 1.5x its largest at that step" in line, line
