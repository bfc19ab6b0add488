"""train.prune_low_weight = f: at densify_until the floor(f n) Gaussians with the
least blend weight over the training views leave the state. The weights are
held to the numpy reference (its colour gradient under d_image = 1: alpha T
summed over the pixels) on each backend; the pruned state is a twin trainer's
state at the same step with those rows removed, exactly; checkpoints, batches,
MCMC and the config key are checked on the CPU backend."""
import numpy as np
import pytest

import splat
from _scenes import make_rng
from splat.reference import backward as ref_backward
from splat.reference import forward as ref_forward
from test_scale_cap import check_train_key
from test_training import make_dataset, random_gaussians, small_config

_cuda_ok, _cuda_why = splat.backend_available("cuda")
_CUDA = [pytest.mark.cuda, pytest.mark.skipif(not _cuda_ok, reason=f"CUDA: {_cuda_why}")]
UNTIL = 20


def backend_config(backend, deterministic=True):
    # deterministic: twin GPU trainers then take the same steps to the bit
    if backend == "cuda":
        return splat.BackendConfig(backend="cuda", deterministic=deterministic)
    return splat.BackendConfig(backend="cpu")


def scene(rng, n=150):
    """A target scene, and a start of overlapping Gaussians: some hidden behind
    others, some faint, some off-screen, so the weights spread over decades."""
    ds = make_dataset(rng, random_gaussians(rng, 60), n_views=4)
    g = random_gaussians(rng, n, spread=0.8)
    logits = rng.uniform(-6.0, 3.0, n).astype(np.float32)  # faint to opaque
    return ds, splat.Gaussians(g.means, g.log_scales, g.quats, logits, g.sh)


def config(fraction, **over):
    kw = dict(steps=60, densify_from=UNTIL, densify_until=UNTIL, prune_low_weight=float(fraction))
    kw.update(over)
    return small_config(**kw)


def reference_weights(state, cameras, blend_stop, antialiased=False):
    g = splat.Gaussians(*(state[k] for k in ("means", "log_scales", "quats", "opacity_logits", "sh")))
    total = np.zeros(len(g))
    for cam in cameras:
        out = ref_forward(g, cam, 0, np.zeros(3), blend_stop=blend_stop, antialiased=antialiased)
        total += ref_backward(out, np.ones((cam.height, cam.width, 3))).colors[:, 0]
    return total


# |device - reference| / max weight over fresh seeds, measured: cpu 1.4e-7 to 3.1e-7
# for all but a Gaussian whose alpha at some pixel falls on the other side of the
# blend's 1/255 skip in float than in float64 (one seed in six: 1.7e-4). So the
# bound holds for all but 2% of the Gaussians, and 2e-3 for every one.
@pytest.mark.parametrize("backend,deterministic,blend_stop,antialiased,bound", [
    ("cpu", True, "chunk", False, 3e-6), ("cpu", True, "splat", False, 3e-6), ("cpu", True, "chunk", True, 3e-6),
    pytest.param("cuda", False, "chunk", False, 1e-4, marks=_CUDA),
    pytest.param("cuda", True, "chunk", False, 1e-4, marks=_CUDA),
    pytest.param("cuda", False, "splat", False, 1e-4, marks=_CUDA)])
def test_blend_weights_match_the_reference(backend, deterministic, blend_stop, antialiased, bound):
    rng, seed = make_rng()
    ds, start = scene(rng)
    tr = splat.Trainer.from_dataset(ds, config(0, seed=seed, blend_stop=blend_stop, antialiased=antialiased),
                                    backend_config(backend, deterministic), initial=start)
    for _ in range(3):
        tr.step(read_loss=False)
    got = tr.blend_weights()
    want = reference_weights(tr.state(), ds.cameras, blend_stop, antialiased)
    assert got.shape == (tr.num_gaussians,) and got.dtype == np.float32
    err = np.abs(got - want) / want.max()
    print(f"seed {seed}: |device - reference| / max weight: 98th percentile {np.quantile(err, 0.98):.2e}, "
          f"max {err.max():.2e}")
    assert np.quantile(err, 0.98) < bound, (np.quantile(err, 0.98), seed)
    assert err.max() < 2e-3, (err.max(), seed)
    # The scene spreads the weights over a decade (hidden and faint Gaussians against dominant ones).
    assert want.max() > 10 * np.quantile(want, 0.1) and want.max() > 1.0, seed


@pytest.mark.parametrize("backend,views", [("cpu", 1), ("cpu", 4), pytest.param("cuda", 1, marks=_CUDA),
                                           pytest.param("cuda", 4, marks=_CUDA)])
def test_densify_until_prunes_the_least_weights_of_a_twin(backend, views):
    rng, seed = make_rng()
    ds, start = scene(rng)
    bc = backend_config(backend)
    until = 18 if views == 4 else UNTIL  # inside the batch of steps 17-20
    kw = dict(seed=seed, batch_views=views, densify_from=until, densify_until=until)
    on = splat.Trainer.from_dataset(ds, config(0.4, **kw), bc, initial=start)
    off = splat.Trainer.from_dataset(ds, config(0, **kw), bc, initial=start)
    n = on.num_gaussians
    while on.step_count < until:
        # Every loss read back, the pruning step's too: the step's, from before the pruning.
        stats = on.step(read_loss=True)
        assert stats.loss == off.step(read_loss=True).loss and np.isfinite(stats.loss), (on.step_count, seed)
        if on.step_count < until:
            assert on.num_gaussians == n and not stats.densified
    assert stats.densified and on.num_gaussians == n - int(0.4 * n)
    w = off.blend_weights()
    order = np.lexsort((np.arange(n), w))  # by weight, ties to the lower index
    keep = np.ones(n, bool)
    keep[order[:int(0.4 * n)]] = False
    a, b = on.state(), off.state()
    assert sorted(a) == sorted(b)
    for k in b:
        want = b[k][keep] if b[k].shape[:1] == (n,) else b[k]
        assert a[k].tobytes() == want.tobytes(), (k, seed)
    # A pruned Gaussian carried less weight than every kept one.
    assert w[~keep].max() <= w[keep].min(), seed
    for _ in range(10):  # and training goes on from the smaller state
        on.step(read_loss=False)
    assert on.num_gaussians == n - int(0.4 * n)
    assert np.all(np.isfinite(on.state()["means"]))


def test_checkpoints_before_the_pruning_resume_to_the_same_bits(tmp_path):
    rng, seed = make_rng()
    ds, start = scene(rng)
    tr = splat.Trainer.from_dataset(ds, config(0.5, seed=seed), backend_config("cpu"), initial=start)
    for _ in range(UNTIL - 5):
        tr.step(read_loss=False)
    path = tmp_path / "before.npz"
    tr.save_checkpoint(path)
    for _ in range(15):
        tr.step(read_loss=False)
    want = tr.state()
    loaded = splat.Trainer.load_checkpoint(path, ds)
    for _ in range(15):
        loaded.step(read_loss=False)
    got = loaded.state()
    assert len(got["means"]) < len(start)
    for k in want:
        assert got[k].tobytes() == want[k].tobytes(), (k, seed)


def test_mcmc_and_zero_prune_nothing():
    rng, seed = make_rng()
    ds, start = scene(rng)
    for cfg in (config(0.5, seed=seed, strategy="mcmc", max_gaussians=len(start), mcmc_refine_from=100),
                config(0, seed=seed)):
        tr = splat.Trainer.from_dataset(ds, cfg, backend_config("cpu"), initial=start)
        for _ in range(UNTIL + 5):
            tr.step(read_loss=False)
        assert tr.num_gaussians == len(start), cfg.strategy


def test_a_data_parallel_rank_prunes_as_one_process():
    from splat.parallel import DataParallelTrainer, ProcessGroup
    rng, seed = make_rng()
    ds, start = scene(rng)
    cfg = config(0.4, seed=seed)
    one = splat.Trainer.from_dataset(ds, cfg, backend_config("cpu"), initial=start)
    ranked = DataParallelTrainer.around(splat.Trainer.from_dataset(ds, cfg, backend_config("cpu"), initial=start),
                                        ProcessGroup.single())
    while one.step_count < UNTIL + 3:
        one.step(read_loss=False)
        ranked.step(read_loss=False)
    a, b = one.state(), ranked.trainer.state()
    assert len(a["means"]) == len(start) - int(0.4 * len(start))
    for k in a:
        assert a[k].tobytes() == b[k].tobytes(), (k, seed)


def test_the_key_reads_from_toml_and_is_named_in_errors(tmp_path):
    check_train_key(tmp_path, "prune_low_weight", 0.0, 0.5, ("half", -0.1, 1.0))


def test_splat_check_describes_the_pruning_and_warns_for_mcmc():
    from splat.recipe import describe, mode_warnings
    assert "blend weight" not in describe(splat.TrainConfig())[0]
    line = describe(splat.TrainConfig(prune_low_weight=0.5, densify_until=6000))[0]
    assert "; at step 6000 the 50% of Gaussians with the least blend weight over the training views pruned" in line
    warned = mode_warnings(splat.TrainConfig(strategy="mcmc", prune_low_weight=0.5))
    assert any(w.startswith("train.prune_low_weight: unused with train.strategy = 'mcmc'") for w in warned), warned


def test_a_random_start_prunes_half_unless_set():
    from splat.recipe import describe
    from splat.data import synthetic
    train, _ = synthetic.make_scene(n_gaussians=40, n_views=2, width=16, height=16, n_test_views=1)
    train.points = train.point_colors = None  # as a Blender scene: no point cloud
    for cfg, want in ((splat.TrainConfig(steps=30), 0.5), (splat.TrainConfig(steps=30, prune_low_weight=0.0), 0.0)):
        tr = splat.Trainer.from_dataset(train, cfg, splat.BackendConfig(backend="cpu"))
        assert tr.config.prune_low_weight == want
    line = describe(splat.TrainConfig(), "blender")[0]
    assert line == ("preset: default on a scene that starts from random points (a blender dataset): then "
                    "prune_low_weight 0.5, batch_views 4 where not set explicitly (batch_views where a batch's "
                    "views train together: the default strategy, without absgrad, random_background, exposure or "
                    "visible_adam, on one process)"), line
    assert not any("prune_low_weight" in x for x in describe(splat.TrainConfig(), "colmap"))


def test_given_weights_prune_their_least_and_a_nan_ranks_least():
    rng, seed = make_rng()
    ds, start = scene(rng)
    tr = splat.Trainer.from_dataset(ds, config(0.25, seed=seed), backend_config("cpu"), initial=start)
    n = tr.num_gaussians
    w = rng.permutation(n).astype(np.float32)  # distinct: the least quarter is known
    w[int(rng.integers(n // 2, n))] = np.nan
    before = tr.state()
    assert tr._native.prune_low_weight(tr.step_count, w) == n // 4
    ranked = np.where(np.isnan(w), -np.inf, w)
    keep = np.ones(n, bool)
    keep[np.argsort(ranked, kind="stable")[:n // 4]] = False
    np.testing.assert_array_equal(tr.state()["means"], before["means"][keep])
    with pytest.raises(ValueError, match="weights for"):
        tr._native.prune_low_weight(tr.step_count, w[:3])


@pytest.mark.parametrize("backend", ["cpu", pytest.param("cuda", marks=_CUDA)])
def test_a_replaced_state_has_no_loss_on_any_backend(backend):
    """last_loss() belongs to a forward of the current state: NaN before the first step and
    after a pruning replaces the state, on the CPU backend as on a GPU; a step's loss
    otherwise (the mean of its batch's views)."""
    rng, seed = make_rng()
    ds, start = scene(rng)
    tr = splat.Trainer.from_dataset(ds, config(0.25, seed=seed, batch_views=2), backend_config(backend),
                                    initial=start)
    assert np.isnan(tr._native.last_loss()), seed
    stats = tr.step(read_loss=True)
    assert np.isfinite(stats.loss) and stats.loss > 0 and tr._native.last_loss() == stats.loss, seed
    assert tr._native.prune_low_weight(tr.step_count, tr.blend_weights()) > 0, seed
    assert np.isnan(tr._native.last_loss()), seed
    assert np.isfinite(tr.step(read_loss=True).loss), seed
