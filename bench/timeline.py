"""Kernel timeline of training steps: what the GPU runs in a step, and whether
the host keeps it fed.

    python bench/timeline.py ../shared/data/captures/room --steps 15100
    python bench/timeline.py ../shared/data/lego_400 --steps 7000 --set train.visible_adam=true

Trains a scene (any folder splat.load_dataset reads) to --steps with the
recipe (the default's 30000-step schedule unless --set says otherwise), then times --wall
steps with timing off (the wall milliseconds of a step, the loss read after the
last), then records --profile steps with torch's profiler. CUPTI sees every
kernel of the process, splat's own launches included, with the GPU's own
start and end times, so the table is what ran, not the ts_* labels' events
around groups of launches. It prints, per kernel name, milliseconds and
launches per step; the GPU's busy time per step (kernels, copies and memsets,
overlaps counted once); busy / wall; and the gaps over 20 us between
consecutive GPU events with the events on either side. A step whose wall time
equals its busy time leaves no host time to remove: only faster kernels make
it faster. Per-kernel times want `--set backend.kernel_overlap=off`: with
overlapped launches (the default on sm_90) a kernel starts early and waits on
the GPU for the one before, and the profiler counts that wait as its own
(thermos: radix_histogram 0.171 ms a step overlapped, 0.025 not). Needs the
CUDA backend and torch with CUDA.
"""
from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

GAP_US = 20.0


def summarize(events: list[dict], steps: int, gap_us: float = GAP_US) -> dict:
    """Chrome-trace GPU events (`ts`, `dur` in us, `name`) of `steps` steps ->
    per-name ms and launches per step, busy ms per step (the union of the
    events' intervals), the span, and the gaps above gap_us in time order."""
    ev = sorted(events, key=lambda e: e["ts"])
    per_name: dict[str, list] = {}
    for e in ev:
        s = per_name.setdefault(e["name"], [0, 0.0])
        s[0] += 1
        s[1] += e["dur"]
    busy, gaps = 0.0, []
    end = None
    prev = None
    for e in ev:
        a, b = e["ts"], e["ts"] + e["dur"]
        if end is None or a >= end:
            if end is not None and a - end > gap_us:
                gaps.append({"us": a - end, "before": prev["name"], "after": e["name"]})
            busy += b - a
            end, prev = b, e
        elif b > end:
            busy += b - end
            end, prev = b, e
    span = (max(e["ts"] + e["dur"] for e in ev) - ev[0]["ts"]) if ev else 0.0  # the last to end may start early
    kernels = {name: {"ms_per_step": d / steps / 1e3, "launches_per_step": c / steps}
               for name, (c, d) in sorted(per_name.items(), key=lambda kv: -kv[1][1])}
    return {"steps": steps, "busy_ms_per_step": busy / steps / 1e3, "span_ms": span / 1e3,
            "kernels": kernels, "gaps": gaps}


def gpu_events(trace: dict) -> list[dict]:
    return [e for e in trace.get("traceEvents", [])
            if e.get("cat") in ("kernel", "gpu_memcpy", "gpu_memset") and "dur" in e]


def exported_trace(prof, path: Path | None = None) -> dict:
    """A finished torch profiler's Chrome trace, read back: written to `path`
    (kept) or to a scratch file (removed)."""
    target = path or Path(f"/tmp/splat_timeline_{time.time_ns()}.json")
    prof.export_chrome_trace(str(target))
    try:
        return json.loads(target.read_text())
    finally:
        if path is None:
            target.unlink()


def print_summary(s: dict, wall_ms: float, n: int, out=sys.stdout, per: str = "step") -> None:
    """The table; `per` names what the profiled unit is (a training step, a call)."""
    print(f"{n:,} Gaussians; wall {wall_ms:.3f} ms a {per} (timing off); GPU busy {s['busy_ms_per_step']:.3f} ms "
          f"a {per}; busy / wall {s['busy_ms_per_step'] / wall_ms:.3f}", file=out)
    print(f"{'ms/' + per:>9} {'share':>6} {'launches':>8}  kernel", file=out)
    for name, k in s["kernels"].items():
        print(f"{k['ms_per_step']:9.4f} {k['ms_per_step'] / s['busy_ms_per_step']:6.1%} "
              f"{k['launches_per_step']:8.1f}  {name[:70]}", file=out)
    total = sum(g["us"] for g in s["gaps"])
    print(f"gaps over {GAP_US:.0f} us: {len(s['gaps'])} in {s['steps']} {per}s, {total / 1e3:.3f} ms in all", file=out)
    for g in sorted(s["gaps"], key=lambda g: -g["us"])[:10]:
        print(f"  {g['us']:8.1f} us  {g['before'][:40]} -> {g['after'][:40]}", file=out)


def main(argv=None) -> int:
    p = argparse.ArgumentParser(prog="timeline.py", description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("scene", type=Path, help="scene folder (COLMAP, nerfstudio or Blender)")
    p.add_argument("--steps", type=int, default=15100, help="steps to train before timing (default 15100: "
                   "past the default recipe's densification)")
    p.add_argument("--wall", type=int, default=100, help="steps timed with timing off (default 100)")
    p.add_argument("--profile", type=int, default=40, help="steps under the profiler (default 40)")
    p.add_argument("--set", action="append", default=[], metavar="SECTION.KEY=VALUE",
                   help="recipe / data / backend override (repeatable), e.g. train.visible_adam=true, "
                        "backend.kernel_overlap=off")
    p.add_argument("--json", type=Path, help="write the summary (and wall time) here")
    p.add_argument("--trace", type=Path, help="write the profiler's Chrome trace here")
    args = p.parse_args(argv)
    for flag in ("steps", "wall", "profile"):
        if getattr(args, flag) < 1:
            p.error(f"--{flag}: expected a count >= 1")
    if not args.scene.is_dir():
        p.error(f"scene: {args.scene} is not a folder")
    import splat
    from splat.cli._data import parse_overrides
    try:
        overrides = parse_overrides(args.set)
        data = splat.config.DataConfig(**overrides.get("data", {}))
        cfg = splat.TrainConfig(**overrides.get("train", {}))  # a preset's schedule, if --set names one
        backend = splat.BackendConfig(**dict(overrides.get("backend", {}), backend="cuda"))
    except ValueError as exc:
        p.error(str(exc))
    try:
        import torch
        from torch.profiler import ProfilerActivity, profile
    except ImportError:
        p.error("needs torch (its profiler records the kernels)")
    if not torch.cuda.is_available():
        p.error("needs a CUDA device")
    dataset = splat.load_dataset(args.scene, "train", frames=data.train_frames, **data.loader_args())
    torch.zeros(1, device="cuda")  # the profiler's context before splat's kernels
    from splat.warmup import warm_up
    warm_up(dataset, backend, cfg)
    trainer = splat.Trainer.from_dataset(dataset, cfg, backend)
    t0 = time.perf_counter()
    trainer.run(args.steps, progress=False, loss_every=100)
    print(f"{args.scene.name}: {args.steps} steps in {time.perf_counter() - t0:.1f} s", flush=True)
    trainer.run(10, progress=False)  # buffers and pair capacity settle
    t0 = time.perf_counter()
    trainer.run(args.wall, progress=False, loss_every=args.wall)
    wall_ms = (time.perf_counter() - t0) / args.wall * 1e3
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        trainer.run(args.profile, progress=False, loss_every=args.profile)
    s = summarize(gpu_events(exported_trace(prof, args.trace)), args.profile)
    print_summary(s, wall_ms, trainer.num_gaussians)
    if args.json:
        args.json.write_text(json.dumps(dict(s, wall_ms_per_step=wall_ms, gaussians=trainer.num_gaussians,
                                             scene=str(args.scene), overrides=args.set), indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
