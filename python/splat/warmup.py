"""Kernel warm-up: compile (or load from the disk cache) every kernel a
training run launches before its clock starts, so the time `splat train`
reports is training alone, as `bench/gate.py` measures it."""
from __future__ import annotations

import time


def needs_warm_up(backend: str) -> bool:
    """GPU backends compile kernels at first use; the CPU backend has none."""
    return backend in ("cuda", "metal")


def warm_up(dataset, backend_config, train_config=None) -> float | None:
    """Runs a tiny throwaway training run on two views of `dataset` with every
    op a run uses (densification, opacity reset, the finite check, a render)
    on the backend `backend_config` resolves to; with `train_config`, also the
    kernels of its modes: absgrad and exposure, and with strategy "mcmc" a run
    of refines, the last growing past the buffers' headroom. Returns its
    seconds, or None where there is nothing to compile (the CPU backend)."""
    from . import _core
    from .config import TrainConfig
    from .trainer import Trainer
    backend = _core.resolve_backend(backend_config.backend)
    if not needs_warm_up(backend):
        return None
    t0 = time.perf_counter()
    small = dataset.subset(list(range(min(2, len(dataset)))))
    extra = {} if train_config is None else dict(absgrad=train_config.absgrad, exposure=train_config.exposure)
    cfg = TrainConfig(steps=100, init_points=2000, densify_from=0, densify_every=10, densify_until=100,
                      opacity_reset_every=20, **extra)
    trainer = Trainer.from_dataset(small, cfg, backend_config)
    trainer.run(100, progress=False)   # step 100 runs the finite check
    trainer.render(small.cameras[0])
    if train_config is not None and train_config.strategy == "mcmc":
        cfg = TrainConfig(steps=30, init_points=2000, strategy="mcmc", mcmc_refine_from=0, mcmc_refine_every=10,
                          mcmc_growth=0.5)
        Trainer.from_dataset(small, cfg, backend_config).run(30, progress=False)
    return time.perf_counter() - t0
