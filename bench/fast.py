"""Time to PSNR: recipes side by side, each scene's test PSNR against seconds of training.

    python bench/fast.py                                   # lego_400 and thermos, default and fast
    python bench/fast.py --scenes lego_400 --recipes fast --variant v8k:train.steps=8000
    python bench/fast.py --recipes default,fast --evals 20 --backend-set raster_forward_chunks=all
    python bench/fast.py --recipes fast --seeds 3 --variant ds2:train.num_downscales=2,train.resolution_schedule=1000

Scenes: lego_400 from --data (its test frames 0::2, as the gate stages them) and
the captures under --captures (every 8th image held out). Recipes: `default`
(the 3DGS recipe, 30000 steps), `fast` (`[train] preset = "fast"`) and each
--variant NAME:train.KEY=VALUE[,...] (written over the fast preset unless it
sets train.preset itself).

Each run trains with the loss read back every 100 steps and pauses the clock to
evaluate at --evals points spread evenly over its steps; the seconds are training only (the kernel
warm-up, the trainer's start-up and evaluation are left out, as in gate.py). --floaters adds
real.py's floater table for each run's final model (its worst test view; the Gaussians in front
of the test cameras; those at most one training view sees).
The table gives each run's curve, its final point, and the first time it reached
the target: gsplat's 30000-step PSNR on that scene (its 7000- and 30000-step
points are printed beside it).
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import splat

sys.path.insert(0, str(Path(__file__).resolve().parent))
from floaters import floater_fields, print_floaters  # noqa: E402
from gate import default_data  # noqa: E402
from real import default_root, parse_variants, seed_summary as real_seed_summary  # noqa: E402

# gsplat 1.5.3 on the H200 (the benchmark data's README and the gate): (seconds, PSNR) at 7000
# and 30000 steps; None where it was not measured. The fast preset's targets: gsplat's 30000-step
# PSNR in at most 5 s of training.
GSPLAT = {"lego_400": (None, (201.0, 34.49)), "thermos": ((40.1, 34.43), (175.4, 34.80)),
          "room": ((55.5, 17.79), (400.7, 17.59)),
          # beer: given the same images, split and points by bench/real.py --gsplat (README)
          "beer": ((133.0, 22.81), (302.0, 21.47))}
TARGETS = {"lego_400": (5.0, 34.49), "thermos": (5.0, 34.75)}


def load(scene: str, data: Path, captures: Path):
    if scene.startswith("lego"):
        return (splat.load_dataset(data / scene, split="train"),
                splat.load_dataset(data / scene, split="test", frames="0::2"))
    return splat.load_dataset(captures / scene, "train"), splat.load_dataset(captures / scene, "test")


def recipe(base: str, extra: dict) -> splat.TrainConfig:
    """The preset `base` ("default" or "fast") with the keys of `extra` written over it."""
    return splat.TrainConfig(**dict({"preset": base}, **extra))


def run(scene, name, cfg, train, test, evals, backend_fields, log, floaters=False):
    trainer = splat.Trainer.from_dataset(train, cfg, splat.BackendConfig(**backend_fields))
    steps = trainer.config.steps   # the recipe as the scene resolved it (TrainConfig.for_random_start)
    marks = sorted({max(1, steps * i // evals) for i in range(1, evals + 1)})
    points, seconds = [], 0.0
    for mark in marks:
        t0 = time.perf_counter()
        views = trainer.config.batch_views   # view steps a step trains
        while trainer.step_count < mark:
            for _ in range(-(-min(mark - trainer.step_count, 100) // views) - 1):
                trainer.step(read_loss=False, until=mark)
            trainer.step(read_loss=True, until=mark)  # synchronizes the device
        seconds += time.perf_counter() - t0
        ev = splat.evaluate(trainer, test)
        points.append((mark, seconds, ev.psnr, trainer.num_gaussians))
    log(f"[{scene}] {name} seed {cfg.seed}: " + ", ".join(f"{s}:{t:.1f}s {p:.2f}" for s, t, p, _ in points))
    out = dict(scene=scene, recipe=name, seed=cfg.seed, points=points)
    if floaters:   # the final model's worst test view and the Gaussians in front of the test cameras
        out["floaters"] = floater_fields(trainer, train, test, ev)
    return out


def first_reach(points, psnr):
    return next(((s, t) for s, t, p, _ in points if p >= psnr), None)


def seed_summary(results):
    """Per (scene, recipe) over its seeds: real.py's summary of the final points
    (mean, std with n - 1, worst, best PSNR and the mean training seconds) and
    `met`, the runs that reached the scene's target within its time."""
    rows = [dict(scene=r["scene"], trainer=r["recipe"], target=r["points"][-1][0], seed=r["seed"],
                 psnr=r["points"][-1][2], seconds=r["points"][-1][1], stopped=False) for r in results]
    summary = real_seed_summary(rows)
    for g in summary:
        t_max, p_min = TARGETS.get(g["scene"], (None, None))
        hits = [first_reach(r["points"], p_min) for r in results
                if (r["scene"], r["recipe"]) == (g["scene"], g["trainer"])] if p_min else []
        g["met"] = sum(1 for h in hits if h and h[1] <= t_max)
    return summary


def print_table(results, out=sys.stdout):
    print(f"\n{'scene':<9} {'recipe':<16} {'steps':>6} {'train s':>8} {'PSNR':>6} {'#Gauss':>9} "
          f"{'target':>15} {'reached at':>17}", file=out)
    for r in results:
        s, t, p, n = r["points"][-1]
        t_max, p_min = TARGETS.get(r["scene"], (None, None))
        hit = first_reach(r["points"], p_min) if p_min else None
        target = f"{p_min:.2f} in {t_max:.0f} s" if p_min else "-"
        reach = f"{hit[1]:.1f} s (step {hit[0]})" if hit else "not reached"
        met = " met" if hit and hit[1] <= t_max else ""
        print(f"{r['scene']:<9} {r['recipe']:<16} {s:>6} {t:>8.1f} {p:>6.2f} {n:>9,} {target:>15} "
              f"{reach:>17}{met}", file=out)
    for scene in dict.fromkeys(r["scene"] for r in results):
        if scene in GSPLAT:
            pts = [f"{k} steps {v[0]:.1f} s {v[1]:.2f} dB" for k, v in zip((7000, 30000), GSPLAT[scene]) if v]
            print(f"gsplat on {scene}: " + "; ".join(pts), file=out)
    print("\ntime to PSNR (seconds of training at each evaluation, PSNR):", file=out)
    for r in results:
        print(f"  {r['scene']:<9} {r['recipe']:<16} " + "  ".join(f"{t:5.1f}s {p:5.2f}" for _, t, p, _ in r["points"]),
              file=out)
    summary = seed_summary(results)
    if any(len(g["seeds"]) > 1 for g in summary):
        print(f"\nover seeds (std with n - 1): {'scene':<9} {'recipe':<16} {'runs':>4} {'mean':>6} {'std':>5} "
              f"{'worst':>6} {'train s':>8} {'met':>4}", file=out)
        for g in summary:
            print(f"{'':<29}{g['scene']:<9} {g['trainer']:<16} {len(g['seeds']):>4} {g['mean']:>6.2f} "
                  f"{g['std']:>5.2f} {g['worst']:>6.2f} {g['seconds']:>8.1f} {g['met']:>4}", file=out)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, default=default_data(), help="folder holding lego_400/")
    ap.add_argument("--captures", type=Path, default=default_root(), help="folder holding the captures")
    ap.add_argument("--scenes", default="lego_400,thermos")
    ap.add_argument("--recipes", default="default,fast", help="built-in recipes to run: default, fast")
    ap.add_argument("--variant", action="append", metavar="NAME:train.KEY=VALUE[,...]",
                    help="one more run over the fast preset (repeatable)")
    ap.add_argument("--evals", type=int, default=8, help="evaluations per run, spread evenly over its steps")
    ap.add_argument("--seeds", type=int, default=1,
                    help="runs per recipe, train.seed 0 .. N - 1 (the table adds real.py's mean, std and worst over them)")
    ap.add_argument("--backend", default="cuda")
    ap.add_argument("--backend-set", action="append", default=[], metavar="FIELD=VALUE")
    ap.add_argument("--floaters", action="store_true",
                    help="after each run, real.py's floater table: the worst test view and the Gaussians "
                         "floating in front of the test cameras")
    ap.add_argument("--json", type=Path, metavar="PATH", help="also write the curves here")
    args = ap.parse_args(argv)
    recipes = [(r.strip(), r.strip(), {}) for r in args.recipes.split(",") if r.strip()]
    for name, _, _ in recipes:
        if name not in ("default", "fast"):
            ap.error(f"--recipes: unknown recipe {name!r} (default, fast)")
    for name, sets, at_default in parse_variants(args.variant):
        if at_default or set(sets) - {"train"}:
            ap.error(f"--variant {name}: train.KEY=VALUE only")
        if name in {r[0] for r in recipes}:
            ap.error(f"--variant {name}: the name of a recipe already run")
        recipes.append((name, "fast", sets["train"]))
    fields = {"backend": args.backend}
    for item in args.backend_set:
        key, sep, value = item.partition("=")
        if not sep or key not in splat.BackendConfig.fields():
            ap.error(f"--backend-set {item}: expected FIELD=VALUE with a BackendConfig field")
        fields[key] = value
    ok, why = splat.backend_available(args.backend)
    if not ok:
        ap.error(f"backend {args.backend} is not available: {why}")
    if args.evals < 1:
        ap.error("--evals: must be >= 1")
    if args.seeds < 1:
        ap.error("--seeds: must be >= 1")
    if args.seeds > 1 and any("seed" in extra for _, _, extra in recipes):
        ap.error("--seeds: a --variant sets train.seed itself")

    def log(msg):
        print(msg, flush=True)

    scenes = [s.strip() for s in args.scenes.split(",") if s.strip()]
    for scene in scenes:  # every scene's folder before any training
        where = args.data / scene if scene.startswith("lego") else args.captures / scene
        if not where.is_dir():
            ap.error(f"--scenes {scene}: no folder {where} (lego_* under --data, captures under --captures)")
    results = []
    for scene in scenes:
        train, test = load(scene, args.data, args.captures)
        log(f"[{scene}] {len(train)} train views {train.size_summary()}, {len(test)} test views")
        for name, base, extra in recipes:
            for seed in range(args.seeds):
                cfg = recipe(base, dict({"seed": seed}, **extra) if args.seeds > 1 else extra)
                if args.backend != "cpu" and seed == 0:
                    from splat.warmup import warm_up
                    warm_up(train, splat.BackendConfig(**fields), cfg)
                results.append(run(scene, name, cfg, train, test, args.evals, fields, log, args.floaters))
    print_table(results)
    if args.floaters:
        print_floaters([dict(scene=r["scene"], recipe=r["recipe"], seed=r["seed"], steps=r["points"][-1][0],
                             psnr=r["points"][-1][2], **r["floaters"]) for r in results])
    if args.json:
        from splat.io.atomic import atomic_write_text
        atomic_write_text(args.json, json.dumps({"runs": results}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
