"""Real captures: splat (and, side by side, gsplat) trained on COLMAP /
nerfstudio scenes, one table.

    python bench/real.py                                   # every scene under ../shared/data/captures
    python bench/real.py --scenes thermos --steps 7000     # one piece of the run
    python bench/real.py --gsplat --max-seconds 540        # with gsplat, stop before 9 minutes
    python bench/real.py path/to/capture --backend cpu --steps 50 --set train.init_points=500
    python bench/real.py --scenes room --steps 30000 --breakdown   # and the ts_* of a step at the end
    python bench/real.py --scenes thermos --steps 30000 --seeds 4  # train.seed 0..3: mean, std, worst
    python bench/real.py --scenes thermos --seeds 4 --floaters     # and each run's worst view and near floaters
    python bench/real.py --scenes beer --seeds 4 --per-view        # each test view's PSNR per seed
    python bench/real.py --scenes beer --seeds 8 --jobs 4          # four runs at a time (PSNR; times overlap)

Per scene and step count (7000 and 30000 by default): the test PSNR and SSIM
(splat.metrics on both trainers' renders), the number of Gaussians, the
training time (the step loop only, the device synchronized at each mark;
loading, kernel warm-up and evaluation excluded) and the peak device memory
(splat: the resident arena's high-water mark; gsplat: torch's
max_memory_allocated). Both trainers get the same images (uint8 on the
device), split (every 8th image by name is test), SfM initialisation
(splat's initial_gaussians of the same points), background (the loader's
default: black for captures), 3DGS recipe (the same TrainConfig: learning
rates, SH schedule, loss weights, densification schedule and thresholds),
views in shuffled passes; gsplat densifies with its DefaultStrategy
(bench/gsplat_side.py). With --gsplat the
ratios gsplat / splat follow the table.

--seeds N trains every scene N times, with train.seed = S, S + 1, ... (S: the
config's seed, --set train.seed=S), for splat and for gsplat alike (its view
order, initialisation and torch generator follow the seed), and adds a table
per scene, trainer and step count: the mean PSNR over the seeds, its standard
deviation (n - 1), the worst and best seed's PSNR and the mean time. With
--variant, a second table pairs each variant with the default seed by seed: the
PSNR differences, their mean, its standard error and each seed's. The seed's own
luck cancels in a pair, so a few seeds measure a difference that unpaired means
(whose spread is 0.3-0.5 dB on beer) cannot; with --backend-set deterministic=true
a seed's two runs are the same bits until the variant's keys first act.

--jobs K trains up to K splat runs (seeds and variants) at a time in threads of
the process, each trainer on its own device queue, so their kernels overlap: a
small capture leaves most of a large GPU idle, and four beer runs together took
about 1.2-1.4x less time than one after another on an H200. Their seconds overlap
and the memory peak is the process's, so those columns say nothing then.

--max-seconds bounds the whole command: a run still training when it is
reached stops at once and is evaluated at the step it got to (marked '*');
runs not started are listed as skipped. --steps, --scenes and --max-seconds
let a long benchmark run in pieces.

--fit-exposure scores every trainer's test views as splat.evaluate(fit_exposure=True)
does: each view's colour correction [A | b] fitted by least squares on its left half,
applied, and the right half scored. A model trained with train.exposure renders the
training views' average exposure, which a test view need not have; this is how such
models are compared (the 3DGS code base's train_test_exp, as a closed-form fit).

--floaters adds, per splat run and step count, the test view with the lowest
PSNR and the Gaussians floating in front of the test cameras: per view, those
whose centre projects into the image (a 50-pixel margin) at a depth below
0.1 x the median depth of the Gaussians it sees (near_camera_gaussians), with
their summed opacity; the table gives the total over the views and the
largest. `enclosing` counts the Gaussians whose 3-sigma ellipsoid holds a test
camera's centre (enclosing_gaussians), summed over the views: drawn through the
eye, one of them can cover a whole test view. A seed that loses a view to a
floater shows it there. `one view`
counts the Gaussians that at most one training view has in view (views_seeing):
fitted to one view, nothing holds them in another.
"""
from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import numpy as np

import splat
from splat import _core

sys.path.insert(0, str(Path(__file__).resolve().parent))  # floaters, gate
# The floater diagnostics (--floaters) live in floaters.py; near_camera_gaussians and
# views_seeing are named here too, as the tests and earlier scripts read them.
from floaters import enclosing_gaussians, floater_fields, near_camera_gaussians, print_floaters, views_seeing  # noqa: E402,F401,E501

REPO = Path(__file__).resolve().parents[1]
DEFAULT_STEPS = (7000, 30000)


def default_root() -> Path:
    for cand in ((REPO / ".." / "shared" / "data" / "captures").resolve(), REPO / "shared" / "data" / "captures"):
        if cand.is_dir():
            return cand
    return (REPO / ".." / "shared" / "data" / "captures").resolve()


def find_scenes(paths, root: Path, names) -> list[Path]:
    if paths:
        scenes = [Path(p).resolve() for p in paths]
    else:
        if not root.is_dir():
            raise SystemExit(f"real.py: error: {root}: no captures folder (give scene paths or --root)")
        scenes = sorted(p for p in root.iterdir() if p.is_dir() and (
            (p / "sparse").is_dir() or (p / "transforms.json").is_file()))
    if names:
        wanted = set(names)
        unknown = wanted - {p.name for p in scenes}
        if unknown:
            raise SystemExit(f"real.py: error: unknown scene(s) {', '.join(sorted(unknown))}; "
                             f"have {', '.join(p.name for p in scenes)}")
        scenes = [p for p in scenes if p.name in wanted]
    if not scenes:
        raise SystemExit("real.py: error: no scenes to run")
    return scenes


def train_config(steps: int, overrides: dict) -> splat.TrainConfig:
    return splat.TrainConfig(**dict({"steps": steps}, **overrides.get("train", {})))


class Budget:
    """Wall-clock budget of the whole command (None: unbounded)."""

    def __init__(self, seconds):
        self.end = None if seconds is None else time.perf_counter() + seconds

    def left(self) -> float:
        return math.inf if self.end is None else self.end - time.perf_counter()

    def spent(self) -> bool:
        return self.left() <= 0


def _memory_peak_reset(backend: str) -> None:
    if backend != "cpu" and hasattr(_core, "gpu_memory"):
        try:
            _core.gpu_memory(reset_peaks=True)
        except (RuntimeError, TypeError):
            pass


def _memory_peak(backend: str):
    if backend == "cpu" or not hasattr(_core, "gpu_memory"):
        return None
    try:
        return int(_core.gpu_memory().get("arena_peak_bytes", 0))
    except (RuntimeError, TypeError):
        return None


def with_seed(overrides: dict, seed) -> dict:
    """The overrides with train.seed set (unchanged for seed None)."""
    if seed is None:
        return overrides
    return dict(overrides, train=dict(overrides.get("train", {}), seed=int(seed)))


def run_splat(scene, train, test, marks, overrides, backend, budget, log, breakdowns=None, floaters=False,
              label="splat", fit_exposure=False, concurrent=1, backend_fields=None):
    """concurrent > 1: the run shares the device with others (--jobs), so its seconds
    are not its own and the process-wide memory peak is not reported. backend_fields:
    BackendConfig fields of the run (--backend-set), e.g. deterministic=True."""
    cfg = train_config(marks[-1], overrides)
    bcfg = splat.BackendConfig(backend=backend, **(backend_fields or {}))
    if backend != "cpu":
        from splat.warmup import warm_up  # every kernel of the run, before its clock starts
        warm_up(train, bcfg, cfg)
    if concurrent == 1:
        _memory_peak_reset(backend)
    trainer = splat.Trainer.from_dataset(train, cfg, bcfg)
    rows, seconds = [], 0.0
    for mark in marks:
        t0 = time.perf_counter()
        stopped = False
        views = trainer.config.batch_views   # view steps a step trains
        while trainer.step_count < mark:
            n = -(-min(mark - trainer.step_count, 100) // views)
            for _ in range(n - 1):
                trainer.step(read_loss=False, until=mark)
            trainer.step(read_loss=True, until=mark)        # synchronizes the device
            if budget.spent() and trainer.step_count < mark:
                stopped = True
                break
        seconds += time.perf_counter() - t0
        ev = splat.evaluate(trainer, test, fit_exposure=fit_exposure)
        rows.append(dict(scene=scene, trainer=label, fit_exposure=fit_exposure, steps=trainer.step_count,
                         target=mark, stopped=stopped, psnr=ev.psnr, ssim=ev.ssim, gaussians=trainer.num_gaussians,
                         seconds=seconds,
                         peak_bytes=_memory_peak(backend) if concurrent == 1 else None, seed=cfg.seed,
                         concurrent=concurrent,
                         view_psnr={v["name"]: float(v["psnr"]) for v in (ev.per_view or [])},
                         **(floater_fields(trainer, train, test, ev) if floaters else {})))
        log(f"[{scene}] {label} seed {cfg.seed} {trainer.step_count} steps{' (stopped)' if stopped else ''}: "
            f"PSNR {ev.psnr:.2f} "
            f"SSIM {ev.ssim:.4f} {trainer.num_gaussians:,} Gaussians {seconds:.1f} s")
        if stopped:
            break
    if breakdowns is not None and backend != "cpu" and not rows[-1]["stopped"]:
        from gate import step_breakdown
        breakdowns[scene] = (step_breakdown(train, trainer, cfg, backend), trainer.num_gaussians)
    return rows


def run_splat_seeds(scene, train, test, marks, overrides, seeds, variants, backend, budget, log, breakdowns,
                    floaters, fit_exposure, jobs, skipped, backend_fields=None) -> list[dict]:
    """Every seed's default run and its variants, in that order, up to `jobs` at a time
    in threads of this process (each trainer has its own device queue, so their
    kernels overlap; one at a time by default). A variant that takes the default run's
    count waits for its seed's default run."""
    from concurrent.futures import ThreadPoolExecutor

    def label(seed):
        return scene if seed is None else f"{scene} seed {seed}"

    def default_run(seed):
        if budget.spent():
            skipped.append(f"{label(seed)} splat (--max-seconds reached)")
            return []
        return run_splat(scene, train, test, marks, with_seed(overrides, seed), backend, budget, log,
                         breakdowns, floaters, fit_exposure=fit_exposure, concurrent=jobs,
                         backend_fields=backend_fields)

    def variant_run(seed, name, extra, wants_count, default):
        default_rows = default.result() if wants_count else None
        default_count = default_rows[-1]["gaussians"] if default_rows else None
        if budget.spent() or (wants_count and default_count is None):
            skipped.append(f"{label(seed)} splat:{name} "
                           f"({'--max-seconds reached' if budget.spent() else 'no default run'})")
            return []
        vrun = variant_overrides(with_seed(overrides, seed), extra, default_count)
        return run_splat(scene, train, test, marks, vrun, backend, budget, log, None, floaters,
                         label=f"splat:{name}", fit_exposure=fit_exposure, concurrent=jobs,
                         backend_fields=backend_fields)

    # Submitted in order, so a variant waiting for its seed's default run finds it started.
    with ThreadPoolExecutor(max_workers=jobs) as pool:
        futures = []
        for seed in seeds:
            default = pool.submit(default_run, seed)
            futures.append(default)
            futures += [pool.submit(variant_run, seed, name, extra, wants_count, default)
                        for name, extra, wants_count in variants]
        return [row for f in futures for row in f.result()]


def print_breakdowns(breakdowns, out=sys.stdout):
    from gate import TS_ORDER
    for scene, (ts, n) in breakdowns.items():
        print(f"\nts_* per call, {scene} at {n:,} Gaussians (ms, GPU time; calls in brackets):", file=out)
        keys = [k for k in TS_ORDER if k in ts] + sorted(k for k in ts if k not in TS_ORDER)
        for k in keys:
            print(f"  {k:<30} {ts[k][0]:9.3f}  ({ts[k][1]})", file=out)
        total = sum(ts[k][0] for k in TS_ORDER if k in ts and k != "ts_densify")
        print(f"  {'sum of a step (w/o densify)':<30} {total:9.3f}", file=out)


def print_per_view(rows, out=None):
    """Per scene, trainer and step count: each test view's PSNR per seed and its
    spread over the seeds, so a seed that loses shows where it loses."""
    out = sys.stdout if out is None else out
    groups: dict = {}
    for r in rows:
        if r.get("view_psnr") and not r["stopped"]:
            groups.setdefault((r["scene"], r["trainer"], r["target"]), []).append(r)
    for (scene, trainer, target), rs in groups.items():
        if len(rs) < 2:
            continue
        names = list(rs[0]["view_psnr"])
        head = f"{'view':<16} " + " ".join(f"{'s' + str(r.get('seed')):>7}" for r in rs) + f" {'std':>6} {'range':>6}"
        print(f"\nper test view, {scene} {trainer} at {target} steps (PSNR in dB per seed)", file=out)
        print(head, file=out)
        print("-" * len(head), file=out)
        for name in names:
            v = np.array([r["view_psnr"].get(name, float("nan")) for r in rs], np.float64)
            print(f"{str(name):<16.16} " + " ".join(f"{x:>7.2f}" for x in v) +
                  f" {v.std(ddof=1):>6.2f} {v.max() - v.min():>6.2f}", file=out)


def gsplat_available() -> tuple[bool, str]:
    try:
        import gsplat  # noqa: F401
        import torch
    except ImportError as exc:
        return False, f"gsplat is not importable ({exc})"
    if not torch.cuda.is_available():
        return False, "gsplat needs a CUDA device"
    return True, ""


def run_gsplat(scene, train, test, marks, overrides, budget, log, fit_exposure=False):
    from gsplat_side import train_gsplat
    cfg = train_config(marks[-1], overrides)
    rows = train_gsplat(scene, train, test, marks, cfg, budget, log, fit_exposure)
    return [dict(r, seed=cfg.seed, fit_exposure=fit_exposure) for r in rows]


def seed_summary(rows) -> list[dict]:
    """Per scene, trainer and step count asked for: the PSNR over the seeds (rows
    stopped by --max-seconds left out)."""
    groups: dict = {}
    for r in rows:
        if not r["stopped"]:
            groups.setdefault((r["scene"], r["trainer"], r["target"]), []).append(r)
    out = []
    for (scene, trainer, target), rs in groups.items():
        psnr = np.array([r["psnr"] for r in rs], np.float64)
        out.append(dict(scene=scene, trainer=trainer, target=target, seeds=[r["seed"] for r in rs],
                        mean=float(psnr.mean()), std=float(psnr.std(ddof=1)) if len(rs) > 1 else 0.0,
                        worst=float(psnr.min()), best=float(psnr.max()),
                        seconds=float(np.mean([r["seconds"] for r in rs]))))
    return out


def print_seed_summary(summary, out=sys.stdout):
    head = (f"{'scene':<10} {'trainer':<14} {'steps':>6} {'seeds':>5} {'mean PSNR':>9} {'std':>6} {'worst':>6} "
            f"{'best':>6} {'mean s':>7}")
    print("\nover seeds (PSNR in dB; std with n - 1)", file=out)
    print(head, file=out)
    print("-" * len(head), file=out)
    for g in summary:
        print(f"{g['scene']:<10} {g['trainer']:<14} {g['target']:>6} {len(g['seeds']):>5} {g['mean']:>9.2f} "
              f"{g['std']:>6.2f} {g['worst']:>6.2f} {g['best']:>6.2f} {g['seconds']:>7.1f}", file=out)


def paired_summary(rows, base="splat") -> list[dict]:
    """Per scene, step count and variant: its PSNR minus the `base` trainer's, seed by
    seed (the seeds both trained to that step). Paired, the seed's own luck cancels;
    with --backend-set deterministic=true the two runs are the same bits until the
    variant's keys first act, so what is left is the keys' effect."""
    by_key = {(r["scene"], r["trainer"], r["target"], r.get("seed")): r["psnr"] for r in rows if not r["stopped"]}
    out = []
    for (scene, trainer, target) in dict.fromkeys((r["scene"], r["trainer"], r["target"]) for r in rows):
        if not trainer.startswith(base + ":"):   # the variants (--variant) of the base trainer
            continue
        seeds = [s for (sc, t, tg, s) in by_key if (sc, t, tg) == (scene, trainer, target)
                 and (scene, base, target, s) in by_key]
        if not seeds:
            continue
        d = np.array([by_key[(scene, trainer, target, s)] - by_key[(scene, base, target, s)] for s in seeds])
        std = float(d.std(ddof=1)) if len(d) > 1 else 0.0
        out.append(dict(scene=scene, trainer=trainer, base=base, target=target, seeds=seeds,
                        diffs=[float(x) for x in d], mean=float(d.mean()), std=std,
                        stderr=std / len(d) ** 0.5, worst=float(d.min()), best=float(d.max())))
    return out


def print_paired(paired, out=sys.stdout):
    if not paired:
        return
    head = (f"{'scene':<10} {'trainer':<14} {'steps':>6} {'seeds':>5} {'mean':>7} {'+-se':>6} {'std':>6} "
            f"{'worst':>7} {'best':>7}  per seed")
    print(f"\npaired against {paired[0]['base']}, seed by seed (PSNR difference in dB; se: std / sqrt(n))",
          file=out)
    print(head, file=out)
    print("-" * len(head), file=out)
    for g in paired:
        each = ", ".join(f"s{s} {x:+.2f}" for s, x in zip(g["seeds"], g["diffs"]))
        print(f"{g['scene']:<10} {g['trainer']:<14} {g['target']:>6} {len(g['seeds']):>5} {g['mean']:>+7.2f} "
              f"{g['stderr']:>6.2f} {g['std']:>6.2f} {g['worst']:>+7.2f} {g['best']:>+7.2f}  {each}", file=out)


# Targets: splat's training time at 30000 steps (s at most), the spread over seeds
# (dB at most), and what training longer may lose (dB at most, 30000 against 7000).
TIME_TARGETS = {"room": 80.0}
SEED_STD_TARGET = 0.2
LONGER_LOSS_TARGET = 0.1


def print_targets(rows, summary, out=sys.stdout):
    lines = []
    for r in rows:
        t = TIME_TARGETS.get(r["scene"])
        if r["trainer"] == "splat" and r["target"] == 30000 and t is not None and not r["stopped"]:
            lines.append(f"{r['scene']:<10} seed {r.get('seed')!s:>4}: {r['seconds']:.1f} s training at 30000 steps "
                         f"(<= {t:.0f}): {'met' if r['seconds'] <= t else 'not met'}")
    by_run: dict = {}
    for r in rows:
        if r["trainer"] == "splat" and not r["stopped"]:
            by_run.setdefault((r["scene"], r.get("seed")), {})[r["target"]] = r["psnr"]
    for (scene, seed), at in by_run.items():
        if 7000 in at and 30000 in at:
            d = at[30000] - at[7000]
            lines.append(f"{scene:<10} seed {seed!s:>4}: 30000 steps {d:+.2f} dB against 7000 (>= "
                         f"-{LONGER_LOSS_TARGET}): {'met' if d >= -LONGER_LOSS_TARGET else 'not met'}")
    for g in summary:
        if g["trainer"] == "splat" and len(g["seeds"]) > 1:
            lines.append(f"{g['scene']:<10} {g['target']:>6} steps: std {g['std']:.2f} dB over {len(g['seeds'])} seeds "
                         f"(<= {SEED_STD_TARGET}): {'met' if g['std'] <= SEED_STD_TARGET else 'not met'}")
    if lines:
        print("\ntargets", file=out)
        for ln in lines:
            print("  " + ln, file=out)


def gib(n) -> str:
    return "-" if n is None else f"{n / 2 ** 30:.2f}"


def print_table(rows, skipped, out=sys.stdout):
    seeded = len({r.get("seed") for r in rows}) > 1
    head = (f"{'scene':<10} {'trainer':<14} {'steps':>6} {'PSNR':>6} {'SSIM':>6} {'#Gaussians':>11} "
            f"{'train s':>8} {'peak GiB':>9}" + (f" {'seed':>5}" if seeded else ""))
    if any(r.get("fit_exposure") for r in rows):
        print("PSNR and SSIM of each test view's right half, its colour correction fitted on its left half "
              "(--fit-exposure)", file=out)
    print(head, file=out)
    print("-" * len(head), file=out)
    for r in rows:
        steps = f"{r['steps']}{'*' if r['stopped'] else ''}"
        print(f"{r['scene']:<10} {r['trainer']:<14} {steps:>6} {r['psnr']:>6.2f} {r['ssim']:>6.4f} "
              f"{r['gaussians']:>11,} {r['seconds']:>8.1f} {gib(r['peak_bytes']):>9}"
              + (f" {r.get('seed')!s:>5}" if seeded else ""), file=out)
    pairs = {}
    for r in rows:
        pairs.setdefault((r["scene"], r["target"], r.get("seed")), {})[r["trainer"]] = r
    ratio_lines = []
    for (scene, target, _seed), by in pairs.items():
        a, b = by.get("splat"), by.get("gsplat")
        if a is None or b is None:
            continue
        mem = (f"{b['peak_bytes'] / a['peak_bytes']:.2f}x" if a["peak_bytes"] and b["peak_bytes"] else "-")
        ratio_lines.append(f"{scene:<10} {target:>6}: PSNR {a['psnr'] - b['psnr']:+.2f} dB, SSIM "
                           f"{a['ssim'] - b['ssim']:+.4f}, time gsplat/splat {b['seconds'] / max(a['seconds'], 1e-9):.2f}x, "
                           f"memory gsplat/splat {mem}, #Gaussians splat/gsplat "
                           f"{a['gaussians'] / max(b['gaussians'], 1):.2f}x")
    if ratio_lines:
        print("\nsplat against gsplat (PSNR / SSIM: splat - gsplat)", file=out)
        for ln in ratio_lines:
            print(ln, file=out)
    if any(r["stopped"] for r in rows):
        print("* stopped by --max-seconds before the step count asked for", file=out)
    jobs = max((r.get("concurrent", 1) for r in rows), default=1)
    if jobs > 1:
        print(f"splat runs trained {jobs} at a time (--jobs): their seconds overlap, so compare PSNR, not time",
              file=out)
    for s in skipped:
        print(f"skipped: {s}", file=out)


def parse_sets(items) -> dict:
    from splat.cli._data import parse_overrides
    try:
        out = parse_overrides(items)
    except ValueError as exc:
        raise SystemExit(f"real.py: error: {exc}") from None
    bad = set(out) - {"train", "data"}
    if bad:
        raise SystemExit(f"real.py: error: --set takes train.* and data.* keys, got {', '.join(sorted(bad))}")
    return out


def parse_variants(items) -> list:
    """--variant NAME:train.KEY=VALUE[,train.KEY=VALUE...] -> [(NAME, overrides)]; a
    value @default (train.max_gaussians=@default) takes the default run's final
    Gaussian count on the same scene and seed."""
    out = []
    for item in items or []:
        name, sep, sets = item.partition(":")
        if not sep or not name.isidentifier() or name == "splat":
            raise SystemExit(f"real.py: error: --variant: expected NAME:train.KEY=VALUE[,...], got {item!r}")
        if name in {v[0] for v in out}:
            raise SystemExit(f"real.py: error: --variant: {name} given twice")
        pairs = [kv for kv in sets.split(",") if kv.strip()]
        at_default = [kv.partition("=")[0] for kv in pairs if kv.partition("=")[2].strip() == "@default"]
        bad = [k for k in at_default if k.strip() != "train.max_gaussians"]
        if bad:
            raise SystemExit(f"real.py: error: --variant {name}: @default is for train.max_gaussians, not {bad[0]}")
        fixed = parse_sets([kv for kv in pairs if kv.partition("=")[2].strip() != "@default"])
        out.append((name, fixed, bool(at_default)))
    return out


def variant_overrides(overrides: dict, variant: dict, default_count) -> dict:
    merged = {k: dict(v) for k, v in overrides.items()}
    for section, values in variant.items():
        merged.setdefault(section, {}).update(values)
    if default_count is not None:
        merged.setdefault("train", {})["max_gaussians"] = int(default_count)
    return merged


def load_scene(path: Path, overrides: dict):
    d = splat.config.DataConfig(**overrides.get("data", {}))
    args = d.loader_args()
    train = splat.load_dataset(path, "train", frames=d.train_frames, **args)
    test = splat.load_dataset(path, "test", frames=d.test_frames, **args)
    return train, test


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="real.py", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("paths", nargs="*", metavar="SCENE", help="scene folders (default: every scene under --root)")
    p.add_argument("--root", type=Path, default=None, help="folder of captures (default ../shared/data/captures)")
    p.add_argument("--scenes", help="comma-separated scene names to run (default all)")
    p.add_argument("--steps", default=",".join(map(str, DEFAULT_STEPS)),
                   help="comma-separated step counts to evaluate at (default 7000,30000)")
    p.add_argument("--max-seconds", type=float, default=None, help="wall-clock budget of the whole command")
    p.add_argument("--gsplat", action="store_true", help="train gsplat side by side (needs gsplat and CUDA)")
    p.add_argument("--no-splat", action="store_true", help="train gsplat only (with --gsplat)")
    p.add_argument("--backend", default="auto", choices=("auto", "cpu", "cuda", "metal"))
    p.add_argument("--set", action="append", metavar="train.KEY=VALUE", help="recipe / data override (repeatable)")
    p.add_argument("--backend-set", action="append", default=[], metavar="FIELD=VALUE",
                   help="BackendConfig field for every splat run (repeatable), e.g. deterministic=true: "
                        "a seed trained twice then gives the same bits")
    p.add_argument("--fit-exposure", action="store_true",
                   help="score each test view's right half after fitting its colour correction on its left half "
                        "(least squares), for every trainer: how a model trained with train.exposure is compared")
    p.add_argument("--breakdown", action="store_true",
                   help="after each splat run, the ts_* GPU time per step at its final size (bench/gate.py)")
    p.add_argument("--seeds", type=int, default=1, metavar="N",
                   help="train each scene N times, train.seed S..S+N-1 (S: the config's seed), and summarise")
    p.add_argument("--floaters", action="store_true",
                   help="per splat run: the worst test view and the Gaussians floating near the test cameras")
    p.add_argument("--per-view", action="store_true",
                   help="with several seeds: each test view's PSNR per seed and its spread")
    p.add_argument("--variant", action="append", metavar="NAME:train.KEY=VALUE[,...]",
                   help="also train each scene and seed with these keys on top, as trainer splat:NAME (repeatable; "
                        "train.max_gaussians=@default: the default run's final count, e.g. "
                        "mcmc:train.strategy=mcmc,train.max_gaussians=@default)")
    p.add_argument("--jobs", type=int, default=1, metavar="K",
                   help="train up to K splat runs (seeds, variants) at a time in threads, each on its own device "
                        "queue: more runs an hour on a GPU that one run leaves idle; their times overlap")
    p.add_argument("--json", type=Path, help="also write the rows as JSON")
    args = p.parse_args(argv)
    try:
        marks = sorted({int(s) for s in args.steps.split(",") if s.strip()})
    except ValueError:
        raise SystemExit(f"real.py: error: --steps: expected comma-separated integers, got {args.steps!r}") from None
    if not marks or marks[0] < 1:
        raise SystemExit("real.py: error: --steps: need positive step counts")
    overrides = parse_sets(args.set)
    from gate import parse_backend_field
    backend_fields = {}
    for item in args.backend_set:
        key, value = parse_backend_field(p, "--backend-set", item)
        if key == "backend":
            p.error(f"--backend-set {item}: the backend is --backend")
        backend_fields[key] = value
    variants = parse_variants(args.variant)
    if variants and args.no_splat:
        raise SystemExit("real.py: error: --variant trains splat: drop --no-splat")
    if args.seeds < 1:
        raise SystemExit(f"real.py: error: --seeds: need at least 1, got {args.seeds}")
    if args.jobs < 1:
        raise SystemExit(f"real.py: error: --jobs: need at least 1, got {args.jobs}")
    if args.jobs > 1 and args.breakdown:
        raise SystemExit("real.py: error: --breakdown times kernels one run at a time: drop --jobs")
    first_seed = train_config(marks[-1], overrides).seed
    seeds = [None] if args.seeds == 1 else [first_seed + i for i in range(args.seeds)]
    scenes = find_scenes(args.paths, args.root or default_root(), args.scenes.split(",") if args.scenes else None)
    backend = splat.resolve_backend(args.backend)
    budget = Budget(args.max_seconds)

    def log(msg):
        print(msg, file=sys.stderr, flush=True)

    use_gsplat = False
    if args.gsplat:
        use_gsplat, why = gsplat_available()
        if not use_gsplat:
            log(f"real.py: --gsplat: {why}; splat only")
    rows, skipped = [], []
    breakdowns = {} if args.breakdown else None
    for path in scenes:
        if budget.spent():
            skipped.append(f"{path.name} (--max-seconds reached)")
            continue
        t0 = time.perf_counter()
        train, test = load_scene(path, overrides)
        log(f"[{path.name}] {len(train)} train views ({train.size_summary()}), {len(test)} test views, "
            f"{0 if train.points is None else len(train.points):,} SfM points, background "
            f"{train.background}; loaded in {time.perf_counter() - t0:.1f} s")
        if not args.no_splat:
            rows += run_splat_seeds(path.name, train, test, marks, overrides, seeds, variants, backend, budget,
                                    log, breakdowns, args.floaters, args.fit_exposure, args.jobs, skipped,
                                    backend_fields)
        for seed in seeds:
            label = path.name if seed is None else f"{path.name} seed {seed}"
            run = with_seed(overrides, seed)
            if use_gsplat:
                if budget.spent():
                    skipped.append(f"{label} gsplat (--max-seconds reached)")
                else:
                    rows += run_gsplat(path.name, train, test, marks, run, budget, log, args.fit_exposure)
    print_table(rows, skipped)
    print_floaters(rows)
    if args.per_view:
        print_per_view(rows)
    summary = seed_summary(rows) if len(seeds) > 1 or variants else []
    if summary:
        print_seed_summary(summary)
    paired = paired_summary(rows) if variants else []
    print_paired(paired)
    print_targets(rows, summary)
    if breakdowns:
        print_breakdowns(breakdowns)
    if args.json:
        from splat.cli._common import write_json
        write_json(args.json, {"backend": backend, "marks": marks, "rows": rows, "skipped": skipped,
                               "seeds": summary, "paired": paired})
    return 0


if __name__ == "__main__":
    sys.exit(main())
