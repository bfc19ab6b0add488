"""Data-parallel training (splat.parallel) on the CPU backend: two processes
through torch.distributed's gloo, started as torchrun starts ranks (RANK,
WORLD_SIZE, MASTER_ADDR, MASTER_PORT).

Oracles: one rank against the plain Trainer, bit for bit (the batch of one
is the one-process step); two ranks against each other and against the same
batches computed in one process from the trainer's own primitives (each
rank's view and statistics kept apart, the sum and the maximum taken in
numpy), bit for bit; a rank that leaves stops the other with RankFailure, not
a hang; ranks whose parameters differ stop with RanksDiverged."""
import dataclasses
import math
import os
import socket
import subprocess
import sys
import time

import numpy as np
import pytest

import splat
from _scenes import make_rng

torch = pytest.importorskip("torch")
if not torch.distributed.is_available():
    pytest.skip("this torch has no torch.distributed", allow_module_level=True)

from splat.parallel import DataParallelTrainer, ProcessGroup, RankEnv  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
RANK_SCRIPT = os.path.join(HERE, "_parallel_rank.py")
PARAMS = ("means", "log_scales", "quats", "opacity_logits", "sh")
STATS = ("grad_accum", "grad_count", "max_radii")


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launch(tmp_path, seed, strategy, updates, mode="train", world=2, backend="cpu"):
    """Starts `world` ranks of _parallel_rank.py; cuda: all on GPU 0."""
    port, out = free_port(), str(tmp_path / "run")
    procs = []
    for rank in range(world):
        env = dict(os.environ, RANK=str(rank), WORLD_SIZE=str(world), LOCAL_RANK=str(rank),
                   MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), PYTHONPATH=os.pathsep.join(sys.path),
                   SPLAT_TEST_BACKEND=backend)
        if backend == "cuda":
            env["SPLAT_CUDA_DEVICE"] = "0"
        procs.append(subprocess.Popen([sys.executable, RANK_SCRIPT, str(seed), strategy, str(updates), out, mode],
                                      env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    results = []
    for p in procs:
        try:
            stdout, stderr = p.communicate(timeout=240)
        except subprocess.TimeoutExpired:
            for q in procs:
                q.kill()
            pytest.fail("a rank hung")
        results.append((p.returncode, stderr))
    return out, results


def one_process_batches(seed, strategy, updates, world=2, backend_config=None):
    sys.path.insert(0, HERE)
    from _parallel_rank import scene
    ds, cfg, state = scene(seed, strategy)
    return simulate_batches(ds, cfg, state, updates, world, backend_config)


def simulate_batches(ds, cfg, state, updates, world=2, backend_config=None):
    """The batches of two ranks computed in one process from the native
    primitives: each rank's view in turn with its own statistics, the
    gradients' float32 sum over the ranks divided by their number, the
    statistics summed (radii: maximum) before each densification."""
    assert world == 2
    tr = splat.Trainer(ds, cfg, backend_config or splat.BackendConfig(backend="cpu"), state)
    nat = tr._native
    b1, b2, lr_scale = cfg.adam_beta1 ** world, cfg.adam_beta2 ** world, math.sqrt(world)
    stats = [nat.densify_stats() for _ in range(world)]
    for u in range(1, updates + 1):
        first = tr.step_count + 1
        last = first + world - 1
        grads, radii = [], []
        for r in range(world):
            nat.set_densify_stats(stats[r])
            nat.forward_backward(first + r, nat.sh_degree_at(first))
            grads.append(nat.gradients())
            radii.append(nat.step_radii())
            stats[r] = nat.densify_stats()
        keys = PARAMS + (("exposure",) if "exposure" in grads[0] else ())
        nat.set_gradients({k: (grads[0][k] + grads[1][k]) / np.float32(world) for k in keys})
        if cfg.visible_adam:  # what either view saw
            nat.set_step_radii(np.maximum(radii[0], radii[1]))
        nat.apply_update(last, u, lr_scale, b1, b2)
        if cfg.strategy == "mcmc":
            for t in range(first, last + 1):
                if nat.mcmc_refines_at(t):
                    nat.mcmc_refine(cfg.mcmc_min_opacity, nat.mcmc_growth_at(nat.num_gaussians), cfg.seed, t)
                    stats = [nat.densify_stats() for _ in range(world)]
            nat.mcmc_noise(cfg.mcmc_noise_lr * nat.means_lr(last), cfg.seed, last)
        for t in range(first, last + 1):
            if nat.densifies_at(t):
                nat.set_densify_stats(dict(grad_accum=stats[0]["grad_accum"] + stats[1]["grad_accum"],
                                           grad_count=stats[0]["grad_count"] + stats[1]["grad_count"],
                                           max_radii=np.maximum(stats[0]["max_radii"], stats[1]["max_radii"])))
                nat.densify_at(t)
                stats = [nat.densify_stats() for _ in range(world)]
            if nat.resets_opacity_at(t):
                nat.reset_opacity()
    return tr


@pytest.mark.parametrize("strategy", ["default", "mcmc", "exposure", "visible_adam"])
def test_one_rank_is_the_one_process_trainer(strategy):
    rng, seed = make_rng()
    sys.path.insert(0, HERE)
    from _parallel_rank import scene
    ds, cfg, state = scene(int(rng.integers(0, 2 ** 31)), strategy)
    assert_one_rank_is_the_trainer(ds, cfg, state, splat.BackendConfig(backend="cpu"), f"{strategy}; seed {seed}")


def assert_one_rank_is_the_trainer(ds, cfg, state, backend_config, what):
    dp = DataParallelTrainer(ds, cfg, backend_config, ProcessGroup.single(), state=state)
    ref = splat.Trainer(ds, cfg, backend_config, state)
    for _ in range(36):  # through densifications, an opacity reset or MCMC refines
        dp.step()
        ref.step(read_loss=False)
    a, b = ref.state(), dp.state()
    assert dp.step_count == ref.step_count == 36 and dp.updates == 36
    for k in a:
        np.testing.assert_array_equal(b[k], a[k], err_msg=f"{k}: {what}")
    return dp


@pytest.mark.parametrize("strategy", ["default", "mcmc", "exposure", "visible_adam"])
def test_two_ranks_agree_and_match_the_batches_in_one_process(tmp_path, strategy):
    rng, seed = make_rng()
    scene_seed, updates = int(rng.integers(0, 2 ** 31)), 18  # 36 view steps: densifications and a reset
    out, results = launch(tmp_path, scene_seed, strategy, updates)
    for rank, (rc, err) in enumerate(results):
        assert rc == 0, f"rank {rank}: {err[-3000:]}"
    ranks = [np.load(f"{out}.rank{r}.npz") for r in range(2)]
    assert int(ranks[0]["step"]) == int(ranks[1]["step"]) == 2 * updates
    want = one_process_batches(scene_seed, strategy, updates).state()
    # Parameters and moments; each rank's statistics since the last densification are its own views'.
    for k in (k for k in want if k not in STATS):
        np.testing.assert_array_equal(ranks[1][k], ranks[0][k], err_msg=f"ranks differ: {k}; seed {seed}")
        np.testing.assert_array_equal(ranks[0][k], want[k], err_msg=f"{strategy} {k}; seed {seed}")
    losses = ranks[0]["losses"]
    assert np.isfinite(losses[4::5]).all() and np.array_equal(losses, ranks[1]["losses"], equal_nan=True)
    if strategy == "exposure":  # every view's correction moved, the two ranks' views' most
        moved = np.abs(ranks[0]["exposure"] - np.eye(3, 4, dtype=np.float32)).max(axis=(1, 2))
        assert moved.min() > 0 and np.abs(ranks[0]["exposure"].mean(axis=0) - np.eye(3, 4)).max() < 1e-6, seed


def test_a_rank_that_leaves_stops_the_other(tmp_path):
    t0 = time.monotonic()
    out, results = launch(tmp_path, int(make_rng()[0].integers(0, 2 ** 31)), "default", 20, mode="die")
    assert results[1][0] == 0
    assert results[0][0] == 7, results[0][1][-3000:]
    text = open(f"{out}.rank0.txt").read()
    assert "[parallel] rank 0 of 2: all_reduce failed" in text, text
    assert time.monotonic() - t0 < 200


def test_ranks_with_other_parameters_stop_at_the_start(tmp_path):
    out, results = launch(tmp_path, int(make_rng()[0].integers(0, 2 ** 31)), "default", 5, mode="diverge")
    for rank, (rc, err) in enumerate(results):
        assert rc == 8, (rank, err[-3000:])
        assert "the ranks' parameters differ after 0 view steps" in open(f"{out}.rank{rank}.txt").read()


def test_a_checkpoint_of_two_ranks_resumes_on_one(tmp_path):
    rng, seed = make_rng()
    scene_seed = int(rng.integers(0, 2 ** 31))
    out, results = launch(tmp_path, scene_seed, "default", 10)
    assert all(rc == 0 for rc, _ in results), results[0][1][-3000:]
    saved = np.load(f"{out}.rank0.npz")
    state = {k: saved[k] for k in saved.files if k not in ("step", "losses")}
    from _parallel_rank import scene
    ds, cfg, _ = scene(scene_seed, "default")
    dp = DataParallelTrainer(ds, cfg, splat.BackendConfig(backend="cpu"), ProcessGroup.single(), state=state,
                             step=int(saved["step"]))
    assert dp.step_count == 20 and dp.updates == 20
    # One rank goes on as the one-process trainer from that checkpoint does.
    ref = splat.Trainer(ds, cfg, splat.BackendConfig(backend="cpu"), state, step=20)
    for _ in range(8):
        dp.step()
        ref.step(read_loss=False)
    for k in PARAMS:
        np.testing.assert_array_equal(dp.state()[k], ref.state()[k], err_msg=f"{k}; seed {seed}")


def test_the_rank_environment_is_read_and_checked():
    env = dict(RANK="1", WORLD_SIZE="4", MASTER_ADDR="node0", MASTER_PORT="29500")
    assert RankEnv.from_env(env) == RankEnv(1, 4, 1, "node0", 29500)
    assert RankEnv.from_env(dict(env, LOCAL_RANK="0")).local_rank == 0
    with pytest.raises(ValueError, match=r"\[parallel\] MASTER_PORT not set"):
        RankEnv.from_env({k: v for k, v in env.items() if k != "MASTER_PORT"})
    with pytest.raises(ValueError, match=r"RANK=4: must be below WORLD_SIZE=4"):
        RankEnv.from_env(dict(env, RANK="4"))
    with pytest.raises(ValueError, match=r"WORLD_SIZE='two': expected an integer"):
        RankEnv.from_env(dict(env, WORLD_SIZE="two"))
    with pytest.raises(ValueError, match=r"MASTER_PORT=70000: must be 1..65535"):
        RankEnv.from_env(dict(env, MASTER_PORT="70000"))


def test_what_several_ranks_do_not_support_is_refused_before_training():
    rng, _ = make_rng()
    from _parallel_rank import scene
    ds, cfg, state = scene(int(rng.integers(0, 2 ** 31)), "default")
    two = ProcessGroup(0, 2)  # never reaches a collective: refused first
    values = {f.name: getattr(cfg, f.name) for f in dataclasses.fields(cfg)}
    for key in ("exposure", "visible_adam"):
        with pytest.raises(ValueError, match=rf"\[parallel\] train.{key}: the device exchange does not carry"):
            DataParallelTrainer(ds, splat.TrainConfig(**dict(values, **{key: True})),
                                splat.BackendConfig(backend="cpu"), two, state=state, exchange="device")
    with pytest.raises(ValueError, match=r"exchange='device' reduces through NCCL on CUDA devices; backend cpu"):
        DataParallelTrainer(ds, cfg, splat.BackendConfig(backend="cpu"), two, state=state, exchange="device")
    with pytest.raises(ValueError, match="exchange: expected 'auto', 'host' or 'device'"):
        DataParallelTrainer(ds, cfg, splat.BackendConfig(backend="cpu"), ProcessGroup.single(), exchange="gloo")
    with pytest.raises(ValueError, match="lr_scaling"):
        DataParallelTrainer(ds, cfg, splat.BackendConfig(backend="cpu"), ProcessGroup.single(), lr_scaling="linear")
    with pytest.raises(TypeError, match="group"):
        DataParallelTrainer(ds, cfg, splat.BackendConfig(backend="cpu"), None)


def test_auto_exchange_goes_through_the_gpus_only_when_every_rank_has_its_own():
    from splat.parallel.trainer import choose_exchange
    a, b = ("node1", "", "0"), ("node1", "", "1")
    assert choose_exchange([(True, a), (True, b)]) == "device"
    assert choose_exchange([(True, a), (True, a)]) == "host"          # two ranks on one GPU: NCCL refuses
    assert choose_exchange([(True, a), (False, b)]) == "host"         # a rank without NCCL (or not on CUDA)
    assert choose_exchange([(True, a), (True, ("node2", "", "0"))]) == "device"   # the same ordinal on another host
    assert choose_exchange([(True, ("n", "3", "0")), (True, ("n", "4", "0"))]) == "device"  # one visible GPU each


def test_gradients_of_the_wrong_size_are_refused_naming_the_array():
    rng, _ = make_rng()
    from _parallel_rank import scene
    ds, cfg, state = scene(int(rng.integers(0, 2 ** 31)), "default")
    tr = splat.Trainer(ds, cfg, splat.BackendConfig(backend="cpu"), state)
    nat = tr._native
    nat.forward_backward(1, 0)
    grads = nat.gradients()
    nat.set_gradients(grads)  # as they are: accepted
    with pytest.raises(ValueError, match=r"gradients: missing quats"):
        nat.set_gradients({k: v for k, v in grads.items() if k != "quats"})
    with pytest.raises(ValueError, match=r"state.means: expected .* values"):
        nat.set_gradients(dict(grads, means=grads["means"][:-1]))
    with pytest.raises(ValueError, match=r"gradients: array 4 has"):
        nat.set_gradients(dict(grads, sh=grads["sh"][:, :-1]))
    with pytest.raises(ValueError, match=r"densification statistics: missing max_radii"):
        nat.set_densify_stats({k: v for k, v in nat.densify_stats().items() if k != "max_radii"})
    assert "exposure" not in grads
    with pytest.raises(ValueError, match=r"exposure given, but this run has no exposure compensation"):
        nat.set_gradients(dict(grads, exposure=np.zeros((len(ds), 3, 4), np.float32)))
    # With exposure compensation: every view's correction gradient, zero but the step's view's.
    ds, cfg, state = scene(int(rng.integers(0, 2 ** 31)), "exposure")
    nat = splat.Trainer(ds, cfg, splat.BackendConfig(backend="cpu"), state)._native
    nat.forward_backward(1, 0)
    grads = nat.gradients()
    assert grads["exposure"].shape == (len(ds), 3, 4)
    assert (np.abs(grads["exposure"]).reshape(len(ds), -1).max(axis=1) > 0).sum() == 1
    # A refused call applies nothing: the gradients stay those of the step.
    other = {k: (v + np.float32(1.0)).astype(np.float32) for k, v in grads.items()}
    with pytest.raises(ValueError, match=r"gradients: exposure has 12 values, expected"):
        nat.set_gradients(dict(other, exposure=other["exposure"][:1]))
    with pytest.raises(ValueError, match=r"gradients: missing exposure"):
        nat.set_gradients({k: v for k, v in other.items() if k != "exposure"})
    after = nat.gradients()
    for k, v in grads.items():
        assert np.array_equal(after[k], v), k
    nat.set_gradients(other)  # whole: accepted
    assert np.array_equal(nat.gradients()["exposure"], other["exposure"])


def test_nccl_loads_at_run_time_and_makes_communicator_ids():
    # The [multigpu] extra's NCCL, found through the wheel's folder or
    # SPLAT_NCCL_LIBRARY; an id needs no GPU. Without it: the reason names the extra.
    ok, why = splat._core.nccl_available()
    if not ok:
        assert "[multigpu]" in why or "SPLAT_CUDA=OFF" in why, why
        pytest.skip(f"NCCL not installed: {why}")
    a, b = splat._core.nccl_unique_id(), splat._core.nccl_unique_id()
    assert isinstance(a, bytes) and len(a) == len(b) == 128 and a != b
