"""Several views a training step ([train] batch_views) on the CUDA backend:
the accumulated mean against the CPU backend's (tests/test_batch_views.py holds
the CPU to the numpy batch to the bit); a batch's views rasterized together
(BackendConfig.view_launches, the default) against the same views one after
another, to the bit when deterministic; and batches whose views overflow the
pair buffers (a forced small capacity, anywhere in a batch, batches ending early
where the caller names a step among them) running again to the bit of the
read-back trainer's state, both deterministic.
Run on a GPU: `pytest -m cuda tests/test_cuda_batch_views.py`."""
import numpy as np
import pytest

import splat
from _scenes import make_rng
from test_cuda_training import assert_states_close, trainers
from test_training import make_dataset, random_gaussians, small_config

pytestmark = pytest.mark.cuda

_ok, _why = splat.backend_available("cuda")
if not _ok:
    pytest.skip(f"CUDA backend not available: {_why}", allow_module_level=True)


@pytest.mark.parametrize("views", [2, 3])
def test_batches_of_views_match_cpu(views):
    rng, seed = make_rng()
    ds = make_dataset(rng, random_gaussians(rng, 150), n_views=5, width=40, height=32)
    cfg = small_config(sh_degree_interval=2, densify_from=10_000, densify_until=10_000, batch_views=views)
    cpu, gpu = trainers(ds, cfg, initial=random_gaussians(rng, 300))
    for _ in range(4):
        a, b = cpu.step(), gpu.step()
        assert a.step == b.step and abs(a.loss - b.loss) <= 1e-5 * abs(a.loss), (a, b, seed)
    assert gpu.step_count == 4 * views
    # Four updates at rates times sqrt(views).
    assert_states_close(cpu.state(), gpu.state(), seed, f"{views} views a step", lr_steps=4 * 0.05 * views ** 0.5)


def run(ds, cfg, initial, sizing, capacities, launches="together", ends=()):
    tr = splat.Trainer.from_dataset(ds, cfg, splat.BackendConfig(backend="cuda", deterministic=True, pair_sizing=sizing,
                                                                 view_launches=launches), initial=initial)
    losses, pending = [], dict(capacities)
    while tr.step_count < cfg.steps:
        for k in [k for k in pending if k <= tr.step_count and sizing == "device"]:   # batches may skip k
            tr._native.set_pair_capacity(pending.pop(k))
        read = tr.step_count % 5 == 0
        until = min((e for e in ends if e > tr.step_count), default=None)
        s = tr.step(read_loss=read, until=until)
        assert until is None or s.step <= until
        if read:
            losses.append((s.step, s.loss))
    return tr, losses


@pytest.mark.parametrize("launches,named", [("together", False), ("per_view", False), ("together", True)])
def test_overflowing_views_of_a_batch_run_again_to_the_bit(launches, named):
    rng, seed = make_rng()
    ds = make_dataset(rng, random_gaussians(rng, 60), n_views=6, width=64, height=48)
    initial = random_gaussians(rng, 150)
    cfg = small_config(steps=99, densify_from=9, densify_until=90, densify_every=18, opacity_reset_every=54,
                       batch_views=3)
    # Small capacities at several batch starts: one view after another, the
    # views of a batch need different counts, so overflows fall on its first
    # view and on later ones; together, on the whole batch.
    capacities = {s: int(c) for s, c in zip((0, 21, 42, 63), rng.integers(60, 400, 4))}
    # Steps a caller names (off the batches' grid of 3): batches end there, and a
    # replay after an overflow runs the batches as they ran.
    ends = sorted({int(e) for e in rng.choice(np.arange(1, 99), 8, replace=False)}) if named else ()
    want, want_losses = run(ds, cfg, initial, "readback", {}, launches, ends)
    got, got_losses = run(ds, cfg, initial, "device", capacities, launches, ends)
    buffers = got._native.pair_buffers()
    assert buffers["overflows"] >= 2, (buffers, seed)
    a, b = want.state(), got.state()
    assert got.step_count == want.step_count == cfg.steps
    for name in a:
        np.testing.assert_array_equal(b[name], a[name], err_msg=f"{name}; seed {seed}")
    assert got_losses == want_losses, seed


def train_reading_losses(ds, cfg, initial, launches):
    tr = splat.Trainer.from_dataset(ds, cfg, splat.BackendConfig(backend="cuda", deterministic=True, timing="per_kernel",
                                                                 view_launches=launches), initial=initial)
    losses = []
    while tr.step_count < cfg.steps:
        losses.append(tr.step(read_loss=True).loss)
    return tr, losses


@pytest.mark.parametrize("views,strategy", [(2, "default"), (4, "default"), (3, "default_reg"), (3, "mcmc")])
def test_views_together_equal_one_after_another_to_the_bit(views, strategy):
    """The batch's views binned, rasterized and back-propagated together give
    the state and losses of the same views trained one after another, through
    densification and opacity resets (with the default strategy's regularisers
    from a step inside a batch: both paths start them by the batch's first
    step), or MCMC's regularisers, relocation and growth (views of 72x40:
    partial tiles at the right and bottom edges of every view)."""
    rng, seed = make_rng()
    ds = make_dataset(rng, random_gaussians(rng, 80), n_views=6, width=72, height=40)
    initial = random_gaussians(rng, 200)
    recipe = (dict(densify_from=2 * views, densify_until=10 * views, densify_every=2 * views,
                   opacity_reset_every=6 * views) if strategy != "mcmc" else
              dict(strategy="mcmc", max_gaussians=260, mcmc_refine_from=2 * views, mcmc_refine_until=10 * views,
                   mcmc_refine_every=2 * views))
    if strategy == "default_reg":
        recipe.update(opacity_reg=float(rng.uniform(0.01, 0.1)), scale_reg=float(rng.uniform(0.01, 0.1)),
                      reg_from=4 * views + 2)
    cfg = small_config(steps=12 * views, sh_degree_interval=3 * views, batch_views=views, **recipe)
    want, want_losses = train_reading_losses(ds, cfg, initial, "per_view")
    got, got_losses = train_reading_losses(ds, cfg, initial, "together")
    # One raster forward a batch together, one a view otherwise: the path ran.
    forwards = [tr._native.timings()["ts_fwd_rasterize"]["calls"] for tr in (got, want)]
    assert forwards == [cfg.steps // views, cfg.steps], (forwards, seed)
    a, b = want.state(), got.state()
    assert a["means"].shape[0] != initial.means.shape[0], "densification changed nothing"
    for name in a:
        np.testing.assert_array_equal(b[name], a[name], err_msg=f"{name}; seed {seed}")
    assert got_losses == want_losses, seed


def test_a_label_opened_once_a_view_counts_every_view():
    """Per-kernel timing sums every bracket of a label between two reads: with MCMC the
    views of a batch trained together run their projection backwards one after another
    (its regularisers come between a view's backward and its sum), each under
    ts_project_back within one op, the same launches as the views one after another in
    as many ops, so the two total about the same GPU time (when only a label's last
    bracket counted, the together path read about a quarter). No refine falls in the
    steps timed."""
    rng, seed = make_rng()
    ds = make_dataset(rng, random_gaussians(rng, 80), n_views=4, width=64, height=48)
    initial = random_gaussians(rng, 20000)
    cfg = small_config(steps=40, batch_views=4, strategy="mcmc", max_gaussians=40000, mcmc_refine_from=10_000,
                       mcmc_refine_until=20_000)
    totals = {}
    for launches in ("together", "per_view"):
        tr = splat.Trainer.from_dataset(ds, cfg, splat.BackendConfig(backend="cuda", timing="per_kernel",
                                                                     view_launches=launches), initial=initial)
        tr.step()   # kernels, buffers
        tr._native.timings(reset=True)
        for _ in range(8):
            tr.step(read_loss=False)
        rec = tr._native.timings(reset=True)["ts_project_back"]
        assert rec["calls"] >= 8, (launches, rec, seed)   # an op a step together, a view apart
        totals[launches] = rec["gpu_ms"]
    assert 0.6 < totals["together"] / totals["per_view"] < 1.7, (totals, seed)
