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
import statistics
import sys
from pathlib import Path

from ..cli._common import count, positive_int, write_json
from .parity import cmd_parity   # (binds splat.bench.parity too)
from .replay import (MIN_THRESHOLD_PCT, Replay, _console, _note, _run_dir, _sigma_pct, compare_verdict,
                     find_checkpoint, load_setup, read_checkpoint, run_folder_of)
from .report import _describe, _ms, _print_runs, _print_timings
# The package's interface, as before the split (tools and tests use these).
from .parity import _derived_gradients, _parity_step, compare_buffers, float32_moments  # noqa: F401
from .replay import (GRAD_KEYS, PARAM_KEYS, Checkpoint, Setup, make_trainer, replay_train_config,  # noqa: F401
                     summarize)

__all__ = ["main", "find_checkpoint", "replay_train_config", "summarize", "compare_verdict",
           "compare_buffers"]

ITERS, REPEATS, WARMUP = 100, 5, 20


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
