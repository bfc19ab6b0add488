"""`splat train` on several ranks (splat.parallel): the launcher behind `--gpus N`,
and what ranks other than 0 do.

`--gpus N` starts N copies of the same command as ranks 0..N-1 of one host,
with the variables torchrun sets (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR,
MASTER_PORT), in their own process group: the launcher forwards SIGINT and
SIGTERM to them once each, so they stop together. Any launcher that sets those
variables (torchrun, Slurm's srun with them exported) starts the same ranks.

Rank 0 is the run: it owns the run folder (config, checkpoints, evaluation,
metrics) and prints. It hands the others its configuration and its starting
state (fresh or resumed, from a checkpoint of any number of ranks), so every
rank starts from the same numbers; they train their views and write nothing.
A stop (a signal to any rank) travels with the gradients, so every rank leaves
after the same update; a rank that fails stops the others (RankFailure)."""
from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import tempfile
import time

from ._common import warn
from ._shared import UserError, _clean, _make_backend

# How long the other ranks may run on after one has failed before they are ended
# (they stop by themselves at their next exchange).
FAILED_RANK_GRACE_S = 30.0
# The group's timeout: rank 0 evaluates and writes checkpoints while the others wait.
RANK_TIMEOUT_S = 3600.0
# Set in the ranks `--gpus N` starts: N.
LAUNCHED_BY_GPUS = "SPLAT_LAUNCHED_BY_GPUS"


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _require_distributed() -> None:
    try:
        import torch.distributed as dist
    except ImportError:
        raise UserError("--gpus: training on several ranks needs torch (pip install 'splat-gs[torch]'): the "
                        "ranks exchange through torch.distributed") from None
    if not dist.is_available():
        raise UserError("--gpus: this torch has no torch.distributed")


def launch(args) -> int:
    """`splat train ... --gpus N`: N ranks of this command on this host; the exit
    status is rank 0's, or the first failed rank's (its error printed)."""
    n = args.gpus
    if "RANK" in os.environ or "WORLD_SIZE" in os.environ:
        raise UserError("--gpus: this process is already a rank (RANK / WORLD_SIZE are set): drop --gpus, "
                        "the launcher that set them starts the ranks")
    _require_distributed()
    port = _free_port()
    procs, logs = [], []
    for rank in range(n):
        # The same command line (--gpus N however it was spelt); LAUNCHED_BY_GPUS tells the rank
        # that its --gpus started it rather than asks it to launch.
        env = dict(os.environ, RANK=str(rank), WORLD_SIZE=str(n), LOCAL_RANK=str(rank), LOCAL_WORLD_SIZE=str(n),
                   MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), **{LAUNCHED_BY_GPUS: str(n)})
        log = None if rank == 0 else tempfile.TemporaryFile(mode="w+b")
        logs.append(log)
        procs.append(subprocess.Popen([sys.executable, "-m", "splat", *args.argv], env=env, start_new_session=True,
                                      stdout=None if rank == 0 else subprocess.DEVNULL,
                                      stderr=None if rank == 0 else log))
    forwarded: dict[int, int] = {}

    def forward(signum, frame):
        forwarded[signum] = forwarded.get(signum, 0) + 1
        for p in procs:
            if p.poll() is None:
                try:
                    p.send_signal(signum)
                except OSError:
                    pass

    old = {sig: signal.signal(sig, forward) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        failed_at = None
        while any(p.poll() is None for p in procs):
            if failed_at is None and any(p.returncode not in (None, 0) for p in procs):
                failed_at = time.monotonic()
            if failed_at is not None and time.monotonic() - failed_at > FAILED_RANK_GRACE_S:
                for p in procs:
                    if p.poll() is None:
                        p.kill()
            time.sleep(0.1)
    finally:
        for sig, handler in old.items():
            signal.signal(sig, handler)
    # A rank ended by a signal: the shell's 128 + its number.
    codes = [128 - p.returncode if p.returncode < 0 else p.returncode for p in procs]
    if codes[0] != 0 and not forwarded:
        return codes[0]
    for rank, code in enumerate(codes[1:], start=1):
        if code not in (0, None) and code != codes[0]:
            logs[rank].seek(0)
            tail = logs[rank].read().decode("utf-8", "replace").strip().splitlines()[-6:]
            for line in tail:
                print(f"[rank {rank}] {line}", file=sys.stderr)
            if codes[0] == 0:
                return code
    return codes[0]


def rank_group(args):
    """This process's ProcessGroup when the environment makes it one of several
    ranks (WORLD_SIZE > 1), else None."""
    world = os.environ.get("WORLD_SIZE", "")
    if not world or world == "1":
        return None
    if args.gpus and args.gpus > 1 and os.environ.get(LAUNCHED_BY_GPUS) != str(args.gpus):
        raise UserError("--gpus: this process is already a rank (RANK / WORLD_SIZE are set): drop --gpus")
    _require_distributed()
    from ..parallel import ProcessGroup
    return ProcessGroup.from_env(timeout=RANK_TIMEOUT_S)


def hand_out_start(args, group, cfg, synthetic: bool, trainer, train):
    """Rank 0: the configuration and the starting state to every rank; returns the
    DataParallelTrainer around `trainer`."""
    from ..parallel import DataParallelTrainer
    group.broadcast(dict(config=cfg, synthetic=synthetic, state=trainer.state(), step=trainer.step_count,
                         scene_extent=trainer.scene_extent, names=list(train.names), sizes=list(trainer.sizes)))
    return DataParallelTrainer.around(trainer, group, exchange=args.exchange)


def follow(args, group, stop) -> int:
    """Ranks 1..N-1: rank 0's start, its views' steps in lockstep, nothing written."""
    from ..parallel import DataParallelTrainer, RankFailure, rank_backend_config
    from ..trainer import Trainer
    from .train import _image_budget, _train_dataset

    try:
        start = group.broadcast()
    except RankFailure as exc:
        warn(f"rank {group.rank}: rank 0 did not start the run: {_clean(exc)}")
        return 1
    cfg, synthetic = start["config"], start["synthetic"]
    train = _train_dataset(cfg, synthetic)
    if list(train.names) != start["names"]:
        raise UserError(f"rank {group.rank}: the training views here differ from rank 0's ({len(train)} against "
                        f"{len(start['names'])}): every rank must read the same scene folder")
    bc = rank_backend_config(_make_backend(cfg.backend, explain_fallback=False), group)
    trainer = Trainer(train, cfg.train, bc, start["state"], step=start["step"], scene_extent=start["scene_extent"],
                      image_budget=_image_budget(cfg, synthetic), release_images=True)
    if list(trainer.sizes) != [tuple(s) for s in start["sizes"]]:
        raise UserError(f"rank {group.rank}: the training views' sizes differ from rank 0's")
    try:
        runner = DataParallelTrainer.around(trainer, group, exchange=args.exchange)
        while trainer.step_count < cfg.train.steps:
            if runner.step(stop=stop.signum is not None).stop:
                return 128 + (stop.signum or signal.SIGTERM)
    except RankFailure as exc:
        warn(f"{_clean(exc)}")
        return 1
    return 0
