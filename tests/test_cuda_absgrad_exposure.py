"""absgrad and exposure compensation on the CUDA backend against the CPU
backend: the accumulated absolute statistic for every backward variant, one
exposure step (loss, its 12-parameter gradient, the Gaussians' gradients,
the corrections after Adam), bitwise-reproducible deterministic runs with
both, and an exact resume of the corrections from a checkpoint.
Run on a GPU: `pytest -m cuda tests/test_cuda_absgrad_exposure.py`."""
import numpy as np
import pytest

import splat
from _parity import assert_rows_close, rel_err
from _scenes import make_rng
from test_exposure import check_warm_exposure_absgrad_allocates_nothing, random_corrections, shifted_dataset, state_of
from test_training import make_dataset, random_gaussians, small_config

pytestmark = pytest.mark.cuda

_ok, _why = splat.backend_available("cuda")
if not _ok:
    pytest.skip(f"CUDA backend not available: {_why}", allow_module_level=True)

VARIANTS = [dict(), dict(deterministic=True), dict(raster_backward="tg"), dict(raster_backward="original"),
            dict(raster_backward_atomic="lane_zero"), dict(raster_backward_sparse="off")]


@pytest.mark.parametrize("fields", VARIANTS, ids=lambda f: ",".join(f"{k}={v}" for k, v in f.items()) or "default")
def test_absgrad_statistic_matches_cpu(fields):
    rng, seed = make_rng()
    ds = make_dataset(rng, random_gaussians(rng, 300), n_views=1, width=96, height=80)
    start = state_of(random_gaussians(rng, 250))
    cfg = small_config(absgrad=True, densify_from=1000, densify_until=2000)
    out = {}
    for backend, extra in (("cpu", {}), ("cuda", fields)):
        tr = splat.Trainer(ds, cfg, splat.BackendConfig(backend=backend, **extra), start)
        tr.step()
        out[backend] = (tr.state(), tr._native.debug_snapshot())
    (c, cs), (g, gs) = out["cpu"], out["cuda"]
    np.testing.assert_array_equal(g["grad_count"], c["grad_count"])
    seen = c["grad_count"] > 0
    assert seen.sum() > 50, seed
    # Atomics reorder the sums: ~1e-6 relative, as the plain gradients; a splat at the
    # 1/255 cut-off can flip a few rows (_parity.assert_rows_close).
    for name, got, want, scale in (("grad_accum", g["grad_accum"], c["grad_accum"], None),
                                   ("means2d_abs", gs["grad.means2d_abs"], cs["grad.means2d_abs"], None),
                                   ("means2d", gs["grad.means2d"], cs["grad.means2d"], cs["grad.means2d_abs"])):
        assert_rows_close(got, want, f"{name} {fields}", seed, scale=scale)


def test_exposure_step_matches_cpu():
    rng, seed = make_rng()
    ds = shifted_dataset(rng, random_gaussians(rng, 200), random_corrections(rng, 3), 64, 48)
    e = random_corrections(rng, 3, gain=0.3, bias=0.1)
    start = state_of(random_gaussians(rng, 150), exposure=e)
    cfg = small_config(exposure=True, densify_from=1000, densify_until=2000)
    out = {}
    for backend in ("cpu", "cuda"):
        tr = splat.Trainer(ds, cfg, splat.BackendConfig(backend=backend), start)
        loss = tr.step().loss
        out[backend] = (loss, tr._native.debug_snapshot(), tr.state())
    (lc, sc, stc), (lg, sg, stg) = out["cpu"], out["cuda"]
    assert abs(lg - lc) <= 1e-5 * lc, (lc, lg, seed)
    assert rel_err(sg["grad.exposure"], sc["grad.exposure"]) < 1e-4, seed
    for name in ("means", "log_scales", "opacity_logits"):
        assert rel_err(sg[f"grad.{name}"], sc[f"grad.{name}"]) < 1e-4, (name, seed)
    # Adam's first step moves each parameter by about lr in its gradient's
    # sign: the trained view's twelve (where the gradient stands above
    # rounding noise), and no other view's (zero moments).
    m = np.abs(stc["adam_m.exposure"])
    clear = (m == 0) | (m > 1e-3 * m.max())
    np.testing.assert_allclose(stg["exposure"][clear], stc["exposure"][clear], rtol=0, atol=1e-6)
    for k in ("adam_m.exposure", "adam_v.exposure"):
        assert rel_err(stg[k], stc[k]) < 1e-4, (k, seed)


def test_deterministic_runs_with_absgrad_and_exposure_are_reproducible(tmp_path):
    rng, seed = make_rng()
    ds = shifted_dataset(rng, random_gaussians(rng, 120), random_corrections(rng, 4))
    cfg = small_config(steps=120, densify_from=10, densify_every=20, densify_until=100, absgrad=True,
                       exposure=True, seed=5)
    states = []
    for _ in range(2):
        tr = splat.Trainer.from_dataset(ds, cfg, splat.BackendConfig(backend="cuda", deterministic=True))
        tr.run(60, progress=False)
        if not states:
            tr.save_checkpoint(tmp_path / "c.npz")
        tr.run(60, progress=False)
        states.append(tr.state())
    for k in states[0]:
        assert states[0][k].tobytes() == states[1][k].tobytes(), (k, seed)
    # Resumed from the checkpoint at step 60: the same bytes at 120.
    resumed = splat.Trainer.load_checkpoint(tmp_path / "c.npz", ds)
    resumed.run(60, progress=False)
    for k, v in resumed.state().items():
        assert v.tobytes() == states[0][k].tobytes(), (k, seed)
    assert not np.allclose(states[0]["exposure"], np.eye(3, 4))


def test_cuda_exposure_and_absgrad_allocate_nothing_when_warm():
    check_warm_exposure_absgrad_allocates_nothing("cuda")
