"""DataParallelTrainer: one update from a batch of views, one view per rank.

Update b of N ranks covers view steps t = N (b - 1) + 1 .. N b of the
one-process sequence: rank r trains view step N (b - 1) + 1 + r (its view,
background and densification statistics), the ranks average their gradients,
and every rank applies the same Adam update; the schedule (learning rates,
SH degree, densification, opacity resets, MCMC refines) runs in view steps,
so `steps` means the same number of views as with one process. The
densification statistics are summed (the maximum for the screen radius)
across the ranks just before each densification. Every rank computes the
same update from the same numbers, so the ranks stay identical; a hash of
the parameters is compared across them at the start and every
`check_every` updates (RanksDiverged otherwise).

Learning rates: averaging N views' gradients is a batch of N. The default
`lr_scaling="sqrt"` follows Grendel (Zhao et al., "On Scaling Up 3D Gaussian
Splatting Training", 2024): learning rates times sqrt(N) and Adam's betas
raised to the power N, so that an update of N views moves as far as N
updates of one; "none" keeps the one-process values."""
from __future__ import annotations

import hashlib
import math
import os
import socket
from dataclasses import dataclass

import numpy as np

from .._validate import backend_config as as_backend_config
from ..config import TrainConfig
from ..trainer import Trainer
from .group import ProcessGroup

PARAMS = ("means", "log_scales", "quats", "opacity_logits", "sh")
# exchange="device": the updates whose loss and stop request go through the host.
CONTROL_EVERY = 10
# Recipe modes only the host exchange carries, and what it carries for them.
HOST_EXCHANGE_ONLY = (("exposure", "the exposure corrections' gradients"),
                      ("visible_adam", "the Gaussians each rank's view saw"))
STATS = ("grad_accum", "grad_count", "max_radii")


def rank_backend_config(backend_config, group: ProcessGroup):
    """The backend settings of one rank. A GPU rank sizes its pair buffers by
    reading the count back: the exchange waits for the GPU every update
    anyway, and the device-sized path's recovery from an overflow redoes
    steps as the one-process trainer takes them, which an update of several
    ranks is not. With several ranks, a CUDA rank trains on GPU LOCAL_RANK
    unless SPLAT_CUDA_DEVICE names one."""
    from .. import BackendConfig
    cfg = as_backend_config("backend_config", backend_config)
    backend = cfg.resolved_backend()
    if backend == "cpu":
        return cfg
    if backend == "cuda" and group.world_size > 1 and not os.environ.get("SPLAT_CUDA_DEVICE"):
        count = _cuda_device_count()
        if count is not None and group.local_rank >= count:
            raise ValueError(f"[parallel] rank {group.rank}: LOCAL_RANK {group.local_rank}, but this host has {count} "
                             f"CUDA device{'s' if count != 1 else ''}: start at most {count} ranks on it (splat train "
                             f"--gpus, torchrun --nproc_per_node), or name each rank's device in SPLAT_CUDA_DEVICE")
        os.environ["SPLAT_CUDA_DEVICE"] = str(group.local_rank)
    return BackendConfig.from_dict(dict(cfg.to_dict(), pair_sizing="readback"))


def _cuda_device_count():
    """The CUDA devices torch sees (NVML: no context is made), or None without torch."""
    try:
        import torch
        return int(torch.cuda.device_count())
    except Exception:
        return None


class RanksDiverged(RuntimeError):
    """The ranks' parameters differ where they must be identical."""


@dataclass
class UpdateStats:
    """What one update did (DataParallelTrainer.step)."""
    step: int               # the last view step it covered
    update: int
    loss: float             # the ranks' mean loss; NaN unless read (several ranks: always read)
    num_gaussians: int
    densified: bool
    opacity_reset: bool
    stop: bool              # a rank asked to stop: every rank sees it after the same update


class DataParallelTrainer:
    def __init__(self, dataset, config, backend_config, group: ProcessGroup, *, state: dict | None = None,
                 step: int = 0, check_every: int = 100, lr_scaling: str = "sqrt", exchange: str = "auto"):
        _check_group(group)
        _check_options(check_every, lr_scaling, exchange)
        if isinstance(config, TrainConfig):   # the ranks make the batch: none from a preset
            config = config.one_view_a_rank()
        _check_recipe(config, group, exchange)
        backend_config = rank_backend_config(backend_config, group)
        if state is None:
            if step:
                raise ValueError("[parallel] step: a step count needs the state it belongs to")
            trainer = Trainer.from_dataset(dataset, config, backend_config)
        else:
            trainer = Trainer(dataset, config, backend_config, state, step=step)
        self._attach(trainer, group, check_every, lr_scaling, exchange)

    @classmethod
    def around(cls, trainer: Trainer, group: ProcessGroup, *, check_every: int = 100,
               lr_scaling: str = "sqrt", exchange: str = "auto") -> "DataParallelTrainer":
        """Data-parallel updates of a Trainer built with rank_backend_config(...) (its
        state the same on every rank: the rank-0 state handed to the others)."""
        _check_group(group)
        _check_options(check_every, lr_scaling, exchange)
        if not isinstance(trainer, Trainer):
            raise TypeError(f"[parallel] trainer: expected splat.Trainer, got {type(trainer).__name__}")
        _check_recipe(trainer.config, group, exchange)
        bc = trainer.backend_config
        if bc.resolved_backend() != "cpu" and bc.pair_sizing != "readback":
            raise ValueError("[parallel] trainer: a GPU rank's trainer needs rank_backend_config's settings "
                             "(pair_sizing = 'readback')")
        self = cls.__new__(cls)
        self._attach(trainer, group, check_every, lr_scaling, exchange)
        return self

    def _attach(self, trainer: Trainer, group: ProcessGroup, check_every, lr_scaling, exchange) -> None:
        n = group.world_size
        self.group = group
        self.trainer = trainer
        self.config = config = trainer.config
        self.check_every = check_every
        self.lr_scale = math.sqrt(n) if lr_scaling == "sqrt" else 1.0
        self.beta1 = config.adam_beta1 ** n if lr_scaling == "sqrt" else config.adam_beta1
        self.beta2 = config.adam_beta2 ** n if lr_scaling == "sqrt" else config.adam_beta2
        # Updates so far: a checkpoint of any number of ranks resumes on another.
        self.updates = -(-trainer.step_count // n)
        self.exchange = _resolve_exchange(exchange, trainer, group)
        if self.exchange == "device":
            self._join_device_ranks()
        self.check_lockstep()

    def _join_device_ranks(self) -> None:
        """exchange="device": the ranks' NCCL communicator, its id from rank 0."""
        if self.trainer.backend != "cuda":
            raise ValueError(f"[parallel] exchange='device' reduces through NCCL on CUDA devices; backend "
                             f"{self.trainer.backend} has no device exchange: use exchange='host'")
        from .. import _core
        uid = None
        if self.group.rank == 0:
            ok, why = _core.nccl_available()
            uid = _core.nccl_unique_id() if ok else why
        uid = self.group.broadcast(uid)
        if isinstance(uid, str):
            raise RuntimeError(f"[parallel] exchange='device': {uid}")
        self.trainer._native.join_ranks(uid, self.group.rank, self.group.world_size)

    # ------------------------------------------------------------------ state
    @property
    def step_count(self) -> int:
        """View steps trained (N per update)."""
        return self.trainer.step_count

    @property
    def num_gaussians(self) -> int:
        return self.trainer.num_gaussians

    @property
    def is_main(self) -> bool:
        """Rank 0: the one that writes the run's files."""
        return self.group.rank == 0

    def state(self) -> dict:
        return self.trainer.state()

    def parameter_hash(self) -> str:
        st = self.trainer.state()
        h = hashlib.blake2b(digest_size=16)
        for name in PARAMS + (("exposure",) if "exposure" in st else ()):
            h.update(np.ascontiguousarray(st[name]).tobytes())
        return h.hexdigest()

    def check_lockstep(self) -> None:
        """Raises RanksDiverged unless every rank holds the same parameters."""
        hashes = self.group.allgather(self.parameter_hash())
        if len(set(hashes)) > 1:
            self.group.leave()  # every rank raises here: none trains on
            raise RanksDiverged(f"[parallel] rank {self.group.rank}: the ranks' parameters differ after "
                                f"{self.step_count} view steps (hashes by rank: {', '.join(h[:12] for h in hashes)})")

    # ------------------------------------------------------------------ training
    def step(self, read_loss: bool = False, stop: bool = False) -> UpdateStats:
        """One update: N views, one per rank. read_loss: the ranks' mean loss (several
        ranks read it always: it travels with the gradients); stop: this rank asks every
        rank to stop after this update (UpdateStats.stop on all of them)."""
        native, n, rank = self.trainer._native, self.group.world_size, self.group.rank
        first = self.trainer.step_count + 1
        last = first + n - 1
        native.forward_backward(first + rank, native.sh_degree_at(first))
        loss, stopping = float("nan"), bool(stop)
        if n > 1 and self.exchange == "device":
            # In place on the device, nothing waited for; the loss and a stop go
            # through the host every CONTROL_EVERY updates (the same ones on
            # every rank), the loss of other updates is this rank's own.
            native.reduce_gradients()
            if (self.updates + 1) % CONTROL_EVERY == 0:
                control = np.array([native.last_loss(), 1.0 if stop else 0.0], np.float32)
                (control,) = self.group.allreduce([control], "sum")
                loss, stopping = float(control[0]) / n, bool(control[1] > 0)
            else:
                stopping = False
                if read_loss:
                    loss = native.last_loss()
        elif n > 1:  # the mean over the ranks through the host, with the loss and a stop
            grads = native.gradients()
            keys = PARAMS + (("exposure",) if "exposure" in grads else ())
            control = np.array([native.last_loss(), 1.0 if stop else 0.0], np.float32)
            *summed, control = self.group.allreduce([grads[k] for k in keys] + [control], "sum")
            scale = np.float32(n)
            native.set_gradients({k: g / scale for k, g in zip(keys, summed)})
            loss, stopping = float(control[0]) / n, bool(control[1] > 0)
            if self.config.visible_adam:  # Adam steps what any rank's view saw
                (radii,) = self.group.allreduce([native.step_radii()], "max")
                native.set_step_radii(radii)
        elif read_loss:
            loss = native.last_loss()
        self.updates += 1
        native.apply_update(last, self.updates, self.lr_scale, self.beta1, self.beta2)
        densified = opacity_reset = False
        cfg = self.config
        if cfg.strategy == "mcmc":
            for t in range(first, last + 1):  # as one process: refine, then the noise
                if native.mcmc_refines_at(t):
                    native.mcmc_refine(cfg.mcmc_min_opacity, native.mcmc_growth_at(native.num_gaussians), cfg.seed, t)
                    densified = True
            native.mcmc_noise(cfg.mcmc_noise_lr * native.means_lr(last), cfg.seed, last)
        for t in range(first, last + 1):
            if native.densifies_at(t):
                if n > 1 and self.exchange == "device":
                    native.reduce_densify_stats()
                elif n > 1:
                    stats = native.densify_stats()
                    accum, count = self.group.allreduce([stats["grad_accum"], stats["grad_count"]], "sum")
                    (radii,) = self.group.allreduce([stats["max_radii"]], "max")
                    native.set_densify_stats(dict(grad_accum=accum, grad_count=count, max_radii=radii))
                native.densify_at(t)
                densified = True
            if native.resets_opacity_at(t):
                native.reset_opacity()
                opacity_reset = True
            if native.prunes_low_weight_at(t):
                # Every rank prunes by the weights summed over the ranks: its own may differ
                # by the float atomics' order, and the ranks must drop the same rows.
                weights = native.blend_weights()
                if n > 1:
                    (weights,) = self.group.allreduce([weights], "sum")
                native.prune_low_weight(t, np.ascontiguousarray(weights, np.float32))
                densified = True
        out = UpdateStats(last, self.updates, loss, native.num_gaussians, densified, opacity_reset, stopping)
        if read_loss:
            self.trainer.history.append((out.step, out.loss, out.num_gaussians))
        if self.check_every and self.updates % self.check_every == 0:
            self.check_lockstep()
        return out


def _check_group(group) -> None:
    if not isinstance(group, ProcessGroup):
        raise TypeError(f"[parallel] group: expected splat.parallel.ProcessGroup, got {type(group).__name__}")


def _resolve_exchange(exchange: str, trainer: Trainer, group: ProcessGroup) -> str:
    """host or device. auto: device (NCCL) when every rank trains on CUDA, on a GPU
    of its own (NCCL refuses two ranks on one device), can load NCCL, and its
    recipe needs nothing the device exchange lacks (exposure, visible_adam); host
    otherwise. The ranks decide together (an allgather), so they never disagree."""
    if group.world_size == 1:
        return "host"
    if exchange != "auto":
        return exchange
    ok = trainer.backend == "cuda" and not any(getattr(trainer.config, key) for key, _ in HOST_EXCHANGE_ONLY)
    if ok:
        from .. import _core
        ok = bool(_core.nccl_available()[0])
    # The GPU as this process names it: its host, the devices it sees and the ordinal it trains on.
    gpu = (socket.gethostname(), os.environ.get("CUDA_VISIBLE_DEVICES", ""), os.environ.get("SPLAT_CUDA_DEVICE", "0"))
    return choose_exchange(group.allgather((ok, gpu)))


def choose_exchange(ranks: list) -> str:
    """exchange='auto' from every rank's (can use NCCL, its GPU): device when all can
    and no two share a GPU."""
    own_gpus = len({gpu for _, gpu in ranks}) == len(ranks)
    return "device" if own_gpus and all(ok for ok, _ in ranks) else "host"


def _check_options(check_every, lr_scaling, exchange) -> None:
    """Before any trainer is built."""
    if exchange not in ("auto", "host", "device"):
        raise ValueError(f"[parallel] exchange: expected 'auto', 'host' or 'device', got {exchange!r}")
    if lr_scaling not in ("sqrt", "none"):
        raise ValueError(f"[parallel] lr_scaling: expected 'sqrt' or 'none', got {lr_scaling!r}")
    if isinstance(check_every, bool) or not isinstance(check_every, int) or check_every < 0:
        raise ValueError(f"[parallel] check_every: expected an integer >= 0, got {check_every!r}")


def _check_recipe(config, group: ProcessGroup, exchange: str) -> None:
    if config.batch_views > 1:   # each rank's view step is one forward_backward
        raise ValueError(f"[parallel] train.batch_views: {config.batch_views} views a step on each rank is not "
                         f"supported; ranks already make a batch of one view each (set batch_views = 1)")
    if group.world_size <= 1:
        return
    for key, what in HOST_EXCHANGE_ONLY:
        if getattr(config, key) and exchange == "device":
            raise ValueError(f"[parallel] train.{key}: the device exchange does not carry {what} yet; use "
                             f"exchange='host' (splat train --exchange host)")
