"""Rasterizer benchmark: forward and backward ms per call and the ts_* GPU
breakdown, for every backward variant of BackendConfig, as one table.

    python bench/raster_bench.py --backend cuda              # 300k Gaussians, 800x800
    python bench/raster_bench.py --backend cuda --n 1000000 --width 1920 --height 1080

Wall times (median over --iters calls, after --warmup) include the upload of
the parameters and the readback of the outputs, as a numpy caller sees them;
the ts_* columns are GPU time per stage (CUDA events, timing="per_kernel"),
averaged over the timed calls.
"""
from __future__ import annotations

import argparse
import itertools
import statistics
import sys
import time

import numpy as np

import splat
from splat import _core

TS = ("ts_fwd_project", "ts_fwd_emit_pairs", "ts_fwd_radix_sort", "ts_fwd_rasterize", "ts_backward_raster",
      "ts_project_back")


def scene(n: int, width: int, height: int, sh_degree: int, seed: int):
    """n Gaussians in [-1.3, 1.3]^3 (the Blender initialisation box) seen from 4 units away."""
    rng = np.random.default_rng(seed)
    means = rng.uniform(-1.3, 1.3, size=(n, 3))
    log_scales = np.log(rng.uniform(0.004, 0.02, size=(n, 3)))
    quats = rng.normal(size=(n, 4))
    logits = rng.uniform(-2.0, 2.0, size=n)
    k = (sh_degree + 1) ** 2
    sh = rng.normal(scale=0.2, size=(n, k, 3))
    sh[:, 0] = rng.uniform(-1.0, 1.0, size=(n, 3))
    g = splat.Gaussians(means.astype(np.float32), log_scales.astype(np.float32), quats.astype(np.float32),
                        logits.astype(np.float32), sh.astype(np.float32))
    eye = np.array([4.0, -1.0, 1.5])
    z = -eye / np.linalg.norm(eye)
    x = np.cross(z, [0.0, 0.0, 1.0])
    x /= np.linalg.norm(x)
    y = np.cross(z, x)
    w2c = np.eye(4)
    w2c[:3, :3] = np.stack([x, y, z])
    w2c[:3, 3] = -w2c[:3, :3] @ eye
    f = 0.5 * width / np.tan(np.radians(25.0))
    cam = splat.Camera(w2c.astype(np.float32), f, f, width / 2, height / 2, width, height)
    return g, cam


def variants(backend: str):
    if backend == "cpu":
        return [("cpu", {})]
    out = []
    for reduce, rng, sparse, atomic in itertools.product(("simd", "tg", "original"),
                                                         ("last_contributor", "full_range"),
                                                         ("warp_any", "off"), ("lane_zero", "spread_lanes")):
        if reduce == "original" and atomic == "spread_lanes":
            continue  # per-pixel atomics: no lane choice
        out.append((f"{reduce}/{rng}/{sparse}/{atomic}",
                    dict(raster_backward=reduce, raster_backward_range=rng, raster_backward_sparse=sparse,
                         raster_backward_atomic=atomic)))
    for rng in ("last_contributor", "full_range"):
        out.append((f"deterministic/{rng}", dict(deterministic=True, raster_backward_range=rng)))
    return out


def bench_one(backend, fields, g, cam, degree, d_image, warmup, iters):
    timing = {} if backend == "cpu" else {"timing": "per_kernel"}
    r = splat.Rasterizer(splat.BackendConfig(backend=backend, **timing, **fields))
    bg = np.ones(3, np.float32)
    for _ in range(warmup):
        r.forward(g, cam, degree, bg)
        r.backward(d_image)
    _core.gpu_timings(reset=True)
    fwd, bwd = [], []
    for _ in range(iters):
        t0 = time.perf_counter()
        out = r.forward(g, cam, degree, bg)
        t1 = time.perf_counter()
        r.backward(d_image)
        t2 = time.perf_counter()
        fwd.append(1e3 * (t1 - t0))
        bwd.append(1e3 * (t2 - t1))
    ts = _core.gpu_timings(reset=True)
    ts_ms = {k: (v[0] / v[2] if v[2] else float("nan")) for k, v in ts.items()}
    return statistics.median(fwd), statistics.median(bwd), ts_ms, int(np.count_nonzero(out.radii)), r


def main(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--backend", default="cuda", choices=("cuda", "metal", "cpu", "auto"))
    p.add_argument("--n", type=int, default=300_000)
    p.add_argument("--width", type=int, default=800)
    p.add_argument("--height", type=int, default=800)
    p.add_argument("--sh-degree", type=int, default=3)
    p.add_argument("--warmup", type=int, default=3)
    p.add_argument("--iters", type=int, default=20)
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--only", default="", help="run only variants whose name contains this")
    args = p.parse_args(argv)

    ok, why = splat.backend_available(args.backend)
    if not ok:
        sys.exit(f"backend {args.backend!r} is not available: {why}")
    backend = splat.resolve_backend(args.backend)
    g, cam = scene(args.n, args.width, args.height, args.sh_degree, args.seed)
    d_image = np.random.default_rng(args.seed + 1).normal(size=(args.height, args.width, 3)).astype(np.float32)

    rows = []
    desc = None
    for name, fields in variants(backend):
        if args.only and args.only not in name:
            continue
        fwd, bwd, ts, visible, r = bench_one(backend, fields, g, cam, args.sh_degree, d_image, args.warmup,
                                             args.iters)
        desc = desc or r._native.description
        rows.append((name, fwd, bwd, ts))
        print(f"  {name}: forward {fwd:.3f} ms, backward {bwd:.3f} ms", file=sys.stderr, flush=True)

    if not rows:
        sys.exit(f"no variant matches --only {args.only!r}")
    print(f"# {desc}")
    print(f"# {args.n} Gaussians ({visible} visible), {args.width}x{args.height}, SH degree {args.sh_degree}, "
          f"median of {args.iters} calls after {args.warmup} warm-up")
    head = ["variant", "fwd_ms", "bwd_ms"] + list(TS)
    name_width = max(len(name) for name, *_ in rows)
    widths = [max(len(h), name_width if i == 0 else 8) for i, h in enumerate(head)]
    print("  ".join(h.ljust(w) if i == 0 else h.rjust(w) for i, (h, w) in enumerate(zip(head, widths))))
    for name, fwd, bwd, ts in rows:
        cells = [name, f"{fwd:.3f}", f"{bwd:.3f}"] + [f"{ts[k]:.3f}" if k in ts else "-" for k in TS]
        print("  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(cells, widths))))


if __name__ == "__main__":
    main()
