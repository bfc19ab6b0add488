"""Training gate: lego_400 and lego_800, 30000 steps each, one table.

    python bench/gate.py                                  # cuda, both scenes, 30000 steps
    python bench/gate.py --scenes lego_400 --steps 7000
    python bench/gate.py --data /path/to/shared/data --backend cpu --steps 500
    python bench/gate.py --scenes lego_400 --set train.strategy=mcmc --set train.max_gaussians=300000
    python bench/gate.py --scenes lego_400 --compare pair_sizing=readback   # A/B: each scene twice
    python bench/gate.py --scenes lego_400 --compare train.adam_moments=bfloat16

Per scene and checkpoint (7000 / 12500 / 30000 steps): the wall time of
training only (the loop of trainer.step(read_loss=False); the device is
synchronized at each checkpoint by reading the loss back; start-up, the
kernel warm-up and evaluation are excluded), the test PSNR and SSIM
(splat.evaluate), and the number of Gaussians; per scene the peak device
memory: the resident arena's high-water mark; the driver's used memory as
cuMemGetInfo reports it after each arena allocation; and that peak less the
driver's used memory when the process's first device was made, which holds
the CUDA context's own reservation (and other processes' use) but no buffer
of ours. Then the ts_*
breakdown of one step at the final size (GPU time per label, CUDA events;
the densification step is included once, as ts_densify), beside the wall
time of a step at that size with timing off (200 steps past densification,
the loss read once): the ratio wall / kernel sum is the host's share.

--backend-set FIELD=VALUE sets a BackendConfig field for every run;
--compare FIELD=VALUE runs every scene again with it (repeatable: one more
run per flag), and the table gives each variant's row and its time ratio
to the first.

Evaluation (the benchmark data's README): lego_400 on its 200 test views;
lego_800 on the lego_400 test cameras rendered at 800x800 (focal x2) and
2x2 box-averaged, against lego_400/test frames[0::2].
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path


import splat
from splat import _core

REPO = Path(__file__).resolve().parents[1]

CHECKPOINTS = (7000, 12500, 30000)
# The performance round's targets at 30000 steps: training seconds at most, PSNR at least.
TARGETS = {"lego_400": (15.0, 35.5), "lego_800": (25.0, 37.4)}
TS_ORDER = ("ts_fwd_project", "ts_fwd_emit_pairs", "ts_fwd_radix_sort", "ts_fwd_rasterize", "ts_ssim",
            "ts_zero_grads", "ts_backward_raster", "ts_project_back", "ts_adam", "ts_densify")


def default_data() -> Path:
    """data/ in the repository root, else ../shared/data beside it (else shared/data inside it)."""
    for candidate in (REPO / "data", (REPO / ".." / "shared" / "data").resolve(), REPO / "shared" / "data"):
        if candidate.is_dir():
            return candidate
    return (REPO / ".." / "shared" / "data").resolve()


def scene_data(data: Path, scene: str, test_frames=None):
    """(train, test, supersample) of a gate scene; `test_frames` selects lego_400's
    test views (lego_800 always uses frames 0::2)."""
    train = splat.load_dataset(data / scene, split="train")
    if scene == "lego_800":
        test = splat.load_dataset(data / "lego_400", split="test", frames="0::2")
        return train, test, 2
    return train, splat.load_dataset(data / scene, split="test", frames=test_frames), 1


def warm_up(train, backend: str, train_config=None):
    """Compiles (or loads from the disk cache) every kernel a run launches,
    densification, opacity reset and the finite check included, on a tiny
    throwaway run: the warm-up `splat train` does (splat/warmup.py)."""
    from splat.warmup import warm_up as warm_up_kernels
    warm_up_kernels(train, splat.BackendConfig(backend=backend), train_config)


def gib(n: int) -> str:
    return f"{n / 2 ** 30:.2f}"


def run_scene(scene: str, data: Path, steps: int, backend: str, log, train_overrides=None, test_frames=None,
              backend_fields=None, variant="default"):
    t0 = time.perf_counter()
    train, test, supersample = scene_data(data, scene, test_frames)
    log(f"[{scene}] {len(train)} train views {train.size_summary()}, {len(test)} test views "
        f"(supersample {supersample}); loaded in {time.perf_counter() - t0:.1f}s")
    t0 = time.perf_counter()
    cfg = splat.TrainConfig(**dict({"steps": steps}, **(train_overrides or {})))
    warm_up(train, backend, cfg)
    log(f"[{scene}] kernel warm-up {time.perf_counter() - t0:.1f}s")
    _core.gpu_memory(reset_peaks=True)
    fields = dict(backend_fields or {})
    bcfg = splat.BackendConfig(backend=backend, **fields)
    t0 = time.perf_counter()
    trainer = splat.Trainer.from_dataset(train, cfg, bcfg)
    log(f"[{scene}] variant {variant}: start-up {time.perf_counter() - t0:.1f}s, {trainer.num_gaussians} initial Gaussians, "
        f"backend {trainer.backend}")

    marks = sorted({c for c in CHECKPOINTS if c <= steps} | {steps})
    rows = []
    train_s = 0.0
    for mark in marks:
        t0 = time.perf_counter()
        while trainer.step_count < mark:   # a batch of views ends at the mark
            # The last step's loss read-back synchronizes the device.
            last = trainer.step(read_loss=trainer.update_views(mark)[1] >= mark, until=mark)
        train_s += time.perf_counter() - t0
        t1 = time.perf_counter()
        ev = splat.evaluate(trainer, test, supersample=supersample)
        rows.append(dict(scene=scene, variant=variant, step=mark, train_s=train_s, psnr=ev.psnr, ssim=ev.ssim,
                         gaussians=trainer.num_gaussians, loss=last.loss))
        log(f"[{scene}] step {mark}: {train_s:.1f}s training, PSNR {ev.psnr:.2f}, SSIM {ev.ssim:.4f}, "
            f"{trainer.num_gaussians:,} Gaussians, loss {last.loss:.4f} (eval {time.perf_counter() - t1:.1f}s)")
    mem = _core.gpu_memory()
    for r in rows:
        r["arena_peak"] = mem.get("arena_peak_bytes", 0)
        r["driver_peak"] = mem.get("driver_peak_used_bytes", 0)
        r["driver_start"] = mem.get("driver_start_used_bytes", 0)

    # The recipe the run trained (a Blender scene's preset keys: its views a step among them).
    ts = step_breakdown(train, trainer, trainer.config, backend, fields) if backend != "cpu" else {}
    return rows, ts, trainer.num_gaussians


def step_wall_ms(train, state, cfg, backend: str, fields: dict, steps: int = 200) -> float:
    """Wall milliseconds per step (a call of Trainer.step: train.batch_views views) at the
    state's size, timing off: steps past densification and opacity resets, the loss read
    once at the end. Per step, as the ts_* labels are, so that the ratio of the two is
    the host's share at any batch_views."""
    start = max(cfg.densify_until, 1) + 10
    tr = splat.Trainer(train, cfg, splat.BackendConfig(backend=backend, **fields), state, step=start)
    for _ in range(20):  # warm: kernels, buffers, the pair capacity
        tr.step(read_loss=False)
    tr.step(read_loss=True)
    t0 = time.perf_counter()
    for _ in range(steps - 1):
        tr.step(read_loss=False)
    tr.step(read_loss=True)
    return (time.perf_counter() - t0) / steps * 1e3


def step_breakdown(train, trainer, cfg, backend: str, fields=None, steps: int = 6) -> dict:
    """GPU time per ts_* label of a step at the final size: a copy of the final
    state with timing='per_kernel' (chained submission), from the step before
    the last densification, so one of the measured steps densifies; and the
    wall time of a step at that size with timing off (step_wall_ms)."""
    fields = {k: v for k, v in (fields or {}).items() if k != "timing"}
    state = trainer.state()
    wall_off = step_wall_ms(train, state, cfg, backend, fields)
    # The second step (measured) densifies: its first view step is the last densification's.
    start = cfg.densify_until - cfg.densify_every - cfg.batch_views - 1
    ts, wall = label_timings(train, cfg, backend, state, start, fields, steps)
    ts["wall_ms_per_step (timing on)"] = (wall * 1e3, steps + 1)
    ts["wall_ms_per_step (timing off)"] = (wall_off, 200)
    return ts


def label_timings(train, cfg, backend: str, state, start: int, fields=None, steps: int = 6):
    """({ts_* label: (GPU ms per call, calls)}, wall seconds per step) over steps + 1
    steps of a copy of `state` from step `start`, timing='per_kernel', after one
    unmeasured step (kernels, buffers)."""
    timed = splat.Trainer(train, cfg, splat.BackendConfig(backend=backend, timing="per_kernel", **(fields or {})),
                          state, step=start)
    timed.step(read_loss=False)
    _core.gpu_timings(reset=True)
    t0 = time.perf_counter()
    for _ in range(steps):
        timed.step(read_loss=False)
    timed.step(read_loss=True)
    wall = (time.perf_counter() - t0) / (steps + 1)
    return {k: (v[0] / max(v[2], 1), v[2]) for k, v in _core.gpu_timings(reset=True).items()}, wall


def parse_backend_field(ap, flag: str, item: str) -> tuple[str, str]:
    """(field, value) of a FIELD=VALUE BackendConfig item, or the usage error naming `flag`."""
    key, sep, value = item.partition("=")
    if not sep or key not in splat.BackendConfig.fields():
        ap.error(f"{flag} {item}: expected FIELD=VALUE with a BackendConfig field")
    try:
        splat.BackendConfig(**{key: value})
    except ValueError as exc:
        ap.error(f"{flag} {item}: {exc}")
    return key, value


def parse_train_item(ap, flag: str, item: str) -> dict:
    """{key: value} of a train.KEY=VALUE recipe item, or the usage error naming `flag`."""
    from splat.cli._data import parse_overrides
    try:
        train = parse_overrides([item])["train"]
        splat.TrainConfig(**train)
    except (ValueError, TypeError, KeyError) as exc:
        ap.error(f"{flag} {item}: {exc}")
    return train


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data", type=Path, default=default_data(),
                    help="folder holding lego_400/ and lego_800/ (default: data/ in the repository root if present, "
                         "else ../shared/data)")
    ap.add_argument("--scenes", default="lego_400,lego_800")
    ap.add_argument("--steps", type=int, default=30000)
    ap.add_argument("--backend", default="cuda")
    ap.add_argument("--test-frames", default=None, metavar="SLICE",
                    help="lego_400's test views to evaluate, e.g. 0::2 (default: all 200)")
    ap.add_argument("--set", action="append", metavar="train.KEY=VALUE",
                    help="recipe override (repeatable), e.g. train.strategy=mcmc train.max_gaussians=300000")
    ap.add_argument("--backend-set", action="append", metavar="FIELD=VALUE", default=[],
                    help="BackendConfig field for every run (repeatable), e.g. pair_sizing=readback")
    ap.add_argument("--compare", action="append", metavar="FIELD=VALUE", default=[],
                    help="run every scene again with this BackendConfig field, or recipe key as train.KEY=VALUE "
                         "(repeatable: one run per flag)")
    args = ap.parse_args(argv)
    from splat.cli._data import parse_overrides
    base_fields = {}
    variants = [("default", {}, {})]   # (name, BackendConfig fields, recipe keys)
    for flag, items in (("--backend-set", args.backend_set), ("--compare", args.compare)):
        for item in items:
            if flag == "--compare" and item.startswith("train."):
                variants.append((item, {}, parse_train_item(ap, flag, item)))
                continue
            key, value = parse_backend_field(ap, flag, item)
            if flag == "--backend-set":
                base_fields[key] = value
            else:
                variants.append((item, {key: value}, {}))
    try:
        overrides = parse_overrides(args.set or [])
    except ValueError as exc:
        ap.error(str(exc))
    if set(overrides) - {"train"}:
        ap.error("--set takes train.* keys")
    scenes = [s.strip() for s in args.scenes.split(",") if s.strip()]
    missing = [s for s in scenes if not (args.data / s).is_dir()]
    if not scenes or missing:
        ap.error(f"--scenes: no {', '.join(missing) or 'scene named'} under {args.data}")
    if "lego_800" in scenes and not (args.data / "lego_400").is_dir():
        ap.error(f"--scenes lego_800 is scored on lego_400's test views: no lego_400 under {args.data}")
    ok, why = splat.backend_available(args.backend)
    if not ok:
        ap.error(f"backend {args.backend} is not available: {why}")

    def log(msg):
        print(msg, flush=True)

    t_all = time.perf_counter()
    all_rows, breakdowns = [], {}
    for scene in scenes:
        for name, fields, train in variants:
            try:
                rows, ts, n = run_scene(scene, args.data, args.steps, args.backend, log,
                                        dict(overrides.get("train") or {}, **train) or None,
                                        args.test_frames, dict(base_fields, **fields), name)
            except splat.DatasetError as exc:
                ap.error(f"--scenes {scene}: {exc}")
            all_rows += rows
            breakdowns[scene if len(variants) == 1 else f"{scene} [{name}]"] = (ts, n)

    print()
    head = (f"{'scene':<9} {'variant':<24} {'step':>6} {'train s':>8} {'PSNR':>6} {'SSIM':>6} {'#Gauss':>10} "
            f"{'arena peak GiB':>15} {'driver peak GiB':>16} {'above start GiB':>16}")
    print(head)
    print("-" * len(head))
    for r in all_rows:
        print(f"{r['scene']:<9} {r['variant']:<24} {r['step']:>6} {r['train_s']:>8.1f} {r['psnr']:>6.2f} "
              f"{r['ssim']:>6.4f} {r['gaussians']:>10,} {gib(r['arena_peak']):>15} {gib(r['driver_peak']):>16} "
              f"{gib(max(r['driver_peak'] - r['driver_start'], 0)):>16}")
    if len(variants) > 1:
        first = {(r["scene"], r["step"]): r for r in all_rows if r["variant"] == variants[0][0]}
        print(f"\ntraining time against {variants[0][0]} (ratio > 1: the variant is slower); PSNR difference")
        for r in all_rows:
            base = first.get((r["scene"], r["step"]))
            if base is None or r is base:
                continue
            print(f"  {r['scene']:<9} {r['variant']:<24} {r['step']:>6}: time x{r['train_s'] / max(base['train_s'], 1e-9):.3f}, "
                  f"PSNR {r['psnr'] - base['psnr']:+.2f} dB")
    target_rows = [r for r in all_rows if r["step"] == 30000 and r["scene"] in TARGETS]
    if target_rows:
        print("\ntargets at 30000 steps (training s at most, PSNR at least)")
        for r in target_rows:
            t_max, p_min = TARGETS[r["scene"]]
            met = r["train_s"] <= t_max and r["psnr"] >= p_min
            print(f"  {r['scene']:<9} {r['variant']:<24} {r['train_s']:6.1f} s (<= {t_max:.0f}), {r['psnr']:.2f} dB "
                  f"(>= {p_min}): {'met' if met else 'not met'}")
    starts = {r["driver_start"] for r in all_rows if r["driver_start"]}
    if starts:
        print(f"(driver's used memory when the first device was made: {gib(min(starts))} GiB; the CUDA context's "
              f"reservation, before any buffer)")
    for scene, (ts, n) in breakdowns.items():
        if not ts:
            continue
        print(f"\nts_* per call, {scene} at {n:,} Gaussians (ms, GPU time; calls in brackets):")
        keys = [k for k in TS_ORDER if k in ts] + sorted(k for k in ts if k not in TS_ORDER)
        total = sum(ts[k][0] for k in TS_ORDER if k in ts and k != "ts_densify")
        for k in keys:
            print(f"  {k:<30} {ts[k][0]:9.3f}  ({ts[k][1]})")
        print(f"  {'sum of a step (w/o densify)':<30} {total:9.3f}")
        off = ts.get("wall_ms_per_step (timing off)")
        if off and total > 0:
            print(f"  {'wall / kernel sum (timing off)':<30} {off[0] / total:9.3f}")
    print(f"\ngate total wall time {time.perf_counter() - t_all:.0f}s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
