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


def numpy_batches(ds, cfg, state, views, ends=()):
    """The batches from the native primitives: each view's gradients in turn, their
    float32 sum in view order divided by the views, Adam at the rates times
    sqrt(views) and the betas to the power views, then each view step's events.
    A batch ends early at train.steps and at each step of `ends`; its update number
    is ceil((first - 1) / views) + 1 (one a batch while they run whole)."""
    one = splat.TrainConfig(**{**{k: getattr(cfg, k) for k in cfg.kept_keys()}, "batch_views": 1})
    tr = splat.Trainer(ds, one, splat.BackendConfig(backend="cpu"), state)
    nat = tr._native
    tr.batch_losses = []   # each batch's loss: its views' float32 mean
    while tr.step_count < cfg.steps:
        first = tr.step_count + 1
        last = min([first + views - 1, cfg.steps] + [e for e in ends if e >= first])
        n = last - first + 1
        update = -(-(first - 1) // views) + 1
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


@pytest.mark.parametrize("strategy,views", [("default", 4), ("mcmc", 3)])
def test_batches_end_where_the_caller_names_a_step(strategy, views):
    """step(until=e) ends a batch at e (an evaluation, a checkpoint): the state exists
    there, and the next batch starts after it; to the bit of the numpy batches."""
    rng, seed = make_rng()
    ds, state = scene(rng)
    cfg = recipe(strategy, views, seed % 1000, steps=int(rng.integers(40, 61)))
    ends = sorted({int(e) for e in rng.choice(np.arange(1, cfg.steps), 6, replace=False)})
    tr = splat.Trainer(ds, cfg, splat.BackendConfig(backend="cpu"), state)
    counts = []
    while tr.step_count < cfg.steps:
        counts.append(tr.step(read_loss=True, until=min((e for e in ends if e > tr.step_count), default=None)).step)
    assert set(ends) <= set(counts), (ends, counts, seed)
    assert all(b - a <= views for a, b in zip([0] + counts, counts)), (counts, seed)
    ref = numpy_batches(ds, cfg, state, views, ends)
    for k, v in ref.state().items():
        np.testing.assert_array_equal(tr.state()[k], v, err_msg=f"{k} ({strategy}); ends {ends}; seed {seed}")


def test_a_run_resumed_where_a_batch_ended_early_continues_it():
    """A checkpoint at a named step off the batches' grid resumes to the same bits as the
    run that went on (batches after it start where it ended, the update count too)."""
    rng, seed = make_rng()
    ds, state = scene(rng)
    cfg = recipe("default", 4, seed % 1000, steps=44)
    cut = int(rng.integers(9, 35))
    while cut % 4 == 0:
        cut += 1
    whole = splat.Trainer(ds, cfg, splat.BackendConfig(backend="cpu"), state)
    whole.run(cut, progress=False)
    assert whole.step_count == cut
    saved = whole.state()
    whole.run(44 - cut, progress=False)
    resumed = splat.Trainer(ds, cfg, splat.BackendConfig(backend="cpu"), saved, step=cut)
    resumed.run(44 - cut, progress=False)
    assert resumed.step_count == whole.step_count == 44
    for k, v in whole.state().items():
        np.testing.assert_array_equal(resumed.state()[k], v, err_msg=f"{k}; cut {cut}; seed {seed}")


def test_run_counts_view_steps_and_step_refuses_a_past_end(capsys):
    rng, seed = make_rng()
    ds, state = scene(rng)
    tr = splat.Trainer(ds, recipe("default", 4, seed % 1000, steps=40), splat.BackendConfig(backend="cpu"), state)
    last = tr.run(10, progress=False)
    assert tr.step_count == last.step == 10 and np.isfinite(last.loss)
    capsys.readouterr()
    last = tr.run(7, progress=True)
    assert last.step == 17
    # The bar ends at the run's last read: all 7 view steps, its loss and count.
    bar = capsys.readouterr().out.strip().splitlines()[-1]
    assert "7/7" in bar and f"loss {last.loss:.4f}" in bar and f"{last.num_gaussians:,} Gaussians" in bar, bar
    assert tr.step().step == 21
    with pytest.raises(ValueError, match=r"\[splat\] until: must be >= 22"):
        tr.step(until=21)
    with pytest.raises(ValueError, match=r"\[splat\] until: must be >= 22"):
        tr.update_views(21)
    assert tr.step(until=22).step == 22
    # update_views: the native batch's end, the run's last step included.
    assert tr.update_views(24) == (23, 24) and tr.update_views(100) == (23, 26)
    tr.run(15, progress=False)
    assert tr.update_views(100) == (38, 40) and tr.step(until=100).step == 40


def blender_like(rng):
    """A scene without a point cloud (as a Blender scene): it starts from random points."""
    ds, state = scene(rng)
    ds.points = ds.point_colors = None
    return ds


def test_a_random_start_trains_four_views_a_step_where_they_train_together():
    from splat.parallel import DataParallelTrainer, ProcessGroup
    rng, seed = make_rng()
    ds = blender_like(rng)
    cpu = splat.BackendConfig(backend="cpu")
    for over, want in (({}, 4), ({"batch_views": 2}, 2), ({"batch_views": 1}, 1), ({"strategy": "mcmc"}, 1),
                       ({"exposure": True}, 1), ({"visible_adam": True}, 1), ({"absgrad": True}, 1),
                       ({"random_background": True}, 1)):
        tr = splat.Trainer.from_dataset(ds, splat.TrainConfig(steps=20, seed=seed % 1000, **over), cpu)
        assert tr.config.batch_views == want, (over, tr.config.batch_views)
    # Ranks make the batch with a view each: the preset's batch goes, an explicit one is refused (below).
    ranks = DataParallelTrainer(ds, splat.TrainConfig(steps=20, seed=seed % 1000), cpu, ProcessGroup.single())
    assert ranks.trainer.config.batch_views == 1
    assert splat.TrainConfig(steps=20).for_random_start().one_view_a_rank().for_random_start().batch_views == 1
    # A capture (a point cloud) keeps one view a step.
    ds.points = rng.normal(size=(50, 3)).astype(np.float32)
    ds.point_colors = rng.uniform(size=(50, 3)).astype(np.float32)
    assert splat.Trainer.from_dataset(ds, splat.TrainConfig(steps=20), cpu).config.batch_views == 1


def test_cli_blender_run_batches_four_views_and_stops_at_every_named_step(tmp_path, capsys):
    """`splat train` on a Blender scene: four views an update, evaluations and checkpoints
    at exactly the steps asked (none a multiple of 4), config.toml recording the batch."""
    import json
    import tomllib
    from _cli import run_cli
    from _scenes import write_blender_scene
    write_blender_scene(tmp_path / "scene", 24, n_test_views=1, n_gaussians=60, n_views=6, seed=make_rng()[1] % 100000)
    rc, out, err = run_cli(capsys, "train", tmp_path / "scene", "--steps", 29, "--set", "output.eval_steps=[5,13,29]",
                           "--set", "output.checkpoint_steps=[11]", "--set", "train.densify_from=10", "--set", "train.densify_until=22",
                           "--backend", "cpu", "--out", tmp_path / "r", "--quiet")
    assert rc == 0, err
    assert ("note: a scene that starts from random points: 4 views a step, the 50% of the Gaussians that "
            "blend least pruned at step 22 (train.batch_views / train.prune_low_weight: set them yourself)") in out
    m = json.loads((tmp_path / "r" / "metrics.json").read_text())
    assert [e["step"] for e in m["evals"]] == [5, 13, 29] and m["steps"] == 29, m["evals"]
    assert sorted(p.name for p in (tmp_path / "r").glob("checkpoint_*.npz")) == ["checkpoint_11.npz"]
    assert tomllib.loads((tmp_path / "r" / "config.toml").read_text())["train"]["batch_views"] == 4
    # Set explicitly: no note for it.
    rc, out, err = run_cli(capsys, "train", tmp_path / "scene", "--steps", 6, "--set", "train.batch_views=1",
                           "--backend", "cpu", "--out", tmp_path / "one", "--quiet")
    assert rc == 0, err
    assert "starts from random points" not in out   # nor the pruning, at step 15000 of a 6-step run


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


def test_cli_batches_end_at_its_milestones(tmp_path, capsys):
    """Milestones 10 and 12 with 4 views a step: batches end at each, so each has its
    evaluation and checkpoint; the run ends at train.steps (21)."""
    import json
    from _cli import assert_user_error, run_cli
    rc, out, err = run_cli(capsys, "train", "--steps", 21, "--set", "train.batch_views=4", "--set",
                           "output.eval_steps=[10,12,21]", "--set", "output.checkpoint_steps=[10,12]",
                           "--backend", "cpu", "--out", tmp_path / "r", "--quiet")
    assert rc == 0, err
    m = json.loads((tmp_path / "r" / "metrics.json").read_text())
    assert [e["step"] for e in m["evals"]] == [10, 12, 21], m["evals"]
    assert sorted(p.name for p in (tmp_path / "r").glob("checkpoint_*.npz")) == ["checkpoint_10.npz",
                                                                                  "checkpoint_12.npz"]
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
