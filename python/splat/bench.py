"""`splat bench`: fixed-checkpoint training replay for measuring and checking optimisations.

    splat bench --config A.toml [--checkpoint C.npz] [--iters N] [--repeats R] [--warmup W] [--out DIR]
    splat bench --config A.toml --compare B.toml [...]
    splat bench --parity A.toml B.toml [--checkpoint C.npz] [--out DIR]
    splat bench --parity A.toml --self

Every run starts from a checkpoint written by `splat train` (default: the
newest one in the config's output folder) and replays the trainer's own steps
from there: the camera of a step is fixed by (seed, step), so two replays from
the same checkpoint see the same views. During a replay no densification and
no opacity reset happens, so the number of Gaussians stays that of the
checkpoint; the densification statistics are still gathered when the
checkpoint lies inside the densification phase, as a real step there does.

Timing: W warm-up steps, then R repeats of N steps. Each step is timed with
the host clock after the step returns; the step reads the loss back, which
synchronises GPU backends. Per repeat: the median ms/step and sigma (stdev /
mean of its step times). Overall: the median of all step times, and sigma as
the spread of the repeat medians (stdev / mean; with one repeat, the spread of
the step times). With `timing = "per_kernel"` in [backend] the native ts_*
timings are reported per label: calls per step, mean us per call and the
upload / alloc / gpu / readback milliseconds per step; their gpu sum is the
GPU busy time per step.

`--compare B.toml` keeps one trainer per config, both loaded from the same
checkpoint, and alternates A and B repeat by repeat. B differs from A
significantly when |delta| exceeds max(2 sigma, 1%), sigma being the larger of
the two configs' sigmas.

`--parity` runs one training step from the same checkpoint under each config
and compares the native debug snapshot: tile_ranges must be byte-equal, every
gradient must satisfy |a - b| <= 1e-4 + 1e-4 |b| (b is B's value); differences
in sorted_gauss (the order of equal-depth pairs) are counted, not gated. When
the backend has no debug snapshot the parameter gradients are recovered from
the Adam first moments, g = (m1 - beta1 m0) / (1 - beta1), and means2d from
the densification statistic (its NDC norm). Exit status 0 when the gate
passes, 1 when it fails.

The settings come from the command line; [train] keys written in a config
override the checkpoint's training settings (so a B config can change the
loss, e.g. ssim_weight), and [data] gives the views and background.
"""
from __future__ import annotations

import argparse
import math
import os
import statistics
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from ._cli_common import count, one_line, positive_int, warn, write_json

__all__ = ["main", "find_checkpoint", "replay_train_config", "summarize", "compare_verdict",
           "compare_buffers"]

ITERS, REPEATS, WARMUP = 100, 5, 20
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
    from . import BackendConfig
    from .config import load_config
    from .data import load_dataset
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
    from .trainer import read_checkpoint as read
    meta, arrays = read(path)
    return Checkpoint(Path(path), meta, arrays)


def replay_train_config(checkpoint_train: dict, overrides: dict | None = None, *, densify_stats: bool):
    """The checkpoint's TrainConfig, updated with `overrides`, made safe to
    replay: no densification, no MCMC refine and no opacity reset ever fires. With
    `densify_stats` the step still gathers the densification statistics."""
    from .config import TrainConfig
    values = dict(checkpoint_train)
    values.update(overrides or {})
    values.update(densify_from=0, densify_until=NEVER if densify_stats else 0,
                  densify_every=NEVER, opacity_reset_every=NEVER)
    values.update(mcmc_refine_from=0, mcmc_refine_until=0)  # mcmc: no refine (the noise still runs)
    return TrainConfig(**values)


def make_trainer(ckpt: Checkpoint, setup: Setup, *, densify_stats: bool | None = None):
    """A Trainer in the checkpoint's state under the setup's backend config and
    [train] overrides, replaying without densification or opacity resets."""
    from .trainer import Trainer, check_checkpoint_sizes
    ds = setup.dataset
    try:
        check_checkpoint_sizes(ckpt.meta, ds, ckpt.path)
    except ValueError as exc:
        raise ValueError(f"{setup.path}: {str(exc).removeprefix('[splat] ')}") from None
    train = ckpt.meta["train_config"]
    if densify_stats is None:   # as a real step at this point of training would
        densify_stats = ckpt.step < int(setup.train_overrides.get("densify_until", train.get("densify_until", 0)))
    config = replay_train_config(train, setup.train_overrides, densify_stats=densify_stats)
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


# --------------------------------------------------------------------------- printing


def _ms(x) -> str:
    if x is None:
        return "-"
    return f"{x:.3f}" if abs(x) < 100 else f"{x:.1f}"


def _print_runs(console, res: dict, title: str) -> None:
    from rich.table import Table
    t = Table(title=title, title_justify="left")
    t.add_column("repeat", justify="right")
    t.add_column("median ms/step", justify="right")
    t.add_column("mean", justify="right")
    t.add_column("min", justify="right")
    t.add_column("sigma %", justify="right")
    for i, r in enumerate(res["runs"], 1):
        t.add_row(str(i), _ms(r["median_ms"]), _ms(r["mean_ms"]), _ms(r["min_ms"]), f"{r['sigma_pct']:.1f}")
    t.add_row("all", _ms(res["median_ms"]), _ms(res["mean_ms"]), _ms(res["min_ms"]),
              f"{res['sigma_pct']:.1f}", style="bold")
    console.print(t)


def _print_timings(console, res: dict, title: str) -> None:
    from rich.table import Table
    table = res.get("timings")
    if not table:
        if res.get("timings_note"):
            console.print(f"ts_* timings: {res['timings_note']}")
        return
    t = Table(title=title, title_justify="left")
    for name in ("label", "calls/step", "mean us/call", "ms/step", "upload", "alloc", "gpu", "readback"):
        t.add_column(name, justify="left" if name == "label" else "right")
    for label, r in table.items():
        t.add_row(label, f"{r['calls_per_step']:.2f}", f"{r['mean_us']:.1f}", _ms(r["ms_per_step"]),
                  _ms(r["upload_ms_per_step"]), _ms(r["alloc_ms_per_step"]), _ms(r["gpu_ms_per_step"]),
                  _ms(r["readback_ms_per_step"]))
    console.print(t)
    busy = res.get("gpu_busy_ms_per_step")
    if busy is not None:
        share = f" ({100.0 * busy / res['mean_ms']:.0f}% of the mean step)" if res["mean_ms"] > 0 else ""
        what = "GPU busy" if res["backend"] != "cpu" else "busy (the cpu backend's compute)"
        console.print(f"{what}: {_ms(busy)} ms/step{share}")


def _describe(res: dict) -> str:
    w, h = res["image_size"]
    sizes = f"{w}x{h}" if res.get("image_sizes", 1) == 1 else f"up to {w}x{h} ({res['image_sizes']} sizes)"
    return (f"{res['num_gaussians']:,} Gaussians, {res['views']} views {sizes}, {res['backend']}, "
            f"from step {res['start_step']} ({res['checkpoint']})")


# --------------------------------------------------------------------------- bench / compare


def _progress_line(name: str, r: int, repeats: int, times: list[float]) -> None:
    _note(f"  {name}repeat {r}/{repeats}: median {statistics.median(times):.3f} ms/step, "
          f"sigma {_sigma_pct(times):.1f}%")


def cmd_bench(args) -> int:
    datasets: dict = {}
    a = load_setup(args.config, datasets)
    ckpt = read_checkpoint(args.checkpoint or find_checkpoint(run_folder_of(a)))
    b = load_setup(args.compare, datasets) if args.compare else None
    replays = [Replay("A", a, ckpt)] + ([Replay("B", b, ckpt)] if b else [])
    head = replays[0]
    _note(f"splat bench: {head.start_gaussians:,} Gaussians from {ckpt.path} (step {ckpt.step}) on "
          f"{head.trainer.backend}: {args.warmup} warm-up steps, {args.repeats} x {args.iters} steps"
          + (", A and B alternating" if b else ""))
    for rp in replays:
        rp.warm_up(args.warmup)
    for r in range(1, args.repeats + 1):
        for rp in replays:
            times = rp.measure(args.iters)
            _progress_line(f"{rp.name} " if b else "", r, args.repeats, times)
    settings = {"iters": args.iters, "repeats": args.repeats, "warmup": args.warmup}
    results = [rp.result(ckpt) for rp in replays]
    console = _console()
    run_dir = _run_dir(a, args.out)
    if b is None:
        res = results[0]
        console.print(f"splat bench {args.config}: {_describe(res)}")
        _print_runs(console, res, f"ms/step over {args.repeats} x {args.iters} steps")
        _print_timings(console, res, "ts_* timings (ms per step unless stated)")
        console.print(f"median {_ms(res['median_ms'])} ms/step, sigma {res['sigma_pct']:.1f}% "
                      f"(steps: {res['step_sigma_pct']:.1f}%), {1000.0 / res['median_ms']:.1f} steps/s")
        out = {"mode": "bench", **settings, **res}
        path = run_dir / "bench.json"
    else:
        ra, rb = results
        cmp = compare_verdict(ra, rb)
        console.print(f"splat bench: A = {args.config}, B = {args.compare}: {_describe(ra)}")
        _print_runs(console, ra, f"A: {args.config}")
        _print_timings(console, ra, "A: ts_* timings (ms per step unless stated)")
        _print_runs(console, rb, f"B: {args.compare}")
        _print_timings(console, rb, "B: ts_* timings (ms per step unless stated)")
        _print_compare(console, ra, rb, cmp)
        out = {"mode": "compare", **settings, "a": ra, "b": rb, "comparison": cmp}
        path = run_dir / "bench_compare.json"
    write_json(path, out)
    console.print(f"wrote {path}")
    return 0


def _print_compare(console, ra: dict, rb: dict, cmp: dict) -> None:
    from rich.table import Table
    t = Table(title="A/B", title_justify="left")
    for name in ("config", "median ms/step", "sigma %", "GPU busy ms/step"):
        t.add_column(name, justify="left" if name == "config" else "right")
    for tag, r in (("A", ra), ("B", rb)):
        t.add_row(f"{tag}: {Path(r['config']).name}", _ms(r["median_ms"]), f"{r['sigma_pct']:.1f}",
                  _ms(r["gpu_busy_ms_per_step"]))
    console.print(t)
    verdict = cmp["verdict"]
    word = {"faster": "B is faster", "slower": "B is slower", "within noise": "within noise"}[verdict]
    console.print(f"delta (B vs A): {cmp['delta_pct']:+.2f}%  threshold: {cmp['threshold_pct']:.2f}% "
                  f"(max(2 sigma, {MIN_THRESHOLD_PCT:g}%))  verdict: {word}")


# --------------------------------------------------------------------------- parity


def _snapshot(native):
    """The native debug snapshot, or (None, why) when the backend has none."""
    fn = getattr(native, "debug_snapshot", None)
    if fn is None:
        return None, "this build of splat._core has no debug snapshot"
    try:
        return {k: np.asarray(v) for k, v in dict(fn()).items()}, None
    except RuntimeError as exc:
        return None, one_line(exc)


def _derived_gradients(before: dict, after: dict, beta1: float) -> dict:
    """Gradients of one step recovered from the Adam first moments
    (m1 = beta1 m0 + (1 - beta1) g), and the NDC norm of the means2d gradient
    from the densification statistic."""
    out = {}
    for k in PARAM_KEYS:
        m1 = after.get(f"adam_m.{k}")
        if m1 is None:
            continue
        m1 = np.asarray(m1, np.float64)
        m0 = before.get(f"adam_m.{k}")
        m0 = np.zeros_like(m1) if m0 is None or np.shape(m0) != m1.shape else np.asarray(m0, np.float64)
        out[f"grad.{k}"] = (m1 - beta1 * m0) / (1.0 - beta1)
    if "grad_accum" in after:
        g0 = before.get("grad_accum")
        g1 = np.asarray(after["grad_accum"], np.float64)
        g0 = np.zeros_like(g1) if g0 is None or np.shape(g0) != g1.shape else np.asarray(g0, np.float64)
        out["grad.means2d"] = g1 - g0
    return out


def _parity_step(ckpt: Checkpoint, setup: Setup) -> dict:
    """One step from the checkpoint; its buffers and loss."""
    trainer = make_trainer(ckpt, setup, densify_stats=True)
    view = int(trainer._native.view_for_step(ckpt.step + 1))
    stats = trainer.step(read_loss=True)
    snap, why = _snapshot(trainer._native)
    state = trainer.state() if snap is None else None
    return {"loss": stats.loss, "view": view, "snapshot": snap, "why": why, "state": state,
            "beta1": trainer.config.adam_beta1, "backend": trainer.backend,
            "num_gaussians": trainer.num_gaussians}


def _grad_row(a: np.ndarray, b: np.ndarray) -> dict:
    if a.shape != b.shape:
        return {"kind": "gradient", "gated": True, "passed": False, "shape": list(a.shape),
                "detail": f"shapes differ: {list(a.shape)} vs {list(b.shape)}"}
    a64 = a.astype(np.float64, copy=False)
    b64 = b.astype(np.float64, copy=False)
    diff = np.abs(a64 - b64)
    tol = ATOL + RTOL * np.abs(b64)
    bad = ~(diff <= tol)                      # NaN fails
    nonzero = np.abs(b64) > 0
    max_abs = float(diff.max()) if diff.size else 0.0
    max_rel = float((diff[nonzero] / np.abs(b64[nonzero])).max()) if nonzero.any() else 0.0
    if not np.isfinite(a64).all() or not np.isfinite(b64).all():
        max_abs = max_rel = float("nan")
    return {"kind": "gradient", "gated": True, "passed": not bad.any(), "shape": list(a.shape),
            "max_abs": max_abs, "max_rel": max_rel, "violations": int(bad.sum()),
            "worst_over_tol": float(np.max(np.where(np.isnan(diff), np.inf, diff / tol))) if diff.size else 0.0}


def compare_buffers(a: dict, b: dict) -> dict:
    """Rows of the parity table, by buffer name: tile_ranges (byte equality,
    gated), sorted_gauss (differing positions, reported), gradients (gated
    with |a - b| <= 1e-4 + 1e-4 |b|)."""
    rows = {}
    if "tile_ranges" in a or "tile_ranges" in b:
        ta, tb = a.get("tile_ranges"), b.get("tile_ranges")
        if ta is None or tb is None:
            rows["tile_ranges"] = {"kind": "bytes", "gated": True, "passed": False, "detail": "missing on one side"}
        else:
            same = ta.dtype == tb.dtype and ta.shape == tb.shape and ta.tobytes() == tb.tobytes()
            row = {"kind": "bytes", "gated": True, "passed": bool(same), "shape": list(ta.shape)}
            if not same and ta.shape == tb.shape:
                row["differing_tiles"] = int(np.any(ta.reshape(len(ta), -1) != tb.reshape(len(tb), -1), axis=1).sum())
            elif not same:
                row["detail"] = f"shapes differ: {list(ta.shape)} vs {list(tb.shape)}"
            rows["tile_ranges"] = row
    if "sorted_gauss" in a and "sorted_gauss" in b:
        sa, sb = a["sorted_gauss"].ravel(), b["sorted_gauss"].ravel()
        n = min(len(sa), len(sb))
        rows["sorted_gauss"] = {"kind": "order", "gated": False, "passed": True, "shape": [len(sa)],
                                "differing_positions": int((sa[:n] != sb[:n]).sum()) + abs(len(sa) - len(sb))}
    for k in GRAD_KEYS:
        name = f"grad.{k}"
        if name in a and name in b:
            rows[name] = _grad_row(np.asarray(a[name]), np.asarray(b[name]))
        elif name in a or name in b:
            rows[name] = {"kind": "gradient", "gated": True, "passed": False, "detail": "missing on one side"}
    return rows


def _print_parity(console, rows: dict, title: str) -> None:
    from rich.table import Table
    t = Table(title=title, title_justify="left")
    for name in ("buffer", "shape", "max abs", "max rel", "worst/tol", "differing", "gate", "result"):
        t.add_column(name, justify="left" if name in ("buffer", "result") else "right")

    def g(x):
        return "-" if x is None else ("nan" if isinstance(x, float) and math.isnan(x) else f"{x:.3g}")

    for name, r in rows.items():
        differing = r.get("differing_tiles", r.get("differing_positions", r.get("violations")))
        result = "PASS" if r["passed"] else "FAIL"
        if not r["gated"]:
            result = "reported"
        if r.get("detail"):
            result += f" ({r['detail']})"
        style = None if r["passed"] else "bold red"
        t.add_row(name, "x".join(map(str, r.get("shape", []))) or "-", g(r.get("max_abs")), g(r.get("max_rel")),
                  g(r.get("worst_over_tol")), "-" if differing is None else str(differing),
                  "yes" if r["gated"] else "no", result, style=style)
    console.print(t)


def cmd_parity(args) -> int:
    datasets: dict = {}
    files = list(args.parity)
    if args.self_check:
        if len(files) == 2 and os.path.abspath(files[0]) != os.path.abspath(files[1]):
            warn(f"--self compares {files[0]} with itself; {files[1]} is not used")
        files = [files[0], files[0]]
    a = load_setup(files[0], datasets)
    same = os.path.abspath(files[1]) == os.path.abspath(files[0])
    b = a if same else load_setup(files[1], datasets)
    ckpt = read_checkpoint(args.checkpoint or find_checkpoint(run_folder_of(a)))
    _note(f"splat bench --parity: one step from {ckpt.path} (step {ckpt.step}) under "
          + (f"{files[0]} twice" if args.self_check else f"{files[0]} and {files[1]}"))
    ra = _parity_step(ckpt, a)
    rb = _parity_step(ckpt, b)
    if ra["snapshot"] is not None and rb["snapshot"] is not None:
        source, note = "debug_snapshot", None
        rows = compare_buffers(ra["snapshot"], rb["snapshot"])
    else:
        source = "adam_moments"
        why = ra["why"] or rb["why"]
        note = (f"no native debug snapshot ({why}): gradients recovered from the Adam first moments, "
                f"grad.means2d as its NDC norm; tile_ranges and sorted_gauss not compared")
        before = ckpt.arrays
        rows = compare_buffers(_derived_gradients(before, ra["state"] or {}, ra["beta1"]),
                               _derived_gradients(before, rb["state"] or {}, rb["beta1"]))
    passed = bool(rows) and all(r["passed"] for r in rows.values() if r["gated"])
    console = _console()
    title = (f"parity: {files[0]} with itself (--self)" if args.self_check else
             f"parity: A = {files[0]}, B = {files[1]}")
    console.print(f"{title}: step {ckpt.step + 1} (view {ra['view']}), {ra['num_gaussians']:,} Gaussians, "
                  f"{ra['backend']} vs {rb['backend']}; loss A {ra['loss']:.6g}, B {rb['loss']:.6g}")
    if note:
        console.print(f"note: {note}")
    _print_parity(console, rows, f"buffers ({source}); gradients gated at |a-b| <= {ATOL:g} + {RTOL:g} |b|")
    if not rows:
        console.print("nothing to compare")
    console.print(f"parity: {'PASS' if passed else 'FAIL'}")
    out = {"mode": "parity", "a": str(Path(files[0]).resolve()), "b": str(Path(files[1]).resolve()),
           "self": bool(args.self_check), "checkpoint": str(ckpt.path.resolve()), "step": ckpt.step + 1,
           "view": ra["view"], "backend_a": ra["backend"], "backend_b": rb["backend"],
           "backend_config_a": a.backend.to_dict(), "backend_config_b": b.backend.to_dict(),
           "loss_a": ra["loss"], "loss_b": rb["loss"], "source": source, "note": note,
           "atol": ATOL, "rtol": RTOL, "buffers": rows, "passed": passed}
    path = _run_dir(a, args.out) / "parity.json"
    write_json(path, out)
    console.print(f"wrote {path}")
    return 0 if passed else 1


# --------------------------------------------------------------------------- entry point


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="splat bench",
        description="Replay training steps from a checkpoint: ms/step with its noise, the ts_* timings, "
                    "A/B comparisons (--compare) and numerical parity between backend configs (--parity).")
    p.add_argument("--config", metavar="A.toml", help="run configuration to measure")
    p.add_argument("--checkpoint", metavar="C.npz",
                   help="state to replay from (default: the newest checkpoint of the config's run: the folder of "
                        "a run's config.toml, else output.dir)")
    p.add_argument("--iters", type=positive_int, default=ITERS, metavar="N",
                   help=f"steps per repeat (default {ITERS})")
    p.add_argument("--repeats", type=positive_int, default=REPEATS, metavar="R",
                   help=f"repeats (default {REPEATS})")
    p.add_argument("--warmup", type=count, default=WARMUP, metavar="W",
                   help=f"unmeasured steps first (default {WARMUP})")
    p.add_argument("--out", metavar="DIR",
                   help="folder for bench.json / bench_compare.json / parity.json (default: the config's run)")
    p.add_argument("--compare", metavar="B.toml", help="alternate with config B and say whether B is faster")
    p.add_argument("--parity", nargs="+", metavar="X.toml",
                   help="A.toml B.toml: compare one training step's buffers under A and B")
    p.add_argument("--self", dest="self_check", action="store_true",
                   help="with --parity: compare A with itself (the backend's own nondeterminism)")
    return p


def main(argv=None) -> int:
    """`splat bench ...`; returns the exit status. Errors other than usage
    errors propagate (the `splat` command turns them into one-line messages)."""
    p = build_parser()
    try:
        args = p.parse_args(argv)
        if args.parity is not None:
            if args.compare:
                p.error("--parity and --compare do not go together")
            if len(args.parity) > 2 or (len(args.parity) < 2 and not args.self_check):
                p.error("--parity takes two configs (A.toml B.toml), or one with --self")
            if args.config:
                p.error("--parity names its configs itself; leave out --config")
        else:
            if args.self_check:
                p.error("--self goes with --parity")
            if not args.config:
                p.error("--config is required (or use --parity)")
    except SystemExit as exc:
        return int(exc.code or 0) if not isinstance(exc.code, str) else 2
    if args.parity is not None:
        return cmd_parity(args)
    return cmd_bench(args)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
