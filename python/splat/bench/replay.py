"""`splat bench`'s replay: configs and checkpoints, a trainer replaying the steps
from a checkpoint, its timings and their statistics (the command: splat/bench/__init__.py)."""
from __future__ import annotations

import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

from ..cli._common import one_line, warn

NEVER = 2**31 - 1                     # a step count no replay reaches
MIN_THRESHOLD_PCT = 1.0               # --compare: smallest delta called significant
ATOL = RTOL = 1e-4                    # --parity gradient tolerance
GRAD_KEYS = ("means", "log_scales", "quats", "opacity_logits", "sh", "means2d")
PARAM_KEYS = GRAD_KEYS[:5]
TIMING_PARTS = ("upload_ms", "alloc_ms", "gpu_ms", "readback_ms")

try:
    import tomllib as _toml
except ModuleNotFoundError:  # Python 3.10
    import tomli as _toml


# --------------------------------------------------------------------------- small helpers


def _note(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def _console():
    from rich.console import Console
    console = Console(highlight=False, markup=False)
    if not console.is_terminal:
        console = Console(highlight=False, markup=False, width=120)
    return console


# --------------------------------------------------------------------------- configs and checkpoints


@dataclass
class Setup:
    """One config file, resolved: what a replay under it needs."""

    path: str
    config: object                    # splat.Config
    backend: object                   # splat.BackendConfig
    train_overrides: dict             # [train] keys written in the file
    dataset: object = field(repr=False)


def _explicit_train_keys(path: Path) -> dict:
    """The [train] table as written (load_config has validated it already)."""
    with open(path, "rb") as f:
        raw = _toml.load(f)
    table = raw.get("train", {})
    return dict(table) if isinstance(table, dict) else {}


def load_setup(path, datasets: dict | None = None) -> Setup:
    """Read a config, build its BackendConfig (printing its warnings) and load
    its training views (shared through `datasets` between configs that name
    the same data)."""
    from .. import BackendConfig
    from ..config import load_config
    from ..data import load_dataset
    cfg = load_config(path)
    try:
        bc = BackendConfig(**cfg.backend)
    except TypeError as exc:
        raise ValueError(str(exc)) from None
    for w in bc.validate():
        warn(f"{path}: {one_line(w)}")
    d = cfg.data
    common = d.loader_args()
    key = (d.path, d.train_split, repr(d.train_frames), repr(sorted(common.items())))
    datasets = {} if datasets is None else datasets
    if key not in datasets:
        datasets[key] = load_dataset(d.path, d.train_split, frames=d.train_frames, **common)
    return Setup(str(path), cfg, bc, _explicit_train_keys(Path(path)), datasets[key])


def _checkpoint_step(path: Path) -> int:
    stem = path.stem
    if stem.startswith("checkpoint_") and stem[len("checkpoint_"):].isdigit():
        return int(stem[len("checkpoint_"):])
    return -1


def find_checkpoint(run_dir) -> Path:
    """The newest checkpoint_<step>.npz or checkpoint.npz in a run folder
    (by modification time; the higher step breaks ties)."""
    run_dir = Path(run_dir)
    found = [p for p in run_dir.glob("checkpoint*.npz")
             if p.is_file() and (p.name == "checkpoint.npz" or _checkpoint_step(p) >= 0)]
    if not found:
        raise FileNotFoundError(f"{run_dir}: no checkpoint (checkpoint.npz or checkpoint_<step>.npz); "
                                f"run splat train first or pass --checkpoint")
    return max(found, key=lambda p: (p.stat().st_mtime, _checkpoint_step(p)))


@dataclass
class Checkpoint:
    path: Path
    meta: dict
    arrays: dict

    @property
    def step(self) -> int:
        return int(self.meta["step"])


def read_checkpoint(path) -> Checkpoint:
    from ..trainer import read_checkpoint as read
    meta, arrays = read(path)
    return Checkpoint(Path(path), meta, arrays)


def replay_train_config(checkpoint_train: dict, overrides: dict | None = None, *, densify_stats: bool):
    """The checkpoint's TrainConfig, updated with `overrides`, made safe to
    replay: no densification, no MCMC refine and no opacity reset ever fires. With
    `densify_stats` the step still gathers the densification statistics."""
    from ..config import TrainConfig
    values = dict(checkpoint_train)
    values.update(overrides or {})
    values.update(densify_from=0, densify_until=NEVER if densify_stats else 0,
                  densify_every=NEVER, opacity_reset_every=NEVER)
    values.update(mcmc_refine_from=0, mcmc_refine_until=0)  # mcmc: no refine (the noise still runs)
    return TrainConfig(**values)


def make_trainer(ckpt: Checkpoint, setup: Setup, *, densify_stats: bool | None = None, one_view: bool = False):
    """A Trainer in the checkpoint's state under the setup's backend config and
    [train] overrides, replaying without densification or opacity resets; a step
    trains the run's batch_views views, or one with `one_view` (a step whose Adam
    update the parity check inverts)."""
    from ..trainer import Trainer, check_checkpoint_sizes
    ds = setup.dataset
    try:
        check_checkpoint_sizes(ckpt.meta, ds, ckpt.path)
    except ValueError as exc:
        raise ValueError(f"{setup.path}: {str(exc).removeprefix('[splat] ')}") from None
    train = ckpt.meta["train_config"]
    if densify_stats is None:   # as a real step at this point of training would
        densify_stats = ckpt.step < int(setup.train_overrides.get("densify_until", train.get("densify_until", 0)))
    config = replay_train_config(train, {**setup.train_overrides, **({"batch_views": 1} if one_view else {})},
                                 densify_stats=densify_stats)
    return Trainer(ds, config, setup.backend, dict(ckpt.arrays), step=ckpt.step,
                   scene_extent=ckpt.meta.get("scene_extent"))


def run_folder_of(setup: Setup) -> Path:
    """The run a config belongs to: the folder of a run's own config.toml (next to its
    checkpoints, wherever the folder was moved or whichever --out wrote it), else the
    config's output.dir."""
    own = Path(setup.path).parent
    if Path(setup.path).name == "config.toml" and any(own.glob("checkpoint*.npz")):
        return own
    return Path(setup.config.output.dir)


def _run_dir(setup: Setup, out) -> Path:
    return Path(out) if out else run_folder_of(setup)


# --------------------------------------------------------------------------- statistics


def _sigma_pct(xs) -> float:
    if len(xs) < 2:
        return 0.0
    mean = statistics.fmean(xs)
    return 100.0 * statistics.stdev(xs) / mean if mean > 0 else 0.0


def summarize(repeats: list[list[float]]) -> dict:
    """Per-repeat and overall statistics of per-step times (ms)."""
    runs = [{"median_ms": statistics.median(r), "mean_ms": statistics.fmean(r), "min_ms": min(r),
             "max_ms": max(r), "sigma_pct": _sigma_pct(r), "steps": len(r)} for r in repeats]
    every = [t for r in repeats for t in r]
    medians = [r["median_ms"] for r in runs]
    return {
        "median_ms": statistics.median(every),
        "mean_ms": statistics.fmean(every),
        "min_ms": min(every),
        # the noise of a median: how much the repeat medians disagree
        "sigma_pct": _sigma_pct(medians) if len(medians) > 1 else _sigma_pct(every),
        "step_sigma_pct": _sigma_pct(every),
        "runs": runs,
    }


def compare_verdict(a: dict, b: dict) -> dict:
    """B against A from two summaries: delta %, threshold max(2 sigma, 1%), verdict."""
    delta = 100.0 * (b["median_ms"] - a["median_ms"]) / a["median_ms"]
    sigma = max(a["sigma_pct"], b["sigma_pct"])
    threshold = max(2.0 * sigma, MIN_THRESHOLD_PCT)
    if delta < -threshold:
        verdict = "faster"
    elif delta > threshold:
        verdict = "slower"
    else:
        verdict = "within noise"
    return {"delta_pct": delta, "sigma_pct": sigma, "threshold_pct": threshold, "verdict": verdict}


# --------------------------------------------------------------------------- timing


def _native_timings(native, reset: bool):
    """The native ts_* timings, or None when this build has no timings API."""
    fn = getattr(native, "timings", None)
    if fn is None:
        return None
    try:
        return fn(reset=reset)
    except TypeError:
        return fn(reset)


class TimingTotals:
    """ts_* timings summed over the measured steps of one config."""

    def __init__(self):
        self.labels: dict[str, dict] = {}
        self.available = True

    def add(self, raw) -> None:
        if raw is None:
            self.available = False
            return
        for label, e in dict(raw).items():
            acc = self.labels.setdefault(str(label), {"calls": 0, "total_ms": 0.0,
                                                      **{k: 0.0 for k in TIMING_PARTS}})
            get = e.get if isinstance(e, dict) else (lambda k, d=0: getattr(e, k, d))
            acc["calls"] += int(get("calls", 0))
            acc["total_ms"] += float(get("total_ms", 0.0))
            for k in TIMING_PARTS:
                acc[k] += float(get(k, 0.0))

    def report(self, steps: int) -> dict:
        out = {}
        for label in sorted(self.labels, key=lambda k: -self.labels[k]["total_ms"]):
            e = self.labels[label]
            row = {"calls": e["calls"], "calls_per_step": e["calls"] / steps,
                   "mean_us": 1000.0 * e["total_ms"] / e["calls"] if e["calls"] else 0.0,
                   "total_ms": e["total_ms"], "ms_per_step": e["total_ms"] / steps}
            for k in TIMING_PARTS:
                row[k] = e[k]
                row[k.replace("_ms", "_ms_per_step")] = e[k] / steps
            out[label] = row
        return out


class Replay:
    """One trainer being measured, with everything collected about it."""

    def __init__(self, name: str, setup: Setup, ckpt: Checkpoint):
        self.name = name
        self.setup = setup
        self.trainer = make_trainer(ckpt, setup)
        self.native = self.trainer._native
        self.timed = setup.backend.timing == "per_kernel"
        self.start_gaussians = self.trainer.num_gaussians
        self.repeats: list[list[float]] = []
        self.timings = TimingTotals()
        self.allocations = 0

    def steps(self, n: int) -> list[float]:
        """n steps, each timed by the host clock after it returns (the loss
        read-back synchronises GPU backends)."""
        step = self.native.step
        clock = time.perf_counter_ns
        times = [0] * n
        last = clock()
        for i in range(n):
            step(True)
            now = clock()
            times[i] = now - last
            last = now
        return [t * 1e-6 for t in times]

    def warm_up(self, n: int) -> None:
        if n:
            self.steps(n)

    def measure(self, n: int) -> list[float]:
        if self.timed:
            _native_timings(self.native, True)      # drop what earlier steps left
        alloc0 = self.native.allocation_count
        times = self.steps(n)
        self.allocations += self.native.allocation_count - alloc0
        if self.timed:
            self.timings.add(_native_timings(self.native, True))
        self.repeats.append(times)
        return times

    def result(self, ckpt: Checkpoint) -> dict:
        s = summarize(self.repeats)
        steps = sum(len(r) for r in self.repeats)
        res = {
            "config": str(Path(self.setup.path).resolve()),
            "backend": self.trainer.backend,
            "backend_config": self.setup.backend.to_dict(),
            "checkpoint": str(ckpt.path.resolve()),
            "start_step": ckpt.step,
            "end_step": self.trainer.step_count,
            "views_per_step": self.trainer.config.batch_views,   # a step: one update over this many views
            "num_gaussians": self.start_gaussians,
            "num_gaussians_end": self.trainer.num_gaussians,
            # the largest training view; image_sizes: how many distinct sizes
            "image_size": list(max(self.trainer.sizes, key=lambda s: (s[0] * s[1], s))),
            "image_sizes": len(set(self.trainer.sizes)),
            "views": len(self.setup.dataset),
            "densify_stats": self.trainer.config.densify_until > 0,
            "allocations": self.allocations,
            **s,
            "timings": None,
            "gpu_busy_ms_per_step": None,
        }
        if not self.timed:
            res["timings_note"] = 'set timing = "per_kernel" in [backend] for the ts_* timings'
        elif not self.timings.available:
            res["timings_note"] = "this build of splat._core has no per-kernel timings API"
        else:
            table = self.timings.report(steps)
            res["timings"] = table
            res["gpu_busy_ms_per_step"] = sum(r["gpu_ms_per_step"] for r in table.values()) if table else None
            if not table:
                res["timings_note"] = f"the {self.trainer.backend} backend recorded no ts_* timings"
        return res
