"""Helpers every `splat` subcommand shares: the user-error type and its one-line
messages, PNG output, view picking, the backend from a config table, the progress bar."""
from __future__ import annotations

import sys

import numpy as np

from .._cli_common import one_line, warn


BACKENDS = ("auto", "cpu", "cuda", "metal")
SYNTHETIC_STEPS = 2000          # `splat train` with no config
SYNTHETIC_OUT = "runs/synthetic"
SYNTHETIC_SIZE = 80             # the width of synthetic.make_scene()'s images
LOSS_EVERY = 10                 # read the loss back every this many steps (as Trainer.run)


class UserError(Exception):
    """A problem the user can fix; printed as one line, no traceback."""


def _err(msg: str) -> None:
    print(f"splat: error: {msg}", file=sys.stderr, flush=True)


def _clean(msg: str) -> str:
    return one_line(msg) or "unknown error"


def _exc_message(exc: BaseException) -> str:
    if isinstance(exc, OSError) and exc.strerror and exc.filename and not str(exc).startswith("[splat]"):
        return f"{exc.filename}: {exc.strerror}"
    return _clean(str(exc)) if str(exc) else type(exc).__name__


def _to_uint8(img: np.ndarray) -> np.ndarray:
    return np.clip(np.rint(np.asarray(img, np.float32) * 255.0), 0, 255).astype(np.uint8)


def _write_png(path, rgb_uint8: np.ndarray) -> None:
    from PIL import Image

    from ..io.atomic import atomic_write
    with atomic_write(path, "wb") as f:
        Image.fromarray(rgb_uint8).save(f, format="PNG")


def _side_by_side(render: np.ndarray, target_uint8: np.ndarray) -> np.ndarray:
    """[render | ground truth] with a thin grey gap."""
    r = _to_uint8(render)
    h = r.shape[0]
    gap = np.full((h, max(2, r.shape[1] // 100), 3), 128, np.uint8)
    return np.concatenate([r, gap, target_uint8], axis=1)


def _pick_views(count: int, n: int) -> list[int]:
    """n indices spread evenly over count views (all of them when n >= count)."""
    if n <= 0:
        return []
    if n >= count:
        return list(range(count))
    return sorted({int(round(x)) for x in np.linspace(0, count - 1, n)})


def _config_setup(args):
    """`splat train`'s and `splat check`'s config: a TOML file and / or a scene folder,
    with the command line's overrides."""
    from .._cli_data import run_config
    return _command_line_overrides(run_config(args), args, args.config or "the run config")


def _command_line_overrides(cfg, args, source):
    """`cfg` with --steps and --backend applied (errors name `source`)."""
    if args.steps:
        cfg.train.steps = args.steps
        errors = cfg.train.errors()
        if errors:
            from ..config import ConfigError
            raise ConfigError(errors, source=f"{source} with --steps {args.steps}")
    if args.backend:
        cfg.backend = dict(cfg.backend, backend=args.backend)
    return cfg


def _make_backend(table: dict):
    """BackendConfig from a [backend] table, its warnings printed."""
    from .. import BackendConfig
    try:
        bc = BackendConfig(**table)
    except TypeError as exc:
        raise ValueError(str(exc)) from None
    for w in bc.validate():
        warn(_clean(w))
    from .._backend_notice import claim_auto_fallback_message
    fallback = claim_auto_fallback_message(bc.backend)   # said here once, not again by the Trainer
    if fallback:
        warn(_clean(fallback))
    return bc


def _progress(total: int, enabled: bool):
    """A rich progress bar on stderr (a no-op object when disabled)."""
    if not enabled:
        return None
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeRemainingColumn
    columns = (TextColumn("[bold]train"), BarColumn(), MofNCompleteColumn(),
               TextColumn("loss {task.fields[loss]:.4f}  {task.fields[gaussians]:,} Gaussians  "
                          "{task.fields[rate]:.1f} steps/s"), TimeRemainingColumn())
    return Progress(*columns, console=Console(stderr=True), transient=False)


def _bytes(n: int) -> str:
    for unit, size in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= size:
            return f"{n / size:.2f} {unit}"
    return f"{n} B"
