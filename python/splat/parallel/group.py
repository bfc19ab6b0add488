"""The ranks' collectives on the host, through torch.distributed's gloo (every
backend's exchange="host", the rendezvous of exchange="device", and the
control values; NCCL's device reduction is the trainer's, cpp/cuda/nccl_api).

A collective that fails, because another rank stopped or cannot be reached
within the timeout, raises RankFailure naming this rank and the operation;
no rank waits forever."""
from __future__ import annotations

import datetime
import os
import re

import numpy as np

from .env import RankEnv


class RankFailure(RuntimeError):
    """A collective failed: another rank stopped, or did not answer in time."""


class ProcessGroup:
    """rank, world_size, and the collectives DataParallelTrainer needs. One rank
    alone (single()) needs no library and reduces nothing."""

    def __init__(self, rank: int, world_size: int, dist=None, owned: bool = False, local_rank: int | None = None):
        self.rank = int(rank)
        self.world_size = int(world_size)
        # The rank's index on its host: the GPU it trains on.
        self.local_rank = self.rank if local_rank is None else int(local_rank)
        self._dist = dist
        self._owned = owned

    # ------------------------------------------------------------- construction
    @classmethod
    def single(cls) -> "ProcessGroup":
        return cls(0, 1)

    @classmethod
    def from_env(cls, backend: str = "gloo", timeout: float = 600.0, environ=None) -> "ProcessGroup":
        """Joins the ranks the environment names (RankEnv.from_env): rendezvous at
        MASTER_ADDR:MASTER_PORT through torch.distributed's TCP store."""
        env = RankEnv.from_env(environ)
        dist = _torch_distributed()
        if dist.is_initialized():
            raise RuntimeError("[parallel] torch.distributed is already initialised: use ProcessGroup.from_torch()")
        try:
            dist.init_process_group(backend, init_method=f"tcp://{env.master_addr}:{env.master_port}",
                                    rank=env.rank, world_size=env.world_size,
                                    timeout=datetime.timedelta(seconds=float(timeout)))
        except Exception as exc:
            raise RankFailure(f"[parallel] rank {env.rank}: joining {env.world_size} ranks at "
                              f"{env.master_addr}:{env.master_port} failed: {exc}") from exc
        return cls(env.rank, env.world_size, dist, owned=True, local_rank=env.local_rank)

    @classmethod
    def from_torch(cls) -> "ProcessGroup":
        """The default group of a torch.distributed the caller has initialised."""
        dist = _torch_distributed()
        if not dist.is_initialized():
            raise RuntimeError("[parallel] torch.distributed is not initialised")
        local = os.environ.get("LOCAL_RANK", "")
        return cls(dist.get_rank(), dist.get_world_size(), dist, local_rank=int(local) if local.isdigit() else None)

    def __enter__(self) -> "ProcessGroup":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def close(self) -> None:
        if self._owned and self._dist is not None and self._dist.is_initialized():
            self._dist.destroy_process_group()
        self._owned = False

    # -------------------------------------------------------------- collectives
    def allreduce(self, arrays: list, op: str = "sum") -> list:
        """Every rank's arrays reduced elementwise (sum or max), in one collective:
        new float32 arrays of the same shapes."""
        if op not in ("sum", "max"):
            raise ValueError(f"[parallel] op: expected 'sum' or 'max', got {op!r}")
        arrays = [np.ascontiguousarray(a, dtype=np.float32) for a in arrays]
        if self.world_size == 1:
            return [a.copy() for a in arrays]
        import torch
        flat = torch.from_numpy(np.concatenate([a.ravel() for a in arrays]) if arrays else np.zeros(0, np.float32))
        self._call("all_reduce", self._dist.all_reduce, flat,
                   op=self._dist.ReduceOp.SUM if op == "sum" else self._dist.ReduceOp.MAX)
        out, at = [], 0
        data = flat.numpy()
        for a in arrays:
            out.append(data[at:at + a.size].reshape(a.shape).copy())
            at += a.size
        return out

    def allgather(self, value) -> list:
        """Every rank's (picklable) value, in rank order."""
        if self.world_size == 1:
            return [value]
        got = [None] * self.world_size
        self._call("all_gather_object", self._dist.all_gather_object, got, value)
        return got

    def broadcast(self, value=None, src: int = 0):
        """Rank src's (picklable) value on every rank (the others pass nothing)."""
        if self.world_size == 1:
            return value
        box = [value if self.rank == src else None]
        self._call("broadcast_object_list", self._dist.broadcast_object_list, box, src=src)
        return box[0]

    def barrier(self) -> None:
        if self.world_size > 1:
            self._call("barrier", self._dist.barrier)

    def leave(self) -> None:
        """Leaves the group now, without the others: after a failure that ends the
        training (RankFailure, RanksDiverged), so that the interpreter's exit does
        not tear down gloo's threads with a peer gone, which aborts the process."""
        try:
            if self._dist is not None and self._dist.is_initialized():
                self._dist.destroy_process_group()
        except Exception:
            pass
        self._owned = False

    def _call(self, name, fn, *args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except Exception as exc:  # gloo: a closed connection or a timeout
            # Leave the group now: its threads, left to the interpreter's exit
            # with a peer gone, abort the process.
            self.leave()
            raise RankFailure(f"[parallel] rank {self.rank} of {self.world_size}: {name} failed (another rank "
                              f"stopped or did not answer in time): {_first_sentence(exc)}") from exc


def _first_sentence(exc) -> str:
    """gloo's message without its source location and its advice."""
    text = re.sub(r"^\[[^\]]*\]\s*", "", " ".join(str(exc).split()))
    return text.split(". ")[0].rstrip(".") or type(exc).__name__


def _torch_distributed():
    try:
        import torch.distributed as dist
    except ImportError as exc:
        raise RuntimeError("[parallel] several ranks need torch (pip install 'splat-gs[torch]')") from exc
    if not dist.is_available():
        raise RuntimeError("[parallel] this torch build has no torch.distributed")
    return dist
