"""Scale table: ms per training step against the number of Gaussians and the
image size, with peak memory, one row per (Gaussians, image size).

    python bench/scale.py --backend cuda                       # 300k..6M x 800x800..3840x2160
    python bench/scale.py --backend cpu --gaussians 20000 --sizes 64x64,128x96 --steps 5
    python bench/scale.py --gaussians 1000000 --sizes 800x800 --breakdown   # + GPU ms per ts_* label
    python bench/scale.py --gaussians 1000000 --compare kernel_overlap=off  # A/B: each cell again, ratio
    python bench/scale.py --gaussians 1000000 --compare train.blend_stop=chunk  # a recipe key likewise
    python bench/scale.py --gaussians 1000000 --compare-kernels=-DSPLAT_SORT_STAGED=0 --rounds 2
        # a kernel define's A/B (NVRTC options, cuda), the cells' variants in turn, twice

A step's cost should grow with its work: the columns `us/1k G` (per thousand
Gaussians) and `ms/MP` (per megapixel) stay flat along a column when the
step scales, and the row that breaks the pattern is the one to fix.

Each cell runs in a process of its own, so the peak-memory columns are that
cell's (the GPU arena's peak and the driver's peak used memory above the
process start; peak RSS on the cpu backend). The scene: n Gaussians uniform in
[-1.3, 1.3]^3 seen from 4 units away by 4 cameras around it, their scales
shrinking as 1/sqrt(n) so that the screen area they cover stays about the
same as the count grows (as a trained scene's does); the targets are smooth
random colour fields. Densification and opacity resets are off, so every step
of a cell has the same count; SH degree 3 throughout. Timed: --steps steps
after --warmup steps, the loss read back only after the last one.
"""
from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))  # gate.label_timings (--breakdown)

DEFAULT_GAUSSIANS = "300000,1000000,3000000,6000000"
DEFAULT_SIZES = "800x800,1920x1080,3840x2160"
# The performance round's targets for one training step on the GPU (ms at most).
TARGETS_MS = {(1_000_000, 800, 800): 1.5, (6_000_000, 3840, 2160): 12.0}


def _sizes(text: str) -> list[tuple[int, int]]:
    out = []
    for part in text.split(","):
        w, _, h = part.strip().lower().partition("x")
        if not (w.isdigit() and h.isdigit()) or int(w) < 16 or int(h) < 16:
            raise argparse.ArgumentTypeError(f"--sizes: expected WxH values of at least 16x16, got {part!r}")
        out.append((int(w), int(h)))
    return out


def _counts(text: str) -> list[int]:
    try:
        out = [int(x) for x in text.split(",")]
    except ValueError:
        raise argparse.ArgumentTypeError(f"--gaussians: expected a comma-separated list of counts, got {text!r}")
    if not out or min(out) < 1:
        raise argparse.ArgumentTypeError(f"--gaussians: counts must be >= 1, got {text!r}")
    return out


def _cameras(width: int, height: int):
    import splat
    from splat.data.synthetic import look_at
    f = 0.5 * width / np.tan(np.radians(25.0))
    cams = []
    for k in range(4):
        a = 2 * np.pi * k / 4 + 0.3
        eye = 4.0 * np.array([np.cos(a), np.sin(a), 0.35])
        cams.append(splat.Camera(look_at(eye), f, f, width / 2, height / 2, width, height))
    return cams


def _targets(width: int, height: int, views: int, rng) -> list[np.ndarray]:
    from PIL import Image
    out = []
    for _ in range(views):
        coarse = rng.integers(0, 256, size=(12, 16, 3), dtype=np.uint8)
        out.append(np.asarray(Image.fromarray(coarse).resize((width, height), Image.BILINEAR)))
    return out


def run_cell(n: int, width: int, height: int, backend: str, steps: int, warmup: int, seed: int,
             breakdown: bool = False, fields: dict | None = None, train_keys: dict | None = None) -> dict:
    import splat
    from splat import _core
    rng = np.random.default_rng(seed)
    cams = _cameras(width, height)
    train = splat.Dataset(cameras=cams, images=_targets(width, height, len(cams), rng),
                          names=[f"view_{i}" for i in range(len(cams))], background=(1.0, 1.0, 1.0))
    scale = 0.01 * np.sqrt(300_000 / n)
    k = 16
    sh = rng.normal(scale=0.1, size=(n, k, 3))
    sh[:, 0] = rng.uniform(-1.0, 1.0, size=(n, 3))
    state = dict(means=rng.uniform(-1.3, 1.3, size=(n, 3)).astype(np.float32),
                 log_scales=np.log(scale * rng.uniform(0.5, 2.0, size=(n, 3))).astype(np.float32),
                 quats=rng.normal(size=(n, 4)).astype(np.float32),
                 opacity_logits=rng.uniform(-2.0, 2.0, size=n).astype(np.float32),
                 sh=sh.astype(np.float32))
    cfg = splat.TrainConfig(**dict(dict(steps=warmup + steps, densify_from=2**31, densify_until=2**31,
                                        opacity_reset_every=2**32 - 1, sh_degree=3, sh_degree_interval=1, seed=seed),
                                   **(train_keys or {})))
    trainer = splat.Trainer(train, cfg, splat.BackendConfig(backend=backend, **(fields or {})), state)
    for _ in range(warmup):
        trainer.step(read_loss=False)
    trainer.step(read_loss=True)  # drains the warm-up
    t0 = time.perf_counter()
    for _ in range(steps - 1):
        trainer.step(read_loss=False)
    last = trainer.step(read_loss=True)
    ms = (time.perf_counter() - t0) * 1e3 / steps
    row = dict(gaussians=n, width=width, height=height, ms=ms, loss=float(last.loss),
               count=trainer.num_gaussians)
    if backend == "cpu":
        row["rss_peak"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    else:
        mem = _core.gpu_memory()
        row["arena_peak"] = int(mem.get("arena_peak_bytes", 0))
        row["driver_peak"] = max(int(mem.get("driver_peak_used_bytes", 0)) - int(mem.get("driver_start_used_bytes", 0)), 0)
        if breakdown:
            row["ts"] = _step_breakdown(train, trainer, cfg, backend, fields)
    return row


def _step_breakdown(train, trainer, cfg, backend: str, fields: dict | None = None, steps: int = 6) -> dict:
    """GPU ms per ts_* label of a step of the cell's final state (gate.label_timings)."""
    from gate import label_timings
    start = max(cfg.steps - steps - 2, 0)  # past the warm-up: the cell's SH degree
    ts, _ = label_timings(train, cfg, backend, trainer.state(), start, fields=fields, steps=steps)
    return {label: ms for label, (ms, _calls) in ts.items()}


def gib(n: int) -> str:
    return f"{n / 2**30:.2f}"


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--backend", default="cuda")
    ap.add_argument("--gaussians", type=_counts, default=_counts(DEFAULT_GAUSSIANS),
                    help=f"comma-separated counts (default {DEFAULT_GAUSSIANS})")
    ap.add_argument("--sizes", type=_sizes, default=_sizes(DEFAULT_SIZES),
                    help=f"comma-separated WxH image sizes (default {DEFAULT_SIZES})")
    ap.add_argument("--steps", type=int, default=50, help="timed steps per cell (default 50)")
    ap.add_argument("--warmup", type=int, default=10, help="untimed steps first (default 10)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--breakdown", action="store_true",
                    help="also print each cell's GPU ms per ts_* label of a step (timing='per_kernel', gpu backends)")
    ap.add_argument("--compare", action="append", metavar="FIELD=VALUE", default=[],
                    help="run every cell again with this BackendConfig field, or recipe key as train.KEY=VALUE "
                         "(repeatable: one more run per flag, right after the default's); the table adds each "
                         "run's ratio to the default's")
    ap.add_argument("--compare-kernels", action="append", metavar="OPTIONS", default=[],
                    help="run every cell again with the kernels compiled with these NVRTC options, e.g. "
                         "--compare-kernels=-DSPLAT_SORT_STAGED=0 (with '=': the options begin with a dash; "
                         "the kernels' A/B defines; cuda only; repeatable)")
    ap.add_argument("--rounds", type=int, default=1,
                    help="run each cell's variants in turn this many times, every run in the table with its "
                         "ratio to the same round's default (default 1)")
    ap.add_argument("--backend-set", action="append", metavar="FIELD=VALUE", default=[], help=argparse.SUPPRESS)
    ap.add_argument("--train-set", action="append", metavar="train.KEY=VALUE", default=[], help=argparse.SUPPRESS)
    ap.add_argument("--cell", help=argparse.SUPPRESS)  # internal: one cell, printed as JSON
    args = ap.parse_args(argv)
    if args.steps < 1 or args.warmup < 0:
        ap.error("--steps must be >= 1 and --warmup >= 0")
    if args.rounds < 1:
        ap.error(f"--rounds must be >= 1, got {args.rounds}")
    for options in args.compare_kernels:
        if args.backend != "cuda":
            ap.error(f"--compare-kernels: NVRTC options apply to the cuda backend only, not {args.backend}")
        if not options.split() or any(not o.startswith("-") for o in options.split()):
            ap.error(f"--compare-kernels: expected NVRTC options such as -DNAME=VALUE, got {options!r}")
    import splat
    from gate import parse_backend_field, parse_train_item
    variants = [("default", {}, {}, {})]   # (name, BackendConfig fields, recipe keys, environment)
    for flag, items in (("--backend-set", args.backend_set), ("--train-set", args.train_set),
                        ("--compare", args.compare)):
        for item in items:
            if flag == "--train-set" or (flag == "--compare" and item.startswith("train.")):
                train = parse_train_item(ap, flag, item)
                if flag == "--train-set":
                    variants[0][2].update(train)
                else:
                    variants.append((item, {}, train, {}))
                continue
            key, value = parse_backend_field(ap, flag, item)
            if flag == "--backend-set":
                variants[0][1][key] = value
            else:
                variants.append((item, {key: value}, {}, {}))
    # The kernels are compiled at run time (NVRTC), with SPLAT_NVRTC_OPTIONS added to
    # their options and their cache key: a variant's cells get it in their environment.
    for options in args.compare_kernels:
        variants.append((",".join(options.split()), {}, {}, {"SPLAT_NVRTC_OPTIONS": options}))
    if args.cell:
        n, w, h = (int(x) for x in args.cell.split(","))
        print(json.dumps(run_cell(n, w, h, args.backend, args.steps, args.warmup, args.seed,
                                    args.breakdown and args.backend != "cpu", variants[0][1], variants[0][2])),
              flush=True)
        return 0

    ok, why = splat.backend_available(args.backend)
    if not ok:
        ap.error(f"backend {args.backend} is not available: {why}")
    rows = []
    rounds = args.rounds > 1  # the table gets a round column
    cells = [(n, w, h, r) for n in args.gaussians for w, h in args.sizes for r in range(1, args.rounds + 1)]
    for n, w, h, round_ in cells:
        for name, fields, train_keys, env in variants:
            cmd = [sys.executable, os.path.abspath(__file__), "--backend", args.backend, "--steps",
                   str(args.steps), "--warmup", str(args.warmup), "--seed", str(args.seed), "--cell", f"{n},{w},{h}"]
            cmd += [a for k, v in fields.items() for a in ("--backend-set", f"{k}={v}")]
            cmd += [a for k, v in train_keys.items() for a in ("--train-set", f"train.{k}={json.dumps(v)}")]
            if args.breakdown:
                cmd.append("--breakdown")
            proc = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, **env})
            label = ("" if name == "default" else f" [{name}]") + (f" (round {round_})" if rounds else "")
            if proc.returncode != 0:
                tail = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
                print(f"{n:>10,} {w}x{h}{label}: failed: {tail}", flush=True)
                rows.append(dict(gaussians=n, width=w, height=h, variant=name, round=round_, error=tail))
                continue
            row = json.loads(proc.stdout.strip().splitlines()[-1])
            row["variant"], row["round"] = name, round_
            rows.append(row)
            print(f"{n:>10,} {w}x{h}{label}: {row['ms']:.2f} ms/step", flush=True)
            for ts_label, ms in sorted(row.get("ts", {}).items(), key=lambda kv: -kv[1]):
                print(f"    {ts_label:<28} {ms:8.3f} ms", flush=True)

    mem_head = "RSS peak GiB" if args.backend == "cpu" else "arena GiB  driver GiB"
    compared = len(variants) > 1 or rounds
    head = (f"{'#Gauss':>10} {'image':>10} {'ms/step':>9} {'us/1k G':>8} {'ms/MP':>7} {mem_head:>21} "
            f"{'target ms':>10}")
    if compared:
        head = f"{'variant':<22} " + (f"{'round':>5} " if rounds else "") + head + f" {'x default':>10}"
    base_ms = {(r["gaussians"], r["width"], r["height"], r["round"]): r["ms"] for r in rows
               if r.get("variant") == "default" and "error" not in r}
    print()
    print(head)
    print("-" * len(head))
    for r in rows:
        size = f"{r['width']}x{r['height']}"
        lead = (f"{r['variant']:<22} " + (f"{r['round']:>5} " if rounds else "")) if compared else ""
        if "error" in r:
            print(f"{lead}{r['gaussians']:>10,} {size:>10} {'failed: ' + r['error'][:60]}")
            continue
        mp = r["width"] * r["height"] / 1e6
        mem = gib(r["rss_peak"]) if "rss_peak" in r else f"{gib(r['arena_peak']):>9}  {gib(r['driver_peak']):>10}"
        target = TARGETS_MS.get((r["gaussians"], r["width"], r["height"]))
        verdict = "" if target is None else f"{target:>6.1f} {'met' if r['ms'] <= target else 'not met'}"
        line = (f"{lead}{r['gaussians']:>10,} {size:>10} {r['ms']:>9.3f} "
                f"{1e3 * r['ms'] / (r['gaussians'] / 1e3):>8.3f} {r['ms'] / mp:>7.3f} {mem:>21} {verdict}")
        if compared:
            base = base_ms.get((r["gaussians"], r["width"], r["height"], r["round"]))
            line = f"{line:<{len(head) - 11}} {(r['ms'] / base if base else float('nan')):>10.3f}"
        print(line)
    return 1 if any("error" in r for r in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
