"""Several views a training step ([train] batch_views): one update over B
consecutive view steps, the mean of their gradients, as the data-parallel batch
makes it, against the same update assembled in numpy from the native
primitives (forward_backward, gradients, set_gradients, apply_update) on the
CPU backend, to the bit; the last batch ending at train.steps; resuming at a
batch boundary; the configurations it refuses. GPU parity:
tests/test_cuda_batch_views.py."""
import math

import numpy as np
import pytest

import splat
from _scenes import make_rng
from splat.parallel.trainer import PARAMS
from test_training import make_dataset, random_gaussians, small_config


def scene(rng, **over):
    ds = make_dataset(rng, random_gaussians(rng, 40), n_views=6)
    init = random_gaussians(rng, 120)
    state = dict(means=init.means, log_scales=init.log_scales, quats=init.quats,
                 opacity_logits=init.opacity_logits, sh=init.sh)
    return ds, state


def recipe(strategy, views, seed, steps=60):
    if strategy == "mcmc":
        return small_config(steps=steps, strategy="mcmc", mcmc_refine_from=6, mcmc_refine_every=8,
                            mcmc_refine_until=40, max_gaussians=150, seed=seed, batch_views=views)
    return small_config(steps=steps, densify_from=6, densify_every=8, densify_until=40, opacity_reset_every=24,
                        seed=seed, batch_views=views, absgrad=strategy == "absgrad")


def numpy_batches(ds, cfg, state, views):
    """The batches from the native primitives: each view's gradients in turn, their
    float32 sum in view order divided by the views, Adam at the rates times
    sqrt(views) and the betas to the power views, then each view step's events."""
    one = splat.TrainConfig(**{**{k: getattr(cfg, k) for k in cfg.kept_keys()}, "batch_views": 1})
    tr = splat.Trainer(ds, one, splat.BackendConfig(backend="cpu"), state)
    nat = tr._native
    update = 0
    tr.batch_losses = []   # each batch's loss: its views' float32 mean
    while tr.step_count < cfg.steps:
        first = tr.step_count + 1
        n = min(views, cfg.steps - first + 1)
        last = first + n - 1
        total, loss = None, None
        for k in range(n):
            nat.forward_backward(first + k, nat.sh_degree_at(first))
            view_loss = np.float32(nat.last_loss())
            loss = view_loss if loss is None else loss + view_loss
            g = nat.gradients()
            total = {p: g[p].copy() for p in PARAMS} if total is None else {p: total[p] + g[p] for p in PARAMS}
        tr.batch_losses.append(float(loss / np.float32(n)))
        if n > 1:
            nat.set_gradients({p: total[p] / np.float32(n) for p in PARAMS})
        update += 1
        # Betas: the float32 values raised in double, as the trainer does.
        nat.apply_update(last, update, math.sqrt(n), float(np.float32(cfg.adam_beta1)) ** n,
                         float(np.float32(cfg.adam_beta2)) ** n)
        if cfg.strategy == "mcmc":
            for t in range(first, last + 1):
                if nat.mcmc_refines_at(t):
                    nat.mcmc_refine(cfg.mcmc_min_opacity, nat.mcmc_growth_at(nat.num_gaussians), cfg.seed, t)
            nat.mcmc_noise(cfg.mcmc_noise_lr * nat.means_lr(last), cfg.seed, last)
        for t in range(first, last + 1):
            if nat.densifies_at(t):
                nat.densify_at(t)
            if nat.resets_opacity_at(t):
                nat.reset_opacity()
    return tr


@pytest.mark.parametrize("strategy,views", [("default", 2), ("default", 3), ("absgrad", 4), ("mcmc", 2)])
def test_a_step_is_the_mean_update_of_its_views(strategy, views):
    rng, seed = make_rng()
    ds, state = scene(rng)
    cfg = recipe(strategy, views, seed % 1000, steps=int(rng.integers(40, 61)))
    tr = splat.Trainer(ds, cfg, splat.BackendConfig(backend="cpu"), state)
    counts, losses = [], []
    while tr.step_count < cfg.steps:
        s = tr.step(read_loss=True)
        counts.append(s.step)
        losses.append(s.loss)
    # The last batch ends at steps; every other one is `views` long.
    assert counts == list(range(views, cfg.steps, views)) + [cfg.steps] or \
        counts == list(range(views, cfg.steps + 1, views)), (counts, seed)
    ref = numpy_batches(ds, cfg, state, views)
    assert losses == ref.batch_losses, seed   # the views' mean loss
    got, want = tr.state(), ref.state()
    assert tr.num_gaussians == ref.num_gaussians, seed
    for k in want:
        np.testing.assert_array_equal(got[k], want[k], err_msg=f"{k} ({strategy}, {views} views); seed {seed}")


def test_one_view_a_step_is_the_trainer_of_one_view():
    rng, seed = make_rng()
    ds, state = scene(rng)
    a = splat.Trainer(ds, recipe("default", 1, seed % 1000, 30), splat.BackendConfig(backend="cpu"), state)
    b = splat.Trainer(ds, splat.TrainConfig(**{**{k: getattr(a.config, k) for k in a.config.kept_keys()}}),
                      splat.BackendConfig(backend="cpu"), state)
    for _ in range(30):
        a.step(read_loss=False)
        b.step(read_loss=False)
    for k, v in b.state().items():
        np.testing.assert_array_equal(a.state()[k], v, err_msg=f"{k}; seed {seed}")


def test_resuming_at_a_batch_boundary_continues_the_run():
    rng, seed = make_rng()
    ds, state = scene(rng)
    cfg = recipe("default", 2, seed % 1000, steps=40)
    whole = splat.Trainer(ds, cfg, splat.BackendConfig(backend="cpu"), state)
    while whole.step_count < 40:
        whole.step(read_loss=False)
    first = splat.Trainer(ds, cfg, splat.BackendConfig(backend="cpu"), state)
    while first.step_count < 18:
        first.step(read_loss=False)
    resumed = splat.Trainer(ds, cfg, splat.BackendConfig(backend="cpu"), first.state(), step=18)
    while resumed.step_count < 40:
        resumed.step(read_loss=False)
    for k, v in whole.state().items():
        np.testing.assert_array_equal(resumed.state()[k], v, err_msg=f"{k}; seed {seed}")


@pytest.mark.parametrize("key", ["exposure", "visible_adam"])
def test_modes_it_does_not_train_with_are_refused(key):
    with pytest.raises(ValueError, match=r"train\.batch_views: 2 views a step do not train with " + key):
        splat.TrainConfig(batch_views=2, **{key: True})
    splat.TrainConfig(batch_views=1, **{key: True})


@pytest.mark.parametrize("bad", [0, 65, -1])
def test_batch_views_out_of_range_names_the_key(bad):
    with pytest.raises(ValueError, match=r"train\.batch_views"):
        splat.TrainConfig(batch_views=bad)


def test_data_parallel_ranks_refuse_batches_of_views():
    from splat.parallel import DataParallelTrainer, ProcessGroup
    rng, _ = make_rng()
    ds, state = scene(rng)
    with pytest.raises(ValueError, match=r"\[parallel\] train\.batch_views"):
        DataParallelTrainer(ds, recipe("default", 2, 0), splat.BackendConfig(backend="cpu"), ProcessGroup.single(),
                            state=state)


def test_splat_check_describes_the_batch():
    from splat.recipe import describe
    lines = describe(splat.TrainConfig(batch_views=4, steps=30000))
    assert any(line.startswith("batch: 4 views a step") and "7500 updates" in line for line in lines), lines
    assert not any(line.startswith("batch:") for line in describe(splat.TrainConfig()))


def test_cli_trains_batches_and_evaluates_a_shared_milestone_once(tmp_path, capsys):
    """Milestones 10 and 12 both fall on step 12 with 4 views a step: one evaluation and
    one checkpoint there; the run ends at train.steps (21, inside a batch)."""
    import json
    from _cli import assert_user_error, run_cli
    rc, out, err = run_cli(capsys, "train", "--steps", 21, "--set", "train.batch_views=4", "--set",
                           "output.eval_steps=[10,12,21]", "--set", "output.checkpoint_steps=[10,12]",
                           "--backend", "cpu", "--out", tmp_path / "r", "--quiet")
    assert rc == 0, err
    m = json.loads((tmp_path / "r" / "metrics.json").read_text())
    assert [e["step"] for e in m["evals"]] == [12, 21], m["evals"]
    assert sorted(p.name for p in (tmp_path / "r").glob("checkpoint_*.npz")) == ["checkpoint_12.npz"]
    rc, out, err = run_cli(capsys, "train", "--steps", 8, "--set", "train.batch_views=2", "--set",
                           "train.visible_adam=true", "--backend", "cpu", "--out", tmp_path / "bad", "--quiet")
    assert_user_error(rc, err, "train.batch_views", "visible_adam")


def test_streamed_images_train_the_same_batches():
    """Views streamed from host memory (an image budget below the images), each batch's
    next view fetched while the one before trains: the state of the resident run."""
    rng, seed = make_rng()
    ds, state = scene(rng)
    cfg = recipe("default", 3, seed % 1000, steps=30)
    states = []
    for budget in (0, 1):
        tr = splat.Trainer(ds, cfg, splat.BackendConfig(backend="cpu"), state, image_budget=budget)
        while tr.step_count < cfg.steps:
            tr.step(read_loss=False)
        states.append((tr.image_storage["streamed"], tr.state()))
    assert [s for s, _ in states] == [False, True]
    for k, v in states[0][1].items():
        np.testing.assert_array_equal(states[1][1][k], v, err_msg=f"{k}; seed {seed}")
