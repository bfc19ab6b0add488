"""The MCMC strategy on the CUDA backend (the shared SIMT kernels of
shaders/kernels/train_mcmc.h): a refine on a constructed scene against the
numpy oracle, the position noise, the budget at every step, and
deterministic double runs. Run on a GPU: `pytest -m cuda tests/test_cuda_mcmc.py`."""
import numpy as np
import pytest

import splat
from splat.reference import mcmc as ref
from _scenes import make_rng
from test_mcmc import assert_noise_matches, assert_refined, constructed_state, mcmc_config, refine_case, run_counts
from test_training import make_dataset, random_gaussians

pytestmark = pytest.mark.cuda

_ok, _why = splat.backend_available("cuda")
if not _ok:
    pytest.skip(f"CUDA backend not available: {_why}", allow_module_level=True)


def test_cuda_refine_matches_numpy_on_a_constructed_scene():
    rng, seed = make_rng()
    got, want, _, n = refine_case("cuda", rng)
    assert_refined(got, want, n, f"cuda, seed {seed}")


@pytest.mark.parametrize("adam_moments", ["float32", "bfloat16"])
def test_cuda_refine_grows_through_reallocation(adam_moments):
    """A refine that outgrows every state buffer keeps the rows (the copy
    into the larger buffers) and matches the CPU backend's bit for bit on
    the copied rows, moments included (bfloat16: the packed words)."""
    rng, seed = make_rng()
    ds = make_dataset(rng, random_gaussians(rng, 30), n_views=3)
    state = constructed_state(rng, 2000, 300)
    cfg = mcmc_config(seed=int(rng.integers(0, 2 ** 31)), adam_moments=adam_moments)
    out = {}
    for backend in ("cpu", "cuda"):
        tr = splat.Trainer(ds, cfg, splat.BackendConfig(backend=backend), state)
        r = tr._native.mcmc_refine(cfg.mcmc_min_opacity, 1000, cfg.seed, 77)
        assert r["count"] == 3000 and r["relocated"] == 300, (backend, r, seed)
        out[backend] = tr.state()
    for name in ("means", "quats", "sh"):
        np.testing.assert_array_equal(out["cuda"][name], out["cpu"][name], err_msg=f"{name}; seed {seed}")
    for name in ("means", "log_scales", "quats", "opacity_logits", "sh"):
        for k in ("adam_m.", "adam_v."):
            np.testing.assert_array_equal(out["cuda"][k + name], out["cpu"][k + name], err_msg=f"{k}{name}; seed {seed}")
    assert np.any(out["cuda"]["adam_v.sh"] != 0), seed
    for name in ("opacity_logits", "log_scales"):
        np.testing.assert_allclose(out["cuda"][name], out["cpu"][name], rtol=1e-5, atol=1e-5, err_msg=name)


def test_cuda_position_noise_matches_numpy():
    rng, seed = make_rng()
    ds = make_dataset(rng, random_gaussians(rng, 30), n_views=3)
    state = constructed_state(rng, 500, 150)
    cfg = mcmc_config(seed=int(rng.integers(0, 2 ** 31)))
    tr = splat.Trainer(ds, cfg, splat.BackendConfig(backend="cuda"), state)
    step, scale = int(rng.integers(1, 30000)), float(cfg.mcmc_noise_lr * rng.uniform(1e-6, 1e-4))
    tr._native.mcmc_noise(scale, cfg.seed, step)
    want = ref.position_noise(state["means"], state["log_scales"], state["quats"], state["opacity_logits"], scale,
                              cfg.seed, step)
    assert_noise_matches(tr.state()["means"], state["means"], want, f"cuda, seed {seed}")


def test_cuda_mcmc_holds_the_budget_and_is_deterministic():
    rng, seed = make_rng()
    ds = make_dataset(rng, random_gaussians(rng, 60), n_views=6)
    init = random_gaussians(rng, 100)
    init.opacity_logits[:25] = -8.0
    cfg = mcmc_config(max_gaussians=130, seed=int(rng.integers(0, 1000)))
    states = []
    for _ in range(2):
        tr = splat.Trainer.from_dataset(ds, cfg, splat.BackendConfig(backend="cuda", deterministic=True),
                                        initial=init)
        counts = run_counts(tr, 120)
        assert max(counts) <= 130 and counts[-1] == 130, (counts, seed)
        states.append(tr.state())
    for k in states[0]:
        assert states[0][k].tobytes() == states[1][k].tobytes(), (k, seed)


@pytest.mark.parametrize("adam_moments", ["float32", "bfloat16"])
def test_cuda_mcmc_learns_a_small_scene_without_allocating_when_warm(adam_moments):
    """The CPU learning test's scene and bar (test_mcmc.py) on the GPU."""
    rng, seed = make_rng()
    gt = random_gaussians(rng, 200)
    ds = make_dataset(rng, gt, n_views=10)
    test = make_dataset(rng, gt, n_views=3)
    cfg = mcmc_config(steps=900, mcmc_refine_from=50, mcmc_refine_every=50, mcmc_refine_until=700, max_gaussians=400,
                      adam_moments=adam_moments)
    tr = splat.Trainer.from_dataset(ds, cfg, splat.BackendConfig(backend="cuda"))
    before = splat.evaluate(tr, test).psnr
    tr.run(860, progress=False)
    warm = tr._native.allocation_count
    s = tr.run(40, progress=False)
    assert tr._native.allocation_count == warm
    after = splat.evaluate(tr, test)
    assert after.psnr >= 28.0 and after.psnr > before + 10, (before, after.psnr, seed)
    assert np.isfinite(s.loss) and 200 < s.num_gaussians <= 400
