"""The divergence check (Device::count_nonfinite) on every backend available
here: NaNs and infinities planted in the training state at random places are
counted per parameter array exactly as numpy counts them, a finite state
passes, and the kernel warm-up is a no-op on the CPU."""
import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from _pkg import NATIVE, splat  # noqa: E402
from _scenes import make_rng  # noqa: E402

pytestmark = pytest.mark.skipif(not NATIVE, reason="needs the native module splat._core")

PARAMS = ("means", "log_scales", "quats", "opacity_logits", "sh")
BACKENDS = [pytest.param("cpu"), pytest.param("cuda", marks=pytest.mark.cuda),
            pytest.param("metal", marks=pytest.mark.metal)]


def _trainer(backend, n, rng, poison, monkeypatch):
    from splat.data import synthetic
    ok, why = splat.backend_available(backend)
    if not ok:
        pytest.skip(f"{backend}: {why}")
    train, _ = synthetic.make_scene(n_gaussians=50, n_views=2, width=16, height=16, seed=3, n_test_views=1)
    cfg = splat.TrainConfig(steps=10, init_points=n)
    from splat.trainer import initial_gaussians, random_points
    initial = initial_gaussians(*random_points(cfg), cfg)
    state = splat.Trainer.from_dataset(train, cfg, splat.BackendConfig(backend="cpu"), initial=initial).state()
    assert len(state["means"]) == n
    planted = {}
    for k in PARAMS:
        a = state[k].reshape(-1)
        m = rng.random(a.size) < poison
        a[m] = rng.choice([np.nan, np.inf, -np.inf, -np.nan], int(m.sum())).astype(np.float32)
        planted[k] = int(np.count_nonzero(~np.isfinite(a)))
    # Trainer refuses a non-finite state up front; the native check is what is tested here.
    import splat.trainer as trainer_module
    monkeypatch.setattr(trainer_module, "check_state", lambda s, sh_degree: s)
    return splat.Trainer(train, cfg, splat.BackendConfig(backend=backend), state), planted


@pytest.mark.parametrize("backend", BACKENDS)
def test_nonfinite_parameters_are_counted_per_array(backend, monkeypatch):
    rng, seed = make_rng()
    n = int(rng.integers(3000, 9000))    # several threadgroups striding on a GPU
    t, planted = _trainer(backend, n, rng, poison=float(rng.uniform(1e-4, 1e-3)), monkeypatch=monkeypatch)
    assert sum(planted.values()) > 0
    with pytest.raises(splat.TrainingDiverged) as info:
        t.check_finite()
    msg = str(info.value)
    head = "[trainer] training diverged at step 0 (non-finite parameters: "
    assert msg.startswith(head) and msg.endswith(")"), msg
    counts = {name: int(c) for c, name in (item.split(" in ") for item in msg[len(head):-1].split(", "))}
    assert counts == {k: v for k, v in planted.items() if v}, (msg, planted, seed)
    assert t.diverged_step == 0
    with pytest.raises(splat.TrainingDiverged, match="at step 0"):
        t.step()


@pytest.mark.parametrize("backend", BACKENDS)
def test_a_finite_state_passes_and_trains(backend, monkeypatch):
    rng, seed = make_rng()
    t, planted = _trainer(backend, int(rng.integers(100, 2000)), rng, poison=0.0, monkeypatch=monkeypatch)
    assert sum(planted.values()) == 0
    t.check_finite()
    t.run(10, progress=False)            # no check fires on a healthy run
    t.check_finite()
    assert t.diverged_step is None


def test_warm_up_is_a_no_op_on_the_cpu(capsys, tmp_path):
    from splat import cli
    from splat.data import synthetic
    from splat.warmup import needs_warm_up, warm_up
    train, _ = synthetic.make_scene(n_gaussians=20, n_views=2, width=16, height=16, seed=1, n_test_views=1)
    assert warm_up(train, splat.BackendConfig(backend="cpu")) is None
    assert needs_warm_up("cuda") and needs_warm_up("metal") and not needs_warm_up("cpu")
    assert cli.main(["train", "--steps", "3", "--backend", "cpu", "--out", str(tmp_path / "r"), "--quiet"]) == 0
    assert "compiled the" not in capsys.readouterr().out


@pytest.mark.cuda
def test_warm_up_compiles_before_the_training_clock(capsys, tmp_path):
    ok, why = splat.backend_available("cuda")
    if not ok:
        pytest.skip(f"cuda: {why}")
    from splat import cli
    from splat.data import synthetic
    from splat.warmup import warm_up
    train, _ = synthetic.make_scene(n_gaussians=20, n_views=2, width=16, height=16, seed=1, n_test_views=1)
    seconds = warm_up(train, splat.BackendConfig(backend="cuda"))
    assert seconds is not None and seconds > 0
    assert cli.main(["train", "--steps", "3", "--backend", "cuda", "--out", str(tmp_path / "r"), "--quiet"]) == 0
    assert "compiled the cuda kernels in" in capsys.readouterr().out
