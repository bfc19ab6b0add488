"""Data-parallel training (splat.parallel) on the CUDA backend: two ranks
through gloo, both on GPU 0, deterministic.

Oracles: one rank against the plain Trainer, bit for bit; two ranks against
each other and against the same batches computed in one process from the
trainer's primitives on the same GPU (each view's gradients read out with the
SH gradient expanded from its factors, summed in numpy and written back, so
Adam reads the full SH gradient), bit for bit."""
import numpy as np
import pytest

import splat
from _scenes import make_rng

pytestmark = pytest.mark.cuda

_ok, _why = splat.backend_available("cuda")
if not _ok:
    pytest.skip(f"CUDA backend not available: {_why}", allow_module_level=True)
torch = pytest.importorskip("torch")
if not torch.distributed.is_available():
    pytest.skip("this torch has no torch.distributed", allow_module_level=True)

from test_parallel import STATS, assert_one_rank_is_the_trainer, launch, one_process_batches  # noqa: E402


def cuda_config():
    return splat.BackendConfig(backend="cuda", deterministic=True)


@pytest.mark.parametrize("strategy", ["default", "mcmc", "exposure", "visible_adam"])
def test_one_cuda_rank_is_the_one_process_trainer(strategy):
    from _parallel_rank import scene
    rng, seed = make_rng()
    ds, cfg, state = scene(int(rng.integers(0, 2 ** 31)), strategy)
    # The rank sizes its pairs by reading the count back, the trainer on the device.
    dp = assert_one_rank_is_the_trainer(ds, cfg, state, cuda_config(), f"{strategy}; seed {seed}")
    assert dp.trainer.backend_config.pair_sizing == "readback"


@pytest.mark.parametrize("strategy", ["default", "mcmc", "exposure", "visible_adam"])
def test_two_cuda_ranks_agree_and_match_the_batches_in_one_process(tmp_path, strategy):
    rng, seed = make_rng()
    scene_seed, updates = int(rng.integers(0, 2 ** 31)), 18  # 36 view steps: densifications and a reset
    out, results = launch(tmp_path, scene_seed, strategy, updates, backend="cuda")
    for rank, (rc, err) in enumerate(results):
        assert rc == 0, f"rank {rank}: {err[-3000:]}"
    ranks = [np.load(f"{out}.rank{r}.npz") for r in range(2)]
    assert int(ranks[0]["step"]) == int(ranks[1]["step"]) == 2 * updates
    want = one_process_batches(scene_seed, strategy, updates,
                               backend_config=splat.BackendConfig(backend="cuda", deterministic=True,
                                                                  pair_sizing="readback")).state()
    for k in (k for k in want if k not in STATS):
        np.testing.assert_array_equal(ranks[1][k], ranks[0][k], err_msg=f"ranks differ: {k}; seed {seed}")
        np.testing.assert_array_equal(ranks[0][k], want[k], err_msg=f"{strategy} {k}; seed {seed}")
    assert np.isfinite(ranks[0]["losses"][4::5]).all()


def test_one_rank_reducing_through_nccl_is_the_one_process_trainer():
    # exchange="device"'s primitives on a communicator of one rank: the gradients'
    # mean in place (the SH gradient expanded, Adam reading it in full) and the
    # statistics' sums, through NCCL on this GPU; one rank's mean is its own
    # gradient, so the states match the plain trainer's bit for bit.
    from _parallel_rank import scene
    ok, why = splat._core.nccl_available()
    if not ok:
        pytest.skip(f"NCCL not available: {why}")
    rng, seed = make_rng()
    ds, cfg, state = scene(int(rng.integers(0, 2 ** 31)), "default")
    cfg_bc = splat.BackendConfig(backend="cuda", deterministic=True, pair_sizing="readback")
    tr = splat.Trainer(ds, cfg, cfg_bc, state)
    ref = splat.Trainer(ds, cfg, cfg_bc, state)
    nat = tr._native
    nat.join_ranks(splat._core.nccl_unique_id(), 0, 1)
    for t in range(1, 37):  # densifications and an opacity reset
        nat.forward_backward(t, nat.sh_degree_at(t))
        nat.reduce_gradients()
        nat.apply_update(t, t, 1.0, cfg.adam_beta1, cfg.adam_beta2)
        if nat.densifies_at(t):
            nat.reduce_densify_stats()
            nat.densify_at(t)
        if nat.resets_opacity_at(t):
            nat.reset_opacity()
        ref.step(read_loss=False)
    a, b = ref.state(), tr.state()
    for k in a:
        np.testing.assert_array_equal(b[k], a[k], err_msg=f"{k}; seed {seed}")
