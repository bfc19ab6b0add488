"""Where this process stands among the ranks: the environment variables that
torchrun sets (and Slurm or any launcher can), read and checked."""
from __future__ import annotations

import os
from dataclasses import dataclass

VARIABLES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")


@dataclass(frozen=True)
class RankEnv:
    rank: int
    world_size: int
    local_rank: int
    master_addr: str
    master_port: int

    @classmethod
    def from_env(cls, environ=None) -> "RankEnv":
        """The rank from RANK, WORLD_SIZE, LOCAL_RANK (default: RANK), MASTER_ADDR and
        MASTER_PORT; a ValueError naming the variable when one is missing or wrong."""
        env = os.environ if environ is None else environ
        missing = [v for v in ("RANK", "WORLD_SIZE", "MASTER_ADDR", "MASTER_PORT") if not env.get(v)]
        if missing:
            raise ValueError(f"[parallel] {', '.join(missing)} not set: start each rank with torchrun, or set "
                             f"RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT")
        world = _integer(env, "WORLD_SIZE", 1)
        rank = _integer(env, "RANK", 0)
        if rank >= world:
            raise ValueError(f"[parallel] RANK={rank}: must be below WORLD_SIZE={world}")
        local = _integer(env, "LOCAL_RANK", 0) if env.get("LOCAL_RANK") else rank
        port = _integer(env, "MASTER_PORT", 1)
        if port > 65535:
            raise ValueError(f"[parallel] MASTER_PORT={port}: must be 1..65535")
        return cls(rank, world, local, env["MASTER_ADDR"], port)


def _integer(env, name: str, lo: int) -> int:
    text = env.get(name, "")
    try:
        value = int(text)
    except ValueError:
        raise ValueError(f"[parallel] {name}={text!r}: expected an integer") from None
    if value < lo:
        raise ValueError(f"[parallel] {name}={value}: must be >= {lo}")
    return value
