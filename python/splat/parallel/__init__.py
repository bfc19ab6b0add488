"""Data-parallel training: every rank holds all the Gaussians and renders its
own views; a step of N ranks is a batch of N views whose gradients are
averaged across the ranks before one identical update on every rank
(docs/architecture.md, "Data-parallel training").

    from splat.parallel import ProcessGroup, DataParallelTrainer
    group = ProcessGroup.from_env()          # RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT (torchrun, Slurm, ...)
    trainer = DataParallelTrainer(dataset, config, splat.BackendConfig(backend="cpu"), group)
    while trainer.step_count < config.steps:
        trainer.step()

The collectives go through torch.distributed's gloo (the `[torch]` extra), or,
with exchange="device" on CUDA, the gradients through NCCL on the GPUs (the
`[multigpu]` extra). `splat train --gpus N` starts the ranks itself.
"""
from .env import RankEnv
from .group import ProcessGroup, RankFailure
from .trainer import DataParallelTrainer, RanksDiverged, UpdateStats, rank_backend_config

__all__ = ["DataParallelTrainer", "ProcessGroup", "RankEnv", "RankFailure", "RanksDiverged", "UpdateStats",
           "rank_backend_config"]
