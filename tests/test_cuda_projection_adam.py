"""The projection backward with the Adam step fused after it
(BackendConfig.projection_adam = "fused", the default for steps of one view)
against the two kernels apart ("separate") on the CUDA backend: the same bytes
of the whole training state, moments and densification statistics included,
and of the last step's gradients, over steps with densification and an
opacity reset, with each kind of moments and the update's options; and the
CPU backend's state within the tolerances of the other CUDA training tests.
Run on a GPU: `pytest -m cuda tests/test_cuda_projection_adam.py`."""
import pytest

import splat
from _scenes import make_rng
from test_cuda_training import assert_states_close
from test_training import make_dataset, random_gaussians, small_config

pytestmark = pytest.mark.cuda

_ok, _why = splat.backend_available("cuda")
if not _ok:
    pytest.skip(f"CUDA backend not available: {_why}", allow_module_level=True)


def train(ds, cfg, state, steps, **fields):
    tr = splat.Trainer(ds, cfg, splat.BackendConfig(backend="cuda", **fields), state)
    assert tr.backend == "cuda"
    for _ in range(steps):
        tr.step(read_loss=False)
    return tr


@pytest.mark.parametrize("options", [
    dict(adam_moments="float32"),
    dict(adam_moments="bfloat16", visible_adam=True),
    dict(adam_moments="bfloat16", exposure=True, absgrad=True, antialiased=True),
])
def test_fused_update_trains_the_bits_of_the_two_kernels(options):
    rng, seed = make_rng()
    ds = make_dataset(rng, random_gaussians(rng, 120), n_views=3, width=56, height=40)
    # Past 256 Gaussians, so that several threadgroups each step their own, the last
    # one partial; densification changes the count, the reset the opacity moments.
    cfg = small_config(steps=40, densify_from=5, densify_every=10, densify_until=35, opacity_reset_every=20,
                       seed=int(rng.integers(1000)), **options)
    state = splat.Trainer.from_dataset(ds, cfg, splat.BackendConfig(backend="cpu"),
                                       initial=random_gaussians(rng, 700)).state()
    runs = [train(ds, cfg, state, 40, deterministic=True, projection_adam=way) for way in ("separate", "fused")]
    a, b = (tr.state() for tr in runs)
    assert a.keys() == b.keys()
    for k in a:
        assert a[k].tobytes() == b[k].tobytes(), (k, options, seed)
    sa, sb = (tr._native.debug_snapshot() for tr in runs)
    for k in sa:
        assert sa[k].tobytes() == sb[k].tobytes(), (k, options, seed)
    assert runs[1].num_gaussians != 700  # densification ran
    # The fused kernel ran (and the separate pair did not) on every step.
    ts = splat.Trainer(ds, cfg, splat.BackendConfig(backend="cuda", submission="per_kernel", timing="per_kernel"), state)
    ts._native.timings(reset=True)
    for _ in range(3):
        ts.step(read_loss=False)
    rec = ts._native.timings(reset=True)
    assert rec["ts_project_back_adam"]["calls"] == 3 and "ts_project_back" not in rec, sorted(rec)


def test_fused_update_steps_as_the_cpu_backend():
    rng, seed = make_rng()
    ds = make_dataset(rng, random_gaussians(rng, 150), n_views=4, width=64, height=48)
    cfg = small_config(steps=10, sh_degree=3, sh_degree_interval=2, densify_from=10_000, densify_until=10_000)
    cpu = splat.Trainer.from_dataset(ds, cfg, splat.BackendConfig(backend="cpu"), initial=random_gaussians(rng, 600))
    gpu = splat.Trainer(ds, cfg, splat.BackendConfig(backend="cuda"), cpu.state())
    for _ in range(2):
        a, b = cpu.step(), gpu.step()
        assert abs(a.loss - b.loss) <= 1e-5 * abs(a.loss), (a, b, seed)
    assert_states_close(cpu.state(), gpu.state(), seed, "fused projection backward and Adam")
