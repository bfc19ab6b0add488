"""The absgrad statistic, CUDA against CPU, as tests/test_cuda_absgrad_exposure.py
sets it up: the failing seed in detail, then many fresh seeds' rel_err."""
import sys
from pathlib import Path
import numpy as np
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
import splat
from _parity import rel_err
from _scenes import make_rng
from test_exposure import state_of
from test_training import make_dataset, random_gaussians, small_config


def run(seed, fields):
    rng, _ = make_rng(seed)
    ds = make_dataset(rng, random_gaussians(rng, 300), n_views=1, width=96, height=80)
    start = state_of(random_gaussians(rng, 250))
    cfg = small_config(absgrad=True, densify_from=1000, densify_until=2000)
    out = {}
    for backend, extra in (("cpu", {}), ("cuda", fields)):
        tr = splat.Trainer(ds, cfg, splat.BackendConfig(backend=backend, **extra), start)
        tr.step()
        out[backend] = (tr.state(), tr._native.debug_snapshot())
    return out


